"""The one-line progress display of a run: a bar over the inputs covered, the rate, an estimate of
the time left, and for the engines that decide case by case, the cases decided and the current one."""

from __future__ import annotations

from ..engines.base import Tick


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 07 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def line(tick: Tick, elapsed: float, width: int = 30) -> str:
    """The display after `elapsed` seconds.  The estimate assumes the rate so far holds; it is
    shown for enumeration only (a case's cost varies too much across cases to extrapolate)."""
    frac = tick.covered / tick.total if tick.total else 1.0
    bar = "#" * int(width * frac)
    text = f"[{bar:<{width}}] {tick.covered:,}/{tick.total:,} inputs"
    if tick.cases_done is None:
        rate = tick.covered / elapsed if elapsed > 0 else 0.0
        text += f", {rate:,.0f}/s"
        if 0 < tick.covered < tick.total and rate > 0:
            text += f", about {duration((tick.total - tick.covered) / rate)} left"
        return text
    text += f"; case {tick.cases_done:,}" + (f"/{tick.cases_total:,}" if tick.cases_total is not None else "")
    return text + (f" ({tick.case})" if tick.case else "")
