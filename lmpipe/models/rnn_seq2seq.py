"""Recurrent encoder-decoder models: Sutskever et al., Cho et al., Bahdanau/Luong attention."""

import dataclasses

import keras
from keras import ops

from lmpipe.arguments import check_positive_integers, check_rates
from lmpipe.contract import DECODER_IDS, ENCODER_IDS, ENCODER_MASK
from lmpipe.layers.dropout import Dropout
from lmpipe.layers.rnn_attention import SCORES
from lmpipe.layers.rnn_decoder import FORMS, RnnDecoder
from lmpipe.layers.rnn_encoder import CELLS, RnnEncoder
from lmpipe.models.presets import Presets
from lmpipe.models.samplers.seq2seq import Seq2SeqModel
from lmpipe.models.transformer import SEQ2SEQ_INPUTS


def rnn_form(attention, form):
    """The decoder form for an `attention` score (or None) and a `form` (or None: derived).

    `form=None` gives "attention" with a score and "context" without one; "attention" needs a
    score and the other forms refuse one.

    >>> rnn_form("dot", None), rnn_form(None, None), rnn_form(None, "plain")
    ('attention', 'context', 'plain')
    """
    if form is not None and form not in FORMS:
        raise ValueError(f"`form` must be one of {FORMS} or None, got form={form!r}.")
    if attention is not None and attention not in SCORES:
        raise ValueError(
            f"`attention` must be one of {SCORES} or None, got attention={attention!r}."
        )
    if form is None:
        return "context" if attention is None else "attention"
    if form == "attention" and attention is None:
        raise ValueError(
            '`form="attention"` needs an `attention` score: "additive", "dot" or "general".'
        )
    if form != "attention" and attention is not None:
        raise ValueError(
            f'`form="{form}"` has no attention: pass attention=None (got attention={attention!r}).'
        )
    return form


@dataclasses.dataclass(frozen=True)
class RnnSeq2SeqConfig(Presets):
    """Sizes and choices of a recurrent encoder-decoder; validated on creation.

    `form` picks how the decoder sees the source (see `lmpipe.layers.RnnDecoder`): "plain"
    (the encoder's final state initializes the decoder), "context" (the final state is also
    fed at every step) or "attention" (`attention_score` "additive", "dot" or "general").
    The decoder's state has the encoder's output size (`hidden_dim`, doubled when
    `bidirectional`), and starts from the encoder's final state.

    Presets: `tiny()` for tests; `sutskever()`, `cho()`, `bahdanau()` and `luong()` set the
    cell, form and score of those papers (at sizes you choose; their papers used 1000 units).
    """

    vocabulary_size: int = 8000
    target_vocabulary_size: int | None = None
    embedding_dim: int = 256
    hidden_dim: int = 512
    cell: str = "gru"
    form: str = "attention"
    attention_score: str = "additive"
    bidirectional: bool = False
    dropout: float = 0.1

    def __post_init__(self):
        check_positive_integers(
            self,
            "vocabulary_size",
            "embedding_dim",
            "hidden_dim",
            optional=("target_vocabulary_size",),
        )
        for name, choices in (("cell", CELLS), ("form", FORMS), ("attention_score", SCORES)):
            if getattr(self, name) not in choices:
                raise ValueError(
                    f"`{name}` must be one of {choices}, got {name}={getattr(self, name)!r}."
                )
        check_rates(self, "dropout")

    @property
    def target_vocabulary(self):
        """The size of the target vocabulary (`target_vocabulary_size` or `vocabulary_size`)."""
        return self.target_vocabulary_size or self.vocabulary_size

    @classmethod
    def tiny(cls, **overrides):
        """Embeddings 16, GRU 32, additive attention, vocabulary 1000: for tests."""
        return cls.from_preset("tiny", **overrides)

    @classmethod
    def sutskever(cls, **overrides):
        """LSTM, plain decoder (Sutskever et al., 2014; they also reversed the source)."""
        return cls.from_preset("sutskever", **overrides)

    @classmethod
    def cho(cls, **overrides):
        """GRU, the source summary fed at every step (Cho et al., 2014)."""
        return cls.from_preset("cho", **overrides)

    @classmethod
    def bahdanau(cls, **overrides):
        """Bidirectional GRU encoder, additive attention (Bahdanau et al., 2015)."""
        return cls.from_preset("bahdanau", **overrides)

    @classmethod
    def luong(cls, **overrides):
        """LSTM, "general" attention score (Luong et al., 2015)."""
        return cls.from_preset("luong", **overrides)

    def to_dict(self):
        """The fields as a plain dict (JSON-serializable)."""
        return dataclasses.asdict(self)


