"""The call grammar against jsonschema on random tool lists (fuzz/README.md, "Random schemas").

    python -m fuzz.grammar_schemas --lists 10000 --seed 1 [--walks 3] [--py-walks 1]
                                   [--budget 160] [--model 20] [--asan]

Draws random tool lists that combine every keyword the grammar supports (every type;
``enum`` and ``const`` mixed with ``type`` and with keywords that narrow them; numbers written
as ``1.0``, ``1e2`` and ``-0``; ``pattern`` with non-ASCII literals, classes and
quantifiers, ``^$``; min/maxLength; bounds, exclusive bounds and multipleOf; arrays with
items, min/maxItems, uniqueItems; nested objects with required and additionalProperties),
written as raw JSON text.  For each list, both twins compile it (same result, or the same
one-line error); for each list that compiles, random walks through the grammar (fuzz/
grammar_walk.c: a random allowed byte at each step, under a random byte budget, so the
shortest completion must be exact) run in C, the first ``--py-walks`` of them also in
generator/tools/grammar.py with the same seed (they must agree byte for byte), the rest
replayed through the twin; every finished call list is validated against the tools'
schemas with jsonschema (Draft 2020-12).  ``--model N``: N lists (those whose prompt fits)
also get a force-call turn of the tiny golden archive's model (generator/tools/decode.py).

Prints the figures (lists, compiled, calls, schema-breaking calls, dead ends, twin
disagreements, seconds) and exits 1 if any of the last three is non-zero.  The suite runs a
few hundred lists (host_tests/test_robust_grammar.py); docs/grammar.md has a long run's
figures.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from generator.errors import CactError          # noqa: E402
from generator.tools import grammar as gm       # noqa: E402
from generator.tools.schema import CALL_MAX_JSON, compile_tools   # noqa: E402

MASK = (1 << 64) - 1


# ---- the random number generator of grammar_walk.c --------------------------------------
class SplitMix64:
    def __init__(self, seed: int):
        self.s = seed & MASK

    def __call__(self) -> int:
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)


# ---- random tool lists, as raw JSON text ---------------------------------------------------
class Raw:
    """A number written exactly as ``text`` (1.0, 1e2, -0)."""

    def __init__(self, text: str):
        self.text = text


def dump(v) -> str:
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + dump(x) for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(dump(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


PATTERNS = ["é", "é+$", "é{3,}", "aé$", "😀+", "[😀-😎]{2}", "^$", "^a{0}$", "^a{0,0}$", "^[a-z]{2,5}$",
            "\\d+", "^[^\"\\\\]*$", "^[\u0001-\u0003b]{1,2}$", "x", "[A-Z]", "^\\w+@\\w+\\.com$", "^é+ü?$",
            "^[\\n\\t ]*x$", "^\\$\\d+\\.\\d{2}$", "天气", "^[à-ÿ]{1,3}$", "^.{1,3}$", "\\\\", "\"", "^[^a-z]+$",
            "end$", "^[0-9a-f]{4}", "ü?ö*$", "\u2028"]
WORDS = ["city", "minutes", "level", "on", "mode", "tags", "température", "开关", "", "q\"uote", "b\\s",
         "nl\n", "a", "ab", "😀"]
STRINGS = ["a", "ab", "", "Paris", "Zürich", "東京", "😀", "q\"", "b\\", "\n", "\x01", "on", "off", "é"]
NUMBERS = ["0", "-0", "1", "1.0", "1e2", "100", "2.5", "-3", "1E+2", "0.0", "-0.0", "7", "1e-07", "12.50",
           "3.0e1", "30"]


def _number_schema(r: random.Random, kind: str) -> dict:
    s: dict = {"type": kind}
    base = r.choice([-1000, -5, 0, 1, 10, 123456, 0.5, -2.25])
    for key, sign in (("minimum", -1), ("exclusiveMinimum", -1), ("maximum", 1), ("exclusiveMaximum", 1)):
        if r.random() < 0.35:
            s[key] = Raw(repr(base + sign * r.choice([0, 0.5, 1, 3, 17.25, 1000, 0.000001, 1e9])))
    if r.random() < 0.35:
        s["multipleOf"] = Raw(r.choice(["2", "3", "5", "25", "7"] if kind == "integer" else
                                       ["0.5", "0.25", "0.1", "0.001", "2.5", "3", "1", "0.000001"]))
    return s


def _type_of(v) -> str:
    if isinstance(v, Raw):
        d = Decimal(v.text)
        return "integer" if d == d.to_integral_value() and "." not in v.text else "number"
    return {str: "string", bool: "boolean", type(None): "null"}[type(v)]


def _enum_values(r: random.Random) -> list:
    """1 to 6 values; mostly distinct as JSON values (not always: 1 and 1.0 must be refused)."""
    pool = ([Raw(x) for x in NUMBERS] + STRINGS + [True, False, None])
    values = r.sample(pool, r.randint(1, 6))
    if r.random() < 0.85:
        seen, out = set(), []
        for v in values:
            key = ("n", Decimal(v.text)) if isinstance(v, Raw) else ("v", type(v).__name__, v)
            if key not in seen:
                seen.add(key)
                out.append(v)
        values = out
    return values


def _scalar(r: random.Random) -> dict:
    kind = r.choice(["string", "string", "integer", "number", "boolean", "null", "enum", "const"])
    if kind == "string":
        s: dict = {"type": "string"}
        how = r.randint(0, 3)
        if how == 1:
            s["minLength"] = r.randint(0, 4)
            if r.random() < 0.5:
                s["maxLength"] = s["minLength"] + r.randint(0, 4)
        elif how == 2:
            s["maxLength"] = r.randint(0, 5)
        elif how == 3:
            s["pattern"] = r.choice(PATTERNS)
            if r.random() < 0.03:
                s["minLength"] = 1                       # refused: pattern with a length
        if r.random() < 0.01:
            s = {"type": "string", "minLength": 4096}    # refused: cannot fit the envelope
        return s
    if kind in ("integer", "number"):
        return _number_schema(r, kind)
    if kind in ("boolean", "null"):
        return {"type": kind}
    values = _enum_values(r)
    s = {"enum": values} if kind == "enum" else {"const": values[0]}
    if r.random() < 0.5:                                 # type with enum: only values of the type
        s["type"] = r.choice(["string", "integer", "number", "boolean", "null"]) if r.random() < 0.1 \
            else _type_of(r.choice(values if kind == "enum" else values[:1]))
        if r.random() < 0.1:                             # refused: a keyword that narrows the values
            extra = {"string": ("maxLength", 3), "integer": ("minimum", 0), "number": ("multipleOf", 2),
                     "boolean": None, "null": None}[s["type"]]
            if extra:
                s[extra[0]] = extra[1]
    return s


def _schema(r: random.Random, depth: int) -> dict:
    kind = r.choice(["scalar", "scalar", "scalar", "array", "object"] if depth < 3 else ["scalar"])
    if kind == "scalar":
        s = _scalar(r)
    elif kind == "array":
        item = _schema(r, depth + 1) if r.random() < 0.6 else r.choice(
            [{"enum": _enum_values(r)}, {"type": "boolean"}, {"const": r.choice(STRINGS)}])
        s = {"type": "array", "items": item}
        lit = "enum" in item or "const" in item or item.get("type") == "boolean"
        if lit and r.random() < 0.6:
            s["uniqueItems"] = True
        elif r.random() < 0.1:
            s["uniqueItems"] = False
        lo = r.randint(0, 3)
        if s.get("uniqueItems") and r.random() < 0.95:   # (more than the distinct values: refused)
            lo = min(lo, len(item["enum"]) if "enum" in item else 1 if "const" in item else 2)
        if lo or r.random() < 0.5:
            s["minItems"] = lo
        if r.random() < 0.5:
            s["maxItems"] = lo + r.randint(0, 3)
    else:
        s = _object(r, depth + 1)
    if r.random() < 0.15:
        s["description"] = r.choice(["a value", "é", ""])
    return s


def _object(r: random.Random, depth: int) -> dict:
    keys = r.sample(WORDS, r.randint(0, 4))
    s: dict = {"type": "object"}
    if keys or r.random() < 0.5:
        s["properties"] = {k: _schema(r, depth) for k in keys}
    req = [k for k in keys if r.random() < 0.6]
    if req:
        s["required"] = req
    if r.random() < 0.3:
        s["additionalProperties"] = False
    return s


def random_tools(r: random.Random) -> str:
    """The raw JSON text of a random tool list."""
    names = r.sample(["get_weather", "set_timer", "météo", "天气预报", "timer.set", "a\"b", "x\\y", "😀", "t"],
                     r.randint(1, 4))
    tools = []
    for n in names:
        t: dict = {"name": n}
        if r.random() < 0.3:
            t["description"] = "a tool"
        if r.random() < 0.9:
            t["parameters"] = _object(r, 1)
        tools.append(t)
    return dump(tools)


# ---- walks through the Python twin (grammar_walk.c walk()) ----------------------------------
def walk(g, rng: SplitMix64, budget: int) -> tuple:
    """(bytes, finished): one random walk, the same steps as grammar_walk.c's."""
    list_min = g.nodes[g.root].min_bytes
    B = min(CALL_MAX_JSON, list_min + rng() % (budget + 1))
    state, out = gm.start(g), bytearray()
    while not gm.done(g, state):
        options = []
        for b in range(256):
            nxt = gm.feed(g, state, b)
            if nxt is None:
                continue
            mb = gm.min_bytes(g, nxt)
            if len(out) + 1 + mb <= B:
                options.append((b, nxt, mb))
        if not options:
            return bytes(out), False
        if rng() % 4 == 0:
            best = min(o[2] for o in options)
            options = [o for o in options if o[2] == best]
        b, state, _ = options[rng() % len(options)]
        out.append(b)
    return bytes(out), True


