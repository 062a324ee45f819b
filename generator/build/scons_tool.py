"""SCons tool: the needle-fw generator and post-link checks as builders.

* ``env.NeedleEngine(gen_dir, archive)`` renders every engine file into gen_dir.  Its
  signature covers the archive, the engine templates, the generator modules a generation
  runs (SIGNATURE_SOURCES), the board file (and those it inherits from) and the engine
  options, so a change to any of them regenerates and nothing else does.
* ``env.NeedlePrefix(asm, prefix_bin)`` writes the .S that links a prefix snapshot into the
  firmware (docs/snapshot.md).
* ``env.NeedleIpk(ipk, [executable, report])`` writes the OpenWrt package (generator.build.package).
* ``env.NeedleFeed([ipk, Packages, ...], [executable, report, key?])`` writes an opkg feed (generator.build.feed).
* ``env.NeedleDeb(deb, [executable, archive, report])`` writes the Debian package (generator.build.deb).
* ``env.NeedleImages(manifest, [elf] or [elf, archive.bin])`` writes a bare-metal build's
  flashable images, one per loadable region, and their manifest (generator.build.images).
* ``env.NeedleSdk(sdk_dir, archive)`` renders the library SDK's header, pkg-config and CMake
  files (generator.build.sdk); the repository's env.NeedleLib
  (site_scons/needle_build/steps.py) archives and copies the rest.
* ``env.NeedleCheck(report, [elf, archive])`` runs generator.build.elfcheck on a linked image and
  writes the memory report, and beside it its picture, memory.svg (generator.build.memmap);
  on failure the image is deleted so no bad firmware is left.

Every builder but NeedleText reads the board file: each depends on the board's file chain (the
file and those it inherits from), so an edited budget, region or package field reruns the
post-link check and the steps after it even when the image they read is unchanged.

Refusals are one line on stderr ("scons: error: ..."); warnings and reports go to stdout.
The repository's SConstruct adds its steps as environment methods besides these builders
(site_scons/needle_build/).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import SCons.Action
import SCons.Builder
from SCons.Script import Dir, File

from generator.build import boards, elfcheck, images, memmap
from generator.codegen import pipeline
from generator.errors import CactError
from generator.paths import GENERATOR_DIR, TEMPLATES_DIR


# What can change the generated code, and nothing else: the modules a generation runs (the
# archive reader, the numerics and geometry the planner bakes in, the code generator, the
# board loader) and the engine templates.  Not in it: the archive writer, the reference
# models (imported by generator/model/__init__.py, never called), the user commands, the
# compiler flags (generator/build/flags.py: SCons tracks command lines itself) and the
# benchmark drivers and their templates (templates/bench/).  host_tests/test_boards.py
# checks this list against what a generation really imports.
SIGNATURE_SOURCES = ("generator/__init__.py", "generator/paths.py", "generator/errors.py",
                     "generator/files.py",
                     "generator/archive/__init__.py", "generator/archive/format.py",
                     "generator/archive/quant.py", "generator/archive/reader.py",
                     "generator/archive/roles.py", "generator/archive/tokenizer.py",
                     "generator/model/numerics.py", "generator/model/geometry.py",
                     "generator/model/calibration.py",  # NEEDLE_MIN_CONFIDENCE_PPM
                     "generator/codegen/*.py", "generator/build/__init__.py",
                     "generator/build/boards.py",
                     "generator/build/sources.py",     # boards.py's HAL and run-time lists
                     "generator/tools/__init__.py",
                     "generator/tools/tables.py",      # boards.py checks [grammar] with it
                     "templates/*.j2", "templates/kernels/*.j2", "templates/model/*.j2")


def signature_files() -> list[Path]:
    """SIGNATURE_SOURCES where this generator runs from: its own package and templates, in a
    clone or installed (generator.paths), never the SConstruct's directory, which is a user's
    own project when the tool is loaded from an installed package (docs/install.md)."""
    bases = {"generator": GENERATOR_DIR, "templates": TEMPLATES_DIR}
    files = set()
    for pattern in SIGNATURE_SOURCES:
        top, rest = pattern.split("/", 1)
        files.update(bases[top].glob(rest))
    return sorted(files)


def _generator_sources(env):
    return sorted((File(str(p)) for p in signature_files()), key=str)


def _board(env) -> dict:
    """The board being built, as SConstruct builds it (libc=musl: its musl variant)."""
    board = boards.load(env["NEEDLE_BOARD"])
    return boards.with_musl(board) if env.get("libc") == "musl" else board


def _board_chain(env) -> list:
    """The board's file and those it inherits from (boards.files)."""
    return [File(str(p)) for p in boards.files(env["NEEDLE_BOARD"])]


