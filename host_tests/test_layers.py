"""The generator's stages import one way: archive -> model -> codegen -> tools -> build -> commands.

A module may import its own stage and the stages before it (and generator.errors /
generator.paths / generator's version, which every stage shares), never a later stage.
The test reads the import statements, so it also catches imports inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ORDER = ["archive", "model", "codegen", "tools", "build", "commands"]
SHARED = {"generator", "generator.__version__", "generator.errors", "generator.paths"}


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m.startswith("generator")}


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ORDER else None


@pytest.mark.parametrize("stage", ORDER)
def test_stage_imports_only_earlier_stages(stage):
    allowed = set(ORDER[:ORDER.index(stage) + 1])
    bad = []
    for path in sorted((ROOT / "generator" / stage).glob("*.py")):
        for mod in _imports(path):
            s = _stage(mod)
            if s is not None and s not in allowed:
                bad.append(f"{path.relative_to(ROOT)} imports {mod}")
            elif s is None and mod not in SHARED and not mod.startswith(("generator.errors.", "generator.paths.")):
                bad.append(f"{path.relative_to(ROOT)} imports {mod} (not a stage)")
    assert bad == []


def test_every_generator_module_belongs_to_a_stage():
    loose = sorted(p.name for p in (ROOT / "generator").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "errors.py", "paths.py"]
    assert sorted(p.name for p in (ROOT / "generator").iterdir()
                  if p.is_dir() and any(p.glob("*.py"))) == sorted(ORDER)
