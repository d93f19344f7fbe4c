"""A scripted OpenAI-compatible LLM server for tests, demos and benchmarks.

The real `openai` client talks to it over HTTP (`OPENAI_BASE_URL=http://127.0.0.1:PORT/v1`):
chat completions with SSE streaming and tool calls, and a small deterministic embeddings
endpoint. It is the only thing in Recollect's tests that stands in for something real.

What a request gets is decided, in order, by:

1. a script registered for a marker (`POST /_scripts {"match": "...", "steps": [...]}`): when
   the newest user message contains the marker, the next step of that script answers;
2. otherwise the global queue (`POST /_scripts {"steps": [...]}` without "match");
3. otherwise the default: a reply that quotes the user's message word by word, and, after a
   tool result, a reply that summarises it (a request for a conversation's title: its first
   five words).

A step is a dict:

    {"text": "Hello there", "delay": 0.02}         stream the text word by word
    {"tool_calls": [{"name": "vector_search", "arguments": {"query": "x"}}]}
    {"tool_calls": [{"name": "x", "arguments": "{not json"}]}   raw (broken) argument text
    {"status": 429} / {"status": 500}               an error response (OpenAI error JSON)
    {"text": "partial answer", "drop_after": 3}     stream 3 words, then cut the connection
    {"hang": 30}                                    accept, then say nothing for 30 s
    {"words": 50, "delay": 0.02}                    stream `words` numbered words (benchmarks)
    {"context_length_exceeded": true}               400 context_length_exceeded, whatever the size
    {"text": "a b c d", "pause_after": 2, "gate": "g"}   stream 2 words, then wait (at most
                                                    "gate_timeout" s, default 60) until the gate
                                                    is opened: `POST /_gates {"open": "g"}`

With a context window set (`POST /_config {"context_window": 4096}`, or `State.context_window`),
a request whose prompt plus max_tokens is over it gets OpenAI's 400 `context_length_exceeded`
before any script is consulted. The prompt is counted roughly as the app counts it (cl100k
tokens of each message's content and tool calls plus 4 for its framing, the tools' JSON, 3 for
priming: `count_prompt`), and each request records its count.

`"repeat": true` on a script keeps its last step for every later request. Every request is
recorded (`GET /_requests`) with the times each token was written (`emitted`), so a benchmark
can measure the relay delay of the server under test. `POST /_reset` clears everything.

Run standalone: `python -m bench.llm_server --port 8911 [--delay 0.02]`.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memory.tokens import count_tokens


@dataclass
class Script:
    steps: deque
    repeat: bool = False
    last: dict | None = None

    def next_step(self) -> dict | None:
        if self.steps:
            self.last = self.steps.popleft()
            return self.last
        return self.last if self.repeat else None


@dataclass
class State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    scripts: dict[str, Script] = field(default_factory=dict)
    queue: deque = field(default_factory=deque)
    requests: list[dict] = field(default_factory=list)
    default_delay: float = 0.0
    keep_requests: int = 10_000
    context_window: int | None = None  # tokens; None: any prompt is accepted
    gates: dict[str, threading.Event] = field(default_factory=dict)

    def reset(self) -> None:
        with self.lock:
            for gate in self.gates.values():
                gate.set()  # a stream still waiting goes on
            self.gates.clear()
            self.scripts.clear()
            self.queue.clear()
            self.requests.clear()
            self.context_window = None

    def add_script(self, match: str | None, steps: list[dict], repeat: bool) -> None:
        with self.lock:
            if match:
                self.scripts[match] = Script(deque(steps), repeat)
            else:
                self.queue.extend(steps)

    def pick_step(self, last_user_text: str) -> dict | None:
        with self.lock:
            for match, script in self.scripts.items():
                if match in last_user_text:
                    step = script.next_step()
                    if step is not None:
                        return step
            if self.queue:
                return self.queue.popleft()
        return None

    def gate(self, name: str) -> threading.Event:
        with self.lock:
            return self.gates.setdefault(name, threading.Event())

    def record(self, entry: dict) -> None:
        with self.lock:
            self.requests.append(entry)
            if len(self.requests) > self.keep_requests:
                del self.requests[: len(self.requests) - self.keep_requests]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def count_prompt(body: dict) -> int:
    """A request's prompt in cl100k tokens, counted as OpenAI documents for its chat models."""
    total = 3
    for m in body.get("messages") or []:
        total += 4 + count_tokens(_text_of(m.get("content")))
        if m.get("tool_calls"):
            total += count_tokens(json.dumps(m["tool_calls"], ensure_ascii=False))
    for tool in body.get("tools") or []:
        total += count_tokens(json.dumps(tool, ensure_ascii=False))
    return total


