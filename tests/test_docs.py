"""Every ```python block of README.md and docs/*.md runs: the blocks of one page in order, in
one namespace (a page reads like a notebook), in a temporary working directory."""
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(text):
    return [m.group(1) for m in _BLOCK.finditer(text)]


def test_the_block_finder_finds_python_blocks_only():
    text = "a\n```python\nx = 1\n```\n```bash\nls\n```\n```python\ny = 2\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y = 2\n"]


def test_every_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in readme, page.name


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_python_blocks_run(page, tmp_path, monkeypatch):
    blocks = python_blocks(page.read_text())
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "__docs__"}
    for k, src in enumerate(blocks):
        code = compile(src, f"{page.name}[block {k + 1}]", "exec")
        exec(code, ns)                                  # noqa: S102 - the docs' own examples
