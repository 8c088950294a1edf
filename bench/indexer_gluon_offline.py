"""Offline sm_90 build of the Gluon indexer split kernel (gluon_select_kernel.py; no GPU needed): registers, spills,
shared memory, and its key loop's SASS instructions per 64 keys by opcode, beside the Triton split kernel's.

    PYTHONPATH=/tmp/t36:. python bench/indexer_gluon_offline.py

Triton 3.6 (the H200's) must come first on the path: Gluon's API differs between releases. The key loop is the
SASS loop holding the wgmmas, counted per 64 keys: the Gluon loop takes a 128-key tile an iteration up to 32 heads
(64 above), the Triton kernel's two 128-key tiles at HI 32 and one at HI 64.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import triton

from bench.triton_resources import compile_resources
from dayzero.plugins.indexer import decode_select_kernel, gluon_select_kernel

TYPES = {"q": "*u8", "q_scales": "*u8", "w": "*fp32", "cache": "*u8", "block_table": "*i32", "positions": "*i32",
         "cu_seqlens": "*i32", "set_keys": "*i32", "set_positions": "*i32", "counts": "*i32", "floors": "*i32",
         "num_splits_used": "*i32", "scale": "fp32", "num_splits": "i32", "min_chunk": "i32", "split_keys": "i32",
         "table_stride": "i32", "K": "i32"}
BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def sass(ptx: str) -> list[str]:
    """The SASS instruction lines of a PTX, compiled for sm_90a."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.ptx").write_text(ptx)
        subprocess.run([BIN / "ptxas", "-arch=sm_90a", "-O3", f"{tmp}/k.ptx", "-o", f"{tmp}/k.cubin"], check=True)
        text = subprocess.run([BIN / "cuobjdump", "-sass", f"{tmp}/k.cubin"], check=True, capture_output=True,
                              text=True).stdout
    return [line for line in text.splitlines() if re.match(r"\s+/\*[0-9a-f]+\*/\s+\S", line)]


def key_loop(lines: list[str]) -> list[str]:
    """The instructions of the first loop holding a wgmma: from the branch before it to the branch after."""
    first = next(i for i, line in enumerate(lines) if "GMMA" in line)
    start = max(i for i in range(first) if "BRA" in lines[i])
    end = next(i for i in range(first, len(lines)) if "BRA" in lines[i])
    return lines[start + 1:end + 1]


def opcodes(lines: list[str]) -> Counter:
    names = (re.sub(r"^\s+/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?", "", line).split()[0].split(".")[0] for line in lines)
    return Counter(names)


def report(name: str, fn, constexprs: dict, num_stages: int, keys_an_iteration: int) -> None:
    resources, compiled = compile_resources(fn, constexprs, TYPES, num_warps=4, num_stages=num_stages,
                                            divisible=("table_stride",))
    loop = opcodes(key_loop(sass(compiled.asm["ptx"])))
    per_tile = {op: n * 64 / keys_an_iteration for op, n in loop.most_common()}
    top = ", ".join(f"{op} {n:g}" for op, n in list(per_tile.items())[:12])
    print(f"{name}: {resources.line()}")
    print(f"  key loop, per 64 keys: {sum(per_tile.values()):g} instructions ({top})")


def main() -> None:
    for heads in (32, 64):
        tile = gluon_select_kernel.gluon_tile_keys(heads)
        report(f"Gluon HI{heads}", gluon_select_kernel._gluon_split_kernel,
               dict(HI=heads, HP=heads, KP=2048, U=4096, TILE=tile), 1, tile)
        triton_constexprs = dict(HI=heads, DI=128, PAGE=64, LP=1, HP=heads, DP=128, BS=128, KP=2048, U=4096,
                                 KEY_QUANT=True, Q_QUANT=True, DOT_FP32=False, KEY_WORDS=True, CODE_WORDS=True,
                                 FP8_DOT=True, NPB=32)
        report(f"Triton HI{heads}", decode_select_kernel._decode_select_kernel, triton_constexprs, 3,
               256 if heads <= 32 else 128)


if __name__ == "__main__":
    main()
