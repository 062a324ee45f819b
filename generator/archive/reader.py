"""Validating reader for `.cact` archives of both generations.

Every rule of docs/spec/cact-format.md §13 is checked with exact Python integers, in an order that
never allocates or indexes past what an earlier check proved to be inside the file.  The
result is an `Archive`: the header by field name, the codebook, the directory with each
record's role, the parsed tokenizer, and zero-copy accessors for tensor data.

Any violation raises `CactError` naming the field or tensor (index and role) and the
absolute byte offset.
"""

from __future__ import annotations

import hashlib
import math
import mmap
import os
import stat
import struct
from dataclasses import dataclass, field

import numpy as np

from generator.archive import quant
from generator.archive import roles as R
from generator.archive import tokenizer
from generator import files
from generator.errors import CactError
from generator.archive.format import (BLOB_ALIGN, CODEBOOK_LEN, CQ, CQ_BITS, CQ_BITS_N2, CQ_GROUP, DTYPE_NAMES,
                     FP16, FP32, HEADER_BYTES, HEADER_FIELDS, MAX_ORDERS, MAX_SITES, RAW,
                     RECORD_BYTES, TAGS, TERNARY, codebook_block, cq_geometry)

U64_MAX = 2**64 - 1


@dataclass(frozen=True)
class Record:
    """One directory entry, with the role its position gives it."""

    index: int
    role: str
    dtype: int
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    group: int
    bits: int

    @property
    def where(self) -> str:
        return f"tensor {self.index} ({self.role})"


@dataclass
class Head:
    """One probe head: its manifest code, name and the indices of its tensors."""

    code: int
    name: str
    tensors: dict[str, int] = field(default_factory=dict)


