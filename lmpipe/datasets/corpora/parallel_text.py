"""Parallel text: aligned (source, target) sentence pairs for translation.

A `ParallelCorpus` comes from tab-separated files (`ParallelCorpus.from_tsv`), from Python
pairs (`ParallelCorpus.from_pairs`) or from the English-Spanish verse-aligned Bible
(`ParallelCorpus.bible`). It holds the pairs in memory (a 31,000-verse Bible is 9 MB), splits
off a held-out set deterministically (`split`), and streams the pairs as a `tf.data.Dataset`
of `{"source", "target"}` strings, sharded across input pipelines by a
`tf.distribute.InputContext` (`dataset`).
"""

import os

import tensorflow as tf

from lmpipe.arguments import check_seed
from lmpipe.datasets.corpora.bible import BIBLE_SOURCE, BIBLE_TARGET, read_bible
from lmpipe.datasets.corpora.sharding import pipeline_position


class ParallelCorpus:
    """Aligned (source, target) sentence pairs, e.g. an English sentence and its translation.

    Build one with `from_tsv`, `from_pairs` or `bible`. Every text is a non-empty string without
    tabs or line breaks. `len(corpus)` is the number of pairs, iterating yields `(source,
    target)` tuples, `corpus[i]` is a pair and `corpus[a:b]` a smaller corpus.

    Args:
        sources: the source sentences.
        targets: the target sentences, one per source.
        skipped: how many pairs the reader left out (the Bible's unaligned verses).

    Example:

    >>> corpus = ParallelCorpus.from_pairs([("good morning", "buenos días"),
    ...                                     ("thank you", "gracias")])
    >>> len(corpus), corpus[1]
    (2, ('thank you', 'gracias'))
    >>> [example["target"].numpy() for example in corpus.dataset()]
    [b'buenos d\\xc3\\xadas', b'gracias']
    """

    def __init__(self, sources, targets, skipped=0):
        sources, targets = tuple(sources), tuple(targets)
        if len(sources) != len(targets):
            raise ValueError(
                f"`sources` and `targets` must have one text each per pair, got "
                f"{len(sources)} sources and {len(targets)} targets."
            )
        self._sources = sources
        self._targets = targets
        self.skipped = skipped

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_pairs(cls, pairs):
        """A corpus of `pairs`, a sequence of `(source, target)` strings.

        Raises:
            ValueError: a pair that is not two strings, or a text that is empty or holds a tab
                or line break (the pair's index is named).
        """
        if isinstance(pairs, (str, bytes)):
            raise ValueError("`pairs` must be a list of (source, target) pairs, got a string.")
        sources, targets = [], []
        for index, pair in enumerate(pairs):
            if isinstance(pair, (str, bytes)) or len(pair) != 2:
                raise ValueError(
                    f"`pairs[{index}]` must be a (source, target) pair of strings, got {pair!r}."
                )
            for column, value in zip(("source", "target"), pair, strict=True):
                _check_text(value, f"`pairs[{index}]`: the {column}")
            sources.append(pair[0])
            targets.append(pair[1])
        if not sources:
            raise ValueError("`pairs` is empty: a parallel corpus needs at least one pair.")
        return cls(sources, targets)

    @classmethod
    def from_tsv(cls, paths):
        """Pairs from UTF-8 files of two tab-separated columns: source, then target.

        Every line is one pair (a Windows line ending and a byte-order mark are accepted).

        Args:
            paths: a file path or a list of them, read in order.

        Raises:
            ValueError: a missing file, an empty file, and, naming the file and line: an empty
                line, a line without exactly two columns, an empty column, invalid UTF-8.
        """
        if isinstance(paths, (str, bytes, os.PathLike)):
            paths = [paths]
        paths = [os.fsdecode(path) for path in paths]
        if not paths:
            raise ValueError("`paths` is empty: give at least one TSV file.")
        sources, targets = [], []
        for path in paths:
            if not os.path.isfile(path):
                raise ValueError(f"The parallel text file {path!r} does not exist.")
            before = len(sources)
            with open(path, "rb") as file:
                for number, raw in enumerate(file, start=1):
                    source, target = _parse_tsv_line(raw, path, number)
                    sources.append(source)
                    targets.append(target)
            if len(sources) == before:
                raise ValueError(f"{path} is empty: it has no sentence pairs.")
        return cls(sources, targets)

    @classmethod
    def bible(cls, source=BIBLE_SOURCE, target=BIBLE_TARGET, books=None, sword_path=None):
        """The verse-aligned Bible in two SWORD modules, read with PyPI `pysword`: by default
        English (World English Bible) to Spanish (Reina-Valera 1909), about 31,000 pairs.

        This corpus is optional: it needs `pip install pysword` and the Debian packages
        `sword-text-web` and `sword-text-sparv` (`apt-get install sword-text-web
        sword-text-sparv`), or the modules installed in another SWORD data path.

        Verses are paired by book, chapter and verse number. The OSIS markup is removed:
        footnotes, non-canonical section headings and speaker names are dropped (Psalm
        superscriptions, canonical in both texts, are kept), tags are stripped and white space
        collapsed. Verses that are missing or empty on either side (the deuterocanonical books
        and additions of the WEB, verses merged into their neighbour) are skipped; how many is
        logged and stored in `corpus.skipped`.

        Args:
            source: the source module's name.
            target: the target module's name.
            books: OSIS names of the books to read (`["Gen", "Matt"]`), in the modules'
                order; None reads every book.
            sword_path: the SWORD data path holding `mods.d/` and `modules/`; by default
                `$SWORD_PATH`, `~/.sword` and `sword/` under each of `$XDG_DATA_DIRS`
                (`/usr/local/share`, `/usr/share`), where the Debian packages install.

        Raises:
            ValueError: pysword or a module is missing (the error names what to install), or
                `books` names a book neither module has.
        """
        sources, targets, skipped = read_bible(source, target, books, sword_path)
        return cls(sources, targets, skipped=skipped)

    # ------------------------------------------------------------------ access

    @property
    def sources(self):
        """The source sentences (a tuple)."""
        return self._sources

    @property
    def targets(self):
        """The target sentences (a tuple)."""
        return self._targets

    def __len__(self):
        return len(self._sources)

    def __iter__(self):
        return iter(zip(self._sources, self._targets, strict=True))

    def __getitem__(self, index):
        if isinstance(index, slice):
            return ParallelCorpus(self._sources[index], self._targets[index])
        return self._sources[index], self._targets[index]

    def __repr__(self):
        return f"ParallelCorpus({len(self)} pairs)"

    def reversed(self):
        """The same pairs with source and target swapped (to translate the other way)."""
        return ParallelCorpus(self._targets, self._sources, skipped=self.skipped)

    def split(self, held_out=0.1, seed=0):
        """`(train, held_out)`: a random held-out set and the rest, the same for the same seed.

        The pairs are permuted by a stateless shuffle keyed by `seed` (the same in any
        process), the first ones held out; both parts keep the corpus order.

        Args:
            held_out: a fraction in (0, 1) of the pairs, or a number of pairs (an int >= 1).
            seed: an int.

        Raises:
            ValueError: `held_out` leaves either part empty.
        """
        check_seed(seed)
        if isinstance(held_out, bool) or not isinstance(held_out, (int, float)):
            raise ValueError(f"`held_out` must be a fraction or a count, got {held_out!r}.")
        if isinstance(held_out, float):
            if not 0.0 < held_out < 1.0:
                raise ValueError(f"A fractional `held_out` must be in (0, 1), got {held_out!r}.")
            count = round(held_out * len(self))
        else:
            count = held_out
        if not 1 <= count < len(self):
            raise ValueError(
                f"`held_out`={held_out!r} gives {count} of {len(self)} pairs: both parts must "
                "keep at least one pair."
            )
        order = tf.random.experimental.stateless_shuffle(
            tf.range(len(self), dtype=tf.int64), seed=tf.constant([seed, 0], tf.int64)
        ).numpy()
        held = set(order[:count].tolist())
        train = [i for i in range(len(self)) if i not in held]
        test = sorted(held)
        return self._subset(train), self._subset(test)

    def _subset(self, indices):
        return ParallelCorpus(
            [self._sources[i] for i in indices], [self._targets[i] for i in indices]
        )

    def dataset(self, input_context=None):
        """The pairs as a `tf.data.Dataset` of `{"source": str, "target": str}` scalars.

        With an `input_context` of `n` input pipelines, pipeline `i` gets pairs `i, i + n, ...`:
        disjoint shards that together cover the corpus.
        """
        num_pipelines, pipeline_id = pipeline_position(input_context)
        dataset = tf.data.Dataset.from_tensor_slices(
            {
                "source": tf.constant(self._sources, tf.string),
                "target": tf.constant(self._targets, tf.string),
            }
        )
        if num_pipelines > 1:
            if len(self) < num_pipelines:
                raise ValueError(
                    f"The corpus has {len(self)} pairs, fewer than the {num_pipelines} input "
                    "pipelines: some would get none."
                )
            dataset = dataset.shard(num_pipelines, pipeline_id)
        return dataset

    def to_tsv(self, path):
        """Write the pairs to `path`, one `source<TAB>target` line each (UTF-8)."""
        with open(path, "w", encoding="utf-8", newline="\n") as file:
            for source, target in self:
                file.write(f"{source}\t{target}\n")


