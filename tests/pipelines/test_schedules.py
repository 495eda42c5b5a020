import keras
import numpy as np
import pytest

from lmpipe.pipelines.schedules import TransformerSchedule


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
