"""`GptPretraining`: causal LM data, a GPT model, training, evaluation, generation, export."""

import dataclasses
import os

import tensorflow as tf

from lmpipe.arguments import check_number, check_positive_int, check_seed, check_texts
from lmpipe.datasets.examples.causal_lm import causal_lm_examples, check_causal_sequence_length
from lmpipe.interop.hf.checkpoint import checkpoint_model_type
from lmpipe.interop.hf.gpt2 import gpt2_config_from_hf, load_gpt2_weights
from lmpipe.models.gpt import GptCausalLM, GptConfig, gpt
from lmpipe.models.samplers import generate, sampler_for, traced_function
from lmpipe.pipelines.command_line import CommandLine, shared_options
from lmpipe.pipelines.pipeline import PipelineOptions, TokenizerPipeline, perplexity
from lmpipe.serving.text_export import export_text_function, serving_module


@dataclasses.dataclass(frozen=True)
class LanguageModelOptions(PipelineOptions):
    """The options of `ElmoPretraining` (and, with `document_attention`, `GptPretraining`).

    Attributes:
        seq_len: tokens per training example.
        group_size: documents joined into one token stream before cutting rows: the window
            of the seekable stream (see `lmpipe.datasets.examples.causal_lm`).
        seed: seed of the data order, the initialization and dropout.
    """

    seq_len: int = 128
    group_size: int = 64

    def check(self):
        super().check()
        check_causal_sequence_length(self.seq_len)
        check_positive_int("group_size", self.group_size)


@dataclasses.dataclass(frozen=True)
class GptPretrainingOptions(LanguageModelOptions):
    """The options of `GptPretraining`: `LanguageModelOptions`' and

    Attributes:
        document_attention: give the batches `document_ids`, so that a token attends to the
            tokens of its own document only, with positions from 0 at each document's start
            (True, the default); False: read across the documents of a row, as GPT-2.
    """

    document_attention: bool = True

    def check(self):
        super().check()
        if not isinstance(self.document_attention, bool):
            raise ValueError(
                f"`document_attention` must be True or False, got {self.document_attention!r}."
            )


def _gpt_options(flags):
    options = shared_options(flags)
    if flags.document_attention is not None:
        options["document_attention"] = flags.document_attention
    return options


class LanguageModelPretraining(TokenizerPipeline):
    """What the GPT and ELMo pipelines share: the causal LM data on any tokenizer with a
    separator (WordPiece, SentencePiece, GPT-2's byte-level BPE).
    Subclasses set `config_classes`, `bidirectional`, `default_config` and `build_model`."""

    options_class = LanguageModelOptions
    tokenizer_roles = ("pad", "sep")
    bidirectional = False
    # Language models train well at a higher peak learning rate than `train`'s default.
    training_defaults = {"learning_rate": 3e-4}

    # Data -------------------------------------------------------------------------------------

    def document_ids(self):
        """Whether the batches carry `document_ids` (GPT's attention within documents); ELMo's
        LSTMs read across documents, as bilm-tf does."""
        return False

    def dataset(
        self, corpus, batch_size, epochs=None, input_context=None, drop_remainder=True, start=None
    ):
        """Causal LM batches from `corpus`, as `(features, labels)`, from the seekable stream
        (see `lmpipe.datasets.examples.causal_lm.causal_lm_examples`).

        Args:
            corpus: a `TextCorpus`, or a `TokenizedCorpus` written with the same tokenizer.
            batch_size: examples per batch (per replica when given an `input_context`).
            epochs: passes over the corpus; None repeats forever, each pass in a new order.
            input_context: a `tf.distribute.InputContext`; each input pipeline keeps its
                replicas' share of every global batch.
            drop_remainder: drop the last incomplete batch (static batch shapes).
            start: a `StreamPosition`: where to start (None: the beginning). The batches
                from `StreamPosition.after(batch)` are the ones after `batch`.
        """
        check_positive_int("batch_size", batch_size)
        return causal_lm_examples(
            corpus,
            self.tokenizer,
            seq_len=self.options.seq_len,
            batch_size=batch_size,
            seed=self.options.seed,
            input_context=input_context,
            epochs=epochs,
            bidirectional=self.bidirectional,
            document_ids=self.document_ids(),
            window_size=self.options.group_size,
            start=start,
            drop_remainder=drop_remainder,
        )

    def training_batches(self, corpus, per_replica, input_context, start=None):
        """The endless training batches of one input pipeline, from `start` (a
        `StreamPosition`; None: the beginning)."""
        return self.dataset(corpus, per_replica, input_context=input_context, start=start)

    def steps_in_one_pass(self, corpus, batch_size):
        """Number of full batches one pass over `corpus` gives (counted by building them)."""
        dataset = self.dataset(corpus, batch_size, epochs=1)
        return int(dataset.reduce(0, lambda count, _: count + 1).numpy())


