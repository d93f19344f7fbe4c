"""The memory explorer: htmx pages over one user's memory, a module per page.

Every query goes through an owner-scoped QuerySet method; objects that are not the signed-in
user's are 404s, exactly like ids that do not exist (each module's `_get_*_for_user` helpers).
Every list is paginated, so no page reads an unbounded number of rows however large the memory
grows. The views hold no SQL: what needs more than the ORM's QuerySets is asked of memory.
"""
