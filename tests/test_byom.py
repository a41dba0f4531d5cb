"""Bring your own model: model format version 2 (BOS, attention biases, named readout rows, the
vocabulary by name), tasks from a reference function or a dataset file, the importers (Tracr,
TransformerLens state dicts), and sweeps of a model."""

from __future__ import annotations

import functools
import json
import multiprocessing
import pickle
from dataclasses import replace

import numpy as np
import pytest
from helpers import add_biases, random_model, run, tracr_outputs
from reference import RefFX, quantize_model, ref_answer, ref_forward

import verifier
from verifier.arithmetic import FixedPoint
from verifier.engines import Problem
from verifier.importers.safetensors import read_tensors, write_safetensors
from verifier.model import weights_sha256
from verifier.modelfile import load_model, save_model
from verifier.support.errors import InputError
from verifier.tasks import make_task
from verifier.tasks.base import NO_ANSWER
from verifier.tasks.bos import WithBos

# -- tasks of the user's own ------------------------------------------------------------------------
REFERENCE = '''
def last(tokens):
    return tokens[-1]

def first_at_every_position(tokens):
    return [tokens[0]] * len(tokens)

def count_a(tokens):
    return tokens.count("a")

def only_distinct(tokens):
    return None if len(set(tokens)) < len(tokens) else tokens[0]

def wrong_length(tokens):
    return [1]
'''


@pytest.fixture
def ref(tmp_path):
    path = tmp_path / "ref.py"
    path.write_text(REFERENCE)
    return path


@pytest.mark.slow
def test_reference_task_is_the_function_on_every_string(ref):
    task = make_task("reference", N=3, reference=f"{ref}:count_a", vocab="a,b")
    assert task.total == 2 + 4 + 8 and task.class_names == ["0", "1", "2", "3"]
    seen = 0
    for batch in task.batches(0, task.total, 5):
        for tokens, answer in zip(batch.tokens, batch.expected):
            assert task.class_names[answer] == str([task.vocab[t] for t in tokens].count("a"))
            seen += 1
    assert seen == task.total
    per = make_task("reference", N=2, reference=f"{ref}:first_at_every_position", vocab="a,b,c")
    assert per.per_position and per.answer(np.array([2, 0])).tolist() == [2, 2]
    partial = make_task("reference", N=2, reference=f"{ref}:only_distinct", vocab="a,b")
    answers, valid = partial.evaluate(np.array([[0, 0], [0, 1]]))
    assert valid.tolist() == [False, True]


@pytest.mark.slow
@pytest.mark.parametrize("options,message", [
    (dict(reference="nope.py:last", vocab="a"), "reference module nope.py"),
    (dict(reference="{ref}:missing", vocab="a"), "defines no 'missing'"),
    (dict(reference="{ref}:wrong_length", vocab="a,b"), "one entry per position"),
    (dict(reference="{ref}:last", vocab="a,,b"), "--vocab must be comma-separated"),
    (dict(reference="{ref}:last", vocab="a,a"), "names a token twice"),
    (dict(reference="{ref}:last", vocab="a,b", classes="a"), "not among --classes"),
    (dict(reference="{ref}:last"), "needs --reference module.py:function and --vocab"),
])
def test_reference_task_errors_are_one_line(ref, options, message):
    options = {k: v.format(ref=ref) for k, v in options.items()}
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        make_task("reference", N=2, **options)


def test_reference_size_is_refused_before_calling_the_function(ref):
    with pytest.raises(InputError, match="would be called on"):
        make_task("reference", N=30, reference=f"{ref}:last", vocab="a,b")


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "d.jsonl"
    lines = [{"input": ["b", "a"], "answer": "a"}, {"input": ["a"], "answer": "a"},
             {"input": ["a", "b", "b"], "answer": "b"}, {"input": ["b"], "answer": "b"},
             {"input": ["a", "b"], "answer": "b"}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_dataset_task_enumerates_by_length_in_file_order(dataset):
    task = make_task("dataset", N=3, dataset=str(dataset), vocab="a,b")
    assert task.total == 5 and task.max_len == 3
    got = [(task.render(task.decode(i)), task.answer_name(int(task.answer(task.decode(i))))) for i in range(5)]
    assert got == [("a", "a"), ("b", "b"), ("b a", "a"), ("a b", "b"), ("a b b", "b")]
    assert [task.index_of(task.decode(i)) for i in range(5)] == list(range(5))
    answers, valid = task.evaluate(np.array([[1, 0], [0, 0], [0, 1]]))
    assert valid.tolist() == [True, False, True] and answers[[0, 2]].tolist() == [0, 1]
    short = make_task("dataset", N=2, dataset=str(dataset), vocab="a,b")
    assert short.total == 4


@pytest.mark.parametrize("line,message", [
    ('{"input": ["a"]}', "expected"),
    ('{"input": ["z"], "answer": "a"}', "tokens of --vocab"),
    ('{"input": ["a"], "answer": 1.5}', "an answer must be"),
    ('{"input": ["a"], "answer": "b"}', "with another answer"),
    ('{"input": ["a"], "answers": ["a", "b"]}', "one answer per input token"),
    ('{"input": ["a"], "answer": "a", "answer": "b"}', "duplicate key"),
])
def test_dataset_errors_name_the_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"input": ["a"], "answer": "a"}\n' + line + "\n")
    with pytest.raises(InputError, match=message) as err:
        make_task("dataset", N=3, dataset=str(path), vocab="a,b")
    assert "line 2" in str(err.value)
    path.write_bytes(b'{"input": ["\xff"], "answer": "a"}\n')
    with pytest.raises(InputError, match="not UTF-8"):
        make_task("dataset", N=3, dataset=str(path), vocab="a,b")


