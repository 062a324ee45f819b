"""What the repository's SConstruct does with a built board, as environment methods (`add_methods`):

* ``env.NeedleBoard(board, build_dir)``: one board's build (site_scons/needle_build/board.py), then
  ``env.NeedleAfterBuild(built)``: each of the following the options ask for;
* ``env.NeedlePackage(built)``: package=ipk|feed|deb, the stripped link in an OpenWrt package,
  an opkg feed or a Debian package;
* ``env.NeedleLib(built)``: lib=1, the library SDK in <build>/sdk;
* ``env.NeedleRun(built)``, ``env.NeedleGdb(built)``, ``env.NeedleFlash(built)``: run=1 under the
  board's emulator, gdb=1 its halted gdb stub, flash=1|dry through a debug probe;
* ``env.NeedleGolden(built)``: check=DIR, the engine against the user's goldens;
* ``env.NeedleEval(built)``: eval=1, task accuracy against the a8 reference;
* ``env.NeedleBench(built)``: bench=1, this kernel family against the scalar one;
* ``env.NeedleDist()``: `scons dist`, the release tarball and the OpenWrt SDK Makefile.

Each adds its alias to the default targets.  `board_summary` and `tidy_after_clean` are what
board=all and scons -c do once SCons has finished."""

from __future__ import annotations

import atexit
import os
import sys

from SCons.Script import Action, GetBuildFailures, GetOption

from generator.build import boards, flags, sdk
from generator.build.runner import BoardRunner
from generator.errors import CactError

from . import options
from .board import act, build_board


def add_methods(env) -> None:
    for method in (build_board, after_build, package, library, run, gdb, flash, golden, evaluation,
                   bench, dist):
        env.AddMethod(method, METHOD_NAMES[method.__name__])


METHOD_NAMES = {"build_board": "NeedleBoard", "after_build": "NeedleAfterBuild", "package": "NeedlePackage",
                "library": "NeedleLib", "run": "NeedleRun", "gdb": "NeedleGdb", "flash": "NeedleFlash",
                "golden": "NeedleGolden", "evaluation": "NeedleEval", "bench": "NeedleBench", "dist": "NeedleDist"}


def after_build(env, built) -> None:
    """What the options ask for once the board is built, in this order."""
    if env["package"] != "none":
        env.NeedlePackage(built)
    if env["lib"]:
        env.Alias(built.alias, env.NeedleLib(built))
    for option, method in (("run", env.NeedleRun), ("flash", env.NeedleFlash), ("gdb", env.NeedleGdb),
                           ("check", env.NeedleGolden), ("eval", env.NeedleEval), ("bench", env.NeedleBench)):
        if env[option] and env[option] != "0":
            method(built)


def _default(env, alias) -> None:
    """An alias that runs every time it is asked for, asked for by default."""
    env.AlwaysBuild(alias)
    env.Default(alias)


def package(env, built) -> None:
    """package=ipk|feed (OpenWrt: generator/build/package.py, feed.py) or deb (generator/build/deb.py).
    A package holds the same link without symbols or debug info (OpenWrt and Debian strip their
    packages; the post-link check reads the full image)."""
    cenv, build, board = built.cenv, built.build, built.board
    stripped = cenv.Program(build.File("needle.stripped"), built.objects, LINKFLAGS=built.linkflags + ["-s"])
    if env["package"] == "deb":
        from generator.build import deb
        out = cenv.NeedleDeb(build.File(deb.deb_name(board)), [stripped[0], built.archive, built.check])
        cenv.Depends(out, env.Glob("#templates/deb/*") + env.Glob("#templates/package/needle.service.j2")
                     + ["#generator/build/deb.py", "#generator/build/package.py", "#CHANGELOG.md", "#LICENSE"])
        env.Alias(built.alias, out)
        return
    from generator.build import feed, package as openwrt, usign
    key = options.in_top(env.Dir("#").abspath, env["feed_key"]) if env["feed_key"] else None
    if env["package"] == "ipk":
        out = cenv.NeedleIpk(build.File(openwrt.package_name(board)), [stripped[0], built.check])
    else:       # one board, one OpenWrt architecture: one feed directory (generator/build/feed.py)
        fingerprint = usign.fingerprint_name(usign.read_secret_key(key).fingerprint) if key else None
        feed_dir = build.Dir("feed")
        names = [openwrt.package_name(board), feed.INDEX, f"{feed.INDEX}.gz"] + ([f"{feed.INDEX}.sig"] if key else [])
        out = cenv.NeedleFeed([feed_dir.File(n) for n in names]
                              + ([build.Dir(feed.KEYS_DIR).File(fingerprint)] if key else []),
                              [stripped[0], built.check] + ([env.File(key)] if key else []), NEEDLE_FEED_KEY=key or "")
        cenv.Depends(out, ["#generator/build/feed.py", "#generator/build/usign.py"])
    cenv.Depends(out, env.Glob("#templates/package/*") + ["#generator/build/package.py"])
    env.Alias(built.alias, out)