def replay(g, data: bytes) -> bool:
    """Does the twin accept data byte by byte as a complete list?"""
    state = gm.feed_bytes(g, gm.start(g), data)
    return state is not None and gm.done(g, state)


# ---- jsonschema ------------------------------------------------------------------------------
def _is_integer(checker, inst) -> bool:
    if isinstance(inst, bool):
        return False
    if isinstance(inst, int):
        return True
    return isinstance(inst, Decimal) and inst.is_finite() and inst == inst.to_integral_value()


@functools.lru_cache(maxsize=4096)
def validator(schema_text: str):
    import jsonschema
    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine("integer", _is_integer)
    cls = jsonschema.validators.extend(base, type_checker=checker)
    return cls(json.loads(schema_text, parse_float=Decimal))


def schema_errors(tools_text: str, calls_text: bytes, force: bool) -> list:
    """What is wrong with a finished call list (empty: nothing): not JSON, not a list of
    {"name","arguments"} of the tools, an argument breaking its schema (exact decimals)."""
    try:
        calls = json.loads(calls_text.decode("utf-8"), parse_float=Decimal)
    except (UnicodeDecodeError, ValueError) as exc:
        return [f"not JSON: {exc}"]
    if not isinstance(calls, list) or (force and not calls):
        return ["not a (non-empty, with force_call) list"]
    tools = json.loads(tools_text, parse_float=Decimal)
    by_name = {t["name"]: t.get("parameters", {"type": "object"}) for t in tools}
    out = []
    for c in calls:
        if not isinstance(c, dict) or list(c) != ["name", "arguments"] or c["name"] not in by_name:
            out.append(f"not a call of a tool: {c!r}")
            continue
        text = dump_schema(by_name[c["name"]])
        out += [f"{c['name']}: {e.message}" for e in validator(text).iter_errors(c["arguments"])]
    return out


