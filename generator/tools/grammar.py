"""The call grammar as a byte-level pushdown matcher (docs/grammar.md); Python twin of
firmware/lib/needle_tool_grammar.c, state for state.

A state is a tuple of frames, one per open JSON value, bottom first; ``feed(g, state, b)``
returns the state after byte ``b``, or None when no valid call list starts with the bytes
fed so far plus ``b``.  Every state the matcher returns can still be completed (no dead
ends), and ``min_bytes(g, state)`` is the length of its shortest completion, which the
decoder uses to keep every call inside the token budget.

Frames (tuples; the C ``needle_gframe`` has the same fields):

* ``(CALLS|ARR, node, phase, count, used)``: phase 0 before ``[``, 1 after ``[``, 2 after an
  item, 3 after ``,``, 4 closed; ``used``: the enum values taken (uniqueItems);
* ``(CALL, node, phase, pos, x)``: phase 0 in ``{"name":`` (pos), 1 in the name (x: mask of
  candidate tools), 2 in ``,"arguments":`` (x: the tool), 3 arguments open, 4 before ``}``,
  5 closed;
* ``(OBJ, node, phase, seen, cur, kpos, kmask)``: phase 0 before ``{``, 1 after ``{``, 2 in a key
  (kmask: candidates, kpos: bytes matched), 3 before ``:``, 4 value open or done, 5 after
  ``,``, 6 closed;
* ``(LIT, node, pos, mask)``: mask of the alternatives that match the pos bytes so far;
* ``(INT|NUM, node, neg, P, ndig, frac)``: the digits so far as the integer P, ndig of them
  before the point, frac digits after it (-1: no point yet), neg 0/1, or 2 before the first
  byte;
* ``(STR, node, phase, nch, esc, need, cp, lo, hi, nfa)``: phase 0 before ``"``, 1 inside, 2
  closed; nch characters so far; esc 0 (none), 1 after ``\\``, 2..4 after ``\\u``, ``\\u0``,
  ``\\u00``, 5 after ``\\u00`` and one hex digit; need/cp/lo/hi a UTF-8 character in progress;
  nfa the pattern's position set, or for a span string (docs/grammar.md §2a) ``s0 | k << 32``:
  the k bytes written so far are query[s0:s0+k], s0 the smallest such offset.
"""

from __future__ import annotations

from generator.tools import regex as rx
from generator.tools.schema import (ARR, BIG, CALL, CALL_HEAD, CALL_MID, CALLS, INF, INT, LIT, MAX_DECIMALS,
                                    MAX_INT_DIGITS, MAX_NUM_INT_DIGITS, NUM, OBJ, STR,
                                    is_span, number_min_extra, span_end, span_start)

_SHORT_ESC = {0x22: 0x22, 0x5C: 0x5C, 0x62: 0x08, 0x66: 0x0C, 0x6E: 0x0A, 0x72: 0x0D, 0x74: 0x09}
_SHORT_CTRL = (0x08, 0x09, 0x0A, 0x0C, 0x0D)
_HEX = b"0123456789abcdef"


# ---- frames -----------------------------------------------------------------------------
def initial(g, idx: int, used: int = 0):
    node = g.nodes[idx]
    k = node.kind
    if k in (CALLS, ARR):
        return (k, idx, 0, 0, 0)
    if k == CALL:
        return (k, idx, 0, 0, 0)
    if k == OBJ:
        return (k, idx, 0, 0, -1, 0, 0)
    if k == LIT:
        return (k, idx, 0, ((1 << len(node.alts)) - 1) & ~used)
    if k in (INT, NUM):
        return (k, idx, 2, 0, 0, -1)
    return (k, idx, 0, 0, 0, 0, 0, 0, 0, rx.start(node.pattern) if node.pattern else 0)


def start(g):
    """The state before the first byte of the call list."""
    return (initial(g, g.root),)


def _lit_done(node, pos: int, mask: int) -> int:
    """Index of the alternative complete at pos, or -1."""
    for i, a in enumerate(node.alts):
        if mask >> i & 1 and len(a) == pos:
            return i
    return -1


