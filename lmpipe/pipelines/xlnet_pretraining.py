"""`XLNetPretraining`: permutation-LM data, the two-stream model with memory, fit, export."""

import math

import tensorflow as tf

from lmpipe.arguments import check_number
from lmpipe.datasets.xlnet_examples import check_xlnet_arguments, special_ids, xlnet_examples
from lmpipe.models.xlnet import XLNetConfig, check_memory_arguments
from lmpipe.models.xlnet_pretrainer import XLNetPretrainer
from lmpipe.pipelines.distribution import distribution_strategy, per_replica_batch_size
from lmpipe.pipelines.saved_pipeline import SavedPipeline, save_pipeline
from lmpipe.pipelines.training import check_training_options, train


class XLNetPretraining:
    """XLNet pretraining: permutation language modelling with two-stream attention.

    `dataset(corpus, batch_size)` yields `(features, labels)` batches with the names of the
    data contract: features `token_ids`, `segment_ids`, `padding_mask` int32 `[B, seq_len]`,
    `perm_mask` float32 `[B, S, S]` (1 = position i may attend to j in the query stream),
    `target_mapping` float32 `[B, P, S]`, `masked_tokens` int32 `[B, S]`, and with memory
    `stream_start` int32 `[B]`; labels `target_ids` int32 and `target_mask` float32 `[B, P]`.
    Examples are laid out as in XLNet, `A [SEP] B [SEP] [CLS]`: the tokenizer's `[SEP]`,
    `[CLS]`, `[MASK]` play `<sep>`, `<cls>`, `<mask>`.

    Two ways to train:
    - without memory (`reuse_len=None`, the default): independent, shuffled examples;
    - with Transformer-XL memory (`reuse_len=R`): the corpus is read as `batch_size` text
      streams; row r of each batch continues row r of the batch before, the first R tokens of
      an example being the text that follows the previous one's first R tokens, and the model
      attends to the cached states of the previous batch (`mem_len` of them, R by default).
      The memory is dropped where a stream starts again and when a second `fit` starts the
      streams again; the training checkpoints hold it (every replica's), so a run resumed
      from `checkpoint_dir` continues exactly as an uninterrupted one.

    Args:
        tokenizer: a `WordPieceTokenizer` with `[PAD]`, `[SEP]`, `[CLS]` and `[MASK]`.
        seq_len: tokens per example, special tokens (and the reused part) included.
        seed: seed of every random choice: the same seed gives identical batches.
        max_predictions: `P`, targets per example; defaults to about `seq_len / mask_alpha`.
        mask_alpha: `K`: about one token in K is a target (6).
        max_span: longest target span, in words (5); span lengths n have p(n) ~ 1/n.
        perm_size: the factorization order is permuted within blocks of this many positions
            (must divide `seq_len` and `reuse_len`); None permutes each part whole.
        reuse_len: `R`, turns memory on (see above); None trains without memory.
        mem_len: cached states per layer; defaults to `reuse_len` (0 without memory).
        bidirectional: XLNet's `bi_data`: the second half of every batch (of every
            replica's batch) reads the text backward, and the model gives those rows the
            negated relative distances, so reversed text keeps its real geometry (needs an
            even batch size per replica).
        model: an `XLNetConfig`; defaults to `XLNetConfig.tiny()` sized to the tokenizer's
            vocabulary (use `XLNetConfig.base(vocabulary_size=...)` for real runs).

    Example:

        corpus = lmpipe.datasets.TextCorpus.shakespeare()
        tokenizer = lmpipe.datasets.WordPieceTokenizer.train(corpus, vocab_size=8000)
        pipe = XLNetPretraining(tokenizer, seq_len=128, reuse_len=64, seed=1)
        pipe.fit(corpus, batch_size=16, epochs=1, steps_per_epoch=100)
        pipe.export("serving/xlnet")

    Reference: Yang et al., "XLNet", 2019, sections 2.3-2.5 and appendix A.
    """

    def __init__(
        self,
        tokenizer,
        seq_len=128,
        seed=0,
        max_predictions=None,
        mask_alpha=6,
        max_span=5,
        perm_size=None,
        reuse_len=None,
        mem_len=None,
        bidirectional=False,
        model=None,
    ):
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"`seed` must be an int, got seed={seed!r}.")
        special_ids(tokenizer)  # names the missing special tokens
        if max_predictions is None:
            # A bad `seq_len` or `mask_alpha` is named by the check below, not by this default.
            check_number("mask_alpha", mask_alpha, minimum=2)
            check_number("seq_len", seq_len, minimum=1, integer=True)
            max_predictions = max(1, min(math.ceil(seq_len / mask_alpha), seq_len - 3))
        # Batch-size checks come with `dataset` and `fit`; 2 passes the even-size check here.
        check_xlnet_arguments(
            seq_len, max_predictions, reuse_len, perm_size, 2, bidirectional, mask_alpha, max_span
        )
        if mem_len is None:
            mem_len = reuse_len or 0
        check_memory_arguments(mem_len, reuse_len)
        if mem_len and not reuse_len:
            raise ValueError(
                f"`mem_len`={mem_len} needs `reuse_len`: memory is carried along text streams, "
                "which only the reuse layout reads."
            )
        self.model_config = self._model_config(model, tokenizer)
        self.options = {
            "seq_len": seq_len,
            "seed": seed,
            "max_predictions": max_predictions,
            "mask_alpha": mask_alpha,
            "max_span": max_span,
            "perm_size": perm_size,
            "reuse_len": reuse_len,
            "mem_len": mem_len,
            "bidirectional": bidirectional,
        }
        self.tokenizer = tokenizer
        self.seq_len = seq_len
        self.seed = seed
        self.max_predictions = max_predictions
        self.reuse_len = reuse_len
        self.mem_len = mem_len
        self.model = None
        self.batch_size = None  # per replica, fixed by the first fit when memory is on

    def _model_config(self, config, tokenizer):
        if config is None:
            config = XLNetConfig.tiny(vocabulary_size=tokenizer.vocabulary_size)
        if not isinstance(config, XLNetConfig):
            raise ValueError(f"`model` must be an XLNetConfig, got {config!r}.")
        if config.vocabulary_size != tokenizer.vocabulary_size:
            raise ValueError(
                f"The model's vocabulary_size ({config.vocabulary_size}) differs from the "
                f"tokenizer's ({tokenizer.vocabulary_size})."
            )
        return config

    # Data -------------------------------------------------------------------------------------

    def dataset(self, corpus, batch_size, epochs=None, input_context=None, shuffle_buffer=1024):
        """Pretraining batches from `corpus`, as `(features, labels)`.

        Args:
            corpus: a `TextCorpus`, or a `TokenizedCorpus` written with the same tokenizer.
            batch_size: examples per batch (per input pipeline); with memory, the number of
                text streams.
            epochs: passes over the corpus; None repeats forever. Every pass draws new
                targets and new factorization orders.
            input_context: a `tf.distribute.InputContext`; each input pipeline reads its own
                shard of the corpus.
            shuffle_buffer: without memory, examples shuffled together.
        """
        if len(corpus) < 1:
            raise ValueError("The corpus has no document.")
        return xlnet_examples(
            corpus,
            self.tokenizer,
            seq_len=self.seq_len,
            batch_size=batch_size,
            seed=self.seed,
            max_predictions=self.max_predictions,
            reuse_len=self.reuse_len,
            perm_size=self.options["perm_size"],
            mask_alpha=self.options["mask_alpha"],
            max_span=self.options["max_span"],
            bidirectional=self.options["bidirectional"],
            input_context=input_context,
            epochs=epochs,
            shuffle_buffer=shuffle_buffer,
        )

    def _replica_batches(self, corpus, per_replica, input_context):
        """The batches of one input pipeline, each replica always getting the same streams.

        An input pipeline feeds its `k` replicas in turn (element `i` goes to replica
        `i mod k`). With memory, one dataset of `k * per_replica` streams is split into `k`
        consecutive per-replica batches, so replica `j` always gets rows
        `j * per_replica ...` of the streams, the ones its memory belongs to. With
        `bidirectional`, the dataset's first half reads forward and its second half backward;
        replica `j` gets forward rows `j * h ... (j + 1) * h - 1` (`h = per_replica / 2`) and
        then the same rows of the backward half, so that each replica's batch is half forward,
        half backward, as the model's `bi_data` expects.
        """
        replicas = 1
        if input_context is not None:
            replicas = input_context.num_replicas_in_sync // input_context.num_input_pipelines
        if not self.mem_len or replicas == 1:
            return self.dataset(corpus, per_replica, input_context=input_context)
        streams = self.dataset(corpus, per_replica * replicas, input_context=input_context)

        def split(features, labels):
            def parts(tensor):  # [k * b, ...] -> [k, b, ...]
                if self.options["bidirectional"]:
                    half = [replicas, per_replica // 2, *tensor.shape[1:]]
                    forward, backward = tf.split(tensor, 2)  # [k * b / 2, ...] each
                    return tf.concat([tf.reshape(forward, half), tf.reshape(backward, half)], 1)
                return tf.reshape(tensor, [replicas, per_replica, *tensor.shape[1:]])

            return tf.data.Dataset.from_tensor_slices(
                (tf.nest.map_structure(parts, features), tf.nest.map_structure(parts, labels))
            )

        return streams.flat_map(split)

    # Model ------------------------------------------------------------------------------------

    def build_model(self, batch_size=None):
        """A new `XLNetPretrainer`; `batch_size` (per replica) is needed with memory."""
        return XLNetPretrainer(
            self.model_config,
            max_predictions=self.max_predictions,
            mem_len=self.mem_len,
            reuse_len=self.reuse_len if self.mem_len else None,
            batch_size=batch_size if self.mem_len else None,
            bi_data=self.options["bidirectional"],
        )

    @property
    def encoder(self):
        """The content-stream encoder (a functional `keras.Model` sharing the trained weights):
        `token_ids`, `segment_ids`, `padding_mask` -> `sequence_output`, `pooled_output`."""
        if self.model is None:
            raise ValueError("The pipeline has no model yet: call fit() or load() first.")
        return self.model.encoder

    def _run_config(self):
        return {"model": self.model_config.to_dict(), **self.options}

    def fit(self, corpus, batch_size=32, epochs=1, steps_per_epoch=100, **training_options):
        """Pretrain on `corpus`; return the Keras `History`.

        The arguments are those of `BertPretraining.fit` (`batch_size`, `epochs` and the
        training options of `lmpipe.pipelines.training.train`), except `steps_per_epoch`,
        which is required (100 by default): with memory the corpus is read as endless
        streams, so an epoch is a number of steps. With memory, `batch_size / replicas` is
        the number of streams per replica and stays fixed for the model's life.
        """
        options = check_training_options(f"{type(self).__name__}.fit", training_options)
        options["strategy"] = distribution_strategy(options.get("strategy"))
        per_replica = per_replica_batch_size(options["strategy"], batch_size)
        check_xlnet_arguments(
            self.seq_len,
            self.max_predictions,
            self.reuse_len,
            self.options["perm_size"],
            per_replica,
            self.options["bidirectional"],
            self.options["mask_alpha"],
            self.options["max_span"],
        )
        if len(corpus) < 1:
            raise ValueError("The corpus has no document.")
        if self.mem_len and self.batch_size not in (None, per_replica):
            raise ValueError(
                f"The model keeps memory for {self.batch_size} streams per replica; fit with "
                f"a batch size of {self.batch_size} per replica, got {per_replica}."
            )
        # Without checkpoints, a second fit continues training the same model.
        previous = self.model if options.get("checkpoint_dir") is None else None
        if previous is not None and self.mem_len:
            previous.reset_memory()  # the new dataset starts its streams again

        def make_dataset(per_replica_size, input_context, skip):
            return self._replica_batches(corpus, per_replica_size, input_context).skip(skip)

        self.model, history = train(
            lambda: self.build_model(per_replica),
            make_dataset,
            run_config=self._run_config(),
            batch_size=batch_size,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            model=previous,
            seed=self.seed,
            **options,
        )
        self.batch_size = per_replica if self.mem_len else None
        return history

    def evaluate(self, corpus, batch_size=None, steps=10, verbose="auto"):
        """Permutation-LM loss and accuracy on `steps` batches of `corpus`, as a dict.

        With memory, `batch_size` must be the training batch size per replica (the default)
        and the memory is reset before and after, so evaluation neither reads nor leaves
        training's context.
        """
        if self.model is None:
            raise ValueError("The pipeline has no model yet: call fit() or load() first.")
        if batch_size is None:
            batch_size = self.batch_size or 32
        if self.mem_len and batch_size != self.batch_size:
            raise ValueError(
                f"With memory the model evaluates batches of {self.batch_size} streams, got "
                f"batch_size={batch_size}."
            )
        if self.mem_len:
            self.model.reset_memory()
        try:
            return self.model.evaluate(
                self.dataset(corpus, batch_size), steps=steps, return_dict=True, verbose=verbose
            )
        finally:
            if self.mem_len:
                self.model.reset_memory()

    # Save, load, export -----------------------------------------------------------------------

    def save(self, directory):
        """Write the tokenizer, the pipeline's options and the trained model to `directory`
        (the memory is not saved)."""
        description = {"batch_size": self.batch_size, **self._run_config()}
        save_pipeline(directory, self, self.model, description, {"tokenizer": self.tokenizer})

    @classmethod
    def load(cls, directory):
        """A pipeline saved with `save`, with its trained model (and an empty memory)."""
        saved = SavedPipeline(directory, cls)
        batch_size = saved.description.pop("batch_size")
        config = XLNetConfig(**saved.description.pop("model"))
        pipeline = cls(saved.tokenizer(), model=config, **saved.description)
        pipeline.model = saved.model()
        pipeline.batch_size = batch_size
        return pipeline

    def export(self, base_dir, version=None, overwrite=False):
        """Export the content-stream encoder for TensorFlow Serving to `<base_dir>/<version>/`;
        return its path. Signatures as for BERT (`serving_default` with token ids, and
        `serve_text` / `serve_text_pair`), the texts packed the XLNet way:
        `text [SEP] [CLS]` and `text [SEP] text_pair [SEP] [CLS]`."""
        from lmpipe.serving import export_saved_model

        return export_saved_model(
            base_dir,
            self.encoder,
            self.tokenizer,
            self.seq_len,
            version=version,
            overwrite=overwrite,
            layout="xlnet",
        )
