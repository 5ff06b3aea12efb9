"""The per-sample gradient engine equals what SB3's own ``train()`` puts in ``.grad``.

Each test builds a tiny SB3 model, writes one sample whose advantage / return / old log-prob / transition
it controls straight into the model's rollout or replay buffer, replaces ``optimizer.step`` with a
recorder of ``p.grad`` and calls ``model.train()``: the gradient under test is SB3's, not a
re-implementation. ``max_grad_norm=inf`` keeps clipping (a defense) out of it.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3 import A2C, DQN, PPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

from gradleak_bench.records import LossSpec
from gradleak_bench.stream.per_sample import LossInputs, PerSampleGradients
from gradleak_bench.victims.reinforce import Reinforce

N_ACTIONS = 5
# rtol as asked; atol is relative to each tensor's largest entry, because batched and single-sample
# float32 passes round differently and entries near zero have no relative precision of their own.
RTOL, ATOL_REL = 1e-5, 1e-6
IMG = (36, 36, 3)  # the smallest image NatureCNN accepts: fast


class _TinyEnv(gym.Env):
    """An environment that only provides spaces: the tests never step it."""

    def __init__(self, observation_space: spaces.Space):
        self.observation_space = observation_space
        self.action_space = spaces.Discrete(N_ACTIONS)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


class _RewardingEnv(_TinyEnv):
    """Seeded observations and a reward that depends on the action, so Monte-Carlo returns are not zero."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        return self._obs(), float(action) - 2.0, False, False, {}

    def _obs(self):
        return self.np_random.uniform(-1.0, 1.0, self.observation_space.shape).astype(np.float32)


OBS_SPACES = {
    "cnn": lambda: spaces.Box(0, 255, IMG, np.uint8),
    "multi": lambda: spaces.Dict({
        "rgb": spaces.Box(0, 255, IMG, np.uint8), "goal": spaces.Box(-1.0, 1.0, (4,), np.float32),
    }),
    "mlp": lambda: spaces.Box(-1.0, 1.0, (6,), np.float32),
}
POLICY_NAMES = {"cnn": "CnnPolicy", "multi": "MultiInputPolicy", "mlp": "MlpPolicy"}
# Small networks keep the file fast; the layer types are the standard ones.
ON_POLICY_KWARGS = {
    "cnn": dict(features_extractor_kwargs=dict(features_dim=32)),
    "multi": dict(features_extractor_kwargs=dict(cnn_output_dim=32), net_arch=[16]),
    "mlp": dict(net_arch=[16, 16]),
}
DQN_KWARGS = {
    "cnn": dict(features_extractor_kwargs=dict(features_dim=32), net_arch=[16]),
    "multi": dict(features_extractor_kwargs=dict(cnn_output_dim=32), net_arch=[16]),
    "mlp": dict(net_arch=[16, 16]),
}
ON_POLICY = {"ppo": PPO, "a2c": A2C, "reinforce": Reinforce}
SPECS = {
    "ppo": LossSpec("ppo", ent_coef=0.01, vf_coef=0.5, clip_range=0.2),
    "a2c": LossSpec("a2c", ent_coef=0.02, vf_coef=0.25),
    "reinforce": LossSpec("reinforce", gae_lambda=1.0, ent_coef=0.01),
    "dqn": LossSpec("dqn"),
}

MAX_REL_ERRORS: dict[str, float] = {}  # filled by the tests, printed at the end with -s


def _make_model(algo: str, kind: str, seed: int = 0):
    torch.manual_seed(seed)
    env = _TinyEnv(OBS_SPACES[kind]())
    common = dict(seed=seed, device="cpu", max_grad_norm=math.inf)
    if algo == "dqn":
        model = DQN(POLICY_NAMES[kind], env, batch_size=1, gradient_steps=1, learning_starts=0,
                    buffer_size=4, policy_kwargs=DQN_KWARGS[kind], **common)
    else:
        cls = ON_POLICY[algo]
        # normalize_advantage is a no-op on one sample; SB3 asserts batch_size > 1 when it is on.
        extra = dict(batch_size=1, n_epochs=1, normalize_advantage=False) if algo == "ppo" else {}
        spec = SPECS[algo]
        model = cls(POLICY_NAMES[kind], env, n_steps=1, ent_coef=spec.ent_coef, vf_coef=spec.vf_coef,
                    policy_kwargs=ON_POLICY_KWARGS[kind], **extra, **common)
        if algo == "ppo":
            model.clip_range = lambda _: spec.clip_range
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def _sample_obs(model, rng: np.random.Generator, n: int):
    """``n`` observations in the (transposed, channel-first) space the model's buffers store."""
    space = model.observation_space

    def one(box: spaces.Box) -> np.ndarray:
        if box.dtype == np.uint8:
            return rng.integers(0, 256, (n, *box.shape), dtype=np.uint8)
        return rng.uniform(-1, 1, (n, *box.shape)).astype(np.float32)

    if isinstance(space, spaces.Dict):
        return {key: one(sub) for key, sub in space.spaces.items()}
    return one(space)


def _index(obs, i: int):
    return {k: v[i] for k, v in obs.items()} if isinstance(obs, dict) else obs[i]


def _to_tensor(model, obs):
    return model.policy.obs_to_tensor(obs)[0]


