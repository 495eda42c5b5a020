"""BertPretraining.export: the trained pipeline served the way TF Serving loads it."""

import numpy as np
import pytest

from lmpipe.datasets import TextCorpus, WordPieceTokenizer
from lmpipe.models import BertConfig
from lmpipe.pipelines import BertPretraining
from lmpipe.serving import ServingProcess, pack_texts, replay_warmup


@pytest.fixture(scope="module")
def trained():
    corpus = TextCorpus.shakespeare(genres=["comedies"])
    sample = [sentence for document in list(corpus.iter_documents())[:20] for sentence in document]
    tokenizer = WordPieceTokenizer.train(sample, vocab_size=600)
    config = BertConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=32,
        num_heads=2,
        intermediate_dim=64,
        max_sequence_length=32,
    )
    pipe = BertPretraining(tokenizer, seq_len=32, objective="nsp", seed=3, config=config)
    pipe.fit(corpus, batch_size=8, epochs=1, steps_per_epoch=3, verbose=0)
    return pipe


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    path = trained.export(str(tmp_path_factory.mktemp("serving") / "bert"))
    with ServingProcess(path) as server:
        yield path, server


def test_export_serves_what_the_pipeline_computes(trained, exported):
    path, server = exported
    assert path.endswith("/1")
    texts = np.array([b"To be, or not to be", b""])
    pairs = np.array([b"that is the question.", b"Exit."])
    served = server.predict("serve_text_pair", {"text": texts, "text_pair": pairs})
    features = pack_texts(trained.tokenizer, texts, 32, text_pairs=pairs)
    expected = dict(trained.serving_model()(features))
    # Served per position at seq_len, zero at padding (the model runs on the longest text).
    mask = np.asarray(features["padding_mask"], np.float32)[:, :, None]
    expected["sequence_output"] = np.asarray(expected["sequence_output"]) * mask
    assert set(served) == {"sequence_output", "pooled_output", "nsp_probabilities"}
    for name, value in expected.items():
        assert served[name].dtype == np.float32
        np.testing.assert_allclose(served[name], np.asarray(value), atol=1e-5)
    np.testing.assert_allclose(served["nsp_probabilities"].sum(axis=1), 1.0, atol=1e-6)
    by_ids = server.predict(
        "serving_default", {name: np.asarray(value) for name, value in features.items()}
    )
    np.testing.assert_allclose(by_ids["pooled_output"], served["pooled_output"], atol=1e-6)


def test_rest_bodies_in_both_formats_reach_the_text_signature(exported):
    _, server = exported
    rows = server.predict_rest(
        {"signature_name": "serve_text", "instances": ["Good night, sweet prince", ""]}
    )
    columns = server.predict_rest(
        {"signature_name": "serve_text", "inputs": {"text": ["Good night, sweet prince", ""]}}
    )
    assert len(rows["predictions"]) == 2
    np.testing.assert_allclose(
        [row["nsp_probabilities"] for row in rows["predictions"]],
        columns["outputs"]["nsp_probabilities"],
        atol=1e-6,
    )


def test_warmup_replays_and_exporting_the_same_version_needs_overwrite(trained, exported):
    path, _ = exported
    replay_warmup(path)
    base = path.rsplit("/", 1)[0]
    with pytest.raises(ValueError, match="overwrite"):
        trained.export(base, version=1)
    assert trained.export(base).endswith("/2")


def test_serve_fill_mask_gives_what_fill_mask_gives(trained, exported):
    path, server = exported
    texts = ["To be, or not to [MASK]: that is the [MASK].", "[MASK]", "no mask here"]
    served = server.predict("serve_fill_mask", {"text": np.array(texts, dtype=object)})
    most = trained.options.max_predictions
    assert served["tokens"].shape == served["scores"].shape == (3, most, 5)
    assert served["mask_count"].tolist() == [2, 1, 0]
    expected = trained.fill_mask(texts[:2], top_k=5)
    for row, masks in enumerate(expected):
        for mask, predictions in enumerate(masks):
            tokens = [token.decode("utf-8") for token in served["tokens"][row, mask]]
            assert tokens == [p["token"] for p in predictions]
            np.testing.assert_allclose(
                served["scores"][row, mask], [p["score"] for p in predictions], atol=1e-6
            )
    # Past a text's masks: empty tokens and zero scores.
    assert set(served["tokens"][2].ravel().tolist()) == {b""}
    assert not served["scores"][2].any() and not served["scores"][0, 2:].any()
