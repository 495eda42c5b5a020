"""`GptPretraining`: causal LM data, a GPT model, training, evaluation, generation, export."""

import math

import keras
import tensorflow as tf

from lmpipe.datasets.causal_lm import causal_lm_examples, check_causal_sequence_length
from lmpipe.datasets.wordpiece import WordPieceTokenizer
from lmpipe.models.generation import check_generation_arguments, generate
from lmpipe.models.gpt import GptCausalLM, GptConfig
from lmpipe.pipelines.saved_pipeline import SavedPipeline, save_pipeline
from lmpipe.pipelines.training import check_training_options, one_pass_steps, train
from lmpipe.serving.text_export import export_text_function


class LanguageModelPretraining:
    """What the GPT and ELMo pipelines share: the causal LM data, `fit`, `evaluate`, `save`
    and `load`. Subclasses set `config_class`, `bidirectional`, `default_config` and
    `build_model`."""

    config_class = None
    bidirectional = False
    # Language models train well at a higher peak learning rate than `train`'s default.
    training_defaults = {"learning_rate": 3e-4}

    def __init__(self, tokenizer, seq_len=128, model=None, seed=0, group_size=64):
        check_causal_sequence_length(seq_len)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"`seed` must be an int, got seed={seed!r}.")
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise ValueError(f"`group_size` must be a positive integer, got {group_size!r}.")
        if not isinstance(tokenizer, WordPieceTokenizer):
            raise ValueError(f"`tokenizer` must be a WordPieceTokenizer, got {tokenizer!r}.")
        self.tokenizer = tokenizer
        self.seq_len = seq_len
        self.seed = seed
        self.group_size = group_size
        self.model_config = self._model_config(model)
        self.options = {"seq_len": seq_len, "seed": seed, "group_size": group_size}
        self.model = None
        self._generation_functions = {}

    def _model_config(self, config):
        if config is None:
            config = self.default_config()
        if not isinstance(config, self.config_class):
            raise ValueError(
                f"`model` must be a {self.config_class.__name__} or None, got {config!r}."
            )
        if config.vocabulary_size != self.tokenizer.vocabulary_size:
            raise ValueError(
                f"The model's vocabulary_size ({config.vocabulary_size}) differs from the "
                f"tokenizer's ({self.tokenizer.vocabulary_size})."
            )
        return config

    # Data -------------------------------------------------------------------------------------

    def dataset(
        self,
        corpus,
        batch_size,
        epochs=None,
        input_context=None,
        drop_remainder=True,
        shuffle_window=1024,
    ):
        """Causal LM batches from `corpus`, as `(features, labels)` (see
        `lmpipe.datasets.causal_lm.causal_lm_examples`).

        Args:
            corpus: a `TextCorpus`, or a `TokenizedCorpus` written with the same tokenizer.
            batch_size: examples per batch (per replica when given an `input_context`).
            epochs: passes over the corpus; None repeats forever, each pass in a new order.
            input_context: a `tf.distribute.InputContext`; each input pipeline reads its
                own shard.
            drop_remainder: drop the last incomplete batch (static batch shapes).
            shuffle_window: examples shuffled together.
        """
        return causal_lm_examples(
            corpus,
            self.tokenizer,
            seq_len=self.seq_len,
            batch_size=batch_size,
            seed=self.seed,
            input_context=input_context,
            epochs=epochs,
            bidirectional=self.bidirectional,
            group_size=self.group_size,
            shuffle_window=shuffle_window,
            drop_remainder=drop_remainder,
        )

    def steps_in_one_pass(self, corpus, batch_size):
        """Number of full batches one pass over `corpus` gives (counted by building them)."""
        dataset = self.dataset(corpus, batch_size, epochs=1, shuffle_window=1)
        return int(dataset.reduce(0, lambda count, _: count + 1).numpy())

    # Training ---------------------------------------------------------------------------------

    def _run_config(self):
        return {"model": self.model_config.to_dict(), **self.options}

    def fit(self, corpus, batch_size=32, epochs=1, steps_per_epoch=None, **training_options):
        """Pretrain on `corpus` with `lmpipe.pipelines.training.train`; return the `History`.

        Args:
            corpus: a `TextCorpus` or `TokenizedCorpus`.
            batch_size: global batch size (divided among the replicas; must divide evenly).
            epochs: number of epochs of `steps_per_epoch` steps.
            steps_per_epoch: defaults to the number of batches in one pass over the corpus.
            **training_options: the training options of `lmpipe.pipelines.training.train`
                (`strategy`, `checkpoint_dir`, `learning_rate`, ..., `verbose`), with
                `learning_rate=3e-4` by default.
        """
        options = check_training_options(
            f"{type(self).__name__}.fit", training_options, self.training_defaults
        )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}.")
        if steps_per_epoch is None:
            steps = self.steps_in_one_pass(corpus, batch_size)
            steps_per_epoch = one_pass_steps(steps, batch_size)
        previous = self.model if options.get("checkpoint_dir") is None else None

        def make_dataset(per_replica, input_context, skip):
            return self.dataset(corpus, per_replica, input_context=input_context).skip(skip)

        self.model, history = train(
            self.build_model,
            make_dataset,
            run_config=self._run_config(),
            batch_size=batch_size,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            model=previous,
            seed=self.seed,
            **options,
        )
        return history

    def _require_model(self):
        if self.model is None:
            raise ValueError("The pipeline has no model yet: call fit() or load() first.")
        return self.model

    def _evaluate(self, corpus, batch_size, steps, verbose):
        model = self._require_model()
        dataset = self.dataset(corpus, batch_size, epochs=None if steps else 1)
        return model.evaluate(dataset, steps=steps, return_dict=True, verbose=verbose)

    # Save and load ----------------------------------------------------------------------------

    def save(self, directory):
        """Write the tokenizer, the pipeline's options and the trained model to `directory`."""
        tokenizers = {"tokenizer": self.tokenizer}
        save_pipeline(directory, self, self.model, self._run_config(), tokenizers)

    @classmethod
    def load(cls, directory):
        """A pipeline saved with `save`, with its trained model."""
        saved = SavedPipeline(directory, cls)
        config = cls.config_class(**saved.description.pop("model"))
        pipeline = cls(saved.tokenizer(), model=config, **saved.description)
        pipeline.model = saved.model()
        return pipeline


