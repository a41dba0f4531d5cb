"""Sweeps, checks and enumeration on a Dask LocalCluster; the verdict cache; resuming after Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cli
import verifier
from verifier.runs import cache as cache_mod
from verifier.runs.cache import Cache, run_key
from verifier.runs.cluster import Cluster, dask_installed, resolve
from verifier.runs.specs import check, load_specs
from verifier.runs.sweep import frontier
from verifier.support.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
needs_dask = pytest.mark.skipif(not dask_installed(), reason="Dask is not installed (pip install -e '.[dask]')")


def table(fr) -> list:
    """What a frontier says, without its timings and where it ran."""
    return [(r.N, r.p_star, r.verdicts, r.ruled_out_by, r.ruled_out_reason, r.complete) for r in fr.rows]


@pytest.fixture(scope="module")
def local():
    if not dask_installed():
        pytest.skip("Dask is not installed")
    with Cluster("local") as cluster:
        yield cluster


# -- the verdict cache --------------------------------------------------------------------------------
def test_cache_returns_the_same_verdicts_and_only_verdicts(tmp_path):
    cache = Cache(tmp_path / "c.sqlite")
    grid = dict(Ns=[2, 5], ps=[4, 5, 6, 7])
    first = frontier("idxl", **grid, scheduler="serial", cache=cache)
    assert cache.hits == 0 and cache.stored == 8
    again = frontier("idxl", **grid, scheduler="serial", cache=Cache(tmp_path / "c.sqlite"))
    assert table(again) == table(first) and all(r.cached == 4 for r in again.rows)
    problem = verifier.build_problem("idxl", N=16, p=12, sigma=3)
    unknown = verifier.run(problem, "exhaustive", timeout=0.2)
    assert unknown.verdict == "unknown"
    cache.put(run_key(problem, "exhaustive"), unknown)
    assert cache.get(run_key(problem, "exhaustive"), problem) is None


def test_a_cached_counterexample_reads_back_as_it_was_found(tmp_path):
    cache = Cache(tmp_path / "c.sqlite")
    problem = verifier.build_problem("idxl", N=6, p=12, eta=0.5)
    result = verifier.run(problem, max_counterexamples=2)
    cache.put(run_key(problem, "auto", max_counterexamples=2), result)
    back = cache.get(run_key(problem, "auto", max_counterexamples=2), problem)
    assert back.cached and back.verdict == "refuted" and back.to_json() | {"cached": False} == result.to_json()
    assert "read from the verdict cache" in back.summary()


def test_the_key_changes_with_weights_task_arithmetic_engine_range_and_code(tmp_path, monkeypatch):
    base = verifier.build_problem("idxl", N=6, p=12)
    key = run_key(base, "auto")
    others = [run_key(verifier.build_problem("idxl", N=6, p=12, eta=0.5), "auto"),
              run_key(verifier.build_problem("idxl", N=7, p=12), "auto"),
              run_key(verifier.build_problem("idxl", N=6, p=12, sigma=3), "auto"),
              run_key(verifier.build_problem("idxl", N=6, p=12, rounding="nearest"), "auto"),
              run_key(base, "smt"), run_key(base, "auto", start=1), run_key(base, "auto", max_counterexamples=2)]
    assert all(k != key for k in others)
    assert run_key(verifier.build_problem("idxl", N=6, p=12), "auto") == key
    cache_mod.code_fingerprint.cache_clear()
    monkeypatch.setattr(cache_mod, "code_fingerprint", lambda: "other code")
    assert run_key(base, "auto") != key


def test_an_unusable_cache_is_an_input_error(tmp_path, capsys):
    bad = tmp_path / "c.sqlite"
    bad.write_text("not a database at all" * 100)
    assert cli.main(["sweep", "idxl", "--N", "2", "--p", "4", "--cache", str(bad)]) == 2
    assert "cannot be used as a verdict cache" in capsys.readouterr().err
    assert cli.main(["sweep", "idxl", "--N", "2", "--p", "4", "--cache", str(bad), "--no-cache"]) == 2


# -- schedulers -----------------------------------------------------------------------------------
def test_scheduler_names_are_checked(monkeypatch, capsys):
    assert resolve("serial") == "serial" and resolve(None) == "serial"  # the tests' VERIFY_SCHEDULER
    with pytest.raises(InputError, match="--scheduler must be"):
        resolve("my laptop")
    monkeypatch.setattr("verifier.runs.cluster.dask_installed", lambda: False)
    with pytest.raises(InputError, match="needs Dask"):
        resolve("local")
    monkeypatch.delenv("VERIFY_SCHEDULER")
    assert resolve(None) == "serial"
    assert cli.main(["check", str(ROOT / "specs"), "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "needs Dask" in capsys.readouterr().err


@pytest.mark.slow
@needs_dask
def test_an_unreachable_scheduler_is_one_line_exit_2(capsys):
    assert cli.main(["sweep", "idxl", "--N", "2", "--p", "4", "--no-cache", "--scheduler", "tcp://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "cannot connect" in err and "Traceback" not in err


@pytest.mark.slow
@needs_dask
def test_a_sweep_on_a_local_cluster_gives_the_serial_table(local):
    grid = dict(Ns=[2, 4, 6, 8], ps=[4, 5, 6, 7, 8])
    serial = frontier("idxl", **grid, scheduler="serial")
    fr = frontier("idxl", **grid, scheduler=local.scheduler)
    assert table(fr) == table(serial) and "LocalCluster" in fr.ran_on
    assert any(r.ruled_out_by for r in fr.rows)  # the counterexamples at p* - 1 are the same ones
    smt = dict(Ns=[32, 64], ps=[9, 10, 11, 12], engine="smt")  # z3's models, whatever ran before them
    fr = frontier("equality", **smt, scheduler="local")
    assert table(fr) == table(frontier("equality", **smt, scheduler="serial")) and fr.rows[1].ruled_out_by


@pytest.mark.slow
def test_an_smt_counterexample_does_not_depend_on_the_runs_before_it():
    first = verifier.prove("equality", N=64, p=11, engine="smt").counterexamples[0].input
    verifier.prove("equality", N=64, p=12, engine="smt")
    verifier.prove("equality", N=64, p=10, engine="smt")
    assert verifier.prove("equality", N=64, p=11, engine="smt").counterexamples[0].input == first


@pytest.mark.slow
@needs_dask
def test_a_check_on_a_local_cluster_gives_the_serial_outcomes_in_spec_order(tmp_path):
    specs = load_specs([ROOT / "specs" / name for name in (
        "idxl-N12-eta-small-refuted.toml", "equality-N16-p8-proved.toml", "dyck22-N8-f3-refuted.toml",
        "icqa-k3-p3-proved.toml")])
    seen = []
    done = check(specs, scheduler="local", progress=seen.append)
    serial = check(specs, scheduler="serial")
    assert [o.spec.name for o in seen] == [s.name for s in specs]
    assert [(o.verdict, o.ok) for o in done.outcomes] == [(o.verdict, o.ok) for o in serial.outcomes]
    assert all(o.ok for o in done.outcomes) and "LocalCluster" in done.ran_on


@pytest.mark.slow
@needs_dask
@pytest.mark.parametrize("kw", [dict(p=12), dict(p=12, eta=2.0, start=131_000, max_counterexamples=3)])
def test_enumeration_split_over_a_cluster_matches_this_process(local, kw):
    start = kw.pop("start", 0)
    n = kw.pop("max_counterexamples", 1)
    problem = verifier.build_problem("idxl", N=14, **kw)
    here = verifier.run(problem, "exhaustive", workers=1, start=start, max_counterexamples=n)
    there = verifier.run(problem, "exhaustive", start=start, max_counterexamples=n, cluster=local)
    assert "LocalCluster" in there.engine_stats["cluster"] and there.engine_stats["chunks"] >= 3
    assert (there.verdict, there.covered, there.min_margin, there.tightest) == \
        (here.verdict, here.covered, here.min_margin, here.tightest)
    assert [c.index for c in there.counterexamples] == [c.index for c in here.counterexamples]


# -- resuming after Ctrl-C --------------------------------------------------------------------------------
def _sweep(*args):
    return [sys.executable, str(ROOT / "cli.py"), "sweep", "idxl", "--N", "9..10", "--sigma", "3", "--p", "8..11",
            "--engine", "exhaustive", *args]


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["serial", pytest.param("local", marks=needs_dask)])
def test_an_interrupted_sweep_resumes_from_its_cache(tmp_path, scheduler):
    env = {**os.environ, "VERIFY_SCHEDULER": scheduler}
    db = tmp_path / "c.sqlite"
    proc = subprocess.Popen(_sweep("--cache", db), env=env, cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal starts it
    decided = 0
    for line in proc.stderr:  # Ctrl-C once a few points are decided, as a terminal sends it: to the group
        decided += line.startswith("N=")
        if decided == 3:
            break
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3 and "PARTIAL: interrupted (Ctrl-C)" in out and "Traceback" not in err, err
    stored = Cache(db).db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    assert 3 <= stored < 8
    again = subprocess.run(_sweep("--cache", db), env=env, cwd=tmp_path, text=True, capture_output=True,
                           timeout=600)
    whole = subprocess.run(_sweep("--no-cache"), env=env, cwd=tmp_path, text=True, capture_output=True,
                           timeout=600)
    assert again.returncode == 0 == whole.returncode
    assert again.stderr.count("(cached)") == stored and again.stdout == whole.stdout
    assert f"{stored} of the runs read from the cache" in again.stderr


def _as_a_terminal_starts_it(args: list, tmp_path, env=None) -> subprocess.Popen:
    return subprocess.Popen(args, env=env, cwd=tmp_path, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _group(pid: int) -> list[str]:
    """The live processes of a process group, as `pgrep -a` shows them (zombies, which run nothing, left out)."""
    lines = subprocess.run(["pgrep", "-a", "-g", str(pid)], capture_output=True, text=True).stdout.splitlines()
    return [line for line in lines if Path(f"/proc/{line.split()[0]}/stat").exists()
            and Path(f"/proc/{line.split()[0]}/stat").read_text().split()[2] != "Z"]


@pytest.mark.slow
@needs_dask
@pytest.mark.parametrize("command,sig,to_group,delay", [
    ("sweep", signal.SIGINT, True, 0.0), ("sweep", signal.SIGINT, True, 1.5), ("sweep", signal.SIGTERM, False, 0.0),
    ("idxl", signal.SIGINT, True, 0.0)])
def test_an_interruption_while_the_local_cluster_starts_is_honoured(tmp_path, command, sig, to_group, delay):
    """Ctrl-C (to the whole group, as a terminal sends it) or SIGTERM (to verify alone) once the first
    worker process exists, and `delay` seconds later: the cluster is torn down and the verdict is
    unknown (exit 3) at once, not after the runs; no traceback."""
    args = _sweep("--no-cache", "--scheduler", "local") if command == "sweep" else \
        [sys.executable, str(ROOT / "cli.py"), "idxl", "--N", "14", "--p", "12", "--cluster", "local"]
    proc = _as_a_terminal_starts_it(args, tmp_path)
    while not any("spawn_main" in line for line in _group(proc.pid)):  # a worker is starting
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    time.sleep(delay)
    os.killpg(proc.pid, sig) if to_group else proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    cause = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    assert proc.returncode == 3 and "Traceback" not in err, (out, err)
    if command == "sweep":
        assert f"PARTIAL: interrupted ({cause}) with 0 of 8 runs decided" in out
    else:
        assert out.startswith("UNKNOWN: ") and f"interrupted ({cause})" in out
    time.sleep(1)
    assert _group(proc.pid) == []  # no worker left behind


def _listening(pids: set[int]) -> set[tuple[str, int]]:
    """(address, port) of every listening TCP socket the processes `pids` hold, from /proc/net/tcp[6]."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd) if fd.is_symlink() else ""
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            cells = line.split()
            if cells[3] == "0A" and cells[9] in inodes:  # LISTEN
                address, port = cells[1].split(":")
                raw = bytes.fromhex(address)
                ip = ".".join(str(b) for b in raw[::-1]) if width == 8 else \
                    ":".join(raw[i:i + 4][::-1].hex() for i in range(0, 16, 4))
                found.add((ip, int(port, 16)))
    return found


