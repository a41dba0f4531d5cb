"""Dependent sequence sets: certificates that any 1-layer model gets one of a set of inputs wrong.

Chen and Zou 2024 (arXiv:2404.01601), Definitions 2-3 and Propositions 7-10.  Sequences X^(0..N-1)
of one length are **dependent** when they end with the same token and integers lambda, not all
zero, balance them position by position: for every position j and token v,
sum_i lambda_i 1[X^(i)_j = v] = 0 (so sum_i lambda_i = 0 too).  A 1-layer attention-only model with
ReLU attention, any number of heads, a residual connection or none, computes at the last position
a sum of terms that each depend on one (token, position) and the last token, with no
normalization; so sum_i lambda_i h^(i) = 0 in exact arithmetic, and a linear readout gives
sum_i lambda_i o^(i) = 0.  With softmax and one head, member i is scaled by its Z_i > 0
(Proposition 9), which the argument below survives; but only **without** a residual connection:
with one, the sum gains (sum_i lambda_i Z_i) x_{n-1}, which Proposition 9 omits and which does not
vanish.

A **label contradiction** shows that no vectors o_i with argmax o_i = y_i satisfy
sum_i lambda_i o_i = 0: multipliers mu_{i,c} >= 0 (c != y_i, not all zero) and w with

    sum_c mu_{i,c} (e_{y_i} - e_c) = -lambda_i w    for every member i

(Farkas: the margins give sum mu_{i,c} (o_i[y_i] - o_i[c]) > 0, but that sum is
-w . sum_i lambda_i o_i = 0).  Scaling mu_i by Z_i > 0 keeps it valid, so it covers one-head
softmax too.  The paper's argument (B.6.3 of the analysis it builds on) is the special case of two
classes a, b with every positive member labelled a and every negative one b: w = e_b - e_a,
mu_{i,b} = lambda_i, mu_{i,a} = -lambda_i ("u-argument").

A certificate is found by a **search** around a seed example of the dataset: a small neighbourhood
of dataset members (task by task: `NEIGHBOURHOODS`), then exact linear programming over the
rationals (z3): for each pair of classes, lambda >= 0 on one class and <= 0 on the other with the
count identity (a u-argument); failing that, each vector of an exact basis of the identity's
solutions, tested for a Farkas contradiction.  A dataset where the theorem does not apply (in-context
QA with k = 1, memorization) yields none.  `certificate_check` re-checks a certificate with separate
code.
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Iterator, Optional

import numpy as np
import z3

from ..support.errors import InputError
from ..support.files import new_file
from ..tasks.combinatorics import template_name

FORMAT = "verify-certificate"


@dataclass
class Certificate:
    """Members (token ids), their labels, lambda, and the Farkas multipliers of the contradiction."""

    task: dict  # {"name", "N", options...}: enough to rebuild the task
    members: list[list[int]]
    labels: list[int]
    lam: list[int]
    w: list[Fraction]
    mu: list[dict[int, Fraction]]  # per member: class -> multiplier
    argument: str  # "u-argument (classes a, b)" or "Farkas"
    rendered: list[str] = field(default_factory=list)  # the members by name
    label_names: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": 1, "task": self.task, "argument": self.argument,
                "members": [{"tokens": m, "input": r, "label": y, "label_name": n, "lambda": l,
                             "mu": {str(c): str(v) for c, v in mu.items()}}
                            for m, r, y, n, l, mu in zip(self.members, self.rendered, self.labels, self.label_names,
                                                         self.lam, self.mu)],
                "w": [str(x) for x in self.w]}

    @classmethod
    def from_json(cls, doc: dict) -> "Certificate":
        """The certificate of a file (check it first: `certificate_check.check_certificate`)."""
        members = doc["members"]
        return cls(doc["task"], [m["tokens"] for m in members], [m["label"] for m in members],
                   [m["lambda"] for m in members], [Fraction(x) for x in doc["w"]],
                   [{int(c): Fraction(v) for c, v in m["mu"].items()} for m in members], doc.get("argument", ""),
                   [m.get("input", "") for m in members], [m.get("label_name", str(m["label"])) for m in members])

    def lines(self) -> list[str]:
        """The certificate for a reader."""
        out = [f"dependent set of {len(self.members)} inputs (position by position, "
               f"sum of lambda_i over the inputs holding each token is 0), {self.argument}:"]
        for r, n, l in zip(self.rendered, self.label_names, self.lam):
            out.append(f"  lambda {l:+d}  {r}   (label {n})")
        return out


def count_identity_holds(members: np.ndarray, lam: np.ndarray) -> bool:
    """sum_i lambda_i 1[X^(i)_j = v] = 0 for every position j and token v."""
    for j in range(members.shape[1]):
        for v in np.unique(members[:, j]):
            if int(lam[members[:, j] == v].sum()) != 0:
                return False
    return True


def _count_matrix(members: np.ndarray) -> np.ndarray:
    """(positions x tokens used, members) 0/1 matrix: the identity is count @ lambda = 0."""
    rows = []
    for j in range(members.shape[1]):
        for v in np.unique(members[:, j]):
            rows.append((members[:, j] == v).astype(np.int64))
    return np.array(rows)


def _rational(value) -> Fraction:
    return Fraction(value.numerator_as_long(), value.denominator_as_long())


def _integers(values: list[Fraction]) -> list[int]:
    scale = 1
    for v in values:
        scale = scale * v.denominator // np.gcd(scale, v.denominator)
    ints = [int(v * scale) for v in values]
    g = 0
    for v in ints:
        g = int(np.gcd(g, abs(v)))
    return [v // g for v in ints] if g else ints


def u_argument(members: np.ndarray, labels: np.ndarray, timeout_ms: int = 10_000):
    """lambda with the count identity, >= 0 on one class and <= 0 on another, 0 elsewhere: the
    u-argument's certificate, for the first pair of classes that has one (None if none)."""
    count = _count_matrix(members)
    for a, b in itertools.permutations(np.unique(labels).tolist(), 2):
        idx = np.flatnonzero((labels == a) | (labels == b))
        lam = [z3.Real(f"l{i}") for i in idx]
        s = z3.Solver()
        s.set("timeout", timeout_ms)
        for var, i in zip(lam, idx):
            s.add(var >= 0 if labels[i] == a else var <= 0)
        s.add(z3.Sum([var for var, i in zip(lam, idx) if labels[i] == a]) == 1)
        for row in count[:, idx]:
            nz = np.flatnonzero(row)
            if len(nz):
                s.add(z3.Sum([lam[t] for t in nz]) == 0)
        if s.check() == z3.sat:
            model = s.model()
            full = [Fraction(0)] * len(labels)
            for var, i in zip(lam, idx):
                full[i] = _rational(model.eval(var, model_completion=True))
            return _integers(full), int(a), int(b)
    return None


