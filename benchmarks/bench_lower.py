"""Time to the first counterexample: the communication refuter (`refute --method protocol`) against
the search (`--method search`), on models far beyond enumeration.  One run, on this machine.

* induction heads, sigma = 3, N = 32 (3^32 strings of length 32 alone): a 1-layer softmax model
  trained by the test suite's numpy trainer on the answer at the last position of random strings
  of length 32, exported with a readout at every position; refuted by a collision of Alice's
  messages in Theorem 4's protocol on the INDEX fooling set (2^15 Alice parts, one query);
* index lookup, sigma = 2, N = 64: a random recurrent model (16 hidden units), refuted by two
  prefixes with the same state codes (random prefixes, 256 then 4,096 then 65,536 of the 2^64).

    PYTHONPATH=. python3 benchmarks/bench_lower.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from training import Shape, train  # noqa: E402  (the test suite's numpy trainer)

import verifier  # noqa: E402
from verifier.model import Readout, Recurrent  # noqa: E402
from verifier.refute.refute import refute  # noqa: E402
from verifier.tasks import make_task  # noqa: E402


def timed(problem, method):
    t0 = time.monotonic()
    r = refute(problem, method, timeout=600)
    return r, time.monotonic() - t0


def row(label, problem):
    (a, ta), (b, tb) = timed(problem, "protocol"), timed(problem, "search")
    first = a.counterexamples[0].line() if a.counterexamples else "-"
    print(f"  {label}\n    protocol {a.verdict} in {ta:.3f} s ({a.stats.get('protocol')})\n      {first}")
    for line in a.argument[1:-1]:
        print(f"      {line}")
    second = b.counterexamples[0].line() if b.counterexamples else "-"
    print(f"    search   {b.verdict} in {tb:.3f} s ({b.stats.get('search')})\n      {second}\n"
          f"    ratio search / protocol {tb / ta:.2f}")


def main() -> None:
    rng = np.random.default_rng(0)
    task = make_task("induction_heads", 32)
    T = np.concatenate([np.full((3000, 1), task.bos), rng.integers(0, 3, (3000, 32))], axis=1)
    y = task.evaluate(T)[0][:, -1]
    model, accuracy = train(task, Shape("softmax", 2, d=16, m=8), steps=300, data=(T, y))
    model.readout.positions = "all"
    print(f"induction heads, N = 32, sigma = 3: trained 1-layer model (2 softmax heads, width 8), float accuracy "
          f"{accuracy:.2f} at the last position of its training strings")
    for p in (8, 12):
        row(f"p = {p}", verifier.build_problem("induction_heads", N=32, p=p, model=model))
    il = make_task("index_lookup", 64)
    h = 16
    r = np.random.default_rng(1)
    rnn = Recurrent(r.normal(0, 1, (len(il.vocab), h)), r.normal(0, 0.5, (h, h)), r.normal(0, 1, h), np.zeros(h),
                    Readout(r.normal(0, 1, (2, h)), r.normal(0, 1, 2)), list(il.vocab), info={"construction": "random"})
    print("index lookup, N = 64, sigma = 2: a random recurrent model, 16 hidden units")
    row("p = 8", verifier.build_problem("index_lookup", N=64, p=8, model=rnn))


if __name__ == "__main__":
    main()
