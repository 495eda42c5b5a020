"""`BertPretraining` and `AlbertPretraining`: data, model, training, evaluation, export."""

import dataclasses
import math
import os

import keras
import numpy as np
import tensorflow as tf

from lmpipe.arguments import (
    check_bool,
    check_choice,
    check_number,
    check_positive_int,
    check_texts,
)
from lmpipe.contract import ENCODER_FEATURES, MASK_IDS, MASK_POSITIONS, MASK_WEIGHTS
from lmpipe.datasets.examples.bert_examples import (
    PAIR_MODES,
    bert_examples,
    check_objective_sequence_length,
    special_token_count,
)
from lmpipe.datasets.examples.masking import MaskedLMMasker
from lmpipe.datasets.examples.packing import cut_to_longest, min_sequence_length, pack_masked_texts
from lmpipe.interop.hf.checkpoint import checkpoint_model_type
from lmpipe.interop.hf.encoders import (
    albert_config_from_hf,
    bert_config_from_hf,
    load_pretrainer_weights,
)
from lmpipe.models.albert import AlbertConfig, albert
from lmpipe.models.bert import BertConfig, bert
from lmpipe.models.pretraining import BertPretrainer
from lmpipe.models.samplers import traced_function
from lmpipe.pipelines.command_line import CommandLine, shared_options
from lmpipe.pipelines.pipeline import EncoderPipeline, PipelineOptions, perplexity
from lmpipe.pipelines.recipes import FAST_BERT
from lmpipe.tokenizers.sentence_piece import SentencePieceTokenizer
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer

# The positions of the default model: BERT's, or seq_len if shorter (at least 128).
DEFAULT_MAX_SEQUENCE_LENGTH = 512


def position_table(seq_len, most=DEFAULT_MAX_SEQUENCE_LENGTH):
    """The positions a model for `seq_len` tokens gets: at least 128, at most `most`.

    A longer `seq_len` needs a configuration that says so, rather than a table as long as any
    `seq_len` given: the pipeline refuses it against the table.
    """
    return min(max(seq_len, 128), most)


def _pair_options(flags):
    options = {**shared_options(flags), "objective": flags.objective}
    if getattr(flags, "length_buckets", None):
        options["length_buckets"] = True
    return options


@dataclasses.dataclass(frozen=True)
class BertPretrainingOptions(PipelineOptions):
    """The options of `BertPretraining`.

    Attributes:
        seq_len: length of every example, special tokens included.
        objective: "nsp" (BERT), "sop" (ALBERT) or "mlm" (single segments, masked LM only);
            None: the family's default.
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
        length_buckets: batch examples of similar length together and cut each batch's
            padding to the smallest of a few lengths that holds it (16, 24, 32, 48, 64, 96,
            128, ... up to `seq_len`; see `lmpipe.datasets.examples.length_groups`): the same
            examples, pairs and masks, in another order within each window of the stream,
            and batches `[B, L]` with `L` at most `seq_len`. Off by default: about 5% more real
            tokens a second at `seq_len` 128 on Shakespeare, less at 64 (docs/stream.md).
        seed: seed of every random choice: the same seed gives identical batches.
    """

    seq_len: int = 128
    objective: str = "nsp"
    max_predictions: int = None
    selection_rate: float = 0.15
    mask_token_rate: float = 0.8
    random_token_rate: float = 0.1
    whole_word: bool = False
    max_ngram: int = 1
    short_seq_prob: float = 0.1
    length_buckets: bool = False

    def check(self):
        super().check()
        if self.objective is None:
            self.resolve("objective", self.default("objective"))
        check_choice("objective", self.objective, tuple(PAIR_MODES))
        check_objective_sequence_length(self.seq_len, self.objective)
        check_number("short_seq_prob", self.short_seq_prob, minimum=0, maximum=1)
        check_number("selection_rate", self.selection_rate, above=0, maximum=1)
        check_bool("whole_word", self.whole_word)
        check_bool("length_buckets", self.length_buckets)
        check_positive_int("max_ngram", self.max_ngram)
        maskable = self.seq_len - special_token_count(self.objective)
        if self.max_predictions is None:
            default = math.ceil(self.seq_len * self.selection_rate)
            self.resolve("max_predictions", max(1, min(default, maskable)))
        check_positive_int("max_predictions", self.max_predictions)
        if self.max_predictions > maskable:
            raise ValueError(
                f"`max_predictions` must be at most {maskable}, the tokens of a "
                f"seq_len={self.seq_len} example that can be predicted (minus its "
                f"{self.seq_len - maskable} special tokens), got "
                f"max_predictions={self.max_predictions!r}."
            )


