"""`BertPretraining` and `AlbertPretraining`: data, model, training, evaluation, export."""

import dataclasses
import math

import keras
import numpy as np
from keras import ops

from lmpipe.arguments import (
    check_bool,
    check_choice,
    check_number,
    check_positive_int,
    check_texts,
)
from lmpipe.contract import ENCODER_FEATURES, PADDING_MASK, SEGMENT_IDS, TOKEN_IDS
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
from lmpipe.models.pretraining import BertPretrainer
from lmpipe.pipelines.pipeline import PipelineOptions, TokenizerPipeline

# The positions of the default model: BERT's, or seq_len if shorter (at least 128).
DEFAULT_MAX_SEQUENCE_LENGTH = 512


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

    def check(self):
        super().check()
        if self.objective is None:
            self.resolve("objective", self.default("objective"))
        check_choice("objective", self.objective, tuple(PAIR_MODES))
        check_sequence_length(self.seq_len, self.objective)
        check_number("short_seq_prob", self.short_seq_prob, minimum=0, maximum=1)
        check_number("selection_rate", self.selection_rate, above=0, maximum=1)
        check_bool("whole_word", self.whole_word)
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


class BertPretraining(TokenizerPipeline):
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
            `whole_word`, `max_ngram`, `short_seq_prob`).

    Example:

        corpus = lmpipe.datasets.TextCorpus.shakespeare()
        tokenizer = lmpipe.datasets.WordPieceTokenizer.train(corpus, vocab_size=8000)
        pipe = BertPretraining(tokenizer, seq_len=128, objective="nsp", seed=1)
        features, labels = next(iter(pipe.dataset(corpus, batch_size=32)))

    Reference: Devlin et al., "BERT", 2019, section 3.1 and appendix A.2.
    """

    options_class = BertPretrainingOptions
    config_classes = (BertConfig, AlbertConfig)

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
        # A position table for seq_len (at least 128), up to BERT's 512: longer sequences
        # need a config that says so, rather than a table as long as any seq_len given.
        return BertConfig.small(
            vocabulary_size=self.tokenizer.vocabulary_size,
            max_sequence_length=min(max(self.options.seq_len, 128), DEFAULT_MAX_SEQUENCE_LENGTH),
        )

    def check_config(self, config):
        check_sequence_length(
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
        check_positive_int("batch_size", batch_size)
        self._check_corpus(corpus, input_context)
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
            shuffle_buffer=shuffle_buffer,
            drop_remainder=drop_remainder,
        )

    def check_data(self, corpus, name="data"):
        self._check_corpus(corpus, None)
        return corpus

    def training_batches(self, corpus, per_replica, input_context):
        self._check_corpus(corpus, input_context)
        return self.dataset(corpus, per_replica, input_context=input_context)

    # Model ------------------------------------------------------------------------------------

    def build_model(self):
        """A new `BertPretrainer` (encoder + tied masked-LM head + pair head)."""
        return BertPretrainer(
            self.config,
            objective=self.options.objective,
            max_predictions=self.options.max_predictions,
        )

    @property
    def encoder(self):
        """The trained encoder (a functional `keras.Model`), for fine-tuning or serving."""
        return self.require_model().encoder

    def _check_corpus(self, corpus, input_context):
        num_pipelines = 1 if input_context is None else input_context.num_input_pipelines
        objective = self.options.objective
        needed = 2 * num_pipelines if objective == "nsp" else num_pipelines
        if len(corpus) < needed:
            raise ValueError(
                f"The corpus has {len(corpus)} document(s); objective {objective!r} with "
                f"{num_pipelines} input pipeline(s) needs at least {needed}"
                + (
                    " (NSP draws its random second segment from another document)."
                    if objective == "nsp"
                    else "."
                )
            )

    # Inference --------------------------------------------------------------------------------

    def fill_mask(self, texts, top_k=5, batch_size=64):
        """The masked LM's most likely tokens for each `[MASK]` of each text.

        A text marks what to fill with the tokenizer's mask token, written as it is
        (`[MASK]`); the text between marks is tokenized as usual, packed as one segment
        `[CLS] text [SEP]` and run through the encoder and the masked-LM head. The other
        bracketed tokens (`[PAD]`, `[CLS]`, `[SEP]`, `[MASK]`) are never proposed: pretraining
        never predicts them. `[UNK]` can be.

        Args:
            texts: a list of strings, each with at least one `[MASK]` and at most `seq_len`
                tokens once packed.
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
        model = self.require_model()
        texts = check_texts("texts", texts)
        check_positive_int("top_k", top_k)
        check_positive_int("batch_size", batch_size)
        tokenizer = self.tokenizer
        never = [i for i in tokenizer.special_token_ids if i != tokenizer.unk_id]
        candidates = tokenizer.vocabulary_size - len(never)
        if top_k > candidates:
            raise ValueError(
                f"`top_k` must be at most {candidates} (the tokens the vocabulary can propose), "
                f"got top_k={top_k}."
            )
        examples = [self._masked_example(text, f"texts[{i}]") for i, text in enumerate(texts)]
        results = []
        for start in range(0, len(examples), batch_size):
            batch = examples[start : start + batch_size]
            features = _pack_masked(batch, tokenizer.pad_id)
            logits = model(features, training=False)["mlm_logits"]  # [N, P, V]
            probabilities = ops.convert_to_numpy(ops.softmax(ops.cast(logits, "float32")))
            ranked = probabilities.copy()
            ranked[..., never] = -1.0
            best = np.argsort(-ranked, axis=-1, kind="stable")[..., :top_k]  # [N, P, k]
            for row, (_, positions) in enumerate(batch):
                results.append(
                    [
                        [
                            {
                                "token": tokenizer.id_to_token(int(token)),
                                "score": float(probabilities[row, mask, token]),
                            }
                            for token in best[row, mask]
                        ]
                        for mask in range(len(positions))
                    ]
                )
        return results

    def _masked_example(self, text, name):
        """`(token_ids, mask_positions)` of `[CLS] text [SEP]`, `[MASK]` marks as mask ids."""
        tokenizer = self.tokenizer
        parts = text.split(tokenizer.id_to_token(tokenizer.mask_id))
        if len(parts) == 1:
            raise ValueError(f"`{name}` has no [MASK] to fill: {text!r}.")
        pieces = tokenizer.tokenize(parts).to_list()
        ids, positions = [tokenizer.cls_id], []
        for index, part in enumerate(pieces):
            if index:
                positions.append(len(ids))
                ids.append(tokenizer.mask_id)
            ids.extend(part)
        ids.append(tokenizer.sep_id)
        if len(ids) > self.options.seq_len:
            raise ValueError(
                f"`{name}` is {len(ids)} tokens long with [CLS] and [SEP]; the pipeline's "
                f"seq_len is {self.options.seq_len}: {text!r}."
            )
        return ids, positions

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

    def write_export(self, base_dir, version, overwrite):
        """Signatures: `serving_default` (token ids in) and raw-text ones (see README)."""
        seq_len = self.options.seq_len
        # Text pairs only where a pair fits with a token of each text, as in training.
        pairs = seq_len >= min_sequence_length(2)
        return self.export_encoder(self.serving_model(), base_dir, version, overwrite, pairs=pairs)


