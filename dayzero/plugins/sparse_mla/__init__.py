from dayzero.plugins.sparse_mla.op import dense_mla_paged, sparse_mla_paged

__all__ = ["dense_mla_paged", "sparse_mla_paged"]
