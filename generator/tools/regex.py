"""The regular-expression subset of the grammar's string ``pattern`` (docs/grammar.md).

A pattern compiles to a list of items ``(kind, negate, ranges)``: ``kind`` is P_ONE (exactly
one character), P_OPT (zero or one) or P_STAR (any number); the character set is the sorted,
merged code-point ``ranges``, complemented when ``negate``.  The matcher runs it as an NFA
whose state is the set of positions 0..len(items) (a 64-bit mask in C).

Supported: literal characters; ``.``; classes ``[abc]``, ``[a-z]``, ``[^...]``; the escapes
``\\d \\w \\s`` (ASCII, as ECMA-262 defines \\d and \\w), ``\\n \\t \\r \\f \\v`` and any escaped
punctuation; the quantifiers ``? * + {m} {m,} {m,n}`` (a trailing lazy ``?`` is accepted and
changes nothing, the grammar checks membership); ``^`` and ``$`` at the ends.  A pattern
without ``^`` may begin anywhere and one without ``$`` may end anywhere (JSON Schema's search
semantics), so they get an any-character star at that end.
Refused with a one-line error: groups, alternation, back-references, \\b, \\D \\W \\S, Unicode
property escapes, and patterns that expand to more than 63 items.
"""

from __future__ import annotations

from generator.errors import CactError

P_ONE, P_OPT, P_STAR = 0, 1, 2
MAX_ITEMS = 63
MAX_REPEAT = 32
MAX_CP = 0x10FFFF

_DIGIT = [(0x30, 0x39)]
_WORD = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_SPACE = [(0x09, 0x0D), (0x20, 0x20)]
_CLASS_ESC = {"d": _DIGIT, "w": _WORD, "s": _SPACE}
_CHAR_ESC = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B}
_META = set(".[](){}*+?^$|\\")

# Cost in bytes of one character as canonical compact JSON writes it inside a string, by tier.
COST_TIERS = (
    (1, ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7F))),
    (2, ((0x08, 0x0A), (0x0C, 0x0D), (0x22, 0x22), (0x5C, 0x5C), (0x80, 0x7FF))),
    (3, ((0x800, 0xD7FF), (0xE000, 0xFFFF))),
    (4, ((0x10000, MAX_CP),)),
    (6, ((0x00, 0x07), (0x0B, 0x0B), (0x0E, 0x1F))),
)


def normalise(ranges) -> tuple:
    """Sorted, merged (lo, hi) ranges."""
    out = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def hits(item, lo: int, hi: int) -> bool:
    """Does the item's character set hold some code point in [lo, hi]?"""
    _, negate, ranges = item
    if not negate:
        return any(r_lo <= hi and lo <= r_hi for r_lo, r_hi in ranges)
    c = lo                                  # first code point not yet known to be covered
    for r_lo, r_hi in ranges:
        if r_hi < c:
            continue
        if r_lo > c:
            return True
        c = r_hi + 1
        if c > hi:
            return False
    return c <= hi


def matches(item, cp: int) -> bool:
    return hits(item, cp, cp)


def item_min_bytes(item) -> int:
    for cost, tier in COST_TIERS:
        if any(hits(item, lo, hi) for lo, hi in tier):
            return cost
    return 6  # pragma: no cover - every set holds some character (checked at compile time)


