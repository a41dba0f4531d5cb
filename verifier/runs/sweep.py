"""The precision frontier: for each N, the smallest p at which a construction is proved.

p*(N) is the smallest p in the range such that the construction is proved at p and at every
larger p of the range (so a p that proves by luck below a failing one does not count); the
table also lists every verdict, and the counterexample that rules out p* - 1; an unknown at p* - 1
leaves the row without p*.  The fit (`runs.fit`) is p* = c log2 N + b and p* = c (log2 N)^2 + b by
least squares over the N that have a p*, with their residuals and whether the data tell them apart.

The number of runs (at most MAX_POINTS), every format of the grid, the task's options and the
largest problem are checked before the first run, so a bad grid fails at once, not after hours;
each problem is built when its run goes.  An interruption (Ctrl-C, SIGTERM) stops the sweep: the
frontier is marked partial, and a row with a p not decided has no p*; with a verdict cache, the
same command then resumes where it stopped.
"""

from __future__ import annotations

import csv
import functools
import io
import math
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Sequence

from ..arithmetic import FixedPoint
from ..result import Result
from ..support import interrupts, usercode
from ..support.budget import Deadline
from ..support.errors import InputError
from ..tasks import Task
from ..verdicts import Status, Verdict
from .api import build_problem, check_sizes
from .cache import Cache
from .cluster import Cluster, Job
from .fit import Fit, fit
from .progress import Overall

MAX_GRID = 10_000  # values in one --N or --p range
MAX_POINTS = 10_000  # (N, p) runs in one sweep: each builds and decides a problem


@dataclass
class FrontierRow:
    N: int
    p_star: Optional[int]
    verdicts: dict[int, str]  # p -> proved | refuted | unknown
    ruled_out_by: Optional[str] = None  # the counterexample at p* - 1
    ruled_out_reason: Optional[str] = None
    seconds: float = 0.0  # deciding its runs (0 for those read from the cache)
    complete: bool = True  # False: the sweep was interrupted before every p of this row was decided
    cached: int = 0  # runs of this row read from the verdict cache


@dataclass
class Frontier:
    task: str
    rows: list[FrontierRow]
    arithmetic: dict  # the fixed part of the arithmetic (f rule, rounding, ...)
    construction: dict = field(default_factory=dict)
    partial: Optional[str] = None  # why the sweep stopped early (None: every run finished)
    ran_on: str = ""  # where the runs were decided (`Cluster.describe`)
    int_bits: Optional[int] = None  # f = p - int_bits at each p: then f* = p* - int_bits is fitted too
    over: str = "p"  # what a row's values are: p, or k (T's width, at one p: `frontier(ks=...)`)

    @property
    def fit(self) -> Optional[Fit]:
        """p* = c log2 N + b and p* = c (log2 N)^2 + b over the rows that have a p* (`runs.fit`)."""
        return fit([(r.N, r.p_star) for r in self.rows if r.p_star is not None])

    @property
    def slope(self) -> Optional[float]:
        """c of the fit p* = c log2 N + b."""
        found = self.fit
        return found.form("log").slope if found else None

    @property
    def intercept(self) -> Optional[float]:
        found = self.fit
        return found.form("log").intercept if found else None

    @property
    def exit_code(self) -> int:
        """3 when the sweep stopped early (the table is partial), else 0."""
        return 3 if self.partial else 0

    def to_json(self) -> dict:
        return {"task": self.task, "arithmetic": self.arithmetic, "construction": self.construction,
                "partial": self.partial, "ran_on": self.ran_on, "over": self.over,
                "int_bits": self.int_bits, "fit": self.fit_json(), "rows": [asdict(r) for r in self.rows]}

    @classmethod
    def from_json(cls, data: dict) -> "Frontier":
        """A saved sweep (`to_json`; its fit is computed again from the rows)."""
        rows = [FrontierRow(**{**r, "verdicts": {int(p): v for p, v in r["verdicts"].items()}}) for r in data["rows"]]
        return cls(data["task"], rows, data["arithmetic"], data.get("construction") or {}, data.get("partial"),
                   data.get("ran_on", ""), data.get("int_bits"), data.get("over", "p"))

    def fit_json(self) -> dict:
        """The log form as slope and intercept (what plots draw), then both forms (`Fit.to_json`)."""
        found = self.fit
        return {f"{self.over}_star": "slope * log2(N) + intercept", "slope": self.slope, "intercept": self.intercept,
                **(found.to_json() if found else {})}

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
        x = self.over
        lines = [f"| N | log2 N | {x}* | ruled out at {x}*-1 by | verdicts by {x} (P proved, R refuted, U unknown) |",
                 "|---|---|---|---|---|"]
        for r in self.rows:
            verdicts = " ".join(f"{p}{v[0].upper()}" for p, v in r.verdicts.items())
            cex = f"`{r.ruled_out_by}` ({r.ruled_out_reason})" if r.ruled_out_by else "-"
            lines.append(f"| {r.N} | {math.log2(r.N):.2f} | {r.p_star if r.p_star is not None else '-'} | "
                         f"{cex} | {verdicts} |")
        found = self.fit
        if found is not None:
            lines.append("")
            lines += found.to_markdown(self.int_bits, f"{x}*")
        if self.partial:
            lines.append("")
            lines.append(f"PARTIAL: {self.partial}; a row with a {x} not decided has no {x}*")
        return "\n".join(lines)


