"""The defense suite (baselines/defenses/suite.py) on synthetic gradient streams, plus one run through the
runner."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from gradleak_bench import plugins
from gradleak_bench.errors import GradleakError
from gradleak_bench.records import GradientStream

SUITE = {
    "clip_norm": {"C": 0.5},
    "dp_sgd": {"C": 0.5, "sigma": 1.0},
    "quantize": {"bits": 4},
    "temporal_mean": {"k": 3},
    "shuffle_window": {"k": 3},
    "withhold_layers": {"layers": ["head"]},
    "correlated_noise": {"sigma": 0.1, "rho": 0.8},
    "random_release": {"p": 0.5},
}


def _stream(T: int = 10, seed: int = 0) -> GradientStream:
    gen = torch.Generator().manual_seed(seed)
    return GradientStream({
        "body.0.weight": torch.randn(T, 4, 3, generator=gen),
        "body.0.bias": torch.randn(T, 4, generator=gen),
        "head.weight": torch.randn(T, 2, 4, generator=gen),
        "head.bias": torch.randn(T, 2, generator=gen),
    })


def _load(name: str, **params):
    return plugins.load("defense", name, params)


def _release(name: str, stream: GradientStream, seed: int = 0, **params) -> GradientStream:
    return _load(name, **params).release(stream, np.random.default_rng(seed))


@pytest.mark.parametrize("name", sorted(SUITE))
def test_contract_shapes_input_determinism(name):
    stream = _stream()
    before = {k: v.clone() for k, v in stream.tensors.items()}
    a = _release(name, stream, 1, **SUITE[name])
    b = _release(name, stream, 1, **SUITE[name])
    assert list(a.tensors) == list(stream.tensors)
    for k, g in stream.tensors.items():
        assert a.tensors[k].shape == g.shape and a.tensors[k].dtype == g.dtype
        assert torch.equal(g, before[k]), "release modified its input"
        assert torch.equal(a.tensors[k], b.tensors[k]), "same rng seed, different release"
        assert torch.isfinite(a.tensors[k]).all()


@pytest.mark.parametrize("name", ["dp_sgd", "shuffle_window", "correlated_noise", "random_release"])
def test_randomised_defenses_depend_on_rng(name):
    stream = _stream(T=30)
    a, b = _release(name, stream, 1, **SUITE[name]), _release(name, stream, 2, **SUITE[name])
    assert not torch.equal(a.flat(), b.flat())


def test_clip_norm_bound_and_identity_inside():
    stream = _stream()
    norms = stream.flat().norm(dim=1)
    C = float(norms.median())
    out = _release("clip_norm", stream, C=C).flat()
    assert (out.norm(dim=1) <= C * (1 + 1e-5)).all()
    inside = norms <= C
    assert torch.allclose(out[inside], stream.flat()[inside])
    # clipping rescales, it never turns a direction
    cos = torch.nn.functional.cosine_similarity(out, stream.flat(), dim=1)
    assert torch.allclose(cos, torch.ones_like(cos), atol=1e-5)


def test_dp_sgd_clips_then_adds_sigma_c_noise():
    T, n = 50, 4000
    stream = GradientStream({"w": 10 * torch.ones(T, n)})
    C, sigma = 2.0, 0.5
    out = _release("dp_sgd", stream, C=C, sigma=sigma).tensors["w"]
    clipped = torch.full((T, n), C / math.sqrt(n))
    noise = out - clipped
    assert abs(float(noise.std()) - sigma * C) < 0.01 * sigma * C
    assert abs(float(noise.mean())) < 0.01


def test_dp_sgd_epsilon_matches_opacus_and_decreases_with_sigma():
    from opacus.accountants import RDPAccountant

    eps = []
    for sigma in (0.8, 1.0, 2.0, 4.0):
        d = _load("dp_sgd", sigma=sigma)
        acc = RDPAccountant()
        for _ in range(200):
            acc.step(noise_multiplier=sigma, sample_rate=0.02)
        assert d.epsilon(1e-5, 0.02, 200) == pytest.approx(acc.get_epsilon(delta=1e-5), rel=1e-9)
        eps.append(d.epsilon())
    assert all(a > b for a, b in zip(eps, eps[1:]))


@pytest.mark.parametrize("stochastic", [False, True])
@pytest.mark.parametrize("bits", [1, 2, 3, 4, 8])
def test_quantize_levels(bits, stochastic):
    stream = _stream(T=6)
    out = _release("quantize", stream, bits=bits, stochastic=stochastic)
    for name, g in out.tensors.items():
        for t in range(g.shape[0]):
            assert len(torch.unique(g[t])) <= 2 ** bits, (name, t)
            if bits >= 2 and not stochastic:  # nearest rounding: error at most half a level
                scale = stream.tensors[name][t].abs().max()
                step = scale / (2 ** (bits - 1) - 1)
                assert (g[t] - stream.tensors[name][t]).abs().max() <= step / 2 * (1 + 1e-5)


def test_quantize_one_bit_is_sign_times_mean_abs():
    stream = _stream(T=4)
    out = _release("quantize", stream, bits=1)
    g, q = stream.tensors["head.weight"], out.tensors["head.weight"]
    m = g.abs().reshape(4, -1).mean(dim=1).reshape(4, 1, 1)
    assert torch.allclose(q, torch.where(g >= 0, 1.0, -1.0) * m)


def _wide_stream() -> GradientStream:
    """Rows longer than a block (several column blocks per row), rows shorter than one (several rows per
    block), an all-zero tensor, a mostly-zero one (like ReLU networks' gradients: topk's threshold may be 0) and
    a float64 tensor: every blocking and selection case of the blockwise transforms."""
    gen = torch.Generator().manual_seed(3)
    return GradientStream({"wide": torch.randn(3, 70, 3000, generator=gen), "narrow": torch.randn(3, 7, generator=gen),
                           "sparse": torch.relu(torch.randn(3, 90_000, generator=gen) - 1.5),
                           "zero": torch.zeros(3, 5), "small": 1e-3 * torch.randn(3, 40_000, generator=gen),
                           "double": torch.randn(3, 11, generator=gen, dtype=torch.float64)})


def _whole_matrix_quantize(g: torch.Tensor, bits: int, stochastic: bool, gen: torch.Generator) -> torch.Tensor:
    """The reference: the documented arithmetic in float64 on the whole (T, n) matrix at once."""
    x = g.double().reshape(g.shape[0], -1)
    scale = x.abs().amax(dim=1, keepdim=True)
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    if bits == 1:
        if stochastic:
            q = torch.where(torch.rand(x.shape, generator=gen, dtype=torch.float64) < (1 + x / safe) / 2, scale, -scale)
        else:
            q = torch.where(x >= 0, 1.0, -1.0) * x.abs().mean(dim=1, keepdim=True)
    else:
        levels = 2 ** (bits - 1) - 1
        y = x / safe * levels
        y = torch.floor(y + torch.rand(x.shape, generator=gen, dtype=torch.float64)) if stochastic else torch.round(y)
        q = torch.clamp(y, -levels, levels) * (scale / levels)
    return q.reshape(g.shape).to(g.dtype)


@pytest.mark.parametrize("stochastic", [False, True])
@pytest.mark.parametrize("bits", [1, 2, 8, 16, 32])
def test_blockwise_quantize_is_the_whole_matrix_computation_bit_for_bit(bits, stochastic):
    stream = _wide_stream()
    released = _release("quantize", stream, seed=5, bits=bits, stochastic=stochastic)
    gen = torch.Generator().manual_seed(int(np.random.default_rng(5).integers(0, 2**62)))  # the release's draws
    for name, g in stream.tensors.items():
        assert torch.equal(released.tensors[name], _whole_matrix_quantize(g, bits, stochastic, gen)), name


@pytest.mark.parametrize("keep", [1e-4, 0.1, 0.5, 1.0])
def test_blockwise_topk_is_the_whole_matrix_computation_bit_for_bit(keep):
    stream = _wide_stream()
    flat = stream.flat()
    threshold = flat.abs().topk(max(1, round(keep * flat.shape[1])), dim=1).values[:, -1]
    released = _release("topk", stream, keep=keep)
    for name, g in stream.tensors.items():
        t = threshold.reshape((-1,) + (1,) * (g.dim() - 1))
        assert torch.equal(released.tensors[name], torch.where(g.abs() >= t, g, torch.zeros((), dtype=g.dtype))), name


@pytest.mark.parametrize("name,params", [("quantize", {"bits": 1}), ("quantize", {"bits": 1, "stochastic": True}),
                                         ("quantize", {"bits": 8}), ("quantize", {"bits": 3, "stochastic": True}),
                                         ("topk", {"keep": 0.1})])
def test_release_mean_is_the_mean_of_the_release_with_the_same_draws(name, params):
    stream = _wide_stream()
    released = _release(name, stream, seed=2, **params)
    means = _load(name, **params).release_mean(stream, np.random.default_rng(2))
    assert list(means) == list(stream.tensors)
    for key, g in released.tensors.items():
        assert means[key].dtype == g.dtype and means[key].shape == g.shape[1:]
        torch.testing.assert_close(means[key], g.mean(dim=0), rtol=1e-6, atol=1e-7 * float(g.abs().max()))


def test_quantize_stochastic_is_unbiased_and_high_bits_nearly_exact():
    stream = GradientStream({"w": torch.linspace(-1, 1, 2001).repeat(400, 1)})
    mean = _release("quantize", stream, bits=2, stochastic=True).tensors["w"].double().mean(dim=0)
    assert (mean - stream.tensors["w"][0].double()).abs().max() < 0.15
    exact = _release("quantize", _stream(), bits=32)
    assert torch.allclose(exact.flat(), _stream().flat(), rtol=1e-6, atol=1e-7)


def test_temporal_mean_exact_with_short_last_window():
    stream = _stream(T=10)
    out = _release("temporal_mean", stream, k=4)
    for name, g in stream.tensors.items():
        for s, e in [(0, 4), (4, 8), (8, 10)]:
            expected = g[s:e].mean(dim=0)
            for t in range(s, e):
                assert torch.allclose(out.tensors[name][t], expected, atol=1e-6)
    assert torch.equal(_release("temporal_mean", stream, k=1).flat(), stream.flat())


def test_shuffle_is_a_permutation_within_windows():
    stream = _stream(T=23)
    out = _release("shuffle_window", stream, 5, k=5)
    flat_in, flat_out = stream.flat(), out.flat()
    moved = False
    for t in range(23):
        match = [s for s in range(23) if torch.equal(flat_out[t], flat_in[s])]
        assert len(match) == 1 and match[0] // 5 == t // 5
        moved |= match[0] != t
        # the same permutation for every parameter: each released step is one whole true step
        src = match[0]
        for g_in, g_out in zip(stream.tensors.values(), out.tensors.values()):
            assert torch.equal(g_out[t], g_in[src])
    assert moved
    perm = _load("shuffle_window", k=5).permutation(23, np.random.default_rng(5))
    assert sorted(perm) == list(range(23))


def test_withhold_zeros_exactly_the_others():
    stream = _stream()
    out = _release("withhold_layers", stream, layers="head,body.0.bias")
    assert torch.equal(out.tensors["head.weight"], stream.tensors["head.weight"])
    assert torch.equal(out.tensors["head.bias"], stream.tensors["head.bias"])
    assert torch.equal(out.tensors["body.0.bias"], stream.tensors["body.0.bias"])
    assert not out.tensors["body.0.weight"].any()
    # a dotted prefix, not a string prefix: "head.w" names nothing
    with pytest.raises(ValueError, match="head.w.*valid names: body.0.weight"):
        _release("withhold_layers", stream, layers=["head.w"])


def test_correlated_noise_std_and_lag1_correlation():
    T, n, sigma, rho = 200, 5000, 0.3, 0.7
    stream = GradientStream({"w": torch.zeros(T, n)})
    noise = _release("correlated_noise", stream, 3, sigma=sigma, rho=rho).tensors["w"].double()
    per_step_std = noise.std(dim=1)
    assert (per_step_std - sigma).abs().max() < 0.05 * sigma  # stationary from step 0
    assert float(noise.std()) == pytest.approx(sigma, rel=0.02)
    lag1 = float((noise[1:] * noise[:-1]).mean() / noise.var())
    assert lag1 == pytest.approx(rho, abs=0.02)
    diff_var = float((noise[1:] - noise[:-1]).var())
    assert diff_var == pytest.approx(2 * sigma ** 2 * (1 - rho), rel=0.03)
    iid = _release("correlated_noise", stream, 3, sigma=sigma, rho=0.0).tensors["w"].double()
    assert abs(float((iid[1:] * iid[:-1]).mean() / iid.var())) < 0.02


@pytest.mark.parametrize("fill", ["zeros", "previous"])
def test_random_release(fill):
    stream = _stream(T=400)
    d = _load("random_release", p=0.3, fill=fill)
    src = d.source(400, np.random.default_rng(7))
    out = d.release(stream, np.random.default_rng(7)).flat()
    released = src == np.arange(400)
    assert 0.2 < released.mean() < 0.4
    for t in range(400):
        expected = stream.flat()[src[t]] if src[t] >= 0 else torch.zeros_like(out[t])
        assert torch.equal(out[t], expected)
    if fill == "zeros":
        assert (src[~released] == -1).all()
    else:
        assert (src[~released] < np.arange(400)[~released]).all()
    assert torch.equal(_release("random_release", stream, p=1.0).flat(), stream.flat())


@pytest.mark.parametrize("name,params,needle", [
    ("clip_norm", {"C": 0}, "C must be in"),
    ("clip_norm", {"C": "big"}, "C must be a number"),
    ("dp_sgd", {"sigma": -1}, "sigma"),
    ("dp_sgd", {"sigma": 0}, "sigma"),
    ("dp_sgd", {"delta": 1.5}, "delta"),
    ("dp_sgd", {"C": -2}, "C must be in"),
    ("quantize", {"bits": 0}, r"bits must be an integer 1\.\.32"),
    ("quantize", {"bits": 33}, r"bits must be an integer 1\.\.32"),
    ("quantize", {"bits": 4.5}, "bits"),
    ("quantize", {"bits": True}, "bits"),
    ("quantize", {"stochastic": "yes"}, "stochastic"),
    ("temporal_mean", {"k": 0}, "k must be an integer >= 1"),
    ("shuffle_window", {"k": -3}, "k must be"),
    ("withhold_layers", {"layers": []}, "layers"),
    ("withhold_layers", {"layers": [1, 2]}, "layers"),
    ("correlated_noise", {"sigma": -0.1}, "sigma"),
    ("correlated_noise", {"rho": 1.0}, r"rho must be in \(-1.0, 1.0\)"),
    ("correlated_noise", {"sigma": float("nan")}, "sigma"),
    ("random_release", {"p": 0}, "p must be in"),
    ("random_release", {"p": 1.2}, "p must be in"),
    ("random_release", {"fill": "noise"}, "fill"),
])
def test_invalid_parameters_are_rejected(name, params, needle):
    with pytest.raises(GradleakError, match=needle):  # the CLI prints it without a traceback, exit 2
        _load(name, **params)


def test_quantize_8_bit_through_the_runner(tmp_path):
    from gradleak_bench.run.config import EvaluateConfig
    from gradleak_bench.run.evaluation import evaluate

    result = evaluate(EvaluateConfig(attack="closed_form", task="PointNav", victim="ppo_compact", defense="quantize",
                                     defense_params={"bits": 8}, episodes=4, out=str(tmp_path), wandb="disabled"),
                      progress=False)
    assert result.n_failed == 0
    summary = json.loads((tmp_path / "results.json").read_text())
    assert summary["metrics"]["action_accuracy"]["mean"] >= 0.95


def test_unknown_layer_names_stop_a_run_before_any_episode(tmp_path):
    from gradleak_bench.errors import GradleakError
    from gradleak_bench.run.config import EvaluateConfig
    from gradleak_bench.run.evaluation import evaluate

    with pytest.raises(GradleakError, match="match no parameter"):
        evaluate(EvaluateConfig(attack="closed_form", victim="ppo_compact", defense="withhold_layers",
                                defense_params={"layers": "no_such_layer"}, episodes=2, out=str(tmp_path),
                                wandb="disabled"), progress=False)
    assert not (tmp_path / "results.json").exists()


# --- the equivalent draw of the noise on a minibatch mean (train-defense's train_noise="mean") ----------------
@pytest.mark.parametrize("name,params,std_of_mean", [
    ("gaussian_noise", {"sigma": 0.3}, 0.3 / 4),
    ("dp_sgd", {"C": 2.0, "sigma": 0.5}, 1.0 / 4),
    # AR(1), rho 0.8, B 16: sigma^2 / B^2 * (B + 2 sum_k (B - k) rho^k)
    ("correlated_noise", {"sigma": 0.2, "rho": 0.8},
     0.2 * math.sqrt(16 + 2 * sum((16 - k) * 0.8 ** k for k in range(1, 16))) / 16),
])
def test_equivalent_mean_noise_has_the_literal_distribution(name, params, std_of_mean):
    """The mean of B=16 released noise vectors (literal) and the one-draw equivalent have the derived
    std; 60k coordinates give the empirical std to about 0.3%."""
    shapes = {"a": (300, 100), "b": (30000,)}
    for train_noise in ("per_sample", "mean"):
        defense = _load(name, train_noise=train_noise, **params)
        noise = defense.noise_of_mean(shapes, 16, np.random.default_rng(3))
        flat = torch.cat([noise[k].reshape(-1) for k in shapes]).double()
        assert flat.shape == (60000,)
        assert abs(flat.std().item() / std_of_mean - 1) < 0.02, (train_noise, flat.std().item(), std_of_mean)
        assert abs(flat.mean().item()) < 4 * std_of_mean / math.sqrt(60000)


@pytest.mark.parametrize("name,params", [("gaussian_noise", {"sigma": 0.3}), ("dp_sgd", {"C": 0.5, "sigma": 1.0}),
                                         ("correlated_noise", {"sigma": 0.1, "rho": 0.8})])
def test_literal_mean_noise_is_the_release_noise_averaged(name, params):
    """noise_of_mean(literal=True) draws exactly what release draws: on zero gradients (nothing to clip)
    the release's mean is the noise of the mean, to float rounding."""
    zeros = GradientStream({k: torch.zeros_like(v) for k, v in _stream(T=6).tensors.items()})
    released = _release(name, zeros, 7, **params)
    shapes = {k: tuple(v.shape[1:]) for k, v in zeros.tensors.items()}
    noise = _load(name, train_noise="mean", **params).noise_of_mean(shapes, 6, np.random.default_rng(7), literal=True)
    for k, g in released.tensors.items():
        torch.testing.assert_close(noise[k], g.mean(0), rtol=1e-5, atol=1e-7)


def test_train_noise_must_be_per_sample_or_mean():
    with pytest.raises(GradleakError, match="train_noise must be one of"):
        _load("dp_sgd", train_noise="batch")
