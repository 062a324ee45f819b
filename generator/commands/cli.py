"""Command line: `python -m generator {inspect,synth,golden,check,rung,emit,bench,call,eval} ...`.

inspect and synth read and write archives, golden regenerates the reference goldens (or makes
goldens for the user's own archive) and check runs a built engine on them, rung
cuts a shallower Needle 3 archive, emit generates a board's C engine the way SCons does,
bench times a built engine against the NumPy reference (it lives in bench/host.py: the
entry point, generator/__main__.py, registers it, because generator never imports bench), call runs one constrained
tool-calling turn on the reference (the twin of `needle --tools F --query Q`), eval scores the
reference's calls on held-out examples (task accuracy), and with --engine a built engine's beside
them (what `scons eval=1` runs).  This is the one front end of generator.commands: its other
modules are libraries.  Every failure a user can cause
ends in one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence

from generator import __version__
from generator.errors import CactError
from generator.files import refuse_output_is_input, write_atomic


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        # prog: the command as run ("python -m generator" or "needle-fw"), then the subcommand
        raise CactError(f"{message} (see {self.prog} --help)")


def cmd_inspect(args) -> int:
    from generator.commands import inspect
    from generator.archive import reader
    a = reader.read(args.archive)
    if args.json:
        print(json.dumps(inspect.summary(a), indent=2))
    else:
        print(inspect.render(a, tensors=not args.brief))
    return 0


def cmd_synth(args) -> int:
    from generator.commands import synth
    if (args.preset is None) == (args.like is None):
        raise CactError("synth needs exactly one of --preset NAME or --like ARCHIVE")
    refuse_output_is_input({"-o": args.output}, {"--like": args.like})
    if args.like:
        data = synth.synthesize_like(args.like, args.seed)
    else:
        data = synth.synthesize(args.preset, args.seed, bitmap=args.bits, kv_window=args.kv_window,
                                kv_bits=args.kv_bits, heads=not args.no_heads)
    from generator.archive import reader
    reader.read(data)  # never emit an archive our own reader would refuse
    write_atomic(args.output, data)
    print(f"wrote {args.output}: {len(data):,} bytes")
    return 0


class _Once(argparse.Action):
    """An option that may be given once: a second one is refused in one line."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} given more than once: pass it once")
        setattr(namespace, self.dest, values)


class _Case(argparse.Action):
    """--prompt/--tokens/--query: one golden case each, kept in command-line order."""

    def __call__(self, parser, namespace, values, option_string=None):
        cases = list(getattr(namespace, "cases", None) or [])
        cases.append((option_string.lstrip("-"), values))
        namespace.cases = cases


def cmd_golden(args) -> int:
    from generator.commands import golden
    if args.output is None:
        raise CactError("golden needs -o DIR (see python -m generator golden --help)")
    if args.archive is None:
        given = [f"--{k}" for k, _ in args.cases] + [o for o, v in (("--tools", args.tools),
                 ("--system", args.system), ("--max-new", args.max_new)) if v is not None]
        if given:
            raise CactError(f"{given[0]} goes with --archive ARCHIVE (the user-archive mode)")
        golden.write(args.names, args.output)
        return 0
    if args.names:
        raise CactError(f"recipe names ({' '.join(args.names)}) and --archive are two modes: "
                        "give one or the other")
    max_new = golden.DEFAULT_MAX_NEW if args.max_new is None else args.max_new
    golden.write_user(args.archive, args.cases, args.output, tools=args.tools, system=args.system,
                      max_new=max_new)
    return 0


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"want a positive integer, not {text!r}")
    return int(text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"want a positive number of seconds, not {text!r}")
    return value


def cmd_check(args) -> int:
    from generator.commands import golden
    try:
        tol = float(args.tol)
    except ValueError:
        raise CactError(f"check_tol={args.tol}: want a non-negative number") from None
    return golden.check(args.directory, args.archive, args.board, args.engine, args.image, tol)


