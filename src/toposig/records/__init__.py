"""What every layer shares about records: the vocabulary (families, the record header,
how family records merge into an aggregate entry: :mod:`toposig.records.vocabulary`) and
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
    CURRENT_FEATURES,
    DEFAULT_FAMILIES,
    FAMILIES,
    FEATURE_FAMILY_LABELS,
    FEATURE_FAMILY_SIGNATURE,
    GROUND_TRUTH,
    GROUND_TRUTH_EVENTS,
    IDENTITY,
    MAX_STEP,
    NUMERIC_FIELDS,
    PROBE_FAMILIES,
    PROBE_FIELDS,
    SCHEMA_VERSION,
    SEED_FIELDS,
    CheckpointOutput,
    Family,
    FeatureFamily,
    JsonView,
    arrays_file_problem,
    ground_truth_problem,
    is_number,
    json_tree,
    merge_family_records,
    missing_features,
    now_iso,
    record_family,
    record_header,
    record_problem,
    record_stem,
)

__all__ = [
    "CheckpointId", "FamilyPart", "MatrixResult", "Provenance", "Record", "RecordError",
    "Resampled", "DeclaredQuality", "GroundTruth", "entry_problem", "records_from_json",
    "SECTIONS", "Correlation", "Correlations", "ModelSummary", "Statistics",
    "StatisticsError", "statistics_problem",
    "CURRENT_FEATURES", "DEFAULT_FAMILIES", "FAMILIES", "FEATURE_FAMILY_LABELS",
    "FEATURE_FAMILY_SIGNATURE", "IDENTITY", "MAX_STEP", "NUMERIC_FIELDS",
    "SEED_FIELDS", "GROUND_TRUTH", "GROUND_TRUTH_EVENTS", "ground_truth_problem",
    "PROBE_FAMILIES", "PROBE_FIELDS", "SCHEMA_VERSION", "CheckpointOutput", "Family",
    "FeatureFamily", "JsonView", "arrays_file_problem", "is_number", "json_tree",
    "merge_family_records", "missing_features", "now_iso", "record_family", "record_header",
    "record_problem", "record_stem",
]
