"""The training loop every pipeline shares: a model built under a strategy and a dtype policy,
compiled with its optimizer, restored from its checkpoint and fitted for the steps left."""

import os

import keras

from lmpipe.arguments import check_number
from lmpipe.datasets.examples.stream_position import MixturePosition
from lmpipe.kernels import ops_only
from lmpipe.layers.initializers import seeded
from lmpipe.training.callbacks import History, StepScalars, StopOnNonFiniteLoss
from lmpipe.training.checkpointing import CheckpointCallback, TrainingCheckpoint
from lmpipe.training.data_service import WorkerWatch, from_data_service
from lmpipe.training.distribution import (
    distributed_dataset,
    distribution_strategy,
    is_chief,
    per_replica_batch_size,
)
from lmpipe.training.options import TrainingOptions
from lmpipe.training.precision import automatic_jit_compile, automatic_precision, dtype_policy
from lmpipe.training.preemption import checkpoint_on_preemption
from lmpipe.training.schedules import adamw
from lmpipe.training.stream_state import StreamState


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


def hyperparameters(batch_size, options):
    """The training hyperparameters a resumed run must keep: a run's course changes with any
    of them (`warmup_steps` as given: None is the default, 10% of the steps, which extending
    the run may move)."""
    names = ("learning_rate", "warmup_steps", "weight_decay", "clipnorm", "accumulation_steps")
    return {"batch_size": batch_size, **{name: getattr(options, name) for name in names}}


def train(
    build_model,
    make_dataset,
    *,
    run_config,
    batch_size,
    epochs,
    steps_per_epoch,
    options=None,
    model=None,
    seed=None,
    optimizer=None,
    keep_best=None,
):
    """Build (or reuse) a model under the options' strategy, restore its checkpoint, and fit it.

    Args:
        build_model: `() -> keras.Model`, called inside the strategy scope (and dtype policy).
        make_dataset: `(per_replica_batch_size, input_context, skip_batches[, start]) ->
            tf.data.Dataset` of `(features, labels)`, infinite, skipping the first
            `skip_batches` batches; when a resumed run's batches were the seekable stream's
            (`lmpipe.datasets.examples.stream`), it is also given `start`, the
            `StreamPosition` to start at, and `skip_batches` is 0. The batch size is of one update:
            `accumulation_steps` micro-batches.
        run_config: JSON-serializable description of the model, checked on resume.
        batch_size: global batch size, divided among the replicas (must divide evenly).
        epochs, steps_per_epoch: `epochs * steps_per_epoch` steps in all.
        options: the `TrainingOptions` (None: the defaults): strategy, checkpoints, AdamW's
            hyperparameters, precision, accumulation, data service, logs, callbacks.
        model: an existing model to keep training (must have been built in the strategy).
        seed: the seed of the new model's initial weights and dropout (see `seeded`): the
            same seed gives the same training run. The caller's random state is not changed.
        optimizer: None for AdamW with BERT's schedule (from the options' `learning_rate`,
            `warmup_steps`, `weight_decay`, `clipnorm`), or `(total_steps) -> keras
            optimizer`, called inside the strategy scope, for pipelines with their own
            optimizer and schedule.
        keep_best: a `KeepBest` callback (validation given): the model returned has the best
            epoch's weights, and training may stop early; its state is kept in
            `checkpoint_dir` across restarts.

    Returns:
        `(model, history)`.
    """
    options = TrainingOptions() if options is None else options
    if not isinstance(options, TrainingOptions):
        raise ValueError(f"`options` must be TrainingOptions or None, got {options!r}.")
    for name, value in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
        check_number(name, value, minimum=1, integer=True)
    total_steps = epochs * steps_per_epoch
    warmup_steps = options.warmup_steps
    if optimizer is None and warmup_steps is not None and warmup_steps > total_steps:
        raise ValueError(
            f"`warmup_steps`={warmup_steps} exceeds the {total_steps} training steps "
            f"(epochs={epochs} x steps_per_epoch={steps_per_epoch})."
        )
    strategy = distribution_strategy(options.strategy)
    verbose = options.verbose
    mixed_precision, jit_compile = options.mixed_precision, options.jit_compile
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
                options.learning_rate,
                total_steps,
                warmup_steps,
                options.weight_decay,
                options.clipnorm,
            )
        else:
            model_optimizer = optimizer(total_steps)
        compile_per_replica = jit_compile is True and strategy.num_replicas_in_sync > 1
        model.compile(
            optimizer=model_optimizer, jit_compile=False if compile_per_replica else jit_compile
        )
        _jit_compile_per_replica(model, compile_per_replica)
        _accumulate_gradients(model, options.accumulation_steps)
        model.optimizer.build(model.trainable_variables)
        stream = StreamState(strategy)
        if hasattr(model, "track_stream_position"):
            model.track_stream_position(stream.position, stream.mixture_position)
    if keep_best is not None:
        keep_best.chief = is_chief(strategy)
    checkpoint = None
    if options.checkpoint_dir is not None:
        checkpoint = TrainingCheckpoint(
            options.checkpoint_dir,
            model,
            strategy,
            run_config,
            hyperparameters=hyperparameters(batch_size, options),
            stream_state=stream.checkpointed,
        )
    try:
        with checkpoint_on_preemption(checkpoint, strategy) as preemption:
            history = _resume_and_fit(
                model,
                checkpoint,
                make_dataset,
                options,
                strategy=strategy,
                per_replica=per_replica * options.accumulation_steps,
                epochs=epochs,
                steps_per_epoch=steps_per_epoch,
                keep_best=keep_best,
                preemption=preemption,
                stream=stream,
            )
    finally:
        if checkpoint is not None:
            checkpoint.close()
    return model, history


