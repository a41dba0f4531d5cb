"""The words of a verdict, defined once: the verdict, how far a run went, why an input fails.
StrEnums, so a member is its string: JSON, comparisons with "proved" and f-strings are unchanged."""

from __future__ import annotations

from enum import StrEnum


class Verdict(StrEnum):
    PROVED = "proved"
    REFUTED = "refuted"
    UNKNOWN = "unknown"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self]


EXIT_CODES = {Verdict.PROVED: 0, Verdict.REFUTED: 1, Verdict.UNKNOWN: 3}


class Status(StrEnum):
    """How far a run went over the inputs it was given."""

    COMPLETE = "complete"
    PARTIAL = "partial"  # complete over a range, not the whole enumeration
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    INCOMPLETE = "incomplete"  # a solver answered unknown


class Reason(StrEnum):
    """Why a failing input fails."""

    WRONG = "wrong"
    TIE = "tie"
    OVERFLOW = "overflow"
