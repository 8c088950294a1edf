"""The KDA pool kernel's last wave on half-wide tiles (`narrow_pairs`): does a shorter tail close B64 H32's gap?

    PYTHONPATH=. python bench/bench_kda_tail.py --out DIR

At B64 H32 the pool kernel's 8192 one-warp programs make about 7.8 waves; as the last programs finish the SMs empty
one by one, a fixed cost of about 5 us a call (runs bd-cf: time = F + bytes / rate). With the last `narrow_pairs`
(row, head) pairs on tiles half as wide, the programs that start last take about half as long. Each case is timed
for several counts with the three timers of bench_pdl.py (graph replay, do_bench, profiler kernel time), after
checking that the results match the default launch's (relative error below 1e-5: a half-wide tile spreads K over
the warp's lanes differently, so its sums round differently). Slots a random permutation of the pool and
the pool in order. JSON to DIR/bench_kda_tail.json; a table last.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from bench.bench_pdl import TIMERS, copy_calls, kda_calls, measure, same_under_every_option

CASES = [(64, 32, "random"), (64, 32, "pool"), (64, 96, "random"), (256, 32, "random")]
NARROW = [0, 128, 256, 512, 1024]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    started = time.time()
    rows = []
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "narrow_pairs": NARROW,
              "rows": rows}
    with torch.inference_mode():
        result["copy_1GiB_us"] = measure(copy_calls(2**30))
        for batch, heads, order in CASES:
            name, nbytes, calls, read, reset = kda_calls(batch, heads, False, order)
            variants = [{"narrow_pairs": n} for n in NARROW]
            row = {"case": name, "bytes": nbytes,
                   "identical": same_under_every_option(calls, read, reset, variants, tolerance=1e-5)}
            if not row["identical"]:
                raise AssertionError(f"{name}: narrow tail tiles changed the results")
            for options in variants:
                row[f"narrow_{options['narrow_pairs']}"] = measure(calls(**options))
            reset()
            rows.append(row)
            torch.cuda.empty_cache()
            result["seconds"] = time.time() - started
            (args.out / "bench_kda_tail.json").write_text(json.dumps(result, indent=2))
    big = result["copy_1GiB_us"]
    print(f"{'case':<26} {'timer':<9} " + " ".join(f"{'narrow ' + str(n):>16}" for n in NARROW))
    for r in rows:
        for t in TIMERS:
            rate = r["bytes"] * big[t] / 2**30
            cells = " ".join(f"{r[f'narrow_{n}'][t]:8.2f} {rate / r[f'narrow_{n}'][t]:6.1%}" for n in NARROW)
            print(f"{r['case']:<26} {t:<9} {cells}")


if __name__ == "__main__":
    main()
