"""The tokenizer carried in a `.cact` archive: RAW blob, validation, encoder and decoder.

Written from ``docs/spec/cact-format.md`` section 11 (blob layout) and 13.3 (rules T1-T4) and
``docs/spec/prompt-and-tokenizer.md`` sections 2-3 (the encoder/decoder the blob specifies).

Blob layout (little-endian, offsets relative to the blob start)::

    header, 24 bytes:  u32 n_pieces, u32 pad_id, u32 eos_id, u32 bos_id, u32 unk_id,
                       u8 add_dummy_prefix, u8 byte_fallback, u16 padding
    n_pieces records:  f32 score, u8 type, u16 surface length, surface bytes (UTF-8)

Piece types: 0 NORMAL, 1 UNKNOWN, 2 CONTROL, 3 USER_DEFINED, 4 BYTE.

Checks made by :func:`parse_blob` beyond T1-T4 (each documented in ``docs/tokenizer.md``):
``add_dummy_prefix`` and ``byte_fallback`` must be 0 or 1 (the encoder's behaviour for any
other value is not specified), and no score may be NaN (the merge order would be undefined).
The u16 padding field is not checked.
"""

from __future__ import annotations

import heapq
import math
import operator
import struct
from dataclasses import dataclass
from pathlib import Path

from generator.errors import CactError

# --------------------------------------------------------------------------- constants

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 0, 1, 2, 3, 4

#: The ten chat markers with their fixed ids (docs/spec/prompt-and-tokenizer.md section 1).
CHAT_MARKERS = (
    "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tools>", "</tools>",
    "<tool_call>", "</tool_call>", "<tool_result>", "</tool_result>",
)

SPACE_PIECE = "\u2581"  # "▁", the whitespace stand-in

HEADER = struct.Struct("<5I2BH")  # 24 bytes
RECORD_HEAD = struct.Struct("<fBH")  # 7 bytes: score, type, surface length
MIN_RECORD = RECORD_HEAD.size + 1  # surfaces are non-empty (T2)
MAX_SURFACE = 0xFFFF
_HEX_UPPER = "0123456789ABCDEF"

# SentencePiece ModelProto.SentencePiece.Type -> blob type (docs/spec/cact-format.md section 11:
# "NORMAL otherwise", which covers UNUSED = 5).
_SP_TYPE_TO_BLOB = {1: NORMAL, 2: UNKNOWN, 3: CONTROL, 4: USER_DEFINED, 6: BYTE, 5: NORMAL}


@dataclass
class TokenizerData:
    """The decoded content of a tokenizer blob.

    ``pieces[i]`` is piece id ``i`` as ``(score, type, surface)``; ``score`` is a Python
    float holding the exact f32 value read from the blob.
    """

    n_pieces: int
    pad_id: int
    eos_id: int
    bos_id: int
    unk_id: int
    add_dummy_prefix: int
    byte_fallback: int
    pieces: list


def _show(surface: str) -> str:
    """A one-line, bounded rendering of a surface for error messages."""
    text = ascii(surface[:32])
    return text + ("..." if len(surface) > 32 else "")


def _byte_value(surface: str):
    """The byte a ``<0xHH>`` surface stands for (uppercase hex), or None if malformed."""
    if (len(surface) == 6 and surface.startswith("<0x") and surface.endswith(">")
            and surface[3] in _HEX_UPPER and surface[4] in _HEX_UPPER):
        return int(surface[3:5], 16)
    return None


# --------------------------------------------------------------------------- blob reader

