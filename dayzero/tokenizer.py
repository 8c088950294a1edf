"""Tokenizers: byte-level for the embedded model (ids 0-255 are bytes, then BOS, EOS, PAD), the checkpoint's own
files otherwise."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dayzero.errors import DayzeroError


@dataclass(frozen=True)
class ByteTokenizer:
    bos_token_id: int = 256
    eos_token_id: int = 257
    pad_token_id: int = 258

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """BOS, then the UTF-8 bytes; without BOS when the text carries its own markers (a chat template's)."""
        return ([self.bos_token_id] if add_special_tokens else []) + list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        """Bytes of the non-special ids; invalid UTF-8 becomes U+FFFD."""
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def token_id(self, text: str) -> int | None:
        """The id of a special token by its text: none here (BOS, EOS and PAD have no text)."""
        return None

    def token_bytes(self, token: int) -> bytes | None:
        """The bytes a token stands for (None: a special token)."""
        return bytes([token]) if token < 256 else None


class HFTokenizer:
    """A checkpoint's tokenizer.json, through the `tokenizers` library."""

    def __init__(self, path: Path):
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(path))
        self.eos_token_id = self._special(("<|im_end|>", "</s>", "<|endoftext|>", "[EOS]"))
        self._special_ids = {i for i, added in self._tok.get_added_tokens_decoder().items() if added.special}
        self._byte_level = "ByteLevel" in repr(self._tok.decoder)

    def _special(self, names: tuple[str, ...]) -> int | None:
        for name in names:
            token = self.token_id(name)
            if token is not None:
                return token
        return None

    def token_id(self, text: str) -> int | None:
        """The id of the token whose text this is (a special token's name), or None."""
        return self._tok.token_to_id(text)

    def token_bytes(self, token: int) -> bytes | None:
        """The bytes a token stands for (None: a special or unknown token): a byte-level BPE piece maps back through
        GPT-2's byte alphabet; a SentencePiece piece turns its '▁' into spaces and '<0xNN>' into that byte."""
        piece = self._tok.id_to_token(token)
        if piece is None or token in self._special_ids:
            return None
        if self._byte_level:
            try:
                return bytes(BYTE_OF_CHAR[c] for c in piece)
            except KeyError:
                return None
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            return bytes([int(piece[3:5], 16)])
        return piece.replace("▁", " ").encode()

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """add_special_tokens: the tokenizer's post-processor markers (a BOS); off for text a chat template wrote,
        which has its own."""
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)


def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the printable character each byte is written as -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
                 *range(ord("\u00ae"), ord("\u00ff") + 1)]
    others = [b for b in range(256) if b not in printable]
    return {chr(b): b for b in printable} | {chr(256 + i): b for i, b in enumerate(others)}


BYTE_OF_CHAR = _byte_of_char()
TOKENIZER_CONFIG = "tokenizer_config.json"


def tokenizer_config(checkpoint: Path) -> dict:
    """The checkpoint's tokenizer_config.json ({} when it has none)."""
    config_file = checkpoint / TOKENIZER_CONFIG
    try:
        return json.loads(config_file.read_text()) if config_file.is_file() else {}
    except json.JSONDecodeError as err:
        raise DayzeroError(f"{config_file} is not valid JSON ({err}); fix or remove it") from err


def special_token_text(value) -> str:
    """A special token as tokenizer_config.json writes it: a string or {"content": ...}."""
    return value.get("content", "") if isinstance(value, dict) else value or ""


def _added_token_names(checkpoint: Path) -> tuple[dict[int, str], str]:
    """tokenizer_config.json -> ({id: name} of its added_tokens_decoder, the eos token's name or "")."""
    config = tokenizer_config(checkpoint)
    try:
        added = {int(i): entry["content"] for i, entry in (config.get("added_tokens_decoder") or {}).items()}
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise DayzeroError(f"{checkpoint / TOKENIZER_CONFIG} has no readable added_tokens_decoder ({err}); fix or "
                           "remove it") from err
    return added, special_token_text(config.get("eos_token"))


