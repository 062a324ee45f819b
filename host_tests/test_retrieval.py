"""Tool retrieval (issue 10 item 5; docs/grammar.md, "Retrieval"): with 12 tools, an engine
with the embedding head renders the five the head picks for the query.  The five chosen, the
call and the whole envelope equal the Python twin's (generator/tools/retrieval.py), and the
embeddings behind them are bit-identical (the probe-head goldens check the head itself; here
a different pick would change `retrieved`).  Without the head every tool is rendered."""

from __future__ import annotations

import json
import re
import subprocess

import jsonschema
import pytest

from generator.archive import reader
from generator.archive.tokenizer import Tokenizer
from generator.model import reference
from generator.tools.decode import Session
from generator.tools.prompt import render_prompt_ids
from generator.build import sdk
from generator.errors import CactError
from generator.tools.retrieval import retrieve, split_elements, tool_embeddings
from generator.tools.schema import compile_tools
from host_tests.scons_run import ROOT, scons, sdk_probe

GOLDEN = ROOT / "host_tests" / "golden"
TOOLS12 = ROOT / "host_tests" / "data" / "tools12.json"
HEAD_TOKENS = 512        # the small archives' max_seq: every tool, the query and a turn keep their cells
KEYS = ("type", "function_calls", "confidence", "confidence_source", "text", "prompt_tokens", "generated_tokens",
        "retrieved", "retrieval_tokens")
QUERIES = ["turn on the kitchen lights", "what's the weather in Lagos", "reboot the router please"]


def _reference(name):
    a = reader.read((GOLDEN / name / "archive.cact").read_bytes())
    tok = Tokenizer.from_blob(a.tokenizer_blob())
    return reference(a, "a8"), tok


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    root = tmp_path_factory.mktemp("retrieval")
    for name in ("small", "n3-small"):
        scons("board=host", f"archive={GOLDEN / name / 'archive.cact'}", f"build={root / name}",
              f"head_tokens={HEAD_TOKENS}")
    return root


