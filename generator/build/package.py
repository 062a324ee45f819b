"""The OpenWrt package of a router board's engine: `needle_<version>_<arch>.ipk`.

What is inside (OpenWrt's layout, as its `scripts/ipkg-build` writes it):

    debian-binary     "2.0\\n"
    control.tar.gz    ./control, ./conffiles (/etc/config/needle), ./postinst, ./prerm
    data.tar.gz       ./usr/bin/needle (the static musl executable), ./etc/init.d/needle (a
                      procd script), ./etc/config/needle (UCI settings), and their directories

The service files live in templates/package/; `control.j2` is rendered per board and version,
the others are copied as they are.  `needle.service.j2` beside them is the systemd unit for
Raspberry Pi OS (installed by hand, docs/devices.md), rendered per board: `--archive` only for
an engine that reads its archive from a file.

The container around the three members.  OpenWrt's opkg (opkg-lede, from February 2017 up to
OpenWrt 24.10) reads a package as a **gzip-compressed tar**: its `deb_extract()` pipes the
file through `gzip -d` and walks the tar headers (libbb/unarchive.c; the `ar` reader went in
commit dd4c78a, "libbb: use external gzip command as I/O layer"), and ipkg-build writes
exactly that.  An `ar` archive (`!<arch>`), the classic ipkg and Debian layout, is "Malformed
package file" to it (checked with opkg-lede built from source).  So the default container is `tar.gz`; `ar` is offered for
the other opkg (Yocto's, which reads both) and dpkg-style tools.  OpenWrt 25.12 and later use
apk packages instead: not written here.

Every archive is deterministic, so two builds of the same binary are byte-identical: entries
sorted by name with `./` prefixes, uid/gid 0 (root/root), modes fixed (0755 executables and
scripts, 0644 data, 0755 directories), mtime SOURCE_DATE_EPOCH or 0, gzip header mtime 0 and
no file name.

`python -m generator.build.package --board NAME --binary PATH -o DIR` writes the package and
prints its path (`--systemd` instead of `--binary`: the board's needle.service); a failure is
one line on stderr and exit status 2, and leaves no file.
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import re
import sys
import tarfile
from pathlib import Path

import jinja2

from generator import __version__
from generator.build import boards, elfcheck
from generator.errors import CactError
from generator.files import refuse_output_is_input, write_atomic
from generator.paths import ROOT, TEMPLATES_DIR

PACKAGE_DIR = TEMPLATES_DIR / "package"
NAME = "needle"
# OpenWrt versions a package as PKG_VERSION-PKG_RELEASE: the release counts revisions of the
# packaging (init script, UCI defaults, maintainer scripts) of one upstream version, so a
# fixed service file can ship as 0.2.0-2 and opkg upgrades to it.  Bump it for such a change;
# reset it to 1 when generator.__version__ moves.
RELEASE = 1
MAINTAINER = "the needle-fw authors"
CONTAINERS = ("tar.gz", "ar")
_VERSION_RE = re.compile(r"[0-9][0-9A-Za-z.+~-]*")   # no '_' (file name), no ':' (epoch), no space

# (path in the package, source under templates/package/, mode).  Directories come from paths.
DATA_FILES = (("etc/config/needle", "needle.config", 0o644),
              ("etc/init.d/needle", "needle.init", 0o755))
BINARY_PATH = "usr/bin/needle"
CONFFILES = ("/etc/config/needle",)
SCRIPTS = ("postinst", "prerm")


def openwrt_arch(board: dict) -> str:
    """The board's OpenWrt package architecture ([package] openwrt_arch), or a one-line error."""
    arch = board.get("package", {}).get("openwrt_arch")
    if not arch:
        routers = ", ".join(_router_names()) or "a router board"
        raise CactError(f"board {board['name']} is not an OpenWrt board (no [package] openwrt_arch): "
                        f"package=ipk is for {routers}")
    return arch


def _router_names() -> list[str]:
    out = []
    for name in boards.names():
        try:
            if "package" in boards.load(name):
                out.append(name)
        except CactError:
            pass                                # a broken board file is reported where it is used
    return out


def package_version(version: str | None = None) -> str:
    """`version`, checked, or the generator's version with the OpenWrt release (0.2.0-1)."""
    if version is None:
        return f"{__version__}-{RELEASE}"
    if not _VERSION_RE.fullmatch(version):
        raise CactError(f"package version {version!r} is not an opkg version (digits first, then "
                        f"letters, digits and . + ~ -; e.g. {__version__}-{RELEASE})")
    return version


def package_name(board: dict, version: str | None = None) -> str:
    """`needle_<version>_<openwrt_arch>.ipk`, the name opkg and ipkg-build give the package."""
    return f"{NAME}_{package_version(version)}_{openwrt_arch(board)}.ipk"


def source_date_epoch() -> int:
    """The timestamp of every archive entry: $SOURCE_DATE_EPOCH (reproducible builds), else 0."""
    value = os.environ.get("SOURCE_DATE_EPOCH", "")
    if not value:
        return 0
    if not value.isdigit():
        raise CactError(f"SOURCE_DATE_EPOCH={value!r} must be a non-negative integer (seconds)")
    return int(value)


