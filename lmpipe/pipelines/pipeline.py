"""`Pipeline`, the shape of every family: one options object, and the same data, training,
evaluation, save, load and export methods.

A family (BERT pretraining, translation, word2vec, ...) is a subclass that says what is its
own: its options (a `PipelineOptions` dataclass), its data (`dataset`, `check_data`), its
model (`build_model`) and its export (`write_export`). The base does the rest once for all of
them: `fit` (checks, steps per epoch, seeding, validation, resumable training under any
`tf.distribute` strategy through `lmpipe.training.loop.train`), `evaluate` (a dict of
floats), `save` and `load` (`pipeline.json` holds the family, its options and its model
configuration; one `load` reads any family) and `export`.
"""

import dataclasses
import json
import math
import os
import textwrap

import numpy as np
import tensorflow as tf

from lmpipe.arguments import check_choice, check_number, check_seed, check_texts
from lmpipe.contract import PADDING_MASK
from lmpipe.datasets.corpora.corpus_mixture import CorpusMixture
from lmpipe.datasets.examples.mixture import describe_shares, realized_shares
from lmpipe.datasets.examples.packing import pack_texts
from lmpipe.layers.mean_pooling import MaskedMeanPooling
from lmpipe.models.configs import config_from_dict, config_to_dict
from lmpipe.models.samplers import traced_function
from lmpipe.pipelines import saved_pipeline
from lmpipe.tokenizers.tokenizer import Tokenizer
from lmpipe.training.best_epoch import KeepBest
from lmpipe.training.callbacks import (
    EvaluateEachEpoch,
    ExamplesPerSecond,
    SourceShares,
    one_pass_without_warning,
)
from lmpipe.training.checkpointing import write_json_atomically
from lmpipe.training.loop import one_pass_steps, train
from lmpipe.training.options import TRAINING_OPTIONS, check_training_options

NO_MODEL = "The pipeline has no model yet: call fit() or load() first."
STEPS_FILE = "one_pass_steps.json"
"""Kept in `checkpoint_dir`: the steps of one pass over a file corpus (see `Pipeline.fit`)."""