def _reads_board(emitter=None):
    """An emitter for a step that reads the board file (its budgets, regions, package fields):
    the step depends on the board's file chain, so editing a budget reruns it even when the
    image it reads is unchanged."""
    def emit(target, source, env):
        if emitter is not None:
            target, source = emitter(target, source, env)
        env.Depends(target, _board_chain(env))
        return target, source
    return emit


def _engine_emitter(target, source, env):
    gen_dir = Dir(str(target[0]))
    targets = [gen_dir.File(name) for name in pipeline.outputs(_board(env))]
    return targets, source + _generator_sources(env) + _board_chain(env)


def _engine_action(target, source, env):
    out_dir = os.path.dirname(target[0].abspath)
    archive = source[0]
    kvw = env.get("NEEDLE_KV_WINDOW")
    board = _board(env)
    if env.get("NEEDLE_KV_BUDGET"):   # a prefix-snapshot host engine: the target board's KV layout
        board = dict(board, memory=dict(board["memory"], kv_budget_bytes=int(env["NEEDLE_KV_BUDGET"])))
    try:
        engine = boards.generate_engine(board, archive.abspath, out_dir,
                                        incbin_path=archive.abspath if os.path.isabs(archive.path) else archive.path,
                                        kv_window=int(kvw) if kvw else None,
                                        kernels=env.get("NEEDLE_KERNELS") or None,
                                        head_tokens=int(env.get("NEEDLE_HEAD_TOKENS", 0)),
                                        threads=int(env.get("NEEDLE_THREADS") or 0) or None,
                                        thread_grain=int(env["NEEDLE_THREAD_GRAIN"]) if env.get("NEEDLE_THREAD_GRAIN", "") != "" else None,
                                        prefill_chunk=int(env["NEEDLE_PREFILL_CHUNK"]) if env.get("NEEDLE_PREFILL_CHUNK", "") != "" else None)
    except CactError as exc:
        print(f"scons: error: {archive.path}: {exc}", file=sys.stderr)
        return 2
    for w in engine.warnings:
        print(f"warning: {w}")
    return 0


def _say(env, short: str, full: str) -> str:
    """A step's line: `short` (GEN build/host/gen), or with verbose=1 `full`."""
    return full if env.get("verbose") else short


def _engine_str(target, source, env):
    gen = os.path.dirname(target[0].path)
    return _say(env, f"GEN {gen}", f"generate engine {gen} <- {source[0].path}")


def _check_action(target, source, env):
    elf, archive = source[0], source[1]
    try:
        board = _board(env)
        rep = elfcheck.check(elf.abspath, archive.abspath, board, obj_dir=env.get("NEEDLE_OBJ_DIR"),
                              objects=[str(o) for o in env.get("NEEDLE_OBJECTS", [])] or None)
    except CactError as exc:
        print(f"scons: error: post-link check of {elf.path}: {exc}", file=sys.stderr)
        if os.path.exists(elf.abspath):
            os.unlink(elf.abspath)
        return 2
    lines = rep.lines(env["NEEDLE_BOARD"])
    text = "\n".join(lines) + "\n"
    with open(target[0].abspath, "w") as fh:
        fh.write(text)
    memmap.write(target[1].abspath, rep, board, env["NEEDLE_BOARD"])
    print(text if env.get("verbose") else "\n".join(terminal_report(lines, target[0].path)) + "\n", end="")
    return 0


