"""A training command for the tests that need their own process (logical devices, several
workers, kill -9). Run: python fit_script.py OUT_DIR [--strategy S] [--logical-cpus N] ...

Trains a tiny BERT on Shakespeare's comedies with a vocabulary learned from a few scenes and
writes OUT_DIR/result.npz: the final weights and the loss history.
"""

import argparse
import json
import os
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--strategy", default=None)
    parser.add_argument("--logical-cpus", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--checkpoint-dir", default=None)
    parser.add_argument("--checkpoint-every", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--step-delay", type=float, default=0.0)
    parser.add_argument("--jit-compile", action="store_true")
    parser.add_argument("--dropout", type=float, default=0.1)
    arguments = parser.parse_args()

    import tensorflow as tf

    strategy = arguments.strategy
    if arguments.logical_cpus:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * arguments.logical_cpus
        )
        strategy = tf.distribute.MirroredStrategy(
            [f"/cpu:{index}" for index in range(arguments.logical_cpus)]
        )
    elif strategy == "multi_worker":
        from lmpipe.pipelines import distribution_strategy

        strategy = distribution_strategy("multi_worker")

    import time

    import keras
    import numpy as np

    from lmpipe.datasets import TextCorpus, WordPieceTokenizer
    from lmpipe.models import BertConfig
    from lmpipe.pipelines import BertPretraining

    corpus = TextCorpus.shakespeare(genres=["comedies"])
    sample = [sentence for document in list(corpus.iter_documents())[:20] for sentence in document]
    tokenizer = WordPieceTokenizer.train(sample, vocab_size=600)
    config = BertConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=arguments.hidden,
        num_heads=2,
        intermediate_dim=2 * arguments.hidden,
        max_sequence_length=32,
        dropout=arguments.dropout,
        attention_dropout=arguments.dropout,
    )
    pipe = BertPretraining(tokenizer, seq_len=32, objective="nsp", seed=7, config=config)

    class FirstStep(keras.callbacks.Callback):
        """The update count `fit` started (or resumed) from."""

        step = None

        def on_train_begin(self, logs=None):
            if FirstStep.step is None:
                FirstStep.step = int(self.model.optimizer.iterations.numpy())

    callbacks = [FirstStep()]
    if arguments.step_delay:

        class SlowDown(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                time.sleep(arguments.step_delay)

        callbacks.append(SlowDown())
    history = pipe.fit(
        corpus,
        batch_size=arguments.batch_size,
        epochs=arguments.epochs,
        steps_per_epoch=arguments.steps,
        strategy=strategy,
        checkpoint_dir=arguments.checkpoint_dir,
        checkpoint_every=arguments.checkpoint_every,
        learning_rate=1e-3,
        jit_compile=arguments.jit_compile,
        callbacks=callbacks,
        verbose=0,
    )
    os.makedirs(arguments.out, exist_ok=True)
    weights = {}
    for variable in pipe.model.weights:
        values = variable.value
        local = getattr(values, "values", None)
        replicas = [np.asarray(v) for v in local] if local is not None else [np.asarray(values)]
        for index, value in enumerate(replicas):
            weights[f"{variable.path}@{index}"] = value
    np.savez(os.path.join(arguments.out, "result.npz"), **weights)
    with open(os.path.join(arguments.out, "history.json"), "w") as file:
        json.dump(
            {
                "history": history.history,
                "epochs": history.epoch,
                "steps": int(pipe.model.optimizer.iterations.numpy()),
                "first_step": FirstStep.step,
            },
            file,
        )


if __name__ == "__main__":
    sys.exit(main())
