"""Numbers in the model configurations: NaN, infinities, strings and bools are refused by
name, by the one check every option goes through (`lmpipe.arguments.check_number`)."""

import math

import numpy as np
import pytest

from lmpipe.arguments import check_number
from lmpipe.models import (
    AlbertConfig,
    BertConfig,
    ElmoConfig,
    GptConfig,
    RnnSeq2SeqConfig,
    TransformerConfig,
    XLNetConfig,
)

NAN, INF = float("nan"), float("inf")

CONFIG_FIELDS = {
    BertConfig: ["layer_norm_epsilon", "initializer_range", "dropout", "attention_dropout"],
    AlbertConfig: ["layer_norm_epsilon", "initializer_range", "dropout", "embedding_dim"],
    GptConfig: ["layer_norm_epsilon", "initializer_range", "dropout", "max_sequence_length"],
    XLNetConfig: ["layer_norm_epsilon", "initializer_range", "attention_dropout", "clamp_len"],
    TransformerConfig: ["layer_norm_epsilon", "dropout", "max_decode_length"],
    ElmoConfig: ["dropout", "lstm_units", "cell_clip", "proj_clip"],
    RnnSeq2SeqConfig: ["dropout", "hidden_dim"],
}


@pytest.mark.parametrize(
    "config_class, field",
    [(config_class, field) for config_class, fields in CONFIG_FIELDS.items() for field in fields],
)
@pytest.mark.parametrize("value", [NAN, INF, -INF, "0.1", True])
def test_a_config_refuses_a_non_finite_or_non_numeric_field_by_name(config_class, field, value):
    with pytest.raises(ValueError, match=f"`{field}` must be .*got {field}={value!r}"):
        config_class(**{field: value})


def test_check_number_names_the_option_and_the_bounds():
    assert check_number("rate", 0.5, minimum=0, below=1) == 0.5
    assert check_number("steps", np.int64(3), minimum=1, integer=True) == 3
    assert check_number("clipnorm", None, above=0, none=True) is None
    assert check_number("huge", 10**400, minimum=0, integer=True) == 10**400
    cases = [
        (dict(value=NAN, above=0), "`x` must be a positive finite number, got x=nan."),
        (dict(value=-1, minimum=0), "`x` must be a finite number >= 0, got x=-1."),
        (dict(value=1.0, minimum=0, below=1), "`x` must be a finite number >= 0 and < 1, got"),
        (dict(value=2.0, minimum=1, integer=True), "`x` must be a positive integer, got x=2.0."),
        (dict(value=0, above=0, none=True), "`x` must be a positive finite number or None"),
        (dict(value=math.inf, minimum=2), "`x` must be a finite number >= 2, got x=inf."),
    ]
    for arguments, message in cases:
        value = arguments.pop("value")
        with pytest.raises(ValueError) as error:
            check_number("x", value, **arguments)
        assert str(error.value).startswith(message), str(error.value)