def p_star(verdicts: dict[int, str]) -> Optional[int]:
    """The smallest p proved at itself and at every larger p of the range; None when the p of the range
    below it is unknown (a timeout there leaves p* undecided: it is not guessed)."""
    ps = sorted(verdicts)
    i = next((i for i, p in enumerate(ps) if all(verdicts[q] == Verdict.PROVED for q in ps[i:])), None)
    return None if i is None or (i > 0 and verdicts[ps[i - 1]] == Verdict.UNKNOWN) else ps[i]


RANGE_HELP = "a value (8), a range a..b with an optional step (4..64, 4..64:4) or a list (4,8,16)"


def parse_range(text: str, name: str) -> list[int]:
    """The integers of `text`: RANGE_HELP; the list items may be ranges too (2..8,16).  Sorted, each
    once; at most MAX_GRID values (counted before the list is built); InputError (one line) when
    `text` is none of these or names no value."""
    def bad(why: str) -> InputError:
        return InputError(f"{name} {text!r}: {why}; give {RANGE_HELP}")

    spans, count = [], 0
    for item in text.split(","):
        bounds, _, step = item.strip().partition(":")
        lo, dots, hi = bounds.partition("..")
        try:
            a, b, s = int(lo), int(hi) if dots else int(lo), int(step) if step else 1
        except ValueError:
            raise bad(f"{item.strip()!r} is not a number or a range") from None
        if step and not dots:
            raise bad("a step needs a range a..b:STEP")
        if s < 1:
            raise bad(f"the step must be >= 1, got {s}")
        if b < a:
            raise bad(f"the range {a}..{b} is empty")
        count += (b - a) // s + 1
        if count > MAX_GRID:
            raise bad(f"more than {MAX_GRID:,} values")
        spans.append(range(a, b + 1, s))
    return sorted({v for span in spans for v in span})