@dataclass
class Archive:
    """A validated archive.  `data` is the whole file (bytes or a read-only mmap)."""

    generation: int
    header: dict
    codebook: np.ndarray
    records: list[Record]
    heads: list[Head]
    tokenizer: "tokenizer.TokenizerData"
    data: bytes | mmap.mmap
    path: str | None = None

    # ---- identity -----------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def header_bytes(self) -> int:
        return HEADER_BYTES[self.generation]

    @property
    def directory_end(self) -> int:
        return self.header_bytes + 4 * CODEBOOK_LEN + RECORD_BYTES * len(self.records)

    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    # ---- lookup -------------------------------------------------------------------
    def record(self, role: str) -> Record:
        idx = self._by_role().get(role)
        if idx is None:
            raise CactError(f"archive has no tensor with role {role}")
        return self.records[idx]

    def has(self, role: str) -> bool:
        return role in self._by_role()

    def _by_role(self) -> dict[str, int]:
        cache = self.__dict__.get("_role_index")
        if cache is None:
            cache = {r.role: r.index for r in self.records}
            self.__dict__["_role_index"] = cache
        return cache

    def blob(self, rec: Record) -> memoryview:
        return memoryview(self.data)[rec.offset:rec.offset + rec.nbytes]

    # ---- typed views --------------------------------------------------------------
    def array(self, role: str) -> np.ndarray:
        """An FP16/FP32 tensor as f32, in its stored shape (exact conversion)."""
        rec = self.record(role)
        if rec.dtype == FP16:
            arr = np.frombuffer(self.data, dtype="<f2", count=rec.nbytes // 2, offset=rec.offset)
        elif rec.dtype == FP32:
            arr = np.frombuffer(self.data, dtype="<f4", count=rec.nbytes // 4, offset=rec.offset)
        else:
            raise CactError(f"{rec.where} is {DTYPE_NAMES[rec.dtype]}, not a float tensor")
        return arr.astype(np.float32).reshape(rec.shape)

    def cq(self, role: str) -> "CQTensor":
        rec = self.record(role)
        if rec.dtype != CQ:
            raise CactError(f"{rec.where} is {DTYPE_NAMES[rec.dtype]}, not CQ")
        return CQTensor(self, rec)

    def tokenizer_blob(self) -> bytes:
        return bytes(self.blob(self.records[-1]))


class CQTensor:
    """A CQ matrix inside an archive: unpacked indices, norms, dequantisation."""

    def __init__(self, archive: Archive, rec: Record):
        self.archive, self.rec = archive, rec
        self.out, self.inp = rec.shape
        self.bits, self.group = rec.bits, rec.group
        self.in_pad, self.ng, self.row_bytes, _ = cq_geometry(self.out, self.inp, rec.group, rec.bits)

    def packed(self) -> np.ndarray:
        n = self.out * self.row_bytes
        return np.frombuffer(self.archive.data, np.uint8, n, self.rec.offset).reshape(self.out, -1)

    def norms(self) -> np.ndarray:
        off = self.rec.offset + self.out * self.row_bytes
        return np.frombuffer(self.archive.data, "<f2", self.out * self.ng, off).reshape(self.out, self.ng)

    def indices(self) -> np.ndarray:
        return quant.unpack(self.packed(), self.bits, self.in_pad)

    def levels(self) -> np.ndarray:
        return quant.level_table(self.bits, self.archive.codebook, self.group)

    def dequantize(self, fwht: bool = False) -> np.ndarray:
        fn = quant.dequantize_fwht if fwht else quant.dequantize
        return fn(self.indices(), self.norms(), self.bits, self.archive.codebook, self.inp, self.group)


# ======================================================================================
# reading
# ======================================================================================

def read(source, *, check_data: bool = True) -> Archive:
    """Read and validate an archive from a path or a bytes-like object.

    `check_data` also scans tensor payloads (ternary crumbs, finite norms and floats,
    zero padding); the structural checks always run.
    """
    path = None
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        data = load(path)
    else:
        data = bytes(source)
    archive = _Parser(data).parse(check_data)
    archive.path = path
    return archive


def load(path: str | os.PathLike) -> bytes | mmap.mmap:
    """The bytes of the archive file `path`, mapped read-only: the one place an archive file is
    opened.  Only a regular file is read: a directory, a FIFO or a device (which would read as
    0 bytes, block, or never end) is refused in one line, as is a file that cannot be opened."""
    path = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (regular files ignore it)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise CactError(f"cannot read archive {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CactError(f"cannot read archive {path}: it is {files.kind(st.st_mode)}, not a regular "
                            "file (pass the path of a .cact file)")
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if st.st_size else b""
    except OSError as exc:
        raise CactError(f"cannot read archive {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


class _Parser:
    def __init__(self, data):
        self.data = data
        self.size = len(data)

    # ---- small helpers ------------------------------------------------------------
    def u32(self, off: int) -> int:
        return struct.unpack_from("<I", self.data, off)[0]

    def fail(self, msg: str, where: str | None = None, offset: int | None = None):
        raise CactError(msg, where=where, offset=offset)

    # ---- entry point --------------------------------------------------------------
    def parse(self, check_data: bool) -> Archive:
        gen = self.gen = self.parse_tag()
        hdr = self.parse_header(gen)
        codebook = self.parse_codebook(gen, hdr)
        self.check_geometry(gen, hdr)
        self.core_names = [r.name for r in R.core_roles(gen, hdr)] if R.core_count(gen, hdr) <= \
            hdr["num_tensors"] else []
        recs = self.parse_directory(gen, hdr)
        heads, recs = self.assign_roles(gen, hdr, recs)
        tok_rec = recs[-1]
        tok = tokenizer.parse_blob(memoryview(self.data)[tok_rec.offset:tok_rec.offset + tok_rec.nbytes],
                                   base_offset=tok_rec.offset)
        if gen == 2 and tok.n_pieces != hdr["vocab"]:
            self.fail(f"tokenizer has {tok.n_pieces} pieces but header vocab is {hdr['vocab']} "
                      "(Needle 2 requires equality)", "header field vocab", 20)
        if gen == 3 and tok.n_pieces > hdr["vocab"]:
            self.fail(f"tokenizer has {tok.n_pieces} pieces, more than header vocab {hdr['vocab']}",
                      "header field vocab", 20)
        archive = Archive(gen, hdr, codebook, recs, heads, tok, self.data)
        self.check_values(archive, full=check_data)
        return archive

    # ---- F1, F2 -------------------------------------------------------------------
    def parse_tag(self) -> int:
        if self.size < 4:
            self.fail(f"truncated: file is {self.size} bytes, too short to hold a tag",
                      "header field tag", 0)
        tag = self.u32(0)
        if tag not in TAGS:
            self.fail(f"not a .cact archive (tag 0x{tag:08X})", offset=0)
        gen = TAGS[tag]
        if self.size < HEADER_BYTES[gen]:
            self.fail(f"truncated header: Needle {gen} needs {HEADER_BYTES[gen]} bytes, file has "
                      f"{self.size}", "header", self.size)
        return gen

    def parse_header(self, gen: int) -> dict:
        names = HEADER_FIELDS[gen]
        vals = struct.unpack_from(f"<{len(names) - 1}If", self.data, 0)
        return dict(zip(names, vals))

    # ---- F3, F4, F5 ---------------------------------------------------------------
    def parse_codebook(self, gen: int, hdr: dict) -> np.ndarray:
        H = HEADER_BYTES[gen]
        if hdr["codebook_len"] != CODEBOOK_LEN:
            self.fail(f"codebook_len is {hdr['codebook_len']}, expected {CODEBOOK_LEN}",
                      "header field codebook_len", 8)
        dir_end = H + 4 * CODEBOOK_LEN + RECORD_BYTES * hdr["num_tensors"]
        if dir_end > self.size:
            self.fail(f"directory of {hdr['num_tensors']} records ends at byte {dir_end}, past the "
                      f"end of the {self.size}-byte file", "header field num_tensors", 4)
        cb = np.frombuffer(self.data, "<f4", CODEBOOK_LEN, H).astype(np.float32)
        for bits in (2, 3, 4):
            start, count = codebook_block(bits)
            block = cb[start:start + count]
            for k, v in enumerate(block):
                off = H + 4 * (start + k)
                if not math.isfinite(v) or abs(v) >= 1:
                    self.fail(f"codebook entry {start + k} is {float(v)!r}: must be finite with |v| < 1",
                              "codebook", off)
                if k and not block[k - 1] < v:
                    self.fail(f"codebook {bits}-bit block is not strictly increasing at entry "
                              f"{start + k}", "codebook", off)
        return cb

    # ---- G1 ... G10 (header geometry) ---------------------------------------------
    def check_geometry(self, gen: int, h: dict) -> None:
        names = HEADER_FIELDS[gen]

        def bad(name: str, msg: str):
            self.fail(msg, f"header field {name}", 4 * names.index(name))

        for name in ("d_model", "vocab", "num_layers", "num_heads", "num_kv_heads", "mhc_lanes",
                     "max_seq_len"):
            if h[name] < 1:
                bad(name, f"{name} is {h[name]}, must be at least 1")
        if h["num_heads"] % h["num_kv_heads"]:
            bad("num_kv_heads", f"num_heads {h['num_heads']} is not a multiple of num_kv_heads "
                f"{h['num_kv_heads']}")
        hd = "head_dim" if gen == 2 else "qk_head_dim"
        if h[hd] < 2 or h[hd] % 2:
            bad(hd, f"{hd} is {h[hd]}, must be even and at least 2 (RoPE rotates pairs)")
        if gen == 3 and h["v_head_dim"] < 1:
            bad("v_head_dim", "v_head_dim is 0, must be at least 1")
        want_n = 1 << (h["d_model"] - 1).bit_length()
        if h["hada_n"] != want_n:
            bad("hada_n", f"hada_n is {h['hada_n']}, expected {want_n} (smallest power of two "
                f">= d_model {h['d_model']})")
        if h["kv_bits"] not in (2, 3, 4, 8):
            bad("kv_bits", f"kv_bits is {h['kv_bits']}, must be 2, 3, 4 or 8")
        if h["kv_window"] > h["max_seq_len"]:
            bad("kv_window", f"kv_window {h['kv_window']} exceeds max_seq_len {h['max_seq_len']}")
        if not (math.isfinite(h["rope_theta"]) and h["rope_theta"] > 0):
            bad("rope_theta", f"rope_theta is {h['rope_theta']!r}, must be finite and > 0")
        # engram geometry (G7, G8)
        S, O = h["num_engram_sites"], h["num_engram_orders"]
        if S > MAX_SITES[gen]:
            bad("num_engram_sites", f"num_engram_sites is {S}, at most {MAX_SITES[gen]} allowed")
        if O > MAX_ORDERS:
            bad("num_engram_orders", f"num_engram_orders is {O}, at most {MAX_ORDERS} allowed")
        for i in range(O, MAX_ORDERS):
            if h[f"engram_order{i}"]:
                bad(f"engram_order{i}", f"unused order slot {i} is {h[f'engram_order{i}']}, must be 0")
        for i in range(S, MAX_SITES[gen]):
            if h[f"engram_site{i}"]:
                bad(f"engram_site{i}", f"unused site slot {i} is {h[f'engram_site{i}']}, must be 0")
        if S:
            if O < 1:
                bad("num_engram_orders", "engram sites present but num_engram_orders is 0")
            ords = R.orders(h)
            for i, o in enumerate(ords):
                if o < 1:
                    bad(f"engram_order{i}", f"engram order {i} is 0, must be at least 1")
            if h["engram_conv_dilation"] != max(ords):
                bad("engram_conv_dilation", f"engram_conv_dilation is {h['engram_conv_dilation']}, "
                    f"expected max(orders) = {max(ords)}")
            if h["engram_conv_taps"] != 4:
                bad("engram_conv_taps", f"engram_conv_taps is {h['engram_conv_taps']}, expected 4")
            T = h["num_engram_tables"]
            if T < 1 or T % O:
                bad("num_engram_tables", f"num_engram_tables is {T}, must be a positive multiple "
                    f"of num_engram_orders {O}")
            for name in ("engram_sub_dim", "engram_slots"):
                if h[name] < 1:
                    bad(name, f"{name} is 0, must be at least 1")
            prev = -1
            for i, s in enumerate(R.sites(h)):
                if s >= h["num_layers"]:
                    bad(f"engram_site{i}", f"engram site {i} is layer {s}, past num_layers "
                        f"{h['num_layers']}")
                if s <= prev:
                    bad(f"engram_site{i}", f"engram sites must be strictly increasing ({prev} then {s})")
                prev = s
        if gen == 3:
            if h["out_vocab"] > h["vocab"]:
                bad("out_vocab", f"out_vocab {h['out_vocab']} exceeds vocab {h['vocab']}")
            if h["num_layers"] > 64:
                bad("num_layers", f"num_layers is {h['num_layers']}, Needle 3 allows at most 64")
            mask = (h["global_mask_hi"] << 32) | h["global_mask_lo"]
            if mask >> h["num_layers"]:
                bad("global_mask_hi" if mask.bit_length() > 32 else "global_mask_lo",
                    f"global layer mask 0x{mask:x} marks a layer at or past num_layers {h['num_layers']}")
            if S and h["engram_seed_heads"] and h["engram_seed_heads"] < h["num_engram_tables"] // O:
                bad("engram_seed_heads", f"engram_seed_heads {h['engram_seed_heads']} is smaller than "
                    f"the heads per order {h['num_engram_tables'] // O}")

    # ---- R1 ... R5, R9 (records) ----------------------------------------------------
    def parse_directory(self, gen: int, hdr: dict) -> list[tuple]:
        base = HEADER_BYTES[gen] + 4 * CODEBOOK_LEN
        n = hdr["num_tensors"]
        dir_end = base + RECORD_BYTES * n
        if n < 2:
            self.fail(f"num_tensors is {n}: an archive holds at least an embedding and a tokenizer",
                      "header field num_tensors", 4)
        out = []
        prev_end = dir_end
        allowed_bits = CQ_BITS_N2 if gen == 2 else CQ_BITS[3]
        for i in range(n):
            ro = base + RECORD_BYTES * i
            dtype, ndim, pad = struct.unpack_from("<BBH", self.data, ro)
            shape4 = struct.unpack_from("<4I", self.data, ro + 4)
            offset, nbytes, group, bits = struct.unpack_from("<QQII", self.data, ro + 20)
            where = f"tensor {i} ({self.role_guess(i, n, out)})"
            if dtype not in DTYPE_NAMES:
                self.fail(f"dtype code {dtype} is not 1 (FP16), 2 (FP32), 3 (CQ) or 4 (RAW)", where, ro)
            if ndim > 4:
                self.fail(f"ndim is {ndim}, at most 4", where, ro + 1)
            if pad:
                self.fail(f"record padding is {pad}, must be 0", where, ro + 2)
            for k in range(ndim, 4):
                if shape4[k]:
                    self.fail(f"shape entry {k} is {shape4[k]} past ndim {ndim}, must be 0", where,
                              ro + 4 + 4 * k)
            shape = shape4[:ndim]
            if offset % BLOB_ALIGN:
                self.fail(f"blob offset {offset} is not a multiple of {BLOB_ALIGN}", where, ro + 20)
            if offset < dir_end:
                self.fail(f"blob offset {offset} lies inside the header/directory (ends at {dir_end})",
                          where, ro + 20)
            if offset + nbytes > min(self.size, U64_MAX):
                self.fail(f"blob [{offset}, {offset + nbytes}) runs past the end of the "
                          f"{self.size}-byte file", where, ro + 28)
            if offset < prev_end:
                self.fail(f"blob at {offset} overlaps or precedes the previous blob (which ends at "
                          f"{prev_end})", where, ro + 20)
            prev_end = offset + nbytes
            count = math.prod(shape)
            if dtype in (FP16, FP32):
                if group or bits:
                    self.fail(f"group/bits are {group}/{bits}, must be 0 for {DTYPE_NAMES[dtype]}",
                              where, ro + 36)
                want = (2 if dtype == FP16 else 4) * count
                if nbytes != want:
                    self.fail(f"{DTYPE_NAMES[dtype]} shape {list(shape)} needs {want} bytes, record "
                              f"says {nbytes}", where, ro + 28)
            elif dtype == CQ:
                if ndim != 2:
                    self.fail(f"CQ tensor has ndim {ndim}, must be 2", where, ro + 1)
                if group < 8 or group & (group - 1):
                    self.fail(f"CQ group {group} is not a power of two >= 8", where, ro + 36)
                if bits not in allowed_bits:
                    self.fail(f"CQ bits code {bits} not allowed in Needle {gen} "
                              f"(allowed {list(allowed_bits)})", where, ro + 40)
                if group != CQ_GROUP:
                    self.fail(f"CQ group {group} differs from the codebook's group {CQ_GROUP}",
                              where, ro + 36)
                want = cq_geometry(shape[0], shape[1], group, bits)[3]
                if nbytes != want:
                    self.fail(f"CQ{bits} [{shape[0]}, {shape[1]}] needs {want} bytes, record says "
                              f"{nbytes}", where, ro + 28)
            else:  # RAW
                if i != n - 1:
                    self.fail("RAW record before the last position (the tokenizer must be last)",
                              where, ro)
                if ndim or group or bits:
                    self.fail("RAW record must have ndim, group and bits 0", where, ro + 1)
            out.append((i, dtype, tuple(shape), offset, nbytes, group, bits, ro))
        if out[-1][1] != RAW:
            self.fail("last record is not the RAW tokenizer", f"tensor {n - 1} (tokenizer)", out[-1][7])
        if prev_end != self.size:
            self.fail(f"{self.size - prev_end} trailing bytes after the last blob (the file must "
                      "end where the tokenizer ends)", "file", prev_end)
        return out

    def role_guess(self, i: int, n: int, parsed: list) -> str:
        """The role of position i for messages, from the header and the records already
        validated (the head manifest names the head tensors after it)."""
        core = len(self.core_names)
        if i == n - 1:
            return "tokenizer"
        if i < core:
            return self.core_names[i]
        if i == core:
            return "heads.manifest"
        _, dtype, shape, offset = parsed[core][:4]
        if dtype == FP16 and len(shape) == 1 and 1 <= shape[0] <= 8:
            allowed = R.N2_HEAD_NAMES if self.gen == 2 else R.N3_HEAD_NAMES
            names = []
            for c in np.frombuffer(self.data, "<f2", shape[0], offset).astype(np.float64):
                if not (math.isfinite(c) and int(c) == c and int(c) in allowed):
                    break
                code = int(c)
                parts = ("probes", "proj", "bias") if self.gen == 2 else \
                    ("probes", "gain", "query", "row_bias", "proj", "bias") + (("calibration",) if code == 3 else ())
                names += [f"head.{allowed[code]}.{p}" for p in parts]
            if i - core - 1 < len(names):
                return names[i - core - 1]
        return "probe head"

    # ---- F6, R10, R12, R13 (positional roles, heads) --------------------------------
    def assign_roles(self, gen: int, hdr: dict, raw: list[tuple]):
        n = len(raw)
        core_n = R.core_count(gen, hdr)
        if core_n + 1 > n:
            self.fail(f"num_tensors is {n}, but the geometry needs {core_n} model tensors plus a "
                      f"tokenizer", "header field num_tensors", 4)
        core = R.core_roles(gen, hdr)
        names = [r.name for r in core]
        heads: list[Head] = []
        extra = n - core_n - 1
        if extra:
            names += self.head_roles(gen, hdr, raw, core_n, extra, heads)
        names.append("tokenizer")
        if len(names) != n:  # pragma: no cover - head_roles guarantees this
            self.fail(f"num_tensors {n} does not match the canonical count {len(names)}",
                      "header field num_tensors", 4)
        recs = []
        for (i, dtype, shape, offset, nbytes, group, bits, ro), role in zip(raw, names):
            recs.append(Record(i, role, dtype, shape, offset, nbytes, group, bits))
        for spec, rec, r in zip(core, recs, raw):
            if rec.dtype != spec.dtype:
                self.fail(f"is {DTYPE_NAMES[rec.dtype]}, the canonical order wants "
                          f"{DTYPE_NAMES[spec.dtype]}", rec.where, r[7])
            if rec.shape != spec.shape:
                self.fail(f"shape {list(rec.shape)} differs from the geometry's {list(spec.shape)}",
                          rec.where, r[7] + 4)
        return heads, recs

    def head_roles(self, gen, hdr, raw, core_n, extra, heads) -> list[str]:
        i, dtype, shape, offset, nbytes, group, bits, ro = raw[core_n]
        where = f"tensor {core_n} (heads.manifest)"
        if gen == 3 and dtype == FP32 and shape == (13,):
            self.fail("archive carries an audio section, which needle-fw does not support", where, ro)
        if dtype != FP16 or len(shape) != 1 or shape[0] < 1:
            self.fail(f"extra tensors after final_norm, but tensor {core_n} is not an FP16 rank-1 "
                      "head manifest", where, ro)
        codes = np.frombuffer(self.data, "<f2", shape[0], offset).astype(np.float64)
        allowed = R.N2_HEAD_NAMES if gen == 2 else R.N3_HEAD_NAMES
        prev = 0
        int_codes = []
        for k, c in enumerate(codes):
            if not (math.isfinite(c) and c == int(c) and int(c) in allowed):
                self.fail(f"manifest entry {k} is {float(c)!r}, allowed head codes are {sorted(allowed)}",
                          where, offset + 2 * k)
            if int(c) <= prev:
                self.fail("manifest codes must be strictly increasing", where, offset + 2 * k)
            prev = int(c)
            int_codes.append(prev)
        names = ["heads.manifest"]
        if gen == 2:
            if extra - 1 != 3 * len(int_codes):
                self.fail(f"manifest lists {len(int_codes)} heads (needs {3 * len(int_codes)} tensors) "
                          f"but {extra - 1} tensors follow it", where, ro)
            parts = ("probes", "proj", "bias")
        pos = core_n + 1
        for code in int_codes:
            hname = f"head.{allowed[code]}"
            if gen == 2:
                part_names = parts
            else:
                part_names = ("probes", "gain", "query", "row_bias", "proj", "bias") + (
                    ("calibration",) if code == 3 else ())
            if pos + len(part_names) > core_n + extra:
                self.fail(f"manifest needs more head tensors than the {extra - 1} present", where, ro)
            head = Head(code, allowed[code])
            for p in part_names:
                head.tensors[p] = pos
                names.append(f"{hname}.{p}")
                pos += 1
            self.check_head(gen, hdr, raw, head)
            heads.append(head)
        if pos != core_n + extra:
            self.fail(f"{core_n + extra - pos} tensors between the probe heads and the tokenizer are "
                      "not accounted for by the manifest", f"tensor {pos}", raw[pos][7])
        return names

    def check_head(self, gen, hdr, raw, head: Head) -> None:
        d, L = hdr["d_model"], hdr["num_layers"]

        def rec(part):
            return raw[head.tensors[part]]

        def need(part, dtypes, ok, msg):
            r = rec(part)
            if r[1] not in dtypes or not ok(r[2]):
                self.fail(f"{msg}; found {DTYPE_NAMES[r[1]]} {list(r[2])}",
                          f"tensor {r[0]} (head.{head.name}.{part})", r[7])

        if gen == 2:
            need("probes", (FP16,), lambda s: len(s) == 2 and s[0] >= 1 and s[1] == d,
                 f"probes must be FP16 [P, {d}]")
            P = rec("probes")[2][0]
            need("proj", (FP16,), lambda s: len(s) == 2 and s[0] >= 1 and s[1] == P * d,
                 f"proj must be FP16 [out, {P * d}] (P·d columns)")
            out = rec("proj")[2][0]
            need("bias", (FP16,), lambda s: s == (out,), f"bias must be FP16 [{out}]")
            return
        probes = rec("probes")
        if probes[1] == CQ:
            need("probes", (CQ,), lambda s: len(s) == 2 and s[1] == d and s[0] % (L + 1) == 0 and s[0],
                 f"probes must be CQ [(L+1)·k, {d}]")
            k = probes[2][0] // (L + 1)
            qdt = (CQ,)
        else:
            need("probes", (FP16,), lambda s: len(s) == 3 and s[0] == L + 1 and s[2] == d and s[1],
                 f"probes must be FP16 [{L + 1}, k, {d}]")
            k = probes[2][1]
            qdt = (FP16,)
        need("gain", (FP16,), lambda s: s == (L + 1, k), f"gain must be FP16 [{L + 1}, {k}]")
        need("query", qdt, lambda s: len(s) == 2 and s[1] == d and s[0] >= 1, f"query must be [q, {d}]")
        q = rec("query")[2][0]
        need("row_bias", (FP16,), lambda s: s == (q, L + 1, k), f"row_bias must be FP16 [{q}, {L + 1}, {k}]")
        need("proj", qdt, lambda s: len(s) == 2 and s[0] >= 1 and s[1] == q * d, f"proj must be [out, {q * d}]")
        out = rec("proj")[2][0]
        need("bias", (FP16,), lambda s: s == (out,), f"bias must be FP16 [{out}]")
        if "calibration" in head.tensors:
            need("calibration", (FP16,), lambda s: s == (3,), "calibration must be FP16 [3]")

    # ---- R7, R8, R11, finite floats, zero padding -----------------------------------
    def check_values(self, a: Archive, full: bool) -> None:
        data = self.data
        for rec in a.records:
            if rec.dtype == FP32 and rec.role in ("hada_p1", "hada_p2"):
                vals = np.frombuffer(data, "<f4", rec.nbytes // 4, rec.offset).astype(np.float64)
                N = rec.shape[0]
                ok = np.isfinite(vals) & (vals == np.floor(vals)) & (vals >= 0) & (vals < N)
                if not ok.all():
                    k = int(np.argmin(ok))
                    self.fail(f"permutation entry {k} is {float(vals[k])!r}, not an integer in [0, {N})",
                              rec.where, rec.offset + 4 * k)
                if len(np.unique(vals)) != N:
                    self.fail("permutation repeats a value", rec.where, rec.offset)
        if not full:
            return
        prev_end = a.directory_end
        for rec in a.records:
            gap = np.frombuffer(data, np.uint8, rec.offset - prev_end, prev_end)
            if gap.any():
                self.fail("non-zero byte in the alignment padding before this blob", rec.where,
                          prev_end + int(np.argmax(gap != 0)))
            prev_end = rec.offset + rec.nbytes
            if rec.dtype in (FP16, FP32):
                dt = "<f2" if rec.dtype == FP16 else "<f4"
                vals = np.frombuffer(data, dt, rec.nbytes // (2 if rec.dtype == FP16 else 4), rec.offset)
                fin = np.isfinite(vals)
                if not fin.all():
                    k = int(np.argmin(fin))
                    self.fail(f"value {k} is not finite", rec.where, rec.offset + vals.itemsize * k)
            elif rec.dtype == CQ:
                t = CQTensor(a, rec)
                norms = t.norms()
                ok = np.isfinite(norms) & (norms >= 0)
                if not ok.all():
                    k = int(np.argmin(ok.reshape(-1)))
                    self.fail(f"group norm {k} is {float(norms.reshape(-1)[k])!r}: must be finite and "
                              ">= 0", rec.where, rec.offset + t.out * t.row_bytes + 2 * k)
                if rec.bits == TERNARY:
                    packed = t.packed().reshape(-1)
                    crumbs = (packed[:, None] >> np.array([0, 2, 4, 6], np.uint8)) & 3
                    bad = (crumbs == 2).any(axis=1)
                    if bad.any():
                        k = int(np.argmax(bad))
                        self.fail("ternary stream holds the unused crumb value 2", rec.where,
                                  rec.offset + k)
