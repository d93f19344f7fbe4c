"""Storage: messages, their chunks and passages, and tool calls written and read (store), the
memory version that caches key on (versions) and sessions by idle time (sessions). Below
everything else of the engine but the models and helpers: it calls nothing above it, it
announces changes (memory.signals) for those above to follow.
"""
