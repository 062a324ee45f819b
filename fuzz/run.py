#!/usr/bin/env python3
"""Build the libFuzzer harnesses of fuzz/ into build/fuzz/ and run each for N seconds.

    fuzz/run.py [SECONDS] [--only NAME ...] [--jobs J] [--out DIR] [--build-only]

SECONDS (default 60) goes to libFuzzer as -max_total_time.  Each harness runs on a fresh copy
of its seed corpus fuzz/corpus/NAME/ (the seeds are never modified) with the dictionary
fuzz/NAME.dict; crash/leak/timeout reproducers land in OUT/crashes/NAME/.  Prints, per
harness, libFuzzer's final "#N DONE cov: ... corp: ..." line and exits non-zero if any
harness found a crash, a leak, a timeout, or did not build.  See fuzz/README.md.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

FUZZ = Path(__file__).resolve().parent
ROOT = FUZZ.parent
ARCHIVE = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
CLI = ROOT / "firmware" / "cli"
HAL = ROOT / "firmware" / "hal"
CFLAGS = ["-g", "-O1", "-fno-omit-frame-pointer", "-fsanitize=fuzzer,address,undefined",
          "-fno-sanitize-recover=all", "-std=c11", "-D_GNU_SOURCE"]
HARNESSES = ("tokenizer", "prompt", "cli")
PLAIN = {"needle_model.c", "needle_kernels.c"}   # built without sanitizers (see build())


def sources(name, gen):
    """Harness sources and include dirs (gen: the generated engine of the tiny archive)."""
    if name == "tokenizer":
        return [FUZZ / "tokenizer.c", gen / "needle_tokenizer.c", gen / "needle_archive.S"], [gen]
    if name == "prompt":
        return [FUZZ / "prompt.c", CLI / "tool_prompt.c"], [CLI]
    if name == "cli":
        return ([FUZZ / "cli.c", CLI / "main.c", CLI / "tool_prompt.c", HAL / "format.c",
                 gen / "needle_model.c", gen / "needle_kernels.c", gen / "needle_tokenizer.c",
                 gen / "needle_archive.S"], [gen, CLI, HAL])
    raise ValueError(name)


def libfuzzer_available(cc="clang"):
    """None if `cc -fsanitize=fuzzer,address,undefined` links a harness, else the reason."""
    if shutil.which(cc) is None:
        return f"{cc} is not installed"
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "t.c"
        src.write_text("#include <stddef.h>\n#include <stdint.h>\n"
                       "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)"
                       "{ (void)d; (void)n; return 0; }\n")
        p = subprocess.run([cc, "-fsanitize=fuzzer,address,undefined", str(src), "-o",
                            str(Path(d) / "t")], capture_output=True, text=True)
        if p.returncode:
            return (f"{cc} cannot link -fsanitize=fuzzer (libFuzzer runtime missing; "
                    f"on Debian/Ubuntu: apt-get install libclang-rt-<N>-dev):\n"
                    + p.stderr.strip()[-400:])
    return None


def build(out, names, cc="clang"):
    """Generate the tiny engine into out/gen (scalar kernels: portable, and the kernels are not
    what is fuzzed) and link out/NAME for each harness."""
    gen = out / "gen"
    subprocess.run([sys.executable, "-m", "generator", "emit", str(ARCHIVE), "-o", str(gen),
                    "--kernels", "scalar"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    exes = {}

    def one(name):
        srcs, incs = sources(name, gen)
        exe = out / name
        inc = [f"-I{i}" for i in incs]
        objs = []
        for src in [s for s in srcs if s.name in PLAIN]:
            # The transformer itself is not a parser: uninstrumented and optimized, so the
            # cli harness spends its time in main.c, not in matrix products.
            obj = out / f"{name}-{src.stem}.o"
            objs.append(obj)
            cmd = [cc, "-g", "-O2", "-std=c11", *inc, "-c", "-o", str(obj), str(src)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode:
                raise RuntimeError(f"building {name} failed:\n{' '.join(cmd)}\n{p.stderr}")
        srcs = [s for s in srcs if s.name not in PLAIN]
        cmd = [cc, *CFLAGS, *inc, "-o", str(exe), *map(str, srcs), *map(str, objs), "-lm"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            raise RuntimeError(f"building {name} failed:\n{' '.join(cmd)}\n{p.stderr}")
        return name, exe

    with ThreadPoolExecutor(max_workers=len(names)) as ex:
        for name, exe in ex.map(one, names):
            exes[name] = exe
    return exes


DONE = re.compile(r"^#(\d+)\s+DONE\s+(.*)$", re.M)


def run(name, exe, seconds, out):
    """Run one harness; returns a dict of results."""
    work = out / "work" / name
    shutil.rmtree(work, ignore_errors=True)
    corpus = work / "corpus"
    shutil.copytree(FUZZ / "corpus" / name, corpus)
    crashes = out / "crashes" / name
    shutil.rmtree(crashes, ignore_errors=True)   # reproducers of this run only
    crashes.mkdir(parents=True)
    cmd = [str(exe), str(corpus), f"-dict={FUZZ / (name + '.dict')}",
           f"-max_total_time={seconds}", "-timeout=10", "-rss_limit_mb=2048",
           "-print_final_stats=1", f"-artifact_prefix={crashes}/", "-close_fd_mask=1"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    log = p.stdout + p.stderr
    (work / "log.txt").write_text(log)
    m = None
    for m in DONE.finditer(log):
        pass
    stats = dict(re.findall(r"^stat::(\w+):\s+(\d+)", log, re.M))
    return {"name": name, "rc": p.returncode, "done": m.group(0) if m else None,
            "execs": int(stats.get("number_of_executed_units", m.group(1) if m else 0)),
            "corpus_files": len(list(corpus.iterdir())), "seconds": time.monotonic() - t0,
            "artifacts": sorted(str(a) for a in crashes.iterdir()), "log": work / "log.txt",
            "tail": log[-3000:]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("seconds", nargs="?", type=int, default=60)
    ap.add_argument("--only", nargs="+", choices=HARNESSES, default=list(HARNESSES))
    ap.add_argument("--jobs", type=int, default=len(HARNESSES), help="harnesses run at once")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "fuzz")
    ap.add_argument("--build-only", action="store_true")
    a = ap.parse_args(argv)
    reason = libfuzzer_available()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    try:
        exes = build(a.out.resolve(), a.only)
    except (RuntimeError, subprocess.CalledProcessError) as e:
        print(e, file=sys.stderr)
        return 2
    if a.build_only:
        return 0
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        results = list(ex.map(lambda n: run(n, exes[n], a.seconds, a.out.resolve()), a.only))
    bad = 0
    for r in results:
        ok = r["rc"] == 0 and not r["artifacts"]
        bad += not ok
        print(f"{r['name']:10s} {'ok   ' if ok else 'FAIL '} execs {r['execs']}  "
              f"corpus files {r['corpus_files']}  {r['seconds']:.0f} s")
        print(f"           {r['done'] or '(no DONE line)'}")
        if not ok:
            print(f"           exit {r['rc']}; artifacts: {', '.join(r['artifacts']) or 'none'}; "
                  f"log: {r['log']}")
            print("\n".join("           | " + l for l in r["tail"].splitlines()[-25:]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
