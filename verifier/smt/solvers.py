"""SMT solvers for the SMT engine's cases: z3, bitwuzla, cvc5, and a portfolio of them.

A case's failure formula is built with z3 (`verifier.smt.encoding`) and written as SMT-LIB 2
(`smtlib`); bitwuzla and cvc5 (PyPI packages, the ``solvers`` extra) read that text, so every
solver decides the very same formula.  `solve` runs z3 in this process, and bitwuzla, cvc5 or a
portfolio (every installed solver) in forked processes: the first definite answer wins and the
others are stopped, and Ctrl-C stops them all.  auto (`--solver auto`; z3 is the default) picks z3
or bitwuzla by the case's formula (`pick`).
A solver returns "sat" with the token variables' values, "unsat", or why it did not decide; the
SMT engine decodes a model into an input and replays it on the evaluator as always, so a wrong
"sat" from any solver is an internal error, never a verdict.  A wrong "unsat" would be a wrong
proof: every proof is still sample-checked, and the differential tests run each solver on the
battery's formulas against enumeration.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import time
from typing import Optional

import z3

from ..support.budget import solving
from ..support.errors import InputError

SOLVERS = ("z3", "bitwuzla", "cvc5")
CHOICES = SOLVERS + ("portfolio", "auto")
# auto picks one solver per case from its formula (docs/smt-encoding.md "Solvers"): bitwuzla was
# 2-7x faster on equality and disjointness, z3 on formulas that divide (softmax's R(e / Z));
# one solver, not a portfolio: on two cores the portfolio's z3 slowed bitwuzla down 1.7x
DIVISIONS = ("bvsdiv", "bvsrem", "bvudiv", "bvurem")


def installed() -> list[str]:
    return [s for s in SOLVERS if s == "z3" or importlib.util.find_spec(s) is not None]


def check_choice(name: str) -> None:
    if name not in CHOICES:
        raise InputError(f"unknown solver {name!r}; known: {', '.join(CHOICES)}")
    if name not in ("portfolio", "auto") and name not in installed():
        raise InputError(f"solver {name} is not installed (pip install -e '.[solvers]')")


def resolve(name: str) -> str:
    """The choice as the engine sees it: auto is z3 alone when bitwuzla is not installed."""
    return "z3" if name == "auto" and "bitwuzla" not in installed() else name


def pick(text: str) -> str:
    """auto's solver for a case's SMT-LIB text: z3 if it divides or has floating point (bitwuzla
    as installed takes only the standard float sorts, docs/smt-encoding.md), else bitwuzla."""
    floats = "FP" in text.partition("\n")[0] or "FloatingPoint" in text  # the logic (QF_BVFP), or a sort
    if "bitwuzla" not in installed() or any(op in text for op in DIVISIONS) or floats:
        return "z3"
    return "bitwuzla"


def smtlib(assertions: list, logic: str) -> str:
    """The SMT-LIB 2 script that asks whether the assertions are satisfiable."""
    s = z3.SolverFor(logic) if logic == "QF_BV" else z3.Solver()
    s.add(*assertions)
    return f"(set-logic {logic})\n" + s.to_smt2()


def solve(name: str, text: str, names: list[str], timeout: Optional[float]) -> tuple[str, dict, str]:
    """(answer, values of the variables `names` when sat, the solver that answered).  answer is
    sat, unsat, timeout or a solver's reason for not deciding."""
    chosen = pick(text) if name == "auto" else name
    if chosen == "z3":  # in this process: z3 answers Ctrl-C itself
        answer, values = _run(chosen, text, names, timeout)
        return answer, values, f"z3 {z3.get_version_string()}"  # as the verdict names z3 when asked for it
    if chosen != "portfolio" and multiprocessing.current_process().daemon:  # a pool's worker may not fork;
        return _answer(chosen, text, names, timeout)  # its parent stops it
    return _portfolio(installed() if chosen == "portfolio" else [chosen], text, names, timeout)


