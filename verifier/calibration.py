"""Calibration of int8 activation scales: the range of every tensor of the float64 model over a
task's inputs, as post-training static quantization does it (`int8.Int8Arith` reads the result).

It runs the evaluator, so it sits above the numbers layer where `int8` is."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .arithmetic import Real
from .evaluator import make_evaluator
from .int8 import Int8Arith, TensorQuant, activation_names, choose_params, graph
from .model import Model
from .result import count_text
from .support.errors import InputError

CALIBRATION_CAP = 1 << 16  # inputs: beyond, the first CALIBRATION_CAP in enumeration order


@dataclass(frozen=True)
class _Calibrating(Real):
    """The float64 model, recording the range of every operation's output by the tensor it writes."""

    ops: dict = field(default_factory=dict, compare=False)
    seen: dict = field(default_factory=dict, compare=False)

    def _see(self, name: str, y: np.ndarray, present: Optional[np.ndarray] = None) -> np.ndarray:
        vals = y if present is None else y[np.broadcast_to(present, y.shape)]
        if vals.size:
            key = self.ops[name].output
            lo, hi = self.seen.get(key, (math.inf, -math.inf))
            self.seen[key] = (min(lo, float(vals.min())), max(hi, float(vals.max())))
        return y

    def lin(self, W, x, b, ctx, name):
        return self._see(name, super().lin(W, x, b, ctx, name))

    def lin_gathered(self, Wg, xg, b, ctx, name):
        return self._see(name, super().lin_gathered(Wg, xg, b, ctx, name))

    def scores(self, q, k, ctx, name, mask=None):
        return self._see(name, super().scores(q, k, ctx, name), mask)

    def mix(self, w, v, ctx, name):
        return self._see(name, super().mix(w, v, ctx, name))

    def add(self, x, y, ctx, name):
        return self._see(name, super().add(x, y, ctx, name))

    def mean_heads(self, outs, ctx, name):
        return self._see(name, super().mean_heads(outs, ctx, name))


def calibrate(model: Model, task) -> tuple[dict[str, TensorQuant], str]:
    """Per activation tensor, the parameters of its range over the float64 model on the task's
    inputs (all of them, or the first CALIBRATION_CAP): (params, what was calibrated on)."""
    arith = _Calibrating(graph(model))
    ev = make_evaluator(model, arith, tables=False)
    total = task.total
    stop = min(total, CALIBRATION_CAP)
    with np.errstate(all="ignore"):  # a float64 overflow is refused below
        for batch in task.batches(0, stop, ev.batch_size):
            if len(batch.tokens):
                ev.forward(batch.tokens)
    wild = next((k for k, (lo, hi) in arith.seen.items() if not (math.isfinite(lo) and math.isfinite(hi))), None)
    if wild is not None:
        raise InputError(f"int8: tensor {wild} of the float64 model is not finite on the calibration inputs; it has "
                         f"no int8 range (give its scales in the model file)")
    acts = {name: choose_params(*arith.seen.get(name, (0.0, 0.0))) for name in activation_names(model)}
    which = (f"all {count_text(total)} inputs of the task" if stop == total
             else f"the first {stop:,} of {count_text(total)} inputs")
    return acts, f"calibrated: min/max of the float64 model over {which}, widened to include 0"


def bind(arith: Int8Arith, model, task) -> Int8Arith:
    """`arith` bound to `model`: the scales of its quantization member (a model file's), or else
    calibrated on `task`'s inputs."""
    if isinstance(model, Model) and model.quantization is None:
        return arith.bind(model, *calibrate(model, task))
    return arith.bind(model)
