"""Tool schemas compiled into the tables of the call grammar (docs/grammar.md).

``compile_tools(tools_json_text, force_call=False)`` validates a tool list, as the prompt
renders it (generator/tools/prompt.py minifies it first), and returns a :class:`Grammar`:
a flat table of nodes, one per schema, that :mod:`generator.tools.grammar` walks byte by
byte.  Every literal the grammar matches (tool names, property keys, enum and const values)
is the byte text of the *minified* tool list, so the model has to write the canonical
compact JSON it was trained on, and the C twin (firmware/lib/needle_tool_grammar.c) gets the same
bytes without re-serialising anything.

Twin of ``needle_grammar_compile``: the same tool list gives the same tables and the same
one-line errors ("tool \\"NAME\\": property \\"P\\": ...").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from generator.tools.prompt import minify_tools_ext
from generator.errors import CactError

# ---- node kinds (the same numbers in tool_grammar.h) ----------------------------------
LIT, INT, NUM, STR, ARR, OBJ, CALLS, CALL = 1, 2, 3, 4, 5, 6, 7, 8

# ---- limits (tool_grammar.h NEEDLE_GRAMMAR_*; the C tables are static arrays) --------
TEXT_MAX = 16 * 1024    # bytes of the minified list
MAX_TOOLS = 32          # tools in one list (a bitmask of candidates)
MAX_NODES = 256
MAX_PROPS = 32          # properties of one object (bitmasks of seen and required)
MAX_ALTS = 64           # alternatives of one enum (a bitmask of candidates)
MAX_PATTERN_ITEMS = 63  # NFA positions 0..63 in a 64-bit set
MAX_DEPTH = 16          # nesting of the call list, calls, objects and arrays
MAX_DECIMALS = 6        # digits after the point of a "number"
MAX_INT_DIGITS = 18     # digits of an "integer"
MAX_NUM_INT_DIGITS = 12  # digits before the point of a "number"
BIG = 10 ** 18 - 1      # bounds are clamped to [-BIG, BIG] (in units of the node's scale)
NUM_SCALE = 10 ** MAX_DECIMALS
SPAN_MAX = 1024         # bytes of the query a span string copies from (NEEDLE_GRAMMAR_SPAN_MAX)
SPAN_KEY = "x-needle-span"  # our schema keyword: a string copied from the query (docs/grammar.md §2a)
CALL_MAX_JSON = 4096    # bytes of the call list an envelope keeps (NEEDLE_CALL_MAX_JSON)
MB_CAP = 32768          # a node's shortest text is saturated here (far above any call that fits;
                        # the C twin's 32-bit sums never overflow)

# pattern items
P_ONE, P_OPT, P_STAR = 0, 1, 2

# The refusal of an unknown keyword lists what is supported where it stood; it must fit the
# C twin's 256-byte error lines with the tool and property names in front (the C strings of
# needle_tool_grammar.c say the same).
SUPPORTED_ANY = "type, enum, const, annotations (description, title, default, examples, format)"
SUPPORTED_FOR = {
    "string": "minLength, maxLength, pattern",
    "integer": "minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf",
    "number": "minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf",
    "boolean": "",
    "null": "",
    "array": "items, minItems, maxItems, uniqueItems",
    "object": "properties, required, additionalProperties false",
}


def supported_keywords(tname: str | None) -> str:
    """What the refusal of an unknown keyword lists, for a property of type `tname` (or none)."""
    if tname is None:
        return f"{SUPPORTED_ANY}; per type: docs/grammar.md"
    return f"{SUPPORTED_FOR[tname]}; type, enum, const, annotations" if SUPPORTED_FOR[tname] else SUPPORTED_ANY
_ANNOTATIONS = {"description", "title", "default", "examples", "format", "$comment", SPAN_KEY}
_BY_TYPE = {t: {w.split(" ")[0] for w in words.split(", ")} if words else set()
            for t, words in SUPPORTED_FOR.items()}     # the keywords each type takes


# ---- the minified tool list as a tree of raw text spans --------------------------------
@dataclass
class JVal:
    """A JSON value of the minified text: ``kind`` is one of "obj", "arr", "str", "num",
    "lit" (true/false/null); ``raw`` its exact bytes; ``items`` the (key, value) pairs of an
    object (key as a str) or the values of an array; ``value`` the str of a string, the
    exact text of a number, or the word of a literal."""
    kind: str
    raw: bytes
    items: list = field(default_factory=list)
    value: object = None

    def get(self, key):
        for k, v in self.items:
            if k == key:
                return v
        return None


def _parse(b: bytes, i: int = 0):
    """Parse the compact JSON value at b[i:] (already validated by the minifier)."""
    c = b[i:i + 1]
    if c == b"{":
        j, items = i + 1, []
        if b[j:j + 1] == b"}":
            return JVal("obj", b[i:j + 1], items), j + 1
        while True:
            key, j = _parse(b, j)
            val, j = _parse(b, j + 1)           # skip ':'
            items.append((key.value, val))
            if b[j:j + 1] == b"}":
                return JVal("obj", b[i:j + 1], items), j + 1
            j += 1                               # ','
    if c == b"[":
        j, items = i + 1, []
        if b[j:j + 1] == b"]":
            return JVal("arr", b[i:j + 1], items), j + 1
        while True:
            val, j = _parse(b, j)
            items.append(val)
            if b[j:j + 1] == b"]":
                return JVal("arr", b[i:j + 1], items), j + 1
            j += 1
    if c == b'"':
        j = i + 1
        while b[j] != 0x22:
            j += 2 if b[j] == 0x5C else 1
        raw = b[i:j + 1]
        return JVal("str", raw, value=json.loads(raw.decode("utf-8", "surrogatepass"))), j + 1
    for word in (b"true", b"false", b"null"):
        if b.startswith(word, i):
            return JVal("lit", word, value=word.decode()), i + len(word)
    j = i
    while j < len(b) and b[j:j + 1] in b"+-0123456789.eE":
        j += 1
    return JVal("num", b[i:j], value=b[i:j].decode()), j


# ---- exact decimal bounds ----------------------------------------------------------------
def _decimal(text: str, what: str) -> Decimal:
    try:
        d = Decimal(text)
    except InvalidOperation:  # pragma: no cover - the minifier only passes JSON numbers
        raise CactError(f"{what}: {text} is not a number") from None
    digits = d.as_tuple().digits
    sig = len(str(int("".join(map(str, digits)) or "0")))
    if sig > 18:
        raise CactError(f"{what}: {text} has more than 18 significant digits")
    return d


def _json_equal(a: JVal, b: JVal) -> bool:
    """JSON Schema equality of two scalar values of the minified text: numbers by value
    (1 == 1.0 == 1e0, 0 == -0), strings by their text (the minifier writes them canonically)."""
    if a.kind == "num" and b.kind == "num":
        return Decimal(a.value) == Decimal(b.value)
    return a.raw == b.raw


def _of_type(v: JVal, tname: str) -> bool:
    """Is the scalar value v of JSON Schema type tname ("integer": a number whose value is
    whole, 1.0 and 1e2 included)?"""
    if v.kind == "str":
        return tname == "string"
    if v.kind == "lit":
        return tname == ("null" if v.value == "null" else "boolean")
    if v.kind == "num":
        if tname == "number":
            return True
        if tname == "integer":
            d = Decimal(v.value)
            return d == d.to_integral_value()
    return False


def _floor(d: Decimal) -> int:
    return int(d.to_integral_value(rounding="ROUND_FLOOR"))


def _ceil(d: Decimal) -> int:
    return int(d.to_integral_value(rounding="ROUND_CEILING"))


def _clamp(v: int) -> int:
    return max(-BIG - 1, min(BIG + 1, v))


# ---- nodes ---------------------------------------------------------------------------
@dataclass
class Node:
    kind: int
    alts: list = field(default_factory=list)      # LIT: alternative byte strings; CALLS: tool names
    lo: int = -BIG                                # INT/NUM: inclusive bounds in units (NUM: 1e-6)
    hi: int = BIG
    mult: int = 1                                 # INT/NUM: multipleOf in units
    min_len: int = 0                              # STR: characters; ARR: items
    max_len: int = -1                             # STR: characters; ARR: items (-1: none)
    unique: bool = False                          # ARR: uniqueItems; STR: "x-needle-span"
    child: int = -1                               # ARR: item node; CALLS: the CALL node
    pattern: list = field(default_factory=list)   # STR: [(kind, negate, ranges)]
    keys: list = field(default_factory=list)      # OBJ: property keys (raw JSON string bytes)
    props: list = field(default_factory=list)     # OBJ: property nodes; CALL: argument OBJ per tool
    required: int = 0                             # OBJ: bitmask over keys
    min_bytes: int = 0                            # shortest valid text (computed)
    rest: list = field(default_factory=list)      # STR with pattern: min bytes from position i


@dataclass
class Grammar:
    nodes: list
    root: int                 # the CALLS node
    force_call: bool
    tools_json: str           # the minified list (what the prompt renders)
    tool_names: list
    tool_ppm: list = field(default_factory=list)   # each tool's "x-needle-min-confidence" (ppm), -1: none
    query: bytes | None = None    # the turn's query, the source of span strings (set_query)
    span_all: bool = False        # every free string is a span (the span_strings switch)

    def describe(self) -> dict:
        """Table sizes, as the C twin reports them (needle --grammar-info)."""
        return {"nodes": len(self.nodes),
                "literal_bytes": sum(len(a) for n in self.nodes for a in n.alts)
                + sum(len(k) for n in self.nodes for k in n.keys),
                "pattern_items": sum(len(n.pattern) for n in self.nodes)}


class _Compiler:
    def __init__(self):
        self.nodes: list = []
        self.tool = ""      # 'tool "NAME"' while a tool's schema is compiled

    def add(self, node: Node) -> int:
        if len(self.nodes) >= MAX_NODES:
            raise CactError(f"{self.tool + ': ' if self.tool else ''}the grammar needs more than {MAX_NODES} "
                            f"nodes (NEEDLE_GRAMMAR_MAX_NODES): use fewer or simpler tools")
        self.nodes.append(node)
        return len(self.nodes) - 1

    # -- one schema
    def schema(self, s: JVal, where: str, depth: int) -> int:
        if depth > MAX_DEPTH:   # depth: the matcher's stack frames down to this value
            raise CactError(f"{where}: nested deeper than the grammar's {MAX_DEPTH - 3} levels "
                            f"of arguments")
        if s.kind != "obj":
            raise CactError(f"{where}: a schema must be a JSON object")
        keys = [k for k, _ in s.items]
        enum, const, typ = s.get("enum"), s.get("const"), s.get("type")
        if typ is not None and (typ.kind != "str" or typ.value not in _BY_TYPE):
            raise CactError(f"{where}: type must be one of {', '.join(_BY_TYPE)} "
                            f"(type lists are not supported)")
        tname = typ.value if typ is not None else None
        span = s.get(SPAN_KEY)
        if span is not None:
            if span.kind != "lit" or span.value == "null":
                raise CactError(f'{where}: "{SPAN_KEY}" must be true or false')
            if span.value == "true":
                if tname != "string":
                    raise CactError(f'{where}: "{SPAN_KEY}" needs type string (it copies a span of the query '
                                    f'into a string)')
                for k in ("enum", "const", "pattern"):
                    if s.get(k) is not None:
                        raise CactError(f'{where}: "{SPAN_KEY}" cannot be combined with "{k}" (a span is any '
                                        f'text of the query): drop one of them')
        allowed = set(_ANNOTATIONS) | {"type", "enum", "const"}
        if tname:
            allowed |= _BY_TYPE[tname]
        for k in keys:
            if k not in allowed:
                raise CactError(f"{where}: unsupported keyword \"{k}\"" +
                                (f" for type {tname}" if tname else "") +
                                f" (supported: {supported_keywords(tname)})")
        if enum is not None or const is not None:
            if enum is not None and const is not None:
                raise CactError(f"{where}: give enum or const, not both")
            word = "enum" if enum is not None else "const"
            for k in keys:      # the values are the whole set: a keyword that narrows it is refused
                if tname and k in _BY_TYPE[tname]:
                    raise CactError(f"{where}: {word} cannot be combined with \"{k}\" (list only the "
                                    f"values it allows)")
            if const is not None:
                values = [const]
            else:
                if enum.kind != "arr" or not enum.items:
                    raise CactError(f"{where}: enum must be a non-empty array")
                values = enum.items
                if len(values) > MAX_ALTS:
                    raise CactError(f"{where}: enum has {len(values)} values, the grammar takes {MAX_ALTS}")
                for a in range(len(values)):      # equal as JSON values (1, 1.0 and 1e0; 0 and -0)
                    for b in range(a):
                        if _json_equal(values[a], values[b]):
                            raise CactError(f"{where}: enum repeats a value ({values[b].raw.decode()} and "
                                            f"{values[a].raw.decode()} are equal JSON values)")
            for v in values:
                if v.kind in ("obj", "arr"):
                    raise CactError(f"{where}: enum and const values must be strings, numbers, "
                                    f"booleans or null")
            if tname:           # a value must also be of the type (jsonschema checks both)
                values = [v for v in values if _of_type(v, tname)]
                if not values:
                    raise CactError(f"{where}: no {word} value is of type {tname}")
            alts = [v.raw for v in values]
            return self.add(Node(LIT, alts=alts, min_bytes=min(len(a) for a in alts)))
        if tname is None:
            raise CactError(f"{where}: a schema needs a type (or enum/const)")
        if tname == "boolean":
            return self.add(Node(LIT, alts=[b"true", b"false"], min_bytes=4))
        if tname == "null":
            return self.add(Node(LIT, alts=[b"null"], min_bytes=4))
        if tname in ("integer", "number"):
            return self.add(self.number(s, tname, where))
        if tname == "string":
            return self.add(self.string(s, where))
        if tname == "array":
            return self.array(s, where, depth)
        return self.object(s, where, depth)

    def count(self, s: JVal, key: str, where: str) -> int:
        v = s.get(key)
        if v is None:
            return -1
        if v.kind != "num" or not v.value.isdigit() or int(v.value) > 4096:
            raise CactError(f"{where}: {key} must be an integer 0..4096, not {v.raw.decode()}")
        return int(v.value)

    def number(self, s: JVal, tname: str, where: str) -> Node:
        scale = 1 if tname == "integer" else NUM_SCALE
        node = Node(INT if tname == "integer" else NUM)
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
            v = s.get(key)
            if v is None:
                continue
            if v.kind != "num":
                raise CactError(f"{where}: {key} must be a number")
            d = _decimal(v.value, f"{where}: {key}") * scale
            if key == "minimum":
                node.lo = max(node.lo, _clamp(_ceil(d)))
            elif key == "exclusiveMinimum":
                node.lo = max(node.lo, _clamp(_floor(d) + 1))
            elif key == "maximum":
                node.hi = min(node.hi, _clamp(_floor(d)))
            elif key == "exclusiveMaximum":
                node.hi = min(node.hi, _clamp(_ceil(d) - 1))
            else:
                if d <= 0 or d != d.to_integral_value() or d > BIG:
                    raise CactError(f"{where}: multipleOf must be positive" +
                                    (" and whole" if scale == 1 else f" with at most {MAX_DECIMALS} decimals"))
                node.mult = int(d)
        node.min_bytes = number_min_extra(node, 0, 0, 0, -1, 2)
        if node.min_bytes < 0:
            raise CactError(f"{where}: no {tname} satisfies its bounds and multipleOf")
        return node

    def string(self, s: JVal, where: str) -> Node:
        node = Node(STR, min_len=max(0, self.count(s, "minLength", where)),
                    max_len=self.count(s, "maxLength", where))
        if node.max_len >= 0 and node.max_len < node.min_len:
            raise CactError(f"{where}: maxLength is below minLength")
        pat = s.get("pattern")
        if pat is not None:
            if pat.kind != "str":
                raise CactError(f"{where}: pattern must be a string")
            if node.min_len > 0 or node.max_len >= 0:
                raise CactError(f"{where}: pattern cannot be combined with minLength/maxLength "
                                f"(write the length into the pattern, e.g. ^[a-z]{{2,8}}$)")
            from generator.tools.regex import compile_pattern, item_min_bytes
            node.pattern = compile_pattern(pat.value, where, pat.raw[1:-1].decode())
            rest = [0] * (len(node.pattern) + 1)
            for i in range(len(node.pattern) - 1, -1, -1):
                kind = node.pattern[i][0]
                rest[i] = rest[i + 1] + (item_min_bytes(node.pattern[i]) if kind == P_ONE else 0)
            node.rest = rest
            node.min_bytes = 2 + rest[0]
            if not node.pattern:   # ^$, ^a{0}$: only the empty string (an empty list is "no pattern")
                node.max_len = 0
        else:
            node.min_bytes = 2 + node.min_len
        span = s.get(SPAN_KEY)
        if span is not None and span.value == "true":
            if node.max_len == 0:
                raise CactError(f'{where}: "{SPAN_KEY}" needs maxLength of at least 1 (maxLength 0 admits only "")')
            node.unique = True
        return node

    def array(self, s: JVal, where: str, depth: int) -> int:
        items = s.get("items")
        if items is None:
            raise CactError(f"{where}: an array needs items (one schema)")
        node = Node(ARR, min_len=max(0, self.count(s, "minItems", where)),
                    max_len=self.count(s, "maxItems", where))
        if node.max_len >= 0 and node.max_len < node.min_len:
            raise CactError(f"{where}: maxItems is below minItems")
        u = s.get("uniqueItems")
        if u is not None:
            if u.kind != "lit" or u.value == "null":
                raise CactError(f"{where}: uniqueItems must be true or false")
            node.unique = u.value == "true"
        idx = self.add(node)
        node.child = self.schema(items, f"{where}: items", depth + 1)
        child = self.nodes[node.child]
        if node.unique:
            if child.kind != LIT:
                raise CactError(f"{where}: uniqueItems is supported for arrays of enum, const or "
                                f"boolean items only")
            if node.min_len > len(child.alts):
                raise CactError(f"{where}: minItems {node.min_len} exceeds the {len(child.alts)} "
                                f"distinct values of its items")
        if node.unique:   # distinct values: the min_len shortest alternatives
            node.min_bytes = 2 + sum(sorted(len(a) for a in child.alts)[:node.min_len]) + max(0, node.min_len - 1)
        else:
            node.min_bytes = 2 + node.min_len * child.min_bytes + max(0, node.min_len - 1)
        node.min_bytes = min(MB_CAP, node.min_bytes)
        return idx

    def object(self, s: JVal, where: str, depth: int) -> int:
        props, req, extra = s.get("properties"), s.get("required"), s.get("additionalProperties")
        if extra is not None and not (extra.kind == "lit" and extra.value == "false"):
            raise CactError(f"{where}: additionalProperties may only be false (no unknown keys "
                            f"are ever generated)")
        node = Node(OBJ)
        idx = self.add(node)
        if props is not None:
            if props.kind != "obj":
                raise CactError(f"{where}: properties must be an object")
            if len(props.items) > MAX_PROPS:
                raise CactError(f"{where}: {len(props.items)} properties, the grammar takes {MAX_PROPS}")
            for (name, sub), raw in zip(props.items, _object_key_raws(props)):
                node.keys.append(raw)
                node.props.append(self.schema(sub, f"{where}: property {raw.decode()}", depth + 1))
        names = [k for k, _ in props.items] if props is not None else []
        if req is not None:
            if req.kind != "arr" or any(v.kind != "str" for v in req.items):
                raise CactError(f"{where}: required must be an array of strings")
            for v in req.items:
                if v.value not in names:
                    raise CactError(f"{where}: required names \"{v.value}\", which is not in properties")
                node.required |= 1 << names.index(v.value)
        need = [self.nodes[p].min_bytes + len(k) + 1 for i, (k, p) in enumerate(zip(node.keys, node.props))
                if node.required >> i & 1]
        node.min_bytes = min(MB_CAP, 2 + sum(need) + max(0, len(need) - 1))
        return idx


def _object_key_raws(obj: JVal) -> list:
    """The raw bytes of each key of a minified object, in order."""
    b, out, j = obj.raw, [], 1
    for _, val in obj.items:
        k0 = j
        j += 1
        while b[j] != 0x22:
            j += 2 if b[j] == 0x5C else 1
        out.append(b[k0:j + 1])
        j += 1 + 1 + len(val.raw)   # '"' ':' value
        j += 1                      # ',' or '}'
    return out


def compile_tools(tools_json_text: str, force_call: bool = False) -> Grammar:
    """The call grammar of a tool list (CactError naming the tool and keyword if it cannot
    be compiled)."""
    minified, thresholds = minify_tools_ext(tools_json_text)
    if len(minified.encode("utf-8", "surrogatepass")) > TEXT_MAX:
        raise CactError(f"the tool list is longer than the grammar's {TEXT_MAX} bytes once minified "
                        f"(NEEDLE_GRAMMAR_TEXT_MAX)")
    root, _ = _parse(minified.encode("utf-8", "surrogatepass"))
    comp = _Compiler()
    if not root.items:
        if force_call:
            raise CactError("--force-call needs at least one tool")
    if len(root.items) > MAX_TOOLS:
        raise CactError(f"{len(root.items)} tools; a tool list holds at most {MAX_TOOLS} "
                        f"(NEEDLE_GRAMMAR_MAX_TOOLS): split it")
    calls = Node(CALLS, min_len=1 if force_call else 0)
    comp.add(calls)
    call = Node(CALL)
    calls.child = comp.add(call)
    names = []
    for i, tool in enumerate(root.items):
        name = tool.get("name")
        if name is None or name.kind != "str" or not name.value:
            raise CactError(f"tool {i + 1}: needs a non-empty string \"name\"")
        where = f"tool {name.raw.decode()}"    # the name as written (quoted, escapes kept)
        comp.tool = where
        if name.raw in call.alts:
            raise CactError(f"{where}: the name is used by an earlier tool (names must be unique)")
        call.alts.append(name.raw)
        names.append(name.value)
        params = tool.get("parameters")
        if params is None:
            params = JVal("obj", b'{"type":"object"}', [("type", JVal("str", b'"object"', value="object"))])
        if params.kind != "obj" or (params.get("type") is not None and params.get("type").value != "object"):
            raise CactError(f"{where}: parameters must be an object schema with type \"object\"")
        if params.get("type") is None:
            params.items.insert(0, ("type", JVal("str", b'"object"', value="object")))
        call.props.append(comp.schema(params, where, 3))
    for a, p in zip(call.alts, call.props):   # a call that can never fit the envelope
        shortest = 2 + len(CALL_HEAD) + len(a) + len(CALL_MID) + comp.nodes[p].min_bytes + 1
        if shortest > CALL_MAX_JSON:
            took = "more than 32768" if comp.nodes[p].min_bytes >= MB_CAP else shortest
            raise CactError(f"tool {a.decode()}: its shortest call takes {took} bytes but a call list "
                            f"holds {CALL_MAX_JSON} (NEEDLE_CALL_MAX_JSON): relax its minLength, "
                            f"minItems or required arguments")
    # {"name":"N","arguments":{...}}
    call.min_bytes = (min((len(a) + comp.nodes[p].min_bytes for a, p in zip(call.alts, call.props)),
                          default=0) + len(CALL_HEAD) + len(CALL_MID) + 1)
    calls.min_bytes = 2 + (call.min_bytes if force_call else 0)
    return Grammar(comp.nodes, 0, force_call, minified, names, [thresholds.get(i, -1) for i in range(len(names))])


CALL_HEAD = b'{"name":'
CALL_MID = b',"arguments":'


# ---- the numbers' closed form (shared with the matcher, generator.tools.grammar) --------
INF = 1 << 62


# ---- integer helpers (floor semantics, as the C twin's nk_floordiv) ----------------------
def _fdiv(a: int, b: int) -> int:
    return a // b


def _cdiv(a: int, b: int) -> int:
    return -((-a) // b)


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def _lattice_hit(c0: int, c1: int, s: int, lo: int, hi: int, m: int) -> bool:
    """Is there an integer c in [c0, c1] with s·c in [lo, hi] and s·c a multiple of m?"""
    a = max(c0, _cdiv(lo, s))
    b = min(c1, _fdiv(hi, s))
    if a > b:
        return False
    step = m // _gcd(m, s)
    first = _cdiv(a, step) * step
    return first <= b


def number_min_extra(node, neg: int, P: int, ndig: int, frac: int, sign: int) -> int:
    """Fewest bytes that turn a number prefix into a valid value (0: it is one), or -1.

    sign 2: nothing typed yet (either sign open); else neg 0/1 is the sign typed.  The
    completions with j more digits before the point and k after it (k = 0: no point) are
    the values s·c, s = 10^(decimals - k), c in one range of integers; the first (j, k) in
    order of length that holds a value within the bounds and on the multipleOf lattice
    gives the answer (docs/grammar.md, "Numbers")."""
    is_num = node.kind == NUM
    kmax = MAX_DECIMALS if is_num else 0
    imax = MAX_NUM_INT_DIGITS if is_num else MAX_INT_DIGITS
    best = INF
    signs = (0, 1) if sign == 2 else (neg,)
    for sg in signs:
        lo, hi = (node.lo, node.hi) if sg == 0 else (-node.hi, -node.lo)
        base_cost = 1 if (sign == 2 and sg == 1) else 0
        if frac >= 0:                                    # after the point: only more decimals
            for k in range(max(frac, 1), kmax + 1):
                e = k - frac
                c0 = P * 10 ** e
                c1 = (P + 1) * 10 ** e - 1
                if _lattice_hit(c0, c1, 10 ** (kmax - k), lo, hi, node.mult):
                    best = min(best, base_cost + k - frac)
                    break
            continue
        for j in range(0, imax - ndig + 1):
            if ndig == 0 and j == 0:
                continue
            if ndig >= 1 and P == 0 and j > 0:          # no leading zeros
                break
            for k in range(0, kmax + 1):
                cost = base_cost + j + (k + 1 if k else 0)
                if cost >= best:
                    break
                if ndig == 0:                            # j digits in all
                    p0 = 0 if j == 1 else 10 ** (j - 1)
                    p1 = 10 ** j - 1
                else:
                    p0, p1 = P * 10 ** j, (P + 1) * 10 ** j - 1
                if sg == 1 and not is_num and p0 == 0:   # "-0" is not an integer we write
                    if p1 == 0:
                        continue
                    p0 = 1      # (counting it let '-' in under minimum 0, then nothing fit)
                c0, c1 = p0 * 10 ** k, (p1 + 1) * 10 ** k - 1
                if _lattice_hit(c0, c1, 10 ** (kmax - k), lo, hi, node.mult):
                    best = cost
                    break
    return -1 if best >= INF else best


# ---- span strings (docs/grammar.md §2a) ------------------------------------------------------
def is_span(g, node) -> bool:
    """Is this STR node copied from the query in this turn: its "x-needle-span", or the
    span_strings switch on a string with no pattern that admits text (twin of C is_span)."""
    return g.query is not None and node.kind == STR and \
        (node.unique or (g.span_all and not node.pattern and node.max_len != 0))


def _word(b: int) -> bool:
    """A byte of a word: an ASCII letter or digit, or any byte of a non-ASCII character."""
    return b >= 0x80 or 0x30 <= b <= 0x39 or 0x41 <= b <= 0x5A or 0x61 <= b <= 0x7A


def span_start(q: bytes, s: int) -> bool:
    """May a span start at q[s] (s < len(q)): not inside a word."""
    return s == 0 or not _word(q[s - 1]) or not _word(q[s])


def span_end(q: bytes, e: int) -> bool:
    """May a span end before q[e] (e > 0): not inside a word."""
    return e == len(q) or not _word(q[e - 1]) or not _word(q[e])


def _short_span(q: bytes, m: int) -> bool:
    """Does the query hold a span of m plain ASCII characters (no '"', no backslash) that
    neither starts nor ends inside a word (the shortest a span string of minLength m writes)?"""
    if m == 0:
        return True
    for s in range(len(q) - m + 1):
        if all(0x20 <= b < 0x7F and b not in (0x22, 0x5C) for b in q[s:s + m]) and span_start(q, s) \
                and span_end(q, s + m):
            return True
    return False


def set_query(g, query: str | None, span_all: bool = False) -> None:
    """Make the turn's query the source of g's span strings (twin of needle_grammar_set_query).
    Refused in one line (CactError, g unchanged) when a span string would need a longer query
    than SPAN_MAX bytes, or a run of minLength plain ASCII characters the query does not hold
    (the tables' shortest completions count one byte per character)."""
    spans = [n for n in g.nodes if n.kind == STR and (n.unique or (span_all and not n.pattern and n.max_len != 0))]
    if query is None or not spans:
        g.query, g.span_all = None, False
        return
    q = query.encode("utf-8", "surrogatepass")
    if len(q) > SPAN_MAX:
        raise CactError(f"the query is {len(q)} bytes, more than the {SPAN_MAX} span strings copy from "
                        f"(NEEDLE_GRAMMAR_SPAN_MAX): shorten it, or raise grammar.span_bytes in the board file")
    for need in sorted({n.min_len for n in spans}):
        if not _short_span(q, need):
            raise CactError(f"the query holds no span of exactly {need} plain ASCII characters between words, "
                            f"which a span string's minLength {need} needs: lower minLength, or turn the span off")
    g.query, g.span_all = q, span_all