@dataclasses.dataclass(frozen=True)
class AlbertPretrainingOptions(BertPretrainingOptions):
    """The options of `AlbertPretraining`: those of `BertPretrainingOptions`, with ALBERT's
    defaults: `objective="sop"`, `whole_word=True` and `max_ngram=3` (n-grams of up to 3
    complete words, p(n) ~ 1/n, as in the paper and in google-research/albert's data
    script)."""

    objective: str = "sop"
    whole_word: bool = True
    max_ngram: int = 3


class BertPretraining(EncoderPipeline):
    """BERT pretraining: sentence pairs with masked-LM predictions, built online in tf.data.

    `dataset(corpus, batch_size)` yields `(features, labels)` batches with the names of the
    data contract: features `token_ids`, `segment_ids`, `padding_mask` int32 `[B, seq_len]`
    and `mask_positions` int32 `[B, max_predictions]`; labels `mask_ids` int32, `mask_weights`
    float32 `[B, max_predictions]`, and `nsp_labels` (objective "nsp": 1 = B follows A) or
    `sop_labels` (objective "sop": 1 = A and B in their original order) int32 `[B]`.

    Args:
        tokenizer: a `WordPieceTokenizer`; its `[PAD] [UNK] [CLS] [SEP] [MASK]` are looked up
            by name.
        config: the encoder's configuration, a `BertConfig` (or `AlbertConfig`); defaults to
            `BertConfig.small()` sized to the tokenizer's vocabulary, with `max(seq_len, 128)`
            positions, at most 512 (a longer `seq_len` needs a config with more positions).
            Its `vocabulary_size` must equal the tokenizer's and its `max_sequence_length`
            hold `seq_len`.
        **options: the fields of `BertPretrainingOptions` (`seq_len`, `objective`, `seed`,
            `max_predictions`, `selection_rate`, `mask_token_rate`, `random_token_rate`,
            `whole_word`, `max_ngram`, `short_seq_prob`, `length_buckets`).

    Example:

        corpus = lmpipe.datasets.TextCorpus.shakespeare()
        tokenizer = lmpipe.datasets.WordPieceTokenizer.train(corpus, vocab_size=8000)
        pipe = BertPretraining(tokenizer, seq_len=128, objective="nsp", seed=1)
        features, labels = next(iter(pipe.dataset(corpus, batch_size=32)))

    Reference: Devlin et al., "BERT", 2019, section 3.1 and appendix A.2.
    """

    options_class = BertPretrainingOptions
    config_classes = (BertConfig, AlbertConfig)
    pretraining_heads = True
    predictions = ("fill_mask", "embed")
    command_line = CommandLine(
        "bert",
        options=_pair_options,
        config_class=BertConfig,
        default_preset="mini",
        published_preset="base",
        build_model=bert,
        positions=position_table,
        uses_mask_token=True,
        pair_objective=True,
        checkpoint_type="bert",
        recipes={"fast": FAST_BERT},
    )

    def __init__(self, tokenizer, config=None, **options):
        super().__init__(tokenizer, config, **options)
        options = self.options
        self.masker = MaskedLMMasker(
            vocabulary_size=tokenizer.vocabulary_size,
            mask_token_id=tokenizer.mask_id,
            # BERT predicts [UNK] (and may draw it as a random token); it is a word of the text.
            special_token_ids=[i for i in tokenizer.special_token_ids if i != tokenizer.unk_id],
            pad_token_id=tokenizer.pad_id,
            selection_rate=options.selection_rate,
            mask_token_rate=options.mask_token_rate,
            random_token_rate=options.random_token_rate,
            max_predictions=options.max_predictions,
            whole_word=options.whole_word,
            continuation_mask=tokenizer.continuation_mask if options.whole_word else None,
            max_ngram=options.max_ngram,
        )

    def default_config(self):
        return BertConfig.small(
            vocabulary_size=self.tokenizer.vocabulary_size,
            max_sequence_length=position_table(self.options.seq_len),
        )

    def check_config(self, config):
        check_objective_sequence_length(
            self.options.seq_len,
            self.options.objective,
            config.max_sequence_length,
            "the model's max_sequence_length",
        )

    def dataset(
        self,
        corpus,
        batch_size,
        epochs=None,
        input_context=None,
        start=None,
        drop_remainder=True,
    ):
        """Pretraining batches from `corpus`, as `(features, labels)`, from the seekable stream
        (see `lmpipe.datasets.examples.stream`): the features include `stream_position`, int64
        `[B, 3]`, each example's (epoch, window, offset).

        Args:
            corpus: a `TextCorpus`, or a `TokenizedCorpus` written with the same tokenizer.
            batch_size: examples per batch (per replica when given an `input_context`).
            epochs: passes over the corpus; None repeats forever. Every pass draws new pairs
                and new masks.
            input_context: a `tf.distribute.InputContext`; every input pipeline reads the one
                global order and keeps its replicas' share of each global batch.
            start: a `StreamPosition` to start at, such as `StreamPosition.after(batch)` to
                continue after a batch (None: the beginning).
            drop_remainder: drop the last incomplete batch (static batch shapes).

        With the option `length_buckets`, each window's examples come grouped by length and
        each batch is cut to its length bucket: `[B, L]`, `L` one of a few lengths.
        """
        check_positive_int("batch_size", batch_size)
        self._check_corpus(corpus)
        return bert_examples(
            corpus,
            self.tokenizer,
            seq_len=self.options.seq_len,
            objective=self.options.objective,
            masker=self.masker,
            batch_size=batch_size,
            seed=self.options.seed,
            input_context=input_context,
            epochs=epochs,
            short_seq_prob=self.options.short_seq_prob,
            start=start,
            drop_remainder=drop_remainder,
            length_buckets=self.options.length_buckets,
        )

    def check_data(self, corpus, name="data"):
        self._check_corpus(corpus)
        return corpus

    def training_batches(self, corpus, per_replica, input_context, start=None):
        """The endless training batches of one input pipeline, from `start` (a
        `StreamPosition`; None: the beginning) on."""
        return self.dataset(corpus, per_replica, input_context=input_context, start=start)

    # Evaluation -------------------------------------------------------------------------------

    def derived_metrics(self, results):
        """Adds `mlm_perplexity`, exp of the mean masked-LM loss."""
        return {**results, "mlm_perplexity": perplexity(results["mlm_loss"])}

    def baselines(self, corpus, batch_size=None, steps=None):
        """What predicting without context scores on the batches `evaluate` runs (the same
        batches for the same arguments), to read `evaluate`'s numbers against:
        `mlm_accuracy` of always predicting the most frequent target token, `mlm_perplexity`
        of predicting each target with its frequency among these targets (a unigram model
        fit on them, so a little better than any unigram model could do), and, with a pair
        objective, `pair_accuracy` 0.5 (pair labels are drawn balanced)."""
        batch_size = self.default_batch_size if batch_size is None else batch_size
        check_positive_int("batch_size", batch_size)
        check_positive_int("steps", steps, none=True)
        dataset = self.evaluation_batches(self.check_data(corpus), batch_size, steps)
        if steps:
            dataset = dataset.take(steps)
        counts = np.zeros(self.tokenizer.vocabulary_size, np.float64)
        for _, labels in dataset.as_numpy_iterator():
            np.add.at(counts, labels[MASK_IDS][labels[MASK_WEIGHTS] > 0], 1.0)
        frequencies = counts[counts > 0] / counts.sum()
        results = {
            "mlm_accuracy": float(frequencies.max()),
            "mlm_perplexity": float(np.exp(-(frequencies * np.log(frequencies)).sum())),
        }
        if self.options.objective != "mlm":
            results["pair_accuracy"] = 0.5
        return results

    # Model ------------------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, directory, **options):
        """Continue pretraining a Hugging Face BERT or ALBERT checkpoint folder: its tokenizer
        (`vocab.txt`, `spiece.model` or `tokenizer.json`), its configuration, and its weights
        in the model `fit` builds (the encoder, and the pretraining heads where the folder has
        them: see `lmpipe.interop.hf.encoders.load_pretrainer_weights`). `options` as the
        constructor's; a resumed run reads its checkpoint instead. The folder's `model_type`
        must be the class's ("bert" for `BertPretraining`, "albert" for `AlbertPretraining`)."""
        expected = "albert" if issubclass(cls, AlbertPretraining) else "bert"
        found = checkpoint_model_type(directory)
        if found != expected:
            raise ValueError(
                f"{directory} holds a {found!r} checkpoint; {cls.__name__}.from_pretrained "
                f"reads {expected!r} ones."
            )
        if expected == "albert":
            tokenizer = SentencePieceTokenizer.from_pretrained(directory)
            config = albert_config_from_hf(os.path.join(directory, "config.json"))
        else:
            tokenizer = WordPieceTokenizer.from_pretrained(directory)
            config = bert_config_from_hf(os.path.join(directory, "config.json"))
        pipe = cls(tokenizer, config, **options)
        pipe.pretrained = os.fspath(directory)
        return pipe

    def build_model(self):
        """A new `BertPretrainer` (encoder + tied masked-LM head + pair head), with the
        weights of the checkpoint folder `from_pretrained` read, if any."""
        model = BertPretrainer(
            self.config,
            objective=self.options.objective,
            max_predictions=self.options.max_predictions,
        )
        if getattr(self, "pretrained", None):
            load_pretrainer_weights(model, self.pretrained)
        return model

    @property
    def encoder(self):
        """The trained encoder (a functional `keras.Model`), for fine-tuning or serving."""
        return self.require_model().encoder

    def _check_corpus(self, corpus):
        if self.options.objective == "nsp" and len(corpus) < 2:
            raise ValueError(
                f"The corpus has {len(corpus)} document(s); objective 'nsp' needs at least 2 "
                "(NSP draws its random second segment from another document)."
            )

    # Inference --------------------------------------------------------------------------------

    def fill_mask(self, texts, top_k=5, batch_size=64):
        """The masked LM's most likely tokens for each `[MASK]` of each text.

        A text marks what to fill with the tokenizer's mask token, written as it is
        (`[MASK]`); the text between marks is tokenized as usual, packed as one segment
        `[CLS] text [SEP]` and run through the encoder and the masked-LM head (see
        `fill_mask_function`, which the export serves as `serve_fill_mask`). The other
        bracketed tokens (`[PAD]`, `[CLS]`, `[SEP]`, `[MASK]`) are never proposed: pretraining
        never predicts them. `[UNK]` can be.

        Args:
            texts: a list of strings, each with at least one `[MASK]`, at most
                `max_predictions` of them, and at most `seq_len` tokens once packed.
            top_k: predictions per mask, most likely first.
            batch_size: texts run together.

        Returns:
            For each text, for each of its masks in order, `top_k` dicts
            `{"token": str, "score": float}`: the token and its probability under the
            masked-LM head (a softmax over the whole vocabulary).

        Example:

            pipe.fill_mask(["To be, or not to [MASK]: that is the question."], top_k=2)
            # [[[{"token": "be", "score": 0.41}, {"token": "the", "score": 0.07}]]]
        """
        texts = check_texts("texts", texts)
        check_positive_int("batch_size", batch_size)
        function = self.fill_mask_function(top_k)
        mask_token = self.tokenizer.id_to_token(self.tokenizer.mask_id)
        most = self.options.max_predictions
        for index, text in enumerate(texts):
            masks = text.count(mask_token)
            if not masks:
                raise ValueError(f"`texts[{index}]` has no [MASK] to fill: {text!r}.")
            if masks > most:
                raise ValueError(
                    f"`texts[{index}]` has {masks} [MASK]s; the masked-LM head predicts at most "
                    f"max_predictions={most}: {text!r}."
                )
        results = []
        for start in range(0, len(texts), batch_size):
            batch = texts[start : start + batch_size]
            output = {k: v.numpy() for k, v in function(tf.constant(batch, tf.string)).items()}
            for row, text in enumerate(batch):
                if output["token_count"][row] > self.options.seq_len:
                    raise ValueError(
                        f"`texts[{start + row}]` is {output['token_count'][row]} tokens long with "
                        f"[CLS] and [SEP]; the pipeline's seq_len is {self.options.seq_len}: "
                        f"{text!r}."
                    )
                results.append(
                    [
                        [
                            {"token": token.decode("utf-8"), "score": float(score)}
                            for token, score in zip(
                                output["tokens"][row, mask],
                                output["scores"][row, mask],
                                strict=True,
                            )
                        ]
                        for mask in range(output["mask_count"][row])
                    ]
                )
        return results

    def fill_mask_function(self, top_k=5):
        """The `tf.function` that fills masks in graph ops: `text` (string `[N]`, `[MASK]`
        marks as in `fill_mask`) -> `tokens` (string `[N, max_predictions, top_k]`), `scores`
        (float32, the same shape), `mask_count` (int32 `[N]`: the masks filled, the first
        `max_predictions` of the text's) and `token_count` (int32 `[N]`: the tokens of
        `[CLS] text [SEP]`; texts longer than `seq_len` are cut). Rows past a text's masks
        hold "" and 0. Traced once per model and `top_k`."""
        model = self.require_model()
        tokenizer = self.tokenizer
        never = [i for i in tokenizer.special_token_ids if i != tokenizer.unk_id]
        candidates = tokenizer.vocabulary_size - len(never)
        check_positive_int("top_k", top_k)
        if top_k > candidates:
            raise ValueError(
                f"`top_k` must be at most {candidates} (the tokens the vocabulary can propose), "
                f"got top_k={top_k}."
            )
        seq_len, most = self.options.seq_len, self.options.max_predictions

        def make():
            banned = np.zeros(tokenizer.vocabulary_size, bool)
            banned[never] = True
            vocabulary = tf.constant(tokenizer.vocabulary, tf.string)

            @tf.function(
                input_signature=[tf.TensorSpec([None], tf.string, name="text")],
                jit_compile=False,
                autograph=False,
            )
            def fill_mask(text):
                packed = pack_masked_texts(tokenizer, text, seq_len, most)
                # The encoder runs on the texts padded to the longest, not to seq_len.
                features = cut_to_longest({name: packed[name] for name in ENCODER_FEATURES})
                features[MASK_POSITIONS] = packed[MASK_POSITIONS]  # inside the texts
                logits = model(features, training=False)["mlm_logits"]  # [N, P, V]
                probabilities = tf.nn.softmax(tf.cast(logits, tf.float32))
                ranked = tf.where(tf.constant(banned), -1.0, probabilities)
                scores, ids = tf.math.top_k(ranked, k=top_k)  # [N, P, k]
                real = tf.sequence_mask(packed["mask_count"], most)[:, :, None]
                return {
                    "tokens": tf.where(real, tf.gather(vocabulary, ids), ""),
                    "scores": tf.where(real, scores, 0.0),
                    "mask_count": packed["mask_count"],
                    "token_count": packed["token_count"],
                }

            return fill_mask

        return traced_function(model, ("fill_mask", top_k), make)

    # Export -----------------------------------------------------------------------------------

    def serving_model(self):
        """The model to serve: the encoder's outputs and the pair head's probabilities, from
        `token_ids`, `segment_ids`, `padding_mask`."""
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name) for name in ENCODER_FEATURES
        }
        outputs = dict(self.encoder(inputs))
        objective = self.options.objective
        if objective != "mlm":
            logits = self.model.get_layer("pair_head")(outputs["pooled_output"])
            outputs[f"{objective}_probabilities"] = keras.layers.Softmax(dtype="float32")(logits)
        return keras.Model(inputs, outputs, name=f"{self.model.name}_serving")

    def write_export(self, base_dir, version, overwrite, outputs=None, top_k=5):
        """Signatures: `serving_default` (token ids in), the raw-text ones (see README) and
        `serve_fill_mask` (`fill_mask_function(top_k)`). `export` takes `outputs` (the
        outputs of the encoder signatures; None: all) and `top_k`."""
        seq_len = self.options.seq_len
        # Text pairs only where a pair fits with a token of each text, as in training.
        pairs = seq_len >= min_sequence_length(2)
        example = np.array([b"The quick brown [MASK] jumps over the lazy dog."], dtype=object)
        fill_mask = (self.fill_mask_function(top_k), {"text": example}, self.model.variables)
        return self.export_encoder(
            self.serving_model(),
            base_dir,
            version,
            overwrite,
            outputs=outputs,
            pairs=pairs,
            extra_signatures={"serve_fill_mask": fill_mask},
        )


class AlbertPretraining(BertPretraining):
    """ALBERT pretraining: sentence-order prediction and n-gram masking of whole words by
    default (see `AlbertPretrainingOptions`), and an `AlbertConfig` encoder (factorized
    embedding, one shared block).

    Takes the arguments of `BertPretraining`; `config` defaults to `AlbertConfig.tiny()`-like
    sizes scaled to the tokenizer (`AlbertConfig.base()` for real runs).

    Reference: Lan et al., "ALBERT", 2020, sections 3 and 4.1.
    """

    options_class = AlbertPretrainingOptions
    command_line = CommandLine(
        "albert",
        options=_pair_options,
        config_class=AlbertConfig,
        default_preset="tiny",
        published_preset="base",
        build_model=albert,
        positions=position_table,
        tokenizer="sentencepiece",
        uses_mask_token=True,
        pair_objective=True,
        checkpoint_type="albert",
    )

    def default_config(self):
        return AlbertConfig(
            embedding_dim=128,
            hidden_dim=512,
            num_layers=4,
            num_heads=8,
            intermediate_dim=2048,
            vocabulary_size=self.tokenizer.vocabulary_size,
            max_sequence_length=position_table(self.options.seq_len),
        )
