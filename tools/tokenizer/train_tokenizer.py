"""Train the two SentencePiece BPE tokenizers shipped in ``generator/data/``.

    tok1k.model   1024 pieces
    tok8k.model   8192 pieces

Both are trained on the committed corpus in ``tools/tokenizer/corpus/`` (see its README)
with the settings the blob/encoder of ``docs/spec/prompt-and-tokenizer.md`` needs to agree with the
SentencePiece library: identity normalisation, no whitespace collapsing, a dummy prefix,
byte fallback, pad/eos/bos/unk = 0/1/2/3 and the ten chat markers as user-defined symbols
(ids 4..13, in the order of ``CHAT_MARKERS``).

Training input: every corpus file is split at blank lines into records (a chat transcript,
or a paragraph of the pydoc text); each record, newlines included, is one training
"sentence", fed through ``sentence_iterator`` so that LF is an ordinary character of the
vocabulary.  Records longer than ``MAX_SENTENCE_BYTES`` are cut at line boundaries.  The
model is written through ``model_writer``, so no file path ends up inside the model.

Determinism: one thread, fixed random seed, fixed input order.  ``--check`` retrains in
memory and compares the bytes with the committed files (exit status 1 on a difference).

Run from anywhere::

    .venv/bin/python tools/tokenizer/train_tokenizer.py            # (re)write both models
    .venv/bin/python tools/tokenizer/train_tokenizer.py --check    # verify reproducibility
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA_DIR = HERE.parent.parent / "generator" / "data"   # where synth reads the models
CORPUS_DIR = HERE / "corpus"
CORPUS_FILES = ("chat_transcripts.txt", "pydoc_topics.txt")
MODELS = {"tok1k.model": 1024, "tok8k.model": 8192}
CHAT_MARKERS = (
    "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tools>", "</tools>",
    "<tool_call>", "</tool_call>", "<tool_result>", "</tool_result>",
)
SEED = 1234
MAX_SENTENCE_BYTES = 8192


def corpus_records(corpus_dir: Path = CORPUS_DIR) -> list[str]:
    """All training sentences, in a fixed order."""
    records = []
    for name in CORPUS_FILES:
        text = (corpus_dir / name).read_bytes().decode("utf-8")
        for record in text.split("\n\n"):
            record = record.strip("\n")
            if not record:
                continue
            records.extend(_cut(record))
    return records


def _cut(record: str) -> list[str]:
    if len(record.encode("utf-8")) <= MAX_SENTENCE_BYTES:
        return [record]
    out, cur, size = [], [], 0
    for line in record.split("\n"):
        n = len(line.encode("utf-8")) + 1
        if cur and size + n > MAX_SENTENCE_BYTES:
            out.append("\n".join(cur))
            cur, size = [], 0
        cur.append(line[: MAX_SENTENCE_BYTES // 4])  # <= 8192 bytes even at 4 bytes/char; no corpus line is that long
        size += n
    if cur:
        out.append("\n".join(cur))
    return out


def trainer_options(vocab_size: int) -> dict:
    return dict(
        model_type="bpe",
        vocab_size=vocab_size,
        hard_vocab_limit=True,
        character_coverage=0.9995,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=True,
        byte_fallback=True,
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        user_defined_symbols=list(CHAT_MARKERS),
        max_sentence_length=MAX_SENTENCE_BYTES,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        num_threads=1,
        minloglevel=2,
    )


def train(vocab_size: int, records: list[str]) -> bytes:
    import sentencepiece as spm

    spm.set_random_generator_seed(SEED)
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(records), model_writer=out, **trainer_options(vocab_size))
    model = out.getvalue()
    _check_model(model, vocab_size)
    return model


def _check_model(model: bytes, vocab_size: int) -> None:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model)
    if sp.get_piece_size() != vocab_size:
        raise SystemExit(f"trained {sp.get_piece_size()} pieces, wanted {vocab_size}")
    specials = (sp.pad_id(), sp.eos_id(), sp.bos_id(), sp.unk_id())
    if specials != (0, 1, 2, 3):
        raise SystemExit(f"special ids are {specials}, wanted (0, 1, 2, 3)")
    for i, marker in enumerate(CHAT_MARKERS, start=4):
        if sp.id_to_piece(i) != marker or sp.piece_to_id(marker) != i:
            raise SystemExit(f"marker {marker} is not piece {i}")
    for b in range(256):
        if not sp.is_byte(sp.piece_to_id(f"<0x{b:02X}>")):
            raise SystemExit(f"byte piece <0x{b:02X}> missing")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Train tok1k.model and tok8k.model.")
    ap.add_argument("--check", action="store_true",
                    help="retrain in memory and compare with the committed models")
    ap.add_argument("--out", type=Path, default=DATA_DIR)
    args = ap.parse_args(argv)
    records = corpus_records()
    status = 0
    for name, vocab_size in MODELS.items():
        model = train(vocab_size, records)
        path = args.out / name
        if args.check:
            same = path.exists() and path.read_bytes() == model
            print(f"{name}: {'identical' if same else 'DIFFERENT'} ({len(model)} bytes)")
            status |= 0 if same else 1
        else:
            path.write_bytes(model)
            print(f"wrote {path}: {vocab_size} pieces, {len(model)} bytes")
    return status


if __name__ == "__main__":
    sys.exit(main())
