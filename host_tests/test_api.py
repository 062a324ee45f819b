"""The text-level C API of the library (docs/api.md, needle_session.h): examples/api, built
outside SCons against the host SDK, streams the same text as `needle --prompt` (up to
<|im_end|>, where the API stops) and makes the same call and reply as `needle --query
--reply`; the API's errors are one line."""

from __future__ import annotations

import json
import subprocess

import pytest

from generator.archive import reader
from generator.archive.tokenizer import Tokenizer
from generator.build import sdk
from host_tests.scons_run import ROOT, scons

ARCHIVE = ROOT / "host_tests" / "golden" / "tiny" / "archive.cact"
TOOLS = ROOT / "demo" / "tools.json"
TIMINGS = ("prefill_tps", "decode_tps", "grammar_ms", "decode_ms")
CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    scons("board=host", f"archive={ARCHIVE}", f"build={root}", f"tools={TOOLS}", "lib=1")
    pc = root / sdk.SDK_DIR / "lib" / "pkgconfig"
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "needle"], env={"PKG_CONFIG_LIBDIR": str(pc)},
                           capture_output=True, text=True, check=True).stdout.split()
    exe = root / "api"
    subprocess.run(["gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                    str(ROOT / "examples" / "api" / "main.c")] + flags, check=True)
    return root, exe


@pytest.mark.parametrize("text", ["hi", "set a timer for ten minutes", "天气"])
def test_generate_streams_the_cli_text_up_to_im_end(api, text):
    root, exe = api
    prompt = CHAT.format(text)
    got = subprocess.run([str(exe), "generate", prompt], capture_output=True, text=True, check=True).stdout
    ids = subprocess.run([str(root / "needle"), "--prompt", prompt, "--max-new", "64", "--ids"], capture_output=True,
                         text=True, check=True).stdout.strip()
    ids = [int(x) for x in ids.split(",") if x]
    tok = Tokenizer.from_blob(reader.read(ARCHIVE.read_bytes()).tokenizer_blob())
    im_end = tok.piece_id("<|im_end|>")
    if im_end in ids:
        ids = ids[:ids.index(im_end)]
    assert got == tok.decode(ids) + "\n"


def test_call_and_reply_equal_the_cli(api):
    root, exe = api
    query, results = "set a timer for ten minutes", '{"ok":true,"minutes":10}'
    got = subprocess.run([str(exe), "call", query, results], capture_output=True, text=True, check=True)
    cli = subprocess.run([str(root / "needle"), "--query", query, "--force-call", "--max-new", "64", "--reply",
                          results], capture_output=True, text=True, check=True)
    a, b = [[json.loads(line) for line in p.stdout.splitlines()] for p in (got, cli)]
    # the example sends results only for a call it may act on (docs/grammar.md §5a); the CLI
    # sends --reply whatever the first envelope says
    assert len(b) == 2 and len(a) == (1 if a[0]["error_code"] else 2)
    for x, y in zip(a, b):
        assert {k: v for k, v in x.items() if k not in TIMINGS} == {k: v for k, v in y.items() if k not in TIMINGS}
    assert a[0]["prefix_tokens"] > 0        # the built-in list's snapshot serves the API too


def test_api_errors_are_one_line(api):
    _, exe = api
    bad = subprocess.run([bytes(exe), b"generate", b"caf\xe9"], capture_output=True)
    assert bad.returncode == 2 and bad.stderr == b"api: prompt is not valid UTF-8\n" and bad.stdout == b""
    long = subprocess.run([str(exe), "generate", "word " * 4000], capture_output=True, text=True)
    assert long.returncode == 2 and long.stderr.startswith("api: prompt too long") and long.stderr.count("\n") == 1