def _resume_and_fit(
    model,
    checkpoint,
    make_dataset,
    options,
    *,
    strategy,
    per_replica,
    epochs,
    steps_per_epoch,
    keep_best=None,
    preemption=None,
    stream=None,
):
    """`train`'s second half: restore `checkpoint` (None: none), then fit the steps left;
    with `keep_best`, leave the best epoch's weights in the model; `preemption`: the callback
    that checkpoints and stops on SIGTERM (see `lmpipe.training.preemption`); `stream`: the
    run's `StreamState` (the position a resume starts the data at)."""
    total_steps = epochs * steps_per_epoch
    verbose, data_service = options.verbose, options.data_service
    steps_done = 0 if checkpoint is None else checkpoint.restore()
    if keep_best is not None:
        keep_best.load(steps_done if checkpoint is not None else None)
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
    global_batch = per_replica * strategy.num_replicas_in_sync
    # Read once, as restored: under several workers each keeps its own first example in the
    # variable while training; the chief's (the global batch's first) is what was saved.
    resumed_after = None if stream is None or not steps_done else stream.last_batch()
    if steps_done and verbose:
        print(
            f"Resuming from step {steps_done} of {total_steps}, the latest checkpoint in "
            f"{checkpoint.directory!r}."
        )
        _describe_resume(resumed_after, stream, global_batch, strategy.num_replicas_in_sync)
    if stream is not None:
        stream.mark_replicas()

    # The loss check goes first: it stops training before any callback, a checkpoint in
    # particular, sees the weights a non-finite step left.
    callbacks = [StopOnNonFiniteLoss(), *options.callbacks]
    if keep_best is not None:
        # After the callbacks (the validation's) that fill the logs it reads; before the
        # checkpoint, so that a checkpoint never runs ahead of the best epoch's state.
        callbacks.append(keep_best)
    if checkpoint is not None:
        callbacks.append(CheckpointCallback(checkpoint, every_steps=options.checkpoint_every))
    log_dir = options.log_dir
    if log_dir is None and checkpoint is not None and is_chief(strategy):
        log_dir = os.path.join(checkpoint.directory, "logs")
    if log_dir is not None:
        callbacks.append(keras.callbacks.TensorBoard(log_dir=log_dir, update_freq="epoch"))
        callbacks.append(StepScalars(log_dir, global_batch))
    if preemption is not None:
        # Last: the step's checkpoint and logs are written before it may stop training.
        callbacks.append(preemption)

    def dataset_from(step):
        # The stream seeks to the batch after the last one trained; other data replays.
        start = None
        if resumed_after is not None:
            start = resumed_after.advanced(global_batch * (1 + step - steps_done))
        skip = 0 if start is not None else step

        def for_pipeline(input_context):
            # Each input pipeline feeds num_replicas / num_pipelines replicas per step.
            if input_context is None:
                batches_per_step = 1
            else:
                batches_per_step = (
                    input_context.num_replicas_in_sync // input_context.num_input_pipelines
                )
            # `start` only where there is one: a `make_dataset` of data that is no stream may
            # take three arguments.
            arguments = (per_replica, input_context, skip * batches_per_step)
            arguments += () if start is None else (start,)
            if data_service is None:
                return make_dataset(*arguments)
            # The service's workers run the graph: TensorFlow's ops only, no lmpipe kernel
            # they may lack (the same batches).
            with ops_only():
                dataset = make_dataset(*arguments)
            return from_data_service(dataset, data_service)

        return distributed_dataset(strategy, for_pipeline)

    watch = None
    if data_service is not None:
        # A lost worker stops the run, where the service would wait forever or go on with
        # part of the data.
        watch = WorkerWatch(data_service)
        callbacks.insert(1, watch)
    try:
        _fit_the_rest(
            model,
            history,
            dataset_from,
            callbacks,
            keep_best,
            steps_done=steps_done,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            verbose=verbose,
        )
    finally:
        if watch is not None:
            watch.stop()
    if keep_best is not None:
        keep_best.restore_best(model)
    return history


def _fit_the_rest(
    model,
    history,
    dataset_from,
    callbacks,
    keep_best,
    *,
    steps_done,
    epochs,
    steps_per_epoch,
    verbose,
):
    """Fit `model` for the steps after `steps_done`, adding to `history`: a run resumed inside
    an epoch first finishes that epoch, then runs whole epochs."""
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


def _describe_resume(last, stream, global_batch, replicas):
    """Say where a resumed run's data starts (`last`: the restored position of the last batch
    trained, None where there is none), and on how many replicas."""
    if last is None:
        print("The data is replayed up to that step (its batches are not a seekable stream).")
        return
    start = last.advanced(global_batch)
    if isinstance(start, MixturePosition):
        where = f"the mixture's example {start.index:,}"
    else:
        where = f"epoch {start.epoch}, window {start.window}, example {start.offset}"
    print(
        f"The stream starts at {where} (the batch after the last one trained): no batch is rebuilt."
    )
    before = stream.restored_replicas()
    if before != replicas:
        print(
            f"The run was checkpointed on {before} replica{'s' if before != 1 else ''} and "
            f"resumes on {replicas}: the global batches go on as they would have, each replica "
            f"taking {global_batch // replicas} examples of each."
        )


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
