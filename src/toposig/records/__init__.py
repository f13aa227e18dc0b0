"""What every layer shares about records: the vocabulary (what a family's name is, the
record header: :mod:`toposig.records.vocabulary`) and
the typed, validated-on-read :class:`Record` (:mod:`toposig.records.record`) and
:class:`Statistics` (:mod:`toposig.records.statistics`). Plain data, no I/O, no imports
from the rest of the package: everything else builds on it.
"""

from toposig.records.record import (
    CheckpointId,
    DeclaredQuality,
    FamilyPart,
    GroundTruth,
    MatrixResult,
    Provenance,
    Record,
    RecordError,
    Resampled,
    entry_problem,
    records_from_json,
)
from toposig.records.statistics import (
    SECTIONS,
    Correlation,
    Correlations,
    ModelSummary,
    Statistics,
    StatisticsError,
    statistics_problem,
)
from toposig.records.vocabulary import (
    GROUND_TRUTH,
    GROUND_TRUTH_EVENTS,
    IDENTITY,
    MAX_STEP,
    NUMERIC_FIELDS,
    SCHEMA_VERSION,
    SEED_FIELDS,
    TOP_FAMILY,
    CheckpointOutput,
    Family,
    JsonView,
    arrays_file_problem,
    family_parts,
    ground_truth_problem,
    is_number,
    json_tree,
    now_iso,
    record_family,
    record_header,
    record_problem,
    record_stem,
    release_part,
    reserve_part,
)

__all__ = [
    "CheckpointId", "FamilyPart", "MatrixResult", "Provenance", "Record", "RecordError",
    "Resampled", "DeclaredQuality", "GroundTruth", "entry_problem", "records_from_json",
    "SECTIONS", "Correlation", "Correlations", "ModelSummary", "Statistics",
    "StatisticsError", "statistics_problem",
    "IDENTITY", "MAX_STEP", "NUMERIC_FIELDS",
    "SEED_FIELDS", "GROUND_TRUTH", "GROUND_TRUTH_EVENTS", "ground_truth_problem",
    "SCHEMA_VERSION", "TOP_FAMILY", "CheckpointOutput", "Family",
    "JsonView", "arrays_file_problem", "family_parts", "release_part", "reserve_part",
    "is_number", "json_tree",
    "now_iso", "record_family", "record_header",
    "record_problem", "record_stem",
]
