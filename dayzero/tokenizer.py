"""Byte-level tokenizer of the embedded model: ids 0-255 are bytes, then BOS, EOS, PAD."""

from __future__ import annotations

from dataclasses import dataclass


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
