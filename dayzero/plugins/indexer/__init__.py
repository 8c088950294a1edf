from dayzero.plugins.indexer.reference import index_topk, index_topk_paged

__all__ = ["index_topk", "index_topk_paged"]
