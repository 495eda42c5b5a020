"""Export an encoder and its tokenizer as a SavedModel that TensorFlow Serving loads as it is.

`export_saved_model` writes `<base_dir>/<version>/` with tag `serve` and these signatures:

- `serving_default`: `token_ids`, `segment_ids`, `padding_mask`, dense int32 `[batch, length]`
  (length at most `seq_len`) -> the model's outputs, float32.
- `serve_text`: `text`, string `[batch]` -> the same outputs. The text is tokenized with the
  WordPiece tokenizer in the graph, cut to `seq_len - 2` pieces, packed as `[CLS] text [SEP]`
  and padded to the batch's longest (see below).
- `serve_text_pair` (with `pairs=True`): `text` and `text_pair`, string `[batch]` each ->
  the same outputs for `[CLS] text [SEP] text_pair [SEP]`, the longer side cut first.

More signatures can be added (`extra_signatures`): BERT and ALBERT pipelines add
`serve_fill_mask`.

With `layout="xlnet"` (XLNet encoders) the text signatures pack `text [SEP] [CLS]` and
`text [SEP] text_pair [SEP] [CLS]` instead, `[CLS]` last with segment id 2.

Text signatures run the model on a request's texts sorted by length, in groups of
`LENGTH_GROUP` each padded to its own longest (at most `seq_len`), not to `seq_len`: short
texts cost what their length costs. Outputs with a position
axis (`sequence_output`) are padded back with zeros to `seq_len`, so a text gets the same
output shapes whatever it is batched with (TF Serving's server-side batching joins requests
and splits the outputs by rows only); the values at a text's own positions do not depend on
the others' lengths (padding is masked), up to float rounding.
"""

import os
import re
import tempfile
from collections.abc import Mapping

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops the signatures use)

from lmpipe.arguments import check_number
from lmpipe.contract import ENCODER_FEATURES, PADDING_MASK, SEGMENT_IDS, TOKEN_IDS
from lmpipe.datasets.examples.packing import (
    LAYOUTS,
    check_sequence_length,
    cut_to_longest,
    pack_texts,
)
from lmpipe.datasets.examples.permutation import MAX_SEQ_LEN as XLNET_MAX_SEQ_LEN
from lmpipe.serving.protocol import (
    SERVING_DEFAULT,
    check_destination,
    saveable_variables,
    write_version,
)

# The texts of a request run through the model in groups of this many, sorted by length, each
# padded to its own longest: a long text no longer makes every short one of the request pay
# for its length.
LENGTH_GROUP = 16
SERVE_TEXT = "serve_text"
SERVE_TEXT_PAIR = "serve_text_pair"

WARMUP_TEXTS = ("The quick brown fox jumps over the lazy dog.",)
WARMUP_TEXT_PAIRS = ("It was not amused.",)