def frontier(task: "str | Task", Ns: list[int], ps: list[int], *, engine: str = "auto", timeout: Optional[float] = None,
             progress: Optional[Callable[[str], None]] = None, int_bits: Optional[int] = None,
             scheduler: Optional[str] = None, cache: Optional[Cache] = None, overall: Optional[Overall] = None,
             ks: Optional[list[int]] = None, **problem) -> Frontier:
    """Prove the construction for every (N, p) of the grid and extract p*(N).  With `int_bits`,
    f = p - int_bits at each p: p* then measures the fraction bits a construction needs.  With `ks`
    (and one p), the grid is (N, k) instead, k the width of the construction's sign vectors T: the
    rows give k*(N), the smallest width that proves at that p and at every larger width of `ks`.

    The points run as independent jobs on `scheduler` (`verifier.runs.cluster`; each point on one core),
    and their verdicts go to `cache` as they arrive, so that the same sweep run again reads them
    instead of deciding them: an interrupted sweep resumes where it was.  `task` is a task's name, or
    a task object (a compiled Tracr program's: its N is its own, so `Ns` is [task.N]); a `model`
    in `problem` is swept in place of the built-in construction.  `overall` counts the runs decided
    (`progress.Overall`: k of n, the time left); each `progress` line ends with it."""
    if int_bits is not None and problem.get("f") is not None:
        raise InputError("--f and --int-bits both set the fractional bits; give one")
    if ks is not None and (len(ps) != 1 or problem.get("k") is not None or int_bits is not None):
        raise InputError("a range of --k (the width of T) takes one --p and no --int-bits")
    xs = ps if ks is None else ks  # the values of a row
    if len(Ns) * len(xs) > MAX_POINTS:
        raise InputError(f"the sweep has {len(Ns):,} values of N and {len(xs):,} of {'p' if ks is None else 'k'}, "
                         f"{len(Ns) * len(xs):,} runs; at most {MAX_POINTS:,}")
    arith = {k: problem[k] for k in ("f", "rounding", "overflow", "accumulate") if problem.get(k) is not None}

    def at(x: int) -> dict:
        return _arguments(x, problem, int_bits, ps[0] if ks is not None else None)

    for p in ps:  # every format of the grid is valid before any run
        if int_bits is not None and not 0 <= p - int_bits <= p:
            raise InputError(f"--int-bits {int_bits} leaves f = {p - int_bits} at p = {p}; it must be in 0..p")
        FixedPoint(p, **{**arith, **({"f": p - int_bits} if int_bits is not None else {})})
    with usercode.time_limit(Deadline(timeout)):  # a user's task runs the user's code
        if isinstance(task, str):
            check_sizes(task, Ns, **problem)  # every N, from the sizes alone
        build_problem(task, N=max(Ns), **at(max(xs)))  # options, sizes and memory too
    points = [(N, x) for N in Ns for x in xs]
    name = task if isinstance(task, str) else task.name
    jobs = [Job(functools.partial(build_problem, task, N=N, **at(x)), engine, timeout) for N, x in points]
    results: dict[tuple[int, int], Result] = {}
    partial = None
    overall = overall or Overall("runs", lambda line: None)
    with Cluster(scheduler) as cluster:
        try:
            overall.start(len(points))
            for i, value in cluster.decide(jobs, cache):
                if isinstance(value, Exception):
                    raise value
                if value.status == Status.INTERRUPTED:
                    raise KeyboardInterrupt
                results[points[i]] = value
                overall.add(value.cached)
                if progress:
                    N, x = points[i]
                    progress(f"N={N} {'p' if ks is None else 'k'}={x}: {value.verdict} "
                             f"({'cached' if value.cached else f'{value.seconds:.2f} s'})"
                             f"  [{overall.brief()}]")
        except KeyboardInterrupt:
            partial = (f"interrupted ({interrupts.cause()}) with {len(results)} of {len(points)} runs decided"
                       + ("; the same command resumes from the verdict cache" if cache is not None else ""))
        finally:
            overall.stop()
        ran_on = cluster.describe()
    return _frontier(name, [_row(N, xs, results) for N in Ns], results, problem.get("f"), int_bits, partial, ran_on,
                     "p" if ks is None else "k")


def _frontier(name: str, rows: list[FrontierRow], results: dict, f: Optional[int], int_bits: Optional[int],
              partial: Optional[str], ran_on: str, over: str) -> Frontier:
    """The table of the rows, with the arithmetic and construction the runs stated."""
    f_rule = f"f = p - {int_bits}" if int_bits is not None else "f = p // 2" if f is None else f"f = {f}"
    any_result = next(iter(results.values()), None)
    arithmetic = {k: any_result.arithmetic[k] for k in ("rounding", "overflow", "accumulate")} if any_result else {}
    return Frontier(name, rows, {"f": f_rule, **arithmetic}, any_result.construction if any_result else {}, partial,
                    ran_on, int_bits, over)


def _arguments(x: int, problem: dict, int_bits: Optional[int], k_at_p: Optional[int]) -> dict:
    """build_problem's arguments at a row's value x: p = x (and f = p - int_bits with int_bits), or
    with `k_at_p` the width k = x of T at p = k_at_p."""
    if k_at_p is not None:
        return {**problem, "p": k_at_p, "k": x}
    return {**problem, "p": x} if int_bits is None else {**problem, "p": x, "f": x - int_bits}


