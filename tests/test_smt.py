"""The SMT engine against the exhaustive engine on the constructions: weakened ones refuted, the
built ones proved, timeouts, and the automatic choice.  Random models: tests/test_battery.py."""

import itertools

import pytest

import verifier
from verifier.engines import RunOptions, auto
from verifier.tasks import IndexLookup


def test_verdicts_through_the_api_agree():
    for kw in (dict(N=5, p=8), dict(N=6, p=10, eta=1.0), dict(N=4, p=4), dict(N=5, p=9, rounding="nearest",
                                                                            accumulate="wide")):
        a = verifier.prove("idxl", engine="exhaustive", **kw)
        b = verifier.prove("idxl", engine="smt", **kw)
        assert a.verdict == b.verdict, kw
        if b.verdict == "proved" and b.min_margin is not None:  # exact when every case was a table
            assert b.min_margin == a.min_margin, kw


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(p=5), dict(p=12, eta=1.0), dict(p=12, k=2)])
def test_weakened_sigma64_refuted_by_smt(kw):
    result = verifier.prove("idxl", N=8, sigma=64, engine="smt", **kw)
    assert result.verdict == "refuted" and result.counterexamples
    cex = result.counterexamples[0]
    assert cex.trace and cex.expected != cex.produced  # replayed in verifier.runs.api before it came back


@pytest.mark.slow
def test_sigma64_proved_by_smt():
    result = verifier.prove("idxl", N=10, p=12, sigma=64, engine="smt")
    assert result.verdict == "proved" and result.covered == result.total == IndexLookup(10, 64).total
    assert result.min_margin == 1.0 and result.tightest is not None


@pytest.mark.slow
def test_timeout_names_the_unfinished_case():
    result = verifier.prove("idxl", N=6, p=24, sigma=64, engine="smt", timeout=2)
    assert result.verdict == "unknown" and result.engine_stats["unfinished_case"]


def _groups(task):
    """(case, the cases of its length) in enumeration order, as the SMT engine reads them."""
    return [(case, group) for _, g in itertools.groupby(task.cases(), key=lambda c: c.length)
            for group in [list(g)] for case in group]


@pytest.mark.parametrize("p", [3, 16])  # refuted (failing members) and proved
def test_a_shared_forward_pass_gives_each_case_its_own_formula(p):
    """MQAR's cases of a length differ in the query token only: they share one forward pass, and
    each case's formula holds exactly where its own encoding's does, and nowhere outside its box."""
    import numpy as np

    from verifier.evaluator import make_evaluator
    from verifier.smt.encoding import Encoder, encode
    problem = verifier.build_problem("mqar", N=4, p=p)
    ev = make_evaluator(problem.model, problem.arith)
    encoder, rng, held = Encoder(ev), np.random.default_rng(p), 0
    for case, group in _groups(problem.task):
        shared, own = encoder(case, group), encode(ev, case)
        assert shared.shared and not own.shared and len(group) > 1
        for _ in range(25):
            tokens = [int(rng.choice(d)) for d in case.domains]
            assert shared.holds_at(tokens) == own.holds_at(tokens)
            held += own.holds_at(tokens)
        other = next(c for c in group if c is not case)
        outside = [int(rng.choice(d)) for d in other.domains]
        assert not shared.contains(outside) and not shared.holds_at(outside)
    assert (held > 0) == (p == 3)


def test_a_length_is_not_shared_where_a_fixed_token_removes_terms():
    """Composition's cases fix where the chain starts: its union's pass has more z3 terms (the
    partial evaluation the fixed token allowed is lost), so each case keeps its own encoding."""
    from verifier.evaluator import make_evaluator
    from verifier.smt.encoding import Encoder, forward, union_box
    problem = verifier.build_problem("composition", N=4, depth=2, n=2, p=19, f=3)
    ev = make_evaluator(problem.model, problem.arith)
    (case, group), *_ = _groups(problem.task)
    assert len(group) > 1 and not Encoder(ev)(case, group).shared
    assert forward(ev, union_box(group)).terms() > Encoder.SHARE_TERMS * forward(ev, case.domains).terms() > 0


