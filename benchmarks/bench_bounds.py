"""Bounds engine figures, from one run.  Run by hand:  python benchmarks/bench_bounds.py [--budget 60]

* the bounds engine against the SMT engine on the same problems (index lookup, p = 12, sigma 2
  and 64, N = 16 .. 128), engine seconds and the ratio SMT / bounds;
* the bounds engine alone for N = 64 .. 1024 (sigma 2 and 64, p = 12; and soft attention,
  p = 27, f = 21, where every weight is positive), with the growth exponent log t / log N fitted
  over the doublings;
* `verify idxl --N 1024 --sigma 64 --p 12` as the command line runs it (auto, sample check
  included), end to end.

Times are engine seconds (`engine_stats["seconds"]`), so the problem's construction is left out;
the end-to-end line includes everything.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from pathlib import Path

import verifier


def engine_seconds(engine: str, budget: float, **kw) -> tuple[str, float]:
    r = verifier.prove("idxl", engine=engine, timeout=budget, **kw)
    return r.verdict, float(r.engine_stats.get("seconds", r.seconds))


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log t against log N."""
    xs, ys = [math.log(n) for n, _ in points], [math.log(max(t, 1e-3)) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=60.0)
    args = ap.parse_args()

    print("bounds against smt, index lookup, p = 12 (engine seconds)")
    for sigma in (2, 64):
        for N in (16, 32, 64, 128):
            vb, tb = engine_seconds("bounds", args.budget, N=N, p=12, sigma=sigma)
            vs, ts = engine_seconds("smt", args.budget, N=N, p=12, sigma=sigma)
            at_least = vs == "unknown"  # SMT stopped at the budget: its time, and the ratio, are lower bounds
            print(f"  N={N:<4} sigma={sigma:<3} bounds {vb:<8} {tb:7.2f} s   smt {vs:<8} {ts:7.2f} s   "
                  f"ratio smt / bounds {'>=' if at_least else '= '} {ts / tb:6.1f}")

    print("bounds alone: growth with N (engine seconds)")
    rows = [("sigma=2, p=12", dict(p=12, sigma=2)), ("sigma=64, p=12", dict(p=12, sigma=64)),
            ("sigma=2, p=27, f=21 (soft)", dict(p=27, f=21, sigma=2))]
    for label, kw in rows:
        points = []
        for N in (64, 128, 256, 512, 1024):
            v, t = engine_seconds("bounds", 4 * args.budget, N=N, **kw)
            print(f"  {label:<28} N={N:<5} {v:<8} {t:7.2f} s")
            if v != "proved":
                break
            points.append((N, t))
        if len(points) >= 2:
            print(f"  {label:<28} exponent log t / log N over N = {points[0][0]}..{points[-1][0]}: "
                  f"{slope(points):.2f}")

    print("end to end: verify idxl --N 1024 --sigma 64 --p 12")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "cli.py", "idxl", "--N", "1024", "--sigma", "64", "--p", "12"],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    print(f"  exit {out.returncode} in {time.perf_counter() - t0:.1f} s: {out.stdout.splitlines()[0][:40]}...")


if __name__ == "__main__":
    main()