def _row(N: int, ps: list[int], results: dict) -> FrontierRow:
    """The row of N from the results reached; p* only when every p of the row was decided."""
    done = [(p, results[N, p]) for p in ps if (N, p) in results]
    row = FrontierRow(N, None, {p: r.verdict for p, r in done}, seconds=sum(r.seconds for _, r in done),
                      complete=len(done) == len(ps), cached=sum(r.cached for _, r in done))
    if row.complete:
        row.p_star = p_star(row.verdicts)
        below = results.get((N, row.p_star - 1)) if row.p_star is not None else None
        if below is not None and below.counterexamples:
            c = below.counterexamples[0]
            row.ruled_out_by, row.ruled_out_reason = c.input, f"{c.reason}: {c.claim}"
    return row


@dataclass
class FormatFrontier:
    """p* at each fixed number of fraction bits f, for one task size: the smallest formats (p, f)
    at which the model is exact."""

    task: str
    N: int
    by_f: list[tuple[int, Frontier]]

    @property
    def exit_code(self) -> int:
        return 3 if any(fr.partial for _, fr in self.by_f) else 0

    @property
    def ran_on(self) -> str:
        return self.by_f[-1][1].ran_on if self.by_f else ""

    @property
    def best(self) -> Optional[tuple[int, int]]:
        """(p*, f) with the smallest p* (the smallest f among ties), or None."""
        found = [(fr.rows[0].p_star, f) for f, fr in self.by_f if fr.rows[0].p_star is not None]
        return min(found) if found else None

    def to_markdown(self) -> str:
        lines = ["| f | p* (integer bits p* - f) | ruled out at p*-1 by | verdicts by p |", "|---|---|---|---|"]
        for f, fr in self.by_f:
            r = fr.rows[0]
            verdicts = " ".join(f"{p}{v[0].upper()}" for p, v in r.verdicts.items())
            star = f"{r.p_star} ({r.p_star - f})" if r.p_star is not None else "-"
            cex = f"`{r.ruled_out_by}` ({r.ruled_out_reason})" if r.ruled_out_by else "-"
            lines.append(f"| {f} | {star} | {cex} | {verdicts} |")
        best = self.best
        lines += ["", f"Smallest format: p = {best[0]}, f = {best[1]}" if best else "No format of the grid is exact."]
        partial = [fr.partial for _, fr in self.by_f if fr.partial]
        if partial:
            lines += ["", f"PARTIAL: {partial[0]}"]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"task": self.task, "N": self.N, "best": self.best, "by_f": {f: fr.to_json() for f, fr in self.by_f}}


def sweep(task: "str | Task", Ns: list[int], ps: list[int], fs: Sequence[Optional[int]] = (None,), *,
          int_bits: Optional[int] = None, **options) -> "Frontier | FormatFrontier":
    """The sweep the ranges ask for: `frontier` over N and p at one f (None: p // 2, or p - int_bits)
    (or over N and k, T's width, with `ks`), or with several f, `format_frontier` at one N (each f
    fixed: no int_bits)."""
    if len(fs) > 1:
        if options.get("ks") is not None:
            raise InputError("give a range of --f or of --k, not both")
        if len(Ns) != 1 or int_bits is not None:
            raise InputError("a range of --f takes one N and no --int-bits (it fixes f at each value)")
        fixed = [f for f in fs if f is not None]
        assert len(fixed) == len(fs)  # a range of --f is of ints; None (f from p) comes alone
        return format_frontier(task, Ns[0], ps, fixed, **options)
    return frontier(task, Ns, ps, f=fs[0], int_bits=int_bits, **options)


def format_frontier(task: "str | Task", N: int, ps: list[int], fs: list[int], **options) -> FormatFrontier:
    """`frontier` at size N for each fixed f of `fs` (over the p of `ps` with p >= f), stopping at
    an interruption: the smallest p and f at which the model is exact."""
    by_f = []
    for f in fs:
        grid = [p for p in ps if p >= f]
        if not grid:
            raise InputError(f"--f {f} leaves no p of the range (f <= p)")
        fr = frontier(task, [N], grid, f=f, **options)
        by_f.append((f, fr))
        if fr.partial:
            break
    return FormatFrontier(task if isinstance(task, str) else task.name, N, by_f)