def _check_emitter(target, source, env):
    """memory.txt's picture, memory.svg, beside it (a target: scons -c removes it)."""
    report = target[0]
    return [report, report.dir.File("memory.svg")], source + [File(str(GENERATOR_DIR / "build" / "memmap.py"))]


def terminal_report(lines: list[str], where: str) -> list[str]:
    """The memory report as a build prints it: its totals (flash, RAM, each image), each
    without its explanation in parentheses; the whole report is in `where` (verbose=1 prints it)."""
    out = [f"{lines[0]} {where}"]
    for line in lines[1:]:
        if line.startswith("  ") and not line.startswith("   "):     # a total, not a detail
            cut = line.find(" (")
            out.append(line[:cut] if cut > 0 else line)
    return out


def _check_str(target, source, env):
    return _say(env, f"CHECK {source[0].path}", f"check {source[0].path}")


def _refused(what: str, step) -> int:
    """Run step(); a CactError is one line on stderr ("scons: error: <what>: ...") and status 2."""
    try:
        step()
    except CactError as exc:
        print(f"scons: error: {what}: {exc}", file=sys.stderr)
        return 2
    return 0


def _ipk_action(target, source, env):
    from generator.build import package
    return _refused(f"package of {source[0].path}",
                    lambda: package.write_ipk(_board(env), source[0].abspath, os.path.dirname(target[0].abspath)))


def _ipk_str(target, source, env):
    return _say(env, f"IPK {target[0].path}", f"package {target[0].path} <- {source[0].path}")


def _feed_action(target, source, env):
    from generator.build import feed
    return _refused(f"feed of {source[0].path}",
                    lambda: feed.write_feed(_board(env), source[0].abspath, os.path.dirname(target[0].abspath),
                                            env["NEEDLE_FEED_KEY"] or None))


def _feed_str(target, source, env):
    signed = " (signed)" if env["NEEDLE_FEED_KEY"] else ""
    return f"feed {os.path.dirname(target[0].path)}{signed} <- {source[0].path}"


def _deb_action(target, source, env):
    from generator.build import deb
    return _refused(f"Debian package of {source[0].path}",
                    lambda: deb.write_deb(_board(env), source[0].abspath, source[1].abspath,
                                          os.path.dirname(target[0].abspath)))


def _deb_str(target, source, env):
    return f"package {target[0].path} <- {source[0].path}"


def _images_emitter(target, source, env):
    out_dir = Dir(os.path.dirname(str(target[0])))
    return [out_dir.File(images.MANIFEST)] + [out_dir.File(n) for n in images.expected_images(_board(env))], source


def _images_action(target, source, env):
    out_dir = os.path.dirname(target[0].abspath)
    stale = os.path.join(out_dir, "needle.bin")    # the gap-filled image of older builds
    if os.path.exists(stale):
        os.unlink(stale)
    try:
        entries = images.split_images(source[0].abspath, _board(env), out_dir,
                                      source[1].abspath if len(source) > 1 else None)
    except CactError as exc:
        print(f"scons: error: images of {source[0].path}: {exc}", file=sys.stderr)
        return 2
    unexpected = sorted({e["file"] for e in entries} - {t.name for t in target} - {s.name for s in source})
    if unexpected:
        print(f"scons: error: images of {source[0].path}: {', '.join(unexpected)} not expected for board "
              f"{env['NEEDLE_BOARD']} (generator.build.images.expected_images)", file=sys.stderr)
        return 2
    return 0


def _images_str(target, source, env):
    return _say(env, f"IMAGES {target[0].path}", f"images {target[0].path} <- {source[0].path}")


def _sdk_emitter(target, source, env):
    from generator.build import sdk
    sdk_dir = Dir(str(target[0]))
    return [sdk_dir.File(rel) for rel in sdk.metadata_files(_board(env)).values()], source