def _sb3_gradient(model, step) -> dict[str, torch.Tensor]:
    """Run ``step()`` (which calls SB3's train) and return what ``optimizer.step`` found in ``.grad``."""
    recorded: dict[str, torch.Tensor] = {}
    params = [p for group in model.policy.optimizer.param_groups for p in group["params"]]
    trained = {id(p) for p in params}

    def record(*args, **kwargs):
        for name, p in model.policy.named_parameters():
            if id(p) in trained:
                # None = untouched by the loss (REINFORCE's value head): a zero gradient.
                recorded[name] = torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()

    original = model.policy.optimizer.step
    model.policy.optimizer.step = record
    try:
        step()
    finally:
        model.policy.optimizer.step = original
    return recorded


def _sb3_on_policy_gradient(model, obs, action: int, advantage: float, ret: float, old_log_prob: float):
    """SB3's gradient on a rollout buffer holding exactly this one sample."""
    buf = model.rollout_buffer
    buf.reset()
    if isinstance(obs, dict):
        for key, value in obs.items():
            buf.observations[key][0, 0] = value
    else:
        buf.observations[0, 0] = obs
    buf.actions[0, 0] = action
    buf.advantages[0, 0] = advantage
    buf.returns[0, 0] = ret
    buf.log_probs[0, 0] = old_log_prob
    buf.values[0, 0] = 0.0
    buf.pos, buf.full = buf.buffer_size, True
    return _sb3_gradient(model, model.train)


def _sb3_dqn_gradient(model, obs, next_obs, action: int, reward: float, done: bool):
    """SB3's gradient on a replay buffer holding exactly this one transition."""
    buf = model.replay_buffer
    buf.pos, buf.full = 0, False
    batch = (lambda o: {k: v[None] for k, v in o.items()}) if isinstance(obs, dict) else (lambda o: o[None])
    buf.add(batch(obs), batch(next_obs), np.array([[action]]), np.array([reward], np.float32),
            np.array([done]), [{}])
    return _sb3_gradient(model, lambda: model.train(gradient_steps=1, batch_size=1))


def _dqn_target(model, next_obs, reward: float, done: bool) -> float:
    """The TD target exactly as DQN.train computes it (the dataset stores this value)."""
    with torch.no_grad():
        next_q = model.q_net_target(_to_tensor(model, next_obs)).max(dim=1).values
    return float(torch.tensor(reward, dtype=torch.float32) + (1 - float(done)) * model.gamma * next_q[0])


def _current_log_prob(model, obs, actions: np.ndarray) -> torch.Tensor:
    with torch.no_grad():
        _, log_prob, _ = model.policy.evaluate_actions(_to_tensor(model, obs), torch.as_tensor(actions))
    return log_prob


def _compare(expected: dict[str, torch.Tensor], engine_row: dict[str, torch.Tensor], label: str) -> None:
    assert set(expected) == set(engine_row), label
    worst = 0.0
    for name, ref in expected.items():
        got = engine_row[name]
        assert got.dtype == torch.float32
        scale = ref.abs().max().item()
        torch.testing.assert_close(got, ref, rtol=RTOL, atol=max(ATOL_REL * scale, 1e-12),
                                   msg=lambda m: f"{label} {name}: {m}")
        if scale > 0:
            worst = max(worst, (got - ref).abs().max().item() / scale)
    MAX_REL_ERRORS[label] = max(MAX_REL_ERRORS.get(label, 0.0), worst)


def _row(grads: dict[str, torch.Tensor], i: int) -> dict[str, torch.Tensor]:
    return {name: g[i] for name, g in grads.items()}


def _engines(model, algo: str):
    """Both engine paths: the reference vmap one and the default (layer-wise where it applies)."""
    return {"vmap": PerSampleGradients(model.policy, SPECS[algo], fast=False),
            "default": PerSampleGradients(model.policy, SPECS[algo])}


@pytest.mark.parametrize("kind", ["cnn", "multi", "mlp"])
@pytest.mark.parametrize("algo", ["ppo", "a2c", "reinforce"])
def test_on_policy_single_sample_equals_sb3(algo: str, kind: str) -> None:
    model = _make_model(algo, kind)
    rng = np.random.default_rng(1)
    obs = _index(_sample_obs(model, rng, 1), 0)
    action, advantage, ret = 3, 1.7, -0.8
    old_log_prob = float(_current_log_prob(model, {k: v[None] for k, v in obs.items()} if isinstance(obs, dict)
                                           else obs[None], np.array([action]))[0])
    expected = _sb3_on_policy_gradient(model, obs, action, advantage, ret, old_log_prob)

    batch_obs = _to_tensor(model, {k: v[None] for k, v in obs.items()} if isinstance(obs, dict) else obs[None])
    inputs = LossInputs(batch_obs, torch.tensor([action]), advantages=torch.tensor([advantage]),
                        returns=torch.tensor([ret]))  # old_log_prob None: ratio 1, as at capture
    for path, engine in _engines(model, algo).items():
        assert engine.param_names == tuple(expected)
        _compare(expected, _row(engine(inputs), 0), f"{algo}/{kind}/{path}")


