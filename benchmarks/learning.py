"""Learning curves against the reference implementations: lmpipe's BERT and GPT trained beside
Hugging Face's `BertForMaskedLM` and `GPT2LMHeadModel` (PyTorch) from the same initial weights
on the same batches.

Weights: lmpipe builds its model (seeded), `lmpipe.interop.hf` writes it as a Hugging Face
folder, and `transformers` loads that folder: both start from lmpipe's initialization.

Batches: lmpipe's own, made once and given to both. BERT: `BertPretraining(objective="mlm")`'s
masked-LM batches (80/10/10 masking, up to `max_predictions` positions a row); the reference
runs `BertForMaskedLM`'s encoder and its `cls` head on the same `mask_positions` and takes the
mean cross-entropy over the real predictions (`mask_weights`), as lmpipe does. GPT:
`GptPretraining(document_attention=False)`'s rows (packed windows read across their documents,
as GPT-2 is trained), the loss the mean next-token cross-entropy over the real tokens.

1. Parity, dropout 0, `PARITY_STEPS` steps: lmpipe's `pipeline.fit` optimizer
   (`lmpipe.training.schedules.adamw`: AdamW, weight decay 0.01 except on biases and LayerNorms,
   global-norm clipping at 1, linear warmup and decay) against the same AdamW written out in
   PyTorch with Keras' formula (`keras_adamw_step`). Keras' Adam adds epsilon to sqrt(v)
   before the bias correction, PyTorch's after it: with epsilon 1e-6 the updates of parameters
   with small gradients (rare words' rows) differ in the first hundreds of steps, and
   `torch.optim.AdamW` moves the curve by up to 0.06 (BERT) and 0.10 (GPT) in the loss
   (printed as well). The figure is the largest |loss difference| over the steps.
2. Learning, dropout 0.1 (each library its own dropout draws), `LEARNING_STEPS` steps: the
   reference trains as its users do (`torch.optim.AdamW` with the same hyper-parameters,
   `transformers.get_linear_schedule_with_warmup`, `torch.nn.utils.clip_grad_norm_`); then
   both are evaluated (dropout off) on `HELD_OUT_BATCHES` batches of held-out Shakespeare
   scenes (`TextCorpus.split(held_out=0.05, seed=0)`). The figure is lmpipe's held-out loss
   over the reference's (lower is better; goal <= 1).

Sizes: BERT-tiny (2 layers, hidden 128, 2 heads, FFN 512) and a GPT of the same sizes,
sequence length 64, batch 16, a WordPiece vocabulary learnt from the training plays (4,000
words asked, 3,871 learnt), learning rate 1e-3 (warmup 10%), float32 on the CPU.

Run: pip install -e '.[benchmarks]' torch && python benchmarks/learning.py
     (36 minutes on 2 CPU cores shared with other work; --steps N for a shorter run)
"""

import argparse
import os
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from measure import Results, print_machine  # noqa: E402

from lmpipe.datasets import TextCorpus, WordPieceTokenizer  # noqa: E402
from lmpipe.interop.hf import save_pretrained, save_pretrainer  # noqa: E402
from lmpipe.models import BertConfig, GptConfig  # noqa: E402
from lmpipe.pipelines import BertPretraining, GptPretraining  # noqa: E402
from lmpipe.training.schedules import adamw  # noqa: E402

SEQ_LEN, BATCH = 64, 16
SIZES = dict(hidden_dim=128, num_layers=2, num_heads=2, intermediate_dim=512)
VOCABULARY = 4000
LEARNING_RATE, WEIGHT_DECAY, CLIPNORM = 1e-3, 0.01, 1.0
# Adam's moments and epsilon, as `lmpipe.training.schedules.adamw` sets them.
BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-6
PARITY_STEPS, LEARNING_STEPS, HELD_OUT_BATCHES = 100, 2000, 20
FAMILIES = ("bert", "gpt")


