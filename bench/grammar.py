"""What constrained decoding (the tool-call grammar) costs per generated token, per board.

    python -m bench.grammar --board watch-m4 [--board host ...] [--archive A] [--out DIR]

builds each board once with the demo tools built in (`scons tools=demo/tools.json`, under
DIR, default build/bench-grammar) and measures, side by side in one run, the demo query's
constrained turn against the model's own decoding of the same number of tokens:

* constrained: `needle --query Q --force-call --max-new 64`; its envelope gives G, the tokens
  chosen (`<|im_end|>` included), and `grammar_checks`;
* unconstrained: `needle --query Q --raw --max-new G`: the same prompt, the same G greedy
  choices and G - 1 steps at the same positions, so the model does the same work (an
  uncounted `--ids` run checks that the model really made G tokens: greedy decoding stops
  early only at EOS; then the model's part of the constrained run is extrapolated from the
  tokens it made, and the table says so);
* `needle --query Q --raw --max-new 1`, so the model's own cost per token is
  (I_raw(G) - I_raw(1)) / (G - 1): a step, its arg-max and the streamed text;
* the grammar's overhead is I_constrained - I_raw(G), in total and per token (/ G).  It holds
  everything the constrained turn does that plain decoding does not: the grammar checks of
  the rejected and the chosen candidates (`grammar_checks`) with their shortest-completion
  bounds, the ordered passes over the logits that collect candidates (in place of one
  arg-max), the confidence softmax over the full vocabulary for each call token, the
  envelope in place of the streamed text, and the one-time set-up before the first token:
  the compile of the tool list into the grammar at start, the marker look-ups, the shortest
  call.  That set-up is also measured on its own, as the difference of two runs that stop
  right after it with one error line (`--force-call --max-new 1`: "a call needs at least N
  tokens", against `--raw --max-new max_seq`: "does not fit", both after rendering and
  tokenising the same prompt), and the per-token overhead is given without it too.  Once the
  built-in tools' grammar is compiled at build time that set-up shrinks to the look-ups, and
  the two per-token figures meet; the bench needs no change for it.

How it is measured (deterministic figures, no timed assertion):

* bare-metal boards (os = "none") under qemu-system-arm, and Linux boards under qemu-user
  (one thread, `--threads 1`): guest instructions of each whole process, counted from QEMU's
  `-d in_asm,exec,nochain` log (bench/host.py count_log; the same count as
  count_instructions_of, which does not keep the program's output).  A log is a few GB in a
  temporary directory, deleted as soon as it is counted.  Bare metal repeats to the
  instruction; on Linux boards the constrained count moves by some tens of instructions from
  run to run, because the envelope prints the turn's clock timings and their digits vary;
* host: wall time, best of 7 runs, the constrained CLI turn and an unconstrained `--serve`
  `raw` request of G tokens interleaved, one thread: the envelope's `grammar_ms` (choosing the
  tokens) and `decode_ms` per token, `decode_ms - grammar_ms` as the model's part (the
  confidence softmax and the envelope stay in it), and the raw request's `decode_ms` per
  token as the model's own.  The compile happens before `decode_ms` starts, so no set-up
  figure here.

The static RAM of the tool-calling code is read from the linked image with pyelftools: its
STT_OBJECT symbols in writable sections (.data, .bss), grouped by the object file they come
from, not by name: a local symbol belongs to the object of the STT_FILE symbol before it
(checked against that object's own symbol table), a global one to the object in <build>/obj
that defines it.  Per object (needle_tool_grammar, needle_tool_call, needle_tool_prompt,
needle_retrieval, needle_tools (generated), main, and any other object whose name says tool
or grammar): data, bss, read-only objects and code (STT_FUNC sizes, .text), and the total.
Only what the link kept is counted (bare metal links with --gc-sections); string literals
have no symbol and are not counted.

Prints a table and, as the last line, one JSON object per board (a JSON list).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.host import DEMO_QUERY, DEMO_TOOLS, count_log
from bench.snapshot import image_of
from generator.build import boards
from generator.build.runner import BoardRunner
from generator.errors import CactError

ROOT = Path(__file__).resolve().parent.parent
TINY_GOLDEN = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
MAX_NEW = 64
REPEATS = 7
# the tool-calling objects, reported even when absent; any other object named like them
# (a grammar compiled at build time, say) is reported too
TOOL_OBJECTS = ("needle_grammar_schema", "needle_grammar_regex", "needle_tool_grammar", "needle_tool_call",
                "needle_envelope", "needle_tool_prompt", "needle_json_scan", "needle_retrieval", "needle_tools", "main")
TOOLISH = re.compile(r"tool|grammar")
CONSTRAINED = ["--query", DEMO_QUERY, "--force-call", "--max-new", str(MAX_NEW)]


def raw_args(n: int, ids: bool = False) -> list[str]:
    return ["--query", DEMO_QUERY, "--ids" if ids else "--raw", "--max-new", str(n)]


# ---- building and running ---------------------------------------------------------------

def build(board: str, out: Path, archive: str | None) -> Path:
    cmd = [sys.executable, "-m", "SCons", "-Q", "-j1", f"board={board}", f"build={out}", f"tools={DEMO_TOOLS}"] + \
          ([f"archive={archive}"] if archive else [])
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        lines = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()
        raise CactError(f"building {board} failed: {lines[-1]}")
    return out


class Target:
    """One built board and the runner of its engine (natively, under qemu-user or under
    qemu-system-arm; a UART board reads its arguments on standard input)."""

    def __init__(self, board: dict, where: Path, archive: str | None):
        self.board, self.where, self.archive = board, where, archive
        self.binary = where / ("needle.elf" if board["os"] == "none" else "needle")
        self.runner = BoardRunner(board, self.binary, image_of(board, where, archive))
        # qemu-user's log interleaves threads, and the output does not depend on them
        self.extra = ["--threads", "1"] if board["os"] == "linux" else []

    def run(self, args: list[str], log: str | None = None) -> subprocess.CompletedProcess:
        """One run (log: QEMU's translation log there, qemu-user and -system alike)."""
        flags = ["-d", "in_asm,exec,nochain", "-D", log] if log else []
        return self.runner.run(list(args) + self.extra, cwd=ROOT, timeout=3600, emulator_flags=flags)

    def checked(self, args: list[str], log: str | None = None) -> subprocess.CompletedProcess:
        proc = self.run(args, log)
        if proc.returncode:
            raise CactError(f"{self.binary} {shlex.join(args)} failed: {proc.stderr.strip() or proc.returncode}")
        return proc

    def count(self, args: list[str], ok: bool = True) -> tuple[int, subprocess.CompletedProcess]:
        """Guest instructions of one whole run, and the run (ok=False: it must fail)."""
        with tempfile.TemporaryDirectory(prefix="needle-grammar-") as tmp:
            log = os.path.join(tmp, "exec.log")
            proc = self.checked(args, log) if ok else self.run(args, log)
            if not ok and not proc.returncode:
                return -1, proc
            return count_log(log), proc


def envelope(stdout: str) -> dict:
    """The envelope: the last JSON line (a UART board's console adds a line after it)."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    try:
        env = json.loads(lines[-1])
    except (ValueError, IndexError):
        raise CactError(f"the constrained turn printed no envelope: {stdout.strip()[:200]!r}") from None
    if "generated_tokens" not in env or "grammar_checks" not in env:
        raise CactError("the envelope has no generated_tokens or grammar_checks (docs/grammar.md §5)")
    return env


def raw_tokens(target: Target, n: int) -> int:
    """Tokens the unconstrained run of --max-new n really makes (an uncounted --ids run: the
    same greedy decoding, its ids printed)."""
    out = target.checked(raw_args(n, ids=True)).stdout
    ids = [ln for ln in out.splitlines() if re.fullmatch(r"\d+(,\d+)*", ln.strip())]
    return len(ids[0].split(",")) if ids else 0


def max_seq(where: Path) -> int | None:
    m = re.search(r"#define\s+NEEDLE_MAX_SEQ\s+(\d+)", (where / "gen" / "needle_model.h").read_text())
    return int(m.group(1)) if m else None


# ---- the arithmetic ---------------------------------------------------------------------

def split_costs(constrained: float, raw: float, raw_1: float, generated: int, raw_made: int,
                setup: float | None = None) -> dict:
    """The constrained run's cost split into the model's and the grammar's.

    constrained: the constrained turn, `generated` tokens chosen; raw: the unconstrained run
    asked for as many, which made `raw_made` (fewer only when the model chose EOS); raw_1: the
    unconstrained run of one token; setup: the one-time part (None: not measured).  The
    model's part of the constrained run is raw when raw_made == generated, else extrapolated
    from raw_1 at the per-token cost."""
    if raw_made < 2:
        raise CactError(f"the unconstrained run made {raw_made} token(s) (the model chose EOS): "
                        "no per-token cost of the model to compare with")
    if not 0 < raw_made <= generated:
        raise CactError(f"the unconstrained run made {raw_made} tokens, the constrained turn {generated}")
    model = (raw - raw_1) / (raw_made - 1)
    model_part = raw if raw_made == generated else raw_1 + (generated - 1) * model
    total = constrained - model_part
    out = {
        "model_per_token": model,
        "grammar_total": total,
        "grammar_per_token": total / generated,
        "grammar_vs_model": total / generated / model if model > 0 else None,
        "grammar_setup": setup,
        "grammar_per_token_after_setup": None if setup is None else (total - setup) / generated,
        "extrapolated": raw_made != generated,
    }
    return out


# ---- static RAM and code of the tool-calling objects ------------------------------------

def _kind(elf, shndx) -> str | None:
    """'text', 'data', 'bss' or 'rodata' for a linked symbol's section (None: not loaded)."""
    if not isinstance(shndx, int):
        return None
    sec = elf.get_section(shndx)
    flags = sec["sh_flags"]
    if not flags & 0x2:                      # SHF_ALLOC
        return None
    if flags & 0x4:                          # SHF_EXECINSTR
        return "text"
    if flags & 0x1:                          # SHF_WRITE: RAM
        return "bss" if sec["sh_type"] == "SHT_NOBITS" else "data"
    return "rodata"


def _object_symbols(path: Path) -> tuple[set[str], set[str]]:
    """(global, local) names an object file defines (functions and data)."""
    from elftools.elf.elffile import ELFFile
    glob, loc = set(), set()
    with open(path, "rb") as fh:
        symtab = ELFFile(fh).get_section_by_name(".symtab")
        for s in symtab.iter_symbols() if symtab else []:
            if s["st_info"]["type"] not in ("STT_OBJECT", "STT_FUNC") or s["st_shndx"] == "SHN_UNDEF":
                continue
            (loc if s["st_info"]["bind"] == "STB_LOCAL" else glob).add(s.name)
    return glob, loc


def tool_memory(image: Path, obj_dir: Path, wanted: tuple[str, ...] = TOOL_OBJECTS,
                pattern: re.Pattern | None = TOOLISH) -> dict:
    """Static data and code of the objects `wanted` (and those whose name matches `pattern`)
    in the linked `image`, each symbol attributed to the object file it comes from."""
    from elftools.elf.elffile import ELFFile
    stems = sorted({p.stem for p in obj_dir.glob("*.o")})
    chosen = list(wanted) + [s for s in stems if s not in wanted and pattern and pattern.search(s)]
    defs = {s: _object_symbols(obj_dir / f"{s}.o") for s in chosen if s in stems}
    owner = {name: s for s, (glob, _) in defs.items() for name in glob}
    blank = {"data": 0, "bss": 0, "rodata": 0, "text": 0}
    objects = {s: dict(blank, symbols={}) if s in defs else None for s in chosen}
    seen: set[tuple[str, int, int]] = set()
    image_ram = 0
    with open(image, "rb") as fh:
        elf = ELFFile(fh)
        symtab = elf.get_section_by_name(".symtab")
        if symtab is None:
            raise CactError(f"{image} has no symbol table (stripped): cannot attribute its memory")
        source = None
        for s in symtab.iter_symbols():
            kind, bind = s["st_info"]["type"], s["st_info"]["bind"]
            if kind == "STT_FILE":
                source = Path(s.name).stem
                continue
            if kind not in ("STT_OBJECT", "STT_FUNC") or s["st_size"] == 0:
                continue
            where = _kind(elf, s["st_shndx"])
            if where is None:
                continue
            if kind == "STT_OBJECT" and where in ("data", "bss"):
                image_ram += s["st_size"]
            if bind == "STB_LOCAL":
                obj = source if source in defs and s.name in defs[source][1] else None
            else:
                obj = owner.get(s.name)
            key = (obj, s["st_value"] & ~1, s["st_size"])         # aliases count once (Thumb bit off)
            if obj is None or key in seen or (kind == "STT_FUNC") != (where == "text"):
                continue
            seen.add(key)
            o = objects[obj]
            o[where] += s["st_size"]
            if where in ("data", "bss"):
                o["symbols"][s.name] = s["st_size"]
    for o in objects.values():
        if o is not None:    # the largest RAM symbols, largest first
            o["symbols"] = dict(sorted(o["symbols"].items(), key=lambda kv: (-kv[1], kv[0]))[:6])
    total = {k: sum(o[k] for o in objects.values() if o) for k in blank}
    total["ram"] = total["data"] + total["bss"]
    return {"objects": objects, "total": total, "image_ram": image_ram}


# ---- the two kinds of board -------------------------------------------------------------

def measure_counted(target: Target) -> dict:
    i_con, proc = target.count(CONSTRAINED)
    env = envelope(proc.stdout)
    g = env["generated_tokens"]
    made = raw_tokens(target, g)
    i_raw, _ = target.count(raw_args(g))
    i_raw1, _ = target.count(raw_args(1))
    # the one-time set-up: two runs that stop right after it, with one error line each
    setup = None
    seq = max_seq(target.where)
    if seq:
        i_fail_con, p1 = target.count(["--query", DEMO_QUERY, "--force-call", "--max-new", "1"], ok=False)
        i_fail_raw, p2 = target.count(raw_args(seq), ok=False)
        if p1.returncode == 2 and p2.returncode == 2 and i_fail_con >= i_fail_raw:   # each stopped with its line
            setup = i_fail_con - i_fail_raw
    costs = split_costs(i_con, i_raw, i_raw1, g, made, setup)
    return {
        "unit": "instructions", "generated_tokens": g, "raw_tokens": made,
        "grammar_checks": env["grammar_checks"], "prompt_tokens": env["prompt_tokens"],
        "prefix_tokens": env.get("prefix_tokens"),
        "instructions": {"constrained": i_con, "raw": i_raw, "raw_1": i_raw1},
        **{k: (round(v) if isinstance(v, float) and k != "grammar_vs_model" else v) for k, v in costs.items()},
        "grammar_vs_model": None if costs["grammar_vs_model"] is None else round(costs["grammar_vs_model"], 3),
    }


def serve_raw(target: Target, n: int) -> dict:
    """An unconstrained `raw` request of n tokens through the service: its decode_ms."""
    request = json.dumps({"query": DEMO_QUERY, "max_new": n, "raw": True}) + "\n"
    out = target.runner.run(["--serve", "--tools", str(DEMO_TOOLS), "--threads", "1"], stdin=request, timeout=600)
    answer = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}
    if out.returncode or not answer.get("ok"):
        raise CactError(f"engine service failed: {out.stderr.strip() or answer.get('error') or out.returncode}")
    return answer


