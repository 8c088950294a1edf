"""Plots and text of the result files: each table with a `plot` spec becomes a panel of `<benchmark>.png` beside its
JSON (dayzero against a peer or a ceiling); `--markdown` prints the tables as markdown, `--summary` one line a file.

    python -m bench.plot [bench/results/*.json]               # render the PNGs
    python -m bench.plot --markdown bench/results/kda_decode.json
    python -m bench.plot --summary bench/results/*.json

A table's `plot`: {"x": row key of the categories, "y": [row keys of the bars], "ylabel": str, "log": bool,
"hlines": [[value, label], ...]}; bars are labelled with the columns' headers.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
DPI = 100


def _number(value) -> str:
    if isinstance(value, bool) or not isinstance(value, float):
        return "" if value is None else str(value)
    if value == 0 or math.isnan(value):
        return f"{value:g}"
    digits = max(0, 2 - int(math.floor(math.log10(abs(value)))))
    return f"{value:.{min(digits, 4)}f}"


def _card(result: dict, table: dict) -> str:
    gpu, commit = table.get("gpu", result.get("gpu")), table.get("commit", result.get("commit"))
    return ", ".join(part for part in (gpu, f"commit {commit}" if commit else None) if part)


def markdown(result: dict) -> str:
    """Every table of a result as markdown: a bold title with the card and commit, then the rows."""
    lines = []
    for table in result["tables"].values():
        # columns no row has a value for (a measure this card's result lacks) are left out
        columns = {k: v for k, v in table["columns"].items() if any(row.get(k) is not None for row in table["rows"])}
        lines += [f"**{table['title']}** ({_card(result, table)})", "",
                  "| " + " | ".join(columns.values()) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_number(row.get(key)) for key in columns) + " |" for row in table["rows"]]
        lines.append("")
    return "\n".join(lines)


def render(path: Path) -> Path | None:
    """<benchmark>.png beside the JSON at `path`, one panel a plotted table; None where no table has a plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = json.loads(Path(path).read_text())
    tables = [t for t in result["tables"].values() if t.get("plot")]
    if not tables:
        return None
    fig, axes = plt.subplots(len(tables), 1, figsize=(8, 3.2 * len(tables)), squeeze=False)
    for ax, table in zip(axes[:, 0], tables):
        _panel(ax, result, table)
    fig.tight_layout()
    png = Path(path).with_suffix(".png")
    fig.savefig(png, dpi=DPI)
    plt.close(fig)
    return png


def _panel(ax, result: dict, table: dict) -> None:
    spec, rows = table["plot"], table["rows"]
    series = spec["y"]
    width = 0.8 / len(series)
    for i, key in enumerate(series):
        values = [row.get(key) if isinstance(row.get(key), (int, float)) else math.nan for row in rows]
        ax.bar([x + (i - (len(series) - 1) / 2) * width for x in range(len(rows))], values, width,
               label=table["columns"].get(key, key))
    for value, label in spec.get("hlines", []):
        ax.axhline(value, color="black", linestyle="--", linewidth=0.8)
        ax.text(0.995, value, label, transform=ax.get_yaxis_transform(), ha="right", va="bottom", fontsize=7)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([str(row.get(spec["x"], "")) for row in rows], rotation=30, ha="right", fontsize=7)
    if spec.get("log"):
        ax.set_yscale("log")
    ax.set_ylabel(spec.get("ylabel", ""), fontsize=8)
    ax.set_title(f"{table['title']} ({_card(result, table)})", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(axis="y", linewidth=0.3)


def summary(paths: list[Path]) -> str:
    """One line a result file: benchmark, card, commit, its tables' row counts."""
    lines = [f"{'benchmark':16} {'gpu':5} {'commit':8} tables"]
    for path in paths:
        result = json.loads(Path(path).read_text())
        counts = ", ".join(f"{name} {len(t['rows'])}" for name, t in result["tables"].items())
        lines.append(f"{result['benchmark']:16} {result.get('gpu') or '-':5} {result.get('commit') or '-':8} {counts}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", type=Path, help="result files (default: bench/results/*.json)")
    p.add_argument("--markdown", action="store_true", help="print the tables as markdown instead of plotting")
    p.add_argument("--summary", action="store_true", help="print one line a result file instead of plotting")
    args = p.parse_args()
    paths = args.paths or sorted(RESULTS.glob("*.json"))
    if args.summary:
        print(summary(paths))
        return
    for path in paths:
        if args.markdown:
            print(markdown(json.loads(path.read_text())))
        else:
            print(render(path) or f"{path}: no plotted table")


if __name__ == "__main__":
    main()
