"""The OpenWrt package (generator/build/package.py) and the service files (templates/package/).

Every router board (a board file with [package]) gets a package of a stand-in binary, which is
taken apart with the system's tools (`tar`, binutils `ar`) and checked member by member:
container, control fields, conffiles, modes, owners, file list, determinism, shell syntax.
The init script and the maintainer scripts also run, against stubs of OpenWrt's shell API
(config_get, procd_*, rc.common): no OpenWrt is here, so that is emulation, and so is the
end-to-end test, which builds the real router binary, packages it, takes it out of the
package again and runs it under qemu-user.  When an `opkg` executable is found (OPKG=PATH or
`opkg-cl` / `opkg` on PATH) the package is also installed and removed with it, offline.
"""

from __future__ import annotations

import gzip
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
from generator.build import boards, package
from generator.errors import CactError
from host_tests import elf_stub

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "templates" / "package"
ROUTERS = [n for n in boards.names() if "package" in boards.load(n)]
STAND_IN = bytes((i * 37 + 11) % 251 for i in range(4097))    # odd size: ar pads it (ipk_bytes takes any bytes)
DATA_LIST = [("./", "d", 0o755), ("./etc/", "d", 0o755), ("./etc/config/", "d", 0o755),
             ("./etc/config/needle", "f", 0o644), ("./etc/init.d/", "d", 0o755),
             ("./etc/init.d/needle", "f", 0o755), ("./usr/", "d", 0o755), ("./usr/bin/", "d", 0o755),
             ("./usr/bin/needle", "f", 0o755)]
CONTROL_LIST = [("./", "d", 0o755), ("./conffiles", "f", 0o644), ("./control", "f", 0o644),
                ("./postinst", "f", 0o755), ("./prerm", "f", 0o755)]
CONTROL_FIELDS = ["Package", "Version", "Source", "SourceName", "License", "Section", "Maintainer",
                  "Architecture", "Installed-Size", "Description"]


def test_there_are_router_boards():
    assert {"router-mt7621", "router-ath79", "router-ipq40xx"} <= set(ROUTERS)


def stand_in_for(board_name: str, tmp_path: Path) -> Path:
    """A small ELF with the identity of the board's engine (write_ipk checks it; odd size)."""
    path = tmp_path / f"needle-{board_name}"
    path.write_bytes(elf_stub.for_board(boards.load(board_name)))
    return path


@pytest.fixture()
def stand_in(request, tmp_path) -> Path:
    """The stand-in for the test's board_name parameter (router-mt7621 without one)."""
    params = getattr(request.node, "callspec", None)
    name = params.params.get("board_name", "router-mt7621") if params else "router-mt7621"
    return stand_in_for(name if "package" in boards.load(name) else "router-mt7621", tmp_path)


def run(cmd, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}: {proc.stderr}"
    return proc


def unpack(ipk: Path, dest: Path, container: str) -> Path:
    """Take the package apart with the system's tools: dest/{debian-binary,control/,data/}."""
    dest.mkdir()
    if container == "ar":
        run(["ar", "x", ipk], cwd=dest)
    else:
        run(["tar", "-xzf", ipk, "-C", dest])
    for part in ("control", "data"):
        (dest / part).mkdir()
        run(["tar", "-xzf", dest / f"{part}.tar.gz", "-C", dest / part])
    return dest


def listing(tar_gz: Path) -> list[tuple[str, str, int]]:
    """(name, d/f, mode) of each entry, in order, as the system's `tar -tzv` shows them."""
    out = []
    for line in run(["tar", "--numeric-owner", "-tzvf", tar_gz]).stdout.splitlines():
        perms, owner, _size, _date, _time, name = line.split(maxsplit=5)
        assert owner == "0/0", line
        mode = sum(1 << (8 - i) for i, c in enumerate(perms[1:10]) if c != "-")
        out.append((name, {"d": "d", "-": "f"}.get(perms[0], "?"), mode))
    return out


def owners(tar_gz: bytes) -> set[tuple[int, int, str, str, int]]:
    with tarfile.open(fileobj=io.BytesIO(tar_gz), mode="r:gz") as tar:
        return {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in tar}


