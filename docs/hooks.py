"""The site's build hooks (``hooks:`` in mkdocs.yml): the committed figures and the code
highlighting's stylesheet go into the site as it is built, so that nothing is copied by
hand and nothing is loaded from another host.

- **Figures.** A page shows a committed figure by linking it where it lies in the
  repository, ``![...](../results/plots/summary_figure.png)`` from ``docs/figures.md``
  (the link GitHub resolves too). :func:`on_files` makes every such link to a PNG under
  ``results/`` a file of the site at the same path (``results/plots/summary_figure.png``),
  read from the repository when the site is built: the site shows the committed figures,
  and no copy of them is kept under docs/. A link to a figure that does not exist is
  left unresolved, which the strict build fails on.
- **Highlighting.** ``pymdownx.highlight`` marks code blocks up with Pygments at build
  time; :func:`on_files` writes the Pygments style of that markup as
  :data:`PYGMENTS_CSS`, which ``extra_css`` names. The theme's highlight.js, which loads
  from a CDN, is turned off (``theme: highlightjs: false``).
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files, InclusionLevel
from pygments.formatters import HtmlFormatter

logger = logging.getLogger("mkdocs.hooks.toposig")

PYGMENTS_CSS = "assets/pygments.css"
"""Where the highlighting's stylesheet lands in the site (mkdocs.yml's ``extra_css``)."""
PYGMENTS_STYLE = "default"
FIGURES = "results"
"""The repository's folder whose figures pages may link (``../results/...`` from docs/)."""
IMAGE_LINK = re.compile(r"!\[[^\]]*\]\((?P<target>[^)\s]+\.png)\)")


def figure_links(markdown: str) -> list[str]:
    """The targets of the page's image links to PNG files, in page order."""
    return [m.group("target") for m in IMAGE_LINK.finditer(markdown)]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """The figures the pages link under ``results/``, and :data:`PYGMENTS_CSS`, added to
    the site's files."""
    docs = Path(config.docs_dir).resolve()
    project = Path(config.config_file_path).resolve().parent
    figures = project / FIGURES
    for page in files.documentation_pages():
        for target in figure_links(page.content_string):
            src_uri = posixpath.normpath(posixpath.join(posixpath.dirname(page.src_uri), target))
            path = (docs / src_uri).resolve()
            if not path.is_relative_to(figures) or files.get_file_from_path(src_uri):
                continue  # a figure of docs/ itself, or one another link already added
            if not path.is_file():
                logger.warning("%s shows %s, which is not in the repository",
                               page.src_uri, path.relative_to(project).as_posix())
                continue
            # included explicitly: mkdocs leaves out paths with a part starting with a
            # dot, and ``..`` is one
            files.append(File(src_uri, src_dir=str(docs), dest_dir=config.site_dir,
                              use_directory_urls=config.use_directory_urls,
                              dest_uri=path.relative_to(project).as_posix(),
                              inclusion=InclusionLevel.INCLUDED))
    css = HtmlFormatter(style=PYGMENTS_STYLE).get_style_defs(".highlight")
    files.append(File.generated(config, PYGMENTS_CSS, content=css))
    return files
