"""Offline sm_90 build of the Gluon sparse MLA decode kernel (no GPU needed): resources and the key loop's op order.

    PYTHONPATH=/tmp/t36:. python bench/sparse_mla_gluon_offline.py [--out DIR]

Triton 3.6 (the H200's) must come first on the path: Gluon's API differs between releases. Builds the split
variant (B64 H64: 64 programs, two splits) and the unsplit one (B64 H128: 128 programs), each with half and with
full score blocks a warpgroup (`full_scores`) over a BF16 cache and with half score blocks over an FP8 one, prints
registers, spills and shared memory (bench/triton_resources.py), then the ops of the key loop in program order, from
the TTGIR and from the PTX (runs of one instruction collapsed to `op xN`): the next block's cp.async must come before
the current block's score wgmma.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from bench.triton_resources import compile_resources
from dayzero.plugins.sparse_mla import gluon_decode_kernel

TYPES = {"indices": "*i32", "block_table": "*i32", "cu_seqlens": "*i32", "lse": "*fp32",
         "o_part": "*fp32", "lse_part": "*fp32", "sm_scale": "fp32", "num_tokens": "i32", "num_seqs": "i32",
         "num_heads": "i32", "num_head_blocks": "i32", "num_splits": "i32", "topk": "i32", "stride_qt": "i32",
         "stride_qh": "i32", "stride_idx": "i32", "stride_table": "i32"}
TTGIR_OPS = ("warp_group_dot_wait", "warp_group_dot", "async_copy_global_to_local", "async_commit_group",
             "async_wait", "fence_async_shared", "gpu.barrier", "convert_layout", "scf.yield")
PTX_OPS = ("wgmma.wait_group", "wgmma.mma_async", "wgmma.commit_group", "cp.async.cg", "cp.async.commit_group",
           "cp.async.wait_group", "fence.proxy.async", "bar.sync", "ld.global", "ex2", "bra")


def collapse(ops: list[str]) -> list[str]:
    """Runs of one op -> 'op xN'."""
    out: list[list] = []
    for op in ops:
        if out and out[-1][0] == op:
            out[-1][1] += 1
        else:
            out.append([op, 1])
    return [op if n == 1 else f"{op} x{n}" for op, n in out]


def ttgir_loop_order(ttgir: str) -> list[str]:
    """The ops of the key loop (the loop with the wgmmas; the scans before it are loops too)."""
    bodies = (ttgir[at.start():] for at in re.finditer("scf.for", ttgir))
    body = next(b[:b.index("scf.yield") + len("scf.yield")] for b in bodies
                if "warp_group_dot" in b[:b.index("scf.yield")])
    ops = []
    for line in body.splitlines()[1:]:
        name = next((op for op in TTGIR_OPS if op in line), None)
        if name:
            pending = re.search(r"(num|pendings) = (\d+)", line)
            ops.append(f"{name} {pending.group(2)}" if pending and "wait" in name else name)
    return collapse(ops)


def ptx_loop_order(ptx: str) -> list[str]:
    """The ops of the PTX's key loop (the first loop with wgmmas: from its header label to its back branch)."""
    lines = ptx.splitlines()
    for start, line in enumerate(lines):
        if not (re.match(r"\$L__BB\d+_\d+:.*Loop Header", line)
                or (re.match(r"\$L__BB\d+_\d+:", line) and "Loop Header" in " ".join(lines[start + 1:start + 2]))):
            continue
        label = line.split(":")[0]
        ends = [i for i, text in enumerate(lines) if re.search(rf"\bbra(\.uni)?\s+{re.escape(label)};", text)]
        if ends and any("wgmma.mma_async" in text for text in lines[start:max(ends)]):
            end = max(ends)
            break
    else:
        raise ValueError("the PTX has no loop with wgmmas")
    ops = []
    for line in lines[start:end + 1]:
        text = re.sub(r"^\s*(@!?%p\d+\s+)?", "", line)
        name = next((op for op in PTX_OPS if text.startswith(op)), None)
        if name:
            wait = re.match(r"\S+\s+(\d+);", text)
            ops.append(f"{name} {wait.group(1)}" if wait and "wait_group" in name else name)
    return collapse(ops)


GRIDS = (("split (B64 H64)", True), ("unsplit (B64 H128)", False))
# (FP8 cache, full score blocks) of every Gluon decode variant
VARIANTS = ((False, False), (False, True), (True, False))


def build(split: bool, full_scores: bool, fp8: bool = False, staged: bool = False, pdl: int = 0):
    row = gluon_decode_kernel.FP8_RECORD if fp8 else 576
    constexprs = dict(PAGE=64, ROW=row, DV=512, DR=64, BLOCK_H=gluon_decode_kernel.HEADS,
                      BLOCK_N=gluon_decode_kernel.BLOCK_N, SPLIT=split, FULL_SCORES=full_scores, FP8=fp8, TILE=128,
                      ROW_SCAN=2048, STAGED=staged, PDL=pdl)
    types = {**TYPES, "cache": "*u8"} if fp8 else TYPES
    if staged:
        types = {**types, "o_part": "*bf16"}
    return compile_resources(gluon_decode_kernel._sparse_mla_decode_kernel, constexprs, types,
                             num_warps=gluon_decode_kernel.NUM_WARPS,
                             divisible=("stride_qt", "stride_qh", "stride_idx"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="also write the TTGIR and PTX of every build here")
    args = parser.parse_args()
    for fp8, full in VARIANTS:
        label = ("FP8, " if fp8 else "") + ("full scores [8, 1]" if full else "half scores [4, 2]")
        for name, split in GRIDS:
            resources, compiled = build(split, full, fp8)
            print(f"{label}, {name}: {resources.line()}")
            if args.out:
                args.out.mkdir(parents=True, exist_ok=True)
                stem = f"gluon_decode_split{int(split)}_full{int(full)}_fp8{int(fp8)}"
                for kind in ("ttgir", "ptx"):
                    (args.out / f"{stem}.{kind}").write_text(compiled.asm[kind])
        if not full:
            resources, _ = build(True, full, fp8, staged=True)
            print(f"{label}, split with bf16 partials staged in shared memory (staged_partials): {resources.line()}")
        print(f"{label}, TTGIR key loop:", " -> ".join(ttgir_loop_order(compiled.asm["ttgir"])))
        print(f"{label}, PTX key loop:", " -> ".join(ptx_loop_order(compiled.asm["ptx"])))


if __name__ == "__main__":
    main()
