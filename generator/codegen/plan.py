"""Plan: turn a validated archive and a board's options into typed data for the templates.

Every decision the generated engine bakes in is made here: geometry constants, each
tensor's absolute offset in the linked archive, integer codebooks, RoPE frequencies, the
KV ring size and coding, scratch buffer sizes, and the boot-check hash.  The result is an
`EnginePlan`: frozen dataclasses of numbers, strings and tuples that the templates read by
attribute (`plan.d_model`, `layer.q_proj.offset`); `render` only renders it.

Constants the generated C shares with Python (KV group sizes, the engram hash, the boot
hash) are read from their one Python definition and emitted, never retyped in a template.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from generator import __version__
from generator.archive import quant
from generator.archive import roles as R
from generator.errors import CactError
from generator.archive.format import CQ, CQ_GROUP, KV_BUDGET_BYTES, KV_CQ_GROUP, KV_INT8_GROUP_N2, \
    TERNARY, cq_geometry
from generator.archive.reader import Archive
from generator.codegen import families
from generator.codegen.families import KernelFamily
from generator.model import calibration, geometry, numerics as nm
from generator.model.geometry import KvLayout

#: FNV-1a 64 (the boot check's hash of header, codebook and directory): offset basis and prime.
FNV64_OFFSET = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3


@dataclass
class Options:
    """Build options that shape the engine (from the board file and the command line)."""

    board: str = "host"
    kv_window: int | None = None      # explicit smaller window (changes numerics: warned)
    kv_budget: int = KV_BUDGET_BYTES   # bytes of RAM for the KV cache when kv_window is 0
    max_text: int = 16384              # bytes of prompt text the tokenizer accepts
    board_data: dict | None = None     # the whole board file (bare metal: regions, stack)
    kernels: str = "scalar"            # kernel family (generator/codegen/families.py)
    head_tokens: int = 0               # tokens whose cells the probe heads keep (0: no heads)
    threads: int = 1                   # most threads a step uses (Linux boards: a pthread pool)
    thread_grain: int = 32768          # least weight bytes a thread takes when a product is split
    prefill_chunk: int | None = None   # tokens per prefill pass (None: from the board's RAM)
    soft_float: bool = False           # no FPU: the firmware's soft-float runtime is linked in


#: Placement `file`: the address the archive file is mapped at (boards may say otherwise),
#: and the most it may span.  32-bit MIPS and ARM Linux put a static executable at 4 MiB or
#: 64 KiB, its heap right above, and mmap()s down from below the stack (0x77..., 0xB6...), or
#: up from 0x2AAAA000 / 0x40000000 in the legacy layout, which qemu-user also uses: 0x50000000
#: leaves 256 MiB to those and 512 MiB to the archive.
DEFAULT_MAP_ADDRESS = 0x50000000
MAP_SPAN = 0x20000000


def fnv1a64(data) -> int:
    h = FNV64_OFFSET
    for b in bytes(data):
        h = ((h ^ b) * FNV64_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


# ---- the plan's types -------------------------------------------------------------------

@dataclass(frozen=True)
class Provenance:
    """Where the engine came from, printed into every generated file."""

    archive_sha256: str
    archive_bytes: int
    generator_version: str
    board: str
    kv_window_option: int | None     # the explicit kv_window= option, or None


@dataclass(frozen=True)
class CqMatrix:
    """A CQ-coded matrix inside the linked archive (packed index rows, then f16 group norms)."""

    role: str               # directory role, e.g. "layer03.q_proj"
    c_name: str             # the role as a C identifier, e.g. "layer03_q_proj"
    offset: int             # absolute byte offset of the packed rows
    norms_offset: int       # absolute byte offset of the [rows][groups_per_row] f16 norms
    bits: int               # width code: 1..4, 5 = ternary
    kind: str               # "cq1".."cq4" or "ternary" (names the C codebook tables)
    rows: int
    cols: int
    padded_cols: int        # cols rounded up to whole CQ groups
    groups_per_row: int
    row_bytes: int          # packed bytes per row
    nbytes: int             # the whole tensor

    @property
    def short_name(self) -> str:
        """The role within its block, e.g. "q_proj"."""
        return self.role.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class A8Shape:
    """One distinct shape of the archive's A8 products: the kernels get an instance with the
    width, the group count and the row stride as constants (issue 13 item 5)."""

    bits: int               # width code: 1..4, 5 = ternary
    kind: str               # codebook name, "cq2", "ternary", ...
    groups: int             # 128-groups per row
    row_bytes: int          # packed bytes per row (groups * group bytes)
    matrices: int           # how many of the archive's A8 products have this shape

    @property
    def suffix(self) -> str:
        """The C name suffix of its kernel instance, e.g. "2b_4g"."""
        return f"{self.bits}b_{self.groups}g"


@dataclass(frozen=True)
class VectorRef:
    """An FP16/FP32 tensor inside the linked archive, read in place."""

    role: str
    c_name: str
    offset: int             # absolute byte offset
    shape: tuple[int, ...]
    count: int              # values
    nbytes: int


@dataclass(frozen=True)
class Codebook:
    """One CQ width's levels: f32 for row gathers, int8 plus one scale for A8 products."""

    bits: int
    kind: str
    int8: tuple[int, ...]          # integer levels of the A8 kernels
    int8_scale: float              # s_c: f32 value of one integer level step
    levels: tuple[float, ...]      # f32 levels of row gathers (NaN slots as 0.0)


