"""The generated C engine on the host: goldens, compilers, sanitizers, presets, checks, CLI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile

from generator.build import boards
from generator.build import elfcheck
from generator.build.runner import BoardRunner
from generator.commands import golden
from generator.errors import CactError
from host_tests.scons_run import scons

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "host_tests" / "golden"
NAMES = sorted(golden.RECIPES)            # Needle 2 goldens
N3_NAMES = sorted(golden.N3_RECIPES)       # Needle 3 goldens
TOL = 1e-3   # issue bar: per position max |Δlogit| <= TOL * max |logit|


def build(archive: Path, build_dir: Path, *extra: str) -> Path:
    scons("board=host", f"archive={archive}", f"build={build_dir}", *extra)
    return build_dir / "needle"


def run(binary: Path, *args, check=True) -> subprocess.CompletedProcess:
    """The host engine `binary` with `args` (BoardRunner, as conftest's board_runner), its
    failure an assertion unless check=False."""
    proc = BoardRunner("host", binary).run(args, timeout=600)
    if check and proc.returncode:
        raise AssertionError(f"{binary} {' '.join(map(str, args))} failed: {proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def engines(tmp_path_factory):
    """One gcc build per golden archive."""
    root = tmp_path_factory.mktemp("engines")
    return {n: build(GOLDEN / n / "archive.cact", root / n) for n in NAMES}


def teacher_forced(binary: Path, tokens: list[int], out: Path) -> np.ndarray:
    run(binary, "--tokens", ",".join(map(str, tokens)), "--logits", out)
    return np.fromfile(out, dtype="<f4").reshape(len(tokens), -1)


def check_against_golden(binary: Path, name: str, tmp_path: Path) -> float:
    meta, logits = golden.load(GOLDEN / name)
    got = teacher_forced(binary, meta["tokens"], tmp_path / f"{name}.f32")
    want = logits["a8"]
    per_pos = np.abs(got - want).max(axis=1) / np.abs(want).max(axis=1)
    assert per_pos.max() <= TOL, f"{name}: max relative |Δlogit| {per_pos.max():.3g}"
    greedy = run(binary, "--prompt", meta["prompt"], "--max-new", meta["recipe"]["max_new"], "--ids")
    ids = [int(x) for x in greedy.stdout.strip().split(",") if x]
    assert ids == meta["greedy"]["a8"]
    return float(per_pos.max())


# ---- numbers ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_engine_matches_golden(engines, name, tmp_path):
    rel = check_against_golden(engines[name], name, tmp_path)
    print(f"\n{name}: max per-position |Δlogit| / max |logit| = {rel:.3g}", file=sys.stderr)


@pytest.mark.parametrize("name", NAMES)
def test_engine_is_bit_exact_on_the_host(engines, name, tmp_path):
    """docs/numerics.md is followed to the letter: the host engine reproduces a8 exactly."""
    meta, logits = golden.load(GOLDEN / name)
    got = teacher_forced(engines[name], meta["tokens"], tmp_path / "l.f32")
    assert np.array_equal(got, logits["a8"])


@pytest.mark.parametrize("name", N3_NAMES)
def test_needle3_engine_matches_golden(name, tmp_path):
    """The same templates generate the Needle 3 engine (conv taps, local/global rings, Monarch
    MLP, out_vocab, per-head int8): bit-identical to the Needle 3 reference."""
    binary = build(GOLDEN / name / "archive.cact", tmp_path / name)
    check_against_golden(binary, name, tmp_path)
    meta, logits = golden.load(GOLDEN / name)
    got = teacher_forced(binary, meta["tokens"], tmp_path / "l.f32")
    assert np.array_equal(got, logits["a8"])
    assert "Needle 3" in run(binary, "--info").stdout


def test_clang_build_matches_golden(tmp_path):
    binary = build(GOLDEN / "tiny-wrap-kv4" / "archive.cact", tmp_path / "clang", "cc=clang")
    check_against_golden(binary, "tiny-wrap-kv4", tmp_path)


@pytest.mark.parametrize("name", NAMES)
def test_sanitized_build_matches_golden(name, tmp_path):
    binary = build(GOLDEN / name / "archive.cact", tmp_path / "asan", "sanitize=1")
    check_against_golden(binary, name, tmp_path)


def test_engine_takes_the_log_domain_sinkhorn_where_the_reference_does(tmp_path, monkeypatch):
    """docs/numerics.md §2.2: a routing matrix with a row spanning more than 60 runs the
    log-domain iteration.  Layer 0's b_res puts every row's lane 1 100 below the others (in
    f32, e^-100 is a subnormal with two significant bits, so the exp domain would lose the
    column the log domain lifts to sum 1), layer 1 keeps the archive's (exp domain), and
    the engine equals the reference bit for bit at every position."""
    from dataclasses import replace
    from generator.archive import reader
    from generator.model import Needle2
    from generator.model import numerics as nm
    from host_tests import archive_edit

    def widen(tensors, hdr):
        i = next(k for k, t in enumerate(tensors) if t.role == "mhc.b_res")
        n = hdr["mhc_lanes"]
        b = np.frombuffer(tensors[i].payload, "<f2").reshape(-1, n, n).copy()
        b[0] = 0.0
        b[0][:, 1] = -100.0
        tensors[i] = replace(tensors[i], payload=b.tobytes())
    archive = tmp_path / "wide.cact"
    archive.write_bytes(archive_edit.edit_tensors((GOLDEN / "tiny" / "archive.cact").read_bytes(), widen))

    paths = []
    original = nm.sinkhorn
    def recording(r, *a, **k):
        paths.append((r - r.max(axis=-1, keepdims=True) >= -60).all(axis=(-1, -2)))
        return original(r, *a, **k)
    monkeypatch.setattr(nm, "sinkhorn", recording)
    tokens = golden.load(GOLDEN / "tiny")[0]["tokens"]
    want = Needle2(reader.read(archive.read_bytes()), "a8").logits(tokens)
    exp_domain = np.concatenate([np.atleast_1d(p) for p in paths])
    assert exp_domain.any() and not exp_domain.all()    # both paths ran
    got = teacher_forced(build(archive, tmp_path / "b"), tokens, tmp_path / "wide.f32")
    assert np.array_equal(got, want)


def test_engine_attends_past_a_run_of_128_positions_bit_for_bit(engines, tmp_path):
    """docs/numerics.md §6: the integer weighted sum adds its int32 sums in runs of 128
    visible positions; `small` (window 160) at 150 teacher-forced positions crosses one run
    boundary in every layer, stepped and through the prefill pass."""
    from generator.archive import reader
    from generator.model import Needle2
    tokens = [2] + [int(x) for x in np.random.default_rng(4).integers(3, 8192, size=149)]
    want = Needle2(reader.read((GOLDEN / "small" / "archive.cact").read_bytes()), "a8").logits(tokens)
    got = teacher_forced(engines["small"], tokens, tmp_path / "long.f32")
    assert np.array_equal(got, want)
    out = tmp_path / "long-prefill.f32"      # the first 140 in passes, then 10 steps
    run(engines["small"], "--tokens", ",".join(map(str, tokens)), "--prefill", 140, "--logits", out)
    assert np.array_equal(np.fromfile(out, dtype="<f4").reshape(11, -1), want[139:])


@pytest.mark.parametrize("preset", ["tiny", "small", "needle2-base"])
def test_every_preset_generates_builds_and_runs(preset, tmp_path):
    archive = tmp_path / f"{preset}.cact"
    subprocess.run([sys.executable, "-m", "generator", "synth", "--preset", preset, "--seed", "5",
                    "-o", str(archive)], cwd=ROOT, check=True, capture_output=True)
    binary = build(archive, tmp_path / "b")
    info = run(binary, "--info").stdout
    assert "Needle 2" in info and "vocab" in info
    out = run(binary, "--tokens", "2,5,9,4").stdout.strip().split(",")
    assert len(out) == 4
    text = run(binary, "--prompt", "Hello there", "--max-new", "3")
    assert text.returncode == 0


# ---- the build -------------------------------------------------------------------------

def test_generated_code_is_reproducible_and_says_where_it_came_from(tmp_path):
    archive = GOLDEN / "tiny" / "archive.cact"
    from generator.codegen import pipeline as engine
    a, b = tmp_path / "a", tmp_path / "b"
    engine.generate(str(archive), str(a), incbin_path="x.cact")
    engine.generate(str(archive), str(b), incbin_path="x.cact")
    for name in engine.outputs():
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    header = (a / "needle_model.h").read_text()
    meta, _ = golden.load(GOLDEN / "tiny")
    assert meta["archive_sha256"] in header and "generated by needle-fw" in header
    for name in engine.outputs():
        text = (a / name).read_text()
        assert "malloc" not in text and "free(" not in text
    model = (a / "needle_model.c").read_text()
    assert "static const layer_weights LAYER[L]" in model and "} st;" in model
    assert model.count("_Static_assert") >= 5


def test_rebuilds_when_and_only_when_inputs_change(tmp_path):
    archive = tmp_path / "a.cact"
    shutil.copy(GOLDEN / "tiny" / "archive.cact", archive)
    build(archive, tmp_path / "b")
    again = scons("board=host", f"archive={archive}", f"build={tmp_path / 'b'}")
    assert again.stdout == "scons: `host' is up to date.\n"      # nothing generated or compiled
    # synth refuses -o naming its --like input (issue 41): write beside it, then rename over it
    subprocess.run([sys.executable, "-m", "generator", "synth", "--like", str(archive), "--seed", "9",
                    "-o", str(tmp_path / "new.cact")], cwd=ROOT, check=True, capture_output=True)
    os.replace(tmp_path / "new.cact", archive)
    changed = scons("board=host", f"archive={archive}", f"build={tmp_path / 'b'}")
    assert f"GEN {tmp_path / 'b' / 'gen'}" in changed.stdout.splitlines()


def test_engine_builder_signature_covers_templates_and_generator():
    """The generator's sources and every template are inputs of the generate step."""
    proc = scons("board=host", "--tree=prune", "build/host/gen/needle_model.c", "-n")
    tree = proc.stdout
    for path in ("templates/model/needle2.c.j2", "templates/model/_attention.c.j2", "templates/needle_kernels.c.j2",
                 "templates/needle_tokenizer.c.j2", "generator/codegen/plan.py",
                 "generator/codegen/render.py", "generator/archive/reader.py",
                 "generator/model/numerics.py", "boards/host.toml"):
        assert path in tree, path
    for path in ("generator/model/needle2.py", "generator/commands/cli.py", "bench/host.py"):
        assert path not in tree, f"{path} cannot change the generated code"


def test_scons_help_lists_every_option():
    out = scons("-h").stdout
    for opt in ("board", "archive", "build", "cc", "sanitize", "kv_window", "run", "bench"):
        assert f"{opt}:" in out


@pytest.mark.parametrize("args, text", [
    (["bogus=1"], "unknown option(s) bogus"),
    (["board=nope"], "Invalid value for enum variable 'board'"),
    (["kv_window=x"], "kv_window=x must be a positive integer"),
    (["archive=/nonexistent.cact"], "does not exist"),
])
def test_scons_refuses_bad_options(args, text):
    proc = scons(*args, check=False)
    assert proc.returncode == 2
    lines = [l for l in (proc.stdout + proc.stderr).splitlines() if l.strip()]
    assert len(lines) == 1 and text in lines[0]


def test_bad_archive_fails_the_build_with_one_line(tmp_path):
    bad = tmp_path / "bad.cact"
    bad.write_bytes(b"\x00" * 200)
    proc = scons("board=host", f"archive={bad}", f"build={tmp_path / 'b'}", check=False)
    assert proc.returncode != 0
    assert "not a .cact archive (tag 0x00000000)" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "b" / "needle").exists()


