"""manage.py bench_semantic_cache: does the semantic cache take a different question for the
same one? On labelled query pairs (default bench/data/semantic_cache_pairs.jsonl: paraphrases,
and near-misses with a name, number, date, weekday, negation, one content word, a pronoun, a
possessive, a direction, the tense or the modal verb changed), for each embedder: the
paraphrases the cache would answer from an earlier query (hits) and the near-misses it would
wrongly answer (false hits), by the old rule (cosine >= 0.95 alone) and by the cache's rules
(the embedder's threshold, the same words, and the same people, direction, tense and modal:
memory.finding.semantic_cache.same_search and same_question)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from memory.embedders import Embedder, query_text
from memory.embedders.e5 import E5Embedder
from memory.embedders.minilm import LocalEmbedder
from memory.finding.semantic_cache import same_question, same_search

PAIRS = Path(__file__).resolve().parents[2] / "data" / "semantic_cache_pairs.jsonl"
OLD_THRESHOLD = 0.95  # the cache's rule before: one cosine for every embedder, nothing else


def read_pairs(path: Path) -> list[dict]:
    pairs = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            pair = json.loads(line)
            if pair.get("kind") not in {"paraphrase", "near_miss"} or not pair.get("a") or not pair.get("b"):
                raise CommandError(f"{path}:{lineno}: needs a, b and kind (paraphrase or near_miss)")
            pairs.append(pair)
    return pairs


def build_embedder(name: str) -> Embedder:
    """The on-device embedders, as get_embedder builds them (no in-process cache)."""
    common = (384, settings.BATCH_EMBEDDING_SIZE, 0)
    if name == "e5":
        return E5Embedder("multilingual-e5-small-q4", *common, 320, 32, settings.EMBEDDING_THREADS)
    if name == "local":
        return LocalEmbedder(
            "all-MiniLM-L6-v2", *common, 240, 32, settings.EMBEDDING_THREADS,
            settings.EMBEDDING_ONNX_FILE or None,
        )
    raise CommandError(f"unknown embedder {name!r}: e5 or local")


def cosines(embedder: Embedder, pairs: list[dict]) -> list[float]:
    """Cosine of each pair's query vectors (unit length), embedded as the cache embeds a query."""
    texts = sorted({query_text(p[k]) for p in pairs for k in ("a", "b")})
    vectors = {t: np.asarray(embedder.embed_query(t), dtype=np.float64) for t in texts}
    return [float(vectors[query_text(p["a"])] @ vectors[query_text(p["b"])]) for p in pairs]


def measure(pairs: list[dict], sims: list[float], threshold: float) -> dict:
    """Hits on paraphrases and false hits on near-misses, by each rule."""
    rules = {
        f"cosine >= {OLD_THRESHOLD} alone (before)": lambda p, s: s >= OLD_THRESHOLD,
        f"search: cosine >= {threshold} + same words": lambda p, s: (
            s >= threshold and same_search(p["a"], p["b"])
        ),
        f"reply: cosine >= {threshold} + same words in order": lambda p, s: (
            s >= threshold and same_question(p["a"], p["b"])
        ),
    }
    out = {}
    for rule, hit in rules.items():
        hits = [hit(p, s) for p, s in zip(pairs, sims, strict=True)]
        para = [h for p, h in zip(pairs, hits, strict=True) if p["kind"] == "paraphrase"]
        false = Counter(
            p.get("changed", "?") for p, h in zip(pairs, hits, strict=True) if p["kind"] == "near_miss" and h
        )
        out[rule] = {"paraphrase_hits": sum(para), "paraphrases": len(para), "false_hits": false}
    return out


class Command(BaseCommand):
    help = "Paraphrase hit rate and near-miss false hits of the semantic cache, per embedder."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--pairs", default=str(PAIRS), help="JSON Lines of {a, b, kind[, changed]}")
        parser.add_argument("--embedders", default="e5,local", help="comma-separated: e5, local (MiniLM)")
        parser.add_argument("--show-misses", action="store_true", help="print every wrong answer")

    def handle(self, *args, **opts) -> None:
        pairs = read_pairs(Path(opts["pairs"]))
        near = [p for p in pairs if p["kind"] == "near_miss"]
        kinds = Counter(p.get("changed", "?") for p in near)
        self.stdout.write(
            f"{len(pairs)} pairs from {opts['pairs']}: {len(pairs) - len(near)} paraphrases, "
            f"{len(near)} near-misses ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))})"
        )
        header = f"{'embedder':<8} {'rule':<48} {'paraphrase hits':>17} {'false hits':>11}  by change"
        self.stdout.write(header)
        for name in [n.strip() for n in opts["embedders"].split(",") if n.strip()]:
            try:
                embedder = build_embedder(name)
                sims = cosines(embedder, pairs)
            except CommandError:
                raise
            except Exception as exc:  # noqa: BLE001 - a missing runtime skips that embedder, said so
                self.stdout.write(f"{name:<8} not measured: {type(exc).__name__}: {str(exc)[:160]}")
                continue
            threshold = embedder.cache_similarity
            for rule, r in measure(pairs, sims, threshold).items():
                rate = r["paraphrase_hits"] / r["paraphrases"] if r["paraphrases"] else 0.0
                by = ", ".join(f"{k} {n}" for k, n in sorted(r["false_hits"].items())) or "-"
                self.stdout.write(
                    f"{name:<8} {rule:<48} {r['paraphrase_hits']:>4}/{r['paraphrases']:<4} {rate:>6.1%} "
                    f"{sum(r['false_hits'].values()):>11}  {by}"
                )
            near_sims = [s for p, s in zip(pairs, sims, strict=True) if p["kind"] == "near_miss"]
            para_sims = [s for p, s in zip(pairs, sims, strict=True) if p["kind"] == "paraphrase"]
            self.stdout.write(
                f"{name:<8} cosines: paraphrases median {np.median(para_sims):.3f} "
                f"(min {min(para_sims):.3f}), near-misses median {np.median(near_sims):.3f} "
                f"(max {max(near_sims):.3f})"
            )
            if opts["show_misses"]:
                for p, s in zip(pairs, sims, strict=True):
                    same = same_search(p["a"], p["b"])
                    hit = s >= threshold and same
                    if hit != (p["kind"] == "paraphrase"):
                        words = "same" if same else "differ"
                        pair = f"{p['a']!r} / {p['b']!r}"
                        self.stdout.write(f"  {p['kind']:<10} cos {s:.3f} words {words}: {pair}")
