"""The extractive question answering head: start and end logits over the tokens."""

import keras
from keras import ops

from lmpipe.layers.initializers import bert_initializer, clone_initializer

# Added to padded positions; far below any real logit, and still finite in float32.
PADDING_LOGIT = -1e9


@keras.saving.register_keras_serializable(package="lmpipe")
class SpanHead(keras.layers.Layer):
    """Start and end logits of an answer span, one dense layer `H -> 2` applied to every token.

        start_logits, end_logits = unstack(h W + b, axis=-1)     # each [B, S]

    Masks: with `padding_mask` (1 = real token) the logits of padded positions are set to
    -1e9, so a softmax gives them probability 0 and an argmax never picks them. The logits are
    float32 even under a mixed-precision dtype policy, for the loss.

    Args:
        kernel_initializer: initializer of the kernel; BERT's truncated normal by default.
        bias_initializer: initializer of the bias.

    Call arguments:
        sequence_output: `[B, S, H]` encoder output.
        padding_mask: `[B, S]`, 1 for real tokens; all positions are real if omitted.

    Returns:
        A dict with `"start_logits"` and `"end_logits"`, each `[B, S]` float32.

    Example:

    >>> head = SpanHead()
    >>> logits = head(keras.random.normal((2, 10, 32)), padding_mask=ops.ones((2, 10)))
    >>> tuple(logits["start_logits"].shape)
    (2, 10)

    Reference: Devlin et al., "BERT", 2019, section 4.2 (SQuAD v1.1).
    """

    def __init__(self, kernel_initializer=None, bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.kernel_initializer = keras.initializers.get(kernel_initializer or bert_initializer())
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, sequence_output_shape, padding_mask_shape=None):
        self.span_dense = keras.layers.Dense(
            2,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name="span_dense",
        )
        self.span_dense.build(sequence_output_shape)
        self.built = True

    def call(self, sequence_output, padding_mask=None):
        logits = ops.cast(self.span_dense(sequence_output), "float32")  # [B, S, 2]
        start_logits, end_logits = logits[..., 0], logits[..., 1]  # [B, S] each
        if padding_mask is not None:
            real = ops.cast(padding_mask, "bool")
            start_logits = ops.where(real, start_logits, PADDING_LOGIT)
            end_logits = ops.where(real, end_logits, PADDING_LOGIT)
        return {"start_logits": start_logits, "end_logits": end_logits}

    def compute_output_shape(self, sequence_output_shape, padding_mask_shape=None):
        shape = tuple(sequence_output_shape[:-1])
        return {"start_logits": shape, "end_logits": shape}

    def compute_output_spec(self, sequence_output, padding_mask=None):
        shapes = self.compute_output_shape(sequence_output.shape)
        return {name: keras.KerasTensor(shape, dtype="float32") for name, shape in shapes.items()}

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
