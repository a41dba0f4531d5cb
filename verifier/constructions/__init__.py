"""Built-in constructions, by the task they solve."""

from __future__ import annotations

from . import index_lookup

# task name -> (builder, theorem); a builder takes the task's size parameters and its own options
CONSTRUCTIONS = {"index_lookup": (index_lookup.build, index_lookup.THEOREM)}

__all__ = ["CONSTRUCTIONS"]
