"""A small but complete memory for the explorer tests: thread with branches, an edited and a
long (chunked) message, tool calls (one chunked), topics, entities, a context snapshot and an
upkeep run. XSS payloads sit in a message, tool arguments, a tool result and a topic label."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest
from django.utils import timezone

from memory.lifecycle import deleting
from memory.models import (
    ContextSnapshot,
    Entity,
    EntityEdge,
    EntityMention,
    Message,
    Topic,
    TopicMembership,
    UpkeepRun,
)
from memory.storage import store

XSS = '<script>alert("xss")</script><img src=x onerror=alert(1)>'


def build_memory(owner, conversation) -> SimpleNamespace:
    now = timezone.now()
    # Mid-morning three days ago: the fixture's messages (t0 … t0 + 2 h) share one day whatever
    # the time the tests run (at 23:00 they used to straddle midnight).
    t0 = (now - dt.timedelta(days=3)).replace(hour=9, minute=0, second=0, microsecond=0)

    def say(role: str, content: str, minutes: int, parent: Message | None = None) -> Message:
        return store.store_message(
            owner,
            conversation,
            role,
            content,
            parent_id=parent.pk if parent else None,
            timestamp=t0 + dt.timedelta(minutes=minutes),
            embed=False,
        )

    question = say("user", f"How do we rotate the Postgres password? {XSS}", 0)
    answer = say("assistant", "Use ALTER ROLE and update the vault entry.", 1, question)
    branch = say("assistant", "Regenerated: rotate it with the ops runbook.", 2, question)
    long = say("user", " ".join(f"paragraph{i} tells a long story." for i in range(700)), 60)
    gone = say("user", "A message the user deleted about the deploy key.", 120)
    deleting.delete_message(owner, gone.pk)
    # An edit recorded the way store.update_message records it (without loading the embedder).
    Message.objects.filter(pk=answer.pk).update(
        edited=True,
        edit_history=[
            {
                "timestamp": (t0 + dt.timedelta(minutes=5)).isoformat(),
                "previous_content": "Use ALTER USER and update the wiki page.",
                "previous_token_count": 9,
            }
        ],
    )
    call = store.store_tool_call(
        owner,
        answer,
        "search_memory",
        {"query": XSS},
        {"results": [XSS]},
        timestamp=t0 + dt.timedelta(minutes=1),
        embed=False,
    )
    big_call = store.store_tool_call(
        owner,
        answer,
        "get_message",
        {"id": long.pk},
        long.content,
        timestamp=t0 + dt.timedelta(minutes=1, seconds=5),
        embed=False,
    )
    root = Topic.objects.create(
        owner=owner,
        level=0,
        order=0,
        label="Databases",
        summary="Postgres operations.",
        keywords=["postgres", "password"],
        period_start=t0,
        period_end=t0 + dt.timedelta(hours=2),
        message_count=3,
        map_x=0.1,
        map_y=0.2,
    )
    leaf = Topic.objects.create(
        owner=owner,
        parent=root,
        level=1,
        order=0,
        label=f"Password rotation {XSS}",
        summary="How the password is rotated.",
        period_start=t0,
        period_end=t0,
        message_count=2,
        map_x=0.5,
        map_y=0.5,
    )
    other_root = Topic.objects.create(
        owner=owner, level=0, order=1, label="Storytelling", message_count=1, map_x=0.9, map_y=0.8
    )
    TopicMembership.objects.create(owner=owner, topic=leaf, message=question, score=0.9)
    TopicMembership.objects.create(owner=owner, topic=leaf, message=answer, score=0.8)
    TopicMembership.objects.create(owner=owner, topic=other_root, message=long, score=0.7)
    seen = {"owner": owner, "kind": "name", "first_seen": t0, "last_seen": t0}
    pg = Entity.objects.create(name="Postgres", normalized="postgres", mention_count=2, **seen)
    vault = Entity.objects.create(name="vault", normalized="vault", mention_count=1, **seen)
    EntityMention.objects.create(owner=owner, entity=pg, message=question)
    EntityMention.objects.create(owner=owner, entity=pg, message=answer)
    EntityMention.objects.create(owner=owner, entity=vault, message=answer)
    EntityEdge.objects.create(owner=owner, source=pg, target=vault, weight=1)
    snapshot = ContextSnapshot.objects.create(
        owner=owner,
        conversation=conversation,
        user_message=question,
        message=answer,
        query=question.content,
        strategy="full",
        reason="4 messages ≤ INDEX_FULL_MAX (50)",
        text=f"Recent Conversation:\n[user]: {XSS}\n",
        budget=10000,
        tokens_by_zone={"recent": 120, "index": 300, "hits": 80},
        hits=[
            {
                "id": question.pk,
                "type": "message",
                "message_id": question.pk,
                "score": 0.0327,
                "vector_rank": 1,
                "keyword_rank": 2,
                "snippet": f"rotate {XSS}",
            }
        ],
        fallbacks=[{"kind": "vector_timeout", "detail": "keyword results only"}],
        tools_offered=[{"type": "function", "function": {"name": "search_memory"}}],
        plan={"strategy": "full"},
        build_ms=12.5,
    )
    run = UpkeepRun.objects.create(owner=owner, kind="topic_upkeep", finished_at=now, ok=True)
    return SimpleNamespace(
        question=question,
        answer=answer,
        branch=branch,
        long=long,
        gone=gone,
        call=call,
        big_call=big_call,
        root=root,
        leaf=leaf,
        other_root=other_root,
        pg=pg,
        vault=vault,
        snapshot=snapshot,
        run=run,
        conversation=conversation,
    )


@pytest.fixture
def mem(owner, conversation):
    return build_memory(owner, conversation)


@pytest.fixture
def owner_client(client, owner):
    client.force_login(owner)
    return client


@pytest.fixture
def stranger_client(client, stranger):
    client.force_login(stranger)
    return client


@pytest.fixture
def life(owner, conversation):
    """A person's life told over five months (tests.memory.test_facts.SCRIPT), its facts drawn."""
    from memory.knowledge import facts
    from tests.memory.test_facts import tell

    messages = tell(owner, conversation)
    facts.extract_messages(owner)
    return messages
