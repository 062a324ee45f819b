"""Plan of the generated C tokenizer: a `TokenizerPlan` for templates/needle_tokenizer.{h,c}.j2.

The generated C reads the archive's RAW tokenizer blob (docs/spec/cact-format.md section 11) in place,
from the linked ``needle_cact[]`` bytes, and never parses it at run time: every offset,
order and table it needs is resolved here.

What the template uses (docs/prompt.md section 3, "The generated C tokenizer"):

* ``blob_offset`` / ``blob_nbytes``: the blob's absolute position in the archive;
* ``rec_offsets``: n_pieces + 1 offsets *relative to the blob start*; entry i is where
  record i's surface starts, entry n is the blob end + 7.  Record i's surface length is
  ``rec_offsets[i + 1] - rec_offsets[i] - 7`` and its score (f32 LE) and type (u8) sit at
  ``-7`` and ``-3`` from its surface, so one table serves offset, length, score and type;
* ``rec_packed``: what the C table holds, ``rec_offsets[i] - 7 * i`` (every record head is
  7 bytes, so this is the blob header plus the surface bytes before record i): the C adds
  ``7 * i`` back, and a surface's length is the plain difference of two entries.  It fits
  uint16_t for an 8k vocabulary (small: 51,8xx against 109,148), which halves the table;
  ``off_type`` is uint16_t when every value fits, else uint32_t;
* ``sorted_ids``: piece ids sorted by surface bytes (memcmp order, a prefix first) for a
  binary search of byte string -> id, and ``first_index`` (257 entries) delimiting the run
  of each first byte in it;
* ``markers``: the USER_DEFINED ids in the section 2 matching order (longest in code points
  first, ties by id) and ``marker_first``: a 256-bit mask of their first bytes;
* ``score_rank``: per piece the dense rank of its f32 score (``rank_type``), so the BPE
  compares small integers instead of floats, with exactly the same order and ties;
* ``byte_ids``: the 256 BYTE piece ids (all ``unk_id`` when byte_fallback is 0).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from generator import __version__
from generator.errors import CactError
from generator.archive.reader import Archive
from generator.archive.tokenizer import BYTE, HEADER, RECORD_HEAD, USER_DEFINED, TokenizerData, _byte_value

#: Largest text the generated encoder accepts unless the board says otherwise.
DEFAULT_MAX_TEXT = 16384


def _c_type(max_value: int) -> str:
    if max_value <= 0xFFFF:
        return "uint16_t"
    if max_value <= 0xFFFFFFFF:
        return "uint32_t"
    raise CactError(f"value {max_value} does not fit in 32 bits")


@dataclass(frozen=True)
class TokenizerPlan:
    """Everything the tokenizer templates render, resolved at generation time."""

    archive_sha256: str
    archive_bytes: int
    generator_version: str
    blob_offset: int                 # absolute offset of the RAW tokenizer blob
    blob_nbytes: int
    n_pieces: int
    pad_id: int
    eos_id: int
    bos_id: int
    unk_id: int
    add_dummy_prefix: int
    byte_fallback: int
    max_text: int                    # bytes of text the encoder accepts
    max_piece_bytes: int             # longest surface
    id_type: str                     # C type of a piece id (0xFFFF free as "no piece")
    pos_type: str                    # C type of a position in the encoder's virtual text
    off_type: str                    # C type of rec_offsets
    rank_type: str                   # C type of score_rank
    rec_offsets: tuple[int, ...]     # n_pieces + 1 surface starts, relative to the blob
    rec_packed: tuple[int, ...]      # rec_offsets[i] - 7 * i: the C table
    sorted_ids: tuple[int, ...]      # ids in memcmp order of their surfaces
    first_index: tuple[int, ...]     # 257 bounds of each first byte's run in sorted_ids
    score_rank: tuple[int, ...]      # dense rank of each piece's f32 score
    markers: tuple[int, ...]         # USER_DEFINED ids in matching order
    marker_first: tuple[int, ...]    # 8 words: bit set for each marker's first byte
    byte_ids: tuple[int, ...]        # id of the BYTE piece of each byte value


def plan(archive: Archive, max_text: int = DEFAULT_MAX_TEXT) -> TokenizerPlan:
    """Everything the tokenizer templates need, resolved at generation time."""
    if not isinstance(max_text, int) or not 1 <= max_text <= 0x3FFFFFFF:
        raise CactError(f"max_text {max_text!r} must be an integer in 1..{0x3FFFFFFF}")
    rec = archive.records[-1]
    tok: TokenizerData = archive.tokenizer
    data = archive.data
    base = rec.offset
    n = tok.n_pieces

    # Walk the records exactly as docs/spec/cact-format.md section 11 lays them out and cross-check
    # every field against the parsed tokenizer, so the tables cannot disagree with the blob.
    rel, abs_offsets, lengths, scores, types = [], [], [], [], []
    pos = HEADER.size
    for i, (score, ptype, surface) in enumerate(tok.pieces):
        raw = surface.encode("utf-8")
        f_score, f_type, f_len = RECORD_HEAD.unpack_from(data, base + pos)
        bits = struct.unpack_from("<I", data, base + pos)[0]
        start = pos + RECORD_HEAD.size
        if (f_type != ptype or f_len != len(raw) or bytes(data[base + start:base + start + f_len]) != raw
                or struct.pack("<f", score) != struct.pack("<I", bits)):
            raise CactError("tokenizer blob does not match its parsed pieces",
                            where=f"tokenizer piece {i}", offset=base + pos)
        rel.append(start)
        abs_offsets.append(base + start)
        lengths.append(f_len)
        scores.append(f_score)
        types.append(ptype)
        pos = start + f_len
    if pos != rec.nbytes:
        raise CactError("tokenizer blob length does not match its records", where="tokenizer blob",
                        offset=base + pos)
    rel.append(pos + RECORD_HEAD.size)  # sentinel: length of the last piece = end - start

    surfaces = [bytes(data[a:a + l]) for a, l in zip(abs_offsets, lengths)]
    sorted_ids = sorted(range(n), key=lambda i: surfaces[i])

    user = [i for i in range(n) if types[i] == USER_DEFINED]
    markers = sorted(user, key=lambda i: (-len(tok.pieces[i][2]), i))
    first_mask = [0] * 8
    for i in markers:
        b = surfaces[i][0]
        first_mask[b >> 5] |= 1 << (b & 31)

    byte_ids = [tok.unk_id] * 256
    if tok.byte_fallback:
        seen = 0
        for i in range(n):
            if types[i] == BYTE:
                byte_ids[_byte_value(tok.pieces[i][2])] = i
                seen += 1
        if seen != 256:
            raise CactError("byte_fallback is 1 but not all 256 BYTE pieces exist",
                            where="tokenizer header", offset=base + 21)

    # first_index[b] .. first_index[b + 1]: the slice of sorted_ids whose surfaces start with
    # byte b (narrows the binary search to one first byte).
    first_index = [0] * 257
    for i in sorted_ids:
        first_index[surfaces[i][0] + 1] += 1
    for b in range(256):
        first_index[b + 1] += first_index[b]

    # Dense rank of each piece's score (equal f32 values, 0.0 and -0.0 included, share a
    # rank; higher score, higher rank): comparing ranks is comparing the f32 scores, so the
    # BPE needs no floating point and one small integer per symbol.
    distinct = sorted(set(scores))
    packed = [r - RECORD_HEAD.size * i for i, r in enumerate(rel)]
    rank_of = {v: r for r, v in enumerate(distinct)}
    score_rank = [rank_of[v] for v in scores]

    return TokenizerPlan(
        archive_sha256=archive.sha256(), archive_bytes=archive.size, generator_version=__version__,
        blob_offset=base, blob_nbytes=rec.nbytes, n_pieces=n,
        pad_id=tok.pad_id, eos_id=tok.eos_id, bos_id=tok.bos_id, unk_id=tok.unk_id,
        add_dummy_prefix=tok.add_dummy_prefix, byte_fallback=tok.byte_fallback,
        max_text=max_text, max_piece_bytes=max(lengths),
        id_type=_c_type(n),  # n <= 65535 leaves 0xFFFF free as "no piece"
        # positions of the encoder's virtual text (dummy prefix + text) run 0..max_text + 1;
        # two more values serve as "none" and "dead" sentinels
        pos_type=_c_type(max_text + 3),
        off_type=_c_type(packed[-1]), rank_type=_c_type(len(distinct) - 1),
        rec_offsets=tuple(rel), rec_packed=tuple(packed), sorted_ids=tuple(sorted_ids), first_index=tuple(first_index),
        score_rank=tuple(score_rank), markers=tuple(markers), marker_first=tuple(first_mask),
        byte_ids=tuple(byte_ids),
    )
