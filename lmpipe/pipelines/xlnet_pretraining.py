"""`XLNetPretraining`: permutation-LM data, the two-stream model with memory, fit, export."""

import dataclasses
import math
import os

from lmpipe.arguments import check_bool, check_number
from lmpipe.datasets.examples.xlnet_examples import (
    check_xlnet_arguments,
    special_ids,
    xlnet_examples,
)
from lmpipe.interop.hf.checkpoint import checkpoint_model_type
from lmpipe.interop.hf.xlnet import load_xlnet_pretrainer_weights, xlnet_config_from_hf
from lmpipe.models.xlnet import XLNetConfig, check_memory_arguments, xlnet
from lmpipe.models.xlnet_pretrainer import XLNetPretrainer
from lmpipe.pipelines.command_line import CommandLine, shared_options
from lmpipe.pipelines.pipeline import EncoderPipeline, PipelineOptions
from lmpipe.tokenizers.sentence_piece import SentencePieceTokenizer
from lmpipe.training.distribution import distribution_strategy, per_replica_batch_size


@dataclasses.dataclass(frozen=True)
class XLNetPretrainingOptions(PipelineOptions):
    """The options of `XLNetPretraining`.

    Attributes:
        seq_len: tokens per example, special tokens (and the reused part) included.
        max_predictions: `P`, targets per example; defaults to about `seq_len / mask_alpha`.
        mask_alpha: `K`: about one token in K is a target (6).
        max_span: longest target span, in words (5); span lengths n have p(n) ~ 1/n.
        perm_size: the factorization order is permuted within blocks of this many positions
            (must divide `seq_len` and `reuse_len`); None permutes each part whole.
        reuse_len: `R`, turns memory on (see `XLNetPretraining`); None trains without memory.
        mem_len: cached states per layer; defaults to `reuse_len` (0 without memory).
        bidirectional: XLNet's `bi_data`: the second half of every batch (of every
            replica's batch) reads the text backward, and the model gives those rows the
            negated relative distances, so reversed text keeps its real geometry (needs an
            even batch size per replica).
        seed: seed of every random choice: the same seed gives identical batches.
    """

    seq_len: int = 128
    max_predictions: int = None
    mask_alpha: float = 6
    max_span: int = 5
    perm_size: int = None
    reuse_len: int = None
    mem_len: int = None
    bidirectional: bool = False

    def check(self):
        super().check()
        if self.max_predictions is None:
            # A bad `seq_len` or `mask_alpha` is named by the check below, not by this default.
            check_number("mask_alpha", self.mask_alpha, minimum=2)
            check_number("seq_len", self.seq_len, minimum=1, integer=True)
            default = math.ceil(self.seq_len / self.mask_alpha)
            self.resolve("max_predictions", max(1, min(default, self.seq_len - 3)))
        check_bool("bidirectional", self.bidirectional)
        # The batch size is checked by `fit` and `dataset`; 2 passes the even-size check here.
        self.check_batch_size(2)
        if self.mem_len is None:
            self.resolve("mem_len", self.reuse_len or 0)
        check_memory_arguments(self.mem_len, self.reuse_len)
        if self.mem_len and not self.reuse_len:
            raise ValueError(
                f"`mem_len`={self.mem_len} needs `reuse_len`: memory is carried along text "
                "streams, which only the reuse layout reads."
            )

    def check_batch_size(self, batch_size):
        """Raise unless the options fit together with `batch_size` (examples per replica)."""
        check_xlnet_arguments(
            self.seq_len,
            self.max_predictions,
            self.reuse_len,
            self.perm_size,
            batch_size,
            self.bidirectional,
            self.mask_alpha,
            self.max_span,
        )


def _command_line_options(flags):
    """`lmpipe pretrain xlnet`'s options: memory unless `--reuse-len 0`, each example handing on
    half its tokens without `--reuse-len` (the paper's 512-token examples reuse 256)."""
    reuse_len = flags.seq_len // 2 if flags.reuse_len is None else flags.reuse_len
    return {**shared_options(flags), "reuse_len": reuse_len or None, "mem_len": flags.mem_len}


