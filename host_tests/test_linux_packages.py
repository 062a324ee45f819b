"""Linux devices the way their worlds install software: an opkg feed for the routers
(generator/build/feed.py, usign.py), a Debian package for the Raspberry Pi boards
(generator/build/deb.py) and the release tarball with its OpenWrt SDK Makefile
(generator/build/dist.py).

Each artefact is checked with a tool that does not share code with the writer: the feed's
index with a reader written here from the format (stanzas of `Field: value`; each Filename
there with that Size and SHA256sum), its signature with OpenBSD's signify (usign's format),
the .deb with dpkg-deb, lintian and an install into a scratch root with dpkg, the tarball with
the system's tar.  opkg and an OpenWrt SDK are not here: docs/devices.md says what that leaves
unchecked.  The cross builds (one router, three Pis) make this the emulator tier.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from generator import __version__
from generator.build import boards, feed, package, usign
from generator.errors import CactError
from host_tests import elf_stub
from host_tests.scons_run import scons

ROOT = Path(__file__).resolve().parent.parent
ROUTERS = [n for n in boards.names() if "package" in boards.load(n)]
DEMO = ROOT / "demo" / "needle2-demo.cact"
SIGNIFY = shutil.which("signify-openbsd") or shutil.which("signify")
needs_signify = pytest.mark.skipif(not SIGNIFY, reason="no signify (apt-get install signify-openbsd)")


def run(cmd, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}: {proc.stdout}{proc.stderr}"
    return proc


def one_line_refusal(proc: subprocess.CompletedProcess, expect: str):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and expect in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def stand_in(board_name: str, tmp_path: Path) -> Path:
    path = tmp_path / f"needle-{board_name}"
    path.write_bytes(elf_stub.for_board(boards.load(board_name)))
    return path


# ---- an opkg index, read as opkg reads it ------------------------------------------------------

def read_index(text: str) -> list[dict[str, str]]:
    """The stanzas of a Packages file: `Field: value` lines, a line starting with a space
    continuing the field before it, stanzas separated by blank lines."""
    stanzas, current, last = [], {}, None
    for line in text.split("\n"):
        if not line.strip():
            if current:
                stanzas.append(current)
            current, last = {}, None
        elif line[0] in " \t":
            assert last, f"continuation line without a field: {line!r}"
            current[last] += "\n" + line[1:]
        else:
            key, sep, value = line.partition(":")
            assert sep and key and " " not in key, f"not a field: {line!r}"
            assert key not in current, f"field {key} twice in one stanza"
            current[key], last = value.strip(), key
    assert not current, "the last stanza is not ended by a blank line"
    return stanzas


def check_feed(directory: Path) -> list[dict[str, str]]:
    """Every stanza's package is in `directory` with its Size and SHA256sum; Packages.gz is
    Packages; returns the stanzas."""
    text = (directory / "Packages").read_text()
    assert gzip.decompress((directory / "Packages.gz").read_bytes()).decode() == text
    stanzas = read_index(text)
    assert stanzas
    for s in stanzas:
        path = directory / s["Filename"]
        assert "/" not in s["Filename"] and path.is_file(), s["Filename"]
        blob = path.read_bytes()
        assert int(s["Size"]) == len(blob)
        assert s["SHA256sum"] == hashlib.sha256(blob).hexdigest()
        assert re.fullmatch(r"[0-9a-f]{64}", s["SHA256sum"])
    return stanzas


def test_index_reader_refuses_what_opkg_would():
    with pytest.raises(AssertionError, match="blank line"):
        read_index("Package: a\nVersion: 1")
    with pytest.raises(AssertionError, match="not a field"):
        read_index("Package a\n\n")
    assert read_index("Package: a\nDescription: x\n more\n\n") == [{"Package": "a", "Description": "x\nmore"}]


@pytest.mark.parametrize("board_name", ROUTERS)
def test_feed_index_describes_its_package(board_name, tmp_path, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    board = boards.load(board_name)
    binary = stand_in(board_name, tmp_path)
    out = tmp_path / "feed"
    written = [Path(p) for p in feed.write_feed(board, str(binary), str(out))]
    ipk = out / package.package_name(board)
    assert sorted(p.name for p in out.iterdir()) == sorted(["Packages", "Packages.gz", ipk.name])
    assert written[-1].name == "Packages" and not (tmp_path / feed.KEYS_DIR).exists()
    [stanza] = check_feed(out)
    assert stanza["Filename"] == ipk.name
    # the very package write_ipk writes, and its control fields, in order, with the three
    # fields of the index put before Description (ipkg-make-index.sh)
    assert ipk.read_bytes() == package.ipk_bytes(board, binary.read_bytes())
    control = read_index(feed.control_of(ipk.read_bytes()) + "\n")[0]
    assert list(stanza) == [k for k in control if k != "Description"] + ["Filename", "Size", "SHA256sum",
                                                                         "Description"]
    assert {k: v for k, v in stanza.items() if k in control} == control
    assert stanza["Architecture"] == board["package"]["openwrt_arch"] and stanza["Package"] == "needle"
    # deterministic: the same feed again, byte for byte
    again = tmp_path / "again"
    feed.write_feed(board, str(binary), str(again))
    for name in ("Packages", "Packages.gz", ipk.name):
        assert (again / name).read_bytes() == (out / name).read_bytes()


def test_ed25519_rfc8032_vector():
    """RFC 8032 section 7.1, TEST 1 (the empty message) and TEST 2 (one byte)."""
    seed = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    assert usign.public_key(seed).hex() == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    assert usign.sign(seed, b"").hex() == (
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46b"
        "d25bf5f0595bbe24655141438e7a100b")
    seed = bytes.fromhex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb")
    assert usign.sign(seed, b"\x72").hex() == (
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c"
        "387b2eaeb4302aeeb00d291612bb0c00")


def test_fingerprint_name_is_usigns():
    """usign prints the fingerprint with %PRIx64: no leading zeros (opkg's key file name)."""
    assert usign.fingerprint_name(bytes.fromhex("000a0b0c0d0e0f10")) == "a0b0c0d0e0f10"
    assert usign.fingerprint_name(bytes.fromhex("6c3948cea8b9943a")) == "6c3948cea8b9943a"


def pub(sec: Path) -> Path:
    return sec.with_suffix(".pub")


@pytest.fixture()
def key(tmp_path) -> Path:
    """A throw-away key pair made by signify (usign's format), in tmp_path: test.sec and test.pub."""
    if not SIGNIFY:
        pytest.skip("no signify (apt-get install signify-openbsd)")
    sec = tmp_path / "keys" / "test.sec"
    sec.parent.mkdir()
    run([SIGNIFY, "-G", "-n", "-c", "needle test key", "-s", sec, "-p", pub(sec)])
    return sec


@needs_signify
def test_signed_feed_verifies_with_signify(key, tmp_path):
    board = boards.load("router-mt7621")
    out = tmp_path / "out" / "feed"
    feed.write_feed(board, str(stand_in("router-mt7621", tmp_path)), str(out), str(key))
    check_feed(out)
    proc = run([SIGNIFY, "-V", "-p", pub(key), "-m", out / "Packages", "-x", out / "Packages.sig"])
    assert proc.stdout.strip() == "Signature Verified"
    # the public key beside the feed: signify's own, under the name opkg looks it up by
    pub_blob = base64.b64decode(Path(pub(key)).read_text().splitlines()[1])
    name = format(int.from_bytes(pub_blob[2:10], "big"), "x")
    [written] = list((tmp_path / "out" / feed.KEYS_DIR).iterdir())
    assert written.name == name
    assert written.read_text().splitlines()[1] == Path(pub(key)).read_text().splitlines()[1]
    sig = (out / "Packages.sig").read_text().splitlines()
    assert sig[0] == f"untrusted comment: signed by key {name}" and len(sig) == 2
    # a changed index fails
    (out / "Packages").write_text((out / "Packages").read_text().replace("Size: ", "Size: 1"))
    proc = subprocess.run([SIGNIFY, "-V", "-q", "-p", pub(key), "-m", out / "Packages", "-x",
                           out / "Packages.sig"], capture_output=True, text=True)
    assert proc.returncode != 0
    # written again without a key: no stale signature stays
    feed.write_feed(board, str(stand_in("router-mt7621", tmp_path)), str(out))
    assert not (out / "Packages.sig").exists()


def feed_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator.build.feed", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True)


def damaged(key: Path, what: str) -> Path:
    lines = key.read_text().splitlines()
    blob = bytearray(base64.b64decode(lines[1]))
    if what == "passphrase":
        blob[4:8] = (42).to_bytes(4, "big")
    elif what == "flipped":
        blob[-40] ^= 1
    out = key.with_name(f"{what}.key")
    out.write_text(f"{lines[0]}\n{base64.b64encode(bytes(blob)).decode()}\n")
    return out


@needs_signify
@pytest.mark.parametrize("case, expect", [
    ("missing", "cannot read feed_key="),
    ("garbage", "its first line is not 'untrusted comment: ...'"),
    ("not-base64", "its second line is not base64"),
    ("public", "(a public key or a signature given instead?)"),
    ("passphrase", "is protected by a passphrase, which usign cannot read"),
    ("flipped", "its checksum does not match"),
    ("router", None),
])
def test_feed_refusals_write_nothing(case, expect, key, tmp_path):
    path = {"missing": tmp_path / "nope.key", "public": Path(pub(key))}.get(case, key)
    if case == "garbage":
        path = tmp_path / "garbage.key"
        path.write_text("hello\n")
    elif case == "not-base64":
        path = tmp_path / "b64.key"
        path.write_text("untrusted comment: x\n!!!!\n")
    elif case in ("passphrase", "flipped"):
        path = damaged(key, case)
    board = "rpi-zero" if case == "router" else "router-mt7621"
    out = tmp_path / "out" / "feed"
    proc = feed_cli("--board", board, "--binary", stand_in("router-mt7621", tmp_path), "-o", out, "--key", path)
    one_line_refusal(proc, expect or "board rpi-zero is not an OpenWrt board (no [package] openwrt_arch): "
                                      "an opkg feed is for router-")
    assert "usign -G" in proc.stderr or case == "router"
    assert not (tmp_path / "out").exists()


# ---- scons package=feed, refused ----------------------------------------------------

@pytest.mark.parametrize("args, expect", [
    (["board=rpi-zero", "package=feed"], "board rpi-zero is not an OpenWrt board (no [package] openwrt_arch): "
                                         "package=feed is for the router-* boards"),
    (["board=host", "package=feed"], "board host is not an OpenWrt board"),
    (["board=router-mt7621", "package=feed", "feed_key=/nonexistent/key"], "cannot read feed_key=/nonexistent/key"),
    (["board=router-mt7621", "package=feed", "feed_key=LICENSE"], "LICENSE is not a usign secret key"),
    (["board=router-mt7621", "package=ipk", "feed_key=LICENSE"], "feed_key= signs an opkg feed: add package=feed"),
])
def test_scons_refuses_in_one_line_before_building(args, expect, tmp_path):
    build = tmp_path / "build"
    proc = scons(*args, f"build={build}", check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("scons: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert expect in proc.stderr
    assert not build.exists()


@needs_signify
def test_scons_writes_a_signed_feed(key, tmp_path):
    board = boards.load("router-mt7621")
    missing = boards.missing_tools(board)
    if missing:
        pytest.skip(missing)
    build = tmp_path / "build"
    scons("board=router-mt7621", "package=feed", f"feed_key={key}", f"build={build}")
    [stanza] = check_feed(build / "feed")
    assert stanza["Architecture"] == "mipsel_24kc"
    run([SIGNIFY, "-V", "-p", pub(key), "-m", build / "feed" / "Packages"])
    # the package holds the stripped link that passed the post-link check
    with tarfile.open(build / "feed" / stanza["Filename"], "r:gz") as outer:
        data = outer.extractfile("./data.tar.gz").read()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as inner:
        assert inner.extractfile("./usr/bin/needle").read() == (build / "needle.stripped").read_bytes()
    # up to date: nothing is rebuilt
    again = scons("board=router-mt7621", "package=feed", f"feed_key={key}", f"build={build}").stdout
    assert "(signed) <-" not in again and "is up to date" in again
