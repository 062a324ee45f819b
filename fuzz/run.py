#!/usr/bin/env python3
"""Build the libFuzzer harnesses of fuzz/ into build/fuzz/ and run each for N seconds.

    fuzz/run.py [SECONDS] [--only NAME ...] [--jobs J] [--out DIR] [--build-only]
    fuzz/run.py --soak [N] [--out DIR]     the CLI soak (fuzz/soak.c), N iterations (10000)

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
FIRMWARE = ROOT / "firmware"
sys.path.insert(0, str(ROOT))
from generator.build import sources as fw_sources  # noqa: E402  (the firmware's source lists)

LIB, CLI, HAL = (FIRMWARE / d for d in (fw_sources.LIB_DIR, fw_sources.CLI_DIR, fw_sources.HAL_DIR))
# the CLI's sources beside the engine: main.c, the library, formatting (entry.c: the harness's own)
CLI_GLUE = [FIRMWARE / f for f in [fw_sources.CLI_SOURCES[1]] + fw_sources.LIBRARY_SOURCES + ["hal/format.c"]]
# NEEDLE_NO_SERVE: main.c without the service (cli/serve_*.c, which would wait on standard input
# or a socket): the harnesses link main.c alone, and `--serve` is refused in one line.
CFLAGS = ["-g", "-O1", "-fno-omit-frame-pointer", "-fsanitize=fuzzer,address,undefined",
          "-fno-sanitize-recover=all", "-std=c11", "-D_GNU_SOURCE", "-DNEEDLE_NO_SERVE"]
HARNESSES = ("tokenizer", "prompt", "cli")
PLAIN = {"needle_model.c", "needle_kernels.c"}   # built without sanitizers (see build())


def sources(name, gen):
    """Harness sources and include dirs (gen: the generated engine of the tiny archive)."""
    if name == "tokenizer":
        return [FUZZ / "tokenizer.c", gen / "needle_tokenizer.c", gen / "needle_archive.S"], [gen]
    if name == "prompt":
        return [FUZZ / "prompt.c"] + [FIRMWARE / f for f in fw_sources.PROMPT_SOURCES], [LIB]
    if name == "cli":
        return ([FUZZ / "cli.c", *CLI_GLUE, gen / "needle_model.c", gen / "needle_kernels.c",
                 gen / "needle_tokenizer.c", gen / "needle_archive.S"], [gen, LIB, CLI, HAL])
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


def run_apart(cmd, **kw) -> subprocess.CompletedProcess:
    """subprocess.run(cmd), with the program's peak RSS its own.  libFuzzer's -rss_limit_mb and
    the soak's growth check read the peak RSS (getrusage), and Linux folds the RSS of the process
    that forked a program into that peak at exec: started from a test worker that holds 2 GB, a
    harness reports out-of-memory before its first input.  A shell in between forks the program
    from a small process."""
    return subprocess.run(["/bin/sh", "-c", '"$@" & wait $!', "sh", *map(str, cmd)], **kw)


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
    p = run_apart(cmd, capture_output=True, text=True, errors="replace")
    log = p.stdout + p.stderr
    (work / "log.txt").write_text(log)
    m = None
    for m in DONE.finditer(log):
        pass
    stats = dict(re.findall(r"^stat::(\w+):\s+(\d+)", log, re.M))
    return {"name": name, "rc": p.returncode, "done": m.group(0) if m else None,
            "execs": int(stats.get("number_of_executed_units", m.group(1) if m else 0)),
            "corpus_files": len(list(corpus.iterdir())), "seconds": time.monotonic() - t0,
            # a slow-unit file is libFuzzer noting an input that took over 10 s of wall time (on a
            # loaded machine, a descheduled process): not a finding; hangs come as timeout-*
            "artifacts": sorted(str(a) for a in crashes.iterdir() if not a.name.startswith("slow-unit-")),
            "log": work / "log.txt",
            "tail": log[-3000:]}


# ---------------------------------------------------------------------------------------------
# The soak (fuzz/soak.c): not libFuzzer, just clang with ASan + UBSan + LeakSanitizer.

def soak_available(cc="clang"):
    """None if `cc -fsanitize=address,undefined` links and runs with LeakSanitizer, else why."""
    if shutil.which(cc) is None:
        return f"{cc} is not installed"
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "t.c"
        src.write_text("#include <stdlib.h>\n#include <sanitizer/lsan_interface.h>\n"
                       "int main(void){ free(malloc(8)); return __lsan_do_recoverable_leak_check(); }\n")
        p = subprocess.run([cc, "-fsanitize=address,undefined", str(src), "-o", str(Path(d) / "t")],
                           capture_output=True, text=True)
        if p.returncode:
            return f"{cc} cannot link -fsanitize=address,undefined:\n" + p.stderr.strip()[-400:]
        p = subprocess.run([str(Path(d) / "t")], capture_output=True, text=True)
        if p.returncode:
            return "an ASan/LeakSanitizer program does not run here (ptrace restricted?):\n" + \
                p.stderr.strip()[-400:]
    return None


def build_soak(out, cc="clang"):
    """Generate the tiny golden engine for the host board (the kernels `scons board=host` picks)
    into out/soak-gen and link out/soak: fuzz/soak.c + firmware/cli/main.c (unchanged) +
    the library + format.c + the engine, everything under ASan + UBSan, compiled with the
    host build's numerics flags so its answers match `scons board=host sanitize=1`."""
    sys.path.insert(0, str(ROOT))
    from generator.build import boards, flags
    board = boards.load("host")
    family = boards.kernel_family(board)
    gen = out / "soak-gen"
    subprocess.run([sys.executable, "-m", "generator", "emit", str(ARCHIVE), "-o", str(gen),
                    "--board", "host", "--kernels", family],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    exe = out / "soak"
    cflags = [f for f in flags.compile_flags(board, family) if f != "-Werror"]
    cmd = [cc, *cflags, "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
           "-fno-sanitize-recover=all", "-D_GNU_SOURCE", "-DNEEDLE_NO_SERVE", f"-I{gen}", f"-I{LIB}", f"-I{CLI}", f"-I{HAL}",
           "-o", str(exe), str(FUZZ / "soak.c"), *map(str, CLI_GLUE), str(HAL / "linux" / "stdio_file.c"), str(gen / "needle_model.c"), str(gen / "needle_kernels.c"),
           str(gen / "needle_tokenizer.c"), str(gen / "needle_archive.S"), "-lm"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"building soak failed:\n{' '.join(cmd)}\n{p.stderr}")
    return exe


SOAK_LINE = re.compile(r"^soak: iterations (\d+), requests (\d+), mismatches (\d+), "
                       r"leak checks (\d+) \(leaking (\d+)\), ([\d.]+) s, maxrss (\d+) -> (\d+) KiB$", re.M)


def parse_records(text):
    """{K: (rc, stdout bytes, stderr bytes, file)} from soak's record lines."""
    recs, k, cur = {}, None, {}
    for line in text.splitlines():
        tag, _, rest = line.partition(" ")
        if tag == "request":
            k, cur = int(rest), {}
            recs[k] = cur
        elif k is not None and tag in ("rc", "stdout", "stderr", "file"):
            cur[tag] = int(rest) if tag == "rc" else bytes.fromhex(rest) if tag != "file" else rest
    return {k: (v["rc"], v["stdout"], v["stderr"], v["file"]) for k, v in recs.items()}


def soak_requests(exe):
    """[(full_stdout, [args])] as soak --list prints them."""
    p = subprocess.run([str(exe), "--list"], cwd=ROOT, capture_output=True, check=True)
    reqs = []
    for line in p.stdout.decode().splitlines():
        flag, *args = line.split(" ")
        reqs.append((flag == "full",
                     [b"" if a == "-" else bytes.fromhex(a) for a in args]))
    return reqs


def run_soak(exe, iterations):
    """Run the soak; returns (summary dict or None, first-run records, returncode, output)."""
    t0 = time.monotonic()
    p = run_apart([exe, iterations, "--records"], cwd=ROOT, capture_output=True)
    wall = time.monotonic() - t0
    text = p.stdout.decode(errors="replace")
    m = SOAK_LINE.search(text)
    summary = None
    if m:
        n, r, mis, lc, lk, s, a, b = m.groups()
        summary = {"iterations": int(n), "requests": int(r), "mismatches": int(mis),
                   "leak_checks": int(lc), "leaking": int(lk), "seconds": float(s),
                   "maxrss_first_pass_kib": int(a), "maxrss_end_kib": int(b), "wall": wall}
    return summary, parse_records(text), p.returncode, text + p.stderr.decode(errors="replace")


def fresh_records(exe, count):
    """The record of each request run alone in a fresh soak process (`soak --once K`)."""
    out = {}
    for k in range(count):
        p = subprocess.run([str(exe), "--once", str(k)], cwd=ROOT, capture_output=True)
        if p.returncode:
            raise RuntimeError(f"soak --once {k} exited {p.returncode}:\n"
                               + p.stderr.decode(errors="replace")[-2000:])
        out.update(parse_records(p.stdout.decode()))
    return out


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def binary_records(needle, requests, tmp):
    """The record of each request run by a real CLI binary (e.g. `scons board=host sanitize=1`):
    "@SINK" becomes a file in tmp, a "full" request writes its standard output to /dev/full."""
    out = {}
    for k, (full, args) in enumerate(requests):
        sink = Path(tmp) / f"sink-{k}.bin"
        if sink.exists():
            sink.unlink()
        argv = [str(needle)] + [str(sink).encode() if a == b"@SINK" else a for a in args]
        with open("/dev/full" if full else os.devnull, "wb") as devfull:
            p = subprocess.run(argv, cwd=ROOT, stdout=devfull if full else subprocess.PIPE,
                               stderr=subprocess.PIPE)
        data = sink.read_bytes() if sink.exists() else None
        file = "none" if data is None else f"{len(data)} {fnv1a64(data):016x}"
        out[k] = (p.returncode, b"" if full else p.stdout, p.stderr, file)
    return out


def compare_records(first, other, label):
    """Lines describing every request whose record differs between first and other."""
    bad = []
    for k in sorted(set(first) | set(other)):
        a, b = first.get(k), other.get(k)
        if a != b:
            bad.append(f"request {k}: in-loop first run {a!r} != {label} {b!r}")
    return bad


def soak_main(iterations, out, needle=None):
    reason = soak_available()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    try:
        exe = build_soak(out)
    except (RuntimeError, subprocess.CalledProcessError) as e:
        print(e, file=sys.stderr)
        return 2
    summary, first, rc, text = run_soak(exe, iterations)
    if summary is None or rc:
        print(f"soak FAIL: exit {rc}\n{text[-6000:]}")
        return 1
    print(f"soak: {summary['iterations']} iterations over {summary['requests']} requests in "
          f"{summary['seconds']:.1f} s ({summary['iterations'] / summary['seconds']:.0f} requests/s), "
          f"mismatches {summary['mismatches']}, leak checks {summary['leak_checks']} "
          f"(leaking {summary['leaking']}), maxrss {summary['maxrss_first_pass_kib']} -> "
          f"{summary['maxrss_end_kib']} KiB")
    bad = compare_records(first, fresh_records(exe, summary["requests"]), "soak --once")
    label = "fresh soak --once K processes"
    if needle:
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            bad += compare_records(first, binary_records(needle, soak_requests(exe), tmp), str(needle))
        label += f" and {needle}"
    print(f"first runs vs {label}: {len(bad)} differing")
    for line in bad[:20]:
        print("  " + line)
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("seconds", nargs="?", type=int, default=60)
    ap.add_argument("--only", nargs="+", choices=HARNESSES, default=list(HARNESSES))
    ap.add_argument("--jobs", type=int, default=len(HARNESSES), help="harnesses run at once")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "fuzz")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--soak", type=int, nargs="?", const=10000, metavar="N",
                    help="build and run the CLI soak (fuzz/soak.c) for N iterations instead")
    ap.add_argument("--needle", type=Path, help="with --soak: also compare with this CLI binary "
                    "(e.g. from scons board=host sanitize=1 archive=host_tests/golden/tiny/archive.cact)")
    a = ap.parse_args(argv)
    if a.soak is not None:
        return soak_main(a.soak, a.out.resolve(), a.needle)
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
