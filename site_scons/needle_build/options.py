"""The options of the repository's SConstruct (KEY=VALUE on the command line, or a settings
file): declared once (`variables`), read (`values`, for the tests: no build), and checked
before anything builds, the whole command line (`check`) and then each board (`check_board`).

Every refusal is `Refused` with one line, the cause and the fix; SConstruct prints it as
"scons: error: LINE" and exits 2 (board=all: the board is skipped and its reason is in the
table).  host_tests/test_scons_options.py checks each refusal without building."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from SCons.Variables import BoolVariable, EnumVariable, PathVariable, Variables

from generator.build import boards
from generator.errors import CactError

DEFAULT_BOARD = "rpi-zero"
DEMO_ARCHIVE = "demo/needle2-demo.cact"
# A per-project settings file (SCons' own Variables-file convention): custom.py at the top of
# the tree, or settings=FILE, is Python that assigns options (board = "host"); the command
# line wins over it.
SETTINGS_DEFAULT = "custom.py"


class Refused(Exception):
    """An option SConstruct refuses: one line naming the cause and the fix."""


def in_top(top: str, path: str) -> str:
    """An option's path as SCons reads it: relative paths from the top directory."""
    return os.path.normpath(os.path.join(top, path))


def file_in_the_way(top: str, path: str) -> str | None:
    """The file (if any) at `path` or above it that keeps SCons from making it a directory."""
    probe = in_top(top, path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return None
        probe = parent
    return None if os.path.isdir(probe) else probe


# ---- declared -------------------------------------------------------------------------------

def variables(arguments: dict, top: str) -> Variables:
    """Every option, read from the settings file (settings=FILE, or custom.py when there is one)
    and then from `arguments` (the command line), which wins."""
    settings_file = arguments.get("settings", "")
    if settings_file:
        settings_path = os.path.normpath(os.path.join(top, os.path.expanduser(settings_file)))
        if not os.path.isfile(settings_path):
            raise Refused(f"settings={settings_file} does not exist (pass a Python file of KEY = VALUE "
                          f"lines, like custom.py)")
    else:
        settings_path = os.path.join(top, SETTINGS_DEFAULT)
    found = Variables([settings_path] if os.path.isfile(settings_path) else None, arguments)
    for declare in (_declare_build, _declare_engine, _declare_outputs, _declare_after_build):
        declare(found)
    return found


def _declare_build(found: Variables) -> None:
    """What is built, where, how it says so."""
    found.Add(PathVariable("settings", "a settings file of KEY = VALUE lines (Python) read before the command "
                           "line, which wins (default: custom.py at the top of the tree, if there is one)", "",
                           PathVariable.PathAccept))
    found.Add(BoolVariable("verbose", "print every command line in full (default: one short line a step, "
                           "e.g. CC needle_model.c)", False))
    found.Add(EnumVariable("board", "target board (one file each in boards/), or all", DEFAULT_BOARD,
                           allowed_values=boards.names() + ["all"]))
    found.Add(PathVariable("archive", "the .cact archive (default: the bundled trained demo, "
                           "demo/needle2-demo.cact)", "", PathVariable.PathAccept))
    found.Add(PathVariable("build", "build directory (default: build/<board> for the bundled demo archive, "
                           "build/<board>-<archive name> for another)", "", PathVariable.PathAccept))
    found.Add(PathVariable("cache", "SCons build cache shared by build directories, checkouts and CI jobs "
                           "(CacheDir; created if missing)", "", PathVariable.PathAccept))
    found.Add(EnumVariable("cc", "compiler of the host board", "gcc", allowed_values=("gcc", "clang")))
    found.Add(BoolVariable("sanitize", "host build with AddressSanitizer + UBSan", False))
    found.Add(BoolVariable("debug", "add debug information (-g); optimisation and numerics flags unchanged", False))


def _declare_engine(found: Variables) -> None:
    """What the generated engine is."""
    found.Add(("kv_window", "smaller KV window than the archive's (changes numerics; warned)", ""))
    found.Add(EnumVariable("kernels", "kernel family: the board's own, or force one (e.g. scalar)", "board",
                           allowed_values=["board"] + boards.families()))
    found.Add(PathVariable("tools", "tool list (JSON) built into the firmware: `needle --query Q` calls them "
                           "(docs/grammar.md)", "", PathVariable.PathAccept))
    found.Add(("head_tokens", "tokens the probe heads can pool over (0: heads not built)", "0"))
    found.Add(("threads", "threads of the engine on a Linux board: its `cores` (board), or N; the host: this "
               "machine's processors; the logits do not depend on it (the CLI's --threads picks fewer)", "board"))
    found.Add(("thread_grain", "least weight bytes a thread takes when a product is split (default 32768; 0: "
               "split every product, for tests)", ""))
    found.Add(("prefill_chunk", "tokens a prompt feeds per pass over the weights (default: from the board's "
               "RAM, at most 32; 1: token by token); the logits do not depend on it", ""))
    found.Add(BoolVariable("snapshot", "with tools=FILE: prefill the tools' constant prompt prefix at build time "
                           "on the host engine and start each query from that state in flash (docs/snapshot.md)",
                           True))
    found.Add(EnumVariable("libc", "C library of a Linux board: the board's own, or musl (a static "
                           "executable built with zig cc, for boards with a [musl] table)", "board",
                           allowed_values=("board", "musl")))


def _declare_outputs(found: Variables) -> None:
    """What a build writes besides the firmware."""
    found.Add(EnumVariable("package", "also write a package of the firmware: ipk (OpenWrt package) or feed (an "
                           "opkg feed: the .ipk, Packages, Packages.gz) for router boards; deb (Debian package) "
                           "for the Raspberry Pi boards", "none", allowed_values=("none", "ipk", "feed", "deb")))
    found.Add(PathVariable("feed_key", "package=feed: a usign secret key (usign -G, signify -G -n) that signs "
                           "the feed's index (Packages.sig)", "", PathVariable.PathAccept))
    found.Add(BoolVariable("lib", "also write the engine as a library into <build>/sdk: libneedle.a, headers, "
                           "pkg-config and CMake package files (generator/build/sdk.py, examples/)", False))


def _declare_after_build(found: Variables) -> None:
    """What runs once the firmware is built and checked."""
    found.Add(BoolVariable("run", "run the demo prompt (or query=) after building (under the board's emulator)",
                           False))
    found.Add(("query", "run=1: the query the engine answers instead of the demo's", ""))
    found.Add(BoolVariable("gdb", "build, then start the board's emulator with its gdb stub (halted) and "
                           "print the gdb-multiarch command that attaches (one board)", False))
    found.Add(("gdb_port", "TCP port of the emulator's gdb stub", "1234"))
    found.Add(EnumVariable("flash", "build, then program the board's images through a debug probe (1), or "
                           "print the commands (dry); bare-metal boards with a [flash] table", "0",
                           allowed_values=("0", "1", "dry")))
    found.Add(EnumVariable("probe", "programmer for flash=: the board's own, pyocd, openocd or picotool (an "
                           "RP2350's UF2 over USB)", "board", allowed_values=("board", "pyocd", "openocd", "picotool")))
    found.Add(BoolVariable("uf2", "require a UF2 image (needle.uf2: boards whose boot ROM takes one, the RP2350, "
                           "always write it; any other board is refused)", False))
    found.Add(PathVariable("sign", "sign the firmware as an MCUboot image with this private key (PEM; boards "
                           "with [slots]): needle-signed-0x<primary slot>.bin (generator/build/mcuboot.py)", "",
                           PathVariable.PathAccept))
    found.Add(BoolVariable("bench", "benchmark the engine against the NumPy reference (Linux boards)", False))
    found.Add(("bench_tokens", "tokens of prefill and of decode in the benchmark", "32"))
    found.Add(PathVariable("check", "after building, run the engine on the cases of this directory (made by "
                           "python -m generator golden --archive ... -o DIR) and compare with the reference",
                           "", PathVariable.PathAccept))
    found.Add(("check_tol", "check= tolerance per position: max |dlogit| <= check_tol * max |logit| "
               "(default 0: bit-identical, the engine's contract)", "0"))
    found.Add(BoolVariable("eval", "after building, run the engine (under the board's emulator) on every example "
                           "of eval_data= with the call grammar and without (--raw), print the task-accuracy table "
                           "of python -m generator eval and compare each answer with the a8 reference's; writes "
                           "<build>/eval.json (docs/training.md, \"Task accuracy\")", False))
    found.Add(PathVariable("eval_data", "eval=1: held-out examples, JSON lines (default demo/eval/heldout.jsonl)",
                           "", PathVariable.PathAccept))
    found.Add(("eval_limit", "eval=1: only the first N examples (default: all)", ""))
    found.Add(("eval_max_new", "eval=1: tokens per answer (default 96, as python -m generator eval --max-new)", ""))


def bad_value(exc: Exception) -> Refused:
    """SCons' refusal of a bad value for a known option (an enum, a bool), as one line."""
    return Refused(f"{str(exc).splitlines()[0]} (see scons -h)")


def refuse_unknown(found: Variables) -> None:
    unknown = found.UnknownVariables()
    if unknown:
        raise Refused(f"unknown option(s) {', '.join(sorted(unknown))} (see scons -h)")


def values(arguments: dict, top: str) -> dict:
    """The options `arguments` gives (with the settings file), as SConstruct reads them, or
    Refused: what the tests check the refusals of the command line with, building nothing."""
    import SCons.Environment
    import SCons.Errors
    found = variables(arguments, top)
    try:
        env = SCons.Environment.Environment(tools=[], variables=found)
    except SCons.Errors.UserError as exc:
        raise bad_value(exc) from None
    refuse_unknown(found)
    return {option.key: env[option.key] for option in found.options}


# ---- the whole command line -----------------------------------------------------------------

@dataclass
class Checked:
    """What the checks of the command line found, for the build: the archive (a path as SCons
    reads it), the build directories' suffix for another archive than the demo, the built-in
    tools' count and file, check=DIR's directory and tolerance, eval=1's data file and examples."""
    archive: str
    build_suffix: str = ""
    builtin_tools: int = 0
    tools_path: str | None = None
    check_dir: str | None = None
    check_tol: float | None = None
    eval_data: str | None = None
    eval_examples: list | None = None


def check(opts, top: str) -> Checked:
    """Every check of the command line that no board is needed for, in the order a user meets
    them; Refused at the first that fails."""
    _check_combinations(opts)
    _check_counts(opts)
    _check_directories(opts, top)
    found = _check_archive(opts, top)
    found.builtin_tools = _check_tools(opts, top)
    found.tools_path = in_top(top, opts["tools"]) if opts["tools"] else None
    found.check_dir, found.check_tol = _check_golden(opts, top)
    found.eval_data, found.eval_examples = _check_evaluation(opts, top)
    return found


def _check_combinations(opts) -> None:
    if opts["query"] and not (opts["run"] or opts["gdb"]):
        raise Refused("query= goes with run=1 (or gdb=1): the query the engine answers")
    if opts["gdb"] and opts["board"] == "all":
        raise Refused("gdb=1 debugs one board: pass board=NAME")
    if opts["flash"] != "0" and opts["board"] == "all":
        raise Refused(f"flash={opts['flash']} programs one board: pass board=NAME")
    if opts["probe"] != "board" and opts["flash"] == "0":
        raise Refused(f"probe={opts['probe']} goes with flash=1 or flash=dry")


def _check_counts(opts) -> None:
    for key, minimum in (("kv_window", 1), ("bench_tokens", 1), ("head_tokens", 0), ("gdb_port", 1),
                         ("threads", 1), ("thread_grain", 0), ("prefill_chunk", 1)):
        value = str(opts[key])
        if (key in ("kv_window", "thread_grain", "prefill_chunk") and value == "") or (key == "threads" and value == "board"):
            continue                                   # not given: the archive's window, the board's threads
        try:
            boards.count_option(key, value, minimum)      # the check `generator emit` makes too
        except CactError as exc:
            raise Refused(str(exc)) from None


def _check_directories(opts, top: str) -> None:
    if opts["build"]:
        blocker = file_in_the_way(top, opts["build"])
        if blocker:
            raise Refused(f"build={opts['build']}: {blocker} is a file, not a directory (pass a directory for "
                          f"the build outputs, e.g. build=build/mine)")
    if opts["cache"]:
        blocker = file_in_the_way(top, opts["cache"])
        if blocker:
            raise Refused(f"cache={opts['cache']}: {blocker} is a file, not a directory (pass a directory for "
                          f"the build cache, e.g. cache=~/.cache/needle-fw)")


def _check_archive(opts, top: str) -> Checked:
    """The archive, and the suffix of its build directories: build/<board> is the demo's;
    another archive builds into build/<board>-<its name>, so that `scons board=host
    archive=my.cact` does not replace the demo engine in build/host."""
    if not opts["archive"]:
        # the bundled demo: a tiny Needle 2 trained on the synthetic tool-calling task
        # (demo/README.md: recipe, hashes, accuracy); committed, never retrained by a build
        return Checked(archive=f"#{DEMO_ARCHIVE}")
    path = in_top(top, opts["archive"])
    if os.path.isdir(path):
        raise Refused(f"archive={opts['archive']} is a directory (pass the path of a .cact file, e.g. "
                      f"archive={os.path.join(opts['archive'], 'model.cact')})")
    if not os.path.isfile(path):
        raise Refused(f"archive={opts['archive']} does not exist (pass the path of a .cact file)")
    demo = path == in_top(top, DEMO_ARCHIVE)
    return Checked(archive=opts["archive"],
                   build_suffix="" if demo else "-" + os.path.splitext(os.path.basename(path))[0])


def _check_tools(opts, top: str) -> int:
    """tools=FILE: the built-in tool list, validated before anything builds; its tools' count."""
    if not opts["tools"]:
        return 0
    from generator.tools.schema import compile_tools
    name, path = opts["tools"], in_top(top, opts["tools"])
    if os.path.isdir(path):
        raise Refused(f"tools={name} is a directory (pass a JSON tool list, e.g. tools=demo/tools.json)")
    if os.path.exists(path) and not os.path.isfile(path):
        raise Refused(f"tools={name} is not a regular file (pass a JSON tool list, e.g. tools=demo/tools.json)")
    if not os.path.isfile(path):
        raise Refused(f"tools={name} does not exist (pass a JSON tool list, e.g. tools=demo/tools.json)")
    try:
        with open(path, encoding="utf-8") as fh:
            count = len(compile_tools(fh.read()).tool_names)
    except UnicodeDecodeError:
        raise Refused(f"tools={name} is not UTF-8 text (pass a JSON tool list)") from None
    except CactError as exc:
        raise Refused(f"tools={name}: {exc}") from None
    if not count:     # an engine that answers [] to every query is no one's intent
        raise Refused(f"tools={name} is an empty tool list: a built-in list needs at least one tool "
                      f"(drop tools= to pass --tools FILE at run time)")
    return count


def _check_golden(opts, top: str) -> tuple[str | None, float | None]:
    """check=DIR: the user's goldens (docs/archive.md, "Regression-test your own archive")."""
    if not opts["check"]:
        if opts["check_tol"] != "0":
            raise Refused(f"check_tol={opts['check_tol']} goes with check=DIR")
        return None, None
    from generator.commands import golden as user_golden
    try:
        tol = float(opts["check_tol"])
    except ValueError:
        tol = -1.0
    if not (math.isfinite(tol) and tol >= 0):
        raise Refused(f"check_tol={opts['check_tol']} must be a non-negative number (0: bit-identical)")
    if opts["kv_window"] != "":
        raise Refused(f"check= compares with the reference at the archive's own KV window: drop "
                      f"kv_window={opts['kv_window']}")
    check_dir = in_top(top, opts["check"])
    try:
        cases = user_golden.load_cases(check_dir)
        if opts["archive"]:     # the demo archive is checked once built (generator/commands/golden.py)
            mismatch = user_golden.archive_mismatch(cases, opts["check"], opts["archive"])
            if mismatch:
                raise CactError(mismatch)
    except CactError as exc:
        raise Refused(f"check={opts['check']}: {exc}") from None
    return check_dir, tol


def _check_evaluation(opts, top: str) -> tuple[str | None, list | None]:
    """eval=1: task accuracy on held-out examples (docs/training.md, "Task accuracy")."""
    if not opts["eval"]:
        for key in ("eval_data", "eval_limit", "eval_max_new"):
            if opts[key]:
                raise Refused(f"{key}={opts[key]} goes with eval=1")
        return None, None
    from generator.commands import evaluate
    if opts["board"] == "all":
        raise Refused("eval=1 evaluates one board: pass board=NAME")
    if opts["kv_window"] != "":
        raise Refused(f"eval=1 compares with the reference at the archive's own KV window: drop "
                      f"kv_window={opts['kv_window']}")
    for key in ("eval_limit", "eval_max_new"):
        if opts[key] != "" and (not opts[key].isdigit() or int(opts[key]) < 1):
            raise Refused(f"{key}={opts[key]} must be a positive integer")
    eval_data = opts["eval_data"] or evaluate.DEFAULT_DATA
    if not os.path.isfile(in_top(top, eval_data)):
        if opts["eval_data"]:
            raise Refused(f"eval_data={eval_data} does not exist (pass a JSON-lines file of held-out examples)")
        raise Refused(f"eval=1 reads {eval_data} unless eval_data=FILE says otherwise, and it is missing (the "
                      "demo's held-out set: demo/eval/README.md gives the command that writes it): pass "
                      "eval_data=FILE, e.g. eval_data=host_tests/data/eval_sample.jsonl")
    try:
        examples = evaluate.load_examples(in_top(top, eval_data), int(opts["eval_limit"] or 0) or None)
    except CactError as exc:
        raise Refused(f"eval=1: {exc}") from None
    if int(opts["head_tokens"]) and any(len(ex.tools) > 5 for ex in examples):
        raise Refused("eval=1: with head_tokens=N the engine retrieves five tools of a longer list, which the "
                      "evaluation's reference does not: build with head_tokens=0, or use lists of five tools "
                      "or fewer")
    return eval_data, examples


# ---- each board ---------------------------------------------------------------------------------

@dataclass
class BoardChoice:
    """A board as the options make it: its file (libc=musl: its musl variant), its kernel
    family and its engine's threads."""
    board: dict
    family: str
    threads: int


def check_board(opts, checked: Checked, board: dict) -> BoardChoice:
    """Every check of the options against one board, before any of its targets exists; Refused
    (or CactError, for a package the board cannot have) at the first that fails."""
    if opts["libc"] == "musl":
        board = boards.with_musl(board)
    _check_programming(opts, board)
    family = boards.kernel_family(board) if opts["kernels"] == "board" else opts["kernels"]
    _check_machine(opts, board, family)
    threads = boards.default_threads(board) if opts["threads"] == "board" else int(opts["threads"])
    if threads > 1 and board["os"] == "none":
        raise Refused(f"threads={threads}: board {board['name']} is bare metal and its engine runs on one core "
                      f"(drop threads=)")
    if opts["sanitize"] and board["name"] != "host":
        raise Refused("sanitize=1 is for board=host")
    _check_grammar(opts, checked, board)
    _check_package(opts, board)
    if opts["run"] or opts["gdb"]:
        run_arguments(board, opts["query"])
    if opts["eval"]:
        _check_evaluation_board(opts, checked, board)
    return BoardChoice(board, family, threads)


def _check_programming(opts, board: dict) -> None:
    """flash=, uf2=1 and sign=KEY: refused before building (a Linux board, no probe, a tool
    missing, no UF2 boot ROM, no [slots], a bad key)."""
    problem = None
    if opts["flash"] != "0":
        from generator.build import flash as flasher
        problem = flasher.refusal(board, opts["probe"], dry=opts["flash"] == "dry")
    if not problem and opts["uf2"]:      # needle.uf2 (generator/build/uf2.py): an RP2350's boot ROM only
        from generator.build import uf2
        problem = uf2.refusal(board)
    if not problem and opts["sign"]:     # an MCUboot image (generator/build/mcuboot.py)
        from generator.build import mcuboot
        problem = mcuboot.refusal(board, opts["sign"])
    if problem:
        raise Refused(problem)


def runs_engine(opts) -> bool:
    """Whether the build runs the engine here (run=1, bench=1, check=DIR, eval=1)."""
    return bool(opts["run"] or opts["bench"] or opts["check"] or opts["eval"])


def _check_machine(opts, board: dict, family: str) -> None:
    """The kernel family's architecture, the board's tools, and an x86 family this CPU lacks
    for an engine that runs here."""
    problem = boards.kernels_refusal(board, family) or boards.missing_tools(board, opts["cc"], run=runs_engine(opts))
    if problem:
        raise Refused(problem)
    if (family in boards.X86_FAMILIES and family not in boards.native_x86_families()
            and not board["emulator"]["command"] and runs_engine(opts)):
        lacks = " ".join(f for f in boards.X86_FAMILIES[family] if f not in boards.cpu_flags())
        raise Refused(f"kernels={family}: this machine's CPU lacks {lacks or 'x86-64'} "
                      f"(/proc/cpuinfo), so the engine cannot run here: drop kernels= (this host's own family is "
                      f"{boards.kernel_family(board)}) or drop run=/bench=/check=/eval=")


def retrieves(opts, checked: Checked) -> bool:
    """With more than five built-in tools and the embedding head, each query renders the five
    retrieval picks (docs/grammar.md §10): no tools block is constant, so no snapshot."""
    return bool(opts["tools"]) and checked.builtin_tools > 5 and int(opts["head_tokens"]) > 0


def _check_grammar(opts, checked: Checked, board: dict) -> None:
    from generator.tools import tables
    if tables.runtime(board):
        return
    name = board["name"]          # [grammar] runtime = false: the built-in list only
    if not opts["tools"]:
        raise Refused(f"board {name} calls only built-in tools ([grammar] runtime = false in boards/{name}.toml): "
                      "pass tools=FILE")
    if retrieves(opts, checked):
        raise Refused(f"board {name} compiles no tool list at run time ([grammar] runtime = false), but retrieval "
                      f"renders five of the {checked.builtin_tools} built-in tools per query and compiles those: "
                      "build with head_tokens=0, or five tools or fewer, or set runtime = true")


def _check_package(opts, board: dict) -> None:
    """package= and feed_key=: a board of the package's kind (CactError, as the package modules say)."""
    if opts["feed_key"] and opts["package"] != "feed":
        raise CactError("feed_key= signs an opkg feed: add package=feed (or drop feed_key=)")
    if opts["package"] in ("ipk", "feed") and "package" not in board:
        raise CactError(f"board {board['name']} is not an OpenWrt board (no [package] openwrt_arch): "
                        f"package={opts['package']} is for the router-* boards (package=deb: the Raspberry Pi boards)")
    if opts["package"] == "deb":
        from generator.build import deb
        deb.deb_name(board)         # a board without [deb] is refused here


DEMO_ARGS = ["--tools", "demo/tools.json", "--query", "what's the weather like in Lagos right now?",
             "--max-new", "64"]


def run_arguments(board: dict, query: str) -> list[str]:
    """The engine's arguments for run=1 and gdb=1: the demo's, with query= its query (one
    argument, whatever it holds); none on a UART board, which reads its line on the console."""
    if not boards.has_host_files(board):
        if query:
            raise Refused(f"query= is for a board with host files: board {board['name']} reads its command line on "
                          f"the UART console (run=1 starts it: type the query there)")
        return []
    args = list(DEMO_ARGS)
    if query:
        args[args.index("--query") + 1] = query
    return args


def _check_evaluation_board(opts, checked: Checked, board: dict) -> None:
    """eval=1 on a board that reads no tool file (a UART console, or [grammar] runtime =
    false): it answers with its built-in list (tools=FILE), so only the examples whose tools
    are that list can be evaluated there."""
    from generator.commands import evaluate
    if evaluate.reads_tools(board):
        return
    why = evaluate.why_no_tools(board)
    if not opts["tools"]:
        raise Refused(f"eval=1: {why}, so it cannot read each example's tools: build it with tools=FILE to "
                      "evaluate the examples whose tools are that list, or evaluate a board that reads files "
                      "(the same core on the semihosting console, e.g. watch-m4 for watch-m4-uart)")
    with open(checked.tools_path, encoding="utf-8") as fh:
        builtin = fh.read()
    if not any(evaluate.same_tools(ex, builtin) for ex in checked.eval_examples):
        raise Refused(f"eval=1: {why} and none of the {len(checked.eval_examples)} examples of {checked.eval_data} "
                      f"uses the built-in tools ({opts['tools']}): it has no example it can answer")
