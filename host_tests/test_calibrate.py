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
    assert cal.THRESHOLDS[:6] == (0.0, 1e-6, 1e-5, 1e-4, 1e-3, 0.01) and cal.THRESHOLDS[-1] == 0.99
    assert list(cal.THRESHOLDS) == sorted(cal.THRESHOLDS) and set(cal.SHOWN) <= set(cal.THRESHOLDS)


def test_recommend_takes_the_fewest_wrong_calls_within_the_recall_cost():
    heldout = [rec(CALL, True, c) for c in (0.3, 0.6, 0.6, 0.9)] + [rec(CALL, True, 0.95)] * 16
    unseen = [rec(CALL, False, c) for c in (0.1, 0.25, 0.4, 0.7)]
    ts = (0.0, 0.2, 0.3, 0.35, 0.45, 0.5, 0.7, 0.8)
    tables = {"heldout": cal.table(heldout, ts), "unseen": cal.table(unseen, ts)}
    # held-out recall 20/20 up to 0.3 (the tie), 19/20 (5 points) up to 0.6, 17/20 beyond;
    # wrong unseen calls 4, 3, 2, 2, 1, 1, 1 (the tie at 0.7), 0
    best = cal.recommend(tables, max_recall_cost=5)
    assert best["threshold"] == 0.45 and best["wrongly_dispatched"] == 1       # 0.45 before 0.5
    assert best["recall_cost_points"] == pytest.approx(5.0)
    assert best["wrongly_dispatched_at_0"] == 4 and best["withheld_right"] == 1
    assert best["at"]["unseen"]["threshold"] == 0.45 and best["at_0"]["heldout"]["recall"] == 1.0
    assert cal.recommend(tables, max_recall_cost=0)["threshold"] == 0.3
    assert cal.recommend(tables, max_recall_cost=4.9)["threshold"] == 0.3
    assert cal.recommend(tables, max_recall_cost=100)["threshold"] == 0.8


def test_recommend_sums_the_wrong_calls_of_every_set():
    heldout = [rec(CALL, True, 0.9)] * 10 + [rec(CALL, False, 0.35)]
    novel = [rec(CALL, False, 0.15)] * 3
    ts = (0.0, 0.1, 0.2, 0.4)
    tables = {"heldout": cal.table(heldout, ts), "novel": cal.table(novel, ts)}
    # wrong: 4, 4, 1, 0 -- no held-out recall is lost anywhere, so the least (0) wins
    best = cal.recommend(tables, max_recall_cost=0)
    assert (best["threshold"], best["wrongly_dispatched"], best["wrongly_dispatched_at_0"]) == (0.4, 0, 4)


def test_halves_choose_on_one_half_and_score_on_the_other():
    heldout = [rec(CALL, True, 0.9), rec(CALL, True, 0.9), rec(CALL, False, 0.3), rec(CALL, False, 0.5)]
    [even, odd] = cal.halves({"heldout": heldout}, max_recall_cost=0)
    # even half: 0.9 right, 0.3 wrong -> the least wrong at 0.31; odd half: 0.9 right, 0.5 wrong -> 0.51
    assert (even["chosen_on"], even["threshold"]) == ("even", 0.31)
    assert (even["wrongly_dispatched_at_0"], even["wrongly_dispatched"], even["n"]) == (1, 1, 2)  # 0.5 still goes
    assert (odd["chosen_on"], odd["threshold"]) == ("odd", 0.51)
    assert (odd["wrongly_dispatched_at_0"], odd["wrongly_dispatched"]) == (1, 0)
    assert even["recall_cost_points"] == odd["recall_cost_points"] == 0


def test_markdown_marks_the_recommended_threshold():
    rows = cal.table(RECORDS, cal.THRESHOLDS)
    text = cal.markdown_table(rows, (0.0, 1e-3, 0.5), mark=0.37)
    lines = text.splitlines()
    assert len(lines) == 6 and lines[3] == "| 0.001 | 4 | 50.0% | 40.0% (2/5) | 2 (33.3%) | 0 |"
    assert lines[4].startswith("| **0.37** |")
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


# ---- the command ---------------------------------------------------------------------------------

def test_command_runs_the_reference_and_rereads_its_json(tmp_path, capsys):
    """Two examples of two sets on the Needle 2 demo, then the same tables from its --json."""
    out, md = tmp_path / "c.json", tmp_path / "c.md"
    archive = str(ROOT / "demo" / "needle2-demo.cact")
    assert cal.main(["--archive", archive, "--set", "heldout", "--set", "unseen", "--limit", "2",
                     "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["format"] == cal.FORMAT and [(r["set"], r["n"]) for r in doc["runs"]] == [("heldout", 2), ("unseen", 2)]
    first = doc["runs"][0]["records"][0]
    assert set(first) >= {"calls", "exact", "confidence", "gold_has_call", "overrides"}
    assert 0 <= first["confidence"] <= 1 and first["gold_has_call"] is True
    assert [r["threshold"] for r in doc["runs"][0]["table"]] == list(cal.THRESHOLDS)
    assert doc["recommendations"][archive]["sets"] == ["heldout", "unseen"]
    capsys.readouterr()
    assert cal.main(["--from-json", str(out), "--markdown", str(md), "--shown", "0,0.5"]) == 0
    text = md.read_text()
    assert text == capsys.readouterr().out
    assert "### needle2-demo (Needle 2), unseen (2 examples" in text and "#### needle2-demo: minimum confidence" in text


def test_command_refuses_to_overwrite_its_input(tmp_path, capsys):
    doc = tmp_path / "c.json"
    doc.write_text("{}")
    assert cal.main(["--from-json", str(doc), "--json", str(doc)]) == 2
    assert "error:" in capsys.readouterr().err


def test_a_set_of_ones_own_anchors_the_recall_cost(tmp_path):
    """--set FILE.jsonl: named by its stem; without "heldout" the first set's recall is the one
    the recommendation may cost."""
    mine = tmp_path / "mine.jsonl"
    mine.write_text("\n".join((ROOT / cal.SETS["heldout"]).read_text().splitlines()[:3]) + "\n")
    out = tmp_path / "c.json"
    assert cal.main(["--archive", str(ROOT / "demo" / "needle3-demo.cact"), "--set", str(mine),
                     "--limit", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [(r["set"], r["data"], r["n"]) for r in doc["runs"]] == [("mine", str(mine), 1)]
    [rec] = doc["recommendations"].values()
    assert rec["anchor"] == "mine" and rec["halves"] == []      # one example: no halves to check
    assert cal.anchor_of(["novel", "unseen"]) == "novel" and cal.anchor_of(["unseen", "heldout"]) == "heldout"
