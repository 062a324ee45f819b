"""`needle --serve` under a careless user and a hostile client (issue 41, items 5, 6, 14, 16,
23, 24, 27): an archive file changed under the running service, an empty --socket path,
clients that hold the single-connection service, ids after a bad byte or in an over-long
line, CRLF at the size limit, and error messages that tell the truth about keys and options.

The archive tests run a host engine built for archive placement `file` (a copy of
boards/host.toml with `placement = "file"`, non-PIE so the absolute `needle_cact` links), on
a copy of the archive in a tmp dir.  No test asserts a duration: timeouts are generous upper
bounds that only end a hung test.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from host_tests.scons_run import env_with_boards

from test_cli_robustness import needle, one_line  # noqa: F401  (needle: the host engine, built once)
from test_serve import Service, answers_of, error, exchange, ok, request, serve_pipe

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
LINE_MAX = 64 * 1024 + 16384        # NEEDLE_SERVE_LINE_MAX on the Linux boards (docs/serve.md, "Size limit")
SIGBUS_STATUS = -7                  # subprocess's returncode for a death by SIGBUS


# ---- a host engine that maps its archive from a file -------------------------------------

@pytest.fixture(scope="module")
def needle_file(tmp_path_factory, board_runner):
    """The runner of the tiny golden engine for a host board with archive placement `file`
    (run natively, like the host: the tests give --archive themselves)."""
    root = tmp_path_factory.mktemp("serve-file")
    boards_dir = root / "boards"
    shutil.copytree(ROOT / "boards", boards_dir)
    text = (boards_dir / "host.toml").read_text()
    text = text.replace('name = "host"', 'name = "host-file"')
    text = text.replace('placement = "linked"', 'placement = "file"')
    text = text.replace("arch_flags = []", 'arch_flags = ["-fno-pie", "-no-pie"]')   # needle_cact is absolute
    assert 'placement = "file"' in text and "-no-pie" in text
    (boards_dir / "host-file.toml").write_text(text)
    env = env_with_boards(boards_dir, root)     # scons runs in a child process: it reads the copy too
    build = root / "build"
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", "-j2", "board=host-file", f"archive={TINY}",
                           f"build={build}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    return board_runner("host", build / "needle")


class PipeService:
    """`needle --serve --archive A` on pipes, one request and its answer at a time."""

    def __init__(self, engine, archive: Path):
        self.proc = engine.popen(["--serve", "--archive", archive], text=False)

    def ask(self, req: bytes) -> dict:
        self.proc.stdin.write(req + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line.endswith(b"\n"), (line, self.proc.poll())
        return json.loads(line)

    def end(self) -> tuple[int, str, bytes]:
        """(exit status, standard error, what else it wrote) once it ended by itself."""
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        rest = self.proc.stdout.read()
        status = self.proc.wait(timeout=120)
        return status, self.proc.stderr.read().decode(), rest


def archive_copy(tmp_path: Path) -> Path:
    path = tmp_path / "model.cact"
    shutil.copyfile(TINY, path)
    return path


def assert_archive_refusal(answer: dict, status: int, stderr: str, *words: str) -> None:
    """One error answer naming the change and the fix, one log line, exit 3: never SIGBUS."""
    assert status != SIGBUS_STATUS, "killed by SIGBUS"
    assert status == 3, (status, stderr)
    error(answer, "archive", *words)
    assert stderr.count("\n") == 1 and stderr.startswith("needle: error: archive"), stderr
    for w in words:
        assert w in stderr, stderr


# ---- 5, 6: the archive changed under a running service -----------------------------------

def test_truncated_archive_is_an_answer_and_exit_3_not_sigbus(needle_file, tmp_path):
    archive = archive_copy(tmp_path)
    svc = PipeService(needle_file, archive)
    ok(svc.ask(request(prompt="hello", max_new=3)))
    os.truncate(archive, 4096)                       # what `scp -O` over it does first
    answer = svc.ask(request(prompt="hello", max_new=3, id=2))
    status, stderr, rest = svc.end()
    assert rest == b""
    assert answer["id"] == 2
    assert_archive_refusal(answer, status, stderr, "changed on disk", "4096 bytes now", "exit 3",
                           "renaming a new file into place")


def test_archive_rewritten_in_place_same_size_same_mtime_is_refused(needle_file, tmp_path):
    archive = archive_copy(tmp_path)
    svc = PipeService(needle_file, archive)
    ok(svc.ask(request(prompt="hello", max_new=3)))
    before = os.stat(archive)
    data = bytearray(archive.read_bytes())
    for i in range(len(data) // 2, len(data)):      # other weights, the same size
        data[i] ^= 0x55
    with open(archive, "r+b") as fh:                 # in place: the same inode
        fh.write(data)
    os.utime(archive, ns=(before.st_atime_ns, before.st_mtime_ns))   # the modification time put back
    after = os.stat(archive)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    answer = svc.ask(request(prompt="hello", max_new=3))
    status, stderr, _ = svc.end()
    assert_archive_refusal(answer, status, stderr, "rewritten in place", "renaming a new file into place")


def test_archive_renamed_into_place_restarts_the_service_on_it(needle_file, tmp_path):
    """The documented update: the running service answers its next request with a line saying
    it restarts, exits 3 (procd/systemd start it again), and the new start serves the file."""
    archive = archive_copy(tmp_path)
    svc = PipeService(needle_file, archive)
    first = ok(svc.ask(request(prompt="hello", max_new=3)))
    new = tmp_path / "model.cact.new"
    shutil.copyfile(TINY, new)
    os.rename(new, archive)
    answer = svc.ask(request(prompt="hello", max_new=3, id="after"))
    status, stderr, _ = svc.end()
    assert answer["id"] == "after"
    assert_archive_refusal(answer, status, stderr, "was replaced", "on the new file")
    again = serve_pipe(needle_file, [request(prompt="hello", max_new=3)], "--archive", archive)
    assert ok(again[0])["text"] == first["text"]


def test_archive_truncated_during_answers_never_kills_by_sigbus(needle_file, tmp_path):
    """Truncated while requests are being answered: whether the check before an answer sees
    it or the engine touches a page past the new end (SIGBUS, caught), the output is whole
    JSON lines ending with the archive's error answer, one log line, and exit 3."""
    archive = archive_copy(tmp_path)
    proc = needle_file.popen(["--serve", "--archive", archive], text=False)
    requests = b"".join(b'{"reset":true}\n{"id":%d,"prompt":"hello there","max_new":250}\n' % i
                        for i in range(5000))

    def feed():
        try:
            os.write(proc.stdin.fileno(), requests)
        except OSError:          # the service ended first
            pass
        proc.stdin.close()

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    first = proc.stdout.readline()
    os.truncate(archive, 0)
    rest = proc.stdout.read()
    status = proc.wait(timeout=300)
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    proc.stdout.close()
    a = answers_of(first + rest)
    assert_archive_refusal(a[-1], status, stderr, "exit 3")
    assert all(x["ok"] for x in a[:-1]), a[:-1]