@dataclass(frozen=True)
class KvCqLevels:
    """Levels and decision midpoints of a CQ-coded KV cache (kv_bits 2-4)."""

    levels: tuple[float, ...]
    mids: tuple[float, ...]


@dataclass(frozen=True)
class LayerPlan:
    """One transformer block: its tensors, kind and engram site."""

    index: int
    local: bool                     # attends within the sliding band (Needle 3 local layer)
    ring_index: int                 # index among the layers of its kind (KV and conv rings)
    engram_site: int | None         # site injected before this block, or None
    q_proj: CqMatrix
    k_proj: CqMatrix
    v_proj: CqMatrix
    gate_proj: CqMatrix
    out_proj: CqMatrix
    norm_in: VectorRef
    q_norm: VectorRef
    k_norm: VectorRef
    post_norm: VectorRef
    attn_gate: VectorRef
    pre_hada: VectorRef
    d1: VectorRef
    d2: VectorRef
    d3: VectorRef
    # Needle 3 only (None otherwise)
    b2: VectorRef | None = None
    d4: VectorRef | None = None
    w1a: VectorRef | None = None
    w1b: VectorRef | None = None
    w2a: VectorRef | None = None
    w2b: VectorRef | None = None
    w3a: VectorRef | None = None
    w3b: VectorRef | None = None
    cond_v: VectorRef | None = None
    cond_u: VectorRef | None = None
    q_taps: VectorRef | None = None  # only when the archive has a QKV conv
    k_taps: VectorRef | None = None
    v_taps: VectorRef | None = None

    @property
    def matrices(self) -> tuple[CqMatrix, ...]:
        """The block's CQ matrices in directory order."""
        return tuple(getattr(self, name) for name in LAYER_MATRICES)


@dataclass(frozen=True)
class MhcPlan:
    """The mHC lane router: f16 maps per layer and its three CQ projections."""

    a_pre: VectorRef
    a_post: VectorRef
    a_res: VectorRef
    b_pre: VectorRef
    b_post: VectorRef
    b_res: VectorRef
    phi_pre: CqMatrix
    phi_post: CqMatrix
    phi_res: CqMatrix

    @property
    def matrices(self) -> tuple[CqMatrix, ...]:
        return self.phi_pre, self.phi_post, self.phi_res


@dataclass(frozen=True)
class SitePlan:
    """One engram site: hashed n-gram tables, key/value projections and the value conv."""

    index: int
    layer: int                      # the block it is injected before
    tables: CqMatrix
    key_proj: CqMatrix
    value_proj: CqMatrix
    taps: VectorRef


@dataclass(frozen=True)
class HeadPlan:
    """One probe head (docs/spec/needle2-model.md §9 / docs/spec/needle3-model.md §9) the engine computes."""

    code: int
    name: str
    outputs: int                    # values the head returns
    normalise: bool                 # returns a unit vector (the contrastive/embedding head)
    bias_offset: int                # f16 [outputs]
    pooled_vectors: int             # D-vectors the projection reads (probes, or queries)
    # Needle 2: all-FP16 probes [P, d] and projection [out, P*d]
    probes_offset: int | None = None
    proj_offset: int | None = None
    # Needle 3: CQ probes [(L+1)*k, d], queries [q, d], projection [out, q*d]
    probes: CqMatrix | None = None
    query: CqMatrix | None = None
    proj: CqMatrix | None = None
    gain_offset: int | None = None       # f16 [L+1, k]
    row_bias_offset: int | None = None   # f16 [q, L+1, k]
    probes_per_row: int = 0              # k
    queries: int = 0                     # q


