"""`lmpipe pretrain MODEL`: pretrain BERT, ALBERT, XLNet, GPT, ELMo or word2vec on a corpus,
then save, evaluate and export."""

import dataclasses
import os

from lmpipe.cli import flags, runs
from lmpipe.cli.corpus_flags import corpus_source, is_mixture
from lmpipe.cli.held_out import held_out_documents, validation_documents

FOLDER_GIVES = ("--tokenizer", "--vocab", "--vocab-size", "--cased", "--preset")
"""The flags a `--pretrained` folder answers (its tokenizer and configuration)."""


WORD2VEC_FLAGS = (
    "--method",
    "--vector-size",
    "--window",
    "--min-count",
    "--negative",
    "--update",
)


NOT_FOR_WORD2VEC = (
    "--steps",
    "--held-out",
    "--tokenizer",
    "--vocab",
    "--vocab-size",
    "--pretrained",
    "--preset",
    "--objective",
    "--length-buckets",
    "--no-document-attention",
    "--reuse-len",
    "--mem-len",
    "--seq-len",
    "--checkpoint-every",
    "--mixed-precision",
    "--xla",
    "--accumulation-steps",
    "--data-service",
)


FIRST_EXAMPLES = 10_000
"""The examples a mixture's realized shares are printed over before training."""

# What each of `BertPretraining.baselines`' figures predicts with.
BASELINE_NAMES = {
    "mlm_accuracy": "the most frequent token",
    "mlm_perplexity": "a unigram model",
    "pair_accuracy": "chance",
}

HELP = "pretrain BERT, ALBERT, XLNet, GPT or ELMo, then save and export"
DESCRIPTION = (
    "Pretrain on --corpus (default: the bundled Shakespeare plays). Running the "
    "same command again after an interruption resumes from the last checkpoint."
)


