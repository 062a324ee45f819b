"""The generated tokenizer of an archive, written as the pipeline writes it, for tests that
compile it with their own C driver (test_c_tokenizer.py, test_plain_markers.py)."""

from __future__ import annotations

from pathlib import Path

from generator.codegen import pipeline, plan as planner, render
from generator.codegen.tokenizer_plan import DEFAULT_MAX_TEXT, TokenizerPlan


def write_tokenizer_sources(archive_path: Path, directory: Path,
                            max_text: int = DEFAULT_MAX_TEXT) -> TokenizerPlan:
    """needle_tokenizer.h/.c and cact.S (the archive linked as needle_archive.S links it)
    into `directory`; returns the tokenizer plan."""
    engine, tok = pipeline.contexts(str(archive_path), planner.Options(max_text=max_text),
                                    incbin_path=str(archive_path))
    for name in ("needle_tokenizer.h", "needle_tokenizer.c"):
        (directory / name).write_text(render.render(pipeline.ENGINE_FILES[name], tok))
    (directory / "cact.S").write_text(render.render(pipeline.ENGINE_FILES["needle_archive.S"], engine))
    return tok
