"""Finite-precision impossibility by bounded synthesis: does **any** 1-layer model of a given shape,
every weight a code of the format (p-bit for FX), get every member of a certificate right?

The impossibility theorems of Chen and Zou 2024 (arXiv:2404.01601, Theorems 2 and 4) are about
exact arithmetic.  In FX the identity sum_i lambda_i h_i = 0 can break (every product is rounded,
the head average is rounded, values saturate), so a finite-precision model might escape a
certificate.  z3 decides it for a family of models:

* embeddings as in the paper (Eq. 3): one-hot tokens and one-hot positions, H0 = [X; P];
* one layer of H ReLU heads with query, key and value width m: q = W_Q x, k = W_K x, v = W_V x,
  scores ReLU(<q_last, k_j>), output sum_j ReLU(...) v_j, heads averaged R(sum / H);
* the heads' average written into m fresh rows of the residual stream (W_O the injection: the value
  maps W_V have m rows, so every rank-m value map of the paper's form is covered up to this fixed
  W_O), a residual connection, and a linear readout W_U h + b_U;
* every weight (W_Q, W_K, W_V, W_U, b_U) is a code of the format; every operation is the
  fixed-point arithmetic of docs/arithmetic.md (product accumulation, the run's rounding, saturation; under
  overflow = error a member counts as right only if nothing it computes saturates).

UNSAT: no model of the family gets every member right -- the theorem holds at that precision and
shape, by machine proof.  SAT: a model that escapes the argument on the certificate; it is decoded,
evaluated on the members (which must all be right) and then verified on the whole dataset.

The deadline covers building the formula (polled member by member) and the solve (the solver's
timeout is the time left); past it the verdict is unknown.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Optional

import numpy as np
import z3

from ..arithmetic import Fixed, FixedPoint
from ..evaluator import make_evaluator
from ..model import Head, Layer, Model, Readout
from ..smt.encoding import Sym
from ..smt.symbolic import SymFX
from ..support.budget import Deadline, TimedOut
from ..support.errors import InputError, InternalError
from .certificates import Certificate


@dataclass
class Synthesis:
    verdict: str  # impossible (UNSAT) | escapes (SAT) | unknown
    shape: dict
    arithmetic: dict
    seconds: float
    members: int
    model: Optional[Model] = None  # the escaping model
    whole_dataset: Optional[str] = None  # its verdict on the whole dataset
    stats: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 when no model of the family gets the members right, 1 when one does, 3 undecided."""
        return {"impossible": 0, "escapes": 1, "unknown": 3}[self.verdict]

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "shape": self.shape, "arithmetic": self.arithmetic,
                "seconds": round(self.seconds, 3), "members": self.members, "whole_dataset": self.whole_dataset,
                "stats": self.stats}


def family_model(task, heads: int, width: int, weights: dict) -> Model:
    """A model of the family from real weights (names as in `synthesize`)."""
    V, n = len(task.vocab), task.max_len
    d = V + n + width
    E = np.zeros((V, d))
    E[:, :V] = np.eye(V)
    P = np.zeros((n, d))
    P[:, V:V + n] = np.eye(n)
    # exact weights stay exact
    hs = [Head(*(np.pad(weights[f"{key}{h}"], ((0, 0), (0, width)), constant_values=Fraction(0))
                 for key in ("Q", "K", "V"))) for h in range(heads)]
    W_O = np.zeros((d, width))
    W_O[V + n:, :] = np.eye(width)
    W_U = np.pad(weights["U"], ((0, 0), (0, 0)))
    layer = Layer(hs, W_O, attention="relu", residual=True, causal=False)
    return Model(E=E, P=P, P_mask=np.ones(V, bool), layers=[layer], readout=Readout(W_U, weights["b"], task.readout),
                 vocab=list(task.vocab), info={"construction": "synthesized", "heads": heads, "width": width})


