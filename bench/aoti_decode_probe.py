"""One decode step through an AOTInductor package built by bench/h200_export.py, in a process of its own and on
caches full of random bytes (no eager model, no prefill), so that it can run under compute-sanitizer:

    compute-sanitizer --tool memcheck python3 bench/aoti_decode_probe.py --workdir /tmp/dayzero_export

It names the kernel of an illegal memory access that a plain run only reports as a failed AOTI call.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from dayzero.export.aoti import AOTIEngine
from dayzero.export.engine import EngineManifest, allocate_flat_caches
from dayzero.export.preload import reexec_with_libstdcxx
from dayzero.model.step import contiguous_meta


def random_caches(manifest: EngineManifest, num_pages: int, num_slots: int) -> list[torch.Tensor]:
    caches = allocate_flat_caches(manifest, num_pages, num_slots)
    for cache in caches:
        if cache.dtype == torch.uint8:
            # e4m3 codes and scales below the NaN patterns
            cache.copy_(torch.randint(0, 0x70, cache.shape, dtype=torch.uint8, device=cache.device))
        else:
            cache.normal_(0, 0.1)
    return caches


def main() -> None:
    reexec_with_libstdcxx()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/dayzero_export"))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--context", type=int, default=300)
    args = parser.parse_args()
    manifest = EngineManifest.from_json(json.loads((args.workdir / "engine.json").read_text()))
    engine = AOTIEngine(manifest, args.workdir / "weights.safetensors", None, args.workdir / "decode.pt2")
    pages = math.ceil((args.context + 1) / manifest.page_size)
    caches = random_caches(manifest, args.batch * pages + 1, args.batch + 1)
    meta = contiguous_meta([args.context] * args.batch, [1] * args.batch, pages, decode=True, device=manifest.device)
    ids = torch.randint(0, manifest.vocab_size, (args.batch, 1), device=manifest.device)
    with torch.inference_mode():
        logits = engine.decode(ids, meta, caches)
    print("decode ok", tuple(logits.shape), "finite:", bool(logits.float().isfinite().all()))


if __name__ == "__main__":
    main()
