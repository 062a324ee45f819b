"""Output files of every generator command, written so that no command destroys a file.

Two rules, each in one place:

* `write_atomic(path, data)`: a file appears whole or not at all (a temporary file in the
  same directory, then a rename).  An existing path that is not a regular file is never
  renamed over: a FIFO or a character device (a pipe to another program, `/dev/null`,
  `/dev/stdout`) is written through, as `cat > PATH` would; a directory, a block device or
  a socket is refused in one line.
* `refuse_output_is_input(outputs, inputs)`: before any work, an output path that names the
  same regular file as one of the command's inputs (same device and inode, so a hard link,
  a symbolic link or another spelling of the path counts) is refused in one line.

Every failure is a CactError (one line; the command line prints it and exits 2).
"""

from __future__ import annotations

import os
import stat
import tempfile

from generator.errors import CactError


def kind(mode: int) -> str:
    """What a file of this st_mode is, in words ("a directory", "a FIFO", ...)."""
    for test, words in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return words
    return "not a regular file"


def _umask_mode() -> int:
    """The permissions open() would give a new file (0666 less the umask)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _write_through(path: str, data: bytes) -> None:
    """Write `data` into an existing FIFO or character device (no create, no rename)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise CactError(f"cannot write {path}: {exc.strerror}") from None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise CactError(f"cannot write {path}: {exc.strerror}") from None
    finally:
        os.close(fd)


def write_atomic(path: str, data: bytes, mode: int | None = None) -> None:
    """Write `data` to `path`, whole or not at all (module docstring); `mode`: the new file's
    permissions (default: what open() would give, 0666 less the umask)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise CactError(f"cannot write {path}: {exc.strerror}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
            _write_through(path, data)
            return
        raise CactError(f"cannot write {path}: it is {kind(st.st_mode)}, not a regular file "
                        "(name the file to write)")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".part")
    except OSError as exc:
        raise CactError(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, _umask_mode() if mode is None else mode)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise CactError(f"cannot write {path}: {exc.strerror}") from None


def _identity(path) -> tuple[int, int] | None:
    """(device, inode) of an existing regular file, else None."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def refuse_output_is_input(outputs, inputs) -> None:
    """CactError when an output names the same regular file as an input.  `outputs` and
    `inputs` map how the user named each path (an option such as "--json", or "the archive")
    to the path, as a dict or as (label, path) pairs; None paths are skipped."""
    seen = {}
    for label, path in (inputs.items() if isinstance(inputs, dict) else inputs):
        ident = None if path is None else _identity(path)
        if ident is not None:
            seen.setdefault(ident, (label, path))
    for label, path in (outputs.items() if isinstance(outputs, dict) else outputs):
        ident = None if path is None else _identity(path)
        if ident in seen:
            in_label, in_path = seen[ident]
            raise CactError(f"{label} {os.fspath(path)} is the same file as the input {in_label} "
                            f"{os.fspath(in_path)}: writing it would destroy the input; choose another "
                            "output path")