# -- model format version 2 ---------------------------------------------------------------------------
def _lookup_model(rng, task, *, bos=False, biases=False, extra_rows=0):
    """A random one-layer model for a task over strings, optionally with BOS, biases, extra rows."""
    vocab = list(task.vocab) + (["<s>"] if bos else [])
    model = random_model(rng, vocab, task.max_len + bos, C=task.num_classes + extra_rows, readout="argmax",
                         dims={"attention": "softmax"})
    model.layers = model.layers[:1]
    if biases:
        add_biases(model, rng)
    model.bos = "<s>" if bos else None
    model.readout.positions = "all" if task.per_position else "last"
    return model


@pytest.mark.slow
def test_biases_bos_and_rows_round_trip_through_the_file(tmp_path, ref):
    rng = np.random.default_rng(3)
    task = make_task("reference", N=2, reference=f"{ref}:last", vocab="a,b,c")
    model = _lookup_model(rng, task, bos=True, biases=True, extra_rows=1)
    model.readout.rows = ["junk", "c", "a", "b"]
    path = save_model(model, tmp_path / "m.npz")
    back = load_model(path)
    assert back.bos == "<s>" and back.readout.rows == ["junk", "c", "a", "b"]
    assert all(np.array_equal(a, b) for a, b in zip(back.named_arrays().values(), model.named_arrays().values()))
    assert set(back.named_arrays()) >= {"L0.H0.b_Q", "L0.H0.b_K", "L0.H0.b_V", "L0.b_O"}
    assert json.loads(str(np.load(path)["meta"]))["version"] == 2
    # the verdict names the weights as the file holds them, not as reordered for the task
    result = verifier.run(verifier.build_problem(task, p=8, model=back), "exhaustive")
    assert result.provenance["weights_sha256"] == weights_sha256(back) != weights_sha256(replace(back, bos=None))


@pytest.mark.slow
def test_every_engine_agrees_with_the_reference_loop_on_biases_bos_and_named_rows(ref):
    """Random models with attention biases, a BOS token and a readout over more rows than the task
    has classes: enumeration against an independent reference loop, and the SMT and bounds engines
    against enumeration."""
    rng = np.random.default_rng(7)
    agreed = {"smt": 0, "bounds": 0}
    for i in range(12):
        per_position = i % 3 == 2
        task = make_task("reference", N=2, reference=f"{ref}:{'first_at_every_position' if per_position else 'last'}",
                         vocab="a,b")
        model = _lookup_model(rng, task, bos=i % 2 == 0, biases=True, extra_rows=i % 2)
        model.readout.rows = list(reversed(task.class_names)) + (["other"] if i % 2 else [])
        fx = FixedPoint(int(rng.integers(4, 9)), None)
        problem = verifier.build_problem(task, p=fx.p, f=fx.f, model=model)
        assert isinstance(problem.task, WithBos) == (i % 2 == 0)
        enum = verifier.run(problem, "exhaustive", max_counterexamples=10_000)
        failing = {c.index for c in enum.counterexamples}
        assert failing == reference_failures(problem)
        for engine in ("smt", "bounds"):
            if verifier.engines.ENGINES[engine].unsupported(problem, verifier.engines.RunOptions()) is None:
                other = verifier.run(problem, engine)
                assert other.verdict == enum.verdict
                assert {c.index for c in other.counterexamples} <= failing
                agreed[engine] += 1
    assert agreed["smt"] == 12 and agreed["bounds"] > 0


