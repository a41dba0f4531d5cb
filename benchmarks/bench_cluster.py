"""Sweeps in this process against the same sweeps on a Dask LocalCluster, and the verdict cache.

Run by hand:  python benchmarks/bench_cluster.py

Two sweeps, each first in this process, then on a LocalCluster of 2 single-threaded workers (its
start-up included), then again from a cache holding every verdict.  Prints from one run the times,
the speed-ups and whether the tables are the same:
* equality by SMT: each run is single-threaded, so the cluster runs two at once;
* index lookup by enumeration: a run of more than 2^18 inputs already uses both cores in this
  process (the exhaustive engine's pool), so there the cluster can at best match it.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from verifier.runs.cache import Cache
from verifier.runs.sweep import frontier

SWEEPS = [("equality", dict(Ns=[32, 64], ps=list(range(8, 14)), engine="smt")),
          ("idxl", dict(Ns=[9, 10], ps=list(range(4, 12)), engine="exhaustive", sigma=3))]


def timed(task: str, grid: dict, **how) -> tuple[float, str]:
    t0 = time.perf_counter()
    fr = frontier(task, **grid, **how)
    return time.perf_counter() - t0, fr.to_markdown()


def main() -> None:
    for task, grid in SWEEPS:
        runs = len(grid["Ns"]) * len(grid["ps"])
        print(f"sweep {task} N={grid['Ns']} p={grid['ps'][0]}..{grid['ps'][-1]} engine {grid['engine']}: {runs} runs")
        serial, table = timed(task, grid, scheduler="serial")
        local, local_table = timed(task, grid, scheduler="local")
        with tempfile.TemporaryDirectory() as tmp:
            cache = Cache(Path(tmp) / "c.sqlite")
            timed(task, grid, scheduler="serial", cache=cache)
            cached, cached_table = timed(task, grid, scheduler="serial", cache=cache)
        print(f"  in this process                          {serial:7.1f} s")
        print(f"  Dask LocalCluster, 2 workers             {local:7.1f} s   speed-up {serial / local:.2f}x")
        print(f"  again, every verdict from the cache      {cached:7.2f} s")
        print(f"  tables identical: {table == local_table == cached_table}")


if __name__ == "__main__":
    main()
