"""How far bounded synthesis reaches: for the first certificate of in-context QA (k = 2, two
questions, two answers) and of template matching (length 2), does any 1-layer ReLU model of each
shape with p-bit weights get every member right?  Prints the README's table (one run, this machine;
each z3 call capped at --timeout seconds).

    python3 benchmarks/impossible_table.py [--timeout 120]
"""

from __future__ import annotations

import argparse
import time

from verifier.arithmetic import FixedPoint
from verifier.certificates import find_certificate
from verifier.synthesis import synthesize
from verifier.tasks import make_task

ROWS = [("icqa", dict(N=2, nq=2, na=2), heads, width, p, "saturate")
        for heads, width in [(1, 1), (2, 2)] for p in (3, 4, 6)]
ROWS += [("icqa", dict(N=2, nq=2, na=2), 1, 1, p, "error") for p in (3, 4)]
ROWS += [("template_matching", dict(N=2), 1, 1, p, "saturate") for p in (4, 6)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    print("| task | certificate | heads | width | p | overflow | parameters | verdict | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, opts, heads, width, p, overflow in ROWS:
        task = make_task(name, **opts)
        cert = find_certificate(task)
        t0 = time.monotonic()
        s = synthesize(task, cert, heads, width, FixedPoint(p, None, "floor", overflow), timeout=args.timeout)
        verdict = {"impossible": "impossible (UNSAT)", "escapes": "a model escapes (SAT)",
                   "unknown": f"unknown (z3 timeout at {args.timeout:g} s)"}[s.verdict]
        print(f"| {name} | {len(cert.members)} inputs | {heads} | {width} | {p} | {overflow} | "
              f"{s.shape['parameters']} | {verdict} | {time.monotonic() - t0:.1f} |", flush=True)


if __name__ == "__main__":
    main()
