"""export_text_function: text in, tensors (strings too) out, loaded as TF Serving loads it."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.datasets import WordPieceTokenizer
from lmpipe.serving import ServingProcess, read_warmup_requests
from lmpipe.serving.text_export import export_text_function, saveable_variables

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "dog", "ran"]


class Scorer(tf.Module):
    """Tokenize, embed, score: a Keras model and a tokenizer behind one text function."""

    def __init__(self):
        super().__init__()
        self.tokenizer = WordPieceTokenizer(VOCABULARY)
        self.embedding = keras.layers.Embedding(len(VOCABULARY), 3, name="embedding")
        self.embedding.build([None])
        self.model_variables = saveable_variables(self.embedding.variables)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], jit_compile=False)
    def serve(self, text):
        ids = self.tokenizer.tokenize(text)  # [batch, (pieces)]
        vectors = tf.reduce_sum(self.embedding(ids.to_tensor()), axis=1)  # [batch, 3]
        first = self.tokenizer.detokenize(ids[:, :1])  # [batch]
        return {"vector": tf.cast(vectors, tf.float32), "first_word": first}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    module = Scorer()
    path = export_text_function(
        str(tmp_path_factory.mktemp("text")), module, module.serve, warmup_texts=["the cat"]
    )
    return module, path


def test_tf1_loader_serves_the_same_outputs_as_the_function(exported):
    module, path = exported
    texts = np.array([b"the cat sat", b"dog ran"], object)
    expected = module.serve(tf.constant(texts))
    with ServingProcess(path) as server:
        served = server.predict("serving_default", {"text": texts})
    np.testing.assert_allclose(served["vector"], expected["vector"].numpy(), rtol=1e-6)
    assert served["first_word"].tolist() == [b"the", b"dog"]


def test_warmup_request_calls_serving_default_with_the_input_name(exported):
    _, path = exported
    (log,) = read_warmup_requests(path)
    request = log.predict_log.request
    assert request.model_spec.signature_name == "serving_default"
    assert list(request.inputs) == ["text"]


def test_function_without_input_signature_is_refused(tmp_path):
    function = tf.function(lambda text: {"text": text})
    with pytest.raises(ValueError, match="input signature"):
        export_text_function(str(tmp_path), tf.Module(), function)


def test_output_without_batch_axis_is_refused_before_writing(tmp_path):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def count(text):
        return {"count": tf.size(text)}

    with pytest.raises(ValueError, match="batch as its first axis"):
        export_text_function(str(tmp_path), tf.Module(), count)
    assert not list(tmp_path.iterdir())
