"""Signed images for MCUboot (issue 49 item 3): a board file's [slots] table (bootloader,
primary, secondary, scratch) is validated in one line; `scons board=X sign=KEY` signs the
code region's image with imgtool (the project's version, MCUboot's header padded in front,
the primary slot's size) and `imgtool verify` accepts it with the key the test generated
(never a committed one); a missing, public, unsupported or encrypted key, a Linux board and a
board without slots are refused in one line before anything is written.  MCUboot itself is
not built and nothing boots here (no RP2350 attached, no emulator): what is checked is the
image imgtool makes and that its payload is the firmware's code image."""

from __future__ import annotations

import struct
import subprocess

import pytest

from generator import __version__
from generator.build import boards, mcuboot
from host_tests.scons_run import ROOT, scons

ARCHIVE = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
BOARD = "rp2350-pico-plus2-mcuboot"
IMAGE_MAGIC = 0x96F3B83D            # MCUboot's image header magic (bootutil image.h)

pytestmark = [pytest.mark.skipif(boards.missing_tools(boards.load("watch-m4")) is not None,
                                 reason="needs arm-none-eabi-gcc"),
              pytest.mark.skipif(mcuboot.imgtool() is None, reason=f"imgtool is not installed: {mcuboot.INSTALL}")]


def imgtool(*args) -> subprocess.CompletedProcess:
    return subprocess.run(mcuboot.imgtool() + [str(a) for a in args], capture_output=True, text=True)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    out = {}
    for kind in ("ecdsa-p256", "rsa-2048", "ed25519"):
        out[kind] = d / f"{kind}.pem"
        proc = imgtool("keygen", "-k", out[kind], "-t", kind)
        assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def signed(keys, tmp_path_factory):
    out = tmp_path_factory.mktemp("mcuboot") / BOARD
    scons(f"board={BOARD}", f"archive={ARCHIVE}", f"build={out}", f"sign={keys['ecdsa-p256']}")
    return out


def test_signed_image_verifies_and_carries_the_firmware(signed, keys):
    board = boards.load(BOARD)
    image = signed / mcuboot.signed_name(board)
    proc = imgtool("verify", "-k", keys["ecdsa-p256"], image)
    assert proc.returncode == 0 and "Image was correctly validated" in proc.stdout, proc.stdout + proc.stderr
    assert f"Image version: {__version__}+0" in proc.stdout
    data = image.read_bytes()
    magic, load_addr, hdr_size, _, img_size = struct.unpack_from("<IIHHI", data)
    assert magic == IMAGE_MAGIC and hdr_size == board["slots"]["header_bytes"] == 0x200
    code = (signed / "needle-FLASH-0x10020200.bin").read_bytes()
    assert img_size == len(code) and data[hdr_size:hdr_size + img_size] == code
    assert len(data) <= board["slots"]["primary"]["length"]
    # another key does not verify it
    other = imgtool("verify", "-k", keys["rsa-2048"], image)
    assert other.returncode != 0


def test_flash_programs_the_archive_then_the_signed_image(signed, keys):
    proc = scons(f"board={BOARD}", f"archive={ARCHIVE}", f"build={signed}", f"sign={keys['ecdsa-p256']}", "flash=dry")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("openocd ")]
    assert len(lines) == 2
    assert "archive.bin 0x10240000 verify" in lines[0]
    assert f"{mcuboot.signed_name(boards.load(BOARD))} 0x10020000 verify" in lines[1] and "reset run" in lines[1]


@pytest.mark.parametrize("kind", ["rsa-2048", "ed25519"])
def test_other_key_types_sign_too(keys, kind, tmp_path):
    board = boards.load(BOARD)
    code = tmp_path / "code.bin"
    code.write_bytes(bytes(range(256)) * 16)
    out = tmp_path / "signed.bin"
    assert mcuboot.key_problem(str(keys[kind])) is None
    mcuboot.sign(board, str(keys[kind]), str(code), str(out), __version__)
    assert imgtool("verify", "-k", keys[kind], out).returncode == 0


