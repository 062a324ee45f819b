"""The Debian package of a Raspberry Pi board's engine: `needle-<board>_<version>_<arch>.deb`.

What is inside (built with `dpkg-deb --root-owner-group --build`):

    /usr/bin/needle                         the static executable (stripped)
    /usr/share/needle/model.cact            the archive the engine was generated for
    /lib/systemd/system/needle.service      the unit of generator.build.package.systemd_unit,
                                            with /usr/bin/needle and /etc/default/needle
    /etc/default/needle                     NEEDLE_OPTS of the service (a conffile)
    /usr/share/man/man1/needle.1.gz         the manual page
    /usr/share/doc/<package>/copyright      machine-readable (DEP-5), the MIT licence
    /usr/share/doc/<package>/changelog.Debian.gz
    /usr/share/lintian/overrides/<package>  the lintian tags a static executable earns, each
                                            with its reason
    DEBIAN/control, conffiles, md5sums, postinst, prerm, postrm (templates/deb/)

**One package per board.**  rpi-zero2 (Cortex-A53) and rpi5 (Cortex-A76, dot-product
instructions) are both Debian arm64, but the rpi5 executable dies with SIGILL on a Zero 2:
the two are different programs of one architecture.  A single package name `needle` with a
per-board version would let apt "upgrade" one into the other.  So each board has its own
package, `needle-rpi5`, `needle-rpi-zero2`, `needle-rpi-zero`, and each one `Provides`,
`Conflicts` with and `Replaces` the virtual package `needle` (Debian Policy 7.6.2: the way to
say that packages installing the same files are alternatives): one of them is installed at a
time, switching is one `apt install`, and `Depends: needle` is satisfied by any.

**rpi-zero is armhf.**  The Zero's ARM1176 is ARMv6 with VFPv2.  Raspberry Pi OS (32-bit), what
Zero owners run, calls its architecture armhf (built for ARMv6 + VFP); Debian's own armhf
needs ARMv7 and does not run on a Zero at all, and Debian's armel (ARMv5, soft float) does.
The executable is static (no libc, no loader from the system), so the float ABI of the
distribution's libraries never meets it and only dpkg's architecture check matters: armhf
installs on the system the Zero actually runs.  (On Debian armel it needs
`dpkg --add-architecture armhf`, or a rebuild with [deb] architecture = "armel".)

Reproducible: every file and directory gets the mtime SOURCE_DATE_EPOCH, else the date of
this version's heading in CHANGELOG.md (lintian refuses the 1970 dates the .ipk uses), and
dpkg-deb (1.21: file names sorted, owner root through --root-owner-group, ar members dated
SOURCE_DATE_EPOCH) is run with that SOURCE_DATE_EPOCH.

`python -m generator.build.deb --board NAME --binary PATH --archive CACT -o DIR` writes the
package and prints its path; a failure is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import calendar
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from generator import __version__
from generator.build import boards, elfcheck, package
from generator.errors import CactError
from generator.paths import ROOT, TEMPLATES_DIR

DEB_DIR = TEMPLATES_DIR / "deb"
VIRTUAL = "needle"
MAINTAINER = "needle-fw authors <needle-fw@example.org>"
BINARY = "/usr/bin/needle"
ARCHIVE = "/usr/share/needle/model.cact"
UNIT = "/lib/systemd/system/needle.service"     # bookworm's place (merged /usr: /usr/lib in trixie)
DEFAULTS = "/etc/default/needle"
SCRIPTS = ("postinst", "prerm", "postrm")


def debian_arch(board: dict) -> str:
    """The board's dpkg architecture ([deb] architecture), or a one-line refusal naming the fix."""
    arch = board.get("deb", {}).get("architecture")
    if not arch:
        pis = ", ".join(n for n in boards.names() if "deb" in _load(n)) or "the Raspberry Pi boards"
        kind = ("bare metal (os = none)" if board["os"] != "linux" else
                "an OpenWrt router (package=ipk or package=feed)" if "package" in board else
                "not a Debian board (no [deb] architecture)")
        raise CactError(f"board {board['name']} is {kind}: package=deb is for {pis}")
    return arch


def _load(name: str) -> dict:
    try:
        return boards.load(name)
    except CactError:
        return {}


def package_name(board: dict) -> str:
    debian_arch(board)
    return f"{VIRTUAL}-{board['name']}"


def package_version() -> str:
    """Debian's upstream-revision: the .ipk's version (generator.__version__ and the packaging
    release), so both packages of one release carry the same number."""
    return package.package_version()


def deb_name(board: dict) -> str:
    return f"{package_name(board)}_{package_version()}_{debian_arch(board)}.deb"


