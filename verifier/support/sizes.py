"""What building a task or a construction costs, stated from its sizes before anything is built.

Every task and every built-in construction states its `Cost` from its size parameters alone (N, the
task's options, k), in closed form: the tokens of its vocabulary, the parameters of its model, and
the memory its tables take.  `Cost.admit` refuses, with one line and before any work, what cannot
fit this machine (`budget.require_memory`: 80% of the memory available) or exceeds a documented
limit:

* MAX_TOKENS: at most 2^16 tokens in a task's vocabulary.  The verifier works per token: the
  evaluator's layer-0 tables hold a row per (position, token), a symbolic engine branches on a
  position's tokens, and a construction's embedding has a row per token.  At 10^6 symbols an index
  lookup builds for minutes and then cannot be decided; the limit refuses it at once.

The estimates are coarse (within a small factor) and never measured by trying: they exist to refuse
the impossible with one clear line instead of an out-of-memory kill or a run that only ends by its
timeout, not to predict the peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from .budget import require_memory
from .errors import InputError

MAX_TOKENS = 1 << 16
PARAMETER_BYTES = 32  # a weight: float64, an exact (object) entry where the recipe is rational, int64 codes, a copy


@dataclass(frozen=True)
class Cost:
    """What building `what` takes: bytes of memory at the peak, tokens, model parameters."""

    what: str
    memory: float = 0.0
    tokens: int = 0
    parameters: float = 0.0

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.what, self.memory + other.memory, max(self.tokens, other.tokens),
                    self.parameters + other.parameters)

    def admit(self) -> "Cost":
        """This cost, if this machine can pay it; else InputError (one line), before any work."""
        require_memory(self.memory, self.what)
        if self.tokens > MAX_TOKENS:
            raise InputError(f"{self.what} has {self.tokens:,} tokens; the verifier takes at most {MAX_TOKENS:,} "
                             f"(it works per token: use a smaller vocabulary)")
        return self


def model_cost(what: str, d: int, rows: int, tokens: int = 0) -> Cost:
    """A model whose matrices have `rows` rows of width d in all."""
    parameters = float(d) * float(rows)
    return Cost(what, PARAMETER_BYTES * parameters, tokens, parameters)
