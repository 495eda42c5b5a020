"""Fine-tuned task models out to Hugging Face: classifiers, taggers and span answerers on BERT,
ALBERT and XLNet written as `*ForSequenceClassification`, `*ForTokenClassification` and
`*ForQuestionAnswering` folders. What transformers computes from these very folders is the
fixture (fixtures/make_task_reference.py); the tests write them again (task_folders.py, the
same bytes) and compare lmpipe's own probabilities with it, without torch."""

import json
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.interop.hf import task_folders
from tests.interop.hf.task_folders import (
    CONTEXTS,
    GENRES,
    MODEL_CASES,
    PAIRS,
    QUESTIONS,
    SENTENCES,
    TAGS,
    TEXTS,
)

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
REFERENCE = dict(np.load(FIXTURES / "task_reference.npz"))
WRITTEN = json.loads(str(REFERENCE.pop("digests")))
# float32 on both sides, tiny models with weights of 0.3: the orders of summation of the
# kernels (oneDNN on or off, torch's) left at most 6.5e-7 on the probabilities and 1.4e-6 on
# the logits (a 2-core AVX-512 CPU).
PROBABILITY_TOLERANCE = 1e-5
LOGIT_TOLERANCE = 1e-5


def softmax(logits):
    logits = np.asarray(logits, np.float64)
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def read_config(directory):
    return json.loads((pathlib.Path(directory) / "config.json").read_text())


def check_written(directory, case):
    """The folder written now is, byte for byte, the one transformers read for the fixture;
    its config.json names the class that loaded it and the labels."""
    assert task_folders.folder_digests(directory) == WRITTEN[case]["files"], (
        f"{case}: lmpipe writes another folder than the fixture's; run "
        "fixtures/make_task_reference.py again if that is intended"
    )
    config = read_config(directory)
    assert config["architectures"] == [WRITTEN[case]["class"]]
    return config


def left_padded(values, padding_mask):
    """Rows of right-padded `values` (lmpipe's) with their real positions moved to the end, as
    XLNet's tokenizer pads."""
    shifts = padding_mask.shape[1] - padding_mask.sum(axis=1)
    return np.stack([np.roll(row, int(s), axis=0) for row, s in zip(values, shifts, strict=True)])


@pytest.mark.parametrize("case", MODEL_CASES)
def test_a_task_model_loads_in_transformers_with_its_head_and_lmpipes_probabilities(case, tmp_path):
    family, task = case.split("_")
    model = task_folders.write_task_model(tmp_path, case)
    config = check_written(tmp_path, case)
    inputs = task_folders.model_inputs(family)
    mask = inputs["padding_mask"]
    outputs = {name: np.asarray(value) for name, value in model(inputs, training=False).items()}
    if task == "span":
        assert "id2label" not in config
        for side in ("start", "end"):
            logits = outputs[f"{side}_logits"]
            theirs = REFERENCE[f"{case}_{side}_logits"]
            if family == "xlnet":
                logits = left_padded(logits, mask)
            real = (left_padded(mask, mask) if family == "xlnet" else mask).astype(bool)
            np.testing.assert_allclose(logits[real], theirs[real], atol=LOGIT_TOLERANCE)
            np.testing.assert_allclose(  # lmpipe's padded logits are -1e9: probability 0
                softmax(logits),
                REFERENCE[f"{case}_{side}_probabilities"],
                atol=PROBABILITY_TOLERANCE,
            )
        return
    names = task_folders.model_labels(case)
    assert config["num_labels"] == len(names)
    assert config["id2label"] == {str(index): name for index, name in enumerate(names)}
    assert config["label2id"] == {name: index for index, name in enumerate(names)}
    assert config.get("problem_type") == (
        "single_label_classification" if task == "sequence" else None
    )
    ours = softmax(outputs["logits"])
    theirs = REFERENCE[f"{case}_probabilities"]
    if task == "token":
        if family == "xlnet":
            ours, mask = left_padded(ours, mask), left_padded(mask, mask)
        ours, theirs = ours[mask.astype(bool)], theirs[mask.astype(bool)]
    np.testing.assert_allclose(ours, theirs, atol=PROBABILITY_TOLERANCE)


@pytest.mark.parametrize("family", ["bert", "albert", "xlnet"])
def test_a_fine_tuned_classifier_tokenizes_and_predicts_as_transformers_reads_it(family, tmp_path):
    case = f"classifier_{family}"
    pipe = task_folders.write_pipeline(tmp_path, case)
    config = check_written(tmp_path, case)
    assert config["id2label"] == {"0": "comedy", "1": "history", "2": "tragedy"}
    assert config["label2id"] == {name: index for index, name in enumerate(GENRES)}
    assert config["problem_type"] == "single_label_classification"
    for kind, pairs in (("single", None), ("pair", PAIRS)):
        prefix = f"{case}_{kind}"
        features = pipe.encode(tf.constant(TEXTS), None if pairs is None else tf.constant(pairs))
        features = {name: value.numpy() for name, value in features.items()}
        mask = features["padding_mask"]
        ids, segments = features["token_ids"], features["segment_ids"]
        if family == "xlnet":  # the same tokens, padded on the right by lmpipe, left by HF
            ids, segments, mask = (left_padded(v, mask) for v in (ids, segments, mask))
        np.testing.assert_array_equal(mask, REFERENCE[f"{prefix}_attention_mask"])
        real = mask.astype(bool)
        np.testing.assert_array_equal(ids[real], REFERENCE[f"{prefix}_input_ids"][real])
        np.testing.assert_array_equal(segments[real], REFERENCE[f"{prefix}_token_type_ids"][real])
        theirs = REFERENCE[f"{prefix}_probabilities"]
        np.testing.assert_allclose(pipe.predict(TEXTS, pairs), theirs, atol=PROBABILITY_TOLERANCE)
        if pairs is None:  # the names are id2label's
            assert pipe.classify(TEXTS) == [GENRES[index] for index in theirs.argmax(-1)]


