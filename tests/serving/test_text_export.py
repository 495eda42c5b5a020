"""export_text_function: text in, tensors (strings too) out, loaded as TF Serving loads it."""

import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import lmpipe
from lmpipe.datasets import WordPieceTokenizer
from lmpipe.serving import ServingProcess, read_warmup_requests
from lmpipe.serving.text_export import export_text_function, saveable_variables, serving_module

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


@tf.function(
    input_signature=[
        tf.TensorSpec([None], tf.string, name="question"),
        tf.TensorSpec([None], tf.string, name="context"),
    ],
    jit_compile=False,
)
def joined(question, context):
    return {"joined": tf.strings.join([question, context], separator=" | ")}


def test_a_function_of_several_texts_is_served_with_a_warmup_text_for_each(tmp_path):
    module = serving_module([], tokenizer=WordPieceTokenizer(VOCABULARY))
    warmup = {"question": ["who sat?"], "context": ["the cat sat"]}
    path = export_text_function(str(tmp_path), module, joined, warmup_texts=warmup)
    (log,) = read_warmup_requests(path)
    request = log.predict_log.request
    assert sorted(request.inputs) == ["context", "question"]
    with ServingProcess(path) as server:
        served = server.predict(
            "serving_default",
            {"question": np.array([b"who?"], object), "context": np.array([b"a cat"], object)},
        )
    assert served["joined"].tolist() == [b"who? | a cat"]


def test_warmup_texts_must_name_every_input_of_several(tmp_path):
    with pytest.raises(ValueError, match=r"texts for the inputs \['question', 'context'\]"):
        export_text_function(str(tmp_path), tf.Module(), joined, warmup_texts={"question": ["a"]})
    with pytest.raises(ValueError, match=r"must be a dict \{input name: texts\}"):
        export_text_function(str(tmp_path), tf.Module(), joined, warmup_texts=["a"])
    assert not list(tmp_path.iterdir())


def test_only_the_export_protocol_writes_saved_models():
    """Every family's export goes through `lmpipe.serving.protocol.write_version` (by
    `export_saved_model` or `export_text_function`): no other module saves or publishes."""
    package = pathlib.Path(lmpipe.__file__).parent
    writers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "tf.saved_model.save(" in path.read_text() or "versions.publish(" in path.read_text()
    )
    assert writers == ["serving/protocol.py"]
