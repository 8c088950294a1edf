"""The fused Triton AttnRes mix vs the reference (interpreter on CPU, native on the GPU)."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.attnres import reference
from tests.helpers import rel_err
from tests.plugins.triton_env import DEVICE, ON_GPU, gpu_only, needs_triton, poisoned, sizes

# on the GPU every test here runs natively (`pytest -m gpu`); on the CPU under the interpreter
pytestmark = [needs_triton] + ([pytest.mark.gpu] if ON_GPU else [])

# the CPU interpreter truncates fp32 -> bf16 where the GPU rounds to nearest, hence the loose bf16 bound
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def use_config(monkeypatch, config):
    """Every launch takes `config`, one that default_config chooses for some call, on the test's tiny shapes."""
    from dayzero.plugins.attnres import kernel

    monkeypatch.setattr(kernel, "default_config", lambda tokens, dim, num_sources, emit_norm=False: config)


# one config of each kind that default_config chooses: the per-token kernel; the persistent one (emitted norm,
# rows too wide for a pipelined tile); the pipelined one (sources in pairs or one at a time, 2 to 4 stages)
PER_TOKEN = "per-token"
CONFIGS = {
    PER_TOKEN: dict(tile=2, num_warps=4),
    "persistent-pairs": dict(tile=2, num_warps=2, persistent=4),
    "persistent-one": dict(tile=1, num_warps=4, persistent=1),
    "pipelined-pairs": dict(tile=2, num_warps=4, persistent=4, stages=3),
    "pipelined-pairs-8": dict(tile=2, num_warps=2, persistent=8, stages=3),
    "pipelined-one-2": dict(tile=1, num_warps=4, persistent=4, stages=2),
    "pipelined-one-4": dict(tile=1, num_warps=4, persistent=4, stages=4),
}


def _config(name):
    from dayzero.plugins.attnres.kernel import MixConfig

    return MixConfig(**CONFIGS[name])


def _inputs(num_sources, tokens, dim, dtype):
    # sources of different scales, so the softmax weights are far from uniform
    sources = [(torch.randn(tokens, dim, device=DEVICE) * (1 + i) + 0.1 * i).to(dtype) for i in range(num_sources)]
    query = torch.randn(dim, device=DEVICE)
    rms_weight, norm_weight = torch.rand(dim, device=DEVICE) + 0.5, torch.rand(dim, device=DEVICE) + 0.5
    return sources, query, rms_weight, norm_weight


@pytest.mark.parametrize("num_sources, tokens, dim, dtype", sizes(
    cpu=[(1, 3, 48, torch.float32), (2, 5, 37, torch.bfloat16), (8, 2, 64, torch.float32),
         (9, 3, 100, torch.bfloat16), (16, 1, 24, torch.float32)],
    gpu=[(1, 1, 7168, torch.bfloat16), (2, 64, 2304, torch.bfloat16), (8, 333, 7168, torch.float32),
         (9, 8192, 7168, torch.bfloat16), (9, 4097, 2304, torch.bfloat16), (16, 7, 1000, torch.float32)],
))
def test_mix_matches_reference(num_sources, tokens, dim, dtype):
    from dayzero.plugins.attnres.kernel import attnres_mix_launcher

    sources, query, rms_weight, _ = _inputs(num_sources, tokens, dim, dtype)
    out = poisoned(tokens, dim, dtype=dtype)
    got, normed = attnres_mix_launcher(query, sources, rms_weight, 1e-6, out=out)
    assert got is out and normed is None
    assert rel_err(got, reference.attnres_mix(query, sources, rms_weight, 1e-6)) < TOLERANCE[dtype]


@pytest.mark.parametrize("num_sources", [1, 5, 9])
def test_every_config_keeps_the_result(num_sources):
    # the per-token kernel's pairs: a tile larger than all the sources, tiles that split them unevenly, more tiles
    # than the two in flight
    from dayzero.plugins.attnres.kernel import attnres_mix_launcher

    sources, query, rms_weight, _ = _inputs(num_sources, 3, 2304 if ON_GPU else 96, torch.float32)
    got, _ = attnres_mix_launcher(query, sources, rms_weight, 1e-6, out=poisoned(3, sources[0].shape[-1]))
    assert rel_err(got, reference.attnres_mix(query, sources, rms_weight, 1e-6)) < 1e-5


