from dayzero.plugins.indexer.op import index_topk_paged
from dayzero.plugins.indexer.pooled_op import (
    pooled_index_topk_paged,
    write_pooled_index_keys_decode,
    write_pooled_index_keys_prefill,
)
from dayzero.plugins.indexer.reference import index_topk

__all__ = ["index_topk", "index_topk_paged", "pooled_index_topk_paged", "write_pooled_index_keys_decode",
           "write_pooled_index_keys_prefill"]
