"""No block of six lines is written twice in the project's own files.

Code written twice drifts apart: a fix lands in one copy and not the other. So the project's own
source (Python, templates, JavaScript and CSS under the apps, bench/, templates/, static/ and
tests/) may not hold the same six lines in two places, in one file or in two. What counts:

- lines are compared with their indentation stripped, and blank lines are skipped, so a block
  moved to another depth, or with a blank line more, is still the same block;
- import lines (`import x`, `from x import y`, and the first line of a parenthesised import)
  are skipped: two modules that need the same things import them in the same (sorted) order,
  which is not logic written twice;
- a block needs at least three lines with words in it: a run of closing brackets, closing tags
  or `{% endif %}`s (`)`, `]`, `</div>`, `{% endfor %}`) is how nesting ends, not code.

The generated Pygments stylesheet (static/recollect/code.css, written by `manage.py code_css`)
is not the project's writing and is left out. A failure names both places of every repeated
block and its first line: make one of them use the other (a helper, a loop over a table, a
shared fixture) rather than reword one copy.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ["chat", "memory", "explorer", "config", "bench", "templates", "static", "tests"]
SUFFIXES = {".py", ".html", ".js", ".css"}
SKIPPED = {"__pycache__", "node_modules"}  # folders, as are hidden ones
GENERATED = {"static/recollect/code.css"}  # manage.py code_css writes it from Pygments' styles
BLOCK = 6  # lines
WORDY = 3  # lines with words that a block needs

IMPORT = re.compile(r"(import|from\s+\S+\s+import)\s")
# Only brackets and punctuation, closing tags and template end tags: the end of a nesting.
NO_WORDS = re.compile(r"(?:</[\w-]+>|\{%-?\s*end\w*\s*-?%\}|\W)*")

Place = tuple[str, int]  # file, index of the block's first line among the file's kept lines


def source_texts(root: Path) -> dict[str, str]:
    """The project's own source files below `root`: path (from root) -> text."""
    texts = {}
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            relative = path.relative_to(root)
            if path.suffix not in SUFFIXES or not path.is_file() or relative.as_posix() in GENERATED:
                continue
            if any(part.startswith(".") or part in SKIPPED for part in relative.parts):
                continue
            texts[relative.as_posix()] = path.read_text(encoding="utf-8")
    return texts


def kept_lines(text: str) -> list[tuple[int, str]]:
    """(line number, stripped line) of the lines that are compared."""
    kept = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if line and not IMPORT.match(line):
            kept.append((number, line))
    return kept


def repeated_blocks(texts: dict[str, str]) -> list[str]:
    """One line per repeated run of lines: `a.py:10-17 = b.py:40-47: first line`, a longer run
    reported once, not as every six-line block in it."""
    lines = {name: kept_lines(text) for name, text in texts.items()}
    places: dict[tuple[str, ...], list[Place]] = defaultdict(list)
    for name, kept in lines.items():
        for i in range(len(kept) - BLOCK + 1):
            block = tuple(line for _, line in kept[i : i + BLOCK])
            if sum(not NO_WORDS.fullmatch(line) for line in block) >= WORDY:
                places[block].append((name, i))
    pairs: set[tuple[Place, Place]] = set()
    for spots in places.values():
        pairs.update((a, b) for n, a in enumerate(spots) for b in spots[n + 1 :])
    report = []
    for (a, i), (b, j) in sorted(pairs):
        if ((a, i - 1), (b, j - 1)) in pairs:
            continue  # inside a run that starts earlier
        length = BLOCK
        while ((a, i + length - BLOCK + 1), (b, j + length - BLOCK + 1)) in pairs:
            length += 1
        span_a = f"{a}:{lines[a][i][0]}-{lines[a][i + length - 1][0]}"
        span_b = f"{b}:{lines[b][j][0]}-{lines[b][j + length - 1][0]}"
        report.append(f"{span_a} = {span_b}: {lines[a][i][1][:80]}")
    return report


def test_no_block_of_six_lines_is_written_twice():
    texts = source_texts(ROOT)
    assert len(texts) > 100  # the walk found the project
    repeated = repeated_blocks(texts)
    assert not repeated, "the same lines stand in two places:\n" + "\n".join(repeated)


def test_a_block_is_found_across_files_indentation_blank_lines_and_imports_aside():
    body = "def f(x):\n    a = x + 1\n    b = a * 2\n    c = b - 3\n    d = c / 4\n    return d\n"
    moved = (
        "class C:\n"
        "    def f(x):\n"
        "        from os import path\n"
        "        a = x + 1\n"
        "\n"
        "        b = a * 2\n"
        "        c = b - 3\n"
        "        d = c / 4\n"
        "        return d\n"
    )
    assert repeated_blocks({"a.py": body, "b.py": moved}) == ["a.py:1-6 = b.py:2-9: def f(x):"]
    assert repeated_blocks({"a.py": body, "b.py": body.replace("b - 3", "b - 4")}) == []


def test_a_longer_run_is_reported_once_and_repeats_within_a_file_count():
    block = "".join(f"value_{i} = compute({i})\n" for i in range(8))
    assert repeated_blocks({"a.py": block, "b.py": "x = 1\n" + block}) == [
        "a.py:1-8 = b.py:2-9: value_0 = compute(0)"
    ]
    twice = block[: block.index("value_6")] + "y = 2\n" + block[: block.index("value_6")]
    assert repeated_blocks({"a.py": twice}) == ["a.py:1-6 = a.py:8-13: value_0 = compute(0)"]


def test_closing_brackets_and_tags_alone_are_not_a_block():
    ends = "        )\n    ]\n}\n</div>\n{% endif %}\n</section>\n"
    one = "<p>{{ a }}</p>\n" + ends + "<p>{{ b }}</p>\n"
    other = "<p>{{ c }}</p>\n" + ends + "<p>{{ d }}</p>\n"
    assert repeated_blocks({"a.html": one, "b.html": other}) == []
    assert NO_WORDS.fullmatch("}),") and NO_WORDS.fullmatch("</td></tr>{% endfor %}")
    assert not NO_WORDS.fullmatch("</div>{{ name }}") and not NO_WORDS.fullmatch("else:")


def test_the_generated_stylesheet_is_left_out_and_nothing_else_of_the_tree():
    walked = set(source_texts(ROOT))
    assert "static/recollect/code.css" not in walked
    expected = {"memory/storage/store.py", "templates/base.html", "static/chat/chat.js", "tests/conftest.py"}
    assert expected <= walked
