"""A worker process of a multi-rank engine: `python -m dayzero.export.rank_worker`, started by MultiRankEngine for
every rank but the first; it loads its rank's engine from the cache entry and serves rank 0's steps."""

from __future__ import annotations

from dayzero.export.build import load_engine
from dayzero.parallel.worker import serve_rank

if __name__ == "__main__":
    serve_rank(load_engine)
