"""Tasks by name.  The CLI name `idxl` is an alias of `index_lookup`."""

from __future__ import annotations

from ..support.errors import InputError
from .base import Batch, Case, Task, TaskOption, Vocabulary, flag
from .boolean import Disjointness, Equality, SparseThreshold
from .composition import Composition
from .icqa import Icqa
from .ictm import Ictm
from .index_lookup import IndexLookup
from .memorization import Memorization
from .nearest_neighbour import Mqar, NearestNeighbour
from .sequences import Dyck22, InductionHeads
from .templates import TemplateMatching
from .user import DatasetTask, ReferenceTask

TASKS: dict[str, type[Vocabulary]] = {"index_lookup": IndexLookup, "equality": Equality, "disjointness": Disjointness,
         "sparse_threshold": SparseThreshold, "nearest_neighbour": NearestNeighbour, "mqar": Mqar,
         "memorization": Memorization, "icqa": Icqa, "template_matching": TemplateMatching,
         "ictm": Ictm, "induction_heads": InductionHeads, "dyck22": Dyck22,
         "composition": Composition, "reference": ReferenceTask, "dataset": DatasetTask}
ALIASES = {"idxl": "index_lookup"}


def canonical(name: str) -> str:
    name = ALIASES.get(name, name)
    if name not in TASKS:
        known = ", ".join(sorted(list(TASKS) + list(ALIASES)))
        raise InputError(f"unknown task {name!r}; known tasks: {known}")
    return name


def task_options(name: str) -> tuple[TaskOption, ...]:
    return TASKS[canonical(name)].OPTIONS


def make_task(name: str, N: int, **params) -> Task:
    """The task at size N; `params` are its options (None: the default)."""
    name = canonical(name)
    known = {o.name for o in task_options(name)}
    given = {k: v for k, v in params.items() if v is not None}
    wrong = sorted(set(given) - known)
    if wrong:
        raise InputError(f"{name} has no option {', '.join(map(flag, wrong))}"
                         + (f" (its options: {', '.join(map(flag, sorted(known)))})" if known else ""))
    return TASKS[name](N=N, **given)


__all__ = ["Batch", "Case", "Task", "TaskOption", "IndexLookup", "Equality", "SparseThreshold", "Disjointness",
           "NearestNeighbour", "Mqar", "Memorization", "Icqa", "TemplateMatching", "Ictm", "InductionHeads", "Dyck22",
           "Composition", "ReferenceTask", "DatasetTask", "TASKS", "make_task", "canonical", "task_options", "flag"]
