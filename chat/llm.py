"""The LLM client: any OpenAI-compatible endpoint through the `openai` package.

OpenAI, Ollama, vLLM, llama.cpp server and LM Studio all speak this protocol. The client
retries 429 and 5xx with exponential backoff (LLM_MAX_RETRIES) before the first byte; a
stream that breaks after that is reported as a StreamError with what arrived kept by the
caller.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import openai
from django.conf import settings


@lru_cache(maxsize=8)
def _client(base_url: str, api_key: str, timeout: float, max_retries: int) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=base_url or None,
        # Local servers (Ollama, llama.cpp) accept any key; the package insists on one.
        api_key=api_key or "not-needed",
        timeout=timeout,
        max_retries=max_retries,
    )


def client() -> openai.AsyncOpenAI:
    return _client(
        settings.OPENAI_BASE_URL,
        settings.OPENAI_API_KEY,
        settings.LLM_TIMEOUT_SECONDS,
        settings.LLM_MAX_RETRIES,
    )


def model_for(conversation) -> str:
    """The model a conversation talks to: the one the person picked, while it is one of
    CHAT_MODELS; else CHAT_MODEL."""
    picked = getattr(conversation, "model", "") or ""
    return picked if picked in settings.CHAT_MODELS else settings.CHAT_MODEL


class LLMError(Exception):
    """The provider failed; `message` is fit to show a person."""


class ContextTooLong(LLMError):
    """The provider refused the request as longer than the model's context window."""


def is_context_too_long(exc: BaseException) -> bool:
    """OpenAI's 400 `context_length_exceeded`, or the same refusal in another server's words
    (vLLM: "maximum context length", llama.cpp: "exceeds the available context size")."""
    if not isinstance(exc, openai.APIError) or (
        isinstance(exc, openai.APIStatusError) and exc.status_code != 400
    ):
        return False
    if getattr(exc, "code", None) == "context_length_exceeded":
        return True
    text = str(getattr(exc, "message", "") or exc).lower()
    return any(s in text for s in ("maximum context length", "context length", "context size"))


@dataclass
class TextDelta:
    text: str


@dataclass
class RequestedToolCall:
    id: str
    name: str
    arguments_text: str


@dataclass
class RoundEnd:
    """The end of one model response: its tool calls (if any) and token usage."""

    tool_calls: list[RequestedToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, openai.RateLimitError):
        return "The model provider is rate limiting requests (429); try again in a moment."
    if isinstance(exc, openai.APIStatusError):
        return f"The model provider answered with an error ({exc.status_code})."
    if isinstance(exc, openai.APITimeoutError):
        return f"The model provider did not answer within {settings.LLM_TIMEOUT_SECONDS:g} s."
    if isinstance(exc, openai.APIConnectionError):
        return "Could not reach the model provider (connection failed or was cut)."
    return f"The model stream failed: {type(exc).__name__}."


def _api_error(stream, error: Any) -> openai.APIError:
    message = error.get("message") if isinstance(error, dict) else None
    return openai.APIError(
        message if isinstance(message, str) and message else "An error occurred during streaming",
        request=stream.response.request,
        body=error,
    )


async def _chunk_batches(stream) -> AsyncIterator[list[dict[str, Any]]]:
    """The stream's chunks as plain dicts, a list per read from the network.

    The package builds a typed object per chunk and a server-sent-event object per line (a few
    hundred microseconds of the event loop per chunk, thousands of times a second with a
    hundred replies streaming). Here each read is split into its events once, and the caller
    hands on all the text of one read as one piece. Typed chunks are the fallback when the
    package does not expose the response.
    """
    response = getattr(stream, "response", None)
    if response is None or not hasattr(response, "aiter_bytes"):
        async for chunk in stream:
            yield [chunk.model_dump()]
        return
    buffer = b""
    async for block in response.aiter_bytes():
        buffer += block
        if b"\r\n" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        if b"\n\n" not in buffer:
            continue
        *events, buffer = buffer.split(b"\n\n")
        batch = []
        for event in events:
            lines = [line[5:] for line in event.split(b"\n") if line.startswith(b"data:")]
            if not lines:
                continue  # a comment or a keep-alive
            data = b"\n".join(line[1:] if line.startswith(b" ") else line for line in lines)
            if data.startswith(b"[DONE]"):
                if batch:
                    yield batch
                return
            chunk = json.loads(data)
            if not isinstance(chunk, dict):
                continue
            if chunk.get("error"):
                raise _api_error(stream, chunk["error"])
            batch.append(chunk)
        if batch:
            yield batch