def control_fields(text: str) -> list[tuple[str, str]]:
    out = []
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        assert sep and not line.startswith(" "), f"control line {line!r} is not 'Field: value'"
        out.append((key, value))
    return out


# ---- the package, member by member --------------------------------------------------------

@pytest.mark.parametrize("board_name", ROUTERS)
def test_ipk_structure(board_name, stand_in, tmp_path):
    board = boards.load(board_name)
    arch = board["package"]["openwrt_arch"]
    ipk = Path(package.write_ipk(board, str(stand_in), str(tmp_path / "out")))
    assert ipk.name == f"needle_{__version__}-1_{arch}.ipk" == package.package_name(board)
    assert sorted(p.name for p in ipk.parent.iterdir()) == [ipk.name]      # no temporary left

    # the container: a gzip'd tar of ./debian-binary ./data.tar.gz ./control.tar.gz, in
    # ipkg-build's order, owned by root
    assert ipk.read_bytes()[:2] == b"\x1f\x8b"
    outer = run(["tar", "-tzvf", ipk]).stdout.splitlines()
    assert [line.split()[-1] for line in outer] == ["./debian-binary", "./data.tar.gz", "./control.tar.gz"]
    assert all(line.split()[1] == "root/root" and line.startswith("-rw-r--r--") for line in outer)

    d = unpack(ipk, tmp_path / "x", "tar.gz")
    assert (d / "debian-binary").read_bytes() == b"2.0\n"
    data_gz, control_gz = (d / "data.tar.gz").read_bytes(), (d / "control.tar.gz").read_bytes()

    # data.tar.gz: the file list, modes and owners, and each file's content
    assert listing(d / "data.tar.gz") == DATA_LIST
    assert owners(data_gz) == {(0, 0, "root", "root", 0)}
    verbose = run(["tar", "-tzvf", d / "data.tar.gz"]).stdout.splitlines()
    assert {line.split()[1] for line in verbose} == {"root/root"}
    assert (d / "data/usr/bin/needle").read_bytes() == stand_in.read_bytes()
    assert (d / "data/etc/init.d/needle").read_bytes() == (TEMPLATES / "needle.init").read_bytes()
    assert (d / "data/etc/config/needle").read_bytes() == (TEMPLATES / "needle.config").read_bytes()
    for path, mode in (("usr/bin/needle", 0o755), ("etc/init.d/needle", 0o755), ("etc/config/needle", 0o644)):
        assert (d / "data" / path).stat().st_mode & 0o777 == mode, path

    # control.tar.gz
    assert listing(d / "control.tar.gz") == CONTROL_LIST
    assert owners(control_gz) == {(0, 0, "root", "root", 0)}
    assert (d / "control/conffiles").read_text() == "/etc/config/needle\n"
    for script in (d / "control/postinst", d / "control/prerm", d / "data/etc/init.d/needle"):
        run(["sh", "-n", script])
    for script in ("postinst", "prerm"):
        assert (d / "control" / script).read_bytes() == (TEMPLATES / script).read_bytes()
        assert (d / "control" / script).stat().st_mode & 0o777 == 0o755

    # every control field, in OpenWrt's order
    fields = control_fields((d / "control/control").read_text())
    assert [k for k, _ in fields] == CONTROL_FIELDS
    f = dict(fields)
    data_files = sum(len((d / "data" / p).read_bytes()) for p, kind, _ in DATA_LIST if kind == "f")
    tar_bytes = len(gzip.decompress(data_gz))
    assert f == {
        "Package": "needle", "Version": f"{__version__}-1", "Source": "needle-fw",
        "SourceName": "needle-fw", "License": "MIT", "Section": "utils",
        "Maintainer": "the needle-fw authors", "Architecture": arch,
        # ipkg-build: `zcat data.tar.gz | wc -c`, so at least the bytes of the files
        "Installed-Size": str(tar_bytes),
        "Description": f["Description"],
    }
    assert tar_bytes >= data_files
    assert board["description"] in f["Description"] and "\n" not in f["Description"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


@pytest.mark.parametrize("board_name", ROUTERS)
def test_ar_container(board_name, stand_in, tmp_path):
    """container="ar": the classic ipkg / Debian layout, read with binutils ar; its members are
    the very bytes of the default container's."""
    board = boards.load(board_name)
    ipk = Path(package.write_ipk(board, str(stand_in), str(tmp_path / "ar"), container="ar"))
    assert ipk.read_bytes().startswith(b"!<arch>\n")
    assert run(["ar", "t", ipk]).stdout.split() == ["debian-binary", "control.tar.gz", "data.tar.gz"]
    verbose = run(["ar", "tv", ipk]).stdout.splitlines()
    assert all(line.split()[1] == "0/0" for line in verbose), verbose
    a = unpack(ipk, tmp_path / "xa", "ar")
    t = unpack(Path(package.write_ipk(board, str(stand_in), str(tmp_path / "tar"))), tmp_path / "xt", "tar.gz")
    for member in ("debian-binary", "control.tar.gz", "data.tar.gz"):
        assert (a / member).read_bytes() == (t / member).read_bytes(), member
    assert (a / "debian-binary").read_bytes() == b"2.0\n"


def test_ar_writer_format():
    """The 60-byte headers and the even padding, field by field."""
    blob = package.ar_archive([("a", b"xyz"), ("bb", b"12")], mtime=7)
    assert blob[:8] == b"!<arch>\n"
    h1 = blob[8:68]
    assert (h1[0:16], h1[16:28], h1[28:34], h1[34:40], h1[40:48], h1[48:58], h1[58:60]) == \
        (b"a/" + b" " * 14, b"7" + b" " * 11, b"0" + b" " * 5, b"0" + b" " * 5, b"100644  ", b"3" + b" " * 9, b"`\n")
    assert blob[68:72] == b"xyz\n"                  # odd size: one '\n' of padding
    assert blob[72:88] == b"bb/" + b" " * 13 and blob[132:134] == b"12" and len(blob) == 134
    with pytest.raises(CactError, match="at most 15 characters"):
        package.ar_archive([("a-very-long-member-name", b"")])


@pytest.mark.parametrize("container", package.CONTAINERS)
def test_ipk_is_deterministic(container, tmp_path, monkeypatch):
    board = boards.load(ROUTERS[0])
    stand_in = stand_in_for(ROUTERS[0], tmp_path)
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    one = Path(package.write_ipk(board, str(stand_in), str(tmp_path / "one"), container=container)).read_bytes()
    two = Path(package.write_ipk(board, str(stand_in), str(tmp_path / "two"), container=container)).read_bytes()
    assert one == two
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    dated = package.ipk_bytes(board, STAND_IN, container=container)
    assert dated != one and dated == package.ipk_bytes(board, STAND_IN, container=container)
    if container == "tar.gz":
        with tarfile.open(fileobj=io.BytesIO(dated), mode="r:gz") as tar:
            assert {m.mtime for m in tar} == {1700000000}
            data = tar.extractfile("./data.tar.gz").read()
        assert {o[4] for o in owners(data)} == {1700000000}
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(CactError, match="SOURCE_DATE_EPOCH"):
        package.ipk_bytes(board, STAND_IN, container=container)


def test_version_and_name(stand_in, tmp_path):
    board = boards.load("router-mt7621")
    assert package.package_version() == f"{__version__}-1"
    assert package.package_name(board, "1.2.3-4") == "needle_1.2.3-4_mipsel_24kc.ipk"
    ipk = Path(package.write_ipk(board, str(stand_in), str(tmp_path), version="1.2.3-4"))
    with tarfile.open(ipk, "r:gz") as tar:
        control_gz = tar.extractfile("./control.tar.gz").read()
    with tarfile.open(fileobj=io.BytesIO(control_gz), mode="r:gz") as tar:
        assert "Version: 1.2.3-4\n" in tar.extractfile("./control").read().decode()
    for bad in ("1.2_3", "v1", "1 2", "", "1.0\nDepends: x"):
        with pytest.raises(CactError, match="not an opkg version"):
            package.package_name(board, bad)


# ---- refusals ---------------------------------------------------------------------------------

@pytest.mark.parametrize("board_name", ["rpi-zero", "host", "watch-m4"])
def test_refuses_a_board_without_package_table(board_name, stand_in, tmp_path):
    with pytest.raises(CactError) as exc:
        package.write_ipk(boards.load(board_name), str(stand_in), str(tmp_path / "out"))
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"board {board_name} is not an OpenWrt board (no [package] openwrt_arch): "
                          "package=ipk is for router-")
    assert all(r in msg for r in ROUTERS)
    assert not (tmp_path / "out").exists()


