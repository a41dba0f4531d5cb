"""Chen and Zou at finite precision (issue 23, item 5): does any 1-layer model of the synthesis
family (one-hot embeddings, H ReLU heads of width m, a linear readout; `verifier.refute.synthesis`), every
weight a p-bit code, answer **every input** of a tiny dataset right in FX?  Per row: UNSAT (no
model of the family solves the dataset at that precision: the theorem holds there), a model that
solves it (proved on every input by the engines: the theorem fails at that precision), or unknown
(the solver's time ran out).  One run on this machine, with a total time budget; each row gets at
most --timeout seconds and no more than what is left of --budget.

`--members certificate` prints the older table instead: the first certificate's members only.

    PYTHONPATH=. python3 benchmarks/impossible_table.py [--solver bitwuzla] [--timeout 60] [--budget 600] [--save DIR]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Optional

import verifier
from verifier.arithmetic import FixedPoint
from verifier.refute.certificates import find_certificate
from verifier.refute.synthesis import synthesize, synthesize_dataset
from verifier.tasks import make_task

ICQA2, ICQA3, TM2 = dict(N=2, nq=2, na=2), dict(N=2, nq=3, na=3), dict(N=2)
DATASET_ROWS = ([("icqa", ICQA2, 1, 1, p) for p in (3, 4, 6)] + [("icqa", ICQA2, 2, 2, 4), ("icqa", ICQA3, 1, 1, 4)]
                + [("template_matching", TM2, 1, 1, p) for p in (3, 4, 6)] + [("template_matching", TM2, 2, 2, 3)])
CERTIFICATE_ROWS = ([("icqa", ICQA2, heads, width, p, "saturate") for heads, width in [(1, 1), (2, 2)]
                     for p in (3, 4, 6)] + [("icqa", ICQA2, 1, 1, p, "error") for p in (3, 4)]
                    + [("template_matching", TM2, 1, 1, p, "saturate") for p in (4, 6)])


def datasets(solver: str, timeout: float, budget: float, save: Optional[str]) -> None:
    print(f"solver {solver}, at most {timeout:g} s a row, {budget:g} s in all; FX rounding=floor overflow=saturate "
          f"accumulate=product\n")
    print("| task | options | inputs | heads | width | format | parameters | verdict | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    t_start = time.monotonic()
    for name, opts, heads, width, p in DATASET_ROWS:
        task = make_task(name, **opts)
        fx = FixedPoint(p, None, "floor", "saturate")
        left = budget - (time.monotonic() - t_start)
        options = ", ".join(f"{k}={v}" for k, v in opts.items())
        if left < 1:
            print(f"| {name} | {options} | {task.total} | {heads} | {width} | p={fx.p}, f={fx.f} | - "
                  f"| not run (budget spent) | 0 |")
            continue
        t0 = time.monotonic()
        s = synthesize_dataset(task, heads, width, fx, timeout=min(timeout, left), solver=solver)
        if save and s.model is not None:
            path = Path(save) / f"{name}-{'-'.join(f'{k}{v}' for k, v in opts.items())}-h{heads}-m{width}-p{p}.npz"
            verifier.save_model(s.model, path)
        verdict = {"impossible": "UNSAT: no model of the family solves it",
                   "escapes": f"a model solves it ({s.whole_dataset})",
                   "unknown": f"unknown ({s.stats['reason']} at {min(timeout, left):.0f} s)"}[s.verdict]
        print(f"| {name} | {options} | {s.members} | {heads} | {width} | p={fx.p}, f={fx.f} "
              f"| {s.shape['parameters']} | {verdict} | {time.monotonic() - t0:.1f} |", flush=True)
    print(f"\ntotal {time.monotonic() - t_start:.0f} s")


def certificates(timeout: float) -> None:
    print("| task | certificate | heads | width | p | overflow | parameters | verdict | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, opts, heads, width, p, overflow in CERTIFICATE_ROWS:
        task = make_task(name, **opts)
        cert = find_certificate(task)
        t0 = time.monotonic()
        s = synthesize(task, cert, heads, width, FixedPoint(p, None, "floor", overflow), timeout=timeout)
        verdict = {"impossible": "impossible (UNSAT)", "escapes": "a model escapes (SAT)",
                   "unknown": f"unknown (z3 timeout at {timeout:g} s)"}[s.verdict]
        print(f"| {name} | {len(cert.members)} inputs | {heads} | {width} | {p} | {overflow} | "
              f"{s.shape['parameters']} | {verdict} | {time.monotonic() - t0:.1f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", choices=("dataset", "certificate"), default="dataset")
    ap.add_argument("--solver", default="bitwuzla")
    ap.add_argument("--timeout", type=float, default=None, help="Seconds a row (default 60; certificates 120).")
    ap.add_argument("--budget", type=float, default=600, help="Seconds for the whole dataset table.")
    ap.add_argument("--save", default=None, help="A directory: write each model that solves a dataset there.")
    args = ap.parse_args()
    if args.members == "certificate":
        certificates(args.timeout or 120)
    else:
        datasets(args.solver, args.timeout or 60, args.budget, args.save)


if __name__ == "__main__":
    main()
