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
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from generator import __version__
from generator.archive import reader
from generator.commands import rung
from generator.commands import synth
from generator.errors import CactError
from generator.archive.format import BOS_ID
from generator.model import Needle2, Needle3
from generator.archive.tokenizer import Tokenizer

REFERENCE_VERSION = 1  # bump when the reference's numerics change on purpose

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
        "archive_sha256": hashlib.sha256(data).hexdigest(),
        "archive_bytes": len(data),
        "recipe": r,
        "generator_version": __version__,
        "reference_version": REFERENCE_VERSION,
        "numpy_version": np.__version__,
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
        "archive_sha256": hashlib.sha256(data).hexdigest(),
        "archive_bytes": len(data),
        "recipe": r,
        "generator_version": __version__,
        "reference_version": REFERENCE_VERSION,
        "numpy_version": np.__version__,
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


def write(names: list[str], out_dir: str) -> None:
    unknown = [n for n in names if n not in ALL_RECIPES]
    if unknown:
        raise CactError(f"unknown golden recipe {unknown[0]!r}; choose from {', '.join(ALL_RECIPES)}")
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
