import pytest
import torch

from dayzero.model.caches import CacheFormat
from dayzero.model.config import ModelConfig
from dayzero.model.eager_engine import config_manifest
from dayzero.perf.decode_traffic import decode_traffic
from dayzero.perf.floor_kinds import floor_bytes_by_kind
from dayzero.perf.op_kinds import (
    ATTNRES,
    ELEMENTWISE,
    GEMM,
    GQA,
    INDEXER,
    KDA,
    KINDS,
    MLA,
    MOE_EXPERTS,
    MOE_ROUTING,
    NORMS,
)
from tests.helpers import TINY_CONFIG


@pytest.mark.parametrize("fmt", [CacheFormat(), CacheFormat(index_mxfp8=True)], ids=["bf16", "mxfp8-index"])
@pytest.mark.parametrize("batch, context", [(1, 5), (3, 700)])
def test_the_kinds_split_the_whole_floor(fmt, batch, context):
    cfg = ModelConfig.from_hf(TINY_CONFIG)
    manifest = config_manifest(cfg, torch.bfloat16, fmt, max_batch=4)
    by_kind = floor_bytes_by_kind(cfg, manifest, batch, context)
    assert sum(by_kind.values()) == pytest.approx(decode_traffic(cfg, manifest, batch, context).total_bytes)
    assert set(by_kind) <= set(KINDS)
    assert all(by_kind[k] > 0 for k in (KDA, INDEXER, MLA, ATTNRES, MOE_EXPERTS, MOE_ROUTING, GEMM, NORMS, ELEMENTWISE))


def test_caches_and_states_grow_their_own_kinds():
    cfg = ModelConfig.from_hf(TINY_CONFIG)
    manifest = config_manifest(cfg, torch.bfloat16, CacheFormat(), max_batch=4)
    short, long = (floor_bytes_by_kind(cfg, manifest, 1, context) for context in (4, 4000))
    # past the indexer's top-k only the index keys grow with the context; the KDA state does not
    assert long[INDEXER] > short[INDEXER] and long[MLA] > short[MLA] and long[KDA] == short[KDA]
    assert long[GEMM] == short[GEMM]
    # KDA: its gate and conv weights once, a state slot a sequence
    weights = _kda_weights(cfg)
    assert floor_bytes_by_kind(cfg, manifest, 3, 4)[KDA] - weights == pytest.approx(3 * (short[KDA] - weights))


def test_gqa_layers_read_their_kv_rows_as_gqa_attention():
    from tests.model.test_gated_attention import gqa_model_config

    cfg = gqa_model_config()
    manifest = config_manifest(cfg, torch.bfloat16, CacheFormat(kv_fp8=True), max_batch=4)
    by_kind = floor_bytes_by_kind(cfg, manifest, 2, 300)
    assert sum(by_kind.values()) == pytest.approx(decode_traffic(cfg, manifest, 2, 300).total_bytes)
    assert by_kind[GQA] == pytest.approx(decode_traffic(cfg, manifest, 2, 300).cache_bytes)


def _kda_weights(cfg) -> float:
    from dayzero.perf.decode_traffic import weight_bytes_by_name
    from dayzero.perf.op_kinds import param_kind

    return sum(b for name, b in weight_bytes_by_name(cfg, torch.bfloat16, 1).items() if param_kind(name) == KDA)
