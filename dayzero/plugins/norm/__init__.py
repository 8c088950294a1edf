from dayzero.plugins.norm.op import gated_rms_norm, rms_norm

__all__ = ["gated_rms_norm", "rms_norm"]