def cmd_rung(args) -> int:
    from generator.commands import rung
    refuse_output_is_input({"-o": args.output}, {"archive": args.archive})
    data = rung.cut(args.archive, args.layers)
    write_atomic(args.output, data)
    print(f"wrote {args.output}: {args.layers}-layer rung, {len(data):,} bytes")
    return 0


def cmd_emit(args) -> int:
    from generator.build import boards
    from generator.codegen import pipeline
    board = boards.load(args.board)
    problem = boards.kernels_refusal(board, args.kernels, "--kernels ") if args.kernels else None
    if problem:
        raise CactError(problem)
    engine = boards.generate_engine(board, args.archive, args.output,
                                    incbin_path=os.path.abspath(args.archive), kv_window=args.kv_window,
                                    kernels=args.kernels, head_tokens=args.head_tokens)
    for w in engine.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(f"wrote {len(pipeline.outputs(board))} files to {args.output}")
    return 0


def cmd_call(args) -> int:
    from pathlib import Path
    from generator.archive import reader
    from generator.archive.tokenizer import Tokenizer
    from generator.tools.prompt import render_prompt_ids, system_facts
    from generator.model import reference
    from generator.tools.decode import run_turn
    from generator.tools.schema import compile_tools, set_query
    try:
        text = Path(args.tools).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CactError(f"cannot read {args.tools}: {getattr(exc, 'strerror', None) or exc}") from None
    g = compile_tools(text, force_call=args.force_call)
    set_query(g, args.query, args.span_strings)
    a = reader.read(args.archive)
    tok = Tokenizer.from_blob(a.tokenizer_blob())
    model = reference(a, "a8")
    if args.date == "now":
        import datetime
        args.date = datetime.datetime.now().strftime("%Y-%m-%d %a %H:%M")
    system = system_facts(args.system, args.date)
    env = run_turn(model, tok, g, render_prompt_ids(tok, text, args.query, system), args.max_new)
    env.pop("calls_json")
    env["confidence"] = float(f"{env['confidence']:.9f}")
    print(json.dumps(env, ensure_ascii=False, separators=(",", ":")))
    return 0


def cmd_eval(args) -> int:
    from generator.commands import evaluate
    if (args.board is None) != (args.engine is None):
        raise CactError("eval: --board and --engine go together (a built engine on its board), "
                        "or give neither (the reference alone)")
    engine_only = {"--image": args.image, "--builtin-tools": args.builtin_tools, "--timeout": args.timeout}
    if args.engine is None:
        given = [k for k, v in engine_only.items() if v is not None]
        if given:
            raise CactError(f"eval: {given[0]} goes with --engine BIN --board B")
    else:
        given = [k for k, v in (("--mode", args.mode), ("--grammar", args.grammar)) if v is not None]
        if given:
            raise CactError(f"eval: {given[0]} is for the reference alone: with --engine the engine "
                            "and the a8 reference run every grammar mode (drop it)")
        return evaluate.run_board(args.archive, args.data, args.board, args.engine, args.image,
                                  args.builtin_tools, args.max_new, args.limit, args.json,
                                  evaluate.DEFAULT_TIMEOUT if args.timeout is None else args.timeout)
    args.mode = args.mode or "a8"
    args.grammar = args.grammar or "both"
    modes = ["float", "a8"] if args.mode == "both" else [args.mode]
    grammars = ["on", "off"] if args.grammar == "both" else ["on", "span"] if args.grammar == "on+span" \
        else [args.grammar]
    return evaluate.run_reference(args.archive, args.data, modes, grammars, args.max_new,
                                  args.limit, args.json)


