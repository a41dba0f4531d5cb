"""Exhaustive throughput in each float format and in int8 against FX(p, f) on the same model and inputs.

Run by hand:  python benchmarks/bench_formats.py [--task idxl] [--N 8] [--p 12] [--repeat 2]

Prints, from one run, the exhaustive engine (one worker, verdict included) on one model (built
for FX(p, f)) in FX(p, f) and in bf16, fp16, e4m3, e5m2 and fp32 with fp32 accumulation, and bf16
with bf16 accumulation, and int8 with scales per channel and per tensor; then each format's time over
FX's, and int8's over bf16's.  Each is run --repeat times, in turn (so that a warm-up or a noisy moment
favours no format); the shortest time counts.  int8 also calibrates its scales when the problem is
built (a float64 pass over the task's inputs): that time is printed on its own.
"""

from __future__ import annotations

import argparse
import time

from bench_grid import time_exhaustive

import verifier

FORMATS = ("bf16", "fp16", "e4m3", "e5m2", "fp32", "bf16+bf16acc", "int8", "int8:tensor")


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
    built = {}
    for name in FORMATS:
        start = time.perf_counter()
        problems[name] = verifier.build_problem(args.task, N=args.N, arith=name, model=fx_problem.model)
        built[name] = time.perf_counter() - start

    times, verdicts = time_exhaustive(problems, args.repeat)
    for name, sec in times.items():
        print(f"  {name:<14} {verdicts[name]:<8} {sec:7.2f} s  {task.total / sec:>12,.0f} inputs/s")
    for name, sec in times.items():
        if name != "FX":
            print(f"ratio {name} / FX: {sec / times['FX']:.2f}")
    for name in ("int8", "int8:tensor"):
        print(f"ratio {name} / bf16: {times[name] / times['bf16']:.2f}; building the int8 problem (calibration "
              f"included) took {built[name]:.2f} s, bf16's {built['bf16']:.2f} s")


if __name__ == "__main__":
    main()
