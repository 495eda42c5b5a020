"""The data contract: the names, dtypes and shapes of every batch's features and labels.

Every batch is `(features, labels)`, two dicts of dense tensors. The names are public API:
datasets produce them, models take them as their named inputs, and exports make them the
SavedModel signatures that TF Serving clients send. They are defined here once, and every
floor imports them from here; the module imports nothing of lmpipe's (nor TensorFlow: dtypes
are names, shapes tuples with None for the batch and for any length not given).

Conventions: masks are 1 (True) where a position may attend or is real; `nsp_labels` 1 =
segment B really follows A; `sop_labels` 1 = A and B are in their original order.
"""

# Features ------------------------------------------------------------------------------------

TOKEN_IDS = "token_ids"
SEGMENT_IDS = "segment_ids"
PADDING_MASK = "padding_mask"
# Causal LM (GPT): which document of the row each token belongs to, numbered from 1 within
# the row, 0 on padding, `[B, S]`; tokens attend within their document only. Optional for the
# model: a batch without it is one document per row.
DOCUMENT_IDS = "document_ids"
# BERT/ALBERT: where the masked LM predicts, `[B, P]`.
MASK_POSITIONS = "mask_positions"
# XLNet: `perm_mask[b, i, j] = 1` where position i's query stream may attend to j, `[B, S, S]`;
# `target_mapping` one-hot rows of the P predicted positions, `[B, P, S]`; `masked_tokens` 1 at
# the query-stream positions, `[B, S]`.
PERM_MASK = "perm_mask"
TARGET_MAPPING = "target_mapping"
MASKED_TOKENS = "masked_tokens"
# Seq2seq: the source `[B, S]` and the shifted target `[B, T]`.
ENCODER_IDS = "encoder_ids"
ENCODER_MASK = "encoder_mask"
DECODER_IDS = "decoder_ids"
DECODER_MASK = "decoder_mask"

# Labels --------------------------------------------------------------------------------------

MASK_IDS = "mask_ids"
MASK_WEIGHTS = "mask_weights"
NSP_LABELS = "nsp_labels"
SOP_LABELS = "sop_labels"
TARGET_IDS = "target_ids"
TARGET_MASK = "target_mask"
NEXT_IDS = "next_ids"
WEIGHTS = "weights"
# ELMo's backward language model.
PREVIOUS_IDS = "previous_ids"
PREVIOUS_WEIGHTS = "previous_weights"
LABELS = "labels"
START_POSITIONS = "start_positions"
END_POSITIONS = "end_positions"

STREAM_POSITION = "stream_position"
"""The feature the seekable stream adds to every pretraining batch it builds: int64 `[B, 3]`,
each example's `(epoch, window, offset)` in the stream (see `lmpipe.datasets.examples.stream`).
Not a model input: the training step takes it out of the batch and keeps the first example's
as the run's data position; exports never see it."""

STREAM_FAMILIES = ("bert", "albert", "xlnet", "gpt", "elmo")
"""The families whose pretraining batches come from the seekable stream."""

ENCODER_FEATURES = (TOKEN_IDS, SEGMENT_IDS, PADDING_MASK)
"""What an encoder (BERT, ALBERT, XLNet's content stream) takes: int32 `[B, S]` each."""

PAIR_LABELS = {"nsp": NSP_LABELS, "sop": SOP_LABELS, "mlm": None}
"""The sentence-pair label of each BERT/ALBERT objective (None: masked LM only)."""

DEFAULT_OBJECTIVES = {"bert": "nsp", "albert": "sop"}

FAMILIES = (
    "bert",
    "albert",
    "xlnet",
    "gpt",
    "elmo",
    "seq2seq",
    "classification",
    "token_tagging",
    "spans",
)
"""The families of the contract: pretraining (BERT and ALBERT with their objectives, XLNet,
the causal LMs GPT and ELMo), translation (seq2seq) and the fine-tuning tasks."""


def _check_family(family):
    if family not in FAMILIES:
        raise ValueError(f"`family` must be one of {', '.join(FAMILIES)}, got {family!r}.")


