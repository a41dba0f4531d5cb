"""The frontiers of the multi-layer constructions: p*(N) over doublings of N, saved as
docs/results/frontier-<name>.json, and for G.2 (MQAR, nearest neighbour) k*(N), the smallest width
of T that proves at p = 16 (every width from 1 to 2 max N at N = 2 .. --width-max-N), saved as
docs/results/width-<name>.json; the results pages render them
(`tools.generated`).  A width sweep runs twice: at QUICK_TIMEOUT a run, then at --timeout for the
runs left unknown (the verdict cache holds the rest).

    python3 -m tools.frontiers                       # every frontier, within its budget
    python3 -m tools.frontiers --only frontier-mqar,width-mqar  # some of them
    python3 -m tools.frontiers --timeout 60 --budget-scale 3 --max-N 4096   # when the engines reach further
    python3 -m tools.frontiers --summary             # one table of the saved frontiers (runs nothing)

Each frontier is `runs.sweep.descend`: N doubles from the smallest N the task takes; at each N, p
is scanned from the previous N's p* + 1 down to the first p that does not prove (up first while
refuted), each (N, p) one run of at most --timeout seconds on the engine `auto` picks.  A frontier
ends at the first N whose top p is not proved within the time limit (unknown, never guessed), at
--max-N, or when its budget (seconds for all its runs) is spent.  Verdicts go to the verdict cache,
so the same command run again decides only what it has not (and everything again when the
verifier's code changed).  The JSON files are this tool's output: it rewrites them.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from dataclasses import dataclass, field

from tools.transcripts import ROOT
from verifier.runs.cache import Cache, default_path
from verifier.runs.sweep import Frontier, descend, frontier


@dataclass(frozen=True)
class Spec:
    name: str  # docs/results/<name>.json
    label: str  # the construction, in the summary table
    task: str
    N0: int  # the smallest N
    start: int  # the first N's first p (or k)
    budget: float | None  # seconds for all the runs (None: the grid of a width sweep, every run)
    options: dict = field(default_factory=dict)
    widths: bool = False  # a grid sweep of T's width k = 1 .. 2 max N at p = start, instead of a scan of p

    def Ns(self, max_N: int) -> list[int]:
        return [self.N0 << i for i in range(64) if self.N0 << i <= max_N]


WIDTH_P = 16  # the p of the width sweeps: the default width proves there at the N reached
# a width sweep's first pass: a run that ends unknown falls to the falsification pass, which finds a narrow T's
# counterexample in seconds where the bounds engine's search took 390 s (MQAR, N = 64, k = 64); the runs left
# unknown are decided again at the full --timeout (proving the Hadamard width at N = 64 takes 96 s)
QUICK_TIMEOUT = 30.0
SPECS = [
    # f fixed: the first layer is exactly local (the bounds engine's two-layer case) only while exp floors
    # a far key to 0, and the range the quadratic score needs is what grows with N
    Spec("frontier-induction-heads", "induction heads, sigma = 3, f = 4", "induction_heads", 2, 8, 180,
         {"sigma": 3, "f": 4}),
    # N = 64 takes a few minutes a run (MQAR at p = 15: 71 s of bounds engine, then the sample check)
    Spec("frontier-mqar", "MQAR", "mqar", 2, 8, 1800),
    Spec("frontier-nearest-neighbour", "nearest neighbour", "nearest_neighbour", 2, 8, 1800),
    # one case a size, no division in its formula: bitwuzla (`--solver auto`) was 2-7x faster than z3
    Spec("frontier-equality", "equality", "equality", 2, 6, 600, {"solver": "auto"}),
    Spec("frontier-disjointness", "disjointness", "disjointness", 2, 8, 600, {"solver": "auto"}),
    # 16 integer bits (the previous-token head's range at N = 64), so p* - 16 = f*, the fraction bits; with
    # f = p / 2 the previous-token head is no longer exactly local from N = 16 and the prefix engine refuses
    Spec("frontier-dyck22", "Dyck-(2,2) transformer, 16 integer bits", "dyck22", 2, 17, 1200, {"int_bits": 16}),
    # 16 integer bits too: lambda grows as M^2 log M (about 5,300 at L = 2, N = 64; scores reach 2 lambda), which
    # f = p / 2 holds only from p = 30; at 16 integer bits p* stays within the p <= 31 int64 holds by product
    Spec("frontier-composition-L2", "composition, L = 2, 16 integer bits", "composition", 2, 17, 1800,
         {"depth": 2, "int_bits": 16}),
    # 17 integer bits at depths 3 and 4: lambda is 24,757 at depth 3, N = 64 (24,871 at depth 4, N = 32) and scores
    # reach 2 lambda, past the range of 16 (32,768), where the lookup engine's certificate failed on the saturated
    # logits and a case passed 2^20 branches; depth 4 at N = 64 would need 19 integer bits and p = 34, past int64
    Spec("frontier-composition-L3", "composition, L = 3, 17 integer bits", "composition", 2, 18, 1200,
         {"depth": 3, "int_bits": 17}),
    Spec("frontier-composition-L4", "composition, L = 4, 17 integer bits", "composition", 2, 20, 1200,
         {"depth": 4, "int_bits": 17}),
    # the bounds engine, not auto's enumeration: at N = 8 enumerating took 36 s a width, the engine 0.2 s
    Spec("width-mqar", "MQAR, width of T", "mqar", 2, WIDTH_P, None, {"engine": "bounds"}, widths=True),
    Spec("width-nearest-neighbour", "nearest neighbour, width of T", "nearest_neighbour", 2, WIDTH_P, None,
         {"engine": "bounds"}, widths=True),
]


def path(spec: Spec) -> str:
    return f"docs/results/{spec.name}.json"


def quick_timeout(spec: Spec, timeout: float, cache: Cache | None) -> float | None:
    """A width sweep's first pass's time a run, or None for one pass (the second reads the first's
    verdicts from the cache)."""
    return QUICK_TIMEOUT if spec.widths and cache is not None and timeout > QUICK_TIMEOUT else None


def run(spec: Spec, timeout: float, budget_scale: float, max_N: int, cache: Cache | None) -> Frontier:
    def progress(line: str) -> None:
        print(f"  {spec.name} {line}", file=sys.stderr, flush=True)

    Ns = spec.Ns(max_N)
    if spec.widths:  # every width up to the Hadamard width 2 max N: which prove, not only k*
        grid = functools.partial(frontier, spec.task, Ns, [spec.start], ks=list(range(1, 2 * max(Ns) + 1)),
                                 cache=cache, scheduler="serial", progress=progress, **spec.options)
        quick = quick_timeout(spec, timeout, cache)
        if quick is not None:
            grid(timeout=quick)
        return grid(timeout=timeout)
    return descend(spec.task, Ns, spec.start, timeout=timeout, budget=spec.budget * budget_scale, cache=cache,
                   progress=progress, **spec.options)


def summary(specs: list[Spec]) -> str:
    """One compact Markdown table of the saved frontiers (no run): p* (or k*, and in parentheses the
    smallest width that proves) by N, the fits, where each stops."""
    lines = ["| construction | N (doublings) | p* (k*) by N | fit c log2 N + b | fit c (log2 N)^2 + b | form "
             "| stops at |",
             "|---|---|---|---|---|---|---|"]
    for spec in specs:
        fr = Frontier.from_json(json.loads((ROOT / path(spec)).read_text()))
        done = [r for r in fr.rows if r.p_star is not None]
        # a width row: the rule's k*, and the smallest width that proves at all (the verdicts' first P)
        least = {r.N: min((k for k, v in r.verdicts.items() if v == "proved"), default=None) for r in done}
        star = ", ".join(f"{r.N}: {r.p_star}" + (f" ({least[r.N]})" if fr.over == "k" else "") for r in done) or "-"
        span = f"{done[0].N}..{done[-1].N} ({len(done) - 1})" if done else "-"
        found = fr.fit
        forms = [found.form(n).equation(f"{fr.over}*") for n in ("log", "log^2")] if found else ["-", "-"]
        form = (found.decided or ("either" if all(f.consistent for f in found.forms) else "neither")) if found else "-"
        stop = next((f"N = {r.N}: {' '.join(f'{p}{v[0].upper()}' for p, v in r.verdicts.items())}"
                     for r in fr.rows if r.p_star is None), "-")
        name = f"{spec.label} ({fr.over}* at p = {spec.start})" if fr.over == "k" else spec.label
        lines.append(f"| {name} | {span} | {star} | {forms[0]} | {forms[1]} | {form} | {stop} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m tools.frontiers", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=None, help="comma-separated names: " + ", ".join(s.name for s in SPECS))
    ap.add_argument("--timeout", type=float, default=30, help="seconds for each (N, p) run (default 30)")
    ap.add_argument("--budget-scale", type=float, default=1.0, help="multiplies each frontier's budget")
    ap.add_argument("--max-N", type=int, default=1024, help="the largest N tried (default 1024)")
    ap.add_argument("--width-max-N", type=int, default=64, help="the largest N of the width sweeps (default 64)")
    ap.add_argument("--no-cache", action="store_true", help="decide every run again")
    ap.add_argument("--summary", action="store_true", help="print one table of the saved frontiers; run nothing")
    args = ap.parse_args(argv)
    names = {s.name for s in SPECS}
    only = set(args.only.split(",")) if args.only else names
    if only - names:
        ap.error(f"unknown frontier {', '.join(sorted(only - names))}; known: {', '.join(s.name for s in SPECS)}")
    if args.summary:
        print(summary([s for s in SPECS if s.name in only]))
        return 0
    cache = None if args.no_cache else Cache(default_path())
    for spec in (s for s in SPECS if s.name in only):
        t0 = time.monotonic()
        max_N = args.width_max_N if spec.widths else args.max_N
        fr = run(spec, args.timeout, args.budget_scale, max_N, cache)
        made = {"command": "python3 -m tools.frontiers", "timeout": args.timeout,
                "quick_timeout": quick_timeout(spec, args.timeout, cache),
                "budget": None if spec.budget is None else spec.budget * args.budget_scale, "max_N": max_N,
                "engine": spec.options.get("engine", "auto"),
                "seconds": round(time.monotonic() - t0, 1)}
        (ROOT / path(spec)).write_text(json.dumps({**fr.to_json(), "made_by": made}, indent=2) + "\n")
        reached = [r.N for r in fr.rows if r.p_star is not None]
        print(f"{spec.name}: p* at N = {', '.join(map(str, reached)) or 'none'} "
              f"({time.monotonic() - t0:.0f} s); {fr.partial or 'every N'}; wrote {path(spec)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