def nullspace(A: np.ndarray) -> list[list[Fraction]]:
    """An exact basis of {x : A x = 0} (rational Gaussian elimination)."""
    rows = [[Fraction(int(v)) for v in row] for row in A]
    n = A.shape[1]
    pivots, r = [], 0
    for c in range(n):
        p = next((i for i in range(r, len(rows)) if rows[i][c] != 0), None)
        if p is None:
            continue
        rows[r], rows[p] = rows[p], rows[r]
        pv = rows[r][c]
        rows[r] = [v / pv for v in rows[r]]
        for i in range(len(rows)):
            if i != r and rows[i][c] != 0:
                f = rows[i][c]
                rows[i] = [a - f * b for a, b in zip(rows[i], rows[r])]
        pivots.append(c)
        r += 1
    basis = []
    for free in (c for c in range(n) if c not in pivots):
        x = [Fraction(0)] * n
        x[free] = Fraction(1)
        for i, c in enumerate(pivots):
            x[c] = -rows[i][free]
        basis.append(x)
    return basis


def farkas(labels: np.ndarray, lam: list[int], classes: int, timeout_ms: int = 10_000):
    """(w, mu) with sum_c mu_{i,c} (e_{y_i} - e_c) = -lambda_i w, mu >= 0, sum mu = 1, or None."""
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    w = [z3.Real(f"w{c}") for c in range(classes)]
    mu = [{c: z3.Real(f"m{i}_{c}") for c in range(classes) if c != y} for i, y in enumerate(labels)]
    for i, y in enumerate(labels):
        for c in range(classes):
            g = z3.Sum(list(mu[i].values())) if c == y else -mu[i][c]
            s.add(g == -lam[i] * w[c])
        for var in mu[i].values():
            s.add(var >= 0)
    s.add(z3.Sum([v for m in mu for v in m.values()]) == 1)
    if s.check() != z3.sat:
        return None
    model = s.model()
    wv = [_rational(model.eval(x, model_completion=True)) for x in w]
    muv = [{c: _rational(model.eval(v, model_completion=True)) for c, v in m.items()} for m in mu]
    return wv, [{c: v for c, v in m.items() if v != 0} for m in muv]