def reference_failures(problem: Problem) -> set[int]:
    """Indices of the inputs the model gets wrong by `ref_forward` (tests/reference.py: Fractions,
    one input at a time, no code shared with the evaluator); the readout's rows are in class order."""
    fx, model, task = problem.arith, problem.model, problem.task
    ref = RefFX(fx.p, fx.f, fx.rounding, fx.overflow, fx.accumulate)
    q = quantize_model(model, ref)
    failing = set()
    for index in range(task.total):
        tokens = task.decode(index)
        truth = np.atleast_1d(task.answer(tokens))
        ys, overflow = ref_forward(model, ref, [int(t) for t in tokens], q, per_answer=True)
        ys, overflow = (ys, overflow) if task.per_position else ([ys], [overflow])
        if any(t != NO_ANSWER and (ref_answer(model, ref, y) != (int(t), False) or (o and fx.overflow == "error"))
               for y, t, o in zip(ys, truth, overflow)):
            failing.add(index)
    return failing


def test_a_prediction_outside_the_tasks_classes_is_a_failure(ref):
    task = make_task("reference", N=1, reference=f"{ref}:last", vocab="a,b")
    model = _lookup_model(np.random.default_rng(0), task, extra_rows=1)
    model.readout.W_U[:] = 0
    model.readout.b_U[:] = [0.0, 0.0, 1.0]  # the third row always wins
    model.readout.rows = ["a", "b", "EOS"]
    result = verifier.run(verifier.build_problem(task, p=8, model=model), "exhaustive")
    assert result.verdict == "refuted" and result.counterexamples[0].produced == "EOS"  # the row by its name
    assert "got EOS" in result.summary()
    assert result.summary().startswith("REFUTED: user model on reference N=1")  # a model in memory, by that name


def test_a_permuted_vocabulary_is_refused(tmp_path):
    path = tmp_path / "m.npz"
    run_ok = verifier.save_model(verifier.build_problem("idxl", N=4, p=12).model, path)
    model = load_model(run_ok)
    model.vocab = [model.vocab[1], model.vocab[0]] + model.vocab[2:]
    with pytest.raises(InputError, match="token 0 is 'b' in the model, 'a' in the task"):
        verifier.build_problem("idxl", N=4, p=12, model=model)


def test_rows_must_name_every_class(ref):
    task = make_task("reference", N=1, reference=f"{ref}:last", vocab="a,b")
    model = _lookup_model(np.random.default_rng(0), task)
    model.readout.rows = ["a", "c"]
    with pytest.raises(InputError, match="no row for reference's answer b"):
        verifier.build_problem(task, p=8, model=model)


def test_bos_task_shifts_positions_and_pickles(ref):
    inner = make_task("idxl", N=3)
    task = WithBos(inner, "<s>")
    assert task.vocab == inner.vocab + ["<s>"] and task.max_len == inner.max_len + 1
    for i in range(0, inner.total, 7):
        assert task.decode(i).tolist() == [task.bos] + inner.decode(i).tolist()
        assert task.index_of(task.decode(i)) == i
    case = next(iter(task.cases()))
    assert case.domains[0].tolist() == [task.bos] and case.answer_at[0] == next(iter(inner.cases())).answer_at[0] + 1
    back = pickle.loads(pickle.dumps(task))
    assert back.total == task.total and back.name == inner.name


# -- the CLI ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_run_sweep_and_check_accept_the_users_tasks(capsys, tmp_path, ref, dataset):
    task = make_task("reference", N=2, reference=f"{ref}:last", vocab="a,b")
    rng = np.random.default_rng(11)
    model = _lookup_model(rng, task, bos=True, biases=True)
    path = save_model(model, tmp_path / "m.npz")
    code, out, err = run(capsys, "run", "--model", path, "--task", "reference", "--reference", f"{ref}:last",
                         "--vocab", "a,b", "--N", 2, "--p", 8, "--json")
    doc = json.loads(out)
    assert code in (0, 1) and doc["task"]["bos"] == "<s>"
    assert doc["construction"]["construction"].startswith("model file")
    code, out, err = run(capsys, "sweep", "--model", path, "--task", "reference", "--reference", f"{ref}:last",
                         "--vocab", "a,b", "--N", "2", "--p", "4..6", "--no-cache", "--scheduler", "serial")
    assert code == 0 and "| 2 |" in out
    spec = tmp_path / "s.toml"
    spec.write_text(f'task = "reference"\nmodel = "m.npz"\nreference = "{ref.name}:last"\nvocab = "a,b"\nN = 2\n'
                    f'p = 8\nexpect = "{doc["verdict"]}"\n')
    (tmp_path / ref.name).write_text(ref.read_text())
    code, out, err = run(capsys, "check", str(spec), "--no-cache", "--scheduler", "serial")
    assert code == 0, out + err
    code, out, err = run(capsys, "run", "--model", path, "--task", "dataset", "--dataset", dataset, "--vocab", "a,b",
                         "--N", 2, "--p", 8)
    assert code in (0, 1) and "on dataset N=2" in out


