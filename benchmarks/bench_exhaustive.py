"""Exhaustive engine throughput on index lookup, against a float64 forward pass of the same model.

Run by hand:  python benchmarks/bench_exhaustive.py [--N 16] [--p 12]

Prints, from one run:
* the exhaustive engine's inputs per second (1 and 2 workers), end to end (verdict included);
* the FX batched evaluator alone over every input (fast path, one process);
* a plain numpy float64 batched forward pass of the same model over the same inputs (matmuls on
  the whole sequence, the textbook way), and float64 on the same partial-evaluation path as FX;
* the ratios FX / float64.
"""

from __future__ import annotations

import argparse
import time

import verifier
from verifier.arithmetic import FixedPoint, Real
from verifier.evaluator import Evaluator


def sweep_all(ev: Evaluator, task, size_of) -> float:
    t0 = time.perf_counter()
    for batch in task.batches(0, task.total, size_of):
        ev.forward(batch.tokens)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--N", type=int, default=16)
    ap.add_argument("--p", type=int, default=12)
    ap.add_argument("--sigma", type=int, default=2)
    args = ap.parse_args()
    problem = verifier.build_problem("idxl", N=args.N, p=args.p, sigma=args.sigma)
    task, model = problem.task, problem.model
    total = task.total
    print(f"index_lookup N={args.N} sigma={args.sigma}: {total:,} inputs; model d={model.d}, "
          f"{model.n_params()} parameters; FX(p={args.p}, f={args.p // 2})")

    rows = []
    for workers in (1, 2):
        r = verifier.run(problem, "exhaustive", workers=workers)
        assert r.verdict == "proved", r.summary()
        rows.append((f"engine, {workers} worker{'s' if workers > 1 else ''} (verdict: {r.verdict})", r.seconds))

    fx = Evaluator(model, FixedPoint(args.p))
    size = fx.batch_size  # the same batches for every pass
    t_fx = sweep_all(fx, task, size)
    t_real_tables = sweep_all(Evaluator(model, Real()), task, size)
    t_real_plain = sweep_all(Evaluator(model, Real(), tables=False), task, size)
    rows += [("FX evaluator alone (fast path, 1 process)", t_fx),
             ("float64 plain batched forward (matmuls, 1 process)", t_real_plain),
             ("float64 on the same partial-evaluation path (1 process)", t_real_tables)]
    for name, sec in rows:
        print(f"  {name:<58} {sec:7.2f} s  {total / sec:>12,.0f} inputs/s")
    print(f"ratio FX / float64 plain forward:              {t_fx / t_real_plain:.2f}")
    print(f"ratio FX / float64 on the same path:           {t_fx / t_real_tables:.2f}")
    print(f"ratio engine 1 worker / engine 2 workers:      {rows[0][1] / rows[1][1]:.2f}")


if __name__ == "__main__":
    main()
