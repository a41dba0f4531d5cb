"""Counting and indexing the combinatorial datasets: arrangements and templates.

* An **arrangement** of k of n symbols is an ordered choice of k distinct symbols (a k-permutation);
  there are A(n, k) = n! / (n - k)! of them.  They are indexed in lexicographic order, and
  `arrangements` decodes a batch of indices at once (a mixed-radix number whose digit i picks among
  the symbols still free).
* A **template** of length l is a string of wildcards up to renaming, stored canonically as a
  restricted growth string: each wildcard is the index of its first appearance (``abb`` and ``baa``
  are both (0, 1, 1)).  Its number of distinct wildcards is w(t) = max(t) + 1.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


def falling(n: int, k: int) -> int:
    """A(n, k) = n (n - 1) ... (n - k + 1), the number of arrangements of k of n symbols."""
    out = 1
    for i in range(k):
        out *= n - i
    return out if k <= n else 0


def arrangements(index: np.ndarray, n: int, k: int) -> np.ndarray:
    """The arrangements (B, k) of k of the symbols 0..n-1 at lexicographic indices `index` (B,), int64
    or Python integers (an object array, for counts beyond int64)."""
    index = np.array(index, dtype=object if falling(n, k) >= 1 << 62 else np.int64)
    free = np.ones((len(index), n), dtype=bool)
    out = np.empty((len(index), k), dtype=np.int64)
    for i in range(k):
        base = falling(n - 1 - i, k - 1 - i)
        digit = index // base
        index -= digit * base
        chosen = np.argmax(np.cumsum(free, axis=1) > digit[:, None].astype(np.int64), axis=1)  # digit-th free
        out[:, i] = chosen
        free[np.arange(len(index)), chosen] = False
    return out


def arrangement_index(symbols, n: int) -> int:
    """The lexicographic index of an arrangement of distinct symbols from 0..n-1 (inverse of
    `arrangements`)."""
    symbols = [int(s) for s in symbols]
    k, index, used = len(symbols), 0, []
    for i, s in enumerate(symbols):
        index += sum(1 for t in range(s) if t not in used) * falling(n - 1 - i, k - 1 - i)
        used.append(s)
    return index


def distinct_rows(x: np.ndarray) -> np.ndarray:
    """Per row of x (B, m): are its entries pairwise distinct?"""
    s = np.sort(x, axis=1)
    return np.all(s[:, 1:] != s[:, :-1], axis=1)


def canonical_template(text) -> tuple[int, ...]:
    """A template in canonical form: wildcards renamed by first appearance (``"aba"`` -> (0, 1, 0))."""
    names: dict = {}
    return tuple(names.setdefault(c, len(names)) for c in text)


def count_templates(length: int, max_wildcards: int) -> int:
    """How many templates `all_templates` lists: sum over w <= max_wildcards of S(length, w), the
    Stirling numbers of the second kind."""
    row = [1] + [0] * max_wildcards  # S(i, w) for the current i
    for _ in range(length):
        row = [0] + [w * row[w] + row[w - 1] for w in range(1, max_wildcards + 1)]
    return sum(row)


@lru_cache(maxsize=None)
def all_templates(length: int, max_wildcards: int) -> tuple[tuple[int, ...], ...]:
    """Every template of the given length with at most `max_wildcards` distinct wildcards, in
    lexicographic order of their canonical forms."""
    out: list[tuple[int, ...]] = []

    def grow(prefix: tuple[int, ...], used: int) -> None:
        if len(prefix) == length:
            out.append(prefix)
            return
        for w in range(min(used + 1, max_wildcards)):
            grow(prefix + (w,), max(used, w + 1))

    grow((), 0)
    return tuple(out)


def template_name(template) -> str:
    """Greek-letter spelling of a canonical template: (0, 1, 0) -> 'αβα'."""
    letters = "αβγδεζηθικλμνξοπρστυφχψω"
    return "".join(letters[w] if w < len(letters) else f"w{w}" for w in template)
