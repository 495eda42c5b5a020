"""BertPretraining.fit: learning, determinism, distribution, resume after kill -9, errors."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from lmpipe.contract import STREAM_POSITION
from lmpipe.datasets import TextCorpus, WordPieceTokenizer
from lmpipe.models import AlbertConfig, BertConfig
from lmpipe.pipelines import AlbertPretraining, BertPretraining, distribution_strategy
from lmpipe.training.distribution import per_replica_batch_size
from tests.local_cluster import run_workers

SCRIPT = os.path.join(os.path.dirname(__file__), "fit_script.py")


@pytest.fixture(scope="module")
def corpus():
    return TextCorpus.shakespeare(genres=["comedies"])


@pytest.fixture(scope="module")
def tokenizer(corpus):
    sample = [sentence for document in list(corpus.iter_documents())[:20] for sentence in document]
    return WordPieceTokenizer.train(sample, vocab_size=600)


def tiny_pipeline(tokenizer, seed=1, objective="nsp", cls=BertPretraining, config=None):
    config = config or BertConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=64,
        num_heads=2,
        intermediate_dim=128,
        max_sequence_length=48,
    )
    return cls(tokenizer, seq_len=48, objective=objective, seed=seed, config=config)


def test_loss_falls_on_real_text_and_the_same_seed_gives_the_same_curve(corpus, tokenizer):
    curves = []
    for _ in range(2):
        pipe = tiny_pipeline(tokenizer)
        history = pipe.fit(
            corpus, batch_size=16, epochs=3, steps_per_epoch=8, learning_rate=3e-3, verbose=0
        )
        curves.append(history.history)
    losses = curves[0]["loss"]
    assert losses[-1] < losses[0] - 0.3, losses
    assert curves[0]["mlm_loss"][-1] < curves[0]["mlm_loss"][0]
    for name in curves[0]:
        np.testing.assert_allclose(curves[0][name], curves[1][name], rtol=1e-6)
    evaluation = pipe.evaluate(corpus, batch_size=16, steps=3, verbose=0)
    assert set(evaluation) >= {"loss", "mlm_loss", "mlm_accuracy", "pair_loss", "pair_accuracy"}


def test_albert_pretraining_trains_with_sop_and_a_shared_block(corpus, tokenizer):
    config = AlbertConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        embedding_dim=16,
        hidden_dim=64,
        num_heads=2,
        intermediate_dim=128,
        max_sequence_length=48,
    )
    pipe = tiny_pipeline(tokenizer, cls=AlbertPretraining, objective=None, config=config)
    assert pipe.options.objective == "sop" and pipe.masker.max_ngram == 3
    history = pipe.fit(corpus, batch_size=8, epochs=1, steps_per_epoch=3, verbose=0)
    assert set(history.history) >= {"sop_labels" and "pair_accuracy", "mlm_accuracy"}


@pytest.mark.parametrize("option", [{"mixed_precision": "mixed_bfloat16"}, {"jit_compile": True}])
def test_mixed_precision_and_xla_train(corpus, tokenizer, option):
    pipe = tiny_pipeline(tokenizer)
    history = pipe.fit(corpus, batch_size=8, epochs=1, steps_per_epoch=3, verbose=0, **option)
    assert np.isfinite(history.history["loss"][0])


def test_save_and_load_keep_the_model_and_the_tied_head(tmp_path, corpus, tokenizer):
    pipe = tiny_pipeline(tokenizer)
    pipe.fit(corpus, batch_size=8, epochs=1, steps_per_epoch=2, verbose=0)
    pipe.save(str(tmp_path / "saved"))
    loaded = BertPretraining.load(str(tmp_path / "saved"))
    features, _ = next(iter(pipe.dataset(corpus, batch_size=4)))
    del features[STREAM_POSITION]  # the stream's, not a model input
    for name, value in pipe.model(features).items():
        np.testing.assert_allclose(loaded.model(features)[name], value, atol=1e-6)
    embedding = loaded.model.encoder.get_layer("embedding").token_embedding.embeddings
    assert loaded.model.get_layer("mlm_head").token_embedding.embeddings is embedding
    assert loaded.options == pipe.options


def run_script(out, *arguments, env=None, timeout=600):
    return subprocess.run(
        [sys.executable, SCRIPT, str(out), *arguments],
        env=env,
        timeout=timeout,
        capture_output=True,
        text=True,
    )


def replica_weights(path):
    """{variable: [value on each replica]} from fit_script's result.npz."""
    weights = {}
    with np.load(path) as result:
        for key in result.files:
            name, _ = key.split("@")
            weights.setdefault(name, []).append(result[key])
    return weights


