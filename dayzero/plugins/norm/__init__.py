from dayzero.plugins.norm.op import add_rms_norm, gated_rms_norm, rms_norm

__all__ = ["add_rms_norm", "gated_rms_norm", "rms_norm"]
