"""Gradient-free priors: fitted values against hand-computed ones, the cache, and the calibrated leakage."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from gradleak_bench import priors as P
from gradleak_bench.errors import CorruptFileError, GradleakError
from gradleak_bench.metrics import action_accuracy, bbox_iou, rgb_psnr
from gradleak_bench.metrics.summary import calibrate
from gradleak_bench.records import Episode

CONFIG = P.PriorConfig(task="Synthetic", victim="v", checkpoint="init", sequence_length=3)


def episode(i: int, length: int = 3) -> Episode:
    rgb = np.full((length, 4, 4, 3), 10 * i, np.uint8)
    rgb[:, 0, 0, 0] = 200  # one bright pixel, so the mean frame differs from the mean colour
    visible = i % 2 == 1
    bbox = np.tile(np.array([0.0, 0.0, 0.5, 0.5] if visible else [0.0] * 4, np.float32), (length, 1))
    pose = np.stack([np.arange(length) + i, np.zeros(length), np.full(length, 3.1 if i % 2 else -3.1)], 1)
    return Episode(f"L{i:03d}-E00", "Synthetic", i, i, {
        "rgb": rgb, "depth": np.full((length, 4, 4), float(i), np.float32), "bbox": bbox,
        "pose": pose.astype(np.float32), "action": np.array([1, 2, i % 3], np.int64)[:length],
        "return": np.arange(length, dtype=np.float32) + i,
    })


def fitted(n: int = 4) -> P.PriorSet:
    return P.fit(CONFIG, [episode(i) for i in range(n)])


def get(priors: P.PriorSet, name: str, field: str) -> P.Prior:
    return next(p for p in priors.priors if p.name == name and p.field == field)


def test_image_priors_match_hand_computed_values():
    priors = fitted()
    mean = get(priors, "mean_frame", "rgb").values[0]
    assert mean[1, 1, 0] == pytest.approx(15.0)  # (0 + 10 + 20 + 30) / 4
    assert mean[0, 0, 0] == pytest.approx(200.0)
    colour = get(priors, "mean_colour", "rgb").values[0]
    assert np.allclose(colour[..., 0], (15.0 * 15 + 200) / 16) and np.allclose(colour[..., 1], 15.0)
    assert get(priors, "median_frame", "depth").values[0, 2, 2] == pytest.approx(1.5)
    assert np.all(get(priors, "grey", "rgb").values == 128.0)


def test_action_box_pose_and_scalar_priors():
    priors = fitted()
    # actions per episode: [1, 2, 0], [1, 2, 1], [1, 2, 2], [1, 2, 0] -> 1 is the majority, per step 1, 2, 0
    assert get(priors, "majority_action", "action").apply(2).tolist() == [1, 1]
    assert get(priors, "majority_action_per_step", "action").apply(4).tolist() == [1, 2, 0, 0]
    assert get(priors, "action_histogram", "action").values == pytest.approx([2 / 12, 5 / 12, 5 / 12])
    assert np.allclose(get(priors, "mean_visible_box", "bbox").values, [[0, 0, 0.5, 0.5]])
    assert np.all(get(priors, "zero_box", "bbox").values == 0)
    start = get(priors, "mean_start_pose", "pose").values[0]
    assert start[0] == pytest.approx(1.5) and abs(abs(start[2]) - math.pi) < 1e-3  # 3.1 and -3.1 average to pi
    assert get(priors, "mean_trajectory", "pose").values[:, 0] == pytest.approx([1.5, 2.5, 3.5])
    assert get(priors, "mean_per_step", "return").values == pytest.approx([1.5, 2.5, 3.5])
    assert get(priors, "median", "return").values == pytest.approx([2.5])


def test_apply_repeats_the_last_step_and_histogram_draws_are_seeded_by_key():
    prior = get(fitted(), "mean_trajectory", "pose")
    out = prior.apply(5)
    assert out.shape == (5, 3) and np.array_equal(out[3], out[2]) and np.array_equal(out[4], out[2])
    hist = get(fitted(), "action_histogram", "action")
    a, b = hist.apply(64, "L001-E00"), hist.apply(64, "L001-E00")
    assert a.dtype == np.int64 and np.array_equal(a, b)
    assert not np.array_equal(a, hist.apply(64, "L002-E00"))
    assert set(np.unique(a)) <= {0, 1, 2}


def test_reconstructions_group_fields_by_name_and_score_with_the_metric_code():
    priors = fitted()
    recons = priors.reconstructions(3, "k", fields=["rgb", "bbox", "action"])
    assert set(recons["mean_frame"].fields) == {"rgb"}
    assert set(recons["mean"].fields) == {"bbox"}  # the return's "mean" is left out: not asked for
    truth = episode(1)
    assert rgb_psnr(recons["mean_frame"].fields["rgb"], truth.steps["rgb"]).shape == (3,)
    assert bbox_iou(recons["zero_box"].fields["bbox"], episode(2).steps["bbox"]).tolist() == [1.0] * 3
    assert action_accuracy(recons["majority_action"].fields["action"], truth.steps["action"]).tolist() == [1, 0, 1]


def test_fit_refuses_no_episodes():
    with pytest.raises(GradleakError, match="no train episodes"):
        P.fit(CONFIG, [])


def test_cache_round_trip_and_corrupt_files(tmp_path):
    priors = fitted()
    path = tmp_path / "p.safetensors"
    P.save(priors, path)
    back = P.load(path, CONFIG)
    assert [(p.name, p.field, p.kind) for p in back.priors] == [(p.name, p.field, p.kind) for p in priors.priors]
    assert all(np.array_equal(a.values, b.values) for a, b in zip(back.priors, priors.priors))
    with pytest.raises(CorruptFileError, match="another configuration"):
        P.load(path, P.PriorConfig("Synthetic", "v", "trained", 3))
    path.write_bytes(b"not a safetensors file")
    with pytest.raises(CorruptFileError, match="Delete it"):
        P.load(path, CONFIG)


def test_a_prior_file_with_nan_is_rejected(tmp_path):
    priors = fitted()
    bad = P.Prior("mean", "return", "template", np.array([np.nan], np.float32), "")
    P.save(P.PriorSet(CONFIG, (bad,), 1, 1), tmp_path / "p.safetensors")
    with pytest.raises(CorruptFileError, match="NaN"):
        P.load(tmp_path / "p.safetensors", CONFIG)
    assert priors  # the good set is untouched


def test_load_or_fit_caches_and_refits_an_unreadable_cache():
    eps = [episode(i) for i in range(3)]
    first = P.load_or_fit(CONFIG, episodes=eps)
    assert P.cache_path(CONFIG).is_file() and first.n_episodes == 3
    again = P.load_or_fit(CONFIG, episodes=[])  # from the cache: the (empty) source is not read
    assert again.n_episodes == 3
    P.cache_path(CONFIG).write_bytes(b"garbage")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        refit = P.load_or_fit(CONFIG, episodes=eps)
    assert refit.n_episodes == 3 and any("Refitting" in str(w.message) for w in caught)


def test_priors_are_fitted_on_train_layouts_only(monkeypatch):
    from gradleak_bench import dataset as datasets

    seen = []
    monkeypatch.setattr(datasets, "iter_generate", lambda config, **kw: seen.append(config) or iter([]))
    monkeypatch.setattr(datasets, "load_or_generate", lambda config, **kw: seen.append(config) or [])
    list(P.train_episodes(P.config_for("PointNav", "ppo", "init", 8)))
    list(P.train_episodes(P.config_for("PointNav", "ppo", "init", 200)))
    assert [c.split for c in seen] == ["train", "train"]
    assert seen[0].seed == P.TRAIN_DATASET_SEED and seen[0].sequence_length == 8


def test_a_retrained_victim_gets_priors_of_its_own(monkeypatch):
    """Issue 37: a victim retrained in place keeps its name, so the standard prior config names the weights the
    checkpoint has now; priors fitted on the old weights' behaviour sit under another key and are never
    loaded for the new ones."""
    from gradleak_bench.victims import card

    published = card.weights_sha256("PointNav", "ppo", "trained")
    config = P.config_for("PointNav", "ppo", "trained", 8)
    assert config.weights_sha256 == published and config.to_dict()["weights_sha256"] == published
    monkeypatch.setattr(card, "weights_sha256", lambda task, victim, checkpoint: "0" * 64)
    retrained = P.config_for("PointNav", "ppo", "trained", 8)
    assert retrained.key != config.key and P.cache_path(retrained) != P.cache_path(config)
    # an init rebuilt from its seed has no weights file: the field is left out, as for configs made before it
    assert "weights_sha256" not in CONFIG.to_dict()


def test_calibrate_picks_the_best_prior_in_the_metric_direction():
    out = calibrate([3.0, 4.0, 5.0], {"a": [1.0, 1.0, 1.0], "b": [2.0, 3.0, 5.0]}, True, n_resamples=500)
    assert out["best_prior"] == "b" and out["leakage"]["mean"] == pytest.approx(2 / 3)
    errors = calibrate([3.0, 4.0, 5.0], {"a": [1.0, 1.0, 1.0], "b": [2.0, 3.0, 5.0]}, False, n_resamples=500)
    assert errors["best_prior"] == "a" and errors["leakage"]["mean"] == pytest.approx(3.0)
    assert set(out["priors"]) == {"a", "b"} and out["priors"]["b"]["mean"] == pytest.approx(10 / 3)


def test_calibrate_pairs_finite_episodes_and_checks_lengths():
    out = calibrate([1.0, np.nan, 3.0], {"p": [0.0, 5.0, np.nan]}, True, n_resamples=500)
    assert out["leakage"]["mean"] == 1.0 and out["leakage"]["n"] == 1 and out["leakage"]["n_failed"] == 2
    assert calibrate([1.0], {"p": [np.nan]}, True)["best_prior"] is None
    with pytest.raises(ValueError, match="episodes"):
        calibrate([1.0, 2.0], {"p": [1.0]}, True)


# --- in the scorer (gradleak_bench.run) ------------------------------------------------------------------


def test_a_bad_prior_steps_variable_is_one_clear_error(monkeypatch):
    monkeypatch.setenv(P.STEPS_ENV, "lots")
    with pytest.raises(GradleakError, match="GRADLEAK_BENCH_PRIOR_STEPS"):
        P.config_for("PointNav", "ppo", "init", 8)


def test_prior_scores_are_the_scorers_and_are_cached_per_episode(tmp_path):
    from gradleak_bench.metrics import get_metric
    from gradleak_bench.metrics.scoring import score
    from gradleak_bench.run.scorer import score_references

    metrics = [get_metric("rgb_psnr"), get_metric("action_accuracy"), get_metric("bbox_iou")]
    refs = P.references(fitted(), ["rgb", "action"], str(tmp_path))
    truth = episode(2)
    first = score_references(refs, metrics, truth)
    mean_frame = next(r for r in refs if r.name == "prior:mean_frame")
    assert first["prior:mean_frame"] == score(metrics, mean_frame.reconstruct(3), truth)[0]
    assert set(first["prior:majority_action"]) == {"action_accuracy"}
    cache = tmp_path / f"{truth.episode_id}.json"
    assert cache.is_file()
    cache.write_text('{"prior:mean_frame": {"rgb_psnr": 99.0}}')  # a cached value is read back as is ...
    assert score_references(refs, metrics, truth)["prior:mean_frame"]["rgb_psnr"] == 99.0
    cache.write_text("[not json")  # ... and a damaged file is rescored, never trusted
    assert score_references(refs, metrics, truth) == first


def test_summary_names_the_best_prior_and_the_leakage_over_it():
    from gradleak_bench.errors import CorruptFileError
    from gradleak_bench.metrics import get_metric
    from gradleak_bench.run.results import MetricResult
    from gradleak_bench.run.scorer import EpisodeRow, summarise_metrics

    rows = [EpisodeRow(f"L{i:03d}-E00", i, 8, "ok", metrics={"action_accuracy": 1.0},
                       control={"action_accuracy": 0.2},
                       references={"prior:majority_action": {"action_accuracy": 0.5 + 0.1 * (i % 2)},
                                   "prior:action_histogram": {"action_accuracy": 0.3}}) for i in range(6)]
    result = summarise_metrics(rows, [get_metric("action_accuracy")], seed=0, control=True)["action_accuracy"]
    assert result.best_prior == "prior:majority_action"
    assert result.prior_leakage.mean == pytest.approx(0.45) and result.leakage.mean == pytest.approx(0.8)
    data = result.to_dict()
    assert MetricResult.from_dict(data) == result
    data["best_prior"] = "prior:not_scored"
    with pytest.raises(CorruptFileError, match="best_prior"):
        MetricResult.from_dict(data)


def test_evaluate_reports_leakage_against_the_best_prior(tmp_path):
    import json

    from gradleak_bench.run import EvaluateConfig, evaluate

    evaluate(EvaluateConfig(attack="closed_form", task="PointNav", victim="ppo_compact", episodes=3,
                            out=str(tmp_path / "run"), wandb="disabled"), progress=False)
    acc = json.loads((tmp_path / "run" / "results.json").read_text())["metrics"]["action_accuracy"]
    assert acc["best_prior"].startswith("prior:") and acc["best_prior"] in acc["references"]
    best = acc["references"][acc["best_prior"]]["mean"]
    assert acc["prior_leakage"]["mean"] == pytest.approx(acc["mean"] - best)
    assert {"prior:majority_action", "prior:action_histogram"} <= set(acc["references"])


def test_the_strongest_reference_is_the_better_of_the_best_prior_and_the_swap_control():
    """Issue 31: leakage is never reported over something weaker than the swap control (closed_form at init:
    the control 0.266 beats the action histogram 0.213, so the headline is 0.734, not 0.786)."""
    from gradleak_bench.run.results import SWAP_CONTROL, Interval, MetricResult

    control, prior = Interval(0.266, 0.2, 0.33), Interval(0.213, 0.18, 0.25)
    vs_control, vs_prior = Interval(0.734, 0.69, 0.77), Interval(0.786, 0.74, 0.83)
    m = MetricResult(1.0, 1.0, 1.0, 48, True, control=control, leakage=vs_control,
                     references={"prior:action_histogram": prior}, best_prior="prior:action_histogram",
                     prior_leakage=vs_prior)
    assert m.strongest_reference == SWAP_CONTROL and m.reference_leakage == vs_control
    assert m.headline() == {"strongest_reference": SWAP_CONTROL, "reference_leakage": vs_control.to_dict()}
    error = MetricResult(0.1, 0.05, 0.2, 48, False, control=Interval(0.9, 0.8, 1.0), leakage=Interval(-0.8, -0.9, -0.7),
                         references={"prior:mean": Interval(0.5, 0.4, 0.6)}, best_prior="prior:mean",
                         prior_leakage=Interval(-0.4, -0.5, -0.3))
    assert error.strongest_reference == "prior:mean" and error.reference_leakage.mean == -0.4  # lower error wins
    alone = MetricResult(1.0, 1.0, 1.0, 48, True, control=control, leakage=vs_control)
    assert alone.strongest_reference == SWAP_CONTROL and MetricResult(1.0, 1.0, 1.0, 4, True).headline() == {}
