"""Task accuracy: how often a model's tool calls are the right ones (docs/training.md, "Task accuracy").

Held-out examples are JSON lines, ``{"tools": [...], "query": "...", "calls": [{"name": ...,
"arguments": {...}}]}``; an empty ``calls`` means the right answer is the empty call ``[]``.
Each example is rendered as ``needle --tools F --query Q`` renders it, the tools block being
``json.dumps(tools, separators=(",", ":"), ensure_ascii=False)``, and answered once with the
call grammar on (the constrained turn) and once with it off (``--raw``: plain greedy text).

Every answer is scored from the model's text alone, so the reference and a built engine go
through the same code:

* JSON validity: the text between the first ``<tool_call>`` and the next ``</tool_call>``
  parses as strict JSON (no NaN or Infinity) and is a list of ``{"name", "arguments"}``
  objects (a string and an object, nothing else).  That list is the prediction; a text
  without such a block has none, and then every other metric fails for the example too
  (a trained model writes the block even for the empty call).
* schema validity: every predicted call names a tool of the example's block and its
  arguments validate (jsonschema, draft 2020-12) against that tool's ``parameters``.
* decision accuracy: the prediction is a call (a non-empty list) exactly when the gold is.
* exact match: the same calls in the same order, the same names, and every argument equal as
  parsed JSON: key order inside an object does not matter, list order does; ``true`` is not
  ``1``; an integer and a number with a fraction or exponent (``1`` and ``1.0``) differ, except
  where the tool's schema types that value ``"number"``, where they compare by value.

`python -m generator eval` answers with the NumPy reference (``float``, ``a8`` or both);
`scons board=X eval=1` runs `python -m generator eval --engine BIN --board X ...`, which answers
with the built engine on its board and also with the a8 reference, which the engine must
reproduce example for example (a difference is a bug).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from generator.errors import CactError
from generator.files import refuse_output_is_input, write_atomic

FORMAT = "needle-fw eval"
FORMAT_VERSION = 1
DEFAULT_MAX_NEW = 96       # tokens per answer, as `needle --max-new`'s default
DEFAULT_TIMEOUT = 600      # seconds one engine run may take (a watch under qemu-system is slow)
DEFAULT_DATA = "demo/eval/heldout.jsonl"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
METRICS = ("exact_match", "decision", "json_valid", "schema_valid")
# grammar settings: the call grammar on, off (--raw), or on with every free string a span of the
# query (--span-strings; docs/grammar.md §2a)
GRAMMARS = {"on": True, "off": False, "span": "span"}


# ---- the held-out examples ----------------------------------------------------------------

@dataclass
class Example:
    line: int             # line of the data file (1-based), how messages name it
    tools: list
    query: str
    calls: list           # the gold calls; [] for the empty call
    tools_text: str       # the tools block the prompt renders
    grammar: object       # its compiled call grammar (generator.tools.schema.Grammar)


def _no_constant(name: str):
    """json.loads hook: NaN and Infinity are Python's, not JSON."""
    raise ValueError(f"{name} is not JSON")


def strict_json(text: str):
    """json.loads without NaN/Infinity (ValueError as json.loads raises it)."""
    return json.loads(text, parse_constant=_no_constant)


def _is_call(call) -> bool:
    """A {"name": string, "arguments": object} call, nothing else in it."""
    return (isinstance(call, dict) and set(call) == {"name", "arguments"}
            and isinstance(call["name"], str) and isinstance(call["arguments"], dict))


def parameters(tools: list, name: str):
    """The parameters schema of tool `name` (an object of anything when it has none), or
    None when the block has no such tool."""
    for tool in tools:
        if tool.get("name") == name:
            return tool.get("parameters", {"type": "object"})
    return None


