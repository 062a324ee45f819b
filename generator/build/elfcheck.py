"""Post-link checks of a firmware image, read with pyelftools.

After every link: a memory report (flash = code + rodata + `.cact`, RAM = data + bss with the
engine state and its KV cache called out, worst stack depth from GCC's call-graph info), the
`.cact` section's bytes hashed against the archive, no reference to malloc/calloc/realloc/free,
the board's budgets, and (bare metal) the bytes each memory region's image holds.  Any violation
raises CactError with the numbers and the remedy.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import struct
from dataclasses import dataclass, field

from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from generator.build import images
from generator.errors import CactError

HEAP_FUNCTIONS = ("malloc", "calloc", "realloc", "free", "aligned_alloc", "posix_memalign")


@dataclass
class Report:
    flash: dict = field(default_factory=dict)     # section name -> bytes
    ram: dict = field(default_factory=dict)
    cact_bytes: int = 0
    state_bytes: int | None = None
    kv_bytes: int = 0
    stack_bytes: int | None = None
    stack_path: list = field(default_factory=list)
    partition: bool = False        # the archive is a separately flashed image
    archive_file: int = 0          # placement file: bytes of the archive mapped at start
    flash_label: str = "flash"     # "package" where the board states package_flash_bytes
    loads: list = field(default_factory=list)    # bare metal: (region, load address, bytes) per image

    @property
    def flash_total(self) -> int:
        return sum(self.flash.values()) + self.cact_bytes

    @property
    def code_bytes(self) -> int:
        return sum(v for k, v in self.flash.items() if k.startswith(".text") or k in (".init", ".fini", ".plt"))

    @property
    def ram_total(self) -> int:
        """Static RAM, plus the deepest stack unless the image reserves its stack (.stack)."""
        reserved = ".stack" in self.ram
        return sum(self.ram.values()) + (0 if reserved else (self.stack_bytes or 0))

    def _ram_line(self) -> str:
        deepest = f"{self.stack_bytes:,}" if self.stack_bytes is not None else "n/a"
        if ".stack" in self.ram:
            rest = sum(v for k, v in self.ram.items() if k != ".stack")
            return (f"  RAM   {self.ram_total:>12,d} bytes = data+bss {rest:,} + stack reserved "
                    f"{self.ram['.stack']:,} (deepest call path uses {deepest})")
        return f"  RAM   {self.ram_total:>12,d} bytes = data+bss {sum(self.ram.values()):,} + stack {deepest}"

    def lines(self, board: str) -> list[str]:
        rodata = sum(self.flash.values()) - self.code_bytes
        if self.archive_file:
            flash = (f"  {self.flash_label:<5} {self.flash_total:>12,d} bytes = code {self.code_bytes:,} + "
                     f"rodata {rodata:,}; archive file {self.archive_file:,} bytes (--archive, mapped at start)")
        else:
            flash = (f"  {self.flash_label:<5} {self.flash_total:>12,d} bytes = code {self.code_bytes:,} + "
                     f"rodata {rodata:,} + {'archive partition' if self.partition else '.cact'} {self.cact_bytes:,}")
        out = [f"memory report ({board}):", flash, self._ram_line()]
        if self.state_bytes is not None:
            out.append(f"        engine state {self.state_bytes:,} bytes, of which KV cache {self.kv_bytes:,}")
        if self.stack_path:
            out.append(f"        worst stack path: {' > '.join(self.stack_path)}")
        for region, address, size in self.loads:
            out.append(f"  image {region:<8} at 0x{address:08X}: {size:,} bytes")
        return out


def _symbols(elf: ELFFile):
    for sec in elf.iter_sections():
        if isinstance(sec, SymbolTableSection):
            yield from sec.iter_symbols()


def worst_stack(obj_dir: str) -> tuple[int | None, list[str]]:
    """Deepest call chain from GCC's -fcallgraph-info=su files (.ci) under obj_dir."""
    files = glob.glob(os.path.join(obj_dir, "**", "*.ci"), recursive=True)
    if not files:
        return None, []
    size: dict[str, int] = {}
    edges: dict[str, set] = {}
    node_re = re.compile(r'node: \{ title: "([^"]+)" label: "([^"]*)"')
    edge_re = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')
    for f in files:
        text = open(f, encoding="utf-8", errors="replace").read()
        for title, label in node_re.findall(text):
            m = re.search(r"(\d+) bytes", label)
            size[title] = max(size.get(title, 0), int(m.group(1)) if m else 0)
        for a, b in edge_re.findall(text):
            edges.setdefault(a, set()).add(b)
    memo: dict[str, tuple[int, list[str]]] = {}

    def depth(node: str, seen: frozenset) -> tuple[int, list[str]]:
        if node in memo:
            return memo[node]
        best = (0, [])
        for nxt in edges.get(node, ()):
            if nxt in seen:       # recursion would make the depth unbounded
                raise CactError(f"recursion through {nxt}: stack depth is unbounded")
            cand = depth(nxt, seen | {nxt})
            if cand[0] > best[0]:
                best = cand
        memo[node] = (size.get(node, 0) + best[0], [node.split(":")[-1]] + best[1])
        return memo[node]

    roots = [n for n in size if n.split(":")[-1] in ("main", "Reset_Handler")] or list(size)
    best = max((depth(r, frozenset([r])) for r in roots), key=lambda x: x[0])
    return best


