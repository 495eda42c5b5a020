"""The named sizes of every model configuration, in one place.

`BertConfig.from_preset("mini")` (and the same on every configuration class) makes a
configuration from the sizes below, with keyword overrides; the named classmethods
(`BertConfig.mini()`, ...) are the same presets by name. A preset lists only what differs
from the class's defaults, which are the paper's base model where there is one. The command
line offers these names (`lmpipe pretrain --preset`, `lmpipe summarize --preset`, `lmpipe
train translation --preset`). Nothing is imported here: the configuration modules import it.
"""

PRESETS = {
    "BertConfig": {
        # For tests and quick experiments.
        "tiny": dict(hidden_dim=128, num_layers=2, num_heads=2, intermediate_dim=512),
        # BERT-mini: pretrains in minutes on a CPU.
        "mini": dict(hidden_dim=256, num_layers=4, num_heads=4, intermediate_dim=1024),
        "small": dict(hidden_dim=512, num_layers=4, num_heads=8, intermediate_dim=2048),
        # BERT-base, 110M parameters.
        "base": dict(),
        # BERT-large, 340M parameters.
        "large": dict(hidden_dim=1024, num_layers=24, num_heads=16, intermediate_dim=4096),
    },
    "AlbertConfig": {
        "tiny": dict(
            embedding_dim=32, hidden_dim=128, num_layers=2, num_heads=2, intermediate_dim=512
        ),
        # ALBERT-base, 12M parameters.
        "base": dict(),
        "large": dict(hidden_dim=1024, num_layers=24, num_heads=16, intermediate_dim=4096),
        "xlarge": dict(hidden_dim=2048, num_layers=24, num_heads=16, intermediate_dim=8192),
        "xxlarge": dict(hidden_dim=4096, num_layers=12, num_heads=64, intermediate_dim=16384),
    },
    "XLNetConfig": {
        "tiny": dict(hidden_dim=128, num_layers=2, num_heads=2, intermediate_dim=512),
        # XLNet-base: 12 layers, d_model 768, vocabulary 32,000.
        "base": dict(),
    },
    "GptConfig": {
        "tiny": dict(
            hidden_dim=32, num_layers=2, num_heads=2, intermediate_dim=64, max_sequence_length=128
        ),
        # GPT-2 small, 124M parameters (`GptConfig.base` is the same).
        "small": dict(),
        "medium": dict(hidden_dim=1024, num_layers=24, num_heads=16, intermediate_dim=4096),
    },
    "ElmoConfig": {
        "tiny": dict(token_encoder="embedding", embedding_dim=32, lstm_units=64, projection_dim=32),
        # AllenNLP's small and medium ELMo's LSTMs, over word embeddings.
        "small": dict(
            token_encoder="embedding", embedding_dim=128, lstm_units=1024, projection_dim=128
        ),
        "medium": dict(
            token_encoder="embedding", embedding_dim=256, lstm_units=2048, projection_dim=256
        ),
        # The published ELMo: a character CNN under 2 layers of 4096 cells projected to 512.
        "original": dict(),
    },
    "TransformerConfig": {
        "tiny": dict(
            vocabulary_size=1000,
            hidden_dim=32,
            num_encoder_layers=2,
            num_decoder_layers=2,
            num_heads=4,
            intermediate_dim=64,
            max_decode_length=64,
        ),
        # The paper's base model (Table 3).
        "base": dict(),
        "big": dict(hidden_dim=1024, num_heads=16, intermediate_dim=4096, dropout=0.3),
    },
    "RnnSeq2SeqConfig": {
        "tiny": dict(vocabulary_size=1000, embedding_dim=16, hidden_dim=32),
        "sutskever": dict(cell="lstm", form="plain"),
        "cho": dict(cell="gru", form="context"),
        "bahdanau": dict(
            cell="gru", form="attention", attention_score="additive", bidirectional=True
        ),
        "luong": dict(cell="lstm", form="attention", attention_score="general"),
    },
}
"""Per configuration class (by name), its presets: the fields each sets, in the order the
command line lists them."""


class Presets:
    """What a configuration class with presets in `PRESETS` adds: `from_preset(name,
    **overrides)` and `preset_names()`."""

    @classmethod
    def preset_names(cls):
        """The names `from_preset` accepts, as the command line lists them."""
        return tuple(PRESETS[cls.__name__])

    @classmethod
    def from_preset(cls, name, **overrides):
        """The configuration of preset `name`, with `overrides` (fields) replacing its values.

        Raises:
            ValueError: `name` is not a preset of the class (the message lists them).
        """
        presets = PRESETS[cls.__name__]
        if name not in presets:
            raise ValueError(
                f"`preset` {name!r} is not a preset of {cls.__name__}: choose from "
                f"{', '.join(presets)}"
            )
        return cls(**{**presets[name], **overrides})
