"""Template matching, D_TM (Chen and Zou 2024, arXiv:2404.01601, Definition 1, Section 4.3, Theorems 4
and 5).

A template is a string of wildcards up to renaming (canonical form: each wildcard numbered by its
first appearance, so ``abb`` and ``baa`` are both αββ).  A sequence follows template t under an
injective substitution s of its wildcards into the alphabet X; CLS is appended.  The dataset is
every injective substitution of every template of the set, each template with its own label (its
index), so D_TM has sum_t A(|X|, w(t)) examples of n = l + 1 tokens, w(t) the template's number of
wildcards.  N is the template length l (the CLI also takes it as `--length`).

* `--templates "aa,ab"`: a list of templates (letters stand for wildcards); two that are equal up
  to renaming are refused (they would generate the same sequences under different labels).
* default: every template of length l with at most |X| wildcards.
* `--substitutions K`: only the first K substitutions of each template (the paper's dataset uses a
  set of n_map maps; K = 1 is one fixed map, the identity on the wildcards' first appearances, for
  every template).  Default: every injective substitution.

Order: by template, then by substitution (the lexicographic arrangement of the symbols that the
wildcards take, in order of first appearance).  Each template is one case split for the SMT
engine: every position free, equal tokens exactly where the template has equal wildcards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import numpy as np

from ..support.errors import InputError
from ..support.sizes import Cost
from .base import Batch, Case, TaskOption, Vocabulary
from .combinatorics import (
    all_templates,
    arrangement_index,
    arrangements,
    canonical_template,
    count_templates,
    falling,
    template_name,
)
from .index_lookup import symbol_names

CLS = "CLS"


def template_count(text: Optional[str], length: int, alphabet: int) -> int:
    """How many templates `parse_templates` gives, before it lists them; beyond length 64 with two
    symbols or more, 2^64 (S(length, 2) = 2^(length - 1) - 1 of them have two wildcards)."""
    if text is not None:
        return text.count(",") + 1
    return count_templates(length, alphabet) if length <= 64 or alphabet == 1 else 1 << 64


def parse_templates(text: Optional[str], length: int, alphabet: int) -> list[tuple[int, ...]]:
    """Canonical templates from "aa,ab" (default: all of the length); refuses duplicates up to renaming."""
    if text is None:
        return list(all_templates(length, alphabet))
    seen: dict[tuple[int, ...], str] = {}
    for raw in text.split(","):
        word = raw.strip()
        if len(word) != length:
            raise InputError(f"--templates: {word!r} has length {len(word)}; every template has length N = {length}")
        t = canonical_template(word)
        if t in seen:
            raise InputError(f"--templates: {seen[t]!r} and {word!r} are the same template up to renaming the "
                             f"wildcards ({template_name(t)}): they generate the same sequences")
        if max(t) + 1 > alphabet:
            raise InputError(f"--templates: {word!r} has {max(t) + 1} wildcards, more than the {alphabet} symbols "
                             f"an injective substitution needs")
        seen[t] = word
    return list(seen)


def patterns(templates: list[tuple[int, ...]]) -> np.ndarray:
    """Equality patterns (T, l, l): entry [t, i, j] is 1 when template t has equal wildcards at i, j."""
    t = np.array(templates)
    return t[:, :, None] == t[:, None, :]


@dataclass
class TemplateMatching(Vocabulary):
    N: int
    alphabet: int = 3
    templates: Optional[str] = None
    substitutions: Optional[int] = None

    name = "template_matching"
    readout = "argmax"
    OPTIONS = (TaskOption("alphabet", int, 3, "|X|, the number of symbols."),
               TaskOption("templates", str, None, 'Templates, e.g. "aa,ab" (default: all of length N).'),
               TaskOption("substitutions", int, None, "Only the first K substitutions of each template."))
    SIZE_FLAGS = ("--length",)  # the paper's name for N: the template length l

    def __post_init__(self) -> None:
        for name in ("N", "alphabet"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{'N (the template length)' if name == 'N' else '--alphabet'} must be an integer "
                                 f">= 1, got {value!r}")
        self.cost().admit()
        self.template_list = parse_templates(self.templates, self.N, self.alphabet)
        self.symbols = symbol_names(self.alphabet)
        self.vocab = self.symbols + [CLS]
        self.max_len = self.N + 1
        self.num_classes = len(self.template_list)
        self.widths = [max(t) + 1 for t in self.template_list]
        if self.substitutions is not None and (isinstance(self.substitutions, bool)
                                               or not isinstance(self.substitutions, int) or self.substitutions < 1):
            raise InputError(f"--substitutions must be an integer >= 1, got {self.substitutions!r}")
        self._counts = [min(falling(self.alphabet, w), self.substitutions or falling(self.alphabet, w))
                        for w in self.widths]
        self._offsets = np.concatenate([[0], np.cumsum(self._counts)]).astype(object)
        self._index = {t: i for i, t in enumerate(self.template_list)}
        self._patterns = patterns(self.template_list)

    def cost(self) -> Cost:
        """The templates, listed."""
        return Cost(f"template_matching at length {self.N}",
                    64.0 * self.N * template_count(self.templates, self.N, self.alphabet), self.alphabet + 1)

    @property
    def total(self) -> int:
        return int(self._offsets[-1])

    def describe(self) -> dict:
        return {"name": self.name, "length": self.N, "alphabet": self.alphabet,
                "templates": ",".join(template_name(t) for t in self.template_list),
                "inputs": "every injective substitution of every template, then CLS; answer the template's index"}

    # -- examples -----------------------------------------------------------------------------
    def _tokens(self, t: int, subs: np.ndarray) -> np.ndarray:
        """Sequences of template t under the substitutions `subs` (B, w(t)), CLS appended."""
        rows = subs[:, list(self.template_list[t])]
        return np.concatenate([rows, np.full((len(rows), 1), self.alphabet)], axis=1)

    def batches(self, start: int, stop: int, batch_size: int | Callable[[int], int]) -> Iterator[Batch]:
        size = batch_size(self.max_len) if callable(batch_size) else batch_size
        for t in range(self.num_classes):
            lo, hi = max(start, int(self._offsets[t])), min(stop, int(self._offsets[t + 1]))
            for a in range(lo, hi, size):
                index = np.arange(a, min(a + size, hi), dtype=np.int64)
                subs = arrangements(index - int(self._offsets[t]), self.alphabet, self.widths[t])
                yield Batch(self._tokens(t, subs), np.full(len(index), t, dtype=np.int64), index)

    def decode(self, index: int) -> np.ndarray:
        if not 0 <= index < self.total:
            raise InputError(f"input index {index} is not in 0..{self.total - 1}")
        t = int(np.searchsorted(self._offsets[1:].astype(float), index, side="right"))
        return self._tokens(t, arrangements(np.array([index - int(self._offsets[t])], dtype=object), self.alphabet,
                                            self.widths[t]))[0]

    def evaluate(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(template index, valid) per row: the template whose equality pattern the symbols follow."""
        tokens = np.asarray(tokens, dtype=np.int64)
        B, L = tokens.shape
        if L != self.N + 1:
            return np.full(B, -1), np.zeros(B, bool)
        x = tokens[:, :-1]
        ok = np.all((x >= 0) & (x < self.alphabet), axis=1) & (tokens[:, -1] == self.alphabet)
        equal = x[:, :, None] == x[:, None, :]
        match = np.all(equal[:, None] == self._patterns[None], axis=(2, 3))  # (B, T)
        valid = ok & match.any(axis=1)
        template = np.where(valid, np.argmax(match, axis=1), -1)
        if self.substitutions is not None:  # and among the first K substitutions of its template
            valid &= np.array([v and self._substitution(row, t) < self._counts[t]
                               for row, t, v in zip(x, template, valid)], dtype=bool)
        return np.where(valid, template, -1), valid

    def _substitution(self, symbols, t: int) -> int:
        """The lexicographic index of the substitution that maps template t onto these symbols."""
        firsts = [list(self.template_list[t]).index(w) for w in range(self.widths[t])]
        return arrangement_index([int(symbols[i]) for i in firsts], self.alphabet)

    def index_of(self, tokens) -> int:
        t = self.answer(tokens)
        return int(self._offsets[t]) + self._substitution(tokens, t)

    def cases(self) -> Iterator[Case]:
        symbols, cls = np.arange(self.alphabet), np.array([self.alphabet])
        for t, template in enumerate(self.template_list):
            yield Case(f"template {template_name(template)}", [symbols] * self.N + [cls],
                       lambda S, t=t: S.const(t), int(self._offsets[t]), self._counts[t],
                       valid=lambda S, t=t: self._valid(S, t))

    def _valid(self, S, t: int):
        """Symbolic: the tokens follow template t, under one of its first K substitutions."""
        template = self.template_list[t]
        if self.substitutions is None or self._counts[t] == falling(self.alphabet, self.widths[t]):
            return follows(S, template, 0)
        firsts = [list(template).index(w) for w in range(self.widths[t])]
        subs = arrangements(np.arange(self._counts[t]), self.alphabet, self.widths[t])
        allowed = S.any([S.all([S.eq(S.token(i), S.const(int(v))) for i, v in zip(firsts, sub)]) for sub in subs])
        return S.and_(follows(S, template, 0), allowed)

    def answer_name(self, answer: int) -> str:
        return template_name(self.template_list[answer]) if 0 <= answer < self.num_classes else f"<{answer}>"


def follows(S, template: tuple[int, ...], start: int):
    """Symbolic: the tokens at start, start + 1, ... follow the template (equal exactly where its
    wildcards are equal; the substitution is injective)."""
    conds = [S.eq(S.token(start + i), S.token(start + j)) if template[i] == template[j] else
             S.ne(S.token(start + i), S.token(start + j))
             for i in range(len(template)) for j in range(i + 1, len(template))]
    return S.all(conds)
