"""`ElmoPretraining`: the biLM's data, model, training, evaluation and downstream features."""

import math

from lmpipe.models.elmo import ElmoConfig, ElmoLanguageModel
from lmpipe.pipelines.gpt_pretraining import LanguageModelPretraining


class ElmoPretraining(LanguageModelPretraining):
    """ELMo pretraining: a forward and a backward LSTM LM trained jointly on packed text.

    `dataset(corpus, batch_size)` yields the causal LM contract plus the backward LM's
    labels: features `token_ids`, `padding_mask` int32 `[B, seq_len]`; labels `next_ids`,
    `previous_ids` int32 and `weights`, `previous_weights` float32 `[B, seq_len]` (see
    `lmpipe.datasets.causal_lm`, `bidirectional=True`). Windows are padded at the end only,
    as the backward LM needs.

    After `fit`, `feature_model()` gives the layer representations for downstream tasks, to
    mix with `lmpipe.layers.scalar_mix.ScalarMix`.

    Args:
        tokenizer: a `WordPieceTokenizer`.
        seq_len: tokens per training example.
        model: an `ElmoConfig`; defaults to `ElmoConfig.small()` sized to the tokenizer.
        seed: seed of the data order, the initialization and dropout.
        group_size: documents joined into one token stream before cutting windows.

    Example:

        pipe = ElmoPretraining(tokenizer, seq_len=64, model=ElmoConfig.tiny(vocabulary_size=V))
        pipe.fit(corpus, batch_size=16, epochs=1)
        features = pipe.feature_model()   # {token_ids, padding_mask} -> [B, L + 1, S, 2D]
        mixed = ScalarMix()(features(inputs))

    Reference: Peters et al., "Deep contextualized word representations", 2018.
    """

    config_class = ElmoConfig
    bidirectional = True

    def default_config(self):
        return ElmoConfig.small(vocabulary_size=self.tokenizer.vocabulary_size)

    def build_model(self):
        """A new `ElmoLanguageModel` for the pipeline's configuration."""
        return ElmoLanguageModel(self.model_config)

    def evaluate(self, corpus, batch_size=32, steps=None, verbose="auto"):
        """Losses, accuracies and `forward_perplexity`, `backward_perplexity` (exp of each
        direction's mean loss) on one pass over `corpus` (or `steps` batches), as a dict."""
        results = self._evaluate(corpus, batch_size, steps, verbose)
        for direction in ("forward", "backward"):
            results[f"{direction}_perplexity"] = math.exp(results[f"{direction}_loss"])
        return results

    def feature_model(self):
        """The trained biLM as a `keras.Model`: `{token_ids, padding_mask}` int32 `[B, S]`
        -> layer representations `[B, L + 1, S, 2D]` (shares the trained weights)."""
        return self._require_model().feature_model()