@dataclass(frozen=True)
class TargetPlan:
    """What the engine is compiled for: the kernel family and how the work is spread."""

    family: KernelFamily                # the kernel family's descriptor (generator/codegen/families.py)
    threads: int                        # NEEDLE_THREADS: 1, or a pool of threads - 1 workers
    thread_grain: int                   # THREAD_GRAIN_BYTES (threads > 1)
    prefill_chunk: int                  # NEEDLE_PREFILL_CHUNK: tokens per pass over the weights
    soft_float: bool                    # butterflies, lane mixing and dot products through firmware/softfloat
    gnu_stack: bool                     # emit the .note.GNU-stack section (Linux targets)


@dataclass(frozen=True)
class PlacementPlan:
    """Where the archive is and how the engine checks it is the one it was generated for."""

    archive_tag: int                    # the archive's first word, checked at boot
    boot_hash: int                      # FNV-1a 64 of bytes [0, boot_hash_bytes)
    boot_hash_bytes: int                # header + codebook + directory
    incbin_path: str                    # the archive path needle_archive.S includes
    archive_file: bool                  # placement `file`: the archive is mapped from a file at start
    archive_partition: bool             # placement `partition`: boot hashes all of it (SHA-256)
    mcuboot: bool                       # board [slots]: boot confirms the MCUboot image once the checks pass
    archive_map_address: int            # ... at this address (needle_cact, defined at link time)


@dataclass(frozen=True)
class ModelPlan:
    """The model: its generation, geometry, KV layout, exact constants and tensors."""

    generation: int                     # 2 or 3
    min_confidence_ppm: int             # the generation's recommended minimum call confidence
    # geometry (archive header)
    d_model: int
    vocab: int                          # embedding rows (token ids accepted)
    out_vocab: int                      # rows of the tied output head (logits per step)
    num_layers: int
    heads: int                          # query heads
    kv_heads: int
    qk_head_dim: int
    v_head_dim: int
    hada_n: int
    lanes: int                          # mHC residual lanes
    max_seq: int
    qkv_taps: int                       # Needle 3 causal QKV conv taps (0: none)
    sliding_window: int                 # Needle 3 local band (0: every layer global)
    # engram
    engram_sites: int
    engram_tables: int
    engram_slots: int
    engram_sub_dim: int
    engram_orders: tuple[int, ...]
    tables_per_order: int
    engram_seed_stride: int
    engram_dilation: int
    # KV cache
    kv: KvLayout
    kv_cq_levels: KvCqLevels | None     # kv_bits 2-4 only
    # exact f32 constants (docs/numerics.md §1)
    sqrt_d: float
    sqrt_qk_head_dim: float
    inv_sqrt_group: float
    inv_sqrt_hada_n: float
    inv_sqrt_kv_group: float
    rope_inv_freq: tuple[float, ...]
    widest_a8_input: int                # padded inputs of the widest A8 GEMV (scratch size)
    # tensors
    embedding: CqMatrix
    layers: tuple[LayerPlan, ...]
    mhc: MhcPlan
    sites: tuple[SitePlan, ...]
    final_norm: VectorRef
    codebooks: tuple[Codebook, ...]
    # per-token cost (for reports and the header)
    streamed_bytes: int
    macs_per_token: int
    # probe heads
    head_plans: tuple[HeadPlan, ...]
    head_tokens: int
    # Needle 3 Monarch MLP (0 / None for Needle 2)
    kron_a: int = 0                     # Kronecker factors: hada_n = kron_a * kron_b
    kron_b: int = 0
    cond_rank: int = 0
    hada_perm1: VectorRef | None = None
    hada_perm2: VectorRef | None = None
    # the distinct shapes of the A8 products (per-shape kernel instances)
    a8_shapes: tuple[A8Shape, ...] = ()


    # ---- derived sizes ----
    @property
    def q_dim(self) -> int:
        return self.heads * self.qk_head_dim

    @property
    def o_dim(self) -> int:
        return self.heads * self.v_head_dim

    @property
    def k_dim(self) -> int:
        return self.kv_heads * self.qk_head_dim

    @property
    def v_dim(self) -> int:
        return self.kv_heads * self.v_head_dim

    @property
    def engram_dim(self) -> int:
        return self.engram_tables * self.engram_sub_dim

    @property
    def max_order(self) -> int:
        return max(self.engram_orders) if self.engram_orders else 1

    # ---- constants shared with Python: one definition each, emitted from here ----
    @property
    def cq_group(self) -> int:
        return CQ_GROUP

    @property
    def kv_cq_group(self) -> int:
        return KV_CQ_GROUP

    @property
    def kv_int8_group_n2(self) -> int:
        return KV_INT8_GROUP_N2

    @property
    def engram_hash_seed(self) -> int:
        return nm.ENGRAM_HASH_SEED

    @property
    def engram_hash_prime(self) -> int:
        return nm.ENGRAM_HASH_PRIME

    @property
    def fnv64_offset(self) -> int:
        return FNV64_OFFSET

    @property
    def fnv64_prime(self) -> int:
        return FNV64_PRIME


