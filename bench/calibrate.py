"""How much a call's confidence is worth: precision and recall of the calls a device would
execute, against the minimum confidence below which it withholds them (docs/calibration.md).

    python -m bench.calibrate [--archive A ...] [--set heldout|novel|unseen|FILE.jsonl ...]
                              [--limit N] [--json OUT] [--markdown OUT] [--svg OUT]
                              [--shown T,T,...] [--max-recall-cost POINTS] [--from-json IN]

For each archive and each evaluation set (demo/eval/: heldout.jsonl, novel.jsonl and the
hand-written unseen.jsonl; or a file of your own in their format, named by its stem), every
example is answered once by the a8 NumPy reference with the
call grammar on (the engines' numerics: every board is bit-identical to it), through the
pieces of generator/commands/evaluate.py: its loader, its prompt, its exact match.  Each
example's record keeps the predicted calls, whether they are exactly the gold calls, the
envelope's ``confidence`` (the smallest probability of a chosen call token), whether the gold
has a call, and the envelope's ``overrides`` where the decoder writes one (None otherwise).

A prediction is **dispatched** at threshold t when it holds at least one call and its
confidence is >= t (a tie is dispatched).  Then, per threshold (:func:`threshold_row`):

* precision: exactly right dispatched / dispatched (None when nothing is dispatched),
* recall: exactly right dispatched / examples whose gold has a call,
* wrongly dispatched: dispatched and not exactly right (a count, and a share of all examples),
* withheld but right: a prediction with calls, exactly right, whose confidence is < t: what
  the threshold costs.  (An empty prediction is never dispatched, so no threshold costs it.)

The recommended default (:func:`recommend`, per archive) is the threshold with the fewest
wrongly dispatched calls over all the sets measured (held-out, novel and unseen together)
among those that cost at most ``--max-recall-cost`` points of held-out recall against
threshold 0 (default 1); the smallest such threshold on a tie.  Without a set named
heldout, the recall is the first set's.  The markdown also shows the
rule's answer for other recall costs, and a split-half check: the rule applied to the
even-numbered examples of each set, scored on the odd-numbered ones, and the other way round.

``--from-json IN`` recomputes the tables, the recommendation and the plot from a previous
``--json`` file without running the models.  The plot (``--svg``) needs matplotlib
(``pip install -r requirements-docs.txt``); nothing else does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time

from generator.commands import evaluate as ev
from generator.errors import CactError
from generator.files import refuse_output_is_input, write_atomic

FORMAT = "needle-fw calibrate"
FORMAT_VERSION = 1
ARCHIVES = ("demo/needle2-demo.cact", "demo/needle3-demo.cact")
SETS = {"heldout": "demo/eval/heldout.jsonl", "novel": "demo/eval/novel.jsonl",
        "unseen": "demo/eval/unseen.jsonl"}
#: every threshold the tables are computed at: 0, a few tiny ones (a call on a tool list the
#: model never saw comes with a confidence far below 0.01), then 0.01, 0.02, ..., 0.99; the
#: recommendation searches them all
THRESHOLDS = (0.0, 1e-6, 1e-5, 1e-4, 1e-3) + tuple(round(i / 100, 2) for i in range(1, 100))
SHOWN = (0.0, 1e-3) + tuple(round(i / 20, 2) for i in range(1, 20))     # and 0.05, 0.10, ..., 0.95
DEFAULT_RECALL_COST = 1.0                               # points of held-out recall
ALTERNATIVE_COSTS = (0.0, 1.0, 2.0, 5.0)                # the rule's answers the markdown shows too


# ---- the tables (pure) ---------------------------------------------------------------------

def dispatched(record: dict, t: float) -> bool:
    """Whether a device executes the prediction at threshold t: at least one call, and a
    confidence >= t."""
    return bool(record["calls"]) and record["confidence"] is not None and record["confidence"] >= t


def threshold_row(records: list[dict], t: float) -> dict:
    """The counts and rates of one threshold over the records (each with "calls" (list or
    None), "exact", "confidence" (float or None: the run failed) and "gold_has_call")."""
    n = len(records)
    positives = sum(bool(r["gold_has_call"]) for r in records)
    sent = [r for r in records if dispatched(r, t)]
    right = sum(bool(r["exact"]) for r in sent)
    wrong = len(sent) - right
    withheld_right = sum(1 for r in records if r["calls"] and r["exact"] and not dispatched(r, t))
    return {"threshold": t, "n": n, "gold_calls": positives, "dispatched": len(sent),
            "exact_dispatched": right,
            "precision": right / len(sent) if sent else None,
            "recall": right / positives if positives else None,
            "wrongly_dispatched": wrong, "wrongly_dispatched_share": wrong / n if n else None,
            "withheld_right": withheld_right}


def judged_row(records: list[dict], t: float) -> dict:
    """threshold_row with the default judge's other refusal too: a call the grammar bent
    (override_refused) is not dispatched either (docs/grammar.md §5a)."""
    return threshold_row([dict(r, calls=[]) if r.get("override_refused") else r for r in records], t) | {
        "override_refused": sum(bool(r.get("override_refused")) for r in records),
        "override_refused_right": sum(bool(r.get("override_refused")) and bool(r["exact"]) for r in records)}


def table(records: list[dict], thresholds=THRESHOLDS) -> list[dict]:
    """threshold_row at every threshold, in the order given."""
    return [threshold_row(records, t) for t in thresholds]


def row_at(rows: list[dict], t: float) -> dict:
    """The row of threshold t (compared to the hundredth)."""
    for row in rows:
        if abs(row["threshold"] - t) < 1e-9:
            return row
    raise KeyError(t)


def anchor_of(names) -> str:
    """The set whose recall the recommendation may cost: "heldout" if measured, else the first."""
    names = list(names)
    return "heldout" if "heldout" in names else names[0]


def recommend(rows_by_set: dict[str, list[dict]], max_recall_cost: float = DEFAULT_RECALL_COST) -> dict:
    """The threshold with the fewest wrongly dispatched calls summed over the sets (each a
    table at the same thresholds, ascending from 0), among those whose recall on the anchor
    set (anchor_of) is at most `max_recall_cost` points below its recall at 0; the smallest
    on a tie."""
    anchor = anchor_of(rows_by_set)
    heldout = rows_by_set[anchor]
    base = heldout[0]["recall"]
    if heldout[0]["threshold"] != 0:
        raise ValueError("the rows must start at threshold 0")
    if base is None:
        raise CactError(f"the set {anchor} has no example whose answer is a call: its recall is undefined")
    best = None
    for i, h in enumerate(heldout):
        rows = {name: r[i] for name, r in rows_by_set.items()}
        if any(r["threshold"] != h["threshold"] for r in rows.values()):
            raise ValueError("the sets' rows are at different thresholds")
        cost = 100 * (base - h["recall"])
        if cost > max_recall_cost + 1e-9:
            continue
        wrong = sum(r["wrongly_dispatched"] for r in rows.values())
        if best is None or wrong < best[0]:
            best = (wrong, i, cost)
    wrong, i, cost = best
    at = {name: r[i] for name, r in rows_by_set.items()}
    at_0 = {name: r[0] for name, r in rows_by_set.items()}
    return {"threshold": heldout[i]["threshold"], "anchor": anchor, "max_recall_cost": max_recall_cost,
            "recall_cost_points": cost,
            "wrongly_dispatched": wrong,
            "wrongly_dispatched_at_0": sum(r["wrongly_dispatched"] for r in at_0.values()),
            "withheld_right": sum(r["withheld_right"] for r in at.values()),
            "at": at, "at_0": at_0}


def halves(records_by_set: dict[str, list[dict]], max_recall_cost: float) -> list[dict]:
    """The split-half check: the rule chosen on the even-numbered (0, 2, ...) records of each
    set and scored on the odd-numbered ones, then the other way round."""
    out = []
    anchor = records_by_set[anchor_of(records_by_set)]
    if not all(any(r["gold_has_call"] for r in anchor[k::2]) for k in (0, 1)):
        return out            # a half without a call to make: nothing to check
    for chosen_on, scored_on in ((0, 1), (1, 0)):
        pick = recommend({n: table(r[chosen_on::2]) for n, r in records_by_set.items()}, max_recall_cost)
        other = {n: table(r[scored_on::2]) for n, r in records_by_set.items()}
        i = THRESHOLDS.index(pick["threshold"])
        h = other[anchor_of(other)]
        out.append({"chosen_on": ("even", "odd")[chosen_on], "threshold": pick["threshold"],
                    "recall_cost_points": 100 * (h[0]["recall"] - h[i]["recall"]),
                    "wrongly_dispatched_at_0": sum(t[0]["wrongly_dispatched"] for t in other.values()),
                    "wrongly_dispatched": sum(t[i]["wrongly_dispatched"] for t in other.values()),
                    "n": sum(t[0]["n"] for t in other.values())})
    return out


# ---- the runs --------------------------------------------------------------------------------

def record(ex: ev.Example, env: dict | None, error: str | None, seconds: float) -> dict:
    """One example's record from the envelope of its turn (None: the turn failed)."""
    calls = None if env is None else env["function_calls"]
    return {"line": ex.line, "query": ex.query, "gold": ex.calls, "gold_has_call": bool(ex.calls),
            "calls": calls, "exact": ev.calls_equal(ex.calls, calls, ex.tools),
            "confidence": None if env is None else float(env["confidence"]),
            "overrides": None if env is None else env.get("overrides"),
            # refused by the default judge for an override in a call (error code 4; docs/grammar.md §5a)
            "override_refused": None if env is None else env.get("error_code") == 4,
            "error": error, "seconds": round(seconds, 4)}


