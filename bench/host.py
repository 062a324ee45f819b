"""Benchmarks of the generated engine (`scons bench=1` runs this; docs/benchmarks.md).

Two kinds, one JSON object each (the last line printed):

* **time** (the host, or any board without an emulator): the engine's `--bench N` (N-token
  prefill, N-token greedy decode, a memcpy bandwidth) for the board's kernel family and for
  the scalar kernels in the same run (alternately, twice each, the best of each kept), then
  the a8 NumPy reference on the same tokens; the
  weight bytes streamed per token against memcpy bandwidth (roofline) and the A8
  multiply-accumulates per token against the core's int8 peak.
* **count** (boards run under qemu-user): instructions executed per token, fast and scalar
  kernels, counted deterministically.  QEMU logs every translated block once (`-d in_asm`:
  its instructions) and every block execution (`-d exec,nochain`: no chaining, so each
  execution is logged); the sum over executions of the block's length is the number of
  guest instructions executed -- the same number `-singlestep -d exec,nochain` gives with one
  line per instruction, at a tenth of the log.  The engine's `--bench N` runs its 2N steps
  without clock or memcpy when NEEDLE_BENCH=count, and two runs (N and N/2) are subtracted
  to cancel start-up.  Each count is taken twice to show it repeats exactly.

`python -m generator bench ARCHIVE --engine CMD` (the old entry point) times one engine;
`python -m bench.host ARCHIVE --engine CMD [--scalar-engine CMD] [--board NAME]` is what
SConstruct calls.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from generator.archive import reader
from generator.errors import CactError
from generator.archive.format import BOS_ID, CQ, cq_geometry

if TYPE_CHECKING:
    from generator.build.runner import BoardRunner


def bench_tokens(n: int, vocab: int) -> list[int]:
    """The sequence the engine's --bench feeds: BOS, then (t · 2654435761) mod vocab."""
    return [BOS_ID] + [(t * 2654435761) % 2**32 % vocab for t in range(1, n)]


def macs_per_token(a) -> int:
    """A8 multiply-accumulates of one decode step: every CQ matrix-vector product over its
    padded input (the tied head over its V_out rows); row gathers are not products."""
    h = a.header
    v_out = h["vocab"] if a.generation == 2 or not h.get("out_vocab") else h["out_vocab"]
    macs = 0
    for r in a.records:
        if r.dtype != CQ or r.role.endswith(".tables") or r.role.startswith("head"):
            continue
        out, inp = r.shape
        in_pad = cq_geometry(out, inp, r.group, r.bits)[0]
        macs += (v_out if r.role == "embedding" else out) * in_pad
    return macs


def run_engine(cmd: str, n: int, env: dict | None = None) -> dict:
    try:
        out = subprocess.run(shlex.split(cmd) + ["--bench", str(n)], capture_output=True, text=True,
                             timeout=3600, env=env)
    except OSError as exc:
        raise CactError(f"cannot run the engine {cmd!r}: {exc.strerror}") from None
    if out.returncode:
        raise CactError(f"engine benchmark failed: {out.stderr.strip() or out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


DEMO_TOOLS = Path(__file__).resolve().parent.parent / "demo" / "tools.json"
DEMO_QUERY = "what's the weather like in Lagos right now?"   # DEMO_ARGS of site_scons/needle_build/options.py
PROMPT_TOKENS = 128        # the prompt length prefill_tok_s_128 is measured on


def time_to_first_token(cmd: str) -> dict:
    """The demo tool prompt (demo/tools.json and the demo query) through the service, one new
    token: the engine's own prefill and first-token times (docs/serve.md), without process
    start-up and archive check."""
    request = json.dumps({"query": DEMO_QUERY, "max_new": 1, "raw": True}) + "\n"   # one token: no call
    try:
        out = subprocess.run(shlex.split(cmd) + ["--serve", "--tools", str(DEMO_TOOLS)], input=request,
                             capture_output=True, text=True, timeout=3600)
    except OSError as exc:
        raise CactError(f"cannot run the engine {cmd!r}: {exc.strerror}") from None
    answer = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}
    if out.returncode or not answer.get("ok"):
        raise CactError(f"engine service failed: {out.stderr.strip() or answer.get('error') or out.returncode}")
    return {"ms": answer["prefill_ms"] + answer["decode_ms"], "prompt_tokens": answer["prompt_tokens"]}


