"""The release tarball and the OpenWrt SDK package Makefile that builds from it.

`scons dist` (or `python -m generator.build.dist -o build/dist`) writes

    build/dist/needle-fw-<version>.tar.gz      what generating and building the engine needs
    build/dist/openwrt/needle/Makefile         an OpenWrt package Makefile (templates/openwrt/),
                                               its PKG_VERSION generator.__version__ and its
                                               PKG_HASH the SHA-256 of that very tarball

The Makefile is written beside the tarball, not kept in the tree: its PKG_HASH names the bytes
of the tarball, which change with every commit that touches a file in it, so a committed copy
would be wrong after the next commit; generated together they always agree.

The tarball holds DIST_PATHS under `needle-fw-<version>/`, as `git archive` would, but from the
working tree (the files `git ls-files --cached --others --exclude-standard` names, so build
output, caches and ignored files stay out; outside a git checkout, a walk without __pycache__).
It is reproducible: entries sorted, directories before their contents, owner 0:0 (root), mode
0755 for directories and executable files and 0644 for the rest, every mtime SOURCE_DATE_EPOCH
or 0, gzip without a name or a time: the same tree gives the same bytes, so the hash in the
Makefile can be checked by anyone who makes the tarball again.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import jinja2

from generator import __version__
from generator.build import package
from generator.errors import CactError
from generator.paths import ROOT, TEMPLATES_DIR

NAME = "needle-fw"
DIST_PATHS = ("generator", "templates", "firmware", "boards", "site_scons", "SConstruct",
              "demo/needle2-demo.cact", "requirements.txt", "requirements-routers.txt", "LICENSE",
              "pyproject.toml", "CHANGELOG.md")
# PKG_SOURCE_URL of the Makefile: empty unless given (NEEDLE_DIST_URL or --url).  The SDK takes
# a file already in its dl/ directory when its hash matches, without downloading anything.
URL_ENV = "NEEDLE_DIST_URL"
MAKEFILE = os.path.join("openwrt", "needle", "Makefile")


def tarball_name() -> str:
    return f"{NAME}-{__version__}.tar.gz"


def _listed(root: Path) -> list[str]:
    """The files of DIST_PATHS under `root`, relative, sorted."""
    if (root / ".git").exists():
        proc = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--",
                               *DIST_PATHS], cwd=root, capture_output=True)
        if proc.returncode == 0:
            return sorted({p for p in proc.stdout.decode().split("\0") if p and (root / p).is_file()})
    out = set()
    for top in DIST_PATHS:
        path = root / top
        if path.is_file():
            out.add(top)
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            rel = os.path.relpath(dirpath, root)
            out.update(os.path.join(rel, f) for f in filenames if not f.endswith(".pyc"))
    return sorted(out)


def tarball_bytes(root: Path = ROOT) -> bytes:
    """The release tarball of the tree at `root`, in memory."""
    files = {}
    for rel in _listed(root):
        path = root / rel
        files[rel] = (path.read_bytes(), 0o755 if os.access(path, os.X_OK) else 0o644)
    missing = [p for p in DIST_PATHS if not any(f == p or f.startswith(p + "/") for f in files)]
    if missing:
        raise CactError(f"the release tarball needs {', '.join(missing)}, missing from {root}")
    return package.tar_gz(package.tree(files), package.source_date_epoch(), prefix=f"{NAME}-{__version__}/")


def makefile_text(sha256: str, url: str = "") -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR / "openwrt")), trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.get_template("Makefile.j2").render(
        version=__version__, release=package.RELEASE, sha256=sha256, url=url, name=NAME,
        tarball=tarball_name(), license=package._license(), maintainer=package.MAINTAINER)


def write_dist(out_dir: str, url: str | None = None) -> list[str]:
    """Write the tarball and openwrt/needle/Makefile into out_dir; return their paths."""
    url = os.environ.get(URL_ENV, "") if url is None else url
    if url and not url.endswith("/"):
        url += "/"
    blob = tarball_bytes()
    tarball = package._write_atomic(os.path.join(out_dir, tarball_name()), blob)
    makefile = package._write_atomic(os.path.join(out_dir, MAKEFILE),
                                     makefile_text(hashlib.sha256(blob).hexdigest(), url).encode())
    return [tarball, makefile]


def main(argv: list[str] | None = None) -> int:
    p = package._Parser(prog="python -m generator.build.dist",
                        description="Write the release tarball and the OpenWrt SDK package Makefile.")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="the directory to write into")
    p.add_argument("--url", help=f"PKG_SOURCE_URL: where the tarball is published (default ${URL_ENV} or none)")
    return p.run(argv, lambda args: [print(path) for path in write_dist(args.output, args.url)])

if __name__ == "__main__":
    sys.exit(main())
