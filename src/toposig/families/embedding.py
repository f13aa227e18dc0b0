"""The ``embedding`` family: persistent homology and spectra of the hidden states on the
analysed texts, and the model's own loss on them (:mod:`toposig.model.embedding`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from toposig.config import (
    FLAG,
    PH_BACKEND_CHOICES,
    SEED,
    Layers,
    at_least,
    format_layers,
    one_of,
    parse_layers,
    setting,
    union_layers,
)
from toposig.families.base import (
    DIAGRAM_WORDS,
    HOMOLOGY_DIMENSIONS,
    SCALED_STATISTICS,
    Column,
    FamilyInputs,
    Feature,
    FeatureGroup,
    Kind,
    Order,
    Scope,
    Session,
    SignatureFamily,
    Texts,
    Widening,
    diagram_features,
)
from toposig.families.registry import register
from toposig.features.names import DIAGRAM_STATISTICS, SPECTRAL_NAMES
from toposig.records import SCHEMA_VERSION, CheckpointOutput, Record


def _topological_order(name: str) -> tuple:
    """Display order of the hidden states' homology features: dimension, then the
    statistics' order, then name (the scale-normalised ones after the others)."""
    dim, _, stem = name.partition("_")
    rank = (DIAGRAM_STATISTICS.index(stem) if stem in DIAGRAM_STATISTICS
            else len(DIAGRAM_STATISTICS))
    return dim, rank, stem


_LAYERED = (Scope.CHECKPOINT, Scope.LAYER)
_SPECTRAL_WORDS = {
    "rankme": ("RankMe: exp of the entropy of the normalised singular values", "dims"),
    "effective_rank_cov": ("exp of the entropy of the covariance eigenvalues", "dims"),
    "participation_ratio": ("(Σλ)² / Σλ² of the covariance eigenvalues", "dims"),
    "eigenspectrum_decay_alpha": ("power-law decay of the top covariance eigenvalues",
                                  "-slope of log λ vs log i"),
    "stable_rank": ("‖X‖_F² / ‖X‖₂² of the centred hidden states", "dims"),
}

TOPOLOGY = FeatureGroup(
    "embedding_topological", "embedding topology",
    features=(*diagram_features("", "hidden states'", scopes=_LAYERED),
              *(Feature(f"h{q}_{stat}_scaled",
                        f"hidden states' H{q}: {DIAGRAM_WORDS[stat][0]}, of the cloud divided "
                        "by its median pairwise distance", "median distances",
                        Kind.DISCONTINUOUS, _LAYERED)
                for q in HOMOLOGY_DIMENSIONS for stat in SCALED_STATISTICS)),
    topological=True, baselines=("mean_norm", "effective_rank_cov", "rankme"),
    prefixes=("h0_", "h1_", "h2_"), display_key=_topological_order)
SPECTRUM = FeatureGroup(
    "embedding_spectral", "embedding spectrum",
    features=tuple(Feature(n, *_SPECTRAL_WORDS[n], scopes=_LAYERED) for n in SPECTRAL_NAMES),
    order=Order.DECLARED, display=SPECTRAL_NAMES)
OTHER = FeatureGroup(
    "other", "other",
    features=(Feature("mean_norm", "mean L2 norm of the pooled hidden states",
                      "hidden-state units", scopes=_LAYERED),
              Feature("median_pairwise_distance",
                      "median distance between the pooled hidden states", "distance",
                      scopes=_LAYERED),
              Feature("pca_components", "principal components kept before homology", "count",
                      Kind.COUNT, _LAYERED),
              Feature("pca_explained_variance",
                      "share of the variance the kept components explain", "fraction",
                      scopes=_LAYERED)),
    last=True)