def demo_prompt_tokens(a) -> int:
    """The demo tool prompt's tokens (BOS included) with the archive's tokenizer, as the
    engine feeds it (generator.tools.prompt.render_prompt_ids, the CLI's twin)."""
    from generator.archive.tokenizer import Tokenizer
    from generator.tools.prompt import render_prompt_ids
    tok = Tokenizer.from_blob(a.tokenizer_blob())
    return len(render_prompt_ids(tok, DEMO_TOOLS.read_text(encoding="utf-8"), DEMO_QUERY))


def ttft_skip(a) -> str | None:
    """Why time to first token cannot be measured on this archive (the demo tool prompt and
    one new token do not fit its window), or None."""
    n, window = demo_prompt_tokens(a), a.header["max_seq_len"]
    if n < window:       # BOS and the prompt at positions 0 .. n-1, the new token's at n
        return None
    return (f"time to first token: the demo tool prompt encodes to {n} tokens with this archive's tokenizer, "
            f"and max_seq_len {window} holds at most {window - 1} with one new token")


def run_reference(archive, n: int) -> dict:
    from generator.model import Needle2
    m = Needle2(archive, "a8")
    seq = bench_tokens(n, archive.header["vocab"])
    state = m.new_state()
    t0 = time.perf_counter()
    logits = m.forward(state, seq)[-1]
    t1 = time.perf_counter()
    for _ in range(n):
        logits = m.forward(state, [int(np.argmax(logits))])[-1]
    t2 = time.perf_counter()
    return {"prefill_tok_s": n / (t1 - t0), "decode_tok_s": n / (t2 - t1)}


# ---- sizes -----------------------------------------------------------------------------

def engine_text(binary: str) -> dict:
    """`.text` bytes of the generated engine's objects (next to the binary, in obj/)."""
    from elftools.elf.elffile import ELFFile
    out = {}
    for name in ("needle_kernels", "needle_model"):
        path = Path(binary).parent / "obj" / f"{name}.o"
        if not path.is_file():
            continue
        with open(path, "rb") as fh:
            elf = ELFFile(fh)
            out[name] = sum(s["sh_size"] for s in elf.iter_sections()
                            if s.name == ".text" or s.name.startswith(".text."))
    return out


# ---- instruction counting under qemu-user ---------------------------------------------

def executed_blocks(path: str):
    """(host address, the Trace line split in five, instructions, last instruction line) of
    every block execution in a `-d in_asm,exec,nochain` log, in order.

    A translation ("IN:" then one line per instruction) is logged right before the block's
    first execution, so the next "Trace" line names the block's host address; later "Trace"
    lines with that address run it again.  A retranslation at a reused address replaces its
    length and last instruction.  A "Trace" line ends with the name of the block's function
    ("?" where QEMU has none); its bracketed field holds the block's first guest address
    (second in "/").  Fields are left as bytes: the logs run to gigabytes."""
    blocks: dict[bytes, tuple[int, bytes]] = {}
    pending, last = -1, b""
    listing = False
    with open(path, "rb") as fh:
        for line in fh:
            c = line[:1]
            if c == b"T" and line.startswith(b"Trace "):
                parts = line.rstrip(b"\n").split(b" ", 4)
                host = parts[2]
                if pending >= 0:
                    blocks[host] = (pending, last)
                    pending = -1
                listing = False
                size, tail = blocks[host]
                yield host, parts, size, tail
            elif c == b"I" and line.startswith(b"IN:"):
                listing, pending, last = True, 0, b""
            elif listing and c == b"0":
                pending += 1
                last = line
            elif c == b"\n":
                listing = False


def _function(parts: list[bytes]) -> str:
    return (parts[4].strip() if len(parts) > 4 else b"").decode("ascii", "replace") or "?"


def _guest(parts: list[bytes]) -> int:
    return int(parts[3].strip(b"[]").split(b"/")[1], 16)


def block_counts(path: str, within: str | None = None) -> collections.Counter:
    """Guest instructions executed, by function (executed_blocks); with `within`, only that
    function's blocks count, by their first guest address."""
    counts: collections.Counter = collections.Counter()
    for _host, parts, size, _last in executed_blocks(path):
        name = _function(parts)
        if within is None:
            counts[name] += size
        elif name == within:
            counts[_guest(parts)] += size
    return counts