# MIPS .MIPS.abiflags (Elf_MIPS_ABIFlags_v0): version u16, isa_level, isa_rev, gpr_size,
# cpr1_size, cpr2_size, fp_abi (u8 each), then isa_ext, ases, flags1, flags2 (u32).
MIPS_FP_ABI = {0: "any", 1: "double-precision hard float", 2: "single-precision hard float",
               3: "soft float", 4: "hard float (MSA)", 5: "hard float (FR=1 64-bit)",
               6: "hard float (FR=0/1)", 7: "hard float (FR=1)"}
MIPS_FP_ABI_SOFT = 3
# Major opcodes (bits 31..26) of the MIPS32 instructions that touch the FPU: COP1, COP1X,
# LWC1, LDC1, SWC1, SDC1.  An FPU-less core (24Kc, 1004Kc) traps on every one of them.
MIPS_FPU_OPCODES = {0x11: "COP1", 0x13: "COP1X", 0x31: "LWC1", 0x35: "LDC1", 0x39: "SWC1", 0x3D: "SDC1"}


def expects_soft_float(board: dict) -> bool:
    """MIPS boards built for musl soft float (zig target `mips*-linux-musleabi`): their cores
    have no FPU and OpenWrt kernels do not emulate one."""
    return board.get("toolchain") == "zig" and board["zig_target"].startswith("mips") \
        and not board["zig_target"].endswith("hf")