def main(argv: Sequence[str] | None = None,
         commands: Sequence[Callable[[argparse._SubParsersAction], None]] = (),
         prog: str = "python -m generator") -> int:
    """Run one command.  `commands` add subcommands of packages generator must not import
    (each is called with the subparsers and calls `add_parser`, setting `fn`): the program's
    entry point, generator/__main__.py, passes bench's (host_tests/test_layers.py).  `prog` is
    the command as the user runs it: the installed console command passes "needle-fw"."""
    p = _Parser(prog=prog, description="needle-fw archive toolkit")
    p.add_argument("--version", action="version", version=f"needle-fw generator {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    s = sub.add_parser("inspect", help="validate an archive and describe it")
    s.add_argument("archive")
    s.add_argument("--json", action="store_true", help="machine-readable output (docs/inspect-json.md)")
    s.add_argument("--brief", action="store_true", help="omit the tensor table")
    s.set_defaults(fn=cmd_inspect)

    s = sub.add_parser("synth", help="write a synthetic archive with random, trained-looking weights")
    from generator.commands.synth import PRESETS
    s.add_argument("--preset", metavar="NAME", choices=list(PRESETS), help="one of " + ", ".join(PRESETS))
    s.add_argument("--like", metavar="ARCHIVE", help="same geometry, widths and tokenizer as ARCHIVE")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--bits", metavar="MAP", help="bit map, e.g. embedding=4,mhc=4,default=2")
    s.add_argument("--kv-window", type=int, help="override the header's kv_window")
    s.add_argument("--kv-bits", type=int, help="override the header's kv_bits (2, 3, 4 or 8)")
    s.add_argument("--no-heads", action="store_true", help="omit the probe heads")
    s.add_argument("-o", "--output", required=True)
    s.set_defaults(fn=cmd_synth)

    s = sub.add_parser("golden", help="regenerate the reference golden files (all recipes by default), "
                                      "or make goldens for your own archive (--archive)",
                       description="Recipe mode: golden [NAME ...] -o DIR regenerates the bundled goldens. "
                                   "User mode: golden --archive A [--prompt TEXT ...] [--tokens IDS ...] "
                                   "[--tools F --query Q ...] -o DIR writes DIR/cases.json and the a8 "
                                   "reference's logits for `scons archive=A check=DIR`.")
    s.add_argument("names", nargs="*", help="recipe names (generator/commands/golden.py RECIPES)")
    s.add_argument("-o", "--output", action=_Once, help="output directory, e.g. host_tests/golden")
    s.add_argument("--archive", action=_Once, help="your .cact archive (user mode)")
    s.add_argument("--prompt", action=_Case, metavar="TEXT", help="a prompt case (repeatable)")
    s.add_argument("--tokens", action=_Case, metavar="IDS", help="a teacher-forced case, e.g. 2,17,5 (repeatable)")
    s.add_argument("--query", action=_Case, metavar="TEXT", help="a tool-calling case with --tools (repeatable)")
    s.add_argument("--tools", action=_Once, metavar="FILE", help="tool list (JSON) the queries are rendered with")
    s.add_argument("--system", action=_Once, metavar="TEXT", help="system text of the tool prompts")
    s.add_argument("--max-new", action=_Once, type=_positive, metavar="N",
                   help="greedy tokens per prompt/query case (default 16)")
    s.set_defaults(fn=cmd_golden, cases=[])

    s = sub.add_parser("rung", help="cut a D-layer rung out of a Needle 3 archive (docs/spec/needle3-model.md §8)")
    s.add_argument("archive")
    s.add_argument("--layers", type=int, required=True, metavar="D", help="layers to keep, 2 <= D < L")
    s.add_argument("-o", "--output", required=True)
    s.set_defaults(fn=cmd_rung)

    s = sub.add_parser("emit", help="generate the C engine for an archive (SCons does this for you)")
    s.add_argument("archive")
    s.add_argument("-o", "--output", required=True, help="output directory")
    s.add_argument("--board", default="host", help="board file name (boards/NAME.toml)")
    s.add_argument("--kv-window", type=int, help="smaller KV window (changes numerics)")
    s.add_argument("--kernels", metavar="FAMILY", help="force a kernel family (default: the board's)")
    s.add_argument("--head-tokens", type=int, default=0, metavar="N",
                   help="tokens the probe heads can pool over (0: heads not built)")
    s.set_defaults(fn=cmd_emit)

    s = sub.add_parser("call", help="one constrained tool-calling turn on the a8 reference: the envelope "
                                    "`needle --tools F --query Q` prints (docs/grammar.md)")
    s.add_argument("--archive", required=True)
    s.add_argument("--tools", required=True, metavar="FILE")
    s.add_argument("--query", required=True, metavar="TEXT")
    s.add_argument("--system", metavar="TEXT")
    s.add_argument("--date", metavar="TEXT|now", help="the system facts' date fact (docs/prompt.md)")
    s.add_argument("--max-new", type=_positive, default=96, metavar="N")
    s.add_argument("--force-call", action="store_true", help="the answer is a call (at least one)")
    s.add_argument("--span-strings", action="store_true",
                   help="every free string argument is a span of the query (docs/grammar.md §2a)")
    s.set_defaults(fn=cmd_call)

    s = sub.add_parser("eval", help="task accuracy: the reference's calls on held-out examples, with the "
                                    "call grammar and without (docs/training.md, \"Task accuracy\")")
    s.add_argument("--archive", required=True)
    s.add_argument("--data", required=True, metavar="FILE",
                   help="JSON lines: {\"tools\": [...], \"query\": \"...\", \"calls\": [...]}")
    s.add_argument("--mode", choices=("float", "a8", "both"),
                   help="numerics of the reference (default a8, what every engine computes)")
    s.add_argument("--grammar", choices=("on", "off", "both", "span", "on+span"),
                   help="constrained decoding (on), plain greedy like needle --raw (off), or both (default); "
                        "span: on with every free string a span of the query (needle --span-strings); "
                        "on+span: on and span side by side")
    s.add_argument("--limit", type=_positive, metavar="N", help="only the first N examples")
    s.add_argument("--max-new", type=_positive, default=96, metavar="N", help="tokens per answer (default 96)")
    s.add_argument("--json", metavar="OUT", help="write the metrics and every prediction")
    s.add_argument("--board", help="with --engine: the engine's board (boards/NAME.toml), which says how "
                                   "to run it; the engine answers beside the a8 reference (scons eval=1)")
    s.add_argument("--engine", metavar="BIN", help="a built executable or ELF image for --board")
    s.add_argument("--image", help="the archive partition image, or the archive file (placement = file)")
    s.add_argument("--builtin-tools", metavar="FILE", help="the firmware's built-in tool list (tools=FILE)")
    from generator.commands.evaluate import DEFAULT_TIMEOUT
    s.add_argument("--timeout", type=_seconds, metavar="S",
                   help=f"seconds one engine run may take (default {DEFAULT_TIMEOUT})")
    s.set_defaults(fn=cmd_eval)

    s = sub.add_parser("check", help="run a built engine on a golden directory's cases and compare with the "
                                     "reference (scons check=DIR runs it; docs/archive.md)")
    s.add_argument("directory", help="a directory `golden --archive` wrote (cases.json)")
    s.add_argument("--archive", required=True, help="the archive the engine was built for")
    s.add_argument("--board", required=True, help="board name (boards/NAME.toml): how to run the engine")
    s.add_argument("--engine", required=True, help="the built executable or ELF image")
    s.add_argument("--image", help="the archive partition image (boards with placement = partition)")
    s.add_argument("--tol", default="0", help="per position: max |Δlogit| <= TOL * max |logit| (default 0)")
    s.set_defaults(fn=cmd_check)

    for add in commands:      # e.g. bench (bench/host.py), registered by generator/__main__.py
        add(sub)

    try:
        args = p.parse_args(argv)
        status = args.fn(args)
        sys.stdout.flush()        # a full disk or closed pipe shows here, not at exit
        return status
    except CactError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:   # e.g. `inspect --json | head -1`: the reader went away
        _silence_stdout()
        print("error: output closed before it was complete (broken pipe)", file=sys.stderr)
        return 2
    except OSError as exc:    # a file, or standard output (e.g. > /dev/full), could not be written
        if exc.filename:
            print(f"error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        else:
            _silence_stdout()
            print(f"error: cannot write standard output: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's exit flush does not fail again."""
    try:
        sys.stdout = open(os.devnull, "w")
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