def test_archive_change_ends_the_socket_service_too(needle_file, tmp_path):
    archive = archive_copy(tmp_path)
    svc = Service(needle_file, tmp_path / "needle.sock", "--archive", archive)
    try:
        with svc.connect() as c:
            ok(exchange(c, request(prompt="hello", max_new=3))[0])
            os.truncate(archive, 100)
            answer = exchange(c, request(prompt="hello", max_new=3))[0]
        status = svc.proc.wait(timeout=120)
        stderr = svc.proc.stderr.read().decode()
        assert_archive_refusal(answer, status, stderr, "100 bytes now")
    finally:
        svc.stop()


# ---- 14: --socket "" ---------------------------------------------------------------------

def test_empty_socket_path_is_refused(needle):
    proc = needle.run(["--serve", "--socket", ""], stdin="", timeout=60)
    one_line(proc, 2, '--socket ""', "empty", "/var/run/needle.sock")
    assert proc.stdout == ""


@pytest.mark.parametrize("args, words", [
    (["--serve", "--idle-timeout", "5"], ["--idle-timeout goes with --serve --socket"]),
    (["--serve", "--socket", "/nonexistent/x.sock", "--idle-timeout", "-1"], ["--idle-timeout wants whole seconds"]),
    (["--serve", "--socket", "/nonexistent/x.sock", "--idle-timeout", "1.5"], ["--idle-timeout wants whole seconds"]),
])
def test_idle_timeout_usage_errors(needle, args, words):
    proc = needle.run(args, stdin="", timeout=60)
    one_line(proc, 2, *words)


# ---- 16: one client cannot hold the service ----------------------------------------------

