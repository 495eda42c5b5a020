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