@pytest.mark.parametrize("name", ["small", "n3-small"])
def test_the_five_chosen_and_the_call_equal_the_twin(engines, name):
    model, tok = _reference(name)
    text = TOOLS12.read_text()
    picks = set()
    for query in QUERIES:
        subset, chosen, tokens = retrieve(model, tok, text, query, HEAD_TOKENS)
        assert len(chosen) == 5 and chosen == sorted(chosen)
        s = Session(model, tok, compile_tools(subset, force_call=True), head_tokens=HEAD_TOKENS)
        s.retrieved, s.retrieval_tokens = chosen, tokens
        want = s.turn(render_prompt_ids(tok, subset, query), 64)
        want["confidence"] = float(f"{want['confidence']:.9f}")
        proc = subprocess.run([str(engines / name / "needle"), "--tools", str(TOOLS12), "--query", query,
                               "--force-call", "--max-new", "64"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout)
        assert {k: got[k] for k in KEYS} == {k: want[k] for k in KEYS}, query
        tools = {t["name"]: t["parameters"] for t in json.loads(text)}
        for call in got["function_calls"]:      # only a rendered tool can be called
            assert call["name"] in {json.loads(text)[i]["name"] for i in chosen}
            jsonschema.Draft202012Validator(tools[call["name"]]).validate(call["arguments"])
        picks.add(tuple(chosen))
    assert len(picks) > 1      # the pick depends on the query


def test_without_the_head_every_tool_is_rendered(engines, tmp_path):
    """An engine built without head_tokens cannot embed: the twin and the CLI render all 12."""
    model, tok = _reference("small")
    text = TOOLS12.read_text()
    assert retrieve(model, tok, text, QUERIES[0], 0) == (text, None, 0)
    assert len(split_elements(compile_tools(text).tools_json)) == 12
    scons("board=host", f"archive={GOLDEN / 'small' / 'archive.cact'}", f"build={tmp_path / 'b'}")
    proc = subprocess.run([str(tmp_path / "b" / "needle"), "--tools", str(TOOLS12), "--query", QUERIES[0],
                           "--force-call", "--max-new", "64"], capture_output=True, text=True)
    # all twelve rendered: the prompt leaves no room for a call (what retrieval is for)
    left = HEAD_TOKENS - len(render_prompt_ids(tok, text, QUERIES[0]))
    assert proc.returncode == 2 and f"but only {left} are left" in proc.stderr


def test_a_short_head_budget_is_refused_in_one_line(tmp_path):
    scons("board=host", f"archive={GOLDEN / 'small' / 'archive.cact'}", f"build={tmp_path / 'b'}", "head_tokens=8")
    proc = subprocess.run([str(tmp_path / "b" / "needle"), "--tools", str(TOOLS12), "--query", "lights on",
                           "--force-call", "--max-new", "64"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert "is longer than the embedding head's 8 tokens (rebuild with a larger head_tokens=N)" in proc.stderr


# ---- a built-in list (scons tools=FILE head_tokens=N): the tools embedded at build time ----------
@pytest.fixture(scope="module")
def builtin(tmp_path_factory):
    root = tmp_path_factory.mktemp("retrieval-builtin")
    scons("board=host", f"archive={GOLDEN / 'small' / 'archive.cact'}", f"build={root}", f"head_tokens={HEAD_TOKENS}",
          f"tools={TOOLS12}", "lib=1")
    return root


def _c_floats(text: str) -> list:
    return [float.fromhex(x[:-1]) for x in text.replace(",", " ").split() if x.endswith("f") and "0x" in x]


def test_built_in_embeddings_are_the_references(builtin):
    """gen/needle_tools.c holds each tool's vector, bit for bit the a8 reference's; no prefix
    snapshot is built (each query renders its own five tools)."""
    gen = (builtin / "gen" / "needle_tools.c").read_text()
    start = gen.index("needle_tools_embedding[NEEDLE_TOOLS_COUNT][NEEDLE_TOOLS_EMBED_DIM] = {")
    table = _c_floats(gen[start:gen.index("};", start)].split("= {", 1)[1])
    want = tool_embeddings(str(GOLDEN / "small" / "archive.cact"), TOOLS12.read_text(), HEAD_TOKENS)
    assert len(want) == 12
    assert table == [float(x) for v in want for x in v]
    assert not (builtin / "prefix.bin").exists()


@pytest.mark.parametrize("query", QUERIES[:2])
def test_built_in_list_embeds_only_the_query(builtin, engines, query):
    """The CLI with the built-in list picks what the engine that embeds every tool picks, and the
    call is the same; only the query went through the model (the twin counts the tokens)."""
    model, tok = _reference("small")
    args = ["--query", query, "--force-call", "--max-new", "64"]
    got = json.loads(subprocess.run([str(builtin / "needle")] + args, capture_output=True, text=True,
                                    check=True).stdout)
    full = json.loads(subprocess.run([str(engines / "small" / "needle"), "--tools", str(TOOLS12)] + args,
                                     capture_output=True, text=True, check=True).stdout)
    keys = [k for k in KEYS if k != "retrieval_tokens"]
    assert {k: got[k] for k in keys} == {k: full[k] for k in keys}
    emb = tool_embeddings(str(GOLDEN / "small" / "archive.cact"), TOOLS12.read_text(), HEAD_TOKENS)
    _, chosen, query_only = retrieve(model, tok, TOOLS12.read_text(), query, HEAD_TOKENS, tools_embedded=emb)
    _, _, everything = retrieve(model, tok, TOOLS12.read_text(), query, HEAD_TOKENS)
    assert got["retrieved"] == chosen and got["retrieval_tokens"] == query_only
    assert full["retrieval_tokens"] == everything > query_only


def test_service_and_needle_run_retrieve_like_the_cli(builtin, tmp_path):
    """A service's query (each a fresh session) and needle_run() (the typed bindings, through
    the SDK) render the same five tools and make the same call as `needle --query`; a query
    that continues the session renders every tool (embedding would reset the session)."""
    query = QUERIES[0]
    cli = json.loads(subprocess.run([str(builtin / "needle"), "--query", query, "--force-call", "--max-new", "64"],
                                    capture_output=True, text=True, check=True).stdout)
    requests = [{"query": query, "force_call": True, "max_new": 64}, {"query": query, "force_call": True,
                "max_new": 64}, {"query": query, "max_new": 8, "continue": True}]
    out = subprocess.run([str(builtin / "needle"), "--serve"], input="".join(json.dumps(r) + "\n" for r in requests),
                         capture_output=True, text=True, check=True).stdout.splitlines()
    first, second, third = (json.loads(line) for line in out)
    assert {k: first["envelope"][k] for k in KEYS} == {k: cli[k] for k in KEYS}
    assert {k: second["envelope"][k] for k in KEYS} == {k: cli[k] for k in KEYS}   # fresh again: retrieved
    # all twelve rendered after the first turn: no room, refused naming the free tokens and a reset
    assert third["ok"] is False and "free" in third["error"] and '{"reset": true}' in third["error"], third
    sdk_dir = builtin / sdk.SDK_DIR
    pc = f"PKG_CONFIG_LIBDIR={sdk_dir / 'lib' / 'pkgconfig'}"
    flags = subprocess.run(f"{pc} pkg-config --cflags --libs needle", shell=True, capture_output=True, text=True,
                           check=True).stdout.split()
    exe = tmp_path / "run_retrieval"
    subprocess.run(["gcc", "-std=c11", "-O2", "-o", str(exe), str(ROOT / "host_tests" / "c" / "run_retrieval.c")]
                   + flags, check=True)
    run = json.loads(subprocess.run([str(exe), query, "64"], capture_output=True, text=True, check=True).stdout)
    assert run == {k: cli[k] for k in ("function_calls", "retrieved", "retrieval_tokens")}



# ---- one pass over a turn's tools (issue 43 item 5; firmware/lib/needle_toolset.h) ----------------

PASSES_PROBE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "needle_session.h"
#include "needle_model.h"

/* internal (firmware/lib/needle_toolset.h): the renderer's passes over a tools JSON so far */
uint32_t needle_toolset_passes(void);

int main(int argc, char **argv)
{
    static char tools[1 << 16], err[512];
    static needle_envelope env;
    FILE *f = fopen(argv[1], "rb");
    size_t n = f ? fread(tools, 1, sizeof tools, f) : 0;
    if (f) fclose(f);
    if (needle_boot()) { fprintf(stderr, "%s\n", needle_error()); return 3; }
    for (int i = 2; i < argc; i++) {
        needle_call_options opt;
        memset(&opt, 0, sizeof opt);
        opt.tools_json = tools;
        opt.tools_len = n;
        opt.force_call = 1;
        opt.max_new = 64;
        uint32_t before = needle_toolset_passes();
        int rc = needle_call(argv[i], &opt, &env, err, sizeof err);
        printf("%d %u %u %s\n", rc, needle_toolset_passes() - before, env.retrieved_count, rc ? err : "");
    }
    return 0;
}
"""


def test_a_turn_parses_its_tools_once(tmp_path):
    """needle_call reads its tools JSON in one pass, whatever reads the list: retrieval of five
    of 12 (the embedding head), the prompt, the grammar's compiler and the message of a query
    too long for the prompt (it renders the list again to say how much room it leaves).  The
    renderer counts its passes; before the record each of these turns made three (retrieval's
    render, the prompt's, and the grammar's or the message's).  The message is the one those
    three passes gave."""
    exe = sdk_probe(tmp_path / "lib", PASSES_PROBE, f"archive={GOLDEN / 'small' / 'archive.cact'}",
                    f"head_tokens={HEAD_TOKENS}")
    three = tmp_path / "three.json"
    three.write_text(json.dumps(json.loads(TOOLS12.read_text())[:3], indent=2))

    def calls(tools, *queries):
        proc = subprocess.run([str(exe), str(tools), *queries], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return [line.split(" ", 3) for line in proc.stdout.splitlines()]
    (rc, passes, retrieved, msg), = calls(TOOLS12, QUERIES[0])
    assert (rc, passes, retrieved) == ("0", "1", "5"), msg          # retrieval chose, the five were called
    long_query = "lights " * 3000
    (rc, passes, _, msg), (rc_long, passes_long, _, msg_long) = calls(three, QUERIES[0], long_query)
    assert (rc, passes) == ("0", "1"), msg
    assert (rc_long, passes_long) == ("-1", "1") and msg_long == (
        "the query (21000 bytes) is too long: with this tool list the prompt holds 15672 bytes of it "
        "(NEEDLE_TOK_MAX_TEXT 16384 bytes in all)")


# ---- what retrieval keeps and refuses -------------------------------------------------------------

def _own_thresholds(tmp_path, ppm_of) -> tuple:
    """tools12 with each tool's own "x-needle-min-confidence" (ppm_of(i) -> decimal text or None)."""
    tools = json.loads(TOOLS12.read_text())
    parts = []
    for i, t in enumerate(tools):
        text = json.dumps(t)
        if ppm_of(i) is not None:
            text = text[:-1] + f', "x-needle-min-confidence": {ppm_of(i)}}}'
        parts.append(text)
    path = tmp_path / "tools12-thresholds.json"
    path.write_text("[" + ",\n".join(parts) + "]")
    return path, path.read_text()


def test_a_picked_tool_keeps_its_own_threshold(engines, tmp_path):
    """Retrieval renders the five as minified objects, which never hold our extension keys; each
    picked tool's "x-needle-min-confidence" still judges its call, in the CLI, the service and
    the twin (it was dropped: a tool's own threshold did not gate on engines with the head)."""
    model, tok = _reference("small")
    path, text = _own_thresholds(tmp_path, lambda i: f"0.99999{i % 10}")
    args = ["--tools", str(path), "--query", QUERIES[0], "--force-call", "--max-new", "64"]
    proc = subprocess.run([str(engines / "small" / "needle")] + args, capture_output=True, text=True)
    got = json.loads(proc.stdout)
    subset, chosen, tokens = retrieve(model, tok, text, QUERIES[0], HEAD_TOKENS)
    assert chosen == got["retrieved"] and "x-needle-min-confidence" in subset
    s = Session(model, tok, compile_tools(subset, force_call=True), head_tokens=HEAD_TOKENS)
    s.retrieved, s.retrieval_tokens = chosen, tokens
    want = s.turn(render_prompt_ids(tok, subset, QUERIES[0]), 64)
    names = [t["name"] for t in json.loads(text)]
    called = {names.index(c["name"]) for c in got["function_calls"]}
    assert called and got["min_confidence"] == max(float(f"0.99999{i % 10}") for i in called)
    # withheld (an envelope printed: exit 0, success false, code 3; docs/grammar.md §5a)
    assert got["confidence"] < got["min_confidence"] and (got["success"], got["error_code"]) == (False, 3)
    assert (got["success"], got["error_code"], got["min_confidence"]) == (
        want["success"], want["error_code"], want["min_confidence"])
    request = {"query": QUERIES[0], "tools": json.loads(text), "force_call": True, "max_new": 64}
    out = subprocess.run([str(engines / "small" / "needle"), "--serve"], input=json.dumps(request) + "\n",
                         capture_output=True, text=True, check=True).stdout
    answer = json.loads(out)
    served = answer["envelope"]
    assert answer["ok"] is False and "withheld" in answer["error"], answer
    assert {k: served[k] for k in ("retrieved", "function_calls", "success", "min_confidence")} == {
        k: got[k] for k in ("retrieved", "function_calls", "success", "min_confidence")}


def test_more_than_32_tools_are_refused_not_narrowed(engines, tmp_path):
    """Retrieval embeds at most 32 tools (NEEDLE_RETRIEVE_TOOLS): a longer list is refused in one
    line by the CLI and the twin, never silently cut to its first 32."""
    model, tok = _reference("small")
    base = json.loads(TOOLS12.read_text())
    tools = [dict(base[i % 12], name=f"{base[i % 12]['name']}_{i}") for i in range(33)]
    path = tmp_path / "tools33.json"
    path.write_text(json.dumps(tools))
    message = "33 tools; a tool list holds at most 32 (NEEDLE_RETRIEVE_TOOLS): split it"
    with pytest.raises(CactError, match=re.escape(message)):
        retrieve(model, tok, path.read_text(), QUERIES[0], HEAD_TOKENS)
    proc = subprocess.run([str(engines / "small" / "needle"), "--tools", str(path), "--query", QUERIES[0],
                           "--max-new", "8"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert message in proc.stderr
    path.write_text(json.dumps(tools[:32]))      # 32 are taken
    proc = subprocess.run([str(engines / "small" / "needle"), "--tools", str(path), "--query", QUERIES[0],
                           "--max-new", "8"], capture_output=True, text=True)
    assert proc.returncode == 0 and len(json.loads(proc.stdout)["retrieved"]) == 5, proc.stderr