class XLNetPretraining(EncoderPipeline):
    """XLNet pretraining: permutation language modelling with two-stream attention.

    `dataset(corpus, batch_size)` yields `(features, labels)` batches with the names of the
    data contract: features `token_ids`, `segment_ids`, `padding_mask` int32 `[B, seq_len]`,
    `perm_mask` float32 `[B, S, S]` (1 = position i may attend to j in the query stream),
    `target_mapping` float32 `[B, P, S]`, `masked_tokens` int32 `[B, S]`, `stream_position`
    int64 `[B, 3]` (where each example is in the seekable stream, see `dataset`), and with
    memory `stream_start` int32 `[B]`; labels `target_ids` int32 and `target_mask` float32
    `[B, P]`.
    Examples are laid out as in XLNet, `A [SEP] B [SEP] [CLS]`: the tokenizer's `[SEP]`,
    `[CLS]`, `[MASK]` play `<sep>`, `<cls>`, `<mask>`.

    Two ways to train:
    - without memory (`reuse_len=None`, the default): independent examples, in the stream's
      keyed order;
    - with Transformer-XL memory (`reuse_len=R`): the corpus is read as `batch_size` text
      streams; row r of each batch continues row r of the batch before, the first R tokens of
      an example being the text that follows the previous one's first R tokens, and the model
      attends to the cached states of the previous batch (`mem_len` of them, R by default).
      The memory is dropped where a stream starts again and when a second `fit` starts the
      streams again; the training checkpoints hold it (every replica's), so a run resumed
      from `checkpoint_dir` continues exactly as an uninterrupted one.

    Args:
        tokenizer: a `WordPieceTokenizer` with `[PAD]`, `[SEP]`, `[CLS]` and `[MASK]`.
        config: an `XLNetConfig`; defaults to `XLNetConfig.tiny()` sized to the tokenizer's
            vocabulary (use `XLNetConfig.base(vocabulary_size=...)` for real runs).
        **options: the fields of `XLNetPretrainingOptions` (`seq_len`, `seed`,
            `max_predictions`, `mask_alpha`, `max_span`, `perm_size`, `reuse_len`,
            `mem_len`, `bidirectional`).

    Example:

        corpus = lmpipe.datasets.TextCorpus.shakespeare()
        tokenizer = lmpipe.datasets.WordPieceTokenizer.train(corpus, vocab_size=8000)
        pipe = XLNetPretraining(tokenizer, seq_len=128, reuse_len=64, seed=1)
        pipe.fit(corpus, batch_size=16, epochs=1, steps_per_epoch=100)
        pipe.export("serving/xlnet")

    Reference: Yang et al., "XLNet", 2019, sections 2.3-2.5 and appendix A.
    """

    options_class = XLNetPretrainingOptions
    pretraining_heads = True
    config_classes = (XLNetConfig,)
    predictions = ("embed",)
    command_line = CommandLine(
        "xlnet",
        options=_command_line_options,
        config_class=XLNetConfig,
        default_preset="tiny",
        published_preset="base",
        build_model=xlnet,
        tokenizer="sentencepiece",
        sentence_piece_layout="xlnet",
        uses_mask_token=True,
        memory=True,
        objective="a permutation LM",
        checkpoint_type="xlnet",
    )

    def __init__(self, tokenizer, config=None, **options):
        super().__init__(tokenizer, config, **options)
        special_ids(tokenizer)  # names the missing special tokens
        self.batch_size = None  # per replica, fixed by the first fit when memory is on
        self._fit_batch_size = None

    def default_config(self):
        return XLNetConfig.tiny(vocabulary_size=self.tokenizer.vocabulary_size)

    @classmethod
    def from_pretrained(cls, directory, **options):
        """Continue pretraining a Hugging Face XLNet checkpoint folder: its SentencePiece
        tokenizer (`spiece.model` or `tokenizer.json`), its configuration, and its weights
        (and `lm_loss.bias` where it has one) in the model `fit` builds (see
        `lmpipe.interop.hf.xlnet.load_xlnet_pretrainer_weights`). `options` as the
        constructor's; a resumed run reads its checkpoint instead."""
        found = checkpoint_model_type(directory)
        if found != "xlnet":
            raise ValueError(
                f"{directory} holds a {found!r} checkpoint; XLNetPretraining.from_pretrained "
                "reads 'xlnet' ones."
            )
        tokenizer = SentencePieceTokenizer.from_pretrained(directory)
        config = xlnet_config_from_hf(os.path.join(directory, "config.json"))
        pipe = cls(tokenizer, config, **options)
        pipe.pretrained = os.fspath(directory)
        return pipe

    # Data -------------------------------------------------------------------------------------

    def dataset(self, corpus, batch_size, epochs=None, input_context=None, start=None):
        """Pretraining batches from `corpus`, as `(features, labels)`, on the seekable stream
        (see `lmpipe.datasets.examples.xlnet_examples`): each batch's features also hold
        `stream_position` int64 `[B, 3]`, and `start=StreamPosition.after(batch)` gives the
        batches after `batch`, the same as the run from the beginning.

        Args:
            corpus: a `TextCorpus`, or a `TokenizedCorpus` written with the same tokenizer.
            batch_size: examples per batch (of one replica); with memory, the number of text
                streams the replica reads.
            epochs: the epoch to stop before; None goes on forever. Every epoch draws new
                targets and new factorization orders.
            input_context: a `tf.distribute.InputContext`: the global batch is `batch_size`
                times its replicas, and this input pipeline yields the batches of its
                replicas in turn.
            start: a `StreamPosition` (None: the beginning); with memory, the first row of a
                batch (resuming then costs one epoch's tokenization, not the steps done).
        """
        self.check_data(corpus)
        options = self.options
        return xlnet_examples(
            corpus,
            self.tokenizer,
            seq_len=options.seq_len,
            batch_size=batch_size,
            seed=options.seed,
            max_predictions=options.max_predictions,
            reuse_len=options.reuse_len,
            perm_size=options.perm_size,
            mask_alpha=options.mask_alpha,
            max_span=options.max_span,
            bidirectional=options.bidirectional,
            input_context=input_context,
            epochs=epochs,
            start=start,
        )

    def check_data(self, corpus, name="data"):
        if len(corpus) < 1:
            raise ValueError("The corpus has no document.")
        return corpus

    def training_batches(self, corpus, per_replica, input_context, start=None):
        """The endless batches of one input pipeline from `start` on, its replicas' in turn
        (element `i` goes to replica `i mod k`), each replica always getting the same rows of
        the global batch: with memory, replica `j` always reads the streams
        `j * per_replica ...`, the ones its memory belongs to; with `bidirectional`, the
        global batch's first half reads forward and its second half backward, and replica `j`
        gets forward rows `j * h ... (j + 1) * h - 1` (`h = per_replica / 2`) and then the
        same rows of the backward half, so that each replica's batch is half forward, half
        backward, as the model's `bi_data` expects.
        """
        return self.dataset(corpus, per_replica, input_context=input_context, start=start)

    # Model ------------------------------------------------------------------------------------

    def build_model(self, batch_size=None):
        """A new `XLNetPretrainer`; with memory, for `batch_size` streams per replica (by
        default, those of the fit that builds it)."""
        options = self.options
        batch_size = self._fit_batch_size if batch_size is None else batch_size
        model = XLNetPretrainer(
            self.config,
            max_predictions=options.max_predictions,
            mem_len=options.mem_len,
            reuse_len=options.reuse_len if options.mem_len else None,
            batch_size=batch_size if options.mem_len else None,
            bi_data=options.bidirectional,
        )
        if getattr(self, "pretrained", None):
            load_xlnet_pretrainer_weights(model, self.pretrained)
        return model

    @property
    def encoder(self):
        """The content-stream encoder (a functional `keras.Model` sharing the trained weights):
        `token_ids`, `segment_ids`, `padding_mask` -> `sequence_output`, `pooled_output`."""
        return self.require_model().encoder

    def fit(self, corpus, batch_size=None, epochs=None, steps_per_epoch=None, **arguments):
        """Pretrain on `corpus`; return the Keras `History` (see `Pipeline.fit`).

        With memory, `batch_size / replicas` is the number of text streams per replica and
        stays fixed for the model's life; a second `fit` starts the streams (and the memory)
        again.
        """
        strategy = distribution_strategy(arguments.pop("strategy", None))
        batch_size = self.default_batch_size if batch_size is None else batch_size
        per_replica = per_replica_batch_size(strategy, batch_size)
        self.options.check_batch_size(per_replica)
        mem_len = self.options.mem_len
        if mem_len and arguments.get("accumulation_steps", 1) != 1:
            raise ValueError(
                f"`accumulation_steps={arguments['accumulation_steps']}` with Transformer-XL "
                f"memory (mem_len={mem_len}): the memory holds one row per stream of a batch "
                "and micro-batches would need rows of their own; train with mem_len=0 or "
                "accumulation_steps=1."
            )
        if mem_len and arguments.get("data_service") is not None:
            raise ValueError(
                f"`data_service` with Transformer-XL memory (mem_len={mem_len}): the memory "
                "needs each stream's batches in order, and the tf.data service's workers "
                "deliver them in any order; train with mem_len=0 or without the service."
            )
        if mem_len and self.batch_size not in (None, per_replica):
            raise ValueError(
                f"The model keeps memory for {self.batch_size} streams per replica; fit with "
                f"a batch size of {self.batch_size} per replica, got {per_replica}."
            )
        if self.model is not None and mem_len and arguments.get("checkpoint_dir") is None:
            self.model.reset_memory()  # the new dataset starts its streams again
        self._fit_batch_size = per_replica
        history = super().fit(
            corpus, batch_size, epochs, steps_per_epoch, strategy=strategy, **arguments
        )
        self.batch_size = per_replica if mem_len else None
        return history

    def evaluate(self, corpus, batch_size=None, steps=None, verbose=0):
        """Permutation-LM loss and accuracy on `corpus` (one pass, or `steps` batches).

        With memory, `batch_size` must be the training batch size per replica (the default)
        and the memory is reset before and after, so evaluation neither reads nor leaves
        training's context.
        """
        mem_len = self.options.mem_len
        if batch_size is None:
            batch_size = self.batch_size or self.default_batch_size
        if mem_len and batch_size != self.batch_size:
            raise ValueError(
                f"With memory the model evaluates batches of {self.batch_size} streams, got "
                f"batch_size={batch_size}."
            )
        if mem_len:
            self.require_model().reset_memory()
        try:
            return super().evaluate(corpus, batch_size, steps, verbose)
        finally:
            if mem_len:
                self.model.reset_memory()

    # Save, load, export -----------------------------------------------------------------------

    def saved_state(self):
        """The per-replica batch size the model's memory has (the memory is not saved)."""
        return {"batch_size": self.batch_size}

    def restore_state(self, state):
        self.batch_size = state.get("batch_size")

    def write_export(self, base_dir, version, overwrite, outputs=None):
        """Exports the content-stream encoder. Signatures as for BERT (`serving_default`
        with token ids, and `serve_text` / `serve_text_pair`), the texts packed the XLNet
        way: `text [SEP] [CLS]` and `text [SEP] text_pair [SEP] [CLS]`. `export`
        takes `outputs`: the outputs served (None: all)."""
        return self.export_encoder(
            self.encoder, base_dir, version, overwrite, outputs, layout="xlnet"
        )
