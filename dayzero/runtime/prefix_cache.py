"""Prefix caching for a hybrid model: a new request that starts with tokens an earlier one already prefilled reuses
their cache pages and skips their prefill.

MLA layers keep a row per token in pages, so a prefix's full pages can simply be shared (read only: the sequence
writes past them). KDA layers keep one recurrent state and conv window per sequence, not per token, so a prefix is
reusable only where its state was saved: a snapshot of the sequence's state slot, taken when a prefill chunk ends
there. Snapshots are taken
* every `snapshot_every` tokens (by default the runtime's token budget: prefill chunks are cut at those points,
  where a long prompt's chunks end anyway);
* at the prompt's last full page before its last token (an identical prompt reuses all of it but what follows);
* while a sequence decodes, at the last page boundary it crossed (one such snapshot a sequence, replaced as it
  goes), so that a chat's next turn, which repeats the conversation so far, reuses the previous answer too.
A prefix is named by a chained hash of its pages' tokens.

A cached prefix holds its pages and one state-slot group (the runtime keeps groups for them beside the batch's).
Both count as available: when the free pages or groups run short, the least recently used prefix is evicted. On a
multi-rank engine the state pool's snapshot copies go to the other ranks with the next step (state_pool.SlotOp).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from dataclasses import dataclass

from dayzero.runtime.block_manager import BlockManager
from dayzero.runtime.sequence import Sequence, Status
from dayzero.runtime.state_pool import StatePool

# tokens between snapshots where the runtime names none
SNAPSHOT_EVERY = 2048


@dataclass
class CachedPrefix:
    length: int  # tokens, a whole number of pages
    pages: list[int]
    group: int  # the state-slot group holding the state after `length` tokens


def page_keys(token_ids: list[int], page_size: int, num_pages: int, known: list[bytes] | None = None) -> list[bytes]:
    """The chained hash of each of the first num_pages pages: key i names tokens [0, (i + 1) * page_size).
    `known`: keys of leading pages computed before (a sequence's tokens never change), extended in place."""
    keys = [] if known is None else known
    for page in range(len(keys), num_pages):
        tokens = array("q", token_ids[page * page_size : (page + 1) * page_size]).tobytes()
        keys.append(hashlib.blake2b((keys[-1] if keys else b"") + tokens, digest_size=16).digest())
    return keys[:num_pages]


@dataclass
class HeldSnapshot:
    """A decode snapshot taken but not named yet (PrefixCache.hold_decoded)."""

    seq: Sequence
    prefix: CachedPrefix


class PrefixCache:
    def __init__(self, blocks: BlockManager, states: StatePool, snapshot_every: int = SNAPSHOT_EVERY,
                 decode_snapshots: bool = True):
        self.blocks, self.states = blocks, states
        # off for a context-parallel engine, which decodes on rank 0 alone: the other ranks' pages lack decoded rows
        self.decode_snapshots = decode_snapshots
        self.page_size = blocks.page_size
        self.snapshot_every = snapshot_every - snapshot_every % self.page_size or self.page_size
        self.prefixes: OrderedDict[bytes, CachedPrefix] = OrderedDict()  # least recently used first
        self.hit_tokens = 0
        self.decoding: dict[str, bytes] = {}  # each decoding sequence's latest snapshot
        blocks.evict = states.evict = self.evict_one

    def lookup(self, seq: Sequence) -> CachedPrefix | None:
        """The longest cached prefix of seq that leaves it at least one token to prefill (its logits give the
        next token); marked as just used."""
        usable_pages = (seq.num_tokens - 1) // self.page_size
        for key in reversed(self._keys(seq, usable_pages)):
            if key in self.prefixes:
                self.prefixes.move_to_end(key)
                return self.prefixes[key]
        return None

    def next_stop(self, seq: Sequence) -> int | None:
        """Where seq's prefill must stop next for a snapshot: the next multiple of snapshot_every, or the prompt's
        last full page before its last token; None past both."""
        every = (seq.num_cached // self.snapshot_every + 1) * self.snapshot_every
        stops = [s for s in (every, self._last_page(seq)) if seq.num_cached < s < seq.num_tokens]
        return min(stops, default=None)

    def remember(self, seq: Sequence) -> None:
        """After a prefill chunk: snapshot seq's state if the chunk ended on a snapshot point not cached yet."""
        length = seq.num_cached
        if length and self._snapshots_at(seq, length):
            self._snapshot(seq, length, self.states.first_slot(seq.slot))

    def remember_decoded(self, seq: Sequence, before: int) -> None:
        """After a decode (verify) step took seq from `before` cached tokens to seq.num_cached: snapshot the last
        page boundary it crossed, in place of seq's previous decode snapshot. Verify input t left the state after
        before + t + 1 tokens in slot t of seq's group."""
        held = self.hold_decoded(seq, before)
        if held is not None:
            self.name_decoded(held)

    def hold_decoded(self, seq: Sequence, before: int) -> HeldSnapshot | None:
        """remember_decoded's copy of the state, made before the next step overwrites it; its name follows with
        name_decoded once the host knows the tokens it covers (a step that overlaps the host feeds a token the host
        reads later)."""
        boundary = seq.num_cached // self.page_size * self.page_size
        if boundary <= before or not self.decode_snapshots:
            return None
        if seq.num_tokens >= boundary:
            # the tokens are known: a prefix cached already is not copied again
            key = self._keys(seq, boundary // self.page_size)[-1]
            if key in self.prefixes:
                self.prefixes.move_to_end(key)
                self._replace_decoding(seq, None)
                return None
        group = self.states.take_spare(self.states.first_slot(seq.slot) + boundary - before - 1)
        if group is None:
            self._replace_decoding(seq, None)
            return None
        pages = seq.pages[: boundary // self.page_size]
        self.blocks.hold(pages)
        return HeldSnapshot(seq, CachedPrefix(boundary, pages, group))

    def name_decoded(self, held: HeldSnapshot) -> None:
        """Cache a held decode snapshot under its tokens' key (given back where that prefix is cached already); it
        replaces its sequence's previous one while the sequence runs (one that ended meanwhile leaves it cached)."""
        seq, prefix = held.seq, held.prefix
        key = self._keys(seq, prefix.length // self.page_size)[-1]
        created = None
        if key in self.prefixes:
            self.prefixes.move_to_end(key)
            self.blocks.release(prefix.pages)
            self.states.give_back(prefix.group)
        else:
            self.prefixes[key], created = prefix, key
        if seq.status is Status.RUNNING:
            self._replace_decoding(seq, created)

    def _replace_decoding(self, seq: Sequence, key: bytes | None) -> None:
        previous = self.decoding.pop(seq.request_id, None)
        if previous is not None:
            self._drop(previous)
        if key is not None:
            self.decoding[seq.request_id] = key

    def forget_decoding(self, seq: Sequence) -> None:
        """seq ended: its latest decode snapshot stays cached, no longer replaced."""
        self.decoding.pop(seq.request_id, None)

    def shares_pending_prefix(self, seq: Sequence, reused: int, running: list[Sequence]) -> bool:
        """Another running sequence is still prefilling all of seq's usable pages and will snapshot them (an
        identical prompt: one of n choices, a duplicate): seq waits for that rather than prefilling them beside it."""
        length = (seq.num_tokens - 1) // self.page_size * self.page_size
        if length <= reused:
            return False
        key = self._keys(seq, length // self.page_size)[-1]
        return any(other.num_cached < length < other.num_tokens and self._snapshots_at(other, length)
                   and self._keys(other, length // self.page_size)[-1] == key for other in running)

    def _snapshots_at(self, seq: Sequence, length: int) -> bool:
        """Whether seq's prefill takes a snapshot after `length` tokens."""
        return length % self.snapshot_every == 0 or length == self._last_page(seq)

    def _last_page(self, seq: Sequence) -> int:
        """The prompt's last full page boundary before its last token."""
        return (len(seq.prompt_ids) - 1) // self.page_size * self.page_size

    def _keys(self, seq: Sequence, num_pages: int) -> list[bytes]:
        """seq's first num_pages page keys, each hashed once in its life (kept on the sequence)."""
        if len(seq.page_keys) >= num_pages:
            return seq.page_keys[:num_pages]
        return page_keys(seq.token_ids, self.page_size, num_pages, seq.page_keys)

    def _snapshot(self, seq: Sequence, length: int, slot: int) -> bytes | None:
        """Cache seq's first `length` tokens with the state in `slot` -> the key of a prefix this made (None when
        it was cached already, or no group is free)."""
        key = self._keys(seq, length // self.page_size)[-1]
        if key in self.prefixes:
            self.prefixes.move_to_end(key)
            return None
        group = self.states.take_spare(slot)
        if group is None:
            return None
        pages = seq.pages[: length // self.page_size]
        self.blocks.hold(pages)
        self.prefixes[key] = CachedPrefix(length, pages, group)
        return key

    def evict_one(self) -> bool:
        """Drop the least recently used prefix (its pages and group go back unless running sequences hold them)."""
        if not self.prefixes:
            return False
        self._drop(next(iter(self.prefixes)))
        return True

    def _drop(self, key: bytes) -> None:
        prefix = self.prefixes.pop(key, None)
        if prefix is not None:
            self.blocks.release(prefix.pages)
            self.states.give_back(prefix.group)
