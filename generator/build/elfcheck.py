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
import platform
import re
import struct
from dataclasses import dataclass, field

from elftools.common.exceptions import ELFError
from elftools.construct import ConstructError
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from generator.build import boards, images
from generator.errors import CactError

HEAP_FUNCTIONS = ("malloc", "calloc", "realloc", "free", "aligned_alloc", "posix_memalign")
#: The engine's state objects (needle_model.c): the sequence state, the KV rings, the probe
#: heads' cells, and the prefill pass's per-token vectors and attention scratch.
PREFILL_OBJECTS = ("tok", "pass_scores", "pass_query")
STATE_OBJECTS = ("st", "work", "kv_cache", "cells") + PREFILL_OBJECTS


@dataclass
class Report:
    flash: dict = field(default_factory=dict)     # section name -> bytes
    ram: dict = field(default_factory=dict)
    cact_bytes: int = 0
    state_bytes: int | None = None
    kv_bytes: int = 0
    prefill_bytes: int = 0             # the prefill pass's per-token vectors (tok, pass_scores, pass_query)
    prefix_bytes: int = 0          # the built-in tools' prefix snapshot (needle_prefix), in rodata
    stack_bytes: int | None = None   # deepest call path (bare metal: own code + library)
    stack_path: list = field(default_factory=list)
    stack: "StackFigure | None" = None   # bare metal: the figure behind stack_bytes
    stack_own_only: int | None = None    # bare metal: the deepest path counting own code only
    stack_reserve: int = 0               # bare metal: exception frames + interrupt handler
    stack_handler: int = 0               # bare metal: of which the interrupt handler's path
    stack_guard: str = ""                # bare metal: the guard, in words
    fault_stack: tuple | None = None     # bare metal: (fault stack bytes, fault_dump's deepest path)
    partition: bool = False        # the archive is a separately flashed image
    archive_file: int = 0          # placement file: bytes of the archive mapped at start
    flash_label: str = "flash"     # "package" where the board states package_flash_bytes
    loads: list = field(default_factory=list)    # bare metal: (region, load address, bytes) per image
    addresses: dict = field(default_factory=dict)  # section name -> address (the memory map's regions)

    @property
    def flash_total(self) -> int:
        return sum(self.flash.values()) + self.cact_bytes

    @staticmethod
    def is_code(section: str) -> bool:
        """A flash section the report counts as code (the rest of flash is rodata)."""
        return section.startswith(".text") or section in (".init", ".fini", ".plt")

    @property
    def code_bytes(self) -> int:
        return sum(v for k, v in self.flash.items() if self.is_code(k))

    @property
    def rodata_bytes(self) -> int:
        """Flash that is not code: read-only data (and, bare metal, .data's load image)."""
        return sum(self.flash.values()) - self.code_bytes

    @property
    def ram_total(self) -> int:
        """Static RAM, plus the deepest stack unless the image reserves its stack (.stack)."""
        reserved = ".stack" in self.ram
        return sum(self.ram.values()) + (0 if reserved else (self.stack_bytes or 0))

    def _ram_line(self) -> str:
        deepest = f"{self.stack_bytes:,}" if self.stack_bytes is not None else "n/a"
        if ".stack" in self.ram:
            below = {".stack_guard": "guard", ".fault_stack": "fault stack"}
            rest = sum(v for k, v in self.ram.items() if k not in (".stack", ".heap") and k not in below)
            extra = "".join(f" + {label} {self.ram[k]:,}" for k, label in below.items() if k in self.ram)
            # heap_bytes (board file): the C library's heap of a program on the board support
            heap = f" + heap {self.ram['.heap']:,}" if ".heap" in self.ram else ""
            if self.stack is not None and self.stack.bytes is not None:
                deepest += f": own code {self.stack.own:,} + library {self.stack.library:,}"
            return (f"  RAM   {self.ram_total:>12,d} bytes = data+bss {rest:,}{heap} + stack reserved "
                    f"{self.ram['.stack']:,}{extra} (deepest call path uses {deepest})")
        own = " (deepest own-code call path; the C library not counted)" if self.stack_bytes is not None else ""
        return f"  RAM   {self.ram_total:>12,d} bytes = data+bss {sum(self.ram.values()):,} + stack {deepest}{own}"

    def lines(self, board: str) -> list[str]:
        rodata = self.rodata_bytes
        if self.archive_file:
            flash = (f"  {self.flash_label:<5} {self.flash_total:>12,d} bytes = code {self.code_bytes:,} + "
                     f"rodata {rodata:,}; archive file {self.archive_file:,} bytes (--archive, mapped at start)")
        else:
            flash = (f"  {self.flash_label:<5} {self.flash_total:>12,d} bytes = code {self.code_bytes:,} + "
                     f"rodata {rodata:,} + {'archive partition' if self.partition else '.cact'} {self.cact_bytes:,}")
        out = [f"memory report ({board}):", flash, self._ram_line()]
        if self.state_bytes is not None:
            out.append(f"        engine state {self.state_bytes:,} bytes, of which KV cache {self.kv_bytes:,}"
                       + (f" and the prefill pass {self.prefill_bytes:,}" if self.prefill_bytes else ""))
        if self.prefix_bytes:
            out.append(f"        of rodata, prefix snapshot {self.prefix_bytes:,} bytes (docs/snapshot.md)")
        if self.stack_path:
            libs = self.stack.library_functions if self.stack else []
            out.append(f"        worst stack path: {' > '.join(self.stack_path)}"
                       + (f" (library: {', '.join(libs)})" if libs else ""))
        if self.stack is not None and self.stack.bytes is not None:
            frames = self.stack_reserve - self.stack_handler
            reserve = (f"reserve: {EXCEPTION_RESERVE_FRAMES} FP exception frames {frames:,} + an interrupt "
                       f"handler's path {self.stack_handler:,}" if self.stack_reserve else
                       "no reserve: a trap stacks nothing and its handler has its own stack")
            out.append(f"        stack budget: deepest path {self.stack.bytes:,} + exception reserve "
                       f"{self.stack_reserve:,} = {self.stack.bytes + self.stack_reserve:,} of "
                       f"{self.ram.get('.stack', 0):,} ({reserve}; own code alone: {self.stack_own_only:,})")
            for note in self.stack.notes:
                out.append(f"        stack note: {note}")
        if self.stack_guard:
            out.append(f"        stack guard: {self.stack_guard}")
        for region, address, size in self.loads:
            out.append(f"  image {region:<8} at 0x{address:08X}: {size:,} bytes")
        return out


