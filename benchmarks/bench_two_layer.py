"""The engines for two layers (bounds, aggregate), for every prefix (prefix) and for lookups layer
after layer (lookup), from one run.  Run by hand:
python benchmarks/bench_two_layer.py [--budget 60] [--baseline-budget 60] [--largest 1024] [--tasks mqar,equality]
python benchmarks/bench_two_layer.py --below [--budget 180]

For each two-layer construction (induction heads, sigma = 3, designed, FX(24, 4): p fixed for every N,
since the previous-token head's quadratic score needs 4 (N - 1)^2 below 2^19 at N = 256; MQAR and
nearest neighbour at p = 16, f = 8, where they are proved up to N = 64, by the bounds engine;
equality and disjointness by the aggregate engine at their frontier's p*(N) = 2 log2 N and
2 log2 N + 4, f = p/2: with more fraction bits a far key's weight no longer rounds to 0, the first
layer reads every position, and the engine refuses); the Dyck-(2,2) transformer (three layers, two
of them attending) by the prefix engine at f = log2 N + 1 and p = 3 log2 N + 5, the smallest p it
proves at N = 8, 16, 32 (below, its previous-token head's window is wider than the engine takes, and
it refuses); L-fold composition at depths 2, 3 and 4 (n = 2) by the lookup engine at FX(28, 12), 16
integer bits (lambda grows as N^2 log N: about 5,300 at depth 2, N = 64) and p above p*(N) to N = 64
at depth 2, 32 at depth 3 and 16 at depth 4 (beyond, the scores of depths 3 and 4 pass 16 integer bits:
2 lambda = 49,514 at depth 3, N = 64).
N doubles from 2 for composition, from 4 for the others:

* the new engine's seconds (engine seconds: the problem's construction, the replay and the sample
  check are left out), or why it refuses the problem;
* today's best engine (enumeration, or the SMT engine where it is faster; for composition also the
  lookup engine without merging branches, as it was before it merged them) up to the largest N it
  decides within the budget, and the ratio of the two where both decide;
* the largest N proved within the budget, and the growth exponent log(t2 / t1) / log 2 over the last
  doubling.

`--below`: the precision frontier's hard runs for MQAR and nearest neighbour, one bounds run each
(verdict and engine seconds): at N = 32 and 64 just below the precision they are proved at (the
model fails there, on inputs the engine must reach), at that precision at N = 64 (MQAR p = 15,
nearest neighbour p = 11), and at p = 16.
"""

from __future__ import annotations

import argparse
import math
import time

import verifier
from verifier.engines import ENGINES, RunOptions
from verifier.engines.lookup import Lookup
from verifier.support.budget import Deadline
from verifier.verdicts import Status

CONSTRUCTIONS = [("induction_heads", dict(p=24, f=4, sigma=3), "bounds"), ("mqar", dict(p=16), "bounds"),
                 ("nearest_neighbour", dict(p=16), "bounds"),
                 ("equality", dict(p=lambda N: 2 * int(math.log2(N))), "aggregate"),
                 ("disjointness", dict(p=lambda N: 2 * int(math.log2(N)) + 4), "aggregate"),
                 ("dyck22", dict(p=lambda N: 3 * int(math.log2(N)) + 5, f=lambda N: int(math.log2(N)) + 1), "prefix")]
CONSTRUCTIONS += [("composition", dict(depth=L, n=2, p=28, f=12), "lookup") for L in (2, 3, 4)]
SMALLEST = {"composition": 2}  # the first N (4 otherwise)
TODAY = {"exhaustive": ENGINES["exhaustive"], "smt": ENGINES["smt"]}
TODAY_ALSO = {"composition": {"unmerged lookup": Lookup(merge=False)}}
BELOW = [("mqar", 32, 12), ("mqar", 64, 13), ("mqar", 64, 14), ("mqar", 64, 15), ("mqar", 64, 16),
         ("nearest_neighbour", 32, 10), ("nearest_neighbour", 64, 10), ("nearest_neighbour", 64, 11),
         ("nearest_neighbour", 64, 16)]


