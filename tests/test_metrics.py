"""Metrics against hand-computed values, degenerate inputs and the failed-frame (NaN) contract."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from gradleak_bench.errors import UnknownNameError
from gradleak_bench.metrics import (
    DEPTH_RANGE_M,
    MAX_PSNR_DB,
    MetricSpec,
    MetricSummary,
    action_accuracy,
    action_hist_tv,
    all_metrics,
    bbox_iou,
    bootstrap_ci,
    depth_psnr,
    depth_ssim,
    get_metric,
    goal_mse,
    metrics_for_fields,
    pose_position_error,
    register_metric,
    rel_error_percent,
    rgb_psnr,
    rgb_psnr_y,
    rgb_ssim,
    rgb_ssim_y,
    summarize,
)
from gradleak_bench.records import TRUTH_FIELDS, Episode

T, H, W = 4, 16, 16


def scene(seed: int = 0) -> np.ndarray:
    """A structured RGB episode (gradients and blocks, not noise) in [40, 200], so shifts never clip."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:H, 0:W]
    frames = []
    for _ in range(T):
        base = 40 + 10 * (xx + yy) / 2 + rng.integers(0, 20)
        frame = np.stack([base, base[::-1], base.T], axis=-1)
        frame[4:10, 3:9] = rng.integers(40, 201, 3)
        frames.append(frame)
    return np.clip(np.array(frames), 40, 200).astype(np.uint8)