def descend(task: str, Ns: list[int], start: int, *, most: int = 40, least: int = 1, step: int = 2,
            engine: str = "auto", timeout: Optional[float] = None, budget: Optional[float] = None,
            int_bits: Optional[int] = None, cache: Optional[Cache] = None, scheduler: Optional[str] = "serial",
            progress: Optional[Callable[[str], None]] = None, solver: str = "z3", **problem) -> Frontier:
    """The frontier over the N in order, each row found by scanning p instead of deciding a fixed grid:
    from a p that proves down to the first p that does not.  The scan of N starts at `start` (the
    first N) or the previous N's lowest p proved + 1, goes up by `step` while refuted (to `most`),
    then down by one while proved (to `least`), so a row's verdicts are those of a sweep over the p it
    visited and its p* means the same.  A p that does not prove at the top ends the frontier there
    (a larger N is no easier); the N not reached have no row.  `budget` (seconds, for all the runs,
    each also limited by `timeout`) stops it early, partial."""
    clock = Deadline(budget)
    results: dict[tuple[int, int], Result] = {}
    rows: list[FrontierRow] = []
    partial = None

    def visited(N: int) -> list[int]:
        return sorted(q for n, q in results if n == N)

    with Cluster(scheduler) as cluster:

        def decide(N: int, p: int) -> Optional[str]:
            """The verdict at (N, p) (decided once), or None when the budget is spent (an unknown
            from a run that the budget's end cut short, too)."""
            if (N, p) not in results:
                left = clock.left()
                if left is not None and left <= 0:
                    return None
                limit = min(t for t in (timeout, left) if t is not None) if timeout or left else None
                job = Job(functools.partial(build_problem, task, N=N, **_arguments(p, problem, int_bits, None)),
                          engine, limit, solver)
                for _, value in cluster.decide([job], cache):
                    if isinstance(value, Exception):
                        raise value
                    if value.status == Status.INTERRUPTED:
                        raise KeyboardInterrupt
                    results[N, p] = value
                    if progress:
                        progress(f"N={N} p={p}: {value.verdict} "
                                 f"({'cached' if value.cached else f'{value.seconds:.2f} s'})")
                if results[N, p].verdict == Verdict.UNKNOWN and limit != timeout:
                    return None
            return results[N, p].verdict

        top = start
        try:
            for N in Ns:
                try:
                    p, verdict = top, decide(N, top)
                except InputError as exc:  # a size refused before any work
                    partial = f"N = {N} refused: {exc}"
                    break
                refused = ""
                while verdict == Verdict.REFUTED and p + step <= most:
                    for q in range(p + step, p, -1):  # the largest step up whose sums the format holds
                        try:
                            verdict, p, refused = decide(N, q), q, ""
                            break
                        except InputError as exc:
                            refused = f"; p = {q} refused: {exc}"
                    else:
                        break
                undecided = []
                if verdict == Verdict.PROVED:
                    while p > least and (below := decide(N, p - 1)) == Verdict.PROVED:
                        p -= 1
                    if p > least and below is None:  # the budget ran out above p*: the row has none
                        verdict, undecided = None, [p - 1]
                if visited(N):
                    rows.append(_row(N, sorted({*visited(N), *undecided}), results))
                if verdict is None:
                    partial = f"the budget of {budget:g} s ran out at N = {N}"
                    break
                if verdict != Verdict.PROVED:
                    partial = (f"stopped at N = {N}: p = {p} {verdict}"
                               + (" (time limit)" if verdict == Verdict.UNKNOWN else ", the largest p tried" + refused))
                    break
                top = p + 1
        except KeyboardInterrupt:
            partial = f"interrupted ({interrupts.cause()}) at N = {N}"
        ran_on = cluster.describe()
    return _frontier(task, rows, results, problem.get("f"), int_bits, partial, ran_on, "p")
