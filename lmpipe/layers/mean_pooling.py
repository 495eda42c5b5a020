"""The mean of a sequence's vectors over its real tokens: a sentence vector without `[CLS]`."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="lmpipe")
class MaskedMeanPooling(keras.layers.Layer):
    """The mean over the real positions of a sequence output.

        pooled = sum_s m[:, s] h[:, s, :] / max(1, sum_s m[:, s])    # [B, H], m = padding_mask

    The sentence vector Sentence-BERT and the MiniLM sentence checkpoints are trained with
    (special tokens count as real tokens, as `Pipeline.embed(pooling="mean")` averages them); it
    reads every token's final state instead of `[CLS]`'s alone, whose pooler only the pair task
    trains. The sum runs in float32 under a mixed-precision policy; the result has the layer's
    compute dtype. A sequence with no real token pools to zeros.

    Call arguments:
        sequence: `[B, S, H]` the encoder's sequence output.
        padding_mask: `[B, S]` 1 for a real token, 0 for padding (any numeric dtype).

    Example:

    >>> pooled = MaskedMeanPooling()(
    ...     keras.ops.convert_to_tensor([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]]),
    ...     keras.ops.convert_to_tensor([[1, 1, 0]]),
    ... )
    >>> keras.ops.convert_to_numpy(pooled).tolist()
    [[2.0, 3.0]]

    Reference: Reimers & Gurevych, "Sentence-BERT", 2019, section 3 (MEAN pooling).
    """

    def call(self, sequence, padding_mask):
        weights = ops.cast(padding_mask, "float32")[:, :, None]  # [B, S, 1]
        total = ops.sum(ops.cast(sequence, "float32") * weights, axis=1)  # [B, H]
        count = ops.maximum(ops.sum(weights, axis=1), 1.0)  # [B, 1]
        return ops.cast(total / count, self.compute_dtype)

    def compute_output_shape(self, sequence_shape, padding_mask_shape=None):
        return (sequence_shape[0], sequence_shape[-1])
