"""Exhaustive throughput in each float format and in int8 against FX(p, f) on the same model and inputs;
the bounds engine in float formats against enumeration and against itself in FX.

Run by hand:  python benchmarks/bench_formats.py [--task idxl] [--N 8] [--p 12] [--repeat 2]
                                                 [--bounds-N 14] [--large-N 64]

Prints, from one run, the exhaustive engine (one worker, verdict included) on one model (built
for FX(p, f)) in FX(p, f) and in bf16, fp16, e4m3, e5m2 and fp32 with fp32 accumulation, and bf16
with bf16 accumulation, and int8 with scales per channel and per tensor; then each format's time over
FX's, and int8's over bf16's (int8 also calibrates its scales when the problem is built, a float64 pass
over the task's inputs: that time is printed on its own).  Then, for index lookup (the task the
bounds engine is for): at --bounds-N, the bounds engine against enumeration in bf16, fp16, e4m3
and e5m2 (enumeration's time over the bounds engine's), and at --large-N, beyond enumeration, the
bounds engine in each float format against FX(p, f) (the float time over FX's), on the model
built for FX.  Engine seconds (`engine_stats`), without building and without a proof's sample
check.  Each is run --repeat times, in turn (so that a warm-up or a noisy moment favours no
format); the shortest time counts.
"""

from __future__ import annotations

import argparse
import time

from bench_grid import time_exhaustive

import verifier

FORMATS = ("bf16", "fp16", "e4m3", "e5m2", "fp32", "bf16+bf16acc", "int8", "int8:tensor")
BOUNDS_FORMATS = ("bf16", "fp16", "e4m3", "e5m2")


def engine_times(problems: dict, engine: str, repeat: int) -> tuple[dict, dict]:
    """Each problem decided by `engine` (one worker) `repeat` times, in turn: the shortest engine
    time and the verdict of each."""
    times, verdicts = {}, {}
    for _ in range(repeat):
        for name, problem in problems.items():
            r = verifier.run(problem, engine, workers=1)
            sec = float(r.engine_stats.get("seconds", r.seconds))
            times[name] = min(times.get(name, sec), sec)
            verdicts[name] = r.verdict
    return times, verdicts


def bounds_figures(N: int, large_N: int, p: int, repeat: int) -> None:
    """Index lookup: float bounds against enumeration at N, and against FX bounds at large_N."""
    fx_problem = verifier.build_problem("idxl", N=N, p=p)
    floats = {name: verifier.build_problem("idxl", N=N, arith=name, model=fx_problem.model) for name in BOUNDS_FORMATS}
    print(f"\nindex_lookup N={N}: {fx_problem.task.total:,} inputs; the bounds engine against enumeration")
    by_bounds, v_bounds = engine_times(floats, "bounds", repeat)
    by_enum, v_enum = engine_times(floats, "exhaustive", repeat)
    for name in floats:
        print(f"  {name:<6} bounds {v_bounds[name]:<8} {by_bounds[name]:7.2f} s   exhaustive {v_enum[name]:<8} "
              f"{by_enum[name]:7.2f} s   ratio exhaustive / bounds: {by_enum[name] / by_bounds[name]:.1f}")
    fx_problem = verifier.build_problem("idxl", N=large_N, p=p)
    problems = {"FX": fx_problem}
    problems.update({name: verifier.build_problem("idxl", N=large_N, arith=name, model=fx_problem.model)
                     for name in BOUNDS_FORMATS})
    print(f"index_lookup N={large_N}: {fx_problem.task.total:.3g} inputs; the bounds engine, float against "
          f"{fx_problem.arith.label()}")
    times, verdicts = engine_times(problems, "bounds", repeat)
    for name, sec in times.items():
        ratio = "" if name == "FX" else f"   ratio {name} / FX: {sec / times['FX']:.1f}"
        print(f"  {name:<6} {verdicts[name]:<8} {sec:7.2f} s{ratio}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="idxl")
    ap.add_argument("--N", type=int, default=8)
    ap.add_argument("--p", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--bounds-N", type=int, default=14)
    ap.add_argument("--large-N", type=int, default=64)
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
    bounds_figures(args.bounds_N, args.large_N, args.p, args.repeat)


if __name__ == "__main__":
    main()