@pytest.mark.parametrize("sends", [b"", b'{"prompt": "half a request'])
def test_an_idle_client_is_dropped_and_the_next_one_served(needle, tmp_path, sends):
    svc = Service(needle, tmp_path / "needle.sock", "--idle-timeout", "1")
    try:
        idle = svc.connect()
        idle.sendall(sends)
        with svc.connect() as other:     # waits in the queue until the idle one is dropped
            assert exchange(other, request(reset=True, id="b"))[0] == {"id": "b", "ok": True, "reset": True}
        with idle.makefile("rb") as f:   # the idle client was told why, then closed
            goodbye = json.loads(f.readline())
            assert f.readline() == b""
        error(goodbye, "no whole request line in 1 s", "--idle-timeout")
        idle.close()
        assert svc.proc.poll() is None
    finally:
        svc.stop()


def test_a_client_that_does_not_read_its_answers_is_dropped(needle, tmp_path):
    svc = Service(needle, tmp_path / "needle.sock", "--idle-timeout", "1")
    try:
        hog = svc.connect()
        flood = b"{}\n" * 400_000        # 1.2 MB of requests whose answers (~150 bytes each) nobody reads

        def send():
            try:
                hog.sendall(flood)
            except OSError:              # dropped by the service
                pass

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        with svc.connect() as other:
            assert exchange(other, request(reset=True, id=2))[0] == {"id": 2, "ok": True, "reset": True}
        sender.join(timeout=120)
        assert not sender.is_alive()
        hog.close()
        assert svc.proc.poll() is None
    finally:
        svc.stop()


# ---- 23: the id is echoed when it came before the error ----------------------------------

def test_id_echoed_before_invalid_utf8_and_in_an_over_long_line(needle):
    a = serve_pipe(needle, [
        b'{"id": 5, "prompt": "caf\xc3"}',
        b'{"id": "long", "prompt": "' + b"a" * (LINE_MAX + 10) + b'"}',
        b'{"prompt": "caf\xc3", "id": 6}',                            # the id after the bad byte
        b'{"id": "x\xff", "prompt": "a"}',                             # the bad byte in the id
        b'{"prompt": "' + b"a" * (LINE_MAX - 20) + b'", "id": 123456789}',   # the id cut by the limit
    ])
    assert error(a[0], "not valid UTF-8")["id"] == 5
    assert error(a[1], "longer than", "skipped")["id"] == "long"
    assert "id" not in error(a[2], "not valid UTF-8")
    assert "id" not in error(a[3], "not valid UTF-8")
    assert "id" not in error(a[4], "longer than")


# ---- 24: CRLF at the size limit ----------------------------------------------------------

def padded_reset(size: int) -> bytes:
    """{"reset":true} padded with JSON whitespace to `size` bytes."""
    head = b'{"id":1,"reset":true'
    return head + b" " * (size - len(head) - 1) + b"}"


def test_a_line_of_the_maximum_length_ending_in_crlf_is_served(needle):
    proc = needle.run(["--serve"], text=False, timeout=120,
                      stdin=padded_reset(LINE_MAX) + b"\r\n" + padded_reset(LINE_MAX) + b"\n"
                      + padded_reset(LINE_MAX + 1) + b"\r\n" + padded_reset(LINE_MAX) + b"\r")
    assert proc.returncode == 0 and proc.stderr == b""
    a = answers_of(proc.stdout)
    assert a[0] == a[1] == a[3] == {"id": 1, "ok": True, "reset": True}
    assert error(a[2], f"longer than {LINE_MAX} bytes")["id"] == 1


# ---- 27: messages that tell the truth ----------------------------------------------------

def test_keys_are_shown_escaped_and_request_keys_not_cli_flags(needle):
    a = serve_pipe(needle, [
        b'{"\\u0000": 1}',
        b'{"a\\"b\\\\c\\n": 1}',
        request(query="q", tools=[], force_call=True, id=1),
        request(query="set a timer", tools=json.loads((ROOT / "demo" / "tools.json").read_text()), max_new=3),
    ])
    assert 'unknown key "\\u0000"' in error(a[0])["error"]
    assert 'unknown key "a\\"b\\\\c\\u000a"' in error(a[1])["error"]
    for answer, key in ((a[2], '"force_call"'), (a[3], '"max_new"')):
        msg = error(answer)["error"]
        assert key in msg and "--" not in msg, msg
