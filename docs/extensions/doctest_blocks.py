"""A griffe extension for the API reference: fences the doctest examples of docstrings.

lmpipe's docstrings write their examples as doctests after an `Example:` line, unindented,
which Markdown would read as prose (a `["key"](text=...)` as a link). Each run of `>>>`
lines and their output becomes a `pycon` code block instead, as a reader expects.
"""

import griffe


class DoctestBlocks(griffe.Extension):
    """Fences every docstring's doctest examples when griffe loads an object."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = fenced_doctests(obj.docstring.value)


def fenced_doctests(text):
    """`text` with each doctest example (a `>>>` line to the next blank line) fenced."""
    lines = text.split("\n")
    out = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.lstrip().startswith(">>>"):
            out.append(line)
            index += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        block = []
        while index < len(lines) and lines[index].strip():
            block.append(lines[index])
            index += 1
        out.extend([f"{indent}```pycon", *block, f"{indent}```"])
    return "\n".join(out)