class TiktokenTokenizer:
    """Kimi's tokenizer (tokenization_kimi.py): a tiktoken BPE file (`tiktoken.model`), Kimi's pre-tokenizer pattern
    (Han runs, cased words, numbers of up to three digits, ...), and 256 + 2 special tokens right after the base
    vocabulary, named by tokenizer_config.json's added_tokens_decoder (the rest `<|reserved_token_N|>`).

    Special tokens written in the text (a chat template's `<|im_user|>`, ...) encode to their ids; decoding skips
    special ids, as HF tokenizers do by default."""

    PATTERN = "|".join([
        r"""[\p{Han}]+""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*"""
        r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ])
    NUM_SPECIAL_TOKENS = 256 + 2

    def __init__(self, path: Path):
        try:
            import tiktoken
            from tiktoken.load import load_tiktoken_bpe
        except ImportError as err:
            raise DayzeroError(f"{path} needs the tiktoken package: pip install tiktoken") from err
        ranks = load_tiktoken_bpe(str(path))
        names, eos_name = _added_token_names(path.parent)
        self.num_base_tokens = len(ranks)
        special = range(self.num_base_tokens, self.num_base_tokens + self.NUM_SPECIAL_TOKENS)
        self.special_tokens = {names.get(i, f"<|reserved_token_{i}|>"): i for i in special}
        self._enc = tiktoken.Encoding(path.stem, pat_str=self.PATTERN, mergeable_ranks=ranks,
                                      special_tokens=self.special_tokens)
        self.eos_token_id = self.special_tokens.get(eos_name or "[EOS]")

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Kimi's tokenizer adds no markers of its own (add_special_tokens changes nothing)."""
        return self._enc.encode(text, allowed_special="all")

    def decode(self, ids: list[int]) -> str:
        """The text of the base-vocabulary ids (special ids and any id past the vocabulary decode to nothing)."""
        return self._enc.decode([i for i in ids if i < self.num_base_tokens])

    def token_id(self, text: str) -> int | None:
        """The id of a special token by its name, or None."""
        return self.special_tokens.get(text)

    def token_bytes(self, token: int) -> bytes | None:
        """The bytes a token stands for (None: a special token or an id past the vocabulary)."""
        return self._enc.decode_single_token_bytes(token) if token < self.num_base_tokens else None


# tokenizer file in the checkpoint -> loader, in order of preference
TOKENIZER_FILES: dict[str, Callable[[Path], object]] = {"tokenizer.json": HFTokenizer,
                                                         "tiktoken.model": TiktokenTokenizer}
BYTE_VOCAB_LIMIT = 512


def _eos_ids_of(config_file: Path) -> set[int]:
    """eos_token_id of a config file, at its top or in its text_config (an id or a list of them); none when the file
    or the field is absent."""
    if not config_file.is_file():
        return set()
    try:
        data = json.loads(config_file.read_text())
        values = [data.get("eos_token_id"), (data.get("text_config") or {}).get("eos_token_id")]
    except (json.JSONDecodeError, AttributeError) as err:
        raise DayzeroError(f"{config_file} is not a JSON object ({err}); fix or remove it") from err
    ids = [i for v in values if v is not None for i in (v if isinstance(v, list) else [v])]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise DayzeroError(f"{config_file}: eos_token_id must be a token id or a list of them, got {values!r}")
    return set(ids)


def end_of_sequence_ids(checkpoint: Path, tokenizer) -> frozenset[int]:
    """The ids that end a generated sequence: the tokenizer's eos and every eos_token_id of the checkpoint's
    generation_config.json and config.json (a chat model's end of turn is often only named there, e.g. Kimi's
    `<|im_end|>` beside the tokenizer's `[EOS]`)."""
    ids = _eos_ids_of(checkpoint / "generation_config.json") | _eos_ids_of(checkpoint / "config.json")
    eos = getattr(tokenizer, "eos_token_id", None)
    return frozenset(ids | ({eos} if eos is not None else set()))


class NoTokenizer:
    """Stands where the tokenizer is skipped (vLLM's skip_tokenizer_init; `dayzero bench`, which feeds token ids): a
    prompt must be token ids, and an answer is its ids without text."""

    eos_token_id = None

    def encode(self, text: str) -> list[int]:
        raise DayzeroError("this LLM skips the tokenizer (skip_tokenizer_init=True): give token-id prompts, "
                           "{\"prompt_token_ids\": [...]}")

    def decode(self, ids: list[int]) -> str:
        return ""


def load_tokenizer(checkpoint: Path, vocab_size: int):
    """The checkpoint's own tokenizer; the byte tokenizer for a checkpoint without one and a byte-sized vocab."""
    for name, loader in TOKENIZER_FILES.items():
        if (checkpoint / name).is_file():
            return loader(checkpoint / name)
    if vocab_size <= BYTE_VOCAB_LIMIT:
        return ByteTokenizer()
    raise DayzeroError(f"{checkpoint} has no tokenizer ({' or '.join(TOKENIZER_FILES)}) and a vocabulary of "
                       f"{vocab_size}; copy the model's tokenizer files into it")
