"""Calibrate auto's cost model of enumeration (verifier/engines/cost.py) and check it.

Run by hand:  python3 benchmarks/bench_cost_model.py [--window 16384]

For each problem of a varied set (one and two layers, softmax and ReLU, recurrent, tables and
wide maps, up to 14 positions) it times the batched evaluator, one process, over four windows
spread over the enumeration (forward pass and judgement, as enumeration runs them), and prints
the seconds per input measured, the model's prediction with the constants in the code, and their
ratio.  Then it fits the two constants (PER_POSITION, PER_ELEMENT) by non-negative least
squares on the relative error and prints them with the ratios they give: to calibrate again, copy
them into verifier/engines/cost.py.  One run, on this machine; the ratios are what to read.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import verifier
from verifier.engines import cost
from verifier.evaluator import make_evaluator
from verifier.refute.refute import random_model
from verifier.tasks import make_task

PROBLEMS = [  # (label, task, N, options, model: None for the construction, or (heads, width, attention))
    ("idxl N=8", "idxl", 8, {}, None),
    ("idxl N=16", "idxl", 16, {}, None),
    ("idxl N=6 sigma=8", "idxl", 6, {"sigma": 8}, None),
    ("icqa k=3", "icqa", 3, {}, None),
    ("equality N=12", "equality", 12, {}, None),
    ("dyck22 N=12 (recurrent)", "dyck22", 12, {}, None),
    ("induction_heads N=6 (2 layers)", "induction_heads", 6, {}, None),
    ("nearest_neighbour N=4 (2 layers)", "nearest_neighbour", 4, {}, None),
    ("mqar N=8 (2 layers, FFN)", "mqar", 8, {}, None),
    ("equality N=16", "equality", 16, {}, None),
    ("memorization N=8", "memorization", 8, {}, None),
    ("icqa k=4 nq=na=8, random 2 ReLU heads", "icqa", 4, {"nq": 8, "na": 8}, (2, 8, "relu")),
    ("icqa k=3, random 1 softmax head", "icqa", 3, {}, (1, 8, "softmax")),
    ("icqa k=3, random 4 ReLU heads, width 32", "icqa", 3, {}, (4, 32, "relu")),
]


def measured(problem, window: int) -> float:
    """Seconds per member of the enumeration (drawn, filtered, evaluated), one process, over four windows."""
    task = problem.task
    ev = make_evaluator(problem.model, problem.arith)
    size = min(task.total, window)
    starts = sorted({min(task.total - size, task.total * k // 4) for k in range(4)})
    t0 = time.process_time()  # this process's time: other processes' load does not count
    for start in starts:
        for batch in task.batches(start, start + size, ev.batch_size):
            ev.judge(ev.forward(batch.tokens), batch.expected)
    return (time.process_time() - t0) / (size * len(starts))


def features(problem) -> np.ndarray:
    """Per member: its positions, and the elements of an input's forward pass times the share of
    members that are inputs."""
    L, task = problem.task.max_len, problem.task
    return np.array([L, cost.input_share(task, 0, task.total) * cost.work_per_input(problem.model, L)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=int, default=16384, help="Inputs per timed window.")
    args = ap.parse_args()
    constants = np.array([cost.PER_POSITION, cost.PER_ELEMENT])
    rows, times = [], []
    print(f"{'problem':<42} {'members':>14} {'elements':>10} {'measured s/member':>17} {'model':>10} "
          f"{'model/meas':>10}")
    for label, name, N, options, shape in PROBLEMS:
        model = None
        if shape is not None:
            model = random_model(make_task(name, N, **options), *shape, np.random.default_rng(0))
        problem = verifier.build_problem(name, N=N, p=12, model=model, **options)
        x, t = features(problem), measured(problem, args.window)
        rows.append(x)
        times.append(t)
        print(f"{label:<42} {problem.task.total:>14,} {x[1]:>10,.0f} {t:>17.3g} {x @ constants:>10.3g} "
              f"{x @ constants / t:>10.2f}")
    A, t = np.array(rows), np.array(times)
    fitted = _nnls(A / t[:, None], np.ones(len(t)))
    print("fitted (relative least squares, non-negative): PER_POSITION = {:.2g}, PER_ELEMENT = {:.2g}".format(*fitted))
    ratios = A @ fitted / t
    print("with them, model/measured: " + ", ".join(f"{r:.2f}" for r in ratios)
          + f"; with the code's constants {(A @ constants / t).min():.2f} .. {(A @ constants / t).max():.2f}")


def _nnls(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min |A x - b| over x >= 0, for a few columns: every subset of columns, the best feasible fit."""
    best, best_err = np.zeros(A.shape[1]), np.inf
    for mask in range(1, 1 << A.shape[1]):
        cols = [c for c in range(A.shape[1]) if mask >> c & 1]
        x, *_ = np.linalg.lstsq(A[:, cols], b, rcond=None)
        if (x < 0).any():
            continue
        full = np.zeros(A.shape[1])
        full[cols] = x
        err = np.linalg.norm(A @ full - b)
        if err < best_err:
            best, best_err = full, err
    return best


if __name__ == "__main__":
    main()
