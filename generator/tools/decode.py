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
still fits, so the call is always complete.  The same rule keeps the list within the
envelope's ``CALL_MAX_JSON`` bytes: the bytes written so far, the piece's and the shortest
completion's must fit, so a long answer never truncates the call.

``Prefix`` is the twin of a firmware's prefix snapshot (docs/snapshot.md): the state after
the built-in tools' constant prompt prefix, which a session's first turn starts from when
its prompt begins with those tokens.
"""

from __future__ import annotations

import copy
import json

import numpy as np

from generator.archive.tokenizer import BYTE, NORMAL
from generator.errors import CactError
from generator.model import numerics as nm
from generator.tools import grammar as gm
from generator.tools.schema import CALL_MAX_JSON   # (a module global: tests shrink it here)

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
        self.forced = g.force_call
        self.json = 0          # bytes of the call list written so far

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
                if nxt is None:
                    continue
                rest = gm.min_bytes(g, nxt)
                if rest + 2 <= R - 1 and self.json + len(b) + rest <= CALL_MAX_JSON:
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
                self.json += len(self.pieces[t])
        elif self.phase == END:
            self.phase = DONE


def token_probability(logits: np.ndarray, t: int) -> np.float32:
    """softmax(logits)[t] in f32: e_i = exp(l_i - max), S = Σ e_i ascending, e_t / S."""
    lg = np.asarray(logits, dtype=F32)
    e = nm.exp(lg - lg.max())
    s = np.cumsum(e, dtype=F32)[-1]
    return F32(e[t] / s)


REPLY_HEAD = "<|im_end|>\n<|im_start|>user\n<tool_result>"
REPLY_TAIL = "</tool_result><|im_end|>\n<|im_start|>assistant\n"


def reply_ids(tok, results: str) -> list:
    """The ids that continue a session with the caller's results (docs/grammar.md, "Multi-turn"):
    ``<|im_end|>`` (chosen at the end of the turn, never fed), then a user turn holding the
    results between ``<tool_result>`` markers, then the assistant's header.  The results are
    encoded with chat markers off; the dummy-prefix piece an encoder puts in front of the
    text is dropped, so the ids are those of the whole conversation encoded at once."""
    ids = tok.encode_segments([(REPLY_HEAD, True), (results, False), (REPLY_TAIL, True)])
    if tok.add_dummy_prefix and ids and ids[0] == tok.piece_id("\u2581"):
        ids = ids[1:]
    return ids


def prefix_ids(tok, tools_text: str) -> list:
    """The tokens a prefix snapshot holds (``needle --snapshot-save``): the prompt of the tool
    list with an empty query and no system, from BOS up to and including ``</tools>``.  A
    marker piece ends every text piece before it, so these ids begin the prompt of every
    query (docs/snapshot.md)."""
    from generator.tools.prompt import render_prompt_ids
    ids = render_prompt_ids(tok, tools_text, "")
    close = tok.piece_id("</tools>")
    if close < 0 or close not in ids:
        raise CactError("the tokenizer has no </tools> marker, so no prefix is constant: build with snapshot=0")
    return ids[:ids.index(close) + 1]


class Prefix:
    """The twin of a prefix snapshot: the reference state after ``prefix_ids``."""

    def __init__(self, model, tok, tools_text: str):
        self.ids = prefix_ids(tok, tools_text)
        self.state = model.new_state()
        model.forward(self.state, self.ids)


class Session:
    """One conversation on the reference: turns keep the KV state (twin of the CLI's
    --reply and of needle_call_turn called again on the same engine).  prefix: the
    firmware's prefix snapshot (Prefix), or None."""

    def __init__(self, model, tok, g, prefix: Prefix | None = None, head_tokens: int = 0):
        self.model, self.tok, self.g, self.prefix = model, tok, g, prefix
        self.head_tokens = head_tokens     # the C engine's head_tokens=N (0: heads not built)
        self.state = model.new_state()
        self.pos = 0
        self.fed = []                      # every token fed since reset (the heads' input)
        self.retrieved = None              # the tools rendered, when retrieval chose them (retrieval.py)
        self.retrieval_tokens = 0          # and the tokens embedding them took (retrieval.py)

    def turn(self, prompt_ids: list, max_new: int) -> dict:
        """Feed prompt_ids at the next positions, decode one constrained turn."""
        max_seq = self.model.hdr["max_seq_len"]
        if not prompt_ids or self.pos + len(prompt_ids) >= max_seq:
            raise CactError(f"the prompt takes {len(prompt_ids)} tokens and does not fit max_seq_len "
                            f"{max_seq} (it must be shorter): shorten the tools or the query")
        budget = min(max_new, max_seq - self.pos - len(prompt_ids))
        list_min = self.g.nodes[self.g.root].min_bytes
        if list_min > CALL_MAX_JSON:
            raise CactError(f"the shortest call takes {list_min} bytes but an envelope holds "
                            f"{CALL_MAX_JSON} (relax the tools' minLength or minItems)")
        need = 1 + list_min + 2
        if budget < need:     # refused before anything is fed, as in C
            raise CactError(f"a call needs at least {need} tokens but only {budget} are left "
                            f"(raise --max-new or shorten the prompt)")
        cached = 0     # a session's first turn starts from the snapshot where the prompt begins with it
        p = self.prefix
        if p is not None and self.pos == 0 and len(prompt_ids) > len(p.ids) and prompt_ids[:len(p.ids)] == p.ids:
            self.state, cached = copy.deepcopy(p.state), len(p.ids)
        logits = self.model.forward(self.state, prompt_ids[cached:])[-1]
        self.pos += len(prompt_ids)
        dec = Decoder(self.g, self.tok, logits.shape[-1], budget)
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
            logits = self.model.forward(self.state, [t])[-1]
            self.pos += 1
        self.fed += list(prompt_ids) + ids[:-1]          # the <|im_end|> chosen last is not fed
        head, router = self.head_outputs()
        env = envelope(self.tok, ids, conf, len(prompt_ids), cached, head, router)
        env["retrieved"] = self.retrieved
        env["retrieval_tokens"] = self.retrieval_tokens if self.retrieved is not None else None
        self.retrieval_tokens = 0          # a reply turn embeds nothing
        return env

    def head_outputs(self):
        """The twins of needle_confidence_head (the sigmoid of the confidence head, code 2)
        and of the router head's raw outputs (code 3), over every token fed since reset;
        None where the C engine cannot compute them (heads not built, or more tokens than
        head_tokens)."""
        codes = {hd.code for hd in self.model.a.heads}
        if not codes & {2, 3} or not 0 < len(self.fed) <= self.head_tokens:
            return None, None
        out = self.model.heads(self.fed)
        head = F32(nm.sigmoid(np.asarray(out["confidence"], dtype=F32))[0]) if 2 in codes else None
        router = [float(v) for v in np.asarray(out["router"], dtype=F32)] if 3 in codes else None
        return head, router

    def reply(self, results: str, max_new: int) -> dict:
        return self.turn(reply_ids(self.tok, results), max_new)


