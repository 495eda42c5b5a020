"""TF_CONFIG problems are named clearly, for every strategy that reads it."""

import json

import pytest

from lmpipe.training.distribution import check_tf_config, distribution_strategy

CLUSTER = {"worker": ["localhost:12345", "localhost:12346"]}


@pytest.mark.parametrize(
    "task, message",
    [
        ({"type": "worker", "index": "a"}, "TF_CONFIG task index must be an integer"),
        ({"type": "worker", "index": 1.5}, "TF_CONFIG task index must be an integer"),
        ({"type": "worker", "index": None}, "TF_CONFIG task index must be an integer"),
        ({"type": "worker", "index": 2}, "index 2 is out of range: job 'worker' has 2 task"),
        ({"type": "ps", "index": 0}, "task type 'ps' is not a job of its cluster (jobs: worker)"),
        ({"type": ["worker"], "index": 0}, "task type ['worker'] is not a job"),
    ],
)
def test_a_bad_task_is_named(monkeypatch, task, message):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": CLUSTER, "task": task}))
    with pytest.raises(ValueError) as error:
        check_tf_config()
    assert message in str(error.value)


def test_a_task_index_tensorflow_reads_as_an_integer_is_accepted(monkeypatch):
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": "1"}})
    )
    assert check_tf_config()["task"]["index"] == "1"


@pytest.mark.parametrize("strategy", ["mirrored", "multi_worker"])
def test_a_malformed_tf_config_is_named_for_every_strategy_that_reads_it(monkeypatch, strategy):
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ValueError, match="TF_CONFIG is not valid JSON"):
        distribution_strategy(strategy)
    monkeypatch.setenv("TF_CONFIG", json.dumps(["worker"]))
    with pytest.raises(ValueError, match="TF_CONFIG must be a JSON object"):
        distribution_strategy(strategy)