def _example(obj, where: str, line: int) -> Example:
    """One line's object checked and compiled: CactError naming the line otherwise."""
    from generator.tools.schema import compile_tools

    def bad(message: str):
        raise CactError(f"{where} line {line}: {message}")
    if not isinstance(obj, dict):
        bad("want an object {\"tools\": [...], \"query\": \"...\", \"calls\": [...]}")
    missing = [k for k in ("tools", "query", "calls") if k not in obj]
    if missing:
        bad(f"no {missing[0]!r} key")
    tools, query, calls = obj["tools"], obj["query"], obj["calls"]
    if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                              for t in tools):
        bad("tools must be a list of tool objects, each with a string name")
    if not isinstance(query, str) or not query.strip():
        bad("query must be a non-empty string")
    if not isinstance(calls, list):
        bad("calls must be a list (empty for the empty call)")
    for i, call in enumerate(calls):
        if not _is_call(call):
            bad(f"calls[{i}] must be {{\"name\": string, \"arguments\": object}} and nothing else")
        if parameters(tools, call["name"]) is None:
            bad(f"calls[{i}] names {call['name']!r}, which is not one of its tools")
        problem = schema_errors(call["arguments"], parameters(tools, call["name"]))
        if problem is not None:
            bad(f"calls[{i}] arguments do not validate against {call['name']}'s parameters: {problem}")
    tools_text = json.dumps(tools, separators=(",", ":"), ensure_ascii=False)
    try:
        grammar = compile_tools(tools_text)
    except CactError as exc:
        bad(f"tools: {exc}")
    return Example(line, tools, query, calls, tools_text, grammar)