def as_parallel_corpus(pairs, name="pairs"):
    """`pairs` as a `ParallelCorpus`: a corpus as it is, a TSV path (or a list of paths) read
    with `ParallelCorpus.from_tsv`; anything else is a ValueError naming `name`."""
    if isinstance(pairs, ParallelCorpus):
        return pairs
    if isinstance(pairs, (str, bytes, os.PathLike)) or (
        isinstance(pairs, (list, tuple)) and pairs and isinstance(pairs[0], (str, os.PathLike))
    ):
        return ParallelCorpus.from_tsv(pairs)
    raise ValueError(
        f"`{name}` must be a ParallelCorpus or the path(s) of a TSV file of source<TAB>target "
        f"lines, got {type(pairs).__name__}."
    )


def _check_text(value, where):
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {value!r}.")
    if not value.strip():
        raise ValueError(f"{where} is empty.")
    if any(character in value for character in "\t\n\r"):
        raise ValueError(f"{where} holds a tab or line break: {value!r}.")


def _parse_tsv_line(raw, path, number):
    """`(source, target)` of one raw line of a TSV file; ValueError naming file and line."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path}, line {number}: invalid UTF-8 at byte {error.start} of the line."
        ) from None
    if number == 1:
        line = line.removeprefix("\ufeff")
    line = line.removesuffix("\n").removesuffix("\r")
    if not line.strip():
        raise ValueError(f"{path}, line {number}: empty line; every line must be a pair.")
    columns = line.split("\t")
    if len(columns) != 2:
        raise ValueError(
            f"{path}, line {number}: expected two tab-separated columns (source, target), "
            f"found {len(columns)}."
        )
    for column, value in zip(("source", "target"), columns, strict=True):
        if not value.strip():
            raise ValueError(f"{path}, line {number}: the {column} column is empty.")
    return columns[0], columns[1]