@pytest.mark.parametrize("victim_name", ["ppo_84", "a2c_84"])
def test_84px_zoo_victim_loads_sees_84x84_and_its_gradient_equals_sb3(victim_name: str) -> None:
    """The TRACE-resolution victims: the committed ``init`` file loads, the env renders 84x84 frames for it,
    and on such a frame the engine's per-sample gradient of the victim's own loss equals SB3's."""
    import gradleak_bench  # noqa: F401  (registers the gym ids)
    from gradleak_bench.victims import load_victim

    victim = load_victim("PointNav", victim_name, "init")
    assert victim.spec.image_size == 84
    assert "weights_sha256" in victim.meta, "the committed init checkpoint must be loaded (tools/publish_zoo.py)"
    env = gym.make("gradleak/PointNav-v0", layouts="test", image_size=victim.spec.image_size)
    try:
        frame, _ = env.reset(seed=0)
    finally:
        env.close()
    assert frame.shape == (84, 84, 3) and frame.dtype == np.uint8
    assert victim.policy.observation_space.shape == (3, 84, 84)

    spec = victim.spec.loss
    extra = dict(batch_size=1, n_epochs=1, normalize_advantage=False) if spec.algo == "ppo" else {}
    torch.manual_seed(0)
    model = ON_POLICY[spec.algo]("CnnPolicy", _TinyEnv(spaces.Box(0, 255, frame.shape, np.uint8)), n_steps=1,
                                 ent_coef=spec.ent_coef, vf_coef=spec.vf_coef, seed=0, device="cpu",
                                 max_grad_norm=math.inf, **extra)
    if spec.algo == "ppo":
        model.clip_range = lambda _: spec.clip_range
    model.set_logger(Logger(folder=None, output_formats=[]))
    model.policy.load_state_dict(victim.policy.state_dict())
    obs = frame.transpose(2, 0, 1)  # the channel-first layout SB3's buffers hold
    action, advantage, ret = 1, -0.6, 0.4
    old_log_prob = float(_current_log_prob(model, obs[None], np.array([action]))[0])
    expected = _sb3_on_policy_gradient(model, obs, action, advantage, ret, old_log_prob)

    inputs = LossInputs(victim.policy.obs_to_tensor(obs[None])[0], torch.tensor([action]),
                        advantages=torch.tensor([advantage]), returns=torch.tensor([ret]))
    for path, fast in (("vmap", False), ("default", True)):
        _compare(expected, _row(PerSampleGradients(victim.policy, spec, fast=fast)(inputs), 0),
                 f"{victim_name}/{path}")


@pytest.mark.parametrize("victim_name, base", [("dqn_150", "dqn"), ("reinforce_150", "reinforce"),
                                              ("reinforce_convdepth_150", "reinforce_convdepth")])
def test_150px_victims_see_150x150_and_stream_gradients_of_their_shapes(victim_name: str, base: str) -> None:
    """The QGI/RGI-resolution victims: their specs are ``dqn`` / ``reinforce`` at 150x150 (nothing else
    changed but training recipes, issue 37: ``dqn_150``'s budget and learning rate, ``reinforce_convdepth_150``'s
    fan-in-scaled step size), ``init`` is rebuilt from the seed
    (no file is committed), the env renders 150x150 frames for them,
    and one step's per-sample gradient has every parameter's shape, with the first linear layers as wide as
    NatureCNN's 15x15x64 features and the flattened 150x150 depth make them. No attack runs."""
    import gradleak_bench  # noqa: F401  (registers the gym ids)
    from gradleak_bench.records import Episode
    from gradleak_bench.stream.replay import EpisodeGradients
    from gradleak_bench.victims import load_victim
    from gradleak_bench.victims.spaces import env_spaces
    from gradleak_bench.victims.zoo import get_victim

    victim = load_victim("ActivePerception", victim_name, "init")
    spec, other = victim.spec, get_victim("ActivePerception", base)
    assert spec.image_size == 150 and other.image_size == 64
    same = {"name": base, "image_size": 64, "description": ""}
    mine, theirs = spec.to_dict(), other.to_dict()
    hyperparams = dict(mine["train"]["hyperparams"])
    # the one recipe change that is not a 64x64 hyperparameter: steps scaled to the 150x150 layers' fan-in
    assert hyperparams.pop("fan_in_lr_reference", None) == (1024 if victim_name == "reinforce_convdepth_150"
                                                            else None)
    mine["train"] = {**mine["train"], "total_timesteps": theirs["train"]["total_timesteps"],
                     "hyperparams": {**hyperparams, "learning_rate": theirs["train"]["hyperparams"]["learning_rate"]}}
    assert {**mine, **same} == {**theirs, "description": ""}
    assert "weights_sha256" not in victim.meta  # rebuilt from its seed
    env = gym.make("gradleak/ActivePerception-v0", layouts="test", image_size=spec.image_size)
    try:
        obs, _ = env.reset(seed=0)
    finally:
        env.close()
    assert obs["rgb"].shape == (150, 150, 3) and obs["rgb"].dtype == np.uint8
    assert obs["depth"].shape == (150, 150, 1) and obs["bbox"].shape == (4,)

    steps = {k: np.asarray(v)[None] for k, v in obs.items()}
    steps["action"] = np.array([2])
    steps["q_target" if spec.algo == "dqn" else "return"] = np.array([0.5], dtype=np.float32)
    stream = EpisodeGradients(victim.policy, spec.loss, env_spaces("ActivePerception", 150)[0])(
        Episode("E", "ActivePerception", 0, 0, steps))
    trained = {n: p for n, p in victim.policy.named_parameters() if n in stream.tensors}
    assert trained and set(stream.tensors) == set(trained)
    for name, p in trained.items():
        assert stream.tensors[name].shape == (1, *p.shape), name
        assert torch.isfinite(stream.tensors[name]).all(), name
    widths = {p.shape[1] for n, p in trained.items() if p.ndim == 2}
    if base == "reinforce_convdepth":  # NatureCNN's features (RGB and depth); RGB + depth + box features
        assert {64 * 15 * 15, 256 + 256 + 64} <= widths and 150 * 150 + 256 + 4 not in widths
    else:  # NatureCNN's features; the flattened depth + RGB features + box
        assert {64 * 15 * 15, 150 * 150 + 256 + 4} <= widths


