"""The fixed-width text `dayzero inspect` prints: the cost of each layer kind (the whole model, then one rank), the
ops that serve each piece, and the cache each kind keeps."""

from __future__ import annotations

from collections.abc import Callable

from dayzero.perf.inspect import Cost, KindRow, Profile
from dayzero.perf.layer_caches import SEQUENCE, TOKEN, CacheLine

COST_HEADER = ["layers", "params", "weights", "prefill/token", "decode: weights", "state", "cache", "total"]
LEGEND = ("ops: torch.ops.dayzero.<name>; torch: plain PyTorch by design (so are the projections: torch GEMMs)\n"
          "reference only: no kernel yet, the reference network serves it")


def render(profile: Profile) -> str:
    """The whole report: header, cost tables, ops table, cache table, notes."""
    parts = [_header(profile), _costs(profile, "whole model", lambda row: row.model, profile.model_total)]
    tp, ep = profile.options.tp, profile.options.ep
    if tp > 1:
        parts.append(_costs(profile, f"per rank (--tp {tp} --ep {ep})", lambda row: row.rank, profile.rank_total))
    parts += [_ops(profile), _caches(profile), "\n".join(profile.notes)]
    return "\n\n".join(parts)


def _header(profile: Profile) -> str:
    o = profile.options
    experts = ", routed experts in MXFP4" if o.mxfp4_experts else ""
    tensors = {line.tensor for row in profile.rows for line in row.caches}
    chosen = (("latent_kv", "latent KV", o.kv_cache), ("kv", "K/V", o.kv_cache), ("index_k", "index keys",
                                                                                o.index_cache))
    formats = [f"{name} {fmt}" for tensor, name, fmt in chosen if tensor in tensors]
    caches = f"; decode reads {', '.join(formats)}" if formats else ""
    return (f"{profile.name}: {profile.model_type}, {profile.num_layers} layers; {o.dtype} weights{experts}\n"
            f"context {o.context} tokens{caches}")


def _costs(profile: Profile, title: str, cost_of: Callable[[KindRow], Cost], total: Cost) -> str:
    rows = [[title, *COST_HEADER]]
    rows += [[row.label, str(row.layers) if row.layers else "-", *_cost_cells(cost_of(row))] for row in profile.rows]
    rows.append(["total", str(profile.num_layers), *_cost_cells(total)])
    return table(rows, right_from=1)


def _cost_cells(cost: Cost) -> list[str]:
    return [count(cost.params), size(cost.weight_bytes), flops(cost.prefill_flops), size(cost.decode_weight_bytes),
            size(cost.decode_state_bytes), size(cost.decode_cache_bytes), size(cost.decode_bytes)]


def _ops(profile: Profile) -> str:
    rows = [["ops", "piece", "prefill", "decode"]]
    for row in profile.rows:
        rows += [[row.label if i == 0 else "", p.name, p.prefill, p.decode] for i, p in enumerate(row.pieces)]
    return table(rows) + "\n" + LEGEND


def _caches(profile: Profile) -> str:
    rank = profile.options.tp > 1
    header = ["cache per layer", "tensor", "adds per", "plain", "quantized"]
    rows = [header + (["rank: plain", "quantized"] if rank else [])]
    for row in profile.rows:
        for i, line in enumerate(row.caches):
            cells = _format_cells(line, line.bytes) + (_format_cells(line, line.rank_bytes) if rank else [])
            rows.append([row.label if i == 0 else "", line.tensor, line.per, *cells])
    if len(rows) == 1:
        return "caches: none"
    return table(rows) + "\n" + _cache_totals(profile)


def _format_cells(line: CacheLine, nbytes: tuple[int | None, ...]) -> list[str]:
    cells = [f"{size(b) if b is not None else 'n/a'} {f}" for f, b in zip(line.formats, nbytes)]
    return cells + ["-"] * (2 - len(cells))


def _cache_totals(profile: Profile) -> str:
    token, token_q = profile.cache_bytes(TOKEN), profile.cache_bytes(TOKEN, quantized=True)
    text = f"all layers: a token adds {size(token)} ({size(token_q) if token_q is not None else 'n/a'} quantized)"
    sequence = profile.cache_bytes(SEQUENCE)
    if sequence:
        windows = any(line.tensor == "index_window" for row in profile.rows for line in row.caches)
        slotted = "KDA state, conv and index windows" if windows else "KDA state and conv windows"
        text += f"\n{slotted} are per sequence, not per token: {size(sequence)} a sequence, whatever its length"
    return text


def table(rows: list[list[str]], right_from: int | None = None) -> str:
    """Fixed-width columns, two spaces apart; columns from `right_from` on are right-aligned."""
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]

    def line(row: list[str]) -> str:
        cells = [cell.rjust(w) if right_from is not None and c >= right_from else cell.ljust(w)
                 for c, (cell, w) in enumerate(zip(row, widths))]
        return "  ".join(cells).rstrip()

    return "\n".join(line(row) for row in rows)


def size(nbytes: float) -> str:
    """Bytes in binary units: exact below 10 KiB, else one decimal (GiB at most, as `dayzero plan` prints)."""
    if nbytes == 0:
        return "-"
    if nbytes < 10 * 1024:
        return f"{nbytes:.0f} B"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes / 1024:.1f} KiB"


def count(n: float) -> str:
    """Parameters in decimal units (B at most, as `dayzero plan` prints)."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f}" if n else "-"


def flops(n: float) -> str:
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} FLOP" if n else "-"
