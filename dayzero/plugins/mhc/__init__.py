from dayzero.plugins.mhc.op import mhc_post, mhc_pre
from dayzero.plugins.mhc.reference import mhc_coefficients, mhc_head

__all__ = ["mhc_coefficients", "mhc_head", "mhc_post", "mhc_pre"]