# ---- archives ------------------------------------------------------------------------------

def tree(files: dict[str, tuple[bytes, int]]) -> list[tuple[str, bytes | None, int]]:
    """The entries of a directory tree holding `files` (path -> (content, mode)), as
    `tar --sort=name -C DIR .` lists them: `./` first, then depth first in name order, each
    directory (content None, mode 0755) before what it holds."""
    entries: dict[tuple[str, ...], tuple[bytes | None, int]] = {(): (None, 0o755)}
    for path, (data, mode) in files.items():
        parts = tuple(path.split("/"))
        for i in range(1, len(parts)):
            entries.setdefault(parts[:i], (None, 0o755))
        entries[parts] = (data, mode)
    return [("/".join(k), *entries[k]) for k in sorted(entries)]


def tar_gz(entries: list[tuple[str, bytes | None, int]], mtime: int, prefix: str = "./") -> bytes:
    """A gzip-compressed GNU tar of `entries` (path, content or None for a directory, mode), in
    the order given, each named `<prefix>path`, owned by 0:0 (root/root), dated `mtime`."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path, data, mode in entries:
            info = tarfile.TarInfo(f"{prefix}{path}")     # a directory gets its trailing '/' from tarfile
            info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "root", "root"
            info.mode = mode
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return gzip_bytes(raw.getvalue())


def gzip_bytes(data: bytes) -> bytes:
    """gzip with a fixed header (mtime 0, no file name), as `gzip -n` writes it."""
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(data)
    return out.getvalue()


def ar_archive(members: list[tuple[str, bytes]], mtime: int = 0) -> bytes:
    """A System V / GNU `ar` archive, the format of Debian packages and of classic ipkg.

    Format (binutils include/aout/ar.h; deb(5)): the magic `!<arch>\\n`, then per member a
    60-byte ASCII header of space-padded fields: name ended by `/` (16 bytes), mtime in
    decimal (12), uid (6), gid (6), mode in octal (8), size in decimal (10), then the two
    bytes `` `\\n ``; then the data, padded with one `\\n` to an even offset.  Member names
    here are at most 15 characters, so no long-name table is needed."""
    out = [b"!<arch>\n"]
    for name, data in members:
        if len(name) > 15 or "/" in name:
            raise CactError(f"ar member name {name!r} must be at most 15 characters, without '/'")
        header = f"{name + '/':<16}{mtime:<12}{0:<6}{0:<6}{0o100644:<8o}{len(data):<10}`\n"
        out += [header.encode("ascii"), data, b"\n" if len(data) % 2 else b""]
    return b"".join(out)


# ---- the package -----------------------------------------------------------------------------

def _license() -> str:
    """The licence's name, from the first line of LICENSE at the repository root."""
    try:
        first = (ROOT / "LICENSE").read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        raise CactError(f"cannot read the licence name from {ROOT / 'LICENSE'}") from None
    return first.removesuffix(" License") if first.endswith(" License") else first


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(PACKAGE_DIR)), trim_blocks=True,
                              lstrip_blocks=True, undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True)


def control_text(board: dict, version: str, installed_size: int) -> str:
    description = (f"Needle tool-calling model engine (needle-fw {__version__}), a procd service that "
                   f"reads its .cact archive from USB storage; built for {board['description']}")
    return _environment().get_template("control.j2").render(
        version=version, license=_license(), maintainer=MAINTAINER, arch=openwrt_arch(board),
        installed_size=installed_size, description=" ".join(description.split()))


def ipk_bytes(board: dict, binary: bytes, version: str | None = None, container: str = "tar.gz") -> bytes:
    """The whole package, in memory."""
    if container not in CONTAINERS:
        raise CactError(f"package container {container!r}: choose {' or '.join(CONTAINERS)}")
    package_name(board, version)                 # a non-router board or a bad version stops here
    version, mtime = package_version(version), source_date_epoch()
    data_files = {BINARY_PATH: (binary, 0o755)}
    for path, src, mode in DATA_FILES:
        data_files[path] = ((PACKAGE_DIR / src).read_bytes(), mode)
    data_tar_gz = tar_gz(tree(data_files), mtime)
    # ipkg-build writes Installed-Size as `zcat data.tar.gz | wc -c`: the uncompressed tar
    # (each file with its 512-byte header, rounded up to 512 bytes, the tar padded to 10 KiB).
    # opkg checks it, in KiB, against the free space of the overlay before installing.
    installed_size = len(gzip.decompress(data_tar_gz))
    control = {"control": (control_text(board, version, installed_size).encode(), 0o644),
               "conffiles": ("".join(f"{c}\n" for c in CONFFILES).encode(), 0o644)}
    for script in SCRIPTS:
        control[script] = ((PACKAGE_DIR / script).read_bytes(), 0o755)
    control_tar_gz = tar_gz(tree(control), mtime)
    members = {"debian-binary": b"2.0\n", "control.tar.gz": control_tar_gz, "data.tar.gz": data_tar_gz}
    if container == "ar":                       # Debian's order, which dpkg requires
        return ar_archive([(n, members[n]) for n in ("debian-binary", "control.tar.gz", "data.tar.gz")],
                          mtime)
    # ipkg-build: tar ... ./debian-binary ./data.tar.gz ./control.tar.gz | gzip -n
    return tar_gz([(n, members[n], 0o644) for n in ("debian-binary", "data.tar.gz", "control.tar.gz")],
                  mtime)


