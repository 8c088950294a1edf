from dayzero.plugins.kda.chunk_op import chunk_kda
from dayzero.plugins.kda.reference import (
    compose,
    fold,
    kda_gate,
    kda_summary,
    recurrent_kda,
    recurrent_kda_pool,
)

__all__ = ["chunk_kda", "compose", "fold", "kda_gate", "kda_summary", "recurrent_kda", "recurrent_kda_pool"]
