"""The site's build hooks (``hooks:`` in mkdocs.yml): the code highlighting's stylesheet
goes into the site as it is built, so that nothing is loaded from another host.

- **Highlighting.** ``pymdownx.highlight`` marks code blocks up with Pygments at build
  time; :func:`on_files` writes the Pygments style of that markup as
  :data:`PYGMENTS_CSS`, which ``extra_css`` names. The theme's highlight.js, which loads
  from a CDN, is turned off (``theme: highlightjs: false``).
"""

from __future__ import annotations

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from pygments.formatters import HtmlFormatter

PYGMENTS_CSS = "assets/pygments.css"
"""Where the highlighting's stylesheet lands in the site (mkdocs.yml's ``extra_css``)."""
PYGMENTS_STYLE = "default"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    css = HtmlFormatter(style=PYGMENTS_STYLE).get_style_defs(".highlight")
    files.append(File.generated(config, PYGMENTS_CSS, content=css))
    return files