def write_ipk(board: dict, binary: str, out_dir: str, version: str | None = None,
              container: str = "tar.gz") -> str:
    """Write `needle_<version>_<openwrt_arch>.ipk` of `binary` for `board` into `out_dir` and
    return its path.  The file appears whole or not at all (temporary name, then rename)."""
    name = package_name(board, version)
    path = os.path.join(out_dir, name)
    refuse_output_is_input({"the package": path}, {"--binary": binary})
    try:
        data = Path(binary).read_bytes()
    except OSError as exc:
        raise CactError(f"cannot read the binary {binary}: {exc.strerror}") from None
    if not data:
        raise CactError(f"the binary {binary} is empty")
    elfcheck.check_binary(io.BytesIO(data), binary, board)    # the board's machine, byte order and ABI
    return _write_atomic(path, ipk_bytes(board, data, version, container))


# ---- the systemd unit (Raspberry Pi OS) ----------------------------------------------------------

SYSTEMD_BINARY = "/usr/local/bin/needle"
SYSTEMD_SOCKET = "/run/needle/needle.sock"
SYSTEMD_ARCHIVE = "/usr/local/share/needle/model.cact"


def systemd_unit(board: dict, binary: str = SYSTEMD_BINARY, archive_path: str = SYSTEMD_ARCHIVE,
                 environment: str | None = None) -> str:
    """needle.service for a Linux board: `needle --serve` on SYSTEMD_SOCKET, sandboxed.  An engine
    that reads its archive from a file (placement `file`) gets `--archive SYSTEMD_ARCHIVE`, that
    directory read-only and a check that the file is there; one that links its archive in (the
    Raspberry Pi boards) refuses `--archive`, so its unit has none.  The Debian package
    (generator.build.deb) installs the executable and the archive under /usr and gives an
    `environment` file whose NEEDLE_OPTS are added to the command line."""
    if board["os"] != "linux":
        raise CactError(f"board {board['name']} is bare metal (os = none): a systemd unit is for the "
                        "Linux boards (rpi-zero, rpi-zero2, rpi5, ...)")
    archive = archive_path if board["archive"]["placement"] == "file" else None
    return _environment().get_template("needle.service.j2").render(
        board=board["name"], binary=binary, socket=SYSTEMD_SOCKET, archive=archive,
        archive_dir=os.path.dirname(archive_path), environment=environment)


def _write_atomic(path: str, blob: bytes) -> str:
    """Write `blob` to `path` (mode 0644), whole or not at all (generator.files.write_atomic),
    making its directory; returns the path."""
    out_dir = os.path.dirname(path) or "."
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise CactError(f"cannot write into {out_dir}: {exc.strerror}") from None
    write_atomic(path, blob, mode=0o644)
    return path


def write_systemd_unit(board: dict, out_dir: str) -> str:
    """Write `needle.service` for `board` into `out_dir` and return its path."""
    return _write_atomic(os.path.join(out_dir, "needle.service"), systemd_unit(board).encode())


# ---- command line --------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        raise CactError(f"{message} (see {self.prog} --help)")

    def run(self, argv, body) -> int:
        """The packaging modules' command lines: parse argv, then body(args), which prints the
        paths it wrote; a bad option or a CactError is one line on stderr and exit 2."""
        try:
            body(self.parse_args(argv))
            return 0
        except CactError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="python -m generator.build.package",
                description="Write the OpenWrt package (.ipk) of a router board's needle binary "
                            "(--binary), or the systemd unit of a Linux board (--systemd).")
    p.add_argument("--board", required=True, help="a board with [package] openwrt_arch (router-...)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--binary", help="the built executable (build/<board>/needle): write the .ipk")
    what.add_argument("--systemd", action="store_true", help="write needle.service for the board")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="the directory to write into")
    p.add_argument("--version", help=f"package version (default {package_version()})")
    p.add_argument("--container", choices=CONTAINERS, default="tar.gz",
                   help="tar.gz: OpenWrt's opkg (default); ar: Yocto's opkg, dpkg-style tools")
    def body(args):
        board = boards.load(args.board)
        if args.systemd and (args.version is not None or args.container != "tar.gz"):
            p.error("--version and --container go with --binary (the .ipk), not --systemd")
        if args.systemd:
            print(write_systemd_unit(board, args.output))
        else:
            print(write_ipk(board, args.binary, args.output, args.version, args.container))
    return p.run(argv, body)

if __name__ == "__main__":
    sys.exit(main())
