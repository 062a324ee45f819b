"""Batched prefill (issue 13 item 1, docs/numerics.md §12): needle_prefill feeds a prompt
NEEDLE_PREFILL_CHUNK tokens per pass over the weights (nk_gemm_a8), attends for a whole pass
at once while its positions fit the KV ring, and computes the output head for the last token
only.  Every row and head of every token is the same float sum as in needle_step, so the
logits after a prefill of K tokens, and every logit after it, equal the goldens bit for bit:

* on the host, for the golden archives of both generations, with chunks that split the
  prompt unevenly (1, 3, 4, 5, 7 tokens and the RAM default), the `x86` kernels (blocked GEMM)
  and `scalar` ones (decode-once GEMM), and engines with a thread pool run with every thread
  count (thread_grain=0: a pass splits every product by rows and deals its per-token steps,
  attention included, across the threads; the steps after the prompt split every product);
* through the ring's wrap (tiny-wrap-kv4: window 16, a 48-token prompt; the n3 goldens:
  local windows): passes whose positions reuse a slot attend token by token;
* the probe heads' cells (--heads) after a prefill equal those after stepping;
* every board under its emulator (host_tests/test_boards.py runs `--prefill` there).

The API contract: n = 0, an id out of range, or a prompt longer than the context room is
refused with one line and nothing fed (the position stays where it was)."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from generator.build import sdk
from generator.commands import golden
from generator.model import geometry
from generator.archive import reader
from host_tests.scons_run import ROOT, scons

GOLDEN = ROOT / "host_tests" / "golden"

# (archive, scons options): chunk sizes that leave partial passes, both GEMM forms, threads
CASES = [
    ("tiny", ["prefill_chunk=3"]),
    ("tiny", ["kernels=scalar", "prefill_chunk=5"]),
    ("small", []),
    ("small", ["threads=3", "thread_grain=0", "prefill_chunk=4"]),
    ("tiny-wrap-kv4", ["prefill_chunk=5"]),
    ("tiny-wrap-kv4", []),
    ("tiny-wrap-kv4", ["threads=2", "thread_grain=0", "prefill_chunk=5"]),
    ("n3-tiny", ["prefill_chunk=4"]),
    ("n3-small", ["threads=2", "thread_grain=0"]),
    ("n3-rung", ["kernels=scalar", "prefill_chunk=7"]),
    ("n3-rung", ["prefill_chunk=1"]),
]


def _build(name: str, options: list[str], where) -> tuple[int, object]:
    scons("board=host", f"archive={GOLDEN / name / 'archive.cact'}", f"build={where}", *options)
    header = (where / "gen" / "needle_model.h").read_text()
    chunk = int(header.split("#define NEEDLE_PREFILL_CHUNK ")[1].split("u")[0])
    return chunk, where / "needle"


@pytest.mark.parametrize("name,options", CASES, ids=[f"{n}-{'-'.join(o) or 'default'}" for n, o in CASES])
def test_prefill_then_steps_equal_the_goldens(name, options, tmp_path):
    chunk, exe = _build(name, options, tmp_path / "b")
    for opt in options:
        if opt.startswith("prefill_chunk="):
            assert chunk == int(opt.split("=")[1])
    meta, logits = golden.load(GOLDEN / name)
    want = logits["a8"]
    tokens = ",".join(map(str, meta["tokens"]))
    n = len(meta["tokens"])
    threads = next((int(o.split("=")[1]) for o in options if o.startswith("threads=")), 1)
    for k in sorted({1, 2, chunk, chunk + 1, 2 * chunk + 1, n - 1, n} & set(range(1, n + 1))):
        for used in range(1, threads + 1):
            out = tmp_path / f"k{k}-t{used}.f32"
            proc = subprocess.run([str(exe), "--tokens", tokens, "--prefill", str(k), "--logits", str(out),
                                   "--threads", str(used)], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr
            got = np.fromfile(out, dtype="<f4").reshape(n - k + 1, want.shape[1])
            assert np.array_equal(got, want[k - 1:]), f"--prefill {k} (chunk {chunk}, --threads {used})"


def test_probe_heads_after_a_prefill_equal_stepping(tmp_path):
    _, exe = _build("n3-tiny", ["head_tokens=48", "prefill_chunk=5"], tmp_path / "b")
    meta, _ = golden.load(GOLDEN / "n3-tiny")
    tokens = ",".join(map(str, meta["tokens"][:23]))
    outs = []
    for extra in ([], ["--prefill", "23"], ["--prefill", "11"]):
        out = tmp_path / f"heads{len(outs)}.f32"
        proc = subprocess.run([str(exe), "--tokens", tokens, "--heads", str(out), *extra],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        outs.append(out.read_bytes())
    assert outs[0] and outs[0] == outs[1] == outs[2]


def test_prefill_option_errors(tmp_path):
    _, exe = _build("tiny", [], tmp_path / "b")
    for args, message in ((["--tokens", "1,2,3", "--prefill", "4"], "--prefill 4: the --tokens list has only 3 ids"),
                          (["--tokens", "1,2", "--prefill", "0"], "--prefill wants an integer"),
                          (["--prefill", "2", "--info"], "--prefill go with --tokens")):
        proc = subprocess.run([str(exe), *args], capture_output=True, text=True)
        assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


API_DRIVER = r"""
#include <stdio.h>
#include <string.h>
#include "needle.h"

