"""The training loop every pipeline shares: strategy, optimizer, resumable checkpoints, fit."""

import contextlib
import inspect
import os
import time
import warnings

import keras
import tensorflow as tf

from lmpipe.arguments import check_number
from lmpipe.kernels import cpu_flags as _cpu_flags
from lmpipe.kernels import ops_only
from lmpipe.layers.initializers import seeded
from lmpipe.training.checkpointing import (
    CheckpointCallback,
    StopOnNonFiniteLoss,
    TrainingCheckpoint,
)
from lmpipe.training.data_service import check_data_service, from_data_service
from lmpipe.training.distribution import (
    check_strategy,
    distributed_dataset,
    distribution_strategy,
    is_chief,
    per_replica_batch_size,
)
from lmpipe.training.optimizers import adamw
from lmpipe.training.preemption import checkpoint_on_preemption

MIXED_PRECISION = (None, "float32", "mixed_bfloat16", "mixed_float16", "auto")
JIT_COMPILE = (False, True, "auto")
# CPU features with bfloat16 arithmetic in hardware (/proc/cpuinfo's names), where oneDNN runs
# bfloat16 matmuls at about twice the float32 rate; elsewhere bfloat16 is emulated, slower.
BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def automatic_precision():
    """`(policy, reason)`: the precision `mixed_precision="auto"` trains in on this machine.

    "mixed_bfloat16" where bfloat16 runs in hardware: every GPU TensorFlow sees of compute
    capability 8.0 or more (Ampere and later), or, without GPUs, a CPU with AVX512_BF16 or AMX;
    "float32" elsewhere (older GPUs want float16 with loss scaling, which changes the numbers
    more: asked for by name, not picked).
    """
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        capabilities = [
            tf.config.experimental.get_device_details(gpu).get("compute_capability", (0, 0))
            for gpu in gpus
        ]
        if min(capabilities) >= (8, 0):
            return "mixed_bfloat16", f"GPUs of compute capability {min(capabilities)}"
        return "float32", f"a GPU of compute capability {min(capabilities)} (below 8.0)"
    flags = sorted(set(BFLOAT16_CPU_FLAGS) & _cpu_flags())
    if flags:
        return "mixed_bfloat16", f"a CPU with {' and '.join(flags)}"
    return "float32", "a CPU without bfloat16 arithmetic (avx512_bf16, amx_bf16)"


def automatic_jit_compile():
    """`(jit_compile, reason)`: whether `jit_compile="auto"` XLA-compiles the train step here.

    Yes where there are GPUs (unless op determinism is on: XLA does not make every op
    deterministic); no on CPUs, where the XLA step is slower than TensorFlow's kernels
    (`benchmarks/training.py`: about 0.8x in float32 and 0.6x in bfloat16 of the step without
    XLA on a 2-core AVX-512 CPU; XLA's CPU matmul does not use AMX).
    """
    if not tf.config.list_physical_devices("GPU"):
        return False, "CPUs, where XLA's train step is slower than without it"
    if _op_determinism_enabled():
        return False, "GPUs with op determinism on, which XLA does not give every op"
    return True, "GPUs"


def _op_determinism_enabled():
    """Whether `tf.config.experimental.enable_op_determinism()` was called (TensorFlow answers
    it outside its public API, as Keras asks it)."""
    from tensorflow.python.framework import config

    return config.is_op_determinism_enabled()


@contextlib.contextmanager
def dtype_policy(name):
    """Build models under the Keras dtype policy `name` (None: leave the policy as it is;
    "auto": `automatic_precision`'s)."""
    if name not in MIXED_PRECISION:
        raise ValueError(f"`mixed_precision` must be one of {MIXED_PRECISION}, got {name!r}.")
    if name == "auto":
        name, _ = automatic_precision()
    if name is None:
        yield
        return
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


