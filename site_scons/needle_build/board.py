"""One board's build as an environment method, `env.NeedleBoard(board, build_dir)`: the options
checked against the board (site_scons/needle_build/options.py), the engine generated, the
firmware compiled and linked, its images and signature, the post-link check and
compile_commands.json, then what the options ask for after the build (run, gdb, flash, check,
eval, bench, package, lib: site_scons/needle_build/steps.py).

The environment carries the command line's options (env["board"], env["run"], ...) and what
their checks found (env["NEEDLE_OPTIONS"], a options.Checked).  A build of another
configuration (the scalar twin of bench=1, the host engine that writes a prefix snapshot) is
the same method on `env.Clone(...)` with those options changed."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field

from SCons.Script import Action, Copy

from generator.build import boards, flags, sdk
from generator.build.runner import BoardRunner
# the hand-written C, listed once: the Linux and bare-metal extras, the include path, and the
# host program that compiles built-in tools into the grammar's tables (generator/tools/tables.py)
from generator.build.sources import BAREMETAL_SOURCES, GRAMMAR_TABLES_SOURCES, INCLUDE_DIRS, LINUX_SOURCES

from . import options

# what gen/needle_tools.[ch] are made from, beside the tools file (tools=FILE)
TOOLS_GENERATOR = ["templates/needle_tools.c.j2", "templates/needle_tools.h.j2", "generator/tools/schema.py",
                   "generator/tools/bindings.py", "generator/tools/tables.py", "generator/tools/retrieval.py",
                   "generator/tools/regex.py", "generator/tools/prompt.py", "generator/codegen/render.py"]


def act(env, command: str, short: str):
    """An Action running the shell line `command` that prints `short` (verbose=1: `command`)."""
    return Action(command, None if env["verbose"] else short)


@dataclass
class Built:
    """One board's build, as the steps after it (steps.py) read it."""
    board: dict
    build: object                  # the build directory (a Dir)
    alias: str                     # the target a build of this board is part of
    family: str
    archive: object                # the archive (a File)
    gen_dir: object = None
    obj_dir: object = None
    cenv: object = None            # the environment that compiled and linked it
    cflags: list = field(default_factory=list)
    linkflags: list = field(default_factory=list)
    sources: list = field(default_factory=list)
    objects: list = field(default_factory=list)
    object_of: dict = field(default_factory=dict)
    prog: object = None            # the linked image (a File)
    outputs: list = field(default_factory=list)     # the link's outputs, which the check follows
    image: object = None           # the archive a run gives the engine: a partition image, or the file itself
    flashable: object = None       # images.json (bare metal)
    check: object = None           # memory.txt: the post-link check
    compdb: object = None

    @property
    def name(self) -> str:
        return self.board["name"]

    @property
    def bare(self) -> bool:
        return self.board["os"] == "none"


def build_board(env, board: dict, build, kv_budget: int | None = None, alias: str | None = None) -> Built:
    """Generate, compile, link and check the engine for one board into `build`, then add what
    the options ask for after it (kv_budget: generate with another board's KV budget, for a
    prefix-snapshot host engine; alias: the board whose target this build is part of, default
    this one).  options.Refused (or CactError) when the options do not fit the board."""
    checked = env["NEEDLE_OPTIONS"]
    choice = options.check_board(env, checked, board)
    built = Built(choice.board, build, alias or board["name"], choice.family, env.File(checked.archive))
    benv = env.Clone(NEEDLE_BOARD=built.name, NEEDLE_KV_WINDOW=env["kv_window"], NEEDLE_KERNELS=built.family,
                     NEEDLE_HEAD_TOKENS=int(env["head_tokens"]), NEEDLE_THREADS=choice.threads,
                     NEEDLE_THREAD_GRAIN=env["thread_grain"],
                     NEEDLE_PREFILL_CHUNK=env["prefill_chunk"], NEEDLE_KV_BUDGET=kv_budget or "")
    built.gen_dir = build.Dir("gen")
    engine = benv.NeedleEngine(built.gen_dir, built.archive)
    _compile_environment(benv, built, choice.threads)
    built.sources = [f for f in engine if f.name.endswith((".c", ".S"))] + [built.obj_dir.File(f) for f in
                                                                          _firmware(built)]
    tool_files = _tools(env, built)
    prefix = _prefix_snapshot(env, built)
    _compile(built, engine, tool_files, prefix)
    _link(env, built)
    _check(env, built, tool_files)
    env.NeedleAfterBuild(built)
    return built