@pytest.mark.slow
@needs_dask
def test_a_local_cluster_listens_on_loopback_only_and_serves_no_dashboard(monkeypatch):
    import urllib.error
    import urllib.request
    monkeypatch.delenv("VERIFY_DASHBOARD", raising=False)
    with Cluster("local") as cluster:
        cluster._client()
        pids = {os.getpid()} | _children(os.getpid())
        listening = _listening(pids)
        assert len(listening) >= 2 + 2 * cluster.workers  # the scheduler, and each worker: comm and HTTP
        assert {ip for ip, _ in listening} == {"127.0.0.1"}, listening
        try:
            import psutil
        except ImportError:
            pass
        else:  # the same sockets, as psutil sees them
            assert {(c.laddr.ip, c.laddr.port) for pid in pids for c in psutil.Process(pid).net_connections("inet")
                    if c.status == psutil.CONN_LISTEN} == listening
        port = cluster._local.scheduler.http_server.port
        for page in ("status", "info/main/workers.html", "json/counts.json", "metrics"):
            with pytest.raises(urllib.error.HTTPError, match="404"):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/{page}", timeout=10)
        assert "dashboard" not in cluster.describe()
    monkeypatch.setenv("VERIFY_DASHBOARD", "0")  # asked for: on loopback, any free port
    with Cluster("local") as cluster:
        cluster._client()
        link = cluster._local.dashboard_link
        assert link.startswith("http://127.0.0.1:") and urllib.request.urlopen(link, timeout=10).status == 200
        assert f"dashboard {link}" in cluster.describe()
    monkeypatch.setenv("VERIFY_DASHBOARD", "everywhere")
    with pytest.raises(InputError, match="VERIFY_DASHBOARD must be a port"):
        Cluster("local")._client()


def _children(pid: int) -> set[int]:
    """Every descendant of process `pid`."""
    kids = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            kids |= {int(child)} | _children(int(child))
    return kids
