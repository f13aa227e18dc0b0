"""The positive controls' ground-truth signals on hand-built cases whose value is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toposig.analysis import ground_truth as G
from toposig.analysis import head_to_head as H


def all_pairs(p):
    a, b = np.meshgrid(np.arange(p), np.arange(p), indexing="ij")
    return a.ravel(), b.ravel()


def test_a_model_that_returns_the_answer_scores_one_and_a_random_one_about_one_over_p():
    p = 23
    a, b = all_pairs(p)
    perfect = np.eye(p)[(a + b) % p]
    assert G.modular_accuracy(perfect, a, b, p) == 1.0
    rng = np.random.default_rng(0)
    scores = [G.modular_accuracy(rng.normal(size=(p * p, p)), a, b, p) for _ in range(20)]
    assert np.mean(scores) == pytest.approx(1 / p, abs=0.01)
    off_by_one = np.eye(p)[(a + b + 1) % p]
    assert G.modular_accuracy(off_by_one, a, b, p) == 0.0
    with pytest.raises(ValueError, match="pairs"):
        G.modular_accuracy(perfect[:, :-1], a, b, p)


def test_a_copying_model_scores_minus_log_vocabulary_and_a_unigram_one_zero():
    vocab, length, n = 50, 10, 8
    uniform = np.full((n, 2 * length - 1), math.log(vocab))
    assert G.induction_score(uniform, length) == pytest.approx(0.0)
    copying = uniform.copy()
    copying[:, length:] = 0.0  # the second copy's tokens (after its first) predicted exactly
    assert G.induction_score(copying, length) == pytest.approx(-math.log(vocab))
    # the second copy's first token cannot be copied: its loss does not count
    copying[:, length - 1] = 99.0
    assert G.induction_score(copying, length) == pytest.approx(-math.log(vocab))
    with pytest.raises(ValueError, match="token_losses"):
        G.induction_score(uniform[:, :-1], length)


def test_crossing_halfway_and_change_point():
    steps = [0, 100, 200, 300, 400, 500]
    acc = [0.01, 0.02, 0.3, 0.6, 0.95, 0.99]
    assert G.crossing_step(steps, acc, 0.5) == 300
    assert G.crossing_step(steps, acc, 0.9) == 400
    assert G.crossing_step(steps, acc, 0.999) is None
    score = [0.0, -0.1, -0.2, -2.0, -2.1, -2.2]
    assert G.halfway_step(steps, score) == 300
    assert G.halfway_step(steps, list(reversed(score))) is None
    assert G.change_point(steps, score) == 300
    # a shift in level, not the largest jump: one spike does not move it
    assert G.change_point([0, 10, 1000], [0.0, 1.0, 5.0]) == 1000
    spiky = [0.0] * 10 + [3.0] + [0.0] * 9 + [1.0] * 20  # a spike 3 x the shift
    assert G.change_point(list(range(40)), spiky) == 20
    # at least 3 checkpoints a side: a shift after the second of 30 is placed at the third
    assert G.change_point(list(range(30)), [0.0, 0.0] + [1.0] * 28) == 3
    # equal to a brute-force least-squares split with 3 checkpoints a side
    rng = np.random.default_rng(3)
    for _ in range(20):
        v = rng.normal(size=30) + np.r_[np.zeros(rng.integers(3, 27)), np.ones(30)][:30]
        costs = {k: ((v[:k] - v[:k].mean()) ** 2).sum() + ((v[k:] - v[k:].mean()) ** 2).sum()
                 for k in range(3, 28)}
        assert G.change_point(list(range(30)), v) == min(costs, key=costs.get)


def test_alignment_counts_checkpoints_and_the_sign_of_the_lead():
    steps = [0, 100, 200, 300, 400, 500]
    early = [0, 0, 5, 5, 5, 5]  # moves at 200
    got = G.alignment(steps, early, 300)
    assert (got.feature_step, got.lead, got.checkpoints_apart, got.hit) == (200, 100, 1, True)
    late = [0, 0, 0, 0, 0, 5]
    got = G.alignment(steps, late, 200)
    assert (got.lead, got.checkpoints_apart, got.hit) == (-300, 3, False)
    assert G.alignment(steps, early, None) is None
    with pytest.raises(ValueError, match="not a checkpoint"):
        G.alignment(steps, early, 250)


def test_hits_at_other_runs_events_and_the_permutation_p():
    grid = list(range(0, 200, 10))  # 20 checkpoints
    events = [40, 80, 120, 160]  # four checkpoints apart: no hit reaches a neighbour's
    follows = G.swapped_hits([grid] * 4, events, events)
    assert (follows == np.eye(4, dtype=bool)).all()
    assert G.permutation_p_value(follows) == pytest.approx(1 / 24)  # only the true order
    # a feature that shifts at one stage of training in every run, whatever its event,
    # hits the event near that stage (run 1) and every run's change-point hits it there
    stage = G.swapped_hits([grid] * 4, [80] * 4, events)
    assert stage.sum(axis=1).tolist() == [1, 1, 1, 1] and np.trace(stage) == 1
    assert G.permutation_p_value(stage) == 1.0  # every order gives that one hit
    # an event off a run's grid counts at its nearest checkpoint
    assert G.swapped_hits([[0, 10, 20, 30, 40]], [10], [28]).tolist() == [[False]]
    assert G.swapped_hits([[0, 10, 20, 30, 40]], [20], [28]).tolist() == [[True]]
    assert G.permutation_p_value(np.ones((1, 1), dtype=bool)) is None


def test_the_permutation_p_is_calibrated_where_the_binomial_is_not():
    """Runs whose change-points and events are unrelated: the permutation p rejects at
    about alpha or less; where every feature shifts at one stage of training and the
    events cluster near it, the binomial test against a randomly placed change-point
    rejects far more often, and the permutation p does not."""
    import itertools

    rng = np.random.default_rng(1)
    grid = list(range(0, 300, 10))  # 30 checkpoints
    n_runs, trials = 5, 400
    unrelated, stage_perm, stage_binom = 0, 0, 0
    for _ in range(trials):
        events = rng.choice(np.arange(40, 260, 10), n_runs)
        cps = rng.choice(np.arange(30, 280, 10), n_runs)
        unrelated += G.permutation_p_value(G.swapped_hits([grid] * n_runs, cps, events)) <= 0.05
        events = 100 + 10 * rng.integers(-2, 3, n_runs)  # the transition near step 100
        cps = 100 + 10 * rng.integers(-2, 3, n_runs)  # and every feature shifts there too
        hits = G.swapped_hits([grid] * n_runs, cps, events)
        stage_perm += G.permutation_p_value(hits) <= 0.05
        chance = np.mean([G.chance_hit_rate(grid, int(e)) for e in events])
        stage_binom += G.hit_p_value(int(np.trace(hits)), n_runs, chance) <= 0.05
    assert unrelated / trials <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials)
    assert stage_perm / trials <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials)
    assert stage_binom / trials > 0.5
    # the exact p equals a direct count over every order of four runs
    hits = rng.random((4, 4)) < 0.4
    direct = np.mean([sum(hits[i, o[i]] for i in range(4)) >= np.trace(hits)
                      for o in itertools.permutations(range(4))])
    assert G.permutation_p_value(hits) == pytest.approx(direct)
    # nine runs: drawn orders, the same with every call
    big = rng.random((9, 9)) < 0.3
    assert G.permutation_p_value(big) == G.permutation_p_value(big)
    assert 1 / H.PERMUTATIONS <= G.permutation_p_value(big) <= 1