def call_counts(path: str, entries: dict[int, str]) -> collections.Counter:
    """Calls into the functions `entries` names ({entry guest address: name}), from a
    `-d in_asm,exec,nochain` log, by (guest address of the calling block's last
    instruction, the calling block's function, callee).  A call is an executed block that
    starts at a callee's entry right after a block of another function; the caller's last
    instruction is the call (or, on MIPS, its delay slot), which addr2line maps to the
    call's source line.  Any architecture's log works."""
    counts: collections.Counter = collections.Counter()
    prev: tuple[bytes, list[bytes]] | None = None          # parsed only where a call follows
    for _host, parts, _size, last in executed_blocks(path):
        callee = entries.get(_guest(parts))
        if callee is not None and prev is not None and _function(prev[1]) != callee:
            where = int(prev[0].split(b":", 1)[0], 16) if prev[0] else _guest(prev[1])
            counts[(where, _function(prev[1]), callee)] += 1
        prev = (last, parts)
    return counts


def count_log(path: str) -> int:
    """Guest instructions executed, from a `-d in_asm,exec,nochain` log (block_counts)."""
    return sum(block_counts(path).values())


def count_instructions(run: BoardRunner, n: int, singlestep: bool = False, mode: str = "count") -> int:
    """Instructions one `--bench n` run executes (NEEDLE_BENCH=count: 2n single steps, no
    clock, no memcpy; count-prefill: only the n-token prompt, through needle_prefill)."""
    return count_instructions_of(run, ["--bench", str(n)], singlestep, mode)


def count_instructions_of(run: BoardRunner, args: list[str], singlestep: bool = False,
                          mode: str = "count") -> int:
    """Guest instructions one run of the engine with `args` executes under the board's
    qemu-user (its translation log: -d in_asm,exec,nochain, or -singlestep -d exec)."""
    with tempfile.TemporaryDirectory(prefix="needle-count-") as tmp:
        log = os.path.join(tmp, "exec.log")
        flags = (["-singlestep", "-d", "exec,nochain"] if singlestep else ["-d", "in_asm,exec,nochain"])
        proc = run.run(args, timeout=3600, env={"NEEDLE_BENCH": mode}, emulator_flags=flags + ["-D", log])
        if proc.returncode:
            raise CactError(f"instruction count run failed: {proc.stderr.strip() or proc.returncode}")
        if singlestep:
            with open(log, "rb") as fh:
                return sum(chunk.count(b"\nTrace ") for chunk in iter(lambda: fh.read(1 << 24), b"")) + 1
        return count_log(log)


