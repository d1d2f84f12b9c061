"""Accuracy of the event watcher's device intervals against CUPTI's, on traces recorded with
`ggml-trace record --device-timing --cupti`:
    python bench/gpu/accuracy.py TRACE...
Prints, per trace and over all, the median and 95th percentile of |Δstart| and |Δend|."""
import sys
from pathlib import Path

import pandas as pd

from ggml_trace.analysis import load
from ggml_trace.analysis.device_timing import accuracy, compare_sources


def main(paths):
    diffs = []
    print(f"{'trace':32} {'ops':>5} {'|Δstart| med':>13} {'p95':>9} {'|Δend| med':>11} {'p95':>9}  (µs)")
    for p in paths:
        d = compare_sources(load(p))
        diffs.append(d)
        a = accuracy(d)
        print(f"{Path(p).stem:32} {a['operations']:>5} {a['start_median_us']:>13.1f} "
              f"{a['start_p95_us']:>9.1f} {a['end_median_us']:>11.1f} {a['end_p95_us']:>9.1f}")
    all_ = pd.concat(diffs, ignore_index=True)
    a = accuracy(all_)
    print(f"{'all':32} {a['operations']:>5} {a['start_median_us']:>13.1f} {a['start_p95_us']:>9.1f} "
          f"{a['end_median_us']:>11.1f} {a['end_p95_us']:>9.1f}")
    print(f"signed medians (watcher − CUPTI): start {a['start_signed_median_us']:+.1f} µs, "
          f"end {a['end_signed_median_us']:+.1f} µs; start estimated in "
          f"{all_['start_estimated'].mean():.0%} of operations, end already past in {all_['end_late'].mean():.0%}")
    for kind, g in all_.groupby("kind", observed=True):
        k = accuracy(g)
        print(f"  {str(kind):20} {k['operations']:>5} {k['start_median_us']:>13.1f} {k['start_p95_us']:>9.1f} "
              f"{k['end_median_us']:>11.1f} {k['end_p95_us']:>9.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
