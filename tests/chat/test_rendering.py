from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from django.conf import settings
from django.urls import reverse

from chat.rendering import render_markdown, streaming_row_html, tool_label
from memory.storage import store
from tests.chat.conftest import connect, receive_until


def test_it_links_only_the_readers_own_message_ids(owner, stranger, conversation, stranger_conversation):
    mine = store.store_message(owner, conversation, "user", "mine", embed=False)
    theirs = store.store_message(stranger, stranger_conversation, "user", "theirs", embed=False)
    html = render_markdown(f"See {mine.pk} and {theirs.pk}, and `{mine.pk}` in code.", owner=owner)
    link = reverse("explorer:message", args=[mine.pk])
    assert f'<a class="msg-ref" href="{link}">{mine.pk}</a>' in html
    assert html.count('class="msg-ref"') == 1
    assert f">{theirs.pk}</a>" not in html


def test_no_script_survives(owner):
    html = render_markdown('<svg onload=alert(1)><a href="javascript:x">y</a><iframe src=//x>', owner=owner)
    # Raw HTML shows as text: no element, no handler, no javascript: link is made.
    assert "<svg" not in html and "<iframe" not in html and "<a " not in html
    assert "&lt;svg onload=alert(1)&gt;" in html
    markdown_link = render_markdown("[click](javascript:alert(1))", owner=owner)
    assert "javascript" not in markdown_link and ">click</a>" in markdown_link


def test_tool_calls_read_as_actions():
    assert tool_label("vector_search", '{"query": "zebra facts"}') == "searched memory for “zebra facts”"
    assert tool_label("get_message_by_id", {"id": "01JABC"}) == "opened message 01JABC"
    assert tool_label("mystery", "{broken") == "called mystery"
    assert tool_label("expand_node", {"id": "01JTOPIC"}) == "expanded memory node 01JTOPIC"
    assert tool_label("browse_hierarchy", {"level": "META"}) == "browsed the META level of memory"
    assert tool_label("get_conversation_stats", {}) == "looked at memory statistics"


FENCED_PYTHON = 'Try this:\n\n```python\ndef greet(name):\n    return f"hi {name}"  # say hi\n```\n'


def test_a_fenced_python_block_is_highlighted():
    html = render_markdown(FENCED_PYTHON)
    assert '<div class="highlight"><div class="code-block"><pre>' in html
    assert '<span class="k">def</span>' in html  # keyword
    assert '<span class="nf">greet</span>' in html  # function name
    assert '<span class="c1"># say hi</span>' in html  # comment


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[tuple[str, tuple]] = set()
        self.text = ""

    def handle_starttag(self, tag, attrs):
        self.tags.add((tag, tuple(name for name, _ in attrs)))

    def handle_data(self, data):
        self.text += data


def test_code_blocks_stay_inert(owner):
    payload = "<script>alert(1)</script></code></pre><img src=x onerror=alert(1)>"
    for text in (f"```python\nx = '{payload}'\n```", f"```html\n{payload}\n```", f"```\n{payload}\n```"):
        parsed = _Elements()
        parsed.feed(render_markdown(text, owner=owner))
        # Only the highlighter's own elements, with a class at most, and the block's one Copy
        # button; the payload is text.
        assert {tag for tag, _ in parsed.tags} <= {"div", "pre", "code", "span", "button"}, text
        assert {attrs for tag, attrs in parsed.tags if tag != "button"} <= {(), ("class",)}, text
        assert {attrs for tag, attrs in parsed.tags if tag == "button"} == {("type", "class", "data-action")}
        assert payload in parsed.text.replace("Copy code", ""), text


def test_every_code_block_gets_one_copy_button():
    html = render_markdown(FENCED_PYTHON + "\nand\n\n    indented = True\n")
    assert html.count('<div class="code-block"><pre>') == 2 and html.count(">Copy code</button>") == 2