def _symbols(elf: ELFFile):
    for sec in elf.iter_sections():
        if isinstance(sec, SymbolTableSection):
            yield from sec.iter_symbols()


# --- Worst stack depth -------------------------------------------------------------------
#
# Own code: GCC's -fcallgraph-info=su (.ci files): each function's frame and its direct calls.
# Library code (newlib's libc/libm, libgcc: no .ci node with a size): on bare metal, its frame
# from the linked image's disassembly (`<toolchain_prefix>objdump -d`), recursively through
# what it calls.  Indirect calls (GCC's __indirect_call node, a `blx rN` in a library
# function) are bounded by the deepest function whose address the image takes (a literal
# pool word, a movw/movt pair or a word of initialised data equal to it, outside the vector
# table): only those can be called through a pointer.

# Exception-frame reserve of the stack budget (bare metal): an interrupt (SysTick: the
# --bench timer) and a fault taken on top of it each stack the extended frame with FP state,
# 26 words, plus one word of 8-byte alignment padding: 2 x 108 bytes; plus the interrupt
# handler's own frames (the deepest exception handler in the image).  The fault handler
# itself runs on its own stack (startup.c), checked against its own budget.
EXCEPTION_FRAME_BYTES = (26 + 1) * 4
EXCEPTION_RESERVE_FRAMES = 2
ENTRY_POINTS = ("Reset_Handler", "main")
FAULT_ENTRY = "fault_dump"          # startup.c's fault handler body (Fault_Handler is naked)


@dataclass
class StackFigure:
    """The deepest call path: its bytes (own code + library), and the functions on it."""
    bytes: int | None = None
    own: int = 0
    library: int = 0
    path: list = field(default_factory=list)
    library_functions: list = field(default_factory=list)   # the path's library functions
    notes: list = field(default_factory=list)               # recursion, unbounded frames


@dataclass
class Disassembly:
    """Per function of a linked image: its frame (bytes its prologue and body take off SP),
    what it calls, whether it calls through a register, and the address-taken functions."""
    frame: dict = field(default_factory=dict)       # name -> bytes
    callees: dict = field(default_factory=dict)     # name -> set of names
    indirect: set = field(default_factory=set)      # names with a blx/bx through a register
    dynamic: set = field(default_factory=set)       # names that move SP by a register amount
    address_taken: set = field(default_factory=set)
    movw_taken: set = field(default_factory=set)     # of those, the ones a movw/movt pair loads
    pool_words: set = field(default_factory=set)     # literal-pool words (addresses or numbers)


_REGLIST_RE = re.compile(r"\{([^}]*)\}")


def _reglist_bytes(operands: str) -> int:
    """Bytes a register list ({r4, r5, lr}, {r4-r7}, {d8-d11}, {s16-s17}) takes on the stack."""
    m = _REGLIST_RE.search(operands)
    if not m:
        return 0
    total = 0
    for item in (x.strip() for x in m.group(1).split(",") if x.strip()):
        size = 8 if item.startswith("d") else 4
        lo, _, hi = item.partition("-")
        if hi:
            total += size * (int(re.sub(r"\D", "", hi)) - int(re.sub(r"\D", "", lo)) + 1)
        else:
            total += size
    return total


