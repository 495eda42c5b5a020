"""One scenario, every family: the `Pipeline` surface is the same for all of them.

ALBERT and XLNet run with SentencePiece models and GPT with byte-level BPE (as in their
papers), the others with WordPiece: the scenario holds for every tokenizer.

Build, `dataset`, `fit` two steps, `evaluate` (a dict of floats), `save`, load back with the
one `lmpipe.pipelines.load` (same options, same evaluation), `export`, and serve the export
from a fresh process that has only TensorFlow and tensorflow-text.
"""

import itertools
import json
import math
import random
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe import pipelines
from lmpipe.cli.main import main
from lmpipe.datasets.corpora.corpus import TextCorpus
from lmpipe.datasets.corpora.parallel_text import ParallelCorpus
from lmpipe.datasets.examples.seq2seq_examples import TARGET_TOKENS
from lmpipe.models import (
    AlbertConfig,
    BertConfig,
    ElmoConfig,
    GptConfig,
    TransformerConfig,
    XLNetConfig,
)
from lmpipe.models.bert import bert
from lmpipe.serving.emulator.batching import batched_outputs
from lmpipe.serving.op_check import missing_serving_ops
from lmpipe.tokenizers.byte_pair import BytePairTokenizer
from lmpipe.tokenizers.sentence_piece import SentencePieceTokenizer
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
from tests.pipelines.test_translation import FIXTURES

SEQ_LEN = 16
BATCH = 4
CONTEXT = "To be, or not to be: that is the question."

SERVE = """
import json, sys
import numpy as np, tensorflow as tf, tensorflow_text  # noqa: F401
function = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
inputs = {}
for name, spec in function.structured_input_signature[1].items():
    if spec.dtype == tf.string:
        inputs[name] = tf.constant(["to be or not to be"] * 2)
    else:
        value = {"token_ids": 7, "padding_mask": 1}.get(name, 0)
        inputs[name] = tf.fill([2, 8], tf.constant(value, spec.dtype))
outputs = function(**inputs)
print(json.dumps({
    name: bool(np.all(np.isfinite(value.numpy()))) if value.dtype.is_floating else str(value.dtype)
    for name, value in outputs.items()
}))
"""


@pytest.fixture(scope="module")
def corpus(comedies):
    documents = list(itertools.islice(comedies.iter_documents(), 8))
    return TextCorpus.from_documents([document[:40] for document in documents])


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return WordPieceTokenizer.train(corpus, vocab_size=300)


@pytest.fixture(scope="module")
def paper_tokenizers(corpus):
    """`{"albert": ..., "xlnet": ..., "gpt": ...}`: SentencePiece models in ALBERT's and
    XLNet's layouts, GPT-2's byte-level BPE."""
    return {
        **{
            layout: SentencePieceTokenizer.train(corpus, vocab_size=300, layout=layout)
            for layout in ("albert", "xlnet")
        },
        "gpt": BytePairTokenizer.train(corpus, vocab_size=300),
    }


@pytest.fixture(scope="module")
def translation_tokenizer():
    pairs = ParallelCorpus.from_tsv(str(FIXTURES / "ruth_jonah.tsv"))[:200]
    return WordPieceTokenizer.train(
        list(pairs.sources) + list(pairs.targets),
        vocab_size=250,
        lower_case=False,
        reserved_tokens=TARGET_TOKENS,
    )


def encoder_config(tokenizer):
    return BertConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        max_sequence_length=SEQ_LEN,
    )


