"""Multi-rank serving (ARCHITECTURE.md, "Parallelism"): the rank plan, the collectives the model calls and the
engine that drives one worker process per rank."""
