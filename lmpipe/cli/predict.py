"""`lmpipe predict RUN TEXTS`: what a saved pipeline does with text (fill-mask, classify, tag,
generate, translate, most similar words, answer, embed), printed or as JSON lines."""

import json
import sys

from lmpipe.cli import flags, runs

HELP = (
    "run a saved pipeline on texts: fill-mask, classify, generate, translate, "
    "most similar words, answer"
)
DESCRIPTION = (
    "Runs what the pipeline does with text: BERT and ALBERT fill each [MASK], "
    "a classifier names the class, GPT continues the text, a translation model translates, "
    "word2vec lists the nearest words, a question answerer (finetune spans) answers each "
    "text as a question about --context. Texts come from the arguments, or one a line on "
    "stdin."
)


def add_parser(commands, common):
    """Add `lmpipe predict` to the `commands` sub-parsers."""
    predict = flags.add_verb(commands, "predict", common, help=HELP, description=DESCRIPTION)
    flags.add_run(predict)
    predict.add_argument("texts", nargs="*", help="texts (default: the lines of stdin)")
    predict.add_argument(
        "--top-k", type=int, default=5, help="fill-mask and word2vec: results per query"
    )
    predict.add_argument(
        "--max-new-tokens", type=int, default=32, help="gpt: tokens generated at most"
    )
    predict.add_argument(
        "--beam-width",
        type=int,
        default=None,
        help="translation: beam width (default 4; 1: greedy); gpt: beam search (default: greedy)",
    )
    predict.add_argument(
        "--task",
        default=None,
        choices=list(PREDICTIONS),
        help="what to do with the texts (default: the first the pipeline does of these; "
        "embed: one vector a text, the mean of the encoder's outputs)",
    )
    predict.add_argument(
        "--context",
        default=None,
        help="answer: the passage the questions are answered from (@FILE reads a file)",
    )
    predict.add_argument("--answers", type=int, default=1, help="answer: answers per question")
    predict.add_argument(
        "--max-answer-len",
        type=int,
        default=None,
        help="answer: the longest answer in pieces (default: the pipeline's)",
    )
    predict.add_argument("--json", action="store_true", help="one JSON object a text")
    predict.set_defaults(run=run)


def run(arguments):
    directory = runs.require_saved_pipeline(arguments.run_dir)
    flags.check_positive(arguments, "top_k", "max_new_tokens", "beam_width", "answers")
    texts = arguments.texts or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not texts:
        raise SystemExit("error: no text to predict: give texts as arguments or on stdin")
    pipe = runs.load_pipeline(directory)
    supported = list(type(pipe).predictions)  # what the family declares it predicts
    if not supported:
        raise SystemExit(
            f"error: a {type(pipe).__name__} pipeline has nothing to predict from text; "
            f"export it (`lmpipe export`) to serve its outputs"
        )
    if arguments.task is not None and arguments.task not in supported:
        raise SystemExit(
            f"error: --task {arguments.task}: a {type(pipe).__name__} pipeline does "
            f"{', '.join(supported)}"
        )
    task = arguments.task or supported[0]
    try:
        results = PREDICTIONS[task](pipe, texts, arguments)
    except (KeyError, ValueError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise SystemExit(f"error: {flags.as_flags(str(message))}") from None
    for text, result in zip(texts, results, strict=True):
        if arguments.json:
            print(json.dumps({"text": text, task: result}, ensure_ascii=False))
        else:
            print(FORMATS[task](text, result))
    return 0


def _fill_mask(pipe, texts, arguments):
    return pipe.fill_mask(texts, top_k=arguments.top_k)


def _classify(pipe, texts, arguments):
    del arguments
    probabilities = pipe.predict(texts)
    labels = pipe.options.labels or list(range(probabilities.shape[1]))
    return [
        {
            "label": labels[int(row.argmax())],
            "probabilities": dict(zip(labels, map(float, row), strict=True)),
        }
        for row in probabilities
    ]


def _tag(pipe, texts, arguments):
    del arguments
    return [[list(pair) for pair in pairs] for pairs in pipe.tag(texts)]


def _answer(pipe, texts, arguments):
    if arguments.context is None:
        raise SystemExit(
            "error: a SpanAnswerer answers the questions from a passage: give it with "
            "--context TEXT (or --context @FILE)"
        )
    context = arguments.context
    if context.startswith("@"):
        try:
            with open(context[1:], encoding="utf-8") as file:
                context = file.read()
        except (OSError, UnicodeDecodeError) as error:
            raise SystemExit(f"error: --context {context}: {error}") from None
    flags.check_positive(arguments, "max_answer_len")
    return pipe.answer(
        texts, context, top_k=arguments.answers, max_answer_len=arguments.max_answer_len
    )


def _generate(pipe, texts, arguments):
    beam = {"strategy": "beam", "beam_width": arguments.beam_width} if arguments.beam_width else {}
    return pipe.generate(texts, max_new_tokens=arguments.max_new_tokens, **beam)


def _translate(pipe, texts, arguments):
    return pipe.translate(texts, beam_width=arguments.beam_width or 4)


def _embed(pipe, texts, arguments):
    del arguments
    return pipe.embed(texts).tolist()


def _most_similar(pipe, texts, arguments):
    return [
        [[word, score] for word, score in pipe.most_similar(text.split(), topn=arguments.top_k)]
        for text in texts
    ]


def _show_fill_mask(text, masks):
    lines = [text]
    for index, predictions in enumerate(masks, 1):
        best = "  ".join(f"{p['token']} {p['score']:.3f}" for p in predictions)
        lines.append(f"  [MASK] {index}: {best}")
    return "\n".join(lines)


def _show_classify(text, result):
    return f"{result['label']}\t{result['probabilities'][result['label']]:.3f}\t{text}"


def _show_answer(text, result):
    answers = result if isinstance(result, list) else [result]
    shown = "  ".join(
        f"{answer['answer']!r} {answer['score']:.3f} (characters {answer['start']}-{answer['end']})"
        if answer["answer"]
        else f"(no answer) {answer['score']:.3f}"
        for answer in answers
    )
    return f"{text}\t{shown}"


def _show_embed(text, vector):
    shown = ", ".join(f"{value:.4f}" for value in vector[:4])
    return f"{text}\t[{shown}, ...] ({len(vector)} floats; --json for all)"


def _show_most_similar(text, neighbours):
    return f"{text}: " + ", ".join(f"{word} {score:.3f}" for word, score in neighbours)


PREDICTIONS = {
    "fill_mask": _fill_mask,
    "classify": _classify,
    "tag": _tag,
    "generate": _generate,
    "translate": _translate,
    "most_similar": _most_similar,
    "answer": _answer,
    "embed": _embed,
}


FORMATS = {
    "fill_mask": _show_fill_mask,
    "classify": _show_classify,
    "tag": runs.show_tags,
    "generate": lambda text, continuation: f"{text}{continuation}",
    "translate": lambda text, translation: f"{text}\t{translation}",
    "most_similar": _show_most_similar,
    "answer": _show_answer,
    "embed": _show_embed,
}