class GptPretraining(LanguageModelPretraining):
    """GPT pretraining: next-token prediction on packed windows of text, and generation.

    `dataset(corpus, batch_size)` yields the causal LM contract: features `token_ids`,
    `padding_mask` int32 `[B, seq_len]`; labels `next_ids` int32 and `weights` float32
    `[B, seq_len]`. Documents end with `[SEP]` (see `lmpipe.datasets.causal_lm`), so prompts
    are read after a `[SEP]` and generation stops at `[SEP]`.

    Args:
        tokenizer: a `WordPieceTokenizer`.
        seq_len: tokens per training example.
        model: a `GptConfig`; defaults to `GptConfig.small()` sized to the tokenizer's
            vocabulary. Its `max_sequence_length` must hold `seq_len`.
        seed: seed of the data order, the initialization and dropout.
        group_size: documents joined into one token stream before cutting windows.

    Example:

        corpus = lmpipe.datasets.TextCorpus.shakespeare(genres=["comedies"])
        tokenizer = lmpipe.datasets.WordPieceTokenizer.train(corpus, vocab_size=4000)
        pipe = GptPretraining(tokenizer, seq_len=128, model=GptConfig.tiny(vocabulary_size=4000))
        pipe.fit(corpus, batch_size=16, epochs=2)
        pipe.generate(["to be or not"], max_new_tokens=20, strategy="top_p", p=0.9)

    Reference: Radford et al., "Language Models are Unsupervised Multitask Learners", 2019.
    """

    config_class = GptConfig

    def default_config(self):
        # GPT-2's 1024 positions: longer sequences need a config that says so, rather than a
        # position table as long as any seq_len given.
        return GptConfig.small(vocabulary_size=self.tokenizer.vocabulary_size)

    def _model_config(self, config):
        config = super()._model_config(config)
        if config.max_sequence_length < self.seq_len:
            raise ValueError(
                f"`seq_len`={self.seq_len} exceeds the model's max_sequence_length "
                f"({config.max_sequence_length})."
            )
        return config

    def build_model(self):
        """A new `GptCausalLM` for the pipeline's configuration."""
        return GptCausalLM(self.model_config)

    def evaluate(self, corpus, batch_size=32, steps=None, verbose="auto"):
        """`{"loss", "next_token_loss", "next_token_accuracy", "perplexity"}` on one pass
        over `corpus` (or `steps` batches); perplexity = exp(mean next-token loss)."""
        results = self._evaluate(corpus, batch_size, steps, verbose)
        results["perplexity"] = math.exp(results["next_token_loss"])
        return results

    # Generation -------------------------------------------------------------------------------

    def _generation_options(self, max_new_tokens, strategy, k, p, temperature, seed):
        seed = self.seed if seed is None else seed
        check_generation_arguments(max_new_tokens, strategy, k, p, temperature, None, seed)
        if max_new_tokens >= self.model_config.max_sequence_length:
            raise ValueError(
                f"`max_new_tokens`={max_new_tokens} leaves no room for a prompt in the model's "
                f"max_sequence_length ({self.model_config.max_sequence_length})."
            )
        return {
            "max_new_tokens": max_new_tokens,
            "strategy": strategy,
            "k": k,
            "p": p,
            "temperature": float(temperature),
            "seed": seed,
        }

    def generate_texts(self, texts, max_new_tokens, strategy, k, p, temperature, seed):
        """Graph code: string `[B]` prompts -> string `[B]` continuations.

        Each prompt is `[SEP]` + its pieces, cut from the left to leave room for
        `max_new_tokens`; generation stops at `[SEP]`; the continuation is detokenized
        without special tokens. What `generate` and the exported signature run.
        """
        model = self._require_model()
        max_prompt = self.model_config.max_sequence_length - max_new_tokens
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
        )
        return self.tokenizer.detokenize(generated["token_ids"], skip_special_tokens=True)

    def generation_function(
        self, max_new_tokens=32, strategy="greedy", k=50, p=0.9, temperature=1.0, seed=None
    ):
        """A `tf.function` (no XLA), string `[B]` -> `{"text": string [B]}`, for serving."""
        options = self._generation_options(max_new_tokens, strategy, k, p, temperature, seed)
        model = self._require_model()
        # One traced function per model and settings: tracing the loop takes seconds.
        key = (id(model), tuple(sorted(options.items())))
        cached = self._generation_functions.get(key)
        if cached is not None:
            return cached

        def serve(text):
            return {"text": self.generate_texts(text, **options)}

        function = tf.function(
            serve, input_signature=[tf.TensorSpec([None], tf.string)], jit_compile=False
        )
        self._generation_functions = {key: function}  # only the latest: models change
        return function

    def generate(
        self, prompts, max_new_tokens=32, strategy="greedy", k=50, p=0.9, temperature=1.0, seed=None
    ):
        """Continue each prompt; return the continuations as a list of `str`.

        Args:
            prompts: a list of `str`.
            max_new_tokens: pieces generated at most per prompt (generation stops at `[SEP]`).
            strategy: "greedy", "top_k" or "top_p" (see `lmpipe.models.generation.generate`).
            k, p, temperature: the sampling parameters.
            seed: sampling seed; defaults to the pipeline's seed.
        """
        if isinstance(prompts, str) or not all(isinstance(text, str) for text in prompts):
            raise ValueError("`prompts` must be a list of strings.")
        if not prompts:
            return []
        function = self.generation_function(max_new_tokens, strategy, k, p, temperature, seed)
        texts = function(tf.constant(list(prompts), tf.string))["text"]
        return [text.decode("utf-8") for text in texts.numpy().tolist()]

    # Export -----------------------------------------------------------------------------------

    def serving_module(self):
        """A `tf.Module` tracking what generation reads: the model's variables (as the
        `tf.Variable`s Keras wraps, which the TF1 loader restores) and the tokenizer."""
        model = self._require_model()
        module = tf.Module(name="lmpipe_gpt_serving")
        unique = {}
        for variable in model.variables:
            variable = variable.value if isinstance(variable, keras.Variable) else variable
            unique.setdefault(id(variable), variable)
        module.model_variables = list(unique.values())
        module.tokenizer = self.tokenizer
        return module

    def export(
        self,
        base_dir,
        version=None,
        overwrite=False,
        max_new_tokens=32,
        strategy="greedy",
        k=50,
        p=0.9,
        temperature=1.0,
        seed=None,
    ):
        """Export `<base_dir>/<version>/`, a SavedModel for TF Serving; return its path.

        Its `serving_default` signature takes `text` (string `[B]` prompts) and returns
        `text` (string `[B]` continuations): tokenization, generation with the key/value
        cache and detokenization all run in the graph, without XLA. The sampling settings
        are fixed at export; sampling is keyed by `seed`, so a prompt always gets the same
        continuation from one export.
        """
        function = self.generation_function(max_new_tokens, strategy, k, p, temperature, seed)
        module = self.serving_module()
        return export_text_function(
            base_dir,
            module,
            function,
            version=version,
            overwrite=overwrite,
            warmup_texts=["to be or not to be"],
        )
