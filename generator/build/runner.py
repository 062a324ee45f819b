"""Running a built engine on its board: the one place that knows how.

A board file says how a binary runs (boards.run_command): natively (the host: no emulator),
under qemu-user (`qemu-mips -cpu 24Kc ...`, Linux boards; a `file`-placement board takes the
archive as `--archive PATH`), or under qemu-system (bare metal): on a semihosting console the
arguments are the `-append` command line, on a UART console they are one line on the
emulator's standard input (boards.stdin_line), and a `partition` board has its archive image
loaded at the partition's address.  BoardRunner puts that together for one (board, binary,
archive) and runs it, so every caller (golden check=, evaluate, scons run=1, the bench
drivers, the tests) runs an engine the same way and fails the same way: a missing emulator,
a binary that does not start, and a run past its timeout are each one CactError line naming
the board, the command and the fix.  A timed-out run is killed with everything it started
(its own process group), so nothing is left behind.

    run = BoardRunner("rpi-zero", "build/rpi-zero/needle")
    proc = run.run(["--query", "weather in Oslo"], timeout=60)   # a CompletedProcess
"""

from __future__ import annotations

import os
import signal
import subprocess

from generator.build import boards
from generator.errors import CactError

DEFAULT_TIMEOUT = 600.0        # seconds: a watch under qemu-system answers slowly


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the run and everything it started (it leads its own process group), and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass


class BoardRunner:
    """A built engine (`binary`) on `board` (a board dict or name), with its archive when the
    board's placement keeps it outside the binary (`file`: the archive file, given as
    `--archive PATH`; none: no such argument, for another program or an engine reading
    $NEEDLE_ARCHIVE; `partition`: the archive image, loaded at the partition)."""

    def __init__(self, board: dict | str, binary: str | os.PathLike, archive: str | os.PathLike | None = None):
        self.board = boards.load(board) if isinstance(board, str) else board
        self.binary = os.fspath(binary)
        self.archive = os.fspath(archive) if archive is not None else None
        self.name = self.board["name"]
        self.uart = self.board.get("console") == "uart"

    # ---- the command ---------------------------------------------------------------------
    @property
    def emulator(self) -> list[str]:
        """The emulator's command (empty: the binary runs natively)."""
        return list(self.board["emulator"]["command"])

    def command(self, args=(), emulator_flags=()) -> list[str]:
        """The argv that runs the binary with `args` on the board: the emulator's command,
        the binary, the archive argument the placement needs, the arguments (a UART board
        reads them on standard input instead: stdin_line).  emulator_flags go right after the
        emulator's name (e.g. `-d in_asm -D LOG`, `-icount shift=0`)."""
        args = [os.fspath(a) if isinstance(a, os.PathLike) else str(a) for a in (args or ())]
        if self.board["os"] == "linux" and self.archive is None:
            # no archive file: another program (a test driver), or an engine that links its
            # archive or maps it from $NEEDLE_ARCHIVE
            cmd = self.emulator + [self.binary] + args
        else:
            cmd = boards.run_command(self.board, self.binary, [] if self.uart else args, self.archive)
        if emulator_flags:
            if not self.emulator:
                raise CactError(f"board {self.name} runs natively: no emulator to give "
                                f"{' '.join(emulator_flags)}")
            cmd = cmd[:1] + list(emulator_flags) + cmd[1:]
        return cmd

    def stdin_line(self, args=()) -> str | None:
        """What a UART board reads as its command line (None for the other boards)."""
        return boards.stdin_line(self.board, [str(a) for a in (args or ())])

    def shell_line(self, args=(), emulator_flags=()) -> str:
        """command() as one shell line (a UART board's arguments are not in it)."""
        return boards.shell_line(self.command(args, emulator_flags))

    def missing(self) -> str | None:
        """One line naming what cannot run here (no emulator on this board, or the emulator's
        package not installed), or None."""
        return boards.missing_emulator(self.board)

    def _input(self, args, stdin):
        """The run's standard input: a UART board's command line first (unless args is None:
        nothing sent for it), then `stdin`."""
        if not self.uart or args is None:
            return stdin
        line = self.stdin_line(args)
        if stdin is None:
            return line
        return (line.encode() + stdin) if isinstance(stdin, bytes) else line + stdin

    def _start(self, cmd: list[str], **kw) -> subprocess.Popen:
        problem = self.missing()
        if problem:
            raise CactError(problem)
        try:
            return subprocess.Popen(cmd, start_new_session=True, **kw)
        except OSError as exc:
            raise CactError(f"board {self.name}: cannot run {cmd[0]}: {exc.strerror}"
                            + (" (build the engine first)" if cmd[0] == self.binary else "")) from None

    @staticmethod
    def _env(env):
        return None if env is None else {**os.environ, **{k: str(v) for k, v in env.items()}}

    # ---- running -------------------------------------------------------------------------
    def run(self, args=(), stdin=None, timeout: float | None = DEFAULT_TIMEOUT, cwd=None, env=None,
            check: bool = False, text: bool = True, emulator_flags=(), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout_hint: str = "give it more time (timeout) or a smaller request") -> subprocess.CompletedProcess:
        """Run the binary with `args` (a UART board: sent as its command line on standard
        input, then `stdin`; args=None sends no command line) and wait for it.  env: variables
        added to this process's environment.  text: str output (undecodable bytes replaced),
        else bytes.  stdout, stderr: captured (PIPE) unless given (a file, None: this
        process's own).  check: a non-zero exit is a CactError with the engine's last error line.
        A run past `timeout` seconds is killed (with whatever it started) and is a CactError."""
        cmd = self.command(args if args is not None else (), emulator_flags)
        data = self._input(args, stdin)
        if text and isinstance(data, bytes):
            data = data.decode()
        elif not text and isinstance(data, str):
            data = data.encode()
        proc = self._start(cmd, stdin=subprocess.PIPE if data is not None else None, stdout=stdout,
                           stderr=stderr, cwd=cwd, env=self._env(env),
                           **({"text": True, "errors": "replace"} if text else {}))
        try:
            stdout, stderr = proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            raise CactError(f"board {self.name}: the engine did not answer in {timeout:g} s: "
                            f"{boards.shell_line(cmd)}; {timeout_hint}") from None
        except BaseException:
            _kill_group(proc)
            proc.wait()
            raise
        done = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
        if check and done.returncode:
            raise CactError(f"board {self.name}: {self.binary} {' '.join(map(str, args or ()))} "
                            f"failed: {engine_error(done, self.uart)}")
        return done

    def popen(self, args=(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
              text: bool = True, cwd=None, env=None, emulator_flags=(), **kw) -> subprocess.Popen:
        """Start the binary and return at once (a service, a UART session): the caller talks
        to it and ends it (stop()).  A UART board's command line is written first."""
        cmd = self.command(args if args is not None else (), emulator_flags)
        proc = self._start(cmd, stdin=stdin, stdout=stdout, stderr=stderr, cwd=cwd, env=self._env(env),
                           **({"text": True, "errors": "replace"} if text else {}), **kw)
        line = self._input(args, None)
        if line is not None and proc.stdin is not None:
            proc.stdin.write(line if text else line.encode())
            proc.stdin.flush()
        return proc

    @staticmethod
    def stop(proc: subprocess.Popen, timeout: float = 10) -> None:
        """End a popen() run and everything it started.  (Once the run itself has been reaped
        its group id may be another's: then nothing is killed.)"""
        if proc.poll() is None:
            _kill_group(proc)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f:
                try:
                    f.close()
                except OSError:
                    pass


def engine_error(proc: subprocess.CompletedProcess, uart: bool = False) -> str:
    """`engine exit N: <its last error line>` (a UART board has one stream, standard output:
    its last line before "needle: exit N")."""
    text = (proc.stdout if uart else proc.stderr) or ""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.startswith("needle: exit")]
    return f"engine exit {proc.returncode}" + (f": {lines[-1]}" if lines else "")


