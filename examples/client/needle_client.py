"""A small client for `needle --serve` (docs/serve.md), standard library only.

    from needle_client import NeedleClient, NeedleError

    with NeedleClient.spawn(["build/host/needle", "--serve", "--tools", "demo/tools.json"]) as c:
        answer = c.query("What is the weather in Lagos?")
        print(answer["envelope"]["function_calls"])

    with NeedleClient.connect("/var/run/needle.sock") as c:   # a service on a Unix socket
        ...

Every method sends one request line and returns the answer object; an answer with
"ok": false raises NeedleError, whose message is the service's one-line error (the answer
itself is in .answer).  Protocol version 2: a query starts a fresh session unless
continue_=True.
"""

from __future__ import annotations

import json
import socket
import subprocess
from typing import Any, BinaryIO, Optional, Sequence

PROTOCOL = 3


class NeedleError(Exception):
    """An answer with "ok": false: str(e) is the service's error line, e.answer the answer."""

    def __init__(self, answer: dict):
        super().__init__(answer.get("error", "the service answered ok:false without an error"))
        self.answer = answer


class NeedleClient:
    """One connection to `needle --serve`: a Unix socket, or the service's own pipe."""

    def __init__(self, reader: BinaryIO, writer: BinaryIO, closer=None):
        self._reader, self._writer, self._closer = reader, writer, closer
        self._next_id = 0

    # ---- connecting ----
    @classmethod
    def connect(cls, path: str, timeout: Optional[float] = 120.0) -> "NeedleClient":
        """A connection to a service listening on the Unix socket `path` (`--socket PATH`)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except OSError:
            sock.close()
            raise
        f = sock.makefile("rwb")

        def close():
            f.close()
            sock.close()
        return cls(f, f, close)

    @classmethod
    def spawn(cls, command: Sequence[str]) -> "NeedleClient":
        """Start `command` (e.g. ["needle", "--serve", "--tools", "tools.json"]) and talk to it
        over its standard input and output; close() ends its input and waits for it."""
        proc = subprocess.Popen([str(a) for a in command], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

        def close():
            proc.stdin.close()
            try:
                proc.wait(timeout=60)
            finally:
                proc.stdout.close()
        client = cls(proc.stdout, proc.stdin, close)
        client.process = proc
        return client

    # ---- requests ----
    def request(self, **fields: Any) -> dict:
        """Send one request object (the keys of docs/serve.md) and return its answer; an id is
        added and checked when the request has none."""
        if "id" not in fields:
            self._next_id += 1
            fields["id"] = self._next_id
        self._writer.write(json.dumps(fields, ensure_ascii=False).encode("utf-8") + b"\n")
        self._writer.flush()
        line = self._reader.readline()
        if not line.endswith(b"\n"):
            raise ConnectionError("the service closed the connection without an answer")
        answer = json.loads(line.decode("utf-8"))
        if answer.get("id", fields["id"]) != fields["id"]:
            raise ConnectionError(f"answer for id {answer.get('id')!r}, expected {fields['id']!r}")
        if answer.get("ok") is not True:
            raise NeedleError(answer)
        return answer

    def query(self, text: str, tools: Optional[list] = None, continue_: bool = False, **keys: Any) -> dict:
        """A tool-calling query: a fresh session unless continue_ (then appended to this one).
        keys: system, date, max_new, force_call, raw, plain_markers, id."""
        fields = {"query": text, **keys}
        if tools is not None:
            fields["tools"] = tools
        if continue_:
            fields["continue"] = True
        return self.request(**fields)

    def results(self, value: Any, **keys: Any) -> dict:
        """What the last answer's calls returned: the next turn of the same session."""
        return self.request(results=value, **keys)

    def prompt(self, text: str, **keys: Any) -> dict:
        """Raw text appended to the session (keys: max_new, id)."""
        return self.request(prompt=text, **keys)

    def reset(self) -> dict:
        """Empty the session."""
        return self.request(reset=True)

    def close(self) -> None:
        if self._closer:
            closer, self._closer = self._closer, None
            closer()

    def __enter__(self) -> "NeedleClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__":   # python3 needle_client.py NEEDLE TOOLS.json "a query"
    import sys
    if len(sys.argv) != 4:
        sys.exit("usage: needle_client.py NEEDLE TOOLS.json QUERY")
    with NeedleClient.spawn([sys.argv[1], "--serve", "--tools", sys.argv[2]]) as c:
        try:
            print(json.dumps(c.query(sys.argv[3])["envelope"]["function_calls"]))
        except NeedleError as e:
            sys.exit(f"needle: {e}")
