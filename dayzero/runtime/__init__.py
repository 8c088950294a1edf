"""The engine core: paged caches and state slots, continuous batching with chunked prefill, CUDA-graph decode,
speculation with exact state rollback, sampling. It sees engines only through the contract (dayzero/contract/)."""
