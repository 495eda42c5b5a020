"""Learning a WordPiece vocabulary from text, with tensorflow-text's BERT vocabulary learner:
what `WordPieceTokenizer.train` runs (the tokenizer itself is `lmpipe.tokenizers.wordpiece`)."""

import collections

import tensorflow as tf
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib

from lmpipe.arguments import check_bool, check_number, check_positive_int
from lmpipe.tokenizers.bert_words import normalize, split_words
from lmpipe.tokenizers.training_texts import corpus_batches
from lmpipe.tokenizers.wordpiece import MIN_LEARNED_TOKENS, SPECIAL_TOKENS, SUFFIX


def learn_vocabulary(
    corpus,
    vocab_size=8000,
    lower_case=True,
    reserved_tokens=(),
    max_unique_chars=1000,
    max_token_length=50,
    batch_size=1024,
    learn_params=None,
):
    """The tokens of a WordPiece vocabulary learned from `corpus`, in id order: the five
    special tokens, `reserved_tokens`, then what the learner keeps (see
    `WordPieceTokenizer.train` for the arguments and the algorithm)."""
    check_bool("lower_case", lower_case)
    if isinstance(reserved_tokens, str):
        raise ValueError(
            f"`reserved_tokens` must be a list of tokens, got reserved_tokens={reserved_tokens!r}."
        )
    reserved = list(SPECIAL_TOKENS)
    for token in reserved_tokens:
        if not isinstance(token, str) or not token or token != token.strip():
            raise ValueError(
                "`reserved_tokens` must be non-empty strings without surrounding "
                f"whitespace, got {token!r}."
            )
        if token in reserved:
            raise ValueError(f"`reserved_tokens` repeats {token!r}.")
        reserved.append(token)
    minimum = len(reserved) + MIN_LEARNED_TOKENS
    check_number("vocab_size", vocab_size, integer=True)
    if vocab_size < minimum:
        raise ValueError(
            f"`vocab_size` must be an integer >= {minimum} (the {len(reserved)} reserved "
            f"tokens plus at least {MIN_LEARNED_TOKENS} learned ones), got "
            f"vocab_size={vocab_size!r}."
        )
    check_positive_int("max_unique_chars", max_unique_chars)
    check_positive_int("max_token_length", max_token_length)
    check_positive_int("batch_size", batch_size)
    params = {"lower_thresh": 1}
    allowed = {
        "upper_thresh",
        "lower_thresh",
        "num_iterations",
        "max_input_tokens",
        "slack_ratio",
    }
    unknown = set(learn_params or {}) - allowed
    if unknown:
        raise ValueError(
            f"`learn_params` has unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}."
        )
    params.update(learn_params or {})

    counts = _count_words(corpus, lower_case, batch_size)
    if not counts:
        raise ValueError("The corpus is empty: it has no words to learn a vocabulary from.")
    # Sorted by count then text, so that the learner's choices never depend on the order
    # in which the corpus was read.
    word_counts = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    vocabulary = wordpiece_tokenizer_learner_lib.learn(
        word_counts,
        vocab_size=vocab_size,
        reserved_tokens=reserved,
        max_token_length=max_token_length,
        max_unique_chars=max_unique_chars,
        joiner=SUFFIX,
        **params,
    )
    vocabulary = _fit_size(vocabulary, vocab_size, len(reserved))
    if len(vocabulary) == len(reserved):
        longest = max(len(word) for word in counts)
        raise ValueError(
            f"No word piece could be learned from the corpus's {len(counts):,} distinct "
            f"words (the longest has {longest:,} characters): the learner skips words "
            f"longer than max_token_length={max_token_length} and words with a character "
            f"outside the max_unique_chars={max_unique_chars} most frequent ones."
        )
    return vocabulary


def _count_words(corpus, lower_case, batch_size):
    """{word: count} of the normalized words of `corpus`, split as `tokenize` splits them."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def unique_words(batch):
        words = split_words(normalize(batch, lower_case)).flat_values
        unique, _, counts = tf.unique_with_counts(words, out_idx=tf.int64)
        return unique, counts

    counts = collections.Counter()

    def add(batch):
        unique, batch_counts = unique_words(batch)
        for word, count in zip(unique.numpy().tolist(), batch_counts.numpy().tolist(), strict=True):
            counts[word] += count

    for batch in corpus_batches(corpus, batch_size):
        add(batch)
    return {word.decode("utf-8"): count for word, count in counts.items()}


def _fit_size(vocabulary, vocab_size, num_reserved):
    """Trim a learned vocabulary to `vocab_size`, never dropping a single character piece.

    The learner's binary search over frequency thresholds can end above the target; the
    multi-character pieces at the end are the least frequent and go first.
    """
    if len(vocabulary) <= vocab_size:
        return vocabulary

    def is_character(token):
        return len(token[len(SUFFIX) :] if token.startswith(SUFFIX) else token) == 1

    essential = num_reserved + sum(is_character(t) for t in vocabulary[num_reserved:])
    if essential > vocab_size:
        raise ValueError(
            f"`vocab_size`={vocab_size} is too small for this corpus: its alphabet alone needs "
            f"{essential} tokens (the reserved tokens plus each character with and without "
            f"'##'). Use vocab_size >= {essential} or lower `max_unique_chars`."
        )
    excess = len(vocabulary) - vocab_size
    trimmed = []
    for token in reversed(vocabulary[num_reserved:]):
        if excess and not is_character(token):
            excess -= 1
            continue
        trimmed.append(token)
    return vocabulary[:num_reserved] + trimmed[::-1]