def complete(g, f) -> bool:
    """Can the frame end here?"""
    k, node = f[0], g.nodes[f[1]]
    if k in (CALLS, ARR):
        return f[2] == 4
    if k == CALL:
        return f[2] == 5
    if k == OBJ:
        return f[2] == 6
    if k == LIT:
        return _lit_done(node, f[2], f[3]) >= 0
    if k in (INT, NUM):
        return f[2] != 2 and f[4] >= 1 and f[5] != 0 and \
            number_min_extra(node, f[2], f[3], f[4], f[5], f[2]) == 0
    return f[2] == 2


def _child_done(g, parent, child):
    """The parent frame once its open child value is complete."""
    k = parent[0]
    if k == ARR and g.nodes[parent[1]].unique:
        alt = _lit_done(g.nodes[child[1]], child[2], child[3])
        return parent[:4] + (parent[4] | 1 << alt,)
    if k == CALL:
        return (k, parent[1], 4, 0, parent[4])
    return parent


def _str_char_ok(node, f, cp: int):
    """The string frame after one whole character cp, or None."""
    nch = f[3]
    if node.max_len >= 0 and nch >= node.max_len:
        return None
    nfa = f[9]
    if node.pattern:
        nfa = rx.step(node.pattern, nfa, cp)
        if not nfa:
            return None
    return (STR, f[1], 1, nch + 1, 0, 0, 0, 0, 0, nfa)


def _str_can_take(node, f, lo: int, hi: int) -> bool:
    """Can a character in [lo, hi] still come (length and pattern allowing)?"""
    if node.max_len >= 0 and f[3] >= node.max_len:
        return False
    return not node.pattern or rx.can_take(node.pattern, f[9], lo, hi)


def _ctrl_ok(node, f, lo: int, hi: int) -> bool:
    """Some control character in [lo, hi] that is written as \\u00xx (not a short escape)."""
    for c in range(lo, hi + 1):
        if c not in _SHORT_CTRL and _str_can_take(node, f, c, c):
            return True
    return False


def _utf8_len(b: int) -> int:
    return 1 if b < 0x80 else 2 if b < 0xE0 else 3 if b < 0xF0 else 4


def span_rest(g, node, f) -> int:
    """Fewest bytes that finish span string frame f (phase 1) before its closing quote (0: the
    quote may come now): the rest of the character in progress, then characters copied on
    from some place of the query that holds the bytes written so far and starts a word, up to
    minLength characters and the end of a word, within maxLength (INF: none)."""
    q, s0, k = g.query, f[9] & 0xFFFFFFFF, f[9] >> 32
    n, pend = len(q), f[5]
    chars = f[3] + (1 if pend else 0)
    best = INF
    for s in range(s0, n - k + 1):
        if (k and not span_start(q, s)) or q[s:s + k] != q[s0:s0 + k]:
            continue
        j, c = s + k + pend, chars
        while j <= n:
            if c >= node.min_len and (j == s or span_end(q, j)):
                best = min(best, j - s - k)
                break
            if j == n or q[j] < 0x20 or q[j] in (0x22, 0x5C) or 0 <= node.max_len <= c:
                break
            j += _utf8_len(q[j])
            c += 1
    return best


def _feed_span(g, node, f, b: int):
    """A span string inside its quotes: what the plain string takes, if the query continues the
    bytes so far with b at the start of a word or inside one, and the string can still be
    finished at the end of a word from there; the quote where one ends."""
    if b == 0x5C:
        return None              # no escapes: '"', '\\' and controls are never copied
    nf = _feed_str(g, node, f, b, False)
    if nf is None:
        return None
    if b == 0x22:
        return nf if span_rest(g, node, f) == 0 else None
    q, s0, k = g.query, f[9] & 0xFFFFFFFF, f[9] >> 32
    for s in range(s0, len(q) - k):
        if q[s + k] == b and span_start(q, s) and q[s:s + k] == q[s0:s0 + k]:
            nf = nf[:9] + (s | (k + 1) << 32,)
            return nf if span_rest(g, node, nf) < INF else None
    return None


