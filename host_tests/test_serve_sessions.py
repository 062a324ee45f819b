"""Sessions of `needle --serve` (issue 44, item 4; docs/serve.md, "Sessions", protocol version 2).

Users sent four demo queries on one connection: the third came back "ok": true with an empty
call (the context was nearly full) and the fourth was refused with "raise --max-new".  Now a
query starts a fresh session unless it says "continue": true; a request that does not fit is
refused before anything runs, naming the tokens free and {"reset": true}; a call the budget
cut short is ok:false.  The demo archive (demo/needle2-demo.cact) is used where the answers
must be right, the golden tiny archive where only the mechanics count; the Python client
(examples/client/needle_client.py) is run over a pipe and a Unix socket.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from test_cli_robustness import needle  # noqa: F401  (the tiny golden engine, built once)
from test_serve import IM_END, Service, error, serve_pipe

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "demo" / "tools.json"
sys.path.insert(0, str(ROOT / "examples" / "client"))
from needle_client import NeedleClient, NeedleError  # noqa: E402

QUERIES = ["What is the weather in Lagos?", "set a timer for 10 minutes", "What is the weather in Paris?",
           "set a timer for 5 minutes", "What is the weather in Tokyo?", "set a timer for 30 minutes",
           "What is the weather in London?", "set a timer for 2 minutes"]
RIGHT = [{"name": "get_weather", "arguments": {"city": "Lagos"}}, {"name": "set_timer", "arguments": {"minutes": 10}},
         {"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "set_timer", "arguments": {"minutes": 5}},
         {"name": "get_weather", "arguments": {"city": "Tokyo"}}, {"name": "set_timer", "arguments": {"minutes": 30}},
         {"name": "get_weather", "arguments": {"city": "London"}}, {"name": "set_timer", "arguments": {"minutes": 2}}]
TIMINGS = ("prefill_tps", "decode_tps", "grammar_ms", "decode_ms")


@pytest.fixture(scope="module")
def demo(demo_host):
    """The host engine for the bundled demo archive (conftest.py: built once per worker)."""
    return demo_host


@pytest.fixture(scope="module")
def max_seq(demo) -> int:
    info = demo.run(["--info"]).stdout
    return int(info.split("max_seq ")[1].split()[0])


def cli_envelope(engine, query: str, *args: str) -> dict:
    proc = engine.run(["--tools", TOOLS, "--query", query, *args])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return json.loads(proc.stdout)


def untimed(envelope: dict) -> dict:
    return {k: v for k, v in envelope.items() if k not in TIMINGS}


def req(**fields) -> bytes:
    if "continue_" in fields:
        fields["continue"] = fields.pop("continue_")
    return json.dumps(fields).encode()


@pytest.mark.parametrize("count", [4, 8])
def test_queries_on_one_connection_equal_fresh_processes(demo, count):
    """The defect: on one connection the third of four demo queries was an empty call and the
    fourth was refused.  Each query is now a fresh session: the answer a fresh process gives."""
    a = serve_pipe(demo, [req(query=q, id=i) for i, q in enumerate(QUERIES[:count])], "--tools", TOOLS)
    assert [x["id"] for x in a] == list(range(count))
    for q, got in zip(QUERIES[:count], a):
        assert got["ok"] is True, got
        want = cli_envelope(demo, q)
        assert untimed(got["envelope"]) == untimed(want), q
        assert got["position"] == want["prompt_tokens"] + want["generated_tokens"]   # from position 0
        assert want["function_calls"], (q, want)   # the demo answers each of them with a call
    assert [x["envelope"]["function_calls"] for x in a] == [[c] for c in RIGHT[:count]]


def test_continue_appends_to_the_session(demo):
    q = QUERIES[3]
    a = serve_pipe(demo, [req(query=QUERIES[0]), req(query=q, continue_=True), req(query=q),
                          req(query=q, continue_=False)], "--tools", TOOLS)
    first, cont, fresh, fresh2 = a
    assert all(x["ok"] for x in a), a
    # appended: no BOS and no re-prefill; the <|im_end|> chosen last is fed first (prompt_tokens
    # counts it, position counted it already)
    assert cont["position"] == first["position"] + cont["envelope"]["prompt_tokens"] - 1 \
        + cont["envelope"]["generated_tokens"]
    assert cont["envelope"]["prompt_tokens"] - 1 < fresh["envelope"]["prompt_tokens"]
    assert cont["position"] > fresh["position"] == fresh["envelope"]["prompt_tokens"] \
        + fresh["envelope"]["generated_tokens"]
    assert untimed(fresh["envelope"]) == untimed(fresh2["envelope"]) == untimed(cli_envelope(demo, q))


def test_a_full_session_is_refused_before_running_and_names_reset(demo, max_seq):
    """Continued queries fill the context: a call the context cuts short is ok:false (error
    code 2), a query that does not fit is refused naming the free tokens and {"reset": true}
    (never max_new), and the session is untouched: the next request continues it."""
    q = QUERIES[3]
    a = serve_pipe(demo, [req(query=q)] + [req(query=q, continue_=True, id=k) for k in range(1, 4)]
                   + [req(prompt="ok", max_new=1), req(query=q)], "--tools", TOOLS)
    assert a[0]["ok"] and a[1]["ok"], a[:2]
    cut, refused, after, fresh = a[2], a[3], a[4], a[5]
    # cut short by the context: not an "ok" call
    assert (cut["ok"], cut["stop"], cut["envelope"]["success"], cut["envelope"]["error_code"]) == \
        (False, "context", False, 2), cut
    error(cut, "the context ran out in the middle of the call", '{"reset": true}')
    assert cut["envelope"]["error"].startswith("the context ran out in the middle of the call (")
    assert cut["position"] > a[1]["position"]
    # refused: nothing ran
    free = max_seq - cut["position"]
    error(refused, "the prompt needs", f"the session has {free} of {max_seq} free", '{"reset": true}', '"continue"')
    assert refused["id"] == 3 and "max_new" not in refused["error"] and set(refused) == {"id", "ok", "error"}
    # untouched: a prompt continues right after the cut call
    assert after["ok"] and after["prompt_tokens"] < 10
    assert after["position"] == cut["position"] + after["prompt_tokens"] + after["generated_tokens"] \
        + (after["stop"] == "im_end")
    # and a plain query is a fresh session again, answered right
    assert untimed(fresh["envelope"]) == untimed(cli_envelope(demo, q))


def test_prompt_and_results_that_do_not_fit_name_reset(needle):
    """The golden tiny engine (mechanics only): a prompt or results turn that does not fit what
    is left is refused with the free count and {"reset": true}."""
    info = needle.run(["--info"]).stdout
    max_seq = int(info.split("max_seq ")[1].split()[0])
    a = serve_pipe(needle, [req(prompt="What is the weather in Lagos?", max_new=max_seq), req(prompt="more"),
                            req(reset=True), req(query=QUERIES[0], force_call=True, max_new=max_seq),
                            req(results=[1])], "--tools", TOOLS)
    assert a[0]["ok"] and a[0]["position"] == max_seq and a[0]["stop"] == "context"
    error(a[1], "the prompt needs", f"0 of {max_seq} free", '{"reset": true}')
    assert "max_new" not in a[1]["error"]
    # a call that filled the context: cut short by it (error code 2), and its results do not fit
    assert (a[3]["ok"], a[3]["stop"], a[3]["envelope"]["error_code"]) == (False, "context", 2), a[3]
    error(a[4], "the results turn needs", f"of {max_seq} free", '{"reset": true}')
    assert "max_new" not in a[4]["error"]


def test_a_call_cut_by_max_new_is_not_ok(demo):
    a = serve_pipe(demo, [req(query=QUERIES[2], max_new=12), req(query=QUERIES[2], max_new=4),
                          req(query=QUERIES[2])], "--tools", TOOLS)
    cut = a[0]
    assert (cut["ok"], cut["stop"], cut["envelope"]["success"], cut["envelope"]["error_code"]) == \
        (False, "max_new", False, 1), cut
    error(cut, '"max_new" (12) ran out in the middle of the call', 'raise "max_new"')
    assert cut["envelope"]["function_calls"] != [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    error(a[1], "a call needs at least", '"max_new" is 4: raise "max_new"')
    assert a[2]["ok"] and a[2]["envelope"]["function_calls"] == [{"name": "get_weather",
                                                                    "arguments": {"city": "Paris"}}]


def test_continue_goes_with_query_only(needle):
    a = serve_pipe(needle, [req(prompt="hi", continue_=True, max_new=2), req(results=[1], continue_=True),
                            req(reset=True, continue_=True), req(query="x", continue_=1),
                            req(prompt="hi", max_new=2, continue_=False), req(query="x", continue_=True, raw=True,
                                                                              max_new=2)],
                   "--tools", TOOLS)
    for x in a[:3]:
        error(x, '"continue" goes with "query" only')
    error(a[3], '"continue" must be true or false')
    error(a[4], '"continue" goes with "query" only')
    assert a[5]["ok"] is True and a[5]["prompt_tokens"] > 1   # nothing to continue: the session was empty


def test_unknown_key_message_lists_continue(needle):
    a = serve_pipe(needle, [req(prompt="hi", contine=True)])
    error(a[0], 'unknown key "contine"', "continue")


def test_python_client_over_a_pipe(demo):
    with NeedleClient.spawn([*demo.command(["--serve", "--tools", str(TOOLS)])]) as c:
        answers = [c.query(q) for q in QUERIES[:4]]
        assert [x["envelope"]["function_calls"][0]["name"] for x in answers] == \
            ["get_weather", "set_timer", "get_weather", "set_timer"]
        follow = c.results({"temp_c": 31})
        assert follow["position"] > answers[-1]["position"]
        more = c.query(QUERIES[0], continue_=True)
        assert more["position"] > follow["position"]
        with pytest.raises(NeedleError, match='"continue" goes with "query" only') as e:
            c.request(prompt="x", **{"continue": True})
        assert e.value.answer["ok"] is False
        assert c.reset()["reset"] is True
        assert c.prompt("hello", max_new=2)["prompt_tokens"] > 1


def test_python_client_over_a_unix_socket(demo, tmp_path):
    path = tmp_path / "needle.sock"
    svc = Service(demo, path, "--tools", TOOLS)
    try:
        svc.connect().close()   # wait until it listens
        with NeedleClient.connect(str(path)) as c:
            a = c.query(QUERIES[0])
            assert a["envelope"]["function_calls"] == [{"name": "get_weather", "arguments": {"city": "Lagos"}}]
            with pytest.raises(NeedleError, match="a call needs at least"):
                c.query(QUERIES[1], max_new=2)
            b, again = c.query(QUERIES[1]), c.query(QUERIES[1])   # each a fresh session
            assert untimed(b["envelope"]) == untimed(again["envelope"]) and b["position"] == again["position"]
    finally:
        svc.stop()


def test_serve_docs_state_the_protocol_version():
    text = (ROOT / "docs" / "serve.md").read_text()
    assert "Protocol version: 3" in text and '"continue": true' in text and '`min_confidence`' in text
    assert "needle_client.py" in text
    assert IM_END in text
