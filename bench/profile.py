"""Where a decode step's instructions go, per function, on an emulated board.

    .venv/bin/python -m bench.profile --board watch-m55 --build build/watch-m55 [--tokens 8]

runs the board's image (qemu-user or qemu-system, as `scons run=1` does) twice, `--bench N`
and `--bench N/2` (NEEDLE_BENCH=count on Linux boards), under `-d in_asm,exec,nochain`. QEMU
logs each translated block's instructions once and names the function of every block it
executes; the difference of the two runs, divided by the extra steps, is what one decode
step (prefill and decode of N/2 more tokens each) executes in each function, start-up
cancelled. The counts are deterministic, as `bench.host.count_log`'s are. Used to choose
what to vectorise (docs/benchmarks.md); it prints a table, then one JSON object.

`--calls __addsf3,__mulsf3` counts instead the calls into the named functions, by calling
function and by call site (file:line): on the soft-float routers, which engine code issues
the float operations (the commit log).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from elftools.elf.elffile import ELFFile

from bench import host, mcu
from generator.build import boards
from generator.build.runner import BoardRunner
from generator.errors import CactError


def run_logged(board: dict, build: Path, args: list[str], archive: str | None,
               mode: str = "count", within: str | None = None,
               calls: dict[int, str] | None = None) -> collections.Counter:
    """Per-function instructions of one run of the board's image with engine `args`
    (`archive`: the archive file or partition image, where the board does not link it);
    with `calls` ({entry address: name}), the calls into those functions by call site
    instead (host.call_counts)."""
    with tempfile.TemporaryDirectory(prefix="needle-profile-") as tmp:
        log = os.path.join(tmp, "exec.log")
        trace = ["-d", "in_asm,exec,nochain", "-D", log]
        if board["os"] == "none":
            run = BoardRunner(board, build / "needle.elf", archive)
            flags, env = mcu.ICOUNT + trace, None
        else:
            run = BoardRunner(board, build / "needle", archive)
            flags, env = trace, {"NEEDLE_BENCH": mode}
        proc = run.run(args, timeout=3600, env=env, emulator_flags=flags)
        if proc.returncode:
            raise CactError(f"profile run failed ({' '.join(proc.args[:3])} ...): "
                            f"{proc.stderr.strip()[-300:] or proc.returncode}")
        return host.call_counts(log, calls) if calls else host.block_counts(log, within)


def image(board: dict, build: Path) -> Path:
    return build / ("needle.elf" if board["os"] == "none" else "needle")


def entries(board: dict, build: Path, names: list[str]) -> dict[int, str]:
    """{entry address: name} of the named functions in the image (pyelftools); a name may
    also match the end of a qualified symbol (zig's `compiler_rt.divsf3.__divsf3`)."""
    try:
        with open(image(board, build), "rb") as fh:
            symtab = ELFFile(fh).get_section_by_name(".symtab")
            found = {}
            for sym in symtab.iter_symbols() if symtab else ():
                if sym["st_info"]["type"] != "STT_FUNC" or not sym["st_value"]:
                    continue
                for name in names:
                    if sym.name == name or sym.name.endswith("." + name):
                        found[sym["st_value"] & ~1] = name     # Thumb entry addresses are odd
    except OSError as e:
        raise CactError(f"cannot read the image ({e}): build it first (scons board=...)") from None
    missing = sorted(set(names) - set(found.values()))
    if missing:
        raise CactError(f"--calls: no function {', '.join(missing)} in {image(board, build)}")
    return found


def site_names(board: dict, build: Path, addresses: list[int], function: bool = False) -> dict[int, str]:
    """{address: file:line} (`function`: "function file:line") through the toolchain's
    addr2line (the host's for zig boards)."""
    tool = board["toolchain_prefix"] + "addr2line"
    try:
        out = subprocess.run([tool, *(["-f"] if function else []), "-e", str(image(board, build)),
                              *map(hex, addresses)],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError) as e:
        raise CactError(f"{tool} failed ({e}): install the board's toolchain") from None
    names = out[0::2] if function else [""] * len(addresses)
    where = out[1::2] if function else out
    return {a: (f"{f} " if f else "") + (w.rsplit("/", 1)[-1] if "?" not in w else hex(a))
            for a, f, w in zip(addresses, names, where)}


def source_lines(board: dict, build: Path, by_address: collections.Counter) -> collections.Counter:
    """{file:line: instructions} for per-address counts."""
    lines: collections.Counter = collections.Counter()
    for address, where in site_names(board, build, sorted(by_address)).items():
        lines[where] += by_address[address]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n")[0])
    ap.add_argument("--board", required=True)
    ap.add_argument("--build", required=True, type=Path, help="the board's build directory (scons build=...)")
    ap.add_argument("--archive", help="the archive file (boards that read it from a file; default: "
                    "BUILD/archive.bin when it exists)")
    ap.add_argument("--tokens", type=int, default=8, help="N: runs of N and N/2 prefill+decode tokens")
    ap.add_argument("--prefill", action="store_true",
                    help="Linux boards: the prompt only, fed by needle_prefill (NEEDLE_BENCH=count-prefill)")
    ap.add_argument("--lines", metavar="FUNCTION",
                    help="count FUNCTION's blocks by source line instead (build with debug=1 for file:line)")
    ap.add_argument("--calls", metavar="NAME[,NAME...]",
                    help="count the calls into these functions (e.g. the soft-float runtime's "
                         "__addsf3,__mulsf3) by calling function and by call site instead")
    ap.add_argument("--top", type=int, default=25, help="rows of the table (the JSON has every function)")
    a = ap.parse_args(argv)
    try:
        board = boards.load(a.board)
        if a.tokens < 2:
            raise CactError("--tokens must be at least 2")
        lo, hi = a.tokens // 2, a.tokens
        archive = a.archive or (str(a.build / "archive.bin") if (a.build / "archive.bin").exists() else None)
        if a.prefill and board["os"] == "none":
            raise CactError("--prefill: bare-metal images run prompt and decode together")
        mode = "count-prefill" if a.prefill else "count"
        if a.calls:
            callees = entries(board, a.build, [n.strip() for n in a.calls.split(",") if n.strip()])
            small = run_logged(board, a.build, ["--bench", str(lo)], archive, mode, calls=callees)
            big = run_logged(board, a.build, ["--bench", str(hi)], archive, mode, calls=callees)
            return print_calls(a, board, small, big, (1 if a.prefill else 2) * (hi - lo))
        small = run_logged(board, a.build, ["--bench", str(lo)], archive, mode, a.lines)
        big = run_logged(board, a.build, ["--bench", str(hi)], archive, mode, a.lines)
        if a.lines:
            small, big = source_lines(board, a.build, small), source_lines(board, a.build, big)
    except CactError as e:
        print(f"profile: error: {e}", file=sys.stderr)
        return 1
    steps = (1 if a.prefill else 2) * (hi - lo)
    per = {f: (big[f] - small.get(f, 0)) / steps for f in big}
    total = sum(per.values())
    rows = sorted(((f, n) for f, n in per.items() if n), key=lambda kv: -kv[1])
    what = "prompt token (needle_prefill)" if a.prefill else "token (the mean of a prompt and a decoded token)"
    print(f"{a.board}: {total:,.0f} instructions per {what}, --bench {hi} less --bench {lo}"
          + (f", {a.lines} by source line" if a.lines else ""))
    for name, n in rows[: a.top]:
        print(f"  {n:14,.0f}  {100 * n / total:5.1f} %  {name}")
    print(json.dumps({"board": a.board, "instructions_per_step": round(total),
                      "functions": {k: round(v) for k, v in rows}}))
    return 0


def print_calls(a, board: dict, small: collections.Counter, big: collections.Counter,
                steps: int) -> int:
    """The --calls report: calls per step by callee, by calling function and by call site."""
    per = {k: (n - small.get(k, 0)) / steps for k, n in big.items()}
    per = {k: n for k, n in per.items() if n}
    by_callee: collections.Counter = collections.Counter()
    by_caller: collections.Counter = collections.Counter()
    by_site: collections.Counter = collections.Counter()
    lines = site_names(board, a.build, sorted({k[0] for k in per}), function=True)
    for (pc, caller, callee), n in per.items():
        by_callee[callee] += n
        by_caller[(caller, callee)] += n
        by_site[(lines[pc], callee)] += n
    total = sum(by_callee.values())
    print(f"{a.board}: {total:,.0f} calls per step into {a.calls}, --bench {a.tokens} less "
          f"--bench {a.tokens // 2}")
    for title, table in (("callee", by_callee), ("caller", by_caller), ("call site", by_site)):
        print(f"by {title}:")
        for key, n in table.most_common(a.top):
            label = key if isinstance(key, str) else f"{key[0]:48s} -> {key[1]}"
            print(f"  {n:12,.0f}  {100 * n / total:5.1f} %  {label}")
    print(json.dumps({"board": a.board, "calls_per_step": round(total),
                      "callees": {k: round(v) for k, v in by_callee.most_common()},
                      "callers": {f"{k[0]} -> {k[1]}": round(v) for k, v in by_caller.most_common()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