def test_the_min_margin_stays_inside_the_covered_range():
    """After a stop at the first counterexample, the tightest input is one that was covered."""
    for eta in (0.5, 0.7):
        problem = verifier.build_problem("idxl", N=6, p=12, eta=eta)
        for limit in (1, 3):
            r = verifier.run(problem, "exhaustive", max_counterexamples=limit)
            assert r.verdict == "refuted" and r.tightest["index"] < r.covered
            assert r.covered == r.counterexamples[-1].index + 1


def test_export_names_the_variant(capsys, tmp_path):
    code, out, _ = run(capsys, "export", "idxl", "--N", 3, "-o", tmp_path / "m.npz")
    assert code == 0 and "(None)" not in out and "variant" in out


# -- importers -----------------------------------------------------------------------------------------
def tl_state(rng, V=4, d=6, H=2, dh=3, n_ctx=5, mlp=7, layers=2):
    t = {"embed.W_E": rng.normal(size=(V, d)), "pos_embed.W_pos": rng.normal(size=(n_ctx, d)),
         "unembed.W_U": rng.normal(size=(d, V)), "unembed.b_U": rng.normal(size=V)}
    for b in range(layers):
        for c in "QKV":
            t[f"blocks.{b}.attn.W_{c}"] = rng.normal(size=(H, d, dh))
            t[f"blocks.{b}.attn.b_{c}"] = rng.normal(size=(H, dh))
        t[f"blocks.{b}.attn.W_O"] = rng.normal(size=(H, dh, d))
        t[f"blocks.{b}.attn.b_O"] = rng.normal(size=d)
        if mlp:
            t[f"blocks.{b}.mlp.W_in"] = rng.normal(size=(d, mlp))
            t[f"blocks.{b}.mlp.b_in"] = rng.normal(size=mlp)
            t[f"blocks.{b}.mlp.W_out"] = rng.normal(size=(mlp, d))
            t[f"blocks.{b}.mlp.b_out"] = rng.normal(size=d)
    return t


def test_safetensors_reader_against_the_format(tmp_path):
    rng = np.random.default_rng(0)
    state = tl_state(rng)
    read = read_tensors(write_safetensors(tmp_path / "w.safetensors", state))
    assert set(read) == set(state) and all(np.array_equal(read[k], state[k]) for k in state)
    with pytest.raises(InputError, match="refusing to overwrite"):
        write_safetensors(tmp_path / "w.safetensors", state)
    # the format by hand: header length, JSON header, little-endian data (a float16 and an int8 tensor)
    header = json.dumps({"x": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]},
                         "n": {"dtype": "I8", "shape": [1], "data_offsets": [4, 5]},
                         "__metadata__": {"format": "pt"}}).encode()
    raw = tmp_path / "hand.safetensors"
    raw.write_bytes(len(header).to_bytes(8, "little") + header + np.array([1.5, -2], "<f2").tobytes() + b"\x07")
    got = read_tensors(raw)
    assert got["x"].tolist() == [1.5, -2.0] and got["n"].tolist() == [7]
    for bad, message in [((10 ** 9).to_bytes(8, "little") + b"{}", "header length"),
                         (len(header).to_bytes(8, "little") + header + b"\x00", "not a range inside the data"),
                         (b"\x02\x00", "shorter than its 8-byte header")]:
        path = tmp_path / "bad.safetensors"
        path.write_bytes(bad)
        with pytest.raises(InputError, match=message):
            read_tensors(path)


@pytest.mark.parametrize("entry,message", [
    ({"dtype": ["F64"], "shape": [1], "data_offsets": [0, 8]}, "dtype ['F64'] is not one of F64"),
    ({"dtype": {}, "shape": [1], "data_offsets": [0, 8]}, "dtype {} is not one of F64"),
    ({"dtype": "F64", "shape": [10 ** 20], "data_offsets": [0, 8]}, "8 bytes for shape [100000000000000000000] of F64"),
])
def test_safetensors_headers_of_the_wrong_kind_are_input_errors(tmp_path, entry, message):
    """Found by fuzzing the header: a list as dtype, a shape beyond int64 were internal errors."""
    header = json.dumps({"x": entry}).encode()
    path = tmp_path / "h.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    with pytest.raises(InputError) as refused:
        read_tensors(path)
    assert message in str(refused.value)


def test_safetensors_files_of_the_official_writer_read_alike(tmp_path):
    numpy_io = pytest.importorskip("safetensors.numpy")
    state = {k: v.astype(np.float32) for k, v in tl_state(np.random.default_rng(3)).items()}
    numpy_io.save_file(state, str(tmp_path / "o.safetensors"))
    read = read_tensors(tmp_path / "o.safetensors")
    assert all(np.array_equal(read[k], state[k]) for k in state)


