"""Typed C bindings of a built-in tool list (docs/grammar.md, "Typed bindings").

From the compiled grammar of `scons tools=FILE` this plans what templates/needle_tools.[ch].j2
emit: an enum of the tools, one argument struct per tool with C types, descriptor tables the
hand-written parser (firmware/cli/needle_bindings.c) fills the structs from, and a table of
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


def c_ident(text: str, used: set) -> str:
    """A C identifier from a JSON name: non-alphanumerics as '_', a leading digit prefixed,
    made unique with a numeric suffix."""
    s = re.sub(r"[^0-9A-Za-z_]", "_", text).strip("_") or "x"
    if s[0].isdigit():
        s = "_" + s
    base, k = s, 2
    while s.lower() in used:
        s = f"{base}_{k}"
        k += 1
    used.add(s.lower())
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


@dataclass
class ToolBinding:
    name_json: str           # the name as the call writes it, quotes included
    name: str                # C identifier
    enum: str                # NEEDLE_TOOL_<NAME>
    struct: str              # needle_<name>_args
    fields: list


def _scalar(g, node_idx: int, prefix: str, used: set):
    """(type, ctype, cap, alts, enum_type, enum_names) of a scalar node, or None."""
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
            names, seen = [], set()
            for a in alts:
                names.append(f"NEEDLE_{prefix}_{c_ident(json.loads(a), seen)}".upper())
            return NB_ENUM, f"needle_{prefix.lower()}", 0, alts, f"needle_{prefix.lower()}", names
        return NB_ENUM, "uint16_t", 0, alts, "", []
    return None


def plan(g) -> list:
    """The bindings of a compiled grammar (generator.tools.schema.Grammar)."""
    call = g.nodes[g.nodes[g.root].child]
    tools, used = [], set()
    for name_raw, args_idx in zip(call.alts, call.props):
        name_json = name_raw.decode("utf-8", "surrogatepass")
        cname = c_ident(json.loads(name_json), used)
        args = g.nodes[args_idx]
        fields, members = [], set(["has", "cut", "count"])
        for i, (key_raw, sub) in enumerate(zip(args.keys, args.props)):
            key_json = key_raw.decode("utf-8", "surrogatepass")
            fname = c_ident(json.loads(key_json), members)
            optional = not (args.required >> i & 1)
            node = g.nodes[sub]
            prefix = f"{cname}_{fname}"
            if node.kind == ARR:
                item = _scalar(g, node.child, prefix, set())
                if item is None or item[0] == NB_NULL:
                    fields.append(Field(key_json, fname, NB_JSON, "needle_json", optional))
                    continue
                t, ctype, cap, alts, et, en = item
                items = node.max_len if node.max_len >= 0 else DEFAULT_ITEMS
                fields.append(Field(key_json, fname, t, ctype, optional, max(1, items), cap, alts, et, en))
                continue
            if node.kind == OBJ:
                fields.append(Field(key_json, fname, NB_JSON, "needle_json", optional))
                continue
            t, ctype, cap, alts, et, en = _scalar(g, sub, prefix, set())
            fields.append(Field(key_json, fname, t, ctype, optional, 0, cap, alts, et, en))
        tools.append(ToolBinding(name_json, cname, f"NEEDLE_TOOL_{cname.upper()}", f"needle_{cname}_args", fields))
    if len({t.enum for t in tools}) != len(tools):   # pragma: no cover - c_ident keeps them unique
        raise CactError("two tools map to the same C name")
    return tools
