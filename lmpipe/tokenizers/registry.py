"""Which tokenizer class reads a folder, and which learner trains each class: the one module
of `lmpipe.tokenizers` that knows every tokenizer.

`load_tokenizer` reads a folder that a tokenizer's `save` wrote, by the class its
tokenizer.json names; `pretrained_tokenizer` reads a Hugging Face checkpoint folder, by the
files it holds. Importing this module (which `lmpipe.tokenizers` does first) gives each
class's `train` its learner: the learners import the classes, never the reverse.
"""

import os

from lmpipe.tokenizers.byte_pair import MERGES_FILE, BytePairTokenizer
from lmpipe.tokenizers.byte_pair import VOCABULARY_FILE as BYTE_PAIR_VOCABULARY
from lmpipe.tokenizers.byte_pair_trainer import learn_files
from lmpipe.tokenizers.sentence_piece import MODEL_FILE, SentencePieceTokenizer
from lmpipe.tokenizers.sentence_piece_trainer import learn_model
from lmpipe.tokenizers.tokenizer import CONFIG_FILE, read_config, register_learner
from lmpipe.tokenizers.tokenizer_json import has_tokenizer_file, model_type
from lmpipe.tokenizers.wordpiece import VOCABULARY_FILE as WORDPIECE_VOCABULARY
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
from lmpipe.tokenizers.wordpiece_trainer import learn_vocabulary

LEARNERS = {
    WordPieceTokenizer: learn_vocabulary,
    SentencePieceTokenizer: learn_model,
    BytePairTokenizer: learn_files,
}
"""Each tokenizer class and the function its `train` runs."""

for _tokenizer_class, _learn in LEARNERS.items():
    register_learner(_tokenizer_class, _learn)

TOKENIZER_JSON_MODELS = {
    "BPE": BytePairTokenizer,
    "Unigram": SentencePieceTokenizer,
    "WordPiece": WordPieceTokenizer,
}
"""The class that reads a transformers 5 `tokenizer.json`, by its model's type."""


def load_tokenizer(directory):
    """The tokenizer that `save` wrote to `directory`, of whichever class wrote it."""
    classes = {cls.FORMAT: cls for cls in LEARNERS}
    kind = read_config(directory).get("format")
    if kind not in classes:
        path = os.path.join(os.fspath(directory), CONFIG_FILE)
        raise ValueError(f"{path} has format {kind!r}; lmpipe reads {', '.join(sorted(classes))}.")
    return classes[kind].load(directory)


def pretrained_tokenizer(directory):
    """The tokenizer of a Hugging Face checkpoint folder, by the files it holds: `vocab.json`
    and `merges.txt` (GPT-2's byte-level BPE), `spiece.model` (ALBERT, XLNet) or `vocab.txt`
    (BERT's WordPiece), each read by its class's `from_pretrained`; else the `tokenizer.json`
    that transformers 5 writes instead, by its model (BPE, Unigram or WordPiece)."""
    folder = os.fspath(directory)
    if os.path.isfile(os.path.join(folder, BYTE_PAIR_VOCABULARY)):
        return BytePairTokenizer.from_pretrained(folder)
    if os.path.isfile(os.path.join(folder, MODEL_FILE)):
        return SentencePieceTokenizer.from_pretrained(folder)
    if os.path.isfile(os.path.join(folder, WORDPIECE_VOCABULARY)):
        return WordPieceTokenizer.from_pretrained(folder)
    if has_tokenizer_file(folder):
        return TOKENIZER_JSON_MODELS[model_type(folder)].from_pretrained(folder)
    raise ValueError(
        f"No tokenizer in {folder}: a Hugging Face folder needs {BYTE_PAIR_VOCABULARY} and "
        f"{MERGES_FILE} (GPT-2), {MODEL_FILE} (ALBERT, XLNet), {WORDPIECE_VOCABULARY} (BERT) or "
        "tokenizer.json."
    )
