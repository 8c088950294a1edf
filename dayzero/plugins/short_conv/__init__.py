from dayzero.plugins.short_conv.op import short_conv_decode, short_conv_prefill

__all__ = ["short_conv_decode", "short_conv_prefill"]
