"""Every command block of README.md and docs/*.md runs as written, and prints what the text shows.

The blocks are found in the text itself (no list of them is kept anywhere); the convention they
follow is docs/testing.md's "Documentation conventions":

* a block a reader is meant to run is fenced ```sh, written from the repository root after
  `./setup`;
* a ```text block that follows it with nothing but blank lines between is what it prints;
* a ```sh block whose first line is `# not run by the tests: REASON` is not run (a router, a Pi,
  sudo, the package index); the reason is required;
* every other fence names its language (```text, ```c, ```json, ```python, ```toml, ```ini,
  ```shell for a script saved as a file): a bare ``` fails here, so a new block must choose.

How a block runs.  On its own, in a fresh copy of the checkout's files (`git ls-files`, tracked and
untracked-but-not-ignored, so the working tree is what is tested), with `bash -euo pipefail`,
stdin empty, stdout and stderr together, a server the block leaves running killed when it ends.
No build cache: a build retrieved from one prints no memory report, and a reader's does.
Around it, what the text assumes a reader has:

* `.venv` is the interpreter running the tests, and it is activated (its bin/ first on PATH,
  as README's "the venv's `scons`, or activate `.venv` first" allows);
* the reader's own files the text names are there: `my.cact` (a copy of the demo archive) and
  `my-tools.json` (a copy of demo/tools.json);
* `/tmp/` in a command is a directory of this test's own (so parallel sessions never share a
  file), fresh for each block;
* `~` is a home of the test's own: `~/.venvs/needle-fw` is needle-fw installed from a wheel
  built offline (host_tests/test_packaging.py's fixtures), as docs/install.md's `pip install .`
  leaves it;
* SCONSFLAGS adds `-j2` to every scons (the suite's own builds run two jobs too).

How output is compared.  Each line is compared with trailing white space dropped, blank lines at
either end ignored.  The text writes what may vary (timings, tok/s, sizes that change with the
code, build lines) as `...`: a line that is only `...` matches any number of lines (none too),
and `...` inside a line matches any characters.  In the output, the copy's path is written `.`
and this test's stand-in for /tmp is written `/tmp` again, before comparing.

test_doc_queries.py asks more of the demo queries the blocks show: that each is answered with a
call of one of the demo's tools.

Tiers (one per block, from what its commands do): a block that runs only Python is quick; one
that builds for the host (or compiles with cc) is in none; one that builds for a board or runs
an emulator is emulator; a benchmark, a profile, an evaluation or `board=all` is slow.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from host_tests.scons_run import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "# not run by the tests:"
FENCE = re.compile(r"^(\s*)(```+|~~~+)(.*)$")
# the reader's own files the text names, and what stands in for them
USER_FILES = {"my.cact": "demo/needle2-demo.cact", "my-tools.json": "demo/tools.json"}
TIMEOUT = 900            # seconds a block may take


@dataclass
class Block:
    doc: Path
    line: int            # the line of the opening fence
    lang: str
    text: str
    expected: str | None = None     # the ```text block right after, if any
    followed_at: int = 0            # the index of the first non-blank line after the block

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def reason(self) -> str | None:
        """The marker's reason ('' when the marker has none), or None when the block runs."""
        first = self.text.split("\n", 1)[0].strip()
        return first[len(MARKER):].strip() if first.startswith(MARKER) else None


def fenced_blocks(doc: Path) -> list[Block]:
    """Every fenced block of the file, in order, with its language (the info string's first
    word, '' when the fence names none)."""
    lines = doc.read_text(encoding="utf-8").split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.groups()
        j = i + 1
        while j < len(lines) and not (lines[j].strip().startswith(fence[0] * len(fence))
                                      and not lines[j].strip().strip(fence[0])):
            j += 1
        assert j < len(lines), f"{doc.relative_to(ROOT)}:{i + 1}: a fence that is never closed"
        body = [ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[i + 1:j]]
        k = j + 1
        while k < len(lines) and not lines[k].strip():
            k += 1
        lang = info.strip().split(" ")[0] if info.strip() else ""
        blocks.append(Block(doc, i + 1, lang, "\n".join(body), followed_at=k))
        i = j + 1
    for a, b in zip(blocks, blocks[1:]):
        if a.lang == "sh" and b.lang == "text" and a.followed_at == b.line - 1:
            a.expected = b.text
    return blocks


def all_blocks() -> list[Block]:
    return [b for doc in DOCS for b in fenced_blocks(doc)]


def sh_blocks() -> list[Block]:
    return [b for b in all_blocks() if b.lang == "sh"]


def tier(block: Block) -> str | None:
    """quick, None (host builds), emulator or slow, from the block's commands."""
    text = "\n".join(ln.split(" #")[0] for ln in block.text.split("\n"))   # not the comments
    if re.search(r"bench=1|bench\.profile|board=all|eval=1|generator eval", text):
        return "slow"
    scons = re.findall(r"(?:^|[\s/])scons\b([^\n]*)", text)
    if re.search(r"\bqemu-|\brun=1|check=", text) or any(
            "-h" not in args.split() and "board=host" not in args for args in scons):
        return "emulator"
    if scons or re.search(r"(^|\s)(cc|make|cmake)\s|\./build/", text):
        return None
    return "quick"


def marked(block: Block):
    t = tier(block)
    return pytest.param(block, id=block.where, marks=[getattr(pytest.mark, t)] if t else [])


# ---- the convention -----------------------------------------------------------------------------