def test_convdepth_reinforce_passes_depth_through_a_cnn_and_its_gradient_equals_sb3() -> None:
    """RGI's victim as the paper builds it (issue 37): the committed ``init`` loads, depth goes through its own
    NatureCNN and the box through its own linear layer (so the two-stage attacks put depth in stage 2 and the
    box in stage 1), and on a real ActivePerception frame the engine's per-sample gradient of plain REINFORCE
    equals the one SB3 computes in a ``Reinforce`` model holding the same weights."""
    import gradleak_bench  # noqa: F401  (registers the gym ids)
    from gradleak_bench.inversion.network import VictimNet
    from gradleak_bench.victims import load_victim
    from gradleak_bench.victims.architectures import DepthCNN, VectorMLP
    from gradleak_bench.victims.checkpoint import attacker_copy
    from gradleak_bench.victims.policies import resolve_policy_kwargs

    victim = load_victim("ActivePerception", "reinforce_convdepth", "init")
    assert "weights_sha256" in victim.meta, "the committed init checkpoint must be loaded (tools/publish_zoo.py)"
    extractors = victim.policy.features_extractor.extractors
    assert isinstance(extractors["depth"], DepthCNN) and isinstance(extractors["bbox"], VectorMLP)
    net = VictimNet(SimpleNamespace(policy=attacker_copy(victim), loss=victim.spec.loss))
    slices = net.feature_slices()
    assert {k: s.stop - s.start for k, s in slices.items()} == {"bbox": 64, "depth": 256, "rgb": 256}
    assert net.linear_keys() == ["bbox"]
    assert victim.policy.mlp_extractor.policy_net[0].in_features == 64 + 256 + 256

    env = gym.make("gradleak/ActivePerception-v0", layouts="test", image_size=victim.spec.image_size)
    try:
        obs, _ = env.reset(seed=0)
        for _ in range(24):  # turn until the target is in view: a non-zero box reaches the box's layer
            obs, *_ = env.step(4)
            if obs["bbox"].any():
                break
        space = env.observation_space
    finally:
        env.close()
    assert float(obs["depth"].max()) > 0.5 and obs["bbox"].any(), "a real frame with the target in view"

    class _ActivePerceptionSpaces(_TinyEnv):
        def __init__(self):
            super().__init__(space)
            self.action_space = spaces.Discrete(7)

    spec = victim.spec.loss
    torch.manual_seed(0)
    model = Reinforce("MultiInputPolicy", _ActivePerceptionSpaces(), n_steps=1, ent_coef=spec.ent_coef,
                      policy_kwargs=resolve_policy_kwargs(victim.spec.policy_kwargs), seed=0, device="cpu",
                      max_grad_norm=math.inf)
    model.set_logger(Logger(folder=None, output_formats=[]))
    model.policy.load_state_dict(victim.policy.state_dict())
    stored = {"bbox": obs["bbox"], "depth": obs["depth"], "rgb": obs["rgb"].transpose(2, 0, 1)}  # SB3's buffer layout
    action, ret = 4, 2.3
    old_log_prob = float(_current_log_prob(model, {k: v[None] for k, v in stored.items()}, np.array([action]))[0])
    expected = _sb3_on_policy_gradient(model, stored, action, 0.0, ret, old_log_prob)
    for name in ("features_extractor.extractors.depth.cnn.cnn.0.weight", "features_extractor.extractors.bbox.1.weight"):
        assert expected[name].abs().max() > 0, f"{name} is trained by the loss"

    batch = victim.policy.obs_to_tensor({k: v[None] for k, v in stored.items()})[0]
    inputs = LossInputs(batch, torch.tensor([action]), advantages=torch.tensor([0.0]), returns=torch.tensor([ret]))
    for path, fast in (("vmap", False), ("default", True)):
        _compare(expected, _row(PerSampleGradients(victim.policy, spec, fast=fast)(inputs), 0),
                 f"reinforce_convdepth/{path}")


@pytest.mark.parametrize("kind", ["cnn", "multi", "mlp"])
def test_dqn_single_sample_equals_sb3(kind: str) -> None:
    model = _make_model("dqn", kind)
    with torch.no_grad():  # a target network that differs from q_net: the engine must not use it
        for p in model.q_net_target.parameters():
            p.add_(0.05 * torch.randn_like(p))
    rng = np.random.default_rng(2)
    both = _sample_obs(model, rng, 2)
    obs, next_obs = _index(both, 0), _index(both, 1)
    action, reward, done = 2, 0.3, False
    expected = _sb3_dqn_gradient(model, obs, next_obs, action, reward, done)
    target = _dqn_target(model, {k: v[None] for k, v in next_obs.items()} if isinstance(next_obs, dict)
                         else next_obs[None], reward, done)

    optimised = [p for g in model.policy.optimizer.param_groups for p in g["params"]]
    batch_obs = _to_tensor(model, {k: v[None] for k, v in obs.items()} if isinstance(obs, dict) else obs[None])
    inputs = LossInputs(batch_obs, torch.tensor([action]), q_targets=torch.tensor([target]))
    for path, engine in _engines(model, "dqn").items():
        named = dict(model.policy.named_parameters())
        assert [id(named[n]) for n in engine.param_names] == [id(p) for p in optimised]
        _compare(expected, _row(engine(inputs), 0), f"dqn/{kind}/{path}")


