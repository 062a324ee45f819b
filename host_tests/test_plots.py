"""The benchmark plots (bench/plots.py) draw from the committed bench/results/*.json.

matplotlib is a documentation dependency only (requirements-docs.txt), so without it these
tests are skipped; with the pinned version the committed docs/img plots must be exactly what
the committed results draw (the SVGs are deterministic)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench import plots

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
pytestmark = pytest.mark.quick


def test_every_committed_result_names_its_command_and_is_plotted():
    docs = sorted(RESULTS.glob("*.json"))
    assert docs
    for path in docs:
        doc = json.loads(path.read_text())
        assert doc["command"] and doc["result"], path.name
        assert plots.kind(doc["result"]) in plots.OUTPUTS, path.name
    found = plots.load(RESULTS)
    assert set(found) == set(plots.OUTPUTS)


def test_plots_render_from_the_committed_results():
    mpl = pytest.importorskip("matplotlib", reason="bench/plots.py needs matplotlib "
                              "(pip install -r requirements-docs.txt), a documentation dependency only")
    first, again = plots.render(RESULTS), plots.render(RESULTS)
    assert set(first) == set(plots.OUTPUTS.values())
    assert first == again, "the same results must give the same SVG bytes"
    for name, data in first.items():
        root = ET.fromstring(data)
        assert root.tag == "{http://www.w3.org/2000/svg}svg" and root.get("viewBox"), name
        assert b"<dc:date>" not in data
    pinned = re.search(r"^matplotlib==(\S+)", (ROOT / "requirements-docs.txt").read_text(), re.M).group(1)
    if mpl.__version__ == pinned:        # another version may lay text out differently
        for name, data in first.items():
            assert (ROOT / "docs" / "img" / name).read_bytes() == data, \
                f"docs/img/{name} is stale: run python -m bench.plots"


def test_plots_without_results_fail_in_one_line(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="bench/plots.py needs matplotlib")
    assert plots.main(["--results", str(tmp_path), "--out", str(tmp_path / "img")]) == 2
    assert "no benchmark results" in capsys.readouterr().err
