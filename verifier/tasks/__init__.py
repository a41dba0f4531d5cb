"""Tasks by name.  The CLI name `idxl` is an alias of `index_lookup`."""

from __future__ import annotations

from ..errors import InputError
from .base import Batch, Case, Task
from .index_lookup import IndexLookup

TASKS = {"index_lookup": IndexLookup}
ALIASES = {"idxl": "index_lookup"}


def canonical(name: str) -> str:
    name = ALIASES.get(name, name)
    if name not in TASKS:
        known = ", ".join(sorted(list(TASKS) + list(ALIASES)))
        raise InputError(f"unknown task {name!r}; known tasks: {known}")
    return name


def make_task(name: str, **params) -> Task:
    return TASKS[canonical(name)](**params)


__all__ = ["Batch", "Case", "Task", "IndexLookup", "TASKS", "make_task", "canonical"]