@pytest.mark.parametrize("num_sources, tokens, dim, dtype", sizes(
    cpu=[(1, 5, 40, torch.float32), (3, 7, 37, torch.bfloat16), (9, 6, 72, torch.float32)],
    gpu=[(2, 8192, 7168, torch.bfloat16), (9, 4097, 2304, torch.bfloat16), (8, 333, 7168, torch.float32),
         (3, 1000, 1000, torch.bfloat16)],
))
@pytest.mark.parametrize("config", [name for name in CONFIGS if name != PER_TOKEN])
@pytest.mark.parametrize("emit_norm", [False, True], ids=["mix", "mix+norm"])
def test_persistent_programs_match_reference(num_sources, tokens, dim, dtype, config, emit_norm, monkeypatch):
    # programs walking several tokens each (the grid does not divide the token count on the interpreter's 2 "SMs"),
    # more programs than tokens (8 per "SM", 5 tokens), tiles that split the sources unevenly or exceed them, the
    # next token's tile loaded past the last token; stages > 0: the pipelined kernel's flat (token, tile) loop
    from dayzero.plugins.attnres.kernel import attnres_mix_launcher

    use_config(monkeypatch, _config(config))
    sources, query, rms_weight, norm_weight = _inputs(num_sources, tokens, dim, dtype)
    out, normed = poisoned(tokens, dim, dtype=dtype), poisoned(tokens, dim, dtype=dtype)
    got, got_normed = attnres_mix_launcher(query, sources, rms_weight, 1e-6, norm_weight if emit_norm else None,
                                           1e-5, out=out, normed=normed if emit_norm else None)
    mix, expected = reference.attnres_mix_norm(query, sources, rms_weight, 1e-6, norm_weight, 1e-5)
    assert rel_err(got, mix) < TOLERANCE[dtype]
    if emit_norm:
        assert rel_err(got_normed, expected) < TOLERANCE[dtype]


def test_pipelined_config_too_deep_for_shared_memory_is_refused(monkeypatch):
    from dayzero.plugins import device as device_info
    from dayzero.plugins.attnres.kernel import attnres_mix_launcher

    monkeypatch.setattr(device_info, "shared_memory_per_program", lambda device: 48 * 1024)
    use_config(monkeypatch, _config("pipelined-one-4"))
    sources, query, rms_weight, _ = _inputs(4, 3, 12288, torch.bfloat16)
    # 3 tiles of 1 x 16384 (12288 padded) bf16 = 98304 bytes
    with pytest.raises(ValueError, match="98304 bytes of shared memory"):
        attnres_mix_launcher(query, sources, rms_weight, 1e-6)


@pytest.mark.parametrize("config", ["persistent-pairs", "pipelined-pairs"])
def test_persistent_programs_mix_blocks_and_the_partial(config, monkeypatch):
    from dayzero.plugins.attnres.kernel import attnres_mix_blocks_launcher

    use_config(monkeypatch, _config(config))
    sources, query, rms_weight, _ = _inputs(5, 7, 48, torch.float32)
    blocks = torch.stack(sources[:4] + [torch.randn_like(sources[0])])
    got, _ = attnres_mix_blocks_launcher(query, blocks, 4, sources[4], rms_weight, 1e-6, out=poisoned(7, 48))
    assert rel_err(got, reference.attnres_mix(query, sources, rms_weight, 1e-6)) < 1e-5


@pytest.mark.parametrize("config", ["per-token", "persistent-one"])
def test_every_tile_mixes_blocks_and_the_partial(config, monkeypatch):
    # the block buffer's rows and the listed partial in one tile of two (and tiles of one): the pointer vector mixes
    # both kinds
    from dayzero.plugins.attnres.kernel import attnres_mix_blocks_launcher

    use_config(monkeypatch, _config(config))
    sources, query, rms_weight, _ = _inputs(4, 2, 40, torch.float32)
    blocks = torch.stack(sources[:3] + [torch.randn_like(sources[0])])
    got, _ = attnres_mix_blocks_launcher(query, blocks, 3, sources[3], rms_weight, 1e-6)
    assert rel_err(got, reference.attnres_mix(query, sources, rms_weight, 1e-6)) < 1e-5


@pytest.mark.parametrize("config", ["per-token", "persistent-pairs", "persistent-one", "pipelined-pairs",
                                    "pipelined-one-2"])
def test_sources_off_16_byte_boundaries_load_unvectorized(config, monkeypatch):
    # the kernels assume 16-byte aligned sources only where the launcher proves it: a source viewed one element
    # into its storage, and a block buffer whose rows are an odd number of elements apart
    from dayzero.plugins.attnres.kernel import attnres_mix_blocks_launcher, attnres_mix_launcher, sources_aligned

    dim = 2304 if ON_GPU else 40
    use_config(monkeypatch, _config(config))
    sources, query, rms_weight, _ = _inputs(3, 5, dim, torch.bfloat16)
    shifted = torch.empty(5 * dim + 1, dtype=torch.bfloat16, device=DEVICE)[1:].view(5, dim)
    shifted.copy_(sources[1])
    listed = [sources[0], shifted, sources[2]]
    expected = reference.attnres_mix(query, sources, rms_weight, 1e-6)
    assert not sources_aligned(sources[0], 0, listed) and sources_aligned(sources[0], 0, sources)
    got, _ = attnres_mix_launcher(query, listed, rms_weight, 1e-6, out=poisoned(5, dim, dtype=torch.bfloat16))
    assert rel_err(got, expected) < TOLERANCE[torch.bfloat16]
    # rows 5 * dim + 1 elements apart: every other block starts off a 16-byte boundary
    padded = torch.empty(3, 5 * dim + 1, dtype=torch.bfloat16, device=DEVICE)
    blocks = padded.as_strided((3, 5, dim), (5 * dim + 1, dim, 1))
    blocks.copy_(torch.stack(sources))
    assert not sources_aligned(blocks, 3, [])
    got, _ = attnres_mix_blocks_launcher(query, blocks, 3, None, rms_weight, 1e-6,
                                         out=poisoned(5, dim, dtype=torch.bfloat16))
    assert rel_err(got, expected) < TOLERANCE[torch.bfloat16]