def run_set(ref: ev.Reference, examples: list[ev.Example], max_new: int, label: str = "") -> list[dict]:
    """Every example answered by the reference with the grammar (generator/tools/decode.py's
    run_turn, as `needle --tools F --query Q` answers): their records."""
    from generator.tools.decode import run_turn
    out = []
    for i, ex in enumerate(examples, 1):
        start = time.perf_counter()
        try:
            env, error = run_turn(ref.model, ref.tok, ex.grammar, ref.prompt_ids(ex), max_new, min_confidence=0), None
        except CactError as exc:
            env, error = None, str(exc)
            print(f"{label} line {ex.line}: failed: {error}", file=sys.stderr, flush=True)
        out.append(record(ex, env, error, time.perf_counter() - start))
        if i % 50 == 0 or i == len(examples):
            print(f"{label}: {i}/{len(examples)}", file=sys.stderr, flush=True)
    return out


def measure(archives: list[str], sets: list[tuple[str, str]], limit: int | None, max_new: int) -> list[dict]:
    """One run per archive and set ((name, JSON-lines path) pairs): provenance, records, seconds."""
    runs = []
    paths = dict(sets)
    loaded = {name: ev.load_examples(path, limit) for name, path in sets}
    for path in archives:
        with open(path, "rb") as fh:
            sha = hashlib.sha256(fh.read()).hexdigest()
        a = ev._archive(path)
        ref = ev.Reference(a, "a8")
        for name in paths:
            label = f"{os.path.basename(path)} {name}"
            start = time.perf_counter()
            records = run_set(ref, loaded[name], max_new, label)
            seconds = time.perf_counter() - start
            print(f"{label}: {len(records)} examples in {seconds:.0f} s", flush=True)
            runs.append({"archive": path, "archive_sha256": sha, "generation": a.generation,
                         "set": name, "data": paths[name], "n": len(records), "max_new": max_new,
                         "seconds": round(seconds, 1), "records": records})
    return runs