def add_parser(commands, common):
    """Add `lmpipe pretrain` to the `commands` sub-parsers."""
    pretrain = flags.add_verb(commands, "pretrain", common, help=HELP, description=DESCRIPTION)
    pretrain.add_argument("model", choices=[*flags.MODEL_NAMES, "word2vec"])
    pretrain.add_argument(
        "--corpus",
        default=None,
        action="append",
        type=corpus_source,
        metavar="PATTERN[:WEIGHT]",
        help="file glob (default: Shakespeare); repeat it with a weight each to mix corpora "
        "in those shares of the examples: --corpus wiki.txt:0.7 --corpus 'books/*.txt:0.3'",
    )
    pretrain.add_argument(
        "--format",
        default="auto",
        choices=["auto", "bert", "prose", "jsonl"],
        help="corpus format: bert (a sentence a line, documents split by blank lines), prose "
        "(paragraphs split into sentences), jsonl (a 'text' field), or auto (jsonl for .jsonl "
        "and .json files, bert for others)",
    )
    pretrain.add_argument(
        "--max-line-bytes",
        type=int,
        default=None,
        help="longest corpus line accepted, in bytes (default 10 MiB)",
    )
    pretrain.add_argument(
        "--tokenizer",
        choices=("wordpiece", "sentencepiece", "bpe"),
        default=None,
        help="the tokenizer to learn or read (default: as in the papers, sentencepiece for "
        "albert and xlnet, GPT-2's byte-level bpe for gpt; wordpiece for bert and elmo)",
    )
    pretrain.add_argument(
        "--vocab",
        default=None,
        help="a vocabulary instead of learning one: a BERT vocab.txt (WordPiece), a "
        "SentencePiece .model (ALBERT's or XLNet's spiece.model) or GPT-2's vocab.json (with "
        "its merges.txt beside it)",
    )
    pretrain.add_argument(
        "--pretrained",
        default=None,
        metavar="FOLDER",
        help="continue pretraining a Hugging Face checkpoint folder (bert, albert, xlnet, "
        "gpt2): its tokenizer, configuration and weights (so no --tokenizer, --vocab, "
        "--vocab-size, --cased or --preset)",
    )
    pretrain.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help="the vocabulary to learn, in tokens (default: 8000, or the recipe's)",
    )
    pretrain.add_argument(
        "--cased",
        action="store_true",
        help="keep case (and accents, with WordPiece); byte-level BPE always keeps them",
    )
    pretrain.add_argument(
        "--preset",
        default=None,
        help="model size: bert tiny|mini|small|base|large (default mini, or the recipe's); "
        "albert tiny|base|large|xlarge|xxlarge (default tiny); xlnet tiny|base (default tiny); "
        "gpt tiny|small|medium (default tiny); elmo tiny|small|medium|original (default tiny)",
    )
    pretrain.add_argument(
        "--recipe",
        default=None,
        help="bert: fast, the defaults for small compute (BERT-tiny, a 2,000-token "
        "vocabulary, no dropout, learning rate 1e-3; the flags given still win; see "
        "docs/pretraining.md); "
        "default: the paper's (dropout 0.1, learning rate 5e-4, 8,000 tokens)",
    )
    pretrain.add_argument(
        "--objective",
        default=None,
        choices=["nsp", "sop", "mlm"],
        help="default: nsp for bert, sop for albert",
    )
    pretrain.add_argument(
        "--length-buckets",
        action="store_true",
        default=None,
        help="bert, albert: batch examples of similar length together, each batch cut to "
        "16, 24, 32, 48, 64, 96, 128, ... tokens (fewer padded positions: about 8%% fewer "
        "at seq-len 128 on Shakespeare; see docs/stream.md); default: every batch seq-len",
    )
    pretrain.add_argument(
        "--no-document-attention",
        dest="document_attention",
        action="store_false",
        default=None,
        help="gpt: let a token read the other documents packed in its row (GPT-2's "
        "training); default: each document attends to itself only",
    )
    pretrain.add_argument(
        "--reuse-len",
        type=int,
        default=None,
        help="xlnet: tokens each example hands on as memory (default seq-len / 2; 0 = no memory)",
    )
    pretrain.add_argument(
        "--mem-len", type=int, default=None, help="xlnet: cached states (default reuse-len)"
    )
    pretrain.add_argument(
        "--steps", type=int, default=None, help="training steps in all (default: 200)"
    )
    pretrain.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="epochs the steps divide into, the held-out documents evaluated after each "
        "(default: 2); word2vec: passes over the corpus (default: 5)",
    )
    pretrain.add_argument(
        "--held-out",
        type=float,
        default=0.05,
        help="the share of the corpus's documents (or, 1 and up, their number) held out for "
        "validation and the final evaluation; 0: none",
    )
    for flag, kind, text in (
        ("--method", str, "skipgram or cbow (default: skipgram)"),
        ("--vector-size", int, "dimension of the vectors (default: 100)"),
        ("--window", int, "largest distance of a context word (default: 5)"),
        ("--min-count", int, "rarer words are left out (default: 5)"),
        ("--negative", int, "noise words per example (default: 5)"),
        (
            "--update",
            str,
            "auto, sequential (example by example, lmpipe's compiled kernel) or batched "
            "(TensorFlow ops, any strategy) (default: auto)",
        ),
    ):
        pretrain.add_argument(flag, type=kind, default=None, help=f"word2vec: {text}")
    pretrain.add_argument(
        "--checkpoint-every", type=int, default=50, help="steps between checkpoints"
    )
    pretrain.add_argument(
        "--mixed-precision",
        default=None,
        choices=["mixed_bfloat16", "mixed_float16", "auto"],
        help="compute in bfloat16 or float16, keep float32 weights; auto: bfloat16 where the "
        "hardware has it (Ampere+ GPUs, CPUs with AVX512_BF16 or AMX), else float32 "
        "(default: float32)",
    )
    pretrain.add_argument(
        "--xla",
        nargs="?",
        const="on",
        default="off",
        choices=["on", "off", "auto"],
        help="XLA-compile the train step (--xla alone: on); auto: on GPUs, not on CPUs, where "
        "it is no faster (default: off)",
    )
    flags.add_training_options(
        pretrain,
        batch_default=None,
        learning_rate=None,
        batch_help="global batch size (default: 32; word2vec: the method's)",
        learning_rate_help="peak learning rate (default: 5e-4; word2vec: alpha, 0.025)",
    )
    pretrain.set_defaults(run=run)