def test_one_source_is_returned_exactly():
    from dayzero.plugins.attnres.kernel import attnres_mix_launcher

    (source,), query, rms_weight, _ = _inputs(1, 4, 40, torch.float32)
    got, _ = attnres_mix_launcher(query, [source], rms_weight, 1e-6)
    assert torch.equal(got, source)


@pytest.mark.parametrize("num_sources, tokens, dim, dtype", sizes(
    cpu=[(3, 4, 40, torch.float32), (9, 2, 72, torch.bfloat16)],
    gpu=[(9, 64, 7168, torch.bfloat16), (3, 8192, 2304, torch.bfloat16), (2, 100, 2304, torch.float32)],
))
def test_emitted_norm_matches_reference(num_sources, tokens, dim, dtype):
    from dayzero.plugins.attnres.kernel import attnres_mix_launcher

    sources, query, rms_weight, norm_weight = _inputs(num_sources, tokens, dim, dtype)
    out, normed = poisoned(tokens, dim, dtype=dtype), poisoned(tokens, dim, dtype=dtype)
    got, got_normed = attnres_mix_launcher(query, sources, rms_weight, 1e-6, norm_weight, 1e-5, out=out,
                                           normed=normed)
    mix, expected = reference.attnres_mix_norm(query, sources, rms_weight, 1e-6, norm_weight, 1e-5)
    assert rel_err(got, mix) < TOLERANCE[dtype]
    assert rel_err(got_normed, expected) < TOLERANCE[dtype]


@pytest.mark.parametrize("max_blocks, num_blocks, with_partial, tokens, dim, dtype", sizes(
    cpu=[(4, 2, True, 3, 40, torch.float32), (9, 8, True, 2, 33, torch.bfloat16), (3, 3, False, 2, 16, torch.float32),
         (2, 0, True, 3, 24, torch.float32), (12, 9, False, 1, 64, torch.bfloat16)],
    gpu=[(8, 8, True, 8192, 7168, torch.bfloat16), (9, 3, True, 64, 2304, torch.bfloat16),
         (8, 5, False, 1, 7168, torch.bfloat16), (4, 1, True, 777, 2304, torch.float32)],
))
def test_blocks_and_partial_match_reference(max_blocks, num_blocks, with_partial, tokens, dim, dtype):
    from dayzero.plugins.attnres.kernel import attnres_mix_blocks_launcher

    # the buffer holds more token rows than this step uses: the block stride is not tokens * dim
    scales = torch.arange(1, max_blocks + 1, device=DEVICE)[:, None, None]
    blocks = (torch.randn(max_blocks, tokens + 5, dim, device=DEVICE) * scales).to(dtype)[:, :tokens]
    (partial,), query, rms_weight, norm_weight = _inputs(1, tokens, dim, dtype)
    partial = partial if with_partial else None
    out, normed = poisoned(tokens, dim, dtype=dtype), poisoned(tokens, dim, dtype=dtype)
    got, got_normed = attnres_mix_blocks_launcher(query, blocks, num_blocks, partial, rms_weight, 1e-6, norm_weight,
                                                  1e-5, out=out, normed=normed)
    mix, expected = reference.attnres_mix_blocks_norm(query, blocks, num_blocks, partial, rms_weight, 1e-6,
                                                      norm_weight, 1e-5)
    assert rel_err(got, mix) < TOLERANCE[dtype]
    assert rel_err(got_normed, expected) < TOLERANCE[dtype]


def test_blocks_form_equals_listed_form():
    from dayzero.plugins.attnres.kernel import attnres_mix_blocks_launcher, attnres_mix_launcher

    sources, query, rms_weight, _ = _inputs(4, 3, 32, torch.float32)
    blocks = torch.stack(sources[:3] + [torch.randn_like(sources[0])])
    listed, _ = attnres_mix_launcher(query, sources, rms_weight, 1e-6)
    from_blocks, _ = attnres_mix_blocks_launcher(query, blocks, 3, sources[3], rms_weight, 1e-6)
    assert torch.equal(listed, from_blocks)