def _encrypted(path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.BestAvailableEncryption(b"secret")))


def _public(path, keys):
    proc = imgtool("getpub", "-k", keys["ecdsa-p256"], "--encoding", "pem")
    assert proc.returncode == 0, proc.stderr
    path.write_text(proc.stdout)


def _p521(path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP521R1())
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


@pytest.mark.parametrize("case, message", [
    ("missing", "sign={key}: no such file or directory"),
    ("text", "sign={key}: not a PEM private key; MCUboot images are signed with a private key"),
    ("public", "sign={key}: a public key; MCUboot images are signed with a private key"),
    ("encrypted", "sign={key}: the key is encrypted (a password-protected PEM): imgtool would stop to ask"),
    ("p521", "MCUboot does not verify; use RSA 2048/3072, ECDSA P-256/P-384 or Ed25519"),
])
def test_bad_keys_are_refused_before_building(case, message, keys, tmp_path):
    key = tmp_path / "key.pem"
    if case == "text":
        key.write_text("not a key\n")
    elif case == "public":
        _public(key, keys)
    elif case == "encrypted":
        _encrypted(key)
    elif case == "p521":
        _p521(key)
    proc = scons(f"board={BOARD}", f"archive={ARCHIVE}", f"build={tmp_path / 'b'}", f"sign={key}", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert message.format(key=key) in proc.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("board, message", [
    ("rpi-zero", "sign= makes an MCUboot image of bare-metal firmware: board rpi-zero runs Linux"),
    ("rp2350-pico-plus2", "board rp2350-pico-plus2 has no [slots] table"),
])
def test_sign_on_a_board_without_slots_is_refused(board, message, keys, tmp_path):
    proc = scons(f"board={board}", f"build={tmp_path / 'b'}", f"sign={keys['ecdsa-p256']}", check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "b").exists()


def test_flash_without_a_signed_image_says_sign_first(tmp_path):
    proc = scons(f"board={BOARD}", f"archive={ARCHIVE}", f"build={tmp_path / 'b'}", "flash=dry", check=False)
    assert proc.returncode == 2 and "boots through MCUboot: build with sign=KEY first" in proc.stderr


def _slot(name, origin, length):
    return lambda t: t.replace(next(ln for ln in t.splitlines() if ln.startswith(f"{name} ")),
                               f"{name} = {{ origin = 0x{origin:08X}, length = 0x{length:08X} }}")


@pytest.mark.parametrize("edit, message", [
    (_slot("secondary", 0x10100000, 0x100000), "slots primary (0x10020000..0x10120000) and secondary (from 0x10100000) overlap"),
    (_slot("scratch", 0x10230000, 0x20000), "slot scratch (0x10230000..0x10250000) overlaps the archive region ARCHIVE"),
    (_slot("scratch", 0x10FF0000, 0x20000), "slot scratch (0x10FF0000..0x11010000) is outside the board's flash"),
    (_slot("primary", 0x10030000, 0xF0000), "the code region FLASH must start header_bytes (0x200) into the primary slot"),
    (_slot("secondary", 0x10120000, 0x80000), "slot secondary must be at least as large as primary"),
    (lambda t: t.replace("align = 4 ", "align = 3 "), "slots.align (the flash's write alignment, imgtool --align) must be one of"),
    (lambda t: t.replace("bootloader = {", "loader = {"), "unknown key slots.loader"),
    (lambda t: t.replace("[slots]", "[slots]\nswap = 1"), "unknown key slots.swap"),
])
def test_board_file_checks_the_slots(board_error, edit, message):
    assert message in board_error(BOARD, edit)


def test_slots_are_for_bare_metal(board_error):
    assert "[slots] (MCUboot's flash slots) is for bare-metal boards" in board_error(
        "rpi-zero", lambda t: t + "\n[slots]\nprimary = { origin = 0, length = 16 }\n")