@pytest.mark.slow
def test_transformer_lens_import_round_trips_and_verifies(capsys, tmp_path):
    from verifier.importers.transformer_lens import convert, forward
    rng = np.random.default_rng(1)
    state = tl_state(rng)
    path = write_safetensors(tmp_path / "tl.safetensors", state)
    imported = convert(str(path), ["a", "b", "c", "d"], activation="relu")
    assert imported.round_trip_error <= 1e-6
    # the float forward pass of the converted model is the state dict's own, on every length
    ev = verifier.evaluator.reference(imported.model)
    arrays = {k: v.astype(np.float64) for k, v in read_tensors(path).items()}
    for n in range(1, 6):
        tokens = rng.integers(0, 4, size=n)
        mine = ev.forward(tokens[None, :]).scores[0]
        assert np.allclose(mine, forward(arrays, tokens, True, np.sqrt(3))[-1], atol=1e-6, rtol=0)
    code, out, _ = run(capsys, "import", str(path), "-o", str(tmp_path / "m.npz"), "--vocab", "a,b,c,d",
                       "--act", "relu")
    assert code == 0 and "largest difference" in out
    code, out, _ = run(capsys, "run", "--model", str(tmp_path / "m.npz"), "--task", "reference", "--reference",
                       f"{_module(tmp_path)}:last", "--vocab", "a,b,c,d", "--N", 3, "--p", 12)
    assert code in (0, 1) and "model file" in out


def _module(tmp_path):
    path = tmp_path / "last.py"
    path.write_text("def last(tokens):\n    return tokens[-1]\n")
    return path


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.__setitem__("blocks.0.ln1.w", np.ones(6)), "LayerNorm is not supported"),
    (lambda t: t.__setitem__("blocks.0.attn._W_K", np.ones(6)), "not TransformerLens names"),
    (lambda t: t.pop("pos_embed.W_pos"), "only learned absolute positions"),
    (lambda t: t.__setitem__("blocks.1.attn.W_K", np.ones((2, 6, 4))), "blocks.1.attn.W_K has shape"),
])
def test_transformer_lens_refusals(tmp_path, edit, message):
    from verifier.importers.transformer_lens import convert
    state = tl_state(np.random.default_rng(2))
    edit(state)
    path = write_safetensors(tmp_path / "tl.safetensors", state)
    with pytest.raises(InputError, match=message):
        convert(str(path), ["a", "b", "c", "d"], activation="relu")


def typed_safetensors(path, tensors: dict):
    """A .safetensors file that keeps each array's dtype (`write_safetensors` writes float64)."""
    codes = {"float64": "F64", "float32": "F32", "int64": "I64", "int32": "I32", "uint8": "U8", "bool": "BOOL"}
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        data = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": codes[a.dtype.name], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + b"".join(blobs))
    return path


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.__setitem__("unembed.b_U", np.array([2 ** 53 + 1, 0, 0, 0])),
     "tensor 'unembed.b_U' holds the integer 9007199254740993, which float64 (the model format) cannot hold exactly: "
     "it would become 9007199254740992"),
    (lambda t: t.__setitem__("unembed.b_U", np.array([True, False, True, False])), "tensor 'unembed.b_U' is boolean"),
    (lambda t: t.__setitem__("blocks.00.attn.W_Q", t["blocks.0.attn.W_Q"]),
     "blocks.00.attn.W_Q is not TransformerLens"),
    (lambda t: t.__setitem__("blocks.01.attn.mask", np.ones((5, 5), bool)),
     "blocks.01.attn.mask is not TransformerLens"),
])
def test_an_import_coerces_nothing_and_ignores_nothing(tmp_path, capsys, edit, message):
    """An integer float64 would round and a boolean are not read as weights; a tensor under a name
    that is not TransformerLens's exactly (blocks.00 beside blocks.0) is not left unread."""
    state = tl_state(np.random.default_rng(2))
    edit(state)
    path = typed_safetensors(tmp_path / "tl.safetensors", state)
    code, out, err = run(capsys, "import", str(path), "-o", str(tmp_path / "m.npz"), "--vocab", "a,b,c,d",
                         "--act", "relu")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "m.npz").exists()


def test_integer_weights_that_float64_holds_are_imported_exactly(tmp_path):
    from verifier.importers.transformer_lens import convert
    state = tl_state(np.random.default_rng(2))
    state["unembed.b_U"] = np.array([2 ** 60, -(2 ** 53), 3, -4])  # 2^60 is a float64 exactly
    state["blocks.0.attn.mask"] = np.tril(np.ones((5, 5), bool))  # TransformerLens's buffer: not a weight, skipped
    imported = convert(str(typed_safetensors(tmp_path / "tl.safetensors", state)), ["a", "b", "c", "d"],
                       activation="relu")
    assert [int(x) for x in imported.model.readout.b_U] == [2 ** 60, -(2 ** 53), 3, -4]
    assert imported.skipped == ["blocks.0.attn.mask"]


