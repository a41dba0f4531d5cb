"""The precision frontier: for each N, the smallest p at which a construction is proved.

p*(N) is the smallest p in the range such that the construction is proved at p and at every
larger p of the range (so a p that proves by luck below a failing one does not count); the
table also lists every verdict, and the counterexample that rules out p* - 1.  The fit is an
ordinary least-squares line p* = a log2 N + c over the N that have a p*.
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .api import prove
from .errors import InputError


@dataclass
class FrontierRow:
    N: int
    p_star: Optional[int]
    verdicts: dict[int, str]  # p -> proved | refuted | unknown
    ruled_out_by: Optional[str] = None  # the counterexample at p* - 1
    ruled_out_reason: Optional[str] = None
    seconds: float = 0.0


@dataclass
class Frontier:
    task: str
    rows: list[FrontierRow]
    arithmetic: dict  # the fixed part of the arithmetic (f rule, rounding, ...)
    slope: Optional[float] = None
    intercept: Optional[float] = None
    construction: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"task": self.task, "arithmetic": self.arithmetic, "construction": self.construction,
                "fit": {"p_star": "slope * log2(N) + intercept", "slope": self.slope, "intercept": self.intercept},
                "rows": [asdict(r) for r in self.rows]}

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["N", "log2_N", "p_star", "verdicts", "ruled_out_by", "reason", "seconds"])
        for r in self.rows:
            verdicts = " ".join(f"{p}:{v[0].upper()}" for p, v in r.verdicts.items())
            w.writerow([r.N, f"{math.log2(r.N):.4f}", r.p_star if r.p_star is not None else "", verdicts,
                        r.ruled_out_by or "", r.ruled_out_reason or "", f"{r.seconds:.2f}"])
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
        return "\n".join(lines)


def p_star(verdicts: dict[int, str]) -> Optional[int]:
    """The smallest p proved at itself and at every larger p of the range."""
    return next((p for p in sorted(verdicts) if all(v == "proved" for q, v in verdicts.items() if q >= p)), None)


def parse_range(text: str, name: str) -> list[int]:
    """'2..16' or '5' or '2,4,8' -> a list of integers."""
    try:
        if ".." in text:
            a, b = text.split("..")
            values = list(range(int(a), int(b) + 1))
        else:
            values = [int(x) for x in text.split(",")]
    except ValueError:
        raise InputError(f"{name} must be a range like 2..16 or a list like 2,4,8; got {text!r}") from None
    if not values:
        raise InputError(f"{name} range {text!r} is empty")
    return values


def frontier(task: str, Ns: list[int], ps: list[int], *, engine: str = "auto", timeout: Optional[float] = None,
             progress: Optional[Callable[[str], None]] = None, **problem) -> Frontier:
    """Prove the construction for every (N, p) of the grid and extract p*(N)."""
    rows = []
    arithmetic: dict = {}
    construction: dict = {}
    for N in Ns:
        row = FrontierRow(N, None, {})
        cex = {}
        for p in ps:
            result = prove(task, N=N, p=p, engine=engine, timeout=timeout, **problem)
            row.verdicts[p] = result.verdict
            row.seconds += result.seconds
            if result.counterexamples:
                c = result.counterexamples[0]
                cex[p] = (c.input, f"{c.reason}: expected {c.expected}, got {c.produced}")
            arithmetic = {k: result.arithmetic[k] for k in ("rounding", "overflow", "accumulate")}
            construction = result.construction
            if progress:
                progress(f"N={N} p={p}: {result.verdict} ({result.seconds:.2f} s)")
        row.p_star = p_star(row.verdicts)
        if row.p_star is not None and row.p_star - 1 in cex:
            row.ruled_out_by, row.ruled_out_reason = cex[row.p_star - 1]
        rows.append(row)
    f_rule = "f = p // 2" if problem.get("f") is None else f"f = {problem['f']}"
    result = Frontier(task, rows, {"f": f_rule, **arithmetic}, construction=construction)
    pts = [(math.log2(r.N), r.p_star) for r in rows if r.p_star is not None]
    if len(pts) >= 2 and len({x for x, _ in pts}) >= 2:
        mx = sum(x for x, _ in pts) / len(pts)
        my = sum(y for _, y in pts) / len(pts)
        sxx = sum((x - mx) ** 2 for x, _ in pts)
        result.slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
        result.intercept = my - result.slope * mx
    return result


def check_new(path: str | Path) -> Path:
    """Fail before a long run, not after it, if its output file cannot be created."""
    path = Path(path)
    if path.exists():
        raise InputError(f"{path} exists; refusing to overwrite it")
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
        raise InputError(f"cannot create {path}: {path.parent} is not a writable directory")
    return path


def write_new(path: str | Path, text: str) -> Path:
    """Write a new file; never overwrite one that exists."""
    path = Path(path)
    try:
        with open(path, "x") as fh:
            fh.write(text)
    except FileExistsError:
        raise InputError(f"{path} exists; refusing to overwrite it") from None
    return path
