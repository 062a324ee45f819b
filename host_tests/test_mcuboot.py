"""Signed images for MCUboot (issue 49 item 3): a board file's [slots] table (bootloader,
primary, secondary, scratch) is validated in one line; `scons board=X sign=KEY` signs the
code region's image with imgtool (the project's version, MCUboot's header padded in front,
the primary slot's size) and `imgtool verify` accepts it with the key the test generated
(never a committed one); a missing, public, unsupported or encrypted key, a Linux board and a
board without slots are refused in one line before anything is written.  The image confirms
itself after its archive check: the firmware's boot path built for the host over a simulated
flash turns imgtool's `--pad` image into exactly imgtool's `--pad --confirm` image, and leaves
it byte for byte unconfirmed when the archive check fails.  MCUboot itself is not built and
nothing boots on the chip here (no RP2350 attached, no emulator): what is checked is the image
imgtool makes, that its payload is the firmware's code image, the confirmation logic on the
host, and that the RP2350 flash driver is linked with its write sequence in SRAM."""

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
    ("missing", "sign={key}: no such file or directory: give the path of your PEM signing key"),
    ("directory", "sign={key}: is a directory: give the path of your PEM signing key"),
    ("text", "sign={key}: not a PEM private key; MCUboot images are signed with a private key"),
    ("public", "sign={key}: a public key; MCUboot images are signed with a private key"),
    ("encrypted", "sign={key}: the key is encrypted (a password-protected PEM): imgtool would stop to ask"),
    ("p521", "MCUboot does not verify; use RSA 2048/3072, ECDSA P-256/P-384 or Ed25519"),
])
def test_bad_keys_are_refused_before_building(case, message, keys, tmp_path):
    key = tmp_path / "key.pem"
    if case == "text":
        key.write_text("not a key\n")
    elif case == "directory":
        key.mkdir()
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
    (_slot("secondary", 0x10100000, 0x100000), "slots primary (0x10020000..0x10120000) and secondary (from 0x10100000) overlap: move secondary to "
     "0x10120000 or later, or shorten primary"),
    (_slot("scratch", 0x10230000, 0x20000), "slot scratch (0x10230000..0x10250000) overlaps the archive region ARCHIVE (0x10240000..0x11000000): "
     "the archive has a region of its own, outside the slots; move the slot or the archive region"),
    (_slot("scratch", 0x10FF0000, 0x20000), "slot scratch (0x10FF0000..0x11010000) is outside the board's flash (0x10000000..0x11000000: "
     "flash_bytes from the lowest of its slots and code and archive regions): move or shorten the slot, or set "
     "memory.flash_bytes to the flash the board has"),
    (_slot("primary", 0x10030000, 0xF0000), "the code region FLASH must start header_bytes (0x200) into the primary slot"),
    (_slot("secondary", 0x10120000, 0x80000), "slot secondary must be at least as large as primary"),
    (_slot("scratch", 0x20000000, 0x20000), "slot scratch (0x20000000..0x20020000) is outside the board's flash"),
    (_slot("bootloader", 0x10000000, 0x30000), "slots bootloader (0x10000000..0x10030000) and primary (from "
     "0x10020000) overlap: move primary to 0x10030000 or later, or shorten bootloader"),
    (lambda t: t.replace('flash_driver = "rp2350"', 'flash_driver = "stm32h7"'),
     "slots.flash_driver (the flash driver that writes MCUboot's image_ok) must be one of rp2350"),
    (lambda t: t.replace("align = 4 ", "align = 3 "), "slots.align (the flash's write alignment, imgtool --align) must be one of"),
    (lambda t: t.replace("bootloader = {", "loader = {"), "unknown key slots.loader"),
    (lambda t: t.replace("[slots]", "[slots]\nswap = 1"), "unknown key slots.swap"),
])
def test_board_file_checks_the_slots(board_error, edit, message):
    assert message in board_error(BOARD, edit)


def test_slots_are_for_bare_metal(board_error):
    assert "[slots] (MCUboot's flash slots) is for bare-metal boards" in board_error(
        "rpi-zero", lambda t: t + "\n[slots]\nprimary = { origin = 0, length = 16 }\n")


# ---- the image confirms itself once its archive check passed (firmware/baremetal/mcuboot.c) ----
#
# The oracle is imgtool: `sign --pad` writes the trailer of an image marked for a test swap
# (MCUboot's magic, image_ok erased), `sign --pad --confirm` the same image confirmed.  The
# firmware's own boot path (the generated needle_boot() and mcuboot.c, unchanged) is built for
# the host over a simulated flash (host_tests/c/mcuboot_boot.c): boot over the --pad image must
# give the --confirm image byte for byte, and a failed archive check must leave it as it was.
# Ed25519 signatures are deterministic, so the two imgtool runs differ only in the trailer.

HARNESS = ROOT / "host_tests" / "c" / "mcuboot_boot.c"


