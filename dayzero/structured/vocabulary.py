"""A tokenizer's vocabulary as xgrammar sees it, built once per engine: each token's bytes, the engine's vocabulary
size (which may exceed the tokenizer's) and its end-of-sequence ids, with the compiler of every grammar over it.

A token without bytes (a special token: a chat or tool-call marker, an id past the tokenizer's vocabulary) stands in
the vocabulary as a byte 0xFF and its id. No UTF-8 text holds 0xFF, so no JSON, id or pattern takes such a token;
a grammar names it by its id where it belongs (a tool call's markers, a reasoning's end), and free text takes any
token (json_answer.py, tool_call_grammar.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import xgrammar as xgr

from dayzero.errors import DayzeroError

# single-byte tokens JSON needs to reach every state's way out (a close, a digit, a quote ...)
NEEDED_BYTES = b'{}[]:,"\\0123456789.-+eEtrufalsn '
SPECIAL_BYTE = b"\xff"
# grammars compiled at once (a schema's compile is milliseconds; the vocabulary's tables are shared)
COMPILER_THREADS = 2
# compiled grammars kept by the compiler (one is a few MB at a 160K vocabulary)
CACHE_BYTES = 256 << 20


class Vocabulary:
    def __init__(self, token_bytes: Callable[[int], bytes | None], vocab_size: int, stop_ids: Iterable[int]):
        encoded = [token_bytes(token) or SPECIAL_BYTE + str(token).encode() for token in range(vocab_size)]
        single = {data for data in encoded if len(data) == 1}
        missing = bytes(b for b in NEEDED_BYTES if bytes([b]) not in single)
        if missing:
            raise DayzeroError(f"this tokenizer has no single-byte tokens for {missing!r}, which JSON answers need; "
                               "leave out response_format")
        self.vocab_size = vocab_size
        self.info = xgr.TokenizerInfo(encoded, xgr.VocabType.RAW, vocab_size=vocab_size,
                                      stop_token_ids=sorted(t for t in stop_ids if t < vocab_size))
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=COMPILER_THREADS,
                                             cache_limit_bytes=CACHE_BYTES)

    def compile(self, grammar: dict) -> xgr.CompiledGrammar:
        """The grammar's token tables over this vocabulary (kept by the compiler: the same grammar compiles once)."""
        try:
            return self.compiler.compile_structural_tag(grammar)
        except (RuntimeError, ValueError) as err:
            raise DayzeroError(f"the answer's grammar does not compile ({err}); check its JSON schemas") from None