def resolve_flags(arguments, argv):
    """Check which flags go with `arguments.model` and fill the defaults that depend on it,
    as the family declares them (`lmpipe.pipelines.families`)."""
    from lmpipe.pipelines.families import PRETRAINING, families_where

    given = {argument.split("=", 1)[0] for argument in argv if argument.startswith("--")}
    model = arguments.model
    family = PRETRAINING[model].command_line
    if family.config_class is None and is_mixture(arguments.corpus):
        raise SystemExit(
            "error: --corpus is given several times; word2vec reads one corpus (mixtures are "
            "for the pretraining streams)"
        )
    if family.config_class is None:  # word2vec
        wrong = [flag for flag in NOT_FOR_WORD2VEC if flag in given]
        if wrong:
            raise SystemExit(
                f"error: {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} not for "
                "word2vec: it learns its own vocabulary of words, trains whole passes over the "
                "corpus (--epochs) and has no sequences or model presets"
            )
        arguments.epochs = 5 if arguments.epochs is None else arguments.epochs
        if "--recipe" in given:
            raise SystemExit("error: --recipe is not for word2vec")
        return
    wrong = [flag for flag in WORD2VEC_FLAGS if flag in given]
    if wrong:
        raise SystemExit(
            f"error: {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} for word2vec"
        )
    recipe = _recipe(arguments, family, given)
    defaults = {"steps": 200, "epochs": 2, "batch_size": 32}
    defaults.update(learning_rate=5e-4, vocab_size=8000)
    if recipe is not None:
        defaults.update(learning_rate=recipe.learning_rate, vocab_size=recipe.vocab_size)
    for name, value in defaults.items():
        if getattr(arguments, name) is None:
            setattr(arguments, name, value)
    if arguments.pretrained:
        if family.checkpoint_type is None:
            continued = families_where(lambda declared: declared.checkpoint_type)
            raise SystemExit(
                f"error: --pretrained continues {', '.join(continued)} checkpoints, not {model}"
            )
        wrong = [flag for flag in FOLDER_GIVES if flag in given]
        if wrong:
            raise SystemExit(
                f"error: {', '.join(wrong)} cannot go with --pretrained: the folder gives the "
                "tokenizer and the model's configuration"
            )
    if arguments.preset is None:
        arguments.preset = (recipe and recipe.preset) or family.default_preset
    kind = family.tokenizer
    if arguments.vocab:  # the file says which
        kind = "wordpiece"
        if arguments.vocab.endswith(".model"):
            kind = "sentencepiece"
        elif arguments.vocab.endswith(".json"):
            kind = "bpe"
        if arguments.tokenizer not in (None, kind):
            raise SystemExit(
                f"error: --vocab {arguments.vocab} is a {kind} vocabulary (a .model file is "
                f"SentencePiece, a .json GPT-2's BPE, any other a WordPiece vocab.txt), not "
                f"--tokenizer {arguments.tokenizer}"
            )
    arguments.tokenizer = arguments.tokenizer or kind
    if arguments.tokenizer == "bpe" and family.uses_mask_token:
        without = families_where(
            lambda declared: declared.config_class and not declared.uses_mask_token
        )
        raise SystemExit(
            f"error: --tokenizer bpe has no [CLS] nor [MASK] token: it is for "
            f"{' and '.join(without)}, not {model}"
        )
    presets = family.config_class.preset_names()
    if arguments.preset not in presets:
        raise SystemExit(f"error: --preset must be one of {', '.join(presets)}")
    if not family.pair_objective and arguments.objective is not None:
        pairs = families_where(lambda declared: declared.pair_objective)
        raise SystemExit(
            f"error: --objective is for {' and '.join(pairs)}; {model} is {family.objective}"
        )
    if not family.pair_objective and arguments.length_buckets is not None:
        pairs = families_where(lambda declared: declared.pair_objective)
        raise SystemExit(f"error: --length-buckets is for {' and '.join(pairs)}")
    if not family.document_attention and arguments.document_attention is not None:
        packed = families_where(lambda declared: declared.document_attention)
        raise SystemExit(f"error: --no-document-attention is for {' and '.join(packed)}")
    if not family.memory and (arguments.reuse_len, arguments.mem_len) != (None, None):
        memory = families_where(lambda declared: declared.memory)
        raise SystemExit(f"error: --reuse-len and --mem-len are for {' and '.join(memory)}")


