"""Typed contracts (issue 24, item 5): the verdict's words defined once as StrEnums, keyword-only
results, optional task capabilities declared and read (never probed), and the lint baseline that
can only fall."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import fields
from pathlib import Path

import pytest

import verifier
from verifier.result import Result
from verifier.tasks import TASKS, make_task
from verifier.tasks.bos import WithBos
from verifier.tasks.user import ReferenceTask
from verifier.verdicts import Reason, Status, Verdict

ROOT = Path(__file__).resolve().parent.parent


def test_a_run_speaks_the_enums_and_its_json_the_same_strings():
    result = verifier.run(verifier.build_problem("idxl", N=6, p=4), "exhaustive")
    assert result.verdict is Verdict.REFUTED and result.status is Status.COMPLETE
    assert all(isinstance(c.reason, Reason) for c in result.counterexamples)
    doc = result.to_json()
    text = json.dumps(doc)
    assert json.loads(text)["verdict"] == "refuted" and '"status": "complete"' in text
    again = Result.from_json(json.loads(text))  # read back (the cache): the enums again, the same JSON
    assert again.verdict is Verdict.REFUTED and again.status is Status.COMPLETE
    assert again.counterexamples[0].reason is result.counterexamples[0].reason
    assert json.dumps(again.to_json()) == text
    assert result.exit_code == Verdict.REFUTED.exit_code == 1


def test_a_result_is_built_by_keyword_only():
    result = verifier.run(verifier.build_problem("idxl", N=3, p=8), "exhaustive")
    values = [getattr(result, f.name) for f in fields(Result)]
    with pytest.raises(TypeError):
        Result(*values)
    assert Result(**{f.name: v for f, v in zip(fields(Result), values)}) == result


def test_optional_capabilities_are_declared_on_every_task():
    for name, cls in TASKS.items():  # read as class attributes: the CLI builds its options from them
        assert isinstance(cls.OPTIONS, tuple) and isinstance(cls.SIZE_FLAGS, tuple), name
    memorization, idxl, dyck = make_task("memorization", 2, alphabet=2), make_task("idxl", 3), make_task("dyck22", 4)
    assert memorization.cases is None and idxl.cases is not None and idxl.dfa is None and dyck.dfa is not None
    assert idxl.answered is None
    user = ReferenceTask(2, lambda w: w[-1], ["a", "b"])
    assert user.answered is not None
    # a wrapper reports what its task has, and nothing it lacks
    assert WithBos(memorization, "<s>").cases is None and WithBos(idxl, "<s>").cases is not None
    assert WithBos(dyck, "<s>").dfa is None and WithBos(idxl, "<s>").dfa is None  # a DFA reads no BOS
    assert WithBos(idxl, "<s>").answered is None and WithBos(user, "<s>").answered() == user.answered()


def _lint_module():
    spec = importlib.util.spec_from_file_location("ci_lint", ROOT / ".ci" / "lint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("counts, code, says", [
    ({"mypy": 10, "ruff": 5}, 0, "mypy: 10 errors (baseline 10)"),
    ({"mypy": 11, "ruff": 5}, 1, "mypy: 11 errors, more than the baseline's 10"),
    ({"mypy": 10, "ruff": 4}, 1, "ruff: 4 errors, fewer than the baseline's 5: lower the baseline"),
])
def test_the_lint_baseline_can_only_fall(tmp_path, monkeypatch, capsys, counts, code, says):
    lint = _lint_module()
    baseline = tmp_path / "lint-baseline.json"
    baseline.write_text(json.dumps({"mypy": 10, "ruff": 5}))
    monkeypatch.setattr(lint, "BASELINE", baseline)
    monkeypatch.setattr(lint, "ROOT", tmp_path)
    monkeypatch.setattr(lint, "mypy", lambda: (counts["mypy"], "mypy's report\n"))
    monkeypatch.setattr(lint, "ruff", lambda: (counts["ruff"], "ruff's report\n"))
    assert lint.main([]) == code
    assert says in capsys.readouterr().out
    assert lint.main(["--update"]) == (1 if counts["mypy"] > 10 else 0)  # --update never raises the baseline
    assert json.loads(baseline.read_text()) == {"mypy": 10, "ruff": min(5, counts["ruff"])}