class GptPretraining(LanguageModelPretraining):
    """GPT pretraining: next-token prediction on packed windows of text, and generation.

    `dataset(corpus, batch_size)` yields the causal LM contract: features `token_ids`,
    `padding_mask`, `document_ids` int32 `[B, seq_len]` and `stream_position` int64 `[B, 3]`;
    labels `next_ids` int32 and `weights` float32 `[B, seq_len]`. Documents are opened by
    `[SEP]` (see `lmpipe.datasets.examples.causal_lm`), so prompts are read after a `[SEP]`
    and generation stops at `[SEP]`. A row packs several documents; with `document_ids` (the
    default, `document_attention=True`) a token attends to its own document only and
    positions restart at each document, so every document is read as if alone; with
    `document_attention=False` the batches have no `document_ids` and a token reads the
    documents before it in the row (GPT-2's training).

    Args:
        tokenizer: a `WordPieceTokenizer`, `SentencePieceTokenizer` or `BytePairTokenizer`
            (GPT-2's; its `<|endoftext|>` is the separator).
        config: a `GptConfig`; defaults to `GptConfig.small()` sized to the tokenizer's
            vocabulary. Its `max_sequence_length` must hold `seq_len`.
        **options: the fields of `GptPretrainingOptions` (`seq_len`, `group_size`, `seed`,
            `document_attention`).

    Example:

        corpus = lmpipe.datasets.TextCorpus.shakespeare(genres=["comedies"])
        tokenizer = lmpipe.datasets.WordPieceTokenizer.train(corpus, vocab_size=4000)
        pipe = GptPretraining(tokenizer, GptConfig.tiny(vocabulary_size=4000), seq_len=128)
        pipe.fit(corpus, batch_size=16, epochs=2)
        pipe.generate(["to be or not"], max_new_tokens=20, strategy="top_p", p=0.9)

    Reference: Radford et al., "Language Models are Unsupervised Multitask Learners", 2019.
    """

    options_class = GptPretrainingOptions
    config_classes = (GptConfig,)
    predictions = ("generate",)
    command_line = CommandLine(
        "gpt",
        options=_gpt_options,
        config_class=GptConfig,
        default_preset="tiny",
        published_preset="small",
        build_model=gpt,
        tokenizer="bpe",
        objective="a language model of the next token",
        checkpoint_type="gpt2",
        document_attention=True,
    )

    def document_ids(self):
        return self.options.document_attention

    def default_config(self):
        # GPT-2's 1024 positions: longer sequences need a config that says so, rather than a
        # position table as long as any seq_len given.
        return GptConfig.small(vocabulary_size=self.tokenizer.vocabulary_size)

    def check_config(self, config):
        if config.max_sequence_length < self.options.seq_len:
            raise ValueError(
                f"`seq_len`={self.options.seq_len} exceeds the model's max_sequence_length "
                f"({config.max_sequence_length})."
            )

    @classmethod
    def from_pretrained(cls, directory, **options):
        """A Hugging Face GPT-2 checkpoint folder as a pipeline: its tokenizer, configuration
        and weights (see `lmpipe.interop.hf.gpt2_from_pretrained`), ready to `generate`, `evaluate`,
        `export` or continue pretraining with `fit` (a resumed run reads its checkpoint
        instead). The tokenizer is the folder's `vocab.json` and `merges.txt`
        (`BytePairTokenizer`), or the `vocab.txt` or `spiece.model` of a folder that
        `save_pretrained` wrote from a WordPiece or SentencePiece GPT, or the folder's
        `tokenizer.json` where it has none of those (transformers 5). `options` as the
        constructor's; `seq_len` must fit the checkpoint's `n_positions`."""
        from lmpipe.tokenizers.registry import pretrained_tokenizer

        found = checkpoint_model_type(directory)
        if found != "gpt2":
            raise ValueError(
                f"{directory} holds a {found!r} checkpoint; GptPretraining.from_pretrained "
                "reads 'gpt2' ones."
            )
        config = gpt2_config_from_hf(os.path.join(directory, "config.json"))
        pipe = cls(pretrained_tokenizer(directory), config, **options)
        pipe.pretrained = os.fspath(directory)
        pipe.model = pipe.build_model()
        return pipe

    def build_model(self):
        """A new `GptCausalLM` for the pipeline's configuration, with the weights of the
        checkpoint folder `from_pretrained` read, if any."""
        model = GptCausalLM(self.config)
        if getattr(self, "pretrained", None):
            load_gpt2_weights(model, self.pretrained)
        return model

    def save_pretrained(self, directory):
        """Write the trained model and the tokenizer as a Hugging Face folder that
        `transformers` loads as `GPT2LMHeadModel` (see `lmpipe.interop.hf.save_pretrained`), and
        `from_pretrained` reads back."""
        from lmpipe.interop.hf.writer import save_pretrained

        save_pretrained(directory, self.require_model(), self.config, self.tokenizer)

    def derived_metrics(self, results):
        """Adds `perplexity`, exp(mean next-token loss), to `evaluate`'s `loss`,
        `next_token_loss` and `next_token_accuracy`."""
        return {**results, "perplexity": perplexity(results["next_token_loss"])}

    # Generation -------------------------------------------------------------------------------

    def _generation_options(
        self, max_new_tokens, strategy, k, p, temperature, seed, beam_width, length_penalty
    ):
        seed = self.options.seed if seed is None else seed
        check_number("max_new_tokens", max_new_tokens, minimum=1, integer=True)
        sampler_for(strategy, k, p, temperature, beam_width, length_penalty)  # checks them
        check_seed(seed)
        if max_new_tokens >= self.config.max_sequence_length:
            raise ValueError(
                f"`max_new_tokens`={max_new_tokens} leaves no room for a prompt in the model's "
                f"max_sequence_length ({self.config.max_sequence_length})."
            )
        return {
            "max_new_tokens": max_new_tokens,
            "strategy": strategy,
            "k": k,
            "p": p,
            "temperature": float(temperature),
            "seed": seed,
            "beam_width": beam_width,
            "length_penalty": length_penalty,
        }

    def generate_texts(
        self, texts, max_new_tokens, strategy, k, p, temperature, seed, beam_width, length_penalty
    ):
        """Graph code: string `[B]` prompts -> string `[B]` continuations.

        Each prompt is `[SEP]` + its pieces, cut from the left to leave room for
        `max_new_tokens`; generation stops at `[SEP]`; the continuation is detokenized
        without special tokens. What `generate` and the exported signature run.
        """
        model = self.require_model()
        max_prompt = self.config.max_sequence_length - max_new_tokens
        pieces = self.tokenizer.tokenize(texts)  # [B, (pieces)]
        separators = tf.fill([pieces.nrows(), 1], tf.constant(self.tokenizer.sep_id, tf.int32))
        prompts = tf.concat([separators, pieces], axis=1)[:, -max_prompt:]
        prompt_ids = prompts.to_tensor(default_value=self.tokenizer.pad_id)  # [B, P]
        prompt_mask = tf.ones_like(prompts, tf.int32).to_tensor(default_value=0)
        generated = generate(
            model,
            prompt_ids,
            prompt_mask,
            eos_id=self.tokenizer.sep_id,
            pad_id=self.tokenizer.pad_id,
            max_new_tokens=max_new_tokens,
            strategy=strategy,
            k=k,
            p=p,
            temperature=temperature,
            seed=seed,
            beam_width=beam_width,
            length_penalty=length_penalty,
        )
        return self.tokenizer.detokenize(generated.token_ids, skip_special_tokens=True)

    def generation_function(
        self,
        max_new_tokens=32,
        strategy="greedy",
        k=50,
        p=0.9,
        temperature=1.0,
        seed=None,
        beam_width=4,
        length_penalty="average",
    ):
        """A `tf.function` (no XLA), string `[B]` -> `{"text": string [B]}`, for serving."""
        options = self._generation_options(
            max_new_tokens, strategy, k, p, temperature, seed, beam_width, length_penalty
        )
        model = self.require_model()

        def make():
            def serve(text):
                return {"text": self.generate_texts(text, **options)}

            return tf.function(
                serve, input_signature=[tf.TensorSpec([None], tf.string)], jit_compile=False
            )

        key = ("generate_text", self.options.seq_len, tuple(sorted(options.items())))
        return traced_function(model, key, make)

    def generate(
        self,
        prompts,
        max_new_tokens=32,
        strategy="greedy",
        k=50,
        p=0.9,
        temperature=1.0,
        seed=None,
        beam_width=4,
        length_penalty="average",
    ):
        """Continue each prompt; return the continuations as a list of `str`.

        Args:
            prompts: a list of `str`.
            max_new_tokens: pieces generated at most per prompt (generation stops at `[SEP]`).
            strategy: "greedy", "top_k", "top_p" or "beam" (see
                `lmpipe.models.samplers.generate`).
            k, p, temperature: the sampling parameters.
            seed: sampling seed; defaults to the pipeline's seed.
            beam_width, length_penalty: beam search's (`[SEP]` ends a hypothesis), see
                `lmpipe.models.samplers.BeamSampler`.
        """
        prompts = check_texts("prompts", prompts)
        if not prompts:
            return []
        function = self.generation_function(
            max_new_tokens, strategy, k, p, temperature, seed, beam_width, length_penalty
        )
        texts = function(tf.constant(list(prompts), tf.string))["text"]
        return [text.decode("utf-8") for text in texts.numpy().tolist()]

    # Export -----------------------------------------------------------------------------------

    def serving_module(self):
        """A `tf.Module` tracking what generation reads: the model's variables (as the
        `tf.Variable`s Keras wraps, which the TF1 loader restores) and the tokenizer."""
        return serving_module(self.require_model().variables, tokenizer=self.tokenizer)

    def write_export(
        self,
        base_dir,
        version,
        overwrite,
        max_new_tokens=32,
        strategy="greedy",
        k=50,
        p=0.9,
        temperature=1.0,
        seed=None,
        beam_width=4,
        length_penalty="average",
    ):
        """Its `serving_default` signature takes `text` (string `[B]` prompts) and returns
        `text` (string `[B]` continuations): tokenization, generation with the key/value
        cache and detokenization all run in the graph, without XLA. The sampling settings
        are fixed at export; sampling is keyed by `seed`, so a prompt always gets the same
        continuation from one export. `export` takes the generation settings
        (`max_new_tokens`, `strategy`, `k`, `p`, `temperature`, `seed`, `beam_width`,
        `length_penalty`) as keywords.
        """
        function = self.generation_function(
            max_new_tokens, strategy, k, p, temperature, seed, beam_width, length_penalty
        )
        module = self.serving_module()
        return export_text_function(
            base_dir,
            module,
            function,
            version=version,
            overwrite=overwrite,
            warmup_texts=["to be or not to be"],
        )