def frame_delta(mnemonic: str, operands: str) -> int | None:
    """Bytes one Thumb-2 instruction (objdump's spelling) moves SP down: 0 if none, None if
    by a register amount (a variable-length array or alloca: unbounded).
      push / stmdb sp! / vpush / vstmdb sp!        4 per core register, 8 per d, 4 per s
      sub sp, #N  sub.w sp, sp, #N  subw sp, sp, #N
      str / str.w / strd / vstr ..., [sp, #-N]!    pre-indexed with writeback"""
    op = mnemonic.split(".")[0]
    ops = operands.replace(" ", "")
    if op in ("push", "vpush") or (op in ("stmdb", "stmfd", "vstmdb", "vstmfd") and ops.startswith("sp!")):
        return _reglist_bytes(operands)
    if op in ("sub", "subw") and (ops.startswith("sp,#") or ops.startswith("sp,sp,")):
        arg = ops.split(",")[-1]
        if not arg.startswith("#"):
            return None
        return int(arg[1:].split("@")[0], 0)
    m = re.search(r"\[sp,#-(\d+)\]!", ops)
    if m and op in ("str", "strd", "strh", "strb", "vstr"):
        return int(m.group(1))
    return 0


_FUNC_RE = re.compile(r"^([0-9a-f]+) <([^>]+)>:$")
_INSN_RE = re.compile(r"^\s+([0-9a-f]+):\t(\S+)(?:\t(.*))?$")
_TARGET_RE = re.compile(r"^[0-9a-f]+ <([^>+]+)>$")
_BRANCH_RE = re.compile(r"^b(l|eq|ne|cs|cc|hs|lo|mi|pl|vs|vc|hi|ls|ge|lt|gt|le|al)?(\.[nw])?$")


def _instructions(text: str, d: Disassembly, starts: dict | None = None):
    """The instructions of `objdump -d --no-show-raw-insn` output, as (function, mnemonic, the
    rest of the line); each function gets its entry in d.frame and d.callees (and its start
    address in `starts`) when its header passes."""
    name = None
    for line in text.splitlines():
        m = _FUNC_RE.match(line)
        if m:
            name = m.group(2)
            if starts is not None:
                starts[int(m.group(1), 16)] = name
            d.frame.setdefault(name, 0)
            d.callees.setdefault(name, set())
            continue
        m = _INSN_RE.match(line)
        if m and name is not None:
            yield name, m.group(2), m.group(3) or ""


def parse_disassembly(text: str, skip_words: set | None = None) -> Disassembly:
    """Read `objdump -d --no-show-raw-insn` output of a Thumb image.  A function's frame is
    the sum of every SP decrement in its body (conservative where two paths each push
    their own); its callees are the functions its bl and its branches to another function's
    first instruction (tail calls) name."""
    d = Disassembly()
    words: set = set()              # literal-pool words
    movw_words: set = set()         # movw/movt values
    starts: dict = {}               # function start address -> name
    movw: dict = {}
    for name, mnemonic, rest in _instructions(text, d, starts):
        operands = rest.split("\t")[0].split(";")[0].strip()
        if mnemonic == ".word":
            words.add(int(operands.split()[0], 0))
            continue
        if mnemonic.startswith("movw") or mnemonic.startswith("movt"):
            reg, _, imm = operands.partition(",")
            value = int(imm.strip().lstrip("#").split()[0], 0) if imm.strip().startswith("#") else None
            if value is not None:
                if mnemonic.startswith("movw"):   # an address needs its movt: GCC emits the pair
                    movw[reg] = value               # (a lone movw #513 is a number, not &f at 0x200)
                elif reg in movw:
                    movw_words.add((value << 16) | movw[reg])
            continue
        delta = frame_delta(mnemonic, operands)
        if delta is None:
            d.dynamic.add(name)
        else:
            d.frame[name] += delta
        if mnemonic.startswith("blx") or (mnemonic.startswith("bx") and operands != "lr"):
            if not _TARGET_RE.match(operands):
                d.indirect.add(name)
            continue
        if _BRANCH_RE.match(mnemonic):
            t = _TARGET_RE.match(operands)
            # a branch to its own first instruction is a loop, a bl to it is recursion
            if t and (t.group(1) != name or mnemonic.startswith("bl")):
                d.callees[name].add(t.group(1))
    words -= skip_words or set()
    d.pool_words = words
    d.movw_taken = {starts[w & ~1] for w in movw_words if w & 1 and (w & ~1) in starts}
    d.address_taken = {starts[w & ~1] for w in words if w & 1 and (w & ~1) in starts} | d.movw_taken
    return d


_RV_TARGET_RE = re.compile(r"([0-9a-f]+) <([^>+]+)>")
# RV32 jumps and branches (objdump's spelling): jal (a call, or `j` when it links nothing) and
# the conditional branches, whose target objdump names; jalr/jr through a register.
_RV_BRANCHES = ("beq", "bne", "blt", "bge", "bltu", "bgeu", "beqz", "bnez", "blez", "bgez", "bltz", "bgtz",
                "bgt", "ble", "bgtu", "bleu")


