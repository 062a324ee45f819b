"""needle-fw as an installed package (pyproject.toml, docs/install.md).

The wheel built from this tree carries the generator and every file it reads at run time
(templates/, firmware/, boards/, the SCons tool's loader, LICENSE, the tokenizer models); once
installed into a fresh venv, its `needle-fw` command and its SCons tool work from a directory
outside the clone, on the installed files and not the clone's.

Offline: the wheel is built by this interpreter's pip and setuptools (requirements-test.txt; no
build isolation, no index) from a copy of what pyproject.toml reads, and installed without its
dependencies into a venv that sees this interpreter's packages (numpy, jinja2, pyelftools,
scons, ...) through a .pth file.  Nothing here compiles C: the SCons test generates an engine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

import generator
from generator.build import boards
from generator.codegen import pipeline

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SKIP = ("__pycache__", ".pyc")


def _setuptools_builds_it() -> str | None:
    """Why this interpreter cannot build the wheel offline, or None."""
    wanted = next(r for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools"))
    try:
        have = metadata.version("setuptools")
    except metadata.PackageNotFoundError:
        have = None
    from packaging.requirements import Requirement       # pytest's own dependency
    if have is None or not Requirement(wanted).specifier.contains(have):
        return (f"the wheel needs {wanted} (this interpreter has {have or 'none'}): "
                "pip install -r requirements-test.txt (.ci/run installs it)")
    return None


def _run(argv, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    if check and proc.returncode:
        raise AssertionError(f"{' '.join(map(str, argv))} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-3000:]}")
    return proc


def _sources() -> list[str]:
    """What the build reads, from pyproject.toml: the packages' directories, the readme, the
    licence and the top-level files of generator._share (so a tree the build needs more of
    fails here, not in a user's pip)."""
    tool = PYPROJECT["tool"]["setuptools"]
    tops = {p.split(".")[0] for p in tool["packages"]}
    tops |= {d.split("/")[0] for d in tool["package-dir"].values() if d != "."}
    top_files = PYPROJECT["tool"]["setuptools"]["package-data"]["generator._share"]
    return sorted(tops | {PYPROJECT["project"]["readme"], *PYPROJECT["project"]["license-files"], *top_files})


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    why = _setuptools_builds_it()
    if why and os.environ.get("CI"):      # CI installs it: a skip there would hide a broken install step
        pytest.fail(why)
    if why:
        pytest.skip(why)
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    for rel in _sources():
        if (ROOT / rel).is_dir():
            shutil.copytree(ROOT / rel, src / rel, ignore=shutil.ignore_patterns(*SKIP))
        else:
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / rel, src / rel)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
          "--no-build-isolation", "--no-index", "-w", work / "dist", src], cwd=work)
    (built,) = (work / "dist").glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed (no dependencies) and this interpreter's packages
    visible after its own."""
    where = tmp_path_factory.mktemp("venv") / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", where], cwd=where.parent)
    python = where / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=where.parent).stdout.strip())
    # this interpreter's site directories (and those its own .pth files add), after the venv's own
    paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    paths += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    (site / "needle_fw_test_deps.pth").write_text("".join(f"{p}\n" for p in dict.fromkeys(paths)))
    _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--disable-pip-version-check",
          "--no-deps", "--no-index", wheel], cwd=where.parent)
    return where


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """A working directory outside the clone."""
    d = tmp_path_factory.mktemp("elsewhere")
    assert not d.resolve().is_relative_to(ROOT)
    return d


def _expected_wheel_files() -> set[str]:
    """Every file an installed needle-fw reads: the generator package (modules and tokenizer
    models) and, in generator/_share/, the clone's trees the generator and the SCons tool read."""
    def files(top: Path) -> list[Path]:
        return [p for p in top.rglob("*") if p.is_file() and not any(s in str(p) for s in SKIP)]
    out = {p.relative_to(ROOT).as_posix() for p in files(ROOT / "generator")}
    for tree in ("templates", "firmware", "boards"):
        out |= {f"generator/_share/{p.relative_to(ROOT).as_posix()}" for p in files(ROOT / tree)}
    out |= {"generator/_share/site_scons/site_tools/needle.py", "generator/_share/LICENSE", "generator/_share/CHANGELOG.md"}
    return out


