"""Golden outputs: the reference's answers, committed so that engines are checked against them.

Each recipe names a synthetic archive (preset, seed, synth options), a teacher-forced token
sequence and a greedy prompt.  `write()` builds the archive, runs the reference in both
numerics modes and writes, under `DIR/NAME/`:

* `archive.cact`: the archive itself (also reproducible from the recipe);
* `logits_a8.f32`, `logits_float.f32`: raw little-endian float32 `[T][vocab]`;
* `meta.json`: provenance (archive sha256, recipe, generator and NumPy versions), the token
  sequence, the greedy prompt ids and the greedy continuations of both modes.

Regenerate on purpose with `python -m generator golden -o host_tests/golden` (all recipes) or
name some: `python -m generator golden tiny -o host_tests/golden`.

User archives (docs/archive.md, "Regression-test your own archive"): `write_user()` runs the a8
reference on the user's own cases (`golden --archive A --prompt ... --tokens ... --tools F
--query ... -o DIR`) and writes `DIR/cases.json` plus one `case-N.f32` of teacher-forced logits
per case; `check()` (run by `scons check=DIR`, or by hand as `python -m
generator check DIR --archive A --board B --engine BIN`) runs a built engine on every case and
compares.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from generator import __version__
from generator.archive import reader
from generator.archive.format import BOS_ID
from generator.archive.tokenizer import Tokenizer
from generator.build import boards
from generator.build.runner import BoardRunner, engine_error
from generator.commands import rung, synth
from generator.tools import prompt
from generator.errors import CactError
from generator.files import refuse_output_is_input
from generator.model import Needle2, Needle3, reference

REFERENCE_VERSION = 4  # bump when the reference's numerics change on purpose
# Bumped when a8 arithmetic changes (docs/numerics.md: what every engine computes bit for bit);
# user goldens (cases.json) record it, so a check names a golden made under other numerics.
NUMERICS_VERSION = 4

TOOL_PROMPT = (
    '<|im_start|>user\n<tools>[{"name":"get_weather","description":"Get the current weather '
    'for a city.","parameters":{"type":"object","properties":{"city":{"type":"string"}},'
    '"required":["city"]}}]</tools>\nwhat\'s it like in Lagos right now?<|im_end|>\n'
    '<|im_start|>assistant\n'
)
TEXT = ("Needle calls tools on small devices: set a timer for 10 minutes, then tell me the "
        "weather in Zürich, naïve café ☕ and 東京 too.")

RECIPES = {
    "tiny": dict(preset="tiny", seed=1, synth={}, length=48, max_new=64),
    "small": dict(preset="small", seed=2, synth={}, length=40, max_new=64),
    # a prompt longer than the window, a CQ-coded KV cache, 3-bit and ternary tensors
    "tiny-wrap-kv4": dict(preset="tiny", seed=3, length=48, max_new=64,
                          synth=dict(kv_window=16, kv_bits=4,
                                     bitmap="embedding=4,mhc=4,attn.v_proj=3,"
                                            "attn.gate_proj=1.58,engram0.value_proj=3,default=2")),
}

# Needle 3 goldens.  Kept apart from RECIPES because the Needle 2 test modules iterate that
# dict with the Needle 2 reference and engine; ALL_RECIPES is what the CLI and load() know.
# Each runs the reference with window="deploy" (the header's kv_window on every layer).
N3_RECIPES = {
    # 48 positions: past the local window 8 (rings wrap) and the deployment window 32;
    # 3 conv taps, global layer 1, out_vocab 1000, engram seed stride 3, all three heads
    "n3-tiny": dict(preset="needle3-tiny", seed=11, synth={}, length=48, max_new=64),
    # two global layers (3, 5), window 16, deployment window 32, the 8k tokenizer
    "n3-small": dict(preset="needle3-small", seed=12, synth={}, length=40, max_new=64),
    # the 3-layer rung (original layers 0, 2, 5) of needle3-small cut by generator.rung
    "n3-rung": dict(preset="needle3-small", seed=13, synth={}, rung=3, length=40, max_new=64),
}
ALL_RECIPES = {**RECIPES, **N3_RECIPES}


def build_archive(name: str) -> bytes:
    r = ALL_RECIPES[name]
    data = synth.synthesize(r["preset"], r["seed"], **r["synth"])
    if r.get("rung"):
        data = rung.cut(data, r["rung"])
    return data


def token_sequence(tok: Tokenizer, vocab: int, length: int, seed: int) -> list[int]:
    """BOS, the encoded demo text, then seeded random ids up to `length`."""
    ids = [BOS_ID] + tok.encode(TEXT)
    rng = np.random.default_rng(seed)
    while len(ids) < length:
        ids.append(int(rng.integers(4, vocab)))
    return ids[:length]


def _provenance(data: bytes, recipe: dict) -> dict:
    """What a golden records about where it came from."""
    return {"archive_sha256": hashlib.sha256(data).hexdigest(), "archive_bytes": len(data),
            "recipe": recipe, "generator_version": __version__,
            "reference_version": REFERENCE_VERSION, "numpy_version": np.__version__}


def compute(name: str, data: bytes) -> tuple[dict, dict[str, np.ndarray]]:
    r = ALL_RECIPES[name]
    a = reader.read(data)
    if a.generation == 3:
        return _compute_n3(name, r, a, data)
    tok = Tokenizer.from_blob(a.tokenizer_blob())
    seq = token_sequence(tok, a.header["vocab"], r["length"], r["seed"])
    prompt_ids = [BOS_ID] + tok.encode(TOOL_PROMPT)
    logits, greedy = {}, {}
    for mode in ("a8", "float"):
        model = Needle2(a, mode)
        logits[mode] = model.logits(seq)
        greedy[mode] = model.generate(prompt_ids, r["max_new"])
    meta = {
        "name": name,
        **_provenance(data, r),
        "kv_window": a.header["kv_window"],
        "kv_bits": a.header["kv_bits"],
        "vocab": a.header["vocab"],
        "tokens": seq,
        "prompt": TOOL_PROMPT,
        "prompt_ids": prompt_ids,
        "greedy": greedy,
        "greedy_text": {m: tok.decode(ids) for m, ids in greedy.items()},
        "regenerate": f"python -m generator golden {name} -o host_tests/golden",
    }
    return meta, logits


def _compute_n3(name: str, r: dict, a, data: bytes) -> tuple[dict, dict[str, np.ndarray]]:
    """Needle 3: logits over V_out columns, greedy runs and probe-head outputs per mode."""
    tok = Tokenizer.from_blob(a.tokenizer_blob())
    h = a.header
    seq = token_sequence(tok, h["vocab"], r["length"], r["seed"])
    prompt_ids = [BOS_ID] + tok.encode(TOOL_PROMPT)
    logits, greedy, heads = {}, {}, {}
    for mode in ("a8", "float"):
        model = Needle3(a, mode)
        logits[mode] = model.logits(seq)
        greedy[mode] = model.generate(prompt_ids, r["max_new"])
        heads[mode] = {k: [float(x) for x in v] for k, v in model.heads(seq).items()}
    meta = {
        "name": name,
        "generation": 3,
        **_provenance(data, r),
        "window": "deploy",
        "kv_window": h["kv_window"],
        "deploy_window": model.W_kv,
        "kv_bits": h["kv_bits"],
        "vocab": h["vocab"],
        "out_vocab": h["out_vocab"],
        "logit_columns": model.V_out,
        "sliding_window": h["sliding_window"],
        "global_layers": sorted(model.globals),
        "qkv_conv_taps": h["qkv_conv_taps"],
        "tokens": seq,
        "prompt": TOOL_PROMPT,
        "prompt_ids": prompt_ids,
        "greedy": greedy,
        "greedy_text": {m: tok.decode(ids) for m, ids in greedy.items()},
        "heads": heads,
        "regenerate": f"python -m generator golden {name} -o host_tests/golden",
    }
    if r.get("rung"):
        parent = synth.PRESETS[r["preset"]].geometry["num_layers"]
        meta["rung_of"] = {"preset": r["preset"], "layers": parent,
                           "kept": rung.kept_layers(parent, r["rung"])}
    return meta, logits


def _claim_recipe_dir(d: Path, name: str) -> None:
    """DIR/NAME may be written: new, empty, or a golden of recipe NAME (its meta.json says so);
    anything else is refused in one line, so no file of the user's is overwritten."""
    if d.exists() and not d.is_dir():
        raise CactError(f"{os.fspath(d)} is a file, not a directory: pass another -o DIR")
    if not d.is_dir() or not any(d.iterdir()):
        return
    try:
        meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        meta = None
    if not isinstance(meta, dict) or meta.get("name") != name:
        raise CactError(f"{os.fspath(d)} is not empty and is not the golden of recipe {name} (no meta.json "
                        "naming it): pass another -o DIR (nothing of yours is overwritten)")


