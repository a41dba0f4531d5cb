"""Which formats prove a task: one verdict per (N, format), formats in the order given, and the
counterexample of each format that fails (``verify sweep TASK --N 2..16 --format bf16,fp16,e4m3,e5m2``);
the smallest format that proves, and the counterexample of the one just below it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from ..arithmetic import Format, parse_format
from ..model import Model, Recurrent
from ..result import Result, count_text
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
    bits: dict[str, int] = field(default_factory=dict)  # each format's bits per stored number

    @property
    def ladder(self) -> list[str]:
        """The formats from the cheapest: fewer bits per stored number first, ties in the order given."""
        return sorted(self.formats, key=lambda f: self.bits.get(f, 0))

    def smallest(self, N: int, among: Optional[Sequence[str]] = None) -> tuple[Optional[str], Optional[str]]:
        """The cheapest format (of `among`, default all) that proves at N and the format just below it
        on the ladder, whose run holds its counterexample (None: it is the cheapest).  Undecided when
        a cheaper run ended unknown: None and that format (its run holds its coverage); when none
        proves: None and the top of the ladder."""
        ladder = [f for f in self.ladder if (N, f) in self.results and (among is None or f in among)]
        for i, f in enumerate(ladder):
            verdict = self.results[N, f].verdict
            if verdict == "proved":
                return f, ladder[i - 1] if i else None
            if verdict != "refuted":
                return None, f
        return None, ladder[-1] if ladder else None

    @property
    def Ns(self) -> list[int]:
        return sorted({N for N, _ in self.results})

    def proving(self, N: int) -> list[str]:
        return [f for f in self.formats if (N, f) in self.results and self.results[N, f].verdict == "proved"]

    def label(self, N: int) -> str:
        """The smallest format at N as a table shows it (`smallest_label`)."""
        smallest, below = self.smallest(N)
        return smallest_label(smallest, self.results[N, below].verdict if below else None)

    def smallest_line(self, N: int) -> str:
        """The smallest format at N and what the format just below it did: its counterexample (replayed)
        or, when it ended unknown, its coverage."""
        smallest, below = self.smallest(N)
        if below is None:
            assert smallest is not None  # nothing below it: the cheapest format given proves
            return f"N={N}: smallest {smallest} ({self.bits[smallest]} bits), the cheapest format given"
        then = f"{below} ({self.bits[below]} bits): {outcome(self.results[N, below])}"
        if smallest is not None:
            return f"N={N}: smallest {smallest} ({self.bits[smallest]} bits); just below it, {then}"
        if self.results[N, below].verdict == "refuted":
            return f"N={N}: none of the formats given proves; the largest, {then}"
        return f"N={N}: smallest undecided: a cheaper run ended unknown, {then}"

    def lines(self) -> list[str]:
        """The verdict of every (N, format) with the smallest format by N; at each N the smallest format
        and the counterexample just below it, then the counterexamples of the other formats that fail."""
        widths = [max(len(f), 7) for f in self.formats]  # 7: "refuted"
        out = [f"formats for {self.task} (verdict per N and format; smallest: the fewest bits per number that "
               f"proves, ties in the order given; the arithmetic of each run: --json)",
               f"{'N':>6}  " + "  ".join(f"{f:<{w}}" for f, w in zip(self.formats, widths)) + "  smallest"]
        for N in self.Ns:
            cells = [self.results[N, f].verdict if (N, f) in self.results else "-" for f in self.formats]
            out.append(f"{N:>6}  " + "  ".join(f"{c:<{w}}" for c, w in zip(cells, widths))
                       + f"  {self.label(N)}")
        for N in self.Ns:
            out.append(self.smallest_line(N))
            below = self.smallest(N)[1]
            out += [f"N={N} {f}: {self.results[N, f].counterexamples[0].line()}" for f in self.formats
                    if f != below and (N, f) in self.results and self.results[N, f].counterexamples]
        return out

    def to_json(self) -> dict:
        """Every run, and at each N the smallest format and the format just below it (None: the
        cheapest proves) with its counterexample (None: it ended unknown; its run has its coverage)."""
        smallest = []
        for N in self.Ns:
            f, below = self.smallest(N)
            found = self.results[N, below].counterexamples if below else []
            smallest.append({"N": N, "smallest": f, "label": self.label(N), "below": below,
                             "counterexample": found[0].line() if found else None})
        return {"task": self.task, "formats": self.formats, "bits": self.bits, "smallest": smallest,
                "runs": [{"N": N, "format": f, **r.to_json()} for (N, f), r in self.results.items()]}

    @property
    def exit_code(self) -> int:
        """0 when every run finished with a verdict, 3 when one is unknown."""
        return 3 if any(r.verdict == "unknown" for r in self.results.values()) else 0


def smallest_label(smallest: Optional[str], below_verdict: Optional[str]) -> str:
    """A smallest format (`FormatTable.smallest`) in a table: its name; ? when it is undecided (a cheaper
    run ended unknown); none when no format proves."""
    return smallest or ("none" if below_verdict == "refuted" else "?")


def outcome(r: Result) -> str:
    """What a run that did not prove found: its first counterexample, or its coverage."""
    if r.counterexamples:
        return r.counterexamples[0].line()
    return (f"{r.verdict} ({count_text(r.covered)} of {count_text(r.total)} inputs covered"
            f"{f'; {r.reason}' if r.reason else ''})")


def format_table(task: "str | Task", Ns: list[int], formats: "Sequence[str] | Mapping[str, str | Format]",
                 *, model: Optional[Model | Recurrent] = None, engine: str = "auto", timeout: Optional[float] = None,
                 p: Optional[int] = None, **problem) -> FormatTable:
    """Decide the task (the built-in construction, or `model`) at every N of `Ns` in every format of
    `formats`: names as --format takes them, or a map from a column's name to a name or a format
    object (FX(16, 8) beside bf16, say); all are parsed before any run.  `p`: the bits of a column
    named fx (given to it alone); `timeout`: seconds for each run; `problem`: `api.build_problem`'s
    other arguments."""
    if not formats:
        raise InputError("give at least one format")
    given = dict(formats) if isinstance(formats, Mapping) else {f: f for f in formats}
    for f in given.values():
        if isinstance(f, str):
            parse_format(f)
    table = FormatTable(task if isinstance(task, str) else task.name, list(given))
    for N in Ns:
        for name, f in given.items():
            deadline = Deadline(timeout)
            with deadline.enforced():
                built = api.build_problem(task, N=N if isinstance(task, str) else None, arith=f, model=model,
                                          p=p if isinstance(f, str) and parse_format(f)[0] == "fx" else None,
                                          **problem)
            table.bits[name] = built.arith.bits
            table.results[N, name] = api.run(built, engine, deadline=deadline)
    return table