def _recipe(arguments, family, given):
    """The `Recipe` of `--recipe` for the family (None without the flag), refused where the
    family has no such recipe or `--pretrained` gives the model."""
    if arguments.recipe is None:
        return None
    recipes = family.recipes
    if arguments.recipe not in recipes:
        from lmpipe.pipelines.families import PRETRAINING

        offered = [
            f"{name} ({', '.join(other.command_line.recipes)})"
            for name, other in PRETRAINING.items()
            if other.command_line.recipes
        ]
        raise SystemExit(
            f"error: --recipe {arguments.recipe} is not a recipe of {arguments.model}; "
            f"recipes: {'; '.join(offered) or 'none'}"
        )
    if "--pretrained" in given:
        raise SystemExit(
            "error: --recipe cannot go with --pretrained: the checkpoint gives the model"
        )
    return recipes[arguments.recipe]


def run(arguments):
    strategy = runs.start_strategy(arguments.strategy)
    if _family(arguments).command_line.config_class is None:
        return _run_word2vec(arguments, strategy)
    pretrained = check_arguments(arguments, strategy)
    from lmpipe.training.distribution import is_chief

    whole = runs.read_corpus(arguments.corpus, arguments.format, arguments.max_line_bytes)
    print(whole.describe() if hasattr(whole, "describe") else whole)
    runs.print_shares(whole, 0, FIRST_EXAMPLES, f"the first {FIRST_EXAMPLES:,} examples")
    corpus, validation = held_out_documents(whole, arguments)
    tokenizer = runs.run_tokenizer(arguments, corpus, chief=is_chief(strategy))
    pipe = pretrained or _pipeline(arguments, tokenizer)
    corpus, validation = validation_documents(pipe, whole, corpus, validation, arguments)
    history = pipe.fit(
        corpus,
        steps_per_epoch=arguments.steps // arguments.epochs,
        validation=validation,
        checkpoint_every=arguments.checkpoint_every,
        mixed_precision=arguments.mixed_precision,
        jit_compile={"on": True, "off": False, "auto": "auto"}[arguments.xla],
        **runs.fit_options(arguments, strategy),
    )
    pipe = runs.save_after_fit(pipe, strategy, arguments.out)
    if pipe is None:
        return 0
    # With memory, XLNet evaluates batches of its training streams per replica.
    batch_size = getattr(pipe, "batch_size", None) or arguments.batch_size
    # The held-out documents, one pass; without them 10 batches of the training corpus.
    evaluated, steps = (validation, None) if validation is not None else (corpus, 10)
    what = f"the {len(validation):,} held-out documents" if steps is None else "10 batches"
    metrics = pipe.evaluate(evaluated, batch_size=batch_size, steps=steps, verbose=0)
    print(
        f"Evaluation on {what}: "
        + ", ".join(f"{name} {value:.4f}" for name, value in sorted(metrics.items()))
    )
    if hasattr(pipe, "baselines"):
        baselines = pipe.baselines(evaluated, batch_size=batch_size, steps=steps)
        print(f"Without context, on the same batches: {describe_baselines(baselines)}")
        fill_mask_examples(pipe, evaluated)
    runs.export_once(pipe, arguments, trained=bool(history.history))
    return 0