def _feed_str(g, node, f, b: int, span_check: bool = True):
    phase, esc, need = f[2], f[4], f[5]
    if span_check and phase == 1 and is_span(g, node):
        return _feed_span(g, node, f, b)
    if phase == 0:
        return (STR,) + f[1:2] + (1,) + f[3:] if b == 0x22 else None
    if phase != 1:
        return None
    if need:                                             # UTF-8 continuation
        if not f[7] <= b <= f[8]:
            return None
        cp = f[6] << 6 | (b & 0x3F)
        if need == 1:
            return _str_char_ok(node, f, cp)
        lo = cp << 6 * (need - 1)
        hi = lo | ((1 << 6 * (need - 1)) - 1)
        if not _str_can_take(node, f, lo, hi):
            return None
        return f[:5] + (need - 1, cp, 0x80, 0xBF, f[9])
    if esc == 1:
        if b == 0x75:                                    # \u
            return f[:4] + (2,) + f[5:] if _ctrl_ok(node, f, 0, 0x1F) else None
        if b in _SHORT_ESC:
            return _str_char_ok(node, f, _SHORT_ESC[b])
        return None
    if esc in (2, 3):                                    # \u0, \u00
        return f[:4] + (esc + 1,) + f[5:] if b == 0x30 else None
    if esc == 4:                                         # \u00[01]
        if b not in (0x30, 0x31):
            return None
        base = (b - 0x30) << 4
        return f[:4] + (5, 0, base) + f[7:] if _ctrl_ok(node, f, base, base + 15) else None
    if esc == 5:
        if b not in _HEX:
            return None
        cp = f[6] | _HEX.index(b)
        if cp in _SHORT_CTRL:
            return None                                   # canonical JSON writes \b \t \n \f \r
        return _str_char_ok(node, f, cp)
    if b == 0x22:
        if f[3] < node.min_len or (node.pattern and not rx.accepts(node.pattern, f[9])):
            return None
        return (STR, f[1], 2) + f[3:]
    if b == 0x5C:
        ok = _str_can_take(node, f, 0x22, 0x22) or _str_can_take(node, f, 0x5C, 0x5C) or \
            any(_str_can_take(node, f, c, c) for c in _SHORT_CTRL) or _ctrl_ok(node, f, 0, 0x1F)
        return f[:4] + (1,) + f[5:] if ok else None
    if b < 0x20:
        return None
    if b < 0x80:
        return _str_char_ok(node, f, b)
    # UTF-8 lead byte: the same ranges as the tokenizer's decoder (no overlongs, surrogates)
    if 0xC2 <= b <= 0xDF:
        need, cp, lo, hi = 1, b & 0x1F, 0x80, 0xBF
    elif 0xE0 <= b <= 0xEF:
        need, cp = 2, b & 0x0F
        lo, hi = (0xA0, 0xBF) if b == 0xE0 else (0x80, 0x9F) if b == 0xED else (0x80, 0xBF)
        # (0xED: the surrogates 0xD800..0xDFFF are not characters)
    elif 0xF0 <= b <= 0xF4:
        need, cp = 3, b & 0x07
        lo, hi = (0x90, 0xBF) if b == 0xF0 else (0x80, 0x8F) if b == 0xF4 else (0x80, 0xBF)
    else:
        return None
    c_lo = cp << 6 * need
    c_hi = c_lo | ((1 << 6 * need) - 1)
    if need == 1:
        c_lo = max(c_lo, 0x80)
    elif need == 2:
        c_lo = max(c_lo, 0x800)
        if b == 0xED:
            c_hi = 0xD7FF
    else:
        c_lo, c_hi = max(c_lo, 0x10000), min(c_hi, 0x10FFFF)
    if not _str_can_take(node, f, c_lo, c_hi):
        return None
    return f[:5] + (need, cp, lo, hi, f[9])


