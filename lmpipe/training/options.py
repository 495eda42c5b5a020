"""`TrainingOptions`, the options of the training loop: what a pipeline's `fit` takes as
`**training_options`, checked once, when they are made, and passed on as one frozen object."""

import dataclasses

from lmpipe.arguments import check_number
from lmpipe.training.data_service import check_data_service
from lmpipe.training.distribution import check_strategy
from lmpipe.training.precision import JIT_COMPILE, MIXED_PRECISION


@dataclasses.dataclass(frozen=True)
class TrainingOptions:
    """The options of `lmpipe.training.loop.train`, checked when they are made (a bad value is
    a ValueError naming the option and the value, before anything runs; see
    `check_training_values`). A pipeline may change a default (`Pipeline.training_defaults`,
    e.g. `learning_rate`).

    Attributes:
        strategy: None (one device), "mirrored", "multi_worker" (cluster from TF_CONFIG) or a
            `tf.distribute.Strategy`.
        checkpoint_dir: checkpoints and TensorBoard logs; the same run started again (after a
            crash) continues from the latest intact checkpoint, and a finished run is not
            repeated. Multi-worker runs need it on storage that every worker shares.
            With it, SIGTERM checkpoints the next step and raises `Preempted`, a `SystemExit`
            with code 42 (see `lmpipe.training.preemption`); all the workers of a
            multi-worker run stop at the same step.
        learning_rate: peak learning rate of AdamW (linear warmup, then linear decay to 0).
        warmup_steps: warmup of the schedule; defaults to 10% of all steps.
        weight_decay: AdamW's decoupled weight decay (not on biases and LayerNorms).
        clipnorm: global gradient-norm clipping (None: none).
        mixed_precision: None, "mixed_bfloat16" or "mixed_float16" (Keras adds loss scaling),
            or "auto": bfloat16 where the hardware computes in it (Ampere and later GPUs,
            CPUs with AVX512_BF16 or AMX), float32 elsewhere; `fit` says which it picked.
        jit_compile: XLA-compile the train step; with several replicas, each replica's
            forward and backward pass (the loss and the optimizer update run without XLA).
            "auto": XLA on GPUs, not on CPUs (where it is no faster, see
            `lmpipe.training.precision.automatic_jit_compile`); `fit` says which it picked.
        accumulation_steps: each optimizer update sums the gradients of this many batches of
            `batch_size`, run one after the other: the update of a batch
            `accumulation_steps` times larger with the activation memory of one (see
            `lmpipe.models.gradient_accumulation`). Steps, `steps_per_epoch`,
            `warmup_steps` and `checkpoint_every` count updates.
        data_service: the address of a tf.data service dispatcher (`grpc://host:port`, see
            `lmpipe data-service`): the training batches are built by its workers, not on
            this machine's CPUs (see `lmpipe.training.data_service` for what stays exact).
        checkpoint_every: also checkpoint every this many steps (else at epoch ends).
        log_dir: TensorBoard logs (defaults to `<checkpoint_dir>/logs`).
        callbacks: more Keras callbacks (kept as a tuple).
        verbose: Keras' progress bar setting.

    A step whose loss is NaN or infinite stops training with a `FloatingPointError`; the
    checkpoints written before it are kept.

    Example:

    >>> TrainingOptions(learning_rate=3e-4).warmup_steps is None
    True
    >>> TrainingOptions(clipnorm=0.0)
    Traceback (most recent call last):
    ...
    ValueError: `clipnorm` must be a positive finite number or None, got clipnorm=0.0.
    """

    strategy: object = None
    checkpoint_dir: str | None = None
    learning_rate: float = 1e-4
    warmup_steps: int | None = None
    weight_decay: float = 0.01
    clipnorm: float | None = 1.0
    mixed_precision: str | None = None
    jit_compile: bool | str = False
    accumulation_steps: int = 1
    data_service: str | None = None
    checkpoint_every: int | None = None
    log_dir: str | None = None
    callbacks: tuple = ()
    verbose: object = "auto"

    def __post_init__(self):
        # A list is taken, and kept as a tuple: the options do not change once made.
        object.__setattr__(self, "callbacks", tuple(self.callbacks or ()))
        check_training_values(
            **{field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        )


# The keyword arguments of a pipeline's `fit` that it passes on to the loop, defined (and
# documented) once, as the fields of `TrainingOptions`.
TRAINING_OPTIONS = tuple(field.name for field in dataclasses.fields(TrainingOptions))


def check_training_options(caller, options, defaults=None, accepted=TRAINING_OPTIONS):
    """The training options a pipeline's `fit` was given, checked, as `TrainingOptions`.

    Args:
        caller: the method's name for the error message, e.g. "BertPretraining.fit".
        options: the `**training_options` the method received.
        defaults: the pipeline's own defaults (e.g. `{"learning_rate": 3e-4}`), which the
            given options override; the others keep `TrainingOptions`' defaults.
        accepted: the option names the pipeline takes (all of `TRAINING_OPTIONS` by default).

    Returns:
        `TrainingOptions(**{**defaults, **options})`.

    Raises:
        TypeError: for an option not in `accepted`, naming it and listing the accepted ones
            (as Python does for an unexpected keyword argument), before any work starts.
        ValueError: for a bad value, naming the option (see `check_training_values`).

    Example:

        >>> check_training_options("Pipe.fit", {}, {"learning_rate": 3e-4}).learning_rate
        0.0003
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
    return TrainingOptions(**{**(defaults or {}), **options})


def check_training_values(**options):
    """Raise a ValueError naming the option and its value unless each given training option
    has a valid value: numbers finite and in range (`learning_rate` > 0, `weight_decay` >= 0,
    `clipnorm` > 0 or None, `warmup_steps` an integer >= 0 or None, `checkpoint_every` an
    integer >= 1 or None, `accumulation_steps` an integer >= 1), `strategy` a known name or a
    `tf.distribute.Strategy`, `mixed_precision` a known policy, `jit_compile` True, False or
    "auto" and `data_service` an address.
    Options not given are not checked (the command line checks its flags with it before it
    makes a pipeline).
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
