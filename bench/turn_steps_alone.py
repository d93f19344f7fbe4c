"""Steps of the turn measured alone on a kept bench_scale history (issue 37, eleventh pass).

snapshot: the snapshot step as bench_scale runs it (the plan's JSON round trip, then one
message with the forgetting check and the INSERT, autocommit), four ways alternated row by row,
from the newest bench snapshots (their whole plans) and the message ids each showed: main
73153bb's check (the ~75 read rows locked FOR KEY SHARE, the whole plan stored), this branch's
(the person's turn lock and a plain check, forgetting.written_if_none_gone; the plan stored
once), and no check with either plan (6c3f2cf's protocol, today's rows). Then the insert into
scratch tables shaped like memory_contextsnapshot (its TOAST compressed, pglz, as now; EXTERNAL
storage on the big columns, uncompressed) with the bytes a row takes on disk. The rows inserted
are deleted and the scratch tables dropped at the end.

vector: the turn's vector query (k = 101, the graph walk with ef_search 202) alone, by EXPLAIN
(ANALYZE, BUFFERS), for the probe questions' own vectors (the live conversation's user
passages, embedded by the model of the commit that ran the bench), with the columns a row has
had since 6c3f2cf (role, conversation, periods, speaker) and without them. Only reads: it runs
on another commit's kept history too (no migration).

neighbours: the best hits' session neighbours read as a turn's index reads them (the columns an
index line needs) and with every column, alternated call by call, the same neighbours checked.

read_ahead: what a turn reads beside its search (index_builder._read_ahead), piece by piece:
wall time, the thread's CPU and the Postgres backend's CPU; with kept_reads, the generations'
read and the kept pieces too (fourteenth pass).

  RECOLLECT_PG_DIR=/work/main/.data/pg python -m bench.turn_steps_alone snapshot \
      --database recollect_bench_scale_v4
  RECOLLECT_PG_DIR=/work/o37/.data/pg python -m bench.turn_steps_alone vector \
      --database recollect_bench_scale
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import statistics
import time
from collections.abc import Callable

ULID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")
ROW_LOCKS = (
    "SELECT 1 / (count(*) = %s)::int FROM (SELECT id FROM memory_message WHERE owner_id = %s "
    "AND id = ANY(%s) ORDER BY id FOR KEY SHARE) live"
)


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def _median_row(label: str, times: list[float], base: float | None = None) -> str:
    ordered = sorted(times)
    median = statistics.median(ordered)
    ratio = f"{median / base:.2f}" if base else "1.00"
    return (f"| {label} | {median:.3f} | {ordered[len(ordered) // 4]:.3f} | "
            f"{ordered[3 * len(ordered) // 4]:.3f} | {ratio} | {len(ordered)} |")


def snapshot(rounds: int) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from memory.lifecycle.forgetting import written_if_none_gone
    from memory.models import ContextSnapshot, Message
    from memory.models.conversations import new_ulid
    from memory.storage.inserts import insert_statement, joined

    snaps = list(ContextSnapshot.objects.order_by("-created_at")[:40])
    owner = get_user_model().objects.get(pk=snaps[0].owner_id)
    cases = []
    for snap in snaps:
        named = list(dict.fromkeys(ULID.findall(json.dumps([snap.included_ids, snap.hits]))))
        live = Message.objects.filter(owner_id=owner.pk, pk__in=named).values_list("pk", flat=True)
        cases.append((snap, snap.whole_plan(), {pk: ["-"] for pk in sorted(live)}))
    print(f"{len(cases)} snapshots, ids read a turn: median {statistics.median(len(c[2]) for c in cases)}")

    def row(snap, whole, once: bool, table: str = ""):
        new = copy.copy(snap)
        new.pk, new.message_id = new_ulid(), None
        data = json.loads(json.dumps(whole, default=str))  # as index_builder.snapshot_row does
        new.plan = ContextSnapshot.plan_to_store(data) if once else data
        sql, params = insert_statement(new)
        if table:
            sql = sql.replace('"memory_contextsnapshot"', table, 1)
        return new.pk, (sql, params)

    def row_locks(snap, whole, seen):
        pk, insert = row(snap, whole, False)
        with connection.cursor() as cursor:
            cursor.execute(*joined([(ROW_LOCKS, [len(seen), owner.pk, sorted(seen)]), insert]))
        return pk

    def turn_lock(snap, whole, seen):
        pk, insert = row(snap, whole, True)
        assert written_if_none_gone(owner, seen, [insert])
        return pk

    def unchecked(once: bool, table: str = "") -> Callable:
        def step(snap, whole, seen):
            pk, insert = row(snap, whole, once, table)
            with connection.cursor() as cursor:
                cursor.execute(*insert)
            return pk
        return step

    ways = {
        "row locks (73153bb), whole plan": row_locks,
        "turn lock (eleventh pass), plan stored once": turn_lock,
        "no check, whole plan": unchecked(False),
        "no check, plan stored once": unchecked(True),
    }
    # Scratch tables shaped like the snapshots' (their indexes, no foreign keys).
    tables = {
        "bench_snapshot_pglz": "pglz (now), whole plan",
        "bench_snapshot_external": "EXTERNAL, whole plan",
        "bench_snapshot_pglz_once": "pglz (now), plan stored once",
    }
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"DROP TABLE IF EXISTS {table}; "
                           f"CREATE TABLE {table} (LIKE memory_contextsnapshot INCLUDING ALL)")
        for column in ("text", "plan", "hits", "included_ids"):
            cursor.execute(f"ALTER TABLE bench_snapshot_external ALTER COLUMN {column} SET STORAGE EXTERNAL")
    ways.update({f"scratch table, {label}": unchecked(table.endswith("_once"), table)
                 for table, label in tables.items()})
    times: dict[str, list[float]] = {label: [] for label in ways}
    made: list[str] = []
    print(f"load before: {_load()}")
    try:
        for _ in range(rounds):
            for snap, whole, seen in cases:
                for label, way in ways.items():
                    started = time.perf_counter()
                    made.append(way(snap, whole, seen))
                    times[label].append((time.perf_counter() - started) * 1000)
        print(f"load after: {_load()}")
        print("| the step (JSON round trip, one message, commit) | median ms | p25 | p75 | ratio | n |")
        print("|---|---|---|---|---|---|")
        base = statistics.median(times["row locks (73153bb), whole plan"])
        for label, measured in times.items():
            print(_median_row(label, measured, base))
        with connection.cursor() as cursor:
            for table, label in tables.items():
                cursor.execute(f"SELECT pg_total_relation_size('{table}') / count(*) FROM {table}")
                print(f"bytes a row on disk (row, TOAST, indexes), {label}: {cursor.fetchone()[0]:,}")
    finally:
        ContextSnapshot.objects.filter(pk__in=made).delete()
        with connection.cursor() as cursor:
            for table in tables:
                cursor.execute(f"DROP TABLE IF EXISTS {table}")
    _checks_alone(owner, cases)


def _checks_alone(owner, cases) -> None:
    """Each check alone, EXPLAIN (ANALYZE, WAL, BUFFERS), rolled back: what a row lock writes."""
    from django.db import connection, transaction

    from memory.lifecycle import turn_lock
    from memory.lifecycle.forgetting import text_array

    plain = "SELECT 1 / (count(*) = %s)::int FROM memory_message WHERE owner_id = %s AND id = ANY(%s::text[])"
    for label, sql, shared in (("row locks (73153bb)", ROW_LOCKS, False), ("turn lock", plain, True)):
        found = []
        for _snap, _whole, seen in cases:
            ids = sorted(seen)
            with transaction.atomic(), connection.cursor() as cursor:
                if shared:
                    cursor.execute(*turn_lock.shared_statement(owner))
                cursor.execute("EXPLAIN (ANALYZE, WAL, BUFFERS, FORMAT JSON) " + sql,
                               [len(ids), owner.pk, text_array(ids) if shared else ids])
                plan = cursor.fetchone()[0]
                plan = (json.loads(plan) if isinstance(plan, str) else plan)[0]
                found.append((plan["Execution Time"], plan["Plan"].get("WAL Records", 0),
                               plan["Plan"].get("WAL Bytes", 0)))
                transaction.set_rollback(True)
        print(f"the check alone, {label}: execution median {statistics.median(f[0] for f in found):.3f} ms, "
              f"WAL records {statistics.median(f[1] for f in found):.0f}, "
              f"WAL bytes {statistics.median(f[2] for f in found):.0f}")


def vector(rounds: int) -> None:
    from django.conf import settings
    from django.db import connection

    dims = settings.EMBEDDING_DIMENSIONS
    tail = ("p.role, p.conversation_id, p.periods, CASE WHEN right(p.context, 1) = ':' THEN "
            "substring(right(p.context, 62) from '(?:^|\n)([^\n:]{1,60}):$') END")

    def query(with_tail: bool) -> str:
        return ("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT p.message_id, p.tool_call_id, "
                "p.logical_message_id, p.text, 1 - (p.embedding <=> %s::vector) AS similarity, p.timestamp"
                + (", " + tail if with_tail else "")
                + " FROM memory_passage p WHERE p.owner_id = %s AND NOT p.deleted AND p.embedding_model = %s"
                f" AND p.embedding IS NOT NULL ORDER BY p.embedding::halfvec({dims}) <=> "
                f"%s::vector::halfvec({dims}) LIMIT 101")

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.owner_id, p.embedding::text, p.embedding_model FROM memory_passage p "
            "JOIN memory_conversation c ON c.id = p.conversation_id WHERE c.title LIKE 'live at%%' "
            "AND p.role = 'user' AND p.embedding IS NOT NULL ORDER BY p.timestamp DESC LIMIT 10"
        )
        probes = cursor.fetchall()
        cursor.execute("SELECT count(*) FROM information_schema.columns "
                       "WHERE table_name = 'memory_passage' AND column_name = 'periods'")
        has_tail = bool(cursor.fetchone()[0])
    print(f"{len(probes)} probe vectors ({probes[0][2]}); load before: {_load()}")
    ways = [False, True] if has_tail else [False]
    found: dict[bool, list[tuple]] = {way: [] for way in ways}
    for _ in range(rounds):
        for owner_id, vec, model in probes:
            for way in ways:
                with connection.cursor() as cursor:
                    cursor.execute("BEGIN; SET LOCAL hnsw.iterative_scan = 'relaxed_order'; "
                                   "SET LOCAL hnsw.ef_search = 202; SET LOCAL enable_sort = off")
                    cursor.execute(query(way), [vec, owner_id, model, vec])
                    plan = cursor.fetchone()[0]
                    cursor.execute("COMMIT")
                plan = (json.loads(plan) if isinstance(plan, str) else plan)[0]
                found[way].append((plan["Execution Time"], plan["Plan"]["Shared Hit Blocks"]
                                   + plan["Plan"]["Shared Read Blocks"]))
    print(f"load after: {_load()}")
    for way, runs in found.items():
        label = "with the columns added since 6c3f2cf" if way else "the columns of 6c3f2cf"
        print(f"{label}: execution median {statistics.median(r[0] for r in runs):.2f} ms, "
              f"buffers {statistics.median(r[1] for r in runs):.0f}, n={len(runs)}")


def neighbours(rounds: int) -> None:
    """The best hits' session neighbours as a turn's index reads them (sessions.neighbours_many:
    the columns an index line needs) against every column (the query before), alternated call by
    call over groups of three messages spread through the history; their ids, roles and texts
    must be the same."""
    from django.contrib.auth import get_user_model

    from memory.models import Message
    from memory.storage import sessions

    owner = get_user_model().objects.get(username="bench_scale")
    ids = list(Message.objects.filter(owner=owner, is_chunk=False, deleted=False)
               .order_by("pk").values_list("pk", flat=True)[:60000])[::200]
    groups = [ids[i:i + 3] for i in range(0, len(ids) - 2, 3)]
    narrow = sessions._NEIGHBOUR_COLUMNS

    def every_column(group):
        sessions._NEIGHBOUR_COLUMNS = "n.*"
        try:
            return sessions.neighbours_many(owner, group)
        finally:
            sessions._NEIGHBOUR_COLUMNS = narrow

    def seen(found) -> list:
        return [(k, [(n.pk, n.role, n.snippet or n.content) for n in v]) for k, v in sorted(found.items())]

    times: dict[str, list[float]] = {"every column": [], "the columns an index line needs": []}
    print(f"{len(groups)} groups of 3 messages, {rounds} rounds; load before: {_load()}")
    for _ in range(rounds):
        for group in groups:
            started = time.perf_counter()
            before = every_column(group)
            times["every column"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            now = sessions.neighbours_many(owner, group)
            times["the columns an index line needs"].append((time.perf_counter() - started) * 1000)
            assert seen(before) == seen(now), group
    print(f"load after: {_load()}; the same neighbours for every group")
    print("| neighbours_many, ms | median | p25 | p75 | ratio | calls |\n|---|---|---|---|---|---|")
    base = statistics.median(times["every column"])
    for label, runs in times.items():
        print(_median_row(label, runs, base))


def read_ahead(rounds: int) -> None:
    """What a turn reads beside its search (index_builder._read_ahead), piece by piece, on this
    thread, for the bench's probe questions in the newest live conversation of a kept history:
    each piece's wall time, this thread's CPU (Python, psycopg's decoding included) and the
    Postgres backend's CPU (its /proc stat, summed over the rounds: ticks of 10 ms, so only the
    average over many calls is meaningful). Only reads."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from bench.management.commands.bench_scale import PROBES
    from memory.context import index_builder as ib
    from memory.context import rolling_summary
    from memory.knowledge import facts
    from memory.models import Conversation
    from memory.organizing import hierarchy

    owner = get_user_model().objects.get(username="bench_scale")
    live = (Conversation.objects.filter(owner=owner, title__startswith="live at")
            .order_by("-created_at").first())
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    tick = os.sysconf("SC_CLK_TCK")

    def backend_cpu() -> float:
        with open(f"/proc/{backend}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1000 / tick  # utime + stime, ms

    window_box: list = []
    pieces: dict[str, Callable] = {
        "tools used lately": lambda q: ib._recent_tool_names(owner, live),
        "recent window": lambda q: window_box.append(ib.recent_messages(
            owner, live, limit=ib.settings.INDEX_RECENT_WINDOW, exclude=set())) or window_box[-1],
        "rolling summary": lambda q: rolling_summary.for_plan(
            owner, live, window_start=window_box[-1][-1].position if window_box[-1] else None,
            active_message_ids=None, allowance=500),
        "pinned": lambda q: hierarchy.pinned_rows(owner),
        "levels' rows": lambda q: hierarchy.level_rows(owner, None),
        "overview (periods, top topics)": lambda q: ib._overview(owner),
        "facts (current_for_index)": lambda q: facts.current_for_index(owner, q),
    }
    try:  # kept between turns (memory.context.kept_reads), where this checkout has it
        from memory.context import kept_reads
    except ImportError:
        kept_reads = None
    if kept_reads is not None:
        box: list = []
        pieces |= {
            "kept: the index generation": lambda q: box.append(kept_reads.for_turn(owner)),
            "kept: pinned": lambda q: box[-1]("pins",
                ("pinned", ib.settings.INDEX_PINNED_MAX), lambda: hierarchy.pinned_rows(owner)),
            "kept: overview": lambda q: box[-1]("overview",
                ("overview", ib.settings.TOPIC_MAX_CHILDREN), lambda: ib._overview(owner)),
            "kept: facts": lambda q: facts.current_for_index(owner, q, kept=box[-1].of("facts")),
        }
    wall: dict[str, list[float]] = {k: [] for k in pieces}
    cpu: dict[str, float] = dict.fromkeys(pieces, 0.0)
    pg: dict[str, float] = dict.fromkeys(pieces, 0.0)
    print(f"{len(PROBES)} probes x {rounds} rounds, conversation {live.pk}; load before: {_load()}")
    for _ in range(rounds):
        for probe in PROBES:
            for name, piece in pieces.items():
                b0, c0, t0 = backend_cpu(), time.thread_time(), time.perf_counter()
                piece(probe)
                wall[name].append((time.perf_counter() - t0) * 1000)
                cpu[name] += (time.thread_time() - c0) * 1000
                pg[name] += backend_cpu() - b0
    n = rounds * len(PROBES)
    print(f"load after: {_load()}")
    print("| piece of read_ahead | wall median ms | this thread's CPU ms (mean) "
          "| Postgres backend CPU ms (mean) |")
    print("|---|---|---|---|")
    for name in pieces:
        print(f"| {name} | {statistics.median(wall[name]):.3f} | {cpu[name] / n:.3f} | {pg[name] / n:.3f} |")
    print(f"| all | {sum(statistics.median(v) for v in wall.values()):.3f} | "
          f"{sum(cpu.values()) / n:.3f} | {sum(pg.values()) / n:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("step", choices=["snapshot", "vector", "neighbours", "read_ahead"])
    parser.add_argument("--database", required=True, help="a kept bench_scale history (not migrated here)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.db import connection

    connection.settings_dict["NAME"] = args.database
    steps = {"snapshot": snapshot, "vector": vector, "neighbours": neighbours, "read_ahead": read_ahead}
    steps[args.step](args.rounds)


if __name__ == "__main__":
    main()