@contextlib.contextmanager
def one_pass_without_warning():
    """Keras warns "Your input ran out of data" when it evaluates a finite dataset of unknown
    length to its end, which is what a pass over the data is: not a problem to report."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        yield


class EvaluateEachEpoch(keras.callbacks.Callback):
    """Evaluate on `dataset` at each epoch's end; add its metrics to the logs as `val_<name>`.

    Put before Keras' `History` and progress bar (which come last), so both see the values.
    """

    def __init__(self, dataset):
        super().__init__()
        self.dataset = dataset

    def on_epoch_end(self, epoch, logs=None):
        with one_pass_without_warning():
            results = self.model.evaluate(self.dataset, return_dict=True, verbose=0)
        if logs is not None:
            logs.update({f"val_{name}": float(value) for name, value in results.items()})


class StepScalars(keras.callbacks.Callback):
    """Write TensorBoard scalars at every step to `<log_dir>/steps`: the step's logs (`loss`
    and the metrics, as Keras reports them: means since the epoch began), `learning_rate`
    (the one the step's update used) and `examples_per_second` (global batch over the
    time since the previous step), keyed by the optimizer's update count, so a resumed run
    goes on where the first one stopped."""

    def __init__(self, log_dir, batch_size):
        super().__init__()
        self.log_dir = os.path.join(log_dir, "steps")
        self.batch_size = batch_size
        self.writer = None
        self.last = None

    def on_train_begin(self, logs=None):
        self.writer = tf.summary.create_file_writer(self.log_dir)
        self.last = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
        optimizer = self.model.optimizer
        step = int(optimizer.iterations.numpy())
        with self.writer.as_default(step=step):
            for name, value in (logs or {}).items():
                tf.summary.scalar(name, float(value))
            tf.summary.scalar("learning_rate", _learning_rate_of_update(optimizer, step))
            tf.summary.scalar("examples_per_second", self.batch_size / max(seconds, 1e-9))

    def on_train_end(self, logs=None):
        self.writer.flush()
        self.writer.close()


def _learning_rate_of_update(optimizer, step):
    """The learning rate the optimizer's `step`-th update used (its schedule at `step - 1`:
    after the update, `optimizer.learning_rate` is already the next one's)."""
    schedule = getattr(optimizer, "_learning_rate", None)
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return float(schedule(step - 1))
    return float(optimizer.learning_rate)


def _jit_compile_per_replica(model, enabled):
    """Have `model` XLA-compile its forward pass per replica (see
    `lmpipe.models.trainable.TrainingSteps.jit_compile_per_replica`), or stop doing so."""
    if hasattr(model, "jit_compile_per_replica"):
        model.jit_compile_per_replica(enabled)
    elif enabled:
        raise ValueError(
            f"`jit_compile=True` with several replicas needs a model that compiles its forward "
            f"pass per replica (an lmpipe TrainingSteps model); {type(model).__name__} is not "
            "one: train it with jit_compile=False."
        )


def _accumulate_gradients(model, steps):
    """Have `model` accumulate the gradients of `steps` micro-batches per update (see
    `lmpipe.models.trainable.TrainingSteps.accumulate_gradients`)."""
    if hasattr(model, "accumulate_gradients") and hasattr(model, "loss_weights"):
        model.accumulate_gradients(steps)
    elif steps > 1:
        raise ValueError(
            f"`accumulation_steps={steps}` needs a model that accumulates gradients with exact "
            f"loss denominators (an lmpipe TrainingSteps model with loss_weights); "
            f"{type(model).__name__} is not one: train it with accumulation_steps=1."
        )


class History(keras.callbacks.History):
    """A Keras `History` that can concatenate the histories of several `fit` calls."""

    def __init__(self):
        super().__init__()
        self.epoch = []

    def extend(self, other):
        for key, values in other.history.items():
            self.history.setdefault(key, []).extend(values)
        self.epoch.extend(other.epoch)
        self.params = other.params


