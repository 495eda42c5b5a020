import keras
import numpy as np
import pytest
import tensorflow as tf

from lmpipe.training import optimizers as optimizer_module
from lmpipe.training.optimizers import FusedAdam, FusedAdamW
from lmpipe.training.schedules import (
    TransformerSchedule,
    WarmupLinearDecay,
    adamw,
    seq2seq_optimizer,
)
from tests.fresh_process import run_script


def paper_learning_rate(step_num, d_model, warmup, factor=1.0):
    return factor * d_model**-0.5 * min(step_num**-0.5, step_num * warmup**-1.5)


def test_transformer_schedule_matches_the_papers_formula():
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000, factor=2.0)
    steps = np.array([0, 1, 10, 999, 3998, 3999, 4000, 10_000, 99_999])
    values = keras.ops.convert_to_numpy(schedule(steps))
    # The optimizer's step 0 is the paper's step_num 1.
    expected = [paper_learning_rate(s + 1, 512, 4000, 2.0) for s in steps]
    np.testing.assert_allclose(values, expected, rtol=1e-5)


def test_transformer_schedule_peaks_at_warmup():
    schedule = TransformerSchedule(d_model=256, warmup_steps=100)
    values = keras.ops.convert_to_numpy(schedule(np.arange(1000)))
    assert int(np.argmax(values)) == 99  # step_num 100 = warmup_steps
    np.testing.assert_allclose(values[99], (256 * 100) ** -0.5, rtol=1e-5)
    assert np.all(np.diff(values[:100]) > 0) and np.all(np.diff(values[99:]) < 0)


def test_transformer_schedule_serializes_and_drives_adam():
    schedule = TransformerSchedule(d_model=64, warmup_steps=10, factor=0.5)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert restored.get_config() == schedule.get_config()
    optimizer = keras.optimizers.Adam(learning_rate=restored)
    variable = keras.Variable(np.ones(3, "float32"))
    optimizer.apply_gradients([(np.ones(3, "float32"), variable)])
    np.testing.assert_allclose(
        float(optimizer.learning_rate), paper_learning_rate(2, 64, 10, 0.5), rtol=1e-5
    )


@pytest.mark.parametrize(
    "arguments", [dict(d_model=0), dict(d_model=8, warmup_steps=0), dict(d_model=8, factor=-1.0)]
)
def test_transformer_schedule_rejects_bad_arguments(arguments):
    with pytest.raises(ValueError, match="must be a positive"):
        TransformerSchedule(**arguments)


def bert_learning_rate(step, peak, warmup, total, end=0.0):
    if step < warmup:
        return peak * step / warmup
    return end + (peak - end) * max(total - step, 0) / (total - warmup)


def test_warmup_linear_decay_matches_berts_schedule():
    schedule = WarmupLinearDecay(1e-4, warmup_steps=10, total_steps=100, end_learning_rate=1e-6)
    steps = np.array([0, 1, 5, 9, 10, 11, 50, 99, 100, 150])
    values = keras.ops.convert_to_numpy(schedule(steps))
    expected = [bert_learning_rate(s, 1e-4, 10, 100, 1e-6) for s in steps]
    np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-12)
    assert values[0] == 0.0  # the first update of a warmup does nothing
    np.testing.assert_allclose(values[4], 1e-4, rtol=1e-6)  # the peak at warmup_steps
    np.testing.assert_allclose(values[-2:], 1e-6, rtol=1e-5)  # floored at the end rate


def test_warmup_linear_decay_without_warmup_starts_at_the_peak_and_serializes():
    schedule = WarmupLinearDecay(2e-3, warmup_steps=0, total_steps=4)
    values = keras.ops.convert_to_numpy(schedule(np.arange(6)))
    np.testing.assert_allclose(values, [2e-3, 1.5e-3, 1e-3, 5e-4, 0.0, 0.0], rtol=1e-6)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert restored.get_config() == schedule.get_config()


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(peak_learning_rate=0.0), "`learning_rate` must be a positive"),
        (dict(peak_learning_rate=float("nan")), "`learning_rate` must be a positive"),
        (dict(warmup_steps=-1), "`warmup_steps` must be an integer >= 0"),
        (dict(total_steps=0), "`total_steps` must be a positive integer"),
        (dict(warmup_steps=11, total_steps=10), "warmup_steps=11, total_steps=10"),
        (dict(end_learning_rate=-1e-5), "`end_learning_rate` must be a finite number >= 0"),
    ],
)
def test_warmup_linear_decay_rejects_bad_arguments(arguments, message):
    arguments = dict(peak_learning_rate=1e-4, warmup_steps=1, total_steps=10) | arguments
    with pytest.raises(ValueError, match=message):
        WarmupLinearDecay(**arguments)