@keras.saving.register_keras_serializable(package="lmpipe")
class RnnSeq2Seq(Seq2SeqModel):
    """Embeddings -> `RnnEncoder` -> `RnnDecoder` -> a projection to the target vocabulary.

    Called on `{encoder_ids, encoder_mask, decoder_ids, decoder_mask}` it returns float32
    logits `[B, T, V_target]` (teacher forcing). Dropout applies to the embeddings and the
    decoder outputs while training.

    Decoding (see `lmpipe.models.samplers.seq2seq`): `encode` returns the state
    `{"decoder_state": (h,) or (h, c)}` (`[B, D]` each) plus, by form, `"context"` `[B, D]`
    or `"encoder_sequence"` `[B, S, D]`, `"encoder_padding_mask"` `[B, S]` and the
    precomputed attention `"keys"`; every tensor is batch-major. `decode_step` ignores `step`
    (a recurrent state carries the position).

    Args:
        config: a `RnnSeq2SeqConfig` (or its dict).
    """

    def __init__(self, config, **kwargs):
        if isinstance(config, dict):
            config = RnnSeq2SeqConfig(**config)
        kwargs.setdefault("name", "rnn_seq2seq")
        super().__init__(**kwargs)
        self.config = config
        self.target_vocabulary_size = config.target_vocabulary
        self.source_embedding = keras.layers.Embedding(
            config.vocabulary_size, config.embedding_dim, name="source_embedding"
        )
        self.source_embedding.build((None, None))
        self.target_embedding = keras.layers.Embedding(
            self.target_vocabulary_size, config.embedding_dim, name="target_embedding"
        )
        self.target_embedding.build((None, None))
        self.encoder = RnnEncoder(
            config.hidden_dim, cell=config.cell, bidirectional=config.bidirectional, name="encoder"
        )
        embedded_shape = (None, None, config.embedding_dim)
        self.encoder.build(embedded_shape)
        state_dim = self.encoder.output_size
        self.decoder = RnnDecoder(
            state_dim,
            form=config.form,
            cell=config.cell,
            attention_score=config.attention_score,
            name="decoder",
        )
        self.decoder.build(
            embedded_shape,
            context_shape=(None, state_dim),
            encoder_sequence_shape=(None, None, state_dim),
        )
        self.output_projection = keras.layers.Dense(
            self.target_vocabulary_size, name="output_projection"
        )
        self.output_projection.build((None, None, self.decoder.output_size))
        self.dropout = Dropout(config.dropout, name="dropout")
        self.built = True

    def _source(self, encoder_ids, encoder_mask, training=None):
        embedded = self.dropout(self.source_embedding(encoder_ids), training=training)
        sequence, final_state = self.encoder(embedded, padding_mask=encoder_mask, training=training)
        source = {}
        if self.config.form == "context":
            source["context"] = final_state[0]  # the summary c: the final h
        if self.config.form == "attention":
            source["encoder_sequence"] = sequence
            source["encoder_padding_mask"] = ops.cast(encoder_mask, "int32")
        return final_state, source

    def call(self, inputs, training=None):
        missing = [name for name in SEQ2SEQ_INPUTS if name not in inputs]
        if missing:
            raise ValueError(f"The inputs lack {missing}; expected the keys {SEQ2SEQ_INPUTS}.")
        final_state, source = self._source(inputs[ENCODER_IDS], inputs[ENCODER_MASK], training)
        embedded = self.dropout(self.target_embedding(inputs[DECODER_IDS]), training=training)
        outputs, _ = self.decoder(embedded, final_state, **source)  # [B, T, D_out]
        logits = self.output_projection(self.dropout(outputs, training=training))
        return ops.cast(logits, "float32")  # [B, T, V]

    def encode(self, encoder_ids, encoder_mask, max_length=None):
        """The decoding state of the source batch (see the class docstring)."""
        del max_length  # a recurrent state has no length limit
        final_state, source = self._source(encoder_ids, encoder_mask, training=False)
        state = {"decoder_state": final_state, **source}
        if "encoder_sequence" in source:
            state["keys"] = self.decoder.compute_keys(source["encoder_sequence"])
        return state

    def decode_step(self, token_ids, state, step):
        """`(logits [B, V], new_state)` for `token_ids` `[B]`; `step` is not needed."""
        del step
        embedded = self.target_embedding(token_ids)  # [B, E]
        source = {name: value for name, value in state.items() if name != "decoder_state"}
        output, decoder_state = self.decoder.step(embedded, state["decoder_state"], **source)
        logits = ops.cast(self.output_projection(output), "float32")  # [B, V]
        return logits, {**state, "decoder_state": decoder_state}

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def rnn_seq2seq(config=None):
    """A recurrent encoder-decoder (`RnnSeq2Seq`) for `config` (default: GRU + attention)."""
    return RnnSeq2Seq(config or RnnSeq2SeqConfig())
