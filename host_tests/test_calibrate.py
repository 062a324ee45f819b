"""bench/calibrate.py: the threshold table on hand-computed inputs, the recommendation rule,
and the hand-written unseen set (demo/eval/unseen.jsonl) it is measured on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import calibrate as cal

ROOT = Path(__file__).resolve().parent.parent
CALL = [{"name": "f", "arguments": {}}]


def rec(calls, exact, confidence, gold_has_call=True):
    return {"calls": calls, "exact": exact, "confidence": confidence, "gold_has_call": gold_has_call}


# six examples, five of which want a call:
#   a  right call, 0.9        b  right call, 0.5 (the tie at 0.5)   c  wrong call, 0.5
#   d  wrong call, 0.2        e  [] for a call (never dispatched)   f  right [] (gold [], 0.8)
RECORDS = [rec(CALL, True, 0.9), rec(CALL, True, 0.5), rec(CALL, False, 0.5), rec(CALL, False, 0.2),
           rec([], False, 0.7), rec([], True, 0.8, gold_has_call=False)]


def test_threshold_zero_dispatches_every_call():
    r = cal.threshold_row(RECORDS, 0.0)
    assert (r["n"], r["gold_calls"], r["dispatched"], r["exact_dispatched"]) == (6, 5, 4, 2)
    assert r["precision"] == 2 / 4 and r["recall"] == 2 / 5
    assert r["wrongly_dispatched"] == 2 and r["wrongly_dispatched_share"] == 2 / 6
    assert r["withheld_right"] == 0


def test_a_tie_at_the_threshold_is_dispatched():
    r = cal.threshold_row(RECORDS, 0.5)
    assert (r["dispatched"], r["exact_dispatched"], r["wrongly_dispatched"], r["withheld_right"]) == (3, 2, 1, 0)
    assert r["precision"] == 2 / 3 and r["recall"] == 2 / 5


def test_above_a_tie_both_tied_calls_are_withheld():
    r = cal.threshold_row(RECORDS, 0.51)
    assert (r["dispatched"], r["exact_dispatched"], r["wrongly_dispatched"], r["withheld_right"]) == (1, 1, 0, 1)
    assert r["precision"] == 1.0 and r["recall"] == 1 / 5


def test_nothing_dispatched_has_no_precision():
    r = cal.threshold_row(RECORDS, 0.95)
    assert r["dispatched"] == 0 and r["precision"] is None and r["recall"] == 0.0
    # the two right calls are withheld; the right [] is not counted: no threshold withholds it
    assert r["withheld_right"] == 2 and r["wrongly_dispatched"] == 0


def test_a_failed_run_is_never_dispatched():
    failed = rec(None, False, None)
    r = cal.threshold_row([failed], 0.0)
    assert (r["dispatched"], r["wrongly_dispatched"], r["withheld_right"], r["recall"]) == (0, 0, 0, 0.0)


def test_table_is_one_row_per_threshold_in_order():
    rows = cal.table(RECORDS, (0.0, 0.5, 0.51))
    assert [r["threshold"] for r in rows] == [0.0, 0.5, 0.51]
    assert [r["dispatched"] for r in rows] == [4, 3, 1]
    assert cal.row_at(rows, 0.5)["dispatched"] == 3
    assert cal.THRESHOLDS[:3] == (0.0, 0.01, 0.02) and cal.THRESHOLDS[-1] == 0.99 and 0.05 in cal.SHOWN


def test_recommend_takes_the_fewest_wrong_calls_within_the_recall_cost():
    heldout = [rec(CALL, True, c) for c in (0.3, 0.6, 0.6, 0.9)] + [rec(CALL, True, 0.95)] * 16
    unseen = [rec(CALL, False, c) for c in (0.1, 0.25, 0.4, 0.7)]
    ts = (0.0, 0.2, 0.3, 0.35, 0.45, 0.5, 0.7, 0.8)
    h, u = cal.table(heldout, ts), cal.table(unseen, ts)
    # held-out recall 20/20 up to 0.3 (the tie), 19/20 (5 points) up to 0.6, 17/20 beyond;
    # wrong unseen calls 4, 3, 2, 2, 1, 1, 1 (the tie at 0.7), 0
    best = cal.recommend(h, u, max_recall_cost=5)
    assert best["threshold"] == 0.45 and best["unseen"]["wrongly_dispatched"] == 1   # 0.45 before 0.5
    assert best["heldout_recall_cost_points"] == pytest.approx(5.0)
    assert best["unseen_at_0"]["wrongly_dispatched"] == 4
    assert cal.recommend(h, u, max_recall_cost=0)["threshold"] == 0.3
    assert cal.recommend(h, u, max_recall_cost=4.9)["threshold"] == 0.3
    assert cal.recommend(h, u, max_recall_cost=100)["threshold"] == 0.8


def test_markdown_marks_the_recommended_threshold():
    rows = cal.table(RECORDS, cal.THRESHOLDS)
    text = cal.markdown_table(rows, (0.0, 0.5), mark=0.37)
    lines = text.splitlines()
    assert len(lines) == 5 and lines[3].startswith("| **0.37** |")
    assert "| 0.50 | 3 | 66.7% | 40.0% (2/5) | 1 (16.7%) | 0 |" in lines


# ---- the hand-written unseen set ----------------------------------------------------------------

@pytest.fixture(scope="module")
def unseen():
    from generator.commands.evaluate import load_examples
    return load_examples(ROOT / cal.SETS["unseen"])


def test_unseen_set_uses_only_tools_training_never_saw(unseen):
    from train.task import TOOLS
    names = {t["name"] for ex in unseen for t in ex.tools}
    assert not names & set(TOOLS)
    assert all(1 <= len(ex.tools) <= 3 for ex in unseen)
    empty = sum(not ex.calls for ex in unseen)
    assert 70 <= len(unseen) <= 100 and 0.25 <= empty / len(unseen) <= 0.4


def test_unseen_set_is_what_its_readme_says(unseen):
    readme = (ROOT / "demo" / "eval" / "README.md").read_text(encoding="utf-8")
    names = {t["name"] for ex in unseen for t in ex.tools}
    single = sum(len(ex.calls) == 1 for ex in unseen)
    pairs = sum(len(ex.calls) == 2 for ex in unseen)
    empty = sum(not ex.calls for ex in unseen)
    assert (f"`unseen.jsonl`: {len(unseen)} examples" in readme and f"{len(names)} tools" in readme
            and f"{single} single calls, {pairs} pairs of calls, and {empty} whose" in readme)


def test_unseen_prompts_leave_room_for_the_answer(unseen):
    """Prompt + ~60 answer tokens within the demo models' 384-token context."""
    from generator.archive import reader
    from generator.archive.tokenizer import Tokenizer
    from generator.tools.prompt import render_prompt_ids
    a = reader.read(reader.load(ROOT / "demo" / "needle2-demo.cact"))
    tok = Tokenizer.from_blob(a.tokenizer_blob())
    longest = max(len(render_prompt_ids(tok, ex.tools_text, ex.query)) for ex in unseen)
    assert a.header["max_seq_len"] == 384 and longest + 60 < 384


def test_unseen_lines_are_in_the_committed_key_order():
    for line in (ROOT / cal.SETS["unseen"]).read_text(encoding="utf-8").splitlines():
        assert list(json.loads(line)) == ["tools", "query", "calls"]
