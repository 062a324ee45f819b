"""Signed firmware images for MCUboot (`scons board=X sign=KEY`): the board file's [slots].

MCUboot (the bootloader, in the board's `bootloader` slot) boots the image in the `primary`
slot after checking its signature, and on an update swaps in the signed image a tool wrote to
the `secondary` slot (through `scratch`, sector by sector, where the board has one).  The
image is the firmware's code region with MCUboot's header in front (`header_bytes`, 0x200)
and its signature and hash after it (TLVs), written by imgtool:

    imgtool sign --key KEY --version X.Y.Z --header-size 0x200 --pad-header
                 --slot-size <primary length> --align <align> CODE.bin SIGNED.bin

so the board's code region starts `header_bytes` into the primary slot (the link places the
vector table there) and the signed file is flashed at the slot's origin.

Where the archive lives.  Not in the slots: it is megabytes (the 16 MB board keeps 14 MB for
it), and putting it in the image would need two slots of that size, and a swap of all of it
for every firmware fix.  It stays in its own flash region (`placement = "partition"`),
flashed as archive.bin and updated as a separate image on its own schedule; the signed
firmware pins it: the engine checks every byte of the partition against the SHA-256 compiled
into it (needle_boot), so a firmware only ever runs with the archive it was built for, and a
new archive goes with a new signed firmware that names it (flash the archive first, then the
firmware; a firmware whose archive is missing refuses to start the engine and says why).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from generator.errors import CactError

SLOT_NAMES = ("bootloader", "primary", "secondary", "scratch")
REQUIRED_SLOTS = ("bootloader", "primary", "secondary")
ALIGNS = (1, 2, 4, 8, 16, 32)          # imgtool --align
# slots.flash_driver: the chip's flash programming behind hal_flash_program, with which the
# firmware writes image_ok once its archive check has passed (firmware/hal/flash/flash_<kind>.c)
FLASH_DRIVERS = ("rp2350",)
DEFAULT_HEADER = 0x200
INSTALL = "pip install imgtool==2.5.0"


def signed_name(board: dict) -> str:
    return f"needle-signed-0x{board['slots']['primary']['origin']:08X}.bin"


def flash_span(board: dict) -> tuple[int, int]:
    """[lo, hi) of the board's flash: flash_bytes from the lowest of its code and archive regions
    and its slots (the bootloader usually comes first)."""
    starts = [r["origin"] for r in board["memory"]["regions"] if r["use"] in ("code", "archive")]
    starts += [v["origin"] for k, v in board.get("slots", {}).items() if isinstance(v, dict) and "origin" in v]
    lo = min(starts)
    return lo, lo + board["memory"]["flash_bytes"]


def check_slots(board: dict) -> str | None:
    """Why the board's [slots] table is wrong (one line), or None."""
    s = board["slots"]
    extra = sorted(set(s) - set(SLOT_NAMES) - {"header_bytes", "align", "flash_driver"})
    if extra:
        return (f"unknown key slots.{extra[0]} (slot keys: {', '.join(SLOT_NAMES)}, header_bytes, align, "
                "flash_driver)")
    if "flash_driver" in s and s["flash_driver"] not in FLASH_DRIVERS:
        return (f"slots.flash_driver (the flash driver that writes MCUboot's image_ok) must be one of "
                f"{', '.join(FLASH_DRIVERS)}; leave it out and the image never confirms itself")
    for name in REQUIRED_SLOTS:
        if name not in s:
            return f"[slots] needs {', '.join(REQUIRED_SLOTS)} (scratch is optional)"
    slots = []
    for name in SLOT_NAMES:
        if name not in s:
            continue
        v = s[name]
        if (not isinstance(v, dict) or set(v) != {"origin", "length"}
                or not all(isinstance(v[k], int) and not isinstance(v[k], bool) for k in v)
                or v["origin"] < 0 or v["length"] <= 0):
            return f"slots.{name} must be {{ origin = ADDRESS, length = BYTES }} with a positive length"
        slots.append((name, v["origin"], v["origin"] + v["length"]))
    header, align = s.setdefault("header_bytes", DEFAULT_HEADER), s.setdefault("align", 4)
    if not isinstance(header, int) or header < 32 or header % 32:
        return "slots.header_bytes (MCUboot's image header) must be a multiple of 32, at least 32"
    if align not in ALIGNS:
        return f"slots.align (the flash's write alignment, imgtool --align) must be one of {', '.join(map(str, ALIGNS))}"
    lo, hi = flash_span(board)
    for name, a, b in slots:
        if a < lo or b > hi:
            return (f"slot {name} (0x{a:08X}..0x{b:08X}) is outside the board's flash (0x{lo:08X}..0x{hi:08X}: "
                    "flash_bytes from the lowest of its slots and code and archive regions): move or shorten "
                    "the slot, or set memory.flash_bytes to the flash the board has")
    for r in board["memory"]["regions"]:
        if r["use"] in ("code", "archive") and r["origin"] + r["length"] > hi:
            return (f"region {r['name']} ends at 0x{r['origin'] + r['length']:08X}, outside the board's flash "
                    f"(0x{lo:08X}..0x{hi:08X}: flash_bytes from the lowest of its slots and code and archive regions): "
                    "shorten the region, or set memory.flash_bytes to the flash the board has")
    ordered = sorted(slots, key=lambda t: t[1])
    for (n1, a1, b1), (n2, a2, b2) in zip(ordered, ordered[1:]):
        if b1 > a2:
            return (f"slots {n1} (0x{a1:08X}..0x{b1:08X}) and {n2} (from 0x{a2:08X}) overlap: move {n2} "
                    f"to 0x{b1:08X} or later, or shorten {n1}")
    arch = next(r for r in board["memory"]["regions"] if r["use"] == "archive")
    for name, a, b in slots:
        if a < arch["origin"] + arch["length"] and arch["origin"] < b:
            return (f"slot {name} (0x{a:08X}..0x{b:08X}) overlaps the archive region {arch['name']} "
                    f"(0x{arch['origin']:08X}..0x{arch['origin'] + arch['length']:08X}): the archive has a "
                    "region of its own, outside the slots; move the slot or the archive region")
    code = next(r for r in board["memory"]["regions"] if r["use"] == "code")
    p = s["primary"]
    if code["origin"] != p["origin"] + header or code["origin"] + code["length"] > p["origin"] + p["length"]:
        return (f"the code region {code['name']} must start header_bytes (0x{header:X}) into the primary slot, "
                f"at 0x{p['origin'] + header:08X}, and end inside it (MCUboot boots the image there)")
    if s["secondary"]["length"] < p["length"]:
        return "slot secondary must be at least as large as primary (an update is written there whole)"
    return None