def parse_blob(data, base_offset: int = 0) -> TokenizerData:
    """Parse and fully validate a RAW tokenizer blob (rules T1-T4).

    Every error is a :class:`CactError` whose offset is ``base_offset`` plus the position
    in the blob.  Work and memory are linear in ``len(data)``.
    """
    if isinstance(data, bytes):
        buf = data
    elif isinstance(data, (bytearray, memoryview)):
        try:
            buf = bytes(data)
        except (TypeError, ValueError) as exc:  # e.g. a non-contiguous memoryview
            raise CactError(f"tokenizer blob is not a contiguous byte buffer ({exc})",
                            where="tokenizer blob", offset=base_offset) from None
    else:
        raise CactError(f"tokenizer blob must be bytes, not {type(data).__name__}",
                        where="tokenizer blob", offset=base_offset)
    size = len(buf)
    where = "tokenizer header"
    if size < HEADER.size:
        raise CactError(f"tokenizer blob is {size} bytes, shorter than its {HEADER.size}-byte header",
                        where=where, offset=base_offset)
    n_pieces, pad_id, eos_id, bos_id, unk_id, add_dummy_prefix, byte_fallback, _padding = \
        HEADER.unpack_from(buf, 0)
    if n_pieces == 0:
        raise CactError("n_pieces is 0", where=where, offset=base_offset)
    room = size - HEADER.size
    if n_pieces > room // MIN_RECORD:
        raise CactError(f"n_pieces {n_pieces} needs at least {n_pieces * MIN_RECORD} record bytes "
                        f"but only {room} follow the header", where=where, offset=base_offset)
    for name, value, field_at in (("pad_id", pad_id, 4), ("eos_id", eos_id, 8),
                                  ("bos_id", bos_id, 12), ("unk_id", unk_id, 16)):
        if value >= n_pieces:
            raise CactError(f"{name} {value} is not below n_pieces {n_pieces}",
                            where=where, offset=base_offset + field_at)
    for name, value, field_at in (("add_dummy_prefix", add_dummy_prefix, 20),
                                  ("byte_fallback", byte_fallback, 21)):
        if value > 1:
            raise CactError(f"{name} is {value}, expected 0 or 1", where=where,
                            offset=base_offset + field_at)

    pieces = []
    seen = {}
    byte_ids = {}
    pos = HEADER.size
    for i in range(n_pieces):
        where = f"tokenizer piece {i}"
        left = size - pos
        if left < RECORD_HEAD.size:
            raise CactError(f"record header needs {RECORD_HEAD.size} bytes but only {left} "
                            "are left in the blob", where=where, offset=base_offset + pos)
        score, ptype, length = RECORD_HEAD.unpack_from(buf, pos)
        if ptype > BYTE:
            raise CactError(f"type {ptype} is not one of 0 NORMAL, 1 UNKNOWN, 2 CONTROL, "
                            "3 USER_DEFINED, 4 BYTE", where=where, offset=base_offset + pos + 4)
        if length == 0:
            raise CactError("surface is empty", where=where, offset=base_offset + pos + 5)
        start = pos + RECORD_HEAD.size
        if length > size - start:
            raise CactError(f"surface of {length} bytes runs past the end of the blob "
                            f"({size - start} bytes left)", where=where, offset=base_offset + pos + 5)
        raw = buf[start:start + length]
        try:
            surface = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CactError(f"surface is not valid UTF-8 (byte 0x{raw[exc.start]:02X} at surface "
                            f"byte {exc.start}: {exc.reason})", where=where,
                            offset=base_offset + start + exc.start) from None
        if math.isnan(score):
            raise CactError(f"score of {_show(surface)} is NaN", where=where, offset=base_offset + pos)
        other = seen.get(surface)
        if other is not None:
            raise CactError(f"surface {_show(surface)} duplicates piece {other}", where=where,
                            offset=base_offset + start)
        seen[surface] = i
        if ptype == BYTE:
            value = _byte_value(surface)
            if value is None:
                raise CactError(f"BYTE piece surface {_show(surface)} is not <0xHH> with two "
                                "uppercase hex digits", where=where, offset=base_offset + start)
            byte_ids[value] = i
        pieces.append((score, ptype, surface))
        pos = start + length
    if pos != size:
        raise CactError(f"{size - pos} trailing bytes after the last piece (piece {n_pieces - 1})",
                        where="tokenizer blob", offset=base_offset + pos)
    if byte_fallback == 1 and len(byte_ids) != 256:
        missing = next(b for b in range(256) if b not in byte_ids)
        raise CactError(f"byte_fallback is 1 but there is no BYTE piece <0x{missing:02X}> "
                        f"({256 - len(byte_ids)} of 256 byte pieces missing)",
                        where="tokenizer header", offset=base_offset + 21)
    return TokenizerData(n_pieces, pad_id, eos_id, bos_id, unk_id, add_dummy_prefix,
                         byte_fallback, pieces)


