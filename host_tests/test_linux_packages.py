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
from generator.build import boards, deb, feed, package, usign
from generator.errors import CactError
from host_tests import elf_stub
from host_tests.scons_run import scons
from host_tests.test_package import assert_unit_verifies

ROOT = Path(__file__).resolve().parent.parent
ROUTERS = [n for n in boards.names() if "package" in boards.load(n)]
PIS = [n for n in boards.names() if "deb" in boards.load(n)]
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


# ---- scons package=feed and package=deb, refused ----------------------------------------------------

@pytest.mark.parametrize("args, expect", [
    (["board=rpi-zero", "package=feed"], "board rpi-zero is not an OpenWrt board (no [package] openwrt_arch): "
                                         "package=feed is for the router-* boards"),
    (["board=host", "package=feed"], "board host is not an OpenWrt board"),
    (["board=router-mt7621", "package=feed", "feed_key=/nonexistent/key"], "cannot read feed_key=/nonexistent/key"),
    (["board=router-mt7621", "package=feed", "feed_key=LICENSE"], "LICENSE is not a usign secret key"),
    (["board=router-mt7621", "package=ipk", "feed_key=LICENSE"], "feed_key= signs an opkg feed: add package=feed"),
    (["board=router-mt7621", "package=deb"], "board router-mt7621 is an OpenWrt router (package=ipk or "
                                             "package=feed): package=deb is for riscv64-k1, rpi-zero, rpi-zero2, rpi5"),
    (["board=watch-m4", "package=deb"], "board watch-m4 is bare metal (os = none): package=deb is for riscv64-k1"),
    (["board=host", "package=deb"], "board host is not a Debian board (no [deb] architecture): package=deb is for"),
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


# ---- the Debian packages ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def debs(tmp_path_factory) -> dict[str, Path]:
    """scons board=<pi> package=deb for each Raspberry Pi board: {board: its build dir}."""
    if not shutil.which("dpkg-deb"):
        pytest.skip("no dpkg-deb")
    root = tmp_path_factory.mktemp("debs")
    out = {}
    for name in PIS:
        missing = boards.missing_tools(boards.load(name))
        if missing:
            pytest.skip(missing)
        scons(f"board={name}", "package=deb", f"build={root / name}")
        out[name] = root / name
    return out


def deb_of(debs, name) -> Path:
    return debs[name] / deb.deb_name(boards.load(name))


def test_pi_boards_and_their_architectures():
    assert {n: boards.load(n)["deb"]["architecture"] for n in PIS} == {
        "rpi-zero": "armhf", "rpi-zero2": "arm64", "rpi5": "arm64", "riscv64-k1": "riscv64"}


@pytest.mark.parametrize("name", PIS)
def test_deb_contents(name, debs, tmp_path):
    board = boards.load(name)
    path = deb_of(debs, name)
    assert path.name == f"needle-{name}_{__version__}-1_{board['deb']['architecture']}.deb"
    fields = dict(line.split(": ", 1) for line in run(["dpkg-deb", "-f", path]).stdout.splitlines()
                  if not line.startswith(" "))
    assert {k: fields[k] for k in ("Package", "Version", "Architecture", "Provides", "Conflicts", "Replaces",
                                   "Section", "Priority")} == {
        "Package": f"needle-{name}", "Version": f"{__version__}-1", "Architecture": board["deb"]["architecture"],
        "Provides": "needle", "Conflicts": "needle", "Replaces": "needle", "Section": "utils",
        "Priority": "optional"}
    assert "Depends" not in fields                      # static: nothing from the system
    listing = run(["sh", "-c", 'dpkg-deb --fsys-tarfile "$1" | tar --numeric-owner -tvf -', "sh", path]
                  ).stdout.splitlines()
    entries = {}
    for line in listing:
        perms, owner, _size, day, _time, entry = line.split(maxsplit=5)
        assert owner == "0/0" and day == "2026-12-06", line    # root; CHANGELOG.md's date of the version
        entries[entry] = perms
    assert {e: p for e, p in entries.items() if not e.endswith("/")} == {
        "./usr/bin/needle": "-rwxr-xr-x", "./usr/share/needle/model.cact": "-rw-r--r--",
        "./lib/systemd/system/needle.service": "-rw-r--r--", "./etc/default/needle": "-rw-r--r--",
        "./usr/share/man/man1/needle.1.gz": "-rw-r--r--",
        f"./usr/share/doc/needle-{name}/copyright": "-rw-r--r--",
        f"./usr/share/doc/needle-{name}/changelog.Debian.gz": "-rw-r--r--",
        f"./usr/share/lintian/overrides/needle-{name}": "-rw-r--r--"}
    assert all(p == "drwxr-xr-x" for e, p in entries.items() if e.endswith("/"))
    x = tmp_path / "x"
    run(["dpkg-deb", "-R", path, x])
    assert (x / "usr/bin/needle").read_bytes() == (debs[name] / "needle.stripped").read_bytes()
    assert (x / "usr/share/needle/model.cact").read_bytes() == DEMO.read_bytes()
    unit = (x / "lib/systemd/system/needle.service").read_text()
    assert unit == package.systemd_unit(board, "/usr/bin/needle", "/usr/share/needle/model.cact", "/etc/default/needle")
    assert "\nExecStart=/usr/bin/needle --serve --socket /run/needle/needle.sock $NEEDLE_OPTS\n" in unit
    assert "\nEnvironmentFile=-/etc/default/needle\n" in unit
    assert (x / "DEBIAN/conffiles").read_text() == "/etc/default/needle\n"
    assert re.search(r'^NEEDLE_OPTS=""$', (x / "etc/default/needle").read_text(), re.M)
    for script in ("postinst", "prerm", "postrm"):
        run(["sh", "-n", x / "DEBIAN" / script])
        assert (x / "DEBIAN" / script).stat().st_mode & 0o777 == 0o755
    md5 = dict(reversed(line.split("  ", 1)) for line in (x / "DEBIAN/md5sums").read_text().splitlines())
    assert md5 == {p: hashlib.md5((x / p).read_bytes()).hexdigest() for p in md5}
    assert len(md5) == 8
    changelog = gzip.decompress((x / f"usr/share/doc/needle-{name}/changelog.Debian.gz").read_bytes()).decode()
    assert changelog.startswith(f"needle-{name} ({__version__}-1) stable; urgency=medium\n")
    assert re.search(r"^ -- .+ <.+@.+>  Sun, 06 Dec 2026 00:00:00 \+0000$", changelog, re.M)
    copyright_ = (x / f"usr/share/doc/needle-{name}/copyright").read_text()
    assert copyright_.startswith("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n")
    assert "\nLicense: MIT\n Permission is hereby granted" in copyright_


def test_deb_is_reproducible(debs, tmp_path, monkeypatch):
    board, built = boards.load("rpi-zero"), debs["rpi-zero"]
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    again = Path(deb.write_deb(board, str(built / "needle.stripped"), str(DEMO), str(tmp_path / "a")))
    assert again.read_bytes() == deb_of(debs, "rpi-zero").read_bytes()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1800000000")
    one = Path(deb.write_deb(board, str(built / "needle.stripped"), str(DEMO), str(tmp_path / "b"))).read_bytes()
    two = Path(deb.write_deb(board, str(built / "needle.stripped"), str(DEMO), str(tmp_path / "c"))).read_bytes()
    assert one == two != again.read_bytes()
    assert "2027-01-15" in run(["dpkg-deb", "-c", tmp_path / "b" / again.name]).stdout
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [again.name]     # no staging left


@pytest.mark.skipif(not shutil.which("lintian"), reason="no lintian (apt-get install lintian)")
@pytest.mark.parametrize("name", PIS)
def test_lintian_finds_nothing_unexplained(name, debs):
    """No tag at all, pedantic and info included, but those the package overrides with a reason."""
    proc = subprocess.run(["lintian", "--pedantic", "--display-info", "--show-overrides", "--fail-on", "none",
                           deb_of(debs, name)], capture_output=True, text=True)
    tags = [line for line in proc.stdout.splitlines() if line and not line.startswith("N:")]
    assert proc.returncode == 0 and tags and all(t.startswith(f"O: needle-{name}: ") for t in tags), proc.stdout + proc.stderr
    assert f"O: needle-{name}: statically-linked-binary [usr/bin/needle]" in tags
    overrides = deb.lintian_overrides(boards.load(name))
    assert all(line.startswith("#") or line.startswith(f"needle-{name}: ") for line in overrides.splitlines())


def stub_bin(tmp_path: Path) -> tuple[Path, Path]:
    """deb-systemd-helper, deb-systemd-invoke and systemctl that log their arguments and
    DPKG_ROOT: the maintainer scripts run outside a chroot and must touch nothing of this machine."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for tool in ("deb-systemd-helper", "deb-systemd-invoke", "systemctl"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "{tool} $* [DPKG_ROOT=$DPKG_ROOT]" >> "{log}"\n')
        (bin_dir / tool).chmod(0o755)
    return bin_dir, log


def test_dpkg_installs_switches_and_purges_in_a_scratch_root(debs, tmp_path):
    """dpkg --root=DIR with --force-script-chrootless: the scratch root has no /bin/sh to
    chroot into, so the scripts run here with DPKG_ROOT=DIR (they start nothing then);
    --force-not-root only when the test is not root.  No --force-depends (nothing is
    depended on) and no --force-architecture: the root learns arm64 and armhf with
    --add-architecture, as a real system would."""
    root = tmp_path / "root"
    (root / "var/lib/dpkg/info").mkdir(parents=True)
    (root / "var/lib/dpkg/updates").mkdir()
    (root / "var/lib/dpkg/status").write_text("")
    bin_dir, log = stub_bin(tmp_path)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    force = ["--force-script-chrootless"] + ([] if os.geteuid() == 0 else ["--force-not-root"])
    dpkg = ["dpkg", f"--root={root}", "--log=/dev/null", *force]
    for arch in ("arm64", "armhf"):
        run(["dpkg", f"--root={root}", "--add-architecture", arch])
    run(dpkg + ["-i", deb_of(debs, "rpi5")], env=env)
    assert (root / "usr/bin/needle").read_bytes() == (debs["rpi5"] / "needle.stripped").read_bytes()
    assert (root / "lib/systemd/system/needle.service").is_file()
    status = (root / "var/lib/dpkg/status").read_text()
    assert "Package: needle-rpi5\nStatus: install ok installed\n" in status
    assert re.search(r"^Conffiles:\n /etc/default/needle [0-9a-f]{32}$", status, re.M)
    calls = log.read_text().splitlines()
    assert calls == [f"deb-systemd-helper unmask needle.service [DPKG_ROOT={root}]",
                     f"deb-systemd-helper --quiet was-enabled needle.service [DPKG_ROOT={root}]",
                     f"deb-systemd-helper enable needle.service [DPKG_ROOT={root}]"]
    # the other arm64 board's package is an alternative, not a second copy
    proc = subprocess.run(dpkg + ["-i", deb_of(debs, "rpi-zero2")], env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "conflicting packages - not installing needle-rpi-zero2" in proc.stderr
    log.write_text("")
    run(dpkg + ["--purge", "needle-rpi5"], env=env)
    assert not (root / "usr/bin/needle").exists() and not (root / "etc/default/needle").exists()
    assert log.read_text().splitlines() == [f"deb-systemd-helper mask needle.service [DPKG_ROOT={root}]",
                                            f"deb-systemd-helper purge needle.service [DPKG_ROOT={root}]",
                                            f"deb-systemd-helper unmask needle.service [DPKG_ROOT={root}]"]
    run(dpkg + ["-i", deb_of(debs, "rpi-zero2")], env=env)
    assert (root / "usr/bin/needle").read_bytes() == (debs["rpi-zero2"] / "needle.stripped").read_bytes()


def test_deb_unit_verifies(tmp_path):
    unit = package.systemd_unit(boards.load("rpi5"), "/usr/bin/needle", deb.ARCHIVE, deb.DEFAULTS)
    assert_unit_verifies(unit, "/usr/bin/needle", tmp_path, "--man=no")


@pytest.mark.parametrize("board_name, expect", [
    ("router-ath79", "board router-ath79 is an OpenWrt router (package=ipk or package=feed): package=deb is for"),
    ("watch-m55", "board watch-m55 is bare metal (os = none): package=deb is for"),
    ("host", "board host is not a Debian board (no [deb] architecture)"),
])
def test_deb_cli_refusals(board_name, expect, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "generator.build.deb", "--board", board_name, "--binary",
                           DEMO, "--archive", DEMO, "-o", tmp_path / "o"], cwd=ROOT, capture_output=True, text=True)
    one_line_refusal(proc, expect)
    assert not (tmp_path / "o").exists()
    with pytest.raises(CactError, match="package=deb is for riscv64-k1, rpi-zero, rpi-zero2, rpi5"):
        deb.deb_name(boards.load(board_name))


# ---- the release tarball and the OpenWrt SDK Makefile -----------------------------------------------

def makefile_vars(text: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Z_]+):=(.*)$", text, re.M))


@pytest.fixture(scope="module")
def dist_dir(tmp_path_factory) -> Path:
    """scons dist build=DIR: DIR/dist."""
    build = tmp_path_factory.mktemp("dist")
    scons("dist", f"build={build}")
    return build / "dist"


def test_tarball_contents(dist_dir):
    tarball = dist_dir / f"needle-fw-{__version__}.tar.gz"
    top = f"needle-fw-{__version__}/"
    lines = run(["tar", "--numeric-owner", "--full-time", "-tzvf", tarball]).stdout.splitlines()
    names = []
    for line in lines:
        perms, owner, _size, day, clock, name = line.split(maxsplit=5)
        assert owner == "0/0" and (day, clock) == ("1970-01-01", "00:00:00"), line
        assert perms in ("drwxr-xr-x", "-rw-r--r--", "-rwxr-xr-x"), line
        names.append(name)
    assert names[0] == top and all(n.startswith(top) for n in names)
    # sorted as `tar --sort=name` lists a tree: each directory, then what it holds, by name
    assert names == sorted(names, key=lambda n: n.rstrip("/").split("/"))
    files = {n[len(top):] for n in names if not n.endswith("/")}
    for path in ("SConstruct", "LICENSE", "pyproject.toml", "requirements.txt", "requirements-routers.txt",
                 "demo/needle2-demo.cact", "generator/__init__.py", "generator/build/dist.py",
                 "templates/openwrt/Makefile.j2", "templates/package/needle.init", "boards/router-mt7621.toml",
                 "site_scons/site_tools/needle.py", "site_scons/needle_build/options.py", "firmware/cli/main.c"):
        assert path in files, path
    assert not any("__pycache__" in f or f.endswith(".pyc") or f.startswith(("build/", ".venv/", "host_tests/",
                                                                              "train/", "docs/")) for f in files)
    with tarfile.open(tarball, "r:gz") as tar:
        for f in ("SConstruct", "generator/build/deb.py", "demo/needle2-demo.cact"):
            assert tar.extractfile(top + f).read() == (ROOT / f).read_bytes()
    assert gzip.open(tarball).read(1) and tarball.read_bytes()[4:8] == b"\0\0\0\0"    # gzip mtime 0


def test_tarball_is_reproducible(dist_dir, tmp_path, monkeypatch):
    from generator.build import dist
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    again = Path(dist.write_dist(str(tmp_path / "again"))[0])
    assert again.read_bytes() == (dist_dir / again.name).read_bytes()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1800000000")
    dated = dist.tarball_bytes()
    assert dated == dist.tarball_bytes() != again.read_bytes()
    with tarfile.open(fileobj=io.BytesIO(dated), mode="r:gz") as tar:
        assert {m.mtime for m in tar} == {1800000000} and {(m.uid, m.gid) for m in tar} == {(0, 0)}


def test_makefile_names_the_tarball(dist_dir):
    text = (dist_dir / "openwrt" / "needle" / "Makefile").read_text()
    v = makefile_vars(text)
    tarball = dist_dir / f"needle-fw-{__version__}.tar.gz"
    assert v["PKG_NAME"] == "needle" and v["PKG_VERSION"] == __version__
    assert v["PKG_RELEASE"] == str(package.RELEASE)
    assert v["PKG_SOURCE"] == "needle-fw-$(PKG_VERSION).tar.gz"
    assert v["PKG_HASH"] == hashlib.sha256(tarball.read_bytes()).hexdigest()
    assert v["PKG_BUILD_DIR"] == "$(BUILD_DIR)/needle-fw-$(PKG_VERSION)" and v["PKG_LICENSE"] == "MIT"
    lines = text.splitlines()
    code = [line for line in lines if line and not line.startswith("#")]
    assert code[0] == "include $(TOPDIR)/rules.mk" and "include $(INCLUDE_DIR)/package.mk" in code
    assert code[-1] == "$(eval $(call BuildPackage,needle))"
    for block in ("Package/needle", "Package/needle/description", "Package/needle/conffiles", "Build/Compile",
                  "Package/needle/install"):
        assert f"define {block}" in code, block
    assert "define Package/needle/conffiles\n/etc/config/needle\nendef" in text
    assert "$(TARGET_CC_NOCACHE)" in text and "-m SCons" in text
    # recipe lines start with a tab, as make wants
    compile_ = text.split("define Build/Compile\n")[1].split("endef")[0]
    assert all(line.startswith("\t") for line in compile_.splitlines())


@pytest.mark.skipif(not shutil.which("make"), reason="no make")
def test_makefile_expands_against_a_stub_sdk(dist_dir, tmp_path):
    """No OpenWrt SDK here: stand-ins for rules.mk and package.mk (BuildPackage makes targets
    `compile` and `install` of Build/Compile and Package/needle/install) and `make -n` show the
    Makefile parses and what its recipes run."""
    (tmp_path / "include").mkdir()
    (tmp_path / "rules.mk").write_text("INSTALL_DIR:=install -d -m0755\nINSTALL_BIN:=install -m0755\n"
                                       "INSTALL_CONF:=install -m0600\n")
    (tmp_path / "include" / "package.mk").write_text(
        "define BuildPackage\ncompile:\n\t$$(call Build/Compile)\ninstall:\n"
        "\t$$(call Package/$(1)/install,/ipkg)\nendef\n")
    proc = run(["make", "-n", "-f", dist_dir / "openwrt" / "needle" / "Makefile", f"TOPDIR={tmp_path}",
                f"INCLUDE_DIR={tmp_path / 'include'}", "BUILD_DIR=/b", "ARCH_PACKAGES=mipsel_24kc",
                "TOOLCHAIN_DIR=/tc", "TARGET_CC_NOCACHE=mipsel-openwrt-linux-musl-gcc",
                "TARGET_CFLAGS=-Os -pipe -mips32r2", "compile", "install"])
    b = f"/b/needle-fw-{__version__}"
    assert proc.stdout.splitlines() == [
        f'cd {b} && python3 -m generator.build.openwrt_sdk --arch-packages "mipsel_24kc" '
        f'--cc "/tc/bin/mipsel-openwrt-linux-musl-gcc" --cflags "-Os -pipe -mips32r2" -o boards/openwrt-sdk.toml',
        f'cd {b} && python3 -m SCons -Q board=openwrt-sdk archive="demo/needle2-demo.cact" build=build/openwrt-sdk',
        "install -d -m0755 /ipkg/usr/bin /ipkg/etc/init.d /ipkg/etc/config",
        f"install -m0755 {b}/build/openwrt-sdk/needle /ipkg/usr/bin/needle",
        f"install -m0755 {b}/templates/package/needle.init /ipkg/etc/init.d/needle",
        f"install -m0600 {b}/templates/package/needle.config /ipkg/etc/config/needle"]


@pytest.mark.parametrize("router", ROUTERS)
def test_sdk_board_file_is_the_router_with_the_sdks_gcc(router, tmp_path, monkeypatch):
    from generator.build import openwrt_sdk
    board = boards.load(router)
    arch = board["package"]["openwrt_arch"]
    cross = {"mipsel_24kc": "mipsel-openwrt-linux-musl-", "mips_24kc": "mips-openwrt-linux-musl-",
             "arm_cortex-a7_neon-vfpv4": "arm-openwrt-linux-muslgnueabi-"}[arch]
    text = openwrt_sdk.board_toml(arch, f"/sdk/bin/{cross}gcc", "-Os -pipe -mips32r2 -O2")
    copy = tmp_path / "boards"
    shutil.copytree(ROOT / "boards", copy)
    (copy / "openwrt-sdk.toml").write_text(text)
    monkeypatch.setattr(boards, "BOARDS_DIR", copy)
    sdk = boards.load("openwrt-sdk")
    assert sdk["toolchain"] == "gnu" and sdk["toolchain_prefix"] == f"/sdk/bin/{cross}"
    assert sdk["arch_flags"] == ["-pipe", "-mips32r2"]            # the engine's -O2 stays
    assert boards.compiler(sdk) == f"/sdk/bin/{cross}gcc" and boards.board_arch(sdk) == boards.board_arch(board)
    changed = {"name", "description", "toolchain", "toolchain_prefix", "toolchain_package", "arch_flags", "zig_target"}
    assert {k: v for k, v in sdk.items() if k not in changed} == {k: v for k, v in board.items() if k not in changed}
    with pytest.raises(CactError, match=r"no needle-fw board for the OpenWrt package architecture 'x86_64'"):
        openwrt_sdk.board_toml("x86_64", "/sdk/bin/x-gcc", "")
    with pytest.raises(CactError, match="not a ccache wrapper"):
        openwrt_sdk.board_toml(arch, "ccache_cc", "")


def test_tarball_builds_a_router_engine(dist_dir, tmp_path):
    """The tarball holds what generating and building need: a router engine builds from it
    alone (no git, no tests, no docs)."""
    board = boards.load("router-mt7621")
    missing = boards.missing_tools(board)
    if missing:
        pytest.skip(missing)
    run(["tar", "-xzf", dist_dir / f"needle-fw-{__version__}.tar.gz", "-C", tmp_path])
    tree = tmp_path / f"needle-fw-{__version__}"
    scons("board=router-mt7621", f"build={tmp_path / 'b'}", cwd=tree)
    assert (tmp_path / "b" / "needle").is_file() and (tmp_path / "b" / "memory.txt").is_file()
