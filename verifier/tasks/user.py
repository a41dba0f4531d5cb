"""Tasks the user defines: by a reference function, or by a dataset file.

* `ReferenceTask` (``--task reference --reference module.py:function --vocab a,b,c``): every
  string s_1 .. s_n over the vocabulary, n = 1..N, with the answer ``function([s_1, ..., s_n])``
  (token names in, an answer out).  A list answer of length n is an answer at every position (a
  sequence output); ``None`` at a position says no answer is required there (the position is not
  judged: Tracr's ``shift_by`` has none at position 0), and ``None`` for the whole string, or at
  every position, says the string is not an input of the task.  The function is called once per
  string when the task is built, so the task is a table: at most `MAX_REFERENCE_INPUTS` strings.
  A function named by its file is imported and called in a child process (`verifier.support.usercode`):
  nothing it does (an exit, a hang past ``--timeout``) ends or stalls the verifier.
* `DatasetTask` (``--task dataset --dataset FILE.jsonl --vocab a,b,c``): the inputs of the file, one
  JSON object a line, ``{"input": ["a", "b"], "answer": "b"}`` or, for a sequence output,
  ``{"input": [...], "answers": [...]}`` (``null`` in ``answers``: no answer required at that
  position; a line whose answers are all ``null`` is not an input); the task at size N is the
  file's inputs of length <= N.

Answers are JSON scalars (strings, integers, booleans); a class is named by the string itself or
by the JSON text of the others (``3``, ``true``).  The classes are ``--classes`` in its order when
given, else the answers that occur, sorted (numbers by value, then strings); a model's readout
rows are the classes in that order, or named rows (``readout.rows``, docs/model-format.md).
Enumeration: by length, then (reference) as a base-|vocab| number, first position most
significant, or (dataset) in file order.  One symbolic case per length (reference), per input
(dataset).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np

from ..support import usercode
from ..support.budget import require_memory
from ..support.errors import InputError
from ..support.schema import parse_json, regular_file, user_file
from .base import DATASET_HELP, NO_ANSWER, Batch, Case, Checked, TaskOption, Vocabulary
from .product import ProductTask

MAX_REFERENCE_INPUTS = 1 << 20  # strings a reference function is called on when the task is built
MAX_DATASET_BYTES = 1 << 28

VOCAB_OPTION = TaskOption("vocab", str, None, "The task's tokens in id order, comma-separated: a,b,c.")
CLASSES_OPTION = TaskOption("classes", str, None,
                            "The answers in class order, comma-separated (default: those that occur, sorted).")


def split_names(text: Any, what: str) -> list[str]:
    """Names from 'a,b,c' (or a list of them): non-empty, distinct, no surrounding spaces."""
    names = text.split(",") if isinstance(text, str) else list(text) if isinstance(text, (list, tuple)) else None
    if not names or any(not isinstance(n, str) or not n or n != n.strip() for n in names):
        raise InputError(f"{what} must be comma-separated non-empty names, e.g. a,b,c; got {text!r}")
    if len(set(names)) != len(names):
        raise InputError(f"{what} names a token twice: {text!r}")
    return names


def _size_and_vocab(N: Any, vocab: Any, source: Any, needs: str) -> list[str]:
    """Check N and that the task's source and vocabulary are given; the vocabulary's names."""
    if isinstance(N, bool) or not isinstance(N, int) or N < 1:
        raise InputError(f"N must be an integer >= 1, got {N!r}")
    if source is None or vocab is None:
        raise InputError(f"this task needs {needs} and --vocab a,b,c")
    return split_names(vocab, "--vocab")


def answer_name(value: Any, where: str) -> str:
    """A class's name: a string answer itself, the JSON text of an integer or a boolean."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, (bool, int, np.integer)):
        return json.dumps(value.item() if isinstance(value, np.integer) else value)
    raise InputError(f"{where}: an answer must be a non-empty string, an integer or a boolean; got {value!r}")


def _sort_key(name: str):
    try:
        value = json.loads(name)
    except ValueError:
        return (2, 0, name)
    return (0, value, name) if isinstance(value, int) and not isinstance(value, bool) else (1, 0, name)


