"""What the training and inference verbs share: the distribution strategy, the corpus, the
run's tokenizer (kept in `OUT/tokenizer`), saving after `fit`, loading a saved pipeline and
exporting for TF Serving. TensorFlow and the data modules are imported where they are used:
the command imports this module before it checks its paths."""

import inspect
import json
import os

from lmpipe.cli.cluster import finished_training
from lmpipe.cli.corpus_flags import corpus_sources


def start_strategy(name):
    """Create the distribution strategy first: multi-worker collectives must be configured
    before TensorFlow runs anything else in the process."""
    from lmpipe.pipelines import distribution_strategy

    try:
        return distribution_strategy(None if name == "none" else name)
    except ValueError as error:  # a malformed TF_CONFIG
        raise SystemExit(f"error: --strategy {name}: {error}") from None


def read_corpus(pattern, corpus_format, max_line_bytes=None):
    """The corpus a `--corpus` names: a pattern, the `CorpusSource`s of `pretrain --corpus`
    (several: a `CorpusMixture` of them in their weights), or None (Shakespeare)."""
    from lmpipe.datasets import CorpusMixture

    sources = corpus_sources(pattern)
    if len(sources) <= 1:
        return _read_files(sources[0].pattern if sources else None, corpus_format, max_line_bytes)
    corpora = [
        (_read_files(source.pattern, corpus_format, max_line_bytes), source.weight)
        for source in sources
    ]
    return CorpusMixture(corpora, names=[source.pattern for source in sources])


def _read_files(pattern, corpus_format, max_line_bytes):
    from lmpipe.datasets import TextCorpus
    from lmpipe.datasets.corpora.corpus import DEFAULT_MAX_LINE_BYTES

    if pattern is None:
        return TextCorpus.shakespeare()
    if max_line_bytes is None:
        max_line_bytes = DEFAULT_MAX_LINE_BYTES
    try:
        return TextCorpus.from_files(pattern, format=corpus_format, max_line_bytes=max_line_bytes)
    except ValueError as error:
        # The corpus's errors name the file and line; here the parameter is a flag.
        message = str(error).replace("max_line_bytes=", "--max-line-bytes ")
        raise SystemExit(f"error: {message.replace(' to TextCorpus.from_files', '')}") from None


def print_shares(corpus, start, stop, what):
    """Print each source's share of a mixture's examples `start` to `stop` (nothing for one
    corpus), as "wiki.txt 70.1% (weight 70.0%)"."""
    from lmpipe.datasets import CorpusMixture
    from lmpipe.datasets.examples.mixture import describe_shares

    if isinstance(corpus, CorpusMixture) and stop > start:
        print(f"The mixture's sources in {what}:")
        for line in describe_shares(corpus, start, stop).splitlines():
            print(f"  {line}")


TOKENIZER_SOURCE = "source.json"
"""Beside the tokenizer kept in `OUT/tokenizer`: what it (and the run) was made from."""


def _tokenizer_source(arguments):
    """What `OUT/tokenizer` is made from, as the options that say it: a run started again
    in the same `--out` must give the same, or its tokenizer and checkpoints do not fit."""
    return {
        "corpus": _corpus_source(arguments.corpus),
        "format": arguments.format,
        "vocab": os.path.abspath(arguments.vocab) if arguments.vocab else None,
        "vocab_size": None if arguments.vocab else arguments.vocab_size,
        "cased": arguments.cased,
        "tokenizer": arguments.tokenizer,
        "pretrained": os.path.abspath(arguments.pretrained) if arguments.pretrained else None,
    }


def _corpus_source(corpus):
    """What `--corpus` names, for `source.json`: one path (as before mixtures), the paths and
    weights of a mixture, or "shakespeare"."""
    sources = corpus_sources(corpus)
    if not sources:
        return "shakespeare"
    if len(sources) == 1:
        return os.path.abspath(sources[0].pattern)
    return [[os.path.abspath(source.pattern), source.weight] for source in sources]


