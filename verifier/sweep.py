"""The precision frontier: for each N, the smallest p at which a construction is proved.

p*(N) is the smallest p in the range such that the construction is proved at p and at every
larger p of the range (so a p that proves by luck below a failing one does not count); the
table also lists every verdict, and the counterexample that rules out p* - 1.  The fit is an
ordinary least-squares line p* = a log2 N + c over the N that have a p*.

Every p of the grid, the task's options and the largest N are checked before the first run, so a
bad grid fails at once, not after hours.  An interruption (Ctrl-C, SIGTERM) stops the sweep: the
frontier is marked partial, and the row it interrupted has no p*.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, TextIO

from . import interrupts
from .api import build_problem, prove
from .arithmetic import FixedPoint
from .errors import InputError

MAX_GRID = 10_000  # values in one --N or --p range


@dataclass
class FrontierRow:
    N: int
    p_star: Optional[int]
    verdicts: dict[int, str]  # p -> proved | refuted | unknown
    ruled_out_by: Optional[str] = None  # the counterexample at p* - 1
    ruled_out_reason: Optional[str] = None
    seconds: float = 0.0
    complete: bool = True  # False: the sweep was interrupted in this row


@dataclass
class Frontier:
    task: str
    rows: list[FrontierRow]
    arithmetic: dict  # the fixed part of the arithmetic (f rule, rounding, ...)
    slope: Optional[float] = None
    intercept: Optional[float] = None
    construction: dict = field(default_factory=dict)
    partial: Optional[str] = None  # why the sweep stopped early (None: every run finished)

    def to_json(self) -> dict:
        return {"task": self.task, "arithmetic": self.arithmetic, "construction": self.construction,
                "partial": self.partial,
                "fit": {"p_star": "slope * log2(N) + intercept", "slope": self.slope, "intercept": self.intercept},
                "rows": [asdict(r) for r in self.rows]}

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["N", "log2_N", "p_star", "verdicts", "ruled_out_by", "reason", "seconds", "complete"])
        for r in self.rows:
            verdicts = " ".join(f"{p}:{v[0].upper()}" for p, v in r.verdicts.items())
            w.writerow([r.N, f"{math.log2(r.N):.4f}", r.p_star if r.p_star is not None else "", verdicts,
                        r.ruled_out_by or "", r.ruled_out_reason or "", f"{r.seconds:.2f}",
                        "yes" if r.complete else "no"])
        return buf.getvalue()

    def to_markdown(self) -> str:
        lines = ["| N | log2 N | p* | ruled out at p*-1 by | verdicts by p (P proved, R refuted, U unknown) |",
                 "|---|---|---|---|---|"]
        for r in self.rows:
            verdicts = " ".join(f"{p}{v[0].upper()}" for p, v in r.verdicts.items())
            cex = f"`{r.ruled_out_by}` ({r.ruled_out_reason})" if r.ruled_out_by else "-"
            lines.append(f"| {r.N} | {math.log2(r.N):.2f} | {r.p_star if r.p_star is not None else '-'} | "
                         f"{cex} | {verdicts} |")
        if self.slope is not None:
            lines.append("")
            lines.append(f"Fit: p* = {self.slope:.3f} log2 N + {self.intercept:.3f}")
        if self.partial:
            lines.append("")
            lines.append(f"PARTIAL: {self.partial}; the last row is incomplete and has no p*")
        return "\n".join(lines)


def p_star(verdicts: dict[int, str]) -> Optional[int]:
    """The smallest p proved at itself and at every larger p of the range."""
    return next((p for p in sorted(verdicts) if all(v == "proved" for q, v in verdicts.items() if q >= p)), None)


def parse_range(text: str, name: str) -> list[int]:
    """'2..16' or '5' or '2,4,8' -> a list of at most MAX_GRID integers (checked before it is built)."""
    try:
        if ".." in text:
            a, b = (int(x) for x in text.split(".."))
            count = b - a + 1
            values = None
        else:
            items = text.split(",")
            count = len(items)
            values = [int(x) for x in items] if count <= MAX_GRID else None
    except ValueError:
        raise InputError(f"{name} must be a range like 2..16 or a list like 2,4,8; got {text!r}") from None
    if count < 1:
        raise InputError(f"{name} range {text!r} is empty")
    if count > MAX_GRID:
        raise InputError(f"{name} range {text!r} has {count:,} values; at most {MAX_GRID:,}")
    return values if values is not None else list(range(a, b + 1))


def frontier(task: str, Ns: list[int], ps: list[int], *, engine: str = "auto", timeout: Optional[float] = None,
             progress: Optional[Callable[[str], None]] = None, int_bits: Optional[int] = None,
             **problem) -> Frontier:
    """Prove the construction for every (N, p) of the grid and extract p*(N).  With `int_bits`,
    f = p - int_bits at each p: p* then measures the fraction bits a construction needs."""
    if int_bits is not None and problem.get("f") is not None:
        raise InputError("--f and --int-bits both set the fractional bits; give one")
    arith = {k: problem[k] for k in ("f", "rounding", "overflow", "accumulate") if problem.get(k) is not None}

    def at(p: int) -> dict:
        return problem if int_bits is None else {**problem, "f": p - int_bits}

    for p in ps:  # every format of the grid is valid before any run
        if int_bits is not None and not 0 <= p - int_bits <= p:
            raise InputError(f"--int-bits {int_bits} leaves f = {p - int_bits} at p = {p}; it must be in 0..p")
        FixedPoint(p, **{**arith, **({"f": p - int_bits} if int_bits is not None else {})})
    build_problem(task, N=max(Ns), p=max(ps), **at(max(ps)))  # options, sizes and memory too
    rows = []
    arithmetic: dict = {}
    construction: dict = {}
    partial = None
    try:
        for N in Ns:
            row = FrontierRow(N, None, {}, complete=False)
            rows.append(row)
            cex = {}
            for p in ps:
                result = prove(task, N=N, p=p, engine=engine, timeout=timeout, **at(p))
                if result.status == "interrupted":
                    raise KeyboardInterrupt
                row.verdicts[p] = result.verdict
                row.seconds += result.seconds
                if result.counterexamples:
                    c = result.counterexamples[0]
                    cex[p] = (c.input, f"{c.reason}: {c.claim}")
                arithmetic = {k: result.arithmetic[k] for k in ("rounding", "overflow", "accumulate")}
                construction = result.construction
                if progress:
                    progress(f"N={N} p={p}: {result.verdict} ({result.seconds:.2f} s)")
            row.complete = True
            row.p_star = p_star(row.verdicts)
            if row.p_star is not None and row.p_star - 1 in cex:
                row.ruled_out_by, row.ruled_out_reason = cex[row.p_star - 1]
    except KeyboardInterrupt:
        partial = f"interrupted ({interrupts.cause()}) at N={N}, p={p}"
    f_rule = (f"f = p - {int_bits}" if int_bits is not None else
              "f = p // 2" if problem.get("f") is None else f"f = {problem['f']}")
    result = Frontier(task, rows, {"f": f_rule, **arithmetic}, construction=construction, partial=partial)
    pts = [(math.log2(r.N), r.p_star) for r in rows if r.p_star is not None]
    if len(pts) >= 2 and len({x for x, _ in pts}) >= 2:
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        result.slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
        result.intercept = my - result.slope * mx
    return result


@contextlib.contextmanager
def new_output(path: str | Path) -> Iterator[TextIO]:
    """Create the output file now, before a long run, so that a name that exists or cannot be
    created fails at once; it is never overwritten.  If the run fails, the empty file is removed."""
    path = Path(path)
    try:
        fh = open(path, "x")
    except FileExistsError:
        raise InputError(f"{path} exists; refusing to overwrite it") from None
    except OSError as exc:
        raise InputError(f"cannot create {path}: {exc.strerror}") from None
    try:
        with fh:
            yield fh
    except BaseException:
        if path.stat().st_size == 0:
            path.unlink()
        raise
