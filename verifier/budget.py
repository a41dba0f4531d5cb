"""What a run may spend: its time (a `Deadline` that covers the whole run) and this machine's memory.

A size that cannot fit is refused before work starts: tasks, constructions, model files and the
evaluator's tables estimate their memory from their sizes and call `require_memory` before they
allocate.  The estimates are deliberately coarse (within a small factor); they exist to refuse
the impossible (a 10^9-token vocabulary, a 200,000-wide model) with one clear line instead of
an out-of-memory kill half an hour later, not to predict the exact peak.
"""

from __future__ import annotations

import math
import os
import time
from typing import Optional

from .errors import InputError

WORKERS_PER_CORE = 4  # --workers above this many per core only adds contention


class TimedOut(Exception):
    """The run's deadline passed (raised inside long computations, caught by the engines)."""


class Deadline:
    """The time left to a run, counted from its creation (before the problem is built)."""

    def __init__(self, seconds: Optional[float] = None):
        if seconds is not None and not (isinstance(seconds, (int, float)) and math.isfinite(seconds)
                                        and seconds > 0):
            raise InputError(f"--timeout must be a positive number of seconds, got {seconds!r}")
        self.seconds = None if seconds is None else float(seconds)
        self.t0 = time.monotonic()

    def left(self) -> Optional[float]:
        """Seconds left (may be negative), or None without a timeout."""
        return None if self.seconds is None else self.seconds - (time.monotonic() - self.t0)

    def expired(self) -> bool:
        left = self.left()
        return left is not None and left <= 0

    def check(self) -> None:
        if self.expired():
            raise TimedOut()


def available_memory() -> int:
    """Bytes this process can still allocate: MemAvailable, else the physical memory."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2 ** 30:,.1f} GiB" if nbytes >= 2 ** 28 else f"{nbytes / 2 ** 20:,.0f} MiB"


def require_memory(nbytes: float, what: str) -> None:
    """Refuse `what` if its estimated memory does not fit in what this machine has available."""
    have = available_memory()
    if nbytes > 0.8 * have:
        raise InputError(f"{what} needs about {_gib(nbytes)} of memory; this machine has {_gib(have)} "
                         f"available: use a smaller size")


def require_weights(what: str, d: int, rows: int) -> None:
    """A model whose matrices have `rows` rows of width d in all: float64 weights, their int64
    codes, and room for one more copy while they are built."""
    require_memory(3 * 8 * float(d) * float(rows), what)


def max_workers() -> int:
    return WORKERS_PER_CORE * (os.cpu_count() or 1)


def check_workers(workers: Optional[int]) -> None:
    if workers is None:
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InputError(f"--workers must be an integer >= 1, got {workers!r}")
    if workers > max_workers():
        raise InputError(f"--workers {workers} is more than {max_workers()} ({WORKERS_PER_CORE} per core on this "
                         f"{os.cpu_count()}-core machine)")
