"""Reading what users write: files checked strictly, and validated against a JSON Schema.

Every file a user writes (model metadata, sparse-threshold instances, spec files) is read here and
validated against its JSON Schema (draft 2020-12, `jsonschema`) before any of it is used.  The
schemas live next to their readers (`modelfile.META_SCHEMA`, `tasks.boolean.INSTANCE_SCHEMA`,
`specs.spec_schema`); `verify schema NAME` prints them.

Why JSON Schema and not pydantic: the formats are JSON and TOML documents, often written by
scripts in other tools (a PyTorch export, a notebook), and a JSON Schema is itself a document that
those tools can validate against before calling us; its types are the document's types, so a
JSON ``true`` and the string ``"false"`` never meet.  Strictness is ours to set: the type checker
below accepts an integer only as an integer (not ``1.9``, not ``1.0``, not ``true``) and a number
only when it is finite (no NaN, no infinity), and every schema forbids unknown keys.  Nothing is
coerced: a value is either exactly what the schema says or the file is refused.

Errors are one line, naming the file, the field and what was expected:
``spec s.toml: profiles: expected an array, got the string "ci"``.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import stat
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
from jsonschema import validators

from .errors import InputError

TEXT_LIMIT = 1 << 26  # bytes: a spec or an instance is a few kilobytes


def _is_integer(checker, x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(checker, x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many(
    {"integer": _is_integer, "number": _is_number})
StrictValidator = validators.extend(jsonschema.Draft202012Validator, type_checker=_TYPES)

_TYPE_WORDS = {"integer": "an integer", "number": "a finite number", "boolean": "a boolean (true or false)",
               "string": "a string", "array": "an array", "object": "an object (a table of keys)",
               "null": "null"}


def show(x: Any) -> str:
    """A value as an error message quotes it, with its type when the type is the point."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return f"the boolean {str(x).lower()}"
    if isinstance(x, str):
        return f"the string {json.dumps(x)}"
    if isinstance(x, float) and not math.isfinite(x):
        return f"the non-finite number {x}"
    if isinstance(x, (datetime.date, datetime.time)):
        return f"the date/time {x.isoformat()}"
    if isinstance(x, (int, float)):
        return repr(x)
    if isinstance(x, list):
        return "an array"
    if isinstance(x, dict):
        return "an object"
    return f"a {type(x).__name__}"


def _where(error: jsonschema.ValidationError) -> str:
    parts = ""
    for p in error.absolute_path:
        parts += f"[{p}]" if isinstance(p, int) else f".{p}"
    return parts.lstrip(".")


def _message(error: jsonschema.ValidationError) -> str:
    where, v, want = _where(error), error.validator, error.validator_value
    prefix = f"{where}: " if where else ""
    if v == "type":
        kinds = want if isinstance(want, list) else [want]
        return f"{prefix}expected {' or '.join(_TYPE_WORDS.get(k, k) for k in kinds)}, got {show(error.instance)}"
    if v == "required":
        missing = [k for k in want if k not in error.instance]
        return f"{prefix}missing key '{missing[0]}'" if missing else f"{prefix}{error.message}"
    if v == "additionalProperties":
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(k for k in error.instance if k not in allowed)
        return f"{prefix}unknown key{'s' if len(extra) > 1 else ''} {', '.join(repr(k) for k in extra)}"
    if v == "enum":
        return f"{prefix}expected one of {', '.join(json.dumps(x) for x in want)}, got {show(error.instance)}"
    if v == "const":
        return f"{prefix}expected {json.dumps(want)}, got {show(error.instance)}"
    if v in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        words = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}
        return f"{prefix}expected a value {words[v]} {want}, got {show(error.instance)}"
    if v == "minItems":
        return f"{prefix}expected at least {want} item{'s' if want != 1 else ''}, got {len(error.instance)}"
    if v == "uniqueItems":
        return f"{prefix}items must be distinct"
    if v == "minLength":
        return f"{prefix}expected a non-empty string"
    return f"{prefix}{error.message}"


def validate(data: Any, schema: dict, source: str) -> Any:
    """Check `data` against `schema`; InputError "source: field: what was expected" otherwise."""
    error = jsonschema.exceptions.best_match(StrictValidator(schema).iter_errors(data))
    if error is not None:
        raise InputError(f"{source}: {_message(error)}")
    return data


def regular_file(path: str | Path, what: str) -> Path:
    """The path of an existing regular file (not a directory, FIFO or device, which could block)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise InputError(f"{what} {path} cannot be read: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{what} {path} is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise InputError(f"{what} {path} is not a regular file")
    return path


def user_file(path: str | Path, what: str, limit: int = TEXT_LIMIT) -> tuple[str, str]:
    """A user's text file, read once: its text (a regular file of at most `limit` bytes, in UTF-8)
    and the SHA-256 of exactly those bytes, by which a verdict cache knows what a run read (the file
    may be replaced while a run goes)."""
    path = regular_file(path, what)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        raise InputError(f"{what} {path} cannot be read: {exc.strerror}") from None
    if len(raw) > limit:
        raise InputError(f"{what} {path} is larger than {limit >> 20} MiB")
    try:
        return raw.decode("utf-8"), hashlib.sha256(raw).hexdigest()
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") \
            from None


def zip_members(path: Path, source: str) -> list[zipfile.ZipInfo]:
    """The members of a zip archive (an .npz, a .pt), refused if two share a name: a reader would
    take one of them and never look at the other.  BadZipFile is the caller's to report."""
    with zipfile.ZipFile(path) as zf:
        members = zf.infolist()
    twice = sorted(name for name, count in Counter(m.filename for m in members).items() if count > 1)
    if twice:
        raise InputError(f"{source} has two archive members named {twice[0]!r}; a reader would use one and ignore "
                         f"the other")
    return members


def read_text(path: str | Path, what: str) -> str:
    """A user's text file: a regular file of at most TEXT_LIMIT bytes, in UTF-8."""
    return user_file(path, what)[0]


def _no_duplicates(pairs: list) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(text: str, source: str, allow_nan: bool = False) -> Any:
    """Strict JSON: no duplicate keys, and no NaN or Infinity literals (but where `allow_nan`: in
    what the commands write, where a float64 value may be one)."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, **({} if allow_nan else
                                                                       {"parse_constant": _no_constant}))
    except json.JSONDecodeError as exc:
        raise InputError(f"{source} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{source} is not valid JSON ({exc})") from None


def load_json(path: str | Path, schema: dict, what: str) -> Any:
    """Read, parse and validate a user's JSON file."""
    return load_json_file(path, schema, what)[0]


def load_json_file(path: str | Path, schema: dict, what: str) -> tuple[Any, str]:
    """`load_json`, and the SHA-256 of the bytes read (`user_file`)."""
    source = f"{what} {path}"
    text, digest = user_file(path, what)
    return validate(parse_json(text, source), schema, source), digest
