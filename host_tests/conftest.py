"""Shared fixtures of the host tests.

Archives are synthesised once per session (`tiny` takes ~0.05 s, `small` ~0.3 s,
`needle2-base` ~7 s and is only built when a test asks for it).  Byte-level editing
helpers live in `archive_edit.py` (importable as `import archive_edit` from any test
file, because this conftest puts `host_tests/` and the repository root on sys.path).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (str(ROOT), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

import archive_edit  # noqa: E402
from generator.commands import synth  # noqa: E402


# The tiers (docs/testing.md): every test is in at most one of them; a test in none of them
# builds or runs on the host (gcc, clang, the sanitizers).
TIERS = {
    "quick": "no build, no compiler, no emulator: Python and the references (pytest -m quick, under 60 s)",
    "emulator": "cross-builds for a board and runs under its emulator (pytest -m emulator)",
    "slow": "long runs: soaks, fuzzing, training, whole-list sweeps (pytest -m slow)",
}


def pytest_configure(config):
    for name, what in TIERS.items():
        config.addinivalue_line("markers", f"{name}: {what}")
    missing = sorted(f for f in TIER_OF_FILE if not (HERE / f).is_file())
    if missing:
        raise pytest.UsageError(f"FILE_TIERS (host_tests/conftest.py) names {', '.join(missing)}, "
                                "which host_tests/ does not have")


# Each file's tier, for its tests that carry no tier mark of their own (a file's long tests are
# marked slow where they are written).  A file that is in none builds or runs on the host.
FILE_TIERS = {
    "quick": ("test_calibrate", "test_cli_errors", "test_codegen", "test_demo_archive", "test_docs_site", "test_families", "test_grammar", "test_inspect",
              "test_layers", "test_packaging", "test_reader_malformed", "test_reference", "test_roundtrip", "test_runner",
              "test_task", "test_tokenizer", "test_workflow"),
    "emulator": ("test_boards", "test_debug_build", "test_flash", "test_flash_images", "test_mcuboot", "test_sha256_hook", "test_uf2", "test_kernels",
                 "test_kernels_mcu", "test_libc", "test_library", "test_linux_packages", "test_partition", "test_package", "test_prefill",
                 "test_profile", "test_routers", "test_semihost_cmdline", "test_serve_soak", "test_softfloat",
                 "test_stack", "test_threads", "test_uart"),
    "slow": ("test_blas_kernels", "test_fuzz", "test_reader_mutation", "test_soak", "test_train_smoke"),
}
TIER_OF_FILE = {f"{name}.py": tier for tier, names in FILE_TIERS.items() for name in names}


def pytest_collection_modifyitems(config, items):
    """Each test gets its file's tier unless it carries one; a test in two tiers would run twice
    in the hosted CI's shards, so it is refused."""
    for item in items:
        tiers = sorted({m.name for m in item.iter_markers() if m.name in TIERS})
        if len(tiers) > 1:
            raise pytest.UsageError(f"{item.nodeid} is marked {' and '.join(tiers)}: a test is in at "
                                    f"most one tier (host_tests/conftest.py, TIERS)")
        if not tiers and item.path.name in TIER_OF_FILE:
            item.add_marker(TIER_OF_FILE[item.path.name])


@pytest.fixture(autouse=True)
def _quick_builds_nothing(request, monkeypatch):
    """A quick-tier test that starts a build fails, naming the tier it belongs in."""
    if request.node.get_closest_marker("quick"):
        from host_tests import scons_run
        monkeypatch.setattr(scons_run, "IN_QUICK_TEST", request.node.nodeid)


@pytest.fixture(scope="session")
def tiny_bytes() -> bytes:
    """synthesize('tiny', 1): Needle 2, d 64, 2 layers, 2 engram sites, both heads, 55 tensors."""
    return synth.synthesize("tiny", 1)


@pytest.fixture(scope="session")
def tiny_path(tiny_bytes, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("archives") / "tiny.cact"
    path.write_bytes(tiny_bytes)
    return path


@pytest.fixture(scope="session")
def small_bytes() -> bytes:
    """synthesize('small', 1): Needle 2, d 96 (padded CQ groups), 5 layers, 8k tokenizer."""
    return synth.synthesize("small", 1)


@pytest.fixture(scope="session")
def ternary_bytes() -> bytes:
    """The tiny geometry with every CQ tensor ternary (record bits 5)."""
    return synth.synthesize("tiny", 1, bitmap="default=1.58")


@pytest.fixture(scope="session")
def n3_bytes() -> bytes:
    """A small valid Needle 3 archive built with the writer (confidence + router heads)."""
    return archive_edit.build_n3_tiny()


@pytest.fixture(scope="session")
def needle2_base_bytes() -> bytes:
    """The published Needle 2 geometry (405 tensors); ~7 s to synthesise."""
    return synth.synthesize("needle2-base", 0)


@pytest.fixture(scope="session")
def edit():
    """The archive_edit module: patch_header, patch_record, patch_bytes, rebuild, ..."""
    return archive_edit


@pytest.fixture
def board_dir(tmp_path, monkeypatch):
    """A copy of boards/ the board loader reads instead (so test boards never reach board=all)."""
    import shutil
    from generator.build import boards
    d = tmp_path / "boards"
    shutil.copytree(ROOT / "boards", d)
    monkeypatch.setattr(boards, "BOARDS_DIR", d)
    return d


@pytest.fixture
def board_error(board_dir):
    """board_error(name, edit) -> the one-line error the loader gives for boards/<name>.toml
    after edit(text), checked to start with "board file <name>.toml: "."""
    from generator.build import boards
    from generator.errors import CactError

    def load_edited(name: str, edit) -> str:
        path = board_dir / f"{name}.toml"
        path.write_text(edit(path.read_text()))
        with pytest.raises(CactError) as err:
            boards.load(name)
        message = str(err.value)
        assert message.startswith(f"board file {name}.toml: ") and "\n" not in message, message
        return message
    return load_edited


@pytest.fixture(scope="session")
def demo_host(tmp_path_factory, board_runner):
    """The host engine of the bundled Needle 2 demo archive (trained: its calls are real), built
    once per worker for the service, soak and acting tests."""
    from host_tests.scons_run import ROOT as root, scons
    build = tmp_path_factory.mktemp("demo-host")
    scons("board=host", f"archive={root / 'demo' / 'needle2-demo.cact'}", f"build={build}")
    return board_runner("host", build / "needle")


@pytest.fixture(scope="session")
def board_runner():
    """board_runner(board, binary, archive=None) -> a BoardRunner (generator/build/runner.py):
    how every test runs a program on a board (a board dict or name; archive: the archive file
    of a `file`-placement board, the image of a `partition` one)."""
    from generator.build.runner import BoardRunner
    return BoardRunner
