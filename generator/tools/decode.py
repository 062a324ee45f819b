"""Constrained decoding of one tool-calling turn, and its envelope (docs/grammar.md); Python
twin of firmware/cli/needle_tool_call.c, token for token.

The answer runs through four phases: **free** (the optional think block, unconstrained but
for the tokens that would end or break the turn), **call** (after ``<tool_call>``: only
tokens whose bytes keep the output a prefix of a valid call list), **close** (only
``</tool_call>``) and **end** (only ``<|im_end|>``, which ends the turn and is never fed).
With ``force_call`` the answer starts with ``<tool_call>`` and the list holds at least one
call.  The budget ``R`` (tokens that may still be chosen, the ``<|im_end|>`` included) is
``min(max_new, max_seq_len - prompt length)``; a token is allowed only if the shortest
completion after it, counted as one token per byte (every byte is a piece: byte fallback),
still fits, so the call is always complete.
"""

from __future__ import annotations

import json

import numpy as np

from generator.archive.tokenizer import BYTE, NORMAL
from generator.errors import CactError
from generator.model import numerics as nm
from generator.tools import grammar as gm

FREE, CALL, CLOSE, END, DONE = 0, 1, 2, 3, 4
F32 = np.float32


def piece_bytes(tok) -> list:
    """The bytes each id writes into a call (None: not allowed inside one): NORMAL pieces
    as their text with U+2581 as a space, BYTE pieces as their byte."""
    out = []
    for i in range(tok.n_pieces):
        t = tok.piece_type(i)
        if t == NORMAL:
            out.append(tok.id_to_piece(i).replace("\u2581", " ").encode("utf-8"))
        elif t == BYTE:
            out.append(bytes([tok._byte_of[i]]))
        else:
            out.append(None)
    return out


class Markers:
    def __init__(self, tok):
        self.call_open = tok.piece_id("<tool_call>")
        self.call_close = tok.piece_id("</tool_call>")
        self.im_start = tok.piece_id("<|im_start|>")
        self.im_end = tok.piece_id("<|im_end|>")
        self.think_open = tok.piece_id("<think>")
        self.think_close = tok.piece_id("</think>")


class Decoder:
    """The allowed-token rule and state of one turn (twin of needle_call_*)."""

    def __init__(self, g, tok, n_out: int, budget: int):
        self.g, self.tok = g, tok
        self.pieces = piece_bytes(tok)
        self.m = Markers(tok)
        self.n = min(n_out, tok.n_pieces)
        self.phase = FREE
        self.state = gm.start(g)
        self.budget = budget
        self.list_min = g.nodes[g.root].min_bytes
        self.need = 1 + self.list_min + 2           # tokens the shortest answer takes
        if budget < self.need:
            raise CactError(f"a call needs at least {self.need} tokens but only {budget} are left "
                            f"(raise --max-new or shorten the prompt)")
        self.forced = g.force_call

    def allowed(self) -> list:
        """(id, state after it) for every allowed id, ascending."""
        R, m = self.budget, self.m
        out = []
        if self.phase == FREE:
            if R - 1 >= self.list_min + 2:
                out.append((m.call_open, None))
            if not self.forced and R - 1 >= 1 + self.list_min + 2:
                bad = {m.im_start, m.im_end, m.call_close}
                for i in range(self.n):
                    if i in bad or self.tok.piece_type(i) in (1, 2):   # UNKNOWN, CONTROL
                        continue
                    out.append((i, None))
                out.sort()
            return out
        if self.phase == CALL:
            g, st = self.g, self.state
            for i in range(self.n):
                b = self.pieces[i]
                if not b:
                    continue
                nxt = gm.feed_bytes(g, st, b)
                if nxt is not None and gm.min_bytes(g, nxt) + 2 <= R - 1:
                    out.append((i, nxt))
            if gm.done(g, st) and R - 1 >= 1:
                out.append((m.call_close, None))
                out.sort(key=lambda x: x[0])
            return out
        if self.phase == CLOSE:
            return [(m.call_close, None)]
        return [(m.im_end, None)]

    def choose(self, logits: np.ndarray) -> int:
        allowed = self.allowed()
        if not allowed:
            raise CactError("the grammar allows no token (a bug: please report the tool list)")
        best, best_state = allowed[0]
        for i, st in allowed[1:]:
            if logits[i] > logits[best]:
                best, best_state = i, st
        self.push(best, best_state)
        return best

    def push(self, t: int, nxt) -> None:
        self.budget -= 1
        if self.phase == FREE:
            if t == self.m.call_open:
                self.phase = CALL
        elif self.phase == CALL:
            if t == self.m.call_close:
                self.phase = END
            else:
                self.state = nxt
        elif self.phase == END:
            self.phase = DONE


def token_probability(logits: np.ndarray, t: int) -> np.float32:
    """softmax(logits)[t] in f32: e_i = exp(l_i - max), S = Σ e_i ascending, e_t / S."""
    lg = np.asarray(logits, dtype=F32)
    e = nm.exp(lg - lg.max())
    s = np.cumsum(e, dtype=F32)[-1]
    return F32(e[t] / s)


def run_turn(model, tok, g, prompt_ids: list, max_new: int) -> dict:
    """Prefill prompt_ids, decode one constrained turn; the envelope fields the C twin
    prints (the timings and memory excepted)."""
    max_seq = model.hdr["max_seq_len"]
    if len(prompt_ids) >= max_seq:
        raise CactError(f"prompt of {len(prompt_ids)} tokens does not fit max_seq_len {max_seq}")
    budget = min(max_new, max_seq - len(prompt_ids))
    state = model.new_state()
    logits = model.forward(state, prompt_ids)[-1]
    n_out = logits.shape[-1]
    dec = Decoder(g, tok, n_out, budget)
    ids, conf = [], None
    while True:
        in_call = dec.phase == CALL          # the list's tokens and </tool_call>
        t = dec.choose(logits)
        if in_call:
            p = token_probability(logits, t)
            conf = p if conf is None or p < conf else conf
        ids.append(t)
        if dec.phase == DONE:
            break
        logits = model.forward(state, [t])[-1]
    return envelope(tok, ids, conf, len(prompt_ids))


def envelope(tok, ids: list, conf, n_prompt: int) -> dict:
    m = Markers(tok)
    k = ids.index(m.call_open)
    j = ids.index(m.call_close, k)
    call_text = b"".join(piece_bytes(tok)[i] for i in ids[k + 1:j]).decode("utf-8")
    calls = json.loads(call_text)
    reasoning = ""
    free = ids[:k]
    if m.think_open in free:
        a = free.index(m.think_open) + 1
        b = free.index(m.think_close, a) if m.think_close in free[a:] else len(free)
        reasoning = tok.decode(free[a:b]).strip(" \t\n\r\f\v")
    return {
        "type": "call" if calls else "respond",
        "success": True,
        "error": None,
        "error_code": 0,
        "function_calls": calls,
        "reasoning": reasoning,
        "confidence": float(conf),
        "confidence_source": "decoding",
        "text": tok.decode(ids),
        "prompt_tokens": n_prompt,
        "generated_tokens": len(ids),
        "calls_json": call_text,
    }
