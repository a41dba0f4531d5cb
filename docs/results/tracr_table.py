"""The README's table of Tracr programs: the smallest fixed-point format at which each compiled
program is exact on every input up to its max-len.  Run: python3 docs/results/tracr_table.py
(needs the tracr extra).  Each row is `verify tracr PROGRAM --vocab ... --max-len ... --p 2..24
--f 0..10`; the columns are p* at the best f, p* at f = p // 2, and the counterexample one bit below."""

from __future__ import annotations

import time

from verifier.importers.tracr import compile_program
from verifier.runs.sweep import format_frontier, frontier

PROGRAMS = [  # (program, vocab, max-len)
    ("lib:make_length", "a,b,c", 4),
    ("lib:make_length", "a,b,c", 6),
    ("lib:make_hist", "a,b,c", 4),
    ("lib:make_reverse", "a,b,c", 4),
    ("lib:make_sort_unique", "a,b,c,d", 4),
    ("lib:make_shuffle_dyck2", "(,),{,}", 4),
]
PS, FS = list(range(2, 25)), list(range(0, 11))


def main() -> None:
    print("| program | vocab | max-len | layers, d, params | inputs | smallest (p, f) | ruled out at p-1 by "
          "| p* at f = p // 2 | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for program, vocab, max_len in PROGRAMS:
        t0 = time.monotonic()
        c = compile_program(program, vocab.split(","), max_len)
        m = c.model
        by_f = format_frontier(c.task, max_len, PS, FS, model=m, scheduler="serial")
        half = frontier(c.task, [max_len], PS, model=m, scheduler="serial").rows[0]
        best = by_f.best
        row = dict(by_f.by_f)[best[1]].rows[0] if best else None
        cex = f"`{row.ruled_out_by}` ({row.ruled_out_reason})" if row and row.ruled_out_by else "-"
        print(f"| `{program}` | `{vocab}` | {max_len} | {len(m.layers)}, {m.d}, {m.n_params()} | {c.task.total} | "
              f"{'p = %d, f = %d' % best if best else '-'} | {cex} | {half.p_star or '-'} | "
              f"{time.monotonic() - t0:.0f} |")


if __name__ == "__main__":
    main()
