"""verify: a finite-precision verifier for hand-constructed transformer weights.

    >>> import verifier
    >>> result = verifier.prove("idxl", N=4, p=8)
    >>> result.verdict
    'proved'
"""

from .api import Traced, build_problem, check_compatible, explain, prove, replay, run
from .arithmetic import FixedPoint, Real
from .count import ErrorCount, count_errors
from .errors import InputError, InternalError
from .evaluator import Evaluator, reference, trace
from .model import Head, Layer, Model, Readout, load_model, save_model
from .result import Counterexample, Result

__all__ = ["Traced", "explain", "build_problem", "check_compatible", "prove", "replay", "run", "FixedPoint", "Real", "InputError",
           "InternalError", "Evaluator", "reference", "trace", "Head", "Layer", "Model", "Readout", "load_model",
           "save_model", "Counterexample", "Result", "ErrorCount", "count_errors"]
