"""Exhaustive throughput on a grid of rational step against FX(p, f) on the same problem.

Run by hand:  python benchmarks/bench_grid.py [--task idxl] [--N 12] [--p 12] [--kc 1]

Prints, from one run, the exhaustive engine (one worker, verdict included) on one model in:
* FX(p, f), whose primitives are shifts;
* the grid of step 2^-f and the same codes, computed by the generic integer path (multiplication
  and floor division): the same codes and verdict, so the ratio is the cost of the generic path;
* Bhattamishra et al.'s B.2 grid at the task's N (step N^-Kc, codes -N^(2 Kc) .. N^(2 Kc));
and the ratios of their times to FX's.  Each is run --repeat times (default 2, in turn, so that a
warm-up or a noisy moment does not favour one format); the shortest time counts.
"""

from __future__ import annotations

import argparse
from fractions import Fraction

import verifier
from verifier.arithmetic import Grid


def time_exhaustive(problems: dict, repeat: int) -> tuple[dict, dict]:
    """Each problem decided by the exhaustive engine (one worker) `repeat` times, in turn: the
    shortest time and the verdict of each."""
    times, verdicts = {}, {}
    for _ in range(repeat):
        for name, problem in problems.items():
            r = verifier.run(problem, "exhaustive", workers=1)
            times[name] = min(times.get(name, r.seconds), r.seconds)
            verdicts[name] = r.verdict
    return times, verdicts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="idxl")
    ap.add_argument("--N", type=int, default=12)
    ap.add_argument("--p", type=int, default=12)
    ap.add_argument("--kc", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    fx_problem = verifier.build_problem(args.task, N=args.N, p=args.p)
    fx = fx_problem.arith
    formats = {"FX": fx_problem.arith, "grid of step 2^-f (generic path)": Grid(Fraction(1, 2 ** fx.f), fx.lo, fx.hi),
               f"B.2 grid, Kc={args.kc}": Grid.b2(args.N, args.kc)}
    task = fx_problem.task
    print(f"{task.name} N={args.N}: {task.total:,} inputs; the model built for FX(p={args.p}, f={fx.f}), "
          f"d={fx_problem.model.d}")
    problems = {name: verifier.build_problem(args.task, N=args.N, arith=fmt, model=fx_problem.model)
                for name, fmt in formats.items()}
    times, verdicts = time_exhaustive(problems, args.repeat)
    for name, fmt in formats.items():
        sec = times[name]
        print(f"  {name:<36} {verdicts[name]:<8} {sec:7.2f} s  {task.total / sec:>12,.0f} inputs/s   [{fmt.label()}]")
    for name, sec in times.items():
        if name != "FX":
            print(f"ratio {name} / FX: {sec / times['FX']:.2f}")


if __name__ == "__main__":
    main()
