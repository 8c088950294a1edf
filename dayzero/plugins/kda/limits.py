"""Limits of the KDA decode kernels that the exporter checks before tracing (no Triton needed to read them)."""

# tokens one decode call steps through per sequence (1 + draft tokens): the kernels unroll their token loop to it
MAX_STEP_TOKENS = 16
