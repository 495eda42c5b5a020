"""The training options every pipeline's `fit` passes to `train`: checked first, forwarded with
the pipeline's defaults; and the saved-pipeline folder's checks."""

import dataclasses
import inspect
import json
import re

import keras
import pytest

from lmpipe.datasets.corpora.corpus import TextCorpus
from lmpipe.models.bert import BertConfig, bert
from lmpipe.pipelines import pipeline
from lmpipe.pipelines.bert_pretraining import AlbertPretraining, BertPretraining
from lmpipe.pipelines.elmo_pretraining import ElmoPretraining
from lmpipe.pipelines.gpt_pretraining import GptPretraining
from lmpipe.pipelines.saved_pipeline import PIPELINE_FILE, SavedPipeline
from lmpipe.pipelines.text_classifier import TextClassifier
from lmpipe.pipelines.translation import Translation
from lmpipe.pipelines.word2vec import Word2Vec
from lmpipe.pipelines.xlnet_pretraining import XLNetPretraining
from lmpipe.tokenizers.wordpiece import WordPieceTokenizer
from lmpipe.training import loop as training
from lmpipe.training import precision
from lmpipe.training.options import TRAINING_OPTIONS, TrainingOptions

VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "to", "be", "or", "not", "."]


class Untouchable:
    """Training data that fails the test as soon as anything reads it."""

    def __len__(self):
        raise AssertionError("the data was read before the options were checked")

    def __iter__(self):
        raise AssertionError("the data was read before the options were checked")

    def __getitem__(self, index):
        raise AssertionError("the data was read before the options were checked")


@pytest.fixture(scope="module")
def tokenizer():
    return WordPieceTokenizer(VOCABULARY)


def pipelines(tokenizer):
    keras.utils.set_random_seed(0)
    encoder = bert(
        BertConfig.tiny(
            vocabulary_size=tokenizer.vocabulary_size,
            hidden_dim=16,
            num_heads=2,
            intermediate_dim=32,
            max_sequence_length=16,
        )
    )
    return [
        BertPretraining(tokenizer, seq_len=16),
        AlbertPretraining(tokenizer, seq_len=16),
        GptPretraining(tokenizer, seq_len=16),
        ElmoPretraining(tokenizer, seq_len=16),
        XLNetPretraining(tokenizer, seq_len=16),
        TextClassifier(tokenizer, encoder, num_classes=2, seq_len=16),
        Translation(),
    ]


def test_an_unknown_training_option_is_refused_by_name_before_any_data_is_read(tokenizer):
    for pipe in pipelines(tokenizer):
        name = type(pipe).__name__
        with pytest.raises(TypeError) as error:
            pipe.fit(Untouchable(), batch_size=2, steps_per_epoch=1, learnin_rate=1e-3)
        message = str(error.value)
        assert f"{name}.fit() got an unknown training option 'learnin_rate'" in message
        assert "learning_rate" in message.split("the training options are")[1], message
        assert pipe.model is None
    # Translation has no weight decay: the option is refused rather than ignored.
    with pytest.raises(TypeError, match="'weight_decay'; the training options are strategy"):
        Translation().fit(Untouchable(), weight_decay=0.1)


def test_training_options_are_the_fields_of_training_options_the_pipelines_do_not_set():
    fields = {field.name: field for field in dataclasses.fields(TrainingOptions)}
    assert tuple(fields) == TRAINING_OPTIONS
    for name in TRAINING_OPTIONS:
        assert fields[name].default is not dataclasses.MISSING, name
    assert {"strategy", "checkpoint_dir", "learning_rate", "verbose"} <= set(TRAINING_OPTIONS)
    assert not {"run_config", "batch_size", "model", "seed", "optimizer"} & set(TRAINING_OPTIONS)
    # `train` takes them as one object, beside what the pipelines set.
    parameters = inspect.signature(training.train).parameters
    assert parameters["options"].kind is inspect.Parameter.KEYWORD_ONLY
    assert not set(TRAINING_OPTIONS) & set(parameters)


def test_fit_forwards_the_options_over_the_pipelines_defaults(tokenizer, monkeypatch):
    calls = []

    def record(build_model, make_dataset, **arguments):
        calls.append(arguments)
        return "model", "history"

    monkeypatch.setattr(pipeline, "train", record)
    pipe = GptPretraining(tokenizer, seq_len=16, seed=5)
    assert pipe.fit(Untouchable(), batch_size=2, steps_per_epoch=3, verbose=0) == "history"
    pipe.model = None
    pipe.fit(Untouchable(), batch_size=2, steps_per_epoch=3, learning_rate=0.5, clipnorm=None)
    first, second = (arguments["options"] for arguments in calls)
    # The pipeline's default learning rate (3e-4, not train's 1e-4), given options as given,
    # and the rest left to `TrainingOptions`' defaults.
    defaults = TrainingOptions()
    assert defaults.learning_rate == 1e-4
    assert first.learning_rate == 3e-4 and first.verbose == 0
    assert first.weight_decay == defaults.weight_decay and first.clipnorm == defaults.clipnorm
    assert second.learning_rate == 0.5 and second.clipnorm is None
    for arguments in calls:
        assert arguments["seed"] == 5 and arguments["steps_per_epoch"] == 3
        assert arguments["batch_size"] == 2 and arguments["model"] is None


