"""`Translation`: train a Transformer or RNN encoder-decoder on parallel text, translate, serve."""

import dataclasses

import tensorflow as tf

from lmpipe.arguments import (
    check_bool,
    check_choice,
    check_number,
    check_positive_int,
    check_texts,
)
from lmpipe.datasets.corpora.parallel_text import as_parallel_corpus
from lmpipe.datasets.examples.seq2seq_examples import (
    TARGET_TOKENS,
    check_lengths,
    seq2seq_examples,
    target_token_ids,
)
from lmpipe.models.configs import config_to_dict
from lmpipe.models.rnn_seq2seq import RnnSeq2SeqConfig, rnn_form
from lmpipe.models.samplers import BeamSampler, GreedySampler, decode, traced_function
from lmpipe.models.samplers.beam import LENGTH_PENALTIES
from lmpipe.models.seq2seq_trainer import (
    ARCHITECTURES,
    DEFAULT_LABEL_SMOOTHING,
    Seq2SeqTrainer,
    architecture_options,
)
from lmpipe.models.transformer import TransformerConfig
from lmpipe.pipelines.pipeline import Pipeline, PipelineOptions
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
from lmpipe.training.options import TRAINING_OPTIONS
from lmpipe.training.schedules import seq2seq_optimizer

# The training options `Translation.fit` takes: its optimizers (`optimizer`) have no weight
# decay, and its models are not XLA-compiled.
TRANSLATION_TRAINING_OPTIONS = tuple(
    name for name in TRAINING_OPTIONS if name not in ("weight_decay", "jit_compile")
)

# Detokenized text has a space on both sides of punctuation ("hola , mundo !"): remove the one
# before closing and after opening punctuation, as the text was most likely written.
_SPACE_BEFORE = r" ([,.;:!?)\]}»”’])"
_SPACE_AFTER = r"([(\[{«“¿¡]) "


@dataclasses.dataclass(frozen=True)
class TranslationOptions(PipelineOptions):
    """The options of `Translation`.

    Attributes:
        arch: "transformer" or "rnn" (set from the `config` when one is given).
        attention: "additive", "dot", "general" or None (recurrent models only; None for
            the Transformer).
        form: None (derived from `attention`), "plain", "context" or "attention" (recurrent
            models only).
        shared_vocabulary: train one vocabulary for both languages.
        vocab_size: size of each trained vocabulary.
        lower_case: train uncased vocabularies.
        max_source_len: the most source tokens seen in training and translation.
        max_target_len: the most decoder positions in training (target tokens + 1); the
            default longest translation.
        truncate: cut longer training sentences (counted in a warning) or raise.
        label_smoothing: None: 0.1 for the Transformer, 0 for RNNs.
        bucket_boundaries: length buckets of the training batches (see `seq2seq_examples`).
        seed: seed of weight initialization, dropout and the data order.
    """

    arch: str = "transformer"
    attention: str = "additive"
    form: str = None
    shared_vocabulary: bool = True
    vocab_size: int = 8000
    lower_case: bool = False
    max_source_len: int = 128
    max_target_len: int = 128
    truncate: bool = True
    label_smoothing: float = None
    bucket_boundaries: tuple = None

    def check(self):
        super().check()
        check_choice("arch", self.arch, tuple(ARCHITECTURES))
        if self.arch == "rnn":
            self.resolve("form", rnn_form(self.attention, self.form))
        elif self.form is not None:
            raise ValueError(f"`form` applies to arch='rnn' only, got form={self.form!r}.")
        if self.arch != "rnn" or self.form != "attention":
            self.resolve("attention", None)
        check_positive_int("max_source_len", self.max_source_len)
        check_number("max_target_len", self.max_target_len, minimum=2, integer=True)
        check_positive_int("vocab_size", self.vocab_size)
        for name in ("shared_vocabulary", "lower_case", "truncate"):
            check_bool(name, getattr(self, name))
        if self.label_smoothing is None:
            self.resolve("label_smoothing", DEFAULT_LABEL_SMOOTHING[self.arch])
        check_number("label_smoothing", self.label_smoothing, minimum=0, below=1)
        if self.bucket_boundaries is not None:
            self.resolve("bucket_boundaries", tuple(self.bucket_boundaries))


