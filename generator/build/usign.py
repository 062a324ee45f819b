"""Signing an OpenWrt feed's index as OpenWrt's `usign -S` does: Ed25519, in usign's files.

No library: Python has no Ed25519 in its standard library and the generator takes no
dependency for one signature per build, so the arithmetic of RFC 8032 (section 5.1) is here,
on Python integers: slow (tens of milliseconds a signature), which does not matter.

usign's files (openwrt/usign main.c; OpenBSD's signify reads and writes the same ones):
two text lines, `untrusted comment: ...` and the base64 of a packed structure.

    secret key   "Ed" "BK" kdfrounds(4, big-endian) salt(16) checksum(8) fingerprint(8) seckey(64)
    public key   "Ed" fingerprint(8) pubkey(32)
    signature    "Ed" fingerprint(8) signature(64)

seckey is the 32-byte Ed25519 seed followed by the public key; checksum is the first 8 bytes
of SHA-512(seckey).  usign has no passphrases: a key with kdfrounds other than 0 (signify -G
without -n) is refused.  The fingerprint is 8 random bytes chosen when the key is made; usign
names it as a 64-bit number in hex **without leading zeros** (`%PRIx64`), and that is the
file name opkg looks the public key up by in /etc/opkg/keys/ (fingerprint_name()).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from pathlib import Path

from generator.errors import CactError

# ---- Ed25519 (RFC 8032, 5.1), extended twisted Edwards coordinates ---------------------------

_P = 2 ** 255 - 19
_L = 2 ** 252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _add(p, q):
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a, b = (y1 - x1) * (y2 - x2) % _P, (y1 + x1) * (y2 + x2) % _P
    c, d = 2 * t1 * t2 * _D % _P, 2 * z1 * z2 % _P
    e, f, g, h = b - a, d - c, d + c, b + a
    return e * f % _P, g * h % _P, f * g % _P, e * h % _P


def _scalar_mult(s: int, p):
    q = (0, 1, 1, 0)                             # the neutral element
    while s:
        if s & 1:
            q = _add(q, p)
        p = _add(p, p)
        s >>= 1
    return q


def _x_of(y: int, sign: int) -> int:
    x2 = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P) % _P
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P:
        x = x * _SQRT_M1 % _P
    if x & 1 != sign:
        x = _P - x
    return x


_GY = 4 * pow(5, _P - 2, _P) % _P
_G = (_x_of(_GY, 0), _GY, 1, _x_of(_GY, 0) * _GY % _P)


def _encode(p) -> bytes:
    x, y, z, _ = p
    zi = pow(z, _P - 2, _P)
    x, y = x * zi % _P, y * zi % _P
    return (y | (x & 1) << 255).to_bytes(32, "little")


def _expand(seed: bytes) -> tuple[int, bytes]:
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little") & ((1 << 254) - 8) | (1 << 254)
    return a, h[32:]


def public_key(seed: bytes) -> bytes:
    """The 32-byte Ed25519 public key of a 32-byte seed."""
    return _encode(_scalar_mult(_expand(seed)[0], _G))


def sign(seed: bytes, message: bytes) -> bytes:
    """The 64-byte Ed25519 signature (R || S) of `message` with the key of `seed`."""
    a, prefix = _expand(seed)
    pub = _encode(_scalar_mult(a, _G))
    r = int.from_bytes(hashlib.sha512(prefix + message).digest(), "little") % _L
    big_r = _encode(_scalar_mult(r, _G))
    k = int.from_bytes(hashlib.sha512(big_r + pub + message).digest(), "little") % _L
    return big_r + ((r + k * a) % _L).to_bytes(32, "little")


# ---- usign's files ------------------------------------------------------------------------------

_SECRET_SIZE = 2 + 2 + 4 + 16 + 8 + 8 + 64
HOW_TO_MAKE = "make one with `usign -G -s KEY -p KEY.pub` or `signify-openbsd -G -n -s KEY -p KEY.pub`"


class SecretKey:
    def __init__(self, seed: bytes, fingerprint: bytes):
        self.seed, self.fingerprint = seed, fingerprint


def fingerprint_name(fingerprint: bytes) -> str:
    """The key's name as usign -F prints it and opkg looks it up in /etc/opkg/keys/: the 8
    bytes as one big-endian number in lower-case hex, without leading zeros."""
    return format(int.from_bytes(fingerprint, "big"), "x")


def read_secret_key(path: str) -> SecretKey:
    """usign's (or signify -n's) secret key file, checked; a one-line CactError otherwise."""
    bad = f"feed_key={path} is not a usign secret key"
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise CactError(f"cannot read feed_key={path}: {exc.strerror} ({HOW_TO_MAKE})") from None
    lines = text.split(b"\n")
    if len(lines) < 2 or not lines[0].startswith(b"untrusted comment: "):
        raise CactError(f"{bad}: its first line is not 'untrusted comment: ...' ({HOW_TO_MAKE})")
    try:
        blob = base64.b64decode(lines[1].strip(), validate=True)
    except (binascii.Error, ValueError):
        raise CactError(f"{bad}: its second line is not base64 ({HOW_TO_MAKE})") from None
    if len(blob) != _SECRET_SIZE or blob[:4] != b"EdBK":
        raise CactError(f"{bad}: expected {_SECRET_SIZE} bytes starting 'EdBK' (a public key or a "
                        f"signature given instead?) ({HOW_TO_MAKE})")
    rounds = int.from_bytes(blob[4:8], "big")
    checksum, fingerprint, seckey = blob[24:32], blob[32:40], blob[40:104]
    if rounds:
        raise CactError(f"feed_key={path} is protected by a passphrase, which usign cannot read: "
                        f"{HOW_TO_MAKE} (signify: -n)")
    if hashlib.sha512(seckey).digest()[:8] != checksum:
        raise CactError(f"{bad}: its checksum does not match (a damaged file) ({HOW_TO_MAKE})")
    if public_key(seckey[:32]) != seckey[32:]:
        raise CactError(f"{bad}: its public half is not the seed's ({HOW_TO_MAKE})")
    return SecretKey(seckey[:32], fingerprint)


def signature_file(key: SecretKey, message: bytes) -> bytes:
    """The text of `<message>.sig` as `usign -S` writes it."""
    blob = b"Ed" + key.fingerprint + sign(key.seed, message)
    return (f"untrusted comment: signed by key {fingerprint_name(key.fingerprint)}\n".encode()
            + base64.b64encode(blob) + b"\n")


def public_key_file(key: SecretKey) -> bytes:
    """The public key file (`usign -G`'s KEY.pub) of a secret key: what goes on the router."""
    blob = b"Ed" + key.fingerprint + public_key(key.seed)
    return (f"untrusted comment: public key {fingerprint_name(key.fingerprint)}\n".encode()
            + base64.b64encode(blob) + b"\n")
