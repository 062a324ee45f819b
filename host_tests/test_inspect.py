"""`python -m generator inspect`: the JSON schema (docs/inspect-json.md) and the table.

The Needle 2 base census is checked against closed forms derived from the canonical order
of docs/spec/cact-format.md §8, the bit map of §12.3 (embedding 4, mHC φ maps 4, every other CQ
tensor 2, heads FP16) and the published figures in docs/spec/facts.md (405 tensors, 13,737,807 bytes
of which 115,215 are the tokenizer blob).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from generator.commands import inspect
from generator.archive import reader
from generator.commands.cli import main
from generator.archive.format import CENSUS_KINDS, HEADER_FIELDS, TAG_N2

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "inspect-json.md"
TOP_KEYS = ("schema", "generation", "tag", "bytes", "sha256", "tensor_count", "geometry",
            "census", "heads", "tokenizer", "session_ram", "tensors")

PUBLISHED_N2_BYTES = 13_737_807
PUBLISHED_N2_TOKENIZER = 115_215


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def tiny_json(tiny_path) -> dict:
    proc = run_cli("inspect", str(tiny_path), "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def tiny_archive(tiny_bytes):
    return reader.read(tiny_bytes)


# ---- JSON: top level ----------------------------------------------------------------------------

def test_json_top_level_keys(tiny_json):
    assert tuple(tiny_json) == TOP_KEYS


def test_json_identity(tiny_json, tiny_bytes):
    assert tiny_json["schema"] == 1
    assert tiny_json["generation"] == 2
    assert tiny_json["tag"] == f"0x{TAG_N2:08X}" == "0x05E12A83"
    assert tiny_json["bytes"] == len(tiny_bytes) == 154074
    assert tiny_json["sha256"] == hashlib.sha256(tiny_bytes).hexdigest()
    assert tiny_json["tensor_count"] == 55


def test_json_geometry_has_every_header_field(tiny_json, tiny_archive):
    geometry = tiny_json["geometry"]
    assert list(geometry) == [f for f in HEADER_FIELDS[2] if f != "tag"]
    for name, value in geometry.items():
        assert value == tiny_archive.header[name], name
    assert isinstance(geometry["rope_theta"], float)
    assert all(isinstance(v, int) for k, v in geometry.items() if k != "rope_theta")


def test_json_census_shape(tiny_json):
    census = tiny_json["census"]
    assert tuple(census) == CENSUS_KINDS == ("fp16", "fp32", "cq1", "cq2", "cq3", "cq4",
                                             "ternary", "raw")
    for kind, entry in census.items():
        assert set(entry) == {"count", "bytes"}, kind
        assert isinstance(entry["count"], int) and isinstance(entry["bytes"], int)
        assert entry["count"] >= 0 and entry["bytes"] >= 0
        assert (entry["count"] == 0) <= (entry["bytes"] == 0)


def test_json_census_sums(tiny_json, tiny_archive):
    census = tiny_json["census"]
    assert sum(e["count"] for e in census.values()) == tiny_json["tensor_count"]
    total = sum(r.nbytes for r in tiny_archive.records)
    assert sum(e["bytes"] for e in census.values()) == total
    assert sum(t["bytes"] for t in tiny_json["tensors"]) == total


def test_json_census_of_tiny(tiny_json):
    """tiny: 2 layers, 2 engram sites, both heads, default bit map (embedding/mhc 4, rest 2)."""
    c = tiny_json["census"]
    assert c["cq4"]["count"] == 1 + 3
    assert c["cq2"]["count"] == 2 * 5 + 2 * 3
    assert c["fp16"]["count"] == 2 * 9 + 6 + 2 + 1 + 7
    assert c["raw"]["count"] == 1
    assert c["fp32"]["count"] == c["cq1"]["count"] == c["cq3"]["count"] == c["ternary"]["count"] == 0


def test_json_tensors(tiny_json, tiny_archive):
    tensors = tiny_json["tensors"]
    assert len(tensors) == 55
    for t, r in zip(tensors, tiny_archive.records):
        assert set(t) == {"index", "role", "dtype", "shape", "offset", "bytes"}
        assert (t["index"], t["role"], t["shape"], t["offset"], t["bytes"]) == \
               (r.index, r.role, list(r.shape), r.offset, r.nbytes)
        assert t["dtype"] in CENSUS_KINDS
    assert tensors[0]["role"] == "embedding" and tensors[0]["dtype"] == "cq4"
    assert tensors[-1] == {"index": 54, "role": "tokenizer", "dtype": "raw", "shape": [],
                           "offset": 142784, "bytes": 11290}


def test_json_heads_tokenizer_session_ram(tiny_json):
    assert tiny_json["heads"] == ["contrastive", "confidence"]
    assert tiny_json["tokenizer"] == {"pieces": 1024, "bytes": 11290, "add_dummy_prefix": 1,
                                      "byte_fallback": 1}
    ram = tiny_json["session_ram"]
    assert set(ram) == {"window", "local_window", "kv_bits", "bytes_per_position", "kv_bytes",
                        "engram_history_bytes", "total_bytes"}
    # int8 KV: per layer and KV head, K and V of 16 values + one f16 scale per 32 values
    assert ram["window"] == 64 and ram["kv_bits"] == 8
    assert ram["bytes_per_position"] == 2 * 2 * (16 + 2) * 2
    assert ram["kv_bytes"] == 64 * ram["bytes_per_position"]
    assert ram["engram_history_bytes"] == 2 * (3 * 3 + 1) * 64 * 4
    assert ram["total_bytes"] == ram["kv_bytes"] + ram["engram_history_bytes"]


def test_json_matches_library_summary(tiny_json, tiny_path):
    assert tiny_json == json.loads(json.dumps(inspect.summary(reader.read(tiny_path))))


# ---- human output ---------------------------------------------------------------------------------

def test_human_output_has_the_tensor_table(tiny_path, tiny_archive, capsys):
    assert main(["inspect", str(tiny_path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith("Needle 2 archive, 154,074 bytes, 55 tensors\n")
    assert "heads: contrastive, confidence" in out
    assert "tokenizer: 1024 pieces, 11,290 bytes" in out
    for kind in ("fp16", "cq2", "cq4", "raw"):
        assert re.search(rf"^  {kind}\s+\d+\s+[\d,]+\s+[\d.]+ MB$", out, re.M), kind
    for r in tiny_archive.records:
        row = re.search(rf"^\s+{r.index}\s+{re.escape(r.role)}\s+(\w+)\s+(\[.*?\])\s+{r.offset}\s+"
                        rf"{r.nbytes}$", out, re.M)
        assert row, r.role
        assert row.group(2) == str(list(r.shape))
    assert re.search(r"^\s+3\s+layer00\.k_proj\s+cq2\s+\[32, 64\]", out, re.M)


def test_human_output_brief_omits_the_table(tiny_path, capsys):
    assert main(["inspect", str(tiny_path), "--brief"]) == 0
    out, _ = capsys.readouterr()
    assert "census:" in out and "geometry:" in out
    assert "layer00.k_proj" not in out


def test_cli_human_output_subprocess(tiny_path):
    proc = run_cli("inspect", str(tiny_path))
    assert proc.returncode == 0 and proc.stderr == ""
    assert "layer01.out_proj" in proc.stdout and "head.confidence.proj" in proc.stdout


def test_cli_closed_stdout_gives_no_traceback(tiny_path):
    proc = subprocess.Popen([sys.executable, "-m", "generator", "inspect", str(tiny_path), "--json"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader goes away before the first write
    _, err = proc.communicate(timeout=60)
    assert b"Traceback" not in err
    assert len(err.splitlines()) <= 1
    assert proc.returncode == 2


# ---- the documented schema -----------------------------------------------------------------------

def test_docs_describe_every_key(tiny_json):
    text = DOC.read_text(encoding="utf-8")
    keys = set(tiny_json) | set(tiny_json["tokenizer"]) | set(tiny_json["session_ram"]) \
        | set(tiny_json["tensors"][0]) | {"count"} | set(CENSUS_KINDS)
    for key in sorted(keys):
        assert f"`{key}`" in text, f"docs/inspect-json.md does not document `{key}`"
    # the example in the document is real output of the tiny archive
    example = re.search(r"```json\n(.*?)\n```", text, re.S).group(1)
    assert '"sha256": "' + tiny_json["sha256"] + '"' in example
    assert '"tensor_count": 55' in example


# ---- Needle 2 base: closed-form census -------------------------------------------------------------

def expected_n2_census(h: dict, heads: dict[int, tuple[int, int]], widths: dict[str, int],
                       tokenizer_bytes: int) -> dict[str, dict[str, int]]:
    """Census of a Needle 2 archive from the header alone (docs/spec/cact-format.md §6.2, §8, §10.1).

    widths: {"embedding": b, "mhc": b, "rest": b} CQ width codes; heads: code -> (P, out).
    """
    d, H, G, L = h["d_model"], h["num_heads"], h["num_kv_heads"], h["num_layers"]
    hd, N, n = h["head_dim"], h["hada_n"], h["mhc_lanes"]
    M, s, T, S, V = (h["engram_slots"], h["engram_sub_dim"], h["num_engram_tables"],
                     h["num_engram_sites"], h["vocab"])
    A, K, E = H * hd, G * hd, T * s
    out = defaultdict(lambda: {"count": 0, "bytes": 0})

    def cq(rows, cols, bits):
        in_pad = -(-cols // 128) * 128
        w = 2 if bits == 5 else bits
        key = "ternary" if bits == 5 else f"cq{bits}"
        out[key]["count"] += 1
        out[key]["bytes"] += rows * in_pad * w // 8 + 2 * rows * (in_pad // 128)

    def fp16(*shape):
        size = 1
        for x in shape:
            size *= x
        out["fp16"]["count"] += 1
        out["fp16"]["bytes"] += 2 * size

    cq(V, d, widths["embedding"])
    for _ in range(L):
        fp16(d)
        cq(A, d, widths["rest"]), cq(K, d, widths["rest"]), cq(K, d, widths["rest"])
        fp16(hd), fp16(hd)
        cq(A, d, widths["rest"]), cq(d, A, widths["rest"])
        fp16(d), fp16(1), fp16(d), fp16(N), fp16(N), fp16(N)
    fp16(L), fp16(L), fp16(L), fp16(L, n), fp16(L, n), fp16(L, n, n)
    cq(L * n, n * d, widths["mhc"]), cq(L * n, n * d, widths["mhc"]), cq(L * n * n, n * d, widths["mhc"])
    for _ in range(S):
        cq(T * M, s, widths["rest"]), cq(d, E, widths["rest"]), cq(d, E, widths["rest"])
        fp16(4, d)
    fp16(d)
    if heads:
        fp16(len(heads))
        for code in sorted(heads):
            P, o = heads[code]
            fp16(P, d), fp16(o, P * d), fp16(o)
    out["raw"] = {"count": 1, "bytes": tokenizer_bytes}
    return {k: dict(out[k]) if k in out else {"count": 0, "bytes": 0} for k in CENSUS_KINDS}


@pytest.fixture(scope="module")
def base_summary(needle2_base_bytes):
    a = reader.read(needle2_base_bytes)
    return a, inspect.summary(a)


def test_needle2_base_tensor_count(base_summary):
    a, s = base_summary
    h = a.header
    assert (h["d_model"], h["num_heads"], h["num_kv_heads"], h["num_layers"], h["vocab"]) == \
           (512, 8, 4, 27, 8192)
    core = 11 + 14 * 27 + 4 * 2          # §8: F + 1
    assert core == 397
    assert s["tensor_count"] == core + (1 + 3 * 2) + 1 == 405
    assert s["heads"] == ["contrastive", "confidence"]


def test_needle2_base_census_closed_form(base_summary):
    a, s = base_summary
    tok = a.records[-1].nbytes
    want = expected_n2_census(a.header, {1: (4, 128), 2: (8, 1)},
                              {"embedding": 4, "mhc": 4, "rest": 2}, tok)
    assert s["census"] == want
    c = s["census"]
    # the same numbers spelled out (d 512, A 512, K 256, N 512, n 4, M 8192, s 128, T 4)
    assert c["cq4"] == {"count": 1 + 3, "bytes": 8192 * 264 + 2 * 108 * 1056 + 432 * 1056}
    assert c["cq4"]["bytes"] == 2_846_976
    assert c["cq2"]["count"] == 27 * 5 + 2 * 3 == 141
    assert c["cq2"]["bytes"] == 27 * (3 * 512 * 136 + 2 * 256 * 136) + 2 * (32768 * 34 + 2 * 512 * 136)
    assert c["cq2"]["bytes"] == 10_027_008
    assert c["fp16"]["count"] == 27 * 9 + 6 + 2 + 1 + 7 == 259
    assert c["fp16"]["bytes"] == 728_558
    assert c["raw"] == {"count": 1, "bytes": tok}
    assert c["fp32"]["count"] == c["cq1"]["count"] == c["cq3"]["count"] == c["ternary"]["count"] == 0


def test_needle2_base_size_matches_published_archive(base_summary):
    """Everything but the tokenizer blob is byte-for-byte the size of the published file."""
    a, s = base_summary
    assert s["bytes"] - s["tokenizer"]["bytes"] == PUBLISHED_N2_BYTES - PUBLISHED_N2_TOKENIZER
    assert s["bytes"] - s["tokenizer"]["bytes"] == 13_622_592
    assert s["tokenizer"]["pieces"] == 8192


def test_needle2_base_session_ram(base_summary):
    """kv_window 256, int8 KV; and the budget window of docs/spec/facts.md (704) when kv_window is 0."""
    a, s = base_summary
    ram = s["session_ram"]
    assert ram["window"] == 256
    # 27 layers x 4 KV heads x keys and values x (64 codes + 2 f16 scales): 256 positions fit
    # 4 MiB (3,760,128 bytes; f32 scales made it 15,552 a position, 3,981,312)
    assert ram["bytes_per_position"] == 27 * 4 * 2 * (64 + 2 * 2) == 14_688
    assert ram["engram_history_bytes"] == 2 * (3 * 3 + 1) * 512 * 4
    derived = dataclasses.replace(a, header={**a.header, "kv_window": 0})
    assert inspect.kv_ram(derived)["window"] == 704