def test_an_import_whose_forward_pass_overflows_is_refused_not_reported_as_a_difference_of_0(tmp_path, capsys):
    """q.k of 1e200-scale maps is inf, the softmax NaN: the round trip said "largest difference 0"."""
    state = tl_state(np.random.default_rng(2))
    state["blocks.0.attn.W_Q"] *= 1e200
    state["blocks.0.attn.W_K"] *= 1e200
    path = write_safetensors(tmp_path / "tl.safetensors", state)
    code, out, err = run(capsys, "import", str(path), "-o", str(tmp_path / "m.npz"), "--vocab", "a,b,c,d",
                         "--act", "relu")
    assert code == 2 and "forward pass of these weights is not finite" in err and "difference" not in out, err
    assert not (tmp_path / "m.npz").exists()


def test_the_round_trip_tolerance_is_relative_to_the_activations(tmp_path, capsys):
    """Activations near 1e9: two float64 forward passes differ by a few roundings of the largest
    values (2e-6 on one machine, 9.5e-7 on another: the BLAS kernels differ), which an absolute 1e-6
    refused as an internal error; relative to the activations, the tolerance admits them."""
    from verifier.importers.transformer_lens import ROUND_TRIP_TOLERANCE, convert
    state = tl_state(np.random.default_rng(0))
    state["embed.W_E"] *= 1e6
    state["pos_embed.W_pos"] *= 1e6
    path = write_safetensors(tmp_path / "tl.safetensors", state)
    imported = convert(str(path), ["a", "b", "c", "d"], activation="relu")
    assert imported.round_trip_error <= ROUND_TRIP_TOLERANCE * imported.round_trip_scale
    assert ROUND_TRIP_TOLERANCE * imported.round_trip_scale > 4e-6  # what an absolute 1e-6 refused, and more
    assert imported.round_trip_scale > 1e9
    code, out, _ = run(capsys, "import", str(path), "-o", str(tmp_path / "m.npz"), "--vocab", "a,b,c,d",
                       "--act", "relu")
    assert code == 0 and "with activations up to 6.04e+09 (tolerance 1e-09 x that, at least 1)" in out


def test_archives_with_two_members_of_one_name_are_refused(tmp_path, capsys):
    """np.load and torch.load read one of two members of one name and ignore the other."""
    import zipfile
    assert run(capsys, "export", "idxl", "--N", "3", "-o", str(tmp_path / "m.npz"))[0] == 0
    with zipfile.ZipFile(tmp_path / "m.npz") as zin, zipfile.ZipFile(tmp_path / "twice.npz", "w") as zout:
        for member in zin.namelist():
            zout.writestr(member, zin.read(member))
        with pytest.warns(UserWarning, match="Duplicate name"):
            zout.writestr("E.npy", zin.read("E.npy"))  # the same bytes: still refused, one of them is unread
    code, out, err = run(capsys, "run", "--model", str(tmp_path / "twice.npz"), "--task", "idxl", "--N", "3",
                         "--p", "8")
    assert code == 2 and "has two archive members named 'E.npy'" in err and out == "", err
    with zipfile.ZipFile(tmp_path / "w.pt", "w") as zout, pytest.warns(UserWarning, match="Duplicate name"):
        zout.writestr("w/data.pkl", b"")
        zout.writestr("w/data.pkl", b"")
    code, _, err = run(capsys, "import", str(tmp_path / "w.pt"), "-o", str(tmp_path / "m2.npz"), "--vocab", "a,b,c,d")
    assert code == 2 and "has two archive members named 'w/data.pkl'" in err, err


def test_gelu_is_refused(tmp_path, capsys):
    path = write_safetensors(tmp_path / "tl.safetensors", tl_state(np.random.default_rng(2)))
    code, _, err = run(capsys, "import", str(path), "-o", str(tmp_path / "m.npz"), "--vocab", "a,b,c,d",
                       "--act", "gelu")
    assert code == 2 and "GELU" in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "m.npz").exists()


