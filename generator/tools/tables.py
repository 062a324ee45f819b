"""The built-in tools' grammar tables, compiled at build time (docs/grammar.md, "Built-in tools").

`scons tools=FILE` builds the host program firmware/buildtools/grammar_tables.c from the
firmware's own grammar compiler with the board's table bounds (``[grammar]`` in the board
file, :data:`BOUNDS`), runs it on the list and hands its tables to templates/needle_tools.c.j2,
which puts them in flash.  The device then compiles nothing: the matcher reads the same
values it would have compiled at boot.  A list the board's bounds cannot hold fails the
build with the compiler's one-line message and the board key to raise.
"""

from __future__ import annotations

import json
import subprocess

from generator.errors import CactError

# board file [grammar] key -> (the C bound it sets, its default in needle_tool_grammar.h, what it counts)
BOUNDS = {
    "text_bytes": ("NEEDLE_GRAMMAR_TEXT_MAX", 16 * 1024, "bytes of the minified tool list"),
    "nodes": ("NEEDLE_GRAMMAR_MAX_NODES", 256, "schemas, one node each"),
    "literals": ("NEEDLE_GRAMMAR_MAX_REFS", 1024, "names, keys and enum values"),
    "pattern_items": ("NEEDLE_GRAMMAR_MAX_ITEMS", 512, "items of all patterns"),
    "pattern_ranges": ("NEEDLE_GRAMMAR_MAX_RANGES", 1024, "character ranges of the pattern items"),
    "span_bytes": ("NEEDLE_GRAMMAR_SPAN_MAX", 1024, "bytes of the query span strings copy from"),
}
# the least a board may set: a call list needs its two top nodes and one name
MINIMUM = {"text_bytes": 64, "nodes": 3, "literals": 1, "pattern_items": 1, "pattern_ranges": 1, "span_bytes": 1}

_TRAILER = b"\0truefalsenull\0"
_BIG = 10 ** 18 - 1


def _int64(v: int) -> str:
    """A node's 64-bit bound as C: the no-bound value by name."""
    return "GRAMMAR_BIG" if v == _BIG else "-GRAMMAR_BIG" if v == -_BIG else f"{v}LL"



# names the template needs (needle_tool_grammar.h enums, the node fields in their order)
TEMPLATE_NAMES = {
    "node_kinds": {1: "NG_LIT", 2: "NG_INT", 3: "NG_NUM", 4: "NG_STR", 5: "NG_ARR", 6: "NG_OBJ",
                   7: "NG_CALLS", 8: "NG_CALL"},
    "item_kinds": {0: "NG_P_ONE", 1: "NG_P_OPT", 2: "NG_P_STAR"},
    "node_fields": ("unique", "n_ref", "ref0", "child", "sub0", "item0", "n_item", "rest0", "required",
                    "min_len", "max_len", "lo", "hi", "mult", "min_bytes"),
    "int64": _int64,
}

def runtime(board: dict) -> bool:
    """Whether the board's firmware compiles tool lists at run time ([grammar] runtime, default
    true); false: only the built-in list, and no compiler or store in RAM."""
    return board.get("grammar", {}).get("runtime", True)


def defines(board: dict) -> list[str]:
    """-D flags of the board's grammar bounds (none for the defaults) and of runtime = false."""
    table = board.get("grammar", {})
    return ([f"-D{BOUNDS[key][0]}={value}u" for key, value in sorted(table.items()) if key in BOUNDS]
            + ([] if runtime(board) else ["-DNEEDLE_GRAMMAR_RUNTIME=0"]))


def check_bounds(grammar: dict) -> str | None:
    """What is wrong with a board file's [grammar] table, or None."""
    for key, value in grammar.items():
        if key == "runtime":
            if not isinstance(value, bool):
                return "grammar.runtime must be true or false (false: only the built-in tools, tools=FILE)"
            continue
        if key not in BOUNDS:
            return f"unknown key grammar.{key} (grammar keys: {', '.join(BOUNDS)}, runtime)"
        if not isinstance(value, int) or isinstance(value, bool) or not MINIMUM[key] <= value <= 1 << 20:
            return f"grammar.{key} must be an integer from {MINIMUM[key]} to {1 << 20} ({BOUNDS[key][2]})"
    return None


def _fix(message: str, board: dict) -> str:
    """The compiler's message with the board key that lifts the bound it names."""
    for key, (macro, default, _) in BOUNDS.items():
        if macro in message:
            now = board.get("grammar", {}).get(key, default)
            return (f"{message}; or raise grammar.{key} (now {now}) in boards/{board['name']}.toml, "
                    f"which costs RAM only for lists compiled at run time")
    return message


def compile_with(program: str, tools_path: str, minified: str, board: dict, tool_ppm: list | None = None) -> dict:
    """Run the grammar-tables program on the tool list: {"free": tables, "force": tables or
    None}.  The text it compiled must be `minified` (the Python twin's), byte for byte, and its
    tools' own minimum confidences `tool_ppm` (when given)."""
    try:
        proc = subprocess.run([program, tools_path], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CactError(f"cannot run the grammar compiler {program}: {exc}") from None
    if proc.returncode:
        msg = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise CactError(_fix(msg[-1] if msg else f"the grammar compiler failed ({proc.returncode})", board))
    out = json.loads(proc.stdout)
    want = minified.encode("utf-8", "surrogatepass") + _TRAILER
    for variant in ("free", "force"):
        g = out[variant]
        if g is None:
            continue
        if bytes.fromhex(g.pop("text")) != want or (tool_ppm is not None and g["tool_ppm"] != tool_ppm):
            raise CactError("the grammar compiler and generator/tools/schema.py minify the list differently "
                            "(a bug: please report it with the tool list)")
    if out["force"] is not None:
        for key in ("refs", "sub", "items", "ranges", "rest"):
            if out["force"][key] != out["free"][key]:
                raise CactError(f"the grammar's {key} differ with --force-call (a bug: please report it)")
    return out