@dataclass(frozen=True)
class EmbeddingFamily(SignatureFamily):
    """Persistent homology (Vietoris–Rips H0/H1 after PCA) and spectral baselines of the
    mean-pooled hidden states of the analysed texts, and perplexity on them (an
    encoder's masked-LM loss)."""

    name: ClassVar[str] = "embedding"
    rough_seconds: ClassVar[float | None] = 0.55
    options_title: ClassVar[str] = "embedding (hidden-state homology and spectra)"
    settings_key: ClassVar[str] = "settings"
    hash_key: ClassVar[str] = "settings_hash"
    hash_prefix: ClassVar[str] = ""
    order: ClassVar[int] = 100  # last: it moves the model to the run's precision
    texts: ClassVar[Texts] = Texts.ANALYSED
    default_on: ClassVar[bool] = True
    precision_keyed: ClassVar[bool] = True
    groups: ClassVar[tuple[FeatureGroup, ...]] = (TOPOLOGY, SPECTRUM, OTHER)
    columns: ClassVar[tuple[Column, ...]] = (
        Column("perplexity", ">11", "perplexity", ".2f"),
        Column("H1 bars", ">8", "h1_n_features", ".0f"),
        Column("RankMe", ">8", "rankme", ".2f"))
    figure: ClassVar[str] = "topological_evolution"
    over_training: ClassVar[tuple[str, ...]] = (
        "h1_n_features", "h1_total_persistence", "h1_persistence_entropy",
        "h1_max_persistence", "h0_total_persistence", "h1_mean_persistence")
    study_keys: ClassVar[tuple[str, ...]] = ("texts_source", "texts_sha256", "n_texts",
                                             "dtype")
    widening: ClassVar[Widening | None] = Widening("layers", "--layers", parse_layers,
                                                   union_layers, format_layers)

    max_length: int = setting(128, "tokens per text after truncation",
                              from_run="max_length", check=at_least(2, "tokens"))
    pca_dim: int = setting(50, "PCA components before persistent homology (default: "
                               "%(default)s)", option="--pca-dim", check=at_least(1))
    maxdim: int = setting(1, "highest homology dimension", from_run="maxdim",
                          check=one_of((0, 1, 2)))
    layers: Layers = setting(
        "last", "analyse the last hidden state, every hidden state the model returns (for "
                "most, the embedding output and every block; records name them in "
                "layer_names), or the hidden states of these indices, e.g. 0,3,-1 "
                "(negative ones count from the end, -1 is the last; one that starts the "
                "list needs --layers=-2,-1) (default: %(default)s)",
        option="--layers", normalise=parse_layers, cli={"metavar": "last|all|I,J,..."})
    ph_backend: str = setting("auto", "Vietoris-Rips library", from_run="ph_backend",
                              check=one_of(PH_BACKEND_CHOICES), hashed=False)
    resamples: int = setting(
        0, "recompute the analysed layer's persistent-homology features on B bootstrap "
           "resamples of the texts (seeded, the same at every checkpoint) and keep their "
           "spread (default: %(default)s)",
        option="--resamples", check=at_least(0), cli={"metavar": "B", "type": int})
    save_hidden: bool = setting(False, "also save the pooled hidden states of the analysed "
                                       "layers (.npz)", option="--save-hidden", check=FLAG,
                                hashed=False)
    seed: int = setting(42, "seeds the resamples of the texts", from_run="seed",
                        check=SEED, hashed=False)

    def hash_payload(self, texts_sha: str | None, dtype: str,
                     tokenizer: str | None = None) -> dict[str, Any]:
        """Schema 2's embedding hash, which predates the family key: the texts'
        fingerprint (which covers their number, length filter and source), the
        tokenisation, PCA, homology dimension, layers and precision; the seed only with
        resamples (only then does it change the numbers)."""
        keyed: dict[str, Any] = {
            "schema": SCHEMA_VERSION, "texts_sha": texts_sha, "max_length": self.max_length,
            "pca_dim": self.pca_dim, "maxdim": self.maxdim,
            "layers": self.layers,  # "last" and "all" as ever; indices as a list
            "tokenizer": tokenizer, "dtype": dtype}
        if self.resamples:
            # resample 2: a text drawn twice is one point of the complex (before, the
            # SVD's rounding made its copies distinct points, adding bars of ~1e-16)
            keyed.update(resamples=self.resamples, seed=self.seed, resample_version=2)
        return keyed

    @classmethod
    def study_view(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        """As every family's; of a study whose ``settings`` still hold the run's (written
        before they had a key of their own), its own fields and the run's it depends on."""
        names = {f.name for f, _ in cls.statements()} | {*cls.run_keys(), "dtype"}
        return {k: v for k, v in super().study_view(config).items() if k in names}

    def study_fields(self, inputs: FamilyInputs, dtype: str) -> dict[str, Any]:
        from toposig.sources.corpus import texts_fingerprint

        texts = inputs.texts
        return {"texts_source": inputs.texts_source if texts else None,
                "texts_sha256": texts_fingerprint(texts) if texts else None,
                "n_texts": len(texts), "dtype": dtype}  # in its hash

    def compute(self, loaded: Session, inputs: FamilyInputs) -> CheckpointOutput:
        from toposig.model.embedding import analyse_checkpoint

        tokenizer = loaded.tokenizer()
        model = loaded.model(float32=False)
        load_s = loaded.load_s
        forward = loaded.texts_forward(inputs.texts, self.max_length, inputs.run.batch_size)
        return analyse_checkpoint(
            loaded.ckpt, inputs.texts, self, run=inputs.run, placement=loaded.placement,
            local_files_only=loaded.local_files_only, model=model, tokenizer=tokenizer,
            load_s=load_s, forward=forward)

    def describe(self, settings_hash: str | None, inputs: FamilyInputs) -> str:
        return (f"texts: {len(inputs.texts)} from {inputs.texts_source}, embedding settings "
                f"hash: {settings_hash}")

    @classmethod
    def record_parts(cls, record: Record) -> list[str]:
        quality = [f"{k} {v:.4g}" for k, v in (("perplexity", record.perplexity),
                                               ("mlm_loss", record.mlm_loss))
                   if v is not None]
        n_texts = record.measure("n_texts")
        return [*quality, f"{len(record.layers) or 1} layer(s), "
                          f"{'?' if n_texts is None else n_texts} texts"]

    @classmethod
    def summary_columns(cls, entries: Sequence[Record]) -> tuple[Column, ...]:
        """An encoder's masked-LM loss first, when an entry has one."""
        mlm = any(r.mlm_loss is not None for r in entries)
        return ((Column("MLM loss", ">9", "mlm_loss", ".3f"),) if mlm else ()) + cls.columns


register(EmbeddingFamily)