def test_torch_state_dict_imports_through_the_weights_only_loader(tmp_path):
    torch = pytest.importorskip("torch")
    from verifier.importers.transformer_lens import convert

    class Tiny(torch.nn.Module):
        """A TransformerLens-named attention-only model, with its own forward pass."""

        def __init__(self, state):
            super().__init__()
            self.p = torch.nn.ParameterDict({k.replace(".", "__"): torch.nn.Parameter(torch.tensor(v))
                                             for k, v in state.items()})

        def forward(self, tokens):
            g = lambda k: self.p[k.replace(".", "__")]
            x = g("embed.W_E")[tokens] + g("pos_embed.W_pos")[: len(tokens)]
            q, k, v = (torch.einsum("pd,hde->hpe", x, g(f"blocks.0.attn.W_{c}")) + g(f"blocks.0.attn.b_{c}")[:, None]
                       for c in "QKV")
            s = torch.einsum("hqe,hke->hqk", q, k) / np.sqrt(q.shape[-1])
            s = s.masked_fill(~torch.tril(torch.ones(len(tokens), len(tokens), dtype=torch.bool)), -torch.inf)
            z = torch.einsum("hqk,hke->hqe", s.softmax(-1), v)
            x = x + torch.einsum("hqe,hed->qd", z, g("blocks.0.attn.W_O")) + g("blocks.0.attn.b_O")
            return x @ g("unembed.W_U") + g("unembed.b_U")

    state = tl_state(np.random.default_rng(4), mlp=0, layers=1)
    tiny = Tiny(state).double()
    path = tmp_path / "tiny.pt"
    torch.save({k: tiny.p[k.replace(".", "__")].detach() for k in state}, path)
    imported = convert(str(path), ["a", "b", "c", "d"])
    ev = verifier.evaluator.reference(imported.model)
    rng = np.random.default_rng(5)
    for n in range(1, 6):
        tokens = rng.integers(0, 4, size=n)
        theirs = tiny(torch.tensor(tokens)).detach().numpy()[-1]
        assert np.allclose(ev.forward(tokens[None, :]).scores[0], theirs, atol=1e-6, rtol=0)
    evil = tmp_path / "evil.pt"
    torch.save({"model": torch.nn.Linear(2, 2)}, evil)  # a pickled module needs a full unpickler
    with pytest.raises(InputError, match="refused"):
        convert(str(evil), ["a", "b", "c", "d"])




@functools.lru_cache(maxsize=None)
def _compiled(program="lib:make_length", max_len=4, vocab=("a", "b", "c")):
    """A compiled Tracr program, once per test session (each compilation starts JAX in a child)."""
    pytest.importorskip("tracr")
    from verifier.importers.tracr import compile_program
    return compile_program(program, list(vocab), max_len)


@pytest.mark.slow
def test_tracr_conversion_round_trips_against_tracr_apply():
    pytest.importorskip("tracr")
    rng = np.random.default_rng(0)
    vocab = ["a", "b", "c"]
    programs = ("make_reverse",)  # four layers; its length is make_length's selector width
    inputs = [[vocab[t] for t in rng.integers(0, 3, n)] for n in range(1, 5)]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        theirs = pool.apply(tracr_outputs, ([(p, inputs) for p in programs], set(vocab), 4))
    for program, outputs in zip(programs, theirs):
        compiled = _compiled(f"lib:{program}")
        assert compiled.round_trip_error <= 1e-6
        ev = verifier.evaluator.reference(compiled.model)
        cols = [int(np.flatnonzero(r)[0]) for r in compiled.model.readout.W_U]
        for words, (residual, answers) in zip(inputs, outputs):
            tokens = np.array([[3] + [vocab.index(w) for w in words]])
            scores = ev.forward(tokens).scores[0]  # positions 1..n
            assert np.allclose(scores, residual[:, cols], atol=1e-6, rtol=0)
            # and its decoded answer is RASP's
            assert [compiled.model.readout.rows[int(i)] for i in scores.argmax(axis=1)] == [str(x) for x in answers]


@pytest.mark.slow
def test_tracr_make_length_is_proved_at_its_p_star_and_refuted_one_bit_below():
    compiled = _compiled()
    frontier = verifier.runs.sweep.frontier(compiled.task, [4], list(range(8, 15)), model=compiled.model, f=4,
                                       scheduler="serial")
    p_star = frontier.rows[0].p_star
    assert p_star is not None and frontier.rows[0].verdicts[p_star - 1] == "refuted"
    for engine in ("exhaustive", "smt"):
        proved = verifier.run(verifier.build_problem(compiled.task, p=p_star, f=4, model=compiled.model), engine)
        below = verifier.run(verifier.build_problem(compiled.task, p=p_star - 1, f=4, model=compiled.model), engine)
        assert proved.verdict == "proved" and below.verdict == "refuted"
        assert below.counterexamples[0].input.startswith("BOS ")


@pytest.mark.slow
def test_verify_tracr_prints_p_star(capsys):
    pytest.importorskip("tracr")
    code, out, err = run(capsys, "tracr", "lib:make_length", "--vocab", "a,b,c", "--max-len", 3, "--p", "9..13",
                         "--f", "3..4", "--no-cache", "--scheduler", "serial")
    assert code == 0 and "Smallest format: p = 12, f = 4" in out and "round trip" in err
    code, out, err = run(capsys, "sweep", "tracr", "--program", "lib:make_length", "--vocab", "a,b,c", "--max-len", 3,
                         "--p", "10..13", "--f", 4, "--no-cache", "--scheduler", "serial")
    assert code == 0 and "| 3 | 1.58 | 12 |" in out
    code, out, err = run(capsys, "tracr", "lib:make_length", "--vocab", "a,b,BOS", "--max-len", 3)
    assert code == 2 and "may not hold BOS" in err