def dump_schema(v) -> str:
    """Decimal-exact JSON text of a schema parsed with parse_float=Decimal."""
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + dump_schema(x) for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(dump_schema(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


# ---- the C walker ------------------------------------------------------------------------------
def build_walker(out_dir: Path, asan: bool = False) -> Path:
    exe = out_dir / "grammar_walk"
    from generator.build import sources
    fw = ROOT / "firmware"
    flags = ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"] if asan else ["-O2"]
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", *flags, f"-I{fw / sources.LIB_DIR}",
                    str(ROOT / "fuzz" / "grammar_walk.c"), *(str(fw / f) for f in sources.GRAMMAR_SOURCES),
                    "-o", str(exe)], check=True)
    return exe


def run_walker(exe: Path, records: list) -> list:
    """records: (text, force, seed, walks, budget) -> per record ("ERR", msg) or
    ("OK", list_min, [(bytes, finished)])."""
    batch = bytearray()
    for text, force, seed, walks, budget in records:
        b = text.encode("utf-8")
        batch += f"LIST {int(force)} {seed} {walks} {budget} {len(b)}\n".encode() + b + b"\n"
    proc = subprocess.run([str(exe)], input=bytes(batch), capture_output=True, check=True)
    lines = proc.stdout.decode("utf-8").split("\n")
    out, k = [], 0
    for _, _, _, walks, _ in records:
        head = lines[k]
        k += 1
        if head.startswith("ERR "):
            out.append(("ERR", head[4:]))
            continue
        ws = []
        for _ in range(walks):
            hexes, _, end = lines[k].partition(" ")
            ws.append((bytes.fromhex(hexes), end == "D"))
            k += 1
        out.append(("OK", int(head[3:]), ws))
    return out


# ---- the model under --force-call -------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def tiny_engine():
    from generator.archive import reader
    from generator.archive.tokenizer import Tokenizer
    from generator.model.needle2 import Needle2
    a = reader.read((ROOT / "host_tests" / "golden" / "tiny" / "archive.cact").read_bytes())
    return Needle2(a, "a8"), Tokenizer.from_blob(a.tokenizer_blob())


def model_call(text: str, query: str, max_new: int = 48):
    """The force-call turn of the tiny golden model on the list (its call list bytes), or None
    when the prompt or the shortest call does not fit the tiny context."""
    from generator.tools.decode import run_turn
    from generator.tools.prompt import render_prompt_ids
    model, tok = tiny_engine()
    g = compile_tools(text, force_call=True)
    ids = render_prompt_ids(tok, text, query)
    budget = min(max_new, model.hdr["max_seq_len"] - len(ids))
    if len(ids) >= model.hdr["max_seq_len"] or budget < 1 + g.nodes[g.root].min_bytes + 2:
        return None
    env = run_turn(model, tok, g, ids, max_new)
    return env["calls_json"].encode("utf-8")


