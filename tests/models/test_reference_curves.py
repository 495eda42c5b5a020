"""lmpipe's training against the reference implementations' learning curves: a tiny BERT and
a tiny GPT trained by lmpipe for 100 steps from the initial weights and on the batches that
Hugging Face's `BertForMaskedLM` and `GPT2LMHeadModel` trained with, dropout 0, follow the
reference's loss step by step (fixtures/make_reference_curves.py; benchmarks/learning.py runs
the same comparison at a larger size, and over 2,000 steps with dropout)."""

import json
import pathlib

import keras
import numpy as np
import pytest

from lmpipe.interop.hf import gpt2_from_pretrained
from lmpipe.interop.hf.encoders import bert_config_from_hf, load_pretrainer_weights
from lmpipe.models.pretraining import BertPretrainer
from lmpipe.training.schedules import adamw

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "reference_curves"
# The largest |loss difference| allowed at any of the 100 steps, the losses being about 6:
# measured 9.5e-7 (float32 in both libraries, TensorFlow against PyTorch, on an AVX-512 CPU
# with oneDNN on and off); the margin is for other CPUs' kernels, whose rounding the steps
# carry forward. A tenth of the weight decay moves the curve by 1e-3.
TOLERANCE = 2e-5


def reference_run(family):
    """(the initial model, the batches, the reference's curve and settings) of `family`."""
    folder = FIXTURES / family
    curve = json.loads((folder / "curve.json").read_text())
    if family == "bert":
        model = BertPretrainer(
            bert_config_from_hf(folder / "config.json"),
            objective="mlm",
            max_predictions=curve["max_predictions"],
        )
        assert load_pretrainer_weights(model, folder) == ["mlm_head"]
    else:
        model = gpt2_from_pretrained(folder)
    with np.load(folder / "batches.npz") as stored:
        arrays = {key: stored[key] for key in stored.files}
    batches = [
        tuple(
            {
                key.split("/")[1]: value[step]
                for key, value in arrays.items()
                if key.startswith(part)
            }
            for part in ("features/", "labels/")
        )
        for step in range(curve["total_steps"])
    ]
    return model, batches, curve


def lmpipe_losses(model, batches, curve, **changes):
    """The loss of each step of `model` trained on `batches` as `pipeline.fit` trains (its
    AdamW with the curve's settings, `changes` overriding them)."""
    settings = {
        name: curve[name]
        for name in ("learning_rate", "total_steps", "warmup_steps", "weight_decay", "clipnorm")
    }
    settings.update(changes)
    model.compile(optimizer=adamw(**settings), jit_compile=False)
    return np.array(
        [model.train_on_batch(x, y, return_dict=True)["loss"] for x, y in batches], np.float64
    )


@pytest.mark.parametrize("family", ["bert", "gpt"])
def test_training_follows_the_reference_curve_from_the_same_weights_and_batches(family):
    keras.utils.set_random_seed(0)
    model, batches, curve = reference_run(family)

    losses = lmpipe_losses(model, batches, curve)

    reference = np.array(curve["losses"])
    assert len(losses) == len(reference) == 100
    # The curve goes somewhere: the first and the last losses differ by far more than the
    # tolerance, so a step's worth of different maths shows.
    assert reference[0] - reference[-1] > 0.5
    np.testing.assert_allclose(losses, reference, rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize(
    "change", [{"weight_decay": 0.01}, {"clipnorm": None}, {"warmup_steps": 5}]
)
def test_other_optimizer_maths_leaves_the_reference_curve(change):
    """The comparison is sharp enough to see one setting of the optimizer changed: a tenth of
    the weight decay, no clipping, or a shorter warmup."""
    keras.utils.set_random_seed(0)
    model, batches, curve = reference_run("bert")

    losses = lmpipe_losses(model, batches, curve, **change)

    assert np.abs(losses - np.array(curve["losses"])).max() > 10 * TOLERANCE
