"""The CP x TP mesh: which ranks share tokens (a TP group) or heads (a CP group), and the group names the model's
collectives use before the world forms."""

from __future__ import annotations

from dayzero.model.collectives import WORLD_GROUP
from dayzero.parallel.mesh import MeshRank, mesh_members


def test_tp_groups_are_consecutive_ranks_and_cp_groups_stride_by_tp():
    assert mesh_members(2, 3) == [[0, 1], [2, 3], [4, 5], [0, 2, 4], [1, 3, 5]]
    ranks = [MeshRank(2, 3, r) for r in range(6)]
    assert [(m.cp_rank, m.tp_rank) for m in ranks] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    # names in creation order after the default ("0") and command ("1") groups
    assert [m.tp_group for m in ranks] == ["2", "2", "3", "3", "4", "4"]
    assert [m.cp_group for m in ranks] == ["5", "6", "5", "6", "5", "6"]
    for index, members in enumerate(mesh_members(2, 3)):
        for rank in members:
            assert str(2 + index) in (ranks[rank].tp_group, ranks[rank].cp_group)


def test_one_axis_runs_over_the_default_group():
    assert mesh_members(4, 1) == mesh_members(1, 4) == []
    assert MeshRank(4, 1, 3).tp_group == MeshRank(1, 4, 3).cp_group == WORLD_GROUP
    assert (MeshRank(4, 1, 3).tp_rank, MeshRank(1, 4, 3).cp_rank) == (3, 3)
