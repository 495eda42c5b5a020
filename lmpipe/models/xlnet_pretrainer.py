"""The XLNet pretraining model: two-stream encoder, tied LM head, Transformer-XL memory."""

import keras
import tensorflow as tf
from keras import ops

from lmpipe.arguments import check_positive_int
from lmpipe.contract import (
    PADDING_MASK,
    PERM_MASK,
    SEGMENT_IDS,
    TARGET_IDS,
    TARGET_MAPPING,
    TARGET_MASK,
    TOKEN_IDS,
)
from lmpipe.models.losses import masked_cross_entropy
from lmpipe.models.replica_local_state import ReplicaLocalState
from lmpipe.models.trainable import TrainableModel
from lmpipe.models.xlnet import XLNetConfig, check_memory_arguments, xlnet, xlnet_content_stream

FEATURES = (TOKEN_IDS, SEGMENT_IDS, PADDING_MASK, PERM_MASK, TARGET_MAPPING)


@keras.saving.register_keras_serializable(package="lmpipe")
class XLNetPretrainer(TrainableModel):
    """Permutation language modelling with XLNet's two-stream attention.

    Inputs: the features of the XLNet data contract (`token_ids`, `segment_ids`,
    `padding_mask` int32 `[B, S]`, `perm_mask` float32 `[B, S, S]` with 1 = may attend,
    `target_mapping` float32 `[B, P, S]`; `masked_tokens` is accepted and not needed, as
    `target_mapping` says the same), plus `stream_start` int32 `[B]` when `mem_len > 0`.
    Output: `lm_logits` float32 `[B, P, V]`, the query stream at the targets times the word
    embedding table (the head is tied to it, as in XLNet) plus a bias.

    Loss: the mean cross-entropy of `target_ids` over the real targets (`target_mask`), taken
    over the global batch under a distribution strategy. Metrics: `plm_loss`, `plm_accuracy`.

    Memory (`mem_len > 0`): every call reads the memory of the previous call, and writes the
    new one (the last `mem_len` of memory ++ each layer's inputs, or their first `reuse_len`
    positions); rows with `stream_start = 1` drop their memory first. Memory positions that
    came from padding stay hidden. The memory lives in two non-trainable `tf.Variable`s of
    shape `[batch_size, L, mem_len, H]` and `[batch_size, mem_len]` created with
    `synchronization=ON_READ`, so under a `MirroredStrategy` each replica keeps its own
    (`batch_size` is therefore the per-replica batch size, and every batch must have it).
    They are kept out of the model's weights (weights saved with memory load into a
    memory-free model and back, and a saved or loaded model starts with an empty memory, as
    at a stream start), but `checkpoint_state()` hands them, every replica's own, to the
    training checkpoints, so that a run resumed from a checkpoint continues its text streams
    exactly as an uninterrupted one. `reset_memory()` empties it.

    `bi_data=True` is XLNet's `bi_data`: the second half of every (per-replica) batch is
    text read backward and gets the negated relative distances (see `xlnet`).

    `encoder` is the content-stream model (`token_ids`, `segment_ids`, `padding_mask` ->
    `sequence_output`, `pooled_output`) sharing the weights, for export and fine-tuning. Its
    pooler is frozen here: the permutation LM does not train it.

    Args:
        config: an `XLNetConfig` (or its dict).
        max_predictions: `P`, the length of the target lists.
        mem_len: memory length; 0 = no memory.
        reuse_len: if set, cache only the first `reuse_len` positions of each segment.
        batch_size: per-replica batch size; required when `mem_len > 0`.
        bi_data: the second half of every batch reads backward (XLNet's `bi_data`).

    Reference: Yang et al., "XLNet", 2019, sections 2.3-2.5.
    """

    def __init__(
        self,
        config,
        *,
        max_predictions,
        mem_len=0,
        reuse_len=None,
        batch_size=None,
        bi_data=False,
        name="xlnet_pretrainer",
        **kwargs,
    ):
        super().__init__(name=name, **kwargs)
        if isinstance(config, dict):
            config = XLNetConfig(**config)
        if not isinstance(config, XLNetConfig):
            raise ValueError(f"`config` must be an XLNetConfig, got config={config!r}.")
        check_positive_int("max_predictions", max_predictions)
        check_memory_arguments(mem_len, reuse_len)
        if mem_len:  # the memory holds one row per example of a replica's batch
            check_positive_int("batch_size", batch_size)
        self.xlnet_config = config
        self.max_predictions = max_predictions
        self.mem_len = mem_len
        self.reuse_len = reuse_len
        self.batch_size = batch_size
        self.bi_data = bi_data
        self.network = xlnet(
            config, two_stream=True, mem_len=mem_len, reuse_len=reuse_len, bi_data=bi_data
        )
        self.network.get_layer("pooler").trainable = False
        self.lm_bias = self.add_weight(
            name="lm_bias", shape=(config.vocabulary_size,), initializer="zeros"
        )
        self.plm_loss_tracker = keras.metrics.Mean(name="plm_loss")
        self.plm_accuracy = keras.metrics.Mean(name="plm_accuracy")
        # Set through object.__setattr__ so that neither Keras nor tf.train.Checkpoint
        # tracks them: they are not weights (see the class docstring); the memory reaches
        # the training checkpoints through `checkpoint_state`.
        object.__setattr__(self, "_encoder", None)
        object.__setattr__(self, "_memory", None)
        object.__setattr__(self, "_memory_mask", None)
        if mem_len:
            state = {
                "trainable": False,
                "synchronization": tf.VariableSynchronization.ON_READ,
                "aggregation": tf.VariableAggregation.ONLY_FIRST_REPLICA,
            }
            shape = (batch_size, config.num_layers, mem_len, config.hidden_dim)
            object.__setattr__(
                self, "_memory", tf.Variable(tf.zeros(shape), name="xlnet_memory", **state)
            )
            object.__setattr__(
                self,
                "_memory_mask",
                tf.Variable(
                    tf.zeros((batch_size, mem_len), "int32"), name="xlnet_memory_mask", **state
                ),
            )
        self.built = True

    @property
    def encoder(self):
        """The content-stream functional model, sharing this model's weights."""
        if self._encoder is None:
            object.__setattr__(
                self, "_encoder", xlnet_content_stream(self.network, self.xlnet_config)
            )
        return self._encoder

    @property
    def memory(self):
        """`(memory [B, L, mem_len, H], memory_mask [B, mem_len])` of this replica, or None."""
        if not self.mem_len:
            return None
        return self._memory.read_value(), self._memory_mask.read_value()

    def checkpoint_state(self):
        """`{name: trackable}`, the state besides the weights that a training checkpoint must
        hold to resume exactly: the memory of every replica (nothing without memory)."""
        if not self.mem_len:
            return {}
        return {
            "xlnet_memory": ReplicaLocalState(
                {"memory": self._memory, "memory_mask": self._memory_mask},
                strategy=self.distribute_strategy,  # the one the model was built in
            )
        }

    def reset_memory(self):
        """Forget the memory of every row (the next batch starts new streams)."""
        if self.mem_len:
            self._memory.assign(tf.zeros_like(self._memory))
            self._memory_mask.assign(tf.zeros_like(self._memory_mask))

    def _check_shapes(self, inputs):
        predictions = inputs[TARGET_MAPPING].shape[1]
        if predictions is not None and predictions != self.max_predictions:
            raise ValueError(
                f"`target_mapping` has {predictions} predictions per example, but the model was "
                f"built with max_predictions={self.max_predictions}."
            )
        batch = inputs[TOKEN_IDS].shape[0]
        if self.mem_len and batch is not None and batch != self.batch_size:
            raise ValueError(
                f"The model keeps memory for batch_size={self.batch_size} rows (per replica), "
                f"but got a batch of {batch}."
            )

    def call(self, inputs, training=None):
        missing = [name for name in FEATURES if name not in inputs]
        if missing:
            raise ValueError(f"XLNetPretrainer is missing the input features {missing}.")
        self._check_shapes(inputs)
        features = {name: inputs[name] for name in FEATURES}
        if self.mem_len:
            memory, memory_mask = self.memory
            if "stream_start" in inputs:
                keep = 1 - ops.cast(inputs["stream_start"], "int32")  # [B]
                memory_mask = memory_mask * keep[:, None]
                memory = memory * ops.cast(keep, memory.dtype)[:, None, None, None]
            features["memory"] = memory
            features["memory_mask"] = memory_mask
        outputs = self.network(features, training=training)
        if self.mem_len:
            self._memory.assign(ops.cast(outputs["new_memory"], "float32"))
            self._memory_mask.assign(ops.cast(outputs["new_memory_mask"], "int32"))
        query = outputs["query_output"]  # [B, P, H]
        table = self.network.get_layer("word_embedding").embeddings  # [V, H]
        logits = ops.matmul(query, ops.transpose(ops.cast(table, query.dtype)))
        logits = ops.cast(logits, "float32") + ops.cast(self.lm_bias, "float32")
        return {"lm_logits": logits}  # [B, P, V]

    def loss_weights(self, x, y):
        """`{term: weights}`: the real prediction targets."""
        del x
        return {"plm": y[TARGET_MASK]}

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del sample_weight, training
        return masked_cross_entropy(
            y[TARGET_IDS],
            y_pred["lm_logits"],
            self.loss_weights(x, y)["plm"],
            self.plm_loss_tracker,
            self.plm_accuracy,
            term="plm",
        )

    def get_config(self):
        return {
            "config": self.xlnet_config.to_dict(),
            "max_predictions": self.max_predictions,
            "mem_len": self.mem_len,
            "reuse_len": self.reuse_len,
            "batch_size": self.batch_size,
            "bi_data": self.bi_data,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