def _read_chunk(chunk: dict[str, Any], end: RoundEnd, calls: dict[int, dict[str, str]]) -> str:
    """One chunk's usage, tool-call pieces and finish reason folded into `end` and `calls`;
    returns its text."""
    usage = chunk.get("usage")
    if usage:
        end.usage = {
            "prompt_tokens": usage.get("prompt_tokens") or 0,
            "completion_tokens": usage.get("completion_tokens") or 0,
            "total_tokens": usage.get("total_tokens") or 0,
        }
    text = ""
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        text += delta.get("content") or ""
        for tc in delta.get("tool_calls") or []:
            slot = calls.setdefault(tc.get("index") or 0, {"id": "", "name": "", "arguments": ""})
            if tc.get("id"):
                slot["id"] = tc["id"]
            function = tc.get("function") or {}
            slot["name"] += function.get("name") or ""
            slot["arguments"] += function.get("arguments") or ""
        if choice.get("finish_reason"):
            end.finish_reason = choice["finish_reason"]
    return text


async def stream_chat(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    *,
    model: str | None = None,
    max_tokens: int | None = None,
) -> AsyncIterator[TextDelta | RoundEnd]:
    """Stream one model response: TextDelta pieces (all the text of one network read as one
    piece), then exactly one RoundEnd.

    max_tokens: the most the reply may take (the answer's share of the context window).
    Raises ContextTooLong when the provider says the prompt is over the model's window, and
    LLMError if the request otherwise fails or the stream breaks.
    """
    # The messages and tools go as extra_body, sent as they are: the package would otherwise
    # walk every message and tool schema against its typed parameters first (milliseconds of
    # the event loop per request with a memory index in the system prompt).
    body: dict[str, Any] = {"messages": messages}
    if tools:
        body["tools"] = tools
    kwargs: dict[str, Any] = {
        "model": model or settings.CHAT_MODEL,
        "messages": [],
        "stream": True,
        "stream_options": {"include_usage": True},
        "extra_body": body,
    }
    if max_tokens:
        kwargs["max_tokens"] = max_tokens
    calls: dict[int, dict[str, str]] = {}
    end = RoundEnd()
    try:
        stream = await client().chat.completions.create(**kwargs)
        try:
            async for batch in _chunk_batches(stream):
                text = "".join([_read_chunk(chunk, end, calls) for chunk in batch])
                if text:
                    yield TextDelta(text)
        finally:
            await stream.close()
    except openai.OpenAIError as exc:
        if is_context_too_long(exc):
            raise ContextTooLong(
                f"The prompt was longer than the model's context window (the provider said: "
                f"{str(getattr(exc, 'message', exc))[:300]})."
            ) from exc
        raise LLMError(describe_error(exc)) from exc
    except (OSError, ValueError) as exc:  # a cut connection can surface below the openai layer
        raise LLMError(describe_error(exc)) from exc
    if end.finish_reason is None:
        # Without a finish reason the connection closed early: the reply is cut short.
        raise LLMError("The model stream ended before the reply was complete (connection cut).")
    end.tool_calls = [
        RequestedToolCall(id=c["id"] or f"call_{i}", name=c["name"], arguments_text=c["arguments"])
        for i, c in sorted(calls.items())
    ]
    yield end
