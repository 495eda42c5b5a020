"""Reading a Hugging Face checkpoint folder: its two files, `config.json` (its fields checked,
each error naming the file and the field) and `model.safetensors` (its tensors by name)."""

import json
import os
import pathlib

from safetensors.numpy import load_file

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"

# Hugging Face's activation names -> lmpipe's. Keras' "gelu" is the exact erf form, as is
# Hugging Face's "gelu"; lmpipe names the tanh approximation "gelu_approximate".
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_fast": "gelu_approximate",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}

# lmpipe's activation names -> the one Hugging Face writes for each.
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_approximate": "gelu_new", "relu": "relu", "silu": "silu"}


def checkpoint_directory(directory, name):
    """`directory` as a `pathlib.Path`, checked to be a folder holding config.json and
    model.safetensors (`name` says whose checkpoint, for the message)."""
    try:
        directory = pathlib.Path(os.fspath(directory))
    except TypeError as error:
        raise TypeError(
            f"`directory` must be a path (str or os.PathLike), got {type(directory).__name__}."
        ) from error
    if not directory.exists():
        raise ValueError(f"`directory` {str(directory)!r} does not exist.")
    if not directory.is_dir():
        raise ValueError(f"`directory` {str(directory)!r} is not a directory.")
    for file in (CONFIG_FILE, WEIGHTS_FILE):
        if not (directory / file).is_file():
            raise ValueError(
                f"{directory / file} not found: `directory` must be a Hugging Face {name} "
                f"checkpoint folder with {CONFIG_FILE} and {WEIGHTS_FILE}."
            )
    return directory


def checkpoint_model_type(directory):
    """The `model_type` of a Hugging Face checkpoint folder's config.json ("bert", ...)."""
    directory = checkpoint_directory(directory, "model")
    return read_config(directory / CONFIG_FILE).get("model_type")


def read_config(path):
    """The JSON object of the config.json at `path`."""
    path = pathlib.Path(path)
    try:
        hf = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{path} is not valid JSON (line {error.lineno}, column {error.colno}): {error.msg}."
        ) from error
    if not isinstance(hf, dict):
        raise ValueError(f"{path} must hold a JSON object, found {type(hf).__name__}.")
    return hf


def read_model_config(path, model_type, name, stem, defaults):
    """The `ConfigFields` of the config.json at `path`, checked to describe a `model_type`
    model (its `architectures` all `stem` classes: "Bert" for `BertModel`, `BertForMaskedLM`,
    ...), with `defaults` (transformers' config class defaults) for the fields it leaves out."""
    hf = read_config(path)
    if hf.get("model_type") != model_type:
        raise ValueError(
            f'{path}: `model_type` must be "{model_type}", found {hf.get("model_type")!r}; only '
            f"{name} checkpoints can be loaded by `{model_type}_from_pretrained`."
        )
    architectures = hf.get("architectures") or []
    foreign = [arch for arch in architectures if not str(arch).startswith(stem)]
    if foreign:
        raise ValueError(
            f"{path}: `architectures` must name {name} models ({stem}Model, "
            f"{stem}ForMaskedLM, ...), found {architectures!r}."
        )
    return ConfigFields(path, {**defaults, **hf})


class ConfigFields(dict):
    """The fields of a model's config.json, by name, and the checks that turn them into an
    lmpipe config; every error names the file (`path`) and the field."""

    def __init__(self, path, fields):
        super().__init__(fields)
        self.path = path

    def require(self, wanted, why):
        """Raise unless every field in `wanted` has the value given there (`why` says what
        lmpipe's model is)."""
        for field, value in wanted.items():
            if self[field] != value:
                raise ValueError(
                    f"{self.path}: `{field}` is {self[field]!r}; {why} ({field} {value!r})."
                )

    def activation(self, field):
        """lmpipe's name of the activation that `field` names."""
        if self[field] not in ACTIVATIONS:
            raise ValueError(
                f"{self.path}: unsupported `{field}` {self[field]!r}; expected one of "
                f"{sorted(ACTIVATIONS)}."
            )
        return ACTIVATIONS[self[field]]

    def config(self, config_class, name, **fields):
        """`config_class(**fields)`, its validation errors naming the file (`name`: the
        family's, "BERT")."""
        try:
            return config_class(**fields)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{self.path} does not describe a valid {name}: {error}") from error


def read_checkpoint(directory, name, config_from_hf):
    """`(config, tensors, path)` of a Hugging Face checkpoint folder (`name`'s, for messages):
    `config_from_hf` of its config.json, every tensor of its model.safetensors by name, and
    that file's path."""
    directory = checkpoint_directory(directory, name)
    config = config_from_hf(directory / CONFIG_FILE)
    path = directory / WEIGHTS_FILE
    return config, read_tensors(path), path


def read_tensors(path):
    """Every tensor of the safetensors file at `path`, by name."""
    try:
        return load_file(str(path))
    except Exception as error:  # safetensors raises its own error types for corrupt files
        raise ValueError(f"{path} could not be read as a safetensors file: {error}") from error