class _Answers:
    """Class ids from answer names: the declared classes, or those that occur, sorted."""

    def __init__(self, classes: Optional[str]):
        self.declared = split_names(classes, "--classes") if classes is not None else None

    def finish(self, seen: set[str], where: str) -> list[str]:
        if self.declared is None:
            if not seen:
                raise InputError(f"{where} gives no answer at all")
            return sorted(seen, key=_sort_key)
        extra = sorted(seen - set(self.declared), key=_sort_key)
        if extra:
            raise InputError(f"{where} gives the answer{'s' if len(extra) > 1 else ''} {', '.join(extra[:5])}, "
                             f"not among --classes {','.join(self.declared)}")
        return self.declared


def load_attribute(spec: str, what: str = "--reference") -> Any:
    """``path/to/module.py:name`` or ``package.module:name``: that attribute, or InputError."""
    if not isinstance(spec, str) or spec.count(":") < 1:
        raise InputError(f"{what} must be module.py:name or package.module:name, got {spec!r}")
    where, name = spec.rsplit(":", 1)
    try:
        if where.endswith(".py"):
            path = regular_file(where, f"{what} module")
            mod_spec = importlib.util.spec_from_file_location(f"verify_user_{abs(hash(str(path)))}", path)
            assert mod_spec is not None and mod_spec.loader is not None, "a .py file has a spec and a loader"
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[mod_spec.name] = module
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except (InputError, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001 - the user's module failed (or exited) on import: one line
        raise InputError(f"{what} {spec}: importing {where} failed: it {usercode.did(exc)}") from None
    if not hasattr(module, name):
        raise InputError(f"{what} {spec}: {where} defines no {name!r}")
    return getattr(module, name)


def load_function(spec: str) -> Callable:
    """``module.py:function``: the reference function, or InputError."""
    fn = load_attribute(spec)
    if not callable(fn):
        raise InputError(f"--reference {spec}: {fn!r} is not a function")
    return fn


def answer_tables(reference: "Callable | str", vocab: list[str], N: int, classes: Optional[str],
                  source: str) -> tuple[list[np.ndarray], list[str], bool]:
    """The reference function (or its ``module.py:function``) on every string of length 1..N over
    `vocab`: one table of class ids per length (rows in enumeration order; a column per position,
    or one), the class names, and whether the answers are per position (module docstring)."""
    fn = load_function(reference) if isinstance(reference, str) else reference
    V = len(vocab)
    raw, seen, shape = [], set[str](), None
    for n in range(1, N + 1):
        for t in np.ndindex(*(V,) * n):
            words = [vocab[i] for i in t]
            try:
                out = fn(words)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # noqa: BLE001 - an exception or exit of the user's: one line, exit 2
                raise InputError(f"--reference {source} on {' '.join(words)}: it {usercode.did(exc)}") from None
            names = _names(out, words, f"--reference {source} on {' '.join(words)}")
            kind = "list" if isinstance(names, list) else "scalar"
            if names is not None:
                if shape not in (None, kind):
                    raise InputError(f"--reference {source} gives a {kind} on {' '.join(words)} and a "
                                     f"{shape} elsewhere: one answer, or one per position, always")
                shape = kind
                seen.update(x for x in (names if kind == "list" else [names]) if x is not None)
            raw.append(names)
    per_position = shape == "list"
    class_names = _Answers(classes).finish(seen, f"--reference {source}")
    ids = {c: i for i, c in enumerate(class_names)}
    tables, k = [], 0
    for n in range(1, N + 1):
        block = raw[k:k + V ** n]
        k += V ** n
        table = np.full((V ** n, n if per_position else 1), NO_ANSWER, dtype=np.int64)
        for r, names in enumerate(block):
            if names is not None:
                table[r] = [ids.get(x, NO_ANSWER) for x in names] if per_position else ids[names]
        tables.append(table)
    return tables, class_names, per_position


def _names(out, words: list[str], where: str):
    """The answer names of one output: a name, a list of names (None: no answer there), or None."""
    if out is None:
        return None
    if isinstance(out, (list, tuple, np.ndarray)):
        if len(out) != len(words):
            raise InputError(f"{where}: a list answer needs one entry per position ({len(words)}), got {len(out)}")
        return [None if x is None else answer_name(x, where) for x in out]
    return answer_name(out, where)


@dataclass
class ReferenceTask(ProductTask):
    """Every string over `vocab` up to length N, answered by a Python function (module docstring)."""

    N: int
    reference: Any = None  # "module.py:function", or the function itself (Python API)
    vocab: Any = None  # "a,b,c" or a list of names; becomes the list
    classes: Optional[str] = None

    name = "reference"
    readout = "argmax"
    OPTIONS = (TaskOption("reference", str, None, "The ground truth: module.py:function (token names -> answer).",
                          path=True), VOCAB_OPTION, CLASSES_OPTION)

    def __post_init__(self) -> None:
        self.vocab = _size_and_vocab(self.N, self.vocab, self.reference, "--reference module.py:function")
        V = len(self.vocab)
        count = sum(V ** n for n in range(1, self.N + 1))
        if count > MAX_REFERENCE_INPUTS:
            raise InputError(f"the reference function would be called on {count:,} strings (lengths 1..{self.N} over "
                             f"{V} tokens); at most {MAX_REFERENCE_INPUTS:,}")
        require_memory(8.0 * count * (self.N + 1), f"the reference task's answers ({count:,} strings)")
        if callable(self.reference):  # the caller's own function: it runs in the caller's process
            self.source = getattr(self.reference, "__qualname__", repr(self.reference))
            self.tables, self.class_names, self.per_position = answer_tables(self.reference, self.vocab, self.N,
                                                                             self.classes, self.source)
        else:  # a file's: in a child process, which nothing the function does can end or stall (`usercode`)
            self.source = self.reference
            self.tables, self.class_names, self.per_position = usercode.call(
                answer_tables, (self.reference, self.vocab, self.N, self.classes, self.source),
                f"--reference {self.source}")
        self.reference = self.source  # the task is its table from here on: it pickles without the function
        self.num_classes = len(self.class_names)
        if not any((t != NO_ANSWER).any() for t in self.tables):
            raise InputError(f"--reference {self.source} gives no answer on any string of length 1..{self.N}: "
                             f"the task has no input to check")
        self.space = [(f"n={n}", [np.arange(V)] * n) for n in range(1, self.N + 1)]
        self._layout()
        self.invalid_reason = "the reference gives no answer"

    def describe(self) -> dict:
        digest = hashlib.sha256(b"".join(np.ascontiguousarray(t).tobytes() for t in self.tables)).hexdigest()
        return {"name": self.name, "N": self.N, "reference": self.source, "vocab": self.vocab,
                "classes": self.class_names, "inputs": f"every string of length 1..{self.N}",
                "answer": "at every position" if self.per_position else "one",
                "answers_sha256": digest}  # what the function gave: a verdict cache keys on it

    def evaluate(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        tokens = np.asarray(tokens, dtype=np.int64)
        B, n = tokens.shape
        V = len(self.vocab)
        ok = np.all((tokens >= 0) & (tokens < V), axis=1) & (1 <= n <= self.N)
        if not 1 <= n <= self.N:
            return np.zeros((B, n) if self.per_position else B, dtype=np.int64), ok
        index = (np.where(ok[:, None], tokens, 0) * V ** np.arange(n - 1, -1, -1)).sum(axis=1)
        answers = self.tables[n - 1][index]
        ok &= np.any(answers != NO_ANSWER, axis=1)  # an answer at one position at least
        return (answers if self.per_position else answers[:, 0]), ok

    def answered(self) -> Checked:
        return sum((Checked.of(t[np.any(t != NO_ANSWER, axis=1)]) if self.per_position else
                    Checked(int((t != NO_ANSWER).sum())) for t in self.tables), Checked())

    def _case_table(self, c: int) -> np.ndarray:
        n = c + 1
        return self.tables[c].reshape((len(self.vocab),) * n + (self.tables[c].shape[1],))

    def case_truth(self, c: int) -> Callable:
        positions = list(range(c + 1))
        table = self._case_table(c)
        if self.per_position:  # NO_ANSWER where none is required: the encoding does not judge it
            return lambda S: [S.func(positions, table[..., i]) for i in positions]
        table = np.maximum(table, 0)  # a string without an answer is not an input (`case_valid`)
        return lambda S: S.func(positions, table[..., 0])

    def case_valid(self, c: int) -> Optional[Callable]:
        ok = np.any(self._case_table(c) != NO_ANSWER, axis=-1)
        if ok.all():
            return None
        positions = list(range(c + 1))
        return lambda S: S.ne(S.func(positions, ok.astype(np.int64)), S.const(0))

    def answer_name(self, answer: int) -> str:
        return self.class_names[answer] if 0 <= answer < self.num_classes else f"<{answer}>"


@dataclass
class DatasetTask(Vocabulary):
    """The inputs of a JSON-lines file with their answers (module docstring)."""

    N: int
    dataset: Any = None  # the file
    vocab: Any = None
    classes: Optional[str] = None

    name = "dataset"
    readout = "argmax"
    OPTIONS = (TaskOption("dataset", str, None, DATASET_HELP, path=True),
               VOCAB_OPTION, CLASSES_OPTION)

    def __post_init__(self) -> None:
        self.vocab = _size_and_vocab(self.N, self.vocab, self.dataset, "--dataset FILE.jsonl")
        path = Path(self.dataset)
        text, self.sha256 = user_file(path, "dataset file", MAX_DATASET_BYTES)  # read once: the bytes it is built from
        every, kinds, lines = _read_dataset(text, path, {t: i for i, t in enumerate(self.vocab)}, self.vocab)
        # a line whose answers are all null is not an input
        rows = {key: names for key, names in every.items() if len(key) <= self.N and any(n is not None for n in names)}
        if not rows:
            raise InputError(f"dataset file {path} has no input of length <= {self.N} with an answer ({lines} lines)")
        seen = {name for names in rows.values() for name in names if name is not None}
        self.per_position = kinds == {True}
        self.path = str(path)
        self.class_names = _Answers(self.classes).finish(seen, f"dataset file {path}")
        self.num_classes = len(self.class_names)
        cls: dict[Optional[str], int] = {c: i for i, c in enumerate(self.class_names)}
        cls[None] = NO_ANSWER
        self.lengths = sorted({len(k) for k in rows})
        self.max_len = self.lengths[-1]
        self.by_length = {}  # n -> (tokens (k, n), answers (k, n or 1), sorted keys, their rows)
        offset = 0
        self.offsets = {}
        for n in self.lengths:
            keys = [k for k in rows if len(k) == n]
            tokens = np.array(keys, dtype=np.int64).reshape(len(keys), n)
            answers = np.array([[cls[x] for x in rows[k]] for k in keys], dtype=np.int64)
            view = _rows_view(tokens)
            order = np.argsort(view)
            self.by_length[n] = (tokens, answers, view[order], order)
            self.offsets[n] = offset
            offset += len(keys)
        self._total = offset
        self.file_lines = lines

    @property
    def total(self) -> int:
        return self._total

    def answered(self) -> Checked:
        return sum((Checked.of(answers if self.per_position else answers[:, 0])
                    for _, answers, _, _ in self.by_length.values()), Checked())

    def describe(self) -> dict:
        return {"name": self.name, "N": self.N, "dataset": self.path, "vocab": self.vocab, "classes": self.class_names,
                "inputs": f"the file's {self._total} inputs of length <= {self.N} ({self.file_lines} lines)",
                "answer": "at every position" if self.per_position else "one",
                "dataset_sha256": self.sha256}  # the bytes it was built from: a verdict cache keys on them

    def _found(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row within its length, found) for a batch (B, n) of one length."""
        n = tokens.shape[1]
        if n not in self.by_length:
            return np.zeros(len(tokens), dtype=np.int64), np.zeros(len(tokens), dtype=bool)
        _, _, keys, order = self.by_length[n]
        view = _rows_view(tokens)
        at = np.minimum(np.searchsorted(keys, view), len(keys) - 1)
        return order[at], keys[at] == view

    def evaluate(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        tokens = np.asarray(tokens, dtype=np.int64)
        row, found = self._found(tokens)
        if not found.any():
            return np.zeros(tokens.shape if self.per_position else len(tokens), dtype=np.int64), found
        answers = self.by_length[tokens.shape[1]][1][row]
        return (answers if self.per_position else answers[:, 0]), found

    def batches(self, start: int, stop: int, batch_size) -> Iterator[Batch]:
        size_of = batch_size if callable(batch_size) else (lambda L: batch_size)
        for n in self.lengths:
            tokens, answers, _, _ = self.by_length[n]
            lo, hi = max(start, self.offsets[n]), min(stop, self.offsets[n] + len(tokens))
            for a in range(lo, hi, size_of(n)):
                b = min(a + size_of(n), hi)
                r = np.arange(a, b) - self.offsets[n]
                yield Batch(tokens[r], answers[r] if self.per_position else answers[r, 0], np.arange(a, b))

    def decode(self, index: int) -> np.ndarray:
        if not 0 <= index < self._total:
            raise InputError(f"input index {index} is not in 0..{self._total - 1}")
        n = max(m for m in self.lengths if self.offsets[m] <= index)
        return self.by_length[n][0][index - self.offsets[n]].copy()

    def index_of(self, tokens) -> int:
        tokens = np.asarray([tokens], dtype=np.int64)
        row, found = self._found(tokens)
        if not found[0]:
            raise InputError(f"not an input of the dataset: {self.render(tokens[0])}")
        return self.offsets[tokens.shape[1]] + int(row[0])

    def cases(self) -> Iterator[Case]:
        for n in self.lengths:
            tokens, answers, _, _ = self.by_length[n]
            for r in range(len(tokens)):
                truth = [int(a) for a in answers[r]]
                yield Case(f"input {self.offsets[n] + r}", [np.array([t]) for t in tokens[r]],
                           (lambda S, t=truth: [S.const(a) for a in t]) if self.per_position else
                           (lambda S, a=truth[0]: S.const(a)), self.offsets[n] + r, 1)

    def answer_name(self, answer: int) -> str:
        return self.class_names[answer] if 0 <= answer < self.num_classes else f"<{answer}>"


def _read_dataset(text: str, path: Path, ids: dict[str, int], vocab: list[str]) -> tuple[dict, set, int]:
    """(token ids -> answer names, whether lines have 'answers', non-empty lines) of a dataset file's text."""
    rows: dict[tuple[int, ...], Any] = {}
    kinds, lines = set(), 0
    for no, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        lines += 1
        where = f"dataset file {path}, line {no}"
        item = parse_json(line, where)
        if not isinstance(item, dict) or "input" not in item or len(item) != 2 or \
                not ({"answer", "answers"} & set(item)):
            raise InputError(f"{where}: expected {{\"input\": [...], \"answer\": ...}} or "
                             f"{{\"input\": [...], \"answers\": [...]}}")
        tokens = item["input"]
        if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) and t in ids
                                                                  for t in tokens):
            raise InputError(f"{where}: input must be a non-empty list of tokens of --vocab "
                             f"({','.join(vocab)}), got {tokens!r}")
        kinds.add("answers" in item)
        if "answers" in item:
            if not isinstance(item["answers"], list) or len(item["answers"]) != len(tokens):
                raise InputError(f"{where}: answers must be a list with one answer per input token")
            names = tuple(None if a is None else answer_name(a, where) for a in item["answers"])
        else:
            names = (answer_name(item["answer"], where),)
        key = tuple(ids[t] for t in tokens)
        if rows.get(key, names) != names:
            raise InputError(f"{where}: the input {' '.join(tokens)} is in the file with another answer")
        rows[key] = names
    if len(kinds) > 1:
        raise InputError(f"dataset file {path} mixes 'answer' and 'answers' lines: one kind per file")
    return rows, kinds, lines


def _rows_view(tokens: np.ndarray) -> np.ndarray:
    """Each row of an int64 array as one comparable value (sortable, searchable)."""
    t = np.ascontiguousarray(tokens, dtype=np.int64)
    return t.view(np.dtype((np.void, 8 * t.shape[1]))).reshape(-1)
