"""Upper bounds on the sizes a config.json may give: generous for any real model (several times the largest
released), and low enough that an absurd value is refused by name before anything is built or allocated."""

from __future__ import annotations

MAX_HIDDEN_SIZE = 1 << 16
MAX_VOCAB_SIZE = 1 << 24
MAX_LAYERS = 1024
MAX_EXPERTS = 1 << 16
MAX_POSITIONS = 1 << 24
# every other integer field (intermediate sizes, heads, head dims, ranks, top-k, token ids)
MAX_FIELD = 1 << 24