def warmup_steps(total_steps):
    """`pipeline.fit`'s default warmup: 10% of the steps."""
    return max(1, total_steps // 10)


# Data ---------------------------------------------------------------------------------------


def pipeline(family, tokenizer, dropout, seq_len=SEQ_LEN, sizes=None, seed=0):
    """lmpipe's pipeline of `family` ("bert": masked LM only, "gpt": read across documents) with
    `sizes` (default `SIZES`) and `dropout` everywhere."""
    sizes = dict(SIZES if sizes is None else sizes, vocabulary_size=tokenizer.vocabulary_size)
    if family == "bert":
        config = BertConfig(
            **sizes, max_sequence_length=seq_len, dropout=dropout, attention_dropout=dropout
        )
        return BertPretraining(tokenizer, config, seq_len=seq_len, objective="mlm", seed=seed)
    config = GptConfig(**sizes, max_sequence_length=seq_len, dropout=dropout)
    return GptPretraining(tokenizer, config, seq_len=seq_len, document_attention=False, seed=seed)


def batches(pipe, corpus, batch_size, count):
    """`count` batches of `pipe.dataset(corpus, batch_size)` as NumPy `(features, labels)`,
    without the stream position (which neither model reads)."""
    dataset = pipe.dataset(corpus, batch_size).take(count)
    out = []
    for x, y in dataset.as_numpy_iterator():
        x = {name: value for name, value in x.items() if name != "stream_position"}
        out.append((x, y))
    if len(out) < count:
        raise ValueError(f"the corpus gave {len(out)} batches of {batch_size}, not {count}")
    return out


# lmpipe -------------------------------------------------------------------------------------


def lmpipe_model(pipe, total_steps, seed=0):
    """`pipe.build_model()` (seeded) compiled with `pipeline.fit`'s AdamW for `total_steps`."""
    keras.utils.set_random_seed(seed)
    model = pipe.build_model()
    model.compile(
        optimizer=adamw(
            LEARNING_RATE, total_steps, warmup_steps(total_steps), WEIGHT_DECAY, CLIPNORM
        ),
        jit_compile=False,
    )
    model.optimizer.build(model.trainable_variables)
    return model


def save_reference(pipe, model, directory):
    """Write lmpipe's `model` as the Hugging Face folder its reference class loads."""
    if isinstance(pipe, BertPretraining):
        save_pretrainer(directory, model, pipe.config, pipe.tokenizer)
    else:
        save_pretrained(directory, model, pipe.config, pipe.tokenizer)


def lmpipe_train(model, data, steps):
    """Train `model` on `steps` batches of `data` (cycled); the loss of each step."""
    losses = []
    for step in range(steps):
        x, y = data[step % len(data)]
        losses.append(float(model.train_on_batch(x, y, return_dict=True)["loss"]))
    return losses


def lmpipe_held_out(model, data):
    """Mean loss of `model` (dropout off) over every real prediction of `data`."""
    total, count = 0.0, 0.0
    for x, y in data:
        logits = model(x, training=False)
        logits = logits["mlm_logits"] if isinstance(logits, dict) else logits
        loss_sum, weight = summed_cross_entropy(np.asarray(logits), *targets(y))
        total, count = total + loss_sum, count + weight
    return total / count


def targets(labels):
    """(target ids, weights) of a batch's labels, BERT's or GPT's."""
    if "mask_ids" in labels:
        return labels["mask_ids"], labels["mask_weights"]
    return labels["next_ids"], labels["weights"]


def summed_cross_entropy(logits, ids, weights):
    """(sum of weighted cross-entropies, sum of weights) of NumPy `logits` `[..., V]`."""
    logits = logits.astype(np.float64)
    top = logits.max(-1, keepdims=True)
    log_z = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
    target = np.take_along_axis(logits, ids[..., None].astype(np.int64), -1)[..., 0]
    return float(((log_z - target) * weights).sum()), float(weights.sum())


# The reference (PyTorch) ---------------------------------------------------------------------


def reference_model(family, directory, seed=0):
    """transformers' `BertForMaskedLM` or `GPT2LMHeadModel` of `directory`, in training mode."""
    torch.manual_seed(seed)
    model_class = transformers.BertForMaskedLM if family == "bert" else transformers.GPT2LMHeadModel
    model = model_class.from_pretrained(directory, attn_implementation="eager")
    model.train()
    return model


def reference_logits(model, x):
    """The reference's logits for a batch of lmpipe's features: BERT's at `mask_positions`
    (`[B, P, V]`), GPT's at every position (`[B, S, V]`)."""
    token_ids = torch.from_numpy(x["token_ids"]).long()
    padding_mask = torch.from_numpy(x["padding_mask"]).long()
    if isinstance(model, transformers.BertForMaskedLM):
        sequence = model.bert(
            input_ids=token_ids,
            attention_mask=padding_mask,
            token_type_ids=torch.from_numpy(x["segment_ids"]).long(),
        ).last_hidden_state  # [B, S, H]
        positions = torch.from_numpy(x["mask_positions"]).long()
        gathered = torch.gather(
            sequence, 1, positions[..., None].expand(-1, -1, sequence.shape[-1])
        )
        return model.cls(gathered)  # [B, P, V]
    # Positions count the real tokens of a row, as lmpipe's do (rows are padded at the end).
    positions = torch.clamp(torch.cumsum(padding_mask, 1) - 1, min=0)
    return model(input_ids=token_ids, attention_mask=padding_mask, position_ids=positions).logits


def reference_loss(model, x, y):
    """The masked mean cross-entropy over the real predictions, lmpipe's loss."""
    ids, weights = (torch.from_numpy(value) for value in targets(y))
    logits = reference_logits(model, x)
    per_token = torch.nn.functional.cross_entropy(
        logits.flatten(0, -2), ids.long().flatten(), reduction="none"
    ).view(ids.shape)
    return (per_token * weights).sum() / torch.clamp(weights.sum(), min=1.0)


def decays(name, parameter):
    """Whether AdamW decays a reference parameter: lmpipe decays all but biases and LayerNorm
    scales and offsets, which are the 1-D parameters."""
    del name
    return parameter.dim() >= 2


def keras_adamw_step(model, state, learning_rate):
    """One AdamW update of `model`'s gradients with the formulas of Keras' `AdamW` (the
    optimizer lmpipe's is checked against): global-norm clipping as `tf.clip_by_global_norm`
    computes it, the decoupled decay `w -= lr * decay * w` before Adam's update, and epsilon
    added to sqrt(v) before the bias correction."""
    parameters = [(n, p) for n, p in model.named_parameters() if p.grad is not None]
    norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for _, p in parameters)).float()
    scale = CLIPNORM * torch.minimum(1.0 / norm, torch.tensor(1.0 / CLIPNORM))
    state["t"] = state.get("t", 0) + 1
    t = state["t"]
    alpha = learning_rate * (1 - BETA_2**t) ** 0.5 / (1 - BETA_1**t)
    with torch.no_grad():
        for name, p in parameters:
            g = p.grad * scale
            m, v = state.setdefault(name, (torch.zeros_like(p), torch.zeros_like(p)))
            if decays(name, p):
                p -= p * (learning_rate * WEIGHT_DECAY)
            m += (g - m) * (1 - BETA_1)
            v += (g * g - v) * (1 - BETA_2)
            p -= m * alpha / (torch.sqrt(v) + EPSILON)


