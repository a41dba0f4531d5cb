"""The ``.npz`` model file format (docs/model-format.md): `save_model`, and `load_model`, which
checks everything it reads (metadata against `META_SCHEMA`, every array's type, then every shape
with `Model.validate`) and raises an InputError with one clear line."""

from __future__ import annotations

import json
import re
import zipfile
from fractions import Fraction
from pathlib import Path

import numpy as np

from .int8 import check_params
from .model import (
    ATTENTIONS,
    READ_POSITIONS,
    READOUTS,
    Head,
    Layer,
    Model,
    Readout,
    Recurrent,
    exact_array,
    head_arrays,
    is_exact,
)
from .support.budget import require_memory
from .support.errors import InputError
from .support.files import new_file
from .support.schema import parse_json, regular_file, validate, zip_members

FORMAT_NAME = "verify-model"
FORMAT_VERSION = 2
FORMAT_VERSIONS = (1, 2, 3)  # version 1 files (no BOS, biases or named readout rows) keep loading
EXACT_VERSION = 3  # a file with exact rational weights (arrays NAME.exact, readout theta_exact)
EXACT_SUFFIX = ".exact"
_RATIONAL = re.compile(r"-?[0-9]+(/[1-9][0-9]*)?")
EXACT_INTEGERS = 1 << 53  # integer weights beyond this are not exact in float64

META_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "metadata of a verify model file (the JSON string array 'meta' of the .npz)",
    "type": "object",
    "additionalProperties": False,
    "required": ["format", "version", "vocab"],
    "properties": {
        "format": {"type": "string", "const": FORMAT_NAME},
        "version": {"type": "integer", "enum": list(FORMAT_VERSIONS)},
        "vocab": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"type": "string", "minLength": 1}},
        "bos": {"type": "string", "minLength": 1,
                "description": "version 2: a vocabulary token fixed at position 0 before every input"},
        "layers": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False, "required": ["heads"],
            "properties": {"heads": {"type": "integer", "minimum": 1},
                           "attention": {"type": "string", "enum": list(ATTENTIONS)},
                           "residual": {"type": "boolean"}, "causal": {"type": "boolean"},
                           "ffn": {"type": "boolean"},
                           "attention_biases": {"type": "boolean",
                                                "description": "version 2: arrays b_Q, b_K, b_V per head, b_O"},
                           "activation": {"type": "string", "description": "the FFN's: relu (gelu is refused)"},
                           "layer_norm": {"type": "boolean", "description": "must be false (fold it first)"}}}},
        "recurrent": {"type": "object", "additionalProperties": False, "required": ["hidden"],
                      "description": "an Elman network instead of layers: arrays R.U, R.W, R.b, R.h0",
                      "properties": {"hidden": {"type": "integer", "minimum": 1}}},
        "readout": {"type": "object", "additionalProperties": False, "required": ["kind"],
                    "properties": {"kind": {"type": "string", "enum": list(READOUTS)},
                                   "theta": {"type": "number"},
                                   "theta_exact": {"type": "string", "pattern": "^-?[0-9]+(/[1-9][0-9]*)?$",
                                                   "description": "version 3: theta as an exact "
                                                                  "rational p/q (theta is its float64 value)"},
                                   "positions": {"type": "string", "enum": list(READ_POSITIONS)},
                                   "rows": {"type": "array", "minItems": 1, "uniqueItems": True,
                                            "items": {"type": "string", "minLength": 1},
                                            "description": "version 2: a name per row of U.W; the task's "
                                                           "answers are the rows of their names"}}},
        "info": {"type": "object", "description": "free-form: the construction and its parameters"},
        "quantization": {
            "type": "object", "additionalProperties": False, "required": ["activations"],
            "description": "version 3: int8 activation scales and zero points, by tensor (docs/model-format.md)",
            "properties": {"activations": {"type": "object", "additionalProperties": {
                "type": "object", "additionalProperties": False, "required": ["scale", "zero_point"],
                "properties": {"scale": {"type": "number", "exclusiveMinimum": 0},
                               "zero_point": {"type": "integer", "minimum": -128, "maximum": 127}}}}}},
        "residual_rows": {"type": "array", "minItems": 1, "uniqueItems": True,
                          "items": {"type": "string", "minLength": 1},
                          "description": "version 3: a name per row of the residual stream (d names), "
                                         "shown in traces, dumps and reports"},
    },
}


