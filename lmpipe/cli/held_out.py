"""`lmpipe pretrain`'s held-out documents: validated on after every epoch, evaluated at the end.

The rule, settled before training starts so that a run never fails once it has begun:

1. `held_out_documents` draws `--held-out` of the corpus's documents (a share, or a number of
   them; with `--seed`) before the tokenizer is learned from the others.
2. `validation_documents`, once the pipeline exists, checks that they make at least one
   validation batch of `--batch-size` examples (the pretraining families batch whole
   examples only, so a few short documents can make none). If not, it holds out twice as
   many, and so on up to a quarter of the corpus (the tokenizer has then seen the documents
   added; a vocabulary is a small thing to learn from them, and the choice stays the same on
   every rerun of the command).
3. If even that makes no batch, validation is off: one line says so and why, the whole corpus
   trains, the model kept is the last epoch's and the final evaluation runs on training
   batches.

The line printed says which of these happened.
"""

import os

MAX_HELD_OUT_BYTES = 2**30
"""The largest corpus (in files) `--held-out` splits in memory."""
MAX_HELD_OUT_SHARE = 0.25
"""The most of the corpus held out to make one validation batch."""


def held_out_documents(corpus, arguments):
    """`(training corpus, held-out corpus or None)`: `--held-out` of the documents drawn
    (with `--seed`), None for `--held-out 0` or a default share too small for the corpus
    (said in a note). Bad values are a `SystemExit` naming the flag. Prints nothing else:
    `validation_documents` says what is held out once it is settled."""
    if not arguments.held_out:
        return corpus, None
    size = sum(os.path.getsize(path) for path in getattr(corpus, "files", ()))
    if size > MAX_HELD_OUT_BYTES:
        raise SystemExit(
            f"error: --held-out draws documents from a corpus held in memory, and this one is "
            f"{size / 2**30:.1f} GiB: give --held-out 0 (and evaluate a separate corpus with "
            "lmpipe evaluate --corpus)"
        )
    share = arguments.held_out
    given = "--held-out" in getattr(arguments, "flags_given", ("--held-out",))
    if not given and round(share * len(corpus)) < 1:
        print(
            f"note: validation is off: {len(corpus)} documents are too few to hold out "
            f"{share:g} of them; the evaluation at the end runs on training batches (give "
            "--held-out N to hold out N documents)"
        )
        return corpus, None
    if share >= 1:
        if share != int(share):
            raise SystemExit(f"error: --held-out is a share below 1 or a number, got {share}")
        share = int(share)
    return _split(corpus, share, arguments.seed)


def validation_documents(pipe, corpus, training, held_out, arguments):
    """`(training corpus, held-out corpus or None)` for `pipe.fit`: `held_out` (drawn from
    `corpus` by `held_out_documents`, `training` the rest) if it makes a validation batch of
    `--batch-size`, else more documents of `corpus` that do (up to `MAX_HELD_OUT_SHARE` of
    them), else None: validation off. Prints one line saying which."""
    from lmpipe.pipelines.pipeline import has_a_batch

    if held_out is None:
        return training, None
    batch_size, first = arguments.batch_size, len(held_out)
    most = max(first, int(len(corpus) * MAX_HELD_OUT_SHARE))
    count = first
    while not has_a_batch(pipe.evaluation_batches(held_out, batch_size, None)):
        if count >= most:
            print(
                f"note: validation is off: {_documents(count)} held out "
                f"({count / len(corpus):.0%} of the corpus) make no batch of {batch_size} "
                f"examples of {pipe.options.seq_len} tokens; training on all "
                f"{len(corpus):,} documents, keeping the last epoch's weights, and evaluating "
                "on training batches at the end (give more text, a smaller --batch-size, or "
                "--held-out 0 to say so)"
            )
            return corpus, None
        count = min(2 * count, most)
        training, held_out = _split(corpus, count, arguments.seed)
    grown = "" if count == first else f"; {first} made no batch of {batch_size} examples"
    print(
        f"Held out {_documents(count)} ({held_out.num_sentences:,} sentences{grown}), "
        f"evaluated after each of the {arguments.epochs} epochs; training on {len(training):,}"
    )
    return training, held_out


def _split(corpus, held_out, seed):
    """`corpus.split`, its error naming the flag. The documents held out for a number `n`
    are among those held out for any larger number (the draw is one permutation)."""
    try:
        return corpus.split(held_out, seed=seed)
    except ValueError as error:
        raise SystemExit(f"error: {str(error).replace('`held_out`', '--held-out')}") from None


def _documents(count):
    return f"{count:,} document{'s' if count != 1 else ''}"