@dataclass
class Family:
    """The bounded-synthesis formula of the family (see the module) on some inputs: its assertions
    and its weight variables (bit-vectors holding codes of the format)."""

    assertions: list
    variables: dict  # name -> z3 bit-vector
    d: int  # the input rows (V + n); the heads write into `width` more
    classes: int


def _bits(fx: Fixed, terms: int) -> int:
    """The bit-vectors' width.  In FX every operand of a product is a code in [lo, hi] (weights,
    saturated sums, ReLUs of them) and every sum adds at most `terms` codes, so no value exceeds
    max(lo^2, terms |lo|) in size: that and a sign bit, with one bit of slack for rounding.  (Far
    narrower than the engines' generic width, which bit-blasting pays for quadratically in every
    product.)  Another grid rescales products by its step's numerator: the generic width."""
    if not isinstance(fx, FixedPoint):
        return fx.smt_width(terms)
    return max(fx.lo * fx.lo, (terms + 1) * -fx.lo).bit_length() + 2


def family_formula(task, members, labels, heads: int, width: int, fx: Fixed, symmetry: bool = False,
                   deadline: Optional[Deadline] = None) -> Family:
    """Every member right, in the arithmetic of docs/arithmetic.md.  `symmetry`: order the
    interchangeable parts of a model, which changes no answer (every model has a reordering that
    meets the order, so SAT and UNSAT are those of the unordered formula): within a head, the
    query-key rows by W_Q's first column (a row of W_Q and the same row of W_K, permuted together,
    permute the terms of the exact sum q.k); then the heads by that first entry (their outputs are
    summed exactly before the one rounded mean); then the value rows by head 0's W_V first column,
    with the readout's columns of the heads' rows (every head's value row c feeds row c of the mean
    only).  Each later order permutes parts the earlier orders do not read."""
    V, n, C = len(task.vocab), task.max_len, task.num_classes
    d = V + n
    terms = max(width, n, d + width, heads) + 1  # the longest sum: the readout's, or the attention's
    S = SymFX(fx, [np.array([0])], width=_bits(fx, terms))
    variables = {}

    def code(name: str) -> Sym:
        var = z3.BitVec(name, S.width)
        variables[name] = var
        return Sym(expr=var)

    W = {f"{k}{h}": [[code(f"{k}{h}_{r}_{c}") for c in range(d)] for r in range(width)]
         for h in range(heads) for k in ("Q", "K", "V")}
    U = [[code(f"U_{y}_{r}") for r in range(d + width)] for y in range(C)]
    b = [code(f"b_{y}") for y in range(C)]

    def dot(xs: list[Sym], ys: list[Sym], bias: Optional[Sym] = None) -> Sym:
        """The linear rule (product accumulation): each product rounded and saturated, one saturation
        of the sum with the bias."""
        terms = [S.sat(S.rescale(S.mul(x, y))) for x, y in zip(xs, ys)]
        return S.sat(S.total(terms + ([bias] if bias is not None else [])))

    codes, saturated = fx.quantize(np.array([1.0]))  # R(1): the one-hot embeddings' entries
    one = S.const(int(codes[0]))

    def column(M, token: int, position: int) -> list[Sym]:
        """M x for the one-hot input of `token` at `position`: the two columns times R(1) (which is
        not 1 where 1 does not fit the format: f = p - 1), by the linear rule."""
        return [dot([row[token], row[V + position]], [one, one]) for row in M]

    out = [z3.And(var >= S.num(fx.lo), var <= S.num(fx.hi)) for var in variables.values()]
    if saturated[0] and fx.overflow == "error":  # every input uses a saturated embedding entry: it fails
        out.append(z3.BoolVal(False))
    for tokens, label in zip(members, labels):
        if deadline is not None:
            deadline.check()  # TimedOut: the caller's verdict is unknown
        last = len(tokens) - 1
        outs = []
        for h in range(heads):
            q = column(W[f"Q{h}"], tokens[last], last)
            keys = [column(W[f"K{h}"], t, j) for j, t in enumerate(tokens)]
            values = [column(W[f"V{h}"], t, j) for j, t in enumerate(tokens)]
            weights = [S.relu(dot(q, k)) for k in keys]
            outs.append([dot(weights, [v[c] for v in values]) for c in range(width)])
        mean = [S.sat(S.round_div(S.total([o[c] for o in outs]), S.const(heads))) for c in range(width)]
        # the one-hot input rows of the last position, then the heads' rows: W_O (entries R(1)) times the mean
        h_last = [one if r in (tokens[last], V + last) else S.const(0) for r in range(d)] + \
            [dot([one], [m]) for m in mean]
        scores = [dot(U[y], h_last, b[y]) for y in range(C)]
        if task.readout == "threshold":  # bit c of the label is 1 iff score c > 0
            out += [S.z(S.gt(scores[c], S.const(0))) if (int(label) >> c) & 1 else
                    z3.Not(S.z(S.gt(scores[c], S.const(0)))) for c in range(C)]
        else:
            out += [S.z(S.gt(scores[int(label)], scores[c])) for c in range(C) if c != label]
    if S.overflows:  # overflow = error: a member is right only if nothing it computes saturates
        out.append(z3.Not(S.z(S.any(S.overflows))))
    if symmetry:
        var = lambda name: variables[name]  # noqa: E731
        out += [var(f"Q{h}_{r}_0") <= var(f"Q{h}_{r + 1}_0") for h in range(heads) for r in range(width - 1)]
        out += [var(f"Q{h}_0_0") <= var(f"Q{h + 1}_0_0") for h in range(heads - 1)]
        out += [var(f"V0_{c}_0") <= var(f"V0_{c + 1}_0") for c in range(width - 1)]
    return Family(out, variables, d, C)


