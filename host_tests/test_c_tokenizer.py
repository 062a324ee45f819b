"""The generated C tokenizer (templates/needle_tokenizer.*.j2) and the C prompt renderer
(firmware/lib/needle_tool_prompt.c) against their Python references.

For each golden archive (tiny: 1k vocabulary, small: 8k) the templates are rendered into a
temporary directory, the archive is linked in with `.incbin` exactly as the firmware links
it (section .cact, 64-byte aligned, global `needle_cact`), and host_tests/c/tok_driver.c is
built with gcc and clang (`-std=c11 -Wall -Wextra -Werror -ffp-contract=off -O2`) and once
with ASan + UBSan.  Everything is compiled once per session.  Then:

* C ids == ``Tokenizer.encode`` on every line of host_tests/data/tokenizer_lines.txt, on
  inputs a line file cannot hold, on the largest accepted text and on random strings;
* C decode == ``Tokenizer.decode`` on those id lists and on 200 random id lists rich in
  BYTE pieces that form invalid UTF-8 (the driver also checks the streaming decoder and
  every truncation size against the full decode);
* C prompt == ``generator.prompt.render_prompt`` byte for byte on a set of tool files, and
  C errors equal the Python error messages (one line, "line L, column C").
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from generator.archive import reader
from generator.build import sources
from generator.paths import FIRMWARE_DIR
from generator.codegen import tokenizer_plan as pt
from tokenizer_sources import write_tokenizer_sources  # noqa: E402
from generator.errors import CactError
from generator.tools.prompt import minify_tools, render_prompt
from generator.archive.tokenizer import BYTE, CHAT_MARKERS, CONTROL, UNKNOWN, USER_DEFINED, Tokenizer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
GOLDEN = HERE / "golden"
DRIVER = HERE / "c" / "tok_driver.c"
PROMPT_C = [FIRMWARE_DIR / f for f in sources.PROMPT_SOURCES]     # the renderer and its JSON scanner
PROMPT_INCLUDE = FIRMWARE_DIR / sources.LIB_DIR
LINES_FILE = HERE / "data" / "tokenizer_lines.txt"
ARCHIVES = ("tiny", "small")
CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off", "-O2"]
VARIANTS = {
    "gcc": ("gcc", CFLAGS),
    "clang": ("clang", CFLAGS),
    "asan": ("gcc", CFLAGS[:-1] + ["-O1", "-g", "-fno-omit-frame-pointer",
                                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]),
}
RUN_ENV = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1")

def _lines() -> list:
    text = LINES_FILE.read_bytes().decode("utf-8")
    assert text.endswith("\n")
    return text[:-1].split("\n")


LINES = _lines()

# The worked example of docs/spec/prompt-and-tokenizer.md section 4.2.
TOOLS_42 = [{"name": "get_weather", "description": "Get the current weather for a city.",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}]
QUERY_42 = "what's it like in Lagos right now?"
PROMPT_42 = ('<|im_start|>user\n<tools>[{"name":"get_weather","description":"Get the current '
             'weather for a city.","parameters":{"type":"object","properties":{"city":'
             '{"type":"string"}},"required":["city"]}}]</tools>\nwhat\'s it like in Lagos '
             'right now?<|im_end|>\n<|im_start|>assistant\n')
TARGET_42 = ("<think>\n'Lagos' -> city\n</think>\n<tool_call>"
             '[{"name":"get_weather","arguments":{"city":"Lagos"}}]</tool_call><|im_end|>')

EXTRA_TEXTS = [
    "", " ", "  ", "a\nb", "a\r\nb\r", "\0", "x\0y\0", "\n\n\n", "\t \t", "\u2028\u2029\x85",
    PROMPT_42, TARGET_42, PROMPT_42 + TARGET_42,
    " <|im_start|>", "<|im_start|><|im_end|>", "<tool_call><tool_call>",
    "</tool_result></tool_result>", "▁<think>▁", "▁▁▁", "<|im_start|" * 5,
    "日本語のテキスト " * 40, "🎉" * 100, "é" * 3000,
]


# ------------------------------------------------------------------------ builds

class Build:
    def __init__(self, name: str, directory: Path, plan: dict, tok: Tokenizer, board_runner):
        self.name, self.dir, self.plan, self.tok = name, directory, plan, tok
        self.board_runner = board_runner      # the drivers run on the host board
        self.exe: dict[str, Path] = {}
        self.errors: dict[str, str] = {}

    def run(self, variant: str, *args, timeout: float = 60) -> str:
        if variant in self.errors:
            pytest.skip(self.errors[variant])
        proc = self.board_runner("host", self.exe[variant]).run(args, env=RUN_ENV, timeout=timeout, text=False)
        assert proc.returncode == 0, (f"{variant} driver failed ({proc.returncode}):\n"
                                      + proc.stderr.decode("utf-8", "replace")[-3000:])
        assert not proc.stderr, proc.stderr.decode("utf-8", "replace")[-3000:]
        return proc.stdout.decode("ascii")


def _render(name: str, directory: Path, max_text: int = pt.DEFAULT_MAX_TEXT):
    path = GOLDEN / name / "archive.cact"
    archive = reader.read(path)
    return archive, write_tokenizer_sources(path, directory, max_text)


@pytest.fixture(scope="session")
def builds(tmp_path_factory, board_runner) -> dict:
    """Render, then compile every (archive, variant) pair in parallel; once per session."""
    out, procs = {}, []
    for name in ARCHIVES:
        d = tmp_path_factory.mktemp(f"ctok-{name}")
        archive, plan = _render(name, d)
        b = out[name] = Build(name, d, plan, Tokenizer(archive.tokenizer), board_runner)
        for variant, (cc, flags) in VARIANTS.items():
            if shutil.which(cc) is None:
                b.errors[variant] = f"{cc} is not installed"
                continue
            exe = d / f"tok_driver_{variant}"
            cmd = [cc, *flags, "-I", str(d), "-I", str(PROMPT_INCLUDE), "-o", str(exe),
                   str(DRIVER), str(d / "needle_tokenizer.c"), *map(str, PROMPT_C), str(d / "cact.S")]
            procs.append((b, variant, exe, cmd, subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
    for b, variant, exe, cmd, proc in procs:
        log = proc.communicate()[0].decode("utf-8", "replace")
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{log}"
        assert not log.strip(), f"compiler output for {variant}:\n{log}"  # warning-free
        b.exe[variant] = exe
    return out


@pytest.fixture(params=[(a, v) for a in ARCHIVES for v in VARIANTS],
                ids=lambda p: f"{p[0]}-{p[1]}")
def build_variant(request, builds):
    name, variant = request.param
    return builds[name], variant


# ------------------------------------------------------------------------ inputs

def _random_texts(seed: int, count: int) -> list:
    rng = random.Random(seed)
    pool = (list("abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,;:!?'\"(){}[]<>|/_-\t\n\r")
            + ["é", "ü", "ß", "東", "京", "語", "🎉", "👍🏽", "\u200d", "\u0301", "\ufeff", "▁",
               "\0", "\x7f", "\U00020000", "ש", "ب", "क"]
            + list(CHAT_MARKERS) + ["<|im_st", "art|>", "<think", "</", "<0x41>", "<s>", "<unk>"])
    texts = []
    for _ in range(count):
        n = rng.choice([1, 2, 3, 5, 10, 40, 200])
        texts.append("".join(rng.choice(pool) for _ in range(n)))
    # long segments: the heap works on thousands of symbols
    texts.append("".join(rng.choice(pool[:70]) for _ in range(6000)))
    return texts


def _encode_inputs(max_text: int) -> list:
    texts = LINES + EXTRA_TEXTS + _random_texts(7, 300)
    rng = random.Random(11)
    alphabet = "the quick brown fox jumps over lazy dogs 0123456789 {}\":,"
    big = "".join(rng.choice(alphabet) for _ in range(max_text))
    texts += [big, big[:-2] + "é", " " * max_text, "a" * max_text]
    return texts


def _write_hex_lines(path: Path, items) -> None:
    path.write_text("".join(bytes(x).hex() + "\n" for x in items))


def _encode_c(build: Build, variant: str, texts: list, tag: str) -> list:
    f = build.dir / f"enc-{tag}-{variant}.txt"
    _write_hex_lines(f, [t.encode("utf-8") for t in texts])
    out = build.run(variant, "encode", f).split("\n")
    assert out[-1] == "" and len(out) == len(texts) + 1
    return out[:-1]


def _ids_line(ids) -> str:
    return " ".join(map(str, ids))


# ------------------------------------------------------------------------ plan

@pytest.mark.parametrize("name", ARCHIVES)
def test_plan_tables(name):
    archive = reader.read(GOLDEN / name / "archive.cact")
    p = pt.plan(archive)
    tok = archive.tokenizer
    data = archive.data
    n = tok.n_pieces
    assert p.n_pieces == n and len(p.rec_offsets) == n + 1
    assert p.blob_offset == archive.records[-1].offset
    surfaces = []
    for i in range(n):
        start = p.blob_offset + p.rec_offsets[i]
        length = p.rec_offsets[i + 1] - p.rec_offsets[i] - 7
        surfaces.append(bytes(data[start:start + length]))
        assert surfaces[-1] == tok.pieces[i][2].encode("utf-8")
        assert data[start - 3] == tok.pieces[i][1]
    order = [surfaces[i] for i in p.sorted_ids]
    assert order == sorted(surfaces) and sorted(p.sorted_ids) == list(range(n))
    for b in range(256):
        run = order[p.first_index[b]:p.first_index[b + 1]]
        assert all(s[0] == b for s in run)
    assert list(p.markers[:3]) == [13, 12, 4]  # </tool_result>, <tool_result>, <|im_start|>
    lens = [len(tok.pieces[i][2]) for i in p.markers]
    assert lens == sorted(lens, reverse=True)
    assert sorted(p.markers) == [i for i in range(n) if tok.pieces[i][1] == USER_DEFINED]
    assert [surfaces[p.byte_ids[b]] for b in range(256)] == [
        f"<0x{b:02X}>".encode() for b in range(256)]
    assert p.id_type == "uint16_t" and p.pos_type == "uint16_t"
    # the C table: offsets less the 7-byte heads before them, which fit 16 bits for 8k pieces
    assert [r - 7 * i for i, r in enumerate(p.rec_offsets)] == list(p.rec_packed)
    assert p.off_type == "uint16_t"
    if name == "small":  # the plain offsets would need 32 bits
        assert p.rec_offsets[-1] > 0xFFFF


def test_plan_rejects_bad_max_text():
    archive = reader.read(GOLDEN / "tiny" / "archive.cact")
    with pytest.raises(CactError):
        pt.plan(archive, max_text=0)
    assert pt.plan(archive, max_text=70000).pos_type == "uint32_t"


# ------------------------------------------------------------------------ encode / decode

def test_encode_matches_python(build_variant):
    build, variant = build_variant
    texts = _encode_inputs(build.plan.max_text)
    got = _encode_c(build, variant, texts, "all")
    bad = []
    for text, line in zip(texts, got):
        want = _ids_line(build.tok.encode(text))
        if line != want:
            bad.append((text[:60], line[:80], want[:80]))
    assert not bad, f"{len(bad)} of {len(texts)} differ, first: {bad[:3]}"


def test_encode_errors(build_variant):
    build, variant = build_variant
    assert build.run(variant, "limits") == "OK\n"
    texts = [b"abc\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x96",
             b"\xf0\x9f\x8e", b"ok \x80", b"a" * (build.plan.max_text + 1)]
    f = build.dir / f"enc-bad-{variant}.txt"
    _write_hex_lines(f, texts)
    assert build.run(variant, "encode", f).split("\n")[:-1] == ["E-2"] * 7 + ["E-1"]


def _random_id_lists(tok: Tokenizer, seed: int, count: int) -> list:
    rng = random.Random(seed)
    n = tok.n_pieces
    byte_ids = {}
    normal = []
    for i in range(n):
        t = tok.piece_type(i)
        if t == BYTE:
            byte_ids[int(tok.id_to_piece(i)[3:5], 16)] = i
        elif t not in (CONTROL, UNKNOWN):
            normal.append(i)
    special = [i for i in range(n) if tok.piece_type(i) in (CONTROL, UNKNOWN)]
    tricky = [0x80, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEF, 0xF0, 0xF1, 0xF4,
              0xF5, 0xFF, 0xA0, 0x9F, 0x90, 0x8F, 0x20, 0x41, 0xE2, 0x96, 0x81]
    lists = []
    for k in range(count):
        ids = []
        for _ in range(rng.choice([1, 2, 4, 8, 30])):
            r = rng.random()
            if r < 0.45:
                ids.append(byte_ids[rng.choice(tricky) if rng.random() < 0.7 else rng.randrange(256)])
            elif r < 0.85:
                ids.append(rng.choice(normal))
            else:
                ids.append(rng.choice(special))
        lists.append(ids)
    # every maximal-subpart shape, and leading-space rules
    for seq in (b"\xe0\x80", b"\xf0\x90\x80", b"\xed\xa0\x80", b"\xf4\x90", b"\xc2", b"\xe2\x96",
                b"\xe2\x96\x81x", b" x", b"  x", b"\xe2\x96\x81\xe2\x96\x81", b"\xff "):
        lists.append([byte_ids[b] for b in seq])
    return lists


def test_decode_matches_python(build_variant):
    build, variant = build_variant
    tok = build.tok
    lists = [tok.encode(t) for t in LINES + EXTRA_TEXTS] + _random_id_lists(tok, 5, 200)
    lists.append([])
    f = build.dir / f"dec-{variant}.txt"
    f.write_text("".join(_ids_line(ids) + "\n" for ids in lists))
    got = build.run(variant, "decode", f).split("\n")[:-1]
    assert len(got) == len(lists)
    bad = [(ids, line) for ids, line in zip(lists, got)
           if line != tok.decode(ids).encode("utf-8").hex()]
    assert not bad, f"{len(bad)} differ, first: {bad[:3]}"


@pytest.mark.parametrize("name", ARCHIVES)
def test_piece_queries_match_blob(builds, name):
    """needle_tok_piece / _type / _score read the blob in place, byte by byte."""
    build = builds[name]
    tok = build.tok
    want = "".join(f"{tok.piece_type(i)} {struct.unpack('<I', struct.pack('<f', tok.piece_score(i)))[0]:08x} "
                   f"{tok.id_to_piece(i).encode().hex()}\n" for i in range(tok.n_pieces))
    assert build.run("gcc", "pieces") == want


def test_decode_ignores_out_of_range_ids(builds):
    build = builds["tiny"]
    tok = build.tok
    ids = tok.encode("hello world")
    f = build.dir / "dec-range.txt"
    f.write_text(_ids_line(ids[:1] + [tok.n_pieces, 4294967295] + ids[1:]) + "\n")
    assert build.run("gcc", "decode", f) == "hello world".encode().hex() + "\n"


def test_encode_speed(builds):
    """A 4 KB prompt encodes in a few milliseconds at most (measured: see docs/prompt.md section 3)."""
    build = builds["small"]
    tools = [dict(TOOLS_42[0], name=f"tool_{i}", description=f"Tool number {i} does thing {i}.")
             for i in range(25)]
    prompt = render_prompt(json.dumps(tools), "what's it like in Lagos right now?")
    prompt = prompt[:4096]
    f = build.dir / "bench.txt"
    f.write_bytes(prompt.encode("utf-8"))
    out = build.run("gcc", "bench", f, 20).split()
    fields = dict(zip(out[::2], out[1::2]))
    assert int(fields["ids"]) == len(build.tok.encode(prompt))
    assert float(fields["ns_per_encode"]) < 50e6


# ------------------------------------------------------------------------ prompt

def _tool_cases() -> list:
    """(label, tools text, query, system) rendered by both C and Python."""
    nested = [{"name": "book", "description": "Book a trip.", "parameters": {
        "type": "object", "properties": {
            "legs": {"type": "array", "items": {"type": "object", "properties": {
                "from": {"type": "string"}, "to": {"type": "string"},
                "when": {"type": "object", "properties": {"date": {"type": "string",
                                                                    "format": "date"}}}}}},
            "flags": {"type": "array", "items": {"type": "boolean"}, "minItems": 0},
            "empty": {}, "none": [], "nul": None, "t": True, "f": False},
        "required": ["legs"]}}]
    unicode_tools = ('[{"name":"météo","description":"Wetter in 東京 🎉 — \\u00e9\\u00C9 '
                     '\\ud83c\\udf89 lone \\ud800 and \\udc00x, \\u2028 sep, \\u007f del",'
                     '"parameters":{"type":"object","properties":{"ville":{"type":"string",'
                     '"enum":["Zürich","São Paulo","Αθήνα"]}}}}]')
    escapes = ('[ { "name" : "esc" , "description" : "quote \\" back \\\\ slash \\/ nl \\n '
               'tab \\t cr \\r bs \\b ff \\f ctl \\u0001 \\u001f \\u001F nul \\u0000 raw \x7f" } ]')
    numbers = ('[{"name":"n","parameters":{"type":"object","properties":{"x":{"type":"number",'
               '"minimum":1.50,"maximum":1e5,"multipleOf":1E+5,"a":-0,"b":0.000,"c":-12.5e-3,'
               '"d":12345678901234567890,"e":[0,-1,2.0E-0]}}}}]')
    deep = "[{\"a\":" + "[" * 62 + "1" + "]" * 62 + "}]"  # 64 levels in all
    crlf = json.dumps(TOOLS_42, indent=4).replace("\n", "\r\n") + "\r\n"
    return [
        ("4.2", json.dumps(TOOLS_42, indent=2), QUERY_42, None),
        ("4.2-system", json.dumps(TOOLS_42), QUERY_42, "  date: 2025-01-01 Wed 09:00 \n"),
        ("4.2-blank-system", json.dumps(TOOLS_42), QUERY_42, " \t\u3000\n"),
        ("unicode", unicode_tools, "Quel temps fait-il à Zürich ? 🌧", "\u3000 réponds bref\u2029"),
        ("escapes", escapes, "q with <tool_call> inside", ""),
        ("nested", json.dumps(nested, indent=1), "book it", None),
        ("numbers", numbers, "", None),
        ("deep", deep, "deep", None),
        ("crlf-tabs", crlf.replace("    ", "\t"), "x", "sys"),
        ("empty-list", " [ ] ", "hello", None),
        ("many", json.dumps([dict(TOOLS_42[0], name=f"t{i}") for i in range(30)]), "go", None),
    ]


ERROR_CASES = [
    ('{"name": "x"}', "line 1, column 1: the top-level value must be an array of tool objects"),
    ("[1]", "line 1, column 2: tool #1 is not a JSON object"),
    ('[{},\n "x"]', "line 2, column 2: tool #2 is not a JSON object"),
    ("[{},]", "line 1, column 5: expected a value"),
    ('[{"a":1,}]', "line 1, column 9: expected a string key"),
    ('[{1:2}]', "line 1, column 3: expected a string key or '}'"),
    ('[{"a":1]', "line 1, column 8: expected ',' or '}'"),
    ('[{"a":[1}]}]', "line 1, column 9: expected ',' or ']'"),
    ('[{"a" 1}]', "line 1, column 7: expected ':'"),
    ('[{"a":01}]', "line 1, column 8: expected ',' or '}'"),
    ('[{"a":1.}]', "line 1, column 9: invalid number"),
    ('[{"a":-}]', "line 1, column 8: invalid number"),
    ('[{"a":1e}]', "line 1, column 9: invalid number"),
    ('[{"a":+1}]', "line 1, column 7: expected a value"),
    ('[{"a":.5}]', "line 1, column 7: expected a value"),
    ('[{"a":tru}]', "line 1, column 7: invalid literal"),
    ('[{"a":NaN}]', "line 1, column 7: expected a value"),
    ('[{"a":Infinity}]', "line 1, column 7: expected a value"),
    ('[{"a":"x\\qy"}]', "line 1, column 9: invalid escape"),
    ('[{"a":"\\u12G4"}]', "line 1, column 8: invalid \\u escape"),
    ('[{"a":"\\u12"}]', "line 1, column 8: invalid \\u escape"),
    ('[{"a":"abc', "line 1, column 7: unterminated string"),
    ('[{"a":"abc\\', "line 1, column 7: unterminated string"),
    ('[{"a":"a\nb"}]', "line 1, column 9: unescaped control character U+000A in string"),
    ('[{"a":"a\tb"}]', "line 1, column 9: unescaped control character U+0009 in string"),
    ('[\n  {\n    "é東🎉": 1,\n    "x": ?\n  }\n]', "line 4, column 10: expected a value"),
    ('[{"é東🎉":1,"k":[1,2,3]}] x', "line 1, column 25: extra data after the JSON value"),
    ('[{"a":1}]]', "line 1, column 10: extra data after the JSON value"),
    ("", "line 1, column 1: unexpected end of input"),
    ("   \n  ", "line 2, column 3: unexpected end of input"),
    ("[", "line 1, column 2: unexpected end of input"),
    ('[{"a":1', "line 1, column 8: unexpected end of input"),
    ('[{"a":-', "line 1, column 8: unexpected end of input"),
    ('[{"a":1.', "line 1, column 9: unexpected end of input"),
    ('[{"a":1e+', "line 1, column 10: unexpected end of input"),
    ('[{"a"', "line 1, column 6: unexpected end of input"),
    ('[{"a":1,"b":2,"a":3}]', "line 1, column 15: duplicate key in object"),
    ('[{"a":{"b":1,"c":{"b":2},"b":3}}]', "line 1, column 26: duplicate key in object"),
    ('[{"\\u00e9":1,"é":2}]', "line 1, column 14: duplicate key in object"),
    ("[{\"a\":" + "[" * 63 + "]" * 63 + "}]", "line 1, column 69: nesting deeper than 64 levels"),
    ("\ufeff[]", "line 1, column 1: expected a value"),
    ("'[]'", "line 1, column 1: expected a value"),
]


def _c_prompt(build: Build, variant: str, tools: bytes, query: str, system, tag: str) -> str:
    f = build.dir / f"tools-{tag}-{variant}.json"
    f.write_bytes(tools)
    shex = "-" if system is None else system.encode("utf-8").hex()
    return build.run(variant, "prompt", f, query.encode("utf-8").hex() or "", shex)


def test_python_prompt_worked_example():
    assert render_prompt(json.dumps(TOOLS_42, indent=2), QUERY_42) == PROMPT_42
    assert render_prompt(json.dumps(TOOLS_42), QUERY_42, "  be brief \n").startswith(
        "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n<tools>")
    assert render_prompt(json.dumps(TOOLS_42), QUERY_42, " \u3000\n") == PROMPT_42


def test_python_prompt_rejects_what_c_cannot_receive():
    for args in (("[]", "a\0b"), ("[]", "q", "s\0"), ("[]", "\ud800"), ("[]", 5)):
        with pytest.raises(CactError):
            render_prompt(*args)
    with pytest.raises(CactError, match="line 1, column 8: invalid UTF-8"):
        render_prompt('[{"a":"\ud800"}]', "q")  # a raw lone surrogate in the str


def test_python_minify_equals_json_dumps():
    """Without floats, TOOLS_JSON is exactly json.dumps(json.loads(text)) compact; with
    floats the numbers stay as written."""
    for label, text, _q, _s in _tool_cases():
        if label in ("numbers", "unicode"):
            continue
        assert minify_tools(text) == json.dumps(json.loads(text), separators=(",", ":"),
                                                ensure_ascii=False), label
    assert minify_tools('[{"a": 1.50, "b": 1e5, "c": -0}]') == '[{"a":1.50,"b":1e5,"c":-0}]'
    rng = random.Random(3)
    for _ in range(200):
        obj = [_random_tool(rng, "x") for _ in range(rng.randrange(3))]
        for indent in (None, 2):
            for ascii_ in (False, True):
                text = json.dumps(obj, indent=indent, ensure_ascii=ascii_)
                # floats came from repr, so "verbatim" equals json.dumps' own output
                assert minify_tools(text) == json.dumps(obj, separators=(",", ":"),
                                                        ensure_ascii=False)


def _random_tool(rng: random.Random, name: str) -> dict:
    return {"name": name, "parameters": _random_json(rng, 4), "extra": _random_json(rng, 3)}


def _random_json(rng: random.Random, depth: int):
    kind = rng.randrange(7 if depth > 0 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randrange(-10**20, 10**20)
    if kind == 2:
        return rng.choice([1.5, -0.25, 1e-05, 1e100, 3.141592653589793, 0.0, -0.0])
    if kind == 3 or kind == 4:
        pool = 'ab"\\/\n\t\x00\x1f\x7fé東🎉\u2028 '
        return "".join(rng.choice(pool) for _ in range(rng.randrange(6)))
    if kind == 5:
        return [_random_json(rng, depth - 1) for _ in range(rng.randrange(4))]
    return {f"k{rng.randrange(5)}é"[:rng.randrange(1, 4)]: _random_json(rng, depth - 1)
            for _ in range(rng.randrange(4))}


@pytest.mark.parametrize("text,message", ERROR_CASES, ids=range(len(ERROR_CASES)))
def test_python_prompt_errors(text, message):
    with pytest.raises(CactError) as info:
        render_prompt(text, "q")
    assert str(info.value) == "tools JSON: " + message


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_c_prompt_matches_python(builds, variant):
    build = builds["tiny"]  # the renderer does not depend on the archive
    for label, tools, query, system in _tool_cases():
        want = render_prompt(tools, query, system)
        got = _c_prompt(build, variant, tools.encode("utf-8"), query, system, label)
        assert got == "OK " + want.encode("utf-8").hex() + "\n", label
    # random tool lists
    rng = random.Random(9)
    for k in range(30):
        obj = [_random_tool(rng, f"t{k}") for _ in range(rng.randrange(1, 3))]
        text = json.dumps(obj, indent=rng.choice([None, 1]), ensure_ascii=rng.random() < 0.5)
        want = render_prompt(text, "q")
        assert _c_prompt(build, variant, text.encode(), "q", None, f"r{k}") == \
            "OK " + want.encode("utf-8").hex() + "\n", text


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_c_prompt_errors_match_python(builds, variant):
    build = builds["tiny"]
    for k, (text, message) in enumerate(ERROR_CASES):
        got = _c_prompt(build, variant, text.encode("utf-8"), "q", None, f"e{k}")
        assert got == f"ERR -1 tools JSON: {message}\n", text
    # C-only inputs: bytes that are not UTF-8
    for k, (raw, message) in enumerate([
            (b'[{"a":"x\xffy"}]', "line 1, column 9: invalid UTF-8"),
            (b'[{"a":"\xed\xa0\x80"}]', "line 1, column 8: invalid UTF-8"),
            (b'[{"a":"\xc3"}]', "line 1, column 8: invalid UTF-8"),
            (b"[\xff]", "line 1, column 2: expected a value")]):
        got = _c_prompt(build, variant, raw, "q", None, f"u{k}")
        assert got == f"ERR -1 tools JSON: {message}\n"
    f = build.dir / f"tools-ok-{variant}.json"
    f.write_text(json.dumps(TOOLS_42))
    assert build.run(variant, "prompt", f, "ff", "-") == \
        "ERR -3 query is not valid UTF-8 (byte 0)\n"
    assert build.run(variant, "prompt", f, "61", "41c3") == \
        "ERR -3 system is not valid UTF-8 (byte 1)\n"


def test_tokenized_prompt_starts_as_specified(builds):
    """docs/spec/prompt-and-tokenizer.md 4.3: the encoded prompt begins with "▁" then <|im_start|>."""
    build = builds["small"]
    prompt = render_prompt(json.dumps(TOOLS_42), QUERY_42)
    ids = [int(x) for x in _encode_c(build, "gcc", [prompt], "p")[0].split()]
    tok = build.tok
    assert ids[:2] == [tok.piece_id("\u2581"), 4]
    assert tok.decode(ids) == prompt


# ------------------------------------------------------------------------ portability

CROSS_TARGETS = ["mips-linux-gnu", "thumbv7m-none-eabi"]


def test_cross_compiles_freestanding(builds, tmp_path):
    """The tokenizer and the prompt renderer build warning-free for big-endian MIPS and
    Cortex-M with nothing but <stdint.h>, <stddef.h>, <limits.h> and the four <string.h>
    functions they use (compile only: there is no emulator here)."""
    clang = shutil.which("clang")
    if clang is None:
        pytest.skip("clang is not installed")
    inc = tmp_path / "include"
    inc.mkdir()
    (inc / "string.h").write_text(
        "#include <stddef.h>\nvoid *memcpy(void *, const void *, size_t);\n"
        "void *memset(void *, int, size_t);\nint memcmp(const void *, const void *, size_t);\n"
        "size_t strlen(const char *);\n")
    units = [(p, PROMPT_INCLUDE) for p in PROMPT_C] + [
        (builds[name].dir / "needle_tokenizer.c", builds[name].dir) for name in ARCHIVES]
    procs = []
    for target in CROSS_TARGETS:
        for k, (src, include) in enumerate(units):
            cmd = [clang, f"--target={target}", "-ffreestanding", "-nostdlibinc",
                   "-isystem", str(inc), *CFLAGS, "-I", str(include), "-c", str(src),
                   "-o", str(tmp_path / f"{target}-{k}.o")]
            procs.append((target, src, subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                                         stderr=subprocess.STDOUT)))
    for target, src, proc in procs:
        log = proc.communicate()[0].decode("utf-8", "replace")
        assert proc.returncode == 0 and not log.strip(), (target, str(src), log)


# ------------------------------------------------------------------------ synthetic vocabularies

# Configurations the golden tokenizers do not reach: no dummy prefix, no byte fallback
# (unk), no markers, markers containing "▁", many equal scores (leftmost tie-break), merges
# into CONTROL/UNKNOWN surfaces, a tiny and a 32-bit max_text.
SYNTH_CONFIGS = {
    "dummy-bytes-markers": dict(dummy=1, byte_fallback=1, markers=True, max_text=300),
    "nodummy-unk-markers": dict(dummy=0, byte_fallback=0, markers=True, max_text=4096),
    "dummy-unk-nomarkers": dict(dummy=1, byte_fallback=0, markers=False, max_text=70000),
    "nodummy-bytes-nomarkers": dict(dummy=0, byte_fallback=1, markers=False, max_text=1000),
}
SYNTH_ALPHABET = ["a", "b", "c", "\u2581", "é", "<", ">", "東"]


def _synth_tokenizer(cfg: dict, vocab: int, seed: int):
    from generator.archive.tokenizer import NORMAL, TokenizerData
    rng = random.Random(seed)
    pieces = [(0.0, CONTROL, "<pad>"), (0.0, CONTROL, "</s>"), (0.0, CONTROL, "<s>"),
              (0.0, UNKNOWN, "<unk>")]
    if cfg["markers"]:
        for m in ("<a>", "<a>b", "\u2581<", "é\u2581", "<|x|>", "<a"):
            pieces.append((0.0, USER_DEFINED, m))
    if cfg["byte_fallback"]:
        pieces += [(0.0, BYTE, f"<0x{b:02X}>") for b in range(256)]
    seen = {p[2] for p in pieces}
    scores = [0.0, -1.0, -1.0, -2.0, -2.5, -3.0, -0.0]  # many ties
    for ch in SYNTH_ALPHABET[:-1]:  # "東" is deliberately not a piece
        pieces.append((rng.choice(scores), NORMAL, ch))
        seen.add(ch)
    for t, s in ((CONTROL, "bc"), (UNKNOWN, "cb"), (CONTROL, "aa\u2581")):
        pieces.append((rng.choice(scores), t, s))
        seen.add(s)
    while len(pieces) < vocab:
        s = "".join(rng.choice(SYNTH_ALPHABET[:-1]) for _ in range(rng.randint(2, 6)))
        if s not in seen:
            seen.add(s)
            pieces.append((rng.choice(scores) - rng.randrange(3) * 0.5, NORMAL, s))
    return TokenizerData(vocab, 0, 1, 2, 3, cfg["dummy"], cfg["byte_fallback"], pieces)


@pytest.fixture(scope="session")
def synth_builds(tmp_path_factory, tiny_bytes, edit, board_runner) -> dict:
    """The tiny archive with four synthetic 1024-piece tokenizers, each rendered and built
    (gcc; the first also with clang and the sanitizers)."""
    from generator.archive.tokenizer import _pack_blob
    vocab = reader.read(tiny_bytes).header["vocab"]
    out, procs = {}, []
    for k, (label, cfg) in enumerate(SYNTH_CONFIGS.items()):
        d = tmp_path_factory.mktemp(f"ctok-synth-{label}")
        path = d / "archive.cact"
        blob = _pack_blob(_synth_tokenizer(cfg, vocab, 100 + k))
        path.write_bytes(edit.with_tokenizer_blob(tiny_bytes, blob))
        archive = reader.read(path)
        plan = write_tokenizer_sources(path, d, cfg["max_text"])
        b = out[label] = Build(label, d, plan, Tokenizer(archive.tokenizer), board_runner)
        for variant in (["gcc"] if k else ["gcc", "clang", "asan"]):
            cc, flags = VARIANTS[variant]
            if shutil.which(cc) is None:
                b.errors[variant] = f"{cc} is not installed"
                continue
            exe = d / f"tok_driver_{variant}"
            cmd = [cc, *flags, "-I", str(d), "-I", str(PROMPT_INCLUDE), "-o", str(exe),
                   str(DRIVER), str(d / "needle_tokenizer.c"), *map(str, PROMPT_C), str(d / "cact.S")]
            procs.append((b, variant, exe, cmd, subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
    for b, variant, exe, cmd, proc in procs:
        log = proc.communicate()[0].decode("utf-8", "replace")
        assert proc.returncode == 0 and not log.strip(), f"{' '.join(cmd)}\n{log}"
        b.exe[variant] = exe
    return out


@pytest.mark.parametrize("label", list(SYNTH_CONFIGS))
def test_synthetic_vocabularies(synth_builds, label):
    build = synth_builds[label]
    tok = build.tok
    max_text = build.plan.max_text
    rng = random.Random(sum(map(ord, label)))
    pool = ["a", "b", "c", " ", "\u2581", "é", "<", ">", "東", "z", "\n", "<a>", "<|x|>", "|"]
    texts = ["", " ", "  a", "東", "aaaaaaaa", "abcabcabc", " <a>b <a", "é <"]
    for _ in range(400):
        texts.append("".join(rng.choice(pool) for _ in range(rng.choice([1, 3, 8, 30, 120]))))
    texts = [t for t in texts if len(t.encode()) <= max_text]
    texts.append("a" * max_text)
    texts.append("ab" * (max_text // 2) + "a" * (max_text % 2))
    lists = [tok.encode(t) for t in texts]
    for _ in range(200):
        lists.append([rng.randrange(tok.n_pieces) for _ in range(rng.choice([1, 3, 10]))])
    f = build.dir / "dec.txt"
    f.write_text("".join(_ids_line(ids) + "\n" for ids in lists))
    for variant in build.exe:
        got = _encode_c(build, variant, texts + ["a" * (max_text + 1)], "synth")
        want = [_ids_line(ids) for ids in lists[:len(texts)]] + ["E-1"]
        bad = [(t[:40], g[:60], w[:60]) for t, g, w in zip(texts, got, want) if g != w]
        assert not bad, (variant, len(bad), bad[:3])
        assert build.run(variant, "limits") == "OK\n"
        dec = build.run(variant, "decode", f).split("\n")[:-1]
        bad = [ids for ids, line in zip(lists, dec) if line != tok.decode(ids).encode().hex()]
        assert not bad, (variant, bad[:3])