def _feed_num(node, f, b: int):
    neg, P, ndig, frac = f[2], f[3], f[4], f[5]
    is_num = node.kind == NUM
    if b == 0x2D:                                         # '-'
        if neg != 2:
            return None
        nf = (f[0], f[1], 1, 0, 0, -1)
    elif 0x30 <= b <= 0x39:
        d = b - 0x30
        sg = 0 if neg == 2 else neg
        if frac >= 0:
            if frac >= MAX_DECIMALS:
                return None
            nf = (f[0], f[1], sg, P * 10 + d, ndig, frac + 1)
        else:
            if ndig >= 1 and P == 0:
                return None
            if ndig >= (MAX_NUM_INT_DIGITS if is_num else MAX_INT_DIGITS):
                return None
            nf = (f[0], f[1], sg, P * 10 + d, ndig + 1, -1)
    elif b == 0x2E and is_num and frac < 0 and ndig >= 1 and neg != 2:
        nf = (f[0], f[1], neg, P, ndig, 0)
    else:
        return None
    if number_min_extra(node, nf[2], nf[3], nf[4], nf[5], nf[2]) < 0:
        return None
    return nf


def _feed_lit(alts, f, b: int):
    pos, mask = f[2], f[3]
    out = 0
    for i, a in enumerate(alts):
        if mask >> i & 1 and len(a) > pos and a[pos] == b:
            out |= 1 << i
    return (f[0], f[1], pos + 1, out) if out else None


def _feed_top(g, st: list, b: int) -> bool:
    """Feed b to the top frame of st (a list, changed in place); False if it refuses."""
    f = st[-1]
    k, node = f[0], g.nodes[f[1]]
    if k == STR:
        nf = _feed_str(g, node, f, b)
    elif k in (INT, NUM):
        nf = _feed_num(node, f, b)
    elif k == LIT:
        nf = _feed_lit(node.alts, f, b)
    elif k in (CALLS, ARR):
        phase, count = f[2], f[3]
        child = g.nodes[node.child]
        if phase == 0:
            nf = f[:2] + (1,) + f[3:] if b == 0x5B else None
        elif phase in (1, 2) and b == 0x5D and count >= node.min_len:
            nf = f[:2] + (4,) + f[3:]
        elif phase == 2 and b == 0x2C:
            if node.max_len >= 0 and count >= node.max_len:
                return False
            if node.unique and bin(f[4]).count("1") >= len(child.alts):
                return False
            nf = f[:2] + (3,) + f[3:]
        elif phase in (1, 3):
            if phase == 1 and node.max_len == 0:
                return False
            st[-1] = f[:2] + (2, count + 1) + f[4:]
            st.append(initial(g, node.child, f[4] if node.unique else 0))
            if _feed_top(g, st, b):
                return True
            del st[-1]
            st[-1] = f
            return False
        else:
            nf = None
    elif k == CALL:
        phase, pos = f[2], f[3]
        if phase == 0:
            if CALL_HEAD[pos] != b:
                return False
            nf = (k, f[1], 1, 0, (1 << len(node.alts)) - 1) if pos + 1 == len(CALL_HEAD) \
                else (k, f[1], 0, pos + 1, 0)
        elif phase == 1:
            lit = _feed_lit(node.alts, (LIT, f[1], pos, f[4]), b)
            if lit is None:
                return False
            done = _lit_done(node, lit[2], lit[3])
            nf = (k, f[1], 2, 0, done) if done >= 0 else (k, f[1], 1, lit[2], lit[3])
        elif phase == 2:
            if CALL_MID[pos] != b:
                return False
            if pos + 1 < len(CALL_MID):
                nf = (k, f[1], 2, pos + 1, f[4])
            else:
                st[-1] = (k, f[1], 3, 0, f[4])
                st.append(initial(g, node.props[f[4]]))
                return True
        elif phase == 4:
            nf = (k, f[1], 5, 0, f[4]) if b == 0x7D else None
        else:
            nf = None
    else:                                                 # OBJ
        phase, seen = f[2], f[3]
        n = len(node.keys)
        if phase == 0:
            nf = (k, f[1], 1) + f[3:] if b == 0x7B else None
        elif phase in (1, 4) and b == 0x7D:
            nf = (k, f[1], 6) + f[3:] if (node.required & ~seen) == 0 else None
        elif phase == 4 and b == 0x2C:                   # only if a property is left
            nf = (k, f[1], 5) + f[3:] if ((1 << n) - 1) & ~seen else None
        elif phase in (1, 5) and b == 0x22:
            cand = ((1 << n) - 1) & ~seen
            nf = (k, f[1], 2, seen, -1, 1, cand) if cand else None
        elif phase == 2:
            kpos, kmask = f[5], f[6]
            out = 0
            for i, key in enumerate(node.keys):
                if kmask >> i & 1 and len(key) > kpos and key[kpos] == b:
                    out |= 1 << i
            if not out:
                return False
            done = -1
            for i, key in enumerate(node.keys):
                if out >> i & 1 and len(key) == kpos + 1:
                    done = i
            nf = (k, f[1], 3, seen | 1 << done, done, 0, 0) if done >= 0 else (k, f[1], 2, seen, -1, kpos + 1, out)
        elif phase == 3 and b == 0x3A:
            st[-1] = (k, f[1], 4) + f[3:]
            st.append(initial(g, node.props[f[4]]))
            return True
        else:
            nf = None
    if nf is None:
        return False
    st[-1] = nf
    return True


