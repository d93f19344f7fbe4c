"""Lifecycle: what deleting, restoring and forgetting a message do to everything made from it
(topics, entities, facts, summaries, tool results, snapshots, caches, titles), in one direction.
"""
