"""The ``heads`` family, opt-in, for causal models: the mechanism-level ground truth of
in-context copying, every attention head's prefix-matching score (from its attention on
repeated random sequences) and copying score (from its OV circuit), as Olsson et al.
2022 identify induction heads (:mod:`toposig.model.heads`). The positive control's
behavioural event (the in-context score) is a consequence; these name the mechanism.

The record's features summarise the heads: the highest prefix-matching score and its
mean over heads, and the copying score of the head that matches prefixes best; its
arrays are the scores of every head (``prefix``, ``copying``: layers x heads).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from toposig.config import SEED, at_least, one_of, setting
from toposig.families.base import (
    Column,
    FamilyInputs,
    Feature,
    FeatureGroup,
    Order,
    Session,
    SignatureFamily,
    with_stored_loss,
)
from toposig.families.registry import register
from toposig.records import CheckpointOutput, now_iso, record_header

TOKEN_CHOICES = ("alnum", "all")
HEADS = FeatureGroup(
    "attention_heads", "attention heads",
    features=(Feature("head_prefix_max", "highest prefix-matching score of a head: its "
                                         "attention to the token after the current token's "
                                         "earlier occurrence, on repeated random sequences",
                      "0-1"),
              Feature("head_prefix_mean", "mean prefix-matching score over the heads", "0-1"),
              Feature("head_copying_of_prefix", "copying score (Σ Re λ / Σ |λ| of the OV "
                                                "circuit) of the head with the highest "
                                                "prefix-matching score", "-1 to 1")),
    prefixes=("head_",), order=Order.DECLARED)


@dataclass(frozen=True)
class HeadsFamily(SignatureFamily):
    """Prefix-matching and copying scores of every attention head, on ``n_sequences``
    random blocks of ``length`` tokens (drawn from ``tokens``) written twice."""

    name: ClassVar[str] = "heads"
    rough_seconds: ClassVar[float | None] = 0.07
    options_title: ClassVar[str] = "heads (induction-head scores of every attention head)"
    order: ClassVar[int] = 35
    float32: ClassVar[bool] = True
    target: ClassVar[str] = "loss"
    groups: ClassVar[tuple[FeatureGroup, ...]] = (HEADS,)
    columns: ClassVar[tuple[Column, ...]] = (
        Column("prefix", ">7", "head_prefix_max", ".3f"),
        Column("copying", ">8", "head_copying_of_prefix", ".3f"))
    over_training: ClassVar[tuple[str, ...]] = ("head_prefix_max", "head_prefix_mean",
                                                "head_copying_of_prefix")

    n_sequences: int = setting(32, "repeated random sequences (default: %(default)s)",
                               option="--head-sequences", check=at_least(1))
    length: int = setting(8, "tokens of each random block, written twice (capped at half "
                             "the model's positions) (default: %(default)s)",
                          option="--head-length", check=at_least(2, "tokens"))
    tokens: str = setting("alnum", "what the random blocks are drawn from: the tokens that "
                                   "decode to ASCII letters or digits, or every id of the "
                                   "vocabulary (default: %(default)s)",
                          option="--head-tokens", check=one_of(TOKEN_CHOICES),
                          cli={"choices": TOKEN_CHOICES})
    seed: int = setting(42, "seeds the random blocks", from_run="seed", check=SEED)

    def compute(self, loaded: Session, inputs: FamilyInputs) -> CheckpointOutput:
        from toposig.model.heads import alphanumeric_tokens, head_scores, repeated_sequences
        from toposig.model.loss_probes import require_causal
        from toposig.sources.checkpoints import checkpoint_identity

        t0 = time.perf_counter()
        model = loaded.model(float32=True)
        require_causal(model)
        cfg = model.config
        positions = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions",
                                                                             None)
        length = min(self.length, positions // 2) if positions else self.length
        vocab = model.get_input_embeddings().num_embeddings
        pool = alphanumeric_tokens(loaded.tokenizer(), vocab) if self.tokens == "alnum" \
            else vocab
        if not pool or (isinstance(pool, list) and len(pool) < 2):
            raise ValueError("the tokenizer has fewer than 2 tokens that decode to ASCII "
                             "letters or digits: use --head-tokens all")
        ids = repeated_sequences(pool, self.n_sequences, length, self.seed)
        prefix, copying = head_scores(model, ids, length)
        best = np.unravel_index(int(np.argmax(prefix)), prefix.shape)
        chosen = float(copying[best])
        elapsed = time.perf_counter() - t0
        record = {
            **record_header(self.family, checkpoint_identity(loaded.ckpt)),
            "features": {"head_prefix_max": float(prefix.max()),
                         "head_prefix_mean": float(prefix.mean()),
                         "head_copying_of_prefix": chosen if np.isfinite(chosen) else None},
            "best_head": {"layer": int(best[0]), "head": int(best[1])},
            "length": length,
            "settings": self.to_dict(),
            "timings_s": {"load": loaded.load_s, "heads": elapsed,
                          "total": loaded.load_s + elapsed},
            "finished_at": now_iso(),
            "num_parameters": loaded.num_parameters,
        }
        return with_stored_loss(loaded, CheckpointOutput(record, {"prefix": prefix,
                                                                  "copying": copying}))

    def describe(self, settings_hash: str | None, inputs: FamilyInputs) -> str:
        return (f"heads: prefix matching on {self.n_sequences} random blocks of "
                f"{self.length} {self.tokens} tokens written twice, and OV copying, settings hash: "
                f"{settings_hash}")


register(HeadsFamily)