def save_model(model: Model | Recurrent, path: str | Path, force: bool = False) -> Path:
    """Write the model as one .npz (docs/model-format.md).  Never overwrites an existing file, unless `force`."""
    path = Path(path)
    named = model.named_arrays()
    exact = {name for name, a in named.items() if is_exact(a)}
    theta = model.readout.theta
    meta = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "vocab": list(model.vocab), "info": model.info,
            "readout": {"kind": model.readout.kind, "theta": float(theta), "positions": model.readout.positions}}
    if isinstance(theta, Fraction):
        meta["readout"]["theta_exact"] = str(theta)
    if exact or isinstance(theta, Fraction):
        meta["version"] = EXACT_VERSION
    if model.readout.rows is not None:
        meta["readout"]["rows"] = list(model.readout.rows)
    if model.bos is not None:
        meta["bos"] = model.bos
    if model.residual_rows is not None:
        meta["residual_rows"] = list(model.residual_rows)
        meta["version"] = EXACT_VERSION
    quantization = getattr(model, "quantization", None)
    if quantization is not None:
        meta["quantization"] = {"activations": {k: {"scale": v.scale, "zero_point": v.zero_point}
                                                for k, v in quantization.items()}}
        meta["version"] = EXACT_VERSION
    if isinstance(model, Recurrent):
        meta["recurrent"] = {"hidden": model.d}
    else:
        meta["layers"] = [{"heads": len(l.heads), "attention": l.attention, "residual": bool(l.residual),
                           "causal": bool(l.causal), "ffn": l.has_ffn, **({"attention_biases": True}
                                                                        if l.has_biases else {})}
                          for l in model.layers]
    arrays = {name: np.asarray(a, dtype=np.float64) for name, a in named.items()}
    arrays.update({name + EXACT_SUFFIX: np.array([str(x) for x in named[name].ravel()]).reshape(named[name].shape)
                   for name in exact})
    if isinstance(model, Model):
        arrays["P_mask"] = np.asarray(model.P_mask, dtype=bool)
    arrays["meta"] = np.array(json.dumps(meta, allow_nan=False))
    with new_file(path, binary=True, force=force) as fh:
        np.savez(fh, **arrays)
    return path