def load_examples(path: str | os.PathLike, limit: int | None = None) -> list[Example]:
    """The examples of a JSON-lines file (blank lines skipped), the first `limit` of them;
    CactError with the file and line for anything the evaluation could not use."""
    where = os.fspath(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise CactError(f"{where} does not exist (held-out examples, one JSON object a line: "
                        "docs/training.md, \"Task accuracy\")") from None
    except IsADirectoryError:
        raise CactError(f"{where} is a directory, not a JSON-lines file") from None
    except OSError as exc:
        raise CactError(f"cannot read {where}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise CactError(f"{where} line {text_line(exc.object, exc.start)}: not UTF-8") from None
    out = []
    # split on "\n" only: a JSON string may hold U+2028 and friends, which splitlines() cuts
    for number, line in enumerate(text.split("\n"), 1):
        if limit is not None and len(out) >= limit:
            break
        if not line.strip():
            continue
        try:
            obj = strict_json(line)
        except ValueError as exc:
            detail = f"{exc.msg} (column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise CactError(f"{where} line {number}: not JSON: {detail}") from None
        out.append(_example(obj, where, number))
    if not out:
        raise CactError(f"{where} has no examples")
    return out


def text_line(data: bytes, offset: int) -> int:
    """1-based line of byte `offset`."""
    return data.count(b"\n", 0, offset) + 1


# ---- scoring -----------------------------------------------------------------------------

def call_text(text: str | None) -> str | None:
    """The text between the first <tool_call> and the next </tool_call>, or None."""
    if text is None:
        return None
    start = text.find(CALL_OPEN)
    if start < 0:
        return None
    start += len(CALL_OPEN)
    end = text.find(CALL_CLOSE, start)
    return None if end < 0 else text[start:end]


def parse_calls(text: str | None) -> list | None:
    """The predicted calls of a model's text, or None if it has no valid call list."""
    body = call_text(text)
    if body is None:
        return None
    try:
        calls = strict_json(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(calls, list) or not all(_is_call(c) for c in calls):
        return None
    return calls


def _is_number_schema(schema) -> bool:
    """Whether a schema types its value "number" (then 1 and 1.0 are the same value)."""
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    return kind == "number" or (isinstance(kind, list) and "number" in kind)


def values_equal(gold, pred, schema=None) -> bool:
    """Equal as parsed JSON under the rules of the module docstring: a bool is never a
    number, an int and a float differ unless `schema` (the value's schema, or None) types it
    "number", objects compare by key set, lists in order; sub-schemas follow "properties"
    and "items"."""
    if isinstance(gold, bool) or isinstance(pred, bool):
        return type(gold) is type(pred) and gold == pred
    if isinstance(gold, (int, float)) and isinstance(pred, (int, float)):
        return gold == pred and (type(gold) is type(pred) or _is_number_schema(schema))
    if isinstance(gold, dict) and isinstance(pred, dict):
        props = schema.get("properties") if isinstance(schema, dict) else None
        props = props if isinstance(props, dict) else {}
        return gold.keys() == pred.keys() and all(values_equal(gold[k], pred[k], props.get(k)) for k in gold)
    if isinstance(gold, list) and isinstance(pred, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        return len(gold) == len(pred) and all(values_equal(g, p, items) for g, p in zip(gold, pred))
    return type(gold) is type(pred) and gold == pred


def calls_equal(gold: list, pred: list | None, tools: list) -> bool:
    """Exact match: the same calls in the same order, each argument equal (values_equal
    under the named tool's parameters)."""
    if pred is None or len(gold) != len(pred):
        return False
    return all(g["name"] == p["name"] and values_equal(g["arguments"], p["arguments"], parameters(tools, g["name"]))
               for g, p in zip(gold, pred))


def schema_errors(arguments, schema) -> str | None:
    """The first jsonschema (draft 2020-12) error of `arguments` against `schema`, or None."""
    import jsonschema
    try:
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(arguments))
    except jsonschema.exceptions.SchemaError as exc:
        return f"the schema itself is invalid: {exc.message}"
    return None if error is None else error.message


def schema_valid(pred: list | None, tools: list) -> bool:
    """Every call names a tool of the block and its arguments validate against it."""
    if pred is None:
        return False
    for call in pred:
        schema = parameters(tools, call["name"])
        if schema is None or schema_errors(call["arguments"], schema) is not None:
            return False
    return True


def score(example: Example, text: str | None) -> dict:
    """One answer's prediction and its four verdicts (text None: the run failed)."""
    pred = parse_calls(text)
    return {
        "calls": pred,
        "exact_match": calls_equal(example.calls, pred, example.tools),
        "decision": pred is not None and bool(pred) == bool(example.calls),
        "json_valid": pred is not None,
        "schema_valid": schema_valid(pred, example.tools),
    }


def summarize(label: str, grammar: str, results: list[dict]) -> dict:
    """The metrics of one (mode, grammar) over its per-example results."""
    n = len(results)
    row = {"mode": label, "grammar": grammar, "n": n,
           "failed": sum(r["error"] is not None for r in results)}
    for key in METRICS:
        count = sum(bool(r[key]) for r in results)
        row[key] = {"count": count, "rate": count / n if n else 0.0}
    seconds = [r["seconds"] for r in results if r["error"] is None]
    row["seconds_per_example"] = sum(seconds) / len(seconds) if seconds else None
    return row


def render_table(rows: list[dict]) -> str:
    """The metrics as an aligned table, one row per mode and grammar."""
    head = ["mode", "grammar", "n", "failed", "exact", "decision", "json", "schema", "s/example"]
    body = [[r["mode"], r["grammar"], str(r["n"]), str(r["failed"])]
            + [f"{100 * r[k]['rate']:.1f}%" for k in METRICS]
            + ["-" if r["seconds_per_example"] is None else f"{r['seconds_per_example']:.2f}"]
            for r in rows]
    widths = [max(len(line[i]) for line in [head] + body) for i in range(len(head))]

    def fmt(cells):
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join(fmt(line).rstrip() for line in [head] + body)


# ---- who answers: the reference, or a built engine ------------------------------------------

class Reference:
    """The NumPy reference in one numerics mode, answering as the CLI twin does
    (generator/tools/decode.py: run_turn with the grammar, raw_turn without)."""

    def __init__(self, archive, mode: str):
        from generator.archive.tokenizer import Tokenizer
        from generator.model import reference
        self.label = mode
        self.model = reference(archive, mode)
        self.tok = Tokenizer.from_blob(archive.tokenizer_blob())

    def prompt_ids(self, ex: Example) -> list:
        """BOS and the rendered prompt's ids, as the CLI feeds them."""
        from generator.tools.prompt import render_prompt_ids
        return render_prompt_ids(self.tok, ex.tools_text, ex.query)

    def answer(self, ex: Example, grammar: bool, max_new: int) -> str:
        """The model's text for the example: the envelope's text, or the --raw text."""
        from generator.tools.decode import raw_turn, run_turn
        from generator.tools.schema import set_query
        ids = self.prompt_ids(ex)
        if grammar:
            set_query(ex.grammar, ex.query, span_all=grammar == "span")
            try:
                return run_turn(self.model, self.tok, ex.grammar, ids, max_new)["text"]
            finally:
                set_query(ex.grammar, None)
        return self.tok.decode(raw_turn(self.model, ids, max_new))


def reads_tools(board: dict) -> bool:
    """Whether a board's firmware reads each example's tools (--tools FILE): it needs host
    files (not a UART console) and a grammar compiler at run time ([grammar] runtime)."""
    from generator.build import boards
    from generator.tools import tables
    return boards.has_host_files(board) and tables.runtime(board)


def why_no_tools(board: dict) -> str:
    """Why a board cannot take an example's tools, for the messages."""
    from generator.build import boards
    if not boards.has_host_files(board):
        return f"board {board['name']} has no host files (console = \"uart\")"
    return f"board {board['name']} compiles no tool list at run time ([grammar] runtime = false)"


def same_tools(ex: Example, builtin_text: str) -> bool:
    """Whether the example's tools block is the built-in list's (the same prompt)."""
    from generator.tools.prompt import minify_tools
    return minify_tools(ex.tools_text) == minify_tools(builtin_text)


class Engine:
    """A built engine on its board, natively or under the board's emulator (as run=1 and
    check= run it), answering examples.  Each run is bounded by `timeout`; a failure is the
    answer's error, one line.  builtin: the board cannot read tool files, so the query goes
    alone and the firmware uses its built-in list."""

    def __init__(self, board: dict, engine: str, image: str | None, work: str, timeout: float,
                 reference: Reference, builtin: bool):
        self.label = board["name"]
        self.board, self.engine, self.image, self.work = board, engine, image, work
        self.timeout, self.reference, self.builtin = timeout, reference, builtin
        from generator.build.runner import BoardRunner
        self.runner = BoardRunner(board, engine, image)
        self.uart = self.runner.uart

    def answer(self, ex: Example, grammar: bool, max_new: int) -> str:
        """The engine's text (the envelope's, or the --raw text); CactError if it fails.
        --raw refuses an explicit --max-new the context cannot hold, where the constrained
        turn (and the twin) shrinks it: so the raw budget is shrunk here, with the prompt's
        length from the reference's tokenizer."""
        max_seq = self.reference.model.hdr["max_seq_len"]
        budget = min(max_new, max_seq)
        if not grammar:
            budget = max(1, min(budget, max_seq - len(self.reference.prompt_ids(ex))))
        args = [] if self.builtin else ["--tools", "tools.json"]
        args += ["--query", ex.query, "--max-new", str(budget)] + ([] if grammar else ["--raw"])
        args += ["--span-strings"] if grammar == "span" else []
        if not self.builtin:
            Path(self.work, "tools.json").write_text(ex.tools_text, encoding="utf-8")
        proc = self.runner.run(args, cwd=self.work, timeout=self.timeout,
                               timeout_hint="a slower emulator needs more time: --timeout S")
        return engine_text(proc.returncode, proc.stdout, proc.stderr, grammar, self.uart)


def engine_text(status: int, out: str, err: str, grammar: bool, uart: bool) -> str:
    """The model's text from one engine run's exit status and output: the envelope's text
    (grammar on) or the --raw text without the CLI's final newline; CactError with the
    engine's last error line if it failed.  A UART console has one stream, the program's
    output then "needle: exit N"."""
    if uart:
        body, _, _ = out.rstrip("\n").rpartition("\n")
        out, err = (body + "\n" if body else ""), out
    if status:
        lines = [l.strip() for l in (err or "").splitlines() if l.strip() and not l.startswith("needle: exit")]
        raise CactError(f"engine exit {status}" + (f": {lines[-1]}" if lines else ""))
    if not grammar:
        return out[:-1] if out.endswith("\n") else out
    try:
        return strict_json(out)["text"]
    except (ValueError, TypeError, KeyError):
        raise CactError(f"the engine printed no envelope: {out.strip()[:80]!r}") from None


# ---- a whole evaluation --------------------------------------------------------------------

def _attempt(run) -> tuple[str | None, str | None, float]:
    """(text, error, seconds) of one answer; a CactError is that example's failure."""
    start = time.perf_counter()
    try:
        text = run()
    except CactError as exc:
        return None, str(exc), time.perf_counter() - start
    return text, None, time.perf_counter() - start


def evaluate(examples: list[Example], answerers: list, grammars: list[str],
             max_new: int) -> tuple[list[dict], list[dict]]:
    """Every example answered by every answerer under every grammar setting: (metric rows,
    per-example predictions).  A failed run prints one line and counts as wrong.  A counter
    on stderr says where a long run is (`[3/12] eval line 17`: in place on a terminal, a
    plain line each otherwise; generator/build/progress.py)."""
    from generator.build.progress import Progress
    progress = Progress(len(examples), "eval")
    predictions = []
    results: dict[tuple[str, str], list[dict]] = {(a.label, g): [] for a in answerers for g in grammars}
    for i, ex in enumerate(examples, 1):
        runs = {}
        for a in answerers:
            for g in grammars:
                text, error, seconds = _attempt(lambda: a.answer(ex, GRAMMARS[g], max_new))
                if error:
                    progress.close()
                    print(f"line {ex.line} ({a.label}, grammar {g}): failed: {error}", flush=True)
                r = {"text": text, "error": error, "seconds": round(seconds, 4), **score(ex, text)}
                results[a.label, g].append(r)
                runs[f"{a.label}/{g}"] = r
        predictions.append({"line": ex.line, "query": ex.query, "gold": ex.calls, "runs": runs})
        progress.step(i, f"line {ex.line}")
    progress.close()
    rows = [summarize(label, g, rs) for (label, g), rs in results.items()]
    return rows, predictions


def mismatches(predictions: list[dict], engine: str, reference: str, grammars: list[str]) -> dict:
    """Runs where the engine's answer is not the reference's, where both answered: the calls
    (or their validity) differ, or only the text does.  The engine is bit-identical to the a8
    reference, so any is a bug.  engine_failed: runs only the engine failed (a time-out, or
    a limit of the board's, e.g. its text buffer), reported apart."""
    out = {"runs": 0, "calls": 0, "text": 0, "engine_failed": 0, "examples": []}
    for p in predictions:
        for g in grammars:
            e, r = p["runs"][f"{engine}/{g}"], p["runs"][f"{reference}/{g}"]
            if e["error"] is not None or r["error"] is not None:
                out["engine_failed"] += e["error"] is not None and r["error"] is None
                continue
            out["runs"] += 1
            if e["calls"] != r["calls"] or e["json_valid"] != r["json_valid"]:
                out["calls"] += 1
                out["examples"].append({"line": p["line"], "grammar": g, "what": "calls"})
            elif e["text"] != r["text"]:
                out["text"] += 1
                out["examples"].append({"line": p["line"], "grammar": g, "what": "text"})
    return out


def document(archive_path: str, data: str, max_new: int, rows: list[dict], predictions: list[dict],
             engine: dict | None = None) -> dict:
    """What --json writes: the provenance, the metrics and every prediction."""
    with open(archive_path, "rb") as fh:
        sha = hashlib.sha256(fh.read()).hexdigest()
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "archive": archive_path,
            "archive_sha256": sha, "data": data, "max_new": max_new, "examples": len(predictions),
            "engine": engine, "metrics": rows, "predictions": predictions}


def write_json(path: str, doc: dict) -> None:
    write_atomic(path, (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))


def _archive(path: str):
    from generator.archive import reader
    data = reader.load(path)
    try:
        return reader.read(data)
    except CactError as exc:      # which archive: eval names two files
        raise CactError(f"{path}: {exc}") from None


def run_reference(archive: str, data: str, modes: list[str], grammars: list[str], max_new: int,
                  limit: int | None = None, json_out: str | None = None) -> int:
    """`python -m generator eval`: the reference on every example; prints the table."""
    refuse_output_is_input({"--json": json_out}, {"--archive": archive, "--data": data})
    examples = load_examples(data, limit)
    a = _archive(archive)
    rows, predictions = evaluate(examples, [Reference(a, m) for m in modes], grammars, max_new)
    print(f"{len(examples)} examples of {data}, max_new {max_new}, archive {archive}")
    print(render_table(rows))
    if json_out:
        write_json(json_out, document(archive, data, max_new, rows, predictions))
        print(f"wrote {json_out}")
    return 0


def run_board(archive: str, data: str, board_name: str, engine: str, image: str | None = None,
              builtin_tools: str | None = None, max_new: int = DEFAULT_MAX_NEW, limit: int | None = None,
              json_out: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> int:
    """`scons board=X eval=1`: the built engine and the a8 reference on every example; prints
    the table and how many runs differ; 1 if any does, else 0."""
    from generator.build import boards
    refuse_output_is_input({"--json": json_out}, {"--archive": archive, "--data": data, "--engine": engine,
                                                 "--image": image, "--builtin-tools": builtin_tools})
    board = boards.load(board_name)
    examples = load_examples(data, limit)
    builtin = not reads_tools(board)
    if builtin:
        if builtin_tools is None:
            raise CactError(f"{why_no_tools(board)}, so it cannot read each example's tools: build it with "
                            "tools=FILE to evaluate the examples whose tools are that list")
        builtin_text = Path(builtin_tools).read_text(encoding="utf-8")
        kept = [ex for ex in examples if same_tools(ex, builtin_text)]
        if not kept:
            raise CactError(f"{why_no_tools(board)} and none of the {len(examples)} examples uses the "
                            f"built-in tools ({builtin_tools})")
        print(f"{why_no_tools(board)}: evaluating the {len(kept)} of {len(examples)} examples whose tools "
              f"are the built-in list ({builtin_tools}); {len(examples) - len(kept)} skipped")
        examples = kept
    a = _archive(archive)
    ref = Reference(a, "a8")
    grammars = list(GRAMMARS)
    with tempfile.TemporaryDirectory(prefix="needle-eval-") as work:
        eng = Engine(board, os.path.abspath(engine), image and os.path.abspath(image), work, timeout,
                     ref, builtin)
        rows, predictions = evaluate(examples, [eng, ref], grammars, max_new)
    diff = mismatches(predictions, eng.label, ref.label, grammars)
    print(f"{len(examples)} examples of {data}, max_new {max_new}, board {board_name} "
          f"(engine) and the a8 reference")
    print(render_table(rows))
    print(f"engine against the a8 reference: {diff['calls'] + diff['text']} of {diff['runs']} runs differ "
          f"({diff['calls']} in the calls, {diff['text']} in the text only)"
          + (f"; {diff['engine_failed']} runs failed on the engine only (lines above)" if diff["engine_failed"] else ""))
    for m in diff["examples"][:10]:
        print(f"  line {m['line']}, grammar {m['grammar']}: the {m['what']} differ")
    if json_out:
        engine_doc = {"board": board_name, "reference": ref.label, "mismatches": diff}
        write_json(json_out, document(archive, data, max_new, rows, predictions, engine_doc))
        print(f"wrote {json_out}")
    return 1 if diff["calls"] or diff["text"] else 0
