"""The record vocabulary every layer shares: the signature families, the fields that
identify a checkpoint in a record, and how a checkpoint's family records merge into one
aggregate entry (``data/all_results.json``). Plain data, no I/O.
"""

from __future__ import annotations

from toposig.config import SCHEMA_VERSION

# The signature families, in the order records and figures list them.
FAMILIES = ("embedding", "weights", "landscape", "gradients")
# The families that probe the next-token loss around the weights.
PROBE_FAMILIES = ("landscape", "gradients")
# What a model folder or Hub revision gets without --signatures (the probes are opt-in).
DEFAULT_FAMILIES = ("embedding", "weights")
# Families that run the model and need its tokenizer and config (not a bare state dict).
MODEL_FAMILIES = ("embedding", "landscape", "gradients")



# The fields that say which checkpoint a record belongs to, in record order.
IDENTITY = ("model", "model_label", "step", "source", "location", "revision",
            "checkpoint_fingerprint")

# What the aggregate keeps of a landscape or gradient record besides its features.
PROBE_FIELDS = {
    "landscape": ("settings_hash", "arrays_file", "probe_loss", "hessian_trace_se", "lanczos",
                  "theta_norm", "settings", "timings_s"),
    "gradients": ("settings_hash", "arrays_file", "ph_backend", "settings", "timings_s"),
}


def merge_family_records(records: dict[str, dict]) -> dict | None:
    """One aggregate entry per checkpoint from its finished family records.

    The embedding record's fields stay at the top level (as the seed's files have them);
    the weight record adds its checkpoint-level features to ``features``, its stored
    loss as ``loss`` and the rest under ``weights``; the landscape and gradient records
    add their features and keep their details under ``landscape`` and ``gradients``.
    ``None`` when no family finished.
    """
    if not records:
        return None
    emb, w = records.get("embedding"), records.get("weights")
    first = next(iter(records.values()))
    entry = dict(emb) if emb else {"schema_version": SCHEMA_VERSION, "status": "ok",
                                   **{k: first.get(k) for k in IDENTITY}}
    entry["families"] = [f for f in FAMILIES if f in records]
    if w:
        entry["features"] = {**entry.get("features", {}), **w["features"]}
        entry["loss"] = w.get("checkpoint_loss")
        entry["loss_key"] = w.get("checkpoint_loss_key")
        if entry.get("num_parameters") is None:
            entry["num_parameters"] = w.get("num_parameters")
        entry["weights"] = {k: w.get(k) for k in (
            "settings_hash", "arrays_file", "n_matrices", "w_max", "ph_backend", "matrices",
            "timings_s")}
    for family, keys in PROBE_FIELDS.items():
        if rec := records.get(family):
            entry["features"] = {**entry.get("features", {}), **rec["features"]}
            if entry.get("num_parameters") is None:
                entry["num_parameters"] = rec.get("num_parameters")
            if entry.get("loss") is None and rec.get("checkpoint_loss") is not None:
                entry["loss"], entry["loss_key"] = rec["checkpoint_loss"], rec.get(
                    "checkpoint_loss_key")
            entry[family] = {k: rec.get(k) for k in keys}
    return entry
