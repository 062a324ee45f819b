"""The documentation's generated pictures and tables cannot go stale (bench/pictures.py,
bench/plots.py).  No build: the boards table is rendered from boards/*.toml, the plots
from the committed bench/results/*.json."""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench import pictures
from generator.build import boardtable, boards

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.quick


def test_committed_boards_table_is_what_boards_toml_renders():
    committed = (ROOT / boardtable.SNIPPET).read_text(encoding="utf-8")
    assert committed == boardtable.markdown(), "run: python -m bench.pictures boards"
    assert pictures.main(["boards", "--check"]) == 0


def test_boards_table_has_a_row_per_board_file():
    rows = [ln for ln in boardtable.markdown().splitlines() if ln.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == boards.names()
    width = len(boardtable.COLUMNS)
    assert all(r.count(" | ") == width - 1 for r in rows)
    watch = next(r for r in rows if r.startswith("| `watch-m4` "))
    assert "cortex-m4" in watch and "`mdsp`" in watch and "qemu-system-arm -M mps2-an386" in watch


def test_boards_check_finds_a_stale_table(tmp_path, capsys):
    stale = tmp_path / "boards-table.md"
    stale.write_text("| board |\n")
    assert pictures.main(["boards", "--check", "--out", str(stale)]) == 1
    assert "stale" in capsys.readouterr().err


def test_committed_memory_maps_are_svg():
    found = sorted((ROOT / "docs" / "img").glob("memory-*.svg"))
    assert {"memory-host.svg", "memory-rpi-zero.svg", "memory-watch-m4.svg"} <= {p.name for p in found}
    for path in found:
        root = ET.parse(path).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg" and root.get("viewBox")
        board = path.stem[len("memory-"):]
        assert next(root.iter("{http://www.w3.org/2000/svg}text")).text == board
