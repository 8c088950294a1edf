from tests.model.hf_generation import triton_bodies_on_cpu, untied  # noqa: F401 (fixtures of this folder's tests)
