from dayzero.plugins.mhc.op import mhc_post, mhc_post_project, mhc_pre, mhc_pre_from_partials
from dayzero.plugins.mhc.reference import mhc_coefficients, mhc_head

__all__ = ["mhc_coefficients", "mhc_head", "mhc_post", "mhc_post_project", "mhc_pre", "mhc_pre_from_partials"]
