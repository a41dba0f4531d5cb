"""verify: a finite-precision verifier for hand-constructed transformer weights.

    >>> import verifier
    >>> result = verifier.prove("idxl", N=4, p=8)
    >>> result.verdict
    'proved'
    >>> verifier.prove("equality", N=6, arith="b2:2", variant="paper").verdict  # Bhattamishra et al.'s B.2 grid
    'proved'
"""

from .arithmetic import Fixed, FixedPoint, Grid, Real, make_format
from .evaluator import Evaluator, reference, trace
from .model import Head, Layer, Model, Readout
from .modelfile import load_model, save_model
from .refute.count import ErrorCount, count_errors
from .result import Counterexample, Result
from .runs.api import Traced, build_problem, check_compatible, explain, prove, replay, run
from .support.errors import InputError, InternalError

__all__ = ["Traced", "explain", "build_problem", "check_compatible", "prove", "replay", "run", "Fixed", "FixedPoint",
           "Grid", "Real", "make_format", "InputError",
           "InternalError", "Evaluator", "reference", "trace", "Head", "Layer", "Model", "Readout", "load_model",
           "save_model", "Counterexample", "Result", "ErrorCount", "count_errors"]
