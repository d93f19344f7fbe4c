"""Every explorer page: what the owner sees, what a stranger gets (404 / nothing), bad input."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.urls import reverse
from django.utils import timezone

from memory.models import Message, PeriodSummary, ToolCall, TopicMembership
from memory.storage import store
from tests.explorer.conftest import XSS

pytestmark = pytest.mark.django_db

RAW_XSS = "<script>alert"


def html(response) -> str:
    return response.content.decode()


def section(page: str, section_id: str) -> str:
    start = page.index(f'id="{section_id}"')
    return page[start : page.index("</section>", start)]


def detail_urls(mem) -> list[str]:
    return [
        reverse("explorer:topic", args=[mem.leaf.pk]),
        reverse("explorer:message", args=[mem.answer.pk]),
        reverse("explorer:message", args=[mem.gone.pk]),
        reverse("explorer:diff", args=[mem.answer.pk, 0]),
        reverse("explorer:forget", args=[mem.gone.pk]),
        reverse("explorer:message_context", args=[mem.answer.pk]),
        reverse("explorer:tool_call", args=[mem.call.pk]),
        reverse("explorer:context", args=[mem.snapshot.pk]),
        reverse("explorer:entity", args=[mem.pg.pk]),
    ]


LIST_PAGES = ["overview", "advanced", "topics", "timeline", "tool_calls", "contexts", "entities", "search"]


# --- every page, as its owner sees it ----------------------------------------------------------


def test_advanced_shows_counts_strategy_upkeep_and_health(owner_client, mem):
    page = html(owner_client.get(reverse("explorer:advanced")))
    assert "Messages" in page and ">4<" in page  # question, answer, branch, long (not the deleted)
    assert "Deleted (restorable)" in page
    assert "The next turn would use the" in page and ">full<" in page
    assert "INDEX_FULL_MAX" in page
    assert "topic_upkeep" in page
    assert "Passages not yet embedded" in page and "Orphaned chunks" in page


def test_the_overview_is_about_the_person_and_leaves_the_engine_to_advanced(owner_client, mem):
    mem.question.set_pinned(True)
    page = html(owner_client.get(reverse("explorer:overview")))
    assert "4 messages in 1 conversation." in page
    people = section(page, "people")
    # The names it knows most about, most mentioned first, each with its latest mention and a
    # way to open, correct or forget it.
    assert people.index("Postgres") < people.index("vault")
    assert reverse("explorer:entity", args=[mem.pg.pk]) in people
    assert reverse("explorer:forget", args=[mem.answer.pk]) in people
    assert reverse("explorer:message", args=[mem.answer.pk]) + "#edit-message" in people
    pinned = section(page, "pinned")
    assert reverse("explorer:message", args=[mem.question.pk]) in pinned and "Unpin" in pinned
    assert "Databases" in section(page, "recent-topics")
    changes = section(page, "changes")
    assert "Edited" in changes and "Deleted" in changes and "Restore" in changes
    assert reverse("explorer:restore", args=[mem.gone.pk]) in changes
    assert "Today" in page and "Earlier this week" in page and "Older" in page
    # The engine's words are under Advanced, one link away.
    for engine in ("Semantic cache", "Memory health", "Background upkeep", "INDEX_FULL_MAX", "Decided by"):
        assert engine not in page
    assert reverse("explorer:advanced") in page


def test_the_overview_counts_and_summarizes_the_same_periods(owner_client, owner, conversation):
    from memory.organizing.periods import update_period_summaries

    now = timezone.now()
    for days in (0, 0, 1, 2, 3, 4, 5, 6, 40):
        when = now - dt.timedelta(days=days)
        store.store_message(owner, conversation, "user", f"note {days}", timestamp=when)
    update_period_summaries(owner)
    periods = owner_client.get(reverse("explorer:overview")).context["periods"]
    counted = {p["key"]: int(p["count"]) for p in periods}
    summaries = {p.period: p for p in PeriodSummary.objects.filter(owner=owner)}
    for p in periods:
        assert summaries[p["key"]].message_count == counted[p["key"]], p["key"]
        assert p["summary"] == summaries[p["key"]].summary  # beside the count it speaks of
    assert sum(counted.values()) == 9
    # A summary left behind by newer messages is not shown beside a count it contradicts.
    store.store_message(owner, conversation, "user", "one more today")
    periods = owner_client.get(reverse("explorer:overview")).context["periods"]
    today = next(p for p in periods if p["key"] == "today")
    assert today["count"] == summaries["today"].message_count + 1 and today["summary"] == ""


def test_topics_lists_the_level_with_sparklines_and_a_clickable_map(owner_client, mem):
    page = html(owner_client.get(reverse("explorer:topics")))
    assert "Databases" in page and "Storytelling" in page
    assert 'class="sparkline"' in page
    assert 'class="chart topic-map"' in page
    assert reverse("explorer:topic", args=[mem.root.pk]) in page
    level1 = html(owner_client.get(reverse("explorer:topics") + "?level=1"))
    assert "Password rotation" in level1 and "Storytelling" not in level1


def test_topic_counts_read_1_message_and_2_messages_on_the_map_the_list_and_a_topic(owner_client, mem):
    one = re.compile(r"(?<![\d,])1 (message|subtopic)s\b")
    topics_page = html(owner_client.get(reverse("explorer:topics")))
    assert "Storytelling (1 message)" in topics_page  # the map's circle, for a screen reader too
    assert "1 message ·" in topics_page or "1 message<" in topics_page  # the list's row
    assert "3 messages · 1 subtopic ·" in topics_page
    root_page = html(owner_client.get(reverse("explorer:topic", args=[mem.root.pk])))
    assert "3 messages · 1 subtopic ·" in root_page
    for page in (topics_page, root_page):
        assert not one.search(page), one.search(page)


def test_a_topics_timeline_says_1_message_on_a_day_of_one(owner_client, mem):
    page = html(owner_client.get(reverse("explorer:timeline") + f"?topic={mem.other_root.pk}"))
    assert re.search(r'aria-label="[^"]*: 1 message"', page), page
    assert not re.search(r"(?<![\d,])1 messages\b", page)


def test_the_topic_list_reads_as_a_tree_with_dates_a_person_writes(owner_client, mem):
    page = html(owner_client.get(reverse("explorer:topics")))
    # A parent's row names its subtopics, each a link, and says when in words.
    listed = page[page.index('id="topic-list"') :]
    row = listed[listed.index(">Databases<") : listed.index(">Storytelling<")]
    assert reverse("explorer:topic", args=[mem.leaf.pk]) in row and "Password rotation" in row
    assert mem.root.period_start.strftime("%B %Y") in row
    assert not re.search(r"\d{4}-\d{2}-\d{2} →", page)


def test_topic_page_lists_sub_topics_and_the_messages_below_it(owner_client, mem):
    page = html(owner_client.get(reverse("explorer:topic", args=[mem.root.pk])))
    assert "Subtopics" in page and "Password rotation" in page
    assert reverse("explorer:message", args=[mem.question.pk]) in page
    assert reverse("explorer:message", args=[mem.answer.pk]) in page
    assert reverse("explorer:message", args=[mem.long.pk]) not in page
    leaf = html(owner_client.get(reverse("explorer:topic", args=[mem.leaf.pk])))
    assert "Databases" in leaf  # breadcrumb to the parent


def test_a_topic_lists_its_visible_messages_oldest_first_and_counts_them(owner_client, mem):
    TopicMembership.objects.create(owner=mem.question.owner, topic=mem.leaf, message=mem.gone)
    response = owner_client.get(reverse("explorer:topic", args=[mem.root.pk]))
    rows = list(response.context["messages_page"].object_list)
    assert [m.pk for m in rows] == [mem.question.pk, mem.answer.pk]
    assert response.context["messages_page"].paginator.count == 2
    assert reverse("explorer:message", args=[mem.gone.pk]) not in html(response)


def test_timeline_draws_bars_and_lists_a_periods_messages(owner_client, mem):
    day = mem.question.timestamp.date().isoformat()
    for granularity in ("day", "week", "month"):
        page = html(owner_client.get(reverse("explorer:timeline") + f"?granularity={granularity}"))
        assert 'class="chart bars"' in page and 'data-count="' in page
    page = html(owner_client.get(reverse("explorer:timeline") + f"?granularity=day&period={day}"))
    assert reverse("explorer:message", args=[mem.question.pk]) in page
    assert reverse("explorer:message", args=[mem.gone.pk]) not in page  # deleted


def test_timeline_filters_by_role_topic_and_conversation(owner_client, mem):
    day = mem.question.timestamp.date().isoformat()
    url = reverse("explorer:timeline")
    page = html(owner_client.get(f"{url}?period={day}&role=assistant"))
    assert reverse("explorer:message", args=[mem.answer.pk]) in page
    assert reverse("explorer:message", args=[mem.question.pk]) not in page
    page = html(owner_client.get(f"{url}?period={day}&topic={mem.other_root.pk}"))
    assert reverse("explorer:message", args=[mem.long.pk]) in page
    assert reverse("explorer:message", args=[mem.answer.pk]) not in page
    page = html(owner_client.get(f"{url}?period={day}&conversation={mem.conversation.pk}"))
    assert reverse("explorer:message", args=[mem.answer.pk]) in page


def test_timeline_htmx_bar_click_returns_only_the_period_fragment(owner_client, mem):
    day = mem.question.timestamp.date().isoformat()
    response = owner_client.get(
        reverse("explorer:timeline") + f"?period={day}",
        headers={"HX-Request": "true", "HX-Target": "period-messages"},
    )
    body = html(response)
    assert 'id="period-messages"' in body and "<html" not in body
    assert "HX-Request" in response["Vary"]


def test_message_page_shows_thread_branches_edits_tools_topics_entities(owner_client, mem):
    page = html(owner_client.get(reverse("explorer:message", args=[mem.answer.pk])))
    assert "Use ALTER ROLE and update the vault entry." in page
    assert reverse("explorer:message", args=[mem.question.pk]) in page  # parent
    assert "Sibling branches (1)" in page and reverse("explorer:message", args=[mem.branch.pk]) in page
    assert "Version 1" in page and reverse("explorer:diff", args=[mem.answer.pk, 0]) in page
    assert "search_memory" in page and "get_message" in page
    assert "Password rotation" in page and "Postgres" in page and "vault" in page
    assert "What the model was shown" in page
    assert "Not embedded yet" in page


def test_the_edit_diff_marks_removed_and_added_words(owner_client, mem):
    page = html(owner_client.get(reverse("explorer:diff", args=[mem.answer.pk, 0])))
    assert "<del>USER</del>" in page and "<ins>ROLE</ins>" in page
    assert "<del>wiki page.</del><ins>vault entry.</ins>" in page
    partial = html(
        owner_client.get(reverse("explorer:diff", args=[mem.answer.pk, 0]), headers={"HX-Request": "true"})
    )
    assert 'id="edit-diff"' in partial and "<html" not in partial
    assert owner_client.get(reverse("explorer:diff", args=[mem.answer.pk, 1])).status_code == 404


def test_a_long_message_shows_its_chunks_page_by_page(owner_client, mem):
    chunks = Message.objects.filter(chunk_parent=mem.long).count()
    assert chunks >= 2
    page = html(owner_client.get(reverse("explorer:message", args=[mem.long.pk])))
    assert 'id="chunk-0"' in page and f"{chunks} chunks" in page
    chunk = Message.objects.get(chunk_parent=mem.long, chunk_index=1)
    response = owner_client.get(reverse("explorer:message", args=[chunk.pk]))
    assert response.status_code == 302 and response["Location"].endswith("#chunk-1")


def test_a_deleted_message_can_be_restored_and_deleted_again(owner_client, mem):
    url = reverse("explorer:message", args=[mem.gone.pk])
    assert "Restore" in html(owner_client.get(url))
    response = owner_client.post(reverse("explorer:restore", args=[mem.gone.pk]))
    assert response.status_code == 302
    mem.gone.refresh_from_db()
    assert not mem.gone.deleted
    fragment = html(
        owner_client.post(reverse("explorer:delete", args=[mem.gone.pk]), headers={"HX-Request": "true"})
    )
    assert 'id="message-state"' in fragment and "Restore" in fragment
    mem.gone.refresh_from_db()
    assert mem.gone.deleted


def test_changes_made_in_the_explorer_count_against_the_chats_rate_limit(owner_client, mem, settings):
    settings.CHAT_RATE_LIMIT_PER_MINUTE = 2
    htmx = {"HX-Request": "true"}
    assert owner_client.post(reverse("explorer:restore", args=[mem.gone.pk]), headers=htmx).status_code == 200
    assert owner_client.post(reverse("explorer:delete", args=[mem.gone.pk]), headers=htmx).status_code == 200
    refused = owner_client.post(reverse("explorer:restore", args=[mem.gone.pk]), headers=htmx)
    assert refused.status_code == 429 and "a minute" in refused.content.decode()
    mem.gone.refresh_from_db()
    assert mem.gone.deleted, "a refused change changes nothing"
    edit = owner_client.post(reverse("explorer:edit", args=[mem.gone.pk]), {"content": "new words"})
    assert edit.status_code == 303
    mem.gone.refresh_from_db()
    assert "new words" not in mem.gone.content
    forget = owner_client.post(reverse("explorer:forget", args=[mem.gone.pk]), {"confirm": "forget"})
    assert forget.status_code == 303 and Message.objects.filter(pk=mem.gone.pk).exists()
    asking = owner_client.get(reverse("explorer:forget", args=[mem.gone.pk]))
    assert asking.status_code == 200, "asking is free"


def test_the_owner_corrects_a_messages_text_and_upkeep_is_queued(
    owner_client, mem, monkeypatch, django_capture_on_commit_callbacks
):
    queued = []
    monkeypatch.setattr("memory.tasks.queue_upkeep", lambda owner_id, ids: queued.append((owner_id, ids)))
    url = reverse("explorer:message", args=[mem.question.pk])
    assert 'name="content"' in html(owner_client.get(url))
    with django_capture_on_commit_callbacks(execute=True):
        response = owner_client.post(
            reverse("explorer:edit", args=[mem.question.pk]), {"content": "How do we rotate the vault token?"}
        )
    assert response.status_code == 302 and response["Location"] == url
    mem.question.refresh_from_db()
    assert mem.question.content == "How do we rotate the vault token?"
    assert mem.question.edited
    assert mem.question.edit_history[-1]["previous_content"].startswith("How do we rotate the Postgres")
    assert queued == [(mem.question.owner_id, [mem.question.pk])]
    page = html(owner_client.get(url))
    assert "Saved" in page and "Show changes" in page


def test_editing_a_chunk_explains_that_the_whole_message_is_edited(owner_client, mem, monkeypatch):
    queued = []
    monkeypatch.setattr("memory.tasks.queue_upkeep", lambda owner_id, ids: queued.append(ids))
    chunk = Message.objects.filter(chunk_parent=mem.long, is_chunk=True).order_by("chunk_index").first()
    response = owner_client.post(reverse("explorer:edit", args=[chunk.pk]), {"content": "new text"})
    assert response.status_code == 400
    assert "chunks cannot be edited on their own" in html(response)
    assert f"edit the whole message {mem.long.pk}" in html(response)
    chunk.refresh_from_db()
    assert chunk.content != "new text"
    assert queued == []


def test_an_empty_edit_is_refused_with_a_message(owner_client, mem):
    response = owner_client.post(reverse("explorer:edit", args=[mem.question.pk]), {"content": "   "})
    assert response.status_code == 400
    assert 'role="alert"' in html(response)
    mem.question.refresh_from_db()
    assert not mem.question.edited


def test_a_stranger_cannot_edit_a_message(stranger_client, mem):
    response = stranger_client.post(reverse("explorer:edit", args=[mem.question.pk]), {"content": "mine now"})
    assert response.status_code == 404
    mem.question.refresh_from_db()
    assert "Postgres password" in mem.question.content and not mem.question.edited


def test_forget_asks_for_confirmation_then_removes_everything(owner_client, mem):
    url = reverse("explorer:forget", args=[mem.answer.pk])
    page = html(owner_client.get(url))
    assert "cannot be undone" in page and "2 tool calls" in page
    response = owner_client.post(url)
    assert response.status_code == 400
    assert Message.objects.filter(pk=mem.answer.pk).exists()
    response = owner_client.post(url, {"confirm": "forget"})
    assert response.status_code == 302
    assert not Message.objects.filter(pk=mem.answer.pk).exists()
    assert not ToolCall.objects.filter(message_id=mem.answer.pk).exists()
    assert owner_client.get(reverse("explorer:message", args=[mem.answer.pk])).status_code == 404


def test_tool_calls_table_filters_and_links_to_the_message(owner_client, mem):
    url = reverse("explorer:tool_calls")
    page = html(owner_client.get(url))
    assert "search_memory" in page and "get_message" in page
    assert reverse("explorer:message", args=[mem.answer.pk]) in page
    filtered = html(owner_client.get(f"{url}?tool=search_memory"))
    assert reverse("explorer:tool_call", args=[mem.call.pk]) in filtered
    assert reverse("explorer:tool_call", args=[mem.big_call.pk]) not in filtered
    day = mem.call.timestamp.date().isoformat()
    assert reverse("explorer:tool_call", args=[mem.call.pk]) in html(
        owner_client.get(f"{url}?start={day}&end={day}&conversation={mem.conversation.pk}")
    )
    assert "No tool calls" in html(owner_client.get(f"{url}?start=1999-01-01&end=1999-01-02"))


def test_a_chunked_tool_result_reads_chunk_by_chunk(owner_client, mem):
    url = reverse("explorer:tool_call", args=[mem.big_call.pk])
    page = html(owner_client.get(url))
    assert "Chunk 1 of" in page and "paragraph0 " in page
    second = html(owner_client.get(url + "?chunk=2", headers={"HX-Request": "true"}))
    assert "Chunk 2 of" in second and "<html" not in second


def test_context_inspector_lists_turns_and_shows_what_the_model_saw(owner_client, mem):
    listing = html(owner_client.get(reverse("explorer:contexts")))
    assert reverse("explorer:context", args=[mem.snapshot.pk]) in listing
    page = html(owner_client.get(reverse("explorer:context", args=[mem.snapshot.pk])))
    assert "Strategy:" in page and "INDEX_FULL_MAX (50)" in page
    assert "Recent Conversation:" in page
    assert "recent: 120" in page and "500 of 10,000 tokens" in page
    assert "0.0327" in page and "vector_timeout" in page
    assert "search_memory" in page and "get_message" in page  # tools it then called
    response = owner_client.get(reverse("explorer:message_context", args=[mem.answer.pk]))
    assert response["Location"] == reverse("explorer:context", args=[mem.snapshot.pk])


def test_the_context_page_shows_the_windows_zones_allocated_and_used(owner_client, mem):
    url = reverse("explorer:context", args=[mem.snapshot.pk])
    assert "context window" not in html(owner_client.get(url))  # none recorded: no section
    mem.snapshot.plan = {
        "strategy": "full",
        "window": {
            "window": 4096,
            "zones": {"index": {"allocated": 1024, "used": 377}, "current": {"allocated": 492, "used": 488}},
            "prompt_tokens": 3210,
            "max_tokens": 410,
            "retried": True,
            "current_message_cut": True,
        },
    }
    mem.snapshot.save(update_fields=["plan"])
    page = html(owner_client.get(url))
    assert "The model's context window: 4,096 tokens" in page
    assert "sent 3,210 tokens and left 410 for the answer" in page
    assert "<td>index</td><td>1,024</td><td>377</td>" in page
    assert "<td>current</td><td>492</td><td>488</td>" in page
    assert "refused the prompt as too long once" in page and "its head and end were sent" in page


def test_search_finds_messages_and_links_to_them(owner_client, mem):
    page = html(owner_client.get(reverse("explorer:search") + "?q=Postgres+password"))
    assert reverse("explorer:message", args=[mem.question.pk]) in page
    empty = html(owner_client.get(reverse("explorer:search")))
    assert "Type a query" in empty


def test_entities_list_and_entity_page_with_neighbours(owner_client, mem):
    page = html(owner_client.get(reverse("explorer:entities")))
    assert "Postgres" in page and "vault" in page
    assert "vault" not in html(owner_client.get(reverse("explorer:entities") + "?q=postg"))
    entity = html(owner_client.get(reverse("explorer:entity", args=[mem.pg.pk])))
    assert "Neighbours" in entity and reverse("explorer:entity", args=[mem.vault.pk]) in entity
    assert reverse("explorer:message", args=[mem.answer.pk]) in entity


# --- strangers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("index", range(9))
def test_a_stranger_gets_404_for_every_detail_page(stranger_client, mem, index):
    url = detail_urls(mem)[index]
    assert stranger_client.get(url).status_code == 404


def test_a_stranger_cannot_delete_restore_or_forget(stranger_client, mem):
    for name in ("delete", "restore", "forget"):
        response = stranger_client.post(
            reverse(f"explorer:{name}", args=[mem.answer.pk]), {"confirm": "forget"}
        )
        assert response.status_code == 404
    mem.answer.refresh_from_db()
    assert not mem.answer.deleted


@pytest.mark.parametrize("name", LIST_PAGES)
def test_a_stranger_sees_none_of_the_owners_memory_on_list_pages(stranger_client, mem, name):
    url = reverse(f"explorer:{name}")
    if name == "search":
        url += "?q=rotate"
    if name == "timeline":
        url += f"?period={mem.question.timestamp.date().isoformat()}"
    page = html(stranger_client.get(url))
    for marker in (
        mem.question.pk,
        mem.answer.pk,
        mem.call.pk,
        mem.snapshot.pk,
        mem.root.pk,
        "Databases",
        "Postgres",
        "search_memory",
    ):
        assert marker not in page, marker


def test_a_stranger_filtering_by_the_owners_ids_gets_a_message_not_data(stranger_client, mem):
    url = reverse("explorer:timeline") + (
        f"?conversation={mem.conversation.pk}&topic={mem.root.pk}"
        f"&period={mem.question.timestamp.date().isoformat()}"
    )
    page = html(stranger_client.get(url))
    assert "No conversation" in page and "No topic" in page
    assert mem.question.pk not in page


@pytest.mark.parametrize("name", LIST_PAGES)
def test_signed_out_visitors_are_sent_to_sign_in(client, name):
    response = client.get(reverse(f"explorer:{name}"))
    assert response.status_code == 302 and "/login/" in response["Location"]


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "?granularity=year&role=robot&start=yesterday&end=2024-13-45&conversation=nope&topic=x",
        "?until=0001-01-01&granularity=month",
        "?until=9999-12-31&period=9999-12-31&granularity=month",
        "?start=2024-05-02&end=2024-05-01",
        "?page=99999999999999999999999&period=2024-01-01",
        "?page=-3&period=abc",
    ],
)
def test_timeline_survives_bad_filters_with_a_clear_message(owner_client, mem, query):
    response = owner_client.get(reverse("explorer:timeline") + query)
    assert response.status_code == 200
    assert 'class="filter-errors"' in html(response) or "page" in query


@pytest.mark.parametrize("name", LIST_PAGES)
def test_list_pages_handle_huge_and_junk_page_numbers(owner_client, mem, name):
    for page in ("999999999999999999999", "-1", "abc", "1e9"):
        response = owner_client.get(reverse(f"explorer:{name}") + f"?page={page}&q=postgres")
        assert response.status_code == 200


@pytest.mark.parametrize(
    ("name", "query", "expected"),
    [
        ("tool_calls", "?start=31/12/2024", "is not a date"),
        ("tool_calls", "?conversation=../../etc", "No conversation"),
        ("tool_calls", "?message=nothing-here", "No message"),
        ("contexts", "?end=tomorrow", "is not a date"),
        ("search", "?q=x&role=wizard", "is not a role"),
        ("entities", "?kind=galaxy", "No entities of kind"),
        ("topics", "?level=banana", "is not a level"),
        ("topics", "?level=99", "no level 99"),
        # Values the shared filter form (explorer.filters) turns away, on the pages that read them.
        ("timeline", "?until=someday", "is not a date for “until”"),
        ("timeline", "?period=2024-02-30", "is not a date for the period"),
        ("timeline", "?granularity=decade", "is not one of day, week, month"),
        ("search", "?q=x&start=yesterday", "is not a date for “from”"),
        ("contexts", "?conversation=nope", "No conversation “nope”"),
    ],
)
def test_bad_filters_show_a_message_instead_of_failing(owner_client, mem, name, query, expected):
    response = owner_client.get(reverse(f"explorer:{name}") + query)
    assert response.status_code == 200
    assert expected in html(response)


@pytest.mark.parametrize(
    "url",
    [
        "/explorer/messages/NOPE/",
        "/explorer/messages/" + "x" * 300 + "/",
        "/explorer/topics/unknown/",
        "/explorer/tools/unknown/",
        "/explorer/context/unknown/",
        "/explorer/entities/99999999999999999999999/",
        "/explorer/entities/123456/",
        "/explorer/messages/NOPE/diff/0/",
    ],
)
def test_unknown_ids_are_404(owner_client, mem, url):
    assert owner_client.get(url).status_code == 404


def test_xss_payloads_are_shown_as_text_everywhere(owner_client, mem):
    urls = [
        reverse("explorer:overview"),
        reverse("explorer:topics") + "?level=1",
        reverse("explorer:topic", args=[mem.leaf.pk]),
        reverse("explorer:timeline") + f"?period={mem.question.timestamp.date().isoformat()}",
        reverse("explorer:message", args=[mem.question.pk]),
        reverse("explorer:tool_calls"),
        reverse("explorer:tool_call", args=[mem.call.pk]),
        reverse("explorer:context", args=[mem.snapshot.pk]),
        reverse("explorer:search") + "?q=" + XSS,
        reverse("explorer:entities") + "?q=" + XSS,
        reverse("explorer:timeline") + "?role=" + XSS,
    ]
    for url in urls:
        page = html(owner_client.get(url))
        assert RAW_XSS not in page, url
        assert "<img src=x" not in page, url
    assert "&lt;script&gt;" in html(owner_client.get(reverse("explorer:message", args=[mem.question.pk])))
    assert "&lt;script&gt;" in html(owner_client.get(reverse("explorer:tool_call", args=[mem.call.pk])))


def test_get_is_refused_for_state_changes(owner_client, mem):
    assert owner_client.get(reverse("explorer:delete", args=[mem.answer.pk])).status_code == 405
    assert owner_client.get(reverse("explorer:restore", args=[mem.answer.pk])).status_code == 405


def _edited(owner, conversation, before: str, after: str) -> Message:
    return Message.objects.create(
        owner=owner, conversation=conversation, role="user", content=after, position=0,
        timestamp=timezone.now(), edited=True,
        edit_history=[{"previous_content": before, "timestamp": timezone.now().isoformat()}],
    )


def test_a_huge_edit_is_diffed_within_bounds(owner_client, owner, conversation):
    # Line by line, this took difflib hours: every line matches every other.
    before = "a\n" * 200_000
    message = _edited(owner, conversation, before, "b\n" + before[4:] + "b\n")
    page = html(owner_client.get(reverse("explorer:diff", args=[message.pk, 0])))
    assert "<del>a</del><ins>b</ins>" in page and "the rest is not" in page
    assert len(page) < 60_000  # not both 400,000-character versions


def test_a_diff_of_very_many_changes_is_cut_short_and_says_the_rest_is_not_shown(
    owner_client, owner, conversation
):
    # ~0.9 MB each, 80,000 short lines, 70% of them changed: 3.1 MB of HTML before.
    before = [f"line {i} w{i * 7919 % 1000}\n" for i in range(80_000)]
    after = [line if i % 10 < 3 else f"line {i} x{i * 104729 % 1000}\n" for i, line in enumerate(before)]
    message = _edited(owner, conversation, "".join(before), "".join(after))
    page = html(owner_client.get(reverse("explorer:diff", args=[message.pk, 0])))
    # The first changes, word by word.
    assert f"<del>w{3 * 7919 % 1000}</del><ins>x{3 * 104729 % 1000}</ins>" in page
    assert "the rest is not" in page and "the rest of the changes is not shown" in page
    assert "line 79999 " not in page
    assert len(page) < 300_000


def test_a_small_edit_of_a_huge_message_is_shown_exactly(owner_client, owner, conversation):
    before = "a\n" * 200_000
    message = _edited(owner, conversation, before, before[:200_000] + "changed\n" + before[200_002:])
    page = html(owner_client.get(reverse("explorer:diff", args=[message.pk, 0])))
    assert "<del>a</del><ins>changed</ins>" in page
    assert "199,200 unchanged characters" in page and "too large" not in page


def test_an_edit_larger_than_djangos_upload_limit_is_saved_whole(owner_client, mem, settings):
    text = "é" * 1_000_000  # 6 MB as a form: over Django's 2.5 MB default
    owner_client.post(reverse("explorer:restore", args=[mem.gone.pk]))
    page = owner_client.get(reverse("explorer:message", args=[mem.gone.pk])).content.decode()
    assert f'maxlength="{settings.MAX_MESSAGE_CHARS}"' in page  # the browser stops at the limit
    response = owner_client.post(reverse("explorer:edit", args=[mem.gone.pk]), {"content": text})
    assert response.status_code == 302
    mem.gone.refresh_from_db()
    assert mem.gone.content == text


def test_a_large_body_from_someone_signed_out_is_refused_before_it_is_read(client, db):
    response = client.post(reverse("login"), {"username": "x", "password": "y" * 3_000_000})
    assert response.status_code == 413


def test_the_forget_page_lists_the_messages_quoting_it_and_forgets_the_ticked_ones(
    owner_client, owner, conversation
):
    from memory.storage.store import store_message

    secret = store_message(
        owner, conversation, "user", "The boathouse key hangs behind the blue door by the canoes."
    )
    recall = store_message(
        owner, conversation, "assistant",
        f"**Offline recall** · user · {secret.pk}: “The boathouse key hangs behind the blue door”",
        metadata={"mode": "offline_recall", "system_text": True},
    )
    restated = store_message(
        owner, conversation, "assistant", "So the key hangs behind the blue door by the canoes."
    )
    store_message(owner, conversation, "user", "Unrelated: buy milk.")
    url = reverse("explorer:forget", args=[secret.pk])
    page = html(owner_client.get(url))
    # An offline-recall answer, and a reply that is mostly a copy of it, are ticked already.
    assert f'value="{recall.pk}" checked' in page and f'value="{restated.pk}" checked' in page
    assert "Unrelated" not in page
    response = owner_client.post(url, {"confirm": "forget", "copies": [recall.pk]})
    assert response.status_code == 302
    assert set(Message.objects.filter(conversation=conversation).values_list("content", flat=True)) == {
        restated.content, "Unrelated: buy milk."
    }


def test_forgetting_with_someone_elses_message_as_a_copy_answers_404(owner_client, owner, stranger, mem):
    from memory.models import Conversation
    from memory.storage.store import store_message

    theirs = store_message(stranger, Conversation.objects.create(owner=stranger), "user", "stranger's words")
    url = reverse("explorer:forget", args=[mem.answer.pk])
    response = owner_client.post(url, {"confirm": "forget", "copies": [theirs.pk]})
    assert response.status_code == 404
    assert Message.objects.filter(pk__in=[mem.answer.pk, theirs.pk]).count() == 2


def test_tool_arguments_and_results_show_their_characters_not_escapes(owner_client, owner, mem):
    escaped = '{"query": "\\u00bfC\\u00f3mo se llama mi perro?"}'
    call = store.store_tool_call(owner, mem.answer, "vector_search", escaped, '{"note": "\\u00e9t\\u00e9"}')
    pages = [
        reverse("explorer:tool_calls"),
        reverse("explorer:message", args=[mem.answer.pk]),
        reverse("explorer:tool_call", args=[call.pk]),
    ]
    for url in pages:
        page = html(owner_client.get(url))
        assert "¿Cómo se llama" in page, url
        assert "\\u00bf" not in page, url
    from chat.rendering import message_html

    row = message_html(Message.objects.get(pk=mem.answer.pk), owner)
    assert "¿Cómo se llama mi perro?" in row and "été" in row and "\\u00" not in row


def test_correcting_the_first_message_renames_a_conversation_named_after_it(owner_client, owner):
    from memory.models import Conversation

    conversation = Conversation.objects.create(owner=owner, title="Trip to Lisbon")
    first = store.store_message(owner, conversation, "user", "Trip to Lisbon")
    owner_client.post(reverse("explorer:edit", args=[first.pk]), {"content": "Trip to Porto"})
    conversation.refresh_from_db()
    assert conversation.title == "Trip to Porto"


def test_the_forget_page_names_only_the_parts_a_message_has(owner_client, mem):
    page = html(owner_client.get(reverse("explorer:forget", args=[mem.question.pk])))
    assert "removes the message and its embeddings permanently" in page
    assert " 0 chunk" not in page and " 0 tool call" not in page


def test_message_pages_highlight_no_tab_of_the_explorer(owner_client, mem):
    pk = mem.answer.pk
    urls = [reverse("explorer:message", args=[pk]), reverse("explorer:forget", args=[pk]),
            reverse("explorer:diff", args=[pk, 0])]
    for url in urls:
        nav = html(owner_client.get(url)).split('<nav class="explorer-nav"', 1)[1].split("</nav>", 1)[0]
        assert 'aria-current="page"' not in nav, url


def test_snippets_show_the_words_of_markdown_not_its_marks(owner_client, owner, conversation):
    text = "**Offline recall** found [the runbook](https://example.org/r) and `ALTER ROLE`."
    said = store.store_message(owner, conversation, "assistant", text, embed=False)
    Message.objects.filter(pk=said.pk).update(edited=True)
    page = html(owner_client.get(reverse("explorer:overview")))
    assert "Offline recall found the runbook and ALTER ROLE." in page
    assert "**Offline recall**" not in page