def feed(g, state: tuple, b: int):
    """The state after byte b, or None."""
    st = list(state)
    while True:
        if _feed_top(g, st, b):
            return tuple(st)
        if len(st) == 1 or not complete(g, st[-1]):
            return None
        child = st.pop()
        st[-1] = _child_done(g, st[-1], child)


def feed_bytes(g, state: tuple, data: bytes):
    for b in data:
        state = feed(g, state, b)
        if state is None:
            return None
    return state


def done(g, state: tuple) -> bool:
    """Is the call list complete (the closing ``]`` fed)?"""
    return len(state) == 1 and state[0][2] == 4


# ---- shortest completion ------------------------------------------------------------------
# control characters canonical JSON writes as \\u00XX (not \\b \\t \\n \\f \\r)
_LONG_CTRL = ((0x00, 0x07), (0x0B, 0x0B), (0x0E, 0x1F))


def _pending_chars(f) -> list:
    """(bytes still to write, lo, hi): the code points the character in progress of string
    frame f can still become, grouped by the bytes left to finish it.  After a backslash the
    short escapes cost one more byte and the \\u00XX controls five, so the shortest completion
    must look at which characters the pattern can take, not at every item (issue 41, item 7)."""
    esc, need = f[4], f[5]
    if need:      # a UTF-8 character: the code points its next byte's range leaves
        k = 6 * (need - 1)
        lo = ((f[6] << 6) | (f[7] & 0x3F)) << k
        hi = (((f[6] << 6) | (f[8] & 0x3F)) << k) | ((1 << k) - 1)
        return [(need, lo, hi)]
    if esc == 1:
        return [(1, c, c) for c in sorted(_SHORT_ESC.values())] + [(5, lo, hi) for lo, hi in _LONG_CTRL]
    if esc in (2, 3, 4):
        return [(6 - esc, lo, hi) for lo, hi in _LONG_CTRL]
    base = f[6]   # esc 5: \u00 and the high hex digit
    return [(1, max(lo, base), min(hi, base + 15)) for lo, hi in _LONG_CTRL if lo <= base + 15 and base <= hi]


def _str_rest(g, node, f) -> int:
    phase = f[2]
    if phase == 0:
        return node.min_bytes
    if phase == 2:
        return 0
    if is_span(g, node):
        return span_rest(g, node, f) + 1
    esc, need = f[4], f[5]
    pending = need if need else {0: 0, 1: 1, 2: 4, 3: 3, 4: 2, 5: 1}[esc]
    if node.pattern:
        items, nfa = node.pattern, f[9]
        if pending:   # the character in progress: exact over the characters it can still become
            best = INF
            for cost, lo, hi in _pending_chars(f):
                for i in range(len(items)):
                    if nfa >> i & 1 and rx.hits(items[i], lo, hi):
                        r = node.rest[i] if items[i][0] == rx.P_STAR else node.rest[i + 1]
                        best = min(best, cost + r)
            return (pending if best >= INF else best) + 1
        chars = min((node.rest[i] for i in range(len(items) + 1) if nfa >> i & 1), default=0)
        return chars + 1
    nch = f[3] + (1 if pending else 0)
    return pending + max(0, node.min_len - nch) + 1


