"""Every demo query the README and docs/ show is one the bundled demo model answers with a call.

A user's first minutes are these commands: `needle --tools demo/tools.json --query "..."` and
the service's `{"query": "..."}` lines.  Each query is taken from the text itself (no list kept
by hand) and run on the host engine built from the demo archive, with demo/tools.json; each
must come back a successful call of one of the demo's tools.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from host_tests.scons_run import ROOT, scons

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DEMO_TOOLS = ROOT / "demo" / "tools.json"
# a query on the same line as demo/tools.json (CLI), or a service request line (docs/serve.md,
# docs/devices.md run the service with --tools demo/tools.json)
CLI = re.compile(r'--tools (?:\S*/)?demo/tools\.json .*?--query "([^"]+)"')
SERVICE = re.compile(r"""^(?:echo |ubus call needle query )'(\{"query":"[^"]+"[^']*\})'""")


def shown_queries() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{doc.relative_to(ROOT)}:{n}"
            for q in CLI.findall(line):
                if q != "...":
                    found.append((where, q))
            m = SERVICE.match(line.strip())
            if m:
                request = json.loads(m.group(1))
                if "tools" not in request:
                    found.append((where, request["query"]))
    return found


def test_the_docs_show_demo_queries():
    """The extraction is not vacuous: the README's own examples are among them."""
    queries = {q for _, q in shown_queries()}
    assert "set a timer for 10 minutes" in queries and len(shown_queries()) >= 5


@pytest.fixture(scope="module")
def demo_host(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("demo-host")
    scons("board=host", f"build={build}")
    return build / "needle"


@pytest.mark.parametrize("where,query", shown_queries())
def test_the_demo_answers_every_shown_query_with_a_call(demo_host, board_runner, where, query):
    proc = board_runner("host", demo_host).run(["--tools", str(DEMO_TOOLS), "--query", query,
                                                 "--max-new", "64"], timeout=120, check=True)
    envelope = json.loads(proc.stdout)
    names = {t["name"] for t in json.loads(DEMO_TOOLS.read_text())}
    calls = envelope["function_calls"]
    assert envelope["success"] and calls and all(c["name"] in names for c in calls), (
        f"{where}: the demo answers {query!r} with {calls} (confidence {envelope['confidence']}): "
        "show a query the bundled model answers, or say why not")
