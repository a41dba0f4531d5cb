"""Strict schemas: what users write (model metadata and arrays, instances, specs) is either exactly
what the schema says or refused with one line naming the file, the field and what was expected.
Nothing is coerced: "false" is not false, 1.9 is not 1, NaN is not a number."""

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from helpers import edit_model_file, run

import cli
from verifier.modelfile import META_SCHEMA
from verifier.runs.specs import spec_schema
from verifier.tasks.boolean import INSTANCE_SCHEMA
from verifier.tasks.memorization import DATASET_SCHEMA

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def idxl4(capsys, tmp_path):
    path = tmp_path / "idxl4.npz"
    assert cli.main(["export", "idxl", "--N", "4", "-o", str(path)]) == 0
    capsys.readouterr()
    return path


def _set(path, value, then=None):
    """A meta editor: set the value at a path of keys and indices (and `then` = (path, value) too)."""
    def edit(meta):
        for at, v in [(path, value)] + ([then] if then else []):
            node = meta
            for key in at[:-1]:
                node = node[key]
            node[at[-1]] = v
    return edit


def _as_version_2(then=None):
    """A meta editor: the exported file (version 3: it names its residual rows) as version 2."""
    def edit(meta):
        meta.update(version=2)
        meta.pop("residual_rows")
        if then:
            then(meta)
    return edit


def _array(name, fn):
    return lambda arrays: arrays.__setitem__(name, fn(arrays[name]))


