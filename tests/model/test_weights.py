"""Checkpoint I/O: init-checkpoint -> load reproduces the model; bad checkpoints fail with messages that help."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from dayzero.errors import DayzeroError
from dayzero.model import load
from dayzero.model.checkpoint_writer import write_random_checkpoint
from tests.helpers import random_model, rel_err, tiny_config_dict


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    (root / "src").mkdir()
    (root / "src" / "config.json").write_text(json.dumps(tiny_config_dict()))
    # a small shard size forces several shards and an index
    return write_random_checkpoint(root / "src", root / "tiny", dtype=torch.float32, seed=3, shard_bytes=200_000)


def copy_checkpoint(src, dst, edit=None):
    """Copy as a single-file checkpoint, with `edit(tensors)` applied."""
    dst.mkdir()
    (dst / "config.json").write_text((src / "config.json").read_text())
    tensors = {}
    for file in sorted(src.glob("*.safetensors")):
        tensors.update(load_file(file))
    if edit:
        edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def test_sharded_with_index(checkpoint):
    index = json.loads((checkpoint / "model.safetensors.index.json").read_text())
    files = set(index["weight_map"].values())
    assert len(files) > 1 and all((checkpoint / f).exists() for f in files)
    assert "model.layers.1.block_sparse_moe.experts.7.w2.weight" in index["weight_map"]


def test_loaded_checkpoint_reproduces_the_logits(checkpoint):
    ids = torch.randint(0, 256, (2, 30))
    expected = random_model(tiny_config_dict(), seed=3).logits(ids)
    assert torch.equal(load(checkpoint, dtype=torch.float32).logits(ids), expected)


def test_missing_tensor(checkpoint, tmp_path):
    broken = copy_checkpoint(checkpoint, tmp_path / "c", lambda t: t.pop("model.layers.2.self_attn.kv_b_proj.weight"))
    with pytest.raises(DayzeroError, match=r"missing tensor 'model.layers.2.self_attn.kv_b_proj.weight'.*incomplete"):
        load(broken)


def test_missing_expert(checkpoint, tmp_path):
    broken = copy_checkpoint(checkpoint, tmp_path / "c",
                             lambda t: t.pop("model.layers.3.block_sparse_moe.experts.5.w3.weight"))
    with pytest.raises(DayzeroError, match=r"missing tensor 'model.layers.3.block_sparse_moe.experts.5.w3.weight'"):
        load(broken)


def test_wrong_shape(checkpoint, tmp_path):
    def shrink(t):
        t["model.layers.0.self_attn.q_proj.weight"] = t["model.layers.0.self_attn.q_proj.weight"][:10]

    broken = copy_checkpoint(checkpoint, tmp_path / "c", shrink)
    with pytest.raises(DayzeroError, match=r"'model.layers.0.self_attn.q_proj.weight' .* has shape \[10, 96\], but "
                                           r"config.json implies \[64, 96\]"):
        load(broken)


def test_malformed_config(checkpoint, tmp_path):
    broken = copy_checkpoint(checkpoint, tmp_path / "c")
    (broken / "config.json").write_text('{"model_type": "kimi_k3", "text_config": {')
    with pytest.raises(DayzeroError, match="is not valid JSON"):
        load(broken)


def test_corrupt_shard(checkpoint, tmp_path):
    broken = copy_checkpoint(checkpoint, tmp_path / "c")
    data = (broken / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(DayzeroError, match="incomplete or corrupt|is corrupt"):
        load(broken)


def test_no_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(tiny_config_dict()))
    with pytest.raises(DayzeroError, match=r"no \*.safetensors files"):
        load(tmp_path)


def test_alternative_layouts_load_the_same_model(checkpoint, tmp_path):
    """K3's `language_model.` prefix, zero-padded A_log, MXFP4 experts and dense MLPs under block_sparse_moe."""
    reference = load(checkpoint, dtype=torch.float32)

    def rewrite(t):
        for name in [n for n in t if n.endswith("A_log")]:
            t[name] = torch.cat([t[name].flatten(), torch.zeros(126)])
        for name in [n for n in t if ".mlp." in n]:
            t[name.replace(".mlp.", ".block_sparse_moe.")] = t.pop(name)
        expert = "model.layers.1.block_sparse_moe.experts.0.w1"
        t.pop(expert + ".weight")
        t[expert + ".weight_packed"] = torch.full((32, 32), 0x21, dtype=torch.uint8)  # 0.5, 1.0 pairs
        t[expert + ".weight_scale"] = torch.full((32, 2), 127, dtype=torch.uint8)
        for name in list(t):
            t["language_model." + name] = t.pop(name)

    other = load(copy_checkpoint(checkpoint, tmp_path / "c", rewrite), dtype=torch.float32)
    w1 = other.model.layers[1].block_sparse_moe.experts.w1[0]
    assert torch.equal(w1[:, 0::2], torch.full((32, 32), 0.5)) and torch.equal(w1[:, 1::2], torch.ones(32, 32))
    for (name, a), (_, b) in zip(reference.named_parameters(), other.named_parameters()):
        if "layers.1.block_sparse_moe.experts.w1" not in name:
            assert torch.equal(a, b), name


