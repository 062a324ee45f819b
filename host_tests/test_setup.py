"""The set-up script installs what every board file says it needs."""

from pathlib import Path

from generator.build import boards

ROOT = Path(__file__).resolve().parent.parent


def test_setup_installs_every_board_toolchain_and_emulator():
    setup = (ROOT / "setup").read_text()
    requirements = (ROOT / "requirements.txt").read_text()
    for name in boards.names():
        b = boards.load(name)
        if b["toolchain"] == "zig":      # zig cc comes from the Python package index
            assert f"\n{b['toolchain_package']}==" in requirements, f"requirements.txt lacks ziglang ({name})"
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
