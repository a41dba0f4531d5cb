"""Stopping a run from outside: Ctrl-C (SIGINT) and SIGTERM both end it with the verdict unknown.

SIGINT raises KeyboardInterrupt (Python's default); z3 watches SIGINT itself during a solve and
stops it (the solver answers unknown, "interrupted from keyboard", which the SMT engine turns back
into KeyboardInterrupt).  `install` gives SIGTERM the same effect:

* its Python handler raises KeyboardInterrupt.  Python runs handlers between bytecodes of the main
  thread, so this alone would wait for a z3 solve (C code) to finish;
* so the C-level handler also writes the signal number to a wakeup pipe at once, and a watcher
  thread that reads it cancels any running solve with z3's thread-safe interrupt.  The solve
  returns, and the handler's KeyboardInterrupt follows.

This does not depend on SIGINT's disposition (a shell starts background jobs with SIGINT
ignored).  `cause()` names the signal for the verdict's reason.

A KeyboardInterrupt raised while Python runs a finalizer (z3 frees its terms in ``__del__``) is
printed and dropped, so a handler that finds itself in one raises nothing and comes back shortly;
and a solve that z3 answers "canceled" after a signal was asked for is that signal
(`requested`), not a solver timeout.
"""

from __future__ import annotations

import os
import signal
import threading

from .budget import RETRY, _in_finalizer, interrupt_z3

_state: dict = {"cause": None, "installed": False, "requested": False}


def cause() -> str:
    """What interrupted the run: "SIGTERM", or "Ctrl-C" (SIGINT)."""
    return _state["cause"] or "Ctrl-C"


def requested() -> bool:
    """Has an interruption been asked for (a solve cancelled since is that interruption)?"""
    return _state["requested"]


def _on_signal(signum, frame) -> None:
    _state["requested"] = True
    if signum == signal.SIGTERM:
        _state["cause"] = "SIGTERM"
    if _in_finalizer(frame):  # the exception would be dropped there: raise it once the finalizer is done
        main = threading.main_thread().ident
        retry = threading.Timer(RETRY, lambda: signal.pthread_kill(main, signum))
        retry.daemon = True
        retry.start()
        return
    raise KeyboardInterrupt


def install() -> None:
    """Make SIGTERM stop this process like Ctrl-C, z3 solves included (main thread; idempotent)."""
    if _state["installed"] or threading.current_thread() is not threading.main_thread():
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.signal(signal.SIGTERM, _on_signal)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where it is ignored
        signal.signal(signal.SIGINT, _on_signal)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)

    def watch() -> None:
        while True:
            if signal.SIGTERM in os.read(read_fd, 64):
                _state["requested"] = True
                interrupt_z3()

    threading.Thread(target=watch, name="sigterm-watcher", daemon=True).start()
    _state["installed"] = True


def worker_init() -> None:
    """In a worker process: the parent alone handles interruptions.  SIGINT is ignored (the parent
    gets the terminal's Ctrl-C and stops the pool); SIGTERM, which the pool sends to stop a worker,
    ends it at once and without a traceback."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