def test_existing_output_is_not_overwritten(checkpoint, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    with pytest.raises(DayzeroError, match="already exists and is not empty"):
        write_random_checkpoint(checkpoint, out)
    assert (out / "keep.txt").read_text() == "precious"


def test_bf16_checkpoint_keeps_fp32_gates(checkpoint, tmp_path):
    out = write_random_checkpoint(checkpoint, tmp_path / "bf16", dtype=torch.bfloat16, seed=3)
    tensors = load_file(out / "model.safetensors")
    assert tensors["model.layers.0.self_attn.q_proj.weight"].dtype == torch.bfloat16
    assert tensors["model.layers.0.self_attn.A_log"].dtype == torch.float32
    assert tensors["model.layers.1.block_sparse_moe.gate.e_score_correction_bias"].dtype == torch.float32
    model = load(out, dtype=torch.bfloat16)
    ref = load(checkpoint, dtype=torch.float32)
    assert rel_err(model.lm_head.weight.float(), ref.lm_head.weight) < 1e-2


@pytest.mark.parametrize("name", ["lm_head.weight", "model.layers.0.self_attn.q_proj.weight"])
def test_integer_weight_is_refused_by_name(checkpoint, tmp_path, name):
    def to_int(t):
        t[name] = t[name].to(torch.int32)

    broken = copy_checkpoint(checkpoint, tmp_path / "c", to_int)
    with pytest.raises(DayzeroError, match=rf"'{name}' .* stored as torch.int32, but the model expects a float type"):
        load(broken)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weight_is_refused_by_name(checkpoint, tmp_path, value):
    def poison(t):
        t["model.norm.weight"][5] = value

    broken = copy_checkpoint(checkpoint, tmp_path / "c", poison)
    with pytest.raises(DayzeroError, match=r"'model.norm.weight' in .* holds NaN or inf values"):
        load(broken)


@pytest.mark.parametrize("shard", ["../../../etc/passwd", "/etc/passwd", "sub/../../x.safetensors", "link"])
def test_index_entry_outside_the_checkpoint_is_refused_by_name(checkpoint, tmp_path, shard, monkeypatch):
    import shutil

    broken = tmp_path / "c"
    shutil.copytree(checkpoint, broken)
    (broken / "link").symlink_to("/etc/passwd")
    index = json.loads((broken / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.norm.weight"] = shard
    (broken / "model.safetensors.index.json").write_text(json.dumps(index))
    opened = []
    monkeypatch.setattr("dayzero.model.checkpoint.safe_open", lambda *a, **k: opened.append(a))
    with pytest.raises(DayzeroError, match=rf"names shard '{shard}'.* outside"):
        load(broken)
    assert opened == []


def test_hf_cache_snapshot_links_into_blobs_load(checkpoint, tmp_path):
    blobs, snapshot = tmp_path / "repo" / "blobs", tmp_path / "repo" / "snapshots" / "abc"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for file in checkpoint.iterdir():
        (blobs / file.name).write_bytes(file.read_bytes())
        (snapshot / file.name).symlink_to(f"../../blobs/{file.name}")
    assert load(snapshot, dtype=torch.float32).config.num_layers == 6


def test_header_length_beyond_the_file_is_refused(checkpoint, tmp_path):
    broken = copy_checkpoint(checkpoint, tmp_path / "c")
    data = (broken / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes((1 << 62).to_bytes(8, "little") + data[8:])
    with pytest.raises(DayzeroError, match=r"model.safetensors is not a safetensors file: its header length field "
                                           r"\(4611686018427387904\) exceeds the file"):
        load(broken)


def test_config_larger_than_the_weights_is_refused_before_allocating(checkpoint, tmp_path):
    broken = copy_checkpoint(checkpoint, tmp_path / "c")
    (broken / "config.json").write_text(json.dumps(tiny_config_dict(hidden_size=65536, vocab_size=1 << 24)))
    with pytest.raises(DayzeroError, match=r"describes 2,199,\d{3},\d{3},\d{3} parameters, but its safetensors files "
                                           r"hold [\d,]+ bytes"):
        load(broken)


def test_an_empty_model_is_allocated_in_its_dtype_only(monkeypatch):
    """build_empty sets the parameters' dtypes before allocating: no fp32 copy of a bf16 model is ever held."""
    from dayzero.model import weights

    allocated = []
    original = torch.empty_like

    def recording(tensor, *args, **kwargs):
        out = original(tensor, *args, **kwargs)
        allocated.append(out.dtype)
        return out

    monkeypatch.setattr(torch, "empty_like", recording)
    from dayzero.model.config import ModelConfig

    model = weights.build_empty(ModelConfig.from_dict(tiny_config_dict()), torch.bfloat16, "cpu")
    dtypes = [param.dtype for param in model.parameters()]
    assert len(allocated) >= len(dtypes) and torch.bfloat16 in dtypes
    assert allocated.count(torch.float32) == dtypes.count(torch.float32)
