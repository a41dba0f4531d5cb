"""Time to the first counterexample: `refute` (dependent sets) against `--method search` (the
engines over the dataset), on the same trained 1-layer model, for in-context QA from enumerable
sizes to about 10^13 inputs.  One run, on this machine; the ratio is what to read.

    python3 benchmarks/bench_refute.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from training import Shape, sample, train  # noqa: E402  (the test suite's numpy trainer)

import verifier  # noqa: E402
from verifier.refute.refute import refute  # noqa: E402
from verifier.tasks import make_task  # noqa: E402

SIZES = [(2, 3, 3), (3, 4, 4), (3, 6, 6), (4, 8, 8), (5, 20, 20)]


def main() -> None:
    print("icqa, one trained 1-layer model per size (2 ReLU heads, 2,000 training examples), p = 12")
    for k, nq, na in SIZES:
        task = make_task("icqa", k, nq=nq, na=na)
        model, accuracy = train(task, Shape("relu", 2), steps=400, data=sample(task, 2000, np.random.default_rng(0)))
        problem = verifier.build_problem("icqa", N=k, nq=nq, na=na, p=12, model=model)
        times, verdicts = {}, {}
        for method in ("dependent", "search"):
            t0 = time.monotonic()
            r = refute(problem, method, timeout=600)
            times[method], verdicts[method] = time.monotonic() - t0, r.verdict
        print(f"  k={k} nq={nq} na={na}  {task.total:>22,} inputs  (train accuracy {accuracy:.2f})  "
              f"dependent {verdicts['dependent']} {times['dependent']:7.3f} s   search {verdicts['search']} "
              f"{times['search']:7.3f} s   ratio search / dependent {times['search'] / times['dependent']:8.1f}")


if __name__ == "__main__":
    main()