def measure_host(target: Target) -> dict:
    con, raw = [], []
    g = None
    for _ in range(REPEATS):        # interleaved: a burst of other load hits both alike
        env = envelope(target.checked(CONSTRAINED).stdout)
        if env.get("grammar_ms") is None or env.get("decode_ms") is None:
            raise CactError("the host envelope has no grammar_ms / decode_ms")
        g = env["generated_tokens"]
        con.append(env)
        raw.append(serve_raw(target, g))
    made = raw[0]["generated_tokens"]
    if raw[0]["prompt_tokens"] != con[0]["prompt_tokens"]:
        raise CactError(f"the service's prompt ({raw[0]['prompt_tokens']} tokens) is not the CLI's "
                        f"({con[0]['prompt_tokens']})")
    grammar = min(e["grammar_ms"] for e in con) / g
    decode = min(e["decode_ms"] for e in con) / g
    model = min(e["decode_ms"] - e["grammar_ms"] for e in con) / g
    raw_decode = min(a["decode_ms"] for a in raw) / made
    return {
        "unit": "ms", "generated_tokens": g, "raw_tokens": made, "raw_stop": raw[0].get("stop"),
        "grammar_checks": con[0]["grammar_checks"], "prompt_tokens": con[0]["prompt_tokens"],
        "prefix_tokens": con[0].get("prefix_tokens"),
        "grammar_ms_per_token": round(grammar, 5), "decode_ms_per_token": round(decode, 5),
        "model_ms_per_token": round(model, 5), "raw_decode_ms_per_token": round(raw_decode, 5),
        "overhead_ms_per_token": round(decode - raw_decode, 5) if made == g else None,
        "grammar_vs_model": round(grammar / model, 3) if model > 0 else None,
        "extrapolated": made != g,
    }


