"""Constrained decoding of one tool-calling turn, and its envelope (docs/grammar.md); Python
twin of firmware/lib/needle_tool_call.c, token for token.

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
from generator.model.calibration import min_confidence_ppm
from generator.tools import grammar as gm
from generator.tools.prompt import parse_ppm
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


def piece_text(tok, i: int) -> str:
    """A token as an override reports what the model wanted: a text piece's text (U+2581 as
    a space), any other piece as its name (``<0x34>``, ``</tool_call>``)."""
    return tok.id_to_piece(i).replace("\u2581", " ") if tok.piece_type(i) == NORMAL else tok.id_to_piece(i)


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
        self.made = 0          # tokens chosen so far
        self.over_budget = []  # ids allowed() refused for the budget alone (choose: cut)
        self.cut = False       # a better-ranked id than one chosen was refused for the budget alone
        self.overrides = 0     # steps where the grammar refused the model's own first byte
        self.first = None      # the first of them (envelope "override")
        self.called = set()    # the tools the call list names (their own minimum confidences)

    def allowed(self) -> list:
        """(id, state after it) for every allowed id, ascending."""
        R, m = self.budget, self.m
        out, over = [], self.over_budget
        over.clear()
        if self.phase == FREE:
            (out if R - 1 >= self.list_min + 2 else over).append((m.call_open, None))
            if not self.forced:
                fits = R - 1 >= 1 + self.list_min + 2
                bad = {m.im_start, m.im_end, m.call_close}
                for i in range(self.n):
                    if i in bad or self.tok.piece_type(i) in (1, 2):   # UNKNOWN, CONTROL
                        continue
                    (out if fits else over).append((i, None))
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
                if self.json + len(b) + rest > CALL_MAX_JSON:
                    continue
                (out if rest + 2 <= R - 1 else over).append((i, nxt))
            if gm.done(g, st):
                (out if R - 1 >= 1 else over).append((m.call_close, None))
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
        self.cut |= any(logits[i] > logits[best] or (logits[i] == logits[best] and i < best)
                        for i, _ in self.over_budget)
        if self.phase == CALL:
            want = int(np.argmax(logits[:self.n]))     # the model's own first choice
            if want != best:
                self.note_override(want)
        self.push(best, best_state)
        return best

    def note_override(self, want: int) -> None:
        """The grammar refused the model's first choice: an override unless its first byte is
        one the grammar takes here (a longer token that runs past the value, ``Lagos"}``, is
        not one; the budget's refusals are the cut's).  Twin of note_override in C."""
        b = self.pieces[want]
        if b and gm.feed(self.g, self.state, b[0]) is not None:
            return
        self.overrides += 1
        if self.first is not None:
            return
        place, tool, prop = gm.where(self.g, self.state)
        call = self.g.nodes[self.state[1][1]] if len(self.state) > 1 else None
        args = self.g.nodes[self.state[2][1]] if prop >= 0 else None
        self.first = {
            "token": self.made,
            "offset": self.json,
            "place": gm.PLACES[place],
            "tool": call.alts[tool][1:-1].decode("utf-8") if tool >= 0 else None,
            "argument": args.keys[prop][1:-1].decode("utf-8") if prop >= 0 else None,
            "wanted": piece_text(self.tok, want),
            "allowed": gm.allowed_text(self.g, self.state),
            "schema": gm.describe(self.g.nodes[self.state[-1][1]], self.g) if place == gm.AT_VALUE else None,
        }

    def push(self, t: int, nxt) -> None:
        self.budget -= 1
        self.made += 1
        if self.phase == FREE:
            if t == self.m.call_open:
                self.phase = CALL
        elif self.phase == CALL:
            if t == self.m.call_close:
                self.phase = END
            else:
                self.state = nxt
                self.json += len(self.pieces[t])
                if len(nxt) > 1 and nxt[1][2] >= 2:     # a call whose tool name is complete
                    self.called.add(nxt[1][4])
        elif self.phase == END:
            self.phase = DONE


# ---- the judge: may the device act on the call? (docs/grammar.md, "Acting on a call") --------
CUT_NONE, CUT_MAX_NEW, CUT_CONTEXT = 0, 1, 2
# error codes of the envelope (the service's 1 and 2 are the cuts)
E_CUT_MAX_NEW, E_CUT_CONTEXT, E_LOW_CONFIDENCE, E_OVERRIDE = 1, 2, 3, 4
OVERRIDE_MODES = ("refuse", "complete")
REFUSING_PLACES = ("name", "key", "value")    # an override in the list's own structure is not the call's
ERROR_MAX = 255                               # bytes of a message (the C twin's 256-byte buffer)


def ppm_text(ppm: int) -> str:
    """A threshold in parts per million as decimal text, trailing zeros dropped: 500000 -> 0.5."""
    return gm._units(ppm, 10 ** 6)


def parse_min_confidence(text: str) -> int:
    """``--min-confidence X``: a decimal in [0, 1] with at most 6 digits after the point, in
    parts per million (prompt.parse_ppm).  Twin of needle_parse_confidence."""
    ppm = parse_ppm(text)
    if ppm is None:
        raise CactError(f"the minimum confidence must be a number from 0 to 1 with at most 6 decimals "
                        f"(e.g. 0.5; 0 withholds nothing), not {text[:40]!r}")
    return ppm


def override_message(o: dict) -> str:
    """Why a call was refused for an override (twin of override_message in C)."""
    fix = "ask again within the tools' schema, or use overrides complete to take the grammar's value"
    if o["place"] == "value":
        what = f'"{o["argument"]}" of {o["tool"]} (the schema allows {o["schema"]})'
    elif o["place"] == "key":
        what = f"the arguments of {o['tool']} (no such argument, or one is missing)"
    else:
        what = "the tool name (the request needs a tool the list does not have)"
        fix = "add the tool, or answer the user without a call"
    text = f'the grammar overrode the model\'s "{o["wanted"]}" in {what}: the call was refused; {fix}'
    return gm.utf8_cut(text.encode("utf-8"), ERROR_MAX).decode("utf-8")


def judge(env: dict, g, min_ppm: int, mode: str, max_new: int, room: int, called=()) -> dict:
    """Set the envelope's success, error and error_code: a call cut short by the budget, a
    call the grammar bent (mode "refuse": an override in a tool name, an argument key or an
    argument value) and a call below the minimum confidence are not to be acted on, in that
    order.  The minimum is the largest over the tools called of each one's own
    ("x-needle-min-confidence") or else min_ppm.  The calls are kept for logging.  Twin of
    needle_envelope_judge."""
    own = g.tool_ppm or [-1] * len(g.tool_names)
    min_ppm = max((own[t] if own[t] >= 0 else min_ppm for t in called), default=min_ppm)
    env["min_confidence"] = min_ppm / 10 ** 6         # written as the decimal it was given
    o, code, why = env["override"], 0, None
    if env["cut"] == CUT_MAX_NEW:
        code, why = E_CUT_MAX_NEW, (f"the token budget (max_new {max_new}) ran out in the middle of the call, "
                                    "which was cut short: raise max_new")
    elif env["cut"] == CUT_CONTEXT:
        code, why = E_CUT_CONTEXT, (f"the context ran out in the middle of the call ({room} tokens were free "
                                    "for the answer), which was cut short: shorten the prompt or start a new session")
    elif env["function_calls"] and mode == "refuse" and o is not None and o["place"] in REFUSING_PLACES:
        code, why = E_OVERRIDE, override_message(o)
    elif env["function_calls"] and float(env["confidence"]) * 1e6 < min_ppm:
        code, why = E_LOW_CONFIDENCE, (f"the call's confidence {env['confidence']:.9f} is below the minimum "
                                       f"{ppm_text(min_ppm)}: the call was withheld; confirm it with the user, "
                                       "or lower the minimum confidence")
    env["success"], env["error"], env["error_code"] = code == 0, why, code
    return env


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

    def __init__(self, model, tok, g, prefix: Prefix | None = None, head_tokens: int = 0,
                 min_confidence: int | None = None, overrides: str = "refuse"):
        self.model, self.tok, self.g, self.prefix = model, tok, g, prefix
        # the judge's settings (judge()): the threshold in parts per million (None: the
        # generation's recommended one, as the CLI's default) and the overrides mode
        self.min_confidence = min_confidence_ppm(model.a.generation) if min_confidence is None else min_confidence
        self.overrides = overrides
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
        room = max_seq - self.pos - len(prompt_ids)
        budget = min(max_new, room)
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
        env["cut"] = CUT_NONE if not dec.cut else CUT_CONTEXT if room <= max_new else CUT_MAX_NEW
        env["overrides"], env["override"] = dec.overrides, dec.first
        judge(env, self.g, self.min_confidence, self.overrides, max_new, room, dec.called)
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
             head_tokens: int = 0, min_confidence: int | None = None, overrides: str = "refuse") -> dict:
    """Prefill prompt_ids, decode one constrained turn; the envelope fields the C twin
    prints (the timings and memory excepted).  head_tokens: the C engine's head_tokens=N;
    min_confidence (ppm) and overrides: the judge's settings (judge())."""
    return Session(model, tok, g, prefix, head_tokens, min_confidence, overrides).turn(prompt_ids, max_new)


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
