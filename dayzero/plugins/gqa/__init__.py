from dayzero.plugins.gqa.cache_layout import kv_cache_shape
from dayzero.plugins.gqa.op import gqa_decode_paged, gqa_prefill_paged, write_kv

__all__ = ["gqa_decode_paged", "gqa_prefill_paged", "kv_cache_shape", "write_kv"]
