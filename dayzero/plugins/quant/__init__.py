from dayzero.plugins.quant.op import fp8_block_dequantize, fp8_block_quantize, mxfp8_dequantize, mxfp8_quantize

__all__ = ["fp8_block_dequantize", "fp8_block_quantize", "mxfp8_dequantize", "mxfp8_quantize"]
