"""The one-line progress display of a run: a bar over the inputs covered, the rate, an estimate of
the time left, and for the engines that decide case by case, the cases decided and the current one;
and the overall line of a command that makes many runs (`Overall`)."""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional

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


class Overall:
    """How far a command that makes many runs is (a sweep's points, a check's specs): "k of n" with
    the time left, estimated from the runs decided so far (a cached one costs nothing and is left
    out of the rate).  `start` states n once it is known; `add` counts a run decided.  With `every`
    (seconds), a thread also writes the line through `write` that often while runs are going:
    output redirected to a file never goes quiet for long (a check's first spec may take minutes)."""

    def __init__(self, noun: str, write: Callable[[str], None], every: Optional[float] = None):
        self.noun, self.write, self.every = noun, write, every
        self.total, self.done, self.fresh = 0, 0, 0
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self, total: int) -> "Overall":
        self.total, self.done, self.fresh, self.t0 = total, 0, 0, time.monotonic()
        if self.every and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._beat, name="verify-progress", daemon=True)
            self._thread.start()
        return self

    def add(self, cached: bool = False) -> None:
        self.done += 1
        self.fresh += not cached

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def brief(self) -> str:
        """``5 of 65, about 3 min 10 s left``."""
        elapsed = time.monotonic() - self.t0
        text = f"{self.done} of {self.total}"
        if 0 < self.fresh and self.done < self.total:
            text += f", about {duration(elapsed / self.fresh * (self.total - self.done))} left"
        return text

    def text(self) -> str:
        """``5 of 65 runs decided in 40 s, about 3 min 10 s left``."""
        head, _, left = self.brief().partition(", ")
        return f"{head} {self.noun} decided in {duration(time.monotonic() - self.t0)}" + (f", {left}" if left else "")

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            self.write(self.text())
