"""`ElmoPretraining`: the biLM's data, model, training, evaluation and downstream features."""

import keras

from lmpipe.contract import ENCODER_FEATURES, PADDING_MASK, TOKEN_IDS
from lmpipe.models.elmo import ElmoConfig, ElmoLanguageModel, elmo
from lmpipe.pipelines.command_line import CommandLine
from lmpipe.pipelines.gpt_pretraining import LanguageModelPretraining
from lmpipe.pipelines.pipeline import perplexity
from lmpipe.tokenizers.token_characters import token_characters


class ElmoPretraining(LanguageModelPretraining):
    """ELMo pretraining: a forward and a backward LSTM LM trained jointly on packed text.

    `dataset(corpus, batch_size)` yields the causal LM contract plus the backward LM's
    labels: features `token_ids`, `padding_mask` int32 `[B, seq_len]` and `stream_position`
    int64 `[B, 3]`; labels `next_ids`, `previous_ids` int32 and `weights`, `previous_weights`
    float32 `[B, seq_len]` (see `lmpipe.datasets.examples.causal_lm`, `bidirectional=True`),
    from the seekable stream (`dataset(..., start=position)`). Rows are padded at the end
    only, as the backward LM needs. The LSTMs read across the `[SEP]`-separated documents of a
    row, with no `document_ids`, as bilm-tf does.

    After `fit`, `feature_model()` gives the layer representations for downstream tasks, to
    mix with `lmpipe.layers.scalar_mix.ScalarMix`.

    Args:
        tokenizer: a `WordPieceTokenizer` (or a `BytePairTokenizer`).
        config: an `ElmoConfig`; defaults to `ElmoConfig.small()` sized to the tokenizer
            (`ElmoConfig.original()`: the published model, with its character CNN).
        **options: the fields of `LanguageModelOptions` (`seq_len`, `group_size`, `seed`).

    Example:

        pipe = ElmoPretraining(tokenizer, ElmoConfig.tiny(vocabulary_size=V), seq_len=64)
        pipe.fit(corpus, batch_size=16, epochs=1)
        features = pipe.feature_model()   # {token_ids, padding_mask} -> [B, L + 1, S, 2D]
        mixed = ScalarMix()(features(inputs))

    Reference: Peters et al., "Deep contextualized word representations", 2018.
    """

    config_classes = (ElmoConfig,)
    bidirectional = True
    command_line = CommandLine(
        "elmo",
        config_class=ElmoConfig,
        default_preset="tiny",
        published_preset="small",
        build_model=elmo,
        objective="a language model of the next and the previous token",
    )

    def default_config(self):
        return ElmoConfig.small(vocabulary_size=self.tokenizer.vocabulary_size)

    def build_model(self):
        """A new `ElmoLanguageModel` for the pipeline's configuration (its character CNN
        reading the tokenizer's spellings, with `token_encoder="characters"`)."""
        characters = None
        if self.config.token_encoder == "characters":
            characters = token_characters(self.tokenizer, self.config.max_characters_per_token)
        return ElmoLanguageModel(self.config, token_characters=characters)

    def derived_metrics(self, results):
        """Adds `forward_perplexity` and `backward_perplexity` (exp of each direction's mean
        loss) to the losses and accuracies."""
        for direction in ("forward", "backward"):
            results[f"{direction}_perplexity"] = perplexity(results[f"{direction}_loss"])
        return results

    def feature_model(self):
        """The trained biLM as a `keras.Model`: `{token_ids, padding_mask}` int32 `[B, S]`
        -> layer representations `[B, L + 1, S, 2D]` (shares the trained weights)."""
        return self.require_model().feature_model()

    def serving_model(self):
        """The model to serve: int32 `token_ids`, `segment_ids` (unused), `padding_mask`
        `[B, S]` -> `{"layers": float32 [B, L + 1, S, 2D]}`, the biLM's representations."""
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name) for name in ENCODER_FEATURES
        }
        features = self.feature_model()(
            {TOKEN_IDS: inputs[TOKEN_IDS], PADDING_MASK: inputs[PADDING_MASK]}
        )
        return keras.Model(inputs, {"layers": features}, name="elmo_serving")

    def write_export(self, base_dir, version, overwrite, outputs=None):
        """Signatures: `serving_default` (token ids in) and `serve_text`, which packs each
        text as `[SEP] text [SEP]` (a document after another, as in training). `export`
        takes `outputs`: the outputs served (None: all)."""
        model = self.serving_model()
        return self.export_encoder(
            model, base_dir, version, overwrite, outputs, pairs=False, layout="causal"
        )
