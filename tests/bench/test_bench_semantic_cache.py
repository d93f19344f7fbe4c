"""bench_semantic_cache: the semantic cache's hits on paraphrases and false hits on near-misses."""

from __future__ import annotations

import io
import re
from collections import Counter

from django.core.management import call_command

from bench.management.commands.bench_semantic_cache import PAIRS, read_pairs


def test_the_pairs_are_at_least_200_half_paraphrases_half_near_misses_of_every_kind():
    pairs = read_pairs(PAIRS)
    kinds = Counter(p["kind"] for p in pairs)
    assert len(pairs) >= 200 and kinds["paraphrase"] == kinds["near_miss"]
    changed = Counter(p["changed"] for p in pairs if p["kind"] == "near_miss")
    assert set(changed) == {"name", "number", "date", "weekday", "negation", "word",
                            "pronoun", "possessive", "direction", "tense", "modal"}


def test_the_cache_takes_no_near_miss_for_the_same_question_with_e5():
    out = io.StringIO()
    call_command("bench_semantic_cache", "--embedders", "e5", stdout=out)
    row = re.compile(r"^e5\s+(?P<rule>.+?)\s+(?P<hits>\d+)/\d+\s+[\d.]+%\s+(?P<false>\d+)", re.M)
    lines = {
        m["rule"].split(":")[0]: (int(m["hits"]), int(m["false"])) for m in row.finditer(out.getvalue())
    }
    assert lines["search"][1] == 0 and lines["reply"][1] == 0
    # The rule before took dozens of near-misses for their question; paraphrases still hit.
    assert lines["cosine >= 0.95 alone (before)"][1] > 10
    assert lines["search"][0] >= 0.8 * len([p for p in read_pairs(PAIRS) if p["kind"] == "paraphrase"])