def truth_for(field: str, rng: np.random.Generator, side: int = H, action_kind: str | None = None) -> np.ndarray:
    """Plausible truth of one episode for any field a built-in metric scores (frames ``side`` pixels wide)."""
    if field == "rgb":
        return scene() if side == H else np.kron(scene(), np.ones((1, side // H, side // H, 1), np.uint8))
    if field == "depth":
        return rng.uniform(0.5, 9.0, (T, side, side)).astype(np.float32)
    if field == "bbox":
        lo = rng.uniform(-1, 0, (T, 2))
        return np.concatenate([lo, lo + rng.uniform(0.1, 1, (T, 2))], axis=1).astype(np.float32)
    if field == "goal":
        return rng.uniform(0.5, 3.0, (T, 2)).astype(np.float32)
    if field == "pose":
        return rng.uniform(-5, 5, (T, 3)).astype(np.float32)
    if field == "action" and action_kind == "continuous":  # (linear, angular) commands
        return rng.uniform(-1, 1, (T, 2)).astype(np.float32)
    if field == "action":
        return rng.integers(0, 4, T)
    return rng.uniform(0.5, 2.0, T).astype(np.float32)


# --- PSNR -------------------------------------------------------------------------------------------


def test_rgb_psnr_of_known_mse():
    truth = scene()
    k = 7  # +-k on alternate pixels: MSE is exactly (k/255)^2 on the unit scale, no clipping
    sign = np.where((np.indices((H, W)).sum(axis=0) % 2) == 0, 1, -1)[None, :, :, None]
    recon = truth.astype(np.float64) + k * sign
    expected = 10 * math.log10(1 / (k / 255) ** 2)
    np.testing.assert_allclose(rgb_psnr(recon, truth), expected, rtol=1e-12)


def test_identical_frames_are_capped_not_infinite():
    truth = scene()
    for metric in (rgb_psnr, rgb_psnr_y):
        np.testing.assert_array_equal(metric(truth, truth), MAX_PSNR_DB)
    depth = np.full((T, H, W), 3.0)
    np.testing.assert_array_equal(depth_psnr(depth, depth), MAX_PSNR_DB)


def test_y_psnr_matches_bt601_hand_example_and_differs_from_rgb():
    truth = scene()
    shift = 51  # +0.2 on the blue channel only
    recon = truth.astype(np.float64)
    recon[..., 2] += shift
    # RGB: only one of three channels is off by 0.2.
    np.testing.assert_allclose(rgb_psnr(recon, truth), 10 * math.log10(1 / (0.2**2 / 3)), rtol=1e-12)
    # Y = 16 + 65.481 R + 128.553 G + 24.966 B (R, G, B in [0, 1]): a blue shift of 0.2 moves Y by 4.9932.
    expected_y = 20 * math.log10(255 / (24.966 * 0.2))
    np.testing.assert_allclose(rgb_psnr_y(recon, truth), expected_y, rtol=1e-9)
    assert np.all(rgb_psnr_y(recon, truth) > rgb_psnr(recon, truth) + 10)  # luma barely sees blue


def test_rgb_recon_float_is_clipped_to_0_255():
    truth = np.full((1, H, W, 3), 255, np.uint8)
    np.testing.assert_array_equal(rgb_psnr(np.full((1, H, W, 3), 400.0), truth), MAX_PSNR_DB)


# --- SSIM -------------------------------------------------------------------------------------------


def test_ssim_identical_is_one_and_noise_is_low():
    truth = scene()
    noise = np.random.default_rng(1).integers(0, 256, truth.shape, dtype=np.uint8)
    for metric in (rgb_ssim, rgb_ssim_y):
        np.testing.assert_allclose(metric(truth, truth), 1.0)
        assert np.all(metric(noise, truth) < 0.5)
    depth = np.random.default_rng(2).uniform(0.5, 9.0, (T, H, W))
    np.testing.assert_allclose(depth_ssim(depth, depth), 1.0)


def test_depth_accepts_trailing_channel_axis():
    rng = np.random.default_rng(3)
    truth = rng.uniform(0.5, 9.0, (T, H, W)).astype(np.float32)
    recon = truth + rng.normal(0, 0.3, truth.shape).astype(np.float32)
    for metric in (depth_psnr, depth_ssim):
        flat = metric(recon, truth)
        np.testing.assert_allclose(metric(recon[..., None], truth[..., None]), flat)
        np.testing.assert_allclose(metric(recon, truth[..., None]), flat)
    mse = np.mean((np.clip(recon, 0, DEPTH_RANGE_M) - truth).astype(np.float64) ** 2, axis=(1, 2))
    np.testing.assert_allclose(depth_psnr(recon, truth), 10 * np.log10(DEPTH_RANGE_M**2 / mse), rtol=1e-5)


def test_shape_mismatch_is_loud():
    with pytest.raises(ValueError, match="shape"):
        rgb_psnr(scene()[:2], scene())


# --- every registered metric: contract and failed frames ---------------------------------------------


@pytest.mark.parametrize("spec", all_metrics(), ids=lambda s: s.name)
def test_nan_frame_is_nan_for_that_step_only(spec: MetricSpec):
    rng = np.random.default_rng(4)
    truth = truth_for(spec.field, rng, side=48 if "ms_ssim" in spec.name else H,  # MS-SSIM needs >= 44 pixels
                      action_kind=spec.action_kind)
    context = {}
    if spec.needs_episode:  # layout metrics (trajectory key points, rooms): a path through a doorway of layout 0
        truth, context = _through_a_doorway(), {"episode": Episode("L000-E00", "PointNav", 0, 0, {})}
    fn = functools.partial(spec.fn, **context)
    recon = truth.astype(np.float64) + (0.0 if spec.field == "action" else 0.05)
    clean = fn(recon, truth)
    assert clean.shape == ((T,) if spec.per_step else (1,))
    assert np.all(np.isfinite(clean))
    recon[1] = np.nan
    broken = fn(recon, truth)
    if spec.per_step:
        assert np.isnan(broken[1])
        np.testing.assert_allclose(np.delete(broken, 1), np.delete(clean, 1))
    else:
        assert broken.shape == (1,) and np.isnan(broken[0])
    recon[1] = np.inf
    assert np.isnan(fn(recon, truth)[1 if spec.per_step else 0])


def _through_a_doorway() -> np.ndarray:
    """T poses crossing the first doorway of layout 0 (so the path has a key point and two rooms)."""
    from gradleak_bench.envs.pybullet.apartment import doorway_centres, generate_apartment

    apt = generate_apartment(0)
    normal = np.array([1.0, 0.0]) if apt.doors[0].axis == "x" else np.array([0.0, 1.0])
    xy = doorway_centres(apt)[0] + np.linspace(-0.75, 0.75, T)[:, None] * normal
    return np.concatenate([xy, np.zeros((T, 1))], axis=1).astype(np.float32)


def test_every_metric_scores_a_truth_field():
    assert {spec.field for spec in all_metrics()} <= set(TRUTH_FIELDS)
    assert [s.name for s in metrics_for_fields(["depth"])] == ["depth_psnr", "depth_ssim"]


# --- vectors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("recon, truth, expected", [
    ((0, 0, 1, 1), (0, 0, 1, 1), 1.0),
    ((0.5, 0, 1.5, 1), (0, 0, 1, 1), 0.5 / 1.5),     # half of each box overlaps
    ((0, 0, 0.5, 0.5), (0, 0, 1, 1), 0.25),           # contained, quarter of the area
    ((-1, -1, 0, 0), (0, 0, 1, 1), 0.0),              # touching corners only
    ((-1, -1, 1, 1), (-0.5, -0.5, 0.5, 0.5), 0.25),
    ((0, 0, 0, 0), (0.3, 0.3, 0.3, 0.3), 1.0),        # both empty: "no target" agreed
    ((0, 0, 0, 0), (0, 0, 1, 1), 0.0),                # one empty
    ((1, 1, 0, 0), (0, 0, 1, 1), 0.0),                # inverted corners are an empty box
])
def test_bbox_iou_hand_values(recon, truth, expected):
    got = bbox_iou(np.array([recon], float), np.array([truth], float))
    np.testing.assert_allclose(got, [expected])


def test_goal_bearing_wraps_and_pose_ignores_yaw():
    np.testing.assert_allclose(goal_mse(np.array([[1.0, 3.1]]), np.array([[1.0, -3.1]])),
                               [(2 * np.pi - 6.2) ** 2 / 2])
    np.testing.assert_allclose(pose_position_error(np.array([[1.0, 1.0, 3.0]]), np.array([[4.0, 5.0, 0.0]])),
                               [5.0])


def test_relative_error_percent_and_zero_floor():
    np.testing.assert_allclose(rel_error_percent(np.array([1.1, -3.0, 0.0]), np.array([1.0, -2.0, 4.0])),
                               [10.0, 50.0, 100.0])
    at_zero = rel_error_percent(np.array([1e-3]), np.array([0.0]))
    np.testing.assert_allclose(at_zero, [100 * 1e-3 / 1e-6])
    np.testing.assert_allclose(rel_error_percent(np.array([[2.0]]), np.array([1.0])), [100.0])  # (T,1)


# --- actions ----------------------------------------------------------------------------------------


def test_action_accuracy_accepts_float_reconstruction():
    np.testing.assert_array_equal(action_accuracy(np.array([1.0, 2.0, 2.5]), np.array([1, 3, 2])),
                                  [1.0, 0.0, 0.0])


@pytest.mark.parametrize("recon, truth, expected", [
    ([0, 1, 2, 3], [3, 2, 1, 0], 0.0),                # permutation: order is ignored
    ([0, 0], [1, 1], 1.0),                            # disjoint supports
    ([0, 0, 0, 0], [0, 0, 1, 1], 0.5),
    ([0, 1, 1], [0, 0, 1, 1, 2, 2], 0.5 * (abs(1 / 3 - 1 / 3) + abs(2 / 3 - 1 / 3) + 1 / 3)),
])
def test_action_hist_tv_hand_values(recon, truth, expected):
    np.testing.assert_allclose(action_hist_tv(np.array(recon), np.array(truth)), [expected])


def test_action_hist_tv_n_actions_and_unbinnable_values():
    five = functools.partial(action_hist_tv, n_actions=5)
    np.testing.assert_allclose(five(np.array([0, 4]), np.array([4, 4])), [0.5])
    with pytest.raises(ValueError, match="outside"):
        five(np.array([5]), np.array([0]))
    assert np.isnan(action_hist_tv(np.array([0.5, 1.0]), np.array([0, 1]))[0])
    assert np.isnan(action_hist_tv(np.array([-1, 1]), np.array([0, 1]))[0])


# --- bootstrap --------------------------------------------------------------------------------------


def test_bootstrap_ci_contains_mean_and_is_deterministic():
    values = np.random.default_rng(5).normal(20, 4, 40)
    mean, low, high = bootstrap_ci(values, n_resamples=2000, seed=7)
    assert mean == pytest.approx(values.mean())
    assert low < mean < high
    assert bootstrap_ci(values, n_resamples=2000, seed=7) == (mean, low, high)
    assert bootstrap_ci(values, n_resamples=2000, seed=8) != (mean, low, high)
    narrow = bootstrap_ci(values, confidence=0.5, n_resamples=2000, seed=7)
    assert narrow[2] - narrow[1] < high - low


def test_bootstrap_ci_shrinks_with_more_samples():
    rng = np.random.default_rng(6)
    width = lambda v: np.subtract(*bootstrap_ci(v, n_resamples=2000)[2:0:-1])  # noqa: E731
    assert width(rng.normal(0, 1, 1000)) < width(rng.normal(0, 1, 10)) / 4  # ~ 1/sqrt(n)


def test_bootstrap_ci_ignores_nan_and_handles_degenerate_inputs():
    values = np.array([1.0, 2.0, 4.0, 8.0])
    assert bootstrap_ci(np.append(values, np.nan), n_resamples=1000) == bootstrap_ci(values, n_resamples=1000)
    assert bootstrap_ci([3.5]) == (3.5, 3.5, 3.5)
    assert bootstrap_ci([2.0, 2.0, 2.0, np.nan]) == (2.0, 2.0, 2.0)
    assert all(math.isnan(x) for x in bootstrap_ci([np.nan, np.nan]))
    assert all(math.isnan(x) for x in bootstrap_ci([]))
    mean, low, high = bootstrap_ci([0.0, 1.0], n_resamples=1000)  # two values: still a finite interval
    assert 0.0 <= low <= mean <= high <= 1.0


def test_bootstrap_ci_falls_back_to_percentile_when_bca_is_undefined(monkeypatch):
    from gradleak_bench.metrics import summary

    real = summary._interval
    methods = []

    def bca_undefined(values, confidence, n_resamples, seed, method):
        methods.append(method)
        if method == "BCa":
            return (math.nan, math.nan)
        return real(values, confidence, n_resamples, seed, method)

    monkeypatch.setattr(summary, "_interval", bca_undefined)
    mean, low, high = summary.bootstrap_ci([1.0, 2.0, 3.0, 7.0], n_resamples=1000)
    assert methods == ["BCa", "percentile"]
    assert 1.0 <= low < mean < high <= 7.0


@pytest.mark.parametrize("method", ["BCa", "percentile"])
def test_bootstrap_interval_is_scipys(method):
    """The numpy interval is scipy.stats.bootstrap's (same draws, jackknife, quantiles): skewed, tied,
    two-valued, tiny and batch-splitting inputs, several seeds. Equal to the bit on the machine it was
    written on; compared at 1e-12 so another CPU's last bits cannot fail it."""
    import warnings

    from scipy import stats

    from gradleak_bench.metrics import summary

    rng = np.random.default_rng(1)
    cases = [rng.normal(size=n) for n in (2, 3, 8, 48, 3000)] + [
        rng.lognormal(size=48) * 10, np.array([0, 0, 0, 1.0]), np.array([0, 1] * 10, float),
        np.r_[np.zeros(47), 1.0], np.array([1, 1, 1, 1, 2.0])]
    for values in cases:
        batch = max(1, min(summary._BATCH, summary._MAX_BATCH_VALUES // values.size))
        for seed in (0, 7):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = stats.bootstrap((values,), np.mean, n_resamples=2000, confidence_level=0.9, method=method,
                                      vectorized=True, batch=batch, rng=np.random.default_rng(seed)).confidence_interval
            got = summary._interval(values, 0.9, 2000, seed, method)
            np.testing.assert_allclose(got, (ref.low, ref.high), rtol=1e-12, atol=1e-15, equal_nan=True)


def test_summarize_counts_failed_episodes_and_serialises():
    summary = summarize([1.0, np.nan, 3.0, np.inf], n_resamples=1000)
    assert (summary.n, summary.n_failed, summary.mean) == (2, 2, 2.0)
    assert summary.to_dict()["n_failed"] == 2
    assert MetricSummary(math.nan, math.nan, math.nan, 0, 3).to_dict()["mean"] is None


# --- registry ---------------------------------------------------------------------------------------


def test_unknown_metric_suggests_close_match():
    with pytest.raises(UnknownNameError, match="Did you mean 'rgb_psnr'") as info:
        get_metric("rgb_pnsr")
    assert isinstance(info.value, KeyError)


def test_duplicate_registration_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        register_metric(get_metric("rgb_psnr"))


# --- the papers' protocols (metrics/protocols.py) ---------------------------------------------------------


def _gaussian_ssim_reference(a: np.ndarray, b: np.ndarray, data_range: float) -> float:
    """Wang et al.'s SSIM written out: Gaussian sigma 1.5 truncated to 11x11, population moments, valid region."""
    from scipy.ndimage import gaussian_filter

    blur = lambda x: gaussian_filter(x, 1.5, truncate=3.5)  # noqa: E731  (radius 5: an 11x11 window)
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    mu_a, mu_b = blur(a), blur(b)
    var_a, var_b, cov = blur(a * a) - mu_a**2, blur(b * b) - mu_b**2, blur(a * b) - mu_a * mu_b
    ssim_map = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2))
    return float(ssim_map[5:-5, 5:-5].mean())


def test_gaussian_ssim_matches_a_written_out_reference_and_differs_from_the_default():
    from gradleak_bench.metrics.protocols import depth_ssim_gauss11

    rng = np.random.default_rng(1)
    truth = rng.uniform(0.5, 9.0, (2, 24, 24)).astype(np.float32)
    recon = truth + rng.normal(0, 0.8, truth.shape)
    got = depth_ssim_gauss11(recon, truth)
    want = [_gaussian_ssim_reference(np.clip(recon[t], 0, DEPTH_RANGE_M), truth[t].astype(np.float64),
                                     DEPTH_RANGE_M) for t in range(2)]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert np.all(np.abs(got - depth_ssim(recon, truth)) > 1e-3)


def test_ms_ssim_is_one_for_identical_frames_and_falls_with_noise():
    from gradleak_bench.metrics.protocols import rgb_ms_ssim

    truth = truth_for("rgb", np.random.default_rng(0), side=48)
    noise = np.random.default_rng(1).normal(0, 1, truth.shape)
    values = [rgb_ms_ssim(truth.astype(np.float64) + s * noise, truth).mean() for s in (0.0, 5.0, 30.0)]
    assert values[0] == pytest.approx(1.0, abs=1e-5) and values[0] > values[1] > values[2]
    with pytest.raises(ValueError, match="at least 44"):
        rgb_ms_ssim(scene(), scene())


def test_qgi_brightest_pixel_normalisation_undoes_a_global_dimming():
    from gradleak_bench.metrics.protocols import rgb_psnr_y_qgi

    truth = scene().copy()
    truth[:, 0, 0, 0] = 255  # the true frames' brightest value is 255, as in the paper's renders
    dimmed = truth.astype(np.float64) * 0.5
    assert np.all(rgb_psnr_y_qgi(dimmed, truth) == MAX_PSNR_DB)
    assert np.all(rgb_psnr_y(dimmed, truth) < 20)


def test_rgb_psnr_uint8_rounds_the_reconstruction():
    truth = scene()
    assert np.all(get_metric("rgb_psnr@uint8").fn(truth + 0.4, truth) == MAX_PSNR_DB)
    np.testing.assert_allclose(get_metric("rgb_psnr@uint8").fn(truth + 0.6, truth), 20 * np.log10(255.0))


def test_box_protocols_do_not_reward_the_all_zero_box():
    truth = np.zeros((4, 4))
    truth[1] = [0.0, 0.0, 0.5, 0.5]
    zero = np.zeros((4, 4))
    assert bbox_iou(zero, truth).mean() == 0.75  # the default IoU: 3 of 4 frames "agree" on no target
    assert get_metric("bbox_iou@visible").fn(zero, truth).tolist() == [0.0]
    assert get_metric("bbox_detection_rate").fn(zero, truth).tolist() == [0.0]
    assert get_metric("bbox_visibility_accuracy").fn(zero, truth).tolist() == [1.0, 0.0, 1.0, 1.0]
    assert np.isnan(get_metric("bbox_iou@visible").fn(zero, np.zeros((4, 4)))[0])  # never visible: no value
    assert get_metric("bbox_mse@visible").fn(zero, truth).tolist() == [0.125]  # only the visible frame counts
    assert get_metric("bbox_mse").fn(zero, truth).mean() == 0.125 / 4  # over all frames the zero box looks four times better


def test_an_episode_without_a_visible_target_is_left_out_not_failed():
    """The scorer leaves an episode whose target is never visible out of the box headline (no value), and
    does not count it as failed; a non-finite box on a visible frame fails it with the worst value."""
    from gradleak_bench.records import Episode
    from gradleak_bench.run.scorer import score

    specs = [get_metric("bbox_iou@visible"), get_metric("bbox_mse@visible")]
    never = Episode("L000-E00", "ActivePerception", 0, 0, {"bbox": np.zeros((4, 4)), "action": np.zeros(4)})
    values, failed = score(specs, {"bbox": np.zeros((4, 4))}, never)
    assert all(np.isnan(v) for v in values.values()) and failed == {"bbox_iou@visible": 0, "bbox_mse@visible": 0}
    truth = np.zeros((4, 4))
    truth[1] = [0.0, 0.0, 0.5, 0.5]
    seen = Episode("L000-E01", "ActivePerception", 0, 1, {"bbox": truth, "action": np.zeros(4)})
    broken = np.zeros((4, 4))
    broken[2] = np.nan
    values, failed = score(specs, {"bbox": broken}, seen)
    assert values == {"bbox_iou@visible": 0.0, "bbox_mse@visible": 4.0} and set(failed.values()) == {1}  # the one non-finite frame


def test_protocols_are_selected_by_name_field_or_protocol_never_by_default():
    from gradleak_bench.metrics import select_metrics

    default = [s.name for s in select_metrics(None, ["rgb", "bbox"])[0]]
    # the only default '@' metrics are the box's visible-frame ones (its headline); no paper protocol is default
    assert [n for n in default if "@" in n] == ["bbox_iou@visible", "bbox_mse@visible"]
    assert all("ms_ssim" not in n and "detection" not in n for n in default)
    assert [s.name for s in select_metrics(["@qgi"], ["rgb"])[0]] == ["rgb_psnr_y@qgi", "rgb_ssim_y@qgi"]
    assert [s.name for s in select_metrics(["depth@gauss11"], ["depth"])[0]] == ["depth_ssim@gauss11"]
    assert [s.name for s in select_metrics(["rgb_ms_ssim"], ["rgb"])[0]] == ["rgb_ms_ssim"]
    with pytest.raises(UnknownNameError, match="@gauss11"):
        select_metrics(["@gauss12"], ["rgb"])
