from dayzero.plugins.indexer.op import index_topk_paged
from dayzero.plugins.indexer.reference import index_topk

__all__ = ["index_topk", "index_topk_paged"]