def family_weights(task, heads: int, width: int, fx: Fixed, family: Family, value) -> dict:
    """The weights of a satisfying assignment, `value(name)` the signed code of a variable."""
    kind = np.float64 if isinstance(fx, FixedPoint) else object  # another grid's values are exact rationals

    def real(name):
        v = fx.value(value(name))
        return float(v) if kind is np.float64 else v  # a binary grid's value is a float64 exactly

    d, C = family.d, family.classes
    weights = {f"{k}{h}": np.array([[real(f"{k}{h}_{r}_{c}") for c in range(d)] for r in range(width)], dtype=kind)
               for h in range(heads) for k in ("Q", "K", "V")}
    weights["U"] = np.array([[real(f"U_{y}_{r}") for r in range(d + width)] for y in range(C)], dtype=kind)
    weights["b"] = np.array([real(f"b_{y}") for y in range(C)], dtype=kind)
    return weights


def synthesize(task, cert: Certificate, heads: int, width: int, fx: Fixed,
               timeout: Optional[float] = None, deadline: Optional[Deadline] = None) -> Synthesis:
    """Is there a model of the family (see the module) that gets every member of `cert` right?
    `deadline` (or `timeout` seconds from now) bounds it all."""
    t0 = time.monotonic()
    deadline = deadline if deadline is not None else Deadline(timeout)
    shape = {"heads": heads, "width": width, "attention": "relu"}
    try:
        family = family_formula(task, cert.members, cert.labels, heads, width, fx, deadline=deadline)
    except TimedOut:
        return _timed_out(shape, fx, t0, len(cert.members))
    shape["parameters"] = len(family.variables)
    solver = z3.SolverFor("QF_BV")
    solver.add(*family.assertions)
    answer = _check(solver, deadline)
    if answer is None:
        return _timed_out(shape, fx, t0, len(cert.members))
    verdict = "impossible" if answer == z3.unsat else "escapes" if answer == z3.sat else "unknown"
    out = Synthesis(verdict, shape, fx.describe(),
                    time.monotonic() - t0, len(cert.members), stats={"reason": solver.reason_unknown()
                                                                     if answer == z3.unknown else ""})
    if answer == z3.sat:
        m = solver.model()
        weights = family_weights(task, heads, width, fx, family,
                                 lambda name: m.eval(family.variables[name], model_completion=True).as_signed_long())
        out.model = family_model(task, heads, width, weights)
        ev = make_evaluator(out.model, fx)
        members = np.array(cert.members)
        res = ev.forward(members)
        if ev.judge(res, np.array(cert.labels)).failed.any():
            raise InternalError("the synthesized model does not get the certificate's members right on the evaluator")
    return out


