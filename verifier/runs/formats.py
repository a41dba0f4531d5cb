"""Which formats prove a task: one verdict per (N, format), formats in the order given, and the
counterexample of each format that fails (``verify sweep TASK --N 2..16 --format bf16,fp16,e4m3,e5m2``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..arithmetic import parse_format
from ..model import Model, Recurrent
from ..result import Result
from ..support.budget import Deadline
from ..support.errors import InputError
from ..tasks import Task
from . import api


@dataclass
class FormatTable:
    """The verdict of every (N, format), and the runs behind them."""

    task: str
    formats: list[str]
    results: dict[tuple[int, str], Result] = field(default_factory=dict)

    @property
    def Ns(self) -> list[int]:
        return sorted({N for N, _ in self.results})

    def proving(self, N: int) -> list[str]:
        return [f for f in self.formats if (N, f) in self.results and self.results[N, f].verdict == "proved"]

    def lines(self) -> list[str]:
        widths = [max(len(f), 7) for f in self.formats]  # 7: "refuted"
        out = [f"formats for {self.task} (verdict per N and format; the arithmetic of each run: --json)",
               f"{'N':>6}  " + "  ".join(f"{f:<{w}}" for f, w in zip(self.formats, widths)).rstrip()]
        for N in self.Ns:
            cells = [self.results[N, f].verdict if (N, f) in self.results else "-" for f in self.formats]
            out.append(f"{N:>6}  " + "  ".join(f"{c:<{w}}" for c, w in zip(cells, widths)).rstrip())
        for (N, f), r in sorted(self.results.items(), key=lambda kv: (kv[0][0], self.formats.index(kv[0][1]))):
            if r.counterexamples:
                out.append(f"N={N} {f}: {r.counterexamples[0].line()}")
        return out

    def to_json(self) -> dict:
        return {"task": self.task, "formats": self.formats,
                "runs": [{"N": N, "format": f, **r.to_json()} for (N, f), r in self.results.items()]}

    @property
    def exit_code(self) -> int:
        """0 when every run finished with a verdict, 3 when one is unknown."""
        return 3 if any(r.verdict == "unknown" for r in self.results.values()) else 0


def format_table(task: "str | Task", Ns: list[int], formats: list[str], *, model: Optional[Model | Recurrent] = None,
                 engine: str = "auto", timeout: Optional[float] = None, p: Optional[int] = None,
                 **problem) -> FormatTable:
    """Decide the task (the built-in construction, or `model`) at every N of `Ns` in every format of
    `formats` (names as --format takes them; all are parsed before any run).  `p`: the bits of
    `fx` (given to fx alone); `timeout`: seconds for each run; `problem`: `api.build_problem`'s
    other arguments."""
    if not formats:
        raise InputError("give at least one format")
    for f in formats:
        parse_format(f)
    name = task if isinstance(task, str) else task.name
    table = FormatTable(name, list(formats))
    for N in Ns:
        for f in formats:
            deadline = Deadline(timeout)
            with deadline.enforced():
                built = api.build_problem(task, N=N if isinstance(task, str) else None, arith=f, model=model,
                                          p=p if parse_format(f)[0] == "fx" else None, **problem)
            table.results[N, f] = api.run(built, engine, deadline=deadline)
    return table
