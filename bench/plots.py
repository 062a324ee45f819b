"""The benchmark plots of the documentation, drawn from the committed results (bench/results/).

    python -m bench.plots [--results bench/results] [--out docs/img]

Each bench/results/<name>.json holds the command that measured it, its wall time, the
machine, and (`result`) the last line the bench driver printed: bench/host.py (the host's
engines), bench/mcu.py (a Cortex-M board under QEMU -icount) or bench/snapshot.py (time to
first token with and without the prefix snapshot).  bench/results/README.md lists the
commands.  Three SVG plots come out:

* bench-host-engines.svg: tokens/s on the host, prefill and decode, the generated engine's
  own kernel family against the scalar kernels and the a8 NumPy reference (log scale);
* bench-mcu-macs.svg: A8 multiply-accumulates per instruction per Cortex-M board, the
  board's family against scalar: a whole decode step, and one 256 x 512 GEMV per weight format;
* bench-snapshot-ttft.svg: time to the first token of the demo tool prompt, with and
  without the prefix snapshot, per board (milliseconds on the host, instructions under QEMU).

The SVGs are deterministic (a fixed svg.hashsalt, no date): the same results give the same
bytes.  Needs matplotlib (requirements-docs.txt), which no build needs.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STYLE = {"svg.hashsalt": "needle-fw bench.plots", "svg.fonttype": "none", "font.size": 9,
         "axes.spines.top": False, "axes.spines.right": False}
FAMILY, SCALAR, REFERENCE = "#2b8cbe", "#a6bddb", "#fdae6b"
OUTPUTS = {"host": "bench-host-engines.svg", "mcu": "bench-mcu-macs.svg", "snapshot": "bench-snapshot-ttft.svg"}


class PlotError(Exception):
    pass


def kind(result) -> str | None:
    """Which driver printed a result: host, mcu or snapshot (None: not one the plots use)."""
    if isinstance(result, list) and result and all("ratio" in r and "board" in r for r in result):
        return "snapshot"
    if isinstance(result, dict) and "decode_tok_s_reference" in result:
        return "host"
    if isinstance(result, dict) and "macs_per_instruction_scalar" in result and "board" in result:
        return "mcu"
    return None


def load(results_dir: Path) -> dict:
    """{kind: [(name, document)]}, each kind's files in name order."""
    found: dict = {}
    for path in sorted(results_dir.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        k = kind(doc.get("result")) if isinstance(doc, dict) else None
        if k:
            found.setdefault(k, []).append((path.stem, doc))
    return found


def _label_bars(ax, bars, fmt) -> None:
    for b in bars:
        ax.annotate(fmt(b.get_height()), (b.get_x() + b.get_width() / 2, b.get_height()),
                    xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=7)


def host_figure(docs: list):
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(docs), figsize=(6.4 * len(docs), 3.9), squeeze=False)
    for ax, (name, doc) in zip(axes[0], docs):
        r = doc["result"]
        series = [(f"generated engine ({r['kernels']} kernels)", "", FAMILY),
                  ("generated engine (scalar kernels)", "_scalar", SCALAR),
                  ("a8 NumPy reference", "_reference", REFERENCE)]
        width = 0.26
        for i, (label, suffix, colour) in enumerate(series):
            values = [r.get(f"{phase}_tok_s{suffix}") for phase in ("prefill", "decode")]
            xs = [p + (i - 1) * width for p in range(2)]
            bars = ax.bar([x for x, v in zip(xs, values) if v], [v for v in values if v], width,
                          label=label, color=colour, edgecolor="#333333", linewidth=0.5)
            _label_bars(ax, bars, lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.1f}")
        ax.set_yscale("log")
        ax.set_xticks(range(2), [f"prefill ({r['tokens']} tokens)", f"decode ({r['tokens']} tokens)"])
        ax.set_ylabel("tokens/s (log scale)")
        threads = f", {r['threads']} threads" if r.get("threads", 1) > 1 else ""
        ax.set_title(f"{name}: {Path(r['archive']).name}{threads}\n"
                     f"decode {r['decode_speedup_vs_scalar']}x scalar, {r['decode_speedup_vs_reference']}x "
                     "the reference", fontsize=9)
        ax.grid(True, axis="y", linewidth=0.3)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, frameon=False, fontsize=7)
    fig.tight_layout()
    return fig


