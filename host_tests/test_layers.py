"""Every first-party package imports one way, and no two modules import each other.

Packages, in their one-way order (a package may import the ones before the arrow, never one
after it, and the packages after it never import each other):

    generator  ->  bench, fuzz, train, tools, site_scons  ->  SConstruct

generator is the toolkit the others use: bench (benchmark drivers), fuzz (fuzz drivers),
train (the trainer), tools (the tokenizer-corpus scripts) and site_scons/ import generator and
nothing of each other; what two of them share moves down into generator.  SConstruct imports
generator and its own modules, site_scons/needle_build/ (SCons puts site_scons/ on sys.path,
so they are imported as `needle_build`).  host_tests/ may import anything (it tests it).  One module is exempt:
generator/__main__.py, the entry point of `python -m generator`, run and never imported, puts
the command line together and registers the `bench` subcommand from bench/host.py.

Inside generator the stages import one way: archive -> model -> codegen -> tools -> build ->
commands.  A module may import its own stage and the stages before it, and the modules every
stage shares (generator's version, generator.errors, generator.paths, generator.files), never
a later stage.

No import cycles: the strongly connected components (Tarjan) of the module import graph have
one module each, so two modules of one stage never import each other, directly or around a
loop.

The test reads the import statements with `ast`, so it also sees imports inside functions,
relative imports and `importlib.import_module("literal")`."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# package (a directory, or the file SConstruct) -> the packages it may import besides itself
PACKAGES: dict[str, frozenset[str]] = {
    "generator": frozenset(),
    "bench": frozenset({"generator"}),
    "fuzz": frozenset({"generator"}),
    "train": frozenset({"generator"}),
    "tools": frozenset({"generator"}),
    "examples": frozenset(),               # examples/client: the service's client, standard library only
    "site_scons": frozenset({"generator"}),
    "SConstruct": frozenset({"generator", "site_scons"}),
}
# top-level names that are first-party code found on another sys.path entry -> their module here
SYS_PATH_ALIASES = {"needle_build": "site_scons.needle_build"}
UNLAYERED = {"host_tests"}                 # tests import whatever they test
ENTRY_POINTS = {"generator.__main__"}      # run, never imported: may import any package
ORDER = ["archive", "model", "codegen", "tools", "build", "commands"]
SHARED = {"generator", "generator.errors", "generator.paths", "generator.files"}



def modules(root: Path) -> dict[str, Path]:
    """Every first-party Python file under `root`, by dotted module name (a package's
    __init__.py by the package's name; SConstruct by "SConstruct")."""
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        top = root / pkg
        if top.is_file():
            out[pkg] = top
            continue
        for path in sorted(top.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str:
    """The module an imported dotted name loads: the longest known prefix (an attribute of a
    module is that module), or the name itself if no prefix is first-party code here."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in known:
            return ".".join(parts[:n])
    return name


def _alias(name: str) -> str:
    """`name` as this tree's module (needle_build -> site_scons.needle_build)."""
    top, _, rest = name.partition(".")
    return SYS_PATH_ALIASES[top] + ("." + rest if rest else "") if top in SYS_PATH_ALIASES else name


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The first-party modules that module `name` (file `path`) imports anywhere in the file."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [_alias(a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _alias(node.module or "")
            if node.level:        # relative: from the module's package, one level up per extra dot
                pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                pkg = pkg[:len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            # `from P import m` loads the submodule P.m when there is one, else P itself
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            targets = [node.args[0].value]
        else:
            continue
        out.update(_resolve(t, known) for t in targets if t.split(".")[0] in PACKAGES)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the first-party modules it imports (an import of itself is kept: a loop)."""
    known = modules(root)
    return {name: imports(name, path, known) for name, path in known.items()}


def package_violations(root: Path) -> list[str]:
    """Imports against the package order, one line each."""
    bad = []
    for mod, deps in sorted(import_graph(root).items()):
        pkg = mod.split(".")[0]
        for dep in sorted(deps):
            if dep in ENTRY_POINTS:
                bad.append(f"{mod} imports {dep}, the entry point (run it, never import it)")
            elif dep.split(".")[0] not in PACKAGES[pkg] | {pkg} and mod not in ENTRY_POINTS:
                allowed = ", ".join(sorted(PACKAGES[pkg])) or "no other package"
                bad.append(f"{mod} imports {dep} ({pkg} may import {allowed})")
    return bad


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "generator" and parts[1] in ORDER else None


def stage_violations(root: Path, stage: str) -> list[str]:
    """Imports of generator.`stage` modules against the stage order, one line each."""
    allowed = set(ORDER[:ORDER.index(stage) + 1])
    bad = []
    for mod, deps in sorted(import_graph(root).items()):
        if _stage(mod) != stage:
            continue
        for dep in sorted(d for d in deps if d.split(".")[0] == "generator"):
            s = _stage(dep)
            if s is not None and s not in allowed:
                bad.append(f"{mod} imports {dep} (a later stage)")
            elif s is None and dep not in SHARED:
                bad.append(f"{mod} imports {dep} (not a stage)")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The import cycles: strongly connected components (Tarjan) of more than one module, and
    modules that import themselves."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue            # not a module here (e.g. a name that does not exist)
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.add(w)
                if w == v:
                    break
            if len(scc) > 1 or v in graph[v]:
                found.append(frozenset(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _describe(scc: frozenset[str], graph: dict[str, set[str]]) -> str:
    """One line per cycle: its modules and who imports whom inside it."""
    edges = [f"{a} -> {b}" for a in sorted(scc) for b in sorted(graph[a] & scc)]
    return f"import cycle {{{', '.join(sorted(scc))}}}: {'; '.join(edges)}"


# --- the repository ----------------------------------------------------------------------

def test_packages_import_one_way():
    assert package_violations(ROOT) == []


@pytest.mark.parametrize("stage", ORDER)
def test_stage_imports_only_earlier_stages(stage):
    assert stage_violations(ROOT, stage) == []


def test_no_import_cycles():
    graph = import_graph(ROOT)
    assert [_describe(c, graph) for c in cycles(graph)] == []


def test_every_first_party_package_is_layered():
    """A new top-level directory of Python code needs a place in PACKAGES (or UNLAYERED)."""
    found = {d.name for d in ROOT.iterdir()
             if d.is_dir() and not d.name.startswith((".", "build")) and any(d.rglob("*.py"))}
    assert sorted(found - UNLAYERED) == sorted(p for p in PACKAGES if (ROOT / p).is_dir())


def test_every_generator_module_belongs_to_a_stage():
    loose = sorted(p.name for p in (ROOT / "generator").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "errors.py", "files.py", "paths.py"]
    assert sorted(p.name for p in (ROOT / "generator").iterdir()
                  if p.is_dir() and any(p.glob("*.py"))) == sorted(ORDER)


def test_bench_subcommand_still_registered():
    """`python -m generator bench` lives on (registered by the entry point, not by cli.py), with
    its one-line refusal of missing arguments."""
    run = [sys.executable, "-m", "generator", "bench"]
    ok = subprocess.run(run + ["--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "--engine" in ok.stdout, ok.stderr
    bad = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.splitlines() == ["error: the following arguments are required: archive, --engine "
                                       "(see python -m generator bench --help)"]


# --- the checker itself, on a synthetic tree ----------------------------------------------

def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_checker_refuses_back_edges_and_cycles(tmp_path):
    root = _tree(tmp_path, {
        "generator/__init__.py": "",
        "generator/__main__.py": "from bench import host\n",                 # the entry point: allowed
        "generator/errors.py": "",
        "generator/archive/__init__.py": "",
        # a cycle inside one stage, one side only inside a function, one side relative
        "generator/archive/a.py": "def f():\n    from generator.archive import b\n",
        "generator/archive/b.py": "from . import a\nfrom generator.errors import CactError\n",
        "generator/archive/c.py": "import importlib\nimportlib.import_module('generator.archive.c')\n",
        "generator/build/__init__.py": "",
        "generator/build/boards.py": "from generator.archive import a\n",
        "generator/archive/late.py": "from generator.build.boards import load\n",   # a later stage
        "generator/commands/__init__.py": "",
        "generator/commands/cli.py": "def bench():\n    from bench import host\n",   # a back-edge
        "bench/__init__.py": "",
        "bench/host.py": "from generator.archive import reader\n",
        "fuzz/run.py": "import generator.__main__\n",
        "train/__init__.py": "",
        "train/task.py": "from bench.host import main\n",                      # between siblings
        "train/model.py": "from generator.build import boards\n",      # train.model: not a stage
    })
    assert package_violations(root) == [
        "fuzz.run imports generator.__main__, the entry point (run it, never import it)",
        "generator.commands.cli imports bench.host (generator may import no other package)",
        "train.task imports bench.host (train may import generator)",
    ]
    assert stage_violations(root, "archive") == [
        "generator.archive.late imports generator.build.boards (a later stage)"]
    assert stage_violations(root, "build") == []
    graph = import_graph(root)
    assert sorted(map(sorted, cycles(graph))) == [
        ["generator.archive.a", "generator.archive.b"], ["generator.archive.c"]]
    assert _describe(frozenset({"generator.archive.a", "generator.archive.b"}), graph) == (
        "import cycle {generator.archive.a, generator.archive.b}: "
        "generator.archive.a -> generator.archive.b; generator.archive.b -> generator.archive.a")


def test_checker_follows_a_longer_cycle(tmp_path):
    """Three modules around a loop are one component, and a chain without a loop is none."""
    root = _tree(tmp_path, {
        "generator/__init__.py": "",
        "generator/tools/__init__.py": "",
        "generator/tools/x.py": "import generator.tools.y\n",
        "generator/tools/y.py": "from generator.tools.z import thing\n",
        "generator/tools/z.py": "def g():\n    from generator.tools import x\n",
        "generator/tools/p.py": "from generator.tools import q\n",
        "generator/tools/q.py": "",
    })
    assert cycles(import_graph(root)) == [
        frozenset({"generator.tools.x", "generator.tools.y", "generator.tools.z"})]