@pytest.fixture(scope="module")
def scalar_build(tmp_path_factory):
    """The board's engine with the portable kernels, so its generated C compiles on the host."""
    out = tmp_path_factory.mktemp("mcuboot-scalar") / BOARD
    scons(f"board={BOARD}", f"archive={ARCHIVE}", f"build={out}", "kernels=scalar")
    return out


def _harness(build, tmp, archive, align, driver=True):
    board = boards.load(BOARD)
    primary = board["slots"]["primary"]
    asm = tmp / f"cact-{archive.stem}.S"
    asm.write_text(f'    .section .rodata\n    .balign 64\n    .global needle_cact\nneedle_cact:\n'
                   f'    .incbin "{archive}"\n    .section .note.GNU-stack,"",@progbits\n')
    exe = tmp / f"boot-{archive.stem}-{align}-{int(driver)}"
    gen = build / "gen"
    cmd = ["gcc", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'firmware' / 'hal'}", f"-I{gen}",
           f"-DNEEDLE_MCUBOOT_PRIMARY_END=0x{primary['origin'] + primary['length']:X}u",
           f"-DNEEDLE_MCUBOOT_ALIGN={align}u", f"-DSLOT_BYTES=0x{primary['length']:X}u",
           *([] if driver else ["-DNO_FLASH_DRIVER"]), "-o", str(exe), str(HARNESS),
           str(ROOT / "firmware" / "baremetal" / "mcuboot.c"), str(ROOT / "firmware" / "hal" / "format.c"),
           *(str(gen / f) for f in ("needle_model.c", "needle_kernels.c", "needle_tokenizer.c")), str(asm), "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return exe