def check_soft_float(elf: ELFFile, elf_path: str, board: dict) -> None:
    """Refuse a MIPS image with a hard-float ABI tag or any FPU instruction in its code."""
    flags = elf.get_section_by_name(".MIPS.abiflags")
    if flags is None:
        raise CactError(f"{elf_path} has no .MIPS.abiflags section: cannot tell its float ABI "
                        f"(board {board['name']} needs soft float)")
    fp_abi = flags.data()[7]
    if fp_abi != MIPS_FP_ABI_SOFT:
        raise CactError(f"{elf_path} is built for {MIPS_FP_ABI.get(fp_abi, f'FP ABI {fp_abi}')}, but "
                        f"board {board['name']}'s core has no FPU: build it soft-float "
                        f"(zig target {board['zig_target']})")
    word = struct.Struct("<I" if elf.little_endian else ">I")
    for sec in elf.iter_sections():
        if not sec["sh_flags"] & SH_FLAGS.SHF_EXECINSTR or sec["sh_type"] == "SHT_NOBITS":
            continue
        data = sec.data()
        for i, (w,) in enumerate(word.iter_unpack(data[:len(data) // 4 * 4])):
            op = MIPS_FPU_OPCODES.get(w >> 26)
            if op:
                raise CactError(f"{elf_path}: FPU instruction {op} (0x{w:08x}) at 0x{sec['sh_addr'] + 4 * i:x} "
                                f"in {sec.name}; board {board['name']}'s core has no FPU: build every "
                                "object soft-float")


def heap_references(path: str) -> list[str]:
    """Heap functions a relocatable object or an image names (defined or undefined)."""
    with open(path, "rb") as fh:
        names = {s.name.split("@")[0] for s in _symbols(ELFFile(fh))}
    return sorted(names & set(HEAP_FUNCTIONS))


def check(elf_path: str, archive_path: str, board: dict, obj_dir: str | None = None,
          objects: list[str] | None = None) -> Report:
    """Check a linked image.  With `objects` (the relocatable inputs of a statically linked
    Linux image, whose libc carries its own allocator), the no-heap rule applies to them."""
    rep = Report()
    if objects:
        for obj in objects:
            heap = heap_references(obj)
            if heap:
                raise CactError(f"{os.path.basename(obj)} references {', '.join(heap)}: needle-fw "
                                "engines must not use the heap")
    try:
        fh = open(elf_path, "rb")
    except OSError as exc:
        raise CactError(f"cannot read {elf_path}: {exc.strerror}") from None
    with fh:
        elf = ELFFile(fh)
        with open(archive_path, "rb") as af:
            want = af.read()
        cact = elf.get_section_by_name(".cact")
        if expects_soft_float(board):
            check_soft_float(elf, elf_path, board)
        if board["archive"]["placement"] == "file":
            # The executable maps the archive from a file at start: it must hold none of it.
            if cact is not None:
                raise CactError(f"{elf_path} links a .cact section, but board {board['name']} reads the "
                                "archive from a file (placement = file)")
            rep.archive_file = len(want)
        elif board["archive"]["placement"] == "partition":
            # The archive is flashed on its own: the image must point at the partition.
            if cact is not None:
                raise CactError(f"{elf_path} links a .cact section, but board {board['name']} keeps the "
                                "archive in a partition")
            origin = next(r["origin"] for r in board["memory"]["regions"] if r["use"] == "archive")
            sym = next((s for s in _symbols(elf) if s.name == "needle_cact"), None)
            if sym is None or sym["st_value"] != origin:
                got = "missing" if sym is None else f"0x{sym['st_value']:x}"
                raise CactError(f"needle_cact is {got}, not the archive partition at 0x{origin:x}")
            rep.cact_bytes = len(want)
            rep.partition = True
        else:
            if cact is None:
                raise CactError(f"{elf_path} has no .cact section: the archive was not linked in")
            if cact["sh_addr"] % 64:
                raise CactError(f".cact section is at 0x{cact['sh_addr']:x}, not 64-byte aligned")
            data = cact.data()
            sym = next((s for s in _symbols(elf) if s.name == "needle_cact"), None)
            if sym is not None and sym["st_size"]:
                # the symbol spans the archive; some assemblers (MIPS) pad the section after it
                start = sym["st_value"] - cact["sh_addr"]
                pad = data[start + sym["st_size"]:]
                if start != 0 or any(pad):
                    raise CactError(f".cact section holds {len(data) - sym['st_size']:,} bytes besides "
                                    "the archive, not all alignment padding")
                data = data[start:start + sym["st_size"]]
            if hashlib.sha256(data).digest() != hashlib.sha256(want).digest():
                first = next((i for i, (x, y) in enumerate(zip(data, want)) if x != y), min(len(data), len(want)))
                raise CactError(f".cact section ({len(data):,} bytes) differs from the archive "
                                f"({len(want):,} bytes) first at byte {first}: the image does not carry "
                                "the archive unchanged")
            rep.cact_bytes = len(data)
        for sec in elf.iter_sections():
            flags = sec["sh_flags"]
            if not flags & SH_FLAGS.SHF_ALLOC or sec.name == ".cact" or sec["sh_size"] == 0:
                continue
            if sec.name.startswith(".tbss") or sec.name.startswith(".tdata"):
                rep.ram[sec.name] = sec["sh_size"]
            elif flags & SH_FLAGS.SHF_WRITE:
                rep.ram[sec.name] = sec["sh_size"]
                if board["os"] == "none" and sec["sh_type"] != "SHT_NOBITS":
                    rep.flash[sec.name + " (load image)"] = sec["sh_size"]
            else:
                rep.flash[sec.name] = sec["sh_size"]
        if board["os"] == "none":     # what is flashed where (generator.build.images)
            rep.loads = [(r["name"], addr, len(data)) for r, addr, data in images.load_regions(elf, board)]
        heap = sorted({s.name.split("@")[0] for s in _symbols(elf) if s.name.split("@")[0] in HEAP_FUNCTIONS})
        if heap and not objects:
            raise CactError(f"the image references {', '.join(heap)}: needle-fw engines must not "
                            "use the heap (find the caller with `nm -u` / a linker map)")
        for s in _symbols(elf):     # the engine's two static objects (needle_model.c)
            if s["st_info"]["type"] == "STT_OBJECT" and s.name in ("st", "kv_cache", "cells"):
                if s.name == "kv_cache":
                    rep.kv_bytes = s["st_size"]
                rep.state_bytes = (rep.state_bytes or 0) + s["st_size"]
    if obj_dir:
        rep.stack_bytes, rep.stack_path = worst_stack(obj_dir)
    mem = board["memory"]
    if "package_flash_bytes" in mem:
        rep.flash_label = "package"
        if rep.flash_total > mem["package_flash_bytes"]:
            fix = ("keep the archive on USB storage or extroot (archive.placement = \"file\")"
                   if rep.cact_bytes else "use a board with more flash")
            raise CactError(f"package over budget on board {board['name']}: {rep.flash_total:,} bytes "
                            f"(code+rodata {rep.flash_total - rep.cact_bytes:,} + archive {rep.cact_bytes:,}) "
                            f"> package_flash_bytes {mem['package_flash_bytes']:,} (the flash OpenWrt leaves "
                            f"to it); {fix}")
    if rep.flash_total > mem["flash_bytes"]:
        raise CactError(f"flash over budget on board {board['name']}: {rep.flash_total:,} bytes "
                        f"(code+rodata {rep.flash_total - rep.cact_bytes:,} + archive "
                        f"{rep.cact_bytes:,}) > {mem['flash_bytes']:,}; use a smaller archive "
                        "(a shallower ladder rung) or a board with more flash")
    if rep.ram_total > mem["ram_bytes"]:
        raise CactError(f"RAM over budget on board {board['name']}: {rep.ram_total:,} bytes "
                        f"(KV cache {rep.kv_bytes:,}) > {mem['ram_bytes']:,}; pass a smaller "
                        "kv_window=N or use a shallower archive")
    return rep
