"""Learning GPT-2's byte-level BPE from text with Hugging Face's `tokenizers` library: what
`BytePairTokenizer.train` runs (the tokenizer itself is `lmpipe.tokenizers.byte_pair`)."""

import tensorflow as tf

from lmpipe.arguments import check_positive_int
from lmpipe.tokenizers.byte_pair import END_OF_TEXT, MIN_VOCABULARY
from lmpipe.tokenizers.training_texts import corpus_texts


def learn_files(corpus, directory, vocab_size, min_frequency, add_prefix_space):
    """Learn a vocabulary and merges from `corpus` with GPT-2's byte-level pre-tokenizer and
    write them to `directory` as GPT-2's `vocab.json` and `merges.txt` (see
    `BytePairTokenizer.train` for the arguments)."""
    from tokenizers import Tokenizer as Trainable
    from tokenizers import models, pre_tokenizers, trainers

    check_positive_int("vocab_size", vocab_size)
    check_positive_int("min_frequency", min_frequency)
    if vocab_size < MIN_VOCABULARY:
        raise ValueError(
            f"`vocab_size`={vocab_size} is too small: byte-level BPE needs the end token "
            f"and 256 byte pieces, and at least one merge ({MIN_VOCABULARY})."
        )
    model = Trainable(models.BPE())
    model.pre_tokenizer = pre_tokenizers.ByteLevel(
        add_prefix_space=add_prefix_space, use_regex=True
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    model.train_from_iterator(_training_texts(corpus), trainer)
    model.model.save(directory)


def _training_texts(corpus):
    """The texts to learn merges from: a corpus's documents as their sentences joined by
    spaces (as `tokenize_documents` reads them), else each text of `corpus`."""
    if callable(getattr(corpus, "iter_documents", None)):
        return (" ".join(document) for document in corpus.iter_documents())
    texts = corpus_texts(corpus)
    if isinstance(texts, tf.data.Dataset):
        return (text.decode("utf-8") for text in texts.as_numpy_iterator())
    return texts
