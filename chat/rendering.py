"""Message text to safe HTML: Markdown with code blocks, sanitized by nh3, cited ids linked.

No script from a message or a tool result ever runs: Markdown's output goes through nh3 with a
short allow-list (no event handlers, no style, no javascript: URLs), and everything else on
the page is autoescaped by the templates.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import markdown
import nh3
from django.conf import settings
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe

from chat.branches import Siblings, siblings_for
from memory.context.tools import TOOLS, ToolError, ToolResult, parse_arguments
from memory.models import Message, ToolCall

ALLOWED_TAGS = {
    "div",
    "p",
    "br",
    "hr",
    "strong",
    "em",
    "b",
    "i",
    "del",
    "code",
    "pre",
    "blockquote",
    "ul",
    "ol",
    "li",
    "a",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "span",
}
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "div": {"class"},
    "code": {"class"},
    "span": {"class"},
    "th": {"align"},
    "td": {"align"},
}
ULID_RE = re.compile(r"\b[0-7][0-9A-HJKMNP-TV-Z]{25}\b")
_TAG_SPLIT = re.compile(r"(<[^>]*>)")


def message_url(message_id: str) -> str:
    """Where a cited message opens: its page in the memory explorer."""
    return reverse("explorer:message", args=[message_id])


def _link_ids(html: str, known_ids: set[str]) -> str:
    """Turn cited ids of the reader's own messages into links, outside tags, links and code."""
    if not known_ids:
        return html
    out, in_link, in_code = [], 0, 0
    for part in _TAG_SPLIT.split(html):
        if part.startswith("<"):
            tag = part[1:].split(None, 1)[0].rstrip(">/").lower() if len(part) > 2 else ""
            if tag in {"a"}:
                in_link += 1
            elif tag == "/a":
                in_link = max(0, in_link - 1)
            elif tag in {"code", "pre"}:
                in_code += 1
            elif tag in {"/code", "/pre"}:
                in_code = max(0, in_code - 1)
            out.append(part)
        elif in_link or in_code:
            out.append(part)
        else:
            out.append(
                ULID_RE.sub(
                    lambda m: (
                        f'<a class="msg-ref" href="{message_url(m.group(0))}">{m.group(0)}</a>'
                        if m.group(0) in known_ids
                        else m.group(0)
                    ),
                    part,
                )
            )
    return "".join(out)


def cited_ids(text: str) -> set[str]:
    return set(ULID_RE.findall(text or ""))


_converters = threading.local()


def _markdown() -> markdown.Markdown:
    """This thread's Markdown converter (building one loads every extension: about a
    millisecond, twice a chat turn), reset for the next text."""
    md = getattr(_converters, "md", None)
    if md is None:
        md = _converters.md = _new_markdown()
    return md.reset()


def _new_markdown() -> markdown.Markdown:
    """A Markdown converter that shows raw HTML as text (a person typing <b> sees <b>), and
    highlights fenced code by its language (Pygments' classes; static/recollect/code.css)."""
    md = markdown.Markdown(
        extensions=["fenced_code", "codehilite", "tables", "sane_lists"],
        extension_configs={"codehilite": {"css_class": "highlight", "guess_lang": False}},
        output_format="html",
    )
    md.preprocessors.deregister("html_block")
    md.inlinePatterns.deregister("html")
    return md


def render_markdown(text: str, *, owner=None) -> SafeString:
    """Sanitized HTML for a message. With `owner`, ids of their messages become links."""
    html = _markdown().convert(text or "")
    clean = nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )
    ids = cited_ids(text)
    if owner is not None and ids:
        known = set(Message.objects.owned_by(owner).filter(pk__in=ids).values_list("pk", flat=True))
        clean = _link_ids(clean, known)
    clean = _PRE.sub(_with_copy_button, clean)
    return mark_safe(clean)  # noqa: S308 - sanitized by nh3 above; ids are [0-9A-Z] only


# Every code block gets a Copy button (static/recollect/app.js copies its <pre>'s text). The
# <pre> is nh3's output, whose text is escaped: it holds no other </pre>.
_PRE = re.compile(r"<pre>.*?</pre>", re.S)
COPY_CODE = '<button type="button" class="copy-code" data-action="copy-code">Copy code</button>'


def _with_copy_button(match: re.Match) -> str:
    return f'<div class="code-block">{match.group(0)}{COPY_CODE}</div>'


ONLY_CHILD = Siblings(index=1, count=1, previous_id=None, next_id=None)


def message_html(message: Message, owner, *, only_child: bool = False) -> str:
    """The chat row of one message: the same fragment the page, htmx and the websocket use.

    only_child: the caller knows the message is its parent's only reply (chat.turn: a message
    sent after the active leaf, and the reply to a message of the same turn), so its siblings
    are not read."""
    sib = ONLY_CHILD if only_child else siblings_for(message.conversation, [message])[message.pk]
    # As the page renders it (chat.context_processors): the model is named when there is a choice.
    context = {"m": message, "sib": sib, "user": owner, "chat_models": settings.CHAT_MODELS}
    return render_to_string("chat/_message.html", context)


def streaming_row_html(reply_id: str, parent_id: str | None) -> str:
    """The row of a reply still being written: `_message.html` in its streaming state.

    It reads nothing from the database, so the first token's path need not visit a db thread."""
    row = Message(pk=reply_id, role="assistant", parent_id=parent_id)
    return render_to_string("chat/_message.html", {"m": row, "streaming": True})


def live_tool_call_html(
    call_id: str, name: str, arguments_text: str, outcome: ToolResult | None = None
) -> str:
    """A tool call's box while a reply is written: the `_tool_call.html` a stored reply shows,
    running until `outcome` is known. Nothing is read from the database."""
    call = ToolCall(tool_name=str(name)[:100], arguments=arguments_text)
    if outcome is not None:
        result = outcome.result if outcome.ok else {"error": outcome.error}
        # As memory.storage.store.store_tool_call stores it, so the box reads the same after the reply.
        if not isinstance(result, str):
            result = json.dumps(result, ensure_ascii=False, default=str)
        call.result = result
        call.is_error = not outcome.ok
    return render_to_string(
        "chat/_tool_call.html", {"call": call, "live_id": call_id, "running": outcome is None}
    )


def tool_label(name: str, arguments: Any) -> str:
    """How a tool call reads in the chat: "searched memory for …", "opened message 01J…"."""
    spec = TOOLS.get(str(name))
    try:
        args = parse_arguments(arguments)
    except ToolError:
        args = {}
    try:
        label = spec.label(args) if spec is not None and spec.label is not None else ""
    except (TypeError, AttributeError):  # arguments of the wrong types: the plain label does
        label = ""
    return label or f"called {name or 'a tool'}"


def tool_result_summary(call: ToolCall) -> str:
    """A short line for a stored tool call's result."""
    if call.is_error:
        try:
            value = parse_arguments(call.result)
        except ToolError:
            value = {}
        return f"error: {value.get('error') or call.result}"[:200]
    try:
        value = json.loads(call.result)
    except (TypeError, ValueError):
        return f"{len(call.result):,} characters"
    if isinstance(value, list):
        return f"{len(value)} result{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        for key in ("results", "messages", "hits", "items", "children", "tool_calls"):
            if isinstance(value.get(key), list):
                n = len(value[key])
                return f"{n} {key if n != 1 else key.rstrip('s')}"
        if value.get("summary"):
            return str(value["summary"])[:200]
    return f"{len(call.result):,} characters"