def analyse(runs: list[dict], max_recall_cost: float) -> dict:
    """The tables of every run and, per archive, the recommended threshold (with the
    alternatives of ALTERNATIVE_COSTS and the split-half check)."""
    for run in runs:
        run["table"] = table(run["records"])
    recs = {}
    for archive in dict.fromkeys(r["archive"] for r in runs):
        by_set = {r["set"]: r for r in runs if r["archive"] == archive}
        tables = {name: r["table"] for name, r in by_set.items()}
        rec = recommend(tables, max_recall_cost)
        rec["sets"] = list(by_set)
        rec["alternatives"] = [recommend(tables, c) for c in sorted(set(ALTERNATIVE_COSTS) | {max_recall_cost})]
        rec["halves"] = halves({name: r["records"] for name, r in by_set.items()}, max_recall_cost)
        recs[archive] = rec
    return recs


# ---- output ----------------------------------------------------------------------------------

def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _t(t: float) -> str:
    return f"{t:.2f}" if t == 0 or t >= 0.01 else f"{t:g}"


def markdown_table(rows: list[dict], thresholds=SHOWN, mark: float | None = None) -> str:
    """One run's rows at `thresholds` (and at `mark`, bold)."""
    shown = sorted(set(thresholds) | ({mark} if mark is not None else set()))
    head = ("| min confidence | dispatched | precision | recall | wrongly dispatched | withheld but right |\n"
            "|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for t in shown:
        r = row_at(rows, t)
        cells = [_t(t), str(r["dispatched"]), _pct(r["precision"]),
                 f"{_pct(r['recall'])} ({r['exact_dispatched']}/{r['gold_calls']})",
                 f"{r['wrongly_dispatched']} ({_pct(r['wrongly_dispatched_share'])})", str(r["withheld_right"])]
        if mark is not None and abs(t - mark) < 1e-9:
            cells = [f"**{c}**" for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _name(archive: str) -> str:
    return os.path.splitext(os.path.basename(archive))[0]


def _points_text(x: float) -> str:
    return f"{x:g} point" + ("" if x == 1 else "s")


def recommendation_text(archive: str, rec: dict) -> str:
    """The rule's answer for an archive, its alternatives and the split-half check."""
    sets, anchor = rec["sets"], rec["anchor"]
    recall = "held-out recall" if anchor == "heldout" else f"recall on {anchor}"
    out = [f"#### {_name(archive)}: minimum confidence {_t(rec['threshold'])}\n",
           f"The fewest wrongly dispatched calls over {', '.join(sets)} for at most "
           f"{_points_text(rec['max_recall_cost'])} of {recall}: {rec['wrongly_dispatched_at_0']} -> "
           f"{rec['wrongly_dispatched']} wrongly dispatched, {rec['withheld_right']} right calls withheld, "
           f"{recall} {_pct(rec['at_0'][anchor]['recall'])} -> {_pct(rec['at'][anchor]['recall'])}.\n",
           f"| {recall} it may cost | threshold | {recall} | "
           + " | ".join(f"wrongly dispatched, {s}" for s in sets) + " | right calls withheld (all sets) |",
           "|---:|---:|---:|" + "---:|" * len(sets) + "---:|"]
    for alt in rec["alternatives"]:
        out.append(f"| {_points_text(alt['max_recall_cost'])} | {_t(alt['threshold'])} | {_pct(alt['at'][anchor]['recall'])} | "
                   + " | ".join(f"{alt['at_0'][s]['wrongly_dispatched']} -> {alt['at'][s]['wrongly_dispatched']}"
                                for s in sets) + f" | {alt['withheld_right']} |")
    out.append("")
    for h in rec["halves"]:
        other = "odd" if h["chosen_on"] == "even" else "even"
        out.append(f"- chosen on the {h['chosen_on']}-numbered examples: {_t(h['threshold'])}; on the {other}-numbered "
                   f"ones ({h['n']}) it cuts the wrongly dispatched calls {h['wrongly_dispatched_at_0']} -> "
                   f"{h['wrongly_dispatched']} for {h['recall_cost_points']:.1f} points of {recall}")
    return "\n".join(out) + "\n"


def markdown(doc: dict, thresholds=SHOWN) -> str:
    """Every run's table, and the recommendations."""
    out = []
    for run in doc["runs"]:
        rec = doc["recommendations"].get(run["archive"])
        records = run["records"]
        exact = sum(r["exact"] for r in records)
        empty = [r for r in records if r["calls"] == []]
        failed = sum(r["calls"] is None for r in records)
        out.append(f"### {_name(run['archive'])} (Needle {run['generation']}), {run['set']} "
                   f"({run['n']} examples, {run['n'] - run['table'][0]['gold_calls']} with the answer [], "
                   f"exact match {exact}/{run['n']}; the model answered [] {len(empty)} times, "
                   f"{sum(r['exact'] for r in empty)} of them rightly"
                   + (f"; {failed} runs failed" if failed else "") + ")\n")
        out.append(markdown_table(run["table"], thresholds, rec and rec["threshold"]) + "\n")
    for archive, rec in doc["recommendations"].items():
        out.append(recommendation_text(archive, rec))
    return "\n".join(out)


SET_STYLE = {"heldout": "held-out", "novel": "novel wordings", "unseen": "unseen tools"}


STYLE = {"svg.hashsalt": "needle-fw calibrate", "svg.fonttype": "none", "font.size": 9}


def figure(doc: dict):
    """Precision, recall and the wrongly dispatched share against the threshold: one panel
    per archive (rows) and set (columns), the recommended threshold a dotted line.  Call
    inside matplotlib.rc_context(STYLE)."""
    import matplotlib.pyplot as plt
    archives = list(dict.fromkeys(r["archive"] for r in doc["runs"]))
    sets = list(dict.fromkeys(r["set"] for r in doc["runs"]))
    fig, axes = plt.subplots(len(archives), len(sets), figsize=(3.3 * len(sets), 2.7 * len(archives)),
                             squeeze=False, sharex=True, sharey=True)
    for i, archive in enumerate(archives):
        for j, name in enumerate(sets):
            ax = axes[i][j]
            run = next((r for r in doc["runs"] if r["archive"] == archive and r["set"] == name), None)
            if run is None:
                ax.set_visible(False)
                continue
            ts = [r["threshold"] for r in run["table"]]
            dots = {"marker": "o", "markersize": 3, "markevery": [0]}      # the values at 0
            ax.plot(ts, [math.nan if r["precision"] is None else r["precision"] for r in run["table"]],
                    label="precision", color="#1f77b4", **dots)
            ax.plot(ts, [r["recall"] for r in run["table"]], label="recall", color="#2ca02c", **dots)
            ax.plot(ts, [r["wrongly_dispatched_share"] for r in run["table"]], label="wrongly dispatched",
                    color="#d62728", linestyle="--", **dots)
            none = next((r["threshold"] for r in run["table"] if r["dispatched"] == 0), None)
            if none is not None and none < 0.01:
                ax.text(0.5, 0.55, f"no call dispatched\nat a minimum of {_t(none)} or more",
                        ha="center", va="center", fontsize=8, color="#555555")
            rec = doc["recommendations"].get(archive)
            if rec is not None:
                ax.axvline(rec["threshold"], color="#555555", linestyle=":", linewidth=1,
                           label="recommended minimum")
            ax.set_title(f"{_name(archive)}, {SET_STYLE.get(name, name)} (n={run['n']})")
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1.02)
            ax.grid(True, linewidth=0.3)
            if i == len(archives) - 1:
                ax.set_xlabel("minimum confidence")
            if j == 0:
                ax.set_ylabel("share")
    handles, labels = next(ax for row in axes for ax in row if ax.get_visible()).get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.tight_layout(rect=(0, 0.06 * 2 / (1 + len(archives)), 1, 1))
    return fig


def svg(doc: dict) -> bytes:
    """The figure as SVG text (no date: the same records give the same bytes)."""
    try:
        import matplotlib
    except ImportError:
        raise CactError("--svg needs matplotlib: pip install -r requirements-docs.txt") from None
    matplotlib.use("svg")
    import io
    import matplotlib.pyplot as plt
    with matplotlib.rc_context(STYLE):
        fig = figure(doc)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(fig)
    # matplotlib ends path lines with a space: cut it (insignificant in SVG, noise in a diff)
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines()).encode("utf-8")


