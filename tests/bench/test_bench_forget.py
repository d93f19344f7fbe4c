"""manage.py bench_forget on a tiny history written here: the forget dialog offers the reply that
repeats a made-up word, never the message that shares only "Can you help me make a"; the old rule
(any shared run of 5 words) offered that one."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db

TURNS = [
    ("user", "My bank's memorable word is quorbelline. Can you help me make a note of it?"),
    ("assistant", "Noted: quorbelline stays in your password manager."),
    ("user", "We're moving from Leeds. Can you help me make a packing list?"),
    ("assistant", "Sure: plates, pans and the kettle."),
]


def test_it_counts_what_each_rule_offers_and_shows_why(tmp_path):
    folder = tmp_path / "histories"
    folder.mkdir()
    lines = [
        json.dumps({"conversation": "bank", "role": role, "speaker": role, "content": text,
                    "timestamp": f"2025-03-01T10:0{n}:00Z", "external_id": f"t{n}"})
        for n, (role, text) in enumerate(TURNS)
    ]
    (folder / "mini.history.jsonl").write_text("\n".join(lines) + "\n")
    out = io.StringIO()
    call_command("bench_forget", str(folder), "--every", "1", "--show", "5", "--database", "",
                 stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    assert "dialogs opened: 4" in text
    old = re.search(r"old: any shared 5-word run\s+(\d+)", text)
    new = re.search(r"new: rare words and rare runs\s+(\d+)", text)
    assert (int(old.group(1)), int(new.group(1))) == (2, 2)
    shown_new = text.split("new rule,")[1].split("old rule,")[0]
    assert "quorbelline" in shown_new and "Leeds" not in shown_new
    assert "shares 'can you help me make'" in text.split("old rule,")[1]
    assert re.search(r"dialog time: p50 \d+ ms, p95 \d+ ms", text)
