"""Emit: render the Jinja2 templates of templates/ into C, assembly and linker text.

This module only renders; every decision is made by the planner, which hands over plain
data.  The environment is strict (undefined names are errors), trims block lines, and
offers a few filters that keep emitted numbers exact and readable.
"""

from __future__ import annotations

import struct
from pathlib import Path

import jinja2

from generator.paths import TEMPLATES_DIR



def c_float(value) -> str:
    """An exact C float literal: hex float of the f32 value, with a decimal comment-free form."""
    v = struct.unpack("<f", struct.pack("<f", float(value)))[0]
    if v == 0:
        return "0.0f" if struct.pack("<f", v) == b"\0\0\0\0" else "-0.0f"
    return f"{v.hex()}f"


def c_hex(value: int, width: int = 8) -> str:
    return f"0x{value:0{width}X}u"


def c_array(values, per_line: int = 12, fmt: str = "int", indent: str = "    ") -> str:
    """Comma-separated values wrapped into lines (for table initialisers).

    fmt: "int" (decimal), "float" (exact hex floats), "hex" (0x..u words)."""
    conv = {"int": lambda v: str(int(v)), "float": c_float, "hex": c_hex}[fmt]
    items = [conv(v) for v in values]
    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return (",\n" + indent).join(lines)


def c_string(text: str) -> str:
    """A C string literal of UTF-8 text (non-printable and non-ASCII bytes as octal escapes)."""
    out = []
    for b in text.encode("utf-8"):
        ch = chr(b)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= b < 127 and ch != "?":
            out.append(ch)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(c_float=c_float, c_hex=c_hex, c_array=c_array, c_string=c_string)
    return env


def render(template: str, context: dict) -> str:
    return environment().get_template(template).render(**context)