def decide_certificate(task, cert: Certificate, heads: int, width: int, fx: Fixed,
                       deadline: Optional[Deadline] = None) -> Synthesis:
    """`synthesize`, and an escaping model run on every input of the task (`whole_dataset`: its
    verdict, and the first input it gets wrong): a certificate only says the model gets its members
    right (`verify impossible` without --shape)."""
    from ..runs import api
    out = synthesize(task, cert, heads, width, fx, deadline=deadline)
    if out.model is not None:
        whole = api.run(api.build_problem(task.name, model=out.model, arith=fx, **task_options(task)),
                        deadline=deadline)
        c = whole.counterexamples[0] if whole.counterexamples else None
        out.whole_dataset = whole.verdict + (f": {c.input} -> {c.claim}" if c else "")
    return out


def certificate_lines(out: Synthesis, fx: Fixed) -> list[str]:
    """What `decide_certificate` found, with the arithmetic, the family and the escaping model's run."""
    heads, width = out.shape["heads"], out.shape["width"]
    binary = isinstance(fx, FixedPoint)
    weights = f"{fx.p}-bit weights" if isinstance(fx, FixedPoint) else "weights on the grid"
    family = f"1-layer ReLU model with {heads} head(s) of width {width} and {weights}"
    what = {"impossible": f"IMPOSSIBLE: no {family} gets all {out.members} right",
            "escapes": f"ESCAPES: a {family} gets all {out.members} right in {'FX' if binary else 'the grid'}",
            "unknown": f"UNKNOWN: z3 did not decide ({out.stats.get('reason') or 'no reason'})"}[out.verdict]
    lines = [f"{what}  [{fx.label()}; {out.shape.get('parameters', '?')} parameters; {out.seconds:.1f} s]"]
    if out.whole_dataset is not None:
        lines.append(f"  on the whole dataset it is {out.whole_dataset}")
    return lines


def _check(solver, deadline: Deadline):
    """The solver's answer within the time left (None: none is left); a solve cancelled at the
    deadline (`budget`) answers unknown, and the TimedOut that follows is the timeout it was."""
    left = deadline.left()
    if left is not None:
        if left <= 0:
            return None
        solver.set("timeout", max(1, int(left * 1000)))
    try:
        return solver.check()
    except TimedOut:
        return None


def _timed_out(shape: dict, fx: Fixed, t0: float, members: int) -> Synthesis:
    return Synthesis("unknown", shape, fx.describe(), time.monotonic() - t0, members, stats={"reason": "timeout"})


MAX_DATASET = 4096  # inputs of a synthesis over a whole dataset, or over a fooling set's inputs


