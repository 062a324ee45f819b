"""The set-up script installs what every board file says it needs."""

from pathlib import Path

from generator.build import boards

ROOT = Path(__file__).resolve().parent.parent


def test_setup_installs_every_board_toolchain_and_emulator():
    setup = (ROOT / "setup").read_text()
    routers = (ROOT / "requirements-routers.txt").read_text()
    for name in boards.names():
        b = boards.load(name)
        if b["toolchain"] == "zig":      # zig cc comes from the Python package index, routers' file
            assert f"\n{b['toolchain_package']}==" in routers, f"requirements-routers.txt lacks ziglang ({name})"
            packages = b["emulator"]["package"]
        else:
            packages = b["toolchain_package"] + " " + b["emulator"]["package"]
        for pkg in packages.split():
            assert pkg in setup, f"./setup does not install {pkg} (board {name})"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = ".venv/bin/python -m pytest host_tests -q"
    assert command in readme and command in ci


def _pins(name: str) -> dict[str, str]:
    lines = (ROOT / name).read_text().splitlines()
    return dict(line.split("==") for line in lines if line.strip() and not line.startswith("#"))


def test_only_the_routers_file_brings_ziglang_and_the_suite_gets_it():
    """zig cc (411 MB that only the router boards use) is in requirements-routers.txt alone,
    so `pip install .` leaves it out; ./setup installs it (the quick start's second command
    runs the router tests), and so do .ci/run and the hosted workflow's jobs that build routers."""
    assert "ziglang" not in _pins("requirements.txt") and "ziglang" in _pins("requirements-routers.txt")
    assert "-r requirements.txt -r requirements-routers.txt" in (ROOT / "setup").read_text().split("pip install")[-1]
    install = "pip install -q --disable-pip-version-check -r requirements-routers.txt"
    assert install in (ROOT / ".ci" / "run").read_text()
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    assert workflow.count(install) == 2       # the emulator and the slow/rest jobs; quick builds nothing


def test_pyproject_ranges_admit_the_pinned_releases():
    """Every runtime dependency and extra of pyproject.toml admits the release the requirements
    files pin (what ./setup and CI test; the docs and train extras: requirements-docs.txt and
    train/requirements.txt), every pinned package is in pyproject.toml, and
    ziglang is only in the routers extra."""
    import tomllib
    from packaging.requirements import Requirement      # pytest's own dependency
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {**_pins("requirements.txt"), **_pins("requirements-routers.txt"), **_pins("requirements-test.txt"),
            **_pins("requirements-docs.txt"), **_pins("train/requirements.txt")}
    extras = project["optional-dependencies"]
    reqs = [Requirement(r) for r in project["dependencies"] + [r for extra in extras.values() for r in extra]]
    assert sorted(pins) == sorted(r.name for r in reqs)
    for r in reqs:
        assert r.specifier.contains(pins[r.name]), f"{r.name}=={pins[r.name]} is outside {r}"
    assert [Requirement(r).name for r in extras["routers"]] == ["ziglang"]
    assert "ziglang" not in [Requirement(r).name for r in project["dependencies"] + extras["test"]]
