"""Beam search for causal LMs (`generate(strategy="beam")`) against Hugging Face's beam search
on the tiny GPT-2 (fixtures/make_gpt2_beam_reference.py): the same hypotheses and scores."""

import pathlib

import numpy as np
import pytest

from lmpipe.interop.hf import gpt2_from_pretrained
from lmpipe.models.samplers import BeamSampler, generate, left_pad

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures"
REFERENCE = dict(np.load(FIXTURES / "gpt2_beam_reference.npz"))
CASES = [str(name) for name in REFERENCE["case_names"]]
# Hugging Face's length penalty is an exponent of the length: 1 is lmpipe's "average".
PENALTIES = {1.0: "average", 0.0: None}


@pytest.fixture(scope="module")
def model():
    return gpt2_from_pretrained(FIXTURES.parents[1] / "interop" / "hf" / "fixtures" / "gpt2_tiny")


def case_settings(case):
    index = CASES.index(case)
    eos_id = int(REFERENCE["eos_id"][index])
    return index, {
        "max_new_tokens": int(REFERENCE["max_new_tokens"][index]),
        "eos_id": None if eos_id < 0 else eos_id,
        "pad_id": 1,  # not the end token of any case: the padding is told apart
    }


def beam(case):
    index = CASES.index(case)
    length_penalty = PENALTIES[float(REFERENCE["length_penalty"][index])]
    return int(REFERENCE["beam_width"][index]), length_penalty


def assert_hypotheses_equal(token_ids, padding_mask, scores, expected_ids, expected_scores):
    """`token_ids` `[k, L]` with their mask and scores against the reference's `[k, 10]`
    (-1 after each hypothesis' end)."""
    length = token_ids.shape[-1]
    expected_ids = expected_ids[:, :length]
    real = expected_ids >= 0
    np.testing.assert_array_equal(padding_mask, real.astype("int32"))
    np.testing.assert_array_equal(np.where(real, token_ids, -1), expected_ids)
    np.testing.assert_array_equal(token_ids[~real], 1)  # pad_id after the end
    # float32 logits of two implementations: a mean log-probability agrees to ~1e-6.
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES)
def test_beam_search_equals_hugging_faces_on_gpt2_for_each_prompt_of_a_batch(model, case):
    index, settings = case_settings(case)
    k, length_penalty = beam(case)
    prompts, mask = REFERENCE["prompt_ids"], REFERENCE["prompt_mask"]  # padded on the right
    # The k hypotheses, best first, of each prompt of the batch: as the prompt alone gets them.
    every = generate(
        model, prompts, mask, strategy=BeamSampler(k, length_penalty, return_all=True), **settings
    )
    for row in range(len(prompts)):
        assert_hypotheses_equal(
            every.token_ids.numpy()[row],
            every.padding_mask.numpy()[row],
            every.scores.numpy()[row],
            REFERENCE["sequences"][index, row, :k],
            REFERENCE["scores"][index, row, :k],
        )
    # The best alone, from the strategy's name, with the prompts padded on the left.
    ids, mask = left_pad(prompts, mask)
    best = generate(
        model, ids, mask, strategy="beam", beam_width=k, length_penalty=length_penalty, **settings
    )
    assert_hypotheses_equal(
        best.token_ids.numpy(),
        best.padding_mask.numpy(),
        best.scores.numpy(),
        REFERENCE["sequences"][index, :, 0],
        REFERENCE["scores"][index, :, 0],
    )
