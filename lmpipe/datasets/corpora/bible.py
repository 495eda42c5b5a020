"""The verse-aligned Bible from two SWORD modules (read with PyPI `pysword`): by default the
World English Bible and the Spanish Reina-Valera 1909, both public domain, from Debian's
`sword-text-web` and `sword-text-sparv` packages. What `ParallelCorpus.bible` reads."""

import functools
import html
import logging
import os
import re

logger = logging.getLogger(__name__)

BIBLE_SOURCE = "engWEB2015eb"
"""The World English Bible (with deuterocanon), Debian package `sword-text-web`."""
BIBLE_TARGET = "spaRV1909eb"
"""The Spanish Reina-Valera 1909, Debian package `sword-text-sparv`."""

_BIBLE_PACKAGES = {BIBLE_SOURCE: "sword-text-web", BIBLE_TARGET: "sword-text-sparv"}

# OSIS markup of the SWORD modules (see `_clean_osis`). Elements whose content is not verse text:
# footnotes, cross references, section headings that are not part of the text, speakers' names.
_NOTE = re.compile(r"<note\b[^>]*?(?:/>|>.*?</note>)", re.DOTALL)
_HEADING = re.compile(r'<title\b(?![^>]*canonical="true")[^>]*?(?:/>|>.*?</title>)', re.DOTALL)
_SPEAKER = re.compile(r"<speaker\b[^>]*>.*?</speaker>", re.DOTALL)
# What follows the end of the last book is an appendix (the WEB's glossary), not a verse.
_APPENDIX = re.compile(r'<div\b[^>]*type="(?:glossary|appendix|x-appendix)".*', re.DOTALL)
# Line, paragraph and list boundaries separate words; inline markup (<w>, <q>, <transChange>,
# ...) does not.
_BREAK = re.compile(r"</?(?:div|p|l|lg|lb|list|item|chapter|milestone|verse|title)\b[^>]*>")
_TAG = re.compile(r"<[^>]*>")
_REMOVED = "\x00"
_REMOVED_BEFORE_PUNCTUATION = re.compile(r"\s*\x00+\s*(?=[,.;:!?’”)\]])")
_SPACES = re.compile(r"[\s\x00]+")


def read_bible(source=BIBLE_SOURCE, target=BIBLE_TARGET, books=None, sword_path=None):
    """The verse pairs of modules `source` and `target`: `(sources, targets, skipped)`, two
    lists of verse texts paired by book, chapter and verse, and the number of verses missing
    or empty on either side (see `ParallelCorpus.bible` for the arguments)."""
    if isinstance(books, str):
        books = [books]
    try:
        from pysword.modules import SwordModules
    except ImportError:
        raise ValueError(
            "ParallelCorpus.bible needs the PyPI package `pysword` (pip install pysword) "
            "and the SWORD modules (apt-get install sword-text-web sword-text-sparv)."
        ) from None
    texts = {}
    for name in (source, target):
        module = _sword_module(SwordModules, name, sword_path)
        texts[name] = _read_verses(module, books)
    if books is not None:
        known = {reference[0] for verses in texts.values() for reference in verses}
        unknown = [book for book in books if book not in known]
        if unknown:
            raise ValueError(
                f"`books` names {unknown}, which neither {source!r} nor {target!r} has; "
                "use OSIS book names such as 'Gen', 'Ps', 'Matt'."
            )
    sources, targets = [], []
    skipped = 0
    source_verses, target_verses = texts[source], texts[target]
    for reference, source_text in source_verses.items():
        target_text = target_verses.get(reference, "")
        if source_text and target_text:
            sources.append(source_text)
            targets.append(target_text)
        else:
            skipped += 1
    skipped += sum(1 for reference in target_verses if reference not in source_verses)
    logger.warning(
        "ParallelCorpus.bible(%r, %r): %d verse pairs; skipped %d verses missing or empty "
        "on either side.",
        source,
        target,
        len(sources),
        skipped,
    )
    return sources, targets, skipped


def _sword_paths(sword_path):
    if sword_path is not None:
        return [os.fspath(sword_path)]
    paths = []
    if os.environ.get("SWORD_PATH"):
        paths.append(os.environ["SWORD_PATH"])
    paths.append(os.path.join(os.path.expanduser("~"), ".sword"))
    # The XDG base directory specification's default system data directories.
    data_dirs = os.environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share"
    paths.extend(
        os.path.join(directory, "sword") for directory in data_dirs.split(":") if directory
    )
    return paths


def _sword_module(SwordModules, name, sword_path):
    searched = _sword_paths(sword_path)
    for path in searched:
        if not os.path.isdir(os.path.join(path, "mods.d")):
            continue
        modules = SwordModules(path)
        if name in modules.parse_modules():
            module = modules.get_bible_from_module(name)
            # pysword decompresses a module's whole block (a book) for every verse it reads;
            # remembering the last blocks makes reading the Bible take a second, not minutes.
            if hasattr(module, "_decompressed_text"):
                module._decompressed_text = functools.lru_cache(maxsize=4)(
                    module._decompressed_text
                )
            return module
    package = _BIBLE_PACKAGES.get(name, "the package that provides it")
    raise ValueError(
        f"The SWORD module {name!r} is not installed (searched {searched}); install "
        f"{package} (apt-get install {package}) or pass `sword_path`."
    )


def _read_verses(module, only_books=None):
    """`{(book, chapter, verse): clean text}` of the verses of a pysword Bible module."""
    verses = {}
    for books in module.get_structure().get_books().values():
        for book in books:
            if only_books is not None and book.osis_name not in only_books:
                continue
            texts = module.get_iter(books=[book.osis_name], clean=False)
            references = (
                (book.osis_name, chapter, verse)
                for chapter, length in enumerate(book.chapter_lengths, start=1)
                for verse in range(1, length + 1)
            )
            for reference, raw in zip(references, texts, strict=False):
                verses[reference] = _clean_osis(raw)
    return verses


def _clean_osis(raw):
    """The verse text of OSIS markup: notes and headings dropped, tags stripped, spaces tidied."""
    text = _APPENDIX.sub("", raw) if "glossary" in raw or "appendix" in raw else raw
    # A removed note often sits between two words with no space around it ("God<note>..
    # </note><w>created"): mark the place, and make it a space unless punctuation follows.
    # (Each pattern runs only where its element occurs: most verses have none of them.)
    for element, pattern in (("<note", _NOTE), ("<title", _HEADING), ("<speaker", _SPEAKER)):
        if element in text:
            text = pattern.sub(_REMOVED, text)
    text = _BREAK.sub(" ", text)
    text = _TAG.sub("", text)
    if _REMOVED in text:
        text = _REMOVED_BEFORE_PUNCTUATION.sub("", text)
    text = html.unescape(text)
    return _SPACES.sub(" ", text).strip()