def per_token(run: BoardRunner, n: int) -> tuple[int, list[int]]:
    """(instructions per decode step, the raw counts): runs of n and n/2 prefill+decode
    tokens, each taken twice."""
    lo = max(1, n // 2)
    counts = [count_instructions(run, k) for k in (lo, n, lo, n)]
    steps = 2 * (n - lo)
    return round((counts[1] - counts[0]) / steps), counts


def prefill_per_token(run: BoardRunner, n: int, step: int) -> tuple[int, list[int]]:
    """(instructions per prompt token of an n-token needle_prefill, the raw counts): the
    prompt's count with start-up removed, start-up being a one-token prompt's count less one
    decode step; every pass's weight unpacking and the last token's output head included."""
    counts = [count_instructions(run, k, mode="count-prefill") for k in (1, n)]
    return round((counts[1] - counts[0] + step) / n), counts


# ---- the two benchmarks ----------------------------------------------------------------

def core_peak_macs() -> tuple[float, str]:
    """int8 multiply-accumulates per second of one host core at its nominal clock: AVX2
    vpmaddubsw does 32 per instruction and x86 cores since Haswell / Zen issue two a cycle."""
    mhz = 0.0
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("cpu MHz"):
                mhz = max(mhz, float(line.split(":")[1]))
    except (OSError, ValueError):
        pass
    return mhz * 1e6 * 64, f"64 int8 MAC/cycle (2 x 32-lane vpmaddubsw) x {mhz:.0f} MHz"


def best_of(runs: list[dict]) -> dict:
    """The fastest of several runs, figure by figure (other load on the machine only slows)."""
    out = dict(runs[0])
    for key in ("prefill_tok_s", "decode_tok_s", "memcpy_gb_s"):
        out[key] = max(r[key] for r in runs)
    out["roofline_tok_s"] = out["memcpy_gb_s"] * 1e9 / out["bytes_per_token"]
    out["roofline_ratio"] = round(out["decode_tok_s"] / out["roofline_tok_s"], 4)
    out["roofline_tok_s"] = round(out["roofline_tok_s"], 1)
    return out


def time_bench(archive_path: str, a, engine_cmd: str, scalar_cmd: str | None, n: int,
               repeats: int = 2, skipped: list | None = None) -> dict:
    """Tokens/s natively; `skipped` collects what this archive cannot measure (printed, and
    the result's "skipped")."""
    skipped = [] if skipped is None else skipped
    fast_runs, scalar_runs, one_thread_runs = [], [], []
    threads = run_engine(engine_cmd, 1).get("threads", 1)
    for _ in range(repeats):           # alternate, so a burst of other load hits both alike
        fast_runs.append(run_engine(engine_cmd, n))
        if threads > 1:                # the same engine on one thread
            one_thread_runs.append(run_engine(f"{engine_cmd} --threads 1", n))
        if scalar_cmd:
            scalar_runs.append(run_engine(scalar_cmd, n))
    eng = best_of(fast_runs)
    one = best_of(one_thread_runs) if one_thread_runs else eng
    # time to the first token of the demo tool prompt, and prefill of a 128-token prompt
    why = ttft_skip(a)
    if why:
        skipped.append(why)
        ttft = {"ms": None, "prompt_tokens": None}
    else:
        ttft = min((time_to_first_token(engine_cmd) for _ in range(repeats)), key=lambda r: r["ms"])
    long_n = min(PROMPT_TOKENS, a.header["max_seq_len"] // 2)
    prefill_long = max(run_engine(engine_cmd, long_n)["prefill_tok_s"] for _ in range(repeats))
    if not scalar_cmd and eng.get("kernels", "scalar") != "scalar":
        raise CactError(f"the engine runs the {eng['kernels']} kernels: give --scalar-engine "
                        "(an engine built with kernels=scalar) for the comparison")
    sca = best_of(scalar_runs) if scalar_cmd else eng      # a scalar engine is its own baseline
    ref = run_reference(a, n)
    macs = macs_per_token(a)
    peak, peak_what = core_peak_macs()
    result = {
        "archive": archive_path, "tokens": n, "kernels": eng.get("kernels", "?"), "threads": threads,
        "decode_tok_s_1thread": one["decode_tok_s"], "prefill_tok_s_1thread": one["prefill_tok_s"],
        "decode_speedup_vs_1thread": round(eng["decode_tok_s"] / one["decode_tok_s"], 2),
        "prefill_speedup_vs_1thread": round(eng["prefill_tok_s"] / one["prefill_tok_s"], 2),
        "decode_tok_s": eng["decode_tok_s"], "prefill_tok_s": eng["prefill_tok_s"],
        f"prefill_tok_s_{long_n}": prefill_long,
        "time_to_first_token_ms": None if ttft["ms"] is None else round(ttft["ms"], 3),
        "time_to_first_token_prompt_tokens": ttft["prompt_tokens"],
        "decode_tok_s_scalar": sca["decode_tok_s"], "prefill_tok_s_scalar": sca["prefill_tok_s"],
        "decode_speedup_vs_scalar": round(eng["decode_tok_s"] / sca["decode_tok_s"], 2),
        "prefill_speedup_vs_scalar": round(eng["prefill_tok_s"] / sca["prefill_tok_s"], 2),
        "decode_tok_s_reference": round(ref["decode_tok_s"], 3),
        "prefill_tok_s_reference": round(ref["prefill_tok_s"], 3),
        "decode_speedup_vs_reference": round(eng["decode_tok_s"] / ref["decode_tok_s"], 2),
        "prefill_speedup_vs_reference": round(eng["prefill_tok_s"] / ref["prefill_tok_s"], 2),
        "bytes_per_token": eng["bytes_per_token"], "memcpy_gb_s": eng["memcpy_gb_s"],
        "roofline_tok_s": eng["roofline_tok_s"], "roofline_ratio": eng["roofline_ratio"],
        "roofline_ratio_scalar": sca["roofline_ratio"],
        "macs_per_token": macs,
        "mac_gops": round(macs * eng["decode_tok_s"] / 1e9, 3),
        "mac_gops_scalar": round(macs * sca["decode_tok_s"] / 1e9, 3),
        "peak_mac_gops": round(peak / 1e9, 1), "peak": peak_what,
        "peak_ratio": round(macs * eng["decode_tok_s"] / peak, 4) if peak else None,
        "engine_text": engine_text(shlex.split(engine_cmd)[-1]),
    }
    if scalar_cmd:
        result["engine_text_scalar"] = engine_text(shlex.split(scalar_cmd)[-1])
    print(f"{'':24s} {result['kernels']:>12s} {'scalar':>12s} {'reference':>12s} {'vs scalar':>10s}")
    for k in ("prefill", "decode"):
        print(f"{k + ' tokens/s':24s} {result[k + '_tok_s']:12.2f} {result[k + '_tok_s_scalar']:12.2f} "
              f"{result[k + '_tok_s_reference']:12.2f} {result[k + '_speedup_vs_scalar']:9.2f}x")
    if ttft["ms"] is not None:
        print(f"demo tool prompt ({ttft['prompt_tokens']} tokens): first token after {ttft['ms']:.2f} ms; "
              f"prefill of a {long_n}-token prompt {prefill_long:.2f} tok/s")
    else:
        print(f"prefill of a {long_n}-token prompt {prefill_long:.2f} tok/s")
    if threads > 1:
        print(f"{threads} threads against 1: decode {result['decode_tok_s_1thread']:.2f} -> "
              f"{result['decode_tok_s']:.2f} tok/s ({result['decode_speedup_vs_1thread']:.2f}x), prefill "
              f"{result['prefill_tok_s_1thread']:.2f} -> {result['prefill_tok_s']:.2f} tok/s "
              f"({result['prefill_speedup_vs_1thread']:.2f}x)")
    print(f"weights streamed per token {result['bytes_per_token']:,} bytes; memcpy {result['memcpy_gb_s']:.2f} GB/s "
          f"-> roofline {result['roofline_tok_s']:.0f} tok/s; engine at {100 * result['roofline_ratio']:.2f}% of it "
          f"(scalar {100 * result['roofline_ratio_scalar']:.2f}%)")
    if peak:
        print(f"A8 MACs per token {macs:,}: {result['mac_gops']:.2f} GMAC/s "
              f"({100 * result['peak_ratio']:.2f}% of {result['peak_mac_gops']:.0f} GMAC/s: {peak_what})")
    return result


def count_bench(archive_path: str, a, board: dict, engine_cmd: str, scalar_cmd: str | None, n: int) -> dict:
    run = runner_of(board, engine_cmd)
    n = max(2, min(n, 8))        # 2n steps per run; the tiny archive needs no more to be stable
    fam = run_engine_family(run)
    if not scalar_cmd and fam != "scalar":
        raise CactError(f"the engine runs the {fam} kernels: give --scalar-engine "
                        "(an engine built with kernels=scalar) for the comparison")
    fast, fast_counts = per_token(run, n)
    fast2 = round((fast_counts[3] - fast_counts[2]) / (2 * (n - max(1, n // 2))))
    if scalar_cmd:
        srun = runner_of(board, scalar_cmd)
        scalar, scalar_counts = per_token(srun, n)
    else:
        srun, scalar, scalar_counts = run, fast, fast_counts
    pn = min(4 * n, a.header["max_seq_len"] // 2)   # a prompt of several passes on small-RAM boards
    prefill, prefill_counts = prefill_per_token(run, pn, fast)
    macs = macs_per_token(a)
    result = {
        "archive": archive_path, "board": board["name"], "kernels": fam, "tokens": n,
        "instructions_per_token": fast, "instructions_per_token_scalar": scalar,
        "prefill_instructions_per_token": prefill, "prefill_tokens": pn,
        "prefill_to_decode": round(prefill / fast, 3),
        "instructions_per_token_repeat": fast2,
        "repeatable": fast_counts[0] == fast_counts[2] and fast_counts[1] == fast_counts[3]
                      and scalar_counts[0] == scalar_counts[2] and scalar_counts[1] == scalar_counts[3],
        "instruction_ratio": round(scalar / fast, 2),
        "macs_per_token": macs,
        "macs_per_instruction": round(macs / fast, 3),
        "macs_per_instruction_scalar": round(macs / scalar, 3),
        "counts": {"fast": fast_counts, "scalar": scalar_counts, "prefill": prefill_counts,
                   "tokens": [max(1, n // 2), n, max(1, n // 2), n]},
        "engine_text": engine_text(run.binary), "engine_text_scalar": engine_text(srun.binary),
    }
    print(f"{board['name']}: instructions per token (qemu-user, `-d in_asm,exec,nochain`, "
          f"--bench {n} minus --bench {max(1, n // 2)}, each twice)")
    print(f"  {fam:12s} {fast:12,d}  ({result['macs_per_instruction']:.3f} MAC/instruction)")
    print(f"  {'scalar':12s} {scalar:12,d}  ({result['macs_per_instruction_scalar']:.3f} MAC/instruction)")
    print(f"  ratio {result['instruction_ratio']:.2f}x; repeatable: {result['repeatable']}")
    print(f"  prefill of a {pn}-token prompt (needle_prefill): {prefill:,d} instructions per token, "
          f"{result['prefill_to_decode']:.2f} of a decode step")
    return result


def run_engine_family(run: BoardRunner) -> str:
    out = run.run(["--bench", "1"], timeout=600, env={"NEEDLE_BENCH": "count"})
    try:
        return json.loads(out.stdout.strip().splitlines()[-1]).get("kernels", "?")
    except (ValueError, IndexError):
        return "?"


def runner_of(board: dict, engine_cmd: str) -> BoardRunner:
    """The runner behind an engine command line for `board` (as scons bench=1 writes it:
    BoardRunner.shell_line, i.e. the emulator, the binary, and `--archive PATH` on
    placement-file boards)."""
    from generator.build.runner import BoardRunner
    words, emu = shlex.split(engine_cmd), board["emulator"]["command"]
    if words[:len(emu)] != emu or len(words) <= len(emu):
        raise CactError(f"--engine {engine_cmd!r} does not run under board {board['name']}'s emulator "
                        f"({shlex.join(emu)})")
    binary, rest = words[len(emu)], words[len(emu) + 1:]
    if rest[:1] == ["--archive"] and len(rest) == 2:
        return BoardRunner(board, binary, rest[1])
    if rest:
        raise CactError(f"--engine {engine_cmd!r}: only the engine and its --archive PATH may follow "
                        "the emulator")
    return BoardRunner(board, binary)


def add_command(sub) -> None:
    """The `bench` subcommand of `python -m generator` (registered by generator/__main__.py:
    generator's own modules never import bench, host_tests/test_layers.py)."""
    s = sub.add_parser("bench", help="engine vs NumPy reference speed (bench/host.py; scons bench=1 "
                                     "runs python -m bench.host)")
    s.add_argument("archive")
    s.add_argument("--engine", required=True, help="command that runs the built engine")
    s.add_argument("--tokens", type=int, default=32)
    s.set_defaults(fn=lambda args: main(args.archive, args.engine, args.tokens))


def main(archive_path: str, engine_cmd: str, n: int, scalar_cmd: str | None = None,
         board_name: str | None = None) -> int:
    a = reader.read(archive_path)
    skipped = []       # what this archive's window cannot hold: measured smaller, or not at all
    if n > a.header["max_seq_len"] // 2:
        half = a.header["max_seq_len"] // 2
        skipped.append(f"--tokens {n}: measured on {half} tokens of prefill and {half} of decode, all that "
                       f"max_seq_len {a.header['max_seq_len']} holds")
        n = a.header["max_seq_len"] // 2
    board = None
    if board_name:
        from generator.build import boards
        board = boards.load(board_name)
    if board and board["os"] == "linux" and board["emulator"]["command"]:
        result = count_bench(archive_path, a, board, engine_cmd, scalar_cmd, n)
    else:
        result = time_bench(archive_path, a, engine_cmd, scalar_cmd, n, skipped=skipped)
    for why in skipped:
        print(f"skipped: {why}")
    result["skipped"] = skipped
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="python -m bench.host", description=__doc__.splitlines()[0])
    p.add_argument("archive")
    p.add_argument("--engine", required=True, help="command that runs the built engine")
    p.add_argument("--scalar-engine", help="command that runs the same engine with kernels=scalar")
    p.add_argument("--board", help="board name: boards with an emulator are measured in instructions")
    p.add_argument("--tokens", type=int, default=32)
    args = p.parse_args()
    try:
        sys.exit(main(args.archive, args.engine, args.tokens, args.scalar_engine, args.board))
    except CactError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
