"""Building boolean attention masks: padding, causal, local-window and document masks, combined.

Polarity everywhere in lmpipe: True (or 1) means the query position *may attend* to the key
position.
"""

from keras import ops


def attention_mask(
    query_length,
    key_length,
    padding_mask=None,
    attention_mask=None,
    causal=False,
    window=None,
    query_offset=0,
):
    """Combine the masks an attention layer may receive into one boolean mask.

    Query position `i` sits at absolute position `query_offset + i` of the key sequence
    (non-zero when decoding incrementally with a cache), so the causal and window rules
    compare `query_offset + i` with key position `j`.

    Args:
        query_length: number of query positions `Q`.
        key_length: number of key positions `K`.
        padding_mask: `[B, K]` tensor, 1/True for real key tokens, 0/False for padding.
        attention_mask: `[B, Q, K]` tensor, 1/True where query `i` may attend to key `j`.
        causal: if True, query `i` may only attend to keys `j <= query_offset + i`.
        window: if set, query `i` may only attend to keys with
            `|query_offset + i - j| <= window` (restricted self-attention, Vaswani et al.
            2017, section 4). With `causal`, this leaves the `window` previous keys and itself.
        query_offset: absolute position of the first query; a scalar int or int tensor.

    Returns:
        A boolean tensor broadcastable to `[B, Q, K]` (`[1, Q, K]` or `[B, Q, K]`), or
        None if no restriction applies.
    """
    if window is not None and window < 1:
        raise ValueError(f"`window` must be a positive integer or None, got window={window}.")
    masks = []
    if padding_mask is not None:
        if len(padding_mask.shape) != 2:
            raise ValueError(
                "`padding_mask` must have rank 2, [batch, key_length], "
                f"got shape {tuple(padding_mask.shape)}."
            )
        masks.append(ops.expand_dims(ops.cast(padding_mask, "bool"), axis=1))  # [B, 1, K]
    if attention_mask is not None:
        if len(attention_mask.shape) != 3:
            raise ValueError(
                "`attention_mask` must have rank 3, [batch, query_length, key_length], "
                f"got shape {tuple(attention_mask.shape)}."
            )
        masks.append(ops.cast(attention_mask, "bool"))
    if causal or window is not None:
        query_positions = ops.arange(query_length, dtype="int32") + ops.cast(query_offset, "int32")
        key_positions = ops.arange(key_length, dtype="int32")
        distance = query_positions[:, None] - key_positions[None, :]  # [Q, K], i - j
        allowed = ops.ones_like(distance, dtype="bool")
        if causal:
            allowed = ops.logical_and(allowed, distance >= 0)
        if window is not None:
            allowed = ops.logical_and(allowed, ops.abs(distance) <= window)
        masks.append(allowed[None, :, :])
    if not masks:
        return None
    combined = masks[0]
    for mask in masks[1:]:
        combined = ops.logical_and(combined, mask)
    return combined


def document_mask(document_ids):
    """Attention within documents: `[B, S, S]` boolean, True where query `i` and key `j`
    belong to the same document of the row (`document_ids[b, i] == document_ids[b, j]`).

    A query outside any document (id 0: padding) is not restricted, so that it keeps the keys
    the other masks give it (its output carries no meaning, but a row of nothing but hidden
    keys would). Combine with the causal and padding masks (`attention_mask`).

    Args:
        document_ids: int `[B, S]`, the document of each position, 0 on padding.

    >>> ids = ops.convert_to_tensor([[1, 1, 2, 0]])
    >>> ops.cast(document_mask(ids), "int32").numpy()[0].tolist()
    [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [1, 1, 1, 1]]
    """
    ids = ops.cast(document_ids, "int32")
    same = ops.equal(ids[:, :, None], ids[:, None, :])  # [B, S, S]
    return ops.logical_or(same, ops.equal(ids, 0)[:, :, None])