def runnable(name: str) -> dict:
    """The board, or one line why it cannot be measured (before anything is built)."""
    board = boards.load(name)
    problem = boards.no_emulator(board)
    if problem:
        raise CactError(problem)
    return board


def measure(name: str, out: Path, archive: str | None) -> dict:
    board = runnable(name)
    where = build(name, out / name, archive)
    target = Target(board, where, archive)
    result = {"board": name}
    result.update(measure_host(target) if name == "host" else measure_counted(target))
    try:
        result["memory"] = tool_memory(target.binary, where / "obj")
    except ImportError:
        raise CactError("the memory figures need pyelftools (pip install -r requirements.txt)") from None
    except (OSError, ValueError) as exc:      # elftools' ELFError is a plain Exception: below
        raise CactError(f"cannot read {target.binary}: {exc}") from None
    except Exception as exc:
        if type(exc).__module__.startswith("elftools"):
            raise CactError(f"cannot read {target.binary}: {exc}") from None
        raise
    return result


# ---- the table ----------------------------------------------------------------------------

def _fmt(v, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ms":
        return f"{v * 1000:,.1f} us"
    return f"{v:,.0f}"


def row(r: dict) -> str:
    m = r["memory"]["total"]
    if r["unit"] == "ms":    # time: grammar_ms is the choosing alone (no set-up, no softmax)
        model, grammar, total, setup, after = r["model_ms_per_token"], r["grammar_ms_per_token"], None, None, None
    else:
        model, grammar, total, setup = r["model_per_token"], r["grammar_per_token"], r["grammar_total"], r["grammar_setup"]
        after = r["grammar_per_token_after_setup"]
    ratio = "-" if r["grammar_vs_model"] is None else f"{r['grammar_vs_model']:.2f}x"
    note = " (model extrapolated: EOS)" if r.get("extrapolated") else ""
    return (f"{r['board']:<12} {r['generated_tokens']:>4} {r['grammar_checks'] / r['generated_tokens']:>8.1f} "
            f"{_fmt(model, r['unit']):>12} {_fmt(grammar, r['unit']):>12} {ratio:>7} {_fmt(total, r['unit']):>13} "
            f"{_fmt(setup, r['unit']):>12} {_fmt(after, r['unit']):>13} {m['ram']:>9,} {m['text']:>8,}{note}")


HEADER = (f"{'board':<12} {'G':>4} {'checks/t':>8} {'model/tok':>12} {'grammar/tok':>12} {'ratio':>7} "
          f"{'grammar total':>13} {'set-up':>12} {'gr/tok-setup':>13} {'tool RAM':>9} {'code':>8}")


def host_line(r: dict) -> str:
    return (f"  {r['board']}: decode {_fmt(r['decode_ms_per_token'], 'ms')}/token constrained (of which choosing "
            f"{_fmt(r['grammar_ms_per_token'], 'ms')}), {_fmt(r['raw_decode_ms_per_token'], 'ms')}/token "
            f"unconstrained (--serve raw, stop {r['raw_stop']}): overhead {_fmt(r['overhead_ms_per_token'], 'ms')}"
            f"/token; best of {REPEATS}, one thread")


def memory_lines(r: dict) -> list[str]:
    lines = [f"  {r['board']}: static memory of the tool-calling objects (bytes; image data+bss "
             f"{r['memory']['image_ram']:,})"]
    for name, o in r["memory"]["objects"].items():
        if o is None:
            lines.append(f"    {name + '.o':<24} (not in this build)")
            continue
        big = ", ".join(f"{k} {v:,}" for k, v in list(o["symbols"].items())[:3])
        lines.append(f"    {name + '.o':<24} data {o['data']:>7,} bss {o['bss']:>7,} rodata {o['rodata']:>7,} "
                     f"text {o['text']:>7,}" + (f"  ({big})" if big else ""))
    t = r["memory"]["total"]
    lines.append(f"    {'total':<24} data {t['data']:>7,} bss {t['bss']:>7,} rodata {t['rodata']:>7,} text {t['text']:>7,}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.grammar", description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", action="append", required=True, help="a board (repeatable)")
    ap.add_argument("--archive", default=str(TINY_GOLDEN),
                    help="the .cact archive (default: the tiny golden: random weights, so a forced call "
                         "runs its whole budget, and the figures in docs/benchmarks.md stay comparable)")
    ap.add_argument("--out", default=str(ROOT / "build" / "bench-grammar"), help="build directory")
    args = ap.parse_args(argv)
    print("per generated token: the model's own cost, the grammar's overhead (instructions; host: time); "
          "tool RAM = data+bss of the tool-calling objects, code = their .text (bytes)", flush=True)
    print(HEADER, flush=True)
    results, notes = [], []
    try:
        for b in args.board:
            runnable(b)
    except CactError as exc:
        print(f"bench.grammar: error: {exc}", file=sys.stderr)
        return 2
    for b in args.board:
        try:
            r = measure(b, Path(args.out).resolve(), args.archive and os.path.abspath(args.archive))
        except CactError as exc:
            print(f"bench.grammar: error: {exc}", file=sys.stderr)
            return 2
        results.append(r)
        print(row(r), flush=True)
        notes += ([host_line(r)] if r["unit"] == "ms" else []) + memory_lines(r)
    print("\n".join(notes))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