# ---- the run ----------------------------------------------------------------------------------
def run(lists: int, seed: int, walks: int = 3, py_walks: int = 1, budget: int = 160, model: int = 0,
        exe: Path | None = None, asan: bool = False, batch: int = 200, log=None) -> dict:
    """The figures of a run (see the module's docstring)."""
    t0 = time.monotonic()
    fig = {"lists": 0, "compiled": 0, "refused": 0, "calls": 0, "python_walks": 0, "model_calls": 0,
           "schema_breaking": 0, "dead_ends": 0, "twin_disagreements": 0}
    problems: list = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = exe or build_walker(Path(tmp), asan)
        r = random.Random(seed)
        done = 0
        while done < lists:
            n = min(batch, lists - done)
            records = []
            for i in range(n):
                text = random_tools(r)
                records.append((text, r.random() < 0.5, r.getrandbits(63), walks, budget))
            results = run_walker(exe, records)
            for (text, force, wseed, _, _), res in zip(records, results):
                fig["lists"] += 1
                try:
                    g = compile_tools(text, force_call=force)
                    py = None
                except CactError as exc:
                    g, py = None, str(exc)
                if res[0] == "ERR" or py is not None:
                    fig["refused"] += 1
                    if res[0] != "ERR" or py != res[1]:
                        fig["twin_disagreements"] += 1
                        problems.append(f"compile: C {res!r:.200} / Python {py!r:.200} on {text}")
                    continue
                fig["compiled"] += 1
                if res[1] != g.nodes[g.root].min_bytes:
                    fig["twin_disagreements"] += 1
                    problems.append(f"list_min: C {res[1]} / Python {g.nodes[g.root].min_bytes} on {text}")
                rng = SplitMix64(wseed)
                for k, (data, finished) in enumerate(res[2]):
                    if k < py_walks:
                        fig["python_walks"] += 1
                        mine = walk(g, rng, budget)
                        if mine != (data, finished):
                            fig["twin_disagreements"] += 1
                            problems.append(f"walk {k}: C {data!r} {finished} / Python {mine!r} on {text}")
                    elif finished and not replay(g, data):
                        fig["twin_disagreements"] += 1
                        problems.append(f"replay: Python refuses C's walk {data!r} on {text}")
                    if not finished:
                        fig["dead_ends"] += 1
                        problems.append(f"dead end after {data!r} on {text} (force {force})")
                        continue
                    fig["calls"] += 1
                    errs = schema_errors(text, data, force)
                    if errs:
                        fig["schema_breaking"] += 1
                        problems.append(f"schema: {data!r}: {errs[0]} on {text}")
            done += n
            if log:
                log(f"{done} lists, {fig['calls']} calls, {len(problems)} problems, "
                    f"{time.monotonic() - t0:.0f} s")
        mr = random.Random(seed + 1)
        tried = 0
        while fig["model_calls"] < model and tried < model * 20:
            tried += 1
            text = random_tools(mr)
            try:
                data = model_call(text, mr.choice(["set a timer for ten minutes", "weather in Paris?", "天气"]))
            except CactError:
                continue
            if data is None:
                continue
            fig["model_calls"] += 1
            fig["calls"] += 1
            errs = schema_errors(text, data, True)
            if errs:
                fig["schema_breaking"] += 1
                problems.append(f"model: {data!r}: {errs[0]} on {text}")
    fig["seconds"] = round(time.monotonic() - t0, 1)
    fig["problems"] = problems
    return fig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fuzz.grammar_schemas", description=__doc__.split("\n\n")[0])
    ap.add_argument("--lists", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--walks", type=int, default=3, help="walks per list (C)")
    ap.add_argument("--py-walks", type=int, default=1, help="of them also walked by the Python twin")
    ap.add_argument("--budget", type=int, default=160, help="walks get list_min + 0..BUDGET bytes")
    ap.add_argument("--model", type=int, default=20, help="force-call turns of the tiny golden model")
    ap.add_argument("--asan", action="store_true", help="build the C walker with ASan and UBSan")
    a = ap.parse_args(argv)
    fig = run(a.lists, a.seed, a.walks, a.py_walks, a.budget, a.model, asan=a.asan,
              log=lambda m: print(m, file=sys.stderr, flush=True))
    for p in fig.pop("problems")[:20]:
        print("PROBLEM", p)
    print(json.dumps(fig))
    bad = fig["schema_breaking"] + fig["dead_ends"] + fig["twin_disagreements"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
