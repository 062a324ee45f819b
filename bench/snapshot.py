"""Time to first token with and without the prefix snapshot (docs/snapshot.md), per board.

    python -m bench.snapshot --board watch-m4 [--board rpi-zero ...] [--archive A] [--out DIR]

builds each board twice with the demo tools built in (`scons tools=demo/tools.json`, once
with `snapshot=1` and once with `snapshot=0`) and measures, side by side in one run, the
demo query's time to its first token on both builds:

* host: the engine's own prefill + first-token time through `needle --serve` (milliseconds,
  best of 7 runs, the two builds interleaved; no process start-up);
* Linux boards under qemu-user: guest instructions of one whole `needle --query Q --raw
  --max-new 1` process (start-up, archive check, prompt rendering and tokenisation
  included; one thread), counted from QEMU's translation log (bench/host.py count_log);
* bare-metal boards under qemu-system-arm: the same count for the same command line.

Instruction counts are deterministic: the same images give the same figures on any host.
The log holds a line per executed block, so a soft-float router (a helper call every few
instructions) writes tens of GB for one run: count those with a smaller archive.
Prints a table and, as the last line, one JSON object per board.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.host import DEMO_QUERY, DEMO_TOOLS, count_log, count_instructions_of, time_to_first_token
from generator.build import boards
from generator.build.runner import BoardRunner
from generator.errors import CactError

ROOT = Path(__file__).resolve().parent.parent
TINY_GOLDEN = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
ARGS = ["--query", DEMO_QUERY, "--raw", "--max-new", "1"]


def build(board: str, out: Path, snapshot: bool, archive: str | None) -> Path:
    cmd = [sys.executable, "-m", "SCons", "-Q", f"board={board}", f"build={out}", f"tools={DEMO_TOOLS}",
           f"snapshot={int(snapshot)}"] + ([f"archive={archive}"] if archive else [])
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        raise CactError(f"building {board} (snapshot={int(snapshot)}) failed: {proc.stderr.strip()}")
    return out


def image_of(board: dict, where: Path, archive: str | None) -> str | None:
    if board["archive"]["placement"] == "partition":
        return str(where / "archive.bin")
    if board["archive"]["placement"] == "file":
        return archive or str(ROOT / "demo" / "needle2-demo.cact")
    return None


def count_bare_metal(board: dict, where: Path, archive: str | None) -> int:
    run = BoardRunner(board, where / "needle.elf", image_of(board, where, archive))
    with tempfile.TemporaryDirectory(prefix="needle-ttft-") as tmp:
        log = os.path.join(tmp, "exec.log")
        proc = run.run(ARGS, cwd=ROOT, timeout=3600, emulator_flags=["-d", "in_asm,exec,nochain", "-D", log])
        if proc.returncode:
            raise CactError(f"{where / 'needle.elf'} failed: {proc.stderr.strip() or proc.returncode}")
        return count_log(log)


def measure(name: str, out: Path, archive: str | None) -> dict:
    board = boards.load(name)
    dirs = {on: build(name, out / name / ("on" if on else "off"), on, archive) for on in (True, False)}
    result = {"board": name}
    if name == "host":
        runs = {True: [], False: []}
        for _ in range(7):
            for on in (True, False):
                runs[on].append(time_to_first_token(shlex.join([str(dirs[on] / "needle")])))
        for on in (True, False):
            best = min(runs[on], key=lambda r: r["ms"])
            result["ttft_ms_" + ("with" if on else "without")] = round(best["ms"], 3)
        result["prompt_tokens"] = runs[True][0]["prompt_tokens"]
        unit = "ttft_ms"
    elif board["os"] == "linux":
        for on in (True, False):
            # one thread: qemu-user's log interleaves threads, and the output does not depend on it
            run = BoardRunner(board, dirs[on] / "needle", image_of(board, dirs[on], archive))
            result["ttft_instructions_" + ("with" if on else "without")] = \
                count_instructions_of(run, ARGS + ["--threads", "1"])
        unit = "ttft_instructions"
    else:
        for on in (True, False):
            result["ttft_instructions_" + ("with" if on else "without")] = count_bare_metal(board, dirs[on], archive)
        unit = "ttft_instructions"
    run = BoardRunner(board, dirs[True] / ("needle.elf" if board["os"] == "none" else "needle"),
                      image_of(board, dirs[True], archive))
    env = json.loads(run.run(["--query", DEMO_QUERY, "--force-call", "--max-new", "64"], cwd=ROOT,
                             check=True).stdout.splitlines()[-1])
    result.update(prompt_tokens=env["prompt_tokens"], prefix_tokens=env["prefix_tokens"],
                  snapshot_bytes=(dirs[True] / "prefix.bin").stat().st_size,
                  ratio=round(result[unit + "_without"] / result[unit + "_with"], 2))
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.snapshot", description=__doc__.split("\n\n")[0])
    ap.add_argument("--board", action="append", required=True, help="a board (repeatable)")
    ap.add_argument("--archive", default=str(TINY_GOLDEN),
                    help="the .cact archive (default: the tiny golden: random weights, so a forced call "
                         "runs its whole budget, and the figures in docs/benchmarks.md stay comparable)")
    ap.add_argument("--out", default=str(ROOT / "build" / "bench-snapshot"), help="build directory")
    args = ap.parse_args(argv)
    print(f"{'board':<16} {'prompt':>6} {'prefix':>6} {'snapshot':>9} {'TTFT without':>15} {'TTFT with':>13} {'ratio':>6}",
          flush=True)
    results = []
    for b in args.board:
        try:
            r = measure(b, Path(args.out), args.archive)
        except CactError as exc:
            print(f"bench.snapshot: error: {exc}", file=sys.stderr)
            return 2
        results.append(r)
        unit = "ms" if "ttft_ms_with" in r else "instr"
        key = "ttft_ms_" if unit == "ms" else "ttft_instructions_"
        print(f"{r['board']:<16} {r['prompt_tokens']:>6} {r['prefix_tokens']:>6} {r['snapshot_bytes']:>9,} "
              f"{r[key + 'without']:>12,} {unit:<2} {r[key + 'with']:>10,} {unit:<2} {r['ratio']:>5}x", flush=True)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
