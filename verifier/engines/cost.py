"""What enumeration would cost, from the problem's sizes alone: auto's choice does not depend on
the machine's load (a timing of the evaluator did: the same run chose enumeration once and the
bounds engine, 19 minutes, another time).

The evaluator's work per input is counted as the products and gathers its forward pass makes
(`work_per_input`, the same sizes `Evaluator.forward` loops over: the layer-0 tables of the first
layer, the non-zero columns each linear map reads, the positions each layer's queries read), and
seconds are

    inputs x (PER_INPUT + PER_TOKEN x L + PER_READ x reads(L) + PER_PRODUCT x products(L)) / workers

at the longest length L (most inputs have it), over the processes enumeration uses.  The four
constants were fitted (least squares on the relative error, non-negative) to the CPU time of the
evaluator on the twelve problems of benchmarks/bench_cost_model.py, on this machine (2 cores,
numpy 2, one process; 2026-11): the model was within 0.45 .. 1.5 of the time measured on all but
one, a memorization task whose 6,561-class readout is memory-bound (0.12).  The benchmark prints
the measured and modelled times and fits the constants again.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..evaluator import _LOGIT_TABLE_LIMIT
from ..model import Model, Recurrent
from .base import Problem, RunOptions
from .exhaustive import LIMIT, PARALLEL_ABOVE

PER_INPUT = 1.1e-6  # seconds: drawing an input and its answer, judging it
PER_TOKEN = 2.7e-8  # seconds per position: the input's tokens and their table rows
PER_READ = 3.1e-9  # seconds per entry read from the layer-0 tables
PER_PRODUCT = 5.9e-9  # seconds per product of a linear map (rounded and saturated: several numpy passes)
SOFTMAX_PASSES = 6  # a softmax weight costs about as many products (max, exp table, sum, quotient, rounding)


def products(W: np.ndarray) -> int:
    """Products of the linear map W for one vector: its non-zero rows times the columns they read
    (each row's own, when they are few: `Evaluator._plan`)."""
    nz = np.asarray(W != 0, dtype=bool)
    cols = int(nz.any(axis=0).sum())
    width = max(int(nz.sum(axis=1).max(initial=0)), 1)
    return int(nz.any(axis=1).sum()) * (width if width * 2 <= cols else cols)


def work_per_input(model: Model | Recurrent, L: int) -> tuple[float, float]:
    """(products, reads) of the forward pass of one input of length L (`Evaluator.forward`): the
    products of its linear maps, logits and mixes and the entries of its residual sums (each
    rounded or saturated), and the entries it reads from the layer-0 tables."""
    every = model.readout.positions == "all"
    readout = (L if every else 1) * products(model.readout.W_U)
    if isinstance(model, Recurrent):
        return L * products(model.W) + readout, L * model.d
    made, read = 0.0, 0.0
    rows = len(model.vocab) * model.max_len  # the layer-0 tables' (position, token) rows
    for li, layer in enumerate(model.layers):
        Lq = 1 if li == len(model.layers) - 1 and not every else L
        if li == 0:
            read += Lq * model.d  # the embedding at the query positions
        for h in layer.heads:
            m, mv = h.W_Q.shape[0], h.W_V.shape[0]
            if li == 0:  # the values' rows, and the logits' (their table's when it is built)
                read += L * mv
                if rows * rows * max(m, 1) <= _LOGIT_TABLE_LIMIT:
                    read += Lq * L
                else:
                    read += (Lq + L) * m
                    made += Lq * L * m
            else:
                made += Lq * products(h.W_Q) + L * (products(h.W_K) + products(h.W_V)) + Lq * L * m
            made += Lq * L * (mv + (SOFTMAX_PASSES if layer.attention == "softmax" else 1))  # weights, mix
        made += Lq * (products(layer.W_O) + model.d * (1 + layer.has_ffn))  # and the residual sums, saturated
        if layer.has_ffn:
            made += Lq * (products(layer.W1) + products(layer.W2))
    return made + readout, read


def enumeration_seconds(problem: Problem, opts: RunOptions) -> float:
    """Enumeration's cost for the run's range, estimated from the sizes (module docstring)."""
    size = opts.size(problem.task.total)
    if size > LIMIT:  # out of reach at any speed
        return math.inf
    L = problem.task.max_len
    made, read = work_per_input(problem.model, L)
    per_input = PER_INPUT + PER_TOKEN * L + PER_READ * read + PER_PRODUCT * made
    workers = opts.workers or (min(2, os.cpu_count() or 1) if size > PARALLEL_ABOVE else 1)
    return size * per_input / workers