def train(
    build_model,
    make_dataset,
    *,
    run_config,
    batch_size,
    epochs,
    steps_per_epoch,
    strategy=None,
    checkpoint_dir=None,
    learning_rate=1e-4,
    warmup_steps=None,
    weight_decay=0.01,
    clipnorm=1.0,
    mixed_precision=None,
    jit_compile=False,
    accumulation_steps=1,
    data_service=None,
    checkpoint_every=None,
    log_dir=None,
    callbacks=None,
    verbose="auto",
    model=None,
    seed=None,
    optimizer=None,
    keep_best=None,
):
    """Build (or reuse) a model under `strategy`, restore its checkpoint, and fit it.

    Args:
        build_model: `() -> keras.Model`, called inside the strategy scope (and dtype policy).
        make_dataset: `(per_replica_batch_size, input_context, skip_batches) -> tf.data.Dataset`
            of `(features, labels)`, infinite, skipping the first `skip_batches` batches (the
            batch size is of one update: `accumulation_steps` micro-batches).
        run_config: JSON-serializable description of the model, checked on resume.
        batch_size: global batch size, divided among the replicas (must divide evenly).
        epochs, steps_per_epoch: `epochs * steps_per_epoch` steps in all.

    Training options (what a pipeline's `fit` takes as `**training_options`, see
    `TRAINING_OPTIONS`; a pipeline may change a default, e.g. `learning_rate`; their values
    are checked before anything runs, see `check_training_values`):
        strategy: None (one device), "mirrored", "multi_worker" (cluster from TF_CONFIG) or a
            `tf.distribute.Strategy`.
        checkpoint_dir: checkpoints and TensorBoard logs; the same run started again (after a
            crash) continues from the latest intact checkpoint, and a finished run is not
            repeated. Multi-worker runs need it on storage that every worker shares.
        learning_rate: peak learning rate of AdamW (linear warmup, then linear decay to 0).
        warmup_steps: warmup of the schedule; defaults to 10% of all steps.
        weight_decay: AdamW's decoupled weight decay (not on biases and LayerNorms).
        clipnorm: global gradient-norm clipping.
        mixed_precision: None, "mixed_bfloat16" or "mixed_float16" (Keras adds loss scaling),
            or "auto": bfloat16 where the hardware computes in it (Ampere and later GPUs,
            CPUs with AVX512_BF16 or AMX), float32 elsewhere; `fit` says which it picked.
        jit_compile: XLA-compile the train step; with several replicas, each replica's
            forward and backward pass (the loss and the optimizer update run without XLA).
            "auto": XLA on GPUs, not on CPUs (where it is no faster, see
            `automatic_jit_compile`); `fit` says which it picked.
        accumulation_steps: each optimizer update sums the gradients of this many batches of
            `batch_size`, run one after the other: the update of a batch
            `accumulation_steps` times larger with the activation memory of one (see
            `lmpipe.models.gradient_accumulation`). Steps, `steps_per_epoch`,
            `warmup_steps` and `checkpoint_every` count updates.
        data_service: the address of a tf.data service dispatcher (`grpc://host:port`, see
            `lmpipe data-service`): the training batches are built by its workers, not on
            this machine's CPUs (see `lmpipe.training.data_service` for what stays exact).
        checkpoint_every: also checkpoint every this many steps (else at epoch ends).
        With `checkpoint_dir`, SIGTERM checkpoints the next step and raises `Preempted`, a
        `SystemExit` with code 42 (see `lmpipe.training.preemption`); all the workers of a
        multi-worker run stop at the same step.
        A step whose loss is NaN or infinite stops training with a `FloatingPointError`;
        the checkpoints written before it are kept.
        log_dir: TensorBoard logs (defaults to `<checkpoint_dir>/logs`).
        callbacks: more Keras callbacks.
        verbose: Keras' progress bar setting.

    Set by the pipeline:
        model: an existing model to keep training (must have been built in `strategy`).
        seed: the seed of the new model's initial weights and dropout (see `seeded`): the
            same seed gives the same training run. The caller's random state is not changed.
        optimizer: None for AdamW with BERT's schedule (from `learning_rate`, `warmup_steps`,
            `weight_decay`, `clipnorm`), or `(total_steps) -> keras optimizer`, called inside
            the strategy scope, for pipelines with their own optimizer and schedule.
        keep_best: a `KeepBest` callback (validation given): the model returned has the best
            epoch's weights, and training may stop early; its state is kept in
            `checkpoint_dir` across restarts.

    Returns:
        `(model, history)`.
    """
    check_training_values(
        strategy=strategy,
        learning_rate=learning_rate,
        warmup_steps=warmup_steps,
        weight_decay=weight_decay,
        clipnorm=clipnorm,
        mixed_precision=mixed_precision,
        jit_compile=jit_compile,
        checkpoint_every=checkpoint_every,
        accumulation_steps=accumulation_steps,
        data_service=data_service,
    )
    for name, value in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
        check_number(name, value, minimum=1, integer=True)
    total_steps = epochs * steps_per_epoch
    if optimizer is None and warmup_steps is not None and warmup_steps > total_steps:
        raise ValueError(
            f"`warmup_steps`={warmup_steps} exceeds the {total_steps} training steps "
            f"(epochs={epochs} x steps_per_epoch={steps_per_epoch})."
        )
    strategy = distribution_strategy(strategy)
    if mixed_precision == "auto":
        mixed_precision, reason = automatic_precision()
        if verbose:
            print(f"mixed_precision='auto': {mixed_precision}, for {reason}.")
    if jit_compile == "auto":
        jit_compile, reason = automatic_jit_compile()
        if verbose:
            print(f"jit_compile='auto': {jit_compile}, for {reason}.")
    per_replica = per_replica_batch_size(strategy, batch_size)
    warmup_steps = max(1, total_steps // 10) if warmup_steps is None else warmup_steps
    with dtype_policy(mixed_precision), strategy.scope():
        if model is None:
            with seeded(seed):
                model = build_model()
        if optimizer is None:
            model_optimizer = adamw(
                learning_rate, total_steps, warmup_steps, weight_decay, clipnorm
            )
        else:
            model_optimizer = optimizer(total_steps)
        compile_per_replica = jit_compile is True and strategy.num_replicas_in_sync > 1
        model.compile(
            optimizer=model_optimizer, jit_compile=False if compile_per_replica else jit_compile
        )
        _jit_compile_per_replica(model, compile_per_replica)
        _accumulate_gradients(model, accumulation_steps)
        model.optimizer.build(model.trainable_variables)
    if keep_best is not None:
        keep_best.chief = is_chief(strategy)
    checkpoint = None
    if checkpoint_dir is not None:
        checkpoint = TrainingCheckpoint(checkpoint_dir, model, strategy, run_config)
    try:
        with checkpoint_on_preemption(checkpoint, strategy) as preemption:
            history = _resume_and_fit(
                model,
                checkpoint,
                make_dataset,
                strategy=strategy,
                per_replica=per_replica * accumulation_steps,
                epochs=epochs,
                steps_per_epoch=steps_per_epoch,
                checkpoint_every=checkpoint_every,
                log_dir=log_dir,
                callbacks=callbacks,
                verbose=verbose,
                keep_best=keep_best,
                preemption=preemption,
                data_service=data_service,
            )
    finally:
        if checkpoint is not None:
            checkpoint.close()
    return model, history


def _resume_and_fit(
    model,
    checkpoint,
    make_dataset,
    *,
    strategy,
    per_replica,
    epochs,
    steps_per_epoch,
    checkpoint_every,
    log_dir,
    callbacks,
    verbose,
    keep_best=None,
    preemption=None,
    data_service=None,
):
    """`train`'s second half: restore `checkpoint` (None: none), then fit the steps left;
    with `keep_best`, leave the best epoch's weights in the model; `preemption`: the callback
    that checkpoints and stops on SIGTERM (see `lmpipe.training.preemption`)."""
    total_steps = epochs * steps_per_epoch
    steps_done = 0 if checkpoint is None else checkpoint.restore()
    if keep_best is not None:
        keep_best.load()
    history = History()
    history.set_model(model)
    finished = steps_done >= total_steps
    if finished or (keep_best is not None and keep_best.stopped):
        if verbose:
            how = "finished" if finished else "stopped early"
            print(
                f"Training already {how}: {steps_done} of {total_steps} steps are in "
                f"{checkpoint.directory!r}."
            )
        if keep_best is not None:
            keep_best.restore_best(model)
        return history
    if steps_done and verbose:
        print(
            f"Resuming from step {steps_done} of {total_steps}, the latest checkpoint in "
            f"{checkpoint.directory!r}."
        )

    # The loss check goes first: it stops training before any callback, a checkpoint in
    # particular, sees the weights a non-finite step left.
    callbacks = [StopOnNonFiniteLoss(), *(callbacks or [])]
    if keep_best is not None:
        # After the callbacks (the validation's) that fill the logs it reads; before the
        # checkpoint, so that a checkpoint never runs ahead of the best epoch's state.
        callbacks.append(keep_best)
    if checkpoint is not None:
        callbacks.append(CheckpointCallback(checkpoint, every_steps=checkpoint_every))
    if log_dir is None and checkpoint is not None and is_chief(strategy):
        log_dir = os.path.join(checkpoint.directory, "logs")
    if log_dir is not None:
        callbacks.append(keras.callbacks.TensorBoard(log_dir=log_dir, update_freq="epoch"))
        callbacks.append(StepScalars(log_dir, per_replica * strategy.num_replicas_in_sync))
    if preemption is not None:
        # Last: the step's checkpoint and logs are written before it may stop training.
        callbacks.append(preemption)

    def dataset_from(step):
        def for_pipeline(input_context):
            # Each input pipeline feeds num_replicas / num_pipelines replicas per step.
            if input_context is None:
                batches_per_step = 1
            else:
                batches_per_step = (
                    input_context.num_replicas_in_sync // input_context.num_input_pipelines
                )
            if data_service is None:
                return make_dataset(per_replica, input_context, step * batches_per_step)
            # The service's workers run the graph: TensorFlow's ops only, no lmpipe kernel
            # they may lack (the same batches).
            with ops_only():
                dataset = make_dataset(per_replica, input_context, step * batches_per_step)
            return from_data_service(dataset, data_service)

        return distributed_dataset(strategy, for_pipeline)

    # A run resumed inside an epoch first finishes that epoch, then runs whole epochs.
    first_epoch, offset = divmod(steps_done, steps_per_epoch)
    if offset:
        part = model.fit(
            dataset_from(steps_done),
            initial_epoch=first_epoch,
            epochs=first_epoch + 1,
            steps_per_epoch=steps_per_epoch - offset,
            callbacks=callbacks,
            verbose=verbose,
            shuffle=False,  # the datasets shuffle themselves, deterministically
        )
        history.extend(part)
        first_epoch += 1
    if first_epoch < epochs and not (keep_best is not None and keep_best.stopped):
        part = model.fit(
            dataset_from(first_epoch * steps_per_epoch),
            initial_epoch=first_epoch,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            callbacks=callbacks,
            verbose=verbose,
            shuffle=False,  # the datasets shuffle themselves, deterministically
        )
        history.extend(part)
    if keep_best is not None:
        keep_best.restore_best(model)
    return history


def one_pass_steps(steps, batch_size, what="the corpus"):
    """`steps`, the full batches of `batch_size` in one pass over `what`, as the
    `steps_per_epoch` of a `fit` given none.

    Raises:
        ValueError: when one pass gives no full batch (`steps` is 0).
    """
    if steps == 0:
        raise ValueError(
            f"One pass over {what} gives no full batch of {batch_size}: use a smaller "
            "`batch_size` or give `steps_per_epoch`."
        )
    return steps


# The keyword arguments of `train` that a pipeline's `fit` passes on from its caller, read from
# `train`'s signature so that they are defined (and documented) once; the pipeline sets the
# others itself.
_SET_BY_PIPELINES = (
    "run_config",
    "batch_size",
    "epochs",
    "steps_per_epoch",
    "model",
    "seed",
    "optimizer",
    "keep_best",
)
TRAINING_OPTIONS = tuple(
    name
    for name, parameter in inspect.signature(train).parameters.items()
    if parameter.kind is parameter.KEYWORD_ONLY and name not in _SET_BY_PIPELINES
)


def check_training_options(caller, options, defaults=None, accepted=TRAINING_OPTIONS):
    """The training options a pipeline's `fit` was given, checked, for `train(**...)`.

    Args:
        caller: the method's name for the error message, e.g. "BertPretraining.fit".
        options: the `**training_options` the method received.
        defaults: the pipeline's own defaults (e.g. `{"learning_rate": 3e-4}`), which the
            given options override; the others keep `train`'s defaults.
        accepted: the option names the pipeline takes (all of `TRAINING_OPTIONS` by default).

    Returns:
        A new dict, `{**defaults, **options}`.

    Raises:
        TypeError: for an option not in `accepted`, naming it and listing the accepted ones
            (as Python does for an unexpected keyword argument), before any work starts.

    Example:

        >>> check_training_options("Pipe.fit", {"learning_rate": 0.1}, {"learning_rate": 3e-4})
        {'learning_rate': 0.1}
        >>> check_training_options("Pipe.fit", {"learnin_rate": 0.1})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: Pipe.fit() got an unknown training option 'learnin_rate'; the training ...
    """
    unknown = [name for name in options if name not in accepted]
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        option = "option" if len(unknown) == 1 else "options"
        raise TypeError(
            f"{caller}() got an unknown training {option} {names}; the training options are "
            f"{', '.join(accepted)}."
        )
    checked = {**(defaults or {}), **options}
    check_training_values(**checked)
    return checked


def check_training_values(**options):
    """Raise a ValueError naming the option and its value unless each given training option
    has a valid value: numbers finite and in range (`learning_rate` > 0, `weight_decay` >= 0,
    `clipnorm` > 0 or None, `warmup_steps` an integer >= 0 or None, `checkpoint_every` an
    integer >= 1 or None, `accumulation_steps` an integer >= 1), `strategy` a known name or a
    `tf.distribute.Strategy`, `mixed_precision` a known policy, `jit_compile` True, False or
    "auto" and `data_service` an address.
    Options not given are not checked.
    """
    ranges = {
        "learning_rate": dict(above=0),
        "weight_decay": dict(minimum=0),
        "clipnorm": dict(above=0, none=True),
        "warmup_steps": dict(minimum=0, integer=True, none=True),
        "checkpoint_every": dict(minimum=1, integer=True, none=True),
        "accumulation_steps": dict(minimum=1, integer=True),
    }
    for name, bounds in ranges.items():
        if name in options:
            check_number(name, options[name], **bounds)
    check_strategy(options.get("strategy"))
    check_data_service(options.get("data_service"))
    if options.get("mixed_precision") not in MIXED_PRECISION:
        raise ValueError(
            f"`mixed_precision` must be one of {MIXED_PRECISION}, got "
            f"mixed_precision={options['mixed_precision']!r}."
        )
    jit_compile = options.get("jit_compile", False)
    if not (isinstance(jit_compile, bool) or jit_compile == "auto"):
        raise ValueError(f"`jit_compile` must be one of {JIT_COMPILE}, got {jit_compile=!r}.")
