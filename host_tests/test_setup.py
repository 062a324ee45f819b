"""The set-up script installs what every board file says it needs."""

from pathlib import Path

from generator.build import boards

ROOT = Path(__file__).resolve().parent.parent


def test_setup_installs_every_board_toolchain_and_emulator():
    setup = (ROOT / "setup").read_text()
    for name in boards.names():
        b = boards.load(name)
        for pkg in (b["toolchain_package"] + " " + b["emulator"]["package"]).split():
            assert pkg in setup, f"./setup does not install {pkg} (board {name})"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = ".venv/bin/python -m pytest host_tests -q"
    assert command in readme and command in ci