def _run(name: str, text: str, names: list[str], timeout: Optional[float]) -> tuple[str, dict]:
    ms = None if timeout is None else max(1, int(timeout * 1000))
    if name == "z3":
        ctx = z3.Context()  # the text alone: its model does not depend on what this process built before
        s = z3.Solver(ctx=ctx)
        if ms is not None:
            s.set("timeout", ms)
        s.from_string(text)
        with solving(ctx):  # a deadline's alarm and SIGTERM cancel it
            r = s.check()
        if r == z3.unknown:
            why = s.reason_unknown()
            return ("timeout" if why in ("timeout", "canceled") else why or "unknown"), {}
        if r == z3.unsat:
            return "unsat", {}
        m = s.model()
        return "sat", {d.name(): m[d].as_long() for d in m.decls() if d.name() in names}
    if name == "bitwuzla":
        import bitwuzla
        tm, opts = bitwuzla.TermManager(), bitwuzla.Options()
        opts.set(bitwuzla.Option.PRODUCE_MODELS, True)
        if ms is not None:
            opts.set(bitwuzla.Option.TIME_LIMIT_PER, ms)
        parser = bitwuzla.Parser(tm, opts)
        parser.parse(text.replace("(check-sat)", ""), True, False)
        solver = parser.bitwuzla()
        r = solver.check_sat()
        if r == bitwuzla.Result.UNSAT:
            return "unsat", {}
        if r != bitwuzla.Result.SAT:
            return "timeout", {}
        return "sat", {t.symbol(): int(solver.get_value(t).value(10)) for t in parser.get_declared_funs()
                       if t.symbol() in names}
    import cvc5
    solver = cvc5.Solver()
    solver.setOption("produce-models", "true")
    if ms is not None:
        solver.setOption("tlimit-per", str(ms))
    symbols = cvc5.SymbolManager(solver.getTermManager())
    parser = cvc5.InputParser(solver, symbols)
    parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, text.replace("(check-sat)", ""), "case")
    while True:
        cmd = parser.nextCommand()
        if cmd.isNull():
            break
        cmd.invoke(solver, symbols)
    r = solver.checkSat()
    if r.isUnsat():
        return "unsat", {}
    if not r.isSat():
        return "timeout", {}
    return "sat", {str(t): int(solver.getValue(t).getBitVectorValue(10)) for t in symbols.getDeclaredTerms()
                   if str(t) in names}


def _answer(name: str, text: str, names: list[str], timeout: Optional[float]) -> tuple[str, dict, str]:
    """(answer, values, name): a solver's failure is its answer, never the run's end."""
    try:
        return (*_run(name, text, names, timeout), name)
    except Exception as exc:  # in a portfolio the others may still decide
        return f"error: {type(exc).__name__}: {exc}", {}, name


def _child(name: str, text: str, names: list[str], timeout: Optional[float], conn) -> None:
    answer, values, who = _answer(name, text, names, timeout)
    conn.send((who, answer, values))


def _portfolio(names_: list[str], text: str, names: list[str], timeout: Optional[float]) -> tuple[str, dict, str]:
    """Each solver in a forked process (bitwuzla and cvc5 do not stop for Ctrl-C; a child can be
    killed): the first sat or unsat wins, and every child is stopped when this returns or is
    interrupted."""
    ctx = multiprocessing.get_context("fork")
    procs, conns = [], []
    for s in names_:
        parent, child = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_child, args=(s, text, names, timeout, child), daemon=True)
        p.start()
        child.close()
        procs.append(p)
        conns.append(parent)
    last: tuple[str, dict, str] = ("timeout", {}, "portfolio")
    try:
        pending = list(conns)
        deadline = None if timeout is None else time.monotonic() + timeout + 1.0
        while pending:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = multiprocessing.connection.wait(pending, timeout=wait)
            if not ready:
                break
            for c in ready:
                pending.remove(c)
                try:
                    who, answer, values = c.recv()
                except EOFError:
                    continue
                if answer in ("sat", "unsat"):
                    return answer, values, who
                last = (answer, values, who)
        return last
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join()
