"""Emit: render the Jinja2 templates of templates/ into C, assembly and linker text.

This module only renders; every decision is made by the planner, which hands over a typed
plan (templates read it as ``plan``).  The environment is strict: an undefined name or a
misspelt attribute stops generation with a CactError naming the template and line.  It
trims block lines and offers a few filters that keep emitted numbers exact and readable.
"""

from __future__ import annotations

import dataclasses
import re
import struct
import sys

import jinja2

from generator.errors import CactError
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


def c_comment(text: str) -> str:
    """Text (a tool's name, a JSON key) safe inside a /* */ comment: no "*/" that would end
    it, no "/*" that -Wcomment rejects, on one line."""
    return str(text).replace("*/", "*\\/").replace("/*", "/\\*").replace("\r", " ").replace("\n", " ")


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
    env.filters.update(c_float=c_float, c_hex=c_hex, c_array=c_array, c_string=c_string, c_comment=c_comment)
    return env


def _template_line(template: str, tb) -> str:
    """The innermost template frame of a traceback, as "name line N" (Jinja maps the
    compiled frames back to template lines)."""
    where = template
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name.endswith(".j2"):
            where = f"{name.replace(str(TEMPLATES_DIR), '').lstrip('/')} line {tb.tb_lineno}"
        tb = tb.tb_next
    return where


def render(template: str, context) -> str:
    """Render `template` (a name under templates/) with a typed plan, seen as ``plan``, or a
    dict of top-level names."""
    if dataclasses.is_dataclass(context) and not isinstance(context, type):
        names = {"plan": context}
    else:
        names = dict(context)
    try:
        return environment().get_template(template).render(**names)
    except jinja2.UndefinedError as exc:
        # Jinja names the object by its qualified class ("generator.codegen.plan.EnginePlan
        # object"); the class alone reads better and is unique among the plan types.
        message = re.sub(r"'(?:\w+\.)+(\w+ object)'", r"'\1'", exc.message or "undefined value")
        raise CactError(f"template {_template_line(template, sys.exc_info()[2])}: {message}") from None
