"""What a run may spend: its time (a `Deadline` that covers the whole run) and this machine's memory.

A deadline is kept in two ways.  Long computations poll it (`Deadline.check`, `expired`) where a
step ends, so that a timed-out run reports what it covered; and a run that `enforces` it (the
command line does, from before the problem is built) gets `TimedOut` raised in its main thread
GRACE seconds past the deadline, wherever it is, when nothing polled in time: inside a
construction, a table, a user's function, a z3 solve (cancelled through z3's thread-safe
interrupt).  Like Ctrl-C, it waits for the numpy call under way (every large one is chunked).

A size that cannot fit is refused before work starts: tasks, constructions, model files and the
evaluator's tables estimate their memory from their sizes and call `require_memory` before they
allocate.  The estimates are deliberately coarse (within a small factor); they exist to refuse
the impossible (a 10^9-token vocabulary, a 200,000-wide model) with one clear line instead of
an out-of-memory kill half an hour later, not to predict the exact peak.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from typing import Iterator, Optional

import z3

from .errors import InputError

WORKERS_PER_CORE = 4  # --workers above this many per core only adds contention
GRACE = 0.5  # seconds past an enforced deadline before TimedOut is raised wherever the run is
RETRY = 0.05  # seconds before an alarm that came during a finalizer is raised again
WORKING_SHARE = 0.25  # of the available memory, what one engine's working set may hold


class TimedOut(BaseException):
    """The run's deadline passed: raised where a computation polls it (and caught by the engines,
    which report what they covered), or asynchronously past an enforced deadline.  Like
    KeyboardInterrupt, not an Exception: an ``except Exception`` around a user's code or a bug
    handler must not turn it into something else."""

    def __init__(self, seconds: Optional[float] = None):
        super().__init__(seconds)
        self.seconds = seconds  # the timeout that passed


class TooLarge(InputError):
    """A size that does not fit in this machine's memory: refused before it is allocated.  `auto`
    takes the next engine when one raises it."""


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
            raise TimedOut(self.seconds)

    def keeping(self, share: float, least: float, most: float) -> "Deadline":
        """A deadline of the same start that ends `share` of the time sooner (at least `least`
        seconds, at most `most`, and at most half the time): a first step's, so that what follows
        it keeps the rest.  Without a timeout, none."""
        sooner = Deadline()
        sooner.t0 = self.t0
        if self.seconds is not None:
            sooner.seconds = self.seconds - min(max(share * self.seconds, least), most, self.seconds / 2)
        return sooner

    @contextlib.contextmanager
    def enforced(self) -> Iterator["Deadline"]:
        """Within: GRACE seconds past the deadline, TimedOut is raised in the main thread wherever
        it is, and a z3 solve under way is cancelled.  Only in the main thread (a signal reaches no
        other); elsewhere, and without a timeout, the polls alone keep the deadline.  Nested
        windows each keep their own deadline."""
        if self.seconds is None or threading.current_thread() is not threading.main_thread():
            yield self
            return
        with _alarms.window(self):
            yield self


_solving: list = []  # z3 contexts a solve is under way in (the SMT engine solves each case in one of its own)


@contextlib.contextmanager
def solving(ctx: z3.Context) -> Iterator[z3.Context]:
    """Within: `interrupt_z3` reaches a solve in `ctx`, a context other than z3's default."""
    _solving.append(ctx)
    try:
        yield ctx
    finally:
        _solving.remove(ctx)


def interrupt_z3() -> None:
    """Cancel z3's work under way (thread-safe): in its default context and in every context a
    solve runs in."""
    z3.main_ctx().interrupt()
    for ctx in list(_solving):
        ctx.interrupt()


def fresh_z3_context() -> None:
    """Start z3's default context anew.  The model z3 returns depends on the context's history (the
    terms built before), so without this a run's counterexample would depend on the runs made
    before it in the same process, and a sweep would report other inputs on a cluster than in one
    process; and an interrupted context stays interrupted.  No z3 object outlives a run, so nothing
    refers to the old context."""
    z3.z3._main_ctx = None


