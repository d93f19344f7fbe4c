from __future__ import annotations

from django.urls import reverse

from chat.rendering import render_markdown, tool_label
from memory import store


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