def test_ppo_batch_rows_equal_sb3_alone_with_ratio_and_clipping() -> None:
    """Row i of one batched call is SB3's gradient on sample i alone, with ratio != 1 (some clipped)."""
    model = _make_model("ppo", "multi")
    rng = np.random.default_rng(3)
    batch = 6
    obs = _sample_obs(model, rng, batch)
    actions = rng.integers(0, N_ACTIONS, batch)
    current = _current_log_prob(model, obs, actions).numpy()
    # log-ratio per sample: unclipped, clipped above with A>0, clipped below with A<0, and the inactive
    # side of the clip (ratio outside the range but the unclipped term is the minimum).
    log_ratio = np.array([0.0, 0.1, 0.5, -0.6, 0.5, -0.6], np.float32)
    advantages = np.array([1.2, -0.7, 0.9, -1.1, -0.8, 1.3], np.float32)
    returns = rng.normal(size=batch).astype(np.float32)
    old_log_prob = (current - log_ratio).astype(np.float32)

    inputs = LossInputs(_to_tensor(model, obs), torch.as_tensor(actions), torch.as_tensor(advantages),
                        torch.as_tensor(returns), torch.as_tensor(old_log_prob))
    outputs = {path: engine(inputs) for path, engine in _engines(model, "ppo").items()}
    for i in range(batch):
        expected = _sb3_on_policy_gradient(model, _index(obs, i), int(actions[i]), float(advantages[i]),
                                           float(returns[i]), float(old_log_prob[i]))
        for path, grads in outputs.items():
            _compare(expected, _row(grads, i), f"ppo-batch/multi/{path}")
    # Where the clip is active (samples 2 and 3) the policy term has no gradient: the same samples with a
    # zero advantage give the same gradient; where it is not (4 and 5) they do not.
    zero_adv = LossInputs(inputs.obs, inputs.actions, torch.zeros(batch), inputs.returns, inputs.old_log_prob)
    without_pg = PerSampleGradients(model.policy, SPECS["ppo"])(zero_adv)["action_net.weight"]
    with_pg = outputs["default"]["action_net.weight"]
    torch.testing.assert_close(with_pg[2:4], without_pg[2:4], rtol=1e-6, atol=1e-8)
    assert not torch.allclose(with_pg[4:], without_pg[4:])


def test_dqn_batch_rows_equal_sb3_alone() -> None:
    model = _make_model("dqn", "cnn")
    rng = np.random.default_rng(4)
    batch = 5
    obs, next_obs = _sample_obs(model, rng, batch), _sample_obs(model, rng, batch)
    actions = rng.integers(0, N_ACTIONS, batch)
    rewards = np.array([0.0, 3.0, -2.5, 0.2, 1.0], np.float32)  # both sides of the Huber kink
    dones = np.array([False, False, True, False, True])
    targets = [_dqn_target(model, next_obs[i:i + 1], float(rewards[i]), bool(dones[i])) for i in range(batch)]
    inputs = LossInputs(_to_tensor(model, obs), torch.as_tensor(actions), q_targets=torch.tensor(targets))
    outputs = {path: engine(inputs) for path, engine in _engines(model, "dqn").items()}
    for i in range(batch):
        expected = _sb3_dqn_gradient(model, obs[i], next_obs[i], int(actions[i]), float(rewards[i]),
                                     bool(dones[i]))
        for path, grads in outputs.items():
            _compare(expected, _row(grads, i), f"dqn-batch/cnn/{path}")


@pytest.mark.parametrize("algo", ["ppo", "a2c", "reinforce", "dqn"])
def test_layerwise_path_applies_and_equals_vmap(algo: str) -> None:
    """The fast path serves every standard policy and agrees with the vmap path to 1e-6."""
    for kind in ("cnn", "multi", "mlp"):
        model = _make_model(algo, kind)
        obs = _to_tensor(model, _sample_obs(model, np.random.default_rng(9), 4))
        inputs = LossInputs(obs, torch.tensor([0, 1, 2, 3]), torch.randn(4), torch.randn(4),
                            q_targets=3 * torch.randn(4))
        engine = PerSampleGradients(model.policy, SPECS[algo])
        fast, reference = engine(inputs), engine.vmap_gradients(inputs)
        assert engine.uses_fast_path, kind
        for name, ref in reference.items():
            torch.testing.assert_close(fast[name], ref, rtol=1e-6, atol=1e-6 * ref.abs().max().item() + 1e-12)


class _LayerNormExtractor(BaseFeaturesExtractor):
    """A features extractor with a layer the fast path does not cover."""

    def __init__(self, observation_space: spaces.Box):
        super().__init__(observation_space, features_dim=8)
        self.net = torch.nn.Sequential(torch.nn.Linear(observation_space.shape[0], 8), torch.nn.LayerNorm(8))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class _PaddedCnn(BaseFeaturesExtractor):
    """Padded, dilated and non-square convolutions: the layer-wise path's ``unfold`` branch."""

    def __init__(self, observation_space: spaces.Box):
        super().__init__(observation_space, features_dim=8)
        self.cnn = torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, (3, 5), stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(4, 4, 3, dilation=2, bias=False), torch.nn.ReLU(), torch.nn.Flatten(),
        )
        with torch.no_grad():
            n_flat = self.cnn(torch.zeros(1, *observation_space.shape)).shape[1]
        self.linear = torch.nn.Linear(n_flat, 8)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.linear(self.cnn(obs))


