"""The explorer's query-string filters, read by a Django form that never fails on what a person
typed.

A bad value becomes a message shown on the page and that filter is left out (the others still
apply); it never turns into a 500 or a 404. Ids of objects that are not the user's are reported
as unknown, exactly like ids that do not exist. The parameter names are the links' own
(`conversation`, `topic`, `role`, `tool`, `start`, `end`, `q`, `kind`, `granularity`, `until`,
`period`), so every link made before keeps working.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.http import QueryDict
from django.utils import timezone

from memory.models import Conversation, Role, Topic

GRANULARITIES = ("day", "week", "month")
ROLES = ", ".join(Role.values)


@dataclass
class Filters:
    conversation: Conversation | None = None
    topic: Topic | None = None
    role: str | None = None
    tool: str | None = None
    start: dt.date | None = None
    end: dt.date | None = None
    q: str = ""
    kind: str | None = None
    granularity: str = "day"
    until: dt.date | None = None
    period: dt.date | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def start_dt(self) -> dt.datetime | None:
        return day_start(self.start) if self.start else None

    @property
    def end_dt(self) -> dt.datetime | None:
        """Exclusive upper bound: the end date is included in full."""
        if not self.end:
            return None
        try:
            return day_start(self.end + dt.timedelta(days=1))
        except OverflowError:
            return None

    @property
    def active(self) -> bool:
        return any(
            [
                self.conversation,
                self.topic,
                self.role,
                self.tool,
                self.start,
                self.end,
                self.q,
                self.kind,
            ]
        )


def day_start(day: dt.date) -> dt.datetime:
    return timezone.make_aware(dt.datetime.combine(day, dt.time.min))


# Messages echo at most 40 characters of what was typed ("%(value).40s"); the template escapes it.


class DayField(forms.Field):
    """A date as YYYY-MM-DD (what the date inputs send)."""

    widget = forms.DateInput

    def __init__(self, *, label: str, **kwargs: Any) -> None:
        message = f"“%(value).40s” is not a date for {label}; use YYYY-MM-DD. The filter was ignored."
        super().__init__(required=False, error_messages={"invalid": message}, **kwargs)

    def to_python(self, value: Any) -> dt.date | None:
        value = (value or "").strip()
        if not value:
            return None
        try:
            if len(value) <= 10:
                return dt.date.fromisoformat(value)
        except ValueError:
            pass
        raise ValidationError(self.error_messages["invalid"], code="invalid", params={"value": value})


class OwnedField(forms.ModelChoiceField):
    """One of the user's own objects by id (the queryset is set per user by the form)."""

    def __init__(self, what: str, everything: str) -> None:
        message = f"No {what} “%(value).40s” in your memory; showing {everything}."
        super().__init__(queryset=None, required=False, error_messages={"invalid_choice": message})

    def to_python(self, value: Any) -> Any:
        return super().to_python((value or "").strip())


class FilterForm(forms.Form):
    conversation = OwnedField("conversation", "all conversations")
    topic = OwnedField("topic", "all topics")
    role = forms.ChoiceField(
        choices=Role.choices,
        required=False,
        error_messages={
            "invalid_choice": f"“%(value).40s” is not a role; choose one of {ROLES}. The filter was ignored."
        },
    )
    tool = forms.CharField(
        max_length=100,
        required=False,
        error_messages={"max_length": "That tool name is longer than any tool's; the filter was ignored."},
    )
    start = DayField(label="“from”")
    end = DayField(label="“to”")
    q = forms.CharField(required=False)
    kind = forms.CharField(required=False)
    granularity = forms.ChoiceField(
        choices=[(g, g) for g in GRANULARITIES],
        required=False,
        error_messages={
            "invalid_choice": f"“%(value).40s” is not one of {', '.join(GRANULARITIES)}; showing day."
        },
    )
    until = DayField(label="“until”")
    period = DayField(label="the period")

    def __init__(self, data: QueryDict, *, user, fields: set[str]) -> None:
        super().__init__(data)
        for name in set(self.fields) - fields:
            del self.fields[name]
        if "conversation" in self.fields:
            self.fields["conversation"].queryset = Conversation.objects.owned_by(user)
        if "topic" in self.fields:
            self.fields["topic"].queryset = Topic.objects.owned_by(user)
        self.notes: list[str] = []

    def clean_q(self) -> str:
        return self.cleaned_data["q"][:500]

    def clean_kind(self) -> str:
        return self.cleaned_data["kind"][:32]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        start, end = data.get("start"), data.get("end")
        if start and end and start > end:
            self.notes.append("“from” is after “to”; the dates were swapped.")
            data["start"], data["end"] = end, start
        return data

    def filters(self) -> Filters:
        """The filters that passed, and a message for each that did not."""
        self.is_valid()
        errors = [message for name in self.fields for message in self.errors.get(name, [])]
        values = {name: self.cleaned_data.get(name) for name in self.fields}
        values = {name: value for name, value in values.items() if value not in (None, "")}
        return Filters(**values, errors=errors + self.notes)


def parse_filters(params: QueryDict, user, allowed: set[str]) -> Filters:
    """The filters of `allowed` read from a query string (see FilterForm)."""
    return FilterForm(params, user=user, fields=allowed).filters()
