"""One line per benchmark result, for the tails of the one-call device scripts (bench/h200_call.sh):

    python3 -m bench.result_rows kda_prefill FILE [KEY_PREFIX ...]
    python3 -m bench.result_rows sparse_mla FILE ...
    python3 -m bench.result_rows indexer FILE ...

A file that is missing or cut short (a step that ran past its slot) prints one line saying so."""

from __future__ import annotations

import json
import sys


def kda_prefill(record: dict, extra_prefixes: tuple[str, ...]) -> str:
    """Times, speedups, errors, the three main kernels' times and keys starting with `extra_prefixes`."""
    prefixes = ("ours", "fla_ms", "fla_graph", "speedup", "err", *extra_prefixes)
    kept = {k: v for k, v in record.items() if k.startswith(prefixes) or 'error' in k
            or k.endswith(("pairs_kernel_ms", "wy_kernel_ms", "_state_kernel_ms"))}
    return f"{record['shape']} {kept}"


def sparse_mla(record: dict) -> str:
    """Case, tile config, check, ms, TFLOP/s, % of copy, the most % of copy the roofline allows (then the graph replays'
    ms and % of copy, one call a graph and 64, where timed)."""
    c = record.get("config")
    cfg = c if not isinstance(c, dict) else f"n{c['block_n']} s{c['num_stages']} w{c['num_warps']} h{c['block_h']}"
    graph = (f"graph {record['graph_ms']:.3f} {100 * record['graph_frac_copy']:.1f}%" if "graph_ms" in record
             else "")
    if "long_graph_ms" in record:
        graph += f" 64-call graph {record['long_graph_ms']:.3f} {100 * record['long_graph_frac_copy']:.1f}%"
    bound = f"best {100 * record['copy_bound']:.1f}%" if "copy_bound" in record else ""
    return " ".join(map(str, (record["case"], cfg, record.get("correct"), round(record.get("ms", 0), 3),
                              round(record.get("TFLOPs", 0), 1), f"{100 * record.get('frac_copy', 0):.1f}%", bound,
                              graph, record.get("error", "")[:80])))


def indexer(record: dict) -> str:
    """Case, cache, options, check, ms and % of the ceiling (eager, then graph replay), per-kernel us."""
    graph = record.get("graph_ms")
    graph_text = f"graph {graph:.3f} {100 * record.get('graph_fraction', 0):.1f}%" if graph else "graph -"
    if record.get("long_graph_ms"):
        graph_text += f" 64-call graph {record['long_graph_ms']:.3f} {100 * record['long_graph_fraction']:.1f}%"
    return " ".join(map(str, (record.get("shape"), record.get("cache"), record.get("options"), record.get("ok"),
                              round(record.get("ms", 0), 3), f"{100 * record.get('fraction', 0):.1f}%", graph_text,
                              record.get("kernels_us"), record.get("error", "")[:80])))


# kind -> (the list's key in the JSON file, the line printer)
KINDS = {"sparse_mla": ("records", sparse_mla), "indexer": ("results", indexer)}


def records(path: str, key: str) -> list[dict] | None:
    try:
        return json.load(open(path))[key]
    except (OSError, ValueError, KeyError) as error:
        print(path, "missing:", error)
        return None


def main(argv: list[str]) -> None:
    kind, paths = argv[0], argv[1:]
    if kind == "kda_prefill":
        for record in records(paths[0], "rows") or []:
            print(kda_prefill(record, tuple(paths[1:])))
        return
    key, line = KINDS[kind]
    for path in paths:
        for record in records(path, key) or []:
            print(line(record))


if __name__ == "__main__":
    main(sys.argv[1:])