_OUTPUT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def export_saved_model(
    base_dir,
    model,
    tokenizer,
    seq_len,
    version=None,
    overwrite=False,
    outputs=None,
    pairs=True,
    warmup=True,
    layout="bert",
    num_segments=None,
    max_seq_len=None,
    extra_signatures=None,
):
    """Export `model` with `tokenizer` as `<base_dir>/<version>/`, a SavedModel for TF Serving.

    Written by the export protocol (`lmpipe.serving.protocol`): the version directory appears
    complete or not at all: the SavedModel is written to a hidden `.tmp-lmpipe-*` directory in
    `base_dir` (TF Serving only considers integer names) and renamed to its version number
    when it is finished; with `overwrite=True` it is swapped with the old version in one atomic
    step, so that the version is never missing. What a killed export left in `base_dir` is
    cleared first (see `lmpipe.serving.versions`).

    Args:
        base_dir: the model's base directory, what TF Serving's `--model_base_path` points to
            (created if needed).
        model: a Keras model (or any callable, with its variables in `model.variables`) taking
            the dict of int32 `[B, S]` tensors `token_ids`, `segment_ids`, `padding_mask` and
            returning a dict of tensors; it is called with `training=False` if it is a
            `keras.Model`.
        tokenizer: the `WordPieceTokenizer` of the text signatures; its `vocab.txt` and
            `tokenizer.json` are stored as assets of the SavedModel.
        seq_len: the longest sequence served, special tokens included; text signatures pad to
            it and `serving_default` rejects longer inputs. Checked as training checks it: it
            must hold the special tokens and one token of each segment (5 with `pairs`, else
            3) and fit the model's positions (`max_seq_len`).
        version: the integer version number; None (the default) takes 1 + the largest version
            in `base_dir`, or 1.
        overwrite: replace an existing `version` (an error otherwise). TF Serving does not
            reload a version number it already serves: to roll out a new model to a running
            server, export a new version.
        outputs: what to serve. None: every output of the model, under its name. A list of
            names: those outputs. A dict `{name: source}`: each `source` is an output name of
            the model or a function of the model's output dict (run in the graph), for
            instance `{"probabilities": lambda out: keras.ops.softmax(out["logits"])}`.
            Served outputs must be dense floating tensors with a batch dimension; they are
            cast to float32 (from the compute dtype of mixed precision).
        pairs: also export `serve_text_pair` for sentence pairs.
        warmup: write `assets.extra/tf_serving_warmup_requests` with one request per
            signature; True uses a built-in sentence, or give a list of texts.
        layout: how the text signatures pack: "bert" (`[CLS] A [SEP] (B [SEP])`), "causal"
            (`[SEP] A [SEP]`, for causal language models) or "xlnet"
            (`A [SEP] (B [SEP]) [CLS]`, segment id 2 for `[CLS]`).
        num_segments: the segment ids `serving_default` accepts are `0 ... num_segments - 1`;
            None: the `num_segments` of the model's embedding layer if it has one (BERT,
            ALBERT), else 2 for "bert" and 3 for "xlnet" (its `[CLS]` is segment 2).
        max_seq_len: the longest sequence the model takes; None: the smallest
            `max_sequence_length` of the model's layers (a BERT or GPT position table), with
            layout "xlnet" the longest XLNet example lmpipe trains (16384), else no limit.
        extra_signatures: more signatures, `{name: (function, example inputs, variables)}`:
            a `tf.function` with an input signature, the inputs of its warmup request, and
            the variables it reads beyond the model's (a pretraining head, for instance).

    Returns:
        The path of the new version directory.

    Raises:
        ValueError: a bad argument (named), `version` exists without `overwrite=True`, or the
            model fails on a `[1, seq_len]` batch of the tokenizer's ids or returns outputs
            that cannot be served.
    """
    if not isinstance(pairs, bool):
        raise ValueError(f"`pairs` must be True or False, got pairs={pairs!r}.")
    warmup_texts = _check_warmup(warmup)
    base_dir = check_destination(base_dir, version, overwrite)

    module = ServingModule(
        model,
        tokenizer,
        seq_len,
        outputs=outputs,
        pairs=pairs,
        layout=layout,
        num_segments=num_segments,
        max_seq_len=max_seq_len,
        extra_signatures=extra_signatures,
    )
    signatures = module.signatures()
    requests = module.example_requests(warmup_texts) if warmup_texts else {}
    with tempfile.TemporaryDirectory() as assets:
        module.attach_tokenizer_assets(assets)
        return write_version(base_dir, module, signatures, requests, version, overwrite)