def compile_pattern(text: str, where: str, shown: str | None = None) -> list:
    """Items of ``text``; errors show the pattern as ``shown`` (its JSON text, escapes kept)."""
    shown = text if shown is None else shown

    def fail(msg):
        raise CactError(f"{where}: pattern '{shown}': {msg}")

    cps = [ord(ch) for ch in text]
    if any(0xD800 <= c <= 0xDFFF for c in cps):
        fail("contains a lone surrogate")
    i, n = 0, len(cps)
    anchored_start = n > 0 and cps[0] == ord("^")
    if anchored_start:
        i = 1
    end = n
    anchored_end = False
    if n > i and cps[-1] == ord("$"):
        k, back = n - 2, 0
        while k >= i and cps[k] == ord("\\"):
            back += 1
            k -= 1
        if back % 2 == 0:
            anchored_end, end = True, n - 1

    def escape(j, in_class):
        """(ranges, next index) of the escape at cps[j] == '\\'."""
        if j + 1 >= end:
            fail("ends with a lone backslash")
        c = chr(cps[j + 1])
        if c in _CLASS_ESC:
            return list(_CLASS_ESC[c]), j + 2
        if c in _CHAR_ESC:
            return [(_CHAR_ESC[c], _CHAR_ESC[c])], j + 2
        if c in "DWS":
            fail(f"\\{c} is not supported (write a negated class of ASCII characters)")
        if (c.isascii() and c.isalnum()) or c == "_":
            fail(f"the escape \\{c} is not supported")
        return [(cps[j + 1], cps[j + 1])], j + 2

    items = []
    while i < end:
        c = chr(cps[i])
        if c in "()|":
            fail("groups and alternation are not supported")
        if c in "^$":
            fail("^ and $ are supported only at the ends")
        if c in "*+?":
            fail(f"nothing to repeat before {c}")
        if c == "{":
            fail("a literal { must be escaped (\\{)")
        if c == ".":
            atom, i = (True, ((0x0A, 0x0A),)), i + 1
        elif c == "[":
            j, negate, ranges = i + 1, False, []
            if j < end and cps[j] == ord("^"):
                negate, j = True, j + 1
            first = True
            while True:
                if j >= end:
                    fail("unterminated [ class")
                if cps[j] == ord("]") and not first:
                    j += 1
                    break
                first = False
                if cps[j] == ord("\\"):
                    r, j = escape(j, True)
                    if len(r) != 1 or r[0][0] != r[0][1]:
                        ranges += r
                        continue
                    lo = r[0][0]
                else:
                    lo, j = cps[j], j + 1
                if j + 1 < end and cps[j] == ord("-") and cps[j + 1] != ord("]"):
                    if cps[j + 1] == ord("\\"):
                        r, j2 = escape(j + 1, True)
                        if len(r) != 1 or r[0][0] != r[0][1]:
                            fail("a class range must end in a single character")
                        hi = r[0][0]
                    else:
                        hi, j2 = cps[j + 1], j + 2
                    if hi < lo:
                        fail("a class range is backwards")
                    ranges.append((lo, hi))
                    j = j2
                else:
                    ranges.append((lo, lo))
            atom, i = (negate, normalise(ranges)), j
            if negate and not hits((0, True, atom[1]), 0, MAX_CP):
                fail("a class matches no character")
        elif c == "\\":
            r, i = escape(i, False)
            atom = (False, normalise(r))
        else:
            atom, i = (False, ((cps[i], cps[i]),)), i + 1
        # quantifier
        lo_rep, hi_rep = 1, 1
        if i < end and chr(cps[i]) in "?*+{":
            q = chr(cps[i])
            if q == "?":
                lo_rep, hi_rep, i = 0, 1, i + 1
            elif q == "*":
                lo_rep, hi_rep, i = 0, -1, i + 1
            elif q == "+":
                lo_rep, hi_rep, i = 1, -1, i + 1
            else:
                j = i + 1
                digits = ""
                while j < end and chr(cps[j]).isdigit() and cps[j] < 128:
                    digits += chr(cps[j])
                    j += 1
                if not digits:
                    fail("a literal { must be escaped (\\{)")
                lo_rep = int(digits[:6])
                hi_rep = lo_rep
                if j < end and cps[j] == ord(","):
                    j += 1
                    digits = ""
                    while j < end and chr(cps[j]).isdigit() and cps[j] < 128:
                        digits += chr(cps[j])
                        j += 1
                    hi_rep = int(digits[:6]) if digits else -1
                if j >= end or cps[j] != ord("}"):
                    fail("unterminated {m,n} quantifier")
                i = j + 1
                if lo_rep > MAX_REPEAT or hi_rep > MAX_REPEAT:
                    fail(f"repeat counts above {MAX_REPEAT} are not supported")
                if hi_rep >= 0 and hi_rep < lo_rep:
                    fail("{m,n} with n < m")
            if i < end and cps[i] == ord("?"):
                i += 1                                  # lazy: the same set of strings
            if i < end and chr(cps[i]) in "*+?{":
                fail("a quantifier cannot follow a quantifier")
        negate, ranges = atom
        items += [(P_ONE, negate, ranges)] * lo_rep
        if hi_rep < 0:
            items.append((P_STAR, negate, ranges))
        else:
            items += [(P_OPT, negate, ranges)] * (hi_rep - lo_rep)
        if len(items) > MAX_ITEMS:
            break
    anyc = (P_STAR, True, ())
    if not anchored_start:
        items.insert(0, anyc)
    if not anchored_end:
        items.append(anyc)
    if len(items) > MAX_ITEMS:
        fail(f"expands to more than {MAX_ITEMS} items (repeat counts add up)")
    return items


# ---- the NFA over positions -------------------------------------------------------------
def closure(items, s: int) -> int:
    for i in range(len(items)):
        if s >> i & 1 and items[i][0] != P_ONE:
            s |= 1 << (i + 1)
    return s


def start(items) -> int:
    return closure(items, 1)


def step(items, s: int, cp: int) -> int:
    out = 0
    for i in range(len(items)):
        if s >> i & 1 and matches(items[i], cp):
            out |= 1 << (i if items[i][0] == P_STAR else i + 1)
    return closure(items, out)


def accepts(items, s: int) -> bool:
    return bool(s >> len(items) & 1)


def can_take(items, s: int, lo: int, hi: int) -> bool:
    """Can the NFA in state s take some character in [lo, hi]?"""
    return any(s >> i & 1 and hits(items[i], lo, hi) for i in range(len(items)))