def check_tokenizer_source(arguments):
    """Refuse a run in an `--out` whose tokenizer was made from other options (another
    corpus, vocabulary size, casing or vocabulary file), saying what differs."""
    path = os.path.join(arguments.out, "tokenizer", TOKENIZER_SOURCE)
    if not os.path.exists(path):
        return
    try:
        with open(path, encoding="utf-8") as file:
            recorded = json.load(file)
    except (OSError, ValueError) as error:
        raise SystemExit(
            f"error: {path} is unreadable ({error}); delete {arguments.out} or use another --out"
        ) from None
    wanted = _tokenizer_source(arguments)
    recorded.setdefault("tokenizer", "wordpiece")  # runs from before SentencePiece
    recorded.setdefault("pretrained", None)  # runs from before --pretrained
    options = {
        "corpus": "--corpus",
        "format": "--format",
        "vocab": "--vocab",
        "vocab_size": "--vocab-size",
        "cased": "--cased",
        "tokenizer": "--tokenizer",
        "pretrained": "--pretrained",
    }
    differences = [
        f"{flag} {recorded.get(name)!r} then, {wanted[name]!r} now"
        for name, flag in options.items()
        if recorded.get(name) != wanted[name]
    ]
    if differences:
        raise SystemExit(
            f"error: {arguments.out} holds a run whose tokenizer was made from other options "
            f"({'; '.join(differences)}); its tokenizer and checkpoints do not fit this "
            "command: rerun with the same options to resume it, or use another --out"
        )


def run_tokenizer(arguments, corpus, chief=True):
    """The tokenizer kept in `--out` by an earlier run of the same command (so a resumed run
    uses the same ids), else the vocabulary file given, else one learned from the corpus;
    kept in `OUT/tokenizer` with what it was made from (`source.json`).

    Only the chief of a multi-worker run reads and writes `OUT/tokenizer` (on storage the
    workers share, the others would read it while the chief writes it); the other workers make
    the same tokenizer from the same options (learning a vocabulary is deterministic).
    """
    from lmpipe.datasets import load_tokenizer

    if not chief:
        return new_tokenizer(arguments, corpus)
    saved = os.path.join(arguments.out, "tokenizer")
    # tokenizer.json is written last: without it, a killed run left the tokenizer unfinished.
    if os.path.exists(os.path.join(saved, "tokenizer.json")):
        if not os.path.exists(os.path.join(saved, TOKENIZER_SOURCE)):
            print(f"note: {saved} does not record what it was made from; using it as it is")
        return load_tokenizer(saved)
    # The record first: a run killed before the tokenizer is saved makes it again from the
    # same options, never leaves a tokenizer without a record.
    os.makedirs(saved, exist_ok=True)
    with open(os.path.join(saved, TOKENIZER_SOURCE), "w", encoding="utf-8") as file:
        json.dump(_tokenizer_source(arguments), file, indent=2)
    tokenizer = new_tokenizer(arguments, corpus)
    tokenizer.save(saved)
    return tokenizer


def new_tokenizer(arguments, corpus):
    """The tokenizer of `--pretrained` or `--vocab`, or one of `--tokenizer`'s kind learned
    from `corpus`."""
    from lmpipe.datasets import BytePairTokenizer, SentencePieceTokenizer, WordPieceTokenizer
    from lmpipe.tokenizers.registry import pretrained_tokenizer

    if arguments.pretrained:
        return pretrained_tokenizer(arguments.pretrained)
    lower_case = not arguments.cased
    sentence_piece = arguments.tokenizer == "sentencepiece"
    byte_pair = arguments.tokenizer == "bpe"
    if arguments.vocab and byte_pair:
        merges = os.path.join(os.path.dirname(arguments.vocab), "merges.txt")
        return BytePairTokenizer.from_files(arguments.vocab, merges)
    if arguments.vocab and sentence_piece:
        return SentencePieceTokenizer.from_model_file(arguments.vocab, lower_case=lower_case)
    if arguments.vocab:
        return WordPieceTokenizer.from_vocab_file(arguments.vocab, lower_case=lower_case)
    if sentence_piece:
        from lmpipe.pipelines.families import PRETRAINING

        layout = PRETRAINING[arguments.model].command_line.sentence_piece_layout
        print(
            f"Learning a {arguments.vocab_size}-piece SentencePiece model (unigram, {layout}'s "
            "special tokens) from the corpus..."
        )
        tokenizer = SentencePieceTokenizer.train(
            corpus, vocab_size=arguments.vocab_size, lower_case=lower_case, layout=layout
        )
    elif byte_pair:
        print(
            f"Learning a {arguments.vocab_size}-token byte-level BPE (GPT-2's, cased) from the "
            "corpus..."
        )
        tokenizer = BytePairTokenizer.train(corpus, vocab_size=arguments.vocab_size)
    else:
        print(f"Learning a {arguments.vocab_size}-token WordPiece vocabulary from the corpus...")
        tokenizer = WordPieceTokenizer.train(
            corpus, vocab_size=arguments.vocab_size, lower_case=lower_case
        )
    if tokenizer.vocabulary_size < arguments.vocab_size:
        print(
            f"note: the vocabulary has {tokenizer.vocabulary_size:,} tokens, not "
            f"{arguments.vocab_size:,}: the corpus has no more pieces worth a token "
            "(the model is sized to the vocabulary learned)"
        )
    return tokenizer