class Translation(Pipeline):
    """Machine translation: tokenizers, an encoder-decoder, training, BLEU, beam search, export.

    Pick the model with `arch` and, for recurrent models, `attention` and `form`:

    - `arch="transformer"` (default): the Transformer (`TransformerConfig.base()` sizes unless
      `model` is given), Adam (0.9, 0.98, 1e-9) with the paper's warmup and inverse-square-root
      schedule, label smoothing 0.1.
    - `arch="rnn"`: a GRU encoder-decoder (`RnnSeq2SeqConfig`), Adam with a constant learning
      rate, no label smoothing. The decoder sees the source in one of three forms:
      (c) with attention: `attention="additive"` (Bahdanau, the default), `"dot"` or
      `"general"` (Luong); (b) `attention=None`: the encoder's summary initializes the decoder
      and is fed at every step (Cho et al., `form="context"`, the default without attention);
      (a) `attention=None, form="plain"`: the summary only initializes the decoder
      (Sutskever et al.). `form="attention"` needs an `attention` score, and the plain and
      context forms need `attention=None`.

    A `config` (a `TransformerConfig` or `RnnSeq2SeqConfig`) overrides `arch`,
    `attention` and `form`; its vocabulary sizes are set from the tokenizers (and a
    Transformer's `share_embeddings` is turned off for separate vocabularies).

    Tokenizers: cased WordPiece (`lower_case=False` by default, so that translations keep case
    and accents). Without tokenizers, the first `fit` trains them on its pairs: one shared
    vocabulary of `vocab_size` for both languages (`shared_vocabulary=True`, as the paper's
    shared BPE), or one per language. The target vocabulary gets the reserved tokens `[BOS]`
    and `[EOS]`; a given target tokenizer without them is an error.

    Args:
        config: a model config, or None for the architecture's default sizes.
        source_tokenizer, target_tokenizer: `WordPieceTokenizer`s, or None to train them.
        **options: the fields of `TranslationOptions` (`arch`, `attention`, `form`,
            `shared_vocabulary`, `vocab_size`, `lower_case`, `max_source_len`,
            `max_target_len`, `truncate`, `label_smoothing`, `bucket_boundaries`, `seed`).

    Example:

        pairs = lmpipe.datasets.ParallelCorpus.bible()      # English -> Spanish
        train_pairs, test_pairs = pairs.split(held_out=1000, seed=0)
        pipe = Translation(arch="transformer", vocab_size=16000)
        pipe.fit(train_pairs, batch_size=64, epochs=10)
        pipe.evaluate(test_pairs)["bleu"]
        pipe.translate(["In the beginning was the Word."])
        pipe.export("serving/translation")

    Reference: Vaswani et al., 2017; Sutskever et al., 2014; Cho et al., 2014;
    Bahdanau et al., 2015; Luong et al., 2015.
    """

    options_class = TranslationOptions
    predictions = ("translate",)
    evaluation_data = "pairs"
    # The configuration class of each `arch`, whose presets `lmpipe train --preset` names.
    architectures = {"transformer": TransformerConfig, "rnn": RnnSeq2SeqConfig}
    training_options = TRANSLATION_TRAINING_OPTIONS
    default_batch_size = 64
    data_name = "the pairs"

    def __init__(self, config=None, source_tokenizer=None, target_tokenizer=None, **options):
        if config is not None:
            options.update(architecture_options(config))
        super().__init__(config, **options)
        if self.options.shared_vocabulary and target_tokenizer is None:
            target_tokenizer = source_tokenizer
        if self.options.shared_vocabulary and source_tokenizer is None:
            source_tokenizer = target_tokenizer
        if (source_tokenizer is None) != (target_tokenizer is None):
            raise ValueError(
                "Give both `source_tokenizer` and `target_tokenizer` (or neither, to train them "
                "on the first fit)."
            )
        if target_tokenizer is not None:
            target_token_ids(target_tokenizer)
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer

    # Tokenizers and model -------------------------------------------------------------------

    def train_tokenizers(self, corpus):
        """Learn the vocabularies from `corpus` (what the first `fit` does without tokenizers)."""
        corpus = as_parallel_corpus(corpus)
        options = self.options
        if options.shared_vocabulary:
            tokenizer = WordPieceTokenizer.train(
                list(corpus.sources) + list(corpus.targets),
                vocab_size=options.vocab_size,
                lower_case=options.lower_case,
                reserved_tokens=TARGET_TOKENS,
            )
            self.source_tokenizer = self.target_tokenizer = tokenizer
        else:
            self.source_tokenizer = WordPieceTokenizer.train(
                list(corpus.sources), vocab_size=options.vocab_size, lower_case=options.lower_case
            )
            self.target_tokenizer = WordPieceTokenizer.train(
                list(corpus.targets),
                vocab_size=options.vocab_size,
                lower_case=options.lower_case,
                reserved_tokens=TARGET_TOKENS,
            )

    def resolved_model_config(self):
        """The model config used: `model` or the architecture's default, sized to the
        tokenizers."""
        if self.source_tokenizer is None:
            raise ValueError("No tokenizers yet: call fit() or train_tokenizers() first.")
        sizes = dict(
            vocabulary_size=self.source_tokenizer.vocabulary_size,
            target_vocabulary_size=self.target_tokenizer.vocabulary_size,
        )
        config, options = self.config, self.options
        if config is None and options.arch == "transformer":
            config = TransformerConfig.base(max_decode_length=options.max_target_len)
        elif config is None:
            attention = {"attention_score": options.attention} if options.attention else {}
            config = RnnSeq2SeqConfig(form=options.form, **attention)
        if isinstance(config, TransformerConfig):
            shared = self.source_tokenizer is self.target_tokenizer
            sizes["share_embeddings"] = config.share_embeddings and shared
            sizes["max_decode_length"] = max(config.max_decode_length, options.max_target_len)
        return dataclasses.replace(config, **sizes)

    def build_model(self):
        """A new, untrained `Seq2SeqTrainer` for the resolved model config."""
        return Seq2SeqTrainer(
            self.resolved_model_config(), label_smoothing=self.options.label_smoothing
        )

    @property
    def bos_id(self):
        """Id of `[BOS]` in the target vocabulary."""
        return target_token_ids(self.target_tokenizer)[0]

    @property
    def eos_id(self):
        """Id of `[EOS]` in the target vocabulary."""
        return target_token_ids(self.target_tokenizer)[1]

    # Data -----------------------------------------------------------------------------------

    def dataset(self, pairs, batch_size, epochs=None, input_context=None, **options):
        """Teacher-forcing batches of `pairs` (see `seq2seq_examples`; options pass through,
        `bucket_boundaries` defaults to the pipeline's)."""
        if self.source_tokenizer is None:
            raise ValueError("No tokenizers yet: call fit() or train_tokenizers() first.")
        options.setdefault("bucket_boundaries", self.options.bucket_boundaries)
        return seq2seq_examples(
            as_parallel_corpus(pairs),
            self.source_tokenizer,
            self.target_tokenizer,
            batch_size=batch_size,
            max_source_len=self.options.max_source_len,
            max_target_len=self.options.max_target_len,
            seed=self.options.seed,
            epochs=epochs,
            input_context=input_context,
            truncate=self.options.truncate,
            **options,
        )

    def check_data(self, pairs, name="data"):
        return as_parallel_corpus(pairs)

    def training_batches(self, corpus, per_replica, input_context):
        # `before_fit` checked the lengths of every pair.
        return self.dataset(corpus, per_replica, input_context=input_context, check=False)

    def steps_in_one_pass(self, corpus, batch_size):
        one_pass = self.dataset(corpus, batch_size, epochs=1, check=False)
        return int(one_pass.reduce(0, lambda count, _: count + 1).numpy())

    def evaluation_batches(self, corpus, batch_size, steps):
        if steps:
            return self.dataset(corpus, batch_size, check=False)
        return self.dataset(
            corpus, batch_size, epochs=1, shuffle=False, check=False, drop_remainder=False
        )

    # Training -------------------------------------------------------------------------------

    def before_fit(self, corpus):
        """Learn the vocabularies (on the first fit without tokenizers), check every pair's
        length, and size the model configuration to the vocabularies."""
        if self.source_tokenizer is None:
            self.train_tokenizers(corpus)
        options = self.options
        check_lengths(
            corpus,
            self.source_tokenizer,
            self.target_tokenizer,
            options.max_source_len,
            options.max_target_len,
            options.truncate,
        )
        self.config = self.resolved_model_config()

    @property
    def training_defaults(self):
        """`learning_rate` scales the Transformer's schedule (its `factor`: 1, the paper's)
        or is the recurrent models' constant rate (1e-3)."""
        return {"learning_rate": 1.0 if self.options.arch == "transformer" else 1e-3}

    def optimizer(self, training_options):
        """The Transformer's Adam (0.9, 0.98, 1e-9) with the paper's schedule, or Adam with a
        constant learning rate for RNNs, from these training options:
        `learning_rate`: the Transformer: the schedule's `factor` (default 1, the paper);
        RNNs: Adam's constant learning rate (default 1e-3).
        `warmup_steps`: the Transformer's warmup: 4000 (the paper), or 10% of the steps for
        runs shorter than 40,000 steps.
        `clipnorm`: global gradient-norm clipping (None: none; default 1.0)."""
        config = self.config
        return seq2seq_optimizer(
            config.hidden_dim if isinstance(config, TransformerConfig) else None,
            training_options.learning_rate,
            training_options.warmup_steps,
            training_options.clipnorm,
        )

    # Translation and evaluation -------------------------------------------------------------

    def translation_function(self, beam_width=4, max_length=None, length_penalty="average"):
        """The `tf.function` `text [N] -> {"translation": [N] strings}` that `translate` and
        `export` run: tokenize, encode, beam search (greedy for `beam_width=1`), detokenize,
        all in graph ops."""
        self.require_model()
        check_positive_int("beam_width", beam_width)
        if max_length is None:
            max_length = self.options.max_target_len
        check_positive_int("max_length", max_length)
        check_choice("length_penalty", length_penalty, LENGTH_PENALTIES)
        seq2seq = self.model.seq2seq
        max_source_len = self.options.max_source_len

        def make():
            return _translator(
                seq2seq,
                self.source_tokenizer,
                self.target_tokenizer,
                max_source_len,
                beam_width=beam_width,
                max_length=max_length,
                length_penalty=length_penalty,
            )

        key = ("translate", max_source_len, beam_width, max_length, length_penalty)
        return traced_function(seq2seq, key, make)

    def translate(self, texts, beam_width=4, max_length=None, batch_size=64):
        """Translations of `texts` (a list of strings), as a list of strings.

        Args:
            texts: source sentences; longer ones are cut to `max_source_len` tokens.
            beam_width: hypotheses kept by beam search; 1 is greedy search.
            max_length: the most target tokens per translation (default `max_target_len`).
            batch_size: sentences translated together.
        """
        texts = check_texts("texts", texts)
        function = self.translation_function(beam_width, max_length)
        results = []
        for start in range(0, len(texts), batch_size):
            batch = tf.constant(texts[start : start + batch_size], tf.string)
            results.extend(t.decode("utf-8") for t in function(batch)["translation"].numpy())
        return results

    def evaluate(
        self, pairs, batch_size=None, steps=None, verbose=0, beam_width=4, max_length=None
    ):
        """The teacher-forced `loss`, `nll` and `token_accuracy` on `pairs` (see
        `Pipeline.evaluate`), and `bleu`: sacrebleu's `corpus_bleu(translations,
        [targets]).score` (its default 13a tokenization) of the translations of every
        source, by beam search of `beam_width` (greedy for 1), as a dict of floats."""
        import sacrebleu

        results = super().evaluate(pairs, batch_size, steps, verbose)
        corpus = as_parallel_corpus(pairs)
        translations = self.translate(
            corpus.sources,
            beam_width=beam_width,
            max_length=max_length,
            batch_size=batch_size or self.default_batch_size,
        )
        bleu = sacrebleu.corpus_bleu(translations, [list(corpus.targets)])
        return {"bleu": float(bleu.score), **results}

    # Save, load, export ---------------------------------------------------------------------

    def run_config(self):
        return super().run_config() | {"model": config_to_dict(self.resolved_model_config())}

    def tokenizers(self):
        if self.source_tokenizer is self.target_tokenizer:
            return {"tokenizer": self.source_tokenizer}
        return {
            "source_tokenizer": self.source_tokenizer,
            "target_tokenizer": self.target_tokenizer,
        }

    def saved_state(self):
        shared = self.source_tokenizer is self.target_tokenizer
        return {"tokenizers": "shared" if shared else "separate"}

    @classmethod
    def from_parts(cls, saved, config, options):
        if (saved.description.get("state") or {}).get("tokenizers") == "shared":
            source = target = saved.tokenizer()
        else:
            source = saved.tokenizer("source_tokenizer")
            target = saved.tokenizer("target_tokenizer")
        return cls(config, source, target, **options.to_dict())

    def write_export(
        self, base_dir, version, overwrite, beam_width=4, max_length=None, warmup_texts=True
    ):
        """Exports a text-in, text-out SavedModel. `export` takes `beam_width`, `max_length`
        and `warmup_texts` as keywords.

        The `serving_default` signature takes `text` (string `[N]`) and returns `translation`
        (string `[N]`): tokenization, beam search (greedy for `beam_width=1`) and
        detokenization run in the graph (no XLA). Loading it needs only TensorFlow and
        tensorflow_text. `warmup_texts` (True: a built-in sentence, a list, or False) become
        TF Serving warmup requests. Returns the version directory.
        """
        from lmpipe.serving.text_export import export_text_function, serving_module

        function = self.translation_function(beam_width, max_length)
        module = serving_module(
            self.model.seq2seq.variables,
            source_tokenizer=self.source_tokenizer,
            target_tokenizer=self.target_tokenizer,
        )
        return export_text_function(
            base_dir,
            module,
            function,
            version=version,
            overwrite=overwrite,
            warmup_texts=warmup_texts,
        )