def _obj_tail(g, node, seen: int) -> int:
    """Bytes to add every missing required property (",key:value" each) and the ``}``."""
    total = 1
    for i, key in enumerate(node.keys):
        if node.required >> i & 1 and not seen >> i & 1:
            total += 1 + len(key) + 1 + g.nodes[node.props[i]].min_bytes
    return total


def _frame_rest(g, f) -> int:
    k, node = f[0], g.nodes[f[1]]
    if k == LIT:
        return min(len(node.alts[i]) - f[2] for i in range(len(node.alts)) if f[3] >> i & 1)
    if k in (INT, NUM):
        return number_min_extra(node, f[2], f[3], f[4], f[5], f[2])
    if k == STR:
        return _str_rest(g, node, f)
    if k in (CALLS, ARR):
        phase, count = f[2], f[3]
        if phase == 0:
            return node.min_bytes
        if phase == 4:
            return 0
        child = g.nodes[node.child]
        if node.unique:
            lens = sorted(len(a) for i, a in enumerate(child.alts) if not f[4] >> i & 1)
            item = lambda j: lens[j] if j < len(lens) else lens[-1] if lens else 0
        else:
            item = lambda j: child.min_bytes
        if phase == 1:
            need = node.min_len
            return 1 + sum(item(j) for j in range(need)) + max(0, need - 1)
        if phase == 3:
            need = max(1, node.min_len - count)
            return sum(item(j) for j in range(need)) + (need - 1) + 1
        need = max(0, node.min_len - count)
        return 1 + sum(1 + item(j) for j in range(need))
    if k == CALL:
        phase, pos = f[2], f[3]
        if phase == 0:
            return node.min_bytes - pos
        if phase == 1:
            return min(len(node.alts[i]) - pos + len(CALL_MID) + g.nodes[node.props[i]].min_bytes
                       for i in range(len(node.alts)) if f[4] >> i & 1) + 1
        if phase == 2:
            return len(CALL_MID) - pos + g.nodes[node.props[f[4]]].min_bytes + 1
        return 1 if phase in (3, 4) else 0
    phase, seen = f[2], f[3]                              # OBJ
    if phase == 0:
        return node.min_bytes
    if phase == 6:
        return 0
    if phase == 1:
        return _obj_tail(g, node, seen) - (1 if node.required else 0)
    if phase == 2:
        best = INF
        for i, key in enumerate(node.keys):
            if f[6] >> i & 1:
                best = min(best, len(key) - f[5] + 1 + g.nodes[node.props[i]].min_bytes
                           + _obj_tail(g, node, seen | 1 << i))
        return best
    if phase == 3:
        return 1 + g.nodes[node.props[f[4]]].min_bytes + _obj_tail(g, node, seen)
    if phase == 4:
        return _obj_tail(g, node, seen)
    # phase 5, after ',': a key must come
    if node.required & ~seen:
        return _obj_tail(g, node, seen) - 1
    return min(len(key) + 1 + g.nodes[node.props[i]].min_bytes
               for i, key in enumerate(node.keys) if not seen >> i & 1) + 1


def min_bytes(g, state: tuple) -> int:
    """Length in bytes of the shortest completion of the call list."""
    total = 0
    for i, f in enumerate(state):
        if f[0] == ARR and g.nodes[f[1]].unique and i + 1 < len(state):
            # the open item (the top frame, a LIT) is counted with its array: the items still
            # needed must differ from the value it becomes, so take the best value j for it
            c = state[i + 1]
            alts = g.nodes[c[1]].alts
            return total + min(len(a) - c[2] + _frame_rest(g, f[:4] + (f[4] | 1 << j,))
                               for j, a in enumerate(alts) if c[3] >> j & 1)
        total += _frame_rest(g, f)
    return total