@dataclass(frozen=True)
class EnginePlan:
    """Everything the engine templates render, decided once, for either generation: the
    model, the target it is compiled for, where its archive is placed, and where it came
    from.  The templates read them as plan.model.<field>, plan.target.<field>,
    plan.placement.<field> and plan.provenance.<field>."""

    provenance: Provenance
    target: TargetPlan
    placement: PlacementPlan
    model: ModelPlan
    warnings: tuple[str, ...]           # for the user (window choices that change numerics)

    @property
    def key_columns(self) -> bool:
        """Decode attention transposes key rows with the family's nk_columns8: a CQ-coded cache
        only (an int8 cache's scores are integer dots on the codes themselves)."""
        return self.target.family.key_columns and self.model.kv.kv_bits != 8


# ---- building the plan ------------------------------------------------------------------

def window_for(h: dict, opts: Options, generation: int = 2) -> tuple[int, list[str]]:
    """The deployment KV window (every layer's ring is at most this) and user warnings."""
    warnings = []
    header_w = h["kv_window"]
    if header_w == 0:
        w = geometry.budget_window(h, opts.kv_budget)
        warnings.append(f"header kv_window is 0: sized from the {opts.kv_budget:,}-byte KV budget "
                        f"to {w} positions")
    else:
        w = header_w
    if opts.kv_window is not None:
        if not 1 <= opts.kv_window <= w:
            raise CactError(f"kv_window={opts.kv_window} must be between 1 and the archive's window {w}")
        if opts.kv_window < w:
            warnings.append(f"kv_window={opts.kv_window} is smaller than the trained window {w}: "
                            "this changes the model's numerics")
        w = opts.kv_window
    return w, warnings


# Without a board file, the largest static state an engine may ask for: object sizes and
# offsets beyond 2 GiB overflow the small code models' 32-bit relocations.
STATE_LIMIT_NO_BOARD = 2**31 - 1


def check_state_fits(h: dict, window: int, opts: Options) -> None:
    """Refuse, with the numbers, a KV cache the board's RAM cannot hold (an absurd header
    would otherwise reach the linker as "relocation truncated" errors)."""
    board = opts.board_data
    limit = board["memory"]["ram_bytes"] if board else STATE_LIMIT_NO_BOARD
    need = geometry.session_ram(h, window)["total_bytes"]
    if need <= limit:
        return
    lo, hi = 0, window          # the deepest window that fits, for the remedy
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if geometry.session_ram(h, mid)["total_bytes"] <= limit:
            lo = mid
        else:
            hi = mid - 1
    remedy = f"build with kv_window={lo} or smaller" if lo else "this archive cannot fit"
    raise CactError(f"the KV cache and engram history need {need:,} bytes at window {window} but "
                    f"board {opts.board} has {limit:,} bytes of RAM for the engine: {remedy}, "
                    "or choose a board with more RAM")


def _kind(bits: int) -> str:
    return "ternary" if bits == TERNARY else f"cq{bits}"


def cq_matrix(a: Archive, role: str) -> CqMatrix:
    rec = a.record(role)
    rows, cols = rec.shape
    padded, groups, row_bytes, _ = cq_geometry(rows, cols, rec.group, rec.bits)
    return CqMatrix(role=role, c_name=role.replace(".", "_"), offset=rec.offset,
                    norms_offset=rec.offset + rows * row_bytes, bits=rec.bits, kind=_kind(rec.bits),
                    rows=rows, cols=cols, padded_cols=padded, groups_per_row=groups,
                    row_bytes=row_bytes, nbytes=rec.nbytes)