def _translator(
    seq2seq,
    source_tokenizer,
    target_tokenizer,
    max_source_len,
    *,
    beam_width,
    max_length,
    length_penalty,
):
    bos_id, eos_id = target_token_ids(target_tokenizer)
    pad_id = target_tokenizer.pad_id

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def translate(text):
        ids = source_tokenizer.tokenize(text)[:, :max_source_len]  # [N, (S)]
        encoder_ids = ids.to_tensor(default_value=0)  # [N, S]
        # At least one column, so that a batch of empty texts still has a shape to encode.
        encoder_ids = tf.pad(
            encoder_ids, [[0, 0], [0, tf.maximum(1 - tf.shape(encoder_ids)[1], 0)]]
        )
        width = tf.shape(encoder_ids)[1]
        encoder_mask = tf.cast(tf.sequence_mask(ids.row_lengths(), width), tf.int32)
        sampler = GreedySampler() if beam_width == 1 else BeamSampler(beam_width, length_penalty)
        output = decode(
            seq2seq,
            encoder_ids,
            encoder_mask,
            sampler,
            bos_id=bos_id,
            eos_id=eos_id,
            max_length=max_length,
            pad_id=pad_id,
        ).token_ids
        output = tf.where(output == eos_id, pad_id, output)  # [N, L]; [PAD] is never printed
        words = target_tokenizer.detokenize(output)
        words = tf.strings.regex_replace(words, _SPACE_BEFORE, r"\1")
        words = tf.strings.regex_replace(words, _SPACE_AFTER, r"\1")
        # An empty source has nothing to translate.
        return {"translation": tf.where(ids.row_lengths() > 0, words, "")}

    return translate