def library(env, built) -> list:
    """lib=1: the library SDK of one board (generator/build/sdk.py) in <build>/sdk: the
    firmware's own engine and prompt-renderer objects archived into libneedle.a (the reference
    board support into libneedle_board.a), the public headers, the archive file or image, and
    the rendered metadata."""
    board, gen_dir, obj_dir, object_of = built.board, built.gen_dir, built.obj_dir, built.object_of
    sdk_dir = built.build.Dir(sdk.SDK_DIR)
    lib_dir, share = sdk_dir.Dir("lib"), sdk_dir.Dir("share/needle")
    ar, ranlib = sdk.archiver(board)
    aenv = built.cenv.Clone(AR=ar, RANLIB=ranlib)

    def objs(paths):
        return [object_of[obj_dir.File(p)] for p in paths]
    engine_objs = ([o for src, o in object_of.items() if src.dir == gen_dir]
                   + objs(sdk.LIBRARY_SOURCES + boards.runtime_sources(board)))
    out = aenv.StaticLibrary(lib_dir.File("libneedle.a"), engine_objs)
    headers = dict(sdk.HEADERS)
    if env["tools"]:
        headers.update(sdk.TOOLS_HEADERS)
    if built.bare:
        # + the C library's hooks (printf, malloc, exit in the user's program): compiled here
        # only, never linked into the needle firmware (generator/build/sdk.py)
        syscalls = [aenv.Object(obj_dir.File(os.path.splitext(p)[0] + ".o"), obj_dir.File(p),
                                CCFLAGS=built.cflags + flags.SIZE)[0] for p in sdk.syscall_sources(board)]
        out += aenv.StaticLibrary(lib_dir.File("libneedle_board.a"), objs(sdk.board_support_sources(board)) + syscalls)
        out += aenv.InstallAs(share.File("needle.ld"), gen_dir.File("link.ld"))
        headers.update(sdk.BOARD_HEADERS)
    for name, src in headers.items():
        origin = gen_dir.File(src[4:]) if src.startswith("gen/") else env.File(f"#firmware/{src}")
        out += aenv.InstallAs(sdk_dir.File(f"include/{name}"), origin)
    shipped = sdk.archive_file(board)
    if shipped:
        out += aenv.InstallAs(share.File(shipped), built.image if built.image is not None else built.archive)
    metadata = aenv.NeedleSdk(sdk_dir, built.archive)
    aenv.Depends(metadata, env.Glob("#templates/sdk/*.j2") + ["#generator/build/sdk.py"])
    return out + metadata


def _runner(built, prog=None) -> BoardRunner:
    return BoardRunner(built.board, (prog or built.prog).path, built.image.path if built.image else None)


def run(env, built) -> None:
    """run=1: the engine on the demo's arguments (or query=) under the board's emulator.  A
    shell line, not a Python action: the terminal stays the engine's, for a UART board's typing;
    $ doubled: SCons substitutes the line, and a query is the user's text ($(...) included)."""
    demo = options.run_arguments(built.board, env["query"])
    line = _runner(built).shell_line(demo).replace("$", "$$")
    _default(env, env.Alias(f"run-{built.name}", [built.check], act(env, line, f"RUN {built.prog.path}")))


FLASH_FAILURE: list[str] = []