def synthesize_inputs(task, members: list, labels: list, heads: int, width: int, fx: Fixed,
                      timeout: Optional[float] = None, solver: str = "z3", symmetry: bool = True) -> Synthesis:
    """Is there a model of the family (see the module) that answers every one of `members` (token
    lists, read at the last position) with its label?  The formula with the symmetry order
    (`family_formula`; `symmetry=False` without it), decided by `solver` (z3, bitwuzla, cvc5 or
    portfolio: `solvers.solve` on its SMT-LIB text).  SAT: the model, every member replayed on the
    evaluator (a wrong one is an internal error).  UNSAT: no model of the family gets them all
    right at this precision."""
    from ..smt import solvers
    solvers.check_choice(solver)
    if len(members) > MAX_DATASET:
        raise InputError(f"bounded synthesis takes at most {MAX_DATASET:,} inputs; {task.name} gives {len(members):,}")
    t0 = time.monotonic()
    deadline = Deadline(timeout)
    try:
        family = family_formula(task, members, labels, heads, width, fx, symmetry, deadline)
    except TimedOut:
        return _timed_out({"heads": heads, "width": width, "attention": "relu"}, fx, t0, len(members))
    bits = next(iter(family.variables.values())).size()
    left = deadline.left()
    if left is not None and left <= 0:
        return _timed_out({"heads": heads, "width": width, "attention": "relu"}, fx, t0, len(members))
    answer, values, who = solvers.solve(solver, solvers.smtlib(family.assertions, "QF_BV"), list(family.variables),
                                        left)
    verdict = {"unsat": "impossible", "sat": "escapes"}.get(answer, "unknown")
    out = Synthesis(verdict, {"heads": heads, "width": width, "attention": "relu",
                              "parameters": len(family.variables)}, fx.describe(), time.monotonic() - t0,
                    len(members), stats={"solver": who, "reason": "" if verdict != "unknown" else answer})
    if answer == "sat":
        signed = lambda name: (values.get(name, 0) + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))  # noqa: E731
        out.model = family_model(task, heads, width, family_weights(task, heads, width, fx, family, signed))
        ev = make_evaluator(out.model, fx)
        if ev.judge(ev.forward(np.array(members)), np.array(labels)).failed.any():
            raise InternalError(f"the synthesized model does not answer the {len(members)} inputs right on the "
                                f"evaluator")
    return out


def synthesize_dataset(task, heads: int, width: int, fx: Fixed, timeout: Optional[float] = None,
                       solver: str = "z3") -> Synthesis:
    """`synthesize_inputs` on **every** input of the task (one answer each, argmax): SAT gives a
    model that solves the whole dataset, then proved on every input by the engines (`api.run`)."""
    from ..runs import api
    if task.per_position or task.total > MAX_DATASET:
        raise InputError(f"bounded synthesis over the whole dataset takes at most {MAX_DATASET:,} inputs with one "
                         f"answer each; {task.name} has {task.total:,}")
    rows = [(b.tokens, b.expected) for b in task.batches(0, task.total, 4096)]
    members = [list(map(int, t)) for tokens, _ in rows for t in tokens]
    labels = [int(y) for _, expected in rows for y in expected]
    out = synthesize_inputs(task, members, labels, heads, width, fx, timeout, solver)
    if out.model is not None:
        r = api.run(api.build_problem(task.name, model=out.model, arith=fx, **task_options(task)), "exhaustive")
        if r.verdict != "proved":
            raise InternalError(f"the synthesized model does not answer every input of {task.name} right: "
                                f"{r.verdict} by {r.engine}")
        out.whole_dataset = f"proved on all {r.total:,} inputs by {r.engine}"
    return out


def task_options(task) -> dict:
    """The options that rebuild the task (N and the task's own)."""
    from ..tasks import task_options as options
    return {"N": task.N} | {o.name: getattr(task, o.name) for o in options(task.name)
                            if getattr(task, o.name, None) is not None}


