"""What was verified: every result names its source, and a file's metadata is only its claim."""

from __future__ import annotations

import json

import numpy as np
from helpers import edit_model_file

import verifier
from verifier.constructions import CONSTRUCTIONS
from verifier.model import weights_sha256
from verifier.modelfile import load_model, save_model
from verifier.tasks import make_task


def test_a_built_in_result_names_the_construction_and_its_weights():
    r = verifier.prove("idxl", N=4, p=12)
    pv = r.to_json()["provenance"]
    assert pv["source"] == "built-in" and pv["construction"] == "index_lookup" and pv["variant"] == "corrected"
    model = CONSTRUCTIONS["index_lookup"].build(make_task("idxl", N=4), None, None, None, 0, 6)
    assert pv["weights_sha256"] == weights_sha256(model)


def test_a_model_file_is_named_by_path_and_hash_and_its_metadata_is_a_claim(tmp_path):
    path = save_model(CONSTRUCTIONS["index_lookup"].build(make_task("idxl", N=4), None, None, None, 0, 6),
                      tmp_path / "m.npz")
    edited = tmp_path / "edited.npz"  # the same weights, metadata that lies about them

    def lie(meta):
        meta["info"]["eta"] = 99.0
        meta["info"]["construction"] = "something else"

    edit_model_file(path, edited, meta=lie)
    r = verifier.run(verifier.build_problem("idxl", N=4, p=12, model=load_model(edited)))
    pv = r.to_json()["provenance"]
    assert pv["source"] == "model file" and pv["path"] == str(edited)
    assert pv["weights_sha256"] == weights_sha256(load_model(path))  # info is not part of the weights
    assert pv["claims"]["eta"] == 99.0 and "eta" not in r.params
    summary = r.summary()
    assert summary.startswith(f"PROVED: model file {edited} on index_lookup")
    assert "the file says (not checked)" in summary and "something else" in summary


def test_the_weights_hash_changes_with_any_weight():
    model = CONSTRUCTIONS["index_lookup"].build(make_task("idxl", N=4), None, None, None, 0, 6)
    before = weights_sha256(model)
    model.info["note"] = "free-form"
    assert weights_sha256(model) == before
    model.layers[0].heads[0].W_Q[0, 0] += 2.0 ** -20
    assert weights_sha256(model) != before
    model.layers[0].heads[0].W_Q[0, 0] -= 2.0 ** -20
    model.readout.positions = "all"
    assert weights_sha256(model) != before


def test_a_refutation_and_its_dumps_name_the_file_its_weights_and_the_codes_used(tmp_path):
    from verifier.outputs.dump import write_dumps
    from verifier.refute.refute import random_model, refute
    task = make_task("equality", 8)
    path = save_model(random_model(task, 1, 2, "softmax", np.random.default_rng(1)), tmp_path / "eq.npz")
    problem = verifier.build_problem("equality", N=8, p=4, model=load_model(path))
    out = refute(problem)
    assert out.verdict == "refuted"
    pv = out.to_json()["provenance"]
    assert pv["source"] == "model file" and pv["path"] == str(path)
    assert pv["weights_sha256"] == weights_sha256(load_model(path))
    doc = json.loads(write_dumps(out, tmp_path / "d")[0].read_text())
    assert doc["provenance"] == pv
    arith = problem.arith
    for name, w in load_model(path).named_arrays().items():
        assert doc["quantized_weights"][name]["codes"] == arith.quantize(w)[0].tolist()