@pytest.mark.quick
def test_the_docs_have_command_blocks_and_every_fence_names_its_language():
    blocks = all_blocks()
    assert len(sh_blocks()) >= 20, "the extraction found too few ```sh blocks: is the parser broken?"
    bare = [b.where for b in blocks if not b.lang]
    assert not bare, (f"fences without a language: {', '.join(bare)}: a command block is ```sh, its "
                      "output ```text, other code ```c, ```json, ```python, ... (docs/testing.md, "
                      "\"Documentation conventions\")")


@pytest.mark.quick
def test_every_unrun_block_says_why():
    missing = [b.where for b in sh_blocks() if b.reason == ""]
    assert not missing, f"{', '.join(missing)}: `{MARKER}` needs a reason after it"
    misplaced = [b.where for b in sh_blocks() if b.reason is None and MARKER in b.text]
    assert not misplaced, f"{', '.join(misplaced)}: the marker must be the block's first line"


@pytest.mark.quick
def test_a_text_block_after_a_marked_block_is_not_taken_for_checked_output():
    """Shown output is checked only when its block runs: an unrun block with output would read
    as checked when it is not."""
    wrong = [b.where for b in sh_blocks() if b.reason is not None and b.expected is not None]
    assert not wrong, f"{', '.join(wrong)}: not run by the tests, yet followed by its output"


@pytest.mark.quick
def test_the_comparison_rule():
    assert matches("a ... c\n...\nlast", "a b b c\nx\ny\nlast\n")
    assert matches("...\nlast", "last")
    assert not matches("a\nlast", "a\nb\nlast")
    assert not matches("a 1 c", "a 2 c")


# ---- running them ----------------------------------------------------------------------------------

def matches(expected: str, actual: str) -> bool:
    """The shown output against what the block printed: `...` alone on a line is any number of
    lines, `...` in a line any characters, trailing white space and blank edge lines ignored."""
    def lines(s):
        out = [ln.rstrip() for ln in s.split("\n")]
        while out and not out[0]:
            out.pop(0)
        while out and not out[-1]:
            out.pop()
        return out
    pattern = ""
    for ln in lines(expected):
        if ln.strip() == "...":
            pattern += r"(?:[^\n]*\n)*?"
        else:
            pattern += ".*?".join(re.escape(part) for part in ln.split("...")) + r"\n"
    return re.fullmatch(pattern, "\n".join(lines(actual)) + "\n", re.S) is not None


def checkout_files() -> list[str]:
    proc = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        pytest.skip("not a git checkout: the blocks run in a copy of its files")
    return [f for f in proc.stdout.split("\0") if f and (ROOT / f).is_file()]


class Sandbox:
    """The fresh copy each block runs in, at one path, and what a reader has around it."""

    def __init__(self, base: Path):
        self.base = base
        self.root = base / "needle-fw"
        self.tmp = base / "tmp"
        self.home = base / "home"
        self.files = checkout_files()

    def fresh(self, block: Block, installed_venv) -> None:
        """installed_venv() makes docs/install.md's venv, for a block that uses it."""
        for d in (self.root, self.tmp):
            if d.exists():
                shutil.rmtree(d)
            d.mkdir(parents=True)
        for rel in self.files:
            dst = self.root / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dst)
        (self.root / ".venv").symlink_to(Path(sys.prefix))
        for name, src in USER_FILES.items():
            shutil.copy2(ROOT / src, self.root / name)
        if "~/.venvs/needle-fw" in block.text and not (self.home / ".venvs" / "needle-fw").exists():
            (self.home / ".venvs").mkdir(parents=True, exist_ok=True)
            (self.home / ".venvs" / "needle-fw").symlink_to(installed_venv())
        self.home.mkdir(exist_ok=True)

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "SCONSFLAGS")}
        real_home = Path(os.environ.get("HOME", "/root"))
        # zig cc's compiled C libraries stay in the user's cache (minutes to rebuild)
        env.setdefault("ZIG_GLOBAL_CACHE_DIR", str(Path(os.environ.get("XDG_CACHE_HOME", real_home / ".cache")) / "zig"))
        env.update(HOME=str(self.home), VIRTUAL_ENV=str(self.root / ".venv"),
                   PATH=f"{self.root / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
                   SCONSFLAGS="-j2")
        return env

    def script(self, block: Block) -> str:
        return re.sub(r"(?<![\w./-])/tmp/", f"{self.tmp}/", block.text)

    def run(self, block: Block, installed_venv) -> str:
        self.fresh(block, installed_venv)
        log = self.base / "output.txt"       # a file, not a pipe: a server left running keeps no read open
        with open(log, "w") as f:
            proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", self.script(block)], cwd=self.root,
                                    env=self.env(), stdin=subprocess.DEVNULL, stdout=f,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                rc = f"still running after {TIMEOUT} s"
            finally:   # whatever the block started in the background ends with it
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        out = log.read_text(errors="replace").replace(str(self.tmp), "/tmp").replace(str(self.root), ".")
        assert rc == 0, (f"{block.where}: the block exits {rc}:\n{block.text}\n"
                         f"---- its output (the end) ----\n{out[-4000:]}")
        return out


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Sandbox:
    return Sandbox(tmp_path_factory.mktemp("docs"))


from host_tests.test_packaging import venv, wheel  # noqa: E402,F401  (docs/install.md's venv)


@pytest.mark.parametrize("block", [marked(b) for b in sh_blocks() if b.reason is None])
def test_the_block_runs_and_prints_what_the_text_shows(sandbox, block, request):
    out = sandbox.run(block, lambda: request.getfixturevalue("venv"))
    if block.expected is not None:
        assert matches(block.expected, out), (
            f"{block.where}: the text shows\n{block.expected}\n---- the block printed ----\n{out[-4000:]}")