def describe_baselines(baselines):
    """`BertPretraining.baselines`' figures, each followed by what it predicts with.

    >>> describe_baselines({"mlm_perplexity": 354.2, "mlm_accuracy": 0.0596})
    'mlm_accuracy 0.0596, mlm_perplexity 354.2000 (the most frequent token; a unigram model)'
    """
    names = sorted(baselines)
    figures = ", ".join(f"{name} {baselines[name]:.4f}" for name in names)
    return f"{figures} ({'; '.join(BASELINE_NAMES[name] for name in names)})"


def check_arguments(arguments, strategy):
    """Check every option that can be checked without the corpus, before any work: steps
    and epochs, the training options, the batch size against the replicas, and the pipeline's
    own options (sequence length against the preset's positions, ...), the latter by making
    the pipeline with a stand-in vocabulary of the special tokens. Returns the pipeline of
    `--pretrained` (made from its folder), None without it."""
    from lmpipe.tokenizers.byte_pair import MIN_VOCABULARY as MIN_BYTE_PAIR_VOCABULARY
    from lmpipe.tokenizers.sentence_piece_trainer import minimum_vocab_size
    from lmpipe.tokenizers.wordpiece import MIN_LEARNED_TOKENS, SPECIAL_TOKENS, WordPieceTokenizer
    from lmpipe.training.distribution import per_replica_batch_size
    from lmpipe.training.options import check_training_values

    flags.check_steps(arguments.steps, arguments.epochs)
    flags.check_positive(arguments, "accumulation_steps")
    minimum = len(SPECIAL_TOKENS) + MIN_LEARNED_TOKENS
    if arguments.tokenizer == "sentencepiece":
        minimum = minimum_vocab_size(_family(arguments).command_line.sentence_piece_layout)
    if arguments.tokenizer == "bpe":
        minimum = MIN_BYTE_PAIR_VOCABULARY
    if arguments.vocab is None and arguments.vocab_size < minimum:
        raise SystemExit(
            f"error: --vocab-size must be at least {minimum}, got {arguments.vocab_size}"
        )
    try:
        check_training_values(
            learning_rate=arguments.learning_rate,
            checkpoint_every=arguments.checkpoint_every,
            mixed_precision=arguments.mixed_precision,
            data_service=arguments.data_service,
        )
        per_replica_batch_size(strategy, arguments.batch_size)
        pretrained = _pretrained_pipeline(arguments) if arguments.pretrained else None
        pipe = pretrained or _pipeline(arguments, WordPieceTokenizer([*SPECIAL_TOKENS, "a"]))
    except ValueError as error:
        raise SystemExit(f"error: {flags.as_flags(str(error))}") from None
    mem_len = getattr(pipe.options, "mem_len", 0)
    if mem_len and arguments.accumulation_steps > 1:
        raise SystemExit(
            f"error: --accumulation-steps {arguments.accumulation_steps} with XLNet's memory "
            f"(--mem-len {mem_len}): the memory keeps one row per stream of a batch; give "
            "--mem-len 0 or --accumulation-steps 1"
        )
    if mem_len and arguments.data_service is not None:
        raise SystemExit(
            f"error: --data-service with XLNet's memory (--mem-len {mem_len}): the memory needs "
            "each stream's batches in order, which the service's workers do not keep; give "
            "--mem-len 0 or train without --data-service"
        )
    runs.check_tokenizer_source(arguments)
    return pretrained


def _family(arguments):
    """The pipeline class of `lmpipe pretrain MODEL`."""
    from lmpipe.pipelines.families import PRETRAINING

    return PRETRAINING[arguments.model]