def test_a_union_whose_exp_table_is_too_large_leaves_each_case_its_own(monkeypatch):
    """A float format's exp table can fit every case's logits and not the union's: the cases are
    then encoded one by one, never left undecided for it."""
    from verifier.evaluator import make_evaluator
    from verifier.smt import encoding
    from verifier.smt.floats import TableTooLarge
    problem = verifier.build_problem("mqar", N=4, p=16)
    ev = make_evaluator(problem.model, problem.arith)
    real = encoding.forward

    def forward(ev, domains, *a):
        if len(domains[-1]) > 1:  # MQAR's cases fix the query: this is a union
            raise TableTooLarge("the union's exp table")
        return real(ev, domains, *a)

    monkeypatch.setattr(encoding, "forward", forward)
    case, group = _groups(problem.task)[0]
    assert len(group) > 1 and not encoding.Encoder(ev)(case, group).shared


def test_a_solver_that_fails_in_a_worker_answers_so():
    """In a pool's worker (daemonic: it may not fork) bitwuzla runs in the worker itself; its
    failure is the case's answer, as in a forked child, not an exception that ends the worker."""
    pytest.importorskip("bitwuzla")
    import multiprocessing

    from verifier.smt import solvers
    with multiprocessing.get_context("fork").Pool(1) as pool:
        answer, _, who = pool.apply(solvers.solve, ("bitwuzla", "(assert (= x", ["x"], 5.0))
    assert answer.startswith("error:") and who == "bitwuzla"


@pytest.mark.parametrize("kw", [dict(p=3, max_counterexamples=3), dict(p=4)])  # refuted, proved
def test_cases_in_two_processes_give_what_one_process_gives(kw):
    """Each case is solved in a z3 context of its own: the counterexamples, their order and the
    coverage do not depend on how many processes decide the cases."""
    one = verifier.prove("mqar", N=4, engine="smt", workers=1, **kw)
    two = verifier.prove("mqar", N=4, engine="smt", workers=2, **kw)
    assert (one.engine_stats["workers"], two.engine_stats["workers"]) == (1, 2)
    assert two.engine_stats["shared_encodings"] == one.engine_stats["shared_encodings"] > 0
    assert (two.verdict, two.covered, [c.tokens for c in two.counterexamples]) == \
        (one.verdict, one.covered, [c.tokens for c in one.counterexamples])
    assert len(one.counterexamples) == (3 if one.verdict == "refuted" else 0)


def test_auto_picks_by_a_cost_model_and_says_why():
    small = verifier.prove("idxl", N=4, p=10)
    assert small.engine == "exhaustive (auto)" and "would take about" in small.engine_stats["auto"]
    big = verifier.prove("idxl", N=6, p=12, sigma=64)
    assert big.engine == "bounds (auto)" and "which position holds the answer" in big.engine_stats["auto"]
    assert "chosen by auto" in big.summary()
    # no answer position, no feature sum and 2^64 inputs: the SMT engine (equality's feature sum takes
    # it to the aggregate engine); a small space of a large model: enumeration
    engine, why = auto(verifier.build_problem("equality", N=64, p=12), RunOptions())
    assert engine.name == "aggregate" and "out of reach" in why
    engine, why = auto(verifier.build_problem("induction_heads", N=16, p=15, f=4, sigma=3), RunOptions())
    assert engine.name == "smt" and "would take" in why
    engine, _ = auto(verifier.build_problem("mqar", N=8, p=12), RunOptions())
    assert engine.name == "exhaustive"


