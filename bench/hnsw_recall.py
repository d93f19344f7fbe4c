"""What a smaller HNSW walk costs in hits, on real vectors (issue 37, ninth pass).

Copies every kept eval history's rows (LoCoMo's and LongMemEval's imports, their real vectors)
into ONE scratch owner of a scratch database, so the owner holds more vectors than
EXACT_SEARCH_MAX and search walks the HNSW graph, as at a large memory; then asks every eval
question with the exact scan and with the graph walk at several ef_search, and prints, against
the exact scan: the share of questions whose fused top-10 (and top-25) is the same, the mean
overlap of the fused top-10 / top-25, the dense list's overlap, and turn recall@10 per dataset.

  RECOLLECT_PG_DIR=/work/main/.data/pg python -m bench.hnsw_recall \
      --source-pg /work/wt-n33/.data/pg \
      --source recollect_eval_loco_int8-v4=../shared/eval/long-conversations \
      --source recollect_eval_lme_v4=../shared/eval/longmemeval

The sources are only read. The scratch database (recollect_bench_hnsw_recall) is filled once
and reused.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source-pg", required=True, help="the socket directory of the sources' Postgres")
    parser.add_argument("--source", action="append", required=True,
                        help="DB=FOLDER of an eval's kept imports")
    parser.add_argument("--database", default="recollect_bench_hnsw_recall")
    parser.add_argument(
        "--walks", default="101:202,101:150,101:120,101:101",
        help="graph walks to compare, each K:EF (the vector list's length and hnsw.ef_search); the "
        "first is the reference (a turn's: k = 101, ef = 2k), and the exact scan reads its K",
    )
    parser.add_argument("--limit", type=int, default=0, help="at most this many questions a history")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from bench.management.commands.eval_recall import load_datasets
    from bench.scratch import use_database

    use_database(args.database)
    print(f"scratch database: {args.database}", flush=True)
    user, _ = get_user_model().objects.get_or_create(username="hnsw-recall")
    sources = [s.split("=", 1) for s in args.source]
    turn_of = _filled(user, args.source_pg, [db for db, _ in sources])
    datasets = [(folder, d) for _, folder in sources for d in load_datasets([folder])]
    if args.limit:
        for _, d in datasets:
            d.queries = d.queries[: args.limit]
    walks = [tuple(int(x) for x in w.split(":")) for w in args.walks.split(",")]
    _measure(user, datasets, turn_of, walks)


def _filled(user, source_pg: str, dbs: list[str]) -> dict[str, tuple[str, str]]:
    """Copy the sources' eval owners' conversations, messages and passages to `user` (once);
    return message id -> (history id, external id)."""
    import psycopg
    from django.db import connection, transaction

    from memory.models import Passage

    conversation_cols = _columns("memory_conversation")
    message_cols = _columns("memory_message")
    passage_cols = [c for c in _columns("memory_passage") if c not in ("id", "search_vector")]
    turn_of: dict[str, tuple[str, str]] = {}
    have = Passage.objects.filter(owner=user).exists()
    for db in dbs:
        with psycopg.connect(host=source_pg, dbname=db, user="postgres") as src:
            owners = src.execute(
                "SELECT id, username FROM auth_user WHERE username LIKE 'eval-%%'"
            ).fetchall()
            for owner_id, username in owners:
                history = username.removeprefix("eval-")
                for mid, ext in src.execute(
                    "SELECT id, external_id FROM memory_message WHERE owner_id = %s AND NOT is_chunk",
                    [owner_id],
                ):
                    turn_of[mid] = (history, ext)
                if have:
                    continue
                started = time.perf_counter()
                with transaction.atomic(), connection.cursor() as cursor:
                    for table, cols in (
                        ("memory_conversation", conversation_cols),
                        ("memory_message", message_cols),
                        ("memory_passage", passage_cols),
                    ):
                        # external ids are unique per owner: LongMemEval's histories share sessions
                        select = ", ".join(
                            str(user.pk) if c == "owner_id"
                            else f"'{history}/' || external_id" if c == "external_id"
                            else f'"{c}"'
                            for c in cols
                        )
                        names = ", ".join(f'"{c}"' for c in cols)
                        with src.cursor().copy(
                            f"COPY (SELECT {select} FROM {table} WHERE owner_id = {int(owner_id)}) TO STDOUT"
                        ) as out, cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as into:
                            for block in out:
                                into.write(block)
                print(f"copied {username} from {db} in {time.perf_counter() - started:.1f}s", flush=True)
    n = Passage.objects.filter(owner=user, embedding__isnull=False).count()
    print(f"the scratch owner holds {n:,} vectors", flush=True)
    return turn_of


def _columns(table: str) -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
            "AND NOT attisdropped ORDER BY attnum",
            [table],
        )
        return [r[0] for r in cursor.fetchall()]


def _measure(user, datasets, turn_of, walks: list[tuple[int, int]]) -> None:
    from bench.management.commands.eval_recall import distinct, recall_at
    from memory.finding import candidates
    from memory.finding.search import SearchFilters, search

    candidates.PARALLEL_SEARCH = False
    original = candidates.with_local_settings
    ef_now: dict[str, int | None] = {"ef": None}

    def with_ef(values, sql, params):
        if ef_now["ef"] and "hnsw.ef_search" in values:
            values = {**values, "hnsw.ef_search": str(ef_now["ef"])}
        return original(values, sql, params)

    candidates.with_local_settings = with_ef
    dense_k: dict[str, list] = {}

    def run(variant: str, query: dict) -> tuple[list[str], list[str]]:
        candidates._LARGE_MEMORIES.clear()
        candidates.EXACT_SEARCH_MAX = 10**9 if variant == "exact" else 4000
        k, ef = walks[0] if variant == "exact" else map(int, variant.split(":"))
        ef_now["ef"] = None if variant == "exact" else ef
        results = search(user, query["query"], limit=25, candidates=k, as_of=query["as_of"])
        hits = [f"{h.type}:{h.id}" for h in results.hits]
        turns = distinct(
            "/".join(turn_of.get(h.message_id, ("?", h.message_id))) for h in results.hits
        )
        rows = candidates._vector_candidates(user, query["query"], SearchFilters(), k, results)
        dense_k[variant] = [r[0] or r[1] for r in rows]
        return hits, turns

    variants = ["exact", *(f"{k}:{ef}" for k, ef in walks)]
    reference = variants[1]
    stats = {v: {"same10": 0, "same25": 0, "ov10": [], "ov25": [], "dense": [], "ms": [], "now10": 0}
             for v in variants}
    recall: dict[tuple[str, str], list[float]] = {}
    n = 0
    for folder, dataset in datasets:
        name = os.path.basename(os.path.normpath(folder))
        for query in dataset.queries:
            n += 1
            expected = [f"{dataset.id}/{e}" for e in query["expected"]]
            base = now = None
            last: dict[str, list[str]] = {}
            for variant in variants:
                started = time.perf_counter()
                hits, turns = run(variant, query)
                stats[variant]["ms"].append((time.perf_counter() - started) * 1000)
                recall.setdefault((variant, name), []).append(recall_at(turns, expected)[2])
                if base is None:
                    base, base_dense = hits, dense_k["exact"]
                last[variant] = hits
                if variant == reference:
                    now = hits
                s = stats[variant]
                s["same10"] += hits[:10] == base[:10]
                s["same25"] += hits[:25] == base[:25]
                s["ov10"].append(len(set(hits[:10]) & set(base[:10])) / max(1, len(base[:10])))
                s["ov25"].append(len(set(hits[:25]) & set(base[:25])) / max(1, len(base[:25])))
                # The vector list against the exact scan's as long (a smaller k reads fewer).
                mine = distinct(dense_k[variant])
                s["dense"].append(len(set(mine) & set(distinct(base_dense)[: len(mine)])) / max(1, len(mine)))
            for variant in variants:
                stats[variant]["now10"] += last[variant][:10] == now[:10]
        print(f"{name}/{dataset.id}: {len(dataset.queries)} questions", flush=True)
    names = sorted({name for _, name in recall})
    print(f"\n{n} questions; against the exact scan (of k = {walks[0][0]}):")
    header = (
        "| variant | fused top-10 same | top-25 same | top-10 overlap | top-25 overlap | dense @k overlap | "
        + " | ".join(f"recall@10 {x}" for x in names)
        + f" | top-10 same as {reference}'s | search ms (median) |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for v in variants:
        s = stats[v]
        label = "exact scan" if v == "exact" else "HNSW k {} ef_search {}".format(*v.split(":"))
        print(
            f"| {label} | {s['same10'] / n:.1%} | {s['same25'] / n:.1%} | {statistics.mean(s['ov10']):.4f} | "
            f"{statistics.mean(s['ov25']):.4f} | {statistics.mean(s['dense']):.4f} | "
            + " | ".join(f"{statistics.mean(recall[(v, x)]):.1%}" for x in names)
            + f" | {s['now10'] / n:.1%} | {statistics.median(s['ms']):.1f} |"
        )


if __name__ == "__main__":
    main()
