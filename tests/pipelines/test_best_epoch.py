"""KeepBest: the best epoch's weights kept and restored, early stopping, state across
restarts; and through a pipeline's `fit`."""

import json
import os

import keras
import numpy as np
import pytest

from lmpipe.datasets import WordPieceTokenizer
from lmpipe.models import BertConfig, bert
from lmpipe.pipelines import TextClassifier
from lmpipe.training.best_epoch import KeepBest, lower_is_better


def small_model():
    inputs = keras.Input((3,))
    return keras.Model(inputs, keras.layers.Dense(2)(inputs))


def run_epochs(keep, model, values):
    """Feed `values` of the monitor, one per epoch, setting the weights to the epoch index
    before each, as training would change them."""
    keep.set_model(model)
    for epoch, value in enumerate(values):
        model.set_weights([np.full_like(w, epoch) for w in model.get_weights()])
        keep.on_epoch_end(epoch, {"loss": 1.0, keep.monitor: value})
        if keep.stopped:
            break
    return epoch


def test_the_best_epoch_is_restored_and_patience_stops(tmp_path, capsys):
    model = small_model()
    keep = KeepBest("val_loss", patience=2, directory=str(tmp_path))
    last = run_epochs(keep, model, [0.9, 0.5, 0.6, 0.7, 0.1])
    assert last == 3 and keep.stopped and model.stop_training  # epochs 3 and 4 gained nothing
    assert (keep.best, keep.best_epoch, keep.wait) == (0.5, 1, 2)
    keep.restore_best(model)
    assert all(np.all(w == 1) for w in model.get_weights())
    out = capsys.readouterr().out
    assert "Stopped early after epoch 4: no gain in val_loss for 2 epochs" in out
    assert "Kept the weights of epoch 2: val_loss 0.5000" in out

    # A restart reads the state and the weights from the directory.
    state = json.loads((tmp_path / "best" / "state.json").read_text())
    assert state["monitor"] == "val_loss"
    assert state["epochs"][-1] == {
        "epoch": 3,
        "step": None,  # the model has no optimizer
        "weights_file": "epoch-2.weights.h5",
        "best": 0.5,
        "best_epoch": 1,
        "wait": 2,
        "stopped": True,
    }
    assert sorted(os.listdir(tmp_path / "best")) == [
        "epoch-1.weights.h5",
        "epoch-2.weights.h5",
        "state.json",
    ]
    again, fresh = KeepBest("val_loss", patience=2, directory=str(tmp_path)), small_model()
    again.load()
    assert again.stopped and again.best_epoch == 1
    again.restore_best(fresh)
    assert all(np.all(w == 1) for w in fresh.get_weights())


def run_steps(keep, model, values, first_epoch=0, steps_per_epoch=3):
    """`run_epochs` with an optimizer whose step is the epoch's end, as a checkpoint's is."""
    keep.set_model(model)
    for epoch, value in enumerate(values, first_epoch):
        model.optimizer.iterations.assign((epoch + 1) * steps_per_epoch)
        model.set_weights([np.full_like(w, epoch) for w in model.get_weights()])
        keep.on_epoch_end(epoch, {"loss": 1.0, keep.monitor: value})
        if keep.stopped:
            return epoch
    return epoch


def compiled_model():
    model = small_model()
    model.compile(optimizer="sgd", loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def test_a_kill_between_the_best_state_and_the_checkpoint_keeps_the_same_epoch(tmp_path):
    values = [0.9, 0.5, 0.4, 0.6, 0.7]
    uninterrupted = KeepBest("val_loss", patience=2, directory=str(tmp_path / "a"), verbose=0)
    assert run_steps(uninterrupted, compiled_model(), values) == 4
    assert (uninterrupted.best_epoch, uninterrupted.wait) == (2, 2)

    # Epochs 1 to 3 run; epoch 3's best state and weights are written, then the kill comes
    # before its checkpoint (step 9): the run resumes from the checkpoint of step 6.
    killed = KeepBest("val_loss", patience=2, directory=str(tmp_path / "b"), verbose=0)
    run_steps(killed, compiled_model(), values[:3])
    resumed, model = KeepBest("val_loss", patience=2, directory=str(tmp_path / "b")), small_model()
    resumed.load(steps=6)
    assert (resumed.best, resumed.best_epoch, resumed.wait) == (0.5, 1, 0)
    resumed.restore_best(model)
    assert all(np.all(w == 1) for w in model.get_weights())  # epoch 2's, not epoch 3's
    resumed.verbose = 0
    assert run_steps(resumed, compiled_model(), values[2:], first_epoch=2) == 4
    assert (resumed.best, resumed.best_epoch, resumed.wait) == (0.4, 2, 2)
    resumed.restore_best(model)
    assert all(np.all(w == 2) for w in model.get_weights())
    again = KeepBest("val_loss", directory=str(tmp_path / "b"))
    again.load(steps=15)
    assert (again.best_epoch, again.wait, again.stopped) == (2, 2, True)
    # Only the weights a kept epoch's state names stay.
    assert sorted(os.listdir(tmp_path / "b" / "best")) == [
        "epoch-2.weights.h5",
        "epoch-3.weights.h5",
        "state.json",
    ]


def test_higher_is_better_for_accuracies_and_no_patience_never_stops():
    assert lower_is_better("val_loss") and lower_is_better("val_mlm_perplexity")
    assert not lower_is_better("val_accuracy") and not lower_is_better("val_macro_f1")
    model = small_model()
    keep = KeepBest("val_accuracy", verbose=0)
    assert run_epochs(keep, model, [0.5, 0.7, 0.6, 0.6, 0.65, 0.1]) == 5
    assert not keep.stopped and keep.best_epoch == 1


def test_bad_monitor_patience_and_state_are_refused(tmp_path):
    with pytest.raises(ValueError, match="`monitor` must name a validation metric"):
        KeepBest("loss")
    with pytest.raises(ValueError, match="`patience` must be a positive integer"):
        KeepBest("val_loss", patience=0)
    keep = KeepBest("val_f1")
    keep.set_model(small_model())
    with pytest.raises(ValueError, match=r"'val_f1' is not among .*val_accuracy, val_loss"):
        keep.on_epoch_end(0, {"loss": 1.0, "val_loss": 0.5, "val_accuracy": 0.5})
    (tmp_path / "best").mkdir()
    (tmp_path / "best" / "state.json").write_text('{"monitor": "val_loss", "best": ')
    with pytest.raises(ValueError, match=r"state.json cannot be read .*delete it"):
        KeepBest("val_loss", directory=str(tmp_path)).load()
    (tmp_path / "best" / "state.json").write_text(
        '{"monitor": "val_loss", "best": 1, "best_epoch": 0, "wait": 0, "stopped": false}'
    )
    with pytest.raises(ValueError, match="kept the best epoch by val_loss, this run asks"):
        KeepBest("val_accuracy", directory=str(tmp_path)).load()
    with pytest.raises(ValueError, match="model.weights.h5 is missing"):
        keep = KeepBest("val_loss", directory=str(tmp_path), verbose=0)
        keep.load()
        keep.restore_best(small_model())


VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "red", "blue", "a", "b", "c"]