@dataclasses.dataclass(frozen=True)
class PipelineOptions:
    """The options of a pipeline: frozen, and checked once, when they are made.

    Each family subclasses it with its own fields; all have `seed`, the seed of every random
    choice (data order, masks, initialization, dropout). `to_dict` and `from_dict` are what
    `Pipeline.save` and `load` write and read in `pipeline.json`. A subclass checks its
    values in `check` (calling `super().check()`), and fills derived defaults with
    `self.resolve(name, value)`, so that the saved options are the ones used.
    """

    seed: int = 0

    def __post_init__(self):
        self.check()

    def check(self):
        """Raise a ValueError naming the first option with a bad value."""
        check_seed(self.seed)

    def resolve(self, name, value):
        """Set the derived value of option `name` (from `check`, the object being frozen)."""
        object.__setattr__(self, name, value)

    @classmethod
    def default(cls, name):
        """The default value of option `name`."""
        return {field.name: field.default for field in dataclasses.fields(cls)}[name]

    def to_dict(self):
        """The options as a JSON-serializable dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values, source="the options"):
        """The options `to_dict` wrote; an unknown name is an error naming `source`."""
        if not isinstance(values, dict):
            raise ValueError(f"{source} must be a JSON object, got {type(values).__name__}.")
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"{source} has unknown option(s) {', '.join(unknown)} for {cls.__name__}."
            )
        return cls(**values)

    @classmethod
    def create(cls, caller, values):
        """`cls(**values)`, with a TypeError naming `caller` and the known options for a
        name that is not one."""
        known = [field.name for field in dataclasses.fields(cls)]
        unknown = [name for name in values if name not in known]
        if unknown:
            raise TypeError(
                f"{caller}() got an unexpected option {unknown[0]!r}; its options are "
                f"{', '.join(known)}."
            )
        return cls(**values)


class Pipeline:
    """The base of every pipeline (the role of keras-hub's `Task`).

    Public surface, the same for every family:
        `options`: the family's frozen `PipelineOptions`.
        `config`: the model's configuration (None for families without one).
        `model`: the trained Keras model, None before `fit` or `load`.
        `dataset(data, batch_size, ...)`: the family's batches, `(features, labels)`.
        `fit(data, batch_size, epochs, steps_per_epoch, validation, **training_options)`:
            train; returns the Keras `History`.
        `evaluate(data, batch_size, steps, verbose)`: a dict of floats.
        `save(directory)`, `lmpipe.pipelines.load(directory)` (any family) or
            `Family.load(directory)`.
        `export(base_dir, version=None, overwrite=False)`: a SavedModel for TF Serving.

    A subclass sets `options_class` and implements `dataset` and `build_model`, and the
    hooks it needs (see each method's docstring): `check_data`, `training_batches`,
    `evaluation_batches`, `steps_in_one_pass`, `optimizer`, `derived_metrics`,
    `tokenizers`, `saved_state`/`restore_state`, `write_export`.
    """

    options_class = PipelineOptions
    # The training options `fit` accepts (fields of `TrainingOptions`), and the family's
    # defaults for some of them.
    training_options = TRAINING_OPTIONS
    training_defaults = {}
    # Whether `fit` adds `examples_per_second` to each epoch's logs (the progress bar's line
    # and the history).
    reports_throughput = False
    default_batch_size = 32
    default_epochs = 1
    # How `fit` and `evaluate` name the data in errors.
    data_name = "the corpus"
    # The methods that predict from texts (`fill_mask`, `classify`, ...): what `lmpipe
    # predict` offers for the family, the first its default.
    predictions = ()
    # What `lmpipe evaluate` reads for the family: "corpus" (text files), "pairs" (TSV of
    # translations), "labelled" (labelled texts), "tagged" (tagged words), "questions" (SQuAD).
    evaluation_data = "corpus"

    _families = {}

    def __init_subclass__(cls, **keywords):
        super().__init_subclass__(**keywords)
        Pipeline._families[cls.__name__] = cls

    def __init__(self, config=None, **options):
        self.options = self.options_class.create(type(self).__name__, options)
        self.config = config
        self.model = None

    # Data -------------------------------------------------------------------------------------

    def dataset(self, data, batch_size, epochs=None, input_context=None):
        """The family's `(features, labels)` batches of `data` (see the family)."""
        raise NotImplementedError

    def check_data(self, data, name="data"):
        """`data` checked (and converted: a path to a corpus, ...) before any work; what
        `fit` and `evaluate` pass on. The base accepts anything."""
        del name
        return data

    def training_batches(self, data, per_replica, input_context):
        """The endless training batches of one input pipeline (`per_replica` examples each)."""
        return self.dataset(data, per_replica, input_context=input_context)

    def evaluation_batches(self, data, batch_size, steps):
        """The batches `evaluate` runs: one pass, or endless ones when `steps` is given."""
        return self.dataset(data, batch_size, epochs=None if steps else 1)

    def steps_in_one_pass(self, data, batch_size):
        """Full batches of `batch_size` in one pass over `data` (the default
        `steps_per_epoch`); the base counts them by building them."""
        return batch_count(self.dataset(data, batch_size, epochs=1))

    # Model ------------------------------------------------------------------------------------

    def build_model(self):
        """A new, untrained Keras model of the pipeline (built inside the strategy's scope)."""
        raise NotImplementedError

    def require_model(self):
        """The trained model; a ValueError when there is none yet."""
        if self.model is None:
            raise ValueError(NO_MODEL)
        return self.model

    def run_config(self):
        """What identifies a training run (checked when a run resumes): the model's
        configuration and the options."""
        config = None if self.config is None else config_to_dict(self.config)
        return {"model": config, **self.options.to_dict()}

    # Training ---------------------------------------------------------------------------------

    def optimizer(self, training_options):
        """None for AdamW with BERT's schedule, or `(total_steps) -> optimizer` for a family
        with its own, made from the `TrainingOptions` `training_options`."""
        del training_options
        return None

    def before_fit(self, data):
        """Called by `fit` after the checks, before anything trains (e.g. to learn the
        vocabularies the data needs)."""

    def after_fit(self):
        """Called by `fit` after training (e.g. to drop functions traced for the old model)."""

    def fit(
        self,
        data,
        batch_size=None,
        epochs=None,
        steps_per_epoch=None,
        validation=None,
        monitor="val_loss",
        patience=None,
        **training_options,
    ):
        """Train on `data`; return the Keras `History`.

        A pipeline that already has a model (from an earlier `fit` or `load`) keeps training
        it, unless `checkpoint_dir` is given (then the checkpoints say where to start).

        Args:
            data: the family's training data (a corpus, sentence pairs, labelled examples).
            batch_size: global batch size, divided among the replicas (must divide evenly);
                the family's default when None.
            epochs: number of epochs of `steps_per_epoch` steps; the family's default.
            steps_per_epoch: defaults to the full batches of one pass over `data`.
            validation: data evaluated at the end of every epoch; its metrics appear in the
                history with a `val_` prefix. With validation the model left at the end has
                the weights of the epoch with the best `monitor` (kept in `checkpoint_dir`
                across restarts, see `lmpipe.training.best_epoch`).
            monitor: the validation metric that picks the best epoch, e.g. `"val_loss"`
                (lower is better for losses and perplexities), `"val_accuracy"`.
            patience: with validation, stop after this many epochs without a gain in
                `monitor` (early stopping); None: train every epoch.
            **training_options: the fields of `lmpipe.training.options.TrainingOptions`
                (`strategy`, `checkpoint_dir`, `learning_rate`, `warmup_steps`,
                `weight_decay`, `clipnorm`, `mixed_precision`, `jit_compile`,
                `accumulation_steps`, `checkpoint_every`, `log_dir`, `callbacks`, `verbose`),
                with the family's defaults (`training_defaults`). With `accumulation_steps=N`
                each update trains on N batches of `batch_size`, and a step (of
                `steps_per_epoch`) is one update.
        """
        caller = f"{type(self).__name__}.fit"
        options = check_training_options(
            caller, training_options, self.training_defaults, self.training_options
        )
        batch_size = self.default_batch_size if batch_size is None else batch_size
        epochs = self.default_epochs if epochs is None else epochs
        check_number("batch_size", batch_size, minimum=1, integer=True)
        check_number("epochs", epochs, minimum=1, integer=True)
        check_number("steps_per_epoch", steps_per_epoch, minimum=1, integer=True, none=True)
        data = self.check_data(data)
        if validation is not None:
            validation = self.check_data(validation, "validation")
        elif patience is not None:
            raise ValueError("`patience` (early stopping) needs `validation` data to watch.")
        keep_best = None
        if validation is not None:
            keep_best = KeepBest(monitor, patience, options.checkpoint_dir, verbose=options.verbose)
        self.before_fit(data)
        if steps_per_epoch is None:
            update_batch = batch_size * options.accumulation_steps
            steps = self._counted_steps(data, update_batch, options.checkpoint_dir)
            steps_per_epoch = one_pass_steps(steps, update_batch, self.data_name)
        if validation is not None:
            batches = self.evaluation_batches(validation, batch_size, None)
            if not has_a_batch(batches):  # else the first epoch would end without val_ metrics
                raise ValueError(
                    f"`validation` makes no batch of `batch_size`={batch_size} examples: give "
                    "more validation data, a smaller batch size, or no validation."
                )
            callbacks = (EvaluateEachEpoch(batches), *options.callbacks)
            options = dataclasses.replace(options, callbacks=callbacks)
        if self.reports_throughput:
            examples = ExamplesPerSecond(batch_size * options.accumulation_steps)
            options = dataclasses.replace(options, callbacks=(*options.callbacks, examples))
        if isinstance(data, CorpusMixture):
            # Logged at each epoch's end, from the mixture's schedule of the examples trained.
            def shares(trained):
                return [(name, share) for name, share, _ in realized_shares(data, 0, trained)]

            logged = SourceShares(shares, batch_size * options.accumulation_steps)
            options = dataclasses.replace(options, callbacks=(*options.callbacks, logged))
        optimizer = self.optimizer(options)
        previous = self.model if options.checkpoint_dir is None else None

        def make_dataset(per_replica, input_context, skip, start=None):
            if start is None:
                return self.training_batches(data, per_replica, input_context).skip(skip)
            return self.training_batches(data, per_replica, input_context, start=start)

        self.model, history = train(
            self.build_model,
            make_dataset,
            run_config=self.run_config(),
            batch_size=batch_size,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            model=previous,
            seed=self.options.seed,
            optimizer=optimizer,
            keep_best=keep_best,
            options=options,
        )
        self.after_fit()
        if isinstance(data, CorpusMixture) and options.verbose:
            # The examples of every step trained so far (a resumed run's too) follow the
            # mixture's schedule from its first example.
            steps = int(self.model.optimizer.iterations.numpy())
            trained = steps * batch_size * options.accumulation_steps
            print(f"The mixture's sources in the {trained:,} examples trained:")
            print(textwrap.indent(describe_shares(data, 0, trained), "  "))
        return history

    def _counted_steps(self, data, batch_size, checkpoint_dir):
        """`steps_in_one_pass(data, batch_size)`, kept in `checkpoint_dir` for data with a
        `fingerprint()` (file corpora), so that a resumed run (or a rerun) of the same
        configuration on the same files does not count them again: on a large corpus the
        count is a pass over all its examples."""
        fingerprint = getattr(data, "fingerprint", lambda: None)()
        if checkpoint_dir is None or fingerprint is None:
            return self.steps_in_one_pass(data, batch_size)
        key = json.loads(
            json.dumps(
                {"data": fingerprint, "batch_size": batch_size, "run": self.run_config()},
                default=str,
            )
        )
        path = os.path.join(checkpoint_dir, STEPS_FILE)
        try:
            with tf.io.gfile.GFile(path) as file:
                kept = json.load(file)
            if kept.get("key") == key:
                return int(kept["steps"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError, tf.errors.OpError):
            pass  # none yet, or not readable: count again
        steps = self.steps_in_one_pass(data, batch_size)
        write_json_atomically(path, {"key": key, "steps": steps})
        return steps

    # Evaluation -------------------------------------------------------------------------------

    def evaluation_model(self, batch_size):
        """The model `evaluate` runs on batches of `batch_size` (the trained one)."""
        del batch_size
        model = self.require_model()
        if not model.compiled:
            # A loaded model may come without an optimizer; evaluation needs none.
            model.compile(optimizer="sgd")
        return model

    def derived_metrics(self, results):
        """More metrics computed from the evaluated ones (e.g. perplexity); the base adds
        none."""
        return results

    def evaluate(self, data, batch_size=None, steps=None, verbose=0):
        """The losses and metrics of the trained model on `data`, as a dict of floats.

        Args:
            data: data of the kind `fit` takes.
            batch_size: examples per batch; the family's default when None.
            steps: evaluate this many batches (drawn as in training); None: one pass.
            verbose: Keras' progress bar setting (0: silent).
        """
        batch_size = self.default_batch_size if batch_size is None else batch_size
        check_number("batch_size", batch_size, minimum=1, integer=True)
        check_number("steps", steps, minimum=1, integer=True, none=True)
        data = self.check_data(data)
        model = self.evaluation_model(batch_size)
        dataset = self.evaluation_batches(data, batch_size, steps)
        with one_pass_without_warning():
            results = model.evaluate(dataset, steps=steps, return_dict=True, verbose=verbose)
        return self.derived_metrics({name: float(value) for name, value in results.items()})

    # Save, load, export -----------------------------------------------------------------------

    def tokenizers(self):
        """`{folder name: tokenizer}` that `save` writes beside the model."""
        return {}

    def saved_state(self):
        """What `load` needs besides the options, the configuration and the model, as a
        JSON-serializable dict (e.g. the batch size a model's memory was built for)."""
        return {}

    def restore_state(self, state):
        """Take back what `saved_state` returned, after `load` has made the pipeline."""
        del state

    def write_model(self, directory):
        """Write the trained model into `directory` (the base: `model.keras`)."""
        self.require_model().save(saved_pipeline.model_path(directory))

    def read_model(self, saved):
        """The trained model of the `SavedPipeline` `saved` (the base: its `model.keras`)."""
        return saved.keras_model()

    def save(self, directory):
        """Write the pipeline to `directory` (replacing what is there atomically): its
        tokenizer(s), `pipeline.json` (family, options, model configuration) and the model."""
        self.require_model()
        description = {
            "options": self.options.to_dict(),
            "config": None if self.config is None else config_to_dict(self.config),
            "state": self.saved_state(),
        }
        saved_pipeline.save_pipeline(
            directory, type(self).__name__, description, self.tokenizers(), self.write_model
        )

    @classmethod
    def load(cls, directory):
        """The pipeline saved in `directory`, with its trained model; it must be a `cls`
        (`lmpipe.pipelines.load` loads any family)."""
        saved = saved_pipeline.SavedPipeline(directory)
        family = Pipeline._families.get(saved.kind)
        if family is None or (cls is not Pipeline and not issubclass(family, cls)):
            expected = "a pipeline" if cls is Pipeline else f"a {cls.__name__}"
            raise ValueError(f"{saved.path} describes a {saved.kind!r} pipeline, not {expected}.")
        return family.from_saved(saved)

    @classmethod
    def from_saved(cls, saved):
        """The pipeline a `SavedPipeline` holds (`load`'s second half)."""
        description = saved.description
        options = cls.options_class.from_dict(description.get("options"), f"{saved.path} options")
        config = description.get("config")
        if config is not None:
            config = config_from_dict(config, f"{saved.path} config")
        pipeline = cls.from_parts(saved, config, options)
        if pipeline.model is None:  # `from_parts` may have read it (e.g. for its encoder)
            pipeline.model = pipeline.read_model(saved)
        pipeline.restore_state(description.get("state") or {})
        return pipeline

    @classmethod
    def from_parts(cls, saved, config, options):
        """A new pipeline from what `saved` holds, before its model is read (the base: one
        tokenizer, the configuration and the options)."""
        return cls(saved.tokenizer(), config=config, **options.to_dict())

    def export(self, base_dir, version=None, overwrite=False, **export_options):
        """Export a SavedModel that TensorFlow Serving loads to `<base_dir>/<version>/`;
        return its path. `version` defaults to the next integer; an existing version is an
        error unless `overwrite`. The family's signatures are in its `write_export`."""
        self.require_model()
        return self.write_export(base_dir, version, overwrite, **export_options)

    def write_export(self, base_dir, version, overwrite):
        """`export`'s family part."""
        raise NotImplementedError


class TokenizerPipeline(Pipeline):
    """A pipeline of one tokenizer and one model configuration (BERT, ALBERT, XLNet, GPT,
    ELMo, the classifier).

    Subclasses set `config_classes` (the configurations they accept) and `default_config`
    (sized to the tokenizer and the options), and may add `check_config`. The configuration's
    vocabulary must be the tokenizer's.
    """

    config_classes = ()
    # The special tokens the pipeline's data and model use (see `Tokenizer.roles`).
    tokenizer_roles = ("pad", "unk", "cls", "sep", "mask")

    def __init__(self, tokenizer, config=None, **options):
        super().__init__(None, **options)
        if not isinstance(tokenizer, Tokenizer):
            raise ValueError(
                "`tokenizer` must be a WordPieceTokenizer, SentencePieceTokenizer or "
                f"BytePairTokenizer, got {type(tokenizer).__name__}."
            )
        missing = [role for role in self.tokenizer_roles if role not in tokenizer.roles]
        if missing:
            raise ValueError(
                f"{type(self).__name__} needs a tokenizer with {', '.join(missing)} tokens; "
                f"the {type(tokenizer).__name__} has only {', '.join(tokenizer.roles)} "
                "(use a WordPieceTokenizer or SentencePieceTokenizer)."
            )
        self.tokenizer = tokenizer
        config = self.default_config() if config is None else config
        if self.config_classes and not isinstance(config, self.config_classes):
            names = " or ".join(config_class.__name__ for config_class in self.config_classes)
            raise ValueError(f"`config` must be a {names} or None, got {config!r}.")
        vocabulary_size = getattr(config, "vocabulary_size", None)
        if vocabulary_size is not None and vocabulary_size != tokenizer.vocabulary_size:
            raise ValueError(
                f"The model's vocabulary_size ({vocabulary_size}) differs from the "
                f"tokenizer's ({tokenizer.vocabulary_size})."
            )
        self.check_config(config)
        self.config = config

    def default_config(self):
        """The model configuration when none is given, sized to the tokenizer."""
        raise NotImplementedError

    def check_config(self, config):
        """Raise unless `config` fits the options (e.g. its positions hold `seq_len`)."""

    def tokenizers(self):
        return {"tokenizer": self.tokenizer}

    def export_encoder(self, serving_model, base_dir, version, overwrite, outputs=None, **packing):
        """Export `serving_model` (int32 `token_ids`, `segment_ids`, `padding_mask` in) with
        `serving_default` and the raw-text signatures of `lmpipe.serving.export_saved_model`,
        texts packed to the pipeline's `seq_len` (`packing`: its `pairs`, `layout`,
        `extra_signatures`); `outputs` (None: all) picks the outputs served, as there."""
        from lmpipe.serving import export_saved_model

        return export_saved_model(
            base_dir,
            serving_model,
            self.tokenizer,
            self.options.seq_len,
            version=version,
            overwrite=overwrite,
            outputs=outputs,
            **packing,
        )


class EncoderPipeline(TokenizerPipeline):
    """A `TokenizerPipeline` whose model has an encoder (`self.encoder`: `token_ids`,
    `segment_ids`, `padding_mask` -> `sequence_output`, `pooled_output`), texts packed the
    `packing_layout` way: BERT, ALBERT, XLNet and the classifier. Adds `embed`."""

    packing_layout = "bert"
    predictions = ("embed",)

    @property
    def encoder(self):
        raise NotImplementedError

    # Whether the model carries pretraining heads that `save_pretrained` can write.
    pretraining_heads = False

    def save_pretrained(self, directory, heads=None):
        """Write the trained model and the tokenizer as a Hugging Face checkpoint folder: with
        `heads` (the default for the BERT, ALBERT and XLNet pretraining pipelines) the model
        and its pretraining heads, `BertForPreTraining` / `BertForMaskedLM`,
        `AlbertForPreTraining` / `AlbertForMaskedLM` or `XLNetLMHeadModel`
        (`lmpipe.interop.hf.save_pretrainer`); without, the encoder alone, `BertModel`,
        `AlbertModel` or `XLNetModel` (`lmpipe.interop.hf.save_pretrained`)."""
        from lmpipe.interop.hf.writer import save_pretrained, save_pretrainer

        heads = self.pretraining_heads if heads is None else heads
        if heads and not self.pretraining_heads:
            raise ValueError(f"{type(self).__name__} has no pretraining heads to write.")
        if self.config is None:
            raise ValueError(
                f"{type(self).__name__} has no encoder configuration of its own; write its "
                "encoder with lmpipe.interop.hf.save_pretrained(directory, pipe.encoder, config)."
            )
        model = self.require_model()
        if heads:
            save_pretrainer(directory, model, self.config, self.tokenizer)
        else:
            save_pretrained(directory, self.encoder, self.config, self.tokenizer)

    def embed(self, texts, pooling="mean", batch_size=64):
        """One vector per text, a float32 numpy array `[N, hidden_dim]`.

        Each text is packed alone (cut to `seq_len`) and run through the encoder. `pooling`:
        "mean", the mean of `sequence_output` over the text's real tokens (special tokens
        included), the usual sentence embedding; or "pooled", the encoder's `pooled_output`
        (BERT's tanh layer on `[CLS]`, trained by the pair objective; XLNet's on its last
        token).
        """
        texts = check_texts("texts", texts)
        check_choice("pooling", pooling, ("mean", "pooled"))
        check_number("batch_size", batch_size, minimum=1, integer=True)
        encoder = self.encoder
        tokenizer, seq_len, layout = self.tokenizer, self.options.seq_len, self.packing_layout
        mean = MaskedMeanPooling(dtype="float32")

        def make():
            @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
            def embed(text):
                features = pack_texts(tokenizer, text, seq_len, layout=layout)
                outputs = encoder(features, training=False)
                if pooling == "pooled":
                    return tf.cast(outputs["pooled_output"], tf.float32)
                return mean(outputs["sequence_output"], features[PADDING_MASK])

            return embed

        function = traced_function(encoder, ("embed", pooling, seq_len, layout), make)
        vectors = [
            function(tf.constant(texts[start : start + batch_size], tf.string)).numpy()
            for start in range(0, len(texts), batch_size)
        ]
        width = encoder.output["sequence_output"].shape[-1]
        return np.concatenate(vectors) if vectors else np.zeros([0, width], np.float32)


def load(directory):
    """The pipeline (of any family) saved in `directory` by its `save`."""
    return Pipeline.load(directory)


def perplexity(loss):
    """exp(`loss`), infinite where that overflows."""
    return math.exp(loss) if loss < 700 else math.inf


def batch_count(dataset):
    """The number of elements of a finite `tf.data.Dataset`, by walking it."""
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1).numpy())


def has_a_batch(dataset):
    """Whether a `tf.data.Dataset` yields anything (it builds the first element only)."""
    return any(True for _ in dataset.take(1))
