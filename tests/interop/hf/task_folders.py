"""Fine-tuned task models written as Hugging Face folders, the same way every time: what
fixtures/make_task_reference.py hands to transformers, and what test_save_pretrained_tasks.py
writes again to compare lmpipe's probabilities with the ones transformers computed.

Every weight comes from a NumPy generator (standard deviation 0.3, LayerNorm scales 1 + noise),
so the folders depend neither on TensorFlow's random numbers nor on the machine. Two kinds of
case:

- MODEL_CASES: `SequenceClassifier`, `TokenClassifier` and `SpanPredictor` on tiny BERT,
  ALBERT and XLNet encoders (vocabulary 50, hidden 16), written by
  `lmpipe.interop.hf.save_task_pretrained`, run on the fixed ids of `model_inputs`;
- PIPELINE_CASES: pipelines with their model built (not trained) and real tokenizers (a
  WordPiece vocabulary below, the SentencePiece models of the tiny ALBERT and XLNet
  fixtures), written by `pipe.save_pretrained`, run on the texts below from the tokenizers'
  own ids.
"""

import pathlib

import numpy as np

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
FAMILIES = ("bert", "albert", "xlnet")
TASKS = ("sequence", "token", "span")
MODEL_CASES = [f"{family}_{task}" for family in FAMILIES for task in TASKS]
PIPELINE_CASES = ("classifier_bert", "classifier_albert", "classifier_xlnet", "tagger", "answerer")
NUM_CLASSES = {"sequence": 3, "token": 4}
SEQ_LEN = 8
CLASSIFIER_LEN = 32

WORDS = [
    *("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "?", "!"),
    *("othello", "loves", "hates", "iago", "cassio", "who", "is", "the", "moor", "of"),
    *("venice", "a", "play", "by", "shakespeare", "des", "##de", "##mona", "bra", "##ban"),
    *("##tio", "speaks", "to", "what", "does", "say", "she", "he", "in", "cyprus"),
]
GENRES = ("comedy", "history", "tragedy")
TAGS = ("B-PER", "I-PER", "B-LOC", "O")
TEXTS = ["Othello loves Desdemona.", "Iago hates Cassio!", "Who is the Moor of Venice?"]
PAIRS = ["A play by Shakespeare.", "Brabantio speaks.", "Othello."]
SENTENCES = [
    ["Othello", "loves", "Desdemona", "."],
    ["Brabantio", "speaks", "to", "Iago", "in", "Cyprus", "!"],
]
QUESTIONS = ["Who loves Desdemona?", "Where is Othello?"]
CONTEXTS = ["Othello loves Desdemona.", "Othello is in Cyprus, Iago in Venice."]


def randomize(model, seed):
    """Every weight of `model`, in its order, from a NumPy generator: noise of standard
    deviation 0.3, LayerNorm scales 1 + noise."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        value = rng.normal(0.0, 0.3, weight.shape).astype("float32")
        weight.assign(value + 1 if weight.path.endswith("gamma") else value)


def encoder(family, vocabulary_size=50, max_sequence_length=32):
    """A tiny encoder: hidden 16, 2 heads, FFN 32, 2 layers (ALBERT's shared layer run 3 times,
    its embedding 8 wide)."""
    from lmpipe.models import AlbertConfig, BertConfig, XLNetConfig, albert, bert, xlnet

    sizes = dict(vocabulary_size=vocabulary_size, hidden_dim=16, num_heads=2, intermediate_dim=32)
    if family == "xlnet":
        return xlnet(XLNetConfig.tiny(**sizes))
    if family == "albert":
        config = AlbertConfig.tiny(
            **sizes, embedding_dim=8, num_layers=3, max_sequence_length=max_sequence_length
        )
        return albert(config)
    return bert(BertConfig.tiny(**sizes, max_sequence_length=max_sequence_length))


def task_model(case):
    """The randomized task model of a MODEL_CASES `case` ("bert_sequence", ...)."""
    from lmpipe.models import SequenceClassifier, SpanPredictor, TokenClassifier

    family, task = case.split("_")
    network = encoder(family)
    if task == "sequence":
        model = SequenceClassifier(network, NUM_CLASSES[task])
    elif task == "token":
        model = TokenClassifier(network, NUM_CLASSES[task])
    else:
        model = SpanPredictor(network)
    randomize(model, MODEL_CASES.index(case))
    return model


def model_labels(case):
    """The class names written for `case`: genres for classifiers, tags for taggers."""
    task = case.split("_")[1]
    return {"sequence": list(GENRES), "token": list(TAGS), "span": None}[task]


def write_task_model(directory, case):
    """Write `case`'s task model to `directory`; returns the model."""
    from lmpipe.interop.hf import save_task_pretrained

    model = task_model(case)
    save_task_pretrained(directory, model, labels=model_labels(case))
    return model


def model_inputs(family):
    """Two rows of `SEQ_LEN` ids, the second padded (on the right, as lmpipe pads):
    `[CLS] A [SEP] B [SEP]` for BERT and ALBERT, `A <sep> B <sep> <cls>` (segment 2) for
    XLNet."""
    if family == "xlnet":
        return {
            "token_ids": np.array([[7, 8, 9, 4, 10, 11, 4, 3], [20, 21, 4, 30, 4, 3, 0, 0]]),
            "segment_ids": np.array([[0, 0, 0, 0, 1, 1, 1, 2], [0, 0, 0, 1, 1, 2, 0, 0]]),
            "padding_mask": np.array([[1] * 8, [1] * 6 + [0] * 2]),
        }
    return {
        "token_ids": np.array([[2, 7, 8, 9, 3, 10, 11, 3], [2, 20, 21, 3, 30, 3, 0, 0]]),
        "segment_ids": np.array([[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 0, 0]]),
        "padding_mask": np.array([[1] * 8, [1] * 6 + [0] * 2]),
    }


def task_pipeline(case):
    """The pipeline of a PIPELINE_CASES `case`, its model built and randomized."""
    from lmpipe.datasets import SentencePieceTokenizer, WordPieceTokenizer
    from lmpipe.pipelines import SpanAnswerer, TextClassifier, TokenTagger

    if case in ("classifier_albert", "classifier_xlnet"):
        family = case.split("_")[1]
        tokenizer = SentencePieceTokenizer.from_pretrained(FIXTURES / f"{family}_tiny")
        network = encoder(family, tokenizer.vocabulary_size)
        pipe = TextClassifier(tokenizer, network, 3, labels=GENRES, seq_len=CLASSIFIER_LEN)
    else:
        tokenizer = WordPieceTokenizer(WORDS)
        network = encoder("bert", tokenizer.vocabulary_size)
        if case == "classifier_bert":
            pipe = TextClassifier(tokenizer, network, 3, labels=GENRES, seq_len=CLASSIFIER_LEN)
        elif case == "tagger":
            pipe = TokenTagger(tokenizer, network, tags=TAGS, seq_len=12)
        else:
            pipe = SpanAnswerer(tokenizer, network, seq_len=24)
    pipe.model = pipe.build_model()
    randomize(pipe.model, 100 + PIPELINE_CASES.index(case))
    return pipe


def write_pipeline(directory, case):
    """Write `case`'s pipeline with `save_pretrained` to `directory`; returns the pipeline."""
    pipe = task_pipeline(case)
    pipe.save_pretrained(directory)
    return pipe


def folder_digests(directory):
    """The SHA-256 of every file of a written folder, by name: the reference applies to a
    folder written again only if these are equal."""
    import hashlib

    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(pathlib.Path(directory).iterdir())
    }