def families(corpus, tokenizer, translation_tokenizer, paper_tokenizers):
    """`{name: (make the pipeline, its training data, fit's arguments)}`."""
    vocabulary = tokenizer.vocabulary_size
    albert_pieces, xlnet_pieces = paper_tokenizers["albert"], paper_tokenizers["xlnet"]
    byte_pairs = paper_tokenizers["gpt"]
    texts = [" ".join(document[:2]) for document in corpus.iter_documents()]
    examples = (texts, [index % 2 for index in range(len(texts))])
    # Extractive questions: the first word of each text.
    questions = (
        ["Which word comes first?"] * len(texts),
        texts,
        [[(text.split()[0], 0)] for text in texts],
    )
    pairs = ParallelCorpus.from_tsv(str(FIXTURES / "ruth_jonah.tsv"))[:40]
    two_steps = {"steps_per_epoch": 2}
    return {
        "bert": (
            lambda: pipelines.BertPretraining(
                tokenizer, encoder_config(tokenizer), seq_len=SEQ_LEN, seed=1
            ),
            corpus,
            two_steps,
        ),
        "albert": (
            lambda: pipelines.AlbertPretraining(
                albert_pieces,
                AlbertConfig.tiny(
                    vocabulary_size=albert_pieces.vocabulary_size,
                    embedding_dim=8,
                    hidden_dim=16,
                    num_heads=2,
                    intermediate_dim=32,
                    max_sequence_length=SEQ_LEN,
                ),
                seq_len=SEQ_LEN,
                seed=1,
            ),
            corpus,
            two_steps,
        ),
        "xlnet": (
            lambda: pipelines.XLNetPretraining(
                xlnet_pieces,
                XLNetConfig.tiny(
                    vocabulary_size=xlnet_pieces.vocabulary_size,
                    hidden_dim=16,
                    num_heads=2,
                    intermediate_dim=32,
                ),
                seq_len=SEQ_LEN,
                seed=1,
            ),
            corpus,
            two_steps,
        ),
        "gpt": (
            lambda: pipelines.GptPretraining(
                byte_pairs,
                GptConfig.tiny(
                    vocabulary_size=byte_pairs.vocabulary_size, hidden_dim=16, num_heads=2
                ),
                seq_len=SEQ_LEN,
                seed=1,
            ),
            corpus,
            two_steps,
        ),
        "elmo": (
            lambda: pipelines.ElmoPretraining(
                tokenizer,
                # The published ELMo's parts (character CNN, LSTMP), at toy sizes: its
                # spelling table is saved, loaded and exported with the weights.
                ElmoConfig.tiny(
                    vocabulary_size=vocabulary,
                    embedding_dim=8,
                    lstm_units=8,
                    projection_dim=8,
                    token_encoder="characters",
                    character_filters=((1, 4), (2, 4)),
                    num_highway_layers=1,
                    max_characters_per_token=8,
                ),
                seq_len=SEQ_LEN,
                seed=1,
            ),
            corpus,
            two_steps,
        ),
        "translation": (
            lambda: pipelines.Translation(
                TransformerConfig.tiny(
                    hidden_dim=16,
                    num_heads=2,
                    intermediate_dim=32,
                    num_encoder_layers=1,
                    num_decoder_layers=1,
                ),
                translation_tokenizer,
                max_source_len=SEQ_LEN,
                max_target_len=SEQ_LEN,
                seed=1,
            ),
            pairs,
            two_steps,
        ),
        "classifier": (
            lambda: pipelines.TextClassifier(
                tokenizer, bert(encoder_config(tokenizer)), 2, seq_len=SEQ_LEN, seed=1
            ),
            examples,
            two_steps,
        ),
        "spans": (
            lambda: pipelines.SpanAnswerer(
                tokenizer, bert(encoder_config(tokenizer)), seq_len=SEQ_LEN, seed=1
            ),
            questions,
            two_steps,
        ),
        "word2vec": (
            lambda: pipelines.Word2Vec(vector_size=8, window=2, min_count=1, seed=1),
            corpus,
            {},  # an epoch is a pass over the corpus
        ),
    }


# The scenario of the task families runs from test_every_family_tasks.py: a file of its own,
# so that the suite's two processes (pytest-xdist, one file each) share the work.
PRETRAINING_FAMILIES = ["bert", "albert", "xlnet", "gpt", "elmo"]
TASK_FAMILIES = ["translation", "classifier", "spans", "word2vec"]
FAMILIES = PRETRAINING_FAMILIES + TASK_FAMILIES

# What `lmpipe predict` gets from each family, and what it must print: the Python method's
# result on the same text (None: the family has nothing to predict from text).
PREDICT = {
    "bert": ("to be or not to [MASK]", lambda pipe, text: pipe.fill_mask([text], top_k=3)[0]),
    "albert": ("to be or not to [MASK]", lambda pipe, text: pipe.fill_mask([text], top_k=3)[0]),
    "xlnet": ("to be or not", lambda pipe, text: pipe.embed([text])[0].tolist()),
    "gpt": (
        "to be or",
        lambda pipe, text: pipe.generate([text], 4, strategy="beam", beam_width=2)[0],
    ),
    "elmo": None,
    "translation": (
        "In the beginning",
        lambda pipe, text: pipe.translate([text], beam_width=2)[0],
    ),
    "classifier": ("to be or not", lambda pipe, text: pipe.classify([text])[0]),
    "spans": ("Which word?", lambda pipe, text: pipe.answer([text], [CONTEXT])[0]),
    "word2vec": (
        "the",
        lambda pipe, text: [list(pair) for pair in pipe.most_similar(text, topn=3)],
    ),
}


@pytest.mark.parametrize("family", PRETRAINING_FAMILIES)
def test_every_family_goes_through_the_same_scenario(
    family, corpus, tokenizer, translation_tokenizer, paper_tokenizers, tmp_path, capsys
):
    scenario(family, corpus, tokenizer, translation_tokenizer, paper_tokenizers, tmp_path, capsys)