def rv_frame_delta(mnemonic: str, operands: str) -> int | None:
    """Bytes one RISC-V instruction (objdump's spelling) moves SP down: 0 if none, None if by a
    register amount (alloca, or a frame too large for one immediate: `add sp, sp, t0`).
      addi sp,sp,-N   (c.addi16sp and c.addi are printed so too)"""
    ops = operands.replace(" ", "")
    if mnemonic in ("addi", "c.addi16sp", "c.addi") and ops.startswith("sp,sp,-"):
        return int(ops.split(",")[2][1:], 0)
    if mnemonic in ("add", "sub", "c.add", "c.sub", "mv", "c.mv") and ops.startswith("sp,"):
        return None
    return 0


def parse_disassembly_riscv(text: str) -> Disassembly:
    """Read `objdump -d --no-show-raw-insn` output of an RV32 image: a function's frame is the
    sum of every SP decrement in its body; its callees are what its jal (call), j (tail call)
    and branches to another function's first instruction name, and an auipc/jalr call pair's
    target (objdump names it in a comment).  A jalr or jr through a register other than ra
    is an indirect call."""
    d = Disassembly()
    for name, mnemonic, rest in _instructions(text, d):
        operands, _, comment = rest.partition("#")
        operands = operands.strip()
        delta = rv_frame_delta(mnemonic, operands)
        if delta is None:
            d.dynamic.add(name)
        else:
            d.frame[name] += delta
        if mnemonic in ("jal", "j", "c.jal", "c.j") or mnemonic in _RV_BRANCHES:
            t = _RV_TARGET_RE.search(operands)
            if t and (t.group(2) != name or mnemonic in ("jal", "c.jal")):
                d.callees[name].add(t.group(2))
        elif mnemonic in ("jalr", "jr", "c.jalr", "c.jr"):
            t = _RV_TARGET_RE.search(comment)      # auipc + jalr: the call's target
            if t:
                if t.group(2) != name:
                    d.callees[name].add(t.group(2))
            elif operands not in ("ra", "0(ra)", "zero,0(ra)"):   # `jr ra` is a return
                d.indirect.add(name)
    return d


# ARM relocations that store a symbol's address in data or a literal pool (R_ARM_ABS32,
# R_ARM_TARGET1), as opposed to calls and branches.
_ADDRESS_RELOCS = (2, 38)
# RISC-V relocations that take an address: a word of data (R_RISCV_32) and the upper half of
# an absolute or PC-relative address loaded in code (R_RISCV_HI20, R_RISCV_PCREL_HI20: `la`,
# `lui`), as opposed to calls (R_RISCV_CALL) and branches.
_RV_ADDRESS_RELOCS = (1, 23, 26)


def _loaded_relocations(elf: ELFFile):
    """(relocation sections of the loaded image's sections, as (section relocated, its
    relocation section) pairs, or None when the link kept none (-Wl,--emit-relocs)).  Debug
    information names functions too: only sections the image loads count."""
    from elftools.elf.relocation import RelocationSection
    pairs = [(elf.get_section(sec["sh_info"]), sec) for sec in elf.iter_sections()
             if isinstance(sec, RelocationSection)]
    pairs = [(target, sec) for target, sec in pairs if target["sh_flags"] & SH_FLAGS.SHF_ALLOC]
    return pairs or None


def _relocated_targets_riscv(elf: ELFFile, starts: dict) -> set | None:
    """RISC-V: the functions an address-taking relocation points at (symbol + addend), outside
    .vectors (the entry takes the trap handler's address, which runs on its own stack).  None
    when the image kept no relocations (-Wl,--emit-relocs)."""
    pairs = _loaded_relocations(elf)
    symtab = elf.get_section_by_name(".symtab")
    if pairs is None:
        return None
    taken = set()
    for target, sec in pairs:
        if target.name == ".vectors" or symtab is None:
            continue
        for rel in sec.iter_relocations():
            if rel["r_info_type"] in _RV_ADDRESS_RELOCS:
                value = symtab.get_symbol(rel["r_info_sym"])["st_value"] + rel["r_addend"]
                if value in starts:
                    taken.add(starts[value])
    return taken


def _relocated_addresses(elf: ELFFile, starts: dict) -> set | None:
    """Functions whose address a word of the loaded image holds by relocation, read from the
    relocations the link keeps (-Wl,--emit-relocs: generator.build.flags).  Exact: numbers
    that merely equal an address (tokenizer tables, packed weights) are not pointers.  The
    vector table does not make its handlers callable through a pointer.  None when the image
    kept no relocations."""
    pairs = _loaded_relocations(elf)
    if pairs is None:
        return None
    taken = set()
    for target, sec in pairs:
        if target.name == ".vectors" or target["sh_type"] == "SHT_NOBITS":
            continue
        data = target.data()
        for rel in sec.iter_relocations():
            off = rel["r_offset"] - target["sh_addr"]
            if rel["r_info_type"] in _ADDRESS_RELOCS and 0 <= off <= len(data) - 4:
                (w,) = struct.unpack_from("<I", data, off)
                if w & 1 and (w & ~1) in starts:
                    taken.add(starts[w & ~1])
    return taken


