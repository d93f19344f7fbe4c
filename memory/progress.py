"""A small progress bar for long commands: a live bar on a terminal, a line every few seconds
otherwise (so CI logs show progress without drowning in it)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int | None, label: str, stream: TextIO | None = None,
                 every_seconds: float = 2.0) -> None:
        self.total = total
        self.label = label
        self.done = 0
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = 0.2 if self.tty else every_seconds
        self.started = time.perf_counter()
        self._last = 0.0

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        if now - self._last >= self.every:
            self._last = now
            self._print()

    def _line(self) -> str:
        elapsed = time.perf_counter() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        if self.total:
            frac = min(1.0, self.done / self.total)
            bar = "#" * int(frac * 30)
            eta = (self.total - self.done) / rate if rate > 0 else 0
            return (f"{self.label} [{bar:<30}] {self.done:,}/{self.total:,} {frac:6.1%} "
                    f"{rate:,.1f}/s eta {eta:,.0f}s")
        return f"{self.label} {self.done:,} {rate:,.1f}/s {elapsed:,.0f}s"

    def _print(self) -> None:
        if self.tty:
            self.stream.write("\r" + self._line())
        else:
            self.stream.write(self._line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        self._print()
        if self.tty:
            self.stream.write("\n")
        self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
