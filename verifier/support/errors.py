"""Error types. `InputError` is the user's fault (exit 2, one line); `InternalError` is ours."""


class InputError(ValueError):
    """Bad input from the user: an option, a model file, a spec. The CLI prints one line, exit 2."""


class InternalError(RuntimeError):
    """The verifier contradicted itself (for example a counterexample that does not replay).

    Never a verdict: the CLI reports it with exit 2.
    """


class UnbuildableError(InputError):
    """A construction variant that cannot be built as printed (the message says why)."""
