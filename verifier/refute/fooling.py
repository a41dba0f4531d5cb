"""Fooling sets: the inputs a communication lower bound is about, for every task that has one.

A fooling set splits the positions of inputs of one length between Alice and Bob and names one
position of Bob's, `position`, whose answer the argument reads (for a task with an answer at every
position, a position that has one).  It comes in two kinds:

* **one-way** (what a recurrent model's state, or a summary Alice sends without hearing from Bob,
  must distinguish): Alice parts every two of which some Bob part tells apart, through the answer
  at `position`.  Bhattamishra et al. 2024 (arXiv:2406.09347): Theorem 3 (index lookup, INDEX),
  Theorem 8 (nearest neighbour, from disjointness), Proposition 9 (MQAR); Sanford, Hsu, Telgarsky
  2024 (arXiv:2408.14332): induction heads, from INDEX (`induction_heads`: our own encoding, see
  there).
* **two-way** (Definition 1 and Fact 4 of Bhattamishra et al. 2024, what Theorem 4's two-way
  protocol must distinguish): members (a_i, b_i) with one answer z, and for i != j one of the
  crossed inputs (a_i, b_j), (a_j, b_i) answers otherwise.  Equality (Theorem 11/12: both
  crossings), disjointness (one of them), Dyck-(2,2) at the odd/even split (Lemma 1: both).

Every set is built from the task's definition and can be checked by brute force (`check`); the
tests do so at small N.  `SIZES` gives each set's size and the sizes of Alice's and Bob's parts
in closed form, for the counts of `shapes` at any N (the tests check them against `build`).
For a task without a published reduction (`reference`, `dataset`) `greedy` searches one: a
maximal set of Alice parts pairwise told apart by some Bob part, from the task's own answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional

import numpy as np

from ..result import count_text
from ..support.errors import InputError

MAX_MEMBERS = 1 << 16  # Alice parts built at once; a larger set is sampled (any subset is a fooling set)


@dataclass
class FoolingSet:
    """Alice parts A, Bob parts B, over positions `alice` and `bob` (the input's, BOS included)."""

    task: str
    source: str  # the theorem or lemma it comes from
    alice: np.ndarray  # positions Alice holds
    bob: np.ndarray  # positions Bob holds (with `position`)
    position: int  # the position whose answer tells members apart
    A: np.ndarray  # (F, |alice|)
    B: np.ndarray  # (G, |bob|); two-way: member i is (A[i], B[i])
    two_way: bool
    size: int  # members of the whole set (A may be a sample of it)
    # one-way: a B row telling A[i], A[j] apart
    separator: Optional[Callable[[int, int], int]] = field(default=None, repr=False)

    @property
    def length(self) -> int:
        return len(self.alice) + len(self.bob)

    @property
    def contiguous(self) -> bool:
        """Alice holds a prefix: what a recurrent model's state after her part summarizes."""
        return len(self.alice) > 0 and int(self.alice.max()) < int(self.bob.min())

    def inputs(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The inputs made of Alice parts A[a] and Bob parts B[b] (index arrays of one length)."""
        rows = np.empty((len(a), self.length), dtype=np.int64)
        rows[:, self.alice] = self.A[a]
        rows[:, self.bob] = self.B[b]
        return rows

    def with_bos(self, bos: int) -> "FoolingSet":
        """The set as a model with a BOS token reads it: every position one later, BOS Bob's at 0
        (or Alice's, when she holds a prefix, so that it stays one)."""
        if self.contiguous:
            return replace(self, alice=np.concatenate([[0], self.alice + 1]), bob=self.bob + 1,
                           position=self.position + 1,
                           A=np.concatenate([np.full((len(self.A), 1), bos), self.A], axis=1))
        return replace(self, alice=self.alice + 1, bob=np.concatenate([[0], self.bob + 1]), position=self.position + 1,
                       B=np.concatenate([np.full((len(self.B), 1), bos), self.B], axis=1))

    def describe(self) -> str:
        kind = "two-way (Definition 1: one answer on every member, a crossing answers otherwise)" if self.two_way \
            else "one-way (every two Alice parts told apart by some Bob part)"
        return (f"{self.source}: {count_text(self.size)} members, {kind}; Alice holds {_span(self.alice)}, Bob "
                f"{_span(self.bob)}; the answer at position {self.position} tells them apart")


def _span(positions: np.ndarray) -> str:
    p = [int(x) for x in positions]
    if p == list(range(p[0], p[-1] + 1)):
        return f"positions {p[0]}..{p[-1]}"
    if len(p) > 2 and all(b - a == 2 for a, b in zip(p, p[1:])):
        return f"positions {p[0]}, {p[1]}, ..., {p[-1]}"
    return "positions " + ", ".join(map(str, p[:6])) + (" ..." if len(p) > 6 else "")


def answers_at(task, tokens: np.ndarray, position: int) -> tuple[np.ndarray, np.ndarray]:
    """(the answers at `position`, valid) for inputs (B, L) of the task as the model reads them."""
    answers, valid = task.evaluate(tokens)
    if task.per_position:
        answers = answers[:, position - (tokens.shape[1] - answers.shape[1])]
    return answers, valid


def bits(count: int, width: int) -> np.ndarray:
    """Every bit string of `width` bits (count = 2^width), or the first `count`, MSB first."""
    return ((np.arange(count)[:, None] >> np.arange(width - 1, -1, -1)) & 1).astype(np.int64)


def _strings(alphabet: int, width: int, limit: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Every string over the alphabet of that width, or `limit` distinct ones at random; and how many exist."""
    total = alphabet ** width
    if total <= limit:
        idx = np.arange(total)
    else:  # distinct random strings: draw, drop repeats, top up
        rows = np.zeros((0, width), dtype=np.int64)
        while len(rows) < limit:
            rows = np.unique(np.concatenate([rows, rng.integers(0, alphabet, (limit, width))]), axis=0)
        return rng.permutation(rows)[:limit], total
    digits = alphabet ** np.arange(width - 1, -1, -1, dtype=np.int64)
    return (idx[:, None] // digits[None, :]) % alphabet, total


def _first_difference(A: np.ndarray) -> Callable[[int, int], int]:
    return lambda i, j: int(np.flatnonzero(A[i] != A[j])[0])


# -- the published reductions -----------------------------------------------------------------------
def equality(task, limit: int, rng) -> FoolingSet:
    """{(x, x)}: Alice the first half, Bob the second (Bhattamishra et al. 2024, Theorems 11 and 12)."""
    h = task.N // 2
    A, size = _strings(2, h, limit, rng)
    return FoolingSet(task.name, "equality, F = {(x, x)} (Bhattamishra et al. 2024, Theorems 11, 12)",
                      np.arange(h), np.arange(h, 2 * h), 2 * h - 1, A, A.copy(), True, size, lambda i, j: i)


def disjointness(task, limit: int, rng) -> FoolingSet:
    """{(x, not x)}: BOS and x to Alice, y to Bob (Bhattamishra et al. 2024, Appendix F)."""
    h = task.N // 2
    x, size = _strings(2, h, limit, rng)
    A = np.concatenate([np.full((len(x), 1), 2), x], axis=1)
    # x_i = 1 where x'_i = 0: (x, not x') intersects while (x', not x') does not; else swap
    sep = lambda i, j: j if (x[i] > x[j]).any() else i  # noqa: E731
    return FoolingSet(task.name, "disjointness, F = {(x, not x)} (Bhattamishra et al. 2024, Appendix F)",
                      np.arange(h + 1), np.arange(h + 1, 2 * h + 1), 2 * h, A, 1 - x, True, size, sep)


def index_lookup(task, limit: int, rng) -> FoolingSet:
    """INDEX: Alice holds s_1..s_N, Bob the index token (Bhattamishra et al. 2024, Theorem 3)."""
    A, size = _strings(task.sigma, task.N, limit, rng)
    B = (task.sigma + np.arange(task.N))[:, None]  # #1 .. #N
    return FoolingSet(task.name, "INDEX (Bhattamishra et al. 2024, Theorem 3)", np.arange(task.N),
                      np.array([task.N]), task.N, A, B, False, size, _first_difference(A))


def induction_heads(task, limit: int, rng) -> FoolingSet:
    """INDEX through induction heads, Bob's last token reading Alice's bit x_i.

    <s> m_1 x_1 m_2 x_2 ... m_k x_k c with x_j in {a, b} (Alice's, at the even positions), the
    markers m_j Bob's: m_i = c, the others a.  The rightmost earlier c is m_i, so the answer at the
    last position is x_i (never BOT).  Sanford, Hsu, Telgarsky 2024 reduce from INDEX with three
    symbols; we did not read their encoding (as transcribed, unverified): this one is ours, and the
    tests check it by brute force."""
    if task.sigma < 3:
        raise InputError("the INDEX reduction of induction heads needs sigma >= 3 (bits a, b and the marker c)")
    k = (task.N - 1) // 2
    if k < 1:
        raise InputError("the INDEX reduction of induction heads needs N >= 3")
    A, size = _strings(2, k, limit, rng)
    a, c = 0, 2
    B = np.full((k, k + 2), a)
    B[:, 0] = task.bos
    B[np.arange(k), 1 + np.arange(k)] = c
    B[:, -1] = c
    alice = 2 + 2 * np.arange(k)
    bob = np.concatenate([[0], 1 + 2 * np.arange(k), [2 * k + 1]])
    return FoolingSet(task.name, "INDEX through induction heads (Sanford, Hsu, Telgarsky 2024, Theorem 1; our "
                      "encoding)", alice, bob, 2 * k + 1, A, B, False, size, _first_difference(A))


def dyck_words(n: int) -> np.ndarray:
    """Every string of Dyck-(2,2) of length n (token ids ( ) [ ]), by the automaton."""
    from ..tasks.sequences import DYCK22_DFA
    words, states = np.zeros((1, 0), dtype=np.int64), np.zeros(1, dtype=np.int64)
    for _ in range(n):
        words = np.repeat(words, 4, axis=0)
        sym = np.tile(np.arange(4), len(states))
        states = DYCK22_DFA[np.repeat(states, 4), sym]
        words = np.concatenate([words, sym[:, None]], axis=1)
        keep = states != len(DYCK22_DFA) - 1
        words, states = words[keep], states[keep]
    return words[states == 0]


def dyck22(task, limit: int, rng) -> FoolingSet:
    """Every word of Dyck-(2,2) of the largest even length n <= N, Alice the odd positions, Bob the
    even ones and <s>, the answer at position n (Bhattamishra et al. 2024, Lemma 1: 2^(n-1) words;
    putting another word's even half against a word's odd half leaves Dyck-(2,2))."""
    n = task.N - task.N % 2
    if n < 2:
        raise InputError("Lemma 1's fooling set needs a length n >= 2")
    size = 2 ** (n - 1)
    if size > limit:  # random words: a random walk on the automaton, kept when it ends balanced
        words = _random_dyck(n, limit, rng)
    else:
        words = dyck_words(n)
    alice, bob = 1 + 2 * np.arange(n // 2), np.concatenate([[0], 2 + 2 * np.arange(n // 2)])
    B = np.concatenate([np.full((len(words), 1), task.bos), words[:, 1::2]], axis=1)
    return FoolingSet(task.name, "Dyck-(2,2) at the odd/even split (Bhattamishra et al. 2024, Lemma 1)", alice, bob,
                      n, words[:, 0::2], B, True, size, lambda i, j: i)


def _random_dyck(n: int, count: int, rng) -> np.ndarray:
    """`count` distinct words of Dyck-(2,2) of length n, as blocks: a pair () or [], or a bracket
    around pairs of depth 1, ( () [] ) say (the decomposition of Lemma 1's count)."""
    seen: set[tuple[int, ...]] = set()
    rows: list[list[int]] = []
    while len(rows) < count:
        word: list[int] = []
        while len(word) < n:
            inner = int(rng.integers(0, (n - len(word)) // 2))  # pairs inside this block
            pairs = [2 * int(t) + k for t in rng.integers(0, 2, inner) for k in (0, 1)]
            o = 2 * int(rng.integers(0, 2))
            word += [o, *pairs, o + 1]
        if tuple(word) not in seen:
            seen.add(tuple(word))
            rows.append(word)
    return np.array(rows, dtype=np.int64)


def mqar(task, limit: int, rng) -> FoolingSet:
    """The N/2 keys in order with free labels, one query (Bhattamishra et al. 2024, Proposition 9)."""
    h = task.N // 2
    y, size = _strings(2, h, limit, rng)
    A = np.empty((len(y), 2 * h), dtype=np.int64)
    A[:, 0::2] = np.arange(h)
    A[:, 1::2] = task.V + y
    return FoolingSet(task.name, "MQAR from INDEX (Bhattamishra et al. 2024, Proposition 9)", np.arange(2 * h),
                      np.array([2 * h]), 2 * h, A, np.arange(h)[:, None], False, size, _first_difference(y))


def nearest_neighbour(task, limit: int, rng) -> FoolingSet:
    """k - 1 distinct vectors with free labels, the query one of them (Bhattamishra et al. 2024,
    Theorem 8, from disjointness): k - 1 = min(N - 1, 2^d'), which must exceed N/2 - 1."""
    pairs = min(task.N - 1, task.V)
    if pairs < task.N // 2:
        raise InputError(f"the fooling set of nearest_neighbour needs N/2 = {task.N // 2} distinct vectors; the "
                         f"codebook has 2^{task.dim} = {task.V} (raise --dim)")
    y, size = _strings(2, pairs, limit, rng)
    A = np.empty((len(y), 2 * pairs), dtype=np.int64)
    A[:, 0::2] = np.arange(pairs)
    A[:, 1::2] = task.V + y
    return FoolingSet(task.name, "nearest neighbour from INDEX (Bhattamishra et al. 2024, Theorem 8)",
                      np.arange(2 * pairs), np.array([2 * pairs]), 2 * pairs, A, np.arange(pairs)[:, None], False,
                      size, _first_difference(y))


BUILDERS: dict[str, Callable] = {"equality": equality, "disjointness": disjointness, "index_lookup": index_lookup,
                                 "induction_heads": induction_heads, "dyck22": dyck22, "mqar": mqar,
                                 "nearest_neighbour": nearest_neighbour}


@dataclass(frozen=True)
class Size:
    """A reduction's size at one N, in closed form: log2 of its members, and the parts' lengths."""

    members: int
    alice: int
    bob: int
    two_way: bool
    contiguous: bool
    queries: int  # tokens Bob's part can hold at the position read (the queries Alice must answer for)


def size(name: str, N: int, **options) -> Optional[Size]:
    """The published reduction's size at N (None where it does not exist at that N)."""
    if name == "equality" and N >= 2 and N % 2 == 0:
        return Size(2 ** (N // 2), N // 2, N // 2, True, True, 2)
    if name == "disjointness" and N >= 2 and N % 2 == 0:
        return Size(2 ** (N // 2), N // 2 + 1, N // 2, True, True, 2)
    if name == "index_lookup" and N >= 1:
        return Size(options.get("sigma", 2) ** N, N, 1, False, True, N)
    if name == "induction_heads" and N >= 3 and options.get("sigma", 3) >= 3:
        k = (N - 1) // 2
        return Size(2 ** k, k, k + 2, False, False, 1)
    if name == "dyck22" and N >= 2:
        n = N - N % 2
        return Size(2 ** (n - 1), n // 2, n // 2 + 1, True, False, 2)
    if name == "mqar" and N >= 2 and N % 2 == 0:
        return Size(2 ** (N // 2), N, 1, False, True, N // 2)
    if name == "nearest_neighbour" and N >= 2:
        pairs = min(N - 1, 2 ** options.get("dim", 2))
        return Size(2 ** pairs, 2 * pairs, 1, False, True, pairs) if pairs >= N // 2 else None
    return None


# -- any task: a greedy fooling set ------------------------------------------------------------------
MAX_GREEDY_PARTS = 4096


def greedy(task, split: int, length: Optional[int] = None) -> FoolingSet:
    """For a task without a published reduction: the inputs of one length (the longest) split at
    `split` (Alice the prefix), Alice parts added greedily while every two are told apart by some
    Bob part, through the answer at the last position, both crossed inputs being inputs of the task."""
    L = length or task.max_len
    if not 1 <= split < L:
        raise InputError(f"the split must leave Alice and Bob a position each: 1 <= split < {L}, got {split}")
    rows = [b for b in task.batches(0, task.total, 4096) if b.tokens.shape[1] == L]
    if not rows:
        raise InputError(f"{task.name} has no input of length {L}")
    tokens = np.concatenate([b.tokens for b in rows])
    ans, valid = answers_at(task, tokens, L - 1)
    tokens, ans = tokens[valid], ans[valid]
    a_parts, a_of = np.unique(tokens[:, :split], axis=0, return_inverse=True)
    b_parts, b_of = np.unique(tokens[:, split:], axis=0, return_inverse=True)
    if len(a_parts) > MAX_GREEDY_PARTS or len(b_parts) > MAX_GREEDY_PARTS:
        raise InputError(f"{len(a_parts):,} Alice parts and {len(b_parts):,} Bob parts at length {L}: the greedy "
                         f"fooling set takes at most {MAX_GREEDY_PARTS:,} of each (choose a smaller N)")
    table = np.full((len(a_parts), len(b_parts)), -1, dtype=np.int64)  # -1: not an input of the task
    table[a_of.reshape(-1), b_of.reshape(-1)] = ans
    chosen: list[int] = []
    for a in np.argsort(-(table >= 0).sum(axis=1), kind="stable"):  # parts with most completions first
        row = table[a]
        both = (table[chosen] >= 0) & (row >= 0)
        if np.all(np.any(both & (table[chosen] != row), axis=1)):
            chosen.append(int(a))
    T = table[chosen]

    def separator(i: int, j: int) -> int:
        return int(np.flatnonzero((T[i] >= 0) & (T[j] >= 0) & (T[i] != T[j]))[0])

    return FoolingSet(task.name, f"greedy (a maximal set of prefixes of length {split} pairwise told apart by "
                      f"a suffix)", np.arange(split), np.arange(split, L), L - 1, a_parts[chosen], b_parts, False,
                      len(chosen), separator)


def build(task, limit: int = MAX_MEMBERS, seed: int = 0, split: Optional[int] = None) -> FoolingSet:
    """The task's fooling set (a random subset of `limit` Alice parts when it has more), as the
    model reads the task (a `WithBos` task: BOS in front)."""
    inner = getattr(task, "inner", task)
    rng = np.random.default_rng(seed)
    if inner.name in BUILDERS and split is None:
        fs = BUILDERS[inner.name](inner, limit, rng)
    elif inner.name in ("reference", "dataset") or split is not None:
        fs = greedy(inner, split if split is not None else max(1, inner.max_len // 2))
    else:
        raise InputError(f"no fooling set is defined for {inner.name} (tasks with one: "
                         f"{', '.join(BUILDERS)}, and user tasks: reference, dataset)")
    return fs.with_bos(task.bos) if inner is not task else fs


# -- brute force ------------------------------------------------------------------------------------
def check(task, fs: FoolingSet) -> list[str]:
    """Every claim of the set, by evaluating the task on every member and every crossing
    (|A| x |B| inputs): the defects, none when it is a fooling set."""
    F, G = len(fs.A), len(fs.B)
    a, b = np.repeat(np.arange(F), G), np.tile(np.arange(G), F)
    ans, valid = answers_at(task, fs.inputs(a, b), fs.position)
    table = np.where(valid, ans, -1).reshape(F, G)
    problems = []
    if fs.two_way:
        if F != G:
            return [f"a two-way set pairs Alice and Bob parts: {F} and {G}"]
        z = np.diag(table)
        if (z < 0).any() or (z != z[0]).any():
            problems.append("the members do not all have one answer")
        off = (table >= 0) & (table != z[0])  # a crossing that is an input, answered otherwise
        crossed = off | off.T
        np.fill_diagonal(crossed, True)
        if not crossed.all():
            i, j = np.argwhere(~crossed)[0]
            problems.append(f"members {i} and {j}: both crossings answer as the members do")
    else:
        for i in range(F):
            both = (table[i] >= 0) & (table >= 0)
            apart = np.any(both & (table != table[i]), axis=1)
            apart[i] = True
            if not apart.all():
                problems.append(f"Alice parts {i} and {int(np.flatnonzero(~apart)[0])}: no Bob part tells them apart")
                break
    if fs.separator is not None and F > 1:  # the separator names a Bob part that tells them apart
        for i, j in [(0, 1), (F - 1, 0), (F // 2, F - 1)]:
            if i == j:
                continue
            g = fs.separator(i, j)
            if not (table[i, g] >= 0 and table[j, g] >= 0 and table[i, g] != table[j, g]):
                problems.append(f"the separator of Alice parts {i} and {j} does not tell them apart")
    return problems


def sample_check(task, fs: FoolingSet, pairs: int, rng: np.random.Generator) -> int:
    """At a size too large for `check`: random pairs of members, each crossed by its separator (one-way)
    or both ways (two-way), evaluated on the task.  Returns how many were checked; InternalError-free
    means none failed (a failure raises)."""
    from ..support.errors import InternalError
    F = len(fs.A)
    if F < 2:
        return 0
    i = rng.integers(0, F, pairs)
    j = (i + 1 + rng.integers(0, F - 1, pairs)) % F
    if fs.two_way:
        rows = np.concatenate([fs.inputs(i, i), fs.inputs(j, i), fs.inputs(i, j)])
        ans, valid = answers_at(task, rows, fs.position)
        z, c1, c2 = np.split(np.where(valid, ans, -1), 3)
        bad = (z < 0) | (z != z[0]) | ((c1 == z) & (c2 == z))
    else:
        g = np.array([fs.separator(int(x), int(y)) for x, y in zip(i, j)])
        ans, valid = answers_at(task, np.concatenate([fs.inputs(i, g), fs.inputs(j, g)]), fs.position)
        x, y = np.split(np.where(valid, ans, -1), 2)
        bad = (x < 0) | (y < 0) | (x == y)
    if bad.any():
        raise InternalError(f"the fooling set of {fs.task} fails on members {i[bad][0]} and {j[bad][0]}")
    return pairs


def size_of(fs: FoolingSet) -> Size:
    """The `Size` of a built set (a greedy one has no closed form)."""
    col = int(np.flatnonzero(fs.bob == fs.position)[0])
    return Size(fs.size, len(fs.alice), len(fs.bob), fs.two_way, fs.contiguous, len(np.unique(fs.B[:, col])))
