"""Tracr-compiled RASP programs as model files, with the RASP evaluator as the ground truth.

Tracr (Lindner et al. 2023, arXiv:2301.05062) compiles a RASP program into the weights of a
transformer: one-hot embeddings of the token and the position, attention and MLP blocks with
residual connections, no LayerNorm, ReLU MLPs, and a readout that takes the argmax over the
program's output space at every position after a BOS token.  `compile_program` converts the
assembled model into a `Model`:

* ``E`` is Tracr's token embedding, rows in the order of the user's vocabulary, BOS last (the pad
  token is dropped: no input holds it); ``P`` its position embedding (BOS at position 0).
* Each layer's attention: Tracr scales logits by 1/sqrt(key_size); that factor is folded into
  ``W_Q`` and ``b_Q`` (in float64, before quantization).  Heads are concatenated into ``W_O``, as
  Tracr's ``linear`` reads them.  Biases are kept when some are not zero.
* The MLP is ``W2 ReLU(W1 x + b1) + b2`` (Tracr's MLPs use ReLU and its layers no LayerNorm).
* The readout is the projection of the residual stream onto the output space, one row per output
  value, named by the value (``readout.rows``), read at every position after BOS.

The ground truth is the RASP evaluator's own output (``rasp.evaluate``), over every string of
the vocabulary up to ``max_len``; a string on which the evaluator raises (a program defined on
part of the strings: ``make_sort_unique`` on repeated keys) is not an input of the task.  Before
any fixed-point check the conversion is cross-checked: the converted model's float64 forward
pass must give Tracr's own readout scores (``apply``, in float64) on random inputs to 1e-6.

Tracr is an optional dependency (``pip install -e '.[tracr]'``); nothing else imports this module.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..evaluator import reference
from ..model import Head, Layer, Model, Readout
from ..support import usercode
from ..support.errors import InputError, InternalError
from ..tasks.base import split_path
from ..tasks.user import ReferenceTask, answer_name, load_attribute

BOS = "BOS"
PAD = "compiler_pad"  # Tracr's pad token (compiling.COMPILER_PAD)
ROUND_TRIP_TOLERANCE = 1e-6
ROUND_TRIP_INPUTS = 8


def _tracr():
    try:
        import jax
        from tracr.compiler import compiling, lib
        from tracr.rasp import rasp
    except ImportError:
        raise InputError("verify tracr needs Tracr: pip install -e '.[tracr]' (tracr-pypi)") from None
    jax.config.update("jax_enable_x64", True)  # the round trip compares float64 with float64
    return compiling, lib, rasp


@dataclass
class Compiled:
    """A compiled program: the model, the task (RASP's answers), and what was compiled."""

    model: Model
    task: ReferenceTask
    program: str
    round_trip_error: float  # the largest |score difference| against Tracr's forward pass


def load_program(spec: str):
    """``lib:make_length`` (Tracr's library; SOp arguments get ``rasp.tokens``) or
    ``path/to/program.py[:name]`` (a RASP SOp, or a function of no arguments that returns one;
    the name defaults to ``program``)."""
    _, lib, rasp = _tracr()
    if spec.startswith("lib:"):
        name = spec[4:]
        fn = getattr(lib, name, None)
        if not name.startswith("make_") or not callable(fn):
            known = ", ".join(n for n in dir(lib) if n.startswith("make_"))
            raise InputError(f"Tracr's library has no program {name!r}; it has {known}")
        params = inspect.signature(fn).parameters.values()
        if any(p.kind is p.VAR_POSITIONAL or (p.default is p.empty and p.annotation not in (rasp.SOp, "rasp.SOp"))
               for p in params):
            raise InputError(f"lib:{name} takes arguments other than SOps ({', '.join(p.name for p in params)}); "
                             f"write a program file that calls it")
        program = fn(*(rasp.tokens for p in params if p.default is p.empty))
    else:
        where = spec if split_path(spec)[1] else f"{spec}:program"
        program = load_attribute(where, "the program")
        if not isinstance(program, rasp.SOp) and callable(program):
            program = program()
    if not isinstance(program, rasp.SOp):
        raise InputError(f"{spec} is not a RASP SOp (got {type(program).__name__})")
    return program


def compile_program(spec: str, vocab: list[str], max_len: int, *, causal: bool = False,
                    mlp_exactness: int = 100, seed: int = 0) -> Compiled:
    """Compile the RASP program `spec` (`load_program`) for `vocab` and inputs up to `max_len`, and
    convert it (module docstring).

    The program is the user's code, and JAX's threads must not be in a process that forks (the
    engines fork their workers): both run in a child process (`verifier.support.usercode.call`), which the
    program can neither end nor stall past the deadline of `usercode.time_limit`."""
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise InputError(f"--max-len must be an integer >= 1, got {max_len!r}")
    if BOS in vocab or PAD in vocab:
        raise InputError(f"the vocabulary may not hold {BOS} or {PAD} (Tracr's own tokens)")
    return usercode.call(_compile, (spec, list(vocab), max_len, causal, mlp_exactness, seed),
                         f"the Tracr program {spec}")


def _compile(spec: str, vocab: list[str], max_len: int, causal: bool, mlp_exactness: int, seed: int) -> Compiled:
    compiling, _, rasp = _tracr()
    program = load_program(spec)
    try:
        assembled = compiling.compile_rasp_to_model(program, vocab=set(vocab), max_seq_len=max_len, causal=causal,
                                                    compiler_bos=BOS, compiler_pad=PAD, mlp_exactness=mlp_exactness)
    except (NotImplementedError, ValueError, KeyError) as exc:
        raise InputError(f"Tracr cannot compile {spec}: {type(exc).__name__}: {exc}") from None
    model = _convert(assembled, program, vocab, spec, causal, mlp_exactness)

    def truth(words: list[str]) -> Optional[list]:
        try:
            return rasp.evaluate(program, words)
        except (ValueError, TypeError, ZeroDivisionError):  # the program is not defined on this string
            return None

    truth.__qualname__ = f"rasp.evaluate({spec})"
    task = ReferenceTask(N=max_len, reference=truth, vocab=list(vocab))
    error = _round_trip(assembled, model, vocab, max_len, seed)
    return Compiled(model, task, spec, error)


def _convert(assembled, program, vocab: list[str], spec: str, causal: bool, exactness: int) -> Model:
    cfg, params = assembled.model_config, {k: {n: np.asarray(a, dtype=np.float64) for n, a in v.items()}
                                           for k, v in assembled.params.items()}
    if not hasattr(assembled.output_encoder, "encoding_map"):
        raise InputError(f"{spec} has a numerical output; only categorical programs (an argmax over the output "
                         f"values) have answers to verify")
    enc = assembled.input_encoder.encoding_map
    E = params["token_embed"]["embeddings"][[enc[t] for t in vocab] + [enc[BOS]]]
    P = params["pos_embed"]["embeddings"]
    H, ks = cfg.num_heads, cfg.key_size
    scale = 1.0 / math.sqrt(ks)
    layers = []
    for li in range(cfg.num_layers):
        at = lambda block, li=li: params[f"transformer/layer_{li}/{block}"]
        q, k, v, o = at("attn/query"), at("attn/key"), at("attn/value"), at("attn/linear")
        biases = any(np.any(a["b"] != 0) for a in (q, k, v, o))
        heads = []
        for h in range(H):
            cols = slice(h * ks, (h + 1) * ks)
            maps = dict(W_Q=q["w"][:, cols].T * scale, W_K=k["w"][:, cols].T, W_V=v["w"][:, cols].T)
            if biases:
                maps.update(b_Q=q["b"][cols] * scale, b_K=k["b"][cols], b_V=v["b"][cols])
            heads.append(Head(**maps))
        mlp1, mlp2 = at("mlp/linear_1"), at("mlp/linear_2")
        layers.append(Layer(heads, o["w"].T, "softmax", residual=True, causal=causal, W1=mlp1["w"].T,
                            b1=mlp1["b"], W2=mlp2["w"].T, b2=mlp2["b"], b_O=o["b"] if biases else None))
    out = assembled.output_encoder.encoding_map  # value -> index in the output space
    labels = {name: i for i, name in enumerate(assembled.residual_labels)}
    values = sorted(out, key=out.get)
    W_U = np.zeros((len(values), E.shape[1]))
    for r, value in enumerate(values):
        W_U[r, labels[f"{program.label}:{value}"]] = 1.0
    rows = [answer_name(value, f"{spec}'s output value") for value in values]
    info = {"construction": f"Tracr-compiled {spec}", "compiler": "tracr", "program": spec,
            "max_len": P.shape[0] - 1, "mlp_exactness": exactness, "causal": causal}
    model = Model(E=E, P=P, P_mask=np.ones(len(E), dtype=bool), layers=layers,
                  readout=Readout(W_U, np.zeros(len(values)), "argmax", positions="all", rows=rows),
                  vocab=list(vocab) + [BOS], info=info, bos=BOS)
    model.validate()
    return model


def _round_trip(assembled, model: Model, vocab: list[str], max_len: int, seed: int) -> float:
    """The largest difference between the converted model's float64 readout scores and Tracr's own,
    on random inputs of every length; more than `ROUND_TRIP_TOLERANCE` is an internal error."""
    rng = np.random.default_rng(seed)
    ours = reference(model)
    cols = [int(np.flatnonzero(row)[0]) for row in model.readout.W_U]
    worst = 0.0
    for i in range(ROUND_TRIP_INPUTS):
        ids = rng.integers(0, len(vocab), 1 + i % max_len)
        theirs = np.asarray(assembled.apply([BOS] + [vocab[t] for t in ids]).transformer_output,
                            dtype=np.float64)[0, 1:][:, cols]
        mine = ours.arith.to_real(ours.forward(np.concatenate([[len(vocab)], ids])[None, :]).scores)[0]  # BOS last id
        worst = max(worst, float(np.abs(mine - theirs).max()))
    if not worst <= ROUND_TRIP_TOLERANCE:
        raise InternalError(f"the converted Tracr model differs from Tracr's forward pass by {worst:.3g} "
                            f"(more than {ROUND_TRIP_TOLERANCE:g}) in float64")
    return worst
