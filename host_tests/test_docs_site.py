"""The documentation: README.md is a front door, and the site built from docs/ has no broken link,
no missing anchor and no page left out of its navigation.

`mkdocs build --strict` (mkdocs.yml turns MkDocs's own link, anchor and navigation checks into
warnings, and --strict fails on any warning) needs requirements-docs.txt, which .ci/run installs.
The README is read by GitHub, not by MkDocs: its links are checked here.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from host_tests.scons_run import ROOT

README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def mkdocs(root: Path, out: Path) -> subprocess.CompletedProcess:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("MkDocs and its Material theme are not installed: pip install -r requirements-docs.txt "
                    "(.ci/run does)")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(out)], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})


def test_the_site_builds_with_no_warning(tmp_path):
    out = mkdocs(ROOT, tmp_path / "site")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "WARNING" not in out.stdout + out.stderr, out.stdout + out.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    # the changelog page is CHANGELOG.md itself, included (pymdownx.snippets), not a copy
    changelog = (tmp_path / "site" / "changelog" / "index.html").read_text(encoding="utf-8")
    assert "Keep a Changelog" in changelog or "Unreleased" in changelog


@pytest.mark.parametrize("damage", ["link", "orphan"])
def test_the_strict_build_is_not_vacuous(tmp_path, damage):
    """A broken link, or a page missing from the navigation, fails the build."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copy(ROOT / "mkdocs.yml", root)
    shutil.copy(ROOT / "CHANGELOG.md", root)
    if damage == "link":
        page = root / "docs" / "boards.md"
        page.write_text(page.read_text() + "\nSee [the missing page](no-such-page.md).\n")
    else:
        (root / "docs" / "stray.md").write_text("# A page no navigation names\n")
    out = mkdocs(root, tmp_path / "site")
    assert out.returncode != 0
    assert ("no-such-page.md" if damage == "link" else "stray.md") in out.stdout + out.stderr


def test_the_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").split("\n")
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move detail to a page of docs/"
    long = [f"README.md:{i}: {len(line)} characters" for i, line in enumerate(lines, 1) if len(line) > 100]
    assert not long, "\n".join(long)


def test_the_readme_links_to_files_that_exist():
    for target in LINK.findall(README.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue
        path = target.split("#", 1)[0]
        assert (ROOT / path).exists(), f"README.md links to {target}, which does not exist"
        anchor = target.partition("#")[2]
        if anchor:
            headings = [re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-")
                        for h in re.findall(r"^#+ (.+)$", (ROOT / path).read_text(encoding="utf-8"), re.M)]
            assert anchor in headings, f"README.md links to {target}: {path} has no such heading"