class ServingModule(tf.Module):
    """What an export saves: the model's variables, the tokenizer and the serving functions.

    The Keras model itself is not saved as an object, only its variables, as the
    `tf.Variable`s Keras 3 wraps (see `saveable_variables`), so the SavedModel needs neither lmpipe
    nor Keras to load and the TF1 loader restores what the functions read; the tokenizer is
    tracked so that its graph resources are saved, and its vocabulary files are assets
    (`assets/vocab.txt`, `assets/tokenizer.json`).

    Every signature is a `tf.function(jit_compile=False)`, so TF Serving runs the graph as it
    is; `functions` gives them for calls in-process.
    """

    def __init__(
        self,
        model,
        tokenizer,
        seq_len,
        outputs=None,
        pairs=True,
        layout="bert",
        num_segments=None,
        max_seq_len=None,
        extra_signatures=None,
    ):
        super().__init__(name="lmpipe_serving")
        if not callable(model):
            raise ValueError(f"`model` must be a Keras model or callable, got {model!r}.")
        for name in ("tokenize", "save", "cls_id", "sep_id", "pad_id", "vocabulary_size"):
            if not hasattr(tokenizer, name):
                raise ValueError(
                    "`tokenizer` must be a WordPieceTokenizer or SentencePieceTokenizer, got "
                    f"{type(tokenizer).__name__}."
                )
        if layout not in LAYOUTS:
            raise ValueError(f"`layout` must be one of {LAYOUTS}, got layout={layout!r}.")
        if num_segments is None:
            num_segments = model_segments(model) or (3 if layout == "xlnet" else 2)
        # The packing's segment ids: XLNet's [CLS] is segment 2, BERT's pairs use 1.
        needed = 3 if layout == "xlnet" else 2 if pairs else 1
        check_number("num_segments", num_segments, minimum=needed, integer=True)
        check_number("max_seq_len", max_seq_len, minimum=1, integer=True, none=True)
        limit = "`max_seq_len`"
        if max_seq_len is None:
            max_seq_len, limit = model_positions(model), "the model's max_sequence_length"
        if max_seq_len is None and layout == "xlnet":
            max_seq_len, limit = XLNET_MAX_SEQ_LEN, "the longest XLNet example"
        check_sequence_length(seq_len, 2 if pairs else 1, max_seq_len, limit)
        self.tokenizer = tokenizer
        self.num_segments = num_segments
        self.seq_len = seq_len
        self.pairs = pairs
        self.layout = layout
        extra_signatures = dict(extra_signatures or {})
        extra_variables = [v for _, _, variables in extra_signatures.values() for v in variables]
        self.model_variables = saveable_variables(
            [*getattr(model, "variables", []), *extra_variables]
        )
        # Inputs of the warmup request of each extra signature.
        self._extra_requests = _Untracked(
            {name: inputs for name, (_, inputs, _) in extra_signatures.items()}
        )
        # A plain object, which tf.Module does not track: the model is not saved as an object.
        self._forward = _Forward(model, _check_outputs(outputs))
        self._forward.check(tokenizer, seq_len)

        token_spec = [tf.TensorSpec([None, None], tf.int32, name=name) for name in ENCODER_FEATURES]
        text_spec = tf.TensorSpec([None], tf.string, name="text")
        pair_spec = tf.TensorSpec([None], tf.string, name="text_pair")
        functions = {
            SERVING_DEFAULT: tf.function(
                self._serve_ids, input_signature=token_spec, jit_compile=False, autograph=False
            ),
            SERVE_TEXT: tf.function(
                self._serve_text, input_signature=[text_spec], jit_compile=False, autograph=False
            ),
        }
        if pairs:
            functions[SERVE_TEXT_PAIR] = tf.function(
                self._serve_text_pair,
                input_signature=[text_spec, pair_spec],
                jit_compile=False,
                autograph=False,
            )
        for name, (function, _, _) in extra_signatures.items():
            if name in functions:
                raise ValueError(f"`extra_signatures` repeats the signature {name!r}.")
            functions[name] = function
        # Held by a plain object, which tf.Module does not track: the functions are saved as
        # signatures only. (Saving traces every tracked tf.function again, for seconds.)
        self._functions = _Untracked(functions)

    @property
    def functions(self):
        """`{signature name: tf.function}`, to call the signatures in-process."""
        return dict(self._functions.value)

    def signatures(self):
        """`{signature name: concrete function}` for `tf.saved_model.save`."""
        return {name: function.get_concrete_function() for name, function in self.functions.items()}

    def attach_tokenizer_assets(self, directory):
        """Write the tokenizer's files to `directory` and track them as SavedModel assets."""
        self.tokenizer.save(directory)
        # vocab.txt (WordPiece) or spiece.model (SentencePiece), and tokenizer.json.
        self.tokenizer_files = [
            tf.saved_model.Asset(os.path.join(directory, name))
            for name in sorted(os.listdir(directory))
        ]

    def example_requests(self, texts):
        """`{signature name: inputs}` of one request per signature for a batch of `texts`."""
        texts = np.array([text.encode("utf-8") for text in texts], dtype=object)
        packed = pack_texts(self.tokenizer, tf.constant(texts), self.seq_len, layout=self.layout)
        requests = {
            SERVING_DEFAULT: {name: tensor.numpy() for name, tensor in packed.items()},
            SERVE_TEXT: {"text": texts},
        }
        if self.pairs:
            pairs = [WARMUP_TEXT_PAIRS[i % len(WARMUP_TEXT_PAIRS)] for i in range(len(texts))]
            requests[SERVE_TEXT_PAIR] = {
                "text": texts,
                "text_pair": np.array([text.encode("utf-8") for text in pairs], dtype=object),
            }
        requests.update(self._extra_requests.value)
        return requests

    def _serve_ids(self, token_ids, segment_ids, padding_mask):
        shape = tf.shape(token_ids)
        vocabulary_size = self.tokenizer.vocabulary_size
        checks = [
            tf.debugging.assert_equal(
                tf.shape(segment_ids),
                shape,
                message="`segment_ids` must have the shape of `token_ids`",
            ),
            tf.debugging.assert_equal(
                tf.shape(padding_mask),
                shape,
                message="`padding_mask` must have the shape of `token_ids`",
            ),
            tf.debugging.assert_less_equal(
                shape[1],
                self.seq_len,
                message=f"sequences must have at most seq_len={self.seq_len} tokens",
            ),
            tf.debugging.assert_positive(
                shape[1], message="sequences must have at least one token ([CLS])"
            ),
            # An id out of range fails the embedding lookup on CPU but reads zeros on GPU.
            tf.debugging.assert_non_negative(token_ids, message="`token_ids` must be >= 0"),
            tf.debugging.assert_less(
                token_ids,
                vocabulary_size,
                message=f"`token_ids` must be < vocabulary_size={vocabulary_size}",
            ),
            # Out of range, a segment id reads a wrong row of the table rather than failing.
            tf.debugging.assert_non_negative(segment_ids, message="`segment_ids` must be >= 0"),
            tf.debugging.assert_less(
                segment_ids,
                self.num_segments,
                message=f"`segment_ids` must be < num_segments={self.num_segments}",
            ),
            # The model reads any non-zero mask value as a real token: 2 or -1 is a bad request.
            tf.debugging.assert_non_negative(
                padding_mask, message="`padding_mask` must be 0 or 1 (1 = real token)"
            ),
            tf.debugging.assert_less_equal(
                padding_mask, 1, message="`padding_mask` must be 0 or 1 (1 = real token)"
            ),
        ]
        # The checks run before the model, so a bad request gets their message.
        with tf.control_dependencies([check for check in checks if check is not None]):
            features = {
                TOKEN_IDS: tf.identity(token_ids),
                SEGMENT_IDS: tf.identity(segment_ids),
                PADDING_MASK: tf.identity(padding_mask),
            }
        return self._forward(features)

    def _serve_text(self, text):
        return self._forward.on_longest(
            pack_texts(self.tokenizer, text, self.seq_len, layout=self.layout), self.seq_len
        )

    def _serve_text_pair(self, text, text_pair):
        check = tf.debugging.assert_equal(
            tf.size(text), tf.size(text_pair), message="`text_pair` must have one text per `text`"
        )
        with tf.control_dependencies([check] if check is not None else []):
            text_pair = tf.identity(text_pair)
        return self._forward.on_longest(
            pack_texts(self.tokenizer, text, self.seq_len, text_pair, layout=self.layout),
            self.seq_len,
        )