# Two replicas without XLA and without dropout (XLA draws other random numbers), for the
# tests of both: one process for the two.
TWO_REPLICAS = ["--logical-cpus", "2", "--dropout", "0", "--epochs", "1", "--steps", "2"]


@pytest.fixture(scope="module")
def two_replicas(tmp_path_factory):
    out = tmp_path_factory.mktemp("two_replicas")
    result = run_script(out, *TWO_REPLICAS)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.mark.slow
def test_mirrored_strategy_on_two_logical_cpus_keeps_replicas_identical(two_replicas):
    weights = replica_weights(two_replicas / "result.npz")
    assert all(len(values) == 2 for values in weights.values())
    for values in weights.values():
        np.testing.assert_array_equal(values[0], values[1])
    history = json.loads((two_replicas / "history.json").read_text())
    assert history["steps"] == 2


@pytest.mark.slow
def test_xla_with_two_replicas_compiles_each_replica_and_trains_as_without(tmp_path, two_replicas):
    # Keras compiles the step of all replicas as one XLA program, which fails with two
    # devices; lmpipe compiles each replica's forward and backward pass.
    logging_on = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0")
    compiled = run_script(tmp_path / "xla", *TWO_REPLICAS, "--jit-compile", env=logging_on)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    assert "Compiled cluster using XLA" in compiled.stderr
    with_xla = replica_weights(tmp_path / "xla" / "result.npz")
    without = replica_weights(two_replicas / "result.npz")
    for name, values in with_xla.items():
        np.testing.assert_array_equal(values[0], values[1])
        np.testing.assert_allclose(values[0], without[name][0], rtol=1e-5, atol=1e-6)