def _compile_environment(benv, built: Built, threads: int) -> None:
    """The compiler, its flags and the link flags of the board (cenv), and obj/ as the
    firmware's variant directory."""
    env, board, build, gen_dir = benv, built.board, built.build, built.gen_dir
    cc = boards.compiler(board, env["cc"])
    cflags = flags.compile_flags(board, built.family) + [f"-ffile-prefix-map={env.Dir('#').abspath}=."]
    if boards.is_gcc(board, env["cc"]):
        cflags += flags.STACK_USAGE
    linkflags = flags.link_flags(board, gen_dir.File("link.ld").path if built.bare else None,
                                 build.File("needle.map").path if built.bare else None)
    if threads > 1:
        linkflags.append("-pthread")
    if built.bare:
        cflags += boards.hal_defines(board)
    if env["debug"]:
        cflags += flags.DEBUG
    if env["sanitize"]:
        cflags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g"]
        linkflags += ["-fsanitize=address,undefined"]
    cenv = benv.Clone(CC=cc, CCFLAGS=cflags, ASFLAGS=cflags, LINKFLAGS=linkflags, LIBS=["m"],
                      CPPPATH=[gen_dir] + [f"#firmware/{d}" for d in INCLUDE_DIRS],
                      AS=cc, LINK=cc)
    if board["toolchain"] == "zig" and not env["verbose"] and not zig_cache_used():
        # zig cc builds the C library of a target at its first link: minutes without a word
        cenv["LINKCOMSTR"] = f"LINK $TARGET (zig's first link for {board['zig_target']} builds its C library: minutes)"
    built.obj_dir = build.Dir("obj")
    cenv.VariantDir(built.obj_dir, "#firmware", duplicate=False)
    built.cenv, built.cflags, built.linkflags = cenv, cflags, linkflags


def _firmware(built: Built) -> list[str]:
    """The hand-written C of the firmware (paths under firmware/)."""
    firmware = list(sdk.CLI_SOURCES) + boards.runtime_sources(built.board)
    if built.bare:        # --bench N: SysTick counts (firmware/baremetal/bench_mcu.c)
        # start-up, formatting and the console the board file chooses (console = "semihost" |
        # "uart"): the board support libneedle_board.a holds too (generator/build/sdk.py)
        firmware += sdk.board_support_sources(built.board) + BAREMETAL_SOURCES
    else:           # --bench N: wall clock, or instructions under qemu-user (firmware/cli/bench.c)
        firmware += LINUX_SOURCES
    return firmware


def zig_cache_used() -> bool:
    """Whether zig cc has a global cache here (it keeps the C libraries it built in it)."""
    where = (os.environ.get("ZIG_GLOBAL_CACHE_DIR")
             or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "zig"))
    return os.path.isdir(where) and bool(os.listdir(where))


def _tools(env, built: Built) -> list:
    """tools=FILE: gen/needle_tools.[ch] (docs/grammar.md, "Built-in tools"), compiled into the
    firmware; [] without."""
    if not env["tools"]:
        return []
    from generator.tools import bindings
    cenv, gen_dir = built.cenv, built.gen_dir
    generator = TOOLS_GENERATOR + list(bindings.HEADERS)   # the names the bindings' C names steer clear of
    tool_files = cenv.NeedleTools([gen_dir.File("needle_tools.c"), gen_dir.File("needle_tools.h")],
                                  [env.File(env["tools"]), grammar_tables_program(env, built.board, built.build),
                                   built.archive] + [env.File(f"#{f}") for f in generator])
    built.sources.append(tool_files[0])
    cenv.Append(CPPDEFINES=[("NEEDLE_TOOLS_BUILTIN", 1)])
    return tool_files