# --------------------------------------------------------------------------- blob writer

def _pack_blob(data: TokenizerData) -> bytes:
    """Serialise a TokenizerData (no validation; used by build_blob and by tests)."""
    out = [HEADER.pack(data.n_pieces, data.pad_id, data.eos_id, data.bos_id, data.unk_id,
                       data.add_dummy_prefix, data.byte_fallback, 0)]
    for score, ptype, surface in data.pieces:
        raw = surface.encode("utf-8")
        out.append(RECORD_HEAD.pack(score, ptype, len(raw)))
        out.append(raw)
    return b"".join(out)


def build_blob(model_path_or_bytes, add_dummy_prefix: int = 1) -> bytes:
    """The RAW tokenizer blob (docs/spec/cact-format.md section 11) of a SentencePiece model.

    ``model_path_or_bytes`` is a path to a ``.model`` file or its serialized bytes.  The
    model's protobuf is read directly (no sentencepiece import); scores are copied bit for
    bit.  ``byte_fallback`` is written as 1, like the package writers; the result is
    validated with :func:`parse_blob` before it is returned.
    """
    if isinstance(model_path_or_bytes, (bytes, bytearray, memoryview)):
        model = bytes(model_path_or_bytes)
    else:
        path = Path(model_path_or_bytes)
        try:
            model = path.read_bytes()
        except OSError as exc:
            raise CactError(f"cannot read SentencePiece model: {exc.strerror}", where=str(path)) from None
    if add_dummy_prefix not in (0, 1):
        raise CactError(f"add_dummy_prefix is {add_dummy_prefix!r}, expected 0 or 1")
    pieces, ids = _read_model_proto(model)
    if not pieces:
        raise CactError("SentencePiece model has no pieces", where="sentencepiece model")
    out = [None]
    for index, (surface_raw, score_raw, sp_type) in enumerate(pieces):
        if len(surface_raw) > MAX_SURFACE:
            raise CactError(f"surface is {len(surface_raw)} bytes, more than a u16 length allows",
                            where=f"sentencepiece piece {index}")
        blob_type = _SP_TYPE_TO_BLOB.get(sp_type)
        if blob_type is None:
            raise CactError(f"unknown SentencePiece piece type {sp_type}",
                            where=f"sentencepiece piece {index}")
        out.append(score_raw + struct.pack("<BH", blob_type, len(surface_raw)) + surface_raw)
    n = len(pieces)
    for name in ("pad_id", "eos_id", "bos_id", "unk_id"):
        if not 0 <= ids[name] < n:
            raise CactError(f"{name} is {ids[name]} in the model; the blob needs an id in 0..{n - 1}",
                            where="sentencepiece model")
    out[0] = HEADER.pack(n, ids["pad_id"], ids["eos_id"], ids["bos_id"], ids["unk_id"],
                         add_dummy_prefix, 1, 0)
    blob = b"".join(out)
    parse_blob(blob)
    return blob


def _read_model_proto(model: bytes):
    """(pieces, special ids) of a serialized ``sentencepiece.ModelProto``.

    pieces: list of (surface UTF-8 bytes, score as 4 raw little-endian f32 bytes, SP type).
    Field numbers: ModelProto.pieces = 1, .trainer_spec = 2; SentencePiece.piece = 1,
    .score = 2 (float), .type = 3 (enum, default NORMAL = 1); TrainerSpec.unk_id = 40,
    .bos_id = 41, .eos_id = 42, .pad_id = 43 (defaults 0, 1, 2, -1).
    """
    ids = {"unk_id": 0, "bos_id": 1, "eos_id": 2, "pad_id": -1}
    id_fields = {40: "unk_id", 41: "bos_id", 42: "eos_id", 43: "pad_id"}
    pieces = []
    for field, wire, value in _proto_fields(model, 0, len(model)):
        if field == 1 and wire == 2:
            surface, score, sp_type = b"", b"\x00\x00\x00\x00", 1
            for f2, w2, v2 in _proto_fields(model, value[0], value[1]):
                if f2 == 1 and w2 == 2:
                    surface = model[v2[0]:v2[1]]
                elif f2 == 2 and w2 == 5:
                    score = v2
                elif f2 == 3 and w2 == 0:
                    sp_type = v2
            pieces.append((surface, score, sp_type))
        elif field == 2 and wire == 2:
            for f2, w2, v2 in _proto_fields(model, value[0], value[1]):
                if f2 in id_fields and w2 == 0:
                    v2 &= 0xFFFFFFFF  # int32 on the wire as a 64-bit two's complement varint
                    ids[id_fields[f2]] = v2 - (1 << 32) if v2 >= 1 << 31 else v2
    return pieces, ids


