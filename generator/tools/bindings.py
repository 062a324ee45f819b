"""Typed C bindings of a built-in tool list (docs/grammar.md, "Typed bindings").

From the compiled grammar of `scons tools=FILE` this plans what templates/needle_tools.[ch].j2
emit: an enum of the tools, one argument struct per tool with C types, descriptor tables the
hand-written parser (firmware/lib/needle_bindings.c) fills the structs from, and a table of
handlers the application provides.  The grammar guarantees the shape of every call, so the
parser is small and total: a call the grammar admits always parses.

C types of an argument:

| schema | C |
|---|---|
| integer | `int64_t` |
| number | `double` |
| boolean (or enum [true, false]) | `bool` |
| enum of strings | a C enum, `<TOOL>_<PROP>_<VALUE>` |
| other enum or const | `uint16_t`, the index of the value in the schema's list (with a `type`: among the values of that type, the only ones generated) |
| string | `char[N + 1]`, N = 4 * maxLength bytes (UTF-8), or 64 without maxLength (longer text is cut at a character boundary and `<name>_cut` is set) |
| array of the above | a fixed array of maxItems (8 without) and `<name>_count` |
| null | no storage (`has_<name>` only) |
| object, array of arrays or objects | `needle_json`: the value's JSON text (pointer and length into the call list) |

Every property not in `required` also gets `bool has_<name>`.

C names (plan, Namer): every name a JSON schema allows becomes a valid C and C++ identifier,
unique where C needs it, and none is a keyword, a standard name or an identifier of the
headers the bindings are compiled with (docs/grammar.md §9 has the rules).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from generator.errors import CactError
from generator.tools.schema import ARR, INT, LIT, NUM, OBJ, STR

# field types (needle_bindings.h NB_*)
NB_INT, NB_NUM, NB_BOOL, NB_ENUM, NB_STR, NB_JSON, NB_NULL = 1, 2, 3, 4, 5, 6, 7
DEFAULT_STRING_BYTES = 64
DEFAULT_ITEMS = 8


# Names a generated identifier must never be: the keywords of C (C99 to C23) and C++ (to
# C++23, alternative tokens included), and the types and macros of the standard headers the
# bindings include (stdbool, stddef, stdint, string).
KEYWORDS = frozenset("""
    auto break case char const continue default do double else enum extern float for goto if inline int long
    register restrict return short signed sizeof static struct switch typedef union unsigned void volatile
    while _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert
    _Thread_local alignas alignof bool constexpr false nullptr static_assert thread_local true typeof
    typeof_unqual _BitInt _Decimal32 _Decimal64 _Decimal128
    and and_eq asm bitand bitor catch char8_t char16_t char32_t class co_await co_return co_yield compl
    concept const_cast consteval constinit decltype delete dynamic_cast explicit export friend mutable
    namespace new noexcept not not_eq operator or or_eq private protected public reinterpret_cast requires
    static_cast template this throw try typeid typename using virtual wchar_t xor xor_eq
    NULL offsetof size_t ptrdiff_t max_align_t nullptr_t unreachable __bool_true_false_are_defined
    intptr_t uintptr_t intmax_t uintmax_t SIZE_MAX PTRDIFF_MIN PTRDIFF_MAX SIG_ATOMIC_MIN SIG_ATOMIC_MAX
    WCHAR_MIN WCHAR_MAX WINT_MIN WINT_MAX INTPTR_MIN INTPTR_MAX UINTPTR_MAX INTMAX_MIN INTMAX_MAX UINTMAX_MAX
    INTMAX_C UINTMAX_C errno assert
