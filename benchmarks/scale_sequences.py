"""How far each engine reaches on the sequence tasks: the largest N proved within a time limit.

For each (task, construction, engine), N grows from 2 until a run is not proved within --timeout
seconds (one run each, this machine); prints the README's table.

    python3 benchmarks/scale_sequences.py [--timeout 60]
"""

from __future__ import annotations

import argparse
import time

import verifier

ROWS = [  # task, options, engine
    ("induction_heads", dict(sigma=3, p=20, f=4), "exhaustive"),
    ("induction_heads", dict(sigma=3, p=20, f=4), "smt"),
    ("dyck22", dict(p=20, f=8), "exhaustive"),
    ("dyck22", dict(p=20, f=8), "smt"),
    ("dyck22", dict(p=4, f=1, variant="recurrent"), "exhaustive"),
    ("dyck22", dict(p=4, f=1, variant="recurrent"), "smt"),
]
MAX_N = 64


def reach(task: str, opts: dict, engine: str, timeout: float) -> tuple[int, float, str]:
    """(largest N proved, its seconds, what stopped the next N)."""
    best, seconds = 0, 0.0
    for N in range(2, MAX_N + 1):
        t0 = time.monotonic()
        r = verifier.prove(task, N=N, engine=engine, timeout=timeout, **opts)
        took = time.monotonic() - t0
        if r.verdict != "proved":
            return best, seconds, f"N = {N}: {r.verdict}" + (" (time limit)" if r.status == "timeout" else "")
        best, seconds = N, took
    return best, seconds, f"stopped at N = {MAX_N}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=60)
    args = ap.parse_args()
    print(f"| task | construction | arithmetic | engine | largest N proved in {args.timeout:g} s "
          "| its seconds | next |")
    print("|---|---|---|---|---|---|---|")
    for task, opts, engine in ROWS:
        arith = f"p={opts['p']}, f={opts['f']}"
        extra = ", ".join(f"{k}={v}" for k, v in opts.items() if k not in ("p", "f", "variant"))
        n, s, nxt = reach(task, opts, engine, args.timeout)
        print(f"| {task}{' (' + extra + ')' if extra else ''} | {opts.get('variant', 'default')} | {arith} | "
              f"{engine} | {n} | {s:.1f} | {nxt} |", flush=True)


if __name__ == "__main__":
    main()