def _proto_fields(buf: bytes, pos: int, end: int):
    """Yield (field number, wire type, value) of a protobuf message in buf[pos:end].

    value: int for varints, raw bytes for fixed32/fixed64, (start, end) for length-delimited.
    """
    where = "sentencepiece model"
    while pos < end:
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if end - pos < width:
                raise CactError("truncated fixed-width protobuf field", where=where, offset=pos)
            value, pos = buf[pos:pos + width], pos + width
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            if length > end - pos:
                raise CactError("protobuf field runs past the end of its message", where=where, offset=pos)
            value, pos = (pos, pos + length), pos + length
        else:
            raise CactError(f"unsupported protobuf wire type {wire}", where=where, offset=pos)
        yield field, wire, value


def _varint(buf: bytes, pos: int, end: int):
    result = shift = 0
    start = pos
    while True:
        if pos >= end:
            raise CactError("truncated protobuf varint", where="sentencepiece model", offset=start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise CactError("protobuf varint longer than 10 bytes", where="sentencepiece model",
                            offset=start)


# --------------------------------------------------------------------------- encoder / decoder

class Tokenizer:
    """Encoder and decoder of docs/spec/prompt-and-tokenizer.md sections 2 and 3."""

    def __init__(self, data: TokenizerData):
        pieces = list(data.pieces)
        n = len(pieces)
        if n == 0 or n != data.n_pieces:
            raise CactError(f"tokenizer has {n} pieces but n_pieces is {data.n_pieces}")
        for name in ("pad_id", "eos_id", "bos_id", "unk_id"):
            value = getattr(data, name)
            if not 0 <= value < n:
                raise CactError(f"{name} {value} is not below n_pieces {n}")
        if data.add_dummy_prefix not in (0, 1) or data.byte_fallback not in (0, 1):
            raise CactError("add_dummy_prefix and byte_fallback must be 0 or 1")
        self.n_pieces = n
        self.pad_id, self.eos_id = data.pad_id, data.eos_id
        self.bos_id, self.unk_id = data.bos_id, data.unk_id
        self.add_dummy_prefix = data.add_dummy_prefix
        self.byte_fallback = data.byte_fallback
        self._scores = [float(p[0]) for p in pieces]
        self._types = [p[1] for p in pieces]
        self._surfaces = [p[2] for p in pieces]
        self._vocab = {}
        self._byte_of = {}  # piece id -> byte value, for BYTE pieces
        byte_ids = [None] * 256
        for i, (score, ptype, surface) in enumerate(pieces):
            if surface in self._vocab:
                raise CactError(f"surface {_show(surface)} duplicates piece {self._vocab[surface]}",
                                where=f"tokenizer piece {i}")
            if math.isnan(self._scores[i]):
                raise CactError("score is NaN", where=f"tokenizer piece {i}")
            self._vocab[surface] = i
            if ptype == BYTE:
                value = _byte_value(surface)
                if value is None:
                    raise CactError(f"BYTE piece surface {_show(surface)} is not <0xHH>",
                                    where=f"tokenizer piece {i}")
                byte_ids[value] = i
                self._byte_of[i] = value
        if self.byte_fallback:
            if None in byte_ids:
                raise CactError(f"byte_fallback is 1 but there is no BYTE piece "
                                f"<0x{byte_ids.index(None):02X}>")
            self._byte_ids = byte_ids
        else:
            self._byte_ids = None
        self._utf8 = [s.encode("utf-8") for s in self._surfaces]
        self._vocab_plain = None  # the vocabulary without USER_DEFINED pieces, when needed
        # Markers: USER_DEFINED pieces, longest (in code points) first, ties in id order;
        # grouped by first code point (only those can match at a given position).
        order = sorted((i for i in range(n) if self._types[i] == USER_DEFINED),
                       key=lambda i: (-len(self._surfaces[i]), i))
        self._markers = {}
        for i in order:
            self._markers.setdefault(self._surfaces[i][0], []).append((self._surfaces[i], i))

    # ---- construction helpers
    @classmethod
    def from_blob(cls, blob, base_offset: int = 0) -> "Tokenizer":
        return cls(parse_blob(blob, base_offset))

    @classmethod
    def from_model(cls, model_path_or_bytes, add_dummy_prefix: int = 1) -> "Tokenizer":
        return cls.from_blob(build_blob(model_path_or_bytes, add_dummy_prefix))

    # ---- vocabulary queries
    def piece_id(self, surface: str) -> int:
        """The id of the piece whose surface is ``surface`` (CactError if there is none)."""
        pid = self._vocab.get(surface)
        if pid is None:
            raise CactError(f"no piece with surface {_show(surface)}")
        return pid

    def id_to_piece(self, pid: int) -> str:
        return self._surfaces[self._check_id(pid)]

    def piece_type(self, pid: int) -> int:
        return self._types[self._check_id(pid)]

    def piece_score(self, pid: int) -> float:
        return self._scores[self._check_id(pid)]

    def _check_id(self, pid, position=None) -> int:
        try:
            value = operator.index(pid)
        except TypeError:
            raise CactError(f"token id {pid!r} is not an integer",
                            where=None if position is None else f"token {position}") from None
        if not 0 <= value < self.n_pieces:
            raise CactError(f"token id {value} is outside 0..{self.n_pieces - 1}",
                            where=None if position is None else f"token {position}")
        return value

    # ---- encoder (section 2)
    def encode(self, text: str, markers: bool = True) -> list:
        """Piece ids of ``text``; no BOS/EOS is added.

        ``markers=True`` (the default) is the reference encoder: USER_DEFINED pieces (the
        chat markers) are matched anywhere in the text.  ``markers=False`` encodes the text
        as if the vocabulary had no USER_DEFINED pieces: a marker's characters go through
        BPE and byte fallback like any other text, and no USER_DEFINED id is produced.
        """
        if markers is not True and markers is not False:
            raise CactError(f"markers must be True or False, not {markers!r}")
        if markers:
            return self._encode(text, None)
        return self.encode_segments(((text, False),))

    def encode_segments(self, segments) -> list:
        """Piece ids of the concatenation of ``segments``, a sequence of ``(text, markers)``.

        Markers are matched only inside the runs of consecutive segments whose ``markers``
        is True, as if each such run ended where the next ``markers=False`` segment begins
        (so a marker never takes characters of a ``False`` segment).  Everything else is the
        encoding of the whole text: one dummy prefix, BPE over the stretches between matched
        markers whatever segments they cross.  With every ``markers`` True the result is
        ``encode("".join(texts))`` exactly.  If some segment has ``markers=False``, BPE
        leaves USER_DEFINED pieces out of its merges and final lookups (in the ``True``
        parts this changes nothing: a stretch between matched markers holds no marker there).
        """
        texts, plain, pos = [], [], 0
        for item in segments:
            try:
                text, allow = item
            except (TypeError, ValueError):
                raise CactError(f"a segment must be a (text, markers) pair, not {item!r}") from None
            if not isinstance(text, str):
                raise CactError(f"segment text must be a str, not {type(text).__name__}")
            if allow is not True and allow is not False:
                raise CactError(f"segment markers must be True or False, not {allow!r}")
            if not allow and text:
                if plain and plain[-1][1] == pos:
                    plain[-1] = (plain[-1][0], pos + len(text))
                else:
                    plain.append((pos, pos + len(text)))
            texts.append(text)
            pos += len(text)
        return self._encode("".join(texts), plain if plain else None)

    def _encode(self, text: str, plain) -> list:
        """The encoder; ``plain``: None, or sorted disjoint ``(start, end)`` code-point ranges
        of ``text`` where no marker may match."""
        if not isinstance(text, str):
            raise CactError(f"encode needs a str, not {type(text).__name__}")
        if not text:
            return []
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CactError(f"text has a lone surrogate U+{ord(text[exc.start]):04X} at index "
                            f"{exc.start}; it cannot be encoded") from None
        s = text.replace(" ", SPACE_PIECE)
        shift = 0
        if self.add_dummy_prefix == 1:
            s = SPACE_PIECE + s
            shift = 1
        markers = self._markers
        if plain is None:
            vocab = self._vocab
        else:
            vocab = self._plain_vocab()
            # the ranges in positions of s (after the dummy prefix)
            plain = [(a + shift, b + shift) for a, b in plain]
        if not markers:
            return self._bpe(s, vocab)
        ids = []
        pending = 0  # start of the pending (not yet encoded) buffer
        i, n = 0, len(s)
        k = 0  # index of the first plain range that does not end at or before i
        while i < n:
            candidates = markers.get(s[i])
            if candidates is not None:
                limit = n
                if plain is not None:
                    while k < len(plain) and plain[k][1] <= i:
                        k += 1
                    if k < len(plain):
                        limit = i if plain[k][0] <= i else plain[k][0]
                for surface, pid in candidates:
                    if s.startswith(surface, i, limit):
                        if pending < i:
                            ids.extend(self._bpe(s[pending:i], vocab))
                        ids.append(pid)
                        i += len(surface)
                        pending = i
                        break
                else:
                    i += 1
            else:
                i += 1
        if pending < n:
            ids.extend(self._bpe(s[pending:], vocab))
        return ids

    def _plain_vocab(self) -> dict:
        """The vocabulary without its USER_DEFINED pieces (built once)."""
        plain = self._vocab_plain
        if plain is None:
            types = self._types
            plain = {surface: i for surface, i in self._vocab.items() if types[i] != USER_DEFINED}
            self._vocab_plain = plain
        return plain

    def _bpe(self, segment: str, vocab: dict) -> list:
        """BPE on one marker-free segment: highest score first, leftmost on ties; ``vocab``
        is the surface -> id map merges and final symbols are looked up in."""
        scores = self._scores
        syms = list(segment)
        n = len(syms)
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        # Heap entries: (-score, left index, right index, length of right symbol when pushed).
        # An entry is stale when `left` died, `left` no longer neighbours `right`, or `right`
        # grew since (a symbol only changes by absorbing its right neighbour).
        heap = []
        for k in range(n - 1):
            pid = vocab.get(syms[k] + syms[k + 1])
            if pid is not None:
                heap.append((-scores[pid], k, k + 1, 1))
        heapq.heapify(heap)
        push, pop = heapq.heappush, heapq.heappop
        while heap:
            _, left, right, rlen = pop(heap)
            if syms[left] is None or nxt[left] != right or len(syms[right]) != rlen:
                continue
            syms[left] += syms[right]
            syms[right] = None
            after = nxt[right]
            nxt[left] = after
            if after != -1:
                prv[after] = left
            before = prv[left]
            if before != -1:
                pid = vocab.get(syms[before] + syms[left])
                if pid is not None:
                    push(heap, (-scores[pid], before, left, len(syms[left])))
            if after != -1:
                pid = vocab.get(syms[left] + syms[after])
                if pid is not None:
                    push(heap, (-scores[pid], left, after, len(syms[after])))
        ids = []
        k = 0
        while k != -1:
            sym = syms[k]
            pid = vocab.get(sym)
            if pid is not None:
                ids.append(pid)
            elif self._byte_ids is not None:
                ids.extend(self._byte_ids[b] for b in sym.encode("utf-8"))
            else:
                ids.append(self.unk_id)
            k = nxt[k]
        return ids

    # ---- decoder (section 3)
    def decode(self, ids) -> str:
        """Text of a sequence of piece ids (CactError on an id outside the vocabulary)."""
        out = bytearray()
        types, utf8, byte_of = self._types, self._utf8, self._byte_of
        for position, pid in enumerate(ids):
            pid = self._check_id(pid, position)
            ptype = types[pid]
            if ptype == BYTE:
                out.append(byte_of[pid])
            elif ptype != CONTROL and ptype != UNKNOWN:
                out += utf8[pid]
        text = out.decode("utf-8", "replace").replace(SPACE_PIECE, " ")
        if self.add_dummy_prefix == 1 and text.startswith(" "):
            text = text[1:]
        return text
