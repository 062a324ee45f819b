"""Signing an OpenWrt feed's index as OpenWrt's `usign -S` does: Ed25519, in usign's files.

The Ed25519 arithmetic is the `cryptography` package's (OpenSSL underneath: constant-time,
kept by people who do nothing else), imported only when a feed is signed: the `signing` extra
(`pip install 'needle-fw[signing]'`); ./setup's requirements-test.txt brings it for the tests.

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

# ---- Ed25519 (RFC 8032), through the cryptography package ----------------------------------

def _private_key(seed: bytes):
    try:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    except ImportError:
        raise CactError("signing a feed (feed_key=) needs the cryptography package: "
                        "pip install 'needle-fw[signing]' (or pip install cryptography)") from None
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_key(seed: bytes) -> bytes:
    """The 32-byte Ed25519 public key of a 32-byte seed."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    return _private_key(seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def sign(seed: bytes, message: bytes) -> bytes:
    """The 64-byte Ed25519 signature (R || S) of `message` with the key of `seed`."""
    return _private_key(seed).sign(message)


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