class _Untracked:
    """Holds a value out of reach of tf.Module's attribute tracking."""

    def __init__(self, value):
        self.value = value


def _probe(tokenizer, length):
    """`[1, length]` features: `[CLS]`, the largest id, `[SEP]`, then padding."""
    ids = np.full([1, length], tokenizer.pad_id, np.int32)
    ids[0, :3] = [tokenizer.cls_id, tokenizer.vocabulary_size - 1, tokenizer.sep_id]
    return {
        TOKEN_IDS: tf.constant(ids),
        SEGMENT_IDS: tf.zeros([1, length], tf.int32),
        PADDING_MASK: tf.constant((ids != tokenizer.pad_id).astype(np.int32)),
    }


class _Forward:
    """The model call and the served outputs, float32; kept out of the saved object graph."""

    def __init__(self, model, outputs):
        self.model = model
        self.outputs = outputs
        self.position_outputs = {}  # {name: position axis}, found by `check`
        self.output_shapes = {}  # {name: [None, ...] at seq_len}, found by `check`
        self.cut = True

    def __call__(self, features):
        if isinstance(self.model, keras.Model):
            result = self.model(features, training=False)
        else:
            result = self.model(features)
        return self._served(result)

    def on_longest(self, features, seq_len):
        """The outputs for right-padded `features` `[B, seq_len]`: the texts sorted by length
        and run in groups of `LENGTH_GROUP`, each group cut to its longest sequence; outputs
        with a position axis (`sequence_output`, per-token scores) are zero at padding and
        padded back to `seq_len` with zeros, so a text's outputs have the same shapes and
        values whatever it is batched with."""
        if not self.cut:
            return self(features)
        lengths = tf.reduce_sum(features[PADDING_MASK], axis=1)
        order = tf.argsort(lengths, stable=True)  # shortest first
        size = tf.shape(order)[0]

        def group(index, arrays):
            rows = order[index * LENGTH_GROUP : (index + 1) * LENGTH_GROUP]
            part = cut_to_longest(
                {name: tf.gather(value, rows) for name, value in features.items()}
            )
            outputs = self(part)
            for name, value in outputs.items():
                if name in self.position_outputs:
                    value = pad_positions(
                        value, part[PADDING_MASK], seq_len, self.position_outputs[name]
                    )
                arrays[name] = arrays[name].write(index, value)
            return index + 1, arrays

        arrays = {
            name: tf.TensorArray(
                tf.float32, size=0, dynamic_size=True, infer_shape=False, element_shape=shape
            )
            for name, shape in self.output_shapes.items()
        }
        _, arrays = tf.while_loop(
            lambda index, _: index * LENGTH_GROUP < size,
            group,
            (tf.constant(0), arrays),
            parallel_iterations=1,
        )
        restore = tf.math.invert_permutation(order)  # back to the request's order
        return {name: tf.gather(array.concat(), restore) for name, array in arrays.items()}

    def check(self, tokenizer, seq_len):
        """Run the model once on `[1, seq_len]` ids, the largest id included: a clear error
        now rather than a failing signature (position table or vocabulary too small). Then
        once on 3 ids, to find the outputs with a position axis (`position_outputs`: axis 1
        follows the input's length); a model that takes only `seq_len` positions (a fixed
        input shape) is served at `seq_len` (`cut` False)."""
        try:
            long = self(_probe(tokenizer, seq_len))
        except (tf.errors.OpError, ValueError, TypeError, KeyError, IndexError) as error:
            if isinstance(error, _OutputError):
                raise ValueError(str(error)) from None
            raise ValueError(
                f"The model fails on a [1, seq_len={seq_len}] batch of token ids below "
                f"the tokenizer's vocabulary_size={tokenizer.vocabulary_size} (is its position "
                f"table shorter than seq_len, or its vocabulary smaller?): {error}"
            ) from error
        try:
            short = self(_probe(tokenizer, 3)) if seq_len > 3 else long
        except (tf.errors.OpError, ValueError, TypeError, KeyError, IndexError):
            self.cut = False
            return
        self.output_shapes = {
            name: tf.TensorShape([None, *value.shape[1:]]) for name, value in long.items()
        }
        self.position_outputs = {}
        for name, value in long.items():
            axes = [
                axis
                for axis in range(1, value.shape.rank)
                if value.shape[axis] == seq_len and short[name].shape[axis] == min(seq_len, 3)
            ]
            if axes:
                self.position_outputs[name] = axes[0]

    def _served(self, result):
        if self.outputs is None:
            if not isinstance(result, Mapping):
                raise _OutputError(
                    f"The model returns a {type(result).__name__}, not a dict of named tensors; "
                    "pass `outputs={name: function of the model's result}` to name them."
                )
            selected = dict(result)
        else:
            selected = {}
            for name, source in self.outputs.items():
                if isinstance(source, str):
                    if not isinstance(result, Mapping) or source not in result:
                        available = sorted(result) if isinstance(result, Mapping) else []
                        raise _OutputError(
                            f"`outputs` asks for {source!r}, which the model does not return "
                            f"(its outputs: {available})."
                        )
                    selected[name] = result[source]
                else:
                    selected[name] = source(result)
        served = {}
        for name, value in selected.items():
            if not isinstance(name, str) or not _OUTPUT_NAME.fullmatch(name):
                raise _OutputError(
                    f"Output name {name!r} is not a valid signature key (letters, digits, _)."
                )
            if isinstance(value, (tf.RaggedTensor, tf.SparseTensor)):
                raise _OutputError(
                    f"Output {name!r} is a {type(value).__name__}; TF Serving needs dense "
                    "outputs (pad it, or leave it out with `outputs`)."
                )
            value = tf.convert_to_tensor(value)
            if not value.dtype.is_floating:
                raise _OutputError(
                    f"Output {name!r} has dtype {value.dtype.name}; served outputs are float32 "
                    "(serve scores or probabilities, or cast with `outputs`)."
                )
            if value.shape.rank == 0:
                raise _OutputError(
                    f"Output {name!r} is a scalar; served outputs need a batch dimension."
                )
            served[name] = tf.cast(value, tf.float32)
        if not served:
            raise _OutputError("The model has no output to serve.")
        return served