def scenario(family, corpus, tokenizer, translation_tokenizer, paper_tokenizers, tmp_path, capsys):
    """The scenario of the module's docstring, for `family`."""
    families_ = families(corpus, tokenizer, translation_tokenizer, paper_tokenizers)
    make, data, fit_arguments = families_[family]
    pipe = make()
    assert isinstance(pipe, pipelines.Pipeline) and pipe.model is None
    assert isinstance(pipe.options, pipelines.PipelineOptions) and pipe.options.seed == 1
    with pytest.raises(ValueError, match="no model yet"):
        pipe.save(str(tmp_path / "early"))

    first = next(iter(pipe.dataset(data, batch_size=BATCH)))
    assert first  # a batch (a dict, or `(features, labels)`)

    history = pipe.fit(data, batch_size=BATCH, epochs=1, verbose=0, **fit_arguments)
    assert isinstance(history, keras.callbacks.History)
    assert all(math.isfinite(value) for value in history.history["loss"])

    results = pipe.evaluate(data, batch_size=BATCH, steps=2)
    assert results and all(type(value) is float for value in results.values()), results
    assert math.isfinite(results["loss"])

    pipe.save(str(tmp_path / "pipeline"))
    loaded = pipelines.load(str(tmp_path / "pipeline"))
    assert type(loaded) is type(pipe) and loaded.options == pipe.options
    assert loaded.evaluate(data, batch_size=BATCH, steps=2) == pytest.approx(results, rel=1e-4)
    with pytest.raises(ValueError, match="describes a"):
        other = pipelines.Word2Vec if family != "word2vec" else pipelines.GptPretraining
        other.load(str(tmp_path / "pipeline"))

    predict = ["predict", str(tmp_path / "pipeline"), "--json", "--top-k", "3"]
    predict += ["--max-new-tokens", "4", "--beam-width", "2", "--context", CONTEXT]
    if PREDICT[family] is None:
        with pytest.raises(SystemExit, match="has nothing to predict from text"):
            main([*predict, "some text"])
    else:
        text, expected = PREDICT[family]
        capsys.readouterr()
        assert main([*predict, text]) == 0
        printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        result = printed.pop("text") == text and next(iter(printed.values()))
        if family == "classifier":
            result = result["label"]
        if family == "xlnet":  # an embedding: floats
            assert result == pytest.approx(expected(loaded, text), rel=1e-6)
        elif family == "spans":  # the answer, and its probability (floats)
            found = expected(loaded, text)
            assert result.pop("score") == pytest.approx(found.pop("score"), rel=1e-5)
            assert result == found
        else:
            assert result == expected(loaded, text)

    path = loaded.export(str(tmp_path / "serving"))
    assert missing_serving_ops(path) == {}  # TF Serving 2.18, 2.19 and 2.20 run it
    assert_text_signatures_batch_safely(path)
    served = subprocess.run(
        [sys.executable, "-c", SERVE, path], capture_output=True, text=True, timeout=300
    )
    assert served.returncode == 0, served.stderr[-3000:]
    outputs = json.loads(served.stdout.strip().splitlines()[-1])
    assert outputs and all(value is not False for value in outputs.values()), outputs


def assert_text_signatures_batch_safely(path):
    """Every signature of the export that takes only strings gives each request the same
    outputs when TF Serving batches requests (simulated) as when it runs them one by one."""
    loaded = tf.saved_model.load(path)
    texts = [["to be or not to be"], ["the rest", "is silence , o"]]
    checked = 0
    for name, function in loaded.signatures.items():
        specs = function.structured_input_signature[1]
        if not all(spec.dtype == tf.string for spec in specs.values()):
            continue

        def run(inputs, function=function):
            outputs = function(**{key: tf.constant(value) for key, value in inputs.items()})
            return {key: value.numpy() for key, value in outputs.items()}

        requests = [
            {key: np.array([t.encode() for t in batch], dtype=object) for key in specs}
            for batch in texts
        ]
        singles = [run(request) for request in requests]
        for single, batched in zip(singles, batched_outputs(run, requests), strict=True):
            for key, value in single.items():
                if value.dtype.kind == "f":
                    np.testing.assert_allclose(batched[key], value, atol=1e-5, err_msg=name)
                else:
                    np.testing.assert_array_equal(batched[key], value, err_msg=name)
        checked += 1
    return checked


def test_options_are_frozen_and_refuse_unknown_names(tokenizer):
    pipe = pipelines.GptPretraining(tokenizer, seq_len=SEQ_LEN)
    with pytest.raises(AttributeError):
        pipe.options.seq_len = 8
    with pytest.raises(TypeError, match="unexpected option 'seqlen'; its options are seed"):
        pipelines.GptPretraining(tokenizer, seqlen=8)
    values = pipe.options.to_dict()
    assert type(pipe.options).from_dict(values) == pipe.options
    with pytest.raises(ValueError, match="unknown option"):
        type(pipe.options).from_dict({**values, "colour": "red"})
    # Derived defaults are resolved once, so that the saved options are the ones used.
    assert pipelines.BertPretraining(tokenizer, seq_len=SEQ_LEN).options.max_predictions == 3


def test_fit_does_not_reseed_the_callers_process(tokenizer, corpus):
    pipe = pipelines.GptPretraining(
        tokenizer,
        GptConfig.tiny(vocabulary_size=tokenizer.vocabulary_size, hidden_dim=16, num_heads=2),
        seq_len=SEQ_LEN,
        seed=1,
    )
    random.seed(7)
    np.random.seed(123)
    expected = random.random(), np.random.random()
    random.seed(7)
    np.random.seed(123)
    pipe.fit(corpus, batch_size=BATCH, steps_per_epoch=1, verbose=0)
    assert (random.random(), np.random.random()) == expected