def contradiction(members: np.ndarray, labels: np.ndarray, classes: int):
    """(lambda, w, mu, argument) for a dependent subset of `members` with a label contradiction, or None."""
    found = u_argument(members, labels)
    if found is not None:
        lam, a, b = found
        w = [Fraction(0)] * classes
        w[a], w[b] = Fraction(-1), Fraction(1)
        mu = [({b: Fraction(l)} if l > 0 else {a: Fraction(-l)}) if l else {} for l in lam]
        return lam, w, mu, (a, b)
    for vector in nullspace(_count_matrix(members)):
        lam = _integers(vector)
        result = farkas(labels, lam, classes)
        if result is not None:
            return lam, result[0], result[1], None
    return None


# -- neighbourhoods: small sets of dataset members around a seed, task by task ------------------
def _icqa(task, seed: np.ndarray, rng: random.Random) -> np.ndarray:
    """Answers of two pairs (and of the query's pair) from three answers, the query among their
    questions: the paper's swap (Theorem 2) is one dependent subset.  k = 1: vary the pair."""
    k = task.k
    slots = sorted(rng.sample(range(k), min(2, k)))
    answers = sorted({int(seed[3 * s + 2]) for s in slots} | {task.first_answer + rng.randrange(task.na)})
    questions = sorted({int(seed[3 * s]) for s in slots} | {rng.randrange(task.nq)})
    cands = []
    for ans in itertools.product(answers, repeat=len(slots)):
        for qs in itertools.product(questions, repeat=len(slots)) if k == 1 else [None]:
            for query in questions:
                row = seed.copy()
                for i, s in enumerate(slots):
                    row[3 * s + 2] = ans[i]
                    if qs is not None:
                        row[3 * s] = qs[i]
                row[3 * k] = query
                cands.append(row)
    return np.array(cands)


def _ictm(task, seed: np.ndarray, rng: random.Random) -> np.ndarray:
    """Answers of two blocks from three answers; the query copied from either block."""
    k, l, B = task.k, task.length, task.block
    if k < 2:
        return seed[None]
    i, j = sorted(rng.sample(range(k), 2))
    answers = sorted({int(seed[t * B + l + 1]) for t in (i, j)} | {task.first_answer + rng.randrange(task.na)})
    cands = []
    for ai, aj in itertools.product(answers, repeat=2):
        for src in (i, j):
            row = seed.copy()
            row[i * B + l + 1], row[j * B + l + 1] = ai, aj
            row[k * B:k * B + l] = seed[src * B:src * B + l]
            cands.append(row)
    return np.array(cands)


def _templates(task, seed: np.ndarray, rng: random.Random) -> np.ndarray:
    """Every sequence of two templates over one set S of symbols (Lemmas 5-6: each token then occurs
    equally often at every position), S taken from the seed plus random symbols."""
    if task.num_classes < 2:
        return seed[None]
    t = int(task.evaluate(seed[None])[0][0])
    u = rng.choice([x for x in range(task.num_classes) if x != t])
    w = max(task.widths[t], task.widths[u])
    symbols = sorted(set(int(x) for x in seed[:-1]))
    symbols += rng.sample([x for x in range(task.alphabet) if x not in symbols], w - len(symbols))
    cands = []
    for tmpl in (task.template_list[t], task.template_list[u]):
        for sub in itertools.permutations(symbols, max(tmpl) + 1):
            cands.append([sub[x] for x in tmpl] + [task.alphabet])
    return np.array(cands)


def _memorization(task, seed: np.ndarray, rng: random.Random) -> np.ndarray:
    """Two positions varied over the symbols they hold in a few sequences of the dataset."""
    N = task.N
    positions = sorted(rng.sample(range(N), min(2, N)))
    others = [task.decode(rng.randrange(task.total)) for _ in range(2)]
    values = [sorted({int(r[p]) for r in [seed] + others}) for p in positions]
    cands = []
    for vals in itertools.product(*values):
        row = seed.copy()
        row[positions] = vals
        cands.append(row)
    return np.array(cands)


NEIGHBOURHOODS: dict[str, Callable] = {"icqa": _icqa, "ictm": _ictm, "template_matching": _templates,
                                       "memorization": _memorization}
SCOPE_NOTE = {"icqa": "Chen and Zou 2024, Theorem 2", "ictm": "Chen and Zou 2024, Section 5.4 (via Theorem 2)",
              "template_matching": "Chen and Zou 2024, Theorem 4", "memorization": "none: Theorem 1 says one "
              "layer memorizes, so no contradiction exists"}


