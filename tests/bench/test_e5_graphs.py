"""bench.e5_graphs: two built e5 graphs side by side (the question's embedding, passages, and
whether the vectors are the same)."""

import json
import re

from bench import e5_graphs
from memory.embedders import e5_onnx


def test_it_compares_two_graphs_on_real_texts_and_prints_every_figure(tmp_path, capsys):
    folder = tmp_path / "eval"
    folder.mkdir()
    questions = ["What did Caroline paint last summer?", "When is the ferry to the island?",
                 "Which dog breed does Melanie have?"]
    turns = ["I painted the lake at sunrise, the one behind my grandmother's cottage.",
             "The ferry leaves at 7:40 every weekday. " * 80, "We adopted a border collie named Pixel."]
    (folder / "a.queries.jsonl").write_text("".join(json.dumps({"query": q}) + "\n" for q in questions))
    (folder / "a.history.jsonl").write_text("".join(json.dumps({"content": t}) + "\n" for t in turns))
    graph = e5_onnx.model_file(e5_onnx.weights_path("original"), tmp_path / "models", e5_graphs.NAME)
    e5_graphs.main([str(graph), str(graph), "--eval", str(folder), "--timed-passages", "3"])
    out = capsys.readouterr().out
    # The same file twice: the same vectors, bit for bit, and every figure printed.
    lowest = re.search(r"vectors of 6 texts \(3 questions, 3 passages\): cosine of NEW's to OLD's "
                       r"lowest (\S+),", out)
    assert lowest and float(lowest.group(1)) > 0.99999
    assert "bit for bit the same for 6 of 6" in out
    for line in ("round 1", "OLD: a question", "NEW: a question", "NEW / OLD, medians:", "per CPU-second",
                 "nodes written", "as ONNX Runtime runs them", "load average"):
        assert line in out, line


def test_a_long_turn_is_cut_to_a_passages_window(tmp_path):
    model = e5_onnx.load(e5_onnx.weights_path("original"), tmp_path, e5_graphs.NAME, 1)
    text = "The harbour master keeps a log of every boat. " * 200
    cut = e5_graphs.first_passage(model, text)
    assert text.startswith(cut) and model.token_count(cut) <= 320 < model.token_count(text)
