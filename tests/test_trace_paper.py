"""TRACE closer to the paper (issue 17, item 3): the learned full-gradient encoder, the scheduled-sampling
schedule, the paper loss terms, and the adaptive attacker (fit trains behind the run's defense, with draws of
its own, never on evaluation data; the defense is in the cache key) -- tiny configs, the 41k-parameter
``ppo_compact``."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gradleak_bench.baselines.attacks import trace as tr
from gradleak_bench.baselines.attacks.trace.config import defense_identity
from gradleak_bench.baselines.attacks.trace.training import learning_curve, loss_of, sampling_probability
from gradleak_bench.errors import GradleakError
from gradleak_bench.run.auxiliary import AuxiliaryData, DefenseIdentity
from gradleak_bench.run.config import EvaluateConfig
from gradleak_bench.run.auxiliary import fit_request
from gradleak_bench.stream.replay import EpisodeGradients
from gradleak_bench.victims.checkpoint import load_victim, victim_info
from gradleak_bench.victims.spaces import env_spaces

SHAPES = {"features_extractor.cnn.0.weight": (8, 3, 8, 8), "features_extractor.cnn.0.bias": (8,),
          "features_extractor.linear.0.weight": (64, 576), "features_extractor.linear.0.bias": (64,),
          "action_net.weight": (5, 64), "action_net.bias": (5,), "value_net.weight": (1, 64), "value_net.bias": (1,)}
TINY = dict(preset="tiny", progress=False)


def _setup(defense: DefenseIdentity | None = None):
    loaded = load_victim("PointNav", "ppo_compact", "trained")
    gradients = EpisodeGradients(loaded.policy, loaded.spec.loss, env_spaces("PointNav", loaded.spec.image_size)[0])
    return loaded, gradients, victim_info(loaded, gradients), AuxiliaryData(loaded, gradients, defense=defense)


def _random_gradients(T: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn((T, *v), generator=gen) * 1e-4 for k, v in SHAPES.items()}


# --- the learned encoder ---------------------------------------------------------------------------------

def test_learned_encoder_shapes_and_gradient_flow():
    attack = tr.TRACE(**TINY, encoder="learned")
    net = attack._build(attack.config, SHAPES, 5, (32, 32))
    T = 8
    packed = torch.stack([net.featurizer(_random_gradients(T, seed)) for seed in range(2)])
    n_params = sum(int(np.prod(s)) for s in SHAPES.values())
    assert packed.dtype == torch.float16 and packed.shape == (2, T, n_params + len(SHAPES))
    prev = torch.rand(2, T, 3, 32, 32)
    images, logits = net(packed, prev)
    assert images.shape == (2, T, 3, 32, 32) and logits.shape == (2, T, 5)
    (images.mean() + logits.mean()).backward()
    # the per-layer sketches of every layer are trained end to end
    for i, (name, _, _) in enumerate(net.sketch.blocks):
        grad = net.sketch.v[i].grad
        assert grad is not None and grad.abs().sum() > 0, name
    assert net.sketch.u[0].grad.abs().sum() > 0  # the conv kernel's row sketch too
    # at initialisation the learned sketch is the analytic one (same seed), from the float16-packed input
    analytic = tr.GradientFeaturizer(SHAPES, attack.config.sketch_rank, attack.config.bias_dim,
                                     attack.config.feature_seed)
    grads = _random_gradients(T, 5)
    with torch.no_grad():
        learned = net.sketch(net.featurizer(grads))
    fixed = analytic(grads)
    k = attack.config.sketch_rank ** 2  # the conv kernel's rank x rank sketch comes first in both
    assert torch.allclose(learned[:, :k], fixed[:, :k], atol=2e-3)


def test_learned_encoder_generates_and_trains_a_batch():
    attack = tr.TRACE(**TINY, encoder="learned", rollout_weight=1.0, aug_noise=0.1, aug_brightness=0.1)
    net = attack._build(attack.config, SHAPES, 5, (32, 32))
    T = 6
    feats = torch.stack([net.featurizer(_random_gradients(T, s)) for s in range(3)])
    data = tr.TraceData(feats, torch.randint(0, 255, (3, T, 32, 32, 3), dtype=torch.uint8),
                        torch.randint(0, 5, (3, T)), torch.tensor([T, T, 4]))
    data.actions[2, 4:] = -1
    images, logits = net.generate(feats[0])
    assert images.shape == (T, 3, 32, 32) and logits.shape == (T, 5)
    gen = torch.Generator().manual_seed(0)
    loss, parts = loss_of(net, data, torch.arange(3), 0.8, gen, torch.device("cpu"))
    assert torch.isfinite(loss) and parts["rollout"] > 0  # the rollout term is on
    loss.backward()
    assert net.sketch.v[0].grad is not None


# --- scheduled sampling, presets, the learning curve -------------------------------------------------------

def test_scheduled_sampling_ramps_to_the_papers_ratio():
    config = tr.TRACE(preset="paper", progress=False).config
    assert config.ss_max == 0.8 and config.encoder == "learned" and config.adaptive
    p = [sampling_probability(config, e) for e in range(config.epochs)]
    teacher = int(np.ceil(config.tf_fraction * config.epochs))
    assert p[:teacher] == [0.0] * teacher  # teacher forcing first
    assert all(b >= a for a, b in zip(p, p[1:])) and 0 < p[teacher] < 0.8
    assert max(p) == pytest.approx(0.8) and p[-1] == pytest.approx(0.8)
    assert p.index(max(p)) <= teacher + (config.epochs - teacher) // 2 + 1  # reached halfway through the rest
    # the quick preset keeps its schedule (its cached attackers stay valid)
    quick = tr.TRACE(preset="quick", progress=False).config
    assert max(sampling_probability(quick, e) for e in range(quick.epochs)) == pytest.approx(0.5)


def test_new_fields_leave_existing_hashes_unchanged_and_are_keyed_when_set():
    base = tr.TRACE(**TINY).config.to_dict()
    assert not {"encoder", "adaptive", "rollout_weight", "aug_noise", "aug_brightness"} & set(base)
    assert tr.TRACE(**TINY, encoder="learned").config.to_dict()["encoder"] == "learned"
    with pytest.raises(ValueError, match="unknown encoder"):
        tr.TRACE(**TINY, encoder="sketchy")


def test_learning_curve_is_json():
    config = tr.TRACE(**TINY).config
    state = {"epoch": 1, "history": [{"epoch": 1, "loss": 0.5, "val_psnr_autoregressive": 10.0}],
             "train_seconds": 1.0, "collect_seconds": 2.0}
    curve = json.loads(json.dumps(learning_curve(config, state, 6, 2)))
    assert curve["epochs_done"] == 1 and curve["epochs_planned"] == config.epochs and curve["history"][0]["loss"]


# --- the adaptive attacker ------------------------------------------------------------------------------

def test_auxiliary_releases_through_the_runs_defense_with_its_own_draws():
    topk = DefenseIdentity.of("topk", {"keep": 0.1})
    _, gradients, _, aux = _setup(topk)
    (episode, exact), = aux.collect(max_episodes=1)
    (same, released), = aux.collect(max_episodes=1, defended=True)
    assert same.episode_id == episode.episode_id
    from gradleak_bench import plugins

    expected = plugins.load("defense", "topk", {"keep": 0.1}).release(exact, np.random.default_rng(0))
    for name, g in released.tensors.items():  # top-k is deterministic: exactly the scorer's release
        assert torch.equal(g, expected.tensors[name]), name
    nonzero = float((released.flat() != 0).float().mean())
    assert 0.05 < nonzero < 0.15

    noise = DefenseIdentity.of("gaussian_noise", {"sigma": 1e-2})
    _, _, _, noisy_aux = _setup(noise)
    (_, a), = noisy_aux.collect(max_episodes=1, defended=True)
    (_, b), = noisy_aux.collect(max_episodes=1, defended=True)
    assert torch.equal(a.flat(), b.flat())  # the attacker's draws are reproducible ...
    drawn = a.flat() - exact.flat()
    assert 0.005 < float(drawn.std()) < 0.02
    # ... and none of the scorer's: the release the scorer would make with the episode seeds it draws differs
    defense = plugins.load("defense", "gaussian_noise", {"sigma": 1e-2})
    for seed in range(4):
        scorer = defense.release(exact, np.random.default_rng(seed)).flat()
        assert not torch.allclose(scorer, a.flat())
    # auxiliary data never reaches the held-out split, defended or not
    with pytest.raises(GradleakError, match="never the test split"):
        next(noisy_aux.collect(split="test", defended=True))
    # no defense in the run: asking for a defended collection says what to do
    _, _, _, plain = _setup(None)
    with pytest.raises(GradleakError, match="applies none"):
        next(plain.collect(max_episodes=1, defended=True))


class _Recorded(Exception):
    pass


class _RecordingAuxiliary:
    def __init__(self, defense):
        self.defense, self.calls = defense, []

    def collect(self, **kwargs):
        self.calls.append(kwargs)
        raise _Recorded


@pytest.mark.parametrize("adaptive", [True, False])
def test_adaptive_fit_collects_defended_gradients(cache_dir, adaptive):
    _, _, info, _ = _setup()
    aux = _RecordingAuxiliary(DefenseIdentity.of("quantize", {"bits": 4}))
    with pytest.raises(_Recorded):
        tr.TRACE(**TINY, aux_seed=7907, adaptive=adaptive).fit(info, aux)
    assert aux.calls[0].get("defended", False) is adaptive and aux.calls[0]["split"] == "train"


def test_cache_key_changes_with_the_defense():
    _, _, info, _ = _setup()
    identity, layout = tr.victim_identity(info), tr.gradient_layout(info)
    adaptive = tr.TRACE(**TINY, adaptive=True)
    keys = set()
    for defense in (None, DefenseIdentity.of("topk", {"keep": 0.1}), DefenseIdentity.of("topk", {"keep": 0.5}),
                    DefenseIdentity.of("gaussian_noise", {"sigma": 1e-2})):
        keys.add(adaptive.cache_key(identity, layout, defense_identity(adaptive.config, _RecordingAuxiliary(defense))))
    assert len(keys) == 4
    # non-adaptive: the defense is not used, so not keyed
    plain = tr.TRACE(**TINY)
    assert defense_identity(plain.config, _RecordingAuxiliary(DefenseIdentity.of("topk", {"keep": 0.1}))) is None


def test_the_runner_tells_fit_the_defense_and_nothing_else(monkeypatch):
    assert fit_request(EvaluateConfig(attack="trace", defense="none")) == {"defense": None}
    request = fit_request(EvaluateConfig(attack="trace", defense="topk", defense_params={"keep": 0.5}))
    assert request == {"defense": {"reference": "topk", "params": {"keep": 0.5}, "file_sha256": None}}
    from gradleak_bench.run.host import Host

    seen = {}

    class Spy:
        def fit(self, victim, auxiliary):
            seen["defense"] = auxiliary.defense

    host = Host()
    host.plugin, host.victim, host.info = Spy(), object(), object()
    host.fit(request, {})
    assert seen["defense"] == DefenseIdentity("topk", {"keep": 0.5}, None)