def test_more_sources_than_pointer_slots_go_through_the_block_form():
    from dayzero.plugins.attnres.op import _cuda_listed

    sources, query, rms_weight, _ = _inputs(17, 3, 40, torch.float32)
    got, _ = _cuda_listed(query, sources, rms_weight, 1e-6)
    assert rel_err(got, reference.attnres_mix(query, sources, rms_weight, 1e-6)) < 1e-5


def test_registered_ops_dispatch_to_reference_on_cpu():
    from dayzero.plugins import attnres

    sources = [torch.randn(2, 16) * (1 + i) for i in range(3)]
    query, rms_weight, norm_weight = torch.randn(16), torch.rand(16) + 0.5, torch.rand(16) + 0.5
    assert torch.equal(attnres.attnres_mix(query, sources, rms_weight, 1e-5),
                       reference.attnres_mix(query, sources, rms_weight, 1e-5))
    stacked = attnres.attnres_mix(query, torch.stack(sources), rms_weight, 1e-5, norm_weight, 1e-6)
    for got, expected in zip(stacked, reference.attnres_mix_norm(query, sources, rms_weight, 1e-5, norm_weight, 1e-6)):
        assert torch.equal(got, expected)
    blocks = torch.stack(sources[:2] + [torch.randn(2, 16)])
    assert torch.equal(attnres.attnres_mix_blocks(query, blocks, 2, sources[2], rms_weight, 1e-5),
                       reference.attnres_mix(query, sources, rms_weight, 1e-5))


def test_onnx_export_emits_dayzero_nodes():
    pytest.importorskip("onnxscript")
    from dayzero.plugins import attnres
    from dayzero.plugins.registry import ONNX_DOMAIN, ONNX_TRANSLATIONS

    class Mix(torch.nn.Module):
        def forward(self, query, rms_weight, a, b, blocks):
            mix, normed = attnres.attnres_mix(query, [a, b], rms_weight, 1e-5, norm_weight=rms_weight)
            return mix + normed + attnres.attnres_mix_blocks(query, blocks, 2, a, rms_weight, 1e-5)

    args = (torch.randn(8), torch.rand(8), torch.randn(3, 8), torch.randn(3, 8), torch.randn(4, 3, 8))
    program = torch.onnx.export(Mix().eval(), args, dynamo=True, custom_translation_table=ONNX_TRANSLATIONS)
    custom = [(n.domain, n.op_type, len(n.input)) for n in program.model_proto.graph.node if n.domain == ONNX_DOMAIN]
    assert custom == [(ONNX_DOMAIN, "AttnresMixNorm", 5), (ONNX_DOMAIN, "AttnresMixBlocks", 4)]


@pytest.mark.parametrize("tokens", [pytest.param(t, marks=gpu_only) for t in (1, 64)])
def test_decode_mix_replays_in_a_cuda_graph(tokens):
    from dayzero.plugins import attnres

    blocks = torch.randn(8, tokens, 7168, device="cuda").bfloat16()
    partial = torch.randn(tokens, 7168, device="cuda").bfloat16()
    query, rms_weight = torch.randn(7168, device="cuda"), torch.rand(7168, device="cuda") + 0.5
    graph = torch.cuda.CUDAGraph()
    attnres.attnres_mix_blocks(query, blocks, 8, partial, rms_weight, 1e-6)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        out = attnres.attnres_mix_blocks(query, blocks, 8, partial, rms_weight, 1e-6)
    partial.copy_(torch.randn_like(partial))
    graph.replay()
    expected = reference.attnres_mix_blocks(query, blocks, 8, partial, rms_weight, 1e-6)
    assert rel_err(out, expected) < 1e-2


@pytest.mark.parametrize("tokens", [1, 64, 8192])
@pytest.mark.parametrize("num_sources", [1, 2, 9])
@pytest.mark.parametrize("emit_norm", [False, True])
def test_default_configs_launch_a_power_of_two_of_warps(tokens, num_sources, emit_norm):
    """Every row width gets a launchable config (the interpreter ignores num_warps; a GPU rejects 0 or 3), and a
    pipelined one keeps its fp32 tiles in flight within the shared memory of an H200 program."""
    import triton

    from dayzero.plugins.attnres.kernel import default_config
    for dim in (1, 40, 255, 2304, 7168, 16384, 40000, 100000):
        config = default_config(tokens, dim, num_sources, emit_norm)
        warps = config.num_warps
        assert warps >= 1 and warps & (warps - 1) == 0, (tokens, num_sources, dim, warps)
        if config.stages:
            assert (config.stages - 1) * config.tile * triton.next_power_of_2(dim) * 4 <= 232448, (dim, config)
