"""The training-model bases: functional and subclass-style models live side by side."""

import numpy as np

from lmpipe.models import BertConfig, XLNetConfig, XLNetPretrainer
from lmpipe.models.pretraining import BertPretrainer
from lmpipe.models.trainable import FunctionalTrainableModel, TrainableModel


def test_a_functional_model_does_not_turn_subclass_models_functional():
    # Building a functional model makes Keras rewrite its class's ancestors to `Functional`;
    # subclass-style models must keep working in the same process afterwards.
    bert = BertPretrainer(BertConfig.tiny(vocabulary_size=50), objective="mlm", max_predictions=2)
    xlnet = XLNetPretrainer(
        XLNetConfig.tiny(vocabulary_size=50, hidden_dim=16, intermediate_dim=32),
        max_predictions=2,
    )
    assert isinstance(bert, FunctionalTrainableModel) and isinstance(xlnet, TrainableModel)
    assert not isinstance(xlnet, FunctionalTrainableModel)
    features = {
        "token_ids": np.array([[5, 6, 7, 3, 2]], np.int32),
        "segment_ids": np.array([[0, 0, 0, 0, 2]], np.int32),
        "padding_mask": np.ones([1, 5], np.int32),
        "perm_mask": np.tril(np.ones([1, 5, 5], np.float32), -1),
        "target_mapping": np.eye(5, dtype=np.float32)[None, :2],
    }
    assert xlnet(features)["lm_logits"].shape == (1, 2, 50)


def test_evaluate_counts_each_batch_of_a_static_batch_size_once():
    # Keras' `loss` weighs a batch by tf.shape(x)[0], a constant for a static batch size,
    # which TensorFlow ran in the call that found the dataset exhausted too: one batch of a
    # GPT evaluated to `loss` half its `next_token_loss`.
    import tensorflow as tf

    from lmpipe.models import GptConfig
    from lmpipe.models.gpt import GptCausalLM

    model = GptCausalLM(GptConfig.tiny(vocabulary_size=30))
    model.compile(optimizer="sgd")
    rng = np.random.default_rng(0)
    weights = np.ones([4, 6], np.float32)
    weights[3, 2:] = 0  # the token mean differs from the row mean
    batch = (
        {"token_ids": rng.integers(5, 30, [4, 6]).astype("int32"), "padding_mask": weights > 0},
        {"next_ids": rng.integers(5, 30, [4, 6]).astype("int32"), "weights": weights},
    )
    batch[0]["padding_mask"] = batch[0]["padding_mask"].astype("int32")
    for batches in (1, 3):
        # Of unknown length, as a pass over a corpus is: Keras reads until it is exhausted.
        dataset = tf.data.Dataset.from_tensors(batch).repeat(batches).filter(lambda x, y: True)
        assert dataset.element_spec[0]["token_ids"].shape == (4, 6)  # static
        results = model.evaluate(dataset, return_dict=True, verbose=0)
        np.testing.assert_allclose(results["loss"], results["next_token_loss"], rtol=1e-6)