def test_padded_dilated_convolutions_are_exact() -> None:
    env = _TinyEnv(OBS_SPACES["cnn"]())
    model = A2C("CnnPolicy", env, n_steps=1, seed=0, device="cpu", max_grad_norm=math.inf,
                ent_coef=SPECS["a2c"].ent_coef, vf_coef=SPECS["a2c"].vf_coef,
                policy_kwargs=dict(features_extractor_class=_PaddedCnn, net_arch=[8]))
    model.set_logger(Logger(folder=None, output_formats=[]))
    engine = PerSampleGradients(model.policy, SPECS["a2c"])
    obs = _sample_obs(model, np.random.default_rng(11), 1)
    expected = _sb3_on_policy_gradient(model, obs[0], 4, -0.9, 0.7, 0.0)
    got = engine(LossInputs(_to_tensor(model, obs), torch.tensor([4]), torch.tensor([-0.9]), torch.tensor([0.7])))
    assert engine.uses_fast_path
    _compare(expected, _row(got, 0), "a2c/padded-cnn/default")


def test_other_layers_fall_back_to_vmap_and_stay_exact() -> None:
    env = _TinyEnv(OBS_SPACES["mlp"]())
    model = PPO("MlpPolicy", env, n_steps=1, batch_size=1, n_epochs=1, normalize_advantage=False, seed=0,
                device="cpu", max_grad_norm=math.inf, ent_coef=SPECS["ppo"].ent_coef,
                policy_kwargs=dict(features_extractor_class=_LayerNormExtractor, net_arch=[8]))
    model.set_logger(Logger(folder=None, output_formats=[]))
    engine = PerSampleGradients(model.policy, SPECS["ppo"])
    assert not engine.uses_fast_path
    obs = _sample_obs(model, np.random.default_rng(10), 1)
    old = float(_current_log_prob(model, obs, np.array([1]))[0])
    expected = _sb3_on_policy_gradient(model, obs[0], 1, 0.6, 0.4, old)
    got = engine(LossInputs(_to_tensor(model, obs), torch.tensor([1]), torch.tensor([0.6]), torch.tensor([0.4])))
    _compare(expected, _row(got, 0), "ppo/layernorm/vmap")


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_engine_leaves_policy_untouched(algo: str) -> None:
    """No engine gradient reaches .grad, and no parameter changes."""
    model = _make_model(algo, "cnn")
    before = {n: p.detach().clone() for n, p in model.policy.named_parameters()}
    rng = np.random.default_rng(5)
    obs = _to_tensor(model, _sample_obs(model, rng, 3))
    inputs = LossInputs(obs, torch.tensor([0, 1, 4]), advantages=torch.ones(3), returns=torch.zeros(3),
                        q_targets=torch.zeros(3))
    engine = PerSampleGradients(model.policy, SPECS[algo], chunk_size=2)
    grads = engine(inputs)
    unchunked = PerSampleGradients(model.policy, SPECS[algo]).vmap_gradients(inputs)
    for name, ref in unchunked.items():
        torch.testing.assert_close(grads[name], ref, rtol=1e-6, atol=1e-6 * ref.abs().max().item() + 1e-12)
    losses = engine.losses(inputs)
    assert losses.shape == (3,) and torch.isfinite(losses).all()
    assert {n: tuple(g.shape[1:]) for n, g in grads.items()} == engine.param_shapes
    for name, p in model.policy.named_parameters():
        assert p.grad is None, name
        assert torch.equal(p, before[name]), name


def test_losses_match_sb3_formula() -> None:
    """``losses`` gives each sample's own loss (A2C, hand-checked from evaluate_actions)."""
    model = _make_model("a2c", "mlp")
    rng = np.random.default_rng(6)
    obs = _to_tensor(model, _sample_obs(model, rng, 4))
    actions, adv, ret = torch.tensor([0, 1, 2, 3]), torch.randn(4), torch.randn(4)
    with torch.no_grad():
        values, log_prob, entropy = model.policy.evaluate_actions(obs, actions)
    spec = SPECS["a2c"]
    expected = -adv * log_prob - spec.ent_coef * entropy + spec.vf_coef * (ret - values.flatten()) ** 2
    got = PerSampleGradients(model.policy, spec).losses(LossInputs(obs, actions, adv, ret))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_out_buffers_are_filled_in_place() -> None:
    model = _make_model("ppo", "cnn")
    engine = PerSampleGradients(model.policy, SPECS["ppo"])
    obs = _to_tensor(model, _sample_obs(model, np.random.default_rng(7), 2))
    inputs = LossInputs(obs, torch.tensor([1, 2]), torch.tensor([0.5, -1.0]), torch.tensor([0.1, 0.2]))
    out = {n: torch.empty((2, *s)) for n, s in engine.param_shapes.items()}
    result = engine(inputs, out=out)
    for name, expected in engine.vmap_gradients(inputs).items():
        assert result[name].data_ptr() == out[name].data_ptr()
        torch.testing.assert_close(out[name], expected, rtol=1e-6, atol=1e-8)


def _materialised_norms_and_mean(grads: dict[str, torch.Tensor], weights) -> tuple[torch.Tensor, dict]:
    batch = next(iter(grads.values())).shape[0]
    norms = torch.sqrt(sum(g.double().pow(2).reshape(batch, -1).sum(1) for g in grads.values()))
    w = weights(norms)
    return norms, {n: (g.double() * w.reshape(-1, *[1] * (g.dim() - 1))).mean(0) for n, g in grads.items()}