def _pretrained_pipeline(arguments):
    """The pipeline of `--pretrained`: a Hugging Face folder's tokenizer, configuration and
    weights, with the command's options (a ValueError naming what does not fit)."""
    from lmpipe.interop.hf.checkpoint import checkpoint_model_type

    family = _family(arguments)
    found = checkpoint_model_type(arguments.pretrained)
    if found != family.command_line.checkpoint_type:
        raise ValueError(
            f"`pretrained` {arguments.pretrained} holds a {found!r} checkpoint, not "
            f"{arguments.model}"
        )
    options = family.command_line.options(arguments)
    return family.from_pretrained(arguments.pretrained, **options)


def _pipeline(arguments, tokenizer):
    """The pretraining pipeline the options describe, for `tokenizer`."""
    family = _family(arguments)
    declared = family.command_line
    config = declared.preset_config(arguments.preset, tokenizer.vocabulary_size, arguments.seq_len)
    if arguments.recipe is not None:
        config = dataclasses.replace(config, **declared.recipes[arguments.recipe].config)
    return family(tokenizer, config=config, **declared.options(arguments))


def fill_mask_examples(pipe, corpus, examples=3):
    """Print what the model puts in place of one word in a few sentences of `corpus` (that
    fit in `seq_len`): the longest word of the sentence that is a single token."""
    tokenizer, texts, answers = pipe.tokenizer, [], []
    for document in corpus.iter_documents():
        sentence = document[len(document) // 2]
        words = sentence.split()
        if len(tokenizer.tokenize(sentence).numpy()) + 2 > pipe.options.seq_len:
            continue
        pieces = tokenizer.tokenize([word.strip(".,;:!?'\"") for word in words]).to_list()
        single = [i for i, word_pieces in enumerate(pieces) if len(word_pieces) == 1]
        if not single or len(words) < 4:
            continue
        chosen = max(single, key=lambda i: len(words[i].strip(".,;:!?'\"")))
        word = words[chosen].strip(".,;:!?'\"")
        masked = words[chosen].replace(word, "[MASK]", 1)
        texts.append(" ".join(words[:chosen] + [masked] + words[chosen + 1 :]))
        answers.append(tokenizer.id_to_token(pieces[chosen][0]))
        if len(texts) == examples:
            break
    if not texts:
        return
    filled = pipe.fill_mask(texts, top_k=3)
    for text, answer, (predictions,) in zip(texts, answers, filled, strict=True):
        best = ", ".join(f"{p['token']} {p['score']:.2f}" for p in predictions)
        print(f"  {text}\n    [MASK] = {answer}; the model: {best}")


def _run_word2vec(arguments, strategy):
    from lmpipe.kernels import KernelUnavailableError

    family = _family(arguments)
    if arguments.epochs < 1:
        raise SystemExit(f"error: --epochs must be positive, got --epochs {arguments.epochs}")
    try:
        if arguments.batch_size is not None:
            from lmpipe.training.distribution import per_replica_batch_size

            per_replica_batch_size(strategy, arguments.batch_size)
        pipe = family(**family.command_line.options(arguments))
        if arguments.update == "sequential":  # refused here rather than after the corpus
            pipe.sequential_update(strategy)
    except (ValueError, KernelUnavailableError) as error:
        message = str(error).replace("Word2Vec(update='sequential')", "--update sequential")
        message = message.replace("update='batched' (or 'auto')", "--update batched (or auto)")
        raise SystemExit(f"error: {flags.as_flags(message)}") from None
    corpus = runs.read_corpus(arguments.corpus, arguments.format, arguments.max_line_bytes)
    print(corpus.describe() if hasattr(corpus, "describe") else corpus)
    history = pipe.fit(
        corpus,
        batch_size=arguments.batch_size,
        epochs=arguments.epochs,
        strategy=strategy,
        checkpoint_dir=os.path.join(arguments.out, "checkpoints"),
    )
    words = f" ({len(pipe.vocabulary):,} words)"
    pipe = runs.save_after_fit(pipe, strategy, arguments.out, words)
    if pipe is None:
        return 0
    metrics = pipe.evaluate(corpus, steps=10)
    print("Evaluation on 10 batches: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
    runs.export_once(pipe, arguments, trained=bool(history.history))
    return 0
