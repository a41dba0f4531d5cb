"""Where independent runs go: this process, a Dask cluster of this machine's cores, or an existing
Dask cluster.  A sweep's (N, p) points, a check's specs and an enumeration's chunks are independent,
so they run as Dask tasks, each on one core; the verdicts do not depend on where they ran.

Dask is an optional extra (``pip install -e '.[dask]'``).  The default scheduler is a local cluster
with one single-threaded worker process per core when Dask is installed, and this process when it
is not; the environment variable VERIFY_SCHEDULER sets another default.  With ``--scheduler
ADDRESS`` the workers of an existing cluster must have this same verifier installed.  The process
that submits the runs alone reads and writes the verdict cache.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import signal
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional

from ..engines import Problem
from ..result import Result
from ..support import usercode
from ..support.budget import Deadline
from ..support.errors import InputError, InternalError
from .api import run
from .cache import Cache, run_key

SERIAL, LOCAL = "serial", "local"
# a worker's own bookkeeping competes with its run for the GIL: no statistical profiler sampling the
# run's stack every 10 ms, and slower ticks and system monitoring (measured: runs 40% slower with them)
QUIET_WORKERS = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
                 "distributed.admin.system-monitor.interval": "5s"}
# without a dashboard, the scheduler's and workers' HTTP servers (always started, on loopback) serve
# nothing: no task counts, worker logs or profiles for any local user to read
NO_HTTP_ROUTES: dict[str, list] = {"distributed.scheduler.http.routes": [], "distributed.worker.http.routes": []}
LOOPBACK = "127.0.0.1"
ADDRESS = re.compile(r"^(tcp|tls|inproc|ucx)://\S+$|^[\w.-]+:\d+$")


def dask_installed() -> bool:
    return importlib.util.find_spec("dask") is not None and importlib.util.find_spec("distributed") is not None


def resolve(scheduler: Optional[str]) -> str:
    """The scheduler to use: "serial", "local", or a scheduler address (checked, not yet contacted).
    None: the environment's VERIFY_SCHEDULER, else local when Dask is installed, else serial."""
    scheduler = scheduler or os.environ.get("VERIFY_SCHEDULER") or None
    if scheduler is None:
        return LOCAL if dask_installed() else SERIAL
    if scheduler != SERIAL:
        if scheduler != LOCAL and not ADDRESS.match(scheduler):
            raise InputError(f"--scheduler must be serial, local, or a Dask scheduler address like "
                             f"tcp://host:8786; got {scheduler!r}")
        if not dask_installed():
            raise InputError(f"--scheduler {scheduler} needs Dask: pip install 'verify[dask]' "
                             f"(or use --scheduler serial)")
    return scheduler


@dataclass
class Job:
    """One run to decide: `api.run(build(), engine, timeout=timeout)`.  The problem is built only
    when the run is about to go (a sweep's models are not all held, or all sent, at once)."""

    build: Callable[[], Problem]
    engine: str = "auto"
    timeout: Optional[float] = None
    solver: str = "z3"  # the SMT engine's (`--solver`); a verdict does not depend on it, so the cache key leaves it out


