"""Issue 41, the build's items: a tool list, a board file, a kernel family or an archive the
engine builds for each fails in one line naming the cause (or works), never deep in the
compiler, the linker or a benchmark step."""

from __future__ import annotations

import json
import os
import random
import shutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

from generator.build import boards, sources
from generator.codegen import families
from generator.errors import CactError
from generator.paths import FIRMWARE_DIR
from host_tests.scons_run import scons, sdk_probe

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "host_tests" / "golden"


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The single stderr line of a refused scons run (exit 2)."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def emit(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator", "emit", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


# ---- 20: tools= naming a directory or a device ---------------------------------------

def test_tools_directory_and_non_regular_file_say_what_they_are(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    line = one_line_error(scons("board=host", f"tools={tmp_path}", f"build={tmp_path / 'b'}", check=False))
    assert line == (f"scons: error: tools={tmp_path} is a directory (pass a JSON tool list, "
                    f"e.g. tools=demo/tools.json)")
    line = one_line_error(scons("board=host", f"tools={fifo}", f"build={tmp_path / 'b'}", check=False))
    assert line == (f"scons: error: tools={fifo} is not a regular file (pass a JSON tool list, "
                    f"e.g. tools=demo/tools.json)")
    line = one_line_error(scons("board=host", f"tools={tmp_path / 'nope.json'}", f"build={tmp_path / 'b'}",
                                check=False))
    assert "nope.json does not exist" in line
    assert not (tmp_path / "b").exists()


# ---- 21 and 27c: board files ------------------------------------------------------------

@pytest.mark.parametrize("edit, message", [
    # 27c: type names a user reads, and true is not an integer
    (lambda t: t.replace("ram_bytes = 4194304", 'ram_bytes = "lots"'), "memory.ram_bytes must be an integer"),
    (lambda t: t.replace("ram_bytes = 4194304", "ram_bytes = true"), "memory.ram_bytes must be an integer"),
    (lambda t: t.replace("stack_bytes = 16384", "stack_bytes = 1.5"), "'stack_bytes' must be an integer"),
    (lambda t: t.replace('os = "none"', "os = 3"), "'os' must be a string"),
    (lambda t: re.sub(r"(?m)^arch_flags = .*$", 'arch_flags = "-mthumb"', t), "'arch_flags' must be a list"),
    (lambda t: t.replace("[archive]", "[archive]\nmap_address = []"), "archive.map_address must be an integer"),
    # 21: regions that overlap, or end past the 32-bit address space, are refused at load
    (lambda t: t.replace("origin = 0x20000000", "origin = 0x00200000"),
     "regions FLASH (0x00000000..0x00400000) and RAM (from 0x00200000) overlap: each byte belongs to one region"),
    (lambda t: t.replace("origin = 0x21000000, length = 0x01000000", "origin = 0xFF000000, length = 0x02000000"),
     "region ARCHIVE (origin 0xFF000000, length 0x2000000) must have a positive length and end within the "
     "32-bit address space (at most 0x100000000)"),
    (lambda t: t.replace("length = 0x00400000, use = \"data\"", "length = 0, use = \"data\""),
     "region RAM (origin 0x20000000, length 0x0) must have a positive length"),
    (lambda t: t.replace('name = "RAM"', 'name = "FLASH"'), "two regions are named FLASH"),
    (lambda t: t.replace("origin = 0x20000000", "origin = true"), "needs name, origin, length and use"),
])
def test_board_file_values_are_refused_at_load_in_words(board_error, edit, message):
    assert message in board_error("watch-m4", edit)


def test_overlapping_regions_never_reach_the_images_step(board_error):
    """Before: accepted at load, then 'a loadable segment ... is outside region' at the
    images step, after a full build.  An inherited board's regions are checked too."""
    msg = board_error("watch-m4", lambda t: t.replace("origin = 0x21000000", "origin = 0x203F0000"))
    assert "regions RAM (0x20000000..0x20400000) and ARCHIVE (from 0x203F0000) overlap" in msg


# ---- 22: kernel families of another architecture ----------------------------------------

@pytest.mark.parametrize("board, family", [("host", "neon64"), ("host", "mdsp"), ("watch-m4", "x86"),
                                           ("rpi5", "armv6"), ("router-mt7621", "neon32")])
def test_emit_refuses_another_architectures_kernels(tmp_path, board, family):
    proc = emit(GOLDEN / "tiny" / "archive.cact", "-o", tmp_path / "gen", "--board", board, "--kernels", family)
    assert proc.returncode == 2, proc.stderr
    b = boards.load(board)
    assert proc.stderr == (f"error: --kernels {family} is {families.FAMILIES[family].arch} code and board {board} is "
                           f"{boards.board_arch(b)}: choose one of {', '.join(boards.board_families(b))}\n")
    assert "scalar" in boards.board_families(b) and family not in boards.board_families(b)
    assert not (tmp_path / "gen").exists()


def test_scons_refuses_another_architectures_kernels(tmp_path):
    line = one_line_error(scons("board=watch-m4", "kernels=x86", f"build={tmp_path / 'b'}", check=False))
    assert line == ("scons: error: kernels=x86 is x86-64 code and board watch-m4 is Arm Cortex-M: "
                    "choose one of mdsp, mve, scalar")
    assert not (tmp_path / "b" / "needle.elf").exists()


def test_every_board_builds_its_own_family():
    for name in boards.names():
        b = boards.load(name)
        assert boards.kernel_family(b) in boards.board_families(b), name
        assert boards.kernels_refusal(b, "scalar") is None


def test_board_file_with_another_architectures_family_is_refused(board_error):
    msg = board_error("watch-m4", lambda t: t.replace('kernels = "mdsp"', 'kernels = "neon64"'))
    assert msg.endswith("kernels = neon64 is aarch64 code and board watch-m4 is Arm Cortex-M: "
                        "choose one of mdsp, mve, scalar")


# ---- 16b: every JSON name a valid, collision-free C and C++ identifier --------------------

NASTY = ROOT / "host_tests" / "data" / "nasty_tools.json"
# pieces of names: keywords of C and C++, reserved spellings, characters C cannot spell,
# the companions' and the engine's own names, comment delimiters
PIECES = ["auto", "int", "class", "new", "delete", "_Bool", "bool", "true", "NULL", "size_t", "int64_t",
          "offsetof", "__x", "_X", "x", "X", "a-b", "a_b", "a b", "A B", "1st", "9", "é", "ü", "😀", "has_",
          "_cut", "_count", "args", "tools", "call", "e", "json", "NEEDLE_CALL_E_TOOLS", "needle_tool",
          "GRAMMAR_BIG", "NEEDLE_TOOLS_COUNT", "needle_call", "*/", "/*", "_", "-", " ", "??/", "\\"]


def render_header(tools: list, out: Path) -> Path:
    """gen/needle_tools.h for `tools` as the build renders it (scons_tool._tools_action)."""
    from generator.codegen import render
    from generator.tools import bindings
    from generator.tools.schema import compile_tools
    g = compile_tools(json.dumps(tools))
    names = {"version": "test", "source": "nasty.json", "count": len(g.tool_names), "names": g.tool_names,
             "json": g.tools_json, "json_bytes": len(g.tools_json.encode("utf-8", "surrogatepass")),
             "tools": bindings.plan(g), "embeddings": None}
    names.update({k: v for k, v in vars(bindings).items() if k.startswith("NB_")})
    out.mkdir(parents=True, exist_ok=True)
    (out / "needle_tools.h").write_text(render.render("needle_tools.h.j2", names), encoding="utf-8")
    return out / "needle_tools.h"


def compile_header(gen: Path) -> None:
    """The header, included by a C99 and a C++11 unit, compiles with -Wall -Werror."""
    for compiler, std, ext in (("gcc", "-std=c99", "c"), ("g++", "-std=c++11", "cc")):
        unit = gen / f"unit.{ext}"
        unit.write_text('#include "needle_tools.h"\n')
        proc = subprocess.run([compiler, std, "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{gen}",
                               f"-I{FIRMWARE_DIR / sources.LIB_DIR}", "-c", str(unit), "-o", os.devnull],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"{compiler} {std}:\n{proc.stderr[-3000:]}"


def random_tools(rng: random.Random) -> list:
    def name() -> str:
        return "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 3)))
    kinds = [{"type": "integer"}, {"type": "boolean"}, {"type": "number"}, {"type": "string", "maxLength": 3},
             {"type": "string"}, {"type": "array", "items": {"type": "integer"}}, {"type": "object"}]
    tools, seen = [], set()
    for _ in range(rng.randint(1, 6)):
        tname = name()
        if tname in seen:
            continue
        seen.add(tname)
        props = {}
        for _ in range(rng.randint(0, 8)):
            schema = dict(rng.choice(kinds))
            if rng.random() < 0.3:
                values = list(dict.fromkeys(name() for _ in range(rng.randint(1, 4))))
                schema = {"type": "string", "enum": values}
                if rng.random() < 0.5:
                    schema = {"type": "array", "items": schema}
            props[name()] = schema
        required = [k for k in props if rng.random() < 0.5]
        tools.append({"name": tname, "parameters": {"type": "object", "properties": props,
                                                    **({"required": required} if required else {})}})
    return tools


def test_nasty_names_make_a_header_gcc_and_gxx_compile(tmp_path):
    """`auto` (a watch's auto-brightness flag) made `bool auto;`; keywords of C and C++,
    reserved spellings, names equal but for characters C cannot spell, leading digits,
    non-ASCII, the companions' names and the engine's own identifiers all collided."""
    from generator.tools import bindings
    from generator.tools.schema import compile_tools
    tools = json.loads(NASTY.read_text(encoding="utf-8"))
    compile_header(render_header(tools, tmp_path / "gen").parent)
    plan = {t.name_json: t for t in bindings.plan(compile_tools(json.dumps(tools)))}
    auto = plan['"auto"']
    assert (auto.name, auto.enum, auto.struct) == ("auto_", "NEEDLE_TOOL_AUTO", "needle_auto_args")
    members = {json.loads(f.key_json): f for f in auto.fields}
    assert members["auto"].name == "auto_" and members["class"].name == "class_"
    assert (members["class"].has, members["class"].cut) == ("has_class", "class_cut")     # no "class__cut"
    assert {members[k].name for k in ("a-b", "a_b", "a b")} == {"a_b", "a_b_2", "a_b_3"}
    assert members["1st"].name == "n1st" and members["__x"].name == "x"
    assert plan['"call"'].fields[0].enum_names[0] != "NEEDLE_CALL_E_TOOLS"    # needle_tool_call.h's
    every = [t.enum for t in plan.values()] + [t.struct for t in plan.values()] + \
        [n for t in plan.values() for f in t.fields for n in f.enum_names + [f.enum_type] if n]
    assert len({n.lower() for n in every}) == len(every)


@pytest.mark.parametrize("seed", range(6))
def test_random_nasty_tool_lists_compile_as_c_and_cxx(tmp_path, seed):
    compile_header(render_header(random_tools(random.Random(seed)), tmp_path / "gen").parent)


def test_scons_builds_a_tool_property_named_auto(tmp_path):
    """The whole firmware (needle_tools.c too: its tables are named by position) builds with
    the nasty list and passes the post-link check."""
    build = tmp_path / "b"
    scons("board=host", f"archive={GOLDEN / 'tiny' / 'archive.cact'}", f"tools={NASTY}", "snapshot=0",
          f"build={build}")
    assert "bool auto_;" in (build / "gen" / "needle_tools.h").read_text(encoding="utf-8")
    assert (build / "needle").is_file() and (build / "memory.txt").is_file()


# ---- 19: an empty tool list ----------------------------------------------------------

def test_an_empty_tool_list_is_refused_in_one_line(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("[]\n")
    line = one_line_error(scons("board=host", f"tools={empty}", f"build={tmp_path / 'b'}", check=False))
    assert line == (f"scons: error: tools={empty} is an empty tool list: a built-in list needs at least one "
                    "tool (drop tools= to pass --tools FILE at run time)")
    assert not (tmp_path / "b").exists()


# ---- 15 and 18: the library's text level (needle_session.h, docs/api.md) ------------------

API_PROBE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "needle_session.h"
#include "needle_model.h"

static int count(void *user, uint32_t id, const char *text, size_t len)
{
    (void)id; (void)text; (void)len;
    ++*(int *)user;
    return 0;
}

static char *filled(size_t n) { char *s = malloc(n + 1); memset(s, 'a', n); s[n] = 0; return s; }

int main(int argc, char **argv)
{
    char err[512] = "";
    static needle_envelope env;
    needle_call_options opt;
    memset(&opt, 0, sizeof opt);
    if (needle_boot()) { fprintf(stderr, "%s\n", needle_error()); return 3; }
    if (!strcmp(argv[1], "generate0")) {
        int streamed = 0;
        int rc = needle_generate("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", 0, count, &streamed,
                                 err, sizeof err);
        printf("%d %d\n", rc, streamed);
        return 0;
    }
    const char *query = argv[2][0] == '-' ? NULL : filled((size_t)atoi(argv[2]));
    if (argc > 3) opt.system = filled((size_t)atoi(argv[3]));
    int rc = needle_call(query, &opt, &env, err, sizeof err);
    printf("%d %s\n", rc, err);
    return 0;
}
"""


@pytest.fixture(scope="module")
def api_probe(tmp_path_factory):
    """A host engine with the demo's built-in tools as a library, and API_PROBE linked to it."""
    root = tmp_path_factory.mktemp("api")
    exe = sdk_probe(root, API_PROBE, f"archive={GOLDEN / 'tiny' / 'archive.cact'}",
                    f"tools={ROOT / 'demo' / 'tools.json'}")
    return root, exe


def probe(exe: Path, *args) -> str:
    proc = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_generate_with_max_new_zero_streams_nothing(api_probe):
    """needle_generate(max_new = 0) streamed one token before."""
    assert probe(api_probe[1], "generate0") == "0 0"


def test_a_long_query_or_system_text_is_an_engine_error_naming_it(api_probe):
    """A query over 16 KB was blamed on the tool list ("output buffer of 16385 bytes is too
    small") with NEEDLE_CALL_E_TOOLS; docs/api.md says E_ENGINE (-1)."""
    _, exe = api_probe
    rc, msg = probe(exe, "call", 17000).split(" ", 1)
    assert rc == "-1" and msg.startswith("the query (17000 bytes) is too long: with this tool list the prompt "
                                         "holds ") and msg.endswith(" bytes of it (NEEDLE_TOK_MAX_TEXT 16384 bytes in all)")
    room = int(msg.split("holds ")[1].split(" ")[0])
    assert 0 < room < 16384 and "buffer" not in msg and "tools" not in msg
    rc, msg = probe(exe, "call", 10, 17000).split(" ", 1)
    assert rc == "-1" and msg.startswith("the query (10 bytes) and the system text (17000 bytes) are too long: ")
    assert f"holds {room - 30} bytes of them" in msg      # the system turn's markers take 30
    rc, msg = probe(exe, "call", "-").split(" ", 1)       # a NULL query: -1 too
    assert (rc, msg) == ("-1", "query is NULL")
    assert probe(exe, "call", 12).split(" ")[0] == "0"    # a query that fits still answers


def test_the_cli_blames_a_long_query_not_the_tools_file(api_probe, tmp_path):
    root, _ = api_probe
    needle = root / "needle"
    for args in (["--query", "a" * 17000], ["--tools", ROOT / "demo" / "tools.json", "--query", "a" * 17000],
                 ["--tools", ROOT / "demo" / "tools.json", "--query", "a" * 17000, "--raw"]):
        proc = subprocess.run([str(needle), *map(str, args)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("needle: error: the query (17000 bytes) is too long: ") \
            and proc.stderr.count("\n") == 1, proc.stderr


# ---- 16a: the benchmark on an archive whose window the demo tool prompt overflows ----------

def test_bench_measures_what_fits_and_says_what_it_skipped(tmp_path):
    """The tiny golden archive with max_seq_len 96: its tokenizer encodes the demo tool prompt
    to 126 tokens, past the window (the official exporter's medium geometry, max_seq_len 256,
    with its own tokenizer, overflowed alike), and `scons bench=1` exited 2 ("prompt too long")."""
    from bench import host
    from generator.archive import reader
    from host_tests import archive_edit
    short = tmp_path / "short.cact"
    short.write_bytes(archive_edit.patch_header((GOLDEN / "tiny" / "archive.cact").read_bytes(), "max_seq_len", 96))
    a = reader.read(str(short))
    assert host.demo_prompt_tokens(a) > 95 and host.ttft_skip(reader.read(str(GOLDEN / "tiny" / "archive.cact"))) is None
    proc = scons("board=host", "bench=1", f"archive={short}", f"build={tmp_path / 'b'}", "bench_tokens=64",
                 check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["tokens"] == 48 and result["prefill_tok_s"] > 0 and result["decode_tok_s"] > 0
    assert result["time_to_first_token_ms"] is None and result["prefill_tok_s_48"] > 0
    assert [ln for ln in lines if ln.startswith("skipped: ")] == [f"skipped: {w}" for w in result["skipped"]]
    assert result["skipped"] == [
        "--tokens 64: measured on 48 tokens of prefill and 48 of decode, all that max_seq_len 96 holds",
        f"time to first token: the demo tool prompt encodes to {host.demo_prompt_tokens(a)} tokens with this "
        "archive's tokenizer, and max_seq_len 96 holds at most 95 with one new token"]


@pytest.mark.skipif(not shutil.which("arm-linux-gnueabi-gcc"), reason="needs rpi-zero's cross compiler")
def test_neon32_on_a_core_without_neon_stops_with_the_familys_own_line(tmp_path):
    """Within one architecture the family's own #error names what is missing (as x86 without
    AVX2 does), not an always_inline mismatch deep in arm_neon.h."""
    proc = emit(GOLDEN / "tiny" / "archive.cact", "-o", tmp_path, "--board", "rpi-zero", "--kernels", "neon32")
    assert proc.returncode == 0, proc.stderr
    from generator.build import flags
    cc = subprocess.run(["arm-linux-gnueabi-gcc", *flags.compile_flags(boards.load("rpi-zero"), "neon32"), "-c",
                         str(tmp_path / "needle_kernels.c"), "-o", str(tmp_path / "k.o")],
                        capture_output=True, text=True)
    assert cc.returncode != 0 and "kernel family neon32 needs NEON (Advanced SIMD)" in cc.stderr
    assert "always_inline" not in cc.stderr
