"""Tokenizers: byte-level for the embedded model (ids 0-255 are bytes, then BOS, EOS, PAD), the checkpoint's own
files otherwise."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dayzero.errors import DayzeroError


@dataclass(frozen=True)
class ByteTokenizer:
    bos_token_id: int = 256
    eos_token_id: int = 257
    pad_token_id: int = 258

    def encode(self, text: str) -> list[int]:
        return [self.bos_token_id, *text.encode("utf-8")]

    def decode(self, ids: list[int]) -> str:
        """Bytes of the non-special ids; invalid UTF-8 becomes U+FFFD."""
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    """A checkpoint's tokenizer.json, through the `tokenizers` library."""

    def __init__(self, path: Path):
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(path))
        self.eos_token_id = self._special(("<|im_end|>", "</s>", "<|endoftext|>", "[EOS]"))

    def _special(self, names: tuple[str, ...]) -> int | None:
        for name in names:
            token = self._tok.token_to_id(name)
            if token is not None:
                return token
        return None

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)


class TiktokenTokenizer:
    """A tiktoken model file (Kimi ships `tiktoken.model`), through the `tiktoken` library."""

    PATTERN = r"""[\p{L}\p{N}]+|[^\s\p{L}\p{N}]+|\s+"""

    def __init__(self, path: Path):
        try:
            import tiktoken
            from tiktoken.load import load_tiktoken_bpe
        except ImportError as err:
            raise DayzeroError(f"{path} needs the tiktoken package: pip install tiktoken") from err
        ranks = load_tiktoken_bpe(str(path))
        self._enc = tiktoken.Encoding(path.stem, pat_str=self.PATTERN, mergeable_ranks=ranks, special_tokens={})
        self.eos_token_id = None

    def encode(self, text: str) -> list[int]:
        return self._enc.encode(text)

    def decode(self, ids: list[int]) -> str:
        return self._enc.decode(ids)


# tokenizer file in the checkpoint -> loader, in order of preference
TOKENIZER_FILES: dict[str, Callable[[Path], object]] = {"tokenizer.json": HFTokenizer,
                                                         "tiktoken.model": TiktokenTokenizer}
BYTE_VOCAB_LIMIT = 512


def load_tokenizer(checkpoint: Path, vocab_size: int):
    """The checkpoint's own tokenizer; the byte tokenizer for a checkpoint without one and a byte-sized vocab."""
    for name, loader in TOKENIZER_FILES.items():
        if (checkpoint / name).is_file():
            return loader(checkpoint / name)
    if vocab_size <= BYTE_VOCAB_LIMIT:
        return ByteTokenizer()
    raise DayzeroError(f"{checkpoint} has no tokenizer ({' or '.join(TOKENIZER_FILES)}) and a vocabulary of "
                       f"{vocab_size}; copy the model's tokenizer files into it")