def test_adamw_decays_weights_but_not_biases_or_layer_norm():
    inputs = keras.Input((3,))
    outputs = keras.layers.LayerNormalization()(keras.layers.Dense(2)(inputs))
    model = keras.Model(inputs, outputs)
    before = [np.array(v) for v in model.trainable_variables]
    optimizer = adamw(1e-2, total_steps=10, warmup_steps=0, weight_decay=0.1, clipnorm=1.0)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.999, 1e-6)
    assert optimizer.global_clipnorm == 1.0
    gradients = [np.full(v.shape, 0.5, "float32") for v in model.trainable_variables]
    optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
    # The first Adam step moves every weight by the learning rate (m / sqrt(v) = 1 for a
    # constant gradient); AdamW first shrinks the decayed ones by lr * weight_decay.
    for variable, old in zip(model.trainable_variables, before, strict=True):
        decayed = variable.path.endswith("kernel")
        expected = old * (1 - 1e-2 * 0.1) if decayed else old
        np.testing.assert_allclose(np.array(variable), expected - 1e-2, rtol=1e-4, atol=1e-6)
    assert {v.path.rsplit("/", 1)[-1] for v in model.trainable_variables} == {
        "kernel",
        "bias",
        "gamma",
        "beta",
    }


def test_seq2seq_optimizer_warms_up_the_transformer_and_keeps_rnns_constant():
    short = seq2seq_optimizer(transformer_width=64)(total_steps=1000)
    assert isinstance(short._learning_rate, TransformerSchedule)
    assert short._learning_rate.warmup_steps == 100  # 10% of a run under 40,000 steps
    assert (short.beta_2, short.epsilon, short.global_clipnorm) == (0.98, 1e-9, 1.0)
    long = seq2seq_optimizer(64, learning_rate=2.0, clipnorm=None)(total_steps=100_000)
    assert long._learning_rate.get_config() == {"d_model": 64, "warmup_steps": 4000, "factor": 2.0}
    rnn = seq2seq_optimizer(None, learning_rate=5e-4)(total_steps=10)
    np.testing.assert_allclose(float(rnn.learning_rate), 5e-4, rtol=1e-6)
    assert float(seq2seq_optimizer()(total_steps=10).learning_rate) == np.float32(1e-3)


@pytest.mark.parametrize("kind", ["adam", "adamw"])
@pytest.mark.parametrize("clipnorm", [1.0, 100.0, None], ids=["clipped", "below-norm", "no-clip"])
@pytest.mark.parametrize("xla", [True, False], ids=["xla", "ops"])
def test_fused_adam_follows_keras_adam_step_by_step(kind, clipnorm, xla, monkeypatch):
    """The fused update against Keras' own, with the same clipping (gradient norms near 5:
    clipped to 1, or under a clipnorm of 100) and decay: dense gradients through the fused
    kernel, or with decay or clipping the XLA function (every variable, as for large ones) or
    TensorFlow's ops; an embedding's sparse gradient through Keras' (made dense by the
    clipping, as in Keras)."""
    monkeypatch.setattr(optimizer_module, "XLA_UPDATE_MIN_SIZE", 0 if xla else 10**9)
    rng = np.random.default_rng(0)
    arguments = dict(
        learning_rate=1e-2, beta_1=0.9, beta_2=0.98, epsilon=1e-7, global_clipnorm=clipnorm
    )
    if kind == "adamw":
        arguments["weight_decay"] = 0.1
    optimizers = {
        "fused": (FusedAdamW if kind == "adamw" else FusedAdam)(**arguments),
        "keras": (keras.optimizers.AdamW if kind == "adamw" else keras.optimizers.Adam)(
            **arguments
        ),
    }
    initial = [rng.normal(size=(4, 3)), rng.normal(size=(3,)), rng.normal(size=(10, 2))]
    variables = {
        name: [keras.Variable(value.astype("float32")) for value in initial] for name in optimizers
    }
    for _ in range(5):
        dense = [rng.normal(size=(4, 3)), rng.normal(size=(3,))]
        rows = rng.choice(10, size=3, replace=False)
        sparse = tf.IndexedSlices(
            tf.constant(rng.normal(size=(3, 2)), "float32"), tf.constant(rows), tf.constant([10, 2])
        )
        for name, optimizer in optimizers.items():
            gradients = [tf.constant(g, "float32") for g in dense] + [sparse]
            optimizer.apply_gradients(zip(gradients, variables[name], strict=True))
        for fused, reference in zip(variables["fused"], variables["keras"], strict=True):
            np.testing.assert_allclose(np.array(fused), np.array(reference), rtol=1e-6, atol=1e-7)
    # The moments too: a resumed run reads them from the checkpoint.
    for fused, reference in zip(
        optimizers["fused"].variables, optimizers["keras"].variables, strict=True
    ):
        np.testing.assert_allclose(np.array(fused), np.array(reference), rtol=1e-6, atol=1e-7)