def multi_worker_fit(tmp_path, checkpoint_dirs, *arguments, timeout=300):
    """fit_script on two local workers (worker i checkpointing in `checkpoint_dirs[i]`, with
    its temporary files under tmp_path/tmp); returns `[(returncode, output)]`."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    commands = [
        [
            sys.executable,
            SCRIPT,
            str(tmp_path / f"worker{index}"),
            "--strategy",
            "multi_worker",
            "--checkpoint-dir",
            str(directory),
            *arguments,
        ]
        for index, directory in enumerate(checkpoint_dirs)
    ]
    return run_workers(commands, timeout=timeout, env={"TMPDIR": str(tmp_path / "tmp")})


@pytest.mark.slow
def test_multi_worker_strategy_on_two_local_workers_ends_with_identical_weights(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    for returncode, output in multi_worker_fit(tmp_path, [checkpoints, checkpoints]):
        assert returncode == 0, output[-3000:]
    first = replica_weights(tmp_path / "worker0" / "result.npz")
    second = replica_weights(tmp_path / "worker1" / "result.npz")
    assert first.keys() == second.keys()
    for name in first:
        np.testing.assert_array_equal(first[name][0], second[name][0])
    # Only the chief's checkpoints are kept, in the shared checkpoint directory; the other
    # worker's temporary ones are removed.
    assert (checkpoints / "ckpt-8.index").exists()
    assert not list((tmp_path / "tmp").glob("lmpipe-worker-*"))


@pytest.mark.slow
def test_workers_resuming_from_different_steps_stop_with_an_error_naming_both(tmp_path):
    # A first run leaves ckpt-2 in the chief's directory; the other worker's directory is not
    # the same storage, so it finds nothing there.
    chief_only = ["--epochs", "1", "--steps", "2", "--checkpoint-dir", str(tmp_path / "chief")]
    first = run_script(tmp_path / "first", *chief_only)
    assert first.returncode == 0, first.stderr[-3000:]
    directories = [tmp_path / "chief", tmp_path / "other"]
    results = multi_worker_fit(tmp_path, directories, "--epochs", "2", "--steps", "2")
    for (returncode, output), own, other in zip(results, (2, 0), (0, 2), strict=True):
        assert returncode not in (0, None), output[-3000:]
        assert f"The workers resume from different steps: this one from step {own}" in output
        assert f"others from step {other}. Every worker must read the same" in output
    assert not (tmp_path / "worker0" / "result.npz").exists()
    assert not list((tmp_path / "tmp").glob("lmpipe-worker-*"))


def test_a_worker_whose_cluster_never_forms_gives_up_with_a_message(tmp_path):
    create = (
        "from lmpipe.pipelines import distribution_strategy\n"
        "distribution_strategy('multi_worker', cluster_timeout=2)\n"
        "print('created')\n"
    )
    # Worker 0 of two, the other never started (as when one worker of a failed run is
    # restarted alone).
    [(returncode, output)] = run_workers(
        [[sys.executable, "-c", create]], timeout=120, cluster_size=2
    )
    assert returncode not in (0, None), output[-3000:]
    assert "error: worker 0 waited 2 s for the 2 tasks of the cluster in TF_CONFIG" in output
    assert "restart all of them" in output and "created" not in output


@pytest.mark.slow
def test_kill_9_during_fit_then_the_same_command_resumes(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    command = [
        sys.executable,
        SCRIPT,
        str(tmp_path / "out"),
        "--epochs",
        "3",
        "--steps",
        "6",
        "--checkpoint-dir",
        str(checkpoints),
        "--checkpoint-every",
        "2",
        "--step-delay",
        "0.3",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The uninterrupted run to compare with, meanwhile (the killed one mostly waits).
    reference = subprocess.Popen(
        [sys.executable, SCRIPT, str(tmp_path / "reference"), "--epochs", "3", "--steps", "6"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    # Kill it once a checkpoint past the first epoch exists, in the middle of an epoch.
    while not (checkpoints / "ckpt-8.index").exists():
        assert process.poll() is None, "the run ended before it could be killed"
        assert time.time() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (tmp_path / "out" / "history.json").exists()

    resumed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    history = json.loads((tmp_path / "out" / "history.json").read_text())
    assert history["steps"] == 18  # the step counter continued to 3 epochs x 6 steps
    # Resumed at step 8 or later (epoch 2 of 3): epoch 1 is never repeated.
    assert history["epochs"][0] == 1 and history["epochs"][-1] == 2

    _, errors = reference.communicate(timeout=600)
    assert reference.returncode == 0, errors[-3000:]
    resumed_weights = replica_weights(tmp_path / "out" / "result.npz")
    reference_weights = replica_weights(tmp_path / "reference" / "result.npz")
    for name in reference_weights:
        np.testing.assert_allclose(resumed_weights[name][0], reference_weights[name][0], atol=1e-5)
    # (A finished run is not repeated: test_pipeline's resume test, in process.)


def test_resuming_with_another_configuration_is_a_clear_error(tmp_path, corpus, tokenizer):
    tiny_pipeline(tokenizer).fit(
        corpus, batch_size=8, epochs=1, steps_per_epoch=2, checkpoint_dir=str(tmp_path), verbose=0
    )
    wider = BertConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=32,
        num_heads=2,
        intermediate_dim=64,
        max_sequence_length=48,
    )
    with pytest.raises(ValueError, match="another model configuration"):
        tiny_pipeline(tokenizer, config=wider).fit(
            corpus,
            batch_size=8,
            epochs=1,
            steps_per_epoch=2,
            checkpoint_dir=str(tmp_path),
            verbose=0,
        )


def test_bad_training_arguments_are_clear_errors(corpus, tokenizer, monkeypatch):
    pipe = tiny_pipeline(tokenizer)
    with pytest.raises(ValueError, match="Unknown `strategy`"):
        pipe.fit(corpus, batch_size=8, steps_per_epoch=1, strategy="tpu_pod")
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ValueError, match="TF_CONFIG is not valid JSON"):
        distribution_strategy("multi_worker")
    monkeypatch.setenv(
        "TF_CONFIG",
        json.dumps(
            {"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 3}}
        ),
    )
    with pytest.raises(ValueError, match="index 3 is out of range"):
        distribution_strategy("multi_worker")
    monkeypatch.delenv("TF_CONFIG")
    with pytest.raises(ValueError, match="mixed_precision"):
        pipe.fit(corpus, batch_size=8, steps_per_epoch=1, mixed_precision="float8")
    with pytest.raises(ValueError, match="vocabulary_size"):
        BertPretraining(tokenizer, config=BertConfig.tiny(vocabulary_size=99))
    two_replicas = type("TwoReplicas", (), {"num_replicas_in_sync": 2})()
    with pytest.raises(ValueError, match="not divisible by the 2 replicas"):
        per_replica_batch_size(two_replicas, 9)
    assert per_replica_batch_size(two_replicas, 8) == 4
    with pytest.raises(ValueError, match="max_sequence_length"):
        BertPretraining(
            tokenizer,
            seq_len=600,
            config=BertConfig.tiny(vocabulary_size=tokenizer.vocabulary_size),
        )