def pad_positions(value, padding_mask, seq_len, axis=1):
    """An output `[B, ..., L, ...]` with a position axis `axis` (of features cut to `L`
    positions, `padding_mask` `[B, L]`; ELMo's layers come before it), zero at padding and
    padded with zeros to `seq_len` positions."""
    rank = value.shape.rank
    mask = tf.cast(padding_mask, value.dtype)  # [B, L] -> [B, 1.., L, 1..]
    mask = tf.reshape(
        mask,
        tf.concat(
            [tf.shape(mask)[:1], [1] * (axis - 1), tf.shape(mask)[1:], [1] * (rank - axis - 1)], 0
        ),
    )
    pad = [[0, 0]] * rank
    pad[axis] = [0, seq_len - tf.shape(value)[axis]]
    shape = value.shape.as_list()
    shape[axis] = seq_len
    return tf.ensure_shape(tf.pad(value * mask, pad), shape)


def model_positions(model):
    """The longest sequence `model` takes: the smallest `max_sequence_length` among it and its
    layers, nested models included (the position tables of BERT, ALBERT and GPT); None if
    none has one (relative positions, RNNs, a plain function)."""
    return _smallest_setting(model, "max_sequence_length")


def model_segments(model):
    """The number of segment ids `model` embeds: the smallest `num_segments` among it and
    its layers (BERT's and ALBERT's embeddings); None if none has one."""
    return _smallest_setting(model, "num_segments")


