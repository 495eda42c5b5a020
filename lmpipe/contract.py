"""The data contract: the names and dtypes of every batch's features and labels.

Every batch is `(features, labels)`, two dicts of dense tensors. The names are public API:
datasets produce them, models take them as their named inputs, and exports make them the
SavedModel signatures that TF Serving clients send. They are defined here once, and every
floor imports them from here; the module imports nothing of lmpipe's.

Conventions: masks are 1 (True) where a position may attend or is real; `nsp_labels` 1 =
segment B really follows A; `sop_labels` 1 = A and B are in their original order.
"""

TOKEN_IDS = "token_ids"
SEGMENT_IDS = "segment_ids"
PADDING_MASK = "padding_mask"

ENCODER_FEATURES = (TOKEN_IDS, SEGMENT_IDS, PADDING_MASK)
"""What an encoder (BERT, ALBERT, XLNet's content stream) takes: int32 `[B, S]` each."""

CAUSAL_LM_FEATURES = (TOKEN_IDS, PADDING_MASK)
"""What a causal language model (GPT, ELMo) takes: int32 `[B, S]` each."""

SEQ2SEQ_FEATURES = ("encoder_ids", "encoder_mask", "decoder_ids", "decoder_mask")
"""What an encoder-decoder takes: int32 `[B, S]` source and `[B, T]` target-side tensors."""

PAIR_LABELS = {"nsp": "nsp_labels", "sop": "sop_labels", "mlm": None}
"""The sentence-pair label of each BERT/ALBERT objective (None: masked LM only)."""

# name -> dtype, per objective; shapes are in README.md's data contract table.
BERT_FEATURES = {
    TOKEN_IDS: "int32",
    SEGMENT_IDS: "int32",
    PADDING_MASK: "int32",
    "mask_positions": "int32",
}
BERT_LABELS = {
    "mask_ids": "int32",
    "mask_weights": "float32",
    "nsp_labels": "int32",
    "sop_labels": "int32",
}
XLNET_FEATURES = {
    TOKEN_IDS: "int32",
    SEGMENT_IDS: "int32",
    PADDING_MASK: "int32",
    "perm_mask": "float32",
    "target_mapping": "float32",
    "masked_tokens": "int32",
}
XLNET_LABELS = {"target_ids": "int32", "target_mask": "float32"}
CAUSAL_LM_LABELS = {
    "next_ids": "int32",
    "weights": "float32",
    # ELMo's backward language model
    "previous_ids": "int32",
    "previous_weights": "float32",
}
SEQ2SEQ_LABELS = {"target_ids": "int32", "weights": "float32"}
CLASSIFICATION_LABELS = {"labels": "int32"}