MODEL_CASES = [
    ("residual", dict(meta=_set(["layers", 0, "residual"], "false")),
     'meta: layers[0].residual: expected a boolean (true or false), got the string "false"'),
    ("heads", dict(meta=_set(["layers", 0, "heads"], 1.9)), "meta: layers[0].heads: expected an integer, got 1.9"),
    ("heads-float", dict(meta=_set(["layers", 0, "heads"], 1.0)), "layers[0].heads: expected an integer, got 1.0"),
    ("heads-bool", dict(meta=_set(["layers", 0, "heads"], True)), "expected an integer, got the boolean true"),
    ("vocab", dict(meta=_set(["vocab"], "abcdef")), 'meta: vocab: expected an array, got the string "abcdef"'),
    ("vocab-dup", dict(meta=_set(["vocab"], ["a", "a", "#1", "#2", "#3", "#4"])), "vocab: items must be distinct"),
    ("theta-str", dict(meta=_set(["readout", "theta"], "0")),
     'readout.theta: expected a finite number, got the string'),
    ("theta-nan", dict(raw_meta='{"format": "verify-model", "theta": NaN}'), "NaN is not a number JSON allows"),
    ("layers-obj", dict(meta=_set(["layers"], {"0": {"heads": 1}})), "meta: layers: expected an array"),
    ("attention", dict(meta=_set(["layers", 0, "attention"], "linear")),
     'layers[0].attention: expected one of "softmax", "relu", got the string "linear"'),
    ("unknown", dict(meta=_set(["extra"], 1)), "meta: unknown key 'extra'"),
    ("version", dict(meta=_set(["version"], 4)), "meta: version: expected one of 1, 2, 3, got 4"),
    ("exact-in-v2", dict(meta=_as_version_2(), arrays=lambda a: a.__setitem__("U.b.exact", np.array(["1/3", "0"]))),
     "(exact rationals) needs \"version\": 3"),
    ("exact-not-rational", dict(meta=_set(["version"], 3),
                                arrays=lambda a: a.__setitem__("U.b.exact", np.array(["x", "0"]))),
     "array 'U.b.exact' has 'x', not a rational p/q"),
    ("exact-not-its-float", dict(meta=_set(["version"], 3),
                                 arrays=lambda a: a.__setitem__("U.b.exact", np.array(["1/3", "0"]))),
     "array 'U.b' entry 0 is"),
    ("theta-exact-v2", dict(meta=_as_version_2(_set(["readout", "theta_exact"], "1/3"))),
     'readout.theta_exact, which needs "version": 3'),
    ("rows-v2", dict(meta=_set(["version"], 2)), 'meta has residual_rows, which needs "version": 3'),
    ("residual-rows-count", dict(meta=_set(["residual_rows"], ["a", "b"])), "'residual_rows' must be 9 distinct names"),
    ("v2-key-in-v1", dict(meta=_as_version_2(_set(["version"], 1, then=(["bos"], "a")))),
     'meta has bos, which need "version": 2'),
    ("gelu", dict(meta=_set(["layers", 0, "activation"], "gelu")),
     "layers[0].activation is 'gelu'; only relu is supported: GELU has no exact fixed-point rounding rule"),
    ("layer-norm", dict(meta=_set(["layers", 0, "layer_norm"], True)), "LayerNorm is not supported: fold"),
    ("bos-unknown", dict(meta=_set(["bos"], "<s>")), "metadata 'bos' names '<s>', which is not in the vocabulary"),
    ("rows-count", dict(meta=_set(["readout", "rows"], ["a"])), "readout rows has 1 names (1 distinct), expected 2"),
    ("biases-missing", dict(meta=_set(["layers", 0, "attention_biases"], True)), "array 'L0.H0.b_Q' is missing"),
    ("dup-key", dict(raw_meta='{"format": "verify-model", "format": "x"}'), "duplicate key 'format'"),
    ("complex", dict(arrays=_array("E", lambda a: a.astype(complex))), "array 'E' has dtype complex128"),
    ("timedelta", dict(arrays=_array("E", lambda a: a.astype("timedelta64[s]"))), "array 'E' has dtype timedelta64"),
    ("longdouble", dict(arrays=_array("E", lambda a: a.astype(np.longdouble))), "expected real numbers"),
    ("strings", dict(arrays=_array("E", lambda a: a.astype(str))), "array 'E' has dtype <U"),
    ("big-int", dict(arrays=_array("E", lambda a: np.full(a.shape, 2 ** 60, dtype=np.int64))), "beyond 2^53"),
    ("P_mask", dict(arrays=_array("P_mask", lambda a: a.astype(float) * 0.5)), "array 'P_mask' has dtype float64"),
    ("extra-array", dict(arrays=lambda a: a.__setitem__("L1.W_O", np.zeros((2, 2)))),
     "unexpected array 'L1.W_O' (not named by the metadata)"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,edit,message", MODEL_CASES, ids=[c[0] for c in MODEL_CASES])
def test_model_files_are_read_strictly(capsys, tmp_path, idxl4, name, edit, message):
    path = edit_model_file(idxl4, tmp_path / "bad.npz", **edit)
    code, out, err = run(capsys, "run", "--model", path, "--task", "idxl", "--N", 4, "--p", 10)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"model file {path}" in err and message in err, err


def test_model_meta_that_is_not_utf8(capsys, tmp_path, idxl4):
    path = tmp_path / "bytes.npz"
    with np.load(idxl4) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["meta"] = np.array(b"\xff\xfe{}")
    np.savez(path, **arrays)
    code, _, err = run(capsys, "run", "--model", path, "--task", "idxl", "--N", 4, "--p", 10)
    assert code == 2 and "'meta' is not UTF-8 text" in err


INSTANCE_CASES = [
    ('{"b": 0, "features": [{"I": [1], "g": 0.9}]}', "features[0].g: expected an array, got 0.9"),
    ('{"b": 0, "features": [{"I": [1.7], "g": [0, 1]}]}', "features[0].I[0]: expected an integer, got 1.7"),
    ('{"b": 0, "features": [{"I": [true], "g": [0, 1]}]}', "features[0].I[0]: expected an integer, got the boolean"),
    ('{"b": 0, "features": [{"I": [1], "g": [0, 0.5]}]}', "features[0].g[1]: expected an integer, got 0.5"),
    ('{"b": 0, "features": [{"I": [1], "g": [0, 2]}]}', "features[0].g[1]: expected a value <= 1, got 2"),
    ('{"b": NaN, "features": []}', "NaN is not a number JSON allows"),
    ('{"b": Infinity, "features": []}', "Infinity is not a number JSON allows"),
    ('{"b": "1", "features": []}', 'b: expected a finite number, got the string "1"'),
    ('{"b": 0, "features": [], "c": 1}', "unknown key 'c'"),
    ('{"features": []}', "missing key 'b'"),
    ('{"b": 0, "b": 1, "features": []}', "duplicate key 'b'"),
    ('{"b": 0, "features": [{"I": [9], "g": [0, 1]}]}', "features[0].I: indices must be in 1..4"),
    ('{"b": 0, "features": [{"I": [1, 1], "g": [0, 1, 1, 0]}]}', "features[0].I: items must be distinct"),
    ('{"b": 0, "features": [{"I": [1, 2], "g": [0, 1]}]}', "features[0].g: expected 4 entries"),
    ('[1, 2]', "expected an object"),
]


def refused(capsys, path: Path, text: str, *args) -> str:
    """Write `text` to `path`, run the command on it, and return its one-line error."""
    path.write_text(text)
    code, out, err = run(capsys, *args, path)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("text,message", INSTANCE_CASES)
def test_instances_are_read_strictly(capsys, tmp_path, text, message):
    path = tmp_path / "inst.json"
    err = refused(capsys, path, text, "sparse_threshold", "--N", 4, "--p", 10, "--instance")
    assert f"instance {path}" in err and message in err, err


SPEC_BASE = 'task = "idxl"\nN = 4\np = 10\nexpect = "proved"\n'
SPEC_CASES = [
    ('task = "idxl"\nN = 1.5\np = 10\nexpect = "proved"\n', "N: expected an integer, got 1.5"),
    ('task = "idxl"\nN = "4"\np = 10\nexpect = "proved"\n', 'N: expected an integer, got the string "4"'),
    ('task = "idxl"\nN = true\np = 10\nexpect = "proved"\n', "N: expected an integer, got the boolean true"),
    ('task = "idxl"\nN = 4\np = 1979-05-27\nexpect = "proved"\n',
     "p: expected an integer, got the date/time 1979-05-27"),
    (SPEC_BASE + "timeout = nan\n", "timeout: expected a finite number, got the non-finite number nan"),
    (SPEC_BASE + "timeout = 0\n", "timeout: expected a value > 0, got 0"),
    (SPEC_BASE + 'profiles = "ci"\n', 'profiles: expected an array, got the string "ci"'),
    (SPEC_BASE + "profiles = []\n", "profiles: expected at least 1 item, got 0"),
    (SPEC_BASE + 'engine = "cvc9"\n', 'engine: expected one of "auto"'),
    (SPEC_BASE + "bogus = 1\n", "unknown key 'bogus'"),
    (SPEC_BASE + 'shared_g = "false"\n', 'shared_g: expected a boolean (true or false), got the string "false"'),
    (SPEC_BASE + "shared_g = true\n", "shared_g: not an option of task index_lookup (its options: sigma)"),
    ('task = "idxl"\nN = 4\np = 10\nexpect = "maybe"\n', 'expect: expected one of "proved", "refuted", "unknown"'),
    ('task = "idxl"\nN = 4\nexpect = "proved"\n', "missing key 'p'"),
    ('task = "idxl"\nN = 4\np = 10\nexpect = "proved"\nmodel = "none.npz"\n', "none.npz does not exist"),
    ('task = "nosuch"\nN = 4\np = 10\nexpect = "proved"\n', 'task: expected one of'),
    ("task = \n", "is not valid TOML"),
]


@pytest.mark.slow
@pytest.mark.parametrize("text,message", SPEC_CASES)
def test_specs_are_read_strictly(capsys, tmp_path, text, message):
    path = tmp_path / "s.toml"
    err = refused(capsys, path, text, "check")
    assert f"spec {path}" in err and message in err, err


@pytest.mark.parametrize("what,args", [("spec", ("check",)), ("instance", ("sparse_threshold", "--N", 4, "--p", 10,
                                                                            "--instance"))])
def test_files_that_are_not_utf8(capsys, tmp_path, what, args):
    path = tmp_path / "bad.txt"
    path.write_bytes(b'\xff\xfetask = "idxl"')
    code, _, err = run(capsys, *args, path)
    assert code == 2 and f"{what} {path} is not UTF-8 text (byte 0xff at offset 0)" in err


@pytest.mark.parametrize("name,schema", [("model-meta", META_SCHEMA), ("instance", INSTANCE_SCHEMA),
                                         ("dataset", DATASET_SCHEMA), ("spec", spec_schema())])
def test_schema_command_prints_valid_schemas(capsys, name, schema):
    code, out, _ = run(capsys, "schema", name)
    assert code == 0 and json.loads(out) == schema
    jsonschema.Draft202012Validator.check_schema(schema)


def test_every_file_the_project_writes_or_ships_passes_its_schema(capsys, tmp_path, idxl4):
    import tomllib

    from verifier.support.schema import validate
    for spec in sorted((ROOT / "specs").glob("*.toml")):
        validate(tomllib.loads(spec.read_text()), spec_schema(), str(spec))
    for inst in sorted((ROOT / "specs" / "instances").glob("*.json")):
        validate(json.loads(inst.read_text()), INSTANCE_SCHEMA, str(inst))
    for task, N in [("idxl", 1), ("equality", 4), ("sparse_threshold", 4), ("mqar", 4), ("nearest_neighbour", 2)]:
        path = tmp_path / f"{task}{N}.npz"
        assert cli.main(["export", task, "--N", str(N), "-o", str(path)]) == 0
        with np.load(path) as z:
            validate(json.loads(str(z["meta"])), META_SCHEMA, str(path))
