"""Re-checking a certificate with separate, small code: nothing here comes from `certificates`.

A certificate file claims that some inputs of a task are dependent (Chen and Zou 2024,
Definition 3) and that no linear readout labels all of them right.  Every claim is checked from
scratch, in exact rationals:

1. the file follows CERTIFICATE_SCHEMA;
2. every member is an input of the task, with the label the file gives (the task's definition);
3. the members have one length and one last token, and lambda is not all zero;
4. position by position, the lambda-weighted count of every token is 0;
5. mu >= 0 and not all zero, and for every member i with label y:
   sum_c mu_{i,c} (e_y - e_c) = -lambda_i w, coordinate by coordinate.

(5) is a Farkas certificate: if o_i[y_i] > o_i[c] for all i and c, then
sum mu_{i,c} (o_i[y_i] - o_i[c]) > 0, but it equals -w . sum_i lambda_i o_i, which is 0 for any
1-layer model in scope.
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

import numpy as np

from ..support.errors import InputError
from ..support.schema import load_json
from ..tasks import make_task

CERTIFICATE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "a certificate that a set of inputs defeats every 1-layer model (verify certificate)",
    "type": "object",
    "required": ["format", "version", "task", "members", "w"],
    "properties": {
        "format": {"type": "string", "const": "verify-certificate"},
        "version": {"type": "integer", "const": 1},
        "task": {"type": "object", "required": ["name", "N"], "properties": {"name": {"type": "string"}}},
        "argument": {"type": "string"},
        "w": {"type": "array", "items": {"type": "string"}},
        "members": {"type": "array", "minItems": 2, "items": {
            "type": "object", "required": ["tokens", "label", "lambda", "mu"],
            "properties": {"tokens": {"type": "array", "minItems": 1,  # token ids: int64 (a task has fewer)
                                      "items": {"type": "integer", "minimum": 0, "maximum": 2 ** 62}},
                           "label": {"type": "integer", "minimum": 0},
                           "lambda": {"type": "integer"},
                           "mu": {"type": "object", "additionalProperties": {"type": "string"}}}}},
    },
}


def _fraction(text: str, where: str) -> Fraction:
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise InputError(f"{where}: {text!r} is not a rational number") from None


def check_certificate(path: str) -> list[str]:
    """The certificate's defects (an empty list: it is valid).  Malformed files are InputErrors."""
    doc = load_json(path, CERTIFICATE_SCHEMA, "certificate")
    spec = dict(doc["task"])
    task = make_task(spec.pop("name"), spec.pop("N"), **spec)
    members = doc["members"]
    problems = []
    for i, m in enumerate(members):
        try:
            truth = task.answer(np.array(m["tokens"]))
        except InputError as exc:
            problems.append(f"member {i} is not an input of {task.name}: {exc}")
            continue
        if truth != m["label"]:
            problems.append(f"member {i} is labelled {m['label']}, but its answer is {truth}")
    if len({len(m["tokens"]) for m in members}) != 1 or len({m["tokens"][-1] for m in members}) != 1:
        problems.append("the members do not all have the same length and the same last token")
    if all(m["lambda"] == 0 for m in members):
        problems.append("lambda is all zero")
    balance: dict = defaultdict(int)
    for m in members:
        for j, token in enumerate(m["tokens"]):
            balance[j, token] += m["lambda"]
    unbalanced = sorted(key for key, total in balance.items() if total != 0)
    if unbalanced:
        j, token = unbalanced[0]
        problems.append(f"not dependent: at position {j}, token {token} has lambda-weighted count "
                        f"{balance[j, token]}, not 0")
    w = [_fraction(x, "w") for x in doc["w"]]
    if len(w) != task.num_classes:
        problems.append(f"w has {len(w)} entries; {task.name} has {task.num_classes} classes")
        return problems
    total = Fraction(0)
    for i, m in enumerate(members):
        mu = {int(c): _fraction(v, f"member {i} mu") for c, v in m["mu"].items()}
        if any(v < 0 for v in mu.values()) or any(not 0 <= c < len(w) or c == m["label"] for c in mu):
            problems.append(f"member {i}: mu must be >= 0, on classes other than the label")
            continue
        total += sum(mu.values())
        for c in range(len(w)):
            lhs = sum(mu.values()) if c == m["label"] else -mu.get(c, Fraction(0))
            if lhs != -m["lambda"] * w[c]:
                problems.append(f"member {i}: the Farkas identity fails at class {c} ({lhs} != {-m['lambda'] * w[c]})")
                break
    if total == 0:
        problems.append("mu is all zero")
    return problems