def a8_shapes(products: list[CqMatrix]) -> tuple[A8Shape, ...]:
    """The distinct (width, groups, row bytes) of the matrices the A8 GEMV multiplies (the
    tied head included), most frequent first: a handful per model.  The kernel families
    emit an instance for those of them that pay (templates/kernels/scalar.c.j2, x86.c.j2)."""
    count: dict[tuple[int, int, int], int] = {}
    for m in products:
        key = (m.bits, m.groups_per_row, m.row_bytes)
        count[key] = count.get(key, 0) + 1
    return tuple(A8Shape(bits=b, kind=_kind(b), groups=g, row_bytes=rb, matrices=n)
                 for (b, g, rb), n in sorted(count.items(), key=lambda kv: (-kv[1], kv[0])))


def vector_ref(a: Archive, role: str) -> VectorRef:
    rec = a.record(role)
    return VectorRef(role=role, c_name=role.replace(".", "_"), offset=rec.offset,
                     shape=tuple(rec.shape), count=int(math.prod(rec.shape)), nbytes=rec.nbytes)


def codebook(bits: int, words: np.ndarray) -> Codebook:
    """The levels of width `bits` under the archive codebook `words`."""
    table, s_c = nm.int8_levels(bits, words)
    levels = quant.level_table(bits, words)
    return Codebook(bits=bits, kind=_kind(bits), int8=tuple(int(x) for x in table),
                    int8_scale=float(s_c),
                    levels=tuple(0.0 if math.isnan(x) else float(x) for x in levels))