def grammar_tables_program(env, board: dict, build):
    """The host program that compiles the built-in tools' grammar tables with the board's
    bounds (firmware/buildtools/grammar_tables.c; generator/tools/tables.py)."""
    from generator.tools import tables
    host = boards.load("host")
    out = build.Dir("grammar-host")
    henv = env.Clone(CC=boards.compiler(host, env["cc"]), CCFLAGS=flags.WARNINGS + ["-O2"] + tables.defines(board),
                     CPPPATH=[f"#firmware/{d}" for d in INCLUDE_DIRS], LINKFLAGS=[], LIBS=[], CPPDEFINES=[])
    henv.VariantDir(out, "#firmware", duplicate=False)
    return henv.Program(out.File("grammar-tables"), [out.File(f) for f in GRAMMAR_TABLES_SOURCES])[0]


def _prefix_snapshot(env, built: Built):
    """tools=FILE snapshot=1: gen/needle_prefix.S, which links the prefix snapshot into the
    firmware (docs/snapshot.md); None when there is none (no tools, snapshot=0, retrieval)."""
    if not (env["tools"] and env["snapshot"] and not options.retrieves(env, env["NEEDLE_OPTIONS"])):
        return None
    prefix = build_prefix(env, built.board, built.build)
    asm = built.cenv.NeedlePrefix(built.gen_dir.File("needle_prefix.S"), prefix)
    built.cenv.Depends(asm, "#templates/needle_prefix.S.j2")
    built.sources.append(asm[0])
    built.cenv.Append(CPPDEFINES=[("NEEDLE_PREFIX_SNAPSHOT", 1)])
    return prefix


def build_prefix(env, board: dict, build):
    """The built-in tools' prefix snapshot for `board` (docs/snapshot.md): a host engine
    generated from the same archive with the board's KV layout feeds the prompt's constant
    prefix and writes its state to <build>/prefix.bin (the engines are bit-identical, so the
    host's state is the board's).  The host engine is built with nothing after it and none of
    the board's own programming or packaging options."""
    host = boards.load("host")
    host_build = build.Dir("prefix-host")
    henv = env.Clone(snapshot=False, kernels="board", bench=False, run=False, check="", eval=False, lib=False,
                     package="none", flash="0", gdb=False, libc="board", threads="board", sanitize=False,
                     uf2=False, sign="", feed_key="")
    henv.NeedleBoard(host, host_build, kv_budget=board["memory"]["kv_budget_bytes"], alias=board["name"])
    save = BoardRunner(host, host_build.File("needle").path).shell_line(["--snapshot-save", "$TARGET"])
    prefix = env.Command(build.File("prefix.bin"), host_build.File("needle"), act(env, save, "SNAPSHOT $TARGET"))
    env.Depends(prefix, host_build.File("memory.txt"))      # the host engine passed its post-link check
    return prefix[0]


def _compile(built: Built, engine, tool_files: list, prefix) -> None:
    """Every object.  Bare metal: the hand-written glue (command line, prompt, start-up,
    console) and the tokenizer are compiled for size, the model and its kernels at the board's
    -O2: code flash is small (stm32h750b-dk: 128 KB) and a token's time is not spent there
    (integer code: the numerics do not change).  The matcher and the constrained turn run for
    every candidate token, so they keep -O2 (docs/grammar.md §6 has what it buys)."""
    cenv, obj_dir, cflags = built.cenv, built.obj_dir, built.cflags
    glue = ({obj_dir.File(f) for f in _firmware(built) if f not in sdk.PER_TOKEN_GLUE}
            | {built.gen_dir.File("needle_tokenizer.c")} if built.bare else set())
    for src in built.sources:
        o = cenv.Object(obj_dir.File(os.path.splitext(src.name)[0] + ".o"), src,
                        CCFLAGS=cflags + flags.SIZE if src in glue else cflags)
        built.objects += o
        built.object_of[src] = o[0]
        if src.name.endswith(".S"):
            cenv.Depends(o, prefix if src.name == "needle_prefix.S" else built.archive)   # what .incbin reads
    cenv.Depends(built.objects, [f for f in engine if f.name.endswith(".h")] + tool_files[1:])
    if boards.is_gcc(built.board, cenv["cc"]):
        # what -fstack-usage -fcallgraph-info=su write beside each object: scons -c removes them
        for o in built.objects:
            cenv.Clean(o, [o.target_from_source("", ".su"), o.target_from_source("", ".ci")])


