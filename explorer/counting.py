"""Counts that stay cheap however large a memory grows.

An exact COUNT(*) over a 100,000-message memory reads every row (tens to hundreds of ms on a
small machine), on every page load. Here a count is exact up to a cap, read with a LIMIT so
the scan stops there; beyond the cap the number is Postgres' own estimate for the same query
and is shown as "about N". Small memories therefore always see exact numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property

from django.core.paginator import Paginator
from django.db import connection
from django.db.models import QuerySet, Value

COUNT_CAP = 10_000
# Pagination counts stop a little past the page asked for: page numbers stay exact near the
# reader, and the total is "more than N" for a big list.
PAGE_LOOKAHEAD = 40


@dataclass(frozen=True)
class Tally:
    value: int
    exact: bool = True

    def __int__(self) -> int:
        return self.value

    def __bool__(self) -> bool:
        return self.value > 0

    def __str__(self) -> str:
        if self.exact:
            return f"{self.value:,}"
        return f"about {_round(self.value):,}"


def _round(n: int) -> int:
    """Three significant figures: an estimate should not look more precise than it is."""
    digits = len(str(n))
    step = 10 ** max(0, digits - 3)
    return round(n / step) * step


def _row_sql(qs: QuerySet) -> tuple[str, tuple]:
    """The query's rows as `SELECT 1 ...`, so an index can answer it without the heap."""
    if qs.query.distinct:
        return qs.order_by().query.sql_with_params()
    return qs.order_by().annotate(_one=Value(1)).values("_one").query.sql_with_params()


def capped_count(qs: QuerySet, cap: int) -> int:
    """The number of rows, counting no further than `cap` + 1."""
    sql, params = _row_sql(qs)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM ({sql} LIMIT %s) capped", (*params, cap + 1))
        return int(cursor.fetchone()[0])


def estimated_count(qs: QuerySet) -> int:
    """Postgres' planner estimate of the query's rows (no rows are read)."""
    sql, params = _row_sql(qs)
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def bounded_count(qs: QuerySet, cap: int = COUNT_CAP) -> Tally:
    """Exact up to `cap`; beyond it the planner's estimate (never below the cap)."""
    n = capped_count(qs, cap)
    if n <= cap:
        return Tally(n)
    return Tally(max(cap + 1, estimated_count(qs)), exact=False)


class CappedPaginator(Paginator):
    """A Paginator that never counts a whole big list.

    It counts up to `cap` rows (enough for the page asked for plus a look-ahead). When the list
    is longer, `count_exact` is False: `count` and `num_pages` are lower bounds and "last page"
    is not offered; paging on raises the cap with the page number.
    """

    def __init__(self, object_list, per_page: int, *, cap: int) -> None:
        super().__init__(object_list, per_page)
        self.cap = cap

    @cached_property
    def count(self) -> int:
        if hasattr(self.object_list, "capped_count"):
            return min(self.object_list.capped_count(self.cap), self.cap + 1)
        if not isinstance(self.object_list, QuerySet):
            return len(self.object_list)
        return min(capped_count(self.object_list, self.cap), self.cap + 1)

    @property
    def count_exact(self) -> bool:
        return self.count <= self.cap


def capped_page(object_list, number, per_page: int):
    """One page; a missing or malformed number gives page 1, one past the end the last page."""
    try:
        wanted = max(1, int(number))
    except (TypeError, ValueError):
        wanted = 1
    wanted = min(wanted, 10**9)
    cap = max(COUNT_CAP // 10, (wanted + PAGE_LOOKAHEAD) * per_page)
    return CappedPaginator(object_list, per_page, cap=cap).get_page(wanted)
