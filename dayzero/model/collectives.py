"""The collectives inside a step, as functional c10d ops: torch.export records them as graph nodes and AOTInductor
compiles them in; at run time they resolve their process group by name."""

from __future__ import annotations

import torch
import torch.distributed._functional_collectives as funcol

# the name c10d gives the default process group: every rank's engine reduces over the whole world
WORLD_GROUP = "0"


def reduce_partial(x: torch.Tensor, group: str | None) -> torch.Tensor:
    """Sum a rank's partial output over the tensor-parallel group (identity on one rank)."""
    if group is None:
        return x
    return funcol.all_reduce(x, "sum", group)


def _is_collective(node: torch.fx.Node) -> bool:
    name = str(node.target)
    return node.op == "call_function" and name.startswith("_c10d_functional.") and "wait_tensor" not in name


def _depends_on(node: torch.fx.Node, ancestor: torch.fx.Node) -> bool:
    seen, stack = set(), list(node.all_input_nodes)
    while stack:
        current = stack.pop()
        if current is ancestor:
            return True
        if current not in seen:
            seen.add(current)
            stack.extend(current.all_input_nodes)
    return False


def unordered_collectives(graph: torch.fx.Graph) -> list[tuple[str, str]]:
    """Consecutive collectives of a step where the later does not depend on the earlier: a compiler may issue
    them in either order, and ranks that pick different orders deadlock (or mix up equal-sized buffers)."""
    collectives = [node for node in graph.nodes if _is_collective(node)]
    return [(a.name, b.name) for a, b in zip(collectives, collectives[1:]) if not _depends_on(b, a)]


def gather_ranks(x: torch.Tensor, group: str, world: int) -> torch.Tensor:
    """x [rows, ...] of every rank -> [world, rows, ...] in rank order (context parallelism's exchanges)."""
    # all_gather_single replaces all_gather_tensor from torch 2.13 on; the H200 image has 2.11
    gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
    gathered = gather(x.contiguous(), 0, group)
    return gathered.view(world, *x.shape)
