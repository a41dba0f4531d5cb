"""The user's own code (a reference function, a Tracr program) runs where nothing it does can end,
stall or answer for the verifier.

A user's Python may call ``sys.exit`` or ``os._exit``, raise a ``BaseException`` of its own, or
never return; run in this process, the first would end ``verify`` with the exit code of a verdict
and no verdict.  `call` runs it in a child process instead: its value comes back through a pipe,
and anything else (an exit, a signal, an exception) is one line and exit 2.  The child is killed at
the deadline of `time_limit` (the command's ``--timeout``): then `NotFinished`, which the CLI
reports as unknown, since no input was checked.

The child is a fresh interpreter (not a fork: it holds no lock of this process's threads, and JAX,
which Tracr runs, must not be in a process that forks), started without importing the caller's
main module (multiprocessing's spawn would run an unguarded script again), in a session of its
own (a terminal's Ctrl-C reaches this process, which kills it).  It ends itself when this process
goes, since the pipe it reads then closes.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from contextvars import ContextVar
from multiprocessing.connection import Connection
from typing import Any, Callable, Iterator, Optional

from .budget import Deadline, TimedOut
from .errors import InputError, InternalError

BOOT = "import sys; sys.path[:] = {path!r}; from verifier.support.usercode import _serve; _serve({job}, {result})"
_deadline: ContextVar[Optional[Deadline]] = ContextVar("user_code_deadline", default=None)


class NotFinished(TimedOut):
    """The user's code (`what`) did not finish before the deadline: nothing was checked (verdict unknown)."""

    def __init__(self, what: str, seconds: float):
        super().__init__(seconds)
        self.what = what

    def __str__(self) -> str:
        return (f"{self.what} did not finish within the {self.seconds:g} s timeout: the task could not be built, so "
                f"no input was checked")


@contextlib.contextmanager
def time_limit(deadline: Optional[Deadline]) -> Iterator[None]:
    """Within the block, `call` kills the user's code at `deadline` (None: no limit)."""
    token = _deadline.set(deadline)
    try:
        yield
    finally:
        _deadline.reset(token)


def call(fn: Callable, args: tuple, what: str) -> Any:
    """``fn(*args)`` in a child process (`fn` and `args` picklable, `fn` by its module's name): its
    value.  InputError when the user's code (`what`, e.g. "--reference m.py:f") raised, exited or
    was killed; `NotFinished` at the deadline of `time_limit`; the verifier's own InputError and
    InternalError raised in the child are raised here."""
    deadline = _deadline.get()
    job_r, job_w = os.pipe()
    result_r, result_w = os.pipe()
    try:
        child = subprocess.Popen([sys.executable, "-c", BOOT.format(path=sys.path, job=job_r, result=result_w)],
                                 pass_fds=(job_r, result_w), stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(job_r)
        os.close(result_w)
    job, result = Connection(job_w, readable=False), Connection(result_r, writable=False)
    try:
        job.send((fn, args))  # the pipe stays open while the child runs: its end is the child's signal to go
        left = deadline.left() if deadline is not None else None
        if not result.poll(None if left is None else max(0.0, left)):
            raise NotFinished(what, deadline.seconds)
        try:
            kind, value = result.recv()
        except EOFError:
            raise InputError(f"{what} ended the process {_how(child.wait())} before it returned: the user's code "
                             f"may not exit the process") from None
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        job.close()
        result.close()
    if kind == "value":
        return value
    if kind == "error":  # the verifier's own error, raised while handling the user's code
        raise value
    raise InputError(f"{what} {value}")


def did(exc: BaseException) -> str:
    """What the user's code did, for a one-line error: "called sys.exit(0)", "raised ValueError: ..."."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r}), which the user's code may not do"
    return f"raised {type(exc).__name__}: {exc}"


def _how(exitcode: Optional[int]) -> str:
    return f"on signal {-exitcode}" if exitcode is not None and exitcode < 0 else f"with exit code {exitcode}"


def _serve(job_fd: int, result_fd: int) -> None:
    """The child's side of `call`: read the job, run it, send back what happened, and end."""
    job, result = Connection(job_fd, writable=False), Connection(result_fd, readable=False)
    fn, args = job.recv()

    def orphaned() -> None:  # the caller closed the job pipe (it is gone, or done with this child)
        try:
            job.recv()
        except EOFError:
            os._exit(1)

    threading.Thread(target=orphaned, daemon=True).start()
    try:
        out = ("value", fn(*args))
    except (InputError, InternalError) as exc:
        out = ("error", exc)
    except BaseException as exc:  # noqa: BLE001 - whatever the user's code raised is reported, never re-raised here
        out = ("failed", did(exc))
    try:
        result.send(out)
    except Exception as exc:  # noqa: BLE001 - a value that does not pickle
        result.send(("failed", f"gave a value that cannot be sent back ({type(exc).__name__}: {exc})"))
    os._exit(0)  # nothing of the user's (atexit, threads) runs after the answer