def build_epoch() -> int:
    """SOURCE_DATE_EPOCH, else midnight UTC of `## <version> (YYYY-MM-DD)` in CHANGELOG.md."""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return package.source_date_epoch()
    try:
        text = (ROOT / "CHANGELOG.md").read_text()
    except OSError:
        text = ""
    m = re.search(rf"^## {re.escape(__version__)} \((\d{{4}})-(\d\d)-(\d\d)\)", text, re.M)
    if not m:
        raise CactError(f"no date for version {__version__}: CHANGELOG.md has no heading "
                        f"'## {__version__} (YYYY-MM-DD)'; set SOURCE_DATE_EPOCH")
    return calendar.timegm((int(m[1]), int(m[2]), int(m[3]), 0, 0, 0))


def _rfc2822(epoch: int) -> str:
    return time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(epoch))


def copyright_text() -> str:
    """debian/copyright in the machine-readable format 1.0, with the licence's whole text."""
    lic = (ROOT / "LICENSE").read_text().strip().splitlines()
    holder = next((re.sub(r"^Copyright (\(c\) )?", "", line) for line in lic if line.startswith("Copyright")),
                  "the needle-fw authors")
    text = [line for line in lic[1:] if not line.startswith("Copyright")]
    while text and not text[0].strip():
        text.pop(0)
    body = "\n".join(f" {line}" if line.strip() else " ." for line in text).lstrip()
    return ("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
            "Upstream-Name: needle-fw\n\n"
            f"Files: *\nCopyright: {holder}\nLicense: {package._license()}\n {body}\n")


def changelog_text(board: dict, epoch: int) -> str:
    return (f"{package_name(board)} ({package_version()}) stable; urgency=medium\n\n"
            f"  * needle-fw {__version__} for {board['name']}, built by `scons board={board['name']}\n"
            f"    package=deb`.  The changes are in needle-fw's CHANGELOG.md.\n\n"
            f" -- {MAINTAINER}  {_rfc2822(epoch)}\n")


def control_text(board: dict, installed_kib: int) -> str:
    long = (f"The engine of needle-fw {__version__}, generated for one model archive and compiled "
            f"for {' '.join(board['description'].split())}. It answers prompts, turns queries into "
            "tool calls and serves JSON-lines requests on /run/needle/needle.sock as needle.service.")
    para2 = (f"Built for the board {board['name']}; the packages of the other boards (needle-rpi-zero, "
             "needle-rpi-zero2, needle-rpi5) are alternatives to it: one is installed at a time.")
    desc = "".join(f" {line}\n" for line in textwrap.wrap(long, 79, break_on_hyphens=False)) + " .\n" + \
        "".join(f" {line}\n" for line in textwrap.wrap(para2, 79, break_on_hyphens=False))
    return (f"Package: {package_name(board)}\n"
            f"Version: {package_version()}\n"
            f"Architecture: {debian_arch(board)}\n"
            f"Maintainer: {MAINTAINER}\n"
            f"Installed-Size: {installed_kib}\n"
            f"Provides: {VIRTUAL}\n"
            f"Conflicts: {VIRTUAL}\n"
            f"Replaces: {VIRTUAL}\n"
            "Section: utils\n"
            "Priority: optional\n"
            f"Description: Needle tool-calling model engine for {board['name']}\n" + desc)


def lintian_overrides(board: dict) -> str:
    """What lintian says of this package that is so on purpose, each override with its reason
    (the comment above it).  host_tests/test_linux_packages.py runs lintian: no tag is left."""
    name = package_name(board)
    return (
        "# The engine is static on purpose: one file that needs no library of the system, so the\n"
        "# same executable runs on Raspberry Pi OS and on Debian whatever their libc and float ABI.\n"
        f"{name}: statically-linked-binary [usr/bin/needle]\n"
        "# .comment names the compiler; the executable is the very link the post-link check read,\n"
        "# stripped by the linker (-s), and is not rewritten after that check.\n"
        f"{name}: binary-has-unneeded-section .comment [usr/bin/needle]\n"
        "# The executable holds the model's vocabulary: word pieces such as 'guage' or 'ment' are\n"
        "# tokens, not misspelt messages.\n"
        f"{name}: spelling-error-in-binary *\n"
        "# Raspberry Pi OS and Debian boot with systemd; the unit's sandbox (DynamicUser,\n"
        "# ProtectSystem, a syscall filter) has no sysvinit equivalent worth shipping.\n"
        f"{name}: package-supports-alternative-init-but-no-init.d-script [lib/systemd/system/needle.service]\n"
        "# Built by needle-fw for its users' devices, not uploaded to Debian: there is no ITP bug.\n"
        f"{name}: initial-upload-closes-no-bugs *\n")