def document(runs: list[dict], recs: dict) -> dict:
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "thresholds": list(THRESHOLDS),
            "dispatched_when": "at least one call and confidence >= threshold",
            "runs": runs, "recommendations": recs}


# ---- command line ----------------------------------------------------------------------------

def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"want a positive integer, not {text!r}")
    return int(text)


def _points(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and 0 <= value <= 100):
        raise argparse.ArgumentTypeError(f"want points of recall between 0 and 100, not {text!r}")
    return value


def _set(text: str) -> tuple[str, str]:
    """(name, path) of a --set: a set of demo/eval by name, or a JSON-lines file named by its stem."""
    if text in SETS:
        return text, SETS[text]
    if text.endswith(".jsonl"):
        return os.path.splitext(os.path.basename(text))[0], text
    raise argparse.ArgumentTypeError(f"want {', '.join(SETS)} or a FILE.jsonl of examples, not {text!r}")


def _thresholds(text: str) -> tuple:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = (math.nan,)
    if not all(any(abs(v - t) < 1e-12 for t in THRESHOLDS) for v in values):
        raise argparse.ArgumentTypeError(f"want thresholds among 0, 1e-06, 1e-05, 0.0001, 0.001, 0.01, ..., 0.99, "
                                         f"comma-separated, not {text!r}")
    return tuple(next(t for t in THRESHOLDS if abs(v - t) < 1e-12) for v in values)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.calibrate", description=__doc__.split("\n\n")[0])
    p.add_argument("--archive", action="append", metavar="A",
                   help=f"an archive (repeatable; default: {' and '.join(ARCHIVES)})")
    p.add_argument("--set", action="append", type=_set, dest="sets", metavar="heldout|novel|unseen|FILE.jsonl",
                   help="an evaluation set of demo/eval, or examples of your own in the same format (repeatable; "
                        "default: the three of demo/eval)")
    p.add_argument("--limit", type=_positive, metavar="N", help="only the first N examples of each set")
    p.add_argument("--max-new", type=_positive, default=ev.DEFAULT_MAX_NEW, metavar="N")
    p.add_argument("--max-recall-cost", type=_points, default=DEFAULT_RECALL_COST, metavar="POINTS",
                   help=f"held-out recall the recommended threshold may cost (default {DEFAULT_RECALL_COST:g})")
    p.add_argument("--json", metavar="OUT", help="write every record, table and recommendation")
    p.add_argument("--markdown", metavar="OUT", help="write the tables (every 0.05) as markdown")
    p.add_argument("--svg", metavar="OUT", help="write the plot (needs matplotlib)")
    p.add_argument("--shown", type=_thresholds, default=SHOWN, metavar="T,T,...",
                   help="the thresholds the markdown shows (default 0, 0.001, then every 0.05)")
    p.add_argument("--from-json", metavar="IN", help="take the records of a previous --json run instead of running")
    args = p.parse_args(argv)
    try:
        outputs = {"--json": args.json, "--markdown": args.markdown, "--svg": args.svg}
        refuse_output_is_input(outputs, {"--from-json": args.from_json,
                                         **{f"--archive {a}": a for a in (args.archive or ())}})
        start = time.perf_counter()
        if args.from_json:
            try:
                with open(args.from_json, encoding="utf-8") as fh:
                    old = json.load(fh)
            except OSError as exc:
                raise CactError(f"cannot read {args.from_json}: {exc.strerror}") from None
            except ValueError as exc:
                raise CactError(f"{args.from_json} is not JSON: {exc}") from None
            if not isinstance(old, dict) or old.get("format") != FORMAT:
                raise CactError(f"{args.from_json} is not a {FORMAT} file")
            names = {name for name, _ in args.sets or ()}
            runs = [{k: v for k, v in r.items() if k != "table"} for r in old["runs"]
                    if (not args.archive or r["archive"] in args.archive) and (not names or r["set"] in names)]
            if not runs:
                raise CactError(f"{args.from_json} has no run of the archives and sets asked for")
        else:
            sets = args.sets or list(SETS.items())
            if len({name for name, _ in sets}) < len(sets):
                raise CactError("two --set have the same name: " + ", ".join(name for name, _ in sets))
            runs = measure(args.archive or list(ARCHIVES), sets, args.limit, args.max_new)
        recs = analyse(runs, args.max_recall_cost)
        doc = document(runs, recs)
        text = markdown(doc, args.shown)
        print(text, end="")
        if not args.from_json:
            print(f"{sum(r['n'] for r in runs)} answers in {time.perf_counter() - start:.0f} s")
        if args.json:
            write_atomic(args.json, (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
        if args.markdown:
            write_atomic(args.markdown, text.encode("utf-8"))
        if args.svg:
            write_atomic(args.svg, svg(doc))
    except CactError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