def why_none(task) -> str:
    """Why a search may find no certificate for this dataset."""
    if task.name == "icqa" and task.k < 2:
        return "with k = 1 pair a 1-layer model can copy the answer: Theorem 2 needs k >= 2"
    if task.name == "ictm" and task.k < 2:
        return "with k = 1 block the answer is fixed by the context: the argument needs k >= 2"
    if task.name == "template_matching" and task.substitutions is not None:
        return ("with a fixed set of substitutions a 1-layer model can memorize the sequences (Theorem 1): "
                "Theorem 4 needs every substitution (Lemma 5)")
    return SCOPE_NOTE.get(task.name, "no dependent-set theorem for this task")


def task_key(task) -> dict:
    """What rebuilds the task: its name, N and the options it was made with."""
    key = {"name": task.name, "N": task.N}
    for o in type(task).OPTIONS:
        value = getattr(task, o.name, None)
        if value is not None and value != o.default:
            key[o.name] = value
    return key


def neighbourhood(task, seed: np.ndarray, rng: random.Random) -> tuple[np.ndarray, np.ndarray]:
    """Distinct dataset members around the seed, and their labels."""
    if task.name not in NEIGHBOURHOODS:
        raise InputError(f"no dependent sets are defined for {task.name} (tasks with them: "
                         f"{', '.join(NEIGHBOURHOODS)})")
    cands = np.unique(NEIGHBOURHOODS[task.name](task, seed, rng), axis=0)
    answers, valid = task.evaluate(cands)
    return cands[valid], answers[valid]


def certificates(task, seeds: Iterator[np.ndarray], rng: random.Random,
                 stop: Optional[Callable[[], bool]] = None) -> Iterator[Certificate]:
    """Certificates found around the given seed examples, in order."""
    for seed in seeds:
        if stop is not None and stop():
            return
        members, labels = neighbourhood(task, np.asarray(seed, dtype=np.int64), rng)
        if len(members) < 2:
            continue
        found = contradiction(members, labels, task.num_classes)
        if found is None:
            continue
        lam, w, mu, pair = found
        keep = [i for i, l in enumerate(lam) if l != 0]
        argument = (f"u-argument: the inputs with lambda > 0 are labelled {task.answer_name(pair[0])}, those with "
                    f"lambda < 0 {task.answer_name(pair[1])}; u = e_{task.answer_name(pair[0])} - "
                    f"e_{task.answer_name(pair[1])} gives sum lambda_i u.o_i > 0, but sum lambda_i o_i = 0"
                    if pair else "Farkas multipliers: no readout gets every label right with sum lambda_i o_i = 0")
        yield Certificate(task_key(task), [[int(t) for t in members[i]] for i in keep], [int(labels[i]) for i in keep],
                          [int(lam[i]) for i in keep], w, [mu[i] for i in keep], argument,
                          [task.render(members[i]) for i in keep], [task.answer_name(int(labels[i])) for i in keep])


def random_seeds(task, rng: random.Random) -> Iterator[np.ndarray]:
    """Dataset members at random enumeration indices."""
    while True:
        yield task.decode(rng.randrange(task.total))


def find_certificate(task, seed: int = 0, tries: int = 200) -> Optional[Certificate]:
    """The first certificate around random members of the dataset (None after `tries` seeds)."""
    rng = random.Random(seed)
    seeds = (task.decode(rng.randrange(task.total)) for _ in range(tries))
    return next(certificates(task, seeds, rng), None)


def load_checked(path: str) -> Certificate:
    """The certificate in the file `path`, after the independent check (`certificate_check`) found
    it valid; InputError (its first problem) otherwise."""
    from .certificate_check import check_certificate
    problems = check_certificate(path)
    if problems:
        raise InputError(f"certificate {path} is not valid: {problems[0]}")
    with open(path, encoding="utf-8") as fh:
        return Certificate.from_json(json.load(fh))


def save(cert: Certificate, path: str, force: bool = False) -> None:
    """Write the certificate as a new JSON file (never overwrites, unless `force`)."""
    with new_file(path, force=force) as fh:
        json.dump(cert.to_json(), fh, indent=1)


__all__ = ["Certificate", "find_certificate", "certificates", "contradiction", "count_identity_holds", "neighbourhood",
           "random_seeds", "save", "task_key", "template_name", "SCOPE_NOTE"]
