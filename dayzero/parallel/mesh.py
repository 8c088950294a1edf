"""The CP x TP mesh of a multi-rank engine: rank r is tensor-parallel rank r % tp of context-parallel rank r // tp
(a TP group is tp consecutive ranks: neighbouring GPUs), and which c10d group each axis's collectives name.

The model's collectives name their group by string when it loads, before the world forms; the names are the ones
c10d gives the groups `create_mesh_groups` makes, in order, right after the default group ("0") and the command
group ("1"). With one axis only, its collectives run over the default group.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist

from dayzero.errors import DayzeroError
from dayzero.model.collectives import WORLD_GROUP

# groups c10d has named before the mesh's: the default group and the command group
GROUPS_BEFORE_MESH = 2


@dataclass(frozen=True)
class MeshRank:
    tp: int
    cp: int
    rank: int

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp

    @property
    def cp_rank(self) -> int:
        return self.rank // self.tp

    @property
    def has_subgroups(self) -> bool:
        return self.tp > 1 and self.cp > 1

    @property
    def tp_group(self) -> str:
        """The group of the ranks that share this rank's tokens and split its heads."""
        return str(GROUPS_BEFORE_MESH + self.cp_rank) if self.has_subgroups else WORLD_GROUP

    @property
    def cp_group(self) -> str:
        """The group of the ranks that hold this rank's heads and split the tokens."""
        return str(GROUPS_BEFORE_MESH + self.cp + self.tp_rank) if self.has_subgroups else WORLD_GROUP


def mesh_members(tp: int, cp: int) -> list[list[int]]:
    """Every group `create_mesh_groups` makes, in order: the TP groups by cp rank, then the CP groups by tp rank."""
    if tp == 1 or cp == 1:
        return []
    return ([[c * tp + t for t in range(tp)] for c in range(cp)]
            + [[c * tp + t for c in range(cp)] for t in range(tp)])


def create_mesh_groups(tp: int, cp: int, timeout) -> None:
    """Every rank makes every group, in the same order (c10d's rule for new_group), and checks their names."""
    for index, members in enumerate(mesh_members(tp, cp)):
        group = dist.new_group(members, timeout=timeout)
        expected = str(GROUPS_BEFORE_MESH + index)
        name = getattr(group, "group_name", expected)  # a non-member rank gets a placeholder without one
        if name != expected:
            raise DayzeroError(f"c10d named the mesh group of ranks {members} {name!r}, where the model's collectives "
                               f"expect {expected!r}; this torch version names groups differently (a dayzero bug)")