def disassemble(elf_path: str, objdump: str) -> Disassembly:
    """Disassemble a linked Thumb or RV32 image with the board's objdump."""
    import subprocess
    try:
        proc = subprocess.run([objdump, "-d", "--no-show-raw-insn", elf_path], capture_output=True, text=True)
    except OSError as exc:
        raise CactError(f"cannot run {objdump} (the worst-stack figure reads the image's "
                        f"disassembly): {exc.strerror}; install the board's toolchain_package") from None
    if proc.returncode:
        raise CactError(f"{objdump} -d {elf_path} failed: {proc.stderr.strip().splitlines()[-1:]}")
    starts = _function_starts(elf_path)
    with open(elf_path, "rb") as fh:
        elf = ELFFile(fh)
        if elf["e_machine"] == "EM_RISCV":
            d = parse_disassembly_riscv(proc.stdout)
            taken = _relocated_targets_riscv(elf, starts)
            if taken is None:
                raise CactError(f"{elf_path} kept no relocations: link it with -Wl,--emit-relocs "
                                "(generator/build/flags.py) for the worst-stack figure")
            d.address_taken = taken
            return d
        d = parse_disassembly(proc.stdout)
        relocated = _relocated_addresses(elf, starts)
        if relocated is not None:  # exact: what relocations store, and movw/movt pairs
            d.address_taken = relocated | d.movw_taken
            return d
        # no relocations kept: every word of initialised data or a literal pool equal to a
        # function's address takes it; the vector table (.vectors) does not make its handlers
        # callable through a pointer
        skip, data_words = set(), set()
        for sec in elf.iter_sections():
            if sec.name == ".vectors":
                skip |= {w for (w,) in struct.iter_unpack("<I", sec.data()[:sec["sh_size"] // 4 * 4])}
            elif sec.name in (".data", ".rodata") and sec["sh_type"] != "SHT_NOBITS":
                data = sec.data()
                data_words |= {w for (w,) in struct.iter_unpack("<I", data[:len(data) // 4 * 4])}
    d.address_taken = d.movw_taken | {starts[w & ~1] for w in (d.pool_words | data_words) - skip
                                      if w & 1 and (w & ~1) in starts}
    return d


def _function_starts(elf_path: str) -> dict:
    with open(elf_path, "rb") as fh:
        return {s["st_value"] & ~1: s.name for s in _symbols(ELFFile(fh))
                if s["st_info"]["type"] == "STT_FUNC" and s["st_value"]}


def _read_callgraph(obj_dir: str) -> tuple[dict, dict]:
    """({title: frame bytes} of the functions our objects define, {title: callee titles})."""
    size: dict[str, int] = {}
    edges: dict[str, set] = {}
    node_re = re.compile(r'node: \{ title: "([^"]+)" label: "([^"]*)"')
    edge_re = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')
    for f in sorted(glob.glob(os.path.join(obj_dir, "**", "*.ci"), recursive=True)):
        text = open(f, encoding="utf-8", errors="replace").read()
        for title, label in node_re.findall(text):
            m = re.search(r"(\d+) bytes", label)
            if m:
                size[title] = max(size.get(title, 0), int(m.group(1)))
        for a, b in edge_re.findall(text):
            edges.setdefault(a, set()).add(b)
    return size, edges


def _short(title: str) -> str:
    return title.split(":")[-1]


def worst_stack(obj_dir: str, disasm: Disassembly | None = None, roots=ENTRY_POINTS) -> StackFigure:
    """Deepest call chain from `roots`: own code from GCC's call-graph info (.ci) under
    obj_dir; with `disasm` (bare metal) library functions too, else they count 0 bytes.
    Recursion in own code is refused (unbounded); in library code it is counted once and
    noted."""
    size, edges = _read_callgraph(obj_dir)
    if not size:
        return StackFigure()
    own_titles: dict[str, list] = {}
    for title in size:
        own_titles.setdefault(_short(title), []).append(title)
    fig = StackFigure()
    memo: dict = {}
    indirect_key = ("indirect", "")

    def node(name_or_title: str) -> tuple:
        """("own", title) or ("lib", name)."""
        if name_or_title in size:
            return ("own", name_or_title)
        titles = own_titles.get(_short(name_or_title))
        if titles:
            return ("own", max(titles, key=lambda t: size[t]))
        if name_or_title == "__indirect_call":
            return indirect_key
        return ("lib", name_or_title)

    def successors(key: tuple) -> set:
        kind, name = key
        if kind == "own":
            out = {node(t) for t in edges.get(name, ())}
            if disasm is not None:     # libcalls GCC adds after its call graph (__aeabi_*)
                out |= {node(t) for t in disasm.callees.get(_short(name), ())
                        if not own_titles.get(t)}
            return out
        if kind == "lib":
            if disasm is None:
                return set()
            out = {node(t) for t in disasm.callees.get(name, ())}
            if name in disasm.indirect:
                out.add(indirect_key)
            return out
        # indirect call: any function whose address is taken
        return {node(t) for t in (disasm.address_taken if disasm else ())}

    def frame(key: tuple) -> int:
        kind, name = key
        if kind == "own":
            return size[name]
        if kind == "lib" and disasm is not None:
            if name in disasm.dynamic:
                fig.notes.append(f"{name} moves SP by a register amount (not counted)")
            return disasm.frame.get(name, 0)
        return 0

    def depth(key: tuple, path: tuple) -> tuple:
        if key in memo:
            return memo[key]
        best = (0, 0, [], [])          # total, library part, names, library names
        # sorted: of two equally deep paths the report and every later call name the same
        # one (a set's order changes with each process's string hashing)
        for nxt in sorted(successors(key)):
            if nxt in path:            # recursion would make the depth unbounded
                if nxt[0] == "own" and key[0] == "own":
                    raise CactError(f"recursion through {_short(nxt[1])}: stack depth is unbounded")
                note = f"recursion through {_short(nxt[1]) or 'an indirect call'} (counted once)"
                if note not in fig.notes:
                    fig.notes.append(note)
                continue
            cand = depth(nxt, path + (nxt,))
            if cand[0] > best[0]:
                best = cand
        own = frame(key)
        label = {"own": _short(key[1]), "lib": key[1], "indirect": "(indirect call)"}[key[0]]
        lib = own if key[0] == "lib" else 0
        result = (own + best[0], lib + best[1], [label] + best[2],
                  ([label] if key[0] == "lib" else []) + best[3])
        if key[0] != "indirect":
            memo[key] = result
        return result

    starts = [("own", t) for t in size if _short(t) in roots] or [("own", t) for t in size]
    total, lib, path, libs = max((depth(r, (r,)) for r in starts), key=lambda x: x[0])
    fig.bytes, fig.library, fig.own, fig.path, fig.library_functions = total, lib, total - lib, path, libs
    return fig


def largest_frame(obj_dir: str, disasm: Disassembly) -> tuple[int, str]:
    """(bytes, name) of the largest single frame in the image: own code (.ci) or library."""
    size, _ = _read_callgraph(obj_dir)
    frames = dict(disasm.frame)
    frames.update({_short(t): v for t, v in size.items()})     # GCC's own figures where it has them
    name = max(frames, key=lambda n: frames[n])
    return frames[name], name


def _section_sizes(elf_path: str) -> dict:
    with open(elf_path, "rb") as fh:
        return {sec.name: sec["sh_size"] for sec in ELFFile(fh).iter_sections()}


def check_stack(rep: Report, elf_path: str, board: dict, obj_dir: str) -> None:
    """Bare metal: the deepest call path with library functions, the stack budget, the guard
    against the largest frame, the fault handler's stack.  Fills rep; CactError (one line)
    when the stack or the fault stack is too small."""
    disasm = disassemble(elf_path, board["toolchain_prefix"] + "objdump")
    fig = worst_stack(obj_dir, disasm)
    if fig.bytes is None:
        return
    rep.stack, rep.stack_bytes, rep.stack_path = fig, fig.bytes, fig.path
    rep.stack_own_only = worst_stack(obj_dir).bytes
    # an interrupt handler may be any function whose address the image takes (bench_mcu.c
    # installs its SysTick handler at run time).  RISC-V: no reserve at all.  A trap stacks
    # nothing, the image enables no interrupt (bench_mcu.c reads minstret), and the one trap
    # handler (startup_riscv.c) runs on its own stack.
    riscv = boards.board_arch(board).startswith("riscv")
    handler = worst_stack(obj_dir, disasm, roots=tuple(sorted(disasm.address_taken))).bytes \
        if disasm.address_taken and not riscv else 0
    frames = 0 if riscv else EXCEPTION_RESERVE_FRAMES * EXCEPTION_FRAME_BYTES
    rep.stack_reserve = frames + (handler or 0)
    rep.stack_handler = handler or 0
    sections = _section_sizes(elf_path)
    stack, guard = sections.get(".stack", 0), sections.get(".stack_guard", 0)
    need = fig.bytes + rep.stack_reserve
    if need > stack:
        raise CactError(f"stack over budget on board {board['name']}: the deepest call path uses "
                        f"{fig.bytes:,} bytes ({' > '.join(fig.path[-3:])}) + {rep.stack_reserve:,} "
                        f"exception reserve = {need:,} > stack_bytes {stack:,}; raise stack_bytes in "
                        f"boards/{board['name']}.toml to at least {-(-need // 1024) * 1024:,}")
    big, big_name = largest_frame(obj_dir, disasm)
    from generator.codegen.pipeline import stack_guard_kind
    if guard:
        unit = {"pmp": "PMP"}.get(stack_guard_kind(board), "MPU")
        if big > guard:
            raise CactError(f"{big_name}'s stack frame ({big:,} bytes) is larger than board "
                            f"{board['name']}'s {guard:,}-byte {unit} stack guard: an overflow in it could "
                            "step over the guard; make the frame smaller (static buffers)")
        rep.stack_guard = (f"{unit} region, {guard:,} bytes below the stack (no access; the largest "
                           f"frame, {big_name}, takes {big:,})")
    else:
        rep.stack_guard = {"msplim": "MSPLIM at the stack's bottom (the core's stack-limit check)"}.get(
            stack_guard_kind(board), "none on this core")
    fault = sections.get(".fault_stack", 0)
    if fault:
        used = worst_stack(obj_dir, disasm, roots=(FAULT_ENTRY,)).bytes or 0
        rep.fault_stack = (fault, used)
        if used > fault:
            raise CactError(f"the fault handler's stack is too small on board {board['name']}: "
                            f"{FAULT_ENTRY} uses {used:,} bytes > {fault:,} (FAULT_STACK_BYTES in "
                            "generator/codegen/pipeline.py)")
        rep.stack_guard += f"; the fault handler runs on its own {fault:,}-byte stack ({FAULT_ENTRY} uses {used:,})"


# MIPS .MIPS.abiflags (Elf_MIPS_ABIFlags_v0): version u16, isa_level, isa_rev, gpr_size,
# cpr1_size, cpr2_size, fp_abi (u8 each), then isa_ext, ases, flags1, flags2 (u32).
MIPS_FP_ABI = {0: "any", 1: "double-precision hard float", 2: "single-precision hard float",
               3: "soft float", 4: "hard float (MSA)", 5: "hard float (FR=1 64-bit)",
               6: "hard float (FR=0/1)", 7: "hard float (FR=1)"}
MIPS_FP_ABI_SOFT = 3
# Major opcodes (bits 31..26) of the MIPS32 instructions that touch the FPU: COP1, COP1X,
# LWC1, LDC1, SWC1, SDC1.  An FPU-less core (24Kc, 1004Kc) traps on every one of them.
MIPS_FPU_OPCODES = {0x11: "COP1", 0x13: "COP1X", 0x31: "LWC1", 0x35: "LDC1", 0x39: "SWC1", 0x3D: "SDC1"}


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


# RISC-V e_flags: the float ABI (RISC-V ELF psABI, "e_flags"), and the name each gets from
# generator.build.boards.riscv_float_abi
EF_RISCV_FLOAT_ABI = 0x6
RISCV_FLOAT_ABI = {0x0: "soft", 0x2: "single", 0x4: "double", 0x6: "quad"}


def check_riscv_float_abi(elf: ELFFile, elf_path: str, board: dict) -> None:
    """Refuse a RISC-V image whose float ABI is not the board's (-mabi): soft-float code on an
    F core is slow but runs; hard-float code on a core without F traps on its first float."""
    fabi = boards.riscv_float_abi(board)
    got = RISCV_FLOAT_ABI[elf["e_flags"] & EF_RISCV_FLOAT_ABI]
    if fabi and got != fabi[1]:
        raise CactError(f"{elf_path} is built for the {got}-float ABI, but board {board['name']} uses "
                        f"{fabi[1]} float (its -mabi): pass build/{board['name']}/needle, what "
                        f"scons board={board['name']} builds")


# The ELF identity of each target architecture (the first part of a zig target or of a GNU
# toolchain prefix): (e_machine, its name in messages, ELF class).  Endianness comes from the
# board's `endianness`.
ARCH_ELF = {"mipsel": ("EM_MIPS", "MIPS", 32), "mips": ("EM_MIPS", "MIPS", 32),
            "arm": ("EM_ARM", "32-bit ARM", 32), "armeb": ("EM_ARM", "32-bit ARM", 32),
            "aarch64": ("EM_AARCH64", "AArch64", 64), "x86_64": ("EM_X86_64", "x86-64", 64),
            "riscv64": ("EM_RISCV", "RISC-V", 64), "riscv32": ("EM_RISCV", "RISC-V", 32)}
MACHINE_NAMES = {"EM_MIPS": "MIPS", "EM_ARM": "32-bit ARM", "EM_AARCH64": "AArch64", "EM_X86_64": "x86-64",
                 "EM_386": "x86 (32-bit)", "EM_RISCV": "RISC-V", "EM_PPC": "PowerPC", "EM_PPC64": "PowerPC 64"}
EF_ARM_EABIMASK, EF_ARM_EABI_VER5 = 0xFF000000, 0x05000000
EF_ARM_ABI_FLOAT_SOFT, EF_ARM_ABI_FLOAT_HARD = 0x200, 0x400
EF_MIPS_ABI2, EF_MIPS_ABI, EF_MIPS_ABI_O32 = 0x20, 0x0000F000, 0x00001000


def _board_triple(board: dict) -> str:
    """The zig target, or the GNU toolchain prefix ("" for the host's gcc)."""
    return board["zig_target"] if board.get("toolchain") == "zig" else board.get("toolchain_prefix", "")


def check_binary(fh, path: str, board: dict) -> None:
    """Refuse, in one line, an executable that cannot run on `board`: not an ELF, another
    machine, ELF class or byte order, another ABI (MIPS: o32, soft float and no FPU
    instruction; ARM: EABI 5 and the board's float-ABI flag), not an executable, or (a zig
    board, whose engines are static musl) dynamically linked.  `fh`: the file, opened binary."""
    try:
        _check_binary(fh, path, board)
    except (ELFError, ConstructError, ValueError, struct.error) as exc:
        raise CactError(f"{path} is not a valid ELF file ({exc}): pass build/{board['name']}/needle, what "
                        f"scons board={board['name']} builds") from None


def _check_binary(fh, path: str, board: dict) -> None:
    built = f"build/{board['name']}/needle, what scons board={board['name']} builds"
    triple = _board_triple(board).rstrip("-")
    arch = triple.split("-")[0] if triple else platform.machine()
    if arch.startswith("riscv"):        # one GNU toolchain builds both widths: the board's -march says
        arch = boards.board_arch(board)
    if arch not in ARCH_ELF:
        raise CactError(f"board {board['name']}: cannot tell the ELF machine of architecture {arch!r}")
    machine, arch_name, bits = ARCH_ELF[arch]
    head = fh.read(4)
    fh.seek(0)
    if head != b"\x7fELF":
        raise CactError(f"{path} is not an ELF executable: pass {built}")
    elf = ELFFile(fh)
    got = elf["e_machine"]
    if got != machine:
        name = MACHINE_NAMES.get(got, got)
        article = "an" if name[0] in "AEIOUaeioux" else "a"
        raise CactError(f"{path} is {article} {name} executable, but board {board['name']} runs {arch_name} "
                        f"({board.get('package', {}).get('openwrt_arch', arch)}): pass {built}")
    if elf.elfclass != bits:
        raise CactError(f"{path} is a {elf.elfclass}-bit ELF, but board {board['name']} runs {bits}-bit "
                        f"{arch_name}: pass {built}")
    order = "little" if elf.little_endian else "big"
    if order != board["endianness"]:
        raise CactError(f"{path} is {order}-endian {arch_name}, but board {board['name']} is "
                        f"{board['endianness']}-endian: pass {built}")
    flags = elf["e_flags"]
    if machine == "EM_MIPS" and (flags & EF_MIPS_ABI2 or flags & EF_MIPS_ABI not in (0, EF_MIPS_ABI_O32)):
        raise CactError(f"{path} is not built for the MIPS o32 ABI (e_flags 0x{flags:08x}) that board "
                        f"{board['name']} uses: pass {built}")
    if machine == "EM_ARM":
        hard = triple.endswith("hf")
        want = EF_ARM_ABI_FLOAT_HARD if hard else EF_ARM_ABI_FLOAT_SOFT
        if flags & EF_ARM_EABIMASK != EF_ARM_EABI_VER5 or not flags & want:
            raise CactError(f"{path} is not built for the ARM EABI version 5 with the "
                            f"{'hard' if hard else 'soft'}-float ABI (e_flags 0x{flags:08x}) that board "
                            f"{board['name']} uses: pass {built}")
    if machine == "EM_RISCV":
        check_riscv_float_abi(elf, path, board)
    elif boards.soft_float(board):
        check_soft_float(elf, path, board)
    if elf["e_type"] not in ("ET_EXEC", "ET_DYN"):
        raise CactError(f"{path} is an ELF {elf['e_type']} (an object file?), not an executable: pass {built}")
    interp = next((seg for seg in elf.iter_segments() if seg["p_type"] == "PT_INTERP"), None)
    if interp is not None and board.get("toolchain") == "zig":
        raise CactError(f"{path} is dynamically linked (interpreter {interp.get_interp_name()}), but board "
                        f"{board['name']}'s engine is a static musl executable: pass {built}")


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
        if elf["e_machine"] == "EM_RISCV":
            check_riscv_float_abi(elf, elf_path, board)
        elif boards.soft_float(board):
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
            rep.addresses[sec.name] = sec["sh_addr"]
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
        for s in _symbols(elf):     # the engine's static objects (needle_model.c)
            if s.name == "needle_prefix":
                rep.prefix_bytes = s["st_size"]
            if s["st_info"]["type"] == "STT_OBJECT" and s.name in STATE_OBJECTS:
                if s.name == "kv_cache":
                    rep.kv_bytes = s["st_size"]
                if s.name in PREFILL_OBJECTS:
                    rep.prefill_bytes += s["st_size"]
                rep.state_bytes = (rep.state_bytes or 0) + s["st_size"]
    if obj_dir:
        if board["os"] == "none" and ".stack" in rep.ram:
            check_stack(rep, elf_path, board, obj_dir)
        else:                # Linux: own code only (their stacks are megabytes)
            fig = worst_stack(obj_dir)
            rep.stack_bytes, rep.stack_path = fig.bytes, fig.path
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