def _smallest_setting(model, name):
    values, pending, seen = [], [model], set()
    while pending:
        layer = pending.pop()
        if id(layer) in seen:
            continue
        seen.add(id(layer))
        value = getattr(layer, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            values.append(value)
        pending.extend(getattr(layer, "layers", None) or [])
    return min(values, default=None)


class _OutputError(ValueError):
    """The model's outputs cannot be served."""


def _check_outputs(outputs):
    """Normalize `outputs` to None or `{name: output name or function}`."""
    if outputs is None:
        return None
    if isinstance(outputs, str):
        outputs = [outputs]
    if isinstance(outputs, Mapping):
        normalized = dict(outputs)
    else:
        try:
            names = list(outputs)
        except TypeError:
            raise ValueError(
                "`outputs` must be None, a list of output names or a dict {name: output name "
                f"or function}}, got {outputs!r}."
            ) from None
        normalized = {name: name for name in names}
    if not normalized:
        raise ValueError("`outputs` is empty: name at least one output to serve.")
    for name, source in normalized.items():
        if not isinstance(name, str) or not _OUTPUT_NAME.fullmatch(name):
            raise ValueError(
                f"`outputs` has the name {name!r}; output names are signature keys: letters, "
                "digits and underscores, not starting with a digit."
            )
        if not isinstance(source, str) and not callable(source):
            raise ValueError(
                f"`outputs[{name!r}]` must be an output name of the model or a function of "
                f"its outputs, got {source!r}."
            )
    return normalized


def _check_warmup(warmup):
    """The texts of the warmup requests (empty for none)."""
    if warmup is True:
        return list(WARMUP_TEXTS)
    if warmup is False or warmup is None:
        return []
    if not isinstance(warmup, (list, tuple)) or not all(isinstance(t, str) for t in warmup):
        raise ValueError(f"`warmup` must be True, False or a list of texts, got warmup={warmup!r}.")
    texts = list(warmup)
    if not texts:
        raise ValueError("`warmup` is an empty list; pass warmup=False for no warmup requests.")
    return texts
