"""Train stream_regression for 4 epochs of 3 steps on N logical CPUs (its own process: logical
devices are set before TensorFlow starts), checkpointing every step.
Run: python stream_resume_script.py OUT CHECKPOINTS REPLICAS [STOP] [--mixture]

With STOP, the process exits (as if killed) once step STOP is checkpointed. Writes OUT.npz:
the final kernel and bias, and the stream positions the steps kept. With --mixture it trains
on stream_regression's corpus mixture (and keeps the mixture's positions)."""

import os
import sys


def main():
    mixed = "--mixture" in sys.argv
    arguments = [argument for argument in sys.argv if argument != "--mixture"]
    out, checkpoints, replicas = arguments[1], arguments[2], int(arguments[3])
    stop = int(arguments[4]) if len(arguments) > 4 else None
    import keras
    import numpy as np
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{index}" for index in range(replicas)])

    from stream_regression import Positions, fit, mixture

    class Kill(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            # Step `stop` and its checkpoint are done when step `stop + 1` begins.
            if stop is not None and int(self.model.optimizer.iterations.numpy()) == stop:
                os._exit(0)

    positions = Positions(mixture=mixed)
    model = fit(
        checkpoints,
        4,
        strategy=strategy,
        callbacks=[positions, Kill()],
        data=mixture() if mixed else None,
    )
    kernel, bias = (np.asarray(weight) for weight in model.get_layer("dense").get_weights())
    np.savez(out, kernel=kernel, bias=bias, positions=np.array(positions.positions, np.int64))


if __name__ == "__main__":
    main()
