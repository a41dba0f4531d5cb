"""Exhaustive throughput in each float format against FX(p, f) on the same model and inputs.

Run by hand:  python benchmarks/bench_formats.py [--task idxl] [--N 8] [--p 12] [--repeat 2]

Prints, from one run, the exhaustive engine (one worker, verdict included) on one model (built
for FX(p, f)) in FX(p, f) and in bf16, fp16, e4m3, e5m2 and fp32 with fp32 accumulation, and bf16
with bf16 accumulation; then each format's time over FX's.  Each is run --repeat times, in turn
(so that a warm-up or a noisy moment favours no format); the shortest time counts.
"""

from __future__ import annotations

import argparse

from bench_grid import time_exhaustive

import verifier

FORMATS = ("bf16", "fp16", "e4m3", "e5m2", "fp32", "bf16+bf16acc")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="idxl")
    ap.add_argument("--N", type=int, default=8)
    ap.add_argument("--p", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    fx_problem = verifier.build_problem(args.task, N=args.N, p=args.p)
    task = fx_problem.task
    print(f"{task.name} N={args.N}: {task.total:,} inputs; the model built for {fx_problem.arith.label()}, "
          f"d={fx_problem.model.d}")
    problems = {"FX": fx_problem}
    problems.update({name: verifier.build_problem(args.task, N=args.N, arith=name, model=fx_problem.model)
                     for name in FORMATS})
    times, verdicts = time_exhaustive(problems, args.repeat)
    for name, sec in times.items():
        print(f"  {name:<14} {verdicts[name]:<8} {sec:7.2f} s  {task.total / sec:>12,.0f} inputs/s")
    for name, sec in times.items():
        if name != "FX":
            print(f"ratio {name} / FX: {sec / times['FX']:.2f}")


if __name__ == "__main__":
    main()
