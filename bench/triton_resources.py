"""Compile a Triton kernel for a GPU target offline (no GPU needed) and print its resource usage.

    python -m bench.triton_resources dayzero.plugins.kda.chunk_intra_kernel:intra_pairs_kernel \
        H=32 K=128 BK=16 USE_L2NORM=1 g_cum:*fp32 x_out:*fp32 aqk_out:*bf16 q_inv_out:*fp32 k_inv_out:*fp32 \
        cu_seqlens:*i32 chunk_offsets:*i32 scale:fp32 N:i32 --num-warps 4 --num-stages 1

Registers, spill stores / loads and the stack frame come from the `ptxas -v` log of Triton's own ptxas run (the
driver reports `n_regs` / `n_spills` only when it loads a binary, which needs a GPU); shared memory from Triton's
metadata; the mma kind and local-memory instructions from the PTX. `--loads` also prints how many global load
instructions of each kind and width the PTX holds (static counts, not executions): ld.global by suffix, cp.async by
bytes. `--histogram` prints the instructions that decide a kernel's cost (ex2, mma / wgmma, global loads and stores
by width, cp.async by size, bar.sync, shared memory, shuffles) per loop of the PTX: static counts per region, so a
program executes straight + sum over loops of count x trips (the trips, e.g. K / BK, are the kernel's).
Arguments not given a type (`NAME:TYPE`) are `*bf16` pointers. Every pointer argument gets the
divisibility-by-16 hint that the launcher gives 16-byte aligned tensors (`--no-align` drops it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import triton
from triton import knobs
from triton.backends.compiler import GPUTarget


@dataclass(frozen=True)
class Resources:
    name: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack: int
    shared: int
    mma: str
    local_ops: int

    def line(self) -> str:
        return (f"{self.name}: {self.registers} registers, stack {self.stack} B, spill stores {self.spill_stores} B / "
                f"loads {self.spill_loads} B, shared {self.shared} B, mma {self.mma}, ld/st.local in PTX "
                f"{self.local_ops}")


def _ptxas_numbers(log: str) -> dict[str, int]:
    """Registers, stack frame and spill bytes from a `ptxas -v` log."""
    number = lambda pattern: int(m.group(1)) if (m := re.search(pattern, log)) else 0  # noqa: E731
    return {"registers": number(r"Used (\d+) registers"), "stack": number(r"(\d+) bytes stack frame"),
            "spill_stores": number(r"(\d+) bytes spill stores"), "spill_loads": number(r"(\d+) bytes spill loads")}


def _mma_kind(ptx: str) -> str:
    kinds = [name for name, pattern in (("wgmma", "wgmma.mma_async"), ("mma.sync", "mma.sync")) if pattern in ptx]
    return "+".join(kinds) or "none"


def global_load_histogram(ptx: str) -> dict[str, int]:
    """Static counts of `ld.global*` instructions by their full suffix and of `cp.async` copies by their size."""
    loads = re.findall(r"\b(ld\.global[\w.:]*)", ptx)
    sizes = re.findall(r"\bcp\.async\.c[ag][\w.:]*\s+[^,]+,\s*[^,]+,\s*(0x[0-9a-fA-F]+|\d+)", ptx)
    copies = [f"cp.async {int(size, 0)} B" for size in sizes]
    return dict(sorted(Counter(loads + copies).items()))


# instruction families: name -> how the opcode (predicate stripped) starts; the first match names the line
_COST_FAMILIES = [
    ("ex2", r"ex2\."), ("lg2", r"lg2\."), ("wgmma", r"wgmma\.mma_async"), ("mma.sync", r"mma\.sync"),
    ("ld.global", r"ld\.global"), ("cp.async", r"cp\.async\.c[ag]"), ("st.global", r"st\.global"),
    ("bar.sync", r"bar\.sync"), ("ldmatrix", r"ldmatrix"), ("stmatrix", r"stmatrix"), ("ld.shared", r"ld\.shared"),
    ("st.shared", r"st\.shared"), ("shfl", r"shfl\.sync"),
]


def instruction_histogram(ptx: str) -> dict[str, dict[str, int]]:
    """{region: {instruction: static count}}; regions are 'straight' and 'loop <label> depth <d>' (innermost wins).
    Global memory and mma instructions keep their full suffix (width, shape); the others are counted by family."""
    lines = ptx.splitlines()
    loops = []
    for i, line in enumerate(lines):
        # LLVM puts an inner loop's header comment on the line after its label
        if m := re.match(r"(\$L__BB\d+_\d+):.*?Loop Header: Depth=(\d+)", line + " ".join(lines[i + 1:i + 2])):
            branch = re.compile(rf"\bbra(\.uni)?\s+{re.escape(m.group(1))};")
            # a header whose back branch does not name it (a rotated loop) gets no region: its lines count outside
            ends = [j for j in range(i, len(lines)) if branch.search(lines[j])]
            if ends:
                loops.append((i, max(ends), f"loop {m.group(1)} depth {m.group(2)}"))
    histogram: dict[str, dict[str, int]] = {}
    for i, line in enumerate(lines):
        opcode = (re.sub(r"^\s*(@!?%p\d+\s+)?", "", line).split() or [""])[0]
        family = next((name for name, pattern in _COST_FAMILIES if re.match(pattern, opcode)), None)
        if family is None:
            continue
        key = opcode if family in ("wgmma", "mma.sync", "ld.global", "st.global", "cp.async") else family
        if family == "cp.async" and (size := re.search(r",\s*(0x[0-9a-fA-F]+|\d+)\s*(,|;)", line)):
            key = f"{opcode} {int(size.group(1), 0)} B"
        inner = [(start, name) for start, end, name in loops if start <= i <= end]
        region = max(inner)[1] if inner else "straight"
        histogram.setdefault(region, Counter())[key] += 1
    return histogram


def _signature(fn, constexprs: dict, types: dict[str, str]) -> dict[str, str]:
    """Every argument of `fn`: 'constexpr', its type in `types`, else '*bf16'."""
    return {name: "constexpr" if name in constexprs else types.get(name, "*bf16") for name in fn.arg_names}


def _source_class(fn):
    """Triton's AST source, or Gluon's for a `gluon.jit` kernel (it lowers straight to TTGIR)."""
    if fn.is_gluon():
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource
    return triton.compiler.ASTSource


def compile_resources(fn, constexprs: dict, types: dict[str, str] | None = None, num_warps: int = 4,
                      num_stages: int = 1, arch: int = 90, align: bool = True,
                      maxnreg: int | None = None, divisible: tuple[str, ...] = ()) -> tuple[Resources, object]:
    """Compile `fn` (a @triton.jit or @gluon.jit function) for sm_`arch` with `constexprs`; `types` maps argument
    names to Triton types ('*fp32', 'fp32', 'i64', ...); the others are '*bf16'. `divisible` names integer
    arguments that get the divisibility-by-16 hint (the launcher gives it to integers that are multiples of 16, e.g.
    strides)."""
    sig = _signature(fn, constexprs, types or {})
    attrs = {}
    if align:
        attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
                 if sig[name].startswith("*") or name in divisible}
    src = _source_class(fn)(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    target = GPUTarget("cuda", arch, 32)
    options = {"num_warps": num_warps, "num_stages": num_stages}
    if maxnreg is not None:
        options["maxnreg"] = maxnreg
    # Triton runs `ptxas -v` itself (with its own flags) and prints the log when asked to; a cache hit would skip it
    log = io.StringIO()
    with knobs.nvidia.scope(), knobs.compilation.scope(), contextlib.redirect_stdout(log):
        knobs.nvidia.dump_ptxas_log = True
        knobs.compilation.always_compile = True
        compiled = triton.compile(src, target=target, options=options)
    ptx = compiled.asm["ptx"]
    report = _ptxas_numbers(log.getvalue())
    local_ops = len(re.findall(r"\b(?:ld|st)\.local", ptx))
    return Resources(name=fn.__name__, shared=compiled.metadata.shared, mma=_mma_kind(ptx), local_ops=local_ops,
                     **report), compiled


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel", help="module.path:kernel_name")
    parser.add_argument("args", nargs="*", help="NAME=VALUE: a constexpr (ints, floats; True/False as 1/0); "
                        "NAME:TYPE: an argument's Triton type (*fp32, *i32, fp32, i32, i64, ...)")
    parser.add_argument("--num-warps", type=int, default=4)
    parser.add_argument("--num-stages", type=int, default=1)
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--maxnreg", type=int, default=None)
    parser.add_argument("--no-align", action="store_true")
    parser.add_argument("--ptx", type=Path, default=None, help="also write the PTX here")
    parser.add_argument("--loads", action="store_true", help="print the PTX's global load histogram")
    parser.add_argument("--histogram", action="store_true", help="print the PTX's cost instructions per loop")
    parser.add_argument("--divisible", default="", help="comma-separated integer arguments that are multiples of 16")
    args = parser.parse_args()
    module, name = args.kernel.split(":")
    fn = getattr(importlib.import_module(module), name)
    constexprs = {k: _value(v) for k, v in (a.split("=", 1) for a in args.args if "=" in a)}
    types = dict(a.split(":", 1) for a in args.args if "=" not in a)
    res, compiled = compile_resources(fn, constexprs, types, num_warps=args.num_warps, num_stages=args.num_stages,
                                      arch=args.arch, align=not args.no_align, maxnreg=args.maxnreg,
                                      divisible=tuple(filter(None, args.divisible.split(","))))
    print(res.line())
    if args.loads:
        for name, count in global_load_histogram(compiled.asm["ptx"]).items():
            print(f"  {count:5d}  {name}")
    if args.histogram:
        for region, counts in instruction_histogram(compiled.asm["ptx"]).items():
            print(region)
            for name, count in sorted(counts.items()):
                print(f"  {count:5d}  {name}")
    if args.ptx:
        args.ptx.write_text(compiled.asm["ptx"])


if __name__ == "__main__":
    main()