# ---- where the matcher stands (the envelope's overrides, docs/grammar.md) --------------------
AT_LIST, AT_NAME, AT_KEY, AT_VALUE = 0, 1, 2, 3
PLACES = ("list", "name", "key", "value")


def where(g, state: tuple) -> tuple:
    """(place, tool, prop): whether the next byte goes into the call list's own structure
    (AT_LIST), a call's tool name (AT_NAME, up to ``"arguments":``), an arguments object
    outside its values (AT_KEY: keys, commas, braces) or an argument's value (AT_VALUE, the
    value's last byte and what nests in it included); tool: the index of the call's tool
    (-1 before its name is complete); prop: the index of the argument in the tool's
    arguments object (AT_VALUE), else -1.  Twin of needle_grammar_where."""
    if len(state) < 2:
        return AT_LIST, -1, -1
    call = state[1]
    if call[2] < 2:
        return AT_NAME, -1, -1
    tool = call[4]
    if call[2] == 2:
        return AT_NAME, tool, -1
    if call[2] != 3:
        return AT_LIST, tool, -1
    if len(state) == 3:
        return AT_KEY, tool, -1
    return AT_VALUE, tool, state[2][4]


def _units(v: int, scale: int) -> str:
    """An INT/NUM bound in units of 1/scale as decimal text, trailing zeros dropped."""
    sign, v = ("-", -v) if v < 0 else ("", v)
    whole, frac = divmod(v, scale)
    text = str(frac).rjust(len(str(scale)) - 1, "0").rstrip("0") if scale > 1 else ""
    return f"{sign}{whole}" + (f".{text}" if text else "")


def describe(node, g=None) -> str:
    """What a schema node allows, in words, for a refusal (twin of the C describe()); with the
    grammar g, a span string says so."""
    k = node.kind
    if k in (INT, NUM):
        scale = 1 if k == INT else 10 ** MAX_DECIMALS
        what = "an integer" if k == INT else "a number"
        lo = node.lo > -BIG
        hi = node.hi < BIG
        if lo and hi:
            what += f" from {_units(node.lo, scale)} to {_units(node.hi, scale)}"
        elif lo:
            what += f" of at least {_units(node.lo, scale)}"
        elif hi:
            what += f" of at most {_units(node.hi, scale)}"
        if node.mult != 1:
            what += f", a multiple of {_units(node.mult, scale)}"
        return what
    if k == LIT:
        text = b"one of " + b", ".join(node.alts)
        return (text if len(text) <= 96 else utf8_cut(text, 93) + b"...").decode("utf-8")
    if k == STR:
        what = "a string"
        if node.max_len >= 0:
            what += f" of {node.min_len} to {node.max_len} characters"
        elif node.min_len > 0:
            what += f" of at least {node.min_len} characters"
        return what + (" matching its pattern" if node.pattern else "") + \
            (" copied from the query" if g is not None and is_span(g, node) else "")
    return "an array" if k == ARR else "an object"


def utf8_cut(text: bytes, n: int) -> bytes:
    """text cut to n bytes, a character the cut would split dropped whole (the C twin's
    bounded texts cut the same way)."""
    if len(text) <= n:
        return text
    while n > 0 and text[n] & 0xC0 == 0x80:
        n -= 1
    return text[:n]


def byte_text(b: int) -> str:
    """A byte as an override reports it: printable ASCII as itself, else <0xHH>."""
    return chr(b) if 0x21 <= b <= 0x7E else f"<0x{b:02X}>"


def allowed_text(g, state: tuple) -> str:
    """The bytes the grammar takes next, as runs: "1-3", "\\"", "a-z0-9"... (twin of C)."""
    ok = [feed(g, state, b) is not None for b in range(256)]
    out, b = [], 0
    while b < 256:
        if not ok[b]:
            b += 1
            continue
        e = b
        while e + 1 < 256 and ok[e + 1]:
            e += 1
        out.append(byte_text(b) + ("-" + byte_text(e) if e - b >= 2 else "".join(byte_text(c) for c in range(b + 1, e + 1))))
        b = e + 1
    text = "".join(out)
    return text if len(text) <= 120 else text[:117] + "..."
