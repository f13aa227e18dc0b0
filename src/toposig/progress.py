"""The progress bar every long step shows: :class:`tqdm.auto.tqdm` where it can render
(a terminal; a notebook with ``ipywidgets``), else tqdm's text bar.

``tqdm.auto`` in a Jupyter kernel without ``ipywidgets`` warns "IProgress not found.
Please update jupyter and ipywidgets" before falling back to the text bar; this module
makes that choice itself, once, so the bar renders or stays quiet, with no warning.
:func:`quiet_missing_widgets` (which ``import toposig`` calls) also silences that one
warning when the libraries toposig loads (``transformers``, ``huggingface_hub``) import
``tqdm.auto`` themselves: their bars fall back to text just the same.
"""

from __future__ import annotations

import functools
import importlib.util
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tqdm import tqdm as tqdm

MISSING_WIDGETS = "IProgress not found"  # the start of tqdm's warning


def quiet_missing_widgets() -> None:
    """Ignore tqdm's warning that ``ipywidgets`` is missing (and only it): the bar is then
    tqdm's text bar, which is what toposig shows there anyway."""
    warnings.filterwarnings("ignore", message=MISSING_WIDGETS)


@functools.cache
def _bar() -> Any:
    if importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm


def __getattr__(name: str) -> Any:
    """``tqdm``, chosen on first use (so that ``import toposig`` does not load tqdm)."""
    if name == "tqdm":
        return _bar()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