def mcu_figure(docs: list):
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 3.8), gridspec_kw={"width_ratios": [1, 2.4]})
    width = 0.38
    names = [doc["result"]["board"] for _, doc in docs]
    fam = [doc["result"]["macs_per_instruction"] for _, doc in docs]
    sca = [doc["result"]["macs_per_instruction_scalar"] for _, doc in docs]
    xs = range(len(docs))
    _label_bars(left, left.bar([x - width / 2 for x in xs], fam, width, color=FAMILY, edgecolor="#333333",
                               linewidth=0.5, label="board's kernel family"), lambda v: f"{v:.2f}")
    _label_bars(left, left.bar([x + width / 2 for x in xs], sca, width, color=SCALAR, edgecolor="#333333",
                               linewidth=0.5, label="scalar kernels"), lambda v: f"{v:.2f}")
    left.set_xticks(list(xs), [f"{n}\n({doc['result']['kernels']})" for n, (_, doc) in zip(names, docs)])
    left.set_ylabel("A8 MACs per instruction")
    left.set_title("a whole decode step", fontsize=9)
    left.grid(True, axis="y", linewidth=0.3)
    left.legend(loc="upper left", frameon=False, fontsize=7)
    left.set_ylim(top=max(fam + sca) * 1.35)
    # one 256 x 512 GEMV per weight format: every board's family (solid) and scalar (light)
    kinds = [g["kind"] for g in docs[0][1]["result"].get("gemv", [])]
    n = len(docs)
    slot = 0.84 / (2 * n)
    shades = ["#08519c", "#3182bd", "#6baed6", "#9ecae1", "#c6dbef"]
    for j, (name, doc) in enumerate(docs):
        gemv = {g["kind"]: g for g in doc["result"].get("gemv", [])}
        colour = shades[j % len(shades)]
        for s, (key, alpha, hatch, what) in enumerate(((("macs_per_instruction"), 1.0, None, doc["result"]["kernels"]),
                                                       ("macs_per_instruction_scalar", 0.45, "//", "scalar"))):
            offs = -0.42 + slot * (2 * j + s) + slot / 2
            vals = [gemv[k][key] if k in gemv else 0 for k in kinds]
            right.bar([i + offs for i in range(len(kinds))], vals, slot, color=colour, alpha=alpha, hatch=hatch,
                      edgecolor="#333333", linewidth=0.4, label=f"{doc['result']['board']} {what}")
    right.set_xticks(range(len(kinds)), kinds)
    right.set_ylabel("A8 MACs per instruction")
    right.set_title("one 256 x 512 GEMV per weight format", fontsize=9)
    right.grid(True, axis="y", linewidth=0.3)
    right.legend(loc="upper left", frameon=False, fontsize=7, ncol=n)
    right.set_ylim(top=right.get_ylim()[1] * 1.3)
    fig.suptitle("Cortex-M under QEMU -icount (instructions counted exactly, demo archive)", fontsize=9)
    fig.tight_layout()
    return fig


def snapshot_figure(docs: list):
    import matplotlib.pyplot as plt
    rows = [r for _, doc in docs for r in doc["result"]]
    fig, axes = plt.subplots(1, len(rows), figsize=(3.2 * len(rows), 3.4), squeeze=False)
    for ax, r in zip(axes[0], rows):
        if "ttft_ms_with" in r:
            values, unit, fmt = [r["ttft_ms_without"], r["ttft_ms_with"]], "milliseconds", (lambda v: f"{v:.2f} ms")
        else:
            values = [r["ttft_instructions_without"] / 1e6, r["ttft_instructions_with"] / 1e6]
            unit, fmt = "million instructions", (lambda v: f"{v:.1f} M")
        bars = ax.bar(["without\nsnapshot", "with\nsnapshot"], values, 0.6, color=[SCALAR, FAMILY],
                      edgecolor="#333333", linewidth=0.5)
        _label_bars(ax, bars, fmt)
        ax.set_ylabel(f"time to first token ({unit})")
        ax.set_title(f"{r['board']}: {r['ratio']}x sooner\n{r['prefix_tokens']} of {r['prompt_tokens']} prompt "
                     f"tokens\nfrom a {r['snapshot_bytes']:,}-byte snapshot", fontsize=8)
        ax.set_ylim(top=max(values) * 1.2)
        ax.grid(True, axis="y", linewidth=0.3)
    fig.tight_layout()
    return fig


FIGURES = {"host": host_figure, "mcu": mcu_figure, "snapshot": snapshot_figure}


def svg(fig) -> bytes:
    """A figure as SVG text, the same bytes for the same figure (no date, fixed ids)."""
    import matplotlib.pyplot as plt
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    # matplotlib ends path lines with a space: cut it (insignificant in SVG, noise in a diff)
    return "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines()).encode("utf-8")


def render(results_dir: Path) -> dict:
    """{output file name: SVG bytes} for every kind of result found."""
    try:
        import matplotlib
    except ImportError:
        raise PlotError("the plots need matplotlib: pip install -r requirements-docs.txt "
                        "(a separate venv will do)") from None
    matplotlib.use("svg")
    found = load(results_dir)
    if not found:
        raise PlotError(f"no benchmark results in {results_dir}")
    out = {}
    with matplotlib.rc_context(STYLE):
        for k, docs in found.items():
            out[OUTPUTS[k]] = svg(FIGURES[k](docs))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.plots", description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=str(ROOT / "bench" / "results"), help="directory of <name>.json results")
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"), help="where the SVG plots go")
    args = ap.parse_args(argv)
    try:
        plots = render(Path(args.results))
    except (PlotError, OSError, ValueError, KeyError) as exc:
        print(f"bench.plots: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, data in plots.items():
        (out / name).write_bytes(data)
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