def test_smaller_kv_window_is_warned_and_changes_the_ring(tmp_path):
    proc = scons("board=host", f"archive={GOLDEN / 'tiny' / 'archive.cact'}", f"build={tmp_path / 'b'}",
                 "kv_window=8")
    assert "warning: kv_window=8 is smaller than the trained window 64" in proc.stdout
    assert "window 8 (" in run(tmp_path / "b" / "needle", "--info").stdout


# ---- post-link checks and the boot check ---------------------------------------------

def cact_file_offset(elf_path: Path) -> tuple[int, int]:
    with open(elf_path, "rb") as fh:
        sec = ELFFile(fh).get_section_by_name(".cact")
        return sec["sh_offset"], sec["sh_size"]


def test_post_link_check_catches_a_changed_archive_byte(engines, tmp_path):
    elf = tmp_path / "needle"
    shutil.copy(engines["tiny"], elf)
    off, size = cact_file_offset(elf)
    data = bytearray(elf.read_bytes())
    data[off + size // 2] ^= 0x01
    elf.write_bytes(bytes(data))
    with pytest.raises(CactError, match=r"\.cact section .* differs from the archive .* first at byte"):
        elfcheck.check(str(elf), str(GOLDEN / "tiny" / "archive.cact"), boards.load("host"))


def test_engine_refuses_an_archive_with_another_header(engines, tmp_path):
    elf = tmp_path / "needle"
    shutil.copy(engines["tiny"], elf)
    off, _ = cact_file_offset(elf)
    data = bytearray(elf.read_bytes())
    data[off + 12] ^= 0x01                      # header field kv_window
    elf.write_bytes(bytes(data))
    elf.chmod(0o755)
    proc = run(elf, "--info", check=False)
    assert proc.returncode == 3
    assert "header or directory differs from the one this engine was generated for" in proc.stderr
    data[off + 12] ^= 0x01
    data[off] ^= 0x01                           # the tag
    elf.write_bytes(bytes(data))
    proc = run(elf, "--info", check=False)
    assert proc.returncode == 3 and "tag differs" in proc.stderr


def test_post_link_check_rejects_heap_use(tmp_path):
    src = tmp_path / "heap.c"
    src.write_text('#include <stdlib.h>\nint main(void){ void *p = malloc(8); free(p); return p == 0; }\n')
    asm = tmp_path / "cact.S"
    archive = GOLDEN / "tiny" / "archive.cact"
    asm.write_text(f'.section .cact, "a"\n.balign 64\n.incbin "{archive}"\n'
                   '.section .note.GNU-stack,"",%progbits\n')
    elf = tmp_path / "heap"
    subprocess.run(["gcc", "-o", str(elf), str(src), str(asm)], check=True)
    with pytest.raises(CactError, match="references free, malloc"):
        elfcheck.check(str(elf), str(archive), boards.load("host"))


def test_post_link_check_enforces_the_ram_budget(engines):
    board = boards.load("host")
    board["memory"]["ram_bytes"] = 4096
    with pytest.raises(CactError, match=r"RAM over budget on board host: [\d,]+ bytes \(KV cache 9,216\) "
                                        r"> 4,096; pass a smaller kv_window=N"):
        elfcheck.check(str(engines["tiny"]), str(GOLDEN / "tiny" / "archive.cact"), board)
    board["memory"]["ram_bytes"] = 1 << 30
    board["memory"]["flash_bytes"] = 1000
    with pytest.raises(CactError, match="flash over budget"):
        elfcheck.check(str(engines["tiny"]), str(GOLDEN / "tiny" / "archive.cact"), board)


def test_memory_report_calls_out_the_kv_cache(engines):
    rep = elfcheck.check(str(engines["tiny"]), str(GOLDEN / "tiny" / "archive.cact"), boards.load("host"))
    assert rep.kv_bytes == 64 * 2 * 2 * 2 * (16 + 2)   # window × layers × kv heads × (k, v) × (codes + f16 scale)
    assert rep.cact_bytes == (GOLDEN / "tiny" / "archive.cact").stat().st_size


# ---- the CLI ---------------------------------------------------------------------------

@pytest.mark.parametrize("args, text", [
    (["--prompt", ""], "empty prompt"),
    (["--prompt", "word " * 400], "prompt too long"),
    (["--tokens", "2,1024"], "\"1024\" is not a token id in 0..1023"),
    (["--tokens", "2,,3"], "malformed list"),
    (["--tokens", ""], "empty list"),
    (["--tools", "/nonexistent.json", "--query", "x"], "cannot read /nonexistent.json"),
    (["--frobnicate"], "unknown option \"--frobnicate\""),
    (["--max-new", "0", "--prompt", "x"], "--max-new wants an integer"),
    (["--prompt", "a", "--tokens", "2"], "choose exactly one of"),
])
def test_cli_errors_are_one_line(engines, args, text):
    proc = run(engines["tiny"], *args, check=False)
    assert proc.returncode != 0
    assert proc.stderr.count("\n") == 1 and text in proc.stderr, proc.stderr
    assert proc.stdout == ""


def test_cli_rejects_invalid_tools_json(engines, tmp_path):
    tools = tmp_path / "tools.json"
    tools.write_text('[{"name": "x",}]')
    proc = run(engines["tiny"], "--tools", tools, "--query", "hi", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "line 1, column 15" in proc.stderr


def test_cli_tool_prompt_equals_the_python_rendering(engines):
    """--tools/--query feeds the same ids the reference would (greedy output compared)."""
    from generator.tools import prompt
    from generator.archive import reader
    from generator.model import Needle2
    from generator.archive.tokenizer import Tokenizer
    tools = (ROOT / "demo" / "tools.json").read_text()
    text = prompt.render_prompt(tools, "set a timer for 5 minutes")
    a = reader.read(GOLDEN / "tiny" / "archive.cact")
    ids = [2] + Tokenizer.from_blob(a.tokenizer_blob()).encode(text)
    want = Needle2(a, "a8").generate(ids, 8)
    proc = run(engines["tiny"], "--tools", ROOT / "demo" / "tools.json", "--query",
               "set a timer for 5 minutes", "--max-new", 8, "--ids")
    assert [int(x) for x in proc.stdout.strip().split(",") if x] == want


# ---- probe heads -----------------------------------------------------------------------

def test_probe_heads_match_the_reference(tmp_path):
    """needle_head() pools every (token, row) cell exactly as the reference (pads excluded)."""
    from generator.archive import reader
    from generator.model import Needle2
    archive = GOLDEN / "tiny" / "archive.cact"
    binary = build(archive, tmp_path / "h", "head_tokens=32")
    a = reader.read(archive)
    meta, _ = golden.load(GOLDEN / "tiny")
    for toks in (meta["tokens"][:20], meta["tokens"][:5] + [0, 0] + meta["tokens"][5:12]):
        run(binary, "--tokens", ",".join(map(str, toks)), "--heads", tmp_path / "heads.f32")
        got = np.fromfile(tmp_path / "heads.f32", dtype="<f4")
        ref = Needle2(a, "a8").heads(toks)
        want = np.concatenate([ref[hd.name] for hd in a.heads])
        assert np.array_equal(got, want)
    too_many = run(binary, "--tokens", ",".join(["5"] * 33), "--heads", tmp_path / "x.f32", check=False)
    assert too_many.returncode == 2 and "head_tokens" in too_many.stderr


@pytest.mark.parametrize("name", ["n3-tiny", "n3-small"])
def test_needle3_probe_heads_match_the_reference(name, tmp_path):
    """Embedding, confidence and router heads (H1-H7) of the Needle 3 engine, pads excluded."""
    from generator.archive import reader
    from generator.model import Needle3
    archive = GOLDEN / name / "archive.cact"
    binary = build(archive, tmp_path / "h", "head_tokens=24")
    a = reader.read(archive)
    assert [hd.name for hd in a.heads] == ["embedding", "confidence", "router"]
    meta, _ = golden.load(GOLDEN / name)
    toks = meta["tokens"][:12] + [0] + meta["tokens"][12:20]
    run(binary, "--tokens", ",".join(map(str, toks)), "--heads", tmp_path / "heads.f32")
    got = np.fromfile(tmp_path / "heads.f32", dtype="<f4")
    ref = Needle3(a, "a8").heads(toks)
    assert np.array_equal(got, np.concatenate([ref[hd.name] for hd in a.heads]))


def test_heads_absent_unless_built(engines, tmp_path):
    proc = run(engines["tiny"], "--tokens", "2,5", "--heads", tmp_path / "h.f32", check=False)
    assert proc.returncode == 2 and "build with head_tokens=N" in proc.stderr