def test_a_saved_pipeline_loads_only_into_its_own_class(tmp_path):
    with pytest.raises(ValueError, match="holds no saved pipeline"):
        SavedPipeline(str(tmp_path))
    (tmp_path / PIPELINE_FILE).write_text(json.dumps({"pipeline": "ElmoPretraining", "seed": 1}))
    with pytest.raises(ValueError, match="describes a 'ElmoPretraining' pipeline, not a Gpt"):
        GptPretraining.load(str(tmp_path))
    saved = SavedPipeline(str(tmp_path))
    assert saved.kind == "ElmoPretraining" and saved.description == {"seed": 1}


def test_a_pass_without_a_full_batch_is_refused_with_the_batch_size():
    assert training.one_pass_steps(3, batch_size=8) == 3
    with pytest.raises(ValueError, match="the 5 pairs gives no full batch of 8"):
        training.one_pass_steps(0, batch_size=8, what="the 5 pairs")


BAD_VALUES = [
    ("learning_rate", float("nan")),
    ("learning_rate", float("inf")),
    ("learning_rate", "1e-3"),
    ("learning_rate", 0.0),
    ("weight_decay", float("nan")),
    ("weight_decay", -0.01),
    ("clipnorm", float("nan")),
    ("clipnorm", 0.0),
    ("warmup_steps", float("nan")),
    ("warmup_steps", -1),
    ("checkpoint_every", 0),
    ("checkpoint_every", float("inf")),
    ("mixed_precision", "float8"),
    ("jit_compile", "yes"),
    ("jit_compile", 1),
    ("strategy", "mirored"),
]


def test_bad_option_values_are_refused_by_name_before_any_data_is_read(tokenizer):
    for pipe in pipelines(tokenizer):
        for name, value in BAD_VALUES:
            if name in ("weight_decay", "jit_compile") and isinstance(pipe, Translation):
                continue  # no such option there
            with pytest.raises(ValueError, match=f"`?{name}`?.*{re.escape(repr(value))}"):
                pipe.fit(Untouchable(), batch_size=2, steps_per_epoch=1, **{name: value})
            assert pipe.model is None


def test_train_checks_its_options_before_building_the_model():
    def build_model():
        raise AssertionError("the model was built before the options were checked")

    arguments = dict(run_config={}, batch_size=2, epochs=1, steps_per_epoch=2)
    for name, value in BAD_VALUES:
        with pytest.raises(ValueError, match=f"`?{name}`?.*{re.escape(repr(value))}"):
            training.train(build_model, None, **arguments, options=TrainingOptions(**{name: value}))
    with pytest.raises(ValueError, match="`warmup_steps`=3 exceeds the 2 training steps"):
        training.train(build_model, None, **arguments, options=TrainingOptions(warmup_steps=3))
    with pytest.raises(ValueError, match="`epochs` must be a positive integer, got epochs=nan"):
        training.train(build_model, None, **{**arguments, "epochs": float("nan")})


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda t: BertPretraining(t, seq_len=16, selection_rate=float("nan")), "selection_rate"),
        (lambda t: BertPretraining(t, seq_len=16, short_seq_prob="0.1"), "short_seq_prob"),
        (lambda t: BertPretraining(t, seq_len=16, mask_token_rate=float("nan")), "mask_token"),
        (
            lambda t: BertPretraining(t, seq_len=16, max_predictions=14),
            r"`max_predictions` must be at most 13, .* seq_len=16 .* got max_predictions=14",
        ),
        (
            lambda t: BertPretraining(t, seq_len=16, objective="mlm", max_predictions=15),
            r"`max_predictions` must be at most 14",
        ),
        (lambda t: XLNetPretraining(t, seq_len=16, mask_alpha=float("inf")), "mask_alpha=inf"),
        (lambda t: XLNetPretraining(t, seq_len=16, max_span=float("nan")), "max_span=nan"),
        (lambda t: Translation(label_smoothing=float("nan")), "label_smoothing=nan"),
        (lambda t: Word2Vec(alpha=float("nan")), "alpha=nan"),
        (lambda t: Word2Vec(min_alpha=float("inf")), "min_alpha=inf"),
        (lambda t: Word2Vec(sample=float("nan")), "sample=nan"),
    ],
)
def test_bad_numbers_in_pipeline_options_are_refused_by_name(tokenizer, make, message):
    with pytest.raises(ValueError, match=message):
        make(tokenizer)


