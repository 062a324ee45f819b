"""An OpenWrt package feed of a router board: the directory `opkg update` reads.

    feed/needle_<version>_<arch>.ipk   the package (generator.build.package, byte for byte)
    feed/Packages                      the index: per package, its control file with Filename,
                                       Size and SHA256sum put before Description, then a blank
                                       line (the semantics of OpenWrt's scripts/ipkg-make-index.sh)
    feed/Packages.gz                   the same, `gzip -9n` (what `src/gz` tells opkg to fetch)
    feed/Packages.sig                  with a key: `usign -S -m Packages`'s signature of the
                                       uncompressed index (generator.build.usign), which opkg
                                       checks with the keys in /etc/opkg/keys/ (option
                                       check_signature, on in OpenWrt's /etc/opkg.conf)

One feed holds one board's package, that is one OpenWrt package architecture: OpenWrt's own
feeds are per architecture (.../packages/mipsel_24kc/...), a router lists only its own, and a
feed mixing architectures would make every router download the others' entries.  So
`scons board=router-mt7621 package=feed` writes build/router-mt7621/feed/, one directory per
router to publish under its architecture's name.

With a key, the public key is also written as <out>/../opkg-keys/<fingerprint> (the name opkg
looks it up by): copy that file to the router's /etc/opkg/keys/ over a channel you trust.

`python -m generator.build.feed --board NAME --binary PATH -o DIR [--key FILE]` writes the feed
and prints its files; a failure is one line on stderr, exit status 2, before anything is written.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import sys
import tarfile

from generator.build import boards, package, usign
from generator.errors import CactError

INDEX = "Packages"
KEYS_DIR = "opkg-keys"


def control_of(ipk: bytes) -> str:
    """The ./control file inside a package (gzip'd tar or ar container)."""
    if ipk.startswith(b"!<arch>\n"):
        raise CactError("an ar-container package goes in no OpenWrt feed: OpenWrt's opkg reads tar.gz")
    with tarfile.open(fileobj=io.BytesIO(ipk), mode="r:gz") as outer:
        control_gz = outer.extractfile("./control.tar.gz").read()
    with tarfile.open(fileobj=io.BytesIO(control_gz), mode="r:gz") as inner:
        return inner.extractfile("./control").read().decode()


def index_entry(filename: str, ipk: bytes) -> str:
    """One stanza of Packages: the control fields, Filename/Size/SHA256sum before Description,
    ended by a blank line."""
    extra = (f"Filename: {filename}\nSize: {len(ipk)}\n"
             f"SHA256sum: {hashlib.sha256(ipk).hexdigest()}\n")
    lines = control_of(ipk).splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if line.startswith("Description:")), len(lines))
    return "".join(lines[:at]) + extra + "".join(lines[at:]) + "\n"


def feed_files(board: dict, binary: bytes, key: usign.SecretKey | None = None,
               version: str | None = None) -> dict[str, bytes]:
    """{file name: content} of the feed directory."""
    ipk = package.ipk_bytes(board, binary, version)
    name = package.package_name(board, version)
    index = index_entry(name, ipk).encode()
    files = {name: ipk, INDEX: index, f"{INDEX}.gz": package.gzip_bytes(index)}
    if key is not None:
        files[f"{INDEX}.sig"] = usign.signature_file(key, index)
    return files


def write_feed(board: dict, binary: str, out_dir: str, key_path: str | None = None,
               version: str | None = None) -> list[str]:
    """Write the feed of `binary` for `board` into `out_dir` (and, with a key, its public key into
    out_dir/../opkg-keys/); return the paths written.  Everything is checked first (board,
    version, binary, key): a refusal writes nothing."""
    if not board.get("package", {}).get("openwrt_arch"):
        raise CactError(f"board {board['name']} is not an OpenWrt board (no [package] openwrt_arch): an "
                        f"opkg feed is for {', '.join(package._router_names())} (board=router-...)")
    package.package_name(board, version)            # a bad version stops here
    key = usign.read_secret_key(key_path) if key_path else None
    try:
        data = open(binary, "rb").read()
    except OSError as exc:
        raise CactError(f"cannot read the binary {binary}: {exc.strerror}") from None
    if not data:
        raise CactError(f"the binary {binary} is empty")
    package.elfcheck.check_binary(io.BytesIO(data), binary, board)
    files = feed_files(board, data, key, version)
    stale = os.path.join(out_dir, f"{INDEX}.sig")
    if key is None and os.path.exists(stale):       # an old signature would not match the new index
        os.unlink(stale)
    # the index last: a reader never sees an index naming a package that is not there yet
    order = sorted(files, key=lambda n: (n.startswith(INDEX), n == INDEX, n))
    written = [package._write_atomic(os.path.join(out_dir, n), files[n]) for n in order]
    if key is not None:
        keys = os.path.join(os.path.dirname(os.path.abspath(out_dir)), KEYS_DIR)
        written.append(package._write_atomic(os.path.join(keys, usign.fingerprint_name(key.fingerprint)),
                                             usign.public_key_file(key)))
    return written


def main(argv: list[str] | None = None) -> int:
    p = package._Parser(prog="python -m generator.build.feed",
                        description="Write an OpenWrt feed (the .ipk, Packages, Packages.gz and, with "
                                    "--key, Packages.sig) of a router board's needle binary.")
    p.add_argument("--board", required=True, help="a router board (router-...)")
    p.add_argument("--binary", required=True, help="the built executable (stripped)")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="the feed directory")
    p.add_argument("--key", help="usign secret key: also write Packages.sig")
    p.add_argument("--version", help=f"package version (default {package.package_version()})")
    return p.run(argv, lambda args: [print(path) for path in write_feed(boards.load(args.board), args.binary,
                                                                        args.output, args.key, args.version)])

if __name__ == "__main__":
    sys.exit(main())