def context_length_error(window: int | None, prompt: int, completion: int) -> dict:
    """OpenAI's error body for a prompt over the model's window."""
    return {
        "error": {
            "message": (
                f"This model's maximum context length is {window or 4096} tokens. However, you "
                f"requested {prompt + completion} tokens ({prompt} in the messages, {completion} "
                "in the completion). Please reduce the length of the messages or completion."
            ),
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def default_step(messages: list[dict]) -> dict:
    """What the server says when no script applies: deterministic, derived from the input. A
    request whose system message asks for a title gets the first words the user said."""
    system = _text_of(messages[0].get("content")) if messages and messages[0].get("role") == "system" else ""
    if "title" in system.lower() and len(messages) == 2:
        said = _text_of(messages[1].get("content")).removeprefix("User:").split("\n")[0]
        return {"text": " ".join(said.split()[:5]).rstrip(".,;:!?")}
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        result = _text_of(last.get("content"))
        return {"text": f"The memory tool answered: {result[:300]}"}
    user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    said = _text_of(user.get("content"))
    words = said.split()
    quoted = " ".join(words[:40]) + (" …" if len(words) > 40 else "")
    return {"text": f"You said: {quoted}"}


def fake_embedding(text: str, dimensions: int) -> list[float]:
    """A deterministic unit vector from the text's words (similar texts share words)."""
    vec = [0.0] * dimensions
    for word in text.lower().split():
        h = int.from_bytes(hashlib.sha1(word.encode()).digest()[:4], "big")
        vec[h % dimensions] += 1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class Handler(BaseHTTPRequestHandler):
    server_version = "RecollectTestLLM/1.0"
    protocol_version = "HTTP/1.1"

    @property
    def state(self) -> State:
        return self.server.state  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    # --- plumbing ------------------------------------------------------------------------------

    def _read_json(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw or b"{}")

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        if self.path.startswith("/_requests"):
            with self.state.lock:
                payload = list(self.state.requests)
            self._send_json(200, payload)
        elif self.path.rstrip("/") in {"/v1/models", "/models"}:
            self._send_json(200, {"object": "list", "data": [{"id": "test-llm", "object": "model"}]})
        else:
            self._send_json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        try:
            body = self._read_json()
        except json.JSONDecodeError:
            self._send_json(400, {"error": {"message": "body is not JSON"}})
            return
        path = self.path.rstrip("/")
        if path == "/_scripts":
            self.state.add_script(body.get("match"), list(body.get("steps") or []), bool(body.get("repeat")))
            self._send_json(200, {"ok": True})
        elif path == "/_config":
            with self.state.lock:
                if "context_window" in body:
                    window = body["context_window"]
                    self.state.context_window = int(window) if window else None
            self._send_json(200, {"ok": True})
        elif path == "/_gates":
            self.state.gate(str(body.get("open"))).set()
            self._send_json(200, {"ok": True})
        elif path == "/_reset":
            self.state.reset()
            self._send_json(200, {"ok": True})
        elif path.endswith("/chat/completions"):
            self._chat(body)
        elif path.endswith("/embeddings"):
            self._embeddings(body)
        else:
            self._send_json(404, {"error": {"message": "not found"}})

    # --- endpoints -----------------------------------------------------------------------------

    def _embeddings(self, body: dict) -> None:
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        dims = int(body.get("dimensions") or 384)
        data = [
            {"object": "embedding", "index": i, "embedding": fake_embedding(str(t), dims)}
            for i, t in enumerate(texts or [])
        ]
        self._send_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": body.get("model", "test"),
                "usage": {"prompt_tokens": 0, "total_tokens": 0},
            },
        )

    def _chat(self, body: dict) -> None:
        arrived = time.time()
        messages = body.get("messages") or []
        last_user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        last_user_text = _text_of(last_user.get("content"))
        tokens = count_prompt(body)
        completion = int(body.get("max_tokens") or 0)
        window = self.state.context_window
        if window is not None and tokens + completion > window:
            step = {"context_length_exceeded": True, "over_window": True}
        else:
            step = self.state.pick_step(last_user_text) or default_step(messages)
        entry = {
            "id": uuid.uuid4().hex,
            "arrived": arrived,
            "model": body.get("model"),
            "stream": bool(body.get("stream")),
            "messages": messages,
            "tools": [t.get("function", {}).get("name") for t in body.get("tools") or []],
            "last_user": last_user_text,
            "step": step,
            "emitted": [],
            "status": 400 if step.get("context_length_exceeded") else step.get("status", 200),
            "prompt_tokens": tokens,
            "max_tokens": body.get("max_tokens"),
            "context_window": window,
        }
        self.state.record(entry)

        if step.get("context_length_exceeded"):
            self._send_json(400, context_length_error(window, tokens, completion))
            return

        if "status" in step:
            status = int(step["status"])
            self._send_json(
                status,
                {
                    "error": {
                        "message": step.get("message", f"scripted {status}"),
                        "type": "scripted",
                        "code": status,
                    }
                },
                headers={"retry-after-ms": str(step.get("retry_after_ms", 10))},
            )
            return
        if step.get("hang"):
            time.sleep(float(step["hang"]))
        delay = float(step.get("delay", self.state.default_delay))
        if step.get("words"):
            words = [f"w{i} " for i in range(int(step["words"]))]
        else:
            text = step.get("text", "")
            words = [w + " " for w in text.split(" ")] if text else []
            if words:
                words[-1] = words[-1][:-1]
        tool_calls = step.get("tool_calls") or []
        if not body.get("stream"):
            self._chat_whole(body, "".join(words), tool_calls)
            return

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        cid = "chatcmpl-" + entry["id"][:12]
        drop_after = step.get("drop_after")
        pause_after = step.get("pause_after") if step.get("gate") else None

        def chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> None:
            payload = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": int(arrived),
                "model": body.get("model") or "test-llm",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if usage is None else [],
            }
            if usage is not None:
                payload["usage"] = usage
            self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
            self.wfile.flush()

        try:
            chunk({"role": "assistant", "content": ""})
            for i, word in enumerate(words):
                if drop_after is not None and i >= int(drop_after):
                    # Cut the TCP connection mid-stream, as a crashed provider would.
                    self.wfile.flush()
                    self.connection.shutdown(2)
                    self.close_connection = True
                    return
                if pause_after is not None and i == int(pause_after):
                    self.state.gate(step["gate"]).wait(float(step.get("gate_timeout", 60)))
                if delay:
                    time.sleep(delay)
                chunk({"content": word})
                entry["emitted"].append(time.time())
            for index, call in enumerate(tool_calls):
                args = call.get("arguments", {})
                args_text = args if isinstance(args, str) else json.dumps(args)
                call_id = call.get("id") or f"call_{uuid.uuid4().hex[:12]}"
                # Arguments arrive in pieces, as real providers send them.
                half = len(args_text) // 2
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": call["name"], "arguments": args_text[:half]},
                            }
                        ]
                    }
                )
                chunk({"tool_calls": [{"index": index, "function": {"arguments": args_text[half:]}}]})
            chunk({}, finish="tool_calls" if tool_calls else "stop")
            prompt_tokens = sum(len(_text_of(m.get("content")).split()) for m in messages)
            if (body.get("stream_options") or {}).get("include_usage"):
                chunk(
                    {},
                    usage={
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": len(words),
                        "total_tokens": prompt_tokens + len(words),
                    },
                )
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            entry["client_gone"] = True
        self.close_connection = True

    def _chat_whole(self, body: dict, text: str, tool_calls: list[dict]) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.get("id") or f"call_{uuid.uuid4().hex[:12]}",
                    "type": "function",
                    "function": {
                        "name": c["name"],
                        "arguments": c["arguments"]
                        if isinstance(c["arguments"], str)
                        else json.dumps(c["arguments"]),
                    },
                }
                for c in tool_calls
            ]
        self._send_json(
            200,
            {
                "id": "chatcmpl-" + uuid.uuid4().hex[:12],
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model") or "test-llm",
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if tool_calls else "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": 0,
                    "completion_tokens": len(text.split()),
                    "total_tokens": 0,
                },
            },
        )


class LLMServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512

    def __init__(self, address: tuple[str, int], delay: float = 0.0) -> None:
        super().__init__(address, Handler)
        self.state = State(default_delay=delay)

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"


def start_in_thread(port: int = 0, delay: float = 0.0) -> LLMServer:
    """Start a server on 127.0.0.1 (port 0: any free port) in a daemon thread."""
    server = LLMServer(("127.0.0.1", port), delay=delay)
    threading.Thread(target=server.serve_forever, name="test-llm", daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8911)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds between streamed words")
    args = parser.parse_args()
    server = LLMServer((args.host, args.port), delay=args.delay)
    print(f"test LLM listening on {server.base_url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
