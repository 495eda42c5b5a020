"""Memory and time budgets of pretraining on paper, checked against runs on this machine.

Part 1 measures: the peak memory (resident set) of a process that trains a BERT-mini (4
layers, hidden 256, 4 heads) for two steps at sequence length 128, float32, with batch 8, batch
32, and batch 8 x 4 accumulated micro-batches (`accumulation_steps=4`, the update of batch
32); each in a fresh process. The growth from batch 8 to 32 is the activations of 24
sequences, compared with the formula below; accumulation should cost about batch 8's memory.

Part 2 prints the arithmetic for BERT-base/large and XLNet-base at the papers' batch of 256
sequences:
- weights, gradients and Adam's two moments: 16 bytes a parameter (Keras keeps float32
  variables under mixed precision too); accumulation adds a float32 sum and the micro-batch's
  gradient: 8 bytes a parameter more;
- activations kept for the backward pass, per layer and sequence (Korthikanti et al. 2022,
  "Reducing Activation Recomputation in Large Transformer Models", without parallelism): with
  16-bit activations s*h*(34 + 5*a*s/h) bytes; in float32 about s*h*(66 + 9*a*s/h) (every
  tensor twice the size, the one-byte dropout masks not). XLNet's two streams keep the
  attention part twice and attend over memory too: counted here as 2x BERT's attention terms;
- FLOPs of a step: 6 x non-embedding parameters x tokens + 12 x layers x s^2 x h x sequences
  (attention), and the time at a given model FLOP utilization (MFU) of a chip's peak.

Run: python benchmarks/memory_budget.py [--peak-tflops 989 --mfu 0.4]
"""

import argparse
import subprocess
import sys

from measure import Results, print_machine

RUN = """
import os, resource, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
from lmpipe.datasets import TextCorpus, WordPieceTokenizer
from lmpipe.models import BertConfig
from lmpipe.pipelines import BertPretraining
batch, steps = int(sys.argv[1]), int(sys.argv[2])
corpus = TextCorpus.shakespeare(genres=["comedies"])
tokenizer = WordPieceTokenizer.train(corpus, vocab_size=8000)
config = BertConfig.mini(vocabulary_size=tokenizer.vocabulary_size)
pipe = BertPretraining(tokenizer, config, seq_len=128, seed=0)
pipe.fit(corpus, batch_size=batch, epochs=1, steps_per_epoch=2, accumulation_steps=steps,
         verbose=0)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""

GB = 1e9


def peak_memory(batch, accumulation_steps):
    result = subprocess.run(
        [sys.executable, "-c", RUN, str(batch), str(accumulation_steps)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-3000:])
    return int(result.stdout.split()[-1])


def activation_bytes(seq_len, hidden, heads, layers, float32, two_stream=False):
    """Bytes of activations kept for the backward pass, per sequence."""
    dense, scores = (66, 9) if float32 else (34, 5)
    attention = 2 if two_stream else 1
    per_layer = seq_len * hidden * dense + attention * scores * heads * seq_len**2
    return layers * per_layer


def measured(record):
    """Part 1: peak memory of three fresh processes; adds the growth, measured / formula, to
    `record`."""
    print("Part 1: BERT-mini, seq 128, float32, peak resident memory of a 2-step fit")
    small, large, accumulated = peak_memory(8, 1), peak_memory(32, 1), peak_memory(8, 4)
    predicted = 24 * activation_bytes(128, 256, 4, 4, float32=True)
    print(f"  batch 8: {small / GB:.2f} GB   batch 32: {large / GB:.2f} GB   ", end="")
    print(f"batch 8 x 4 accumulated: {accumulated / GB:.2f} GB")
    print(
        f"  growth 8 -> 32 sequences: {(large - small) / GB:.3f} GB measured, "
        f"{predicted / GB:.3f} GB by the formula ({(large - small) / predicted:.2f}x)"
    )
    print(
        f"  accumulation (the update of batch 32): {(accumulated - small) / GB:+.3f} GB over "
        "batch 8"
    )
    record.add(
        "activation memory of 24 sequences (batch 8 -> 32), BERT-mini, seq 128, float32",
        (large - small) / predicted,
        "the formula (Korthikanti et al. 2022)",
        higher_is_better=None,
        peak_bytes={"batch 8": small, "batch 32": large, "batch 8 x 4 accumulated": accumulated},
        formula_bytes=predicted,
    )


def on_paper(peak_tflops, mfu):
    from lmpipe.models import BertConfig, XLNetConfig
    from lmpipe.models.bert import bert
    from lmpipe.models.xlnet import xlnet

    models = {
        "BERT-base": (BertConfig.base(), bert, False),
        "BERT-large": (BertConfig.large(), bert, False),
        "XLNet-base": (XLNetConfig.base(), xlnet, True),
    }
    print(f"\nPart 2: batch 256 sequences a step; time at MFU {mfu:.0%} of {peak_tflops} TFLOP/s")
    header = "  model        seq  params  states  +accum  act/seq fp32  bf16  "
    print(header + "batch-256 act bf16  TFLOP/step  s/step")
    for name, (config, build, two_stream) in models.items():
        model = build(config)
        parameters = model.count_params()
        embedding = config.vocabulary_size * config.hidden_dim
        states = 16 * parameters
        for seq_len in (128, 512):
            fp32 = activation_bytes(
                seq_len, config.hidden_dim, config.num_heads, config.num_layers, True, two_stream
            )
            bf16 = activation_bytes(
                seq_len, config.hidden_dim, config.num_heads, config.num_layers, False, two_stream
            )
            tokens = 256 * seq_len
            flops = 6 * (parameters - embedding) * tokens
            flops += (
                (2 if two_stream else 1)
                * 12
                * config.num_layers
                * seq_len**2
                * (config.hidden_dim)
                * 256
            )
            seconds = flops / (mfu * peak_tflops * 1e12)
            print(
                f"  {name:<11} {seq_len:>4} {parameters / 1e6:6.0f}M {states / GB:6.1f}G "
                f"{8 * parameters / GB:6.1f}G {fp32 / 1e6:8.0f}MB {bf16 / 1e6:5.0f}MB "
                f"{256 * bf16 / GB:13.0f} GB {flops / 1e12:10.0f} {seconds:7.2f}"
            )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="H100 SXM bf16 dense")
    parser.add_argument("--mfu", type=float, default=0.4)
    parser.add_argument("--no-measure", action="store_true", help="part 2 only")
    arguments = parser.parse_args()
    print_machine()
    record = Results("memory_budget")
    if not arguments.no_measure:
        measured(record)
    on_paper(arguments.peak_tflops, arguments.mfu)
    if record.figures:  # part 2 alone measures nothing to keep
        record.write()


if __name__ == "__main__":
    main()