def _flash_exit() -> None:
    """A failed flash=1: one line and exit 2 (not SCons' "*** [target] Error"), after SCons
    has written its signature database."""
    if FLASH_FAILURE:
        sys.stdout.flush()
        print(f"scons: error: {FLASH_FAILURE[0]}", file=sys.stderr, flush=True)
        os._exit(2)


atexit.register(_flash_exit)


def flash(env, built) -> None:
    """flash=1|dry: program images.json's images (generator/build/flash.py), or print the commands."""
    from generator.build import flash as flasher

    def program(target, source, env, board=built.board, where=built.build.abspath):
        try:
            cmds = flasher.commands(board, where, env["probe"])
            if env["flash"] == "dry":      # one write: another job's message cannot split a line
                sys.stdout.write("".join(boards.shell_line(c) + "\n" for c in cmds))
                sys.stdout.flush()
            else:
                flasher.run(board, cmds)
        except CactError as exc:      # reported once SCons has saved its state (_flash_exit)
            FLASH_FAILURE.append(str(exc))
        return 0
    # after compile_commands.json, whose "Building compilation database" line a parallel
    # job (-j2) could otherwise print into the middle of the commands
    _default(env, env.Alias(f"flash-{built.name}", [built.check, built.flashable, built.compdb],
                            Action(program, None)))


def gdb(env, built) -> None:
    """gdb=1: the emulator halted at the first instruction, waiting for gdb; the command that
    attaches is printed first."""
    demo = options.run_arguments(built.board, env["query"])
    emu, debugger = boards.gdb_commands(built.board, built.prog.path, demo,
                                        built.image.path if built.image else None, int(env["gdb_port"]))
    if emu is None:
        raise options.Refused(f"board {built.name} runs natively: debug it with "
                                    f"{boards.shell_line(debugger)} (build with debug=1)")
    attach = boards.shell_line(debugger)
    hint = Action(lambda target, source, env: print(f"attach with: {attach}", flush=True) or 0, None)
    _default(env, env.Alias(f"gdb-{built.name}", [built.check],
                            [hint, boards.shell_line(emu).replace("$", "$$")]))


def golden(env, built) -> None:
    """check=DIR: every case of DIR on this board, compared with the reference
    (generator/commands/golden.py)."""
    checked = env["NEEDLE_OPTIONS"]
    cmd = [sys.executable, "-m", "generator", "check", checked.check_dir,
           "--archive", built.archive.path, "--board", built.name, "--engine", built.prog.path,
           "--tol", repr(checked.check_tol)] + (["--image", built.image.path] if built.image else [])
    deps = [built.check] + ([built.image] if built.image else [])
    _default(env, env.Alias(f"check-{built.name}", deps,
                            act(env, boards.shell_line(cmd), f"GOLDEN {checked.check_dir}")))


def evaluation(env, built) -> None:
    """eval=1: python -m generator eval --engine on the built engine, every held-out
    example scored against the a8 reference (generator/commands/evaluate.py); a board that reads
    no tool file answers with its built-in list (scons_options checked it has examples)."""
    checked, build = env["NEEDLE_OPTIONS"], built.build
    data = options.in_top(env.Dir("#").abspath, checked.eval_data)
    cmd = [sys.executable, "-m", "generator", "eval", "--data", data,
           "--archive", built.archive.path, "--board", built.name, "--engine", built.prog.path,
           "--json", build.File("eval.json").path]
    cmd += ["--image", built.image.path] if built.image else []
    cmd += ["--builtin-tools", checked.tools_path] if env["tools"] else []
    cmd += ["--max-new", env["eval_max_new"]] if env["eval_max_new"] else []
    cmd += ["--limit", env["eval_limit"]] if env["eval_limit"] else []
    alias = env.Alias(f"eval-{built.name}", [build.File("memory.txt")] + ([built.image] if built.image else []),
                      act(env, boards.shell_line(cmd), f"EVAL {built.prog.path} on {checked.eval_data}"))
    env.Clean(alias, build.File("eval.json"))
    _default(env, alias)


def _scalar_twin(env, built):
    """The same board with the scalar kernels in <build>/scalar, built from a clone of the
    environment with nothing after it but what the board itself asks for."""
    twin = built.build.Dir("scalar")
    env.Clone(kernels="scalar", bench=False, run=False, check="", eval=False).NeedleBoard(built.board, twin)
    return twin