def data_files(board: dict, binary: bytes, archive: bytes, epoch: int) -> dict[str, tuple[bytes, int]]:
    name = package_name(board)
    doc = f"usr/share/doc/{name}"
    unit = package.systemd_unit(board, BINARY, ARCHIVE, DEFAULTS)
    return {
        BINARY[1:]: (binary, 0o755),
        ARCHIVE[1:]: (archive, 0o644),
        UNIT[1:]: (unit.encode(), 0o644),
        DEFAULTS[1:]: ((DEB_DIR / "default").read_bytes(), 0o644),
        "usr/share/man/man1/needle.1.gz": (package.gzip_bytes((DEB_DIR / "needle.1").read_bytes()), 0o644),
        f"{doc}/copyright": (copyright_text().encode(), 0o644),
        f"{doc}/changelog.Debian.gz": (package.gzip_bytes(changelog_text(board, epoch).encode()), 0o644),
        f"usr/share/lintian/overrides/{name}": (lintian_overrides(board).encode(), 0o644),
    }


def installed_size(files: dict[str, tuple[bytes, int]]) -> int:
    """Installed-Size in KiB as dpkg-gencontrol counts it: each file rounded up to a KiB, each
    directory one."""
    dirs = {"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)}
    return sum(-(-len(data) // 1024) for data, _ in files.values()) + len(dirs)


def _stage(root: Path, files: dict[str, tuple[bytes, int]], epoch: int) -> None:
    for path, (data, mode) in files.items():
        dest = root / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        dest.chmod(mode)
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for n in filenames:
            os.utime(os.path.join(dirpath, n), (epoch, epoch), follow_symlinks=False)
        os.chmod(dirpath, 0o755)
        os.utime(dirpath, (epoch, epoch))


def deb_tree(board: dict, binary: bytes, archive: bytes, root: Path) -> int:
    """Stage the package's tree (DEBIAN/ included) in `root`; return its epoch."""
    epoch = build_epoch()
    files = data_files(board, binary, archive, epoch)
    md5sums = "".join(f"{hashlib.md5(data).hexdigest()}  {p}\n" for p, (data, _) in sorted(files.items()))
    control = {"DEBIAN/control": (control_text(board, installed_size(files)).encode(), 0o644),
               "DEBIAN/conffiles": (f"{DEFAULTS}\n".encode(), 0o644),
               "DEBIAN/md5sums": (md5sums.encode(), 0o644)}
    for script in SCRIPTS:
        control[f"DEBIAN/{script}"] = ((DEB_DIR / script).read_bytes(), 0o755)
    _stage(root, {**files, **control}, epoch)
    return epoch


def write_deb(board: dict, binary: str, archive: str, out_dir: str) -> str:
    """Write `needle-<board>_<version>_<arch>.deb` into out_dir and return its path (whole or
    not at all).  Everything is checked before anything is written."""
    name = deb_name(board)                       # a board without [deb] stops here
    if board["archive"]["placement"] != "linked":
        raise CactError(f"board {board['name']}: package=deb holds engines that link their archive in "
                        f"(archive.placement = \"linked\")")
    if not shutil.which("dpkg-deb"):
        raise CactError("package=deb needs dpkg-deb (apt-get install dpkg)")
    path = os.path.join(out_dir, name)
    package.refuse_output_is_input({"the package": path}, {"--binary": binary, "--archive": archive})
    blobs = []
    for what, src in (("binary", binary), ("archive", archive)):
        try:
            blobs.append(Path(src).read_bytes())
        except OSError as exc:
            raise CactError(f"cannot read the {what} {src}: {exc.strerror}") from None
        if not blobs[-1]:
            raise CactError(f"the {what} {src} is empty")
    elfcheck.check_binary(io.BytesIO(blobs[0]), binary, board)
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".deb-") as tmp:
        root = Path(tmp) / "root"
        epoch = deb_tree(board, blobs[0], blobs[1], root)
        out = Path(tmp) / name
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
        proc = subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(out)],
                              capture_output=True, text=True, env=env)
        if proc.returncode:
            last = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise CactError(f"dpkg-deb --build failed: {last[0]}")
        out.chmod(0o644)
        os.replace(out, path)
    return path


def main(argv: list[str] | None = None) -> int:
    p = package._Parser(prog="python -m generator.build.deb",
                        description="Write the Debian package (.deb) of a Raspberry Pi board's needle binary.")
    p.add_argument("--board", required=True, help="a board with [deb] architecture (rpi-zero, rpi-zero2, rpi5)")
    p.add_argument("--binary", required=True, help="the built executable (stripped)")
    p.add_argument("--archive", required=True, help="the .cact archive it was generated for")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="the directory to write into")
    return p.run(argv, lambda args: print(write_deb(boards.load(args.board), args.binary, args.archive, args.output)))

if __name__ == "__main__":
    sys.exit(main())
