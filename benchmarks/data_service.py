"""What the tf.data service buys: training steps/s when the input is expensive and the trainer's
own cores are busy, with the batches built on the trainer's core and on a service worker's.

The trainer is one process held to one core (CPU 0, `os.sched_setaffinity`) training a small
XLNet (1 layer, width 32, so that the input's cost shows) on permutation-LM batches made from
Shakespeare's raw text (tokenize, cut, sample the factorization order and the targets: the
costly input of the families): 32 sequences of 128 tokens a step, float32. It trains twice,
for the same steps:
- "local": the batches are built on the trainer's own core, between and beside the steps;
- "service": by `lmpipe data-service` (a dispatcher and one worker) running in another
  process held to the other core (CPU 1), through `fit(data_service=...)`.
Steps/s are timed from the 5th step to the last (tracing and the first batches left out), and
the ratio service / local printed, with the rate of the input alone on one core (what a
trainer fast enough, e.g. on a GPU, would wait for). Needs 2 cores.

Run: python benchmarks/data_service.py [--steps 40]
"""

import argparse
import os
import signal
import subprocess
import sys
import time

from measure import Results, print_machine

TRAIN = """
import os, sys, time
os.sched_setaffinity(0, {0})
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras
from lmpipe.datasets import TextCorpus, WordPieceTokenizer
from lmpipe.models import XLNetConfig
from lmpipe.pipelines import XLNetPretraining

steps, address = int(sys.argv[1]), sys.argv[2]
corpus = TextCorpus.shakespeare()
tokenizer = WordPieceTokenizer.train(TextCorpus.shakespeare(genres=["comedies"]), vocab_size=4000)

class Clock(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 4:
            self.start = time.perf_counter()
        self.end = time.perf_counter()

for name, service in (("local", None), ("service", address)):
    config = XLNetConfig.tiny(vocabulary_size=tokenizer.vocabulary_size, hidden_dim=32,
                              num_layers=1, intermediate_dim=64)
    pipe = XLNetPretraining(tokenizer, config=config, seq_len=128, mem_len=0, seed=0)
    clock = Clock()
    pipe.fit(corpus, batch_size=32, epochs=1, steps_per_epoch=steps, data_service=service,
             callbacks=[clock], verbose=0)
    print(name, (steps - 5) / (clock.end - clock.start), flush=True)

batches = iter(pipe.training_batches(corpus, 32, None))
for _ in range(5):
    next(batches)
start = time.perf_counter()
for _ in range(100):
    next(batches)
print("input", 100 / (time.perf_counter() - start), flush=True)
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--port", type=int, default=5050)
    arguments = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("This benchmark needs 2 cores (the trainer's and the service's).")
    service = subprocess.Popen(
        [sys.executable, "-m", "lmpipe.cli", "data-service", "--port", str(arguments.port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {1}),
    )
    try:
        # Only now: describing the machine imports TensorFlow, whose threads make the fork of
        # a `preexec_fn` (the service's, above) unsafe.
        print_machine()
        print(service.stdout.readline().strip())
        begin = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-c", TRAIN, str(arguments.steps), f"localhost:{arguments.port}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise SystemExit(result.stderr[-3000:])
        rates = dict(line.split() for line in result.stdout.splitlines() if line.strip())
        rates = {name: float(rate) for name, rate in rates.items()}
        print(
            f"XLNet 1 x 32, permutation LM on raw text, batch 32 x 128, {arguments.steps} steps, "
            f"trainer on 1 core ({time.perf_counter() - begin:.0f} s in all):"
        )
        for name in ("local", "service"):
            where = "the trainer's core" if name == "local" else "a service worker's core"
            print(f"  {name:<8} batches built on {where:<24} {rates[name]:6.2f} steps/s")
        print(f"  service / local: {rates['service'] / rates['local']:.2f}x")
        print(
            f"  (the input alone, on one core: {rates['input']:.1f} batches/s; the service "
            "can only win where the steps come close to that)"
        )
        record = Results("data_service")
        record.add(
            f"training steps/s, trainer on 1 core, {arguments.steps} steps: batches from "
            "lmpipe data-service on the other core",
            rates["service"] / rates["local"],
            "batches built on the trainer's core (local)",
            steps_per_second={"service": rates["service"], "local": rates["local"]},
            input_batches_per_second=rates["input"],
        )
        record.write()
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(timeout=60)


if __name__ == "__main__":
    main()
