"""Multi-rank engines (docs/architecture.md, "Parallelism"): rank 0's engine in this process driving one worker
process per other rank in lockstep, the process group and mesh they join, and the step messages they exchange."""