def _sdk_action(target, source, env):
    import hashlib
    from generator.build import sdk
    sdk_dir = os.path.dirname(os.path.dirname(target[0].abspath))    # target[0]: include/needle.h
    with open(source[0].abspath, "rb") as fh:
        sha256 = hashlib.sha256(fh.read()).hexdigest()
    return _refused(f"SDK of board {env['NEEDLE_BOARD']}",
                    lambda: sdk.write_metadata(_board(env), sdk_dir, sha256, env.get("cc", "gcc"),
                                               int(env.get("NEEDLE_THREADS") or 1)))


def _sdk_str(target, source, env):
    where = os.path.dirname(os.path.dirname(target[0].path))
    return _say(env, f"SDK {where}", f"sdk {where} <- {source[0].path}")


def _tools_action(target, source, env):
    """gen/needle_tools.[ch]: the tool list of scons tools=FILE (source[0]), validated and
    minified; its grammar's tables compiled by source[1] (the grammar-tables host program
    built with the board's bounds); with head_tokens=N and more than five tools, every
    tool's embedding by the reference on the archive source[2]."""
    from generator import __version__
    from generator.codegen import render
    from generator.tools import retrieval, tables
    from generator.tools.schema import compile_tools

    def write():
        try:
            with open(source[0].abspath, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise CactError(f"cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
        from generator.tools import bindings
        g = compile_tools(text)
        if not g.tool_names:      # SConstruct refuses it first; the generator never emits `enum {}`
            raise CactError("an empty tool list: a built-in list needs at least one tool")
        grammar = tables.compile_with(source[1].abspath, source[0].abspath, g.tools_json, _board(env), g.tool_ppm)
        # retrieval (more than five tools, the embedding head built): every tool embedded now
        embeddings = retrieval.tool_embeddings(source[2].abspath, text, int(env.get("NEEDLE_HEAD_TOKENS") or 0))
        names = {"version": __version__, "source": source[0].path, "count": len(g.tool_names),
                 "names": g.tool_names, "json": g.tools_json,
                 "json_bytes": len(g.tools_json.encode("utf-8", "surrogatepass")),
                 "tools": bindings.plan(g), "grammar": grammar, **tables.TEMPLATE_NAMES,
                 "embeddings": [v.tolist() for v in embeddings] if embeddings else None}
        names.update({k: v for k, v in vars(bindings).items() if k.startswith("NB_")})
        for t in target:
            with open(t.abspath, "w", encoding="utf-8") as fh:
                fh.write(render.render(os.path.basename(t.path) + ".j2", names))
    return _refused(f"tools={source[0].path}", write)


def _tools_str(target, source, env):
    return _say(env, f"TOOLS {target[0].path}", f"tools {target[0].path} <- {source[0].path}")


def _prefix_action(target, source, env):
    """gen/needle_prefix.S: links the prefix snapshot (prefix.bin, made by the host engine's
    needle --snapshot-save) into the board's firmware (docs/snapshot.md)."""
    from generator import __version__
    from generator.codegen import render
    blob = source[0]

    def write():
        with open(blob.abspath, "rb") as fh:
            head = fh.read(32)
        if len(head) < 32 or head[:4] != b"NKVS":
            raise CactError("not a prefix snapshot (rebuild it: delete the file)")
        bare = _board(env)["os"] == "none"
        text = render.render("needle_prefix.S.j2", {
            "version": __version__, "tokens": int.from_bytes(head[24:28], "little"),
            "size": os.path.getsize(blob.abspath), "bare": bare, "gnu_stack": not bare,
            "incbin_path": blob.abspath if os.path.isabs(blob.path) else blob.path})
        with open(target[0].abspath, "w", encoding="utf-8") as fh:
            fh.write(text)
    return _refused(f"prefix snapshot {blob.path}", write)


def _prefix_str(target, source, env):
    return _say(env, f"PREFIX {target[0].path}", f"prefix {target[0].path} <- {source[0].path}")


def compilation_database(env, target, path_filter: str):
    """compile_commands.json of the compilations whose object matches `path_filter`: SCons'
    compilation_db tool collects them (its emitters), but its own builder rewrites the file
    (and says so) on every run; this one writes it when its text changes, silently (verbose=1:
    "Building compilation database ...")."""
    import fnmatch
    import json
    from SCons.Tool import compilation_db
    entries = []
    top = env.Dir("#").get_abspath()
    overrides = {"TEMPFILE": compilation_db.CompDBTEMPFILE}
    for db_target, db_source, db_env, db_action in getattr(compilation_db, "__COMPILATION_DB_ENTRIES"):
        output = db_target.get_path()
        if not fnmatch.fnmatch(output, path_filter):
            continue
        src = db_source if db_source.is_derived() else db_source.srcnode()
        entries.append({"command": db_action.strfunction(db_target, db_source, db_env, None, overrides),
                        "directory": top, "file": src.get_path(), "output": output})
    text = json.dumps(entries, sort_keys=True, indent=4) + "\n"
    return env.NeedleText(target, env.Value(text))


def _text_action(target, source, env):
    with open(target[0].abspath, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(source[0].read())
    return 0


def _text_str(target, source, env):
    return _say(env, "", f"Building compilation database {target[0].path}")


def generate(env):
    env["BUILDERS"]["NeedleText"] = SCons.Builder.Builder(action=SCons.Action.Action(_text_action, _text_str))
    env["BUILDERS"]["NeedleEngine"] = SCons.Builder.Builder(
        action=SCons.Action.Action(_engine_action, _engine_str,
                                   varlist=["NEEDLE_BOARD", "NEEDLE_KV_WINDOW", "NEEDLE_KERNELS",
                                            "NEEDLE_HEAD_TOKENS", "NEEDLE_THREADS", "NEEDLE_THREAD_GRAIN", "NEEDLE_PREFILL_CHUNK",
                                            "NEEDLE_KV_BUDGET"]),
        emitter=_engine_emitter, target_factory=Dir)
    env["BUILDERS"]["NeedleCheck"] = SCons.Builder.Builder(
        action=SCons.Action.Action(_check_action, _check_str,
                                   varlist=["NEEDLE_BOARD", "libc"]), emitter=_reads_board(_check_emitter))
    env["BUILDERS"]["NeedleImages"] = SCons.Builder.Builder(
        action=SCons.Action.Action(_images_action, _images_str, varlist=["NEEDLE_BOARD", "libc"]),
        emitter=_reads_board(_images_emitter))
    env["BUILDERS"]["NeedleSdk"] = SCons.Builder.Builder(
        action=SCons.Action.Action(_sdk_action, _sdk_str, varlist=["NEEDLE_BOARD", "libc", "cc", "NEEDLE_THREADS"]),
        emitter=_reads_board(_sdk_emitter), target_factory=Dir)
    env["BUILDERS"]["NeedleTools"] = SCons.Builder.Builder(
        action=SCons.Action.Action(_tools_action, _tools_str, varlist=["NEEDLE_BOARD", "NEEDLE_HEAD_TOKENS"]),
        emitter=_reads_board())
    env["BUILDERS"]["NeedlePrefix"] = SCons.Builder.Builder(
        action=SCons.Action.Action(_prefix_action, _prefix_str, varlist=["NEEDLE_BOARD", "libc"]),
        emitter=_reads_board())
    env["BUILDERS"]["NeedleIpk"] = SCons.Builder.Builder(
        action=SCons.Action.Action(_ipk_action, _ipk_str, varlist=["NEEDLE_BOARD", "libc"]),
        emitter=_reads_board())
    env["BUILDERS"]["NeedleFeed"] = SCons.Builder.Builder(
        action=SCons.Action.Action(_feed_action, _feed_str, varlist=["NEEDLE_BOARD", "libc", "NEEDLE_FEED_KEY"]),
        emitter=_reads_board())
    env["BUILDERS"]["NeedleDeb"] = SCons.Builder.Builder(
        action=SCons.Action.Action(_deb_action, _deb_str, varlist=["NEEDLE_BOARD", "libc"]),
        emitter=_reads_board())


def exists(env):
    return True
