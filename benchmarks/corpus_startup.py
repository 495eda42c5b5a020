"""Start-up on a large corpus: seconds from a process's start to the end of its first training
step, without and with what lmpipe keeps between starts; and the offline tokenization rate.

The corpus is Shakespeare's plays repeated into `--size-mb` MB of BERT-format files (1 GB by
default, 8 files). Each start is a fresh process (as a restart, a resume or another worker
is): read the corpus (`TextCorpus.from_files`), make a tiny BERT pipeline, and `fit` one epoch
of the default length (the steps of one pass), stopped after its first step.

- "before": `manifest=False` and a new checkpoint directory: every file is validated and one
  pass of examples is built to count the steps, as lmpipe did before the manifest.
- "first start": the same work, and the manifest and the step count are written.
- "restart": a second process on the same files and checkpoint directory: the manifest and
  the kept count stand in for both passes.

Prints the seconds of each, the ratio of "before" to "restart", and the tokens/s of
`write_tokenized_corpus` over the first file (the offline tokenization of a corpus).

Run: python benchmarks/corpus_startup.py [--size-mb 1024] [--dir DIR]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from measure import Results, print_machine

START = """
import os, sys, time
started = time.perf_counter()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import keras
from lmpipe.datasets import TextCorpus, WordPieceTokenizer
from lmpipe.models import BertConfig
from lmpipe.pipelines import BertPretraining

folder, checkpoints, manifest = sys.argv[1], sys.argv[2], sys.argv[3] == "1"

class FirstStep(Exception):
    pass

class StopAfterFirstStep(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        raise FirstStep

corpus = TextCorpus.from_files(os.path.join(folder, "*.txt"), manifest=manifest)
read = time.perf_counter()
tokenizer = WordPieceTokenizer.load(os.path.join(folder, "tokenizer"))
config = BertConfig.tiny(vocabulary_size=tokenizer.vocabulary_size, max_sequence_length=128)
pipe = BertPretraining(tokenizer, config, seq_len=128, seed=0)
try:
    pipe.fit(corpus, batch_size=32, epochs=1, checkpoint_dir=checkpoints, verbose=0,
             callbacks=[StopAfterFirstStep()])
except FirstStep:
    pass
print(f"{read - started:.2f} {time.perf_counter() - started:.2f}")
"""


def build_corpus(folder, size_mb):
    """Shakespeare's plays repeated into `size_mb` MB of BERT-format files in `folder`, and a
    WordPiece vocabulary learned from the plays (untimed)."""
    from lmpipe.datasets import TextCorpus, WordPieceTokenizer

    plays = TextCorpus.shakespeare()
    text = "".join("\n".join(document) + "\n\n" for document in plays.iter_documents()).encode()
    target = size_mb * 2**20
    per_file = -(-target // 8)
    for index in range(8):
        with open(os.path.join(folder, f"part-{index}.txt"), "wb") as file:
            written = 0
            while written < per_file:
                file.write(text)
                written += len(text)
    WordPieceTokenizer.train(plays, vocab_size=4000).save(os.path.join(folder, "tokenizer"))
    return sum(os.path.getsize(os.path.join(folder, f"part-{i}.txt")) for i in range(8))


def start(folder, checkpoints, manifest):
    """(seconds to read the corpus, seconds to the end of the first step) of a new process."""
    result = subprocess.run(
        [sys.executable, "-c", START, folder, checkpoints, "1" if manifest else "0"],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    read, first_step = map(float, result.stdout.split()[-2:])
    return read, first_step


def tokens_per_second(folder):
    from lmpipe.datasets import TextCorpus, WordPieceTokenizer
    from lmpipe.datasets.corpora.tokenized_corpus import write_tokenized_corpus

    corpus = TextCorpus.from_files(os.path.join(folder, "part-0.txt"))
    tokenizer = WordPieceTokenizer.load(os.path.join(folder, "tokenizer"))
    with tempfile.TemporaryDirectory() as output:
        begin = time.perf_counter()
        write_tokenized_corpus(corpus, tokenizer, output)
        seconds = time.perf_counter() - begin
        with open(os.path.join(output, "corpus.json")) as file:
            tokens = json.load(file)["num_tokens"]
    return tokens / seconds, os.path.getsize(os.path.join(folder, "part-0.txt")) / seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--dir", default=None, help="where to build the corpus (default: temp)")
    arguments = parser.parse_args()
    print_machine()
    folder = arguments.dir or tempfile.mkdtemp(prefix="lmpipe-corpus-startup-")
    os.makedirs(folder, exist_ok=True)
    try:
        size = build_corpus(folder, arguments.size_mb)
        print(f"Corpus: {size / 2**20:,.0f} MB of Shakespeare in 8 BERT-format files")
        runs = {
            "before": start(folder, os.path.join(folder, "run-before"), manifest=False),
            "first start": start(folder, os.path.join(folder, "run"), manifest=True),
            "restart": start(folder, os.path.join(folder, "run"), manifest=True),
        }
        for name, (read, first_step) in runs.items():
            print(f"  {name:<12} corpus read {read:7.1f} s   first step {first_step:7.1f} s")
        ratio = runs["before"][1] / runs["restart"][1]
        print(f"  start-up to the first step: restart {ratio:.1f}x faster than before")
        tokens, bytes_per_second = tokens_per_second(folder)
        print(
            f"Offline tokenization (write_tokenized_corpus, one file): {tokens:,.0f} tokens/s, "
            f"{bytes_per_second / 2**20:.1f} MB/s"
        )
        record = Results("corpus_startup")
        record.add(
            f"speed of a fresh process to its first training step, {size / 2**20:,.0f} MB "
            "corpus: a restart with the manifest and the kept step count",
            ratio,
            "before (no manifest: every file validated, one pass to count the steps)",
            seconds_to_first_step={name: first_step for name, (_, first_step) in runs.items()},
            tokens_per_second=tokens,
            megabytes_per_second=bytes_per_second / 2**20,
        )
        record.write()
    finally:
        if arguments.dir is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