class AlbertPretraining(BertPretraining):
    """ALBERT pretraining: sentence-order prediction and n-gram masking of whole words by
    default (see `AlbertPretrainingOptions`), and an `AlbertConfig` encoder (factorized
    embedding, one shared block).

    Takes the arguments of `BertPretraining`; `config` defaults to `AlbertConfig.tiny()`-like
    sizes scaled to the tokenizer (`AlbertConfig.base()` for real runs).

    Reference: Lan et al., "ALBERT", 2020, sections 3 and 4.1.
    """

    options_class = AlbertPretrainingOptions

    def default_config(self):
        return AlbertConfig(
            embedding_dim=128,
            hidden_dim=512,
            num_layers=4,
            num_heads=8,
            intermediate_dim=2048,
            vocabulary_size=self.tokenizer.vocabulary_size,
            max_sequence_length=min(max(self.options.seq_len, 128), DEFAULT_MAX_SEQUENCE_LENGTH),
        )


def _pack_masked(examples, pad_id):
    """The masked-LM features of `(token_ids, mask_positions)` examples, padded to the
    longest (mask positions with position 0, whose predictions are not read)."""
    width = max(len(ids) for ids, _ in examples)
    predictions = max(len(positions) for _, positions in examples)
    token_ids = np.full((len(examples), width), pad_id, np.int32)
    padding_mask = np.zeros((len(examples), width), np.int32)
    mask_positions = np.zeros((len(examples), predictions), np.int32)
    for row, (ids, positions) in enumerate(examples):
        token_ids[row, : len(ids)] = ids
        padding_mask[row, : len(ids)] = 1
        mask_positions[row, : len(positions)] = positions
    return {
        TOKEN_IDS: token_ids,
        SEGMENT_IDS: np.zeros_like(token_ids),
        PADDING_MASK: padding_mask,
        "mask_positions": mask_positions,
    }