@pytest.mark.parametrize("kind", ["cnn", "multi", "mlp"])
@pytest.mark.parametrize("algo", ["ppo", "reinforce", "dqn"])
def test_ghost_norms_and_weighted_mean_equal_the_materialised_ones(algo: str, kind: str) -> None:
    """Clipping without per-sample Linear gradients: the norms and the clipped mean equal those computed
    from the vmap path's per-sample gradients."""
    model = _make_model(algo, kind)
    obs = _to_tensor(model, _sample_obs(model, np.random.default_rng(5), 6))
    inputs = LossInputs(obs, torch.tensor([0, 1, 2, 3, 4, 0]), 5 * torch.randn(6), 5 * torch.randn(6),
                        q_targets=5 * torch.randn(6))
    engine = PerSampleGradients(model.policy, SPECS[algo])
    reference = engine.vmap_gradients(inputs)
    ref_norms = torch.sqrt(sum(g.double().pow(2).reshape(6, -1).sum(1) for g in reference.values()))
    clip = float(ref_norms.median())  # about half the samples are clipped

    def weights(norms):
        return torch.clamp(clip / norms, max=1.0)

    norms, mean = engine.norms_and_weighted_mean(inputs, weights)
    assert engine.uses_fast_path
    expected_norms, expected = _materialised_norms_and_mean(reference, weights)
    torch.testing.assert_close(norms, expected_norms, rtol=1e-5, atol=0)
    for name, ref in expected.items():
        torch.testing.assert_close(mean[name].double(), ref, rtol=1e-5, atol=1e-6 * ref.abs().max().item() + 1e-12)


def test_ghost_norms_fall_back_to_vmap_and_stay_exact() -> None:
    env = _TinyEnv(OBS_SPACES["mlp"]())
    model = PPO("MlpPolicy", env, n_steps=1, batch_size=1, n_epochs=1, normalize_advantage=False, seed=0,
                device="cpu", max_grad_norm=math.inf, policy_kwargs=dict(features_extractor_class=_LayerNormExtractor))
    engine = PerSampleGradients(model.policy, SPECS["ppo"])
    obs = _to_tensor(model, _sample_obs(model, np.random.default_rng(4), 3))
    inputs = LossInputs(obs, torch.tensor([0, 1, 2]), torch.randn(3), torch.randn(3))
    norms, mean = engine.norms_and_weighted_mean(inputs, lambda n: 1.0 / n)
    expected_norms, expected = _materialised_norms_and_mean(engine.vmap_gradients(inputs), lambda n: 1.0 / n)
    torch.testing.assert_close(norms, expected_norms, rtol=1e-6, atol=0)
    for name, ref in expected.items():
        torch.testing.assert_close(mean[name].double(), ref, rtol=1e-5, atol=1e-7)


def test_missing_loss_input_is_a_clear_error() -> None:
    model = _make_model("ppo", "mlp")
    engine = PerSampleGradients(model.policy, SPECS["ppo"])
    obs = _to_tensor(model, _sample_obs(model, np.random.default_rng(8), 2))
    with pytest.raises(ValueError, match="needs LossInputs.advantages"):
        engine(LossInputs(obs, torch.tensor([0, 1]), returns=torch.zeros(2)))
    with pytest.raises(ValueError, match="shape"):
        engine(LossInputs(obs, torch.tensor([0, 1]), advantages=torch.zeros(3), returns=torch.zeros(2)))


def test_reinforce_is_a_working_sb3_algorithm(tmp_path) -> None:
    env = _TinyEnv(OBS_SPACES["mlp"]())
    with pytest.raises(ValueError, match="gae_lambda"):
        Reinforce("MlpPolicy", env, gae_lambda=0.95)
    # REINFORCE's returns need episodes that end (Monte-Carlo, no bootstrap): 3-step episodes. The env's
    # rewards are 0, so G = 0 and the entropy term is what moves the policy.
    model = Reinforce("MlpPolicy", gym.wrappers.TimeLimit(env, max_episode_steps=3), n_steps=4, seed=0,
                      ent_coef=0.01, device="cpu", policy_kwargs=dict(net_arch=[8]))
    value_before = model.policy.value_net.weight.detach().clone()
    action_before = model.policy.action_net.weight.detach().clone()
    model.learn(total_timesteps=8)
    assert torch.equal(model.policy.value_net.weight, value_before)  # no value loss
    assert not torch.equal(model.policy.action_net.weight, action_before)
    model.save(tmp_path / "reinforce")
    loaded = Reinforce.load(tmp_path / "reinforce", device="cpu")
    assert loaded.gae_lambda == 1.0
    torch.testing.assert_close(loaded.policy.action_net.weight, model.policy.action_net.weight)


