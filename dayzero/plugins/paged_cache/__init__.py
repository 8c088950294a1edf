from dayzero.plugins.paged_cache.op import write_rows
from dayzero.plugins.paged_cache.reference import PAGE_SIZE

__all__ = ["PAGE_SIZE", "write_rows"]
