"""How a pretraining family is offered by the `lmpipe` command: the declaration each family
makes (`Family.command_line`), so that the command knows no family by name."""

import dataclasses
from collections.abc import Callable


def shared_options(flags):
    """The options every pretraining family takes from the command's flags."""
    return {"seq_len": flags.seq_len, "seed": flags.seed}


@dataclasses.dataclass(frozen=True)
class CommandLine:
    """A pretraining family as `lmpipe pretrain NAME` and `lmpipe summarize NAME` offer it.

    Attributes:
        name: the family's name on the command line.
        options: the pipeline's keyword options from the command's parsed flags.
        config_class: the model configuration class whose presets `--preset` names; None for
            a family without presets (word2vec).
        default_preset: the preset `lmpipe pretrain` trains without `--preset`.
        published_preset: the published model's preset, `lmpipe summarize`'s default.
        build_model: the model builder of a configuration (what `lmpipe summarize` prints).
        positions: the position table for `(seq_len, the preset's positions)`; None: the
            preset's own (relative positions, or a table the pipeline checks `seq_len` against).
        tokenizer: the tokenizer of the family's paper, learned without `--tokenizer`:
            "wordpiece", "sentencepiece" or "bpe".
        sentence_piece_layout: the special tokens of a SentencePiece model learned for it.
        uses_mask_token: whether its examples need [CLS] and [MASK] tokens (no byte-level BPE).
        pair_objective: whether it takes a sentence-pair objective (`--objective`).
        memory: whether it takes `--reuse-len` and `--mem-len`.
        document_attention: whether it takes `--no-document-attention` (attention within
            each document of a packed row, on by default).
        objective: what it learns, said where `--objective` is refused.
        checkpoint_type: the Hugging Face `model_type` that `--pretrained` continues; None
            where continuing a checkpoint is not offered.
        recipes: the family's `Recipe`s by the name `--recipe` gives
            (`lmpipe.pipelines.recipes`).
    """

    name: str
    options: Callable = shared_options
    config_class: type = None
    default_preset: str = None
    published_preset: str = None
    build_model: Callable = None
    positions: Callable = None
    tokenizer: str = "wordpiece"
    sentence_piece_layout: str = "albert"
    uses_mask_token: bool = False
    pair_objective: bool = False
    memory: bool = False
    document_attention: bool = False
    objective: str = None
    checkpoint_type: str = None
    recipes: dict = dataclasses.field(default_factory=dict)

    def preset_config(self, preset, vocabulary_size, seq_len):
        """The model configuration of `preset` for a vocabulary of `vocabulary_size` and
        examples of `seq_len` tokens."""
        sizes = {"vocabulary_size": vocabulary_size}
        if self.positions is not None:
            most = self.config_class.from_preset(preset).max_sequence_length
            sizes["max_sequence_length"] = self.positions(seq_len, most)
        return self.config_class.from_preset(preset, **sizes)