def bench(env, built) -> None:
    """bench=1.  Bare metal: instructions per token under qemu -icount, this family against
    scalar (bench/mcu.py).  Linux boards and host (bench/host.py): this family against the
    scalar kernels in one run, tokens/s natively, instructions per token under qemu-user."""
    tokens, short = env["bench_tokens"], f"BENCH {built.prog.path}"
    if built.bare:
        twin = _scalar_twin(env, built)
        line = (f'"{sys.executable}" -m bench.mcu --board {built.name} --fast {built.build.path} '
                f'--scalar {twin.path} --tokens {tokens}')
        _default(env, env.Alias(f"bench-{built.name}", [built.check, twin.File("memory.txt")], act(env, line, short)))
        return
    deps, scalar_opt = [built.check], ""
    if built.family != "scalar":
        twin = _scalar_twin(env, built)
        deps.append(twin.File("memory.txt"))
        scalar_opt = f'--scalar-engine "{_runner(built, twin.File("needle")).shell_line()}" '
    line = (f'"{sys.executable}" -m bench.host {built.archive.path} --engine "{_runner(built).shell_line()}" '
            f'{scalar_opt}--board {built.name} --tokens {tokens}')
    _default(env, env.Alias(f"bench-{built.name}", deps, act(env, line, short)))


def dist(env) -> None:
    """`scons dist`: the release tarball and the OpenWrt SDK package Makefile whose PKG_HASH is
    the tarball's (generator/build/dist.py), into build/dist (build=DIR: DIR/dist); written
    every time."""
    from generator.build import dist as dist_files

    def write_dist(target, source, env):
        try:
            dist_files.write_dist(os.path.dirname(target[0].abspath))
        except CactError as exc:
            print(f"scons: error: dist: {exc}", file=sys.stderr)
            return 2
        return 0

    dist_dir = env.Dir(env["build"] or "#build").Dir("dist")
    dist_out = env.Command([dist_dir.File(dist_files.tarball_name()), dist_dir.File(dist_files.MAKEFILE)], [],
                           Action(write_dist, "dist $TARGETS"))
    env.AlwaysBuild(dist_out)
    env.Alias("dist", dist_out)


# ---- once SCons has finished ----------------------------------------------------------------

def board_summary(selected: list[str], build_dirs: list[str], skipped: dict[str, str]) -> None:
    """The table of board=all (generator/build/summary.py), printed once SCons has finished;
    the run exits 2 if a board failed or was skipped."""
    from generator.build import summary
    failures = GetBuildFailures()
    rows = []
    for name, where in zip(selected, build_dirs):
        board = boards.load(name)
        row = summary.Row(name, "OK", flash_budget=board["memory"].get("flash_bytes"),
                          ram_budget=board["memory"].get("ram_bytes"))
        mine = summary.failed_under(failures, where, name)
        if name in skipped:
            row.result, row.why = "SKIPPED", skipped[name]
        elif mine:
            row.result = "FAILED"
            row.why = f"{mine[0].node}: {mine[0].errstr}"
        if row.result != "SKIPPED":
            row.flash, row.ram = summary.report_totals(os.path.join(where, "memory.txt"))
        if row.result == "OK" and row.flash is None and not GetOption("no_exec"):
            row.result = "FAILED"       # nothing failed, yet no report: an interrupted build
        rows.append(row)
    sys.stdout.flush()
    print("\n".join(summary.table(rows)), flush=True)
    if not summary.all_ok(rows):
        sys.stderr.flush()
        os._exit(2)


def tidy_after_clean(build_dirs: list[str], signatures: str, own_signatures: bool) -> None:
    """scons -c: SCons has removed every file the build made; then the directories it leaves
    empty go, and a build=DIR's own signature database (written before this runs).  The shared
    build/.sconsign of the default directories stays: it holds the other boards'."""
    if own_signatures:
        for name in (".sconsign.dblite", ".sconsign"):
            try:
                os.unlink(os.path.join(signatures, name))
            except FileNotFoundError:
                pass
    for top in build_dirs + ([signatures] if own_signatures else []):
        for here, _dirs, _files in os.walk(top, topdown=False):
            try:
                os.rmdir(here)          # only an empty directory
            except OSError:
                pass
