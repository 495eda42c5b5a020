"""`SpanAnswerer`: fine-tune a pretrained encoder to answer questions with a span of a passage
(extractive question answering, SQuAD)."""

import dataclasses
import warnings

import numpy as np
import tensorflow as tf

from lmpipe.arguments import check_bool, check_number, check_positive_int, check_texts
from lmpipe.contract import ENCODER_FEATURES, END_POSITIONS, START_POSITIONS
from lmpipe.datasets.labelled.span_windows import answer_positions, piece_lengths, span_windows
from lmpipe.datasets.labelled.squad import SpanExamples, span_examples
from lmpipe.models.span_predictor import SpanPredictor
from lmpipe.models.span_search import best_span_graph, best_spans
from lmpipe.models.squad_metrics import squad_scores
from lmpipe.pipelines.fine_tuning import FineTuningPipeline
from lmpipe.pipelines.pipeline import PipelineOptions

# Questions cut into windows per graph call while the data is made.
WINDOW_CHUNK = 256
WARMUP_QUESTION = "Who says it?"
WARMUP_CONTEXT = "HAMLET. To be, or not to be: that is the question."


@dataclasses.dataclass(frozen=True)
class SpanAnswererOptions(PipelineOptions):
    """The options of `SpanAnswerer` (BERT's `run_squad.py` flags, same defaults).

    Attributes:
        seq_len: length of every window, `[CLS] question [SEP] context [SEP]` and padding.
        max_query_len: a question keeps its first `max_query_len` pieces; None: 64, or
            `(seq_len - 3) // 2` if smaller.
        doc_stride: pieces between the starts of a context's windows; None: 128, or half the
            room a window leaves the context (`seq_len - 3 - max_query_len`) if smaller. At
            most that room, so no piece is skipped.
        max_answer_len: the longest answer predicted, in pieces.
        no_answer: questions may have no answer (SQuAD v2.0): they train to `[CLS]`, and
            `answer` says "" where `[CLS]` beats every span. Without it, examples must have
            an answer.
        seed: seed of the head's initialization, dropout and the shuffling.
    """

    seq_len: int = 384
    max_query_len: int = None
    doc_stride: int = None
    max_answer_len: int = 30
    no_answer: bool = False

    def check(self):
        super().check()
        check_number("seq_len", self.seq_len, minimum=5, integer=True)
        if self.max_query_len is None:
            self.resolve("max_query_len", min(64, (self.seq_len - 3) // 2))
        check_number(
            "max_query_len", self.max_query_len, minimum=1, maximum=self.seq_len - 4, integer=True
        )
        room = self.seq_len - 3 - self.max_query_len
        if self.doc_stride is None:
            self.resolve("doc_stride", min(128, max(1, room // 2)))
        if not isinstance(self.doc_stride, int) or not 1 <= self.doc_stride <= room:
            raise ValueError(
                f"`doc_stride` must be an integer in [1, {room}] (seq_len - 3 - max_query_len, "
                f"the context pieces of a window), got doc_stride={self.doc_stride!r}."
            )
        check_positive_int("max_answer_len", self.max_answer_len)
        check_bool("no_answer", self.no_answer)


@dataclasses.dataclass(frozen=True)
class SpanData:
    """Checked examples and their windows: what `fit` and `evaluate` run on.

    Attributes:
        examples: the `SpanExamples`.
        windows: `span_windows`' result, numpy arrays (`W` windows).
        start_positions, end_positions: int32 `[W]`, each window's answer (0: `[CLS]`).
    """

    examples: SpanExamples
    windows: dict
    start_positions: np.ndarray
    end_positions: np.ndarray

    @property
    def size(self):
        """The number of windows."""
        return len(self.start_positions)


class SpanAnswerer(FineTuningPipeline):
    """Fine-tuning for extractive question answering: a pretrained encoder + start and end
    logits over the tokens (`SpanPredictor`), trained on questions whose answers are spans of
    their context, with data, training, evaluation (SQuAD's exact match and F1), answers,
    save/load and export.

    Each question and its context become windows `[CLS] question [SEP] context [SEP]` of
    `seq_len` pieces (BERT's `run_squad.py`: the question cut to `max_query_len` pieces, long
    contexts in windows every `doc_stride` pieces; see `lmpipe.datasets.labelled.span_windows`); a
    window trains to the answer's first and last piece, or to `[CLS]` when it does not hold
    the whole answer. Batches are `(features, labels)`: features `token_ids`, `segment_ids`,
    `padding_mask` int32 `[B, seq_len]`; labels `start_positions`, `end_positions` int32 `[B]`.
    Loss: the mean of the start and end cross-entropies.

    `answer` searches the best span of all windows of a question (start <= end, on context
    pieces, at most `max_answer_len` pieces) and maps it back to the exact characters of the
    context through the pieces' character offsets.

    The windows of the training data are cut once, in the TensorFlow graph (the same function
    the export runs), and held in memory.

    Args:
        tokenizer: the `WordPieceTokenizer` the encoder was pretrained with.
        encoder: a trained encoder `keras.Model` (inputs `token_ids`, `segment_ids`,
            `padding_mask`; output `sequence_output`), e.g. `BertPretraining.encoder` or
            `lmpipe.interop.hf.bert_from_pretrained(directory)`.
        **options: the fields of `SpanAnswererOptions` (`seq_len`, `max_query_len`,
            `doc_stride`, `max_answer_len`, `no_answer`, `seed`).

    Example:

        pipe = SpanAnswerer.from_pretrained(folder, seq_len=384)
        pipe.fit(lmpipe.datasets.read_squad("train-v1.1.json"), batch_size=32, epochs=2)
        pipe.answer(["Who says it?"], ["HAMLET. To be, or not to be."])
        # [{"answer": "HAMLET", "score": 0.93, "start": 0, "end": 6}]

    Reference: Devlin et al., "BERT", 2019, section 4.2 (SQuAD v1.1) and 4.3 (v2.0);
    Rajpurkar et al., "SQuAD", 2016 (the metrics).
    """

    options_class = SpanAnswererOptions
    predictions = ("answer", "embed")
    evaluation_data = "questions"
    # run_squad.py fine-tunes at 3e-5 (5e-5 in the paper's search) for 2 epochs.
    training_defaults = {"learning_rate": 3e-5}
    default_epochs = 2
    data_name = "the questions"

    wordpiece_words = True

    def __init__(self, tokenizer, encoder, **options):
        super().__init__(tokenizer, encoder, **options)
        self._lengths = piece_lengths(tokenizer)

    # Data -------------------------------------------------------------------------------------

    def windows(self, questions, contexts):
        """`span_windows` of `[N]` questions and contexts with the pipeline's options, numpy
        arrays (`W >= N` windows, `example_index` saying whose)."""
        options = self.options
        parts = []
        for begin in range(0, len(questions), WINDOW_CHUNK):
            cut = span_windows(
                self.tokenizer,
                tf.constant(questions[begin : begin + WINDOW_CHUNK], tf.string),
                tf.constant(contexts[begin : begin + WINDOW_CHUNK], tf.string),
                options.seq_len,
                options.max_query_len,
                options.doc_stride,
                self._lengths,
            )
            cut = {name: value.numpy() for name, value in cut.items()}
            cut["example_index"] = cut["example_index"] + begin
            parts.append(cut)
        return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}

    def check_data(self, examples, name="examples", training=True):
        """`examples` checked, with their windows, as `SpanData`.

        Args:
            examples: `SpanExamples` (`lmpipe.datasets.read_squad`, `shakespeare_speakers`),
                or `(questions, contexts, answers)` lists, answers per question a list of
                `(text, start)` (see `lmpipe.datasets.span_examples`).
            name: how errors name the examples.
            training: questions without an answer need the `no_answer` option to train on;
                to evaluate, they are scored as SQuAD v2.0 scores them (a v1.1 model answers
                them all, and scores 0 on them).
        """
        if name == "data":
            name = "train_examples"
        if isinstance(examples, SpanData):
            return examples
        if isinstance(examples, tuple) and len(examples) == 3:
            examples = span_examples(*examples, source=f"`{name}`")
        if not isinstance(examples, SpanExamples):
            raise ValueError(
                f"`{name}` must be SpanExamples (lmpipe.datasets.read_squad) or (questions, "
                f"contexts, answers), got {type(examples).__name__}."
            )
        if training and not self.options.no_answer:
            for qid, answers in zip(examples.ids, examples.answers, strict=True):
                if not answers:
                    raise ValueError(
                        f"{examples.path}, question id {qid!r} has no answer (SQuAD v2.0's "
                        "is_impossible): train on such questions with the `no_answer` "
                        "option on (no_answer=True)."
                    )
        windows = self.windows(examples.questions, examples.contexts)
        spans = [
            (start, start + len(text)) if answers else (-1, -1)
            for answers in examples.answers
            for text, start in answers[:1] or [("", -1)]
        ]
        starts, ends, covered = answer_positions(windows, spans)
        if not covered.all():
            index = int(np.flatnonzero(~covered)[0])
            raise ValueError(
                f"{examples.path}, question id {examples.ids[index]!r}: the answer "
                f"{examples.answers[index][0][0]!r} gives no WordPiece token (only characters "
                "the tokenizer drops)."
            )
        return SpanData(examples, windows, starts, ends)

    def dataset(
        self,
        examples,
        batch_size,
        shuffle=True,
        epochs=None,
        input_context=None,
        drop_remainder=None,
    ):
        """Batches `(features, {"start_positions", "end_positions"})` of the windows of
        `examples` (see `check_data`), shuffled again every epoch (deterministic given the
        seed) unless `shuffle=False`; `epochs=None` repeats forever; with a
        `tf.distribute.InputContext`, this input pipeline's shard; `drop_remainder` by default
        only when repeating forever."""
        check_positive_int("batch_size", batch_size)
        source = self.check_data(examples, "examples")
        return self.batches(source, batch_size, shuffle, epochs, input_context, drop_remainder)

    def examples_dataset(self, source):
        """One element per window: `(features, {"start_positions", "end_positions"})`."""
        features = {name: source.windows[name] for name in ENCODER_FEATURES}
        labels = {START_POSITIONS: source.start_positions, END_POSITIONS: source.end_positions}
        return tf.data.Dataset.from_tensor_slices((features, labels))

    def fit(self, data, *args, **kwargs):
        """As `Pipeline.fit`; `data` as `check_data` takes it."""
        with warnings.catch_warnings():
            # The span head reads the sequence output, as BERT's SQuAD model does: the
            # encoder's pooler gets no gradient and keeps its pretrained weights.
            warnings.filterwarnings(
                "ignore", r"Gradients do not exist for variables \['pooler", UserWarning
            )
            return super().fit(data, *args, **kwargs)

    # Model ------------------------------------------------------------------------------------

    def build_model(self):
        """A new `SpanPredictor`: a copy of the starting encoder and a fresh head (made where
        this is called, inside the strategy's scope; the starting encoder keeps its
        weights)."""
        return SpanPredictor(
            self.encoder_copy(), kernel_initializer=self.head_initializer(), name="span_answerer"
        )

    # Prediction and evaluation ----------------------------------------------------------------

    def logits(self, windows, batch_size=64):
        """`(start_logits, end_logits)`, float32 numpy `[W, seq_len]`, of `windows`."""
        check_positive_int("batch_size", batch_size)
        model = self.evaluation_model(batch_size)
        features = {name: windows[name] for name in ENCODER_FEATURES}
        dataset = tf.data.Dataset.from_tensor_slices(features).batch(batch_size)
        outputs = model.predict(dataset, verbose=0)
        return outputs["start_logits"], outputs["end_logits"]

    def answer(self, questions, contexts, top_k=1, max_answer_len=None, batch_size=64):
        """The answer to each question, a span of its context.

        Args:
            questions: `[N]` questions (str).
            contexts: `[N]` contexts, one per question; or one str for all the questions.
            top_k: answers per question.
            max_answer_len: the longest answer, in WordPiece pieces (default: the option).
            batch_size: windows per model call.

        Returns:
            With `top_k=1`, one dict per question: `{"answer": text, "score": probability,
            "start": first character, "end": character after the last}`, the text being
            `context[start:end]`; with `top_k > 1`, a list of up to `top_k` such dicts per
            question, best first. With `no_answer`, "" (start and end -1) means no answer.
        """
        questions = check_texts("questions", questions)
        contexts = [contexts] * len(questions) if isinstance(contexts, str) else contexts
        contexts = check_texts("contexts", contexts)
        if len(contexts) != len(questions):
            raise ValueError(
                f"`questions` has {len(questions)} entries and `contexts` {len(contexts)}; give "
                "one context per question, or one str for all."
            )
        check_positive_int("top_k", top_k)
        max_answer_len = self.options.max_answer_len if max_answer_len is None else max_answer_len
        check_positive_int("max_answer_len", max_answer_len)
        if not questions:
            return []
        windows = self.windows(questions, contexts)
        start_logits, end_logits = self.logits(windows, batch_size)
        answers = best_spans(
            windows,
            start_logits,
            end_logits,
            contexts,
            top_k,
            max_answer_len,
            self.options.no_answer,
        )
        empty = {"answer": "", "score": 0.0, "start": -1, "end": -1}
        if top_k == 1:
            return [found[0] if found else dict(empty) for found in answers]
        return answers

    def evaluate(self, data, batch_size=None, steps=None, verbose=0):
        """Loss, `start_accuracy`, `end_accuracy` (over windows) and SQuAD's `exact_match` and
        `f1` (over questions, in [0, 1], each question's best over its gold answers), as a
        dict of floats.

        Args:
            data: examples as `fit` takes them.
            batch_size: windows per model call.
            steps: None for every question; else only the questions whose windows all fall in
                the first `steps * batch_size` windows (at least one question), in order:
                questions are scored whole.
            verbose: unused (no progress bar).
        """
        del verbose
        batch_size = self.default_batch_size if batch_size is None else batch_size
        check_positive_int("batch_size", batch_size)
        check_positive_int("steps", steps, none=True)
        data = self.check_data(data, "examples", training=False)
        if steps is not None and steps * batch_size < data.size:
            example = data.windows["example_index"]
            # Questions before the one the limit cuts into, or the first one alone.
            kept = max(int(example[steps * batch_size]), 1)
            rows = example < kept
            data = SpanData(
                data.examples.subset(range(kept)),
                {name: value[rows] for name, value in data.windows.items()},
                data.start_positions[rows],
                data.end_positions[rows],
            )
        start_logits, end_logits = self.logits(data.windows, batch_size)
        results = {}
        for side, logits, targets in (
            ("start", start_logits, data.start_positions),
            ("end", end_logits, data.end_positions),
        ):
            shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
            log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
            results[f"{side}_loss"] = float(-log_probs[np.arange(len(targets)), targets].mean())
            results[f"{side}_accuracy"] = float((logits.argmax(axis=1) == targets).mean())
        results["loss"] = (results.pop("start_loss") + results.pop("end_loss")) / 2
        examples = data.examples
        found = best_spans(
            data.windows,
            start_logits,
            end_logits,
            examples.contexts,
            1,
            self.options.max_answer_len,
            self.options.no_answer,
        )
        predictions = [answers[0]["answer"] if answers else "" for answers in found]
        results.update(squad_scores(predictions, examples.answer_texts()))
        return results

    # Save, load, export -----------------------------------------------------------------------

    @classmethod
    def from_parts(cls, saved, config, options):
        model = saved.keras_model()
        pipeline = cls(saved.tokenizer(), model.encoder, **options.to_dict())
        pipeline.model = model
        return pipeline

    def answer_function(self):
        """A `tf.function` from `question` and `context` (string `[B]` each) to the best
        answer of each (`best_span_graph`): windows, model and span search in the graph."""
        model, tokenizer, options = self.require_model(), self.tokenizer, self.options
        lengths = self._lengths
        spec = [
            tf.TensorSpec([None], tf.string, name="question"),
            tf.TensorSpec([None], tf.string, name="context"),
        ]

        @tf.function(input_signature=spec, jit_compile=False, autograph=False)
        def answer(question, context):
            check = tf.debugging.assert_equal(
                tf.size(question), tf.size(context), message="give one `context` per `question`"
            )
            with tf.control_dependencies([check]):
                question = tf.identity(question)
            windows = span_windows(
                tokenizer,
                question,
                context,
                options.seq_len,
                options.max_query_len,
                options.doc_stride,
                lengths,
            )
            outputs = model({name: windows[name] for name in ENCODER_FEATURES}, training=False)
            return best_span_graph(
                windows,
                outputs["start_logits"],
                outputs["end_logits"],
                context,
                options.max_answer_len,
                options.no_answer,
            )

        return answer

    def write_export(self, base_dir, version, overwrite):
        """One `serving_default` signature: `question` and `context` (string `[batch]`) in;
        `answer` (string), `score` (float32, the span's probability in its window), `start`
        and `end` (int32 character offsets in the context, -1 for no answer) out, per
        question. Windows, the model and the span search run in the graph, so a client sends
        raw text and gets the answer text (see README)."""
        from lmpipe.serving.text_export import export_text_function, serving_module

        module = serving_module(self.require_model().variables, tokenizer=self.tokenizer)
        warmup = {"question": [WARMUP_QUESTION], "context": [WARMUP_CONTEXT]}
        return export_text_function(
            base_dir,
            module,
            self.answer_function(),
            version=version,
            overwrite=overwrite,
            warmup_texts=warmup,
        )


def first_words_answers(examples, words):
    """A baseline that reads no question: the first `words` words of each context (split at
    whitespace), as answer texts."""
    check_positive_int("words", words)
    return [" ".join(context.split()[:words]) for context in examples.contexts]
