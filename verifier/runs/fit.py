"""The growth of a precision frontier: p*(N) fitted as c log2 N + b and as c (log2 N)^2 + b.

Each form is fitted by least squares, with its residuals.  Which form the data support is decided
by what p* is: the smallest integer p that proves, so the precision the construction really needs
lies in (p* - 1, p*].  A form is *consistent* with the data when some c, b put c g(N) + b in that
interval at every N (g = log2 N or (log2 N)^2), i.e. when its best minimax line misses the
midpoints p* - 1/2 by at most 1/2.  The data tell the forms apart only when exactly one is
consistent; when both are (two points always are, and a few doublings often are), the smaller
residual says nothing, and the summary says so instead of choosing.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

FORMS = {"log": ("log2 N", lambda N: math.log2(N)), "log^2": ("(log2 N)^2", lambda N: math.log2(N) ** 2)}
TOLERANCE = 1e-9  # a minimax miss of 1/2 + this still counts as within the rounding


@dataclass
class FormFit:
    form: str  # "log" or "log^2"
    slope: float  # c
    intercept: float  # b
    residuals: list[float]  # p* - (c g(N) + b), in the order of the points
    rss: float  # the sum of the squared residuals
    minimax: float  # the smallest largest miss of any line c g(N) + b from the midpoints p* - 1/2
    consistent: bool  # minimax <= 1/2: some line of this form lies in (p* - 1, p*] at every N

    def equation(self, what: str = "p*", shift: int = 0) -> str:
        b = self.intercept - shift
        return f"{what} = {self.slope:.3f} {FORMS[self.form][0]} {'-' if b < 0 else '+'} {abs(b):.3f}"


@dataclass
class Fit:
    points: list[tuple[int, int]]  # (N, p*)
    forms: list[FormFit]
    better: Optional[str]  # the form with the smaller residual sum of squares (None: equal)
    decided: Optional[str]  # the only form consistent with the data, if exactly one is

    def form(self, name: str) -> FormFit:
        return next(f for f in self.forms if f.form == name)

    @property
    def summary(self) -> str:
        consistent = [f.form for f in self.forms if f.consistent]
        n = len(self.points)
        if self.decided:
            other = next(f.form for f in self.forms if f.form != self.decided)
            return (f"only the {self.decided} form fits the {n} points within the rounding of p* "
                    f"(p* - 1 < fit <= p*): the data rule out the {other} form")
        if len(consistent) == len(self.forms):
            return (f"both forms fit the {n} points within the rounding of p* (p* - 1 < fit <= p*): "
                    f"these N cannot tell log2 N from (log2 N)^2")
        return (f"neither form fits the {n} points within the rounding of p* (p* - 1 < fit <= p*); the "
                + (f"{self.better} form has the smaller residual" if self.better else "residuals are equal"))

    def to_json(self) -> dict:
        return {"points": [list(p) for p in self.points], "forms": [asdict(f) for f in self.forms],
                "better": self.better, "decided": self.decided, "summary": self.summary}

    def to_markdown(self, int_bits: Optional[int] = None, what: str = "p*") -> list[str]:
        """Lines: each form with its residuals (and f* = p* - int_bits), then the summary."""
        lines = []
        for f in self.forms:
            res = ", ".join(f"{r:+.2f}" for r in f.residuals)
            also = f"; {f.equation('f*', int_bits)}" if int_bits is not None else ""
            lines.append(f"Fit: {f.equation(what)}{also} (residuals {res}; sum of squares {f.rss:.3f}; "
                         f"{'within' if f.consistent else 'not within'} the rounding of {what})")
        return lines + [f"Form: {self.summary if what == 'p*' else self.summary.replace('p*', what)}"]


def least_squares(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line; xs take at least two values."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def minimax(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The smallest max |y - (c x + b)| over lines (the Chebyshev fit): the best line equioscillates on
    three points (or fits two exactly), so the best of the lines those determine is it.  The xs are
    distinct (one point per N)."""
    pts = sorted(zip(xs, ys))
    if len(pts) < 3:
        return 0.0
    best = math.inf
    for (x1, y1), (x2, y2), (x3, y3) in itertools.combinations(pts, 3):
        c = (y3 - y1) / (x3 - x1)
        b = ((y1 - c * x1) + (y2 - c * x2)) / 2
        best = min(best, max(abs(y - c * x - b) for x, y in pts))
    return best


def fit(points: Sequence[tuple[int, int]]) -> Optional[Fit]:
    """Both forms fitted to (N, p*) points, one per N; None with fewer than two."""
    points = sorted(points)
    if len(points) < 2:
        return None
    if len({N for N, _ in points}) < len(points):
        raise ValueError("one point per N")
    ys = [p for _, p in points]
    forms = []
    for name, (_, g) in FORMS.items():
        xs = [g(N) for N, _ in points]
        c, b = least_squares(xs, ys)
        residuals = [y - (c * x + b) for x, y in zip(xs, ys)]
        worst = minimax(xs, [y - 0.5 for y in ys])
        forms.append(FormFit(name, c, b, residuals, sum(r * r for r in residuals), worst, worst <= 0.5 + TOLERANCE))
    log, square = forms
    better = None if math.isclose(log.rss, square.rss, abs_tol=1e-12) else min(forms, key=lambda f: f.rss).form
    consistent = [f.form for f in forms if f.consistent]
    return Fit([(N, p) for N, p in points], forms, better, consistent[0] if len(consistent) == 1 else None)
