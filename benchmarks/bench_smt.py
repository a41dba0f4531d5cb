"""SMT engine figures, from one run.  Run by hand:  python benchmarks/bench_smt.py [--budget 60]

* SMT on index lookup at N = 16, p = 12, sigma 2 and sigma 64;
* the largest N that SMT proves within the budget (default 60 s), sigma 2 and sigma 64, p = 12;
* SMT against exhaustive at sigma 2, N = 16, p = 12, as a ratio;
* bit-vectors against integers on the same formulas: index lookup with soft attention
  (p = 24, where z3 decides the cases) and the first models of the differential battery.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import verifier
from verifier.engines import RunOptions
from verifier.engines.smt import Smt
from verifier.support.budget import Deadline


def timed(**kw):
    t0 = time.perf_counter()
    r = verifier.prove("idxl", **kw)
    return r, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=60.0)
    args = ap.parse_args()

    print("index lookup, p = 12, engine smt (bit-vectors)")
    for sigma in (2, 64):
        r, s = timed(N=16, p=12, sigma=sigma, engine="smt")
        st = r.engine_stats
        print(f"  N=16 sigma={sigma:<3} {r.verdict:<8} {s:7.2f} s  ({st['cases']} cases, "
              f"{st['decided_by_solver']} by the solver)")

    for sigma in (2, 64):
        best = None
        for N in (16, 24, 32, 48, 64, 96, 128, 192, 256):
            r, s = timed(N=N, p=12, sigma=sigma, engine="smt", timeout=args.budget)
            print(f"  N={N:<4} sigma={sigma:<3} {r.verdict:<8} {s:7.2f} s")
            if r.verdict != "proved" or s > args.budget:
                break
            best = N
        print(f"  largest N proved within {args.budget:g} s at sigma={sigma}: {best}")

    ex, s_ex = timed(N=16, p=12, engine="exhaustive")
    sm, s_sm = timed(N=16, p=12, engine="smt")
    print(f"sigma=2, N=16, p=12: exhaustive {s_ex:.2f} s ({ex.verdict}), smt {s_sm:.2f} s ({sm.verdict}); "
          f"ratio smt / exhaustive = {s_sm / s_ex:.2f}")

    print("bit-vectors against integers (same formulas)")
    for kw in (dict(N=4, p=24, sigma=64), dict(N=5, p=24, sigma=16), dict(N=8, p=12, sigma=64, eta=1.0)):
        row = []
        for engine in ("smt-bv", "smt-int"):
            r, s = timed(engine=engine, timeout=600, **kw)
            row.append((r.verdict, s, r.engine_stats["solver_seconds"]))
        print(f"  idxl {kw}: bv {row[0][0]} {row[0][1]:.2f} s, int {row[1][0]} {row[1][1]:.2f} s; "
              f"ratio int / bv = {row[1][1] / row[0][1]:.2f}")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from battery import battery_problem  # the differential battery's models

    for theory in ("bv", "int"):
        t0 = time.perf_counter()
        verdicts = []
        for i in range(40):
            res = Smt(theory).run(battery_problem(i), RunOptions(deadline=Deadline(120)))
            verdicts.append(res.status if res.status != "complete" else ("refuted" if res.found else "proved"))
        print(f"  battery models 0..39, theory {theory}: {time.perf_counter() - t0:.2f} s, "
              f"{verdicts.count('proved')} proved, {verdicts.count('refuted')} refuted, "
              f"{len(verdicts) - verdicts.count('proved') - verdicts.count('refuted')} unknown")


if __name__ == "__main__":
    main()
