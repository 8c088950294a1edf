from dayzero.plugins.paged_cache.reference import PAGE_SIZE, write_rows

__all__ = ["PAGE_SIZE", "write_rows"]
