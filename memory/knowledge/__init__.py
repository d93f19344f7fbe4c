"""Knowledge: what memory knows about the person: facts (with supersession), entities and the
entity graph.
"""
