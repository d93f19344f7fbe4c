"""bench_scale --typed-ahead: every other measured turn has its question embedded before it
starts (as the composer's typing frame does), printed on a line of its own beside the others;
without the flag the turn line counts every turn, as before."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command

from memory.embedders import get_embedder
from tests.chat.test_typing import ModelCalls


@pytest.fixture
def model_calls(monkeypatch) -> list[str]:
    """The texts the embedding model is asked for (the process's cache emptied first: an earlier
    test's bench turns asked the same questions)."""
    get_embedder()._cache.clear()
    return ModelCalls(monkeypatch).texts


def _questions(asked: list[str]) -> list[str]:
    """The measured turns' questions the model was asked for as queries (not the messages'
    passages; the warm-up turn's is turn 0)."""
    tag = getattr(get_embedder(), "QUERY_TAG", "")
    return [t for t in asked if t.startswith(tag) and re.search(r"\(turn [1-9]\d* at ", t)]


@pytest.mark.django_db(transaction=True)
def test_typed_ahead_turns_are_printed_apart_and_embed_their_question_once(capsys, model_calls):
    call_command("bench_scale", sizes="120", database="", turns=4, user="bench_typed", typed_ahead=True)
    out = capsys.readouterr().out
    turn_line = next(x for x in out.splitlines() if "     120 msgs  fill" in x)
    ahead = next(x for x in out.splitlines() if "typed ahead (" in x)
    assert "typed ahead (2 turns alternated with the 2 above" in ahead
    p50, p95 = (float(v) for v in re.search(r"turn p50 ([\d.]+) ms, p95 ([\d.]+) ms", ahead).groups())
    assert 0 < p50 <= p95
    assert "until the model's request p50" in ahead and "turn p50" in turn_line
    # Each question embedded once, typed ahead or not: the turn found the typed one cached.
    questions = _questions(model_calls)
    assert len(questions) == 4 and len(set(questions)) == 4


@pytest.mark.django_db(transaction=True)
def test_without_the_flag_every_turn_counts_on_the_turn_line(capsys):
    call_command("bench_scale", sizes="120", database="", turns=2, user="bench_untyped")
    out = capsys.readouterr().out
    assert "     120 msgs  fill" in out and "typed ahead" not in out