def schedule(step, total_steps):
    """lmpipe's `WarmupLinearDecay` at `step` (0 for the first update)."""
    warmup = warmup_steps(total_steps)
    if step < warmup:
        return LEARNING_RATE * step / warmup
    return LEARNING_RATE * max(total_steps - step, 0) / max(total_steps - warmup, 1)


def reference_train_keras_adamw(model, data, steps, total_steps):
    """Train the reference with `keras_adamw_step`; the loss of each step."""
    state, losses = {}, []
    for step in range(steps):
        x, y = data[step % len(data)]
        model.zero_grad(set_to_none=True)
        loss = reference_loss(model, x, y)
        loss.backward()
        keras_adamw_step(model, state, schedule(step, total_steps))
        losses.append(float(loss))
    return losses


def torch_adamw(model, total_steps):
    """`(optimizer, scheduler)` as the reference's users train: `torch.optim.AdamW` with
    lmpipe's hyper-parameters and decay exclusions, `get_linear_schedule_with_warmup`."""
    groups = [
        {"params": [p for n, p in model.named_parameters() if decays(n, p)]},
        {
            "params": [p for n, p in model.named_parameters() if not decays(n, p)],
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(
        groups,
        lr=LEARNING_RATE,
        betas=(BETA_1, BETA_2),
        eps=EPSILON,
        weight_decay=WEIGHT_DECAY,
    )
    scheduler = transformers.get_linear_schedule_with_warmup(
        optimizer, warmup_steps(total_steps), total_steps
    )
    return optimizer, scheduler


def reference_train(model, data, steps, total_steps):
    """Train the reference with `torch_adamw` and `clip_grad_norm_`; the loss of each step."""
    optimizer, scheduler = torch_adamw(model, total_steps)
    losses = []
    for step in range(steps):
        x, y = data[step % len(data)]
        optimizer.zero_grad(set_to_none=True)
        loss = reference_loss(model, x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIPNORM)
        optimizer.step()
        scheduler.step()
        losses.append(float(loss))
    return losses


def reference_held_out(model, data):
    """Mean loss of the reference (dropout off) over every real prediction of `data`."""
    model.eval()
    total, count = 0.0, 0.0
    with torch.no_grad():
        for x, y in data:
            loss_sum, weight = summed_cross_entropy(reference_logits(model, x).numpy(), *targets(y))
            total, count = total + loss_sum, count + weight
    model.train()
    return total / count


# The runs -----------------------------------------------------------------------------------


def parity(family, tokenizer, corpus, steps=PARITY_STEPS):
    """Dropout 0, `steps` steps from the same weights on the same batches: `{name: losses}`
    of lmpipe, the reference with Keras' AdamW formula, the reference with torch's AdamW."""
    pipe = pipeline(family, tokenizer, dropout=0.0)
    data = batches(pipe, corpus, BATCH, steps)
    model = lmpipe_model(pipe, steps)
    curves = {}
    with tempfile.TemporaryDirectory() as directory:
        save_reference(pipe, model, directory)
        curves["reference, Keras' AdamW"] = reference_train_keras_adamw(
            reference_model(family, directory), data, steps, steps
        )
        curves["reference, torch's AdamW"] = reference_train(
            reference_model(family, directory), data, steps, steps
        )
    curves["lmpipe"] = lmpipe_train(model, data, steps)
    return curves


def learning(family, tokenizer, train, held_out, steps):
    """Dropout 0.1, `steps` steps from the same weights on the same batches, each library its
    own dropout: `{name: (losses, held-out loss, seconds)}`."""
    pipe = pipeline(family, tokenizer, dropout=0.1)
    data = batches(pipe, train, BATCH, steps)
    evaluation = batches(
        pipeline(family, tokenizer, dropout=0.1, seed=1), held_out, BATCH, HELD_OUT_BATCHES
    )
    model = lmpipe_model(pipe, steps)
    with tempfile.TemporaryDirectory() as directory:
        save_reference(pipe, model, directory)
        reference = reference_model(family, directory)
    results = {}
    begin = time.process_time()
    losses = reference_train(reference, data, steps, steps)
    seconds = time.process_time() - begin
    results["reference"] = (losses, reference_held_out(reference, evaluation), seconds)
    begin = time.process_time()
    losses = lmpipe_train(model, data, steps)
    seconds = time.process_time() - begin
    results["lmpipe"] = (losses, lmpipe_held_out(model, evaluation), seconds)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=LEARNING_STEPS, help="learning-run steps")
    parser.add_argument("--families", default=",".join(FAMILIES), help="bert,gpt")
    arguments = parser.parse_args()
    # One PyTorch thread: on a shared 2-core machine its OpenMP threads wait for each other
    # spinning, 10x slower a step than one thread. Only the CPU-seconds depend on it.
    torch.set_num_threads(1)
    print_machine()
    corpus = TextCorpus.shakespeare()
    train, held_out = corpus.split(held_out=0.05, seed=0)
    begin = time.perf_counter()
    tokenizer = WordPieceTokenizer.train(train, vocab_size=VOCABULARY)
    print(
        f"WordPiece vocabulary of {tokenizer.vocabulary_size} learnt in "
        f"{time.perf_counter() - begin:.0f} s"
    )
    record = Results("learning")
    references = {"bert": "transformers BertForMaskedLM", "gpt": "transformers GPT2LMHeadModel"}
    for family in arguments.families.split(","):
        curves = parity(family, tokenizer, train)
        lmpipe_losses = np.array(curves["lmpipe"])
        print(f"\n{family}: parity, dropout 0, {PARITY_STEPS} steps, loss at steps 1/10/100:")
        for name, losses in curves.items():
            gap = np.abs(np.array(losses) - lmpipe_losses).max()
            print(
                f"  {name:<28} {losses[0]:.5f} {losses[9]:.5f} {losses[-1]:.5f}   "
                f"max |lmpipe - it| {gap:.2e}"
            )
        runs = learning(family, tokenizer, train, held_out, arguments.steps)
        print(f"\n{family}: learning, dropout 0.1, {arguments.steps} steps:")
        for name, (losses, loss, seconds) in runs.items():
            print(
                f"  {name:<10} training loss (last 100 steps) {np.mean(losses[-100:]):.4f}  "
                f"held-out loss {loss:.4f}  {seconds:.0f} CPU-s"
            )
        gap = float(np.abs(np.array(curves["reference, Keras' AdamW"]) - lmpipe_losses).max())
        torch_gap = float(
            np.abs(np.array(curves["reference, torch's AdamW"]) - lmpipe_losses).max()
        )
        record.add(
            f"{family}: held-out loss after {arguments.steps} steps (dropout 0.1) on the same "
            f"batches from the same weights; {PARITY_STEPS}-step parity at dropout 0: max |loss "
            f"difference| {gap:.1e}",
            runs["lmpipe"][1] / runs["reference"][1],
            references[family],
            goal="<= 1x",
            higher_is_better=False,
            held_out_loss=runs["lmpipe"][1],
            reference_held_out_loss=runs["reference"][1],
            parity_max_difference=gap,
            parity_max_difference_torch_adamw=torch_gap,
            cpu_seconds=runs["lmpipe"][2],
            reference_cpu_seconds=runs["reference"][2],
        )
    record.write()


if __name__ == "__main__":
    main()
