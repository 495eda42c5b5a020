"""Learning a SentencePiece model from text with the `sentencepiece` package: what
`SentencePieceTokenizer.train` runs (the tokenizer itself is `lmpipe.tokenizers.sentence_piece`)."""

import io
import os

import numpy as np
import tensorflow as tf

from lmpipe.arguments import check_choice, check_number, check_positive_int, check_seed
from lmpipe.tokenizers.sentence_piece import prepare
from lmpipe.tokenizers.training_texts import corpus_batches

LAYOUTS = {
    # ALBERT's spiece.model: <pad> <unk> [CLS] [SEP] [MASK] at ids 0-4.
    "albert": {
        "pad_id": 0,
        "unk_id": 1,
        "bos_id": -1,
        "eos_id": -1,
        "control_symbols": ["[CLS]", "[SEP]", "[MASK]"],
    },
    # XLNet's: <unk> <s> </s> <cls> <sep> <pad> <mask> <eod> <eop> at ids 0-8.
    "xlnet": {
        "unk_id": 0,
        "bos_id": 1,
        "eos_id": 2,
        "pad_id": -1,
        "control_symbols": ["<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"],
    },
}

# The fewest pieces a model may have besides the special ones.
MIN_LEARNED_PIECES = 100

# Texts longer than this many bytes are cut for training (SentencePiece skips longer ones).
MAX_TEXT_BYTES = 1 << 14


def minimum_vocab_size(layout):
    """The smallest vocabulary a model of `layout` can be learned with."""
    spec = LAYOUTS[layout]
    special = len(spec["control_symbols"]) + sum(spec[k] >= 0 for k in spec if k.endswith("_id"))
    return special + MIN_LEARNED_PIECES


def learn_model(
    corpus,
    vocab_size,
    model_type,
    lower_case,
    keep_accents,
    layout,
    character_coverage,
    max_sentences,
    batch_size,
    seed,
):
    """The serialized SentencePiece model learned from `corpus`'s texts, prepared as the
    tokenizer prepares them (`lower_case`, `keep_accents`); see `SentencePieceTokenizer.train`
    for the arguments."""
    check_choice("model_type", model_type, ("unigram", "bpe"))
    check_choice("layout", layout, tuple(LAYOUTS))
    check_number("vocab_size", vocab_size, integer=True)
    if vocab_size < minimum_vocab_size(layout):
        raise ValueError(
            f"`vocab_size` must be an integer >= {minimum_vocab_size(layout)} (the {layout} "
            f"layout's special tokens plus at least {MIN_LEARNED_PIECES} pieces), got "
            f"vocab_size={vocab_size!r}."
        )
    check_number("character_coverage", character_coverage, minimum=0.9, maximum=1.0)
    check_positive_int("max_sentences", max_sentences)
    check_positive_int("batch_size", batch_size)
    check_seed(seed)

    texts = _prepared_texts(corpus, lower_case, keep_accents, batch_size)
    if not texts:
        raise ValueError("The corpus is empty: it has no text to learn a SentencePiece model from.")
    if len(texts) > max_sentences:  # a seeded sample, in corpus order
        keep = np.random.default_rng(seed).choice(len(texts), max_sentences, replace=False)
        texts = [texts[i] for i in np.sort(keep)]
    import sentencepiece

    writer = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_writer=writer,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            hard_vocab_limit=False,
            input_sentence_size=0,  # every text handed over (the sample is drawn above)
            max_sentence_length=MAX_TEXT_BYTES,
            normalization_rule_name="nmt_nfkc",
            num_threads=min(os.cpu_count() or 1, 16),
            minloglevel=2,
            **LAYOUTS[layout],
        )
    except RuntimeError as error:
        message = f"SentencePiece could not learn a model from the corpus: {error}"
        raise ValueError(message) from None
    return writer.getvalue()


def _prepared_texts(corpus, lower_case, keep_accents, batch_size):
    """The corpus's non-empty texts as the tokenizer prepares them, as Python strings, cut to
    MAX_TEXT_BYTES."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def prepared(batch):
        return tf.strings.substr(prepare(batch, lower_case, keep_accents), 0, MAX_TEXT_BYTES)

    texts = []
    for batch in corpus_batches(corpus, batch_size):
        for value in prepared(batch).numpy().tolist():
            if value.strip():
                texts.append(value.decode("utf-8", errors="ignore"))
    return texts