def load_model(path: str | Path) -> Model | Recurrent:
    """Read and validate a model file; every problem is an InputError with one clear line.

    The metadata is checked against `META_SCHEMA`, every array's type strictly (real numbers only;
    P_mask boolean), then every shape (`Model.validate`).  The file's size is checked against
    the memory available before any array is read.
    """
    path = regular_file(path, "model file")
    source = f"model file {path}"
    try:
        require_memory(3 * sum(i.file_size for i in zip_members(path, source)), source)
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, zipfile.LargeZipFile):
        raise InputError(f"{source} is not a .npz file (not a zip archive)") from None
    except InputError:
        raise
    except Exception as exc:  # a truncated member, an object array (pickles are refused), ...
        raise InputError(f"{source} is not a readable .npz ({type(exc).__name__}: {exc})") from None
    if "meta" not in arrays:
        raise InputError(f"{source} has no 'meta' array (JSON metadata)")
    meta = validate(parse_json(_meta_text(arrays.pop("meta"), source), f"{source}: 'meta'"), META_SCHEMA,
                    f"{source}: meta")
    if ("layers" in meta) == ("recurrent" in meta):
        raise InputError(f"{source}: meta must have exactly one of 'layers' (a transformer) and 'recurrent'")
    _check_version_2(meta, source)
    known = {"U.W", "U.b"} | ({"R.U", "R.W", "R.b", "R.h0"} if "recurrent" in meta else {"E", "P", "P_mask"})

    def get(name: str, required: bool = True):
        known.add(name)
        if name not in arrays:
            if required:
                raise InputError(f"{source}: array '{name}' is missing")
            return None
        real = _real_array(arrays[name], name, source)
        if name + EXACT_SUFFIX not in arrays:
            return real
        known.add(name + EXACT_SUFFIX)
        if meta["version"] < EXACT_VERSION:
            raise InputError(f"{source}: array '{name}{EXACT_SUFFIX}' (exact rationals) needs \"version\": "
                             f"{EXACT_VERSION}")
        return _exact_array(arrays[name + EXACT_SUFFIX], real, name, source)

    layers = []
    for li, lm in enumerate(meta.get("layers", [])):
        biases = lm.get("attention_biases", False)
        heads = [Head(**{k: get(f"L{li}.H{hi}.{k}") for k in head_arrays(biases)}) for hi in range(lm["heads"])]
        ffn = {k: get(f"L{li}.{k}") for k in ("W1", "b1", "W2", "b2")} if lm.get("ffn", False) else {}
        if biases:
            ffn["b_O"] = get(f"L{li}.b_O")
        layers.append(Layer(heads=heads, W_O=get(f"L{li}.W_O"), attention=lm.get("attention", "softmax"),
                            residual=lm.get("residual", True), causal=lm.get("causal", False), **ffn))
    ro = meta.get("readout", {"kind": "argmax"})
    theta = ro.get("theta", 0.0)
    if "theta_exact" in ro:
        theta = Fraction(ro["theta_exact"])
        if float(theta) != ro.get("theta"):
            raise InputError(f"{source}: readout theta {ro.get('theta')!r} is not the float64 value of theta_exact "
                             f"{ro['theta_exact']}")
    readout = Readout(get("U.W"), get("U.b"), ro["kind"], theta, ro.get("positions", "last"), ro.get("rows"))
    vocab, info = list(meta["vocab"]), dict(meta.get("info", {}))
    if "recurrent" in meta:
        recurrent = [get(name) for name in ("R.U", "R.W", "R.b", "R.h0")]
    else:
        E, P = get("E"), get("P")
    unexpected = sorted(set(arrays) - known)
    if unexpected:
        raise InputError(f"{source}: unexpected array{'s' if len(unexpected) > 1 else ''} "
                         f"{', '.join(repr(a) for a in unexpected)} (not named by the metadata)")
    model: Model | Recurrent
    if "recurrent" in meta:
        model = Recurrent(*recurrent, readout, vocab, info)
        if model.d != meta["recurrent"]["hidden"]:
            raise InputError(f"{source}: meta says {meta['recurrent']['hidden']} hidden units, array 'R.W' "
                             f"has {model.d}")
    else:
        P_mask = arrays.get("P_mask")
        if P_mask is None:
            P_mask = np.ones(len(E), dtype=bool)
        elif P_mask.dtype != np.bool_:
            raise InputError(f"{source}: array 'P_mask' has dtype {P_mask.dtype}, expected bool")
        model = Model(E=E, P=P, P_mask=P_mask, layers=layers, readout=readout, vocab=vocab, info=info,
                      bos=meta.get("bos"), residual_rows=meta.get("residual_rows"))
    try:
        model.validate()
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None
    if "quantization" in meta:
        assert isinstance(model, Model)  # the metadata check refuses quantization beside "recurrent"
        acts = {k: (v["scale"], v["zero_point"]) for k, v in meta["quantization"]["activations"].items()}
        model.quantization = check_params(acts, model, f"{source}: meta 'quantization'")
    model.source = str(path)
    return model