def input_specs(family, seq_len=None, num_predictions=None, target_len=None):
    """The features of `family`'s batches: `{name: (dtype, shape)}`, in the order datasets
    produce them, with None for the batch and for the lengths not given.

    Args:
        family: one of `FAMILIES`.
        seq_len: the sequence length `S` (the source length for seq2seq).
        num_predictions: `P`, the predicted positions of BERT/ALBERT and XLNet.
        target_len: `T`, the target length of seq2seq.
    """
    _check_family(family)
    tokens = ("int32", (None, seq_len))
    if family == "seq2seq":
        target = ("int32", (None, target_len))
        return {
            ENCODER_IDS: tokens,
            ENCODER_MASK: tokens,
            DECODER_IDS: target,
            DECODER_MASK: target,
        }
    if family == "gpt":
        return {TOKEN_IDS: tokens, PADDING_MASK: tokens, DOCUMENT_IDS: tokens}
    if family == "elmo":
        return {TOKEN_IDS: tokens, PADDING_MASK: tokens}
    specs = dict.fromkeys(ENCODER_FEATURES, tokens)
    if family in ("bert", "albert"):
        specs[MASK_POSITIONS] = ("int32", (None, num_predictions))
    elif family == "xlnet":
        specs[PERM_MASK] = ("float32", (None, seq_len, seq_len))
        specs[TARGET_MAPPING] = ("float32", (None, num_predictions, seq_len))
        specs[MASKED_TOKENS] = tokens
    return specs


def stream_position_spec():
    """`(dtype, shape)` of the `STREAM_POSITION` feature."""
    return ("int64", (None, 3))


def label_specs(family, seq_len=None, num_predictions=None, target_len=None, objective=None):
    """The labels of `family`'s batches: `{name: (dtype, shape)}`, as `input_specs`.

    `objective` (BERT/ALBERT: "nsp", "sop" or "mlm"; None: the family's default) picks the
    sentence-pair label.
    """
    _check_family(family)
    predictions = (None, num_predictions)
    if family in ("bert", "albert"):
        objective = DEFAULT_OBJECTIVES[family] if objective is None else objective
        if objective not in PAIR_LABELS:
            raise ValueError(
                f"`objective` must be one of {', '.join(PAIR_LABELS)}, got {objective!r}."
            )
        specs = {MASK_IDS: ("int32", predictions), MASK_WEIGHTS: ("float32", predictions)}
        if PAIR_LABELS[objective] is not None:
            specs[PAIR_LABELS[objective]] = ("int32", (None,))
        return specs
    if family == "xlnet":
        return {TARGET_IDS: ("int32", predictions), TARGET_MASK: ("float32", predictions)}
    tokens = (None, seq_len)
    if family in ("gpt", "elmo"):
        specs = {NEXT_IDS: ("int32", tokens), WEIGHTS: ("float32", tokens)}
        if family == "elmo":
            specs[PREVIOUS_IDS] = ("int32", tokens)
            specs[PREVIOUS_WEIGHTS] = ("float32", tokens)
        return specs
    if family == "seq2seq":
        return {TARGET_IDS: ("int32", (None, target_len)), WEIGHTS: ("float32", (None, target_len))}
    if family == "classification":
        return {LABELS: ("int32", (None,))}
    if family == "token_tagging":
        return {LABELS: ("int32", tokens)}
    return {START_POSITIONS: ("int32", (None,)), END_POSITIONS: ("int32", (None,))}


def min_seq_len(family, objective=None, pairs=False):
    """The shortest `seq_len` of `family`: its special tokens and one token per segment (two
    segments for the sentence-pair objectives, XLNet, spans, and `pairs` of classification),
    or for the causal LMs one token and the one it predicts. None for seq2seq, whose lengths
    are the source's and the target's.
    """
    _check_family(family)
    if family in ("gpt", "elmo"):
        return 2
    if family == "seq2seq":
        return None
    if family in ("bert", "albert"):
        objective = DEFAULT_OBJECTIVES[family] if objective is None else objective
        pairs = PAIR_LABELS[objective] is not None
    segments = 2 if pairs or family in ("xlnet", "spans") else 1
    # [CLS] and a [SEP] after each segment (XLNet: a <sep> after each and <cls> last).
    return 2 * segments + 1


def feature_names(family):
    """The feature names of `family`, in order."""
    return tuple(input_specs(family))


def label_names(family, objective=None):
    """The label names of `family` (and BERT/ALBERT `objective`), in order."""
    return tuple(label_specs(family, objective=objective))