class Cluster:
    """A context manager: `resolve(scheduler)`, started when a first task is submitted (a sweep whose
    verdicts are all cached starts nothing) and shut down on exit (a local cluster is stopped; a
    connection to an existing one is closed, its workers left running)."""

    def __init__(self, scheduler: Optional[str] = None, workers: Optional[int] = None):
        self.scheduler = resolve(scheduler)
        self.workers = workers or min(2, os.cpu_count() or 1)
        self.client = None
        self._local = None
        self.started = False

    @property
    def serial(self) -> bool:
        return self.scheduler == SERIAL

    @property
    def slots(self) -> int:
        """How many runs go at once: the workers' threads (an existing cluster is asked)."""
        if self.serial:
            return 1
        return max(1, sum(self._client().nthreads().values()))

    def describe(self) -> str:
        if self.serial:
            return "serial (this process)"
        where = (f"Dask LocalCluster ({self.workers} single-threaded worker processes)" if self.scheduler == LOCAL
                 else f"Dask scheduler {self.scheduler}")
        if self._local is not None and dashboard_address():
            where += f", dashboard {self._local.dashboard_link}"
        return where if self.started else f"{where}, not started"

    def __enter__(self) -> "Cluster":
        return self

    def _client(self):
        if self.client is not None:
            return self.client
        self.started = True
        from distributed import Client
        if self.scheduler == LOCAL:
            self._local = _start_local(self.workers)
            self.client = Client(self._local)
        else:
            try:
                self.client = Client(self.scheduler, timeout=10)
            except OSError as exc:
                raise InputError(f"--scheduler {self.scheduler}: cannot connect ({exc})") from None
        return self.client

    def __exit__(self, *exc) -> None:
        if self.client is not None:
            self.client.close()
        if self._local is not None:
            self._local.close()
        self.client = self._local = None

    def map(self, fn: Callable, items: Iterable[tuple[int, tuple]]) -> Iterator[tuple[int, Any]]:
        """fn(*args) for each (index, args), yielded as (index, value) as they finish; a run that
        raised yields its exception as the value.  In this process they run in order; on a cluster
        at most two per worker thread are submitted at a time, and `items` is read as they go."""
        if self.serial:
            for i, args in items:
                try:
                    yield i, fn(*args)
                except (KeyboardInterrupt, MemoryError):
                    raise
                except Exception as exc:  # noqa: BLE001 - the caller decides what an error means
                    yield i, exc
            return
        from distributed import as_completed
        items = iter(items)
        first = next(items, None)
        if first is None:  # nothing to run: the cluster is not started
            return
        client = self._client()
        futures: dict = {}
        running = as_completed()

        def submit(item: Optional[tuple[int, tuple]]) -> None:
            if item is not None:
                with warnings.catch_warnings():  # a large model is one run's data, sent once: not a slowdown
                    warnings.filterwarnings("ignore", message="Sending large graph")
                    future = client.submit(fn, *item[1], pure=False)
                futures[future] = item[0]
                running.add(future)

        submit(first)
        for _ in range(2 * self.slots - 1):
            submit(next(items, None))
        try:
            for future in running:
                value = future.exception() if future.status == "error" else future.result()
                yield futures.pop(future), value
                submit(next(items, None))
        finally:  # an interruption, or the caller stopped early: nothing is left running for it
            client.cancel(list(futures))

    def decide(self, jobs: list[Job], cache: Optional[Cache] = None) -> Iterator[tuple[int, Result | Exception]]:
        """Each job's result as it is reached: from the cache when it is there, else decided (on a
        cluster, each run on one core) and stored.  An exception that building or deciding a run
        raised is yielded, not raised."""
        workers = None if self.serial else 1  # a worker process must not fork a pool of its own
        keys: dict[int, dict] = {}
        ready: list[tuple[int, Result | Exception]] = []  # cache hits and build errors, met on the way

        def runs() -> Iterator[tuple[int, tuple]]:
            for i, job in enumerate(jobs):
                try:
                    with usercode.time_limit(Deadline(job.timeout)):  # the user's code in it (a reference)
                        problem = job.build()
                except (InputError, InternalError) as exc:
                    ready.append((i, exc))
                    continue
                if cache is not None:
                    keys[i] = run_key(problem, job.engine)
                    hit = cache.get(keys[i], problem)
                    if hit is not None:
                        ready.append((i, hit))
                        continue
                yield i, (problem, job.engine, job.timeout, workers, job.solver)

        for i, value in self.map(_decide, runs()):
            yield from _drain(ready)
            if isinstance(value, Result) and cache is not None and i in keys:  # keys: only with a cache
                cache.put(keys[i], value)  # a verdict only: an unknown is decided again next time
            yield i, value
        yield from _drain(ready)

    def submit(self, fn: Callable, *args) -> "Handle":
        return Handle(self._client().submit(fn, *args, pure=False))

    def scatter(self, obj: Any) -> Any:
        """Send `obj` to the workers once; tasks then name it instead of carrying it."""
        return self._client().scatter(obj, broadcast=True)


def dashboard_address() -> Optional[str]:
    """Where a local cluster's dashboard listens: None (no dashboard, the default), or the
    environment's VERIFY_DASHBOARD, a port (on loopback) or HOST:PORT."""
    value = os.environ.get("VERIFY_DASHBOARD", "").strip()
    if not value:
        return None
    host, _, port = value.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise InputError(f"VERIFY_DASHBOARD must be a port (8787) or HOST:PORT (127.0.0.1:8787); got {value!r}")
    return f"{host or LOOPBACK}:{port}"


def _start_local(workers: int):
    """A LocalCluster of `workers` single-threaded worker processes, on loopback only, with no
    dashboard unless VERIFY_DASHBOARD asks for one.

    It is started in a thread that blocks SIGINT: the threads it starts, and the worker processes
    they start, keep SIGINT blocked, so a terminal's Ctrl-C (sent to the whole process group) reaches
    this process alone, which cancels their runs.  This thread keeps Ctrl-C and SIGTERM: one that
    comes while the cluster starts waits for the start (it cannot be stopped half-way), closes the
    cluster, and interrupts the caller (KeyboardInterrupt)."""
    from multiprocessing import resource_tracker

    import dask
    from distributed import LocalCluster
    dashboard = dashboard_address()
    box: dict = {}

    def start() -> None:
        resource_tracker.ensure_running()  # launching it later would unblock SIGINT in the thread that does
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            with dask.config.set({**QUIET_WORKERS, **({} if dashboard else NO_HTTP_ROUTES)}):
                box["cluster"] = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host=LOOPBACK,
                                              dashboard_address=dashboard, worker_dashboard_address=None,
                                              silence_logs=logging.CRITICAL,  # the scheduler's HTTP server: any port
                                              scheduler_kwargs={"dashboard_address": dashboard or f"{LOOPBACK}:0"})
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=start, name="verify-cluster-start", daemon=True)
    thread.start()
    interrupted = None
    while thread.is_alive():
        try:
            thread.join()
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: stop once the start is over
            interrupted = exc
    if interrupted is not None:
        if "cluster" in box:
            box["cluster"].close()
        raise interrupted
    error = box.get("error")
    if isinstance(error, (RuntimeError, OSError)):
        raise InputError(f"cannot start a Dask LocalCluster ({error}); use --scheduler serial") from None
    if error is not None:
        raise error
    return box["cluster"]


def _drain(ready: list) -> Iterator:
    while ready:
        yield ready.pop(0)


def _decide(problem: Problem, engine: str, timeout: Optional[float], workers: Optional[int], solver: str) -> Result:
    # positional: Client.submit takes keywords such as `workers` for itself
    return run(problem, engine, timeout=timeout, workers=workers, solver=solver)


class Handle:
    """A submitted task with the interface of multiprocessing's AsyncResult (`get`)."""

    def __init__(self, future):
        self.future = future

    def get(self, timeout: Optional[float] = None):
        from distributed import TimeoutError as DaskTimeout
        try:
            return self.future.result(timeout=timeout)
        except DaskTimeout:
            raise TimeoutError from None