def write(names: list[str], out_dir: str) -> None:
    unknown = [n for n in names if n not in ALL_RECIPES]
    if unknown:
        raise CactError(f"unknown golden recipe {unknown[0]!r}; choose from {', '.join(ALL_RECIPES)}")
    for name in names or list(ALL_RECIPES):     # refuse before any work
        _claim_recipe_dir(Path(out_dir) / name, name)
    for name in names or list(ALL_RECIPES):
        data = build_archive(name)
        meta, logits = compute(name, data)
        d = Path(out_dir) / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "archive.cact").write_bytes(data)
        for mode, arr in logits.items():
            (d / f"logits_{mode}.f32").write_bytes(arr.astype("<f4").tobytes())
        (d / "meta.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
        print(f"{name}: {len(meta['tokens'])} positions, greedy a8 {len(meta['greedy']['a8'])} tokens "
              f"-> {os.fspath(d)}")


def load(directory: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """Read one golden directory back: (meta, {mode: logits [T, V]})."""
    d = Path(directory)
    meta = json.loads((d / "meta.json").read_text())
    T, V = len(meta["tokens"]), meta.get("logit_columns", meta["vocab"])
    logits = {m: np.fromfile(d / f"logits_{m}.f32", dtype="<f4").reshape(T, V) for m in ("a8", "float")}
    return meta, logits


# ---- user archives: golden --archive ... -o DIR, then scons check=DIR --------------------

CASES_FILE = "cases.json"
CASES_FORMAT = 1              # layout of cases.json
DEFAULT_MAX_NEW = 16          # greedy tokens per prompt/query case unless --max-new says otherwise
CASE_KINDS = ("prompt", "tokens", "query")
REFERENCE_MODE = "a8"         # the mode every engine reproduces bit for bit


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def parse_ids(text: str, vocab: int, max_seq: int) -> list[int]:
    """`2,17,5` -> [2, 17, 5], each a token id of the archive, at most max_seq of them."""
    items = text.split(",")
    if not text.strip() or any(not i.strip() for i in items):
        raise CactError(f"--tokens {text!r}: want comma-separated token ids, e.g. 2,17,5")
    ids = []
    for item in items:
        item = item.strip()
        if not item.isdigit() or int(item) >= vocab:
            raise CactError(f"--tokens: {item!r} is not a token id in 0..{vocab - 1}")
        ids.append(int(item))
    if len(ids) > max_seq:
        raise CactError(f"--tokens: {len(ids)} ids but the archive's max_seq_len is {max_seq}")
    return ids


def _check_prompt_text(what: str, text: str) -> None:
    if not text:
        raise CactError(f"{what}: empty text")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise CactError(f"{what}: not valid UTF-8") from None
    if "\0" in text:
        raise CactError(f"{what}: contains a NUL character")


def _check_case_options(cases, tools, system, max_new: int) -> None:
    if not cases:
        raise CactError("golden --archive needs at least one case: --prompt TEXT, --tokens IDS "
                        "or --tools FILE --query TEXT")
    if max_new < 1:
        raise CactError(f"--max-new {max_new}: want a positive integer")
    kinds = {k for k, _ in cases}
    if "query" in kinds and tools is None:
        raise CactError("--query needs --tools FILE (the tool list the prompt is rendered with)")
    if tools is not None and "query" not in kinds:
        raise CactError("--tools goes with --query TEXT (give at least one query)")
    if system is not None and tools is None:
        raise CactError("--system goes with --tools and --query")


def _case_ids(case: dict, value: str, tok: Tokenizer, h: dict, tools, tools_text, system) -> list[int]:
    """The ids a case feeds the engine: the given ids, or BOS + the encoded (rendered) prompt;
    records the prompt (and query) text in `case`."""
    kind, index, max_seq = case["kind"], case["index"], h["max_seq_len"]
    if kind == "tokens":
        return parse_ids(value, h["vocab"], max_seq)
    _check_prompt_text(f"--{kind}", value)
    if kind == "query":
        try:
            text = prompt.render_prompt(tools_text, value, system)
        except CactError as exc:
            raise CactError(f"{tools}: {exc}") from None
        case["query"] = value
    else:
        text = value
    case["prompt"] = text
    ids = [BOS_ID] + tok.encode(text)
    if len(ids) >= max_seq:
        raise CactError(f"--{kind} case {index}: the prompt encodes to {len(ids)} tokens (BOS "
                        f"included) but max_seq_len {max_seq} must leave room for one new token")
    return ids


def compute_user(archive: str | os.PathLike, cases: list[tuple[str, str]], tools: str | None = None,
                 system: str | None = None, max_new: int = DEFAULT_MAX_NEW) -> tuple[dict, list[np.ndarray]]:
    """The a8 reference on the user's cases: (cases.json document, one logits array per case).

    `cases` is [(kind, value)] in command-line order: ("prompt", TEXT), ("tokens", "2,17,5") or
    ("query", TEXT) (rendered with the tool list in the file `tools`, as `needle --tools F
    --query Q` does).  Every case gets the teacher-forced logits of its ids (the given ids;
    BOS + the encoded prompt); prompt and query cases also get the greedy continuation of at
    most `max_new` tokens (fewer when the context is full: the engine's explicit --max-new
    must fit, so the recorded value is clamped)."""
    _check_case_options(cases, tools, system, max_new)
    path = os.fspath(archive)
    data = reader.load(path)
    a = reader.read(data)
    tok = Tokenizer.from_blob(a.tokenizer_blob())
    h = a.header
    model = reference(a, REFERENCE_MODE)
    max_seq = h["max_seq_len"]
    tools_text = None
    if tools is not None:
        try:
            tools_text = Path(tools).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CactError(f"cannot read {tools}: {getattr(exc, 'strerror', None) or exc}") from None
    out_cases, logits = [], []
    for index, (kind, value) in enumerate(cases, 1):
        if kind not in CASE_KINDS:
            raise CactError(f"unknown case kind {kind!r}")
        case: dict = {"index": index, "kind": kind}
        case["ids"] = _case_ids(case, value, tok, h, tools, tools_text, system)
        ids = case["ids"]
        case["positions"] = len(ids)
        case["logits"] = f"case-{index}.f32"
        lg = np.asarray(model.logits(ids), dtype="<f4")
        if kind != "tokens":
            n = min(max_new, max_seq - len(ids))
            greedy = [int(x) for x in model.generate(ids, n)]
            case["max_new"] = n
            case["greedy"] = greedy
            case["greedy_text"] = tok.decode(greedy)
        else:
            case["greedy"] = None     # the engine's --tokens mode is teacher-forced only
        out_cases.append(case)
        logits.append(lg)
    doc = {
        "format": "needle-fw user golden",
        "format_version": CASES_FORMAT,
        "archive": path,
        "archive_sha256": hashlib.sha256(data).hexdigest(),
        "archive_bytes": len(data),
        "generation": a.generation,
        "generator_version": __version__,
        "numerics_version": NUMERICS_VERSION,
        "reference_version": REFERENCE_VERSION,
        "reference_mode": REFERENCE_MODE,
        "numpy_version": np.__version__,
        "vocab": h["vocab"],
        "logit_columns": int(logits[0].shape[1]),
        "max_seq_len": max_seq,
        "kv_window": int(model.W_kv),
        "max_new": max_new,
        "tools": None if tools is None else {"file": os.fspath(tools), "json": tools_text},
        "system": system,
        "cases": out_cases,
    }
    return doc, logits


def claim_user_dir(out_dir: str | os.PathLike, n_cases: int, inputs: dict) -> set[str]:
    """Check, before any work, that the user goldens may be written into `out_dir`; returns the
    case files an earlier run wrote there (the ones its cases.json lists), which a shorter run
    may delete.  DIR must be new, empty, or hold a cases.json of ours ("format": "needle-fw
    user golden"); no file we did not write is ever overwritten or deleted: a non-empty
    directory without our cases.json, or a case-N.f32 that our cases.json does not list, is
    refused in one line.  No output may be one of the `inputs` (e.g. the archive)."""
    d = Path(out_dir)
    names = [CASES_FILE] + [f"case-{i}.f32" for i in range(1, n_cases + 1)]
    if d.exists() and not d.is_dir():
        raise CactError(f"-o {os.fspath(d)} is not a directory (pass a new or empty directory for the goldens)")
    try:
        present = {p.name for p in d.iterdir()} if d.is_dir() else set()
    except OSError as exc:
        raise CactError(f"cannot read the directory {os.fspath(d)}: {exc.strerror}") from None
    earlier: set[str] = set()
    if present:
        try:
            doc = json.loads((d / CASES_FILE).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            doc = None
        if not isinstance(doc, dict) or doc.get("format") != "needle-fw user golden":
            raise CactError(f"-o {os.fspath(d)} is not empty and holds no {CASES_FILE} written by python -m "
                            "generator golden: pass a new or empty directory (nothing of yours is overwritten "
                            "or deleted)")
        listed = doc.get("cases") if isinstance(doc.get("cases"), list) else []
        earlier = {c["logits"] for c in listed if isinstance(c, dict) and isinstance(c.get("logits"), str)
                   and re.fullmatch(r"case-\d+\.f32", c["logits"])} & present
        strangers = sorted(n for n in names[1:] if n in present and n not in earlier)
        if strangers:
            raise CactError(f"{os.fspath(d / strangers[0])} is not a case file of {os.fspath(d / CASES_FILE)} "
                            "(not written by golden): move it away or pass a new or empty directory")
    refuse_output_is_input([("-o", d / n) for n in names + sorted(earlier)], inputs)
    return earlier


def write_user(archive: str | os.PathLike, cases: list[tuple[str, str]], out_dir: str | os.PathLike,
               tools: str | None = None, system: str | None = None,
               max_new: int = DEFAULT_MAX_NEW) -> dict:
    """Compute the user's cases and write DIR/cases.json and DIR/case-N.f32; returns the doc.
    DIR is new, empty or a user golden directory written before (`claim_user_dir`)."""
    earlier = claim_user_dir(out_dir, len(cases), {"--archive": archive, "--tools": tools})
    doc, logits = compute_user(archive, cases, tools, system, max_new)
    argv = ["python", "-m", "generator", "golden", "--archive", os.fspath(archive)]
    if tools is not None:
        argv += ["--tools", os.fspath(tools)]
    if system is not None:
        argv += ["--system", system]
    for kind, value in cases:
        argv += [f"--{kind}", value]
    argv += ["--max-new", str(max_new), "-o", os.fspath(out_dir)]
    doc["regenerate"] = shlex.join(argv)
    d = Path(out_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
        keep = {c["logits"] for c in doc["cases"]}
        for name in sorted(earlier - keep):       # cases of an earlier, longer run (ours: listed)
            (d / name).unlink(missing_ok=True)
        for case, arr in zip(doc["cases"], logits):
            (d / case["logits"]).write_bytes(arr.astype("<f4").tobytes())
        (d / CASES_FILE).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise CactError(f"cannot write {exc.filename or d}: {exc.strerror}") from None
    for case, arr in zip(doc["cases"], logits):
        extra = "" if case["greedy"] is None else f", greedy {len(case['greedy'])} tokens"
        print(f"case {case['index']} ({case['kind']}): {arr.shape[0]} positions{extra}")
    print(f"wrote {os.fspath(d / CASES_FILE)}: {len(doc['cases'])} cases, archive sha256 "
          f"{doc['archive_sha256'][:16]}, numerics version {NUMERICS_VERSION}")
    return doc


def load_cases(directory: str | os.PathLike) -> dict:
    """DIR/cases.json, checked enough that a check can trust it (CactError otherwise)."""
    d = Path(directory)
    f = d / CASES_FILE
    if not d.is_dir():
        raise CactError(f"{os.fspath(d)} is not a directory (make one with python -m generator golden "
                        f"--archive A --prompt TEXT -o {os.fspath(d)})")
    try:
        doc = json.loads(f.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CactError(f"{os.fspath(d)} has no {CASES_FILE} (make it with python -m generator golden "
                        f"--archive A --prompt TEXT -o {os.fspath(d)})") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CactError(f"cannot read {os.fspath(f)}: {getattr(exc, 'strerror', None) or exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != "needle-fw user golden":
        raise CactError(f"{os.fspath(f)} is not a needle-fw user golden (python -m generator golden --archive ...)")
    if doc.get("format_version") != CASES_FORMAT:
        raise CactError(f"{os.fspath(f)}: format version {doc.get('format_version')!r}, this generator "
                        f"reads {CASES_FORMAT}: regenerate it ({doc.get('regenerate', 'golden --archive')})")
    if not isinstance(doc.get("cases"), list) or not doc["cases"]:
        raise CactError(f"{os.fspath(f)} has no cases")
    return doc


def archive_mismatch(doc: dict, directory, archive_path: str) -> str | None:
    """One line naming both archives when DIR's goldens were made for another archive."""
    sha = sha256_file(archive_path)
    if sha == doc.get("archive_sha256"):
        return None
    return (f"{os.fspath(directory)} was made for archive {doc.get('archive')} (sha256 "
            f"{str(doc.get('archive_sha256'))[:16]}) but the archive being built is {archive_path} "
            f"(sha256 {sha[:16]}): regenerate the goldens for it (python -m generator golden --archive "
            f"{archive_path} ... -o {os.fspath(directory)}) or build the archive they were made for")


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def compare_logits(got: np.ndarray, want: np.ndarray, tol: float) -> tuple[bool, str]:
    """(passes, figures): bit-identical, or the worst position's max |Δlogit| and max |logit|
    against the per-position bar max |Δlogit| <= tol * max |logit|."""
    if got.tobytes() == want.tobytes():
        return True, "bit-identical"
    g, w = got.astype(np.float64), want.astype(np.float64)
    d = np.abs(g - w).max(axis=1)
    d = np.where(np.isnan(d), np.inf, d)
    m = np.abs(w).max(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(m > 0, d / np.where(m > 0, m, 1), np.where(d > 0, np.inf, 0.0))
    worst = int(np.argmax(rel)) if rel.max() > 0 else int(np.argmax(d))
    ok = bool(np.all(d <= tol * m))
    verdict = "<=" if ok else ">"
    return ok, (f"{'within tolerance' if ok else 'FAIL'}: worst position {worst} of {len(d)}: "
                f"max |Δlogit| {_fmt(d[worst])}, max |logit| {_fmt(m[worst])}, relative "
                f"{_fmt(rel[worst])} {verdict} check_tol={_fmt(tol)}")


# one engine run: its arguments -> the finished process (BoardRunner.run in a scratch directory)
Run = Callable[[list], subprocess.CompletedProcess]


def _check_logits(run: Run, work: str, directory, case: dict, columns: int, tol: float) -> tuple[bool, str]:
    """Teacher-forced logits of the case's ids against the stored ones."""
    want = np.fromfile(Path(directory) / case["logits"], dtype="<f4")
    if want.size != case["positions"] * columns:
        raise CactError(f"{os.fspath(Path(directory) / case['logits'])}: {want.size} floats, "
                        f"expected {case['positions']} x {columns}")
    want = want.reshape(case["positions"], columns)
    out = Path(work, "logits.f32")
    out.unlink(missing_ok=True)
    proc = run(["--tokens", ",".join(map(str, case["ids"])), "--logits", out.name])
    if proc.returncode:
        return False, f"FAIL: teacher-forced run: {engine_error(proc)}"
    got = np.fromfile(out, dtype="<f4") if out.exists() else np.zeros(0, "<f4")
    if got.size != want.size:
        return False, f"FAIL: the engine wrote {got.size} logits, the reference has {case['positions']} x {columns}"
    return compare_logits(got.reshape(want.shape), want, tol)


def _check_greedy(run: Run, doc: dict, case: dict) -> tuple[bool, str]:
    """The engine's greedy continuation of a prompt or query case against the stored ids."""
    if case.get("greedy") is None:
        return True, "teacher-forced only (no greedy run)"
    args = (["--prompt", case["prompt"]] if case["kind"] == "prompt" else
            ["--tools", "tools.json", "--query", case["query"]]
            + (["--system", doc["system"]] if doc.get("system") is not None else []))
    proc = run(args + ["--max-new", case["max_new"], "--ids"])
    want_ids = case["greedy"]
    if proc.returncode:
        return False, f"FAIL: greedy run: {engine_error(proc)}"
    try:
        got_ids = [int(x) for x in proc.stdout.strip().split(",") if x.strip()]
    except ValueError:
        return False, f"FAIL: greedy continuation differs: engine printed {proc.stdout.strip()[:60]!r}"
    if got_ids == want_ids:
        return True, f"greedy continuation matches ({len(want_ids)} tokens)"
    at = next((i for i, (x, y) in enumerate(zip(got_ids, want_ids)) if x != y),
              min(len(got_ids), len(want_ids)))
    e = got_ids[at] if at < len(got_ids) else "end"
    r = want_ids[at] if at < len(want_ids) else "end"
    return False, (f"FAIL: greedy continuation differs at token {at}: engine {e}, reference {r} "
                   f"(engine {len(got_ids)} tokens, reference {len(want_ids)})")


def _notes(doc: dict, directory, run: Run, engine: str) -> list[str]:
    """What may explain a difference that is not the engine's fault (shown after the cases)."""
    notes = [] if doc.get("numerics_version") == NUMERICS_VERSION else [
        f"note: {os.fspath(directory)} was made under numerics version {doc.get('numerics_version')}, "
        f"this generator has {NUMERICS_VERSION}: differences may be the numerics' "
        f"(regenerate: {doc.get('regenerate', 'python -m generator golden --archive ...')})"]
    info = run(["--info"])
    if info.returncode:
        raise CactError(f"{engine} --info: {engine_error(info)}")
    window = re.search(r"window (\d+)", info.stdout)
    if window and int(window.group(1)) != doc.get("kv_window"):
        notes.append(f"note: the engine's KV window is {window.group(1)}, the reference's "
                     f"{doc.get('kv_window')}: positions past the smaller one can differ")
    return notes


def check(directory: str | os.PathLike, archive: str, board_name: str, engine: str,
          image: str | None = None, tol: float = 0.0, timeout: float = 3600) -> int:
    """Run a built engine (natively or under the board's emulator) on every case of DIR and
    compare with the reference: 0 if every case passes, 1 otherwise.  One line per case."""
    if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol >= 0):
        raise CactError(f"check_tol={tol}: want a non-negative number")
    doc = load_cases(directory)
    problem = archive_mismatch(doc, directory, archive)
    if problem:
        raise CactError(problem)
    board = boards.load(board_name)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="needle-check-") as work:
        runner = BoardRunner(board, os.path.abspath(engine), image and os.path.abspath(image))

        def run(args) -> subprocess.CompletedProcess:
            return runner.run(args, cwd=work, timeout=timeout,
                              timeout_hint="a slower emulator needs more time: check(..., timeout=S)")
        notes = _notes(doc, directory, run, engine)
        if doc.get("tools"):
            Path(work, "tools.json").write_text(doc["tools"]["json"], encoding="utf-8")
        for case in doc["cases"]:
            ok_logits, logits = _check_logits(run, work, directory, case, doc["logit_columns"], tol)
            ok_greedy, greedy = _check_greedy(run, doc, case)
            failed += not (ok_logits and ok_greedy)
            print(f"case {case['index']} ({case['kind']}): {logits}; {greedy}", flush=True)
    for line in notes:
        print(line)
    n = len(doc["cases"])
    where = f"{os.fspath(directory)} on board {board_name}"
    if failed:
        print(f"check {where}: {failed} of {n} cases FAIL (check_tol={_fmt(tol)})", flush=True)
        return 1
    print(f"check {where}: all {n} cases pass (check_tol={_fmt(tol)})", flush=True)
    return 0
