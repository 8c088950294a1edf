"""The op kinds a decode step's time and memory floor are split into (`dayzero bench --profile`), and the one table
that says which kind each kernel, profiled op and parameter belongs to.

* Plugin work by the plugin that serves it: a Triton kernel by the module that defines its `@triton.jit` function
  (the profiler names a Triton kernel after that function), a registered op (`dayzero::<op>`, what the CPU profile
  shows) by its name, each falling back to its plugin package's kind.
* The rest by its ATen / cuBLAS name: GEMM (the projections, LM head and decode router), norms, reductions,
  elementwise (copies, fills and the embedding lookup included); a name none of these patterns knows is "other".
* Device work launched outside the model's forward (input copies, the argmax, the sampler) is "sampling"; the step's
  wall time with no device work running is a gap: "gaps in the model" between two pieces of one forward's work (on a
  GPU the time between a CUDA graph's kernels; on a CPU the Python between ops), "host gaps" the rest (step_trace.py
  decides all three, not names).
* Floor bytes follow the same kinds: routed experts to the expert GEMMs, the router's score bias to routing, KDA gate
  and conv weights and KDA states to KDA, index keys to the indexer, latent rows to MLA attention, K/V rows to GQA
  attention, norm, AttnRes and mHC weights to their kinds, every other weight to GEMM (floor_kinds.py adds the caches
  and states).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re

KDA, INDEXER, MLA, GQA, CACHE_WRITES = "kda", "indexer", "mla", "gqa", "cache_writes"
ATTNRES, MHC = "attnres", "mhc"
MOE_ROUTING, MOE_EXPERTS, GEMM, NORMS = "moe_routing", "moe_experts", "gemm", "norms"
ELEMENTWISE, REDUCTIONS, OTHER, SAMPLING = "elementwise", "reductions", "other", "sampling"
MODEL_GAPS, HOST_GAPS = "model_gaps", "host_gaps"
LABELS = {
    KDA: "KDA", INDEXER: "DSA indexer", MLA: "MLA attention", GQA: "GQA attention", CACHE_WRITES: "cache writes",
    ATTNRES: "AttnRes", MHC: "mHC",
    MOE_ROUTING: "MoE routing", MOE_EXPERTS: "MoE expert GEMMs", GEMM: "GEMM (projections)", NORMS: "norms",
    ELEMENTWISE: "elementwise", REDUCTIONS: "reductions", OTHER: "other kernels", SAMPLING: "sampling, inputs",
    MODEL_GAPS: "gaps in the model", HOST_GAPS: "host gaps",
}
KINDS = tuple(LABELS)

PLUGINS = "dayzero.plugins"
# plugin package -> kind of its kernels and ops (quant: the MXFP8 quantizer of the indexer's decode query)
PACKAGE_KINDS = {"kda": KDA, "short_conv": KDA, "indexer": INDEXER, "quant": INDEXER, "sparse_mla": MLA, "gqa": GQA,
                 "paged_cache": CACHE_WRITES, "attnres": ATTNRES, "mhc": MHC, "moe": MOE_EXPERTS,
                 "norm": NORMS}
# a kernel module of a package whose kernels are not all of the package's kind
MODULE_KINDS = {"moe.route_kernel": MOE_ROUTING, "moe.permute_kernel": MOE_ROUTING,
                "moe.router_gemm_kernel": MOE_ROUTING, "gqa.write_kernel": CACHE_WRITES}
# a registered op not of its package's kind
OP_KINDS = {"moe_route": MOE_ROUTING, "moe_permute": MOE_ROUTING, "moe_unpermute": MOE_ROUTING,
            "moe_router_logits": MOE_ROUTING, "write_kv": CACHE_WRITES}

# ATen / cuBLAS / Inductor names, first match wins: GPU kernel names and CPU op names (aten::...) alike
NAME_PATTERNS = (
    (MOE_EXPERTS, r"grouped_?mm|grouped_gemm"),
    (GEMM, r"gemm|gemv|cutlass|cublas|nvjet|xmma|splitkreduce|^(sm\d+|ampere|hopper)_"
           r"|^aten::(mm|addmm|bmm|baddbmm|matmul|linear|einsum|mv|addmv_?|dot|_scaled_mm)$"),
    (NORMS, r"(rms|layer|group|batch)_?norm"),
    (REDUCTIONS, r"reduce|softmax|arg(max|min)|topk|sort|scan|cumsum|logsumexp|radix|cub::|^triton_(red|per)_"
                 r"|^aten::(sum|mean|amax|amin|max|min|prod|all|any|var|std|norm|linalg_vector_norm|median)$"),
    (ELEMENTWISE, r"elementwise|index|gather|scatter|catarray|copy|fill|memcpy|memset|embedding|^triton_poi_"
                  r"|^aten::"),
)
_PATTERNS = tuple((kind, re.compile(pattern, re.IGNORECASE)) for kind, pattern in NAME_PATTERNS)

# parameter name patterns -> kind of the work that reads them in a decode step; first match wins, GEMM otherwise
PARAM_PATTERNS = (
    (ELEMENTWISE, r"^model\.embed_tokens\."),
    (MOE_EXPERTS, r"\.block_sparse_moe\.experts\."),
    (MOE_ROUTING, r"\.e_score_correction_bias$"),
    (ATTNRES, r"_res_(norm|proj)\."),
    (MHC, r"_hc\.(fn|base|scale)$"),
    (KDA, r"\.(A_log|dt_bias)$|_conv1d\."),
    (NORMS, r"norm\.(weight|bias)$"),
)
_PARAMS = tuple((kind, re.compile(pattern)) for kind, pattern in PARAM_PATTERNS)


def label(kind: str) -> str:
    return LABELS[kind]


def name_kind(name: str) -> str:
    """The kind of an ATen / cuBLAS kernel or op by its name ("other" for a name no pattern knows)."""
    return next((kind for kind, pattern in _PATTERNS if pattern.search(name)), OTHER)


def plugin_kind(module: str) -> str | None:
    """The kind of a kernel defined in `module` (dayzero.plugins.<package>.<file>), None outside the plugins."""
    if not module.startswith(PLUGINS + "."):
        return None
    local = module.removeprefix(PLUGINS + ".")
    return MODULE_KINDS.get(local, PACKAGE_KINDS.get(local.split(".")[0], OTHER))


def kernel_kind(name: str) -> str:
    """The kind of a device kernel by the profiler's name for it."""
    module = triton_kernel_modules().get(name)
    return plugin_kind(module) if module is not None else name_kind(name)


