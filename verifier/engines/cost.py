"""What enumeration would cost, from the problem's sizes alone: auto's choice does not depend on
the machine's load (a timing of the evaluator did: the same run chose enumeration once and the
bounds engine, 19 minutes, another time).

The evaluator's work per input is counted as the elements its forward pass computes or gathers
(`work_per_input`, the same sizes `Evaluator.forward` loops over: the layer-0 tables of the first
layer, the non-zero columns each linear map reads, the positions each layer's queries read), and
seconds are

    members x (PER_POSITION x L + share x PER_ELEMENT x elements(L)) / workers

at the longest length L (most inputs have it), where `share` is the part of the enumeration's
members that are inputs (a task may filter a product space; counted on a few windows of members,
`input_share`), over the processes enumeration uses.  The two constants were fitted (least squares
on the relative error) to the CPU time of enumeration on the fourteen problems of
benchmarks/bench_cost_model.py, on this machine (2 cores, numpy 2, one process, other jobs running;
2026-11), and set at 1.5 times the fit, a margin toward enumerating less: the model was then within
0.3 .. 2.1 of the time measured, below it on a filtered space (MQAR, 0.5) and where the arrays
outgrow the caches (equality at N = 16, a 6,561-class memorization readout: 0.3).  The
benchmark prints the measured and modelled times and fits the constants again.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..arithmetic import Fixed
from ..evaluator import logit_table_fits
from ..model import Model, Recurrent
from .base import Problem, RunOptions
from .exhaustive import LIMIT, PARALLEL_ABOVE

PER_POSITION = 1.5e-7  # seconds per position of a member of the enumeration: drawing, filtering, judging it
PER_ELEMENT = 1.3e-8  # seconds per element of the forward pass (`work_per_input`) of an input
FLOAT_ELEMENTS = 4.0  # an element in a float format costs about 4 FX elements (benchmarks/bench_formats.py: 3.5 .. 4.2)
SOFTMAX_PASSES = 6  # a softmax weight costs about as many products (max, exp table, sum, quotient, rounding)
SAMPLE_WINDOWS, SAMPLE_MEMBERS = 4, 4096  # members drawn to count the share of inputs (`input_share`)


def products(W: np.ndarray) -> int:
    """Products of the linear map W for one vector: its non-zero rows times the columns they read
    (each row's own, when they are few: `Evaluator._plan`)."""
    nz = np.asarray(W != 0, dtype=bool)
    cols = int(nz.any(axis=0).sum())
    width = max(int(nz.sum(axis=1).max(initial=0)), 1)
    return int(nz.any(axis=1).sum()) * (width if width * 2 <= cols else cols)


def work_per_input(model: Model | Recurrent, L: int) -> float:
    """The elements of the forward pass of one input of length L (`Evaluator.forward`): the
    products of its linear maps, logits and mixes and the entries of its residual sums (each
    rounded or saturated), and the entries it reads from the layer-0 tables."""
    every = model.readout.positions == "all"
    readout = (L if every else 1) * products(model.readout.W_U)
    if isinstance(model, Recurrent):
        return L * (products(model.W) + model.d) + readout
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
                if logit_table_fits(rows * rows, m):  # at most: the table is over distinct rows
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
    return made + read + readout


def input_share(task, start: int, stop: int) -> float:
    """The share of the enumeration's members in start..stop that are inputs (a task may filter its
    product space: MQAR keeps a few percent), counted over SAMPLE_WINDOWS windows of SAMPLE_MEMBERS
    spread over the range: the members are drawn, not evaluated, so nothing is timed."""
    size = min(stop - start, SAMPLE_MEMBERS)
    if size <= 0:
        return 1.0
    starts = sorted({start + min(stop - start - size, (stop - start) * k // SAMPLE_WINDOWS)
                     for k in range(SAMPLE_WINDOWS)})
    inputs = sum(len(b.tokens) for a in starts for b in task.batches(a, a + size, size))
    return inputs / (size * len(starts))


def enumeration_seconds(problem: Problem, opts: RunOptions) -> float:
    """Enumeration's cost for the run's range, estimated from the sizes (module docstring)."""
    task = problem.task
    stop = task.total if opts.stop is None else opts.stop
    size = stop - opts.start
    if size > LIMIT:  # out of reach at any speed
        return math.inf
    L = task.max_len
    per_element = PER_ELEMENT * (1.0 if isinstance(problem.arith, Fixed) else FLOAT_ELEMENTS)
    per_member = PER_POSITION * L + input_share(task, opts.start, stop) * per_element * work_per_input(problem.model, L)
    workers = opts.workers or (min(2, os.cpu_count() or 1) if size > PARALLEL_ABOVE else 1)
    return size * per_member / workers