static uint32_t ids[NEEDLE_MAX_SEQ + 1];
static float stepped[NEEDLE_OUT_VOCAB];

int main(void)
{
    if (needle_boot()) { printf("boot: %s\n", needle_error()); return 1; }
    for (uint32_t i = 0; i <= NEEDLE_MAX_SEQ; i++) ids[i] = (i * 2654435761u) % NEEDLE_VOCAB;
    /* refusals: one line, nothing fed */
    int r = needle_prefill(ids, 0) == NULL;
    printf("empty: %d %s pos %u\n", r, needle_error(), needle_position());
    ids[3] = NEEDLE_VOCAB;
    r = needle_prefill(ids, 5) == NULL;
    printf("range: %d %s pos %u\n", r, needle_error(), needle_position());
    ids[3] = 7;
    r = needle_prefill(ids, NEEDLE_MAX_SEQ + 1) == NULL;
    printf("full: %d %s pos %u\n", r, needle_error(), needle_position());
    const float *lg = needle_prefill(ids, 9);
    printf("room: %d pos %u\n", lg != NULL, needle_position());
    memcpy(stepped, lg, sizeof stepped);
    r = needle_prefill(ids, NEEDLE_MAX_SEQ - 8) == NULL;
    printf("over: %d %s pos %u\n", r, needle_error(), needle_position());
    /* the same logits as stepping */
    needle_reset();
    for (uint32_t i = 0; i < 9; i++) lg = needle_step(ids[i]);
    printf("same: %d\n", memcmp(lg, stepped, sizeof stepped) == 0);
    printf("chunk: %u\n", NEEDLE_PREFILL_CHUNK);
    return 0;
}
"""


def test_prefill_api_refuses_without_feeding(tmp_path):
    scons("board=host", f"archive={GOLDEN / 'tiny' / 'archive.cact'}", f"build={tmp_path / 'b'}", "lib=1",
          "prefill_chunk=4")
    pc = tmp_path / "b" / sdk.SDK_DIR / "lib" / "pkgconfig"
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "needle"], env={"PKG_CONFIG_LIBDIR": str(pc)},
                           capture_output=True, text=True, check=True).stdout.split()
    src = tmp_path / "driver.c"
    src.write_text(API_DRIVER)
    exe = tmp_path / "driver"
    subprocess.run(["gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(src)] + flags,
                   check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["empty: 1 needle_prefill: no tokens to feed pos 0",
                   "range: 1 token id outside the vocabulary pos 0",
                   "full: 1 context full: max_seq_len tokens already fed pos 0",
                   "room: 1 pos 9",
                   "over: 1 context full: max_seq_len tokens already fed pos 9",
                   "same: 1",
                   "chunk: 4"]


def test_default_chunk_follows_the_board_ram():
    """The largest power of two up to 32 whose per-token vectors (and attention scores) fit
    1/64 of the board's engine RAM (geometry.PREFILL_RAM_SHARE)."""
    h = reader.read((ROOT / "demo" / "needle2-demo.cact").read_bytes()).header
    per_token = geometry.prefill_token_bytes(h, 64)
    assert geometry.default_prefill_chunk(h, 256 << 20, 64) == geometry.PREFILL_CHUNK_MAX
    assert geometry.PREFILL_RAM_SHARE == 64
    assert geometry.default_prefill_chunk(h, 64 * per_token * 5, 64) == 4
    assert geometry.default_prefill_chunk(h, 64 * per_token - 1, 64) == 1
    # more positions to score, smaller chunks
    assert geometry.prefill_token_bytes(h, 4096) > geometry.prefill_token_bytes(h, 64)


@pytest.mark.parametrize("value,message", [("0", "prefill_chunk=0 must be a positive integer"),
                                           ("x", "prefill_chunk=x must be a positive integer"),
                                           ("300", "prefill_chunk=300: give 1 to 256 tokens per pass")])
def test_scons_refuses_bad_prefill_chunks(value, message, tmp_path):
    proc = scons("board=host", f"build={tmp_path / 'b'}", f"prefill_chunk={value}", check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