class _Alarms:
    """The enforced deadlines of the main thread: one timer thread per window, which at the
    window's deadline plus GRACE cancels z3's solve and sends SIGALRM to the main thread, whose
    handler raises TimedOut (at the end of a `shielded` block, if one is under way).  The handler
    stays installed once it is (it passes an alarm that is not ours on to the handler it replaced):
    restoring the default disposition could let a late alarm end the process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.windows: list[dict] = []
        self.installed = False
        self.previous: object = None  # the SIGALRM handler before ours
        self.shield = 0

    @contextlib.contextmanager
    def window(self, deadline: Deadline) -> Iterator[None]:
        w = {"fired": False, "raised": False, "open": True, "seconds": deadline.seconds}
        with self.lock:
            if not self.installed:
                self.previous = signal.signal(signal.SIGALRM, self._on_alarm)
                self.installed = True
            self.windows.append(w)
        main = threading.main_thread().ident

        def fire() -> None:
            with self.lock:
                if not w["open"]:
                    return
                w["fired"] = True
                interrupt_z3()
                signal.pthread_kill(main, signal.SIGALRM)

        timer = threading.Timer(max(0.0, deadline.left()) + GRACE, fire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            self.shield += 1  # an alarm now belongs to a window whose work is done
            with self.lock:
                w["open"] = False
                self.windows.remove(w)
                if w["fired"] and not self.windows:  # z3's interrupt cancels its context for good
                    fresh_z3_context()
            timer.cancel()
            self.shield -= 1
            self._raise_due()  # an outer window's alarm that came meanwhile

    def _due(self) -> list[dict]:
        return [w for w in self.windows if w["fired"] and not w["raised"]]

    def _raise_due(self) -> None:
        due = self._due()
        if due and not self.shield:
            for w in due:
                w["raised"] = True
            raise TimedOut(min(w["seconds"] for w in due))

    def _on_alarm(self, signum, frame) -> None:
        if not self._due():
            if callable(self.previous):
                self.previous(signum, frame)
            return
        if _in_finalizer(frame):  # Python would print the exception and drop it: come back shortly
            main = threading.main_thread().ident
            retry = threading.Timer(RETRY, lambda: signal.pthread_kill(main, signal.SIGALRM))
            retry.daemon = True
            retry.start()
            return
        self._raise_due()

    @contextlib.contextmanager
    def shielded(self) -> Iterator[None]:
        self.shield += 1
        try:
            yield
        finally:
            self.shield -= 1
        self._raise_due()


def _in_finalizer(frame, depth: int = 32) -> bool:
    """Is the frame (or one of its callers) a finalizer or a cleanup (``__del__``, ``__exit__``)?"""
    while frame is not None and depth:
        if frame.f_code.co_name in ("__del__", "__exit__"):
            return True
        frame, depth = frame.f_back, depth - 1
    return False


_alarms = _Alarms()


def shielded():
    """A block an enforced deadline must not cut short (a pool's termination, a verdict being
    assembled): a TimedOut due inside it is raised at its end."""
    return _alarms.shielded()


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


def fmt_bytes(nbytes: float) -> str:
    """A size as a message says it: GiB from a quarter of one, then MiB, KiB, bytes (never "0 MiB")."""
    if nbytes >= 2 ** 28:
        return f"{nbytes / 2 ** 30:,.1f} GiB"
    if nbytes >= 2 ** 20:
        return f"{nbytes / 2 ** 20:,.0f} MiB"
    return f"{nbytes / 2 ** 10:,.0f} KiB" if nbytes >= 2 ** 10 else f"{nbytes:,.0f} bytes"


def require_memory(nbytes: float, what: str) -> None:
    """Refuse `what` (`TooLarge`) if its estimated memory does not fit in what this machine has available."""
    have = available_memory()
    if nbytes > 0.8 * have:
        raise TooLarge(f"{what} needs about {fmt_bytes(nbytes)} of memory; this machine has {fmt_bytes(have)} "
                       f"available: use a smaller size")


def working_memory(cap: float) -> float:
    """The bytes an engine's working set may hold: WORKING_SHARE of the available memory, at most
    `cap` (beyond it a larger batch buys no speed)."""
    return min(float(cap), WORKING_SHARE * available_memory())


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