def fit_options(arguments, strategy):
    """`fit`'s keywords from the training flags every training verb has (`--batch-size`,
    `--epochs`, `--strategy`, `--out`, `--learning-rate` where given, `--accumulation-steps`,
    `--data-service`), the checkpoints kept in `OUT/checkpoints`."""
    options = dict(
        batch_size=arguments.batch_size,
        epochs=arguments.epochs,
        strategy=strategy,
        checkpoint_dir=os.path.join(arguments.out, "checkpoints"),
        accumulation_steps=arguments.accumulation_steps,
        data_service=arguments.data_service,
    )
    if arguments.learning_rate is not None:  # else the family's schedule
        options["learning_rate"] = arguments.learning_rate
    return options


def save_after_fit(pipe, strategy, out, detail=""):
    """Save the trained `pipe` to `OUT/pipeline` and say so (with `detail`); return the
    pipeline to evaluate and export, or None on a worker that is done.

    After a multi-worker fit nothing more runs under the strategy: evaluating there is a
    collective every worker would have to join. The chief saves the pipeline (which only
    reads the weights) and goes on with the copy it loads back, outside the strategy; the
    other workers wait for it to finish, then all leave together (`leaving_together`).
    """
    import tensorflow as tf

    from lmpipe.training.distribution import is_chief

    finished_training(strategy)
    directory = os.path.join(out, "pipeline")
    multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    if multi_worker and not is_chief(strategy):
        return None
    pipe.save(directory)
    print(f"Saved the pipeline to {directory}{detail}")
    return load_pipeline(directory) if multi_worker else pipe


def load_pipeline(directory):
    from lmpipe import pipelines

    try:
        return pipelines.load(directory)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None


def saved_pipeline(directory):
    """The saved pipeline in `directory`: itself, or the `pipeline/` of a training command's
    `--out`; None if neither holds a `pipeline.json`."""
    for candidate in (directory, os.path.join(directory, "pipeline")):
        if os.path.exists(os.path.join(candidate, "pipeline.json")):
            return candidate
    return None


def require_saved_pipeline(directory):
    """`saved_pipeline(directory)`, or the command's error if there is none."""
    saved = saved_pipeline(directory)
    if saved is None:
        raise SystemExit(
            f"error: {directory} is neither a saved pipeline (no pipeline.json) nor a run "
            "directory holding one in pipeline/; save one with `lmpipe pretrain` or pipe.save()"
        )
    return saved


def export_options(pipe, outputs, flag):
    """`export`'s keywords for the outputs a flag names (None: the pipeline's default)."""
    if outputs is None:
        return {}
    if "outputs" not in inspect.signature(pipe.write_export).parameters:
        raise SystemExit(
            f"error: {flag} is for the encoders' exports (BERT, ALBERT, XLNet, ELMo, "
            f"classifiers); a {type(pipe).__name__} export serves its own outputs"
        )
    return {"outputs": list(outputs)}


def export_once(pipe, arguments, trained):
    """Export to `--export-dir` (default OUT/serving), unless `--no-export`, or the run had
    finished before this command (a rerun) and its export is there already."""
    if arguments.no_export:
        return
    options = export_options(pipe, arguments.export_outputs, "--export-outputs")
    from lmpipe.serving.versions import model_versions

    export_dir = arguments.export_dir or os.path.join(arguments.out, "serving")
    exported = model_versions(export_dir)
    if not trained and exported:
        latest = os.path.join(export_dir, exported[max(exported)])
        print(f"The run had finished before; its export stands: {latest}")
        return
    print(f"Exported for TensorFlow Serving: {pipe.export(export_dir, **options)}")


def _word_and_tag(pair):
    word, tag = pair
    return word if tag == "O" else f"{word}/{tag}"


def show_tags(text, pairs):
    """The words with entities bracketed and typed, `[Iago]PER`, for chunk tags; else each
    word as `word/TAG` (`O` words plain)."""
    from lmpipe.models.entity_scores import are_chunk_tags, entity_chunks

    del text
    words, tags = [word for word, _ in pairs], [tag for _, tag in pairs]
    if not are_chunk_tags(tags):
        return " ".join(_word_and_tag(pair) for pair in pairs)
    shown = list(words)
    for kind, start, end in entity_chunks(tags):
        shown[start] = "[" + shown[start]
        shown[end - 1] = f"{shown[end - 1]}]{kind}"
    return " ".join(shown)