class FakeGpu:
    def __init__(self, capability):
        self.capability = capability


@pytest.mark.parametrize(
    "gpus, flags, policy",
    [
        ([], {"avx2", "avx512f", "avx512_bf16"}, "mixed_bfloat16"),
        ([], {"avx2", "amx_bf16", "amx_tile"}, "mixed_bfloat16"),
        ([], {"avx2", "avx512f"}, "float32"),  # bfloat16 would be emulated: slower
        ([], set(), "float32"),
        ([(8, 0), (9, 0)], set(), "mixed_bfloat16"),
        ([(8, 6), (7, 5)], {"avx512_bf16"}, "float32"),  # the slowest GPU decides, not the CPU
    ],
)
def test_auto_precision_picks_bfloat16_only_where_the_hardware_computes_in_it(
    monkeypatch, gpus, flags, policy
):
    monkeypatch.setattr(precision, "_cpu_flags", lambda: flags)
    monkeypatch.setattr(
        precision.tf.config, "list_physical_devices", lambda kind: [FakeGpu(c) for c in gpus]
    )
    monkeypatch.setattr(
        precision.tf.config.experimental,
        "get_device_details",
        lambda gpu: {"compute_capability": gpu.capability},
    )
    picked, reason = precision.automatic_precision()
    assert picked == policy
    assert ("GPU" in reason) == bool(gpus)
    previous = keras.config.dtype_policy().name
    with precision.dtype_policy("auto"):
        assert keras.config.dtype_policy().name == policy
    assert keras.config.dtype_policy().name == previous


@pytest.mark.parametrize(
    "gpus, deterministic, expected",
    [([], False, False), ([(8, 0)], False, True), ([(8, 0)], True, False)],
    ids=["cpu", "gpu", "gpu-with-op-determinism"],
)
def test_auto_jit_compile_picks_xla_on_gpus_only(monkeypatch, gpus, deterministic, expected):
    monkeypatch.setattr(
        precision.tf.config, "list_physical_devices", lambda kind: [FakeGpu(c) for c in gpus]
    )
    monkeypatch.setattr(precision, "_op_determinism_enabled", lambda: deterministic)
    picked, reason = precision.automatic_jit_compile()
    assert picked is expected
    assert ("GPU" in reason) == bool(gpus)


def test_fit_with_auto_precision_says_what_it_picked(tokenizer, monkeypatch, capsys):
    monkeypatch.setattr(precision, "_cpu_flags", lambda: {"avx512_bf16"})
    pipe = BertPretraining(
        tokenizer,
        BertConfig.tiny(vocabulary_size=tokenizer.vocabulary_size, max_sequence_length=16),
        seq_len=16,
        objective="mlm",
    )
    documents = [["to be or not to be .", "not to be ."], ["or not .", "be or not to be ."]] * 4
    pipe.fit(
        TextCorpus.from_documents(documents),
        batch_size=4,
        epochs=1,
        steps_per_epoch=1,
        mixed_precision="auto",
        jit_compile="auto",
    )
    printed = capsys.readouterr().out
    assert "mixed_precision='auto': mixed_bfloat16, for a CPU with avx512_bf16." in printed
    assert pipe.model.dtype_policy.name == "mixed_bfloat16"
    if not precision.tf.config.list_physical_devices("GPU"):
        assert "jit_compile='auto': False, for CPUs" in printed
        assert pipe.model.jit_compile is False


def test_training_options_are_frozen_and_refuse_bad_values_by_name():
    options = TrainingOptions(learning_rate=3e-4, callbacks=[])
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.learning_rate = 1.0
    assert options.callbacks == ()  # a list given is kept as a tuple
    assert dataclasses.replace(options, verbose=0).learning_rate == 3e-4
    for name, value in BAD_VALUES:
        with pytest.raises(ValueError, match=f"`?{name}`?.*{re.escape(repr(value))}"):
            TrainingOptions(**{name: value})
        with pytest.raises(ValueError, match=f"`?{name}`?.*{re.escape(repr(value))}"):
            dataclasses.replace(options, **{name: value})
    with pytest.raises(
        ValueError, match="`accumulation_steps` must be .* got accumulation_steps=0"
    ):
        TrainingOptions(accumulation_steps=0)
    with pytest.raises(ValueError, match="`data_service` must be the dispatcher's address"):
        TrainingOptions(data_service="not an address")
    with pytest.raises(ValueError, match="`options` must be TrainingOptions or None"):
        training.train(
            None,
            None,
            run_config={},
            batch_size=2,
            epochs=1,
            steps_per_epoch=1,
            options={"learning_rate": 0.1},
        )
