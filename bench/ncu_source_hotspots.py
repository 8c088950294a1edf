"""Summarize an Nsight Compute `--page source --print-source sass --csv` dump: the SASS instructions with the most
stall samples, and the samples per opcode, so that a kernel's time can be put on its loops without a GUI.

    python3 bench/ncu_source_hotspots.py DUMP.csv [TOP]
"""

from __future__ import annotations

import csv
import sys
from collections import Counter


def _rows(path: str) -> list[dict]:
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    # a kernel-name line precedes the header
    first = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    return list(csv.DictReader(lines[first:]))


def _samples_column(rows: list[dict]) -> str:
    names = [n for n in rows[0] if "Sampling" in n and "All" in n] or [n for n in rows[0] if "Sampling" in n]
    return names[0]


def main() -> None:
    rows = _rows(sys.argv[1])
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    column = _samples_column(rows)
    value = lambda r: float((r.get(column) or "0").replace(",", "") or 0)  # noqa: E731
    total = sum(value(r) for r in rows) or 1.0
    print(f"{len(rows)} instructions, {total:.0f} samples ({column})")
    by_opcode = Counter()
    for r in rows:
        by_opcode[r.get("Source", "").split()[0] if r.get("Source") else "?"] += value(r)
    print("samples by opcode:", ", ".join(f"{k} {v / total:.1%}" for k, v in by_opcode.most_common(16)))
    for r in sorted(rows, key=value, reverse=True)[:top]:
        print(f"{value(r) / total:6.1%}  {r.get('Address', '?'):>6}  {r.get('Source', '')[:90]}")


if __name__ == "__main__":
    main()
