"""Tokenizer blob, encoder and decoder (generator/tokenizer.py).

Reference for the ids: the SentencePiece library itself, on the two models trained by
tools/tokenizer/train_tokenizer.py.  The encoder follows docs/spec/prompt-and-tokenizer.md section 2,
which the blob specifies; with identity normalisation and no whitespace collapsing it is
expected to agree with ``SentencePieceProcessor.encode`` on every input (it did on every
line of host_tests/data/tokenizer_lines.txt and on the extra cases below: KNOWN_DIVERGENT
is empty).  The one round-trip exception is the literal U+2581 "▁", which the decoder
turns into a space by definition (section 3).
"""

from __future__ import annotations

import importlib.util
import json
import math
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generator.errors import CactError
from generator.archive.tokenizer import (
    BYTE, CHAT_MARKERS, CONTROL, NORMAL, UNKNOWN, USER_DEFINED, TokenizerData, Tokenizer,
    _pack_blob, build_blob, parse_blob,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "generator" / "data"
RECIPE_DIR = ROOT / "tools" / "tokenizer"
MODELS = {"tok1k": (DATA / "tok1k.model", 1024), "tok8k": (DATA / "tok8k.model", 8192)}
LINES_FILE = Path(__file__).resolve().parent / "data" / "tokenizer_lines.txt"

# Lines on which our ids may legitimately differ from SentencePiece's (see docs/tokenizer.md).
# None are known: every line of the corpus agrees for both models.
KNOWN_DIVERGENT: set = set()


def _lines() -> list:
    text = LINES_FILE.read_bytes().decode("utf-8")
    assert text.endswith("\n")
    return text[:-1].split("\n")


LINES = _lines()

# The worked example of docs/spec/prompt-and-tokenizer.md section 4.2.
TOOLS = [{"name": "get_weather", "description": "Get the current weather for a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}]
PROMPT = ("<|im_start|>user\n<tools>"
          + json.dumps(TOOLS, separators=(",", ":"), ensure_ascii=False)
          + "</tools>\nwhat's it like in Lagos right now?<|im_end|>\n<|im_start|>assistant\n")
TARGET = ("<think>\n'Lagos' -> city\n</think>\n<tool_call>"
          '[{"name":"get_weather","arguments":{"city":"Lagos"}}]</tool_call><|im_end|>')

# Inputs a line file cannot hold (LF, CR, NUL, other line breaks) and whole prompts.
EXTRA_CASES = [
    "", "\n", "\n\n", "a\nb", "a\r\nb", "\r", "x\x00y", "\x00", "\x0b\x0c\x1c\x1d\x1e\x85",
    " \n ", "\n<think>\n", "<think>\n'a' -> b\n</think>\n", PROMPT, TARGET, PROMPT + TARGET,
    "<|im_start|>system\ndate: 2025-03-14 Fri 09:30; locale: fr-FR<|im_end|>\n" + PROMPT,
    "\t\n\t", "multi\nline\ntext with  spaces\n", "東京\n北京\n🎉\n",
]


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request):
    path, size = MODELS[request.param]
    blob = build_blob(path)
    return request.param, path, size, blob, Tokenizer.from_blob(blob)


@pytest.fixture(scope="module")
def spm():
    return pytest.importorskip("sentencepiece")


def _sp(spm, path):
    return spm.SentencePieceProcessor(model_file=str(path))


# --------------------------------------------------------------------------- (a) agreement

def test_line_corpus_is_big_and_varied():
    assert len(LINES) >= 500
    assert len(set(LINES)) >= 500
    joined = "".join(LINES)
    for needle in ["\t", "  ", "<|im_st", "<think>", "🎉", "東", "Д", "Ω", "\u0301", "{\""]:
        assert needle in joined
    assert any(line.startswith(" ") for line in LINES)
    assert any(line.endswith(" ") for line in LINES)
    assert all(not (0xD800 <= ord(c) <= 0xDFFF) for c in joined)


def test_encode_matches_sentencepiece_on_every_line(model, spm):
    name, path, _, _, tok = model
    sp = _sp(spm, path)
    mismatches = [line for line in LINES if line not in KNOWN_DIVERGENT
                  and tok.encode(line) != sp.encode(line)]
    assert mismatches == [], f"{name}: {len(mismatches)} of {len(LINES)} lines differ, " \
                             f"first {mismatches[:3]!r}"


def test_encode_matches_sentencepiece_on_extra_cases(model, spm):
    name, path, _, _, tok = model
    sp = _sp(spm, path)
    for text in EXTRA_CASES:
        assert tok.encode(text) == sp.encode(text), (name, text)


def test_encode_matches_sentencepiece_on_corpus_records(model, spm):
    name, path, _, _, tok = model
    sp = _sp(spm, path)
    text = (RECIPE_DIR / "corpus" / "chat_transcripts.txt").read_bytes().decode("utf-8")
    records = text.split("\n\n")[:150]
    pydoc = (RECIPE_DIR / "corpus" / "pydoc_topics.txt").read_bytes().decode("utf-8")
    records += pydoc.split("\n\n")[:150]
    for rec in records:
        assert tok.encode(rec) == sp.encode(rec), (name, rec[:80])


_ALPHABET = st.sampled_from(
    list("ab z▁\t\n\r\x00é東🎉<>|/_0") + list(CHAT_MARKERS)
    + ["<tool", "</", "<|im_", "\u0301", "\ufeff", "\U0001F3FB", "\u200d", "  ", "<s>", "<0x41>"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(_ALPHABET | st.text(max_size=4), max_size=30))
def test_encode_matches_sentencepiece_on_random_text(parts, spm):
    text = "".join(parts)
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return
    for name, (path, _) in MODELS.items():
        tok = _TOKENIZERS[name]
        assert tok.encode(text) == _sp(spm, path).encode(text), (name, text)


_TOKENIZERS = {name: Tokenizer.from_model(path) for name, (path, _) in MODELS.items()}


# --------------------------------------------------------------------------- (b) round trip

def _expected_round_trip(text: str) -> str:
    # Section 3: every "▁" decodes to a space, so a literal U+2581 in the input comes back
    # as U+0020.  That is the only exception (the dummy prefix is removed again).
    return text.replace("\u2581", " ")


def test_round_trip_on_every_line(model):
    name, _, _, _, tok = model
    for line in LINES + EXTRA_CASES:
        assert tok.decode(tok.encode(line)) == _expected_round_trip(line), (name, line)


def test_round_trip_exceptions_are_only_the_block_character(model):
    _, _, _, _, tok = model
    changed = [line for line in LINES if tok.decode(tok.encode(line)) != line]
    assert changed and all("\u2581" in line for line in changed)


def test_decode_matches_sentencepiece_on_every_line(model, spm):
    name, path, _, _, tok = model
    sp = _sp(spm, path)
    for line in LINES + EXTRA_CASES:
        ids = sp.encode(line)
        assert tok.decode(ids) == sp.decode(ids), (name, line)


def test_decode_rules():
    tok = _TOKENIZERS["tok8k"]
    sp_ = tok.piece_id("\u2581")
    assert tok.decode([]) == ""
    assert tok.decode([sp_]) == ""  # the dummy-prefix space is removed
    assert tok.decode([sp_, sp_]) == " "  # only one
    assert tok.decode([tok.bos_id, tok.eos_id, tok.pad_id, tok.unk_id]) == ""  # control/unknown: nothing
    assert tok.decode([4, 6, 5]) == "<|im_start|><think><|im_end|>"  # markers are literal text
    b = lambda v: tok.piece_id(f"<0x{v:02X}>")  # noqa: E731
    assert tok.decode([b(0xE6), b(0x9D), b(0xB1)]) == "東"
    assert tok.decode([b(0xFF)]) == "\ufffd"
    assert tok.decode([b(0xE6), b(0x9D)]) == "\ufffd"  # one U+FFFD per maximal invalid subpart
    assert tok.decode([b(0xE6), b(0x41)]) == "\ufffdA"


def test_decode_rejects_bad_ids(model):
    _, _, size, _, tok = model
    for bad in ([size], [-1], [0, 1, size + 5], [10 ** 30]):
        with pytest.raises(CactError, match="outside 0.."):
            tok.decode(bad)
    with pytest.raises(CactError, match="not an integer"):
        tok.decode(["a"])
    with pytest.raises(CactError, match="not an integer"):
        tok.decode([1.0])


def test_encode_rejects_non_text():
    tok = _TOKENIZERS["tok1k"]
    with pytest.raises(CactError):
        tok.encode(b"bytes")
    with pytest.raises(CactError, match="lone surrogate"):
        tok.encode("a\ud800b")


class _CountingVocab(dict):
    """A vocabulary that counts its look-ups: the BPE's work, counted instead of timed."""

    lookups = 0

    def get(self, key, default=None):
        self.lookups += 1
        return super().get(key, default)


def _bpe_lookups(tok, text: str) -> int:
    vocab = _CountingVocab(tok._plain_vocab())
    tok._bpe(text, vocab)
    return vocab.lookups


def test_encode_work_grows_linearly(model):
    """The BPE (a heap of candidate merges) looks up at most one pair per symbol at the start,
    two per merge (at most one merge per symbol) and one per final symbol: under 4 look-ups
    per character, whatever the text.  A BPE that rescans the segment after every merge does
    about n look-ups per merge, n^2/2 on one long run: 16x the work for 4x the text, where this
    one does 4x.  Counted, not timed (a shared machine's timings say nothing)."""
    _, _, _, _, tok = model
    prompt = "<|im_start|>system\ndate: 2025-03-14<|im_end|>\n" + PROMPT.replace(
        "what's", "what's " + "lorem ipsum dolor sit amet, naïve café 東京 🎉 " * 100)
    assert tok.decode(tok.encode(prompt)) == prompt
    words = prompt.split("<|im_end|>")[-1]
    assert _bpe_lookups(tok, words) < 4 * len(words)
    short, long = _bpe_lookups(tok, "x" * 5000), _bpe_lookups(tok, "x" * 20000)  # one long segment
    assert long < 4 * 20000 and long / short < 4.5


def test_marker_matching_rules():
    tok = _TOKENIZERS["tok8k"]
    sp_ = tok.piece_id("\u2581")
    assert tok.encode("<think>") == [sp_, 6]
    ids = tok.encode("a<think>b")
    assert ids[ids.index(6) + 1:] == [tok.piece_id("b")]  # text after a marker gets no "▁"
    assert tok.encode("a <think>")[-2:] == [sp_, 6]  # a "▁" before a marker stays alone
    assert 6 not in tok.encode("<think")  # partial markers are ordinary text
    assert tok.encode("<think></think>") == [sp_, 6, 7]
    assert tok.encode("") == []


def test_longest_marker_wins():
    # A synthetic vocabulary with nested markers "<a>" and "<a>>": longest first.
    pieces = _small_pieces(extra_user=["<a>", "<a>>"])
    tok = Tokenizer(TokenizerData(len(pieces), 0, 1, 2, 3, 0, 1, pieces))
    a, aa = tok.piece_id("<a>"), tok.piece_id("<a>>")
    assert tok.encode("<a>>") == [aa]
    assert tok.encode("<a>") == [a]
    assert tok.encode("<a><a>>") == [a, aa]


def test_bpe_picks_highest_score_then_leftmost():
    pieces = _small_pieces(extra_normal=[("ab", -1.0), ("bc", -0.5), ("aa", -3.0)])
    tok = Tokenizer(TokenizerData(len(pieces), 0, 1, 2, 3, 0, 1, pieces))
    pid = tok.piece_id
    # "abc": "bc" (-0.5) beats the leftmost "ab" (-1.0).
    assert tok.encode("abc") == [pid("a"), pid("bc")]
    assert tok.encode("abab") == [pid("ab"), pid("ab")]
    # "aaa": "aa" at 0 and at 1 tie: the leftmost merges first -> aa + a.
    assert tok.encode("aaa") == [pid("aa"), pid("a")]
    # an unknown character falls back to its UTF-8 bytes
    assert tok.encode("é") == [pid("<0xC3>"), pid("<0xA9>")]
    nofb = Tokenizer(TokenizerData(len(pieces), 0, 1, 2, 3, 0, 0, pieces))
    assert nofb.encode("é") == [3]


def test_piece_id_and_attributes(model):
    _, _, size, _, tok = model
    assert tok.n_pieces == size
    assert (tok.pad_id, tok.eos_id, tok.bos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.add_dummy_prefix == 1 and tok.byte_fallback == 1
    for i, marker in enumerate(CHAT_MARKERS, start=4):
        assert tok.piece_id(marker) == i
        assert tok.piece_type(i) == USER_DEFINED
    with pytest.raises(CactError, match="no piece"):
        tok.piece_id("definitely not a piece \u2603\u2603")
    with pytest.raises(CactError):
        tok.id_to_piece(size)


# --------------------------------------------------------------------------- (c) blob round trip

def test_blob_round_trip(model, spm):
    name, path, size, blob, _ = model
    data = parse_blob(blob)
    assert data.n_pieces == size == len(data.pieces)
    assert (data.pad_id, data.eos_id, data.bos_id, data.unk_id) == (0, 1, 2, 3)
    assert (data.add_dummy_prefix, data.byte_fallback) == (1, 1)
    assert _pack_blob(data) == blob
    assert build_blob(path.read_bytes()) == blob  # path and bytes give the same blob
    sp = _sp(spm, path)
    assert sp.get_piece_size() == size
    for i, (score, ptype, surface) in enumerate(data.pieces):
        assert surface == sp.id_to_piece(i), (name, i)
        assert struct.pack("<f", score) == struct.pack("<f", sp.get_score(i)), (name, i)
        expected = (BYTE if sp.is_byte(i) else CONTROL if sp.is_control(i) else
                    UNKNOWN if sp.is_unknown(i) else USER_DEFINED if 4 <= i <= 13 else NORMAL)
        assert ptype == expected, (name, i, surface)
    assert [p[1] for p in data.pieces[:14]] == [CONTROL, CONTROL, CONTROL, UNKNOWN] + [USER_DEFINED] * 10
    assert [p[2] for p in data.pieces[14:270]] == [f"<0x{b:02X}>" for b in range(256)]


def test_blob_size_is_reported(model):
    name, _, size, blob, _ = model
    # header + per piece 7 bytes + surface bytes
    data = parse_blob(blob)
    assert len(blob) == 24 + sum(7 + len(p[2].encode("utf-8")) for p in data.pieces)


def test_parse_blob_accepts_memoryview_and_bytearray(model):
    _, _, _, blob, _ = model
    ref = parse_blob(blob)
    assert parse_blob(memoryview(blob)) == ref
    assert parse_blob(bytearray(blob)) == ref
    archive = b"\xAA" * 64 + blob + b"\xBB" * 8
    assert parse_blob(memoryview(archive)[64:64 + len(blob)], base_offset=64) == ref


def test_build_blob_rejects_garbage():
    for bad in (b"\xff", b"\x0a\x05ab", b"", b"\x0b"):
        with pytest.raises(CactError):
            build_blob(bad)
    with pytest.raises(CactError, match="cannot read"):
        build_blob(DATA / "no_such.model")
    with pytest.raises(CactError, match="add_dummy_prefix"):
        build_blob(MODELS["tok1k"][0], add_dummy_prefix=2)


def test_build_blob_add_dummy_prefix_zero():
    blob = build_blob(MODELS["tok1k"][0], add_dummy_prefix=0)
    assert blob[20] == 0
    tok = Tokenizer.from_blob(blob)
    assert tok.encode("<think>") == [6]
    assert tok.decode(tok.encode(" a")) == " a"


# --------------------------------------------------------------------------- (d) malformed blobs

def _small_pieces(extra_user=(), extra_normal=()):
    pieces = [(0.0, CONTROL, "<pad>"), (0.0, CONTROL, "</s>"), (0.0, CONTROL, "<s>"),
              (0.0, UNKNOWN, "<unk>")]
    pieces += [(0.0, USER_DEFINED, m) for m in extra_user]
    pieces += [(0.0, BYTE, f"<0x{b:02X}>") for b in range(256)]
    pieces += [(-float(k), NORMAL, s) for k, s in enumerate(["\u2581", "a", "b", "c", "z"])]
    pieces += [(score, NORMAL, s) for s, score in extra_normal]
    return pieces


def _small_blob(**overrides) -> bytes:
    pieces = overrides.pop("pieces", None) or _small_pieces(extra_user=["<think>"])
    fields = dict(n_pieces=len(pieces), pad_id=0, eos_id=1, bos_id=2, unk_id=3,
                  add_dummy_prefix=1, byte_fallback=1, pieces=pieces)
    fields.update(overrides)
    return _pack_blob(TokenizerData(**fields))


def _record_offset(blob: bytes, index: int) -> int:
    pos = 24
    for _ in range(index):
        pos += 7 + struct.unpack_from("<H", blob, pos + 5)[0]
    return pos


def _raises(blob, pattern, where=None, offset=None, base=0):
    with pytest.raises(CactError, match=pattern) as info:
        parse_blob(blob, base_offset=base)
    err = info.value
    assert "\n" not in str(err)
    if where is not None:
        assert err.where == where
    if offset is not None:
        assert err.offset == offset
    return err


def test_small_blob_is_valid():
    data = parse_blob(_small_blob())
    assert data.n_pieces == 4 + 1 + 256 + 5
    tok = Tokenizer(data)
    assert tok.decode(tok.encode("a b <think>é")) == "a b <think>é"


def test_truncated_header():
    blob = _small_blob()
    for cut in (0, 1, 10, 23):
        _raises(blob[:cut], r"shorter than its 24-byte header", "tokenizer header", 1000, base=1000)


def test_n_pieces_zero():
    blob = bytearray(_small_blob())
    struct.pack_into("<I", blob, 0, 0)
    _raises(bytes(blob), r"n_pieces is 0", "tokenizer header", 0)


def test_n_pieces_absurd_fails_before_allocating():
    blob = bytearray(_small_blob())
    struct.pack_into("<I", blob, 0, 0xFFFFFFFF)
    _raises(bytes(blob), r"n_pieces 4294967295 needs at least", "tokenizer header", 7, base=7)


def test_record_runs_past_end():
    blob = _small_blob()
    last = _record_offset(blob, 265)
    # cut inside the last surface
    _raises(blob[:-1], r"surface of \d+ bytes runs past the end", "tokenizer piece 265", last + 5)
    # cut inside the last record header
    _raises(blob[:last + 3], r"record header needs 7 bytes but only 3", "tokenizer piece 265", last)
    # a surface length that points beyond the blob
    bad = bytearray(blob)
    struct.pack_into("<H", bad, _record_offset(blob, 1) + 5, 0xFFFF)
    _raises(bytes(bad), r"surface of 65535 bytes runs past the end", "tokenizer piece 1")


def test_more_pieces_than_records():
    blob = bytearray(_small_blob())
    n = struct.unpack_from("<I", blob, 0)[0]
    struct.pack_into("<I", blob, 0, n + 1)
    _raises(bytes(blob), r"record header needs 7 bytes but only 0", f"tokenizer piece {n}", len(blob))


def test_trailing_bytes():
    blob = _small_blob()
    _raises(blob + b"\x00\x01", r"2 trailing bytes after the last piece", "tokenizer blob",
            len(blob) + 50, base=50)
    blob2 = bytearray(blob)
    struct.pack_into("<I", blob2, 0, 265)  # one piece fewer: the last record is left over
    _raises(bytes(blob2), r"\d+ trailing bytes", "tokenizer blob", _record_offset(blob, 265))


def _with_piece(index, score=None, ptype=None, surface=None, raw=None):
    pieces = _small_pieces(extra_user=["<think>"])
    s, t, u = pieces[index]
    pieces[index] = (s if score is None else score, t if ptype is None else ptype,
                     u if surface is None else surface)
    blob = bytearray(_pack_blob(TokenizerData(len(pieces), 0, 1, 2, 3, 1, 1, pieces)))
    if raw is not None:  # replace the surface bytes (same length)
        at = _record_offset(blob, index) + 7
        blob[at:at + len(raw)] = raw
    return bytes(blob)


def test_bad_utf8_surface():
    blob = _with_piece(262, surface="ab", raw=b"a\xff")
    _raises(blob, r"not valid UTF-8 \(byte 0xFF at surface byte 1", "tokenizer piece 262",
            _record_offset(blob, 262) + 8)
    surrogate = _with_piece(262, surface="abc", raw=b"\xed\xa0\x80")  # UTF-8 of U+D800
    _raises(surrogate, r"not valid UTF-8", "tokenizer piece 262")
    overlong = _with_piece(262, surface="ab", raw=b"\xc0\xaf")
    _raises(overlong, r"not valid UTF-8", "tokenizer piece 262")


def test_empty_surface():
    blob = _with_piece(263, surface="")
    _raises(blob, r"surface is empty", "tokenizer piece 263", _record_offset(blob, 263) + 5)


def test_type_out_of_range():
    for bad_type in (5, 7, 255):
        blob = _with_piece(262, ptype=bad_type)
        _raises(blob, rf"type {bad_type} is not one of", "tokenizer piece 262",
                _record_offset(blob, 262) + 4)


@pytest.mark.parametrize("field,at", [("pad_id", 4), ("eos_id", 8), ("bos_id", 12), ("unk_id", 16)])
def test_special_id_out_of_range(field, at):
    n = len(_small_pieces(extra_user=["<think>"]))
    for value in (n, n + 1, 0xFFFFFFFF):
        blob = _small_blob(**{field: value})
        _raises(blob, rf"{field} {value} is not below n_pieces {n}", "tokenizer header", at)


def test_duplicate_surface():
    blob = _with_piece(264, surface="a")  # piece 262 is "a"
    _raises(blob, r"surface 'a' duplicates piece 262", "tokenizer piece 264",
            _record_offset(blob, 264) + 7)
    blob = _with_piece(265, ptype=USER_DEFINED, surface="<think>")
    _raises(blob, r"duplicates piece 4", "tokenizer piece 265")


@pytest.mark.parametrize("surface", ["<0xab>", "<0x4G>", "<0x041>", "<0X41>", "0x41", "<0x4>", "A",
                                     "<0x41 ", "\uff1c0x41>"])
def test_malformed_byte_surface(surface):
    blob = _with_piece(5 + 0x41, surface=surface)
    _raises(blob, r"BYTE piece surface .* is not <0xHH>", f"tokenizer piece {5 + 0x41}")


def test_missing_byte_piece():
    blob = _with_piece(5 + 0x41, ptype=NORMAL, surface="A")
    _raises(blob, r"byte_fallback is 1 but there is no BYTE piece <0x41>", "tokenizer header", 21)
    # with byte_fallback = 0 the same vocabulary is acceptable
    pieces = _small_pieces(extra_user=["<think>"])
    pieces[5 + 0x41] = (0.0, NORMAL, "A")
    data = parse_blob(_pack_blob(TokenizerData(len(pieces), 0, 1, 2, 3, 1, 0, pieces)))
    assert data.byte_fallback == 0
    tok = Tokenizer(data)
    assert tok.encode("é") == [tok.piece_id("\u2581"), tok.unk_id]  # unk for an unknown character


def test_flags_must_be_zero_or_one():
    _raises(_small_blob(add_dummy_prefix=2), r"add_dummy_prefix is 2, expected 0 or 1",
            "tokenizer header", 20)
    _raises(_small_blob(byte_fallback=255), r"byte_fallback is 255", "tokenizer header", 21)


def test_nan_score():
    blob = _with_piece(262, score=float("nan"))
    _raises(blob, r"is NaN", "tokenizer piece 262", _record_offset(blob, 262))
    assert parse_blob(_with_piece(262, score=float("-inf"))).pieces[262][0] == -math.inf


def test_parse_blob_rejects_wrong_type():
    with pytest.raises(CactError, match="must be bytes"):
        parse_blob("not bytes")


def test_tokenizer_rejects_inconsistent_data():
    pieces = _small_pieces()
    with pytest.raises(CactError):
        Tokenizer(TokenizerData(len(pieces) + 1, 0, 1, 2, 3, 1, 1, pieces))
    with pytest.raises(CactError):
        Tokenizer(TokenizerData(len(pieces), 0, 1, 2, len(pieces), 1, 1, pieces))
    dup = pieces + [(0.0, NORMAL, "a")]
    with pytest.raises(CactError, match="duplicates"):
        Tokenizer(TokenizerData(len(dup), 0, 1, 2, 3, 1, 1, dup))
    nobyte = [p for p in pieces if p[2] != "<0x00>"]
    with pytest.raises(CactError, match="no BYTE piece <0x00>"):
        Tokenizer(TokenizerData(len(nobyte), 0, 1, 2, 3, 1, 1, nobyte))


# --------------------------------------------------------------------------- (e) fuzzing

def _must_only_raise_cact(blob: bytes):
    try:
        data = parse_blob(blob, base_offset=3)
    except CactError as err:
        assert "\n" not in str(err)
        assert err.offset is None or 3 <= err.offset <= 3 + len(blob)
        return
    tok = Tokenizer(data)
    try:
        tok.decode(tok.encode("a b <think>\u00e9 \u6771 \U0001F389\n"))
        tok.decode(range(tok.n_pieces))
    except CactError:
        pass


_FUZZ_BASE = _small_blob()
_FUZZ_REAL = build_blob(MODELS["tok1k"][0])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_fuzz_random_bytes(blob):
    _must_only_raise_cact(blob)


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=24, max_size=400))
def test_fuzz_random_bytes_with_plausible_header(tail):
    # a small n_pieces so that the record loop is actually reached
    blob = struct.pack("<5I2BH", (tail[0] % 8) + 1, 0, 0, 0, 0, tail[1] % 2, tail[2] % 2, 0) + tail[24:]
    _must_only_raise_cact(blob)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fuzz_single_byte_mutations(data):
    base = data.draw(st.sampled_from([_FUZZ_BASE, _FUZZ_REAL]))
    at = data.draw(st.integers(0, len(base) - 1))
    value = data.draw(st.integers(0, 255))
    blob = bytearray(base)
    blob[at] = value
    _must_only_raise_cact(bytes(blob))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fuzz_truncation_and_extension(data):
    base = data.draw(st.sampled_from([_FUZZ_BASE, _FUZZ_REAL]))
    cut = data.draw(st.integers(0, len(base)))
    extra = data.draw(st.binary(max_size=8))
    _must_only_raise_cact(base[:cut] + extra)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_build_blob_model_bytes(model_bytes):
    try:
        build_blob(model_bytes)
    except CactError:
        pass


# --------------------------------------------------------------------------- (f) the prompt

def test_worked_example_prompt_starts_with_space_then_im_start(model, spm):
    name, path, _, _, tok = model
    space = tok.piece_id("\u2581")
    ids = tok.encode(PROMPT)
    assert ids[:2] == [space, 4], name
    inference = [tok.bos_id] + ids
    assert inference[:3] == [2, space, 4]
    assert tok.decode(ids) == PROMPT
    target = tok.encode(TARGET)
    assert target[:2] == [space, 6]  # the separately encoded target has its own "▁"
    assert tok.encode(TARGET[TARGET.index("<tool_call>"):])[:2] == [space, 10]
    training = inference + target + [tok.eos_id]
    assert tok.decode(target) == TARGET  # decoded alone, the target's "▁" is the removed prefix
    # decoded in one piece, the target's "▁" is an ordinary space after "assistant\n"
    assert tok.decode(training) == PROMPT + " " + TARGET
    assert ids == _sp(spm, path).encode(PROMPT)
    assert target == _sp(spm, path).encode(TARGET)


def test_worked_example_prompt_text():
    assert PROMPT == (
        '<|im_start|>user\n<tools>[{"name":"get_weather","description":"Get the current weather '
        'for a city.","parameters":{"type":"object","properties":{"city":{"type":"string"}},'
        '"required":["city"]}}]</tools>\nwhat\'s it like in Lagos right now?<|im_end|>\n'
        "<|im_start|>assistant\n")


# --------------------------------------------------------------------------- recipe reproducibility

def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_corpus_transcripts_are_reproducible():
    make_corpus = _load(RECIPE_DIR / "make_corpus.py")
    text = make_corpus.make_transcripts()
    assert text.encode("utf-8") == (RECIPE_DIR / "corpus" / "chat_transcripts.txt").read_bytes()
    assert "\r" not in text


def test_models_are_reproducible(spm):
    if spm.__version__ != "0.2.3":
        pytest.skip(f"models were trained with sentencepiece 0.2.3, not {spm.__version__}")
    recipe = _load(RECIPE_DIR / "train_tokenizer.py")
    records = recipe.corpus_records()
    for name, vocab_size in recipe.MODELS.items():
        assert recipe.train(vocab_size, records) == (DATA / name).read_bytes(), name