def synthesize_recurrent(task, width: int, fx: FixedPoint, timeout: Optional[float] = None,
                         max_inputs: int = 256, deadline: Optional[Deadline] = None) -> Synthesis:
    """Is there a recurrent model with `width` hidden units, every weight (U, W, b, h0, W_U, b_U) a
    p-bit code, that answers every input of the task (the whole dataset, at most `max_inputs`) right
    in FX (docs/arithmetic.md, "Recurrent models": a = sat(R(W h) + b), h = ReLU(sat(a + U[x]))),
    read at the last position?  UNSAT: none does (the shape is impossible at this size); SAT: the
    model, decoded and checked on the evaluator."""
    from ..model import Recurrent
    t0 = time.monotonic()
    deadline = deadline if deadline is not None else Deadline(timeout)
    data = [(b.tokens, b.expected) for b in task.batches(0, task.total, 4096)]
    total = sum(len(t) for t, _ in data)
    if total > max_inputs or task.per_position:
        raise InputError(f"bounded synthesis over the whole dataset takes at most {max_inputs} inputs read at the "
                         f"last position; {task.name} has {total}"
                         + (" read at every position" if task.per_position else ""))
    V, C, m = len(task.vocab), task.num_classes, width
    S = SymFX(fx, [np.array([0])], width=2 * fx.p + int(np.ceil(np.log2(m + V + C + 4))) + 4)
    variables = {}

    def code(name: str) -> Sym:
        variables[name] = z3.BitVec(name, S.width)
        return Sym(expr=variables[name])

    U = [[code(f"U_{v}_{r}") for r in range(m)] for v in range(V)]
    W = [[code(f"W_{r}_{c}") for c in range(m)] for r in range(m)]
    b = [code(f"b_{r}") for r in range(m)]
    h0 = [code(f"h0_{r}") for r in range(m)]
    WU = [[code(f"WU_{y}_{r}") for r in range(m)] for y in range(C)]
    bU = [code(f"bU_{y}") for y in range(C)]

    def lin(rows, x, bias):
        return [S.sat(S.total([S.sat(S.round_shift(S.mul(w, xi), fx.f)) for w, xi in zip(row, x)] + [bb]))
                for row, bb in zip(rows, bias)]

    solver = z3.SolverFor("QF_BV")
    for var in variables.values():
        solver.add(var >= S.num(fx.lo), var <= S.num(fx.hi))
    shape = {"hidden": m, "parameters": len(variables)}
    cache: dict = {(): h0}  # states by prefix: inputs share their prefixes
    for tokens, expected in data:
        for row, label in zip(tokens, expected):
            if deadline.expired():
                return _timed_out(shape, fx, t0, total)
            for t in range(1, len(row) + 1):
                key = tuple(int(x) for x in row[:t])
                if key not in cache:
                    a = lin(W, cache[key[:-1]], b)
                    cache[key] = [S.relu(S.sat(S.add(ai, ui))) for ai, ui in zip(a, U[key[-1]])]
            y = lin(WU, cache[tuple(int(x) for x in row)], bU)
            if task.readout == "threshold":
                theta = S.const(int(np.floor(0 * fx.one)))
                for c in range(C):
                    solver.add(S.z(S.gt(y[c], theta)) if (int(label) >> c) & 1 else z3.Not(S.z(S.gt(y[c], theta))))
            else:
                for c in range(C):
                    if c != label:
                        solver.add(S.z(S.gt(y[int(label)], y[c])))
    if S.overflows:
        solver.add(z3.Not(S.z(S.any(S.overflows))))
    answer = _check(solver, deadline)
    if answer is None:
        return _timed_out(shape, fx, t0, total)
    verdict = "impossible" if answer == z3.unsat else "escapes" if answer == z3.sat else "unknown"
    out = Synthesis(verdict, shape, fx.describe(), time.monotonic() - t0, total,
                    stats={"reason": solver.reason_unknown() if answer == z3.unknown else ""})
    if answer == z3.sat:
        mdl = solver.model()

        def value(name):
            return mdl.eval(variables[name], model_completion=True).as_signed_long() / fx.one

        grid = lambda prefix, rows, cols: np.array([[value(f"{prefix}_{r}_{c}") for c in range(cols)]  # noqa: E731
                                                    for r in range(rows)])
        out.model = Recurrent(grid("U", V, m), grid("W", m, m), np.array([value(f"b_{r}") for r in range(m)]),
                              np.array([value(f"h0_{r}") for r in range(m)]),
                              Readout(grid("WU", C, m), np.array([value(f"bU_{y}") for y in range(C)]), task.readout),
                              list(task.vocab), info={"construction": f"synthesized (recurrent, {m} hidden)"})
    return out