def engine_run(engine, problem, budget: float) -> tuple[str, float]:
    """(proved / refuted / unknown / refused: why, engine seconds) of one engine on a problem."""
    opts = RunOptions(deadline=Deadline(budget), workers=1, solver="auto")  # the SMT engine's best solver
    why = engine.unsupported(problem, opts)
    if why is not None:
        return f"refused: {why}", 0.0
    t0 = time.monotonic()
    try:
        got = engine.run(problem, opts)
    except verifier.InputError as exc:
        return f"refused: {exc}", 0.0
    seconds = time.monotonic() - t0
    if got.found:
        return "refuted", seconds
    return ("proved" if got.status == Status.COMPLETE and got.covered == problem.task.total else "unknown"), seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--baseline-budget", type=float, default=None, help="today's engines' budget (default: --budget)")
    ap.add_argument("--largest", type=int, default=256)
    ap.add_argument("--tasks", default=",".join(t for t, _, _ in CONSTRUCTIONS), help="comma-separated")
    ap.add_argument("--below", action="store_true", help="the runs just below p* (BELOW), then stop")
    args = ap.parse_args()
    if args.below:
        print(f"bounds engine, engine seconds, budget {args.budget:.0f} s a run")
        for task, N, p in BELOW:
            verdict, seconds = engine_run(ENGINES["bounds"], verifier.build_problem(task, N=N, p=p), args.budget)
            print(f"  {task:<18} N={N:<3} p={p:<3} {verdict:<8} {seconds:7.2f} s", flush=True)
        return
    for task, kw, new in CONSTRUCTIONS:
        if task not in args.tasks.split(","):
            continue
        fixed = ", ".join(f"{k}={v}" for k, v in kw.items() if not callable(v)) or "p by N"
        print(f"{task} ({fixed}), engine seconds, budget {args.budget:.0f} s")
        proved: list[tuple[int, float]] = []
        baseline_on = True
        N = SMALLEST.get(task, 4)
        while N <= args.largest:
            try:
                problem = verifier.build_problem(task, N=N, **{k: v(N) if callable(v) else v for k, v in kw.items()})
            except verifier.InputError as exc:  # a format int64 cannot hold at this N: every engine refuses it
                print(f"  N={N:<4} refused by every engine: {exc}", flush=True)
                break
            if proved and proved[-1][0] != N // 2:  # the new engine stopped proving: only today's go on
                vb, tb = "not run", 0.0
            else:
                vb, tb = engine_run(ENGINES[new], problem, args.budget)
            line = f"  N={N:<4} {new} {vb if vb.startswith('refused') else f'{vb:<8} {tb:7.2f} s'}"
            if baseline_on:
                runs = [(name,) + engine_run(engine, problem, args.baseline_budget or args.budget)
                        for name, engine in (TODAY | TODAY_ALSO.get(task, {})).items()]
                decided = [r for r in runs if r[1] in ("proved", "refuted")]
                if decided:
                    name, vs, ts = min(decided, key=lambda r: r[2])
                    line += f"   best of today's: {name} {vs:<8} {ts:7.2f} s"
                    if vb in ("proved", "refuted"):
                        line += f"   ratio {ts / tb:8.1f}"
                else:
                    line += "   today's engines: " + ", ".join(f"{n} {v.split(':')[0]}" for n, v, _ in runs)
                    baseline_on = False  # past the budget; larger N takes longer
            print(line, flush=True)
            if vb == "proved":
                proved.append((N, tb))
            if (vb != "proved" or tb > args.budget) and not baseline_on:
                break
            N *= 2
        if proved:
            big = max(n for n, t in proved if t <= args.budget)
            growth = ""
            if len(proved) >= 2:
                (n1, t1), (n2, t2) = proved[-2:]
                growth = f"; growth over N={n1}..{n2}: log2(t2/t1) = {math.log2(t2 / t1):.2f}"
            print(f"  largest N proved by {new} within {args.budget:.0f} s: {big}{growth}")


if __name__ == "__main__":
    main()
