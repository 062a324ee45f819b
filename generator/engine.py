"""The generator pipeline for one engine: read -> plan -> emit -> write.

`generate()` is what the SCons tool and `python -m generator emit` call.  Output is
byte-reproducible: no timestamps, no absolute paths except the archive path the assembly
file must `.incbin` (given by the caller, relative to the build directory when possible).
"""

from __future__ import annotations

import os
from pathlib import Path

from . import emit, plan as planner, plan_tokenizer, reader
from .errors import CactError

ENGINE_FILES = {
    "needle_model.h": "needle_model.h.j2",
    "needle_model.c": "needle_model.c.j2",
    "needle_kernels.h": "needle_kernels.h.j2",
    "needle_kernels.c": "needle_kernels.c.j2",
    "needle_tokenizer.h": "needle_tokenizer.h.j2",
    "needle_tokenizer.c": "needle_tokenizer.c.j2",
    "needle_archive.S": "needle_archive.S.j2",
}


def outputs() -> list[str]:
    return list(ENGINE_FILES)


def contexts(archive_path: str, opts: planner.Options, incbin_path: str | None = None,
             gnu_stack: bool = True) -> tuple[dict, dict]:
    """(engine plan, tokenizer plan): the data the two families of templates render."""
    a = reader.read(archive_path)
    ctx = planner.plan(a, opts)
    ctx["archive_path"] = (incbin_path or archive_path).replace("\\", "/")
    ctx["gnu_stack"] = gnu_stack
    tok = plan_tokenizer.plan(a, max_text=opts.max_text)
    return ctx, tok


def generate(archive_path: str, out_dir: str, opts: planner.Options | None = None,
             incbin_path: str | None = None, gnu_stack: bool = True) -> dict:
    """Render every engine file into out_dir; returns the engine plan (for reports)."""
    opts = opts or planner.Options()
    ctx, tok = contexts(archive_path, opts, incbin_path, gnu_stack)
    os.makedirs(out_dir, exist_ok=True)
    for name, template in ENGINE_FILES.items():
        text = emit.render(template, tok if name.startswith("needle_tokenizer") else ctx)
        path = Path(out_dir) / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return ctx


__all__ = ["generate", "outputs", "ENGINE_FILES", "CactError"]