@pytest.mark.slow
def test_transformer_lens_import_with_bos_reads_every_position_after_it(tmp_path, ref):
    from verifier.importers.transformer_lens import convert
    path = write_safetensors(tmp_path / "tl.safetensors", tl_state(np.random.default_rng(6)))
    imported = convert(str(path), ["<s>", "a", "b", "c"], activation="relu", bos="<s>", positions="all",
                       rows=["<s>", "a", "b", "c"])  # BOS is token 0 of the state dict, last in the model file
    assert imported.round_trip_error <= 1e-6 and imported.model.vocab == ["a", "b", "c", "<s>"]
    task = make_task("reference", N=4, reference=f"{ref}:first_at_every_position", vocab="a,b,c")
    problem = verifier.build_problem(task, p=10, model=imported.model)
    result = verifier.run(problem, "exhaustive", max_counterexamples=10_000)
    assert {c.index for c in result.counterexamples} == reference_failures(problem)
    assert all(c.input.startswith("<s> ") and c.position >= 1 for c in result.counterexamples)


def test_a_pt_file_without_torch_is_a_clear_error(tmp_path, monkeypatch):
    path = tmp_path / "w.pt"
    path.write_bytes(b"\x80\x04K\x01.")  # a pickle: it must not be opened without torch's weights-only loader
    monkeypatch.setitem(__import__("sys").modules, "torch", None)
    with pytest.raises(InputError, match="needs torch"):
        read_tensors(path)


def test_sweep_over_f_gives_the_smallest_format(capsys, tmp_path):
    code, out, _ = run(capsys, "sweep", "idxl", "--N", "4", "--p", "3..8", "--f", "1..3", "--no-cache",
                       "--scheduler", "serial", "-o", str(tmp_path / "f.json"))
    doc = json.loads((tmp_path / "f.json").read_text())
    best = doc["best"]
    assert code == 0 and f"Smallest format: p = {best[0]}, f = {best[1]}" in out
    # the smallest format is proved, and one bit less at the same f (when the grid has it) is not
    assert verifier.prove("idxl", N=4, p=best[0], f=best[1]).verdict == "proved"
    if best[0] - 1 >= max(3, best[1]):
        assert verifier.prove("idxl", N=4, p=best[0] - 1, f=best[1]).verdict == "refuted"
    code, _, err = run(capsys, "sweep", "idxl", "--N", "2..4", "--p", "3..8", "--f", "1..3")
    assert code == 2 and "a range of --f takes one N" in err


def test_exact_weights_round_trip_through_the_model_file(tmp_path):
    """Exact rational weights and threshold survive save/load (format version 3), keep their
    fingerprint, and decide as the model in memory does."""
    from fractions import Fraction

    from verifier.constructions import CONSTRUCTIONS
    from verifier.model import exact_array, is_exact, weights_sha256
    from verifier.modelfile import load_model, save_model
    m = CONSTRUCTIONS["equality"].build(make_task("equality", N=6), "paper", None, None, 0, 6)
    m.readout.theta = Fraction(-1, 6)
    m.layers[1].heads[0].W_V = exact_array(m.layers[1].heads[0].W_V) / 3
    m.validate()
    back = load_model(save_model(m, tmp_path / "exact.npz"))
    assert back.readout.theta == Fraction(-1, 6) and is_exact(back.layers[1].heads[0].W_V)
    assert weights_sha256(back) == weights_sha256(m)
    a, b = (verifier.run(verifier.build_problem("equality", N=6, p=10, model=x), "exhaustive", max_counterexamples=64)
            for x in (m, back))
    assert (a.verdict, [c.input for c in a.counterexamples]) == (b.verdict, [c.input for c in b.counterexamples])
    m.readout.theta = float(m.readout.theta)  # its float64 neighbour is another model
    assert weights_sha256(back) != weights_sha256(m)


# -- issue 24: the walkthrough's first step into a directory that does not exist --------------------------
def test_first_token_example_into_a_missing_directory_is_one_line_exit_2(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    target = tmp_path / "byom" / "first.safetensors"
    done = subprocess.run([sys.executable, str(root / "docs/examples/first_token.py"), str(target)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and f"the directory {target.parent} does not exist" in done.stderr
    assert not target.parent.exists()


def test_every_writer_says_a_missing_directory_in_one_line(tmp_path):
    with pytest.raises(InputError, match=r"the directory .*nowhere does not exist"):
        write_safetensors(tmp_path / "nowhere" / "x.safetensors", {"a": np.zeros(2)})
    with pytest.raises(InputError, match=r"the directory .*nowhere does not exist"):
        save_model(random_model(np.random.default_rng(0), ["a", "b"], 2, C=2), tmp_path / "nowhere" / "m.npz")
