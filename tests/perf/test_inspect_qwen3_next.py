"""`dayzero inspect` on the bundled Qwen3-Next config: test_inspect.py's agreements (weights with `dayzero plan`, decode
bytes with the bench floor, prefill work, one mixer and one feed-forward a layer, registered ops), and the gated
DeltaNet layers' per-sequence state and ops."""

from __future__ import annotations

import pytest

from dayzero.perf.inspect import InspectOptions, profile
from dayzero.perf.layer_caches import SEQUENCE
from dayzero.plugins.registry import PLUGIN_OPS
from tests.perf.test_inspect import (  # noqa: F401 (collected here, on this module's case)
    bundled,
    test_bundled_configs_are_served_by_registered_ops,
    test_decode_bytes_agree_with_the_bench_floor,
    test_every_layer_has_one_mixer_and_one_feed_forward,
    test_prefill_work_agrees_with_the_bench_model,
    test_weights_agree_with_plan,
)

NAME = "qwen3-next-80b-a3b"


@pytest.fixture(scope="module")
def case():
    cfg, options = bundled(NAME), InspectOptions(context=32768)
    return cfg, cfg, options, profile(cfg, NAME, options)


def test_gated_deltanet_keeps_a_state_and_a_conv_window_per_sequence(case):
    cfg, _, _, report = case
    gdn = next(row for row in report.rows if row.kind == "gdn")
    assert gdn.layers == 36 and {line.per for line in gdn.caches} == {SEQUENCE}
    lines = {line.tensor: line.bytes for line in gdn.caches}
    assert lines == {"state": (32 * 128 * 128 * 4,), "conv": (3 * 8192 * 2,)}
    assert [piece.decode for piece in gdn.pieces] == ["fused_gdn_decode"] * 3 + ["gated_rms_norm"]
    assert {"short_conv_prefill", "chunk_kda", "fused_gdn_decode", "gated_rms_norm"} <= set(PLUGIN_OPS)
    assert [piece.prefill for piece in gdn.pieces] == ["short_conv_prefill", "torch (gdn_gate)", "chunk_kda",
                                                       "gated_rms_norm"]
