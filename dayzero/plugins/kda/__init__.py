from dayzero.plugins.kda.chunk_op import chunk_kda
from dayzero.plugins.kda.recurrent_op import fused_gdn_decode, fused_kda_decode, recurrent_kda_pool
from dayzero.plugins.kda.reference import compose, fold, gdn_gate, kda_gate, recurrent_kda
from dayzero.plugins.kda.summary_op import kda_summary

__all__ = [
    "chunk_kda", "compose", "fold", "fused_gdn_decode", "fused_kda_decode", "gdn_gate", "kda_gate", "kda_summary",
    "recurrent_kda", "recurrent_kda_pool",
]