MIRRORED_SCRIPT = """
import numpy as np
import tensorflow as tf
(cpu,) = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from lmpipe.training.optimizers import FusedAdam
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    variable = keras.Variable(np.ones((2, 2), "float32"))
    optimizer = FusedAdam(learning_rate=0.1)
    optimizer.build([variable])

@tf.function
def step():
    strategy.run(lambda: optimizer.apply_gradients([(tf.fill((2, 2), 0.5), variable)]))

step()
# Adam's first step moves every weight by the learning rate, on both replicas.
for value in strategy.experimental_local_results(variable.value):
    np.testing.assert_allclose(np.array(value), np.full((2, 2), 0.9), rtol=1e-6)
print("OK")
"""


def test_fused_adam_updates_mirrored_variables_on_every_replica():
    run_script(MIRRORED_SCRIPT)


MIRRORED_ADAMW_SCRIPT = """
import numpy as np
import tensorflow as tf
(cpu,) = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from lmpipe.training import optimizers
from lmpipe.training.optimizers import FusedAdamW
optimizers.XLA_UPDATE_MIN_SIZE = 0  # the XLA function for every variable, as for large ones
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
rng = np.random.default_rng(0)
initial = [rng.normal(size=(4, 3)).astype("float32"), rng.normal(size=(3,)).astype("float32")]
# Each replica's gradients (norms 2.7 and 6.7): their sum is the global batch's gradient,
# which lmpipe clips (Keras clips each replica's before summing them: the reference is Keras
# on one replica given that sum).
replica_gradients = [
    [rng.normal(size=v.shape).astype("float32") * scale for v in initial] for scale in (1, 2)
]
one = tf.distribute.MirroredStrategy(["/cpu:0"])
results = {}
for name, kind, strategy in (
    ("fused", FusedAdamW, strategy), ("keras", keras.optimizers.AdamW, one)
):
    with strategy.scope():
        variables = [keras.Variable(value, name=f"v{i}") for i, value in enumerate(initial)]
        optimizer = kind(learning_rate=0.01, weight_decay=0.1, global_clipnorm=1.0)
        optimizer.exclude_from_weight_decay(var_names=["v1"])
        optimizer.build(variables)

    def replica_step(optimizer=optimizer, variables=variables, strategy=strategy):
        stacked = [tf.constant(np.stack(g)) for g in zip(*replica_gradients)]
        if strategy.num_replicas_in_sync == 1:
            gradients = [tf.reduce_sum(g, axis=0) for g in stacked]
        else:
            index = tf.distribute.get_replica_context().replica_id_in_sync_group
            gradients = [tf.gather(g, index) for g in stacked]
        optimizer.apply_gradients(zip(gradients, variables))

    step = tf.function(lambda run=strategy.run, replica_step=replica_step: run(replica_step))
    for _ in range(3):
        step()
    results[name] = [
        [np.array(value) for value in strategy.experimental_local_results(v.value)]
        for v in variables
    ]
for fused, keras_values in zip(results["fused"], results["keras"]):
    np.testing.assert_array_equal(fused[0], fused[1])  # the replicas agree
    # Weights of size 1: a few float32 ulps of them apart.
    np.testing.assert_allclose(fused[0], keras_values[0], rtol=1e-6, atol=1e-6)
print("OK")
"""


def test_fused_adamw_decays_and_clips_as_keras_on_two_replicas():
    """AdamW with decay (one variable excluded) and global-norm clipping on two replicas with
    different gradients: the same variables, on both replicas, as Keras' AdamW on one replica
    with the global batch's gradient (their sum)."""
    run_script(MIRRORED_ADAMW_SCRIPT)
