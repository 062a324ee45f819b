"""Small stand-in executables for the package tests: a static ELF32 with the identity of a
board's engine (machine, byte order, ABI flags, and for MIPS a soft-float .MIPS.abiflags),
so `generator.build.elfcheck.check_binary` takes it, without building anything.

Layout: the 52-byte ELF header, then the sections' contents (.text of `nop`s, on MIPS
.MIPS.abiflags, a .comment of filler bytes, .shstrtab), then the section header table.  No
program headers: nothing here is ever run (the end-to-end test packages the real build)."""

from __future__ import annotations

import struct

EM_MIPS, EM_ARM, EM_X86_64 = 8, 40, 62
SHT_PROGBITS, SHT_STRTAB, SHT_MIPS_ABIFLAGS = 1, 3, 0x7000002A
SHF_ALLOC, SHF_EXECINSTR = 0x2, 0x4
MIPS32R2_O32 = 0x70001000          # EF_MIPS_ARCH_32R2 | EF_MIPS_ABI_O32
ARM_EABI5_HARD, ARM_EABI5_SOFT = 0x05000400, 0x05000200
MIPS_FP_SOFT, MIPS_FP_DOUBLE = 3, 1


def executable(machine: int, little: bool, flags: int, fp_abi: int | None = None, e_type: int = 2,
               filler: int = 4001) -> bytes:
    """An ELF32 executable (e_type 2) of `machine`; `fp_abi`: a MIPS .MIPS.abiflags fp_abi
    (None: no such section); `filler`: bytes of a .comment section (odd: an odd file size)."""
    e = "<" if little else ">"
    text = b"\0" * 64                                   # nop on MIPS, andeq r0, r0, r0 on ARM
    sections = [(b".text", SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, text)]
    if fp_abi is not None:
        # Elf_MIPS_ABIFlags_v0: version, isa_level 32, isa_rev 2, gpr_size 1 (32-bit),
        # cpr1_size, cpr2_size, fp_abi; isa_ext, ases, flags1, flags2
        abiflags = struct.pack(e + "HBBBBBBIIII", 0, 32, 2, 1, 0 if fp_abi == MIPS_FP_SOFT else 1, 0,
                               fp_abi, 0, 0, 0, 0)
        sections.append((b".MIPS.abiflags", SHT_MIPS_ABIFLAGS, SHF_ALLOC, abiflags))
    sections.append((b".comment", SHT_PROGBITS, 0, bytes((i * 37 + 11) % 251 for i in range(filler))))
    names = b"\0" + b"".join(n + b"\0" for n, *_ in sections) + b".shstrtab\0"
    sections.append((b".shstrtab", SHT_STRTAB, 0, names))
    body, headers, offset = b"", [b"\0" * 40], 52
    for name, kind, flags_, data in sections:
        headers.append(struct.pack(e + "IIIIIIIIII", names.index(name + b"\0"), kind, flags_, 0, offset + len(body),
                                   len(data), 0, 0, 4 if kind != SHT_STRTAB else 1, 0))
        body += data
    shoff = 52 + len(body)
    ident = b"\x7fELF" + bytes([1, 1 if little else 2, 1, 0]) + b"\0" * 8
    header = ident + struct.pack(e + "HHIIIIIHHHHHH", e_type, machine, 1, 0, 0, shoff, flags, 52, 32, 0, 40,
                                 len(headers), len(headers) - 1)
    return header + body + b"".join(headers)


def for_board(board: dict) -> bytes:
    """A stand-in that fits a router board (its zig target: mipsel, mips or arm hard float)."""
    arch = board["zig_target"].split("-")[0]
    little = board["endianness"] == "little"
    if arch in ("mips", "mipsel"):
        return executable(EM_MIPS, little, MIPS32R2_O32, MIPS_FP_SOFT)
    if arch == "arm":
        return executable(EM_ARM, little, ARM_EABI5_HARD if board["zig_target"].endswith("hf") else ARM_EABI5_SOFT)
    raise ValueError(f"no stand-in for {board['name']} ({board['zig_target']})")
