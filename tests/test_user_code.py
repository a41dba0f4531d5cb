"""The user's own code (a reference function, a Tracr program) cannot decide verify's exit code,
print a traceback, or outlast --timeout (issue 21, items 7 and 8).

The CLI runs as a child process here: code that calls os._exit would otherwise end the test run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import random_model

from verifier.modelfile import save_model
from verifier.support.budget import Deadline
from verifier.support.errors import InputError
from verifier.support.usercode import NotFinished, call, time_limit
from verifier.tasks import make_task

ROOT = Path(__file__).resolve().parent.parent
OUTER = 120  # seconds: a command still running then ignored --timeout (or hangs)

# module bodies that end, or try to end, the process that runs them; `fn` is the reference function
HOSTILE = {
    "sys.exit(0) when called": "import sys\ndef fn(t):\n    sys.exit(0)\n",
    "sys.exit(1) when called": "import sys\ndef fn(t):\n    sys.exit(1)\n",
    "sys.exit(0) at import": "import sys\nsys.exit(0)\ndef fn(t):\n    return t[-1]\n",
    "os._exit(0) when called": "import os\ndef fn(t):\n    os._exit(0)\n",
    "os._exit(0) at import": "import os\nos._exit(0)\n",
    "a BaseException": "class Boom(BaseException):\n    pass\ndef fn(t):\n    raise Boom('x')\n",
    "KeyboardInterrupt raised": "def fn(t):\n    raise KeyboardInterrupt\n",
    "SIGKILL of itself": "import os, signal\ndef fn(t):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
}


def cli(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=OUTER)


@pytest.fixture
def model_file(tmp_path):
    good = tmp_path / "good.py"
    good.write_text("def fn(t):\n    return t[-1]\n")
    task = make_task("reference", N=2, reference=f"{good}:fn", vocab="a,b")
    model = random_model(np.random.default_rng(0), list(task.vocab), task.max_len, C=task.num_classes,
                         readout="argmax", dims={"attention": "softmax"})
    model.layers = model.layers[:1]
    return save_model(model, tmp_path / "m.npz")


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("verify: error: ") and proc.stdout == "", proc.stderr
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("what", list(HOSTILE))
def test_a_reference_function_cannot_exit_for_verify(tmp_path, model_file, what):
    (tmp_path / "ref.py").write_text(HOSTILE[what])
    line = one_line_error(cli("run", "--model", model_file, "--task", "reference", "--reference", "ref.py:fn",
                              "--vocab", "a,b", "--N", 2, "--p", 8, cwd=tmp_path))
    assert "--reference ref.py:fn" in line


def test_a_function_given_in_python_cannot_exit_for_verify():
    def leaves(tokens):
        raise SystemExit(0)

    with pytest.raises(InputError, match=r"on a: it called sys.exit\(0\)"):
        make_task("reference", N=2, reference=leaves, vocab="a,b")


HANG = ("import os, pathlib\npathlib.Path('pid').write_text(str(os.getpid()))\n"
        "def fn(t):\n    while True:\n        pass\n")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"  # a zombie runs nothing


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_timeout_bounds_a_reference_function_that_never_returns(tmp_path, model_file, command):
    """Past --timeout the function's process is killed, and the verdict is unknown: nothing was checked."""
    (tmp_path / "ref.py").write_text(HANG)
    grid = ["--p", 8, "--timeout", 3] if command == "run" else ["--p", "4..5", "--no-cache", "--scheduler", "serial",
                                                                "--run-timeout", 3]
    proc = cli(command, "--model", model_file, "--task", "reference", "--reference", "ref.py:fn", "--vocab", "a,b",
               "--N", 2, *grid, cwd=tmp_path)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert proc.stderr.strip() == ("verify: unknown: --reference ref.py:fn did not finish within the 3 s timeout: the "
                                   "task could not be built, so no input was checked")
    assert gone(int((tmp_path / "pid").read_text()))


@pytest.mark.slow
def test_call_kills_the_child_at_the_deadline_and_passes_our_errors_through():
    with time_limit(Deadline(1)), pytest.raises(NotFinished, match="did not finish within the 1 s timeout"):
        call(time.sleep, (600,), "sleep")
    with pytest.raises(InputError, match="^--reference module nope.py does not exist$"):  # ours, from the child
        make_task("reference", N=2, reference="nope.py:f", vocab="a,b")
    assert call(sorted, ([3, 1, 2],), "sorted") == [1, 2, 3]


TRACR = {
    "sys.exit(0) at import": ("import sys\nsys.exit(0)\n", 2),
    "os._exit(0) in program()": ("import os\ndef program():\n    os._exit(0)\n", 2),
    "a BaseException in program()": ("class Boom(BaseException):\n    pass\ndef program():\n    raise Boom('x')\n", 2),
    "sys.exit(0) in a Map": (textwrap.dedent("""\
        import sys
        from tracr.rasp import rasp
        def f(x):
            if x == "b":
                sys.exit(0)
            return x
        program = rasp.categorical(rasp.Map(f, rasp.tokens))
        """), 2),
    "a hang in program()": ("def program():\n    while True:\n        pass\n", 3),
}


@pytest.mark.slow
@pytest.mark.parametrize("what", list(TRACR))
def test_a_tracr_program_cannot_exit_hang_or_print_a_traceback(tmp_path, what):
    pytest.importorskip("tracr")
    body, code = TRACR[what]
    (tmp_path / "prog.py").write_text(body)
    proc = cli("tracr", "prog.py", "--vocab", "a,b", "--max-len", 2, "--p", 8, "--timeout", 10, cwd=tmp_path)
    if code == 2:
        assert "prog.py" in one_line_error(proc)
    else:
        assert proc.returncode == 3 and proc.stderr.strip() == (
            "verify: unknown: the Tracr program prog.py did not finish within the 10 s timeout: the task could not be "
            "built, so no input was checked")