@pytest.mark.slow
def test_solver_memory_is_a_peak_not_a_sum_over_solves():
    import resource
    r = verifier.prove("idxl", N=8, p=12, sigma=64, eta=1.0, engine="smt", workers=1)  # z3 in this process
    assert r.engine_stats["decided_by_solver"] > 1
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert 0 < r.engine_stats["max memory"] <= peak_mb  # z3's memory is part of this process's


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["bitwuzla", pytest.param("cvc5", marks=pytest.mark.slow), "portfolio", "auto"])
def test_other_solvers_decide_the_battery_formulas_as_enumeration_does(solver):
    """Each case's SMT-LIB text, decided by another solver (or the portfolio): sat exactly where
    enumeration finds a failing input of the case, and its model a failing input."""
    from battery import battery_problem

    from verifier.engines.exhaustive import Exhaustive
    from verifier.evaluator import make_evaluator
    from verifier.smt import solvers
    from verifier.smt.encoding import encode
    if solver != "portfolio":
        pytest.importorskip(solver)
    decided = 0
    for i in range(12):
        problem = battery_problem(i)
        if problem.task.cases is None or problem.task.total > 5000:
            continue
        enum = Exhaustive().run(problem, RunOptions(max_counterexamples=problem.task.total, workers=1))
        failing = {tuple(int(t) for t in f.tokens) for f in enum.found}
        ev = make_evaluator(problem.model, problem.arith)
        for case in problem.task.cases():
            enc = encode(ev, case, "bv")
            if enc.fail.expr is None:
                continue
            text = solvers.smtlib([*enc.sfx.domain_constraints(), enc.fail.expr], "QF_BV")
            names = [str(t) for t in enc.sfx.tokens if t is not None]
            answer, values, who = solvers.solve(solver, text, names, 2.0)
            if answer == "timeout":  # cvc5 is slow on wide bit-vector products: no answer, never a wrong one
                continue
            in_case = [t for t in failing if enc.contains(t)]
            assert answer == ("sat" if in_case else "unsat"), (i, case.name, who)
            if answer == "sat":
                tokens = tuple(int(d[0]) if t is None else values[str(t)] for t, d in zip(enc.sfx.tokens, case.domains))
                assert tokens in failing, (i, case.name, who)
            decided += 1
    assert decided >= 3


def test_auto_solver_is_z3_for_a_formula_that_divides_and_bitwuzla_otherwise():
    """A softmax over two tokens' logits divides by a symbolic Z (z3 was the faster there);
    equality's formula has no division (bitwuzla was 2-7x faster): `--solver auto` picks by it."""
    import numpy as np
    import z3

    from verifier.arithmetic import FixedPoint
    from verifier.smt import solvers
    from verifier.smt.encoding import softmax
    from verifier.smt.symbolic import SymFX
    pytest.importorskip("bitwuzla")
    S = SymFX(FixedPoint(12, 6), [np.arange(3), np.arange(3)], 32)
    a = softmax(S, [S.pair(0, 1, np.arange(9).reshape(3, 3) * 7), S.const(0)])[0]
    dividing = solvers.smtlib([*S.domain_constraints(), S.z(a) == S.num(1)], "QF_BV")
    assert solvers.pick(dividing) == "z3"
    r = verifier.prove("idxl", N=2, arith="fp16", engine="smt", solver="auto")  # a float format's stay with z3
    assert r.verdict == "proved" and list(r.engine_stats["answered_by"]) == [f"z3 {z3.get_version_string()}"]
    r = verifier.prove("equality", N=8, p=8, engine="smt", solver="auto")
    assert r.verdict == "proved" and r.engine_stats["answered_by"] == {"bitwuzla": 1}
    assert "answered_by" not in verifier.prove("equality", N=8, p=8, engine="smt").engine_stats  # z3 by default


@pytest.mark.slow
def test_smtlib_export_writes_every_solver_case_and_never_overwrites(tmp_path):
    out = tmp_path / "cases"
    r = verifier.prove("idxl", N=5, p=12, sigma=16, eta=1.0, engine="smt", smtlib=str(out))
    files = sorted(out.iterdir())
    assert r.engine_stats["decided_by_solver"] == len(files) > 0
    assert all(f.read_text().startswith("; n=") and "(check-sat)" in f.read_text() for f in files)
    with pytest.raises(verifier.InputError, match=rf"holds {files[0].name} from an earlier run; the export never "
                                                  "overwrites"):  # before the first case is solved again
        verifier.prove("idxl", N=5, p=12, sigma=16, eta=1.0, engine="smt", smtlib=str(out))


@pytest.mark.parametrize("rounding,overflow,accumulate", [("floor", "saturate", "product"),
                                                          ("nearest", "error", "wide"), ("zero", "error", "product")])