def imgtool() -> list[str] | None:
    """The imgtool command line, or None when it is not installed."""
    try:
        import imgtool as _  # noqa: F401
    except ImportError:
        exe = shutil.which("imgtool")
        return [exe] if exe else None
    return [sys.executable, "-m", "imgtool.main"]


def key_problem(path: str) -> str | None:
    """Why `path` is not a key imgtool can sign with unattended (one line), or None."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        return (f"sign={path}: {exc.strerror.lower()}: give the path of your PEM signing key (make one with "
                "imgtool keygen -k KEY.pem -t ecdsa-p256, and keep it off the repository)")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    if b"ENCRYPTED" in data[:200]:
        return (f"sign={path}: the key is encrypted (a password-protected PEM): imgtool would stop to ask for "
                "the password; sign with an unencrypted key (imgtool keygen without --password) kept off the repository")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        return f"sign={path}: the key is encrypted: imgtool would stop to ask for the password; use an unencrypted key"
    except (ValueError, Exception):
        kind = "a public key" if b"PUBLIC KEY" in data else "not a PEM private key"
        return (f"sign={path}: {kind}; MCUboot images are signed with a private key: RSA 2048/3072, "
                "ECDSA P-256/P-384 or Ed25519 (imgtool keygen -k KEY.pem -t ecdsa-p256)")
    ok = (isinstance(key, rsa.RSAPrivateKey) and key.key_size in (2048, 3072)
          or isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name in ("secp256r1", "secp384r1")
          or isinstance(key, ed25519.Ed25519PrivateKey))
    if not ok:
        return (f"sign={path}: a {type(key).__name__.lstrip('_')} MCUboot does not verify; use RSA 2048/3072, "
                "ECDSA P-256/P-384 or Ed25519 (imgtool keygen -k KEY.pem -t ecdsa-p256)")
    return None


def refusal(board: dict, key: str) -> str | None:
    """Why `scons board=X sign=KEY` cannot sign (one line), or None.  Checked before building."""
    name = board["name"]
    if board["os"] != "none":
        return (f"sign= makes an MCUboot image of bare-metal firmware: board {name} runs Linux "
                "(sign the executable or its package your own way)")
    if "slots" not in board:
        return (f"board {name} has no [slots] table (MCUboot's bootloader, primary and secondary slots): "
                "sign= is for a board laid out for MCUboot, e.g. rp2350-pico-plus2-mcuboot")
    if imgtool() is None:
        return f"sign= needs imgtool, which is not installed: {INSTALL}"
    return key_problem(key)


def sign_command(board: dict, key: str, code_image: str, out: str, version: str) -> list[str]:
    s = board["slots"]
    return imgtool() + ["sign", "--key", key, "--version", version, "--header-size", f"0x{s['header_bytes']:X}",
                        "--pad-header", "--slot-size", f"0x{s['primary']['length']:X}", "--align", str(s["align"]),
                        code_image, out]


def sign(board: dict, key: str, code_image: str, out: str, version: str) -> None:
    cmd = sign_command(board, key, code_image, out, version)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        lines = [ln.strip() for ln in (proc.stdout + "\n" + proc.stderr).splitlines() if ln.strip()]
        if os.path.exists(out):
            os.unlink(out)
        raise CactError(f"imgtool sign failed: {lines[-1] if lines else proc.returncode}")
