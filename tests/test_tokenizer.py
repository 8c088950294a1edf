"""Tokenizers as a checkpoint ships them: Kimi's tiktoken file with its special tokens, and the ids that end a
sequence."""

from __future__ import annotations

import json

import pytest

from dayzero.errors import DayzeroError
from dayzero.tokenizer import ByteTokenizer, HFTokenizer, TiktokenTokenizer, end_of_sequence_ids, load_tokenizer
from tests.helpers import EOS, IM_END, IM_USER, MERGES, NUM_BASE, write_kimi_tokenizer


@pytest.fixture
def kimi(tmp_path) -> TiktokenTokenizer:
    return TiktokenTokenizer(write_kimi_tokenizer(tmp_path))


def test_kimi_special_tokens_in_text_encode_to_their_ids(kimi):
    ids = kimi.encode("<|im_user|>hello<|im_end|>")
    assert ids[0] == IM_USER and ids[-1] == IM_END
    assert kimi.decode(ids[1:-1]) == "hello" and 256 + MERGES.index(b"hell") in ids


def test_kimi_decoding_skips_special_ids_and_ids_past_the_vocabulary(kimi):
    hello = kimi.encode("hello")
    assert kimi.decode([IM_USER, *hello, IM_END, NUM_BASE + 400]) == "hello"


def test_kimi_pattern_splits_numbers_into_three_digits(kimi):
    """Kimi's pre-tokenizer cuts '1234' into '123' + '4', so the merged '1234' token never appears; a pattern
    without the three-digit rule would give it."""
    ids = kimi.encode("1234")
    assert 256 + MERGES.index(b"1234") not in ids and kimi.decode(ids) == "1234"
    assert kimi.encode("12 34") == [256 + MERGES.index(b"12"), ord(" "), 256 + MERGES.index(b"34")]


def test_kimi_names_unnamed_special_slots_and_finds_its_eos(kimi):
    assert kimi.eos_token_id == EOS
    assert kimi.special_tokens[f"<|reserved_token_{NUM_BASE + 100}|>"] == NUM_BASE + 100
    assert len(kimi.special_tokens) == TiktokenTokenizer.NUM_SPECIAL_TOKENS


def test_kimi_eos_can_be_named_by_the_config(tmp_path):
    tokenizer = TiktokenTokenizer(write_kimi_tokenizer(tmp_path, eos_token={"content": "<|im_end|>"}))
    assert tokenizer.eos_token_id == IM_END


def test_load_tokenizer_prefers_the_checkpoints_files(tmp_path):
    assert isinstance(load_tokenizer(tmp_path, 260), ByteTokenizer)
    with pytest.raises(DayzeroError, match="has no tokenizer"):
        load_tokenizer(tmp_path, 163840)
    write_kimi_tokenizer(tmp_path)
    assert isinstance(load_tokenizer(tmp_path, 163840), TiktokenTokenizer)


def test_a_broken_added_tokens_table_says_which_file(tmp_path):
    path = write_kimi_tokenizer(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {"x": {}}}))
    with pytest.raises(DayzeroError, match="tokenizer_config.json has no readable added_tokens_decoder"):
        TiktokenTokenizer(path)


def test_end_of_sequence_ids_join_the_tokenizer_and_both_configs(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"eos_token_id": 7}}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [9, 11]}))
    assert end_of_sequence_ids(tmp_path, ByteTokenizer()) == {257, 7, 9, 11}
    assert end_of_sequence_ids(tmp_path / "absent", ByteTokenizer()) == {257}


@pytest.mark.parametrize("text, says", [("[1, true]", "eos_token_id must be a token id"),
                                        ("{not json", "is not a JSON object"),
                                        ('{"eos_token_id": -3}', "eos_token_id must be a token id")])
def test_a_bad_generation_config_is_refused_with_its_name(tmp_path, text, says):
    (tmp_path / "generation_config.json").write_text(text if text.startswith("{") else json.dumps(
        {"eos_token_id": json.loads(text)}))
    with pytest.raises(DayzeroError, match=says):
        end_of_sequence_ids(tmp_path, ByteTokenizer())


def test_hf_tokenizer_adds_its_post_processor_bos_only_when_asked(tmp_path):
    """A tokenizer.json whose post-processor prepends BOS (Llama's, DeepSeek's): chat prompts, whose template wrote
    the BOS already, are encoded without it."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    tokenizer = Tokenizer(models.WordLevel({"<s>": 0, "hello": 1, "world": 2, "[UNK]": 3}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    hf = HFTokenizer(tmp_path / "tokenizer.json")
    assert hf.encode("hello world") == [0, 1, 2]
    assert hf.encode("hello world", add_special_tokens=False) == [1, 2]
    assert ByteTokenizer().encode("a", add_special_tokens=False) == [97] and ByteTokenizer().encode("a") == [256, 97]


def test_every_tokenizer_gives_its_tokens_bytes_and_none_for_special_ones(kimi, tmp_path):
    """The bytes behind each token, for answers held to JSON: a byte-level BPE (GPT-2's alphabet: 'Ġ' is a space),
    SentencePiece pieces ('▁' a space, '<0x7B>' the byte '{'), Kimi's tiktoken ranks, the byte tokenizer."""
    from tokenizers import AddedToken, Tokenizer, decoders, models

    byte_level = Tokenizer(models.BPE({"Ġ{": 0, "Ċ": 1, "a": 2, "Ã©": 3}, [], unk_token=None))
    byte_level.decoder = decoders.ByteLevel()
    byte_level.add_special_tokens([AddedToken("<|end|>", special=True)])
    byte_level.save(str(tmp_path / "tokenizer.json"))
    hf = HFTokenizer(tmp_path / "tokenizer.json")
    assert [hf.token_bytes(i) for i in range(5)] == [b" {", b"\n", b"a", "é".encode(), None]
    piece = Tokenizer(models.WordLevel({"▁hello": 0, "<0x7B>": 1, "[UNK]": 2}, unk_token="[UNK]"))
    piece.save(str(tmp_path / "tokenizer.json"))
    sentencepiece = HFTokenizer(tmp_path / "tokenizer.json")
    assert [sentencepiece.token_bytes(i) for i in range(2)] == [b" hello", b"{"]
    assert kimi.token_bytes(256 + MERGES.index(b"hell")) == b"hell" and kimi.token_bytes(IM_END) is None
    assert ByteTokenizer().token_bytes(123) == b"{" and ByteTokenizer().token_bytes(257) is None
