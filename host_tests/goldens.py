"""Shared by the tool-calling tests: the golden archives' a8 references and host engines."""

from __future__ import annotations

from pathlib import Path

from generator.archive import reader
from generator.archive.tokenizer import Tokenizer
from generator.model import reference as model_reference
from host_tests.scons_run import ROOT, scons

GOLDEN = ROOT / "host_tests" / "golden"
NAMES = ("tiny", "n3-tiny")     # a Needle 2 and a Needle 3 archive


def reference(name: str):
    """(a8 reference model, tokenizer) of golden archive `name`."""
    a = reader.read((GOLDEN / name / "archive.cact").read_bytes())
    tok = Tokenizer.from_blob(a.tokenizer_blob())
    return model_reference(a, "a8"), tok


def host_engines(root: Path, *options: str) -> Path:
    """`scons board=host OPTIONS` for each of NAMES into root/<name>; returns root."""
    for name in NAMES:
        scons("board=host", f"archive={GOLDEN / name / 'archive.cact'}", f"build={root / name}", *options)
    return root