def _link(env, built: Built) -> None:
    """The image (needle, or needle.elf and its map on bare metal); on bare metal also its hex,
    the partition's archive image, one image per loadable region with images.json, and sign=KEY's
    MCUboot image."""
    cenv, build = built.cenv, built.build
    prog = cenv.Program(build.File("needle.elf" if built.bare else "needle"), built.objects)
    built.prog, built.outputs = prog[0], [prog]
    if not built.bare:
        return
    cenv.Depends(prog, built.gen_dir.File("link.ld"))
    cenv.SideEffect(build.File("needle.map"), prog)
    cenv.Clean(prog, build.File("needle.map"))
    objcopy = built.board["toolchain_prefix"] + "objcopy"
    built.outputs.append(cenv.Command(build.File("needle.hex"), prog,
                                      act(env, f"{objcopy} -O ihex $SOURCE $TARGET", "HEX $TARGET")))
    if built.board["archive"]["placement"] == "partition":
        copy = (Copy("$TARGET", "$SOURCE") if env["verbose"] else
                Action(lambda target, source, env: shutil.copyfile(source[0].abspath, target[0].abspath) and 0,
                       "COPY $TARGET"))
        built.image = cenv.Command(build.File("archive.bin"), built.archive, copy)[0]
        built.outputs.append(built.image)
    # one image per loadable region at its load address, and images.json (never a
    # gap-filled binary: generator/build/images.py)
    built.flashable = cenv.NeedleImages(build.File("images.json"), [prog[0]] + ([built.image] if built.image else []))
    cenv.Depends(built.flashable, "#generator/build/images.py")
    built.outputs.append(built.flashable)
    if env["sign"]:          # the code region's image, signed for MCUboot's primary slot
        built.outputs.append(sign_image(built.board, cenv, build, env.File(env["sign"])))


def sign_image(board, cenv, build, key):
    """imgtool sign of the code region's image (generator/build/mcuboot.py)."""
    from generator import __version__
    from generator.build import images, mcuboot
    from generator.errors import CactError
    code = boards.region(board, "code")

    def run(target, source, env):
        try:
            mcuboot.sign(board, source[1].abspath, source[0].abspath, target[0].abspath, __version__)
        except CactError as exc:
            print(f"scons: error: {exc}", file=sys.stderr)
            return 2
        return 0
    out = cenv.Command(build.File(mcuboot.signed_name(board)),
                       [build.File(images.image_name(code, code["origin"])), key],
                       Action(run, f"imgtool sign $TARGET <- $SOURCE (version {__version__})"))
    cenv.Depends(out, "#generator/build/mcuboot.py")
    return out


def _check(env, built: Built, tool_files: list) -> None:
    """The post-link check (memory.txt, memory.svg: generator/build/elfcheck.py), after every
    output of the link; compile_commands.json; the board's target, a default one."""
    cenv, build, board = built.cenv, built.build, built.board
    gcc = boards.is_gcc(board, env["cc"])
    # A static glibc or musl carries its own allocator: there the no-heap rule applies to our objects.
    static_libc = board["os"] == "linux" and (board["toolchain"] == "zig" or bool(board["toolchain_prefix"]))
    built.check = cenv.NeedleCheck(build.File("memory.txt"), [built.prog, built.archive],
                                   NEEDLE_OBJ_DIR=built.obj_dir.abspath if gcc else None,
                                   NEEDLE_OBJECTS=[o.abspath for o in built.objects] if static_libc else [])
    cenv.Depends(built.check, built.outputs)
    if tool_files:    # scons -c does not always reach the grammar-tables program through needle_tools.c
        tables_program = tool_files[0].sources[1]
        cenv.Clean(built.check, [tables_program] + tables_program.sources)
    # compile_commands.json: this board's compilations (written when they change)
    from generator.build.scons_tool import compilation_database
    built.compdb = compilation_database(cenv, build.File("compile_commands.json"),
                                        os.path.join(built.obj_dir.path, "*"))
    # one target a board: a build with nothing to do says "`host' is up to date", once
    env.Default(env.Alias(built.alias, [built.check, built.compdb]))
    if board["archive"]["placement"] == "file":
        built.image = built.archive