""".split()) | frozenset(
    f"{kind}{n}{suffix}" for n in (8, 16, 32, 64)
    for kind in ("int", "uint", "int_least", "uint_least", "int_fast", "uint_fast") for suffix in ("_t",)
) | frozenset(
    f"{kind}{n}_{lim}" for n in (8, 16, 32, 64)
    for kind in ("INT", "UINT", "INT_LEAST", "UINT_LEAST", "INT_FAST", "UINT_FAST") for lim in ("MIN", "MAX")
) | frozenset(f"{k}{n}_C" for n in (8, 16, 32, 64) for k in ("INT", "UINT"))
# The hand-written and generated headers the bindings are compiled with: no generated name
# may be one of their identifiers (needle_tool_call.h's NEEDLE_CALL_E_TOOLS, needle_tools.h's
# NEEDLE_TOOLS_COUNT, a macro ...).
HEADERS = ("firmware/lib/needle_bindings.h", "firmware/lib/needle_tool_call.h", "firmware/lib/needle_tool_grammar.h",
           "firmware/lib/needle_session.h", "templates/needle_tokenizer.h.j2", "templates/needle_tools.h.j2",
           "templates/needle_tools.c.j2")


def _project_names() -> frozenset:
    """The identifiers of HEADERS in the engine's name space (needle_, nb_, ng_, any case)
    and every macro they define, in lower case (parameter names are left free)."""
    from generator.paths import ROOT
    names = set()
    for rel in HEADERS:
        text = re.sub(r"{[{%#].*?[}%#]}", " ", (ROOT / rel).read_text(encoding="utf-8"))
        names |= {w.lower() for w in re.findall(r"\b(?:needle|nb|ng)_[A-Za-z0-9_]*\b", text, re.I)}
        names |= {w.lower() for w in re.findall(r"#\s*define\s+([A-Za-z_][A-Za-z0-9_]*)", text)}
    return frozenset(names)


def _stem(text: str) -> str:
    """A JSON name as the stem of C identifiers: every character C cannot spell (punctuation,
    space, non-ASCII) as '_', runs of '_' as one and none at either end (no reserved `_X` or
    `__x`, no `__` inside a composed name), a leading digit after an 'n'; 'x' if nothing is
    left."""
    s = re.sub(r"_+", "_", re.sub(r"[^0-9A-Za-z_]", "_", text)).strip("_") or "x"
    return "n" + s if s[0].isdigit() else s


class Namer:
    """Claims collision-free C identifiers: every name the headers use or a generated name
    already took is refused, case-insensitively (enum values are upper case, types lower
    case), and a clash is resolved with a numeric suffix on the stem."""

    def __init__(self) -> None:
        self.fixed = _project_names()                   # the headers' own: macros, types, functions
        self.taken = {w.lower() for w in KEYWORDS} | set(self.fixed)

    def free(self, names: list) -> bool:
        return not any(n.lower() in self.taken for n in names)

    def claim(self, stem: str, derive, local: set | None = None, bare: bool = False) -> str:
        """The first of stem, stem_2, stem_3 ... whose derived names (derive(s): a list) are all
        free (and, with `local`, not in that case-insensitive set of one scope; with `bare`,
        the stem as a member name is not one of the headers' names, a macro above all);
        claims them."""
        s, k = stem, 2
        while (not self.free(derive(s)) or (local is not None and s.lower() in local)
               or (bare and _member(s).lower() in self.fixed)):
            s = f"{stem}_{k}"
            k += 1
        self.taken |= {n.lower() for n in derive(s)}
        if local is not None:
            local.add(s.lower())
        return s


@dataclass
class Field:
    key_json: str            # the key as the call writes it, quotes included
    name: str                # C member name
    type: int
    ctype: str               # C type of one value
    optional: bool
    array: int = 0           # items of a fixed array (0: a scalar)
    cap: int = 0             # NB_STR: bytes with the NUL
    alts: list = field(default_factory=list)   # NB_ENUM/NB_BOOL: the values' JSON text
    enum_type: str = ""      # C enum type (enums of strings)
    enum_names: list = field(default_factory=list)
    stem: str = ""           # the name's stem: its companions below are made from it

    @property
    def has(self) -> str:    # optional: was it given
        return f"has_{self.stem or self.name}"

    @property
    def cut(self) -> str:    # NB_STR: was the text cut
        return f"{self.stem or self.name}_cut"

    @property
    def count(self) -> str:  # arrays: items given
        return f"{self.stem or self.name}_count"


@dataclass
class ToolBinding:
    name_json: str           # the name as the call writes it, quotes included
    name: str                # C identifier
    enum: str                # NEEDLE_TOOL_<NAME>
    struct: str              # needle_<name>_args
    fields: list


def _scalar(g, node_idx: int, prefix: str, namer: Namer):
    """(type, ctype, cap, alts, enum_type, enum_names) of a scalar node, or None.  A string
    enum's type `needle_<prefix>` and values `NEEDLE_<PREFIX>_<VALUE>` are claimed from namer."""
    n = g.nodes[node_idx]
    if n.kind == INT:
        return NB_INT, "int64_t", 0, [], "", []
    if n.kind == NUM:
        return NB_NUM, "double", 0, [], "", []
    if n.kind == STR:
        cap = (4 * n.max_len if n.max_len >= 0 else DEFAULT_STRING_BYTES) + 1
        return NB_STR, "char", cap, [], "", []
    if n.kind == LIT:
        alts = [a.decode("utf-8", "surrogatepass") for a in n.alts]
        if sorted(alts) == ["false", "true"]:
            return NB_BOOL, "bool", 0, alts, "", []
        if alts == ["null"]:
            return NB_NULL, "", 0, alts, "", []
        if all(a.startswith('"') for a in alts):
            names, values = [], set()
            for a in alts:
                v = namer.claim(_stem(json.loads(a)), lambda v: [f"NEEDLE_{prefix}_{v}".upper()], values)
                names.append(f"NEEDLE_{prefix}_{v}".upper())
            return NB_ENUM, f"needle_{prefix.lower()}", 0, alts, f"needle_{prefix.lower()}", names
        return NB_ENUM, "uint16_t", 0, alts, "", []
    return None


def _member(stem: str) -> str:
    """A stem as a bare member name: a keyword or standard name gets a trailing '_'."""
    return stem + "_" if stem in KEYWORDS or stem.lower() in KEYWORDS else stem


def plan(g) -> list:
    """The bindings of a compiled grammar (generator.tools.schema.Grammar).  Every name is a
    valid C and C++ identifier, unique where C needs it: the tools' enum values, structs and
    handler members across the header, the fields' members (with their has_, _cut and _count
    companions) within a struct, string enums' types and values across the header, and none
    is an identifier of the headers it is compiled with (Namer)."""
    call = g.nodes[g.nodes[g.root].child]
    namer = Namer()
    tools, tool_stems = [], set()
    for name_raw, args_idx in zip(call.alts, call.props):
        name_json = name_raw.decode("utf-8", "surrogatepass")
        tstem = namer.claim(_stem(json.loads(name_json)),
                            lambda s: [f"NEEDLE_TOOL_{s.upper()}", f"needle_{s}_args"], tool_stems, bare=True)
        cname = _member(tstem)
        args = g.nodes[args_idx]
        fields, members = [], set()

        def companions(s: str) -> list:
            # a field's own member and the companions it may get, in this struct's scope
            return [_member(s), f"has_{s}", f"{s}_cut", f"{s}_count"]

        for i, (key_raw, sub) in enumerate(zip(args.keys, args.props)):
            key_json = key_raw.decode("utf-8", "surrogatepass")
            node = g.nodes[sub]
            # a string enum (or an array of one) also names a type, needle_<tool>_<field>
            enum_node = g.nodes[node.child] if node.kind == ARR else node
            typed = enum_node.kind == LIT and all(a.startswith(b'"') for a in enum_node.alts)
            stem, k = _stem(json.loads(key_json)), 2
            fstem = stem
            while (any(m.lower() in members for m in companions(fstem)) or not namer.free(companions(fstem))
                   or (typed and not namer.free([f"needle_{tstem}_{fstem}"]))):
                fstem = f"{stem}_{k}"
                k += 1
            members |= {m.lower() for m in companions(fstem)}
            if typed:
                namer.taken.add(f"needle_{tstem}_{fstem}".lower())
            fname = _member(fstem)
            optional = not (args.required >> i & 1)
            prefix = f"{tstem}_{fstem}"
            if node.kind == ARR:
                item = _scalar(g, node.child, prefix, namer)
                if item is None or item[0] == NB_NULL:
                    fields.append(Field(key_json, fname, NB_JSON, "needle_json", optional, stem=fstem))
                    continue
                t, ctype, cap, alts, et, en = item
                items = node.max_len if node.max_len >= 0 else DEFAULT_ITEMS
                fields.append(Field(key_json, fname, t, ctype, optional, max(1, items), cap, alts, et, en, fstem))
                continue
            if node.kind == OBJ:
                fields.append(Field(key_json, fname, NB_JSON, "needle_json", optional, stem=fstem))
                continue
            t, ctype, cap, alts, et, en = _scalar(g, sub, prefix, namer)
            fields.append(Field(key_json, fname, t, ctype, optional, 0, cap, alts, et, en, fstem))
        tools.append(ToolBinding(name_json, cname, f"NEEDLE_TOOL_{tstem.upper()}", f"needle_{tstem}_args", fields))
    if len({t.enum for t in tools}) != len(tools):   # pragma: no cover - Namer keeps them unique
        raise CactError("two tools map to the same C name")
    return tools
