"""`BertPretraining` and `AlbertPretraining`: data, model, training, evaluation, export."""

import math

import keras

from lmpipe.arguments import check_number
from lmpipe.datasets.bert_examples import (
    PAIR_MODES,
    bert_examples,
    check_sequence_length,
    special_token_count,
)
from lmpipe.datasets.masking import MaskedLMMasker
from lmpipe.datasets.packing import min_sequence_length
from lmpipe.models.albert import AlbertConfig
from lmpipe.models.bert import BertConfig
from lmpipe.models.pretraining import BertPretrainer, _config_from_dict, _config_to_dict
from lmpipe.pipelines.saved_pipeline import SavedPipeline, save_pipeline
from lmpipe.pipelines.training import check_training_options, one_pass_steps, train

# The positions of the default model: BERT's, or seq_len if shorter (at least 128).
DEFAULT_MAX_SEQUENCE_LENGTH = 512


class BertPretraining:
    """BERT pretraining: sentence pairs with masked-LM predictions, built online in tf.data.

    `dataset(corpus, batch_size)` yields `(features, labels)` batches with the names of the
    data contract: features `token_ids`, `segment_ids`, `padding_mask` int32 `[B, seq_len]`
    and `mask_positions` int32 `[B, max_predictions]`; labels `mask_ids` int32, `mask_weights`
    float32 `[B, max_predictions]`, and `nsp_labels` (objective "nsp": 1 = B follows A) or
    `sop_labels` (objective "sop": 1 = A and B in their original order) int32 `[B]`.

    Args:
        tokenizer: a `WordPieceTokenizer`; its `[PAD] [UNK] [CLS] [SEP] [MASK]` are looked up
            by name.
        seq_len: length of every example, special tokens included.
        objective: "nsp" (BERT), "sop" (ALBERT) or "mlm" (single segments, masked LM only).
        seed: seed of every random choice: the same seed gives identical batches.
        max_predictions: masked-LM predictions per example; defaults to
            `ceil(seq_len * selection_rate)` (20 for seq_len 128).
        selection_rate: share of an example's tokens predicted (0.15): BERT's
            `round(len(tokens) * 0.15)`, `[CLS]` and `[SEP]` counted, padding not. `[UNK]` is
            predicted like any other token; the other bracketed tokens never are.
        mask_token_rate: share of the predictions replaced by `[MASK]` (0.8).
        random_token_rate: share replaced by a random token (0.1); the rest is unchanged.
        whole_word: select whole words rather than pieces.
        max_ngram: mask spans of up to n words (of pieces without `whole_word`), p(n) ~ 1/n
            (ALBERT uses 3).
        short_seq_prob: probability that a document is cut into examples of a shorter
            target length (0.1), drawn once per document and epoch as in BERT.
        model: the encoder's configuration, a `BertConfig` (or `AlbertConfig`); defaults to
            `BertConfig.small()` sized to the tokenizer's vocabulary, with `max(seq_len, 128)`
            positions, at most 512 (a longer `seq_len` needs a config with more positions).
            Its `vocabulary_size` must equal the tokenizer's and its `max_sequence_length`
            hold `seq_len`.

    Example:

        corpus = lmpipe.datasets.TextCorpus.shakespeare()
        tokenizer = lmpipe.datasets.WordPieceTokenizer.train(corpus, vocab_size=8000)
        pipe = BertPretraining(tokenizer, seq_len=128, objective="nsp", seed=1)
        features, labels = next(iter(pipe.dataset(corpus, batch_size=32)))

    Reference: Devlin et al., "BERT", 2019, section 3.1 and appendix A.2.
    """

    default_objective = "nsp"

    def __init__(
        self,
        tokenizer,
        seq_len=128,
        objective=None,
        seed=0,
        max_predictions=None,
        selection_rate=0.15,
        mask_token_rate=0.8,
        random_token_rate=0.1,
        whole_word=False,
        max_ngram=1,
        short_seq_prob=0.1,
        model=None,
    ):
        objective = self.default_objective if objective is None else objective
        if objective not in PAIR_MODES:
            raise ValueError(
                f"`objective` must be one of {sorted(PAIR_MODES)}, got objective={objective!r}."
            )
        check_sequence_length(seq_len, objective)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"`seed` must be an int, got seed={seed!r}.")
        check_number("short_seq_prob", short_seq_prob, minimum=0, maximum=1)
        check_number("selection_rate", selection_rate, above=0, maximum=1)
        maskable = seq_len - special_token_count(objective)
        if max_predictions is None:
            max_predictions = max(1, min(math.ceil(seq_len * selection_rate), maskable))
        check_number("max_predictions", max_predictions, minimum=1, integer=True)
        if max_predictions > maskable:
            raise ValueError(
                f"`max_predictions` must be at most {maskable}, the tokens of a "
                f"seq_len={seq_len} example that can be predicted (minus its "
                f"{seq_len - maskable} special tokens), got max_predictions={max_predictions!r}."
            )
        self.model_config = self._model_config(model, tokenizer, seq_len, objective)
        self.options = {
            "seq_len": seq_len,
            "objective": objective,
            "seed": seed,
            "max_predictions": max_predictions,
            "selection_rate": selection_rate,
            "mask_token_rate": mask_token_rate,
            "random_token_rate": random_token_rate,
            "whole_word": whole_word,
            "max_ngram": max_ngram,
            "short_seq_prob": short_seq_prob,
        }
        self.model = None
        self.tokenizer = tokenizer
        self.seq_len = seq_len
        self.objective = objective
        self.seed = seed
        self.short_seq_prob = short_seq_prob
        self.masker = MaskedLMMasker(
            vocabulary_size=tokenizer.vocabulary_size,
            mask_token_id=tokenizer.mask_id,
            # BERT predicts [UNK] (and may draw it as a random token); it is a word of the text.
            special_token_ids=[i for i in tokenizer.special_token_ids if i != tokenizer.unk_id],
            pad_token_id=tokenizer.pad_id,
            selection_rate=selection_rate,
            mask_token_rate=mask_token_rate,
            random_token_rate=random_token_rate,
            max_predictions=max_predictions,
            whole_word=whole_word,
            continuation_mask=tokenizer.continuation_mask if whole_word else None,
            max_ngram=max_ngram,
        )

    @property
    def max_predictions(self):
        """Length of the masked-LM prediction lists."""
        return self.masker.max_predictions

    def dataset(
        self,
        corpus,
        batch_size,
        epochs=None,
        input_context=None,
        drop_remainder=True,
        shuffle_buffer=1024,
    ):
        """Pretraining batches from `corpus`, as `(features, labels)`.

        Args:
            corpus: a `TextCorpus`, or a `TokenizedCorpus` written with the same tokenizer.
            batch_size: examples per batch (per replica when given an `input_context`).
            epochs: passes over the corpus; None repeats forever. Every pass draws new pairs
                and new masks.
            input_context: a `tf.distribute.InputContext`; each input pipeline reads its own
                shard of the corpus.
            drop_remainder: drop the last incomplete batch (static batch shapes).
            shuffle_buffer: number of examples shuffled together.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}.")
        self._check_corpus(corpus, input_context)
        return bert_examples(
            corpus,
            self.tokenizer,
            seq_len=self.seq_len,
            objective=self.objective,
            masker=self.masker,
            batch_size=batch_size,
            seed=self.seed,
            input_context=input_context,
            epochs=epochs,
            short_seq_prob=self.short_seq_prob,
            shuffle_buffer=shuffle_buffer,
            drop_remainder=drop_remainder,
        )

    default_config = BertConfig.small

    def _model_config(self, config, tokenizer, seq_len, objective):
        if config is None:
            # A position table for seq_len (at least 128), up to BERT's 512: longer sequences
            # need a config that says so, rather than a table as long as any seq_len given.
            config = self.default_config(
                vocabulary_size=tokenizer.vocabulary_size,
                max_sequence_length=min(max(seq_len, 128), DEFAULT_MAX_SEQUENCE_LENGTH),
            )
        if not isinstance(config, (BertConfig, AlbertConfig)):
            raise ValueError(f"`model` must be a BertConfig or an AlbertConfig, got {config!r}.")
        if config.vocabulary_size != tokenizer.vocabulary_size:
            raise ValueError(
                f"The model's vocabulary_size ({config.vocabulary_size}) differs from the "
                f"tokenizer's ({tokenizer.vocabulary_size})."
            )
        check_sequence_length(
            seq_len,
            objective,
            config.max_sequence_length,
            "the model's max_sequence_length",
        )
        return config

    # Model ------------------------------------------------------------------------------------

    def build_model(self):
        """A new `BertPretrainer` (encoder + tied masked-LM head + pair head)."""
        return BertPretrainer(
            self.model_config, objective=self.objective, max_predictions=self.max_predictions
        )

    @property
    def encoder(self):
        """The trained encoder (a functional `keras.Model`), for fine-tuning or serving."""
        if self.model is None:
            raise ValueError("The pipeline has no model yet: call fit() or load() first.")
        return self.model.encoder

    def _run_config(self):
        return {"model": _config_to_dict(self.model_config), **self.options}

    def steps_in_one_pass(self, corpus, batch_size):
        """Number of full batches one pass over `corpus` gives (counted by building them)."""
        dataset = self.dataset(corpus, batch_size, epochs=1)
        return int(dataset.reduce(0, lambda count, _: count + 1).numpy())

    def fit(self, corpus, batch_size=32, epochs=1, steps_per_epoch=None, **training_options):
        """Pretrain on `corpus`; return the Keras `History`.

        Args:
            corpus: a `TextCorpus` or `TokenizedCorpus`.
            batch_size: global batch size (divided among the replicas; must divide evenly).
            epochs: number of epochs of `steps_per_epoch` steps.
            steps_per_epoch: defaults to the number of batches in one pass over the corpus.
            **training_options: the training options of `lmpipe.pipelines.training.train`
                (`strategy`, `checkpoint_dir`, `learning_rate`, ..., `verbose`).
        """
        options = check_training_options(f"{type(self).__name__}.fit", training_options)
        if steps_per_epoch is None:
            steps = self.steps_in_one_pass(corpus, batch_size)
            steps_per_epoch = one_pass_steps(steps, batch_size)
        # Without checkpoints, a second fit continues training the same model.
        previous = self.model if options.get("checkpoint_dir") is None else None

        def make_dataset(per_replica, input_context, skip):
            self._check_corpus(corpus, input_context)
            dataset = self.dataset(corpus, per_replica, input_context=input_context)
            return dataset.skip(skip)

        self._check_corpus(corpus, None)
        self.model, history = train(
            self.build_model,
            make_dataset,
            run_config=self._run_config(),
            batch_size=batch_size,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            model=previous,
            seed=self.seed,
            **options,
        )
        return history

    def evaluate(self, corpus, batch_size=32, steps=None, verbose="auto"):
        """Losses and accuracies on one pass over `corpus` (or `steps` batches), as a dict."""
        if self.model is None:
            raise ValueError("The pipeline has no model yet: call fit() or load() first.")
        self._check_corpus(corpus, None)
        dataset = self.dataset(corpus, batch_size, epochs=None if steps else 1)
        return self.model.evaluate(dataset, steps=steps, return_dict=True, verbose=verbose)

    def _check_corpus(self, corpus, input_context):
        num_pipelines = 1 if input_context is None else input_context.num_input_pipelines
        needed = 2 * num_pipelines if self.objective == "nsp" else num_pipelines
        if len(corpus) < needed:
            raise ValueError(
                f"The corpus has {len(corpus)} document(s); objective {self.objective!r} with "
                f"{num_pipelines} input pipeline(s) needs at least {needed}"
                + (
                    " (NSP draws its random second segment from another document)."
                    if self.objective == "nsp"
                    else "."
                )
            )

    # Save, load, export -----------------------------------------------------------------------

    def save(self, directory):
        """Write the tokenizer, the pipeline's options and the trained model to `directory`."""
        tokenizers = {"tokenizer": self.tokenizer}
        save_pipeline(directory, self, self.model, self._run_config(), tokenizers)

    @classmethod
    def load(cls, directory):
        """A pipeline saved with `save`, with its trained model."""
        saved = SavedPipeline(directory, cls)
        config = _config_from_dict(saved.description.pop("model"))
        pipeline = cls(saved.tokenizer(), model=config, **saved.description)
        pipeline.model = saved.model()
        return pipeline

    def serving_model(self):
        """The model to serve: the encoder's outputs and the pair head's probabilities, from
        `token_ids`, `segment_ids`, `padding_mask`."""
        encoder = self.encoder
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in ("token_ids", "segment_ids", "padding_mask")
        }
        outputs = dict(encoder(inputs))
        if self.objective != "mlm":
            logits = self.model.get_layer("pair_head")(outputs["pooled_output"])
            outputs[f"{self.objective}_probabilities"] = keras.layers.Softmax(dtype="float32")(
                logits
            )
        return keras.Model(inputs, outputs, name=f"{self.model.name}_serving")

    def export(self, base_dir, version=None, overwrite=False):
        """Export a SavedModel for TensorFlow Serving to `<base_dir>/<version>/`; return its
        path. Signatures: `serving_default` (token ids in) and raw-text ones (see README)."""
        from lmpipe.serving import export_saved_model

        return export_saved_model(
            base_dir,
            self.serving_model(),
            self.tokenizer,
            self.seq_len,
            version=version,
            overwrite=overwrite,
            # Text pairs only where a pair fits with a token of each text, as in training.
            pairs=self.seq_len >= min_sequence_length(2),
        )


class AlbertPretraining(BertPretraining):
    """ALBERT pretraining: sentence-order prediction and n-gram masking by default, and an
    `AlbertConfig` encoder (factorized embedding, one shared block).

    Takes the arguments of `BertPretraining`; defaults differ: `objective="sop"`,
    `whole_word=True` and `max_ngram=3` (n-grams of up to 3 complete words, p(n) ~ 1/n, as
    in the paper and in google-research/albert's data script), and `model` defaults to
    `AlbertConfig.tiny()`-like sizes scaled to the tokenizer (`AlbertConfig.base()` for
    real runs).

    Reference: Lan et al., "ALBERT", 2020, sections 3 and 4.1.
    """

    default_objective = "sop"

    def __init__(self, tokenizer, *args, whole_word=True, max_ngram=3, **kwargs):
        super().__init__(tokenizer, *args, whole_word=whole_word, max_ngram=max_ngram, **kwargs)

    def default_config(self, **sizes):
        return AlbertConfig(
            embedding_dim=128,
            hidden_dim=512,
            num_layers=4,
            num_heads=8,
            intermediate_dim=2048,
            **sizes,
        )
