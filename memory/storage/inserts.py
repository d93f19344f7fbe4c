"""New rows written in the same round trip as other statements.

`insert_statement(objs)` is the INSERT that `bulk_create(objs)` (or, for one row, `save()`)
would send, without reading anything back: Django's own compiler builds it, so defaults,
`auto_now_add`, generated columns and JSON adaptation are the ORM's. A caller sends it with
other statements in one message (one round trip where the ORM takes one each) and then calls
`inserted(objs)`, as the ORM would mark them. A row whose key the database makes (a serial id)
keeps `pk` None: nothing of the turn reads it back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import models, router
from django.db.models.sql import InsertQuery


def insert_statement(objs: models.Model | Sequence[models.Model]) -> tuple[str, list[Any]]:
    rows = [objs] if isinstance(objs, models.Model) else list(objs)
    model = type(rows[0])
    meta = model._meta
    fields = [f for f in meta.local_concrete_fields if not f.generated]
    if meta.auto_field is not None and any(o.pk is None for o in rows):
        if any(o.pk is not None for o in rows):
            raise ValueError(f"{model.__name__}: rows with and without a primary key in one insert")
        fields.remove(meta.auto_field)
    elif any(o.pk is None for o in rows):
        raise ValueError(f"{model.__name__}: insert_statement needs a primary key set in Python")
    query = InsertQuery(model)
    query.insert_values(fields, rows)
    [(sql, params)] = query.get_compiler(using=router.db_for_write(model)).as_sql()
    return sql, list(params)


def inserted(objs: models.Model | Sequence[models.Model]) -> None:
    """Mark the rows as saved, once their insert_statement has run."""
    for obj in [objs] if isinstance(objs, models.Model) else objs:
        obj._state.adding = False
        obj._state.db = router.db_for_write(type(obj))


def joined(statements: Sequence[tuple[str, Sequence[Any]]]) -> tuple[str, list[Any]]:
    """Statements (sql, params) as one message for `cursor.execute(*joined(...))`: Postgres runs
    them in order (outside a transaction, as one transaction of their own); the cursor is on the
    first statement's rows, `nextset()` moves to the next's."""
    return "; ".join(sql for sql, _ in statements), [v for _, params in statements for v in params]