def test_the_wheel_carries_the_generator_templates_firmware_and_boards(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    dist_info = f"needle_fw-{generator.__version__}.dist-info/"
    assert wheel.name == f"needle_fw-{generator.__version__}-py3-none-any.whl"
    payload = {n for n in names if not n.startswith(dist_info)}
    expected = _expected_wheel_files()
    assert sorted(expected - payload) == []           # nothing the generator reads is left out
    assert sorted(payload - expected) == []           # and nothing else rides along
    for must in ("generator/_share/templates/model/needle2.c.j2", "generator/_share/templates/kernels/scalar.c.j2",
                 "generator/_share/templates/package/needle.init", "generator/_share/firmware/cli/main.c",
                 "generator/_share/firmware/hal/linux/hal_linux.c", "generator/_share/boards/rpi-zero.toml",
                 "generator/data/tok1k.model"):
        assert must in payload
    zf = zipfile.ZipFile(wheel)
    assert "needle-fw = generator.__main__:main" in zf.read(dist_info + "entry_points.txt").decode()
    meta = zf.read(dist_info + "METADATA").decode()
    assert f"\nVersion: {generator.__version__}\n" in meta
    requires = [line[len("Requires-Dist: "):] for line in meta.splitlines() if line.startswith("Requires-Dist: ")]
    assert [r for r in requires if r.startswith("ziglang")] == ['ziglang<0.18,>=0.17.1; extra == "routers"']
    for runtime in ("numpy", "jinja2", "pyelftools", "scons"):
        assert any(r.startswith(runtime) and "extra ==" not in r for r in requires), runtime


def test_needle_fw_runs_from_outside_the_clone_on_the_installed_files(venv, outside):
    bin_dir = venv / "bin"
    where = _run([bin_dir / "python", "-c", "import generator.paths as p; print(p.ROOT); print(p.CHECKOUT)"],
                 cwd=outside).stdout.split()
    site = next((venv / "lib").glob("python3*/site-packages")).resolve()
    assert where == [str(site / "generator" / "_share"), "False"]

    helped = _run([bin_dir / "needle-fw", "--help"], cwd=outside)
    assert helped.stdout.startswith("usage: needle-fw ")
    for command in ("inspect", "synth", "emit", "call", "eval", "bench"):
        assert command in helped.stdout
    version = _run([bin_dir / "needle-fw", "--version"], cwd=outside)
    assert version.stdout.strip() == f"needle-fw generator {generator.__version__}"

    made = _run([bin_dir / "needle-fw", "synth", "--preset", "tiny", "-o", "tiny.cact"], cwd=outside)
    assert made.stdout.startswith("wrote tiny.cact: ")
    summary = json.loads(_run([bin_dir / "needle-fw", "inspect", "--json", "tiny.cact"], cwd=outside).stdout)
    assert summary["generation"] == 2 and summary["tensor_count"] == 55
    assert summary["geometry"]["vocab"] == 1024          # the packaged tokenizer model (generator/data)

    # the engine for a bare-metal board: its board file, templates and linker script from the package
    emitted = _run([bin_dir / "needle-fw", "emit", "tiny.cact", "-o", "gen", "--board", "watch-m4"], cwd=outside)
    assert emitted.stdout.startswith("wrote ")
    assert (outside / "gen" / "link.ld").is_file() and (outside / "gen" / "needle_model.c").is_file()

    refused = _run([bin_dir / "needle-fw", "inspect"], cwd=outside, check=False)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == "error: the following arguments are required: archive (see needle-fw inspect --help)\n"
    bench = _run([bin_dir / "needle-fw", "bench", "tiny.cact", "--engine", "./needle"], cwd=outside, check=False)
    assert bench.returncode == 2 and len(bench.stderr.splitlines()) == 1
    assert "python -m generator bench from a clone" in bench.stderr


def test_every_path_the_installed_generator_reads_is_in_the_package(venv, outside):
    """generator.paths' directories, the licence an OpenWrt package names and the headers the
    tool bindings steer clear of, read from the installed package (not the clone)."""
    code = ("import generator.paths as p; from generator.build import boards, package; "
            "from generator.tools import bindings; "
            "print([str(d) for d in (p.BOARDS_DIR, p.TEMPLATES_DIR, p.KERNELS_DIR, p.FIRMWARE_DIR, p.DATA_DIR) "
            "if not d.is_dir()]); print(package._license()); print(len(boards.names())); "
            "print('needle_call_e_tools' in bindings._project_names()); print(p.scons_toolpath())")
    lines = _run([venv / "bin" / "python", "-c", code], cwd=outside).stdout.splitlines()
    site = next((venv / "lib").glob("python3*/site-packages")).resolve()
    assert lines == ["[]", "MIT", str(len(boards.names())), "True",
                     str(site / "generator" / "_share" / "site_scons" / "site_tools")]


SCONSTRUCT = """\
from generator.paths import scons_toolpath
env = Environment(tools=["default", "needle"], toolpath=[scons_toolpath()])
env.NeedleEngine(Dir("gen"), "model.cact", NEEDLE_BOARD="host")
"""


def test_a_users_sconstruct_loads_the_tool_from_the_installed_package(venv, outside, tiny_path):
    """The two lines of docs/install.md: the tool, its engine builder, and an engine signature
    over the installed templates (a change to one regenerates; the user's own directory is no
    part of it)."""
    proj = outside / "proj"
    proj.mkdir()
    (proj / "SConstruct").write_text(SCONSTRUCT)
    shutil.copy(tiny_path, proj / "model.cact")
    scons = [venv / "bin" / "python", "-m", "SCons", "-Q"]
    first = _run(scons, cwd=proj)
    assert first.stdout.splitlines() == ["GEN gen"]
    assert sorted(p.name for p in (proj / "gen").iterdir()) == sorted(pipeline.outputs(boards.load("host")))
    assert _run(scons, cwd=proj).stdout.splitlines() == ["scons: `.' is up to date."]

    tree = _run(scons + ["--tree=prune", "gen"], cwd=proj).stdout
    installed = next((venv / "lib").glob("python3*/site-packages")).resolve() / "generator"
    assert f"{installed}/_share/templates/model/needle2.c.j2" in tree
    assert f"{installed}/codegen/plan.py" in tree
    assert str(ROOT) not in tree

    template = installed / "_share" / "templates" / "model" / "needle2.c.j2"
    template.write_text(template.read_text() + "{# a new release of the template #}\n")
    assert _run(scons, cwd=proj).stdout.splitlines() == ["GEN gen"]


HIDE_ZIGLANG = ("import importlib.util as u; find = u.find_spec; "
                "u.find_spec = lambda name, *a: None if name == 'ziglang' else find(name, *a); "
                "from generator.build import boards; print(boards.missing_tools(boards.load('router-mt7621')))")
REFUSAL = "board router-mt7621 is built with zig cc, from the Python package ziglang, which is not installed: "


def test_a_router_board_without_ziglang_names_the_routers_requirements():
    """ziglang is not in requirements.txt (./setup): a router build without it is refused in one
    line naming the file that installs it."""
    clone = _run([sys.executable, "-c", HIDE_ZIGLANG], cwd=ROOT).stdout
    assert clone == f"{REFUSAL}{sys.executable} -m pip install -r {ROOT / 'requirements-routers.txt'}\n"
    assert "ziglang==" in (ROOT / "requirements-routers.txt").read_text()


def test_an_installed_router_build_without_ziglang_names_the_extra(venv, outside):
    """ziglang is the routers extra of the package, not a dependency: an installed needle-fw
    refuses a router build without it in one line with the extra's range (from its metadata)."""
    python = venv / "bin" / "python"
    installed = _run([python, "-c", HIDE_ZIGLANG], cwd=outside).stdout
    assert installed == f"{REFUSAL}{python} -m pip install 'ziglang<0.18,>=0.17.1'\n"
