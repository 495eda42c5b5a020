"""`BertPretraining`: the configuration and data of BERT pretraining (masked LM + NSP/SOP)."""

import math

from lmpipe.datasets.bert_examples import PAIR_MODES, bert_examples, check_sequence_length
from lmpipe.datasets.masking import MaskedLMMasker


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
        selection_rate: share of the maskable tokens predicted (0.15).
        mask_token_rate: share of the predictions replaced by `[MASK]` (0.8).
        random_token_rate: share replaced by a random token (0.1); the rest is unchanged.
        whole_word: select whole words rather than pieces.
        max_ngram: mask spans of up to n words, p(n) ~ 1/n (ALBERT uses 3).
        short_seq_prob: probability of a shorter target length (0.1).

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
    ):
        objective = self.default_objective if objective is None else objective
        if objective not in PAIR_MODES:
            raise ValueError(
                f"`objective` must be one of {sorted(PAIR_MODES)}, got objective={objective!r}."
            )
        check_sequence_length(seq_len, objective)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"`seed` must be an int, got seed={seed!r}.")
        if not 0.0 <= short_seq_prob <= 1.0:
            raise ValueError(f"`short_seq_prob` must be in [0, 1], got {short_seq_prob!r}.")
        if max_predictions is None:
            max_predictions = max(1, math.ceil(seq_len * selection_rate))
        self.tokenizer = tokenizer
        self.seq_len = seq_len
        self.objective = objective
        self.seed = seed
        self.short_seq_prob = short_seq_prob
        self.masker = MaskedLMMasker(
            vocabulary_size=tokenizer.vocabulary_size,
            mask_token_id=tokenizer.mask_id,
            special_token_ids=tokenizer.special_token_ids,
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