def _check_version_2(meta: dict, source: str) -> None:
    """Version 2's keys are refused in a version 1 file; what has no exact rule is refused, saying why."""
    v2 = [k for k in ("bos",) if k in meta] + [f"readout.{k}" for k in ("rows",) if k in meta.get("readout", {})]
    for li, lm in enumerate(meta.get("layers", [])):
        v2 += [f"layers[{li}].{k}" for k in ("attention_biases", "activation", "layer_norm") if k in lm]
        act = lm.get("activation", "relu")
        if act != "relu":
            raise InputError(f"{source}: layers[{li}].activation is {act!r}; only relu is supported: "
                             + ("GELU has no exact fixed-point rounding rule here (its erf cannot be rounded "
                                "without a stated rule); retrain or replace it with ReLU"
                                if act.lower().startswith("gelu") else "the FFN is W2 ReLU(W1 x + b1) + b2"))
        if lm.get("layer_norm", False):
            raise InputError(f"{source}: layers[{li}].layer_norm is true; LayerNorm is not supported: fold its "
                             f"scale and bias into the next weights (TransformerLens: fold_ln) and train or "
                             f"export without the normalisation itself (normalization_type=None), then set "
                             f"layer_norm to false")
    v3 = [f"readout.{k}" for k in ("theta_exact",) if k in meta.get("readout", {})] + \
        [k for k in ("residual_rows", "quantization") if k in meta]
    if v3 and meta["version"] < EXACT_VERSION:
        raise InputError(f"{source}: meta has {', '.join(v3)}, which need{'s' if len(v3) == 1 else ''} "
                         f"\"version\": {EXACT_VERSION}")
    for key in ("bos", "residual_rows", "quantization"):
        if "recurrent" in meta and key in meta:
            raise InputError(f"{source}: '{key}' is for transformers; a recurrent model "
                             + {"bos": "reads its inputs from h0", "residual_rows": "has no residual stream",
                                "quantization": "has no int8 recipe here"}[key])
    if v2 and meta["version"] < 2:
        raise InputError(f"{source}: meta has {', '.join(v2)}, which need \"version\": 2")


def _meta_text(arr: np.ndarray, source: str) -> str:
    """The metadata JSON: a 0-d string array (UTF-8 bytes are accepted, decoded strictly)."""
    if arr.ndim != 0 or arr.dtype.kind not in "US":
        raise InputError(f"{source}: 'meta' must be one JSON string (a 0-d string array), "
                         f"got dtype {arr.dtype} and shape {arr.shape}")
    value = arr[()]
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{source}: 'meta' is not UTF-8 text") from None
    return str(value)


def _exact_array(text: np.ndarray, real: np.ndarray, name: str, source: str) -> np.ndarray:
    """The exact rationals of array NAME.exact (strings p/q), which must round to NAME's float64 values."""
    member = name + EXACT_SUFFIX
    if text.dtype.kind != "U" or text.shape != real.shape:
        raise InputError(f"{source}: array '{member}' must be strings of the shape of '{name}' {real.shape}, got "
                         f"dtype {text.dtype} and shape {text.shape}")
    bad = [str(t) for t in text.ravel() if not _RATIONAL.fullmatch(t)]
    if bad:
        raise InputError(f"{source}: array '{member}' has {bad[0]!r}, not a rational p/q")
    exact = exact_array([Fraction(t) for t in text.ravel()]).reshape(real.shape)
    off = [i for i, (x, r) in enumerate(zip(exact.ravel(), real.ravel())) if float(x) != r]
    if off:
        raise InputError(f"{source}: array '{name}' entry {off[0]} is {real.ravel()[off[0]]!r}, not the float64 value "
                         f"of {member}'s {exact.ravel()[off[0]]}")
    return exact


def _real_array(arr: np.ndarray, name: str, source: str) -> np.ndarray:
    """A weight array as float64, only where that is exact: floats up to 64 bits, integers up to 2^53."""
    kind = arr.dtype.kind
    if kind == "f" and arr.dtype.itemsize <= 8:
        return arr.astype(np.float64)
    if kind in "iu":
        if arr.size and (int(arr.max()) > EXACT_INTEGERS or int(arr.min()) < -EXACT_INTEGERS):
            raise InputError(f"{source}: array '{name}' has integers beyond 2^53, which float64 does not hold exactly")
        return arr.astype(np.float64)
    raise InputError(f"{source}: array '{name}' has dtype {arr.dtype}; expected real numbers "
                     f"(float16, float32, float64 or integers)")
