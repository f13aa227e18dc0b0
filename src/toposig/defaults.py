"""The defaults and choices the commands show in their ``--help``, in a module that
imports nothing of the package's, so that ``toposig COMMAND --help`` answers without
loading torch, SciPy, pandas or matplotlib.

Each value's meaning is documented where it is used; those modules import it from here,
so there is one value, not a copy per layer.
"""

from __future__ import annotations

from pathlib import Path

NULL_RUNS = 100
"""Simulated null runs of each detrended and partial-difference test's own design
(:mod:`toposig.analysis.inference`; power: half as many per coupling)."""

SEED_CONTROLS = ("auto", "first", "all")
"""The seeds of a seed ensemble the within-model controls run on
(:mod:`toposig.analysis.ensembles`)."""

DPI = 130
"""Resolution of PNG figures, dots per inch (:mod:`toposig.report.style`)."""

EXPORT_FORMATS = ("csv", "parquet")
"""The formats of ``analyze --export`` (:func:`toposig.run.results_folder.export_table`)."""

EXPERIMENT_A_MODELS = ("EleutherAI/pythia-70m", "EleutherAI/pythia-160m",
                       "EleutherAI/pythia-410m")
"""The models of a run given none: the seed study's experiment A."""

STOP_GAIN = 0.01
"""Nats: a gain smaller than this to the planned end is not worth the compute
(:mod:`toposig.analysis.forecast`)."""

PRESETS_DIR = Path(__file__).resolve().parent / "presets"
"""The model suites shipped with the package, one JSON file each."""


def preset_names() -> list[str]:
    """The names of the shipped presets (``tiny``, ``grokking``, ...), sorted."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.json"))