def rope_inv_freq(head_dim: int, theta: float) -> list[float]:
    """ω_j of docs/numerics.md, computed exactly as the reference does."""
    j = np.arange(head_dim // 2)
    e = np.float32(2) * j.astype(np.float32) / np.float32(head_dim)
    powv = np.power(np.float64(np.float32(theta)), e.astype(np.float64)).astype(np.float32)
    return [float(x) for x in (np.float32(1) / powv)]


def _head_plans(a: Archive, head_tokens: int) -> tuple[HeadPlan, ...]:
    """Probe heads the engine computes (docs/spec/needle2-model.md §9), when head_tokens > 0."""
    if not head_tokens or not a.heads:
        return ()
    if head_tokens > a.header["max_seq_len"]:
        raise CactError(f"head_tokens={head_tokens} exceeds max_seq_len {a.header['max_seq_len']}")
    out = []
    for hd in a.heads:
        recs = {part: a.records[i] for part, i in hd.tensors.items()}
        common = dict(code=hd.code, name=hd.name, outputs=recs["proj"].shape[0],
                      normalise=hd.code == 1, bias_offset=recs["bias"].offset)
        if a.generation == 2:
            out.append(HeadPlan(**common, pooled_vectors=recs["probes"].shape[0],
                                probes_offset=recs["probes"].offset, proj_offset=recs["proj"].offset))
            continue
        if recs["probes"].dtype != CQ:
            raise CactError("head_tokens: the older all-FP16 Needle 3 head layout is not supported "
                            "by the C engine")
        queries = recs["query"].shape[0]
        out.append(HeadPlan(**common, pooled_vectors=queries,
                            probes=cq_matrix(a, recs["probes"].role), query=cq_matrix(a, recs["query"].role),
                            proj=cq_matrix(a, recs["proj"].role), gain_offset=recs["gain"].offset,
                            row_bias_offset=recs["row_bias"].offset,
                            probes_per_row=recs["gain"].shape[1], queries=queries))
    return tuple(out)


#: The CQ matrices of every block, in directory order.
LAYER_MATRICES = tuple(name for name, dtype, _ in R.N2_LAYER if dtype == CQ)
MHC_MAPS = ("a_pre", "a_post", "a_res", "b_pre", "b_post", "b_res")
MHC_MATRICES = ("phi_pre", "phi_post", "phi_res")


def _layer_vectors(gen: int, taps: int) -> tuple[str, ...]:
    """The FP16 tensors of a block that the engine reads by address."""
    spec = R.N2_LAYER if gen == 2 else R.N3_LAYER
    return tuple(name for name, dtype, _ in spec
                 if dtype != CQ and (taps or name not in R.N3_TAP_ROLES))


def _layers(a: Archive, gen: int, taps: int) -> tuple[LayerPlan, ...]:
    h = a.header
    globals_ = set(geometry.global_layers(h))
    site_layers = R.sites(h)
    layers, n_kind = [], {True: 0, False: 0}
    for l in range(h["num_layers"]):
        p = f"layer{l:02d}."
        local = l not in globals_
        tensors = {k: vector_ref(a, p + k) for k in _layer_vectors(gen, taps)}
        tensors.update({k: cq_matrix(a, p + k) for k in LAYER_MATRICES})
        layers.append(LayerPlan(index=l, local=local, ring_index=n_kind[local],
                                engram_site=site_layers.index(l) if l in site_layers else None,
                                **tensors))
        n_kind[local] += 1
    return tuple(layers)


def plan(a: Archive, opts: Options | None = None, *, incbin_path: str = "",
         gnu_stack: bool = True) -> EnginePlan:
    """Everything the engine templates need, for either generation."""
    opts = opts or Options()
    return _plan(a, opts, incbin_path, gnu_stack)


def archive_in_file(opts: Options) -> bool:
    """Placement `file` (Linux boards): the engine maps the archive from a file at start."""
    board = opts.board_data
    return bool(board) and board["archive"]["placement"] == "file"


def archive_map_address(board: dict) -> int:
    """Where a Linux board maps its archive file (archive.map_address, DEFAULT_MAP_ADDRESS)."""
    return board["archive"].get("map_address", DEFAULT_MAP_ADDRESS)


MAX_THREADS = 64


def prefill_chunk(h: dict, opts: Options, window: int) -> int:
    """Tokens per prefill pass: as given (scons prefill_chunk=N), else from the board's RAM."""
    if opts.prefill_chunk is not None:
        if not 1 <= opts.prefill_chunk <= 256:
            raise CactError(f"prefill_chunk={opts.prefill_chunk}: give 1 to 256 tokens per pass")
        return opts.prefill_chunk
    ram = opts.board_data["memory"]["ram_bytes"] if opts.board_data else STATE_LIMIT_NO_BOARD
    return geometry.default_prefill_chunk(h, ram, window)


def check_threads(opts: Options) -> int:
    """The engine's thread count: 1 everywhere, up to MAX_THREADS on Linux boards."""
    n = opts.threads
    board = opts.board_data
    if not 1 <= n <= MAX_THREADS:
        raise CactError(f"threads={n}: give 1 to {MAX_THREADS}")
    if n > 1 and board and board["os"] != "linux":
        raise CactError(f"threads={n}: board {opts.board} is bare metal, and its engine runs on one core "
                        "(drop threads=)")
    return n


def _plan(a: Archive, opts: Options, incbin_path: str, gnu_stack: bool) -> EnginePlan:
    gen = a.generation
    h = a.header
    hq, hv = geometry.head_widths(h)
    window, warnings = window_for(h, opts, gen)
    if archive_in_file(opts) and a.size > MAP_SPAN:
        raise CactError(f"archive is {a.size:,} bytes; placement file maps at most {MAP_SPAN:,} at "
                        f"0x{archive_map_address(opts.board_data):x}: set a lower archive.map_address in "
                        "the board file with room for it")
    check_state_fits(h, window, opts)
    taps = 0 if gen == 2 else h["qkv_conv_taps"]
    layers = _layers(a, gen, taps)
    sites = tuple(SitePlan(index=s, layer=layer, tables=cq_matrix(a, f"engram{s}.tables"),
                           key_proj=cq_matrix(a, f"engram{s}.key_proj"),
                           value_proj=cq_matrix(a, f"engram{s}.value_proj"),
                           taps=vector_ref(a, f"engram{s}.taps"))
                  for s, layer in enumerate(R.sites(h)))
    mhc = MhcPlan(**{k: vector_ref(a, "mhc." + k) for k in MHC_MAPS},
                  **{k: cq_matrix(a, "mhc." + k) for k in MHC_MATRICES})
    embedding = cq_matrix(a, "embedding")

    # the matrices every decode step multiplies through the A8 GEMV (not the tied head)
    gemv = [*mhc.matrices, *(m for ly in layers for m in ly.matrices),
            *(m for s in sites for m in (s.key_proj, s.value_proj))]
    all_cq = [embedding, *gemv, *(s.tables for s in sites)]
    kv_cq_levels = None
    if h["kv_bits"] != 8:
        lv, mids = nm.kv_cq_levels(h["kv_bits"], a.codebook)
        kv_cq_levels = KvCqLevels(levels=tuple(float(x) for x in lv), mids=tuple(float(x) for x in mids))

    orders = tuple(R.orders(h))
    tables = h["num_engram_tables"]
    per_order = tables // len(orders) if orders else 0
    monarch = {}
    if gen == 3:
        ba = 1 << ((h["hada_n"].bit_length() - 1) // 2)
        monarch = dict(kron_a=ba, kron_b=h["hada_n"] // ba, cond_rank=R.N3_COND_RANK,
                       hada_perm1=vector_ref(a, "hada_p1"), hada_perm2=vector_ref(a, "hada_p2"))
    return EnginePlan(
        provenance=Provenance(archive_sha256=a.sha256(), archive_bytes=a.size,
                              generator_version=__version__, board=opts.board,
                              kv_window_option=opts.kv_window),
        warnings=tuple(warnings),
        target=TargetPlan(
            family=families.get(opts.kernels),
            threads=check_threads(opts),
            thread_grain=opts.thread_grain,
            prefill_chunk=prefill_chunk(h, opts, window),
            soft_float=opts.soft_float,
            gnu_stack=gnu_stack),
        placement=PlacementPlan(
            archive_tag=h["tag"],
            boot_hash=fnv1a64(memoryview(a.data)[:a.directory_end]),
            boot_hash_bytes=a.directory_end,
            incbin_path=incbin_path.replace("\\", "/"),
            archive_file=archive_in_file(opts),
            archive_partition=bool(opts.board_data) and opts.board_data["archive"]["placement"] == "partition",
            mcuboot=bool(opts.board_data) and "slots" in opts.board_data,
            archive_map_address=archive_map_address(opts.board_data) if archive_in_file(opts) else 0),
        model=ModelPlan(
            generation=gen,
            min_confidence_ppm=calibration.min_confidence_ppm(gen),
            d_model=h["d_model"],
            vocab=h["vocab"],
            out_vocab=geometry.output_rows(h),
            num_layers=h["num_layers"],
            heads=h["num_heads"],
            kv_heads=h["num_kv_heads"],
            qk_head_dim=hq,
            v_head_dim=hv,
            hada_n=h["hada_n"],
            lanes=h["mhc_lanes"],
            max_seq=h["max_seq_len"],
            qkv_taps=taps,
            sliding_window=0 if gen == 2 else h["sliding_window"],
            engram_sites=h["num_engram_sites"],
            engram_tables=tables,
            engram_slots=h["engram_slots"],
            engram_sub_dim=h["engram_sub_dim"],
            engram_orders=orders,
            tables_per_order=per_order,
            engram_seed_stride=per_order if gen == 2 or not h["engram_seed_heads"] else h["engram_seed_heads"],
            engram_dilation=h["engram_conv_dilation"],
            kv=geometry.kv_layout(h, window),
            kv_cq_levels=kv_cq_levels,
            sqrt_d=float(nm.sqrt_f32(h["d_model"])),
            sqrt_qk_head_dim=float(nm.sqrt_f32(hq)),
            inv_sqrt_group=float(quant.inv_sqrt(CQ_GROUP)),
            inv_sqrt_hada_n=float(quant.inv_sqrt(h["hada_n"])),
            inv_sqrt_kv_group=float(quant.inv_sqrt(KV_CQ_GROUP)),
            rope_inv_freq=tuple(rope_inv_freq(hq, h["rope_theta"])),
            widest_a8_input=max(m.padded_cols for m in gemv),
            embedding=embedding,
            layers=layers,
            mhc=mhc,
            sites=sites,
            final_norm=vector_ref(a, "final_norm"),
            codebooks=tuple(codebook(bits, a.codebook) for bits in sorted({m.bits for m in all_cq})),
            streamed_bytes=geometry.streamed_bytes_per_token(a),
            macs_per_token=geometry.macs_per_token(a),
            head_plans=_head_plans(a, opts.head_tokens),
            head_tokens=opts.head_tokens if opts.head_tokens and a.heads else 0,
            a8_shapes=a8_shapes([embedding, *gemv]),
            **monarch),
    )
