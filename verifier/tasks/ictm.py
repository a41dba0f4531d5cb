"""In-context template matching, D_IC-TM (Chen and Zou 2024, arXiv:2404.01601, Section 4.4, Theorem 6).

k context blocks, each a sequence of template t_pi(i) under an injective substitution s_i, the
response sign and an answer; then the query, template t_pi(c) under a substitution s', and the sign:

    sub(t_pi(0), s_0) = a_pi'(0)  ...  sub(t_pi(k-1), s_{k-1}) = a_pi'(k-1)  sub(t_pi(c), s') =

The answer is a_pi'(c): the answer of the block whose template the query follows.  The context
templates are distinct (an arrangement pi of k templates of the set T, which holds no two templates
equal up to renaming) and so are the answers (an arrangement pi' of k of the na answers).
n = k (l + 2) + l + 1 tokens.  N is k (`--N` on the CLI); `--length` is l.

Departure: the paper draws the k + 1 substitution maps without repetition from a set of maps of the
whole wildcard alphabet; maps that differ only on wildcards a template does not use give the same
sequence, so "distinct maps" does not say which sequences are in the dataset.  We take every
injective substitution for every block and for the query independently: a superset of the paper's
dataset, so a proof here covers it.

Order: by pi (lexicographic), then c, then pi', then s_0 .. s_{k-1}, then s' (each an arrangement of
the symbols a template's wildcards take, in order of first appearance).  Each (pi, c) is one case
split for the SMT engine: every symbol and answer position free, each block following its template,
the query following block c's, the answers distinct.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import numpy as np

from ..support.errors import InputError
from ..support.sizes import Cost
from .base import Batch, Case, TaskOption, Vocabulary, token_answers
from .combinatorics import arrangement_index, arrangements, distinct_rows, falling, template_name
from .index_lookup import symbol_names
from .templates import follows, parse_templates, patterns, template_count


@dataclass
class Ictm(Vocabulary):
    N: int
    length: int = 2
    alphabet: int = 3
    templates: Optional[str] = None
    na: int = 2

    name = "ictm"
    SIZE_HELP = "the paper's k: template blocks in the context"
    readout = "argmax"
    OPTIONS = (TaskOption("length", int, 2, "l, the template length."),
               TaskOption("alphabet", int, 3, "|X|, the number of symbols."),
               TaskOption("templates", str, None, 'Templates, e.g. "aa,ab" (default: all of length l).'),
               TaskOption("na", int, 2, "Number of answer tokens."))

    def __post_init__(self) -> None:
        for name, low in (("N", 1), ("length", 1), ("alphabet", 1), ("na", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InputError(f"{'k' if name == 'N' else '--' + name} must be an integer >= {low}, got {value!r}")
        k, l = self.N, self.length
        T = template_count(self.templates, l, self.alphabet)
        if T < k or self.na < k:
            raise InputError(f"k = {k} blocks need k distinct templates and k distinct answers: there are {T} "
                             f"templates and na = {self.na}")
        self.cost().admit()
        self.template_list = parse_templates(self.templates, l, self.alphabet)
        self.symbols = symbol_names(self.alphabet)
        self.vocab = self.symbols + ["="] + [f"a{i}" for i in range(self.na)]
        self.r, self.first_answer = self.alphabet, self.alphabet + 1
        self.block = l + 2
        self.max_len = k * self.block + l + 1
        self.num_classes = self.na
        self.widths = [max(t) + 1 for t in self.template_list]
        self._patterns = patterns(self.template_list)
        # one group per (pi, c): its radices (answers, then each block's and the query's substitution)
        self._groups, offsets = [], [0]
        for p_index, pi in enumerate(arrangements(np.arange(falling(T, k)), T, k)):
            for c in range(k):
                radices = [falling(self.na, k)] + [falling(self.alphabet, self.widths[t]) for t in pi] + \
                          [falling(self.alphabet, self.widths[pi[c]])]
                self._groups.append((p_index, tuple(int(t) for t in pi), c, radices))
                offsets.append(offsets[-1] + int(np.prod(np.array(radices, dtype=object))))
        self._offsets = offsets

    def cost(self) -> Cost:
        """A group per arrangement of k of the T templates and per query block."""
        k, l = self.N, self.length
        T = template_count(self.templates, l, self.alphabet)
        return Cost(f"ictm with k={k}", 64.0 * falling(T, k) * k + 64.0 * k * (l + 2) ** 2, self.alphabet + 1 + self.na)

    @property
    def k(self) -> int:
        return self.N

    @property
    def total(self) -> int:
        return self._offsets[-1]

    def describe(self) -> dict:
        return {"name": self.name, "k": self.k, "length": self.length, "alphabet": self.alphabet, "na": self.na,
                "templates": ",".join(template_name(t) for t in self.template_list),
                "inputs": "k blocks (a sequence of a template, =, an answer; distinct templates and answers), "
                          "then a query sequence and =; answer the answer of the block with the query's template"}

    # -- examples -----------------------------------------------------------------------------
    def _group_tokens(self, g: int, r: np.ndarray) -> np.ndarray:
        """Examples (B, n) at indices r within group g (a mixed-radix number, answers most significant)."""
        _, pi, c, radices = self._groups[g]
        k, l = self.k, self.length
        digits = []
        for radix in reversed(radices):
            digits.append(r % radix)
            r = r // radix
        digits = digits[::-1]
        tokens = np.empty((len(digits[0]), self.max_len), dtype=np.int64)
        answers = arrangements(digits[0], self.na, k)
        for i, t in enumerate(list(pi) + [pi[c]]):
            subs = arrangements(digits[1 + i], self.alphabet, self.widths[t])
            start = i * self.block
            tokens[:, start:start + l] = subs[:, list(self.template_list[t])]
            tokens[:, start + l] = self.r
            if i < k:
                tokens[:, start + l + 1] = answers[:, i] + self.first_answer
        return tokens

    def _group_of(self, index: int) -> int:
        return int(np.searchsorted(np.array(self._offsets[1:], dtype=object).astype(float), index, side="right"))

    def batches(self, start: int, stop: int, batch_size: int | Callable[[int], int]) -> Iterator[Batch]:
        size = batch_size(self.max_len) if callable(batch_size) else batch_size
        for g, (_, _, c, _) in enumerate(self._groups):
            lo, hi = max(start, self._offsets[g]), min(stop, self._offsets[g + 1])
            for a in range(lo, hi, size):
                index = np.arange(a, min(a + size, hi), dtype=np.int64)
                tokens = self._group_tokens(g, index - self._offsets[g])
                yield Batch(tokens, tokens[:, c * self.block + self.length + 1] - self.first_answer, index)

    def decode(self, index: int) -> np.ndarray:
        if not 0 <= index < self.total:
            raise InputError(f"input index {index} is not in 0..{self.total - 1}")
        g = self._group_of(index)
        return self._group_tokens(g, np.array([index - self._offsets[g]], dtype=object))[0]

    def _parse(self, tokens: np.ndarray):
        """Per row: the template index of each of the k + 1 sequences (-1: none), and validity."""
        tokens = np.asarray(tokens, dtype=np.int64)
        k, l = self.k, self.length
        seqs = np.stack([tokens[:, i * self.block:i * self.block + l] for i in range(k + 1)], axis=1)  # (B, k+1, l)
        equal = seqs[..., :, None] == seqs[..., None, :]
        match = np.all(equal[:, :, None] == self._patterns[None, None], axis=(3, 4))  # (B, k+1, T)
        template = np.where(match.any(axis=2), np.argmax(match, axis=2), -1)
        answers = tokens[:, [i * self.block + l + 1 for i in range(k)]] - self.first_answer
        signs = tokens[:, [i * self.block + l for i in range(k + 1)]]
        valid = (np.all((seqs >= 0) & (seqs < self.alphabet), axis=(1, 2)) & np.all(signs == self.r, axis=1)
                 & np.all((answers >= 0) & (answers < self.na), axis=1) & np.all(template >= 0, axis=1)
                 & distinct_rows(template[:, :k]) & distinct_rows(answers))
        return template, answers, valid

    def evaluate(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.shape[1] != self.max_len:
            return np.full(len(tokens), -1), np.zeros(len(tokens), bool)
        template, answers, valid = self._parse(tokens)
        query = template[:, :self.k] == template[:, self.k:]
        valid &= query.sum(axis=1) == 1
        return np.where(valid, answers[np.arange(len(tokens)), np.argmax(query, axis=1)], -1), valid

    def index_of(self, tokens) -> int:
        self.answer(tokens)
        template, answers, _ = self._parse(np.asarray([tokens]))
        pi = tuple(int(t) for t in template[0, :self.k])
        c = pi.index(int(template[0, self.k]))
        g = next(g for g, (_, p, cc, _) in enumerate(self._groups) if p == pi and cc == c)
        radices = self._groups[g][3]
        digits = [arrangement_index(answers[0], self.na)]
        for i, t in enumerate(list(pi) + [pi[c]]):
            seq = [int(x) for x in tokens[i * self.block:i * self.block + self.length]]
            firsts = [list(self.template_list[t]).index(w) for w in range(self.widths[t])]
            digits.append(arrangement_index([seq[j] for j in firsts], self.alphabet))
        r = 0
        for digit, radix in zip(digits, radices):
            r = r * radix + digit
        return self._offsets[g] + r

    def cases(self) -> Iterator[Case]:
        k, l = self.k, self.length
        symbols, r, answers = np.arange(self.alphabet), np.array([self.r]), np.arange(self.na) + self.first_answer
        doms = ([symbols] * l + [r, answers]) * k + [symbols] * l + [r]
        table = token_answers(len(self.vocab), self.first_answer, self.na)
        for g, (_, pi, c, _) in enumerate(self._groups):
            name = f"templates {','.join(template_name(self.template_list[t]) for t in pi)}, c={c}"
            yield Case(name, doms, lambda S, c=c: S.sub(S.token(c * self.block + l + 1), S.const(self.first_answer)),
                       self._offsets[g], self._offsets[g + 1] - self._offsets[g],
                       valid=lambda S, pi=pi, c=c: self._valid(S, pi, c), answer_at=(c * self.block + l + 1, table))

    def _valid(self, S, pi: tuple[int, ...], c: int):
        k, l = self.k, self.length
        a = [S.token(i * self.block + l + 1) for i in range(k)]
        conds = [follows(S, self.template_list[t], i * self.block) for i, t in enumerate(pi)]
        conds.append(follows(S, self.template_list[pi[c]], k * self.block))
        conds += [S.ne(a[i], a[j]) for i in range(k) for j in range(i + 1, k)]
        return S.all(conds)

    def answer_name(self, answer: int) -> str:
        return self.vocab[self.first_answer + answer] if 0 <= answer < self.na else f"<{answer}>"
