"""Reading (and writing) ``.safetensors`` files without the safetensors package, and reading ``.pt``
files only through torch's weights-only loader.

A safetensors file is an 8-byte little-endian header length n, n bytes of JSON (each tensor's
dtype, shape and byte range; an optional ``__metadata__`` of strings), then the tensors' bytes
(https://huggingface.co/docs/safetensors).  Everything in the header is checked before a byte of
data is read: dtypes, shapes against byte ranges, ranges inside the file, no two tensors sharing
bytes.  A ``.pt``/``.pth`` file is a pickle: it is loaded with ``torch.load(weights_only=True)``,
never with a full unpickler, and a file that needs more (a pickled module or class) is refused.
"""

from __future__ import annotations

import json
import math
import struct
import zipfile
from pathlib import Path

import numpy as np

from ..support.budget import require_memory
from ..support.errors import InputError
from ..support.files import new_file
from ..support.schema import parse_json, regular_file, zip_members

MAX_HEADER = 100 << 20
DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
          "I8": "i1", "U8": "u1", "BOOL": "?"}


def read_tensors(path: str | Path) -> dict[str, np.ndarray]:
    """name -> array of a ``.safetensors``, ``.pt`` or ``.pth`` file (float arrays as float64)."""
    path = regular_file(path, "weights file")
    require_memory(3 * path.stat().st_size, f"weights file {path}")
    if path.suffix == ".safetensors":
        return read_safetensors(path)
    if path.suffix in (".pt", ".pth"):
        return _read_torch(path)
    raise InputError(f"weights file {path}: expected .safetensors, .pt or .pth")


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    source = f"safetensors file {path}"
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise InputError(f"{source} is shorter than its 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > min(MAX_HEADER, size - 8):
            raise InputError(f"{source}: header length {n} is beyond the file ({size} bytes)")
        try:
            header = parse_json(fh.read(n).decode("utf-8"), f"{source}: header")
        except UnicodeDecodeError:
            raise InputError(f"{source}: the header is not UTF-8 JSON") from None
        if not isinstance(header, dict):
            raise InputError(f"{source}: the header is not a JSON object")
        header.pop("__metadata__", None)
        data_size = size - 8 - n
        spans, out = [], {}
        for name, entry in header.items():
            where = f"{source}: tensor {name!r}"
            if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
                raise InputError(f"{where}: expected dtype, shape and data_offsets")
            dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
            if not isinstance(dtype, str) or dtype not in DTYPES:
                raise InputError(f"{where}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
            if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                      for s in shape):
                raise InputError(f"{where}: shape must be a list of integers >= 0, got {shape!r}")
            if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                    and 0 <= offsets[0] <= offsets[1] <= data_size):
                raise InputError(f"{where}: data_offsets {offsets!r} are not a range inside the data "
                                 f"({data_size} bytes)")
            itemsize = np.dtype(DTYPES[dtype]).itemsize
            if offsets[1] - offsets[0] != itemsize * math.prod(shape):  # exact: a shape may be absurd
                raise InputError(f"{where}: {offsets[1] - offsets[0]} bytes for shape {shape} of {dtype}")
            spans.append((offsets[0], offsets[1], name))
        spans.sort()
        for (_, a1, a), (b0, _, b) in zip(spans, spans[1:]):
            if b0 < a1:
                raise InputError(f"{source}: tensors {a!r} and {b!r} share bytes")
        for start, stop, name in spans:
            fh.seek(8 + n + start)
            raw = np.frombuffer(fh.read(stop - start), dtype=DTYPES[header[name]["dtype"]])
            if header[name]["dtype"] == "BF16":  # bfloat16 is the top half of a float32
                raw = (raw.astype(np.uint32) << 16).view(np.float32)
            out[name] = raw.reshape(header[name]["shape"])
    return out


def _read_torch(path: Path) -> dict[str, np.ndarray]:
    source = f"PyTorch file {path}"
    if zipfile.is_zipfile(path):  # torch's format since 1.6 (an older one is a bare pickle)
        zip_members(path, source)
    try:
        import torch
    except ImportError:
        raise InputError(f"{source}: reading .pt/.pth needs torch (pip install torch); or save the state dict "
                         f"as .safetensors, which needs nothing") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle.UnpicklingError and kin: the file needs more than tensors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{source} is refused: torch's weights-only loader cannot read it ({first}); a "
                         f"file that needs a full unpickler is never loaded — save model.state_dict()") from None
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise InputError(f"{source}: expected a state dict (names to tensors), got {type(state).__name__}")
    return {k: v.detach().to(torch.float64 if v.is_floating_point() else v.dtype).numpy() for k, v in state.items()}


def write_safetensors(path: str | Path, tensors: dict[str, np.ndarray]) -> Path:
    """Write arrays as a .safetensors file, as float64 (F64); never overwrites a file."""
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():
        data = np.ascontiguousarray(arr, dtype="<f8").tobytes()
        header[name] = {"dtype": "F64", "shape": list(np.shape(arr)), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    path = Path(path)
    with new_file(path, binary=True) as fh:
        fh.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return path
