"""SMT engine figures, from one run.  Run by hand:  python benchmarks/bench_smt.py [--budget 60]

* SMT on index lookup at N = 16, p = 12, sigma 2 and sigma 64;
* the largest N that SMT proves within the budget (default 60 s), sigma 2 and sigma 64, p = 12;
* SMT against exhaustive at sigma 2, N = 16, p = 12, as a ratio;
* bit-vectors against integers on the same formulas: index lookup with soft attention
  (p = 24, where z3 decides the cases) and the first models of the differential battery;
* with ``--old DIR`` (a checkout of the code to compare with, e.g. ``git archive 6d48ca3 verifier |
  tar -x -C DIR``): the SMT engine of DIR (z3, as `verify` runs it by default) against this tree's
  (with the solver `FAMILIES` names) in one process and in two, at N doubling, for equality,
  disjointness, the Dyck-(2,2) transformer, composition L = 4, n = 2, index lookup at eta = 1,
  MQAR, nearest neighbour and induction heads: seconds of each (the engine alone: encoding,
  solving, decoding; each in a fresh process), their ratios, the largest N within the budget and
  the growth exponent log2(t(2N) / t(N)) over the last doubling.  ``--only-old-new`` skips the
  rest; ``--family TASK`` and ``--max-n N`` run a part;
* with ``--solvers``: z3, bitwuzla and auto on equality and disjointness at N = 256, 512 and the
  Dyck-(2,2) transformer, ratios to z3; with ``--quantize``: exact-weight quantization, distinct
  values against every entry;
* with ``--floats FORMAT`` (e.g. fp16, bf16, e5m2) instead: the SMT engine in that float format
  (z3's floating-point theory, docs/smt-encoding.md "Float formats") against exhaustive on index
  lookup at N doubling from 2 while it proves within the budget, and on disjointness at N = 2, 4,
  with each ratio; bitwuzla's answer on the first case it is given.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
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


# (name, task, N doubling, problem parameters at N, the new engine's solver): the frontier
# precisions of docs/results; bitwuzla where it was the faster (one-layer-deep mixing: equality,
# disjointness), z3 where it was (softmax with a symbolic Z, divisions: Dyck-(2,2), composition)
FAMILIES = [
    ("equality", "equality", (64, 128, 256, 512, 1024), lambda N: dict(p=2 * int(math.log2(N))), "bitwuzla"),
    ("disjointness", "disjointness", (64, 128, 256, 512, 1024), lambda N: dict(p=2 * int(math.log2(N)) + 4),
     "bitwuzla"),
    ("dyck22 transformer", "dyck22", (4, 8, 16, 32, 64), lambda N: dict(p=20, f=8), "z3"),
    ("composition L=4 n=2", "composition", (2,), lambda N: dict(depth=4, n=2, p=20, f=10), "z3"),
    # several cases per length, which share the length's forward pass (`Encoder`); p = 16 proves each
    ("idxl sigma=64 eta=1", "idxl", (4, 8, 16, 32), lambda N: dict(p=12, sigma=64, eta=1.0), "z3"),
    ("mqar", "mqar", (2, 4, 8, 16), lambda N: dict(p=16), "z3"),
    ("nearest neighbour", "nearest_neighbour", (2, 4, 8), lambda N: dict(p=16), "z3"),
    ("induction heads sigma=3", "induction_heads", (2, 4, 8, 16), lambda N: dict(sigma=3, p=20, f=4), "z3"),
]


def child(spec: str) -> None:
    """One engine run in this process, from `verifier` on sys.path: prints a JSON line."""
    from verifier.engines.base import RunOptions
    from verifier.engines.smt import Smt
    from verifier.runs.api import build_problem

    a = json.loads(spec)
    problem = build_problem(a["task"], N=a["N"], **a["params"])
    t0 = time.perf_counter()
    res = Smt().run(problem, RunOptions(deadline=Deadline(a["budget"]), solver=a["solver"], workers=a["workers"]))
    print(json.dumps({"seconds": time.perf_counter() - t0, "status": str(res.status), "found": len(res.found),
                      "unfinished": res.stats.get("unfinished_case"),
                      "solver_seconds": res.stats.get("solver_seconds")}))


def engine_run(tree: Path, task: str, N: int, params: dict, solver: str, budget: float,
               workers: int | None = None) -> tuple[str, float, float]:
    """(verdict, seconds, solver seconds) of the SMT engine of the code in `tree`, in a fresh process
    (`workers`: its processes; None, its default)."""
    spec = json.dumps({"task": task, "N": N, "params": params, "solver": solver, "budget": budget,
                       "workers": workers})
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, __file__, "--child", spec], env=env, capture_output=True, text=True,
                         timeout=budget + 600)
    if out.returncode:
        why = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode
        return f"error: {why}", math.nan, math.nan
    r = json.loads(out.stdout.strip().splitlines()[-1])
    verdict = ("refuted" if r["found"] else "proved") if r["status"] == "complete" else \
        f"unknown ({r['status']}, case {r['unfinished']})"
    return verdict, r["seconds"], r["solver_seconds"] or math.nan


def old_new(old: Path, budget: float, only: str | None = None, max_n: int | None = None) -> None:
    """Old against new at N doubling: the new engine in one process (its cases sharing their
    length's forward pass where it pays) and in two (cases decided at once)."""
    new = Path(__file__).resolve().parents[1]
    print(f"SMT engine, old ({old}, z3) against new (this tree, the solver named) in 1 and 2 processes; seconds "
          f"of the engine, budget {budget:g} s each")
    runs = (("old", old, None), ("new1", new, 1), ("new2", new, 2))
    for name, task, Ns, params, solver in FAMILIES:
        if only and only != task:
            continue
        times: dict[str, dict[int, float]] = {which: {} for which, _, _ in runs}
        stopped: set[str] = set()  # past the budget at a smaller N
        for N in Ns:
            if max_n is not None and N > max_n:
                break
            row = []
            for which, tree, workers in runs:
                s = "z3" if which == "old" else solver
                if which in stopped:
                    row.append(f"{which} -")
                    continue
                verdict, sec, _ = engine_run(tree, task, N, params(N), s, budget, workers)
                row.append(f"{which} ({s}) {verdict} {sec:7.2f} s")
                if verdict.startswith(("proved", "refuted")) and sec <= budget:
                    times[which][N] = sec
                else:
                    stopped.add(which)
            ratios = "".join(f"  {w}/old {times[w][N] / times['old'][N]:.3f}" for w in ("new1", "new2")
                             if N in times[w] and N in times["old"])
            print(f"  {name:<20} N={N:<5} {params(N)}: {'; '.join(row)}{ratios}", flush=True)
            if {"new1", "new2"} <= stopped:
                break
        for which, _, _ in runs:
            t = times[which]
            done = sorted(t)
            growth = (f", growth exponent {math.log2(t[done[-1]] / t[done[-2]]):.2f} from N={done[-2]} to {done[-1]}"
                      if len(done) >= 2 and done[-1] == 2 * done[-2] else "")
            print(f"  {name}: largest N decided within {budget:g} s, {which}: {done[-1] if done else None}{growth}")
        for which in ("new1", "new2"):
            common = sorted(set(times["old"]) & set(times[which]))
            if common:
                N = common[-1]
                print(f"  {name}: {which}/old at N={N}, the largest both decided: "
                      f"{times[which][N] / times['old'][N]:.3f}")


# (task, N, parameters): equality at p = 2 log2 N + 1 and disjointness at 2 log2 N + 4 (issue 25),
# and the Dyck-(2,2) transformer (no division in its formulas either: auto gives it bitwuzla)
SOLVER_RUNS = [("equality", N, dict(p=2 * int(math.log2(N)) + 1)) for N in (256, 512)] + \
    [("disjointness", N, dict(p=2 * int(math.log2(N)) + 4)) for N in (256, 512)] + [("dyck22", 4, dict(p=20, f=8))]


def solver_ratios(budget: float, runs: list = SOLVER_RUNS, solvers: tuple = ("z3", "bitwuzla", "auto")) -> None:
    """The SMT engine with each solver on the same problems (each in a fresh process), and the
    ratio of each to z3's engine seconds, from this one run."""
    here = Path(__file__).resolve().parents[1]
    print(f"SMT engine by solver: engine seconds (solver seconds), budget {budget:g} s each")
    for task, N, params in runs:
        got = {s: engine_run(here, task, N, params, s, budget) for s in solvers}
        base = got["z3"][1]
        print(f"  {task} N={N} {params}: " + "; ".join(
            f"{s} {v} {sec:.1f} s ({sol:.1f} s) x{sec / base:.2f}" for s, (v, sec, sol) in got.items()), flush=True)


def quantize_ratio(N: int = 512, p: int = 19) -> None:
    """Fixed.quantize of equality's exact weights (object arrays of Fractions, d = 2N + 6) against
    rounding every entry on its own (the code before it rounded each distinct value once)."""
    import numpy as np

    from verifier.runs.api import build_problem
    problem = build_problem("equality", N=N, p=p)
    fx, arrays = problem.arith, []
    problem.model.map_arrays(lambda name, w: arrays.append(w) or w)
    exact = [w for w in arrays if w.dtype == object]
    t0 = time.perf_counter()
    for w in exact:
        np.vectorize(fx.round_rational, otypes=[object])(w)
    per_entry = time.perf_counter() - t0
    t0 = time.perf_counter()
    for w in exact:
        fx.quantize(w)
    distinct = time.perf_counter() - t0
    print(f"quantize equality N={N} p={p} ({sum(w.size for w in exact):,} exact entries): per entry "
          f"{per_entry:.2f} s, each distinct value once {distinct:.2f} s, ratio {distinct / per_entry:.3f}")


FLOAT_RUNS = (("idxl", None, (2, 4, 8, 16)), ("disjointness", "e5m2+e5m2acc", (2, 4)))  # None: --floats FORMAT


def floats(fmt: str, budget: float, runs: tuple = FLOAT_RUNS) -> None:
    """SMT (z3, and bitwuzla) against exhaustive in a float format, ratios from this one run.
    Disjointness has a second softmax layer, whose exp table is over every accumulation value <= 0:
    it runs in e5m2 with e5m2 accumulation (124 such values; fp16's 31,744 are refused)."""
    for task, run_fmt, Ns in runs:
        f = run_fmt or fmt
        for N in Ns:
            row = {}
            for engine, solver in (("exhaustive", "z3"), ("smt", "z3"), ("smt", "bitwuzla")):
                t0 = time.perf_counter()
                r = verifier.prove(task, N=N, arith=f, engine=engine, solver=solver,
                                   timeout=budget if engine == "smt" else None)
                why = r.reason if r.verdict == "unknown" else ""
                row[f"{engine}/{solver}"] = (r.verdict, time.perf_counter() - t0, why)
            ex, z, bw = row["exhaustive/z3"], row["smt/z3"], row["smt/bitwuzla"]
            print(f"{task} N={N} {f}: exhaustive {ex[0]} {ex[1]:.2f} s; smt z3 {z[0]} {z[1]:.2f} s "
                  f"(ratio smt / exhaustive {z[1] / ex[1]:.0f}); smt bitwuzla {bw[0]} {bw[1]:.2f} s {bw[2][:90]}")
            if z[0] != "proved" and task == "idxl":
                break


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--old", type=Path, help="a checkout of the code to compare the SMT engine with")
    ap.add_argument("--only-old-new", action="store_true")
    ap.add_argument("--family", help="with --old: only this task (e.g. mqar)")
    ap.add_argument("--max-n", type=int, help="with --old: no N above this")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--floats", help="a float format: the float SMT figures only")
    ap.add_argument("--solvers", action="store_true", help="the solver figures only (z3, bitwuzla, auto)")
    ap.add_argument("--quantize", action="store_true", help="the exact-weight quantization figure only")
    args = ap.parse_args()
    if args.child:
        return child(args.child)
    if args.solvers:
        return solver_ratios(args.budget)
    if args.quantize:
        return quantize_ratio()
    if args.floats:
        return floats(args.floats, args.budget)
    if args.old:
        old_new(args.old, args.budget, args.family, args.max_n)
        if args.only_old_new:
            return

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
