"""Constants and pure size arithmetic of the `.cact` container (spec: docs/spec/cact-format.md).

Nothing here reads a file; the reader, the writer and the planner all share these
definitions so that the layout is stated exactly once.
"""

from __future__ import annotations

TAG_N2 = 0x05E12A83
TAG_N3 = 0x05E12A84
TAGS = {TAG_N2: 2, TAG_N3: 3}

HEADER_BYTES = {2: 120, 3: 196}
RECORD_BYTES = 44
BLOB_ALIGN = 64
CODEBOOK_LEN = 28
CQ_GROUP = 128  # the group every writer uses and the header codebook is scaled for

# dtype codes (docs/spec/cact-format.md §5; seed 002's 0-based codes are wrong)
FP16, FP32, CQ, RAW = 1, 2, 3, 4
DTYPE_NAMES = {FP16: "FP16", FP32: "FP32", CQ: "CQ", RAW: "RAW"}

# CQ record width codes: bits 1..4 are codebook widths, 5 is ternary
TERNARY = 5
CQ_BITS = {2: (1, 2, 3, 4, 5), 3: (1, 2, 3, 4, 5)}
CQ_BITS_N2 = (2, 3, 4, 5)

# Header field names in file order; every field but the last is u32, the last is f32.
HEADER_FIELDS = {
    2: (
        "tag", "num_tensors", "codebook_len", "kv_window", "kv_bits", "vocab", "d_model",
        "num_heads", "num_kv_heads", "num_layers", "head_dim", "max_seq_len", "hada_n",
        "mhc_lanes", "engram_slots", "engram_sub_dim", "num_engram_tables",
        "engram_conv_taps", "engram_conv_dilation", "num_engram_orders",
        "engram_order0", "engram_order1", "engram_order2", "engram_order3",
        "num_engram_sites", "engram_site0", "engram_site1", "engram_site2", "engram_site3",
        "rope_theta",
    ),
    3: (
        "tag", "num_tensors", "codebook_len", "kv_window", "kv_bits", "vocab", "out_vocab",
        "d_model", "num_heads", "num_kv_heads", "num_layers", "qk_head_dim", "v_head_dim",
        "max_seq_len", "hada_n", "mhc_lanes", "sliding_window", "global_mask_lo",
        "global_mask_hi", "qkv_conv_taps", "engram_slots", "engram_sub_dim",
        "num_engram_tables", "engram_conv_taps", "engram_conv_dilation",
        "engram_seed_heads", "num_engram_orders",
        "engram_order0", "engram_order1", "engram_order2", "engram_order3",
        "num_engram_sites",
    ) + tuple(f"engram_site{i}" for i in range(16)) + ("rope_theta",),
}
assert len(HEADER_FIELDS[2]) * 4 == HEADER_BYTES[2]
assert len(HEADER_FIELDS[3]) * 4 == HEADER_BYTES[3]

MAX_ORDERS = 4
MAX_SITES = {2: 4, 3: 16}

# Tokenizer constants (docs/spec/prompt-and-tokenizer.md §1)
PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3

# KV budget constants (docs/spec/deployment-numerics.md §2.3)
KV_BUDGET_BYTES = 11 * 2**20 + 512 * 2**10
KV_BUDGET_GROUP = 32
KV_WINDOW_MIN = 160
KV_CQ_GROUP = 64          # values per f16 norm of a CQ-coded KV vector (kv_bits 2-4)
KV_INT8_GROUP_N2 = 32     # values per f32 scale of a Needle 2 int8 KV vector (kv_bits 8)


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def index_width(bits: int) -> int:
    """Bits stored per index for a CQ width code (ternary crumbs take 2)."""
    return 2 if bits == TERNARY else bits


def cq_geometry(out: int, inp: int, group: int, bits: int) -> tuple[int, int, int, int]:
    """(in_pad, groups per row, packed bytes per row, total blob bytes) of a CQ matrix."""
    in_pad = round_up(inp, group)
    ng = in_pad // group
    row_bytes = in_pad * index_width(bits) // 8
    return in_pad, ng, row_bytes, out * row_bytes + 2 * out * ng


def codebook_block(bits: int) -> tuple[int, int]:
    """(first entry, entry count) of width `bits` inside the 28-entry codebook."""
    return (1 << bits) - 4, 1 << bits


def census_kind(dtype: int, bits: int) -> str:
    """The lowercase census key of a record: fp16, fp32, raw, cq1..cq4, ternary."""
    if dtype == FP16:
        return "fp16"
    if dtype == FP32:
        return "fp32"
    if dtype == RAW:
        return "raw"
    return "ternary" if bits == TERNARY else f"cq{bits}"


CENSUS_KINDS = ("fp16", "fp32", "cq1", "cq2", "cq3", "cq4", "ternary", "raw")