def _sign(build, key, tmp, align, *extra):
    board = dict(boards.load(BOARD))
    board["slots"] = dict(board["slots"], align=align)
    out = tmp / f"signed-{align}{''.join(extra)}.bin"
    cmd = mcuboot.sign_command(board, str(key), str(build / "needle-FLASH-0x10020200.bin"), str(out), __version__)
    proc = subprocess.run(cmd[:-2] + list(extra) + cmd[-2:], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out.read_bytes()


def _boot(exe, image, tmp):
    src, dst = tmp / "slot-in.bin", tmp / "slot-out.bin"
    src.write_bytes(image)
    proc = subprocess.run([str(exe), str(src), str(dst)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc, dst.read_bytes()


@pytest.mark.parametrize("align", [1, 4, 8, 32])
def test_boot_confirms_a_test_image_exactly_as_imgtool_confirm(scalar_build, keys, tmp_path, align):
    pad = _sign(scalar_build, keys["ed25519"], tmp_path, align, "--pad")
    confirmed = _sign(scalar_build, keys["ed25519"], tmp_path, align, "--pad", "--confirm")
    slot = boards.load(BOARD)["slots"]["primary"]
    diff = [i for i, (a, b) in enumerate(zip(pad, confirmed)) if a != b]
    max_align = max(8, align)
    magic_field = (16 + max_align - 1) // max_align * max_align
    assert len(pad) == len(confirmed) == slot["length"]
    assert diff == [slot["length"] - magic_field - max_align]      # image_ok: the oracle's only change
    exe = _harness(scalar_build, tmp_path, ARCHIVE, align)
    proc, after = _boot(exe, pad, tmp_path)
    assert proc.stdout.splitlines() == [f"program 0x{slot['origin'] + diff[0]:08x} {align}", "needle_boot 0 "]
    assert proc.stderr == "needle: confirmed this MCUboot image (its archive check passed): MCUboot keeps it\n"
    assert after == confirmed
    # the next boot finds it confirmed and writes nothing
    proc, again = _boot(exe, confirmed, tmp_path)
    assert proc.stdout == "needle_boot 0 \n" and proc.stderr == "" and again == confirmed


@pytest.mark.parametrize("kind", ["bit-flipped", "erased", "swapped"])
def test_a_failed_archive_check_never_confirms(scalar_build, keys, tmp_path, kind):
    from generator.archive import reader
    from host_tests import archive_edit
    data = ARCHIVE.read_bytes()
    if kind == "bit-flipped":
        bad = bytearray(data)
        bad[len(data) - 100] ^= 0x04
        bad = bytes(bad)
    elif kind == "erased":
        bad = b"\xff" * len(data)
    else:                                  # same header and directory, other weights
        bad = archive_edit.perturb_tensor(reader.read(str(ARCHIVE)), "final_norm", seed=5)
    archive = tmp_path / "archive.cact"
    archive.write_bytes(bad)
    pad = _sign(scalar_build, keys["ed25519"], tmp_path, 4, "--pad")
    proc, after = _boot(_harness(scalar_build, tmp_path, archive, 4), pad, tmp_path)
    assert proc.stdout.startswith("needle_boot -1 the archive") and "program" not in proc.stdout, proc.stdout
    assert proc.stderr == ""
    assert after == pad                    # byte for byte: still a test image, so MCUboot reverts it


def test_an_image_flashed_in_place_is_left_alone(scalar_build, keys, tmp_path):
    """No trailer (flash=1 writes the signed image without one): MCUboot boots it as it is."""
    image = _sign(scalar_build, keys["ed25519"], tmp_path, 4)
    slot = image + b"\xff" * (boards.load(BOARD)["slots"]["primary"]["length"] - len(image))
    proc, after = _boot(_harness(scalar_build, tmp_path, ARCHIVE, 4), slot, tmp_path)
    assert proc.stdout == "needle_boot 0 \n" and proc.stderr == "" and after == slot


def test_a_damaged_trailer_is_reported_and_left_alone(scalar_build, keys, tmp_path):
    pad = bytearray(_sign(scalar_build, keys["ed25519"], tmp_path, 4, "--pad"))
    pad[-1] ^= 0xFF                        # the magic's last byte
    proc, after = _boot(_harness(scalar_build, tmp_path, ARCHIVE, 4), bytes(pad), tmp_path)
    assert proc.stdout == "needle_boot 0 \n" and after == bytes(pad)
    assert proc.stderr == ("needle: warning: this MCUboot image is not confirmed: the primary slot's trailer has "
                           "no MCUboot magic (damaged, or the bootloader's BOOT_MAX_ALIGN is not max(8, "
                           "slots.align))\n")


def test_without_a_flash_driver_the_image_stays_unconfirmed_and_says_so(scalar_build, keys, tmp_path):
    pad = _sign(scalar_build, keys["ed25519"], tmp_path, 4, "--pad")
    proc, after = _boot(_harness(scalar_build, tmp_path, ARCHIVE, 4, driver=False), pad, tmp_path)
    assert proc.stdout == "needle_boot 0 \n" and after == pad
    assert proc.stderr == ("needle: warning: this MCUboot image is not confirmed: this board has no flash driver "
                           "(hal_flash_program; board file slots.flash_driver); MCUboot swaps the previous "
                           "image back at the next reset\n")


def test_the_rp2350_flash_driver_is_linked_and_runs_from_sram(signed):
    """The confirm path in the firmware itself: needle_boot calls it, the RP2350 driver's
    hal_flash_program (not the weak refusal) is linked, and its write sequence is in SRAM."""
    from elftools.elf.elffile import ELFFile
    with open(signed / "needle.elf", "rb") as fh:
        elf = ELFFile(fh)
        syms = {s.name: s for s in elf.get_section_by_name(".symtab").iter_symbols()}
        ram = elf.get_section_by_name(".ram_text")
        assert syms["hal_flash_program"]["st_info"]["bind"] == "STB_GLOBAL"       # the driver's, not weak
        assert syms["program_page"]["st_value"] & ~1 == ram["sh_addr"]                # Thumb bit aside
        assert 0x20000000 <= ram["sh_addr"] < 0x20082000 and ram["sh_size"] > 0      # the SRAM region
    mapping = (signed / "needle.map").read_text()
    assert "flash_rp2350.o" in mapping and "mcuboot.o" in mapping
    dump = subprocess.run(["arm-none-eabi-objdump", "-d", str(signed / "needle.elf")], capture_output=True,
                          text=True, check=True).stdout
    boot = dump[dump.index("<needle_boot>:"):]
    boot = boot[:boot.index("\n\n")]
    assert "<needle_image_confirm>" in boot and boot.index("<hal_sha256>") < boot.index("<needle_image_confirm>")


def test_a_program_on_the_sdk_confirms_with_the_boards_driver(keys, tmp_path):
    """A program of the user's own on the board's SDK (lib=1, needle-board.pc): its needle_boot()
    confirms the image too, with the RP2350 driver's hal_flash_program, not mcuboot.c's weak
    refusal (needle-board.pc names both, so the archive members come in before libneedle.a)."""
    from host_tests.test_sha256_hook import APP, link
    out = tmp_path / BOARD
    scons(f"board={BOARD}", f"archive={ARCHIVE}", f"build={out}", "lib=1")
    pc = (out / "sdk" / "lib" / "pkgconfig" / "needle-board.pc").read_text()
    assert "-Wl,--undefined=needle_image_confirm" in pc and "-Wl,--undefined=hal_flash_program" in pc
    program = link(out / "sdk", tmp_path, [APP], "app")
    from elftools.elf.elffile import ELFFile
    with open(program, "rb") as fh:
        elf = ELFFile(fh)
        syms = {s.name: s for s in elf.get_section_by_name(".symtab").iter_symbols()}
        assert syms["hal_flash_program"]["st_info"]["bind"] == "STB_GLOBAL"
        assert "needle_image_confirm" in syms and elf.get_section_by_name(".ram_text")["sh_size"] > 0