def examples(count, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, count)
    texts = [f"{'a b' if rng.random() < 0.5 else 'c'} {['red', 'blue'][y]}" for y in labels]
    return texts, labels.tolist()


def test_fit_stops_early_and_a_rerun_keeps_the_best_without_training(tmp_path, capsys):
    tokenizer = WordPieceTokenizer(VOCABULARY)
    config = BertConfig.tiny(vocabulary_size=len(VOCABULARY), hidden_dim=32, intermediate_dim=64)
    keras.utils.set_random_seed(0)
    encoder = bert(config)

    def fit():
        # Class names (a tuple in the options): a rerun must still match run.json.
        pipe = TextClassifier(tokenizer, encoder, num_classes=2, seq_len=8, labels=("red", "blue"))
        # A learning rate too small to change a prediction: val_accuracy never gains, so
        # patience 1 stops after the second epoch, and the first epoch's weights are kept.
        history = pipe.fit(
            examples(64, 0),
            batch_size=16,
            epochs=5,
            validation=examples(32, 1),
            monitor="val_accuracy",
            patience=1,
            learning_rate=1e-12,
            checkpoint_dir=str(tmp_path),
            verbose=1,
        )
        return pipe, history

    pipe, history = fit()
    assert len(history.history["val_accuracy"]) == 2
    assert "val_macro_f1" in history.history
    out = capsys.readouterr().out
    assert "Stopped early after epoch 2: no gain in val_accuracy for 1 epoch" in out
    assert "Kept the weights of epoch 1" in out
    weights = pipe.model.get_weights()

    again, history = fit()
    assert history.history == {}
    out = capsys.readouterr().out
    assert "Training already stopped early" in out and "Kept the weights of epoch 1" in out
    for kept, restored in zip(weights, again.model.get_weights(), strict=True):
        np.testing.assert_array_equal(kept, restored)
    assert os.path.exists(tmp_path / "best" / "epoch-1.weights.h5")


def test_patience_without_validation_is_refused():
    tokenizer = WordPieceTokenizer(VOCABULARY)
    encoder = bert(BertConfig.tiny(vocabulary_size=len(VOCABULARY), hidden_dim=32))
    pipe = TextClassifier(tokenizer, encoder, num_classes=2, seq_len=8)
    with pytest.raises(ValueError, match="`patience` .* needs `validation`"):
        pipe.fit(examples(16, 0), batch_size=8, patience=2)


def test_a_monitor_that_is_no_metric_is_refused_before_the_first_step():
    tokenizer = WordPieceTokenizer(VOCABULARY)
    encoder = bert(BertConfig.tiny(vocabulary_size=len(VOCABULARY), hidden_dim=32))
    pipe = TextClassifier(tokenizer, encoder, num_classes=2, seq_len=8)

    class CountSteps(keras.callbacks.Callback):
        steps = 0

        def on_train_batch_end(self, batch, logs=None):
            CountSteps.steps += 1

    with pytest.raises(ValueError) as raised:
        pipe.fit(
            examples(16, 0),
            batch_size=8,
            validation=examples(8, 1),
            monitor="val_nonsense",
            callbacks=[CountSteps()],
            verbose=0,
        )
    assert str(raised.value) == (
        "`monitor`='val_nonsense' is not among the validation metrics of this model (val_loss, "
        "val_accuracy, val_macro_f1)."
    )
    assert CountSteps.steps == 0
