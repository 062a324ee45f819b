"""A counter for long steps (an evaluation's examples, emulator runs): `[3/12] eval line 17`.

On a terminal the counter rewrites one line in place and ends it at the last step; anywhere
else (a CI log, a pipe, a test) each step is a plain line of its own, no carriage returns.
It writes to stderr, so a command's own output on stdout (a table, JSON) stays as it was.

    progress = Progress(len(examples), "eval")
    for i, ex in enumerate(examples, 1):
        ...
        progress.step(i, f"line {ex.line}")
"""

from __future__ import annotations

import sys
from typing import TextIO


class Progress:
    def __init__(self, total: int, what: str, stream: TextIO | None = None, tty: bool | None = None):
        self.total, self.what = total, what
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self._open = False        # a terminal line not yet ended

    def line(self, i: int, detail: str = "") -> str:
        return f"[{i}/{self.total}] {self.what}" + (f" {detail}" if detail else "")

    def step(self, i: int, detail: str = "") -> None:
        text = self.line(i, detail)
        if self.tty:
            self.stream.write("\r\x1b[K" + text)
            self._open = i < self.total
            if not self._open:
                self.stream.write("\n")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """A line of its own (a failure) that does not land in the middle of the counter."""
        if self._open:
            self.stream.write("\n")
            self._open = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False