def run_turn(model, tok, g, prompt_ids: list, max_new: int, prefix: Prefix | None = None,
             head_tokens: int = 0) -> dict:
    """Prefill prompt_ids, decode one constrained turn; the envelope fields the C twin
    prints (the timings and memory excepted).  head_tokens: the C engine's head_tokens=N."""
    return Session(model, tok, g, prefix, head_tokens).turn(prompt_ids, max_new)


def raw_turn(model, prompt_ids: list, max_new: int) -> list:
    """The grammar off: the twin of ``needle --tools F --query Q --raw`` (its text is
    ``tok.decode`` of these ids) and of ``--ids``.  Plain greedy ids after the prompt, until
    EOS (not included), ``max_new`` tokens or a full context; ``<|im_end|>`` does not stop it,
    as in C.  A prompt the context cannot hold with one new token is refused, as in C."""
    max_seq = model.hdr["max_seq_len"]
    if not prompt_ids or len(prompt_ids) >= max_seq:
        raise CactError(f"the prompt takes {len(prompt_ids)} tokens and does not fit max_seq_len "
                        f"{max_seq} (it must be shorter): shorten the tools or the query")
    return model.greedy(list(prompt_ids), min(max_seq, len(prompt_ids) + max_new))


def envelope(tok, ids: list, conf, n_prompt: int, n_prefix: int = 0, head=None, router=None) -> dict:
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
        "confidence": float(conf if head is None or not head < conf else head),
        "confidence_source": "decoding" if head is None else "head+decoding",
        "confidence_head": None if head is None else float(head),
        "router": router,
        "text": tok.decode(ids),
        "prompt_tokens": n_prompt,
        "prefix_tokens": n_prefix,
        "retrieved": None,
        "retrieval_tokens": None,
        "generated_tokens": len(ids),
        "calls_json": call_text,
    }