def test_table_paths_of_the_encoding_equal_the_evaluator_arithmetic_at_every_input(rounding, overflow, accumulate):
    """`_Maps.lin` / `add` (rows and coordinates grouped by token, computed on tables), `softmax` on
    tables, and `SymFX.lookups` / `pairs` (built in one pass): at every input of a box, every value
    they build is the evaluator's arithmetic on the concrete values, and so is every saturation
    they note."""
    import itertools

    import numpy as np
    import z3

    from verifier.arithmetic import FixedPoint
    from verifier.smt.encoding import _Maps, softmax
    from verifier.smt.symbolic import SymFX

    fx = FixedPoint(6, 3, rounding=rounding, overflow=overflow, accumulate=accumulate)
    rng = np.random.default_rng(1)
    doms = [np.array([0, 1, 2]), np.array([3, 5]), np.array([1, 4]), np.array([7])]
    S = SymFX(fx, doms, 40)
    maps = _Maps(S, None)

    def at(v, tokens):
        if v.expr is None:
            return v.value() if v.var is None else v.table[list(doms[v.var]).index(tokens[v.var])].item()
        subs = [(t, S.num(tokens[j], t)) for j, t in enumerate(S.tokens) if t is not None]
        e = z3.simplify(z3.substitute(v.expr, *subs))
        return z3.is_true(e) if z3.is_bool(e) else e.as_signed_long()

    def value(j, n):  # a lookup on token j (a constant if j is None)
        return S.const(rng.integers(-40, 40)) if j is None else S.lookup(j, rng.integers(-40, 40, size=n))

    term = S.sat(S.add(S.lookup(0, np.array([3, -9, 20])), S.lookup(1, np.array([30, -30]))))
    x = [value(j, len(doms[j]) if j is not None else 1) for j in (None, 0, 0, 1, 2, None, 3)] + [term]
    y = [value(j, len(doms[j]) if j is not None else 1) for j in (0, 1, None, 0, 2, 2, None, None)]
    W = rng.integers(-12, 12, size=(9, len(x))) * (rng.random((9, len(x))) < 0.4)
    W[0] = 0  # a row that reads nothing: its bias
    W[1] = 0
    W[1, [1, 2, 5]] = [5, -7, 9]  # token 0 and constants only
    W[2] = 0
    W[2, [0, 2, 3]] = [3, 11, -6]  # tokens 0 and 1: built product by product
    W[3, :7] = 0  # the term only
    W[3, 7] = 2
    b = rng.integers(-30, 30, size=9)
    lin, add = maps.lin(W, x, b), maps.add(x, y)
    logits = [S.lookup(0, np.array([4, -20, 31])), S.const(-5), S.lookup(0, np.array([0, 0, 9]))]
    att = softmax(S, logits)
    table = rng.integers(-9, 9, size=(3, 2 + 2 + 2))
    table[:, 2:4] = table[:1, 2:4]  # key 2 depends on its own token only
    table[:, 4:6] = table[:, 4:5]  # the third key: on the query token only
    pairs = S.pairs(0, [1, 2, 1], table, np.array([0, 2, 4, 6]))
    overflow_seen = S.any(S.overflows)
    for tokens in itertools.product(*doms):
        xv = np.array([at(v, tokens) for v in x])
        ctx = fx.context((1,))
        assert [at(v, tokens) for v in lin] == fx.lin(W, xv[None], b, ctx, "lin")[0].tolist()
        ovf = ctx.ovf[0]
        ctx = fx.context((1,))
        assert [at(v, tokens) for v in add] == fx.add(xv[None], np.array([[at(v, tokens) for v in y]]), ctx,
                                                      "add")[0].tolist()
        ovf |= ctx.ovf[0]
        ctx = fx.context((1,))
        assert [at(v, tokens) for v in att] == fx.softmax(np.array([[at(v, tokens) for v in logits]]), None, ctx,
                                                          "softmax")[0].tolist()
        ovf |= ctx.ovf[0]
        a = list(doms[0]).index(tokens[0])
        for v, j, lo in zip(pairs, [1, 2, 1], [0, 2, 4]):
            assert at(v, tokens) == table[a, lo + list(doms[j]).index(tokens[j])]
        if overflow == "error":  # the term's own saturation is noted too
            term_ovf = not fx.lo <= at(S.add(S.lookup(0, np.array([3, -9, 20])), S.lookup(1, np.array([30, -30]))),
                                       tokens) <= fx.hi
            assert at(overflow_seen, tokens) == (ovf or term_ovf)
