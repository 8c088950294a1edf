from dayzero.plugins.paged_cache.op import write_index_keys, write_latent, write_rows
from dayzero.plugins.paged_cache.reference import PAGE_SIZE

__all__ = ["PAGE_SIZE", "write_index_keys", "write_latent", "write_rows"]