def test_reinforce_value_baseline_is_a_training_recipe_only() -> None:
    """``baseline="value"`` (issue 37's REINFORCE recipe) weights log pi by G - V(s) and trains V. With the value
    head at zero and no value loss it must be plain REINFORCE to the bit; with a value loss the value head
    learns; live capture refuses such a model, whose update is not the REINFORCE loss the stream computes."""
    from gradleak_bench.stream.live import loss_spec_of

    def model(baseline: str, vf_coef: float) -> Reinforce:
        env = gym.wrappers.TimeLimit(_RewardingEnv(OBS_SPACES["mlp"]()), max_episode_steps=3)
        m = Reinforce("MlpPolicy", env, n_steps=4, seed=0, ent_coef=0.01, vf_coef=vf_coef, baseline=baseline,
                      device="cpu", policy_kwargs=dict(net_arch=[8]))
        with torch.no_grad():
            m.policy.value_net.weight.zero_()
            m.policy.value_net.bias.zero_()
        return m

    # built and trained one after the other: construction seeds torch's global generator, which learn() draws
    # the actions from
    plain = model("none", 0.0)
    plain.learn(total_timesteps=8)
    zero_baseline = model("value", 0.0)
    zero_baseline.learn(total_timesteps=8)
    for a, b in zip(plain.policy.parameters(), zero_baseline.policy.parameters()):
        assert torch.equal(a, b)
    learned = model("value", 0.5)
    learned.learn(total_timesteps=8)
    assert learned.policy.value_net.weight.abs().sum() > 0
    assert not torch.equal(learned.policy.action_net.weight, plain.policy.action_net.weight)
    with pytest.raises(TypeError, match="learned baseline"):
        loss_spec_of(learned)
    assert loss_spec_of(plain).algo == "reinforce"
    with pytest.raises(ValueError, match="baseline"):
        Reinforce("MlpPolicy", _TinyEnv(OBS_SPACES["mlp"]()), baseline="critic")


def test_reinforce_normalised_returns_are_a_training_recipe_only() -> None:
    """A2C's ``normalize_advantage=True`` on REINFORCE standardises the batch's weights (issue 37's recipe
    trials): its update differs from plain REINFORCE's, and live capture refuses it."""
    from gradleak_bench.stream.live import loss_spec_of

    def model(normalise: bool) -> Reinforce:
        env = gym.wrappers.TimeLimit(_RewardingEnv(OBS_SPACES["mlp"]()), max_episode_steps=3)
        return Reinforce("MlpPolicy", env, n_steps=4, seed=0, ent_coef=0.0, normalize_advantage=normalise,
                         device="cpu", policy_kwargs=dict(net_arch=[8]))

    plain = model(False)
    plain.learn(total_timesteps=8)
    normalised = model(True)
    normalised.learn(total_timesteps=8)
    returns = normalised.rollout_buffer.returns
    assert returns.std() > 0  # the same rollouts' returns vary, so standardising them changes the update
    assert not torch.equal(normalised.policy.action_net.weight, plain.policy.action_net.weight)
    with pytest.raises(TypeError, match="normalize_advantage"):
        loss_spec_of(normalised)


def test_reinforce_fan_in_scaled_learning_rate_is_a_step_size_recipe_only(tmp_path) -> None:
    """``fan_in_lr_reference=N`` (issue 37's 150x150 REINFORCE recipe): a linear layer with more than N inputs
    steps at lr * N / fan_in. Adam's first step moves every weight with a gradient by about its group's rate,
    so one update shows each layer's rate; a reference above every fan-in trains bit for bit as without it; the
    groups survive save and load; the stream's loss is unchanged, so live capture takes the model."""
    from gradleak_bench.stream.live import loss_spec_of

    lr = 1e-3

    def model(**kwargs) -> Reinforce:
        env = gym.wrappers.TimeLimit(_RewardingEnv(OBS_SPACES["mlp"]()), max_episode_steps=3)
        return Reinforce("MlpPolicy", env, n_steps=4, seed=0, ent_coef=0.01, learning_rate=lr, device="cpu",
                         use_rms_prop=False,  # Adam, as the recipe: its first step is the rate itself
                         policy_kwargs=dict(net_arch=[16]), **kwargs)

    scaled = model(fan_in_lr_reference=8)  # the 6-input first layers keep lr; the 16-input heads get lr / 2
    first = scaled.policy.mlp_extractor.policy_net[0].weight
    before = {"first": first.detach().clone(), "head": scaled.policy.action_net.weight.detach().clone()}
    scaled.learn(total_timesteps=4)  # one update: 4 steps of finished 3-step episodes
    assert scaled._n_updates == 1
    step_first = (first - before["first"]).abs().max().item()
    step_head = (scaled.policy.action_net.weight - before["head"]).abs().max().item()
    assert step_first == pytest.approx(lr, rel=0.05)
    assert step_head == pytest.approx(lr / 2, rel=0.05)
    assert sorted(g["lr_scale"] for g in scaled.policy.optimizer.param_groups) == [0.5, 1.0]
    assert loss_spec_of(scaled).algo == "reinforce"

    # built and trained one after the other: construction seeds torch's global generator, which learn() draws
    # the actions from
    plain = model()
    plain.learn(total_timesteps=8)
    above = model(fan_in_lr_reference=1000)
    above.learn(total_timesteps=8)
    for a, b in zip(plain.policy.parameters(), above.policy.parameters()):
        assert torch.equal(a, b)

    scaled.save(tmp_path / "scaled")
    loaded = Reinforce.load(tmp_path / "scaled", device="cpu")
    assert loaded.fan_in_lr_reference == 8
    assert [g["lr_scale"] for g in loaded.policy.optimizer.param_groups] == \
        [g["lr_scale"] for g in scaled.policy.optimizer.param_groups]
    for bad in (0, 1.5, True, "1024"):
        with pytest.raises(ValueError, match="fan_in_lr_reference"):
            model(fan_in_lr_reference=bad)


def test_zz_report_max_relative_errors() -> None:
    """Prints the worst relative error per case (run with -s); runs last by name."""
    for label, err in sorted(MAX_REL_ERRORS.items()):
        print(f"max rel err {label:28s} {err:.2e}")