def test_a_token_tagger_tags_each_word_on_its_first_sub_token_as_transformers_does(tmp_path):
    pipe = task_folders.write_pipeline(tmp_path, "tagger")
    config = check_written(tmp_path, "tagger")
    assert config["id2label"] == {str(index): tag for index, tag in enumerate(TAGS)}
    assert "problem_type" not in config
    packed = pipe.encode(tf.ragged.constant(SENTENCES))
    packed = {name: value.numpy() for name, value in packed.items()}
    np.testing.assert_array_equal(packed["token_ids"], REFERENCE["tagger_input_ids"])
    np.testing.assert_array_equal(packed["padding_mask"], REFERENCE["tagger_attention_mask"])
    # lmpipe's word of each piece is Hugging Face's `word_ids()`, and a word's tag is read on
    # its first piece, where both put it.
    np.testing.assert_array_equal(packed["word_index"], REFERENCE["tagger_word_ids"])
    features = {name: packed[name] for name in ("token_ids", "segment_ids", "padding_mask")}
    probabilities = pipe.serving_model()(features)["probabilities"].numpy()
    real = packed["padding_mask"].astype(bool)
    np.testing.assert_allclose(
        probabilities[real], REFERENCE["tagger_probabilities"][real], atol=PROBABILITY_TOLERANCE
    )
    assert pipe.tag_words(SENTENCES) == json.loads(str(REFERENCE["tagger_word_tags"]))


def test_a_span_answerer_gives_transformers_start_and_end_probabilities(tmp_path):
    pipe = task_folders.write_pipeline(tmp_path, "answerer")
    config = check_written(tmp_path, "answerer")
    assert "id2label" not in config and "problem_type" not in config
    windows = pipe.windows(QUESTIONS, CONTEXTS)
    np.testing.assert_array_equal(windows["example_index"], [0, 1])  # one window each
    for ours, theirs in (
        ("token_ids", "input_ids"),
        ("segment_ids", "token_type_ids"),
        ("padding_mask", "attention_mask"),
    ):
        np.testing.assert_array_equal(windows[ours], REFERENCE[f"answerer_{theirs}"])
    real = windows["padding_mask"].astype(bool)
    for side, logits in zip(("start", "end"), pipe.logits(windows), strict=True):
        theirs = REFERENCE[f"answerer_{side}_logits"]
        np.testing.assert_allclose(logits[real], theirs[real], atol=LOGIT_TOLERANCE)
        np.testing.assert_allclose(
            softmax(logits),
            REFERENCE[f"answerer_{side}_probabilities"],
            atol=PROBABILITY_TOLERANCE,
        )


def test_a_fine_tuned_encoder_alone_is_written_as_the_bare_model(tmp_path):
    from lmpipe.interop.hf import bert_from_pretrained

    pipe = task_folders.task_pipeline("classifier_bert")
    pipe.save_pretrained(tmp_path, heads=False)
    assert read_config(tmp_path)["architectures"] == ["BertModel"]
    assert "num_labels" not in read_config(tmp_path)
    inputs = task_folders.model_inputs("bert")
    np.testing.assert_array_equal(
        np.asarray(bert_from_pretrained(tmp_path)(inputs)["pooled_output"]),
        np.asarray(pipe.encoder(inputs)["pooled_output"]),
    )


def test_what_hugging_face_cannot_express_is_refused_before_anything_is_written(tmp_path):
    from lmpipe.datasets import WordPieceTokenizer
    from lmpipe.interop.hf import save_task_pretrained
    from lmpipe.models import SequenceClassifier
    from lmpipe.pipelines import TextClassifier

    inputs = {
        name: keras.Input(shape=(None,), dtype="int32", name=name)
        for name in ("token_ids", "segment_ids", "padding_mask")
    }
    embedded = keras.layers.Embedding(50, 8, name="words")(inputs["token_ids"])
    pooled = keras.layers.GlobalAveragePooling1D()(embedded)
    averaging = keras.Model(inputs, {"sequence_output": embedded, "pooled_output": pooled})
    folder = tmp_path / "refused"
    with pytest.raises(ValueError, match="not an lmpipe BERT, ALBERT or XLNet encoder"):
        save_task_pretrained(folder, SequenceClassifier(averaging, 2))
    model = task_folders.task_model("bert_sequence")
    with pytest.raises(ValueError, match="`labels` has 2 names for 3 classes"):
        save_task_pretrained(folder, model, labels=["comedy", "tragedy"])
    with pytest.raises(ValueError, match="must be a SequenceClassifier, TokenClassifier or"):
        save_task_pretrained(folder, model.encoder)
    assert not folder.exists()
    words = task_folders.WORDS
    encoder = task_folders.encoder("bert", len(words))
    pipe = TextClassifier(WordPieceTokenizer(words), encoder, 2, seq_len=16)
    with pytest.raises(ValueError, match="no model yet"):
        pipe.save_pretrained(folder)
    assert not folder.exists()