def test_the_code_colours_file_is_up_to_date():
    from chat.management.commands.code_css import CSS_PATH, code_css

    css = CSS_PATH.read_text()
    assert css == code_css(), "run `manage.py code_css`"
    assert ".highlight .k {" in css and "@media (prefers-color-scheme: dark)" in css


@pytest.mark.django_db(transaction=True)
async def test_a_streamed_reply_is_highlighted_once_stored(owner, conversation, scripted_llm):
    scripted_llm.script({"text": FENCED_PYTHON, "delay": 0.001})
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": "show me a greeting function"})
    events = await receive_until(ws, "reply_done")
    # While streaming, tokens are plain text; the stored reply the page swaps in is highlighted.
    assert "".join(e["delta"] for e in events if e["type"] == "token") == FENCED_PYTHON
    assert '<span class="nf">greet</span>' in events[-1]["html"]
    await ws.disconnect()


def _tool_boxes(html: str) -> list[str]:
    """The tool-call boxes of a fragment, their ids left out (a live box is named by the
    model's call id, a stored one by its row's)."""
    boxes = re.findall(r'<details class="tool-call.*?</details>', html, re.S)
    return [re.sub(r' id="[^"]*"', "", box) for box in boxes]


@pytest.mark.django_db(transaction=True)
async def test_live_events_carry_the_fragments_the_stored_page_shows(owner, conversation, scripted_llm):
    marker = "fragments"
    scripted_llm.script(
        {"tool_calls": [{"name": "vector_search", "arguments": {"query": "zebras"}}]},
        {"text": "Found it.", "delay": 0.001},
        match=marker,
    )
    ws = await connect(owner, conversation.pk)
    await ws.send_json_to({"type": "send", "content": f"{marker} what about zebras?"})
    events = await receive_until(ws, "reply_done")
    by_type = {e["type"]: e for e in events}
    started, running, finished, done = (
        by_type[t] for t in ("reply_started", "tool_started", "tool_finished", "reply_done")
    )
    # The streaming row is _message.html's own row, in its streaming state.
    head = started["html"].split(">", 1)[0]
    assert head.replace(" streaming", "") == done["html"].split(">", 1)[0]
    assert f'id="msg-{done["message_id"]}"' in head and f'data-parent="{done["parent_id"]}"' in head
    assert '<div class="content streaming-text"></div>' in started["html"]
    assert '<div class="tool-calls"></div>' in started["html"]
    # The tool box is _tool_call.html: running while the tool works, then as the page keeps it.
    assert f'id="live-tool-{running["call_id"]}"' in running["html"]
    assert f'id="live-tool-{finished["call_id"]}"' in finished["html"]
    [live] = _tool_boxes(running["html"])
    assert 'class="tool-call running"' in live and "working…" in live
    assert "searched memory for “zebras”" in live
    assert _tool_boxes(finished["html"]) == _tool_boxes(done["html"])
    await ws.disconnect()


def test_the_streaming_row_reads_nothing_from_the_database():
    # No django_db mark: pytest-django fails any database access here.
    html = streaming_row_html("01JREPLY0000000000000000AA", "01JPARENT000000000000000AA")
    assert 'class="message assistant streaming"' in html
    assert 'data-parent="01JPARENT000000000000000AA"' in html


def test_chat_js_inserts_the_servers_fragments_instead_of_building_markup():
    js = (settings.BASE_DIR / "static" / "chat" / "chat.js").read_text()
    # The only element it makes is the <template> that parses the server's html.
    assert re.findall(r"createElement\(['\"](\w+)['\"]\)", js) == ["template"]
    assert 'className = "message' not in js and 'className = "tool-call' not in js
    assert "fromHTML(ev.html)" in js


def test_it_words_the_boxes_of_different_tools_differently():
    from memory.context.tools import TOOLS

    labels: dict[str, str] = {}
    for name, spec in TOOLS.items():
        args = {key: "zebras" if p.get("type") == "string" else 1 for key, p in spec.parameters.items()}
        label = tool_label(name, args)
        assert label not in labels, f"{name} and {labels.get(label)} both read {label!r}"
        labels[label] = name