def cli(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator.build.package", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True)


def test_cli_writes_and_prints_the_path(tmp_path):
    stand_in = stand_in_for("router-ath79", tmp_path)
    proc = cli("--board", "router-ath79", "--binary", stand_in, "-o", tmp_path / "o")
    assert proc.returncode == 0 and proc.stderr == ""
    path = Path(proc.stdout.strip())
    assert path == tmp_path / "o" / f"needle_{__version__}-1_mips_24kc.ipk" and path.is_file()
    proc = cli("--board", "router-ath79", "--binary", stand_in, "-o", tmp_path / "a", "--container", "ar")
    assert proc.returncode == 0 and Path(proc.stdout.strip()).read_bytes()[:8] == b"!<arch>\n"


@pytest.mark.parametrize("args, expect", [
    (["--board", "rpi-zero", "--binary", "BIN"], "board rpi-zero is not an OpenWrt board"),
    (["--board", "no-such-board", "--binary", "BIN"], "unknown board 'no-such-board'"),
    (["--board", "router-mt7621", "--binary", "BIN", "--version", "1_0"], "is not an opkg version"),
    (["--board", "router-mt7621", "--binary", "BIN", "--container", "zip"], "invalid choice"),
    (["--board", "router-mt7621", "--binary", "/nonexistent/needle"], "cannot read the binary /nonexistent/needle"),
    (["--board", "router-mt7621", "--binary", "BIN", "--bogus"], "unrecognized arguments: --bogus"),
    (["--board", "rpi-zero", "--systemd", "--version", "1"], "go with --binary (the .ipk), not --systemd"),
    (["--board", "router-mt7621", "--systemd", "--binary", "BIN"], "not allowed with argument"),
    (["--board", "router-mt7621"], "one of the arguments --binary --systemd is required"),
])
def test_cli_errors_are_one_line(args, expect, stand_in, tmp_path):
    out = tmp_path / "out"
    proc = cli(*[str(stand_in) if a == "BIN" else a for a in args], "-o", out)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert expect in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists() or list(out.iterdir()) == []          # nothing, not even a part


def test_cli_leaves_no_partial_file_when_the_write_fails(stand_in, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / package.package_name(boards.load("router-mt7621"))).mkdir()   # rename onto a directory fails
    proc = cli("--board", "router-mt7621", "--binary", stand_in, "-o", out)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "cannot write" in proc.stderr
    assert [p.name for p in out.iterdir()] == [package.package_name(boards.load("router-mt7621"))]


def test_cli_refuses_an_empty_binary(tmp_path):
    empty = tmp_path / "needle"
    empty.write_bytes(b"")
    proc = cli("--board", "router-mt7621", "--binary", empty, "-o", tmp_path / "o")
    assert proc.returncode == 2 and "is empty" in proc.stderr


# ---- the scripts --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["needle.init", "postinst", "prerm"])
def test_scripts_parse(name):
    run(["sh", "-n", TEMPLATES / name])
    text = (TEMPLATES / name).read_text()
    assert text.startswith("#!/bin/sh /etc/rc.common\n" if name == "needle.init" else "#!/bin/sh\n")


# Stubs of OpenWrt's shell API, enough to run start_service and service_triggers: UCI values
# come from UCI_<option> variables (unset: the option is absent), every procd call is logged.
STUBS = r'''
LOG="$1"; INIT="$2"
config_load() { echo "config_load $*" >> "$LOG"; }
config_get() {
	eval "_set=\${UCI_$3+x}; _val=\${UCI_$3-}"
	[ -n "$_set" ] || _val="$4"
	eval "$1=\$_val"
}
config_get_bool() {
	config_get "$1" "$2" "$3" "$4"
	eval "_v=\$$1"
	case "$_v" in 1|on|true|yes|enabled) _v=1;; 0|off|false|no|disabled) _v=0;; *) _v="$4";; esac
	eval "$1=\$_v"
}
_log() { _l="$1"; shift; for a in "$@"; do _l="$_l|$a"; done; echo "$_l" >> "$LOG"; }
logger() { _log logger "$@"; }
procd_open_instance() { _log open "$@"; }
procd_set_param() { _log set "$@"; }
procd_append_param() { _log append "$@"; }
procd_close_instance() { _log close "$@"; }
procd_add_reload_trigger() { _log reload_trigger "$@"; }
procd_add_restart_mount_trigger() { _log mount_trigger "$@"; }
. "$INIT"
'''


def run_init(tmp_path, function: str, **uci) -> list[str]:
    log = tmp_path / "procd.log"
    log.write_text("")
    harness = tmp_path / "harness.sh"
    harness.write_text(STUBS + f"{function}\n")
    env = {"PATH": os.environ["PATH"], **{f"UCI_{k}": str(v) for k, v in uci.items()}}
    proc = subprocess.run(["sh", harness, log, TEMPLATES / "needle.init"], env=env,
                          capture_output=True, text=True)
    assert proc.stderr == "", proc.stderr          # no shell error (a refusal returns 1: fine)
    return [line for line in log.read_text().splitlines() if not line.startswith("config_load")]


def test_init_starts_the_engine_with_the_uci_settings(tmp_path):
    archive = tmp_path / "model.cact"
    archive.write_bytes(b"x")
    assert run_init(tmp_path, "start_service", archive=archive) == [
        "open",
        f"set|command|/usr/bin/needle|--serve|--socket|/var/run/needle.sock|--archive|{archive}",
        "set|respawn", "set|stdout|1", "set|stderr|1", "set|file|/etc/config/needle", "close"]
    tools = tmp_path / "my tools.json"               # a space: every value is one argument
    tools.write_text("[]")
    sock = tmp_path / "run" / "n.sock"
    log = run_init(tmp_path, "start_service", enabled="yes", archive=archive, tools=tools, socket=sock, max_new=48,
                   threads=2)
    assert log[1:5] == [f"set|command|/usr/bin/needle|--serve|--socket|{sock}|--archive|{archive}",
                        f"append|command|--tools|{tools}", "append|command|--max-new|48", "append|command|--threads|2"]
    assert sock.parent.is_dir()                      # the socket's directory is made


@pytest.mark.parametrize("uci, why", [
    ({}, "no archive configured"),
    ({"archive": ""}, "no archive configured"),
    ({"archive": "/nonexistent/model.cact"}, "archive /nonexistent/model.cact is missing"),
    ({"archive": "ARCHIVE", "tools": "/nonexistent/tools.json"}, "tools file /nonexistent/tools.json is missing"),
    ({"archive": "ARCHIVE", "enabled": "0"}, "needle.main.enabled is 0"),
])
def test_init_refuses_to_start_with_a_log_line(uci, why, tmp_path):
    archive = tmp_path / "model.cact"
    archive.write_bytes(b"x")
    uci = {k: (archive if v == "ARCHIVE" else v) for k, v in uci.items()}
    log = run_init(tmp_path, "start_service", **uci)
    assert len(log) == 1 and log[0].startswith("logger|-t|needle|-p|daemon.") and why in log[0], log


def test_init_triggers(tmp_path):
    assert run_init(tmp_path, "service_triggers", archive="/mnt/sda1/needle/model.cact") == [
        "reload_trigger|needle", "mount_trigger|/mnt/sda1/needle/model.cact"]
    assert run_init(tmp_path, "service_triggers") == ["reload_trigger|needle"]


def test_uci_config_matches_the_init_script():
    """/etc/config/needle is valid UCI, section needle.main, and documents every option the
    init script reads, with the same defaults."""
    config = (TEMPLATES / "needle.config").read_text()
    init = (TEMPLATES / "needle.init").read_text()
    sections, options = [], {}
    for line in config.splitlines():
        s = line.strip()
        if not s or (s.startswith("#") and not s.startswith("#option")):
            continue
        if m := re.fullmatch(r"config (\w+) '(\w+)'", s):
            sections.append(m.groups())
        elif m := re.fullmatch(r"(#?)option (\w+) '([^']*)'", s):
            options[m.group(2)] = (m.group(3), m.group(1) == "#")
        else:
            raise AssertionError(f"not a UCI line: {line!r}")
    assert sections == [("needle", "main")]
    read = dict(re.findall(r"config_get(?:_bool)? \w+ main (\w+)(?: (\S+))?", init))
    assert set(read) == set(options) == {"enabled", "archive", "tools", "socket", "max_new", "threads"}
    assert options["socket"] == (read["socket"], True)          # commented default = the script's
    assert options["enabled"] == ("1", False) and read["enabled"] == "1"
    assert options["archive"][0].endswith(".cact") and not options["archive"][1]
    assert '--threads "$threads"' in init


def fake_root(tmp_path) -> Path:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/rc.common").write_text('#!/bin/sh\necho "rc.common $*" >> "${0%/etc/rc.common}/rc.log"\n')
    return root


@pytest.mark.parametrize("script, action", [("postinst", "enable"), ("prerm", "disable")])
def test_maintainer_scripts_in_an_image_build(script, action, tmp_path):
    """IPKG_INSTROOT set (ImageBuilder, SDK): enable/disable inside that root, start nothing."""
    root = fake_root(tmp_path)
    env = {"PATH": os.environ["PATH"], "IPKG_INSTROOT": str(root)}
    subprocess.run(["sh", TEMPLATES / script], env=env, check=True)
    assert (root / "rc.log").read_text() == f"rc.common {root}/etc/init.d/needle {action}\n"
    (root / "rc.log").unlink()
    subprocess.run(["sh", TEMPLATES / script], env={**env, "IPKG_NO_SCRIPT": "1"}, check=True)
    assert not (root / "rc.log").exists()


def run_on_a_router(script: str, tmp_path, **env) -> list[str]:
    """Run a maintainer script with IPKG_INSTROOT empty, as opkg does on the router, in a private
    mount namespace whose /etc/init.d holds a stand-in `needle` that logs its arguments."""
    if not shutil.which("unshare") or not Path("/etc/init.d").is_dir():
        pytest.skip("needs unshare (util-linux) and an /etc/init.d to mount over")
    fake = tmp_path / "init.d"
    fake.mkdir(exist_ok=True)
    log = tmp_path / "init.log"
    log.write_text("")
    (fake / "needle").write_text(f'#!/bin/sh\necho "needle $*" >> "{log}"\n')
    (fake / "needle").chmod(0o755)
    inner = f'mount --bind "{fake}" /etc/init.d && exec sh "{TEMPLATES / script}"'
    base_env = {"PATH": os.environ["PATH"], **env}
    for flags in (["-m"], ["-r", "-m"]):            # as root; else in a user namespace
        proc = subprocess.run(["unshare", *flags, "sh", "-c", inner], env=base_env,
                              capture_output=True, text=True)
        if proc.returncode == 0:
            return log.read_text().splitlines()
    pytest.skip(f"cannot make a private mount namespace here: {proc.stderr.strip()}")


@pytest.mark.parametrize("script, upgrade, calls", [
    ("postinst", "0", ["needle enable", "needle start"]),
    ("postinst", "1", ["needle restart"]),              # the new binary runs; boot links stay
    ("prerm", "0", ["needle stop", "needle disable"]),
    ("prerm", "1", ["needle stop"]),
])
def test_maintainer_scripts_on_a_running_router(script, upgrade, calls, tmp_path):
    assert run_on_a_router(script, tmp_path, PKG_UPGRADE=upgrade) == calls
    assert run_on_a_router(script, tmp_path, IPKG_NO_SCRIPT="1") == []


# ---- the systemd unit ---------------------------------------------------------------------

LINUX_BOARDS = [n for n in boards.names() if boards.load(n)["os"] == "linux"]


def exec_start(unit: str) -> list[str]:
    lines = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1
    return lines[0][len("ExecStart="):].split()


@pytest.mark.parametrize("board_name", LINUX_BOARDS)
def test_systemd_unit(board_name, tmp_path):
    board = boards.load(board_name)
    unit = package.systemd_unit(board)
    from_file = board["archive"]["placement"] == "file"
    assert exec_start(unit) == (["/usr/local/bin/needle", "--serve", "--socket", "/run/needle/needle.sock"]
                                + (["--archive", "/usr/local/share/needle/model.cact"] if from_file else []))
    for line in ("RuntimeDirectory=needle", "DynamicUser=yes", "Restart=on-failure", "NoNewPrivileges=yes",
                 "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "RestrictAddressFamilies=AF_UNIX",
                 "UMask=0007", "WantedBy=multi-user.target"):
        assert f"\n{line}\n" in unit, line
    archive_lines = ("ReadOnlyPaths=/usr/local/share/needle", "AssertPathExists=/usr/local/share/needle/model.cact")
    assert all((f"\n{line}\n" in unit) == from_file for line in archive_lines)
    assert "\n\n\n" not in unit and "{" not in unit.replace("{{", "")
    path = Path(package.write_systemd_unit(board, str(tmp_path / "out")))
    assert path.name == "needle.service" and path.read_text() == unit
    assert_unit_verifies(unit, "/usr/local/bin/needle", tmp_path)


def assert_unit_verifies(unit: str, exec_path: str, tmp_path: Path, *options: str) -> None:
    """`systemd-analyze verify` passes the unit with no warning (warnings count as failures).
    verify wants the executable to exist: ExecStart's `exec_path` becomes a stand-in, nothing else
    changes."""
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    exe = tmp_path / "needle"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    (tmp_path / "unit").mkdir()
    copy = tmp_path / "unit" / "needle.service"
    copy.write_text(unit.replace(f"ExecStart={exec_path}", f"ExecStart={exe}"))
    proc = subprocess.run(["systemd-analyze", "verify", *options, copy], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_systemd_unit_refuses_bare_metal(tmp_path):
    with pytest.raises(CactError, match=r"^board watch-m4 is bare metal \(os = none\): a systemd unit"):
        package.systemd_unit(boards.load("watch-m4"))
    proc = cli("--board", "watch-m4", "--systemd", "-o", tmp_path / "o")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and not (tmp_path / "o").exists()
    proc = cli("--board", "rpi-zero", "--systemd", "-o", tmp_path / "o")
    assert proc.returncode == 0 and Path(proc.stdout.strip()) == tmp_path / "o" / "needle.service"


# ---- real opkg, when there is one ----------------------------------------------------------------

def find_opkg() -> str | None:
    return os.environ.get("OPKG") or shutil.which("opkg-cl") or shutil.which("opkg")


@pytest.mark.skipif(not find_opkg(), reason="no opkg executable (set OPKG=PATH to OpenWrt's opkg-cl)")
def test_opkg_installs_and_removes_the_package_offline(stand_in, tmp_path):
    board = boards.load("router-mt7621")
    ipk = package.write_ipk(board, str(stand_in), str(tmp_path / "out"))
    root = fake_root(tmp_path)
    (root / "usr/lib/opkg").mkdir(parents=True)
    conf = tmp_path / "opkg.conf"
    conf.write_text(f"dest root /\narch all 1\narch {board['package']['openwrt_arch']} 10\n"
                    f"lists_dir ext {root}/var/opkg-lists\n")
    (root / "var/lock").mkdir(parents=True)           # opkg's lock: <root>/var/lock/opkg.lock
    base = [find_opkg(), "-f", conf, "--offline-root", root, "--force-postinstall"]
    env = {"PATH": os.environ["PATH"], "IPKG_INSTROOT": str(root)}
    run(base + ["install", ipk], env=env)
    assert (root / "usr/bin/needle").read_bytes() == stand_in.read_bytes()
    assert (root / "usr/bin/needle").stat().st_mode & 0o777 == 0o755
    assert (root / "usr/lib/opkg/info/needle.conffiles").read_text().strip() == "/etc/config/needle"
    status = (root / "usr/lib/opkg/status").read_text()
    assert "Package: needle\n" in status and "Status: install user installed" in status
    run(base + ["remove", "needle"], env=env)
    assert not (root / "usr/bin/needle").exists()
    assert (root / "rc.log").read_text().split("\n")[:2] == [
        f"rc.common {root}/etc/init.d/needle enable", f"rc.common {root}/etc/init.d/needle disable"]


# ---- end to end: real binaries under qemu-user, started as the service files start them ----------

def scons_build(board_name: str, build: Path):
    board = boards.load(board_name)
    missing = boards.missing_tools(board, run=True)
    if missing:
        pytest.skip(missing)
    proc = subprocess.run([sys.executable, "-m", "SCons", "-Q", f"board={board_name}", f"build={build}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        last = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["no output"]
        pytest.skip(f"scons board={board_name} failed (the board's switch to placement 'file' may be "
                    f"unfinished): {last[0]}")
    return board, build / "needle"


def serve_one_request(engine, args: list[str], sock: Path) -> dict:
    """Start the engine (its BoardRunner) with `args` (`--serve --socket sock ...`), send one
    request, return the answer."""
    import json
    import socket
    import time
    proc = engine.popen(args, stdin=subprocess.DEVNULL)
    cmd = proc.args
    try:
        deadline = time.monotonic() + 60
        while not sock.exists():
            assert proc.poll() is None, f"{cmd} exited: {proc.communicate()[1]}"
            assert time.monotonic() < deadline, f"{cmd}: no socket {sock} after 60 s"
            time.sleep(0.1)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(120)
            s.connect(str(sock))
            s.sendall(b'{"id":"t","prompt":"What is the weather in Lagos?","max_new":4}\n')
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = s.recv(4096)
                assert chunk, "the service closed the connection without an answer"
                answer += chunk
        return json.loads(answer)
    finally:
        engine.stop(proc)


@pytest.mark.slow
def test_router_binary_from_the_ipk_runs_under_qemu(tmp_path, board_runner):
    board, built = scons_build("router-mt7621", tmp_path / "build")
    archive = ROOT / "demo" / "needle2-demo.cact"          # the archive scons built the engine for (the default)
    ipk = Path(package.write_ipk(board, str(built), str(tmp_path / "ipk")))
    d = unpack(ipk, tmp_path / "x", "tar.gz")
    binary = d / "data" / "usr" / "bin" / "needle"
    assert binary.read_bytes() == built.read_bytes()
    assert binary.stat().st_mode & 0o777 == 0o755
    emulator = board["emulator"]["command"]
    assert emulator == ["qemu-mipsel", "-cpu", "24Kc"]
    info = board_runner(board, binary, archive).run(["--info"], timeout=300)
    assert info.returncode == 0, info.stderr
    from generator.archive import reader
    h = reader.read(str(archive)).header
    assert re.search(rf"^geometry  vocab {h['vocab']} \(out \d+\), d {h['d_model']}, layers {h['num_layers']}, "
                     rf"heads {h['num_heads']}/{h['num_kv_heads']} x {h['head_dim']}/", info.stdout, re.M), info.stdout
    assert "board router-mt7621" in info.stdout

    # the service, started with the command line the init script hands procd
    sock = tmp_path / "run" / "needle.sock"
    procd = run_init(tmp_path, "start_service", archive=archive, socket=sock, max_new=8)
    command = [line.split("|")[2:] for line in procd if line.startswith("set|command|")][0]
    assert command[0] == "/usr/bin/needle"
    answer = serve_one_request(board_runner(board, binary), command[1:], sock)   # its own --archive
    assert answer["id"] == "t" and answer["ok"] is True and answer["generated_tokens"] >= 1, answer


@pytest.mark.slow
def test_raspberry_pi_binary_serves_as_the_systemd_unit_starts_it(tmp_path, board_runner):
    board, built = scons_build("rpi-zero", tmp_path / "build")
    args = exec_start(package.systemd_unit(board))
    assert args[0] == "/usr/local/bin/needle"
    sock = tmp_path / "needle.sock"                          # the unit's /run/needle/needle.sock, here
    args = [str(sock) if a == "/run/needle/needle.sock" else a for a in args[1:]]
    answer = serve_one_request(board_runner(board, built), args, sock)
    assert answer["id"] == "t" and answer["ok"] is True and answer["generated_tokens"] >= 1, answer