def cpu_op_kind(name: str) -> str:
    """The kind of a profiled CPU op: `dayzero::<op>` by the plugin that registers it, the rest by name."""
    if name.startswith("dayzero::"):
        op = name.removeprefix("dayzero::")
        module = plugin_op_modules().get(op)
        return OP_KINDS.get(op) or (plugin_kind(module) if module is not None else OTHER)
    return name_kind(name)


def param_kind(name: str) -> str:
    """The kind of the work that reads parameter `name` (checkpoint naming) in a decode step."""
    return next((kind for kind, pattern in _PARAMS if pattern.search(name)), GEMM)


@functools.cache
def triton_kernel_modules() -> dict[str, str]:
    """Triton kernel name -> the plugin module defining it, over every importable plugin module."""
    found = {}
    package = importlib.import_module(PLUGINS)
    for info in pkgutil.walk_packages(package.__path__, PLUGINS + "."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            continue
        for value in vars(module).values():
            function = _triton_function(value)
            # a kernel belongs to the module defining it, not to those importing it
            if function is not None and function.__module__ == info.name:
                found.setdefault(function.__name__, info.name)
    return found


def _triton_function(value):
    """The Python function under a @triton.jit (or autotuned, heuristics, Gluon) kernel; None for anything else."""
    if not type(value).__module__.startswith("triton"):
        return None
    while hasattr(value, "fn"):
        value = value.fn
    return value if hasattr(value, "__name__") and hasattr(value, "__module__") else None


@functools.cache
def plugin_op_modules() -> dict[str, str]:
    """Registered op name -> the module of its implementation, over every plugin package (importing one registers
    its ops)."""
    from dayzero.plugins.registry import PLUGIN_OPS

    package = importlib.import_module(PLUGINS)
    for info in pkgutil.iter_modules(package.__path__, PLUGINS + "."):
        if info.ispkg:
            importlib.import_module(info.name)
    return {name: op.dayzero_impls["cuda"].__module__ for name, op in PLUGIN_OPS.items()}
