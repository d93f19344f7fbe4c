"""The first pages a newcomer sees: sign-in, and an empty conversation list after it."""

from __future__ import annotations

import pytest
from django.urls import reverse


@pytest.mark.django_db
def test_the_home_page_asks_to_sign_in(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    page = client.get(response["Location"])
    assert b"Sign in" in page.content


def test_after_sign_in_the_conversation_list_is_empty(client, owner):
    response = client.post(reverse("login"), {"username": "owner", "password": "owner-pass-123"}, follow=True)
    assert response.status_code == 200
    assert b"No conversations yet" in response.content


def test_a_wrong_password_is_told_plainly(client, owner):
    response = client.post(reverse("login"), {"username": "owner", "password": "nope"})
    assert b"didn't match" in response.content


def test_the_admin_lists_memory_models(admin_client):
    response = admin_client.get("/admin/memory/message/")
    assert response.status_code == 200
