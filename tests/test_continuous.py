"""PointNavContinuous: the env's motion model, the continuous engine against SB3's own ``train()``, the
closed-form Gaussian action attack and its metrics (docs/continuous-actions.md).

The exactness tests follow tests/test_gradient_exactness.py: write one sample into SB3's own buffer, replace
the optimisers' ``step`` with a recorder of ``.grad`` and call ``model.train()``.
"""
from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3 import PPO, SAC
from stable_baselines3.common.logger import Logger

from gradleak_bench.records import LossSpec
from gradleak_bench.stream.continuous import ContinuousLossInputs, ContinuousPerSampleGradients, gradient_engine
from gradleak_bench.stream.targets import sac_td_targets

RTOL, ATOL_REL = 1e-5, 1e-6
IMG = (36, 36, 3)
DIM = 2
PPO_SPEC = LossSpec("ppo", ent_coef=0.01, vf_coef=0.5, clip_range=0.2)
SAC_SPEC = LossSpec("sac", gamma=0.99, ent_coef=0.1)
OBS = {"cnn": lambda: spaces.Box(0, 255, IMG, np.uint8), "mlp": lambda: spaces.Box(-1.0, 1.0, (6,), np.float32)}
POLICY = {"cnn": "CnnPolicy", "mlp": "MlpPolicy"}
SMALL = {"cnn": dict(features_extractor_kwargs=dict(features_dim=32)), "mlp": {}}


class _SpacesOnly(gym.Env):
    def __init__(self, observation_space: spaces.Space):
        self.observation_space = observation_space
        self.action_space = spaces.Box(-1.0, 1.0, (DIM,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


def _obs(model, rng: np.random.Generator, n: int) -> np.ndarray:
    box = model.observation_space
    if box.dtype == np.uint8:
        return rng.integers(0, 256, (n, *box.shape), dtype=np.uint8)
    return rng.uniform(-1, 1, (n, *box.shape)).astype(np.float32)


def _compare(expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor], label: str) -> None:
    assert set(expected) == set(got), label
    for name, ref in expected.items():
        scale = ref.abs().max().item()
        torch.testing.assert_close(got[name], ref, rtol=RTOL, atol=max(ATOL_REL * scale, 1e-12),
                                   msg=lambda m: f"{label} {name}: {m}")


def _recording(optimizers: dict[str, torch.optim.Optimizer], named: dict[int, str], out: dict) -> list:
    """Replace each optimiser's step with a recorder of its parameters' ``.grad``; returns the originals."""
    originals = []
    for optimizer in optimizers.values():
        params = [p for group in optimizer.param_groups for p in group["params"]]

        def record(*_, params=params, **__):
            for p in params:
                out[named[id(p)]] = torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()

        originals.append((optimizer, optimizer.step))
        optimizer.step = record
    return originals


# --- Gaussian PPO -----------------------------------------------------------------------------------

def _ppo(kind: str) -> PPO:
    torch.manual_seed(0)
    model = PPO(POLICY[kind], _SpacesOnly(OBS[kind]()), n_steps=1, batch_size=1, n_epochs=1,
                normalize_advantage=False, ent_coef=PPO_SPEC.ent_coef, vf_coef=PPO_SPEC.vf_coef, seed=0,
                device="cpu", max_grad_norm=math.inf, policy_kwargs=SMALL[kind])
    model.clip_range = lambda _: PPO_SPEC.clip_range
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def _sb3_ppo_gradient(model: PPO, obs, action, advantage: float, ret: float, old_log_prob: float) -> dict:
    buf = model.rollout_buffer
    buf.reset()
    buf.observations[0, 0] = obs
    buf.actions[0, 0] = action
    buf.advantages[0, 0], buf.returns[0, 0], buf.log_probs[0, 0], buf.values[0, 0] = advantage, ret, old_log_prob, 0
    buf.pos, buf.full = buf.buffer_size, True
    grads: dict[str, torch.Tensor] = {}
    named = {id(p): n for n, p in model.policy.named_parameters()}
    originals = _recording({"policy": model.policy.optimizer}, named, grads)
    try:
        model.train()
    finally:
        for optimizer, step in originals:
            optimizer.step = step
    return grads


@pytest.mark.parametrize("kind", ["cnn", "mlp"])
def test_gaussian_ppo_rows_equal_sb3_alone(kind: str) -> None:
    """Ratio 1 (old_log_prob None) and a clipped ratio, unclipped actions outside the Box included."""
    model = _ppo(kind)
    rng = np.random.default_rng(1)
    obs = _obs(model, rng, 3)
    actions = rng.normal(0.0, 1.5, (3, DIM)).astype(np.float32)
    adv = np.array([1.3, -0.7, 0.4], np.float32)
    ret = np.array([0.2, -1.1, 0.9], np.float32)
    obs_t = model.policy.obs_to_tensor(obs)[0]
    with torch.no_grad():
        _, current, _ = model.policy.evaluate_actions(obs_t, torch.as_tensor(actions))
    engine = ContinuousPerSampleGradients(model.policy, PPO_SPEC)
    for old in (None, current + torch.tensor([0.5, -0.5, 0.05])):
        grads = engine(ContinuousLossInputs(obs_t, torch.as_tensor(actions), torch.as_tensor(adv),
                                            torch.as_tensor(ret), old_log_prob=old))
        for i in range(3):
            old_i = float(current[i] if old is None else old[i])
            expected = _sb3_ppo_gradient(model, obs[i], actions[i], float(adv[i]), float(ret[i]), old_i)
            _compare(expected, {n: g[i] for n, g in grads.items()}, f"ppo-{kind}-{i}")


# --- SAC --------------------------------------------------------------------------------------------

def _sac(kind: str) -> SAC:
    torch.manual_seed(0)
    # learning_rate 0: SB3 evaluates the actor loss after the critic's step; at rate 0 that is the capture
    # critic, the one the shared gradient is defined with.
    model = SAC(POLICY[kind], _SpacesOnly(OBS[kind]()), batch_size=1, learning_starts=0, buffer_size=4,
                ent_coef=SAC_SPEC.ent_coef, gamma=SAC_SPEC.gamma, learning_rate=0.0, seed=0, device="cpu",
                policy_kwargs={**SMALL[kind], "net_arch": [16]})
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def _sb3_sac_gradient(model: SAC, obs, next_obs, action, reward: float, done: bool, seed: int) -> dict:
    buf = model.replay_buffer
    buf.pos, buf.full = 0, False
    buf.add(obs[None], next_obs[None], action[None], np.array([reward], np.float32), np.array([done]), [{}])
    grads: dict[str, torch.Tensor] = {}
    named = {id(p): n for n, p in model.policy.named_parameters()}
    originals = _recording({"actor": model.actor.optimizer, "critic": model.critic.optimizer}, named, grads)
    torch.manual_seed(seed)
    try:
        model.train(gradient_steps=1, batch_size=1)
    finally:
        for optimizer, step in originals:
            optimizer.step = step
    return grads


def _train_noise(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two standard-normal draws SAC.train makes after ``torch.manual_seed(seed)``: the actor loss's, then
    the next action's (``rsample`` draws with ``_standard_normal``)."""
    from torch.distributions.utils import _standard_normal

    torch.manual_seed(seed)
    first = _standard_normal((1, DIM), dtype=torch.float32, device=torch.device("cpu"))
    return first, _standard_normal((1, DIM), dtype=torch.float32, device=torch.device("cpu"))


@pytest.mark.parametrize("kind", ["cnn", "mlp"])
def test_sac_rows_equal_sb3_alone(kind: str) -> None:
    """Actor and critic gradients of one transition each, with the noise SAC.train drew as the truth."""
    model = _sac(kind)
    rng = np.random.default_rng(2)
    obs, next_obs = _obs(model, rng, 3), _obs(model, rng, 3)
    actions = rng.uniform(-1, 1, (3, DIM)).astype(np.float32)
    rewards = np.array([0.5, -0.01, 1.0], np.float32)
    dones = np.array([0.0, 0.0, 1.0], np.float32)
    noise, next_noise = zip(*(_train_noise(100 + i) for i in range(3)))
    obs_t, next_t = (model.policy.obs_to_tensor(o)[0] for o in (obs, next_obs))
    targets = sac_td_targets(model.policy, SAC_SPEC, next_t, rewards, dones, torch.cat(next_noise).numpy())
    engine = gradient_engine(model.policy, SAC_SPEC)
    assert not any(n.startswith("critic_target.") for n in engine.param_names)
    grads = engine(ContinuousLossInputs(obs_t, torch.as_tensor(actions), q_targets=torch.as_tensor(targets),
                                        noise=torch.cat(noise)))
    for i in range(3):
        expected = _sb3_sac_gradient(model, obs[i], next_obs[i], actions[i], float(rewards[i]), bool(dones[i]), 100 + i)
        _compare(expected, {n: g[i] for n, g in grads.items()}, f"sac-{kind}-{i}")


def test_engine_leaves_policy_untouched_and_names_errors() -> None:
    model = _sac("mlp")
    before = {n: p.detach().clone() for n, p in model.policy.named_parameters()}
    engine = ContinuousPerSampleGradients(model.policy, SAC_SPEC)
    obs_t = model.policy.obs_to_tensor(_obs(model, np.random.default_rng(0), 2))[0]
    engine(ContinuousLossInputs(obs_t, torch.zeros(2, DIM), q_targets=torch.zeros(2), noise=torch.zeros(2, DIM)))
    assert all(torch.equal(before[n], p) and p.grad is None for n, p in model.policy.named_parameters())
    with pytest.raises(ValueError, match="noise"):
        engine(ContinuousLossInputs(obs_t, torch.zeros(2, DIM), q_targets=torch.zeros(2)))
    with pytest.raises(ValueError, match=r"shape \(B, 2\)"):
        engine(ContinuousLossInputs(obs_t, torch.zeros(2), q_targets=torch.zeros(2), noise=torch.zeros(2, DIM)))


# --- the env ----------------------------------------------------------------------------------------

def test_pointnav_continuous_motion_model() -> None:
    """Full speed is one discrete step; a turn and its reverse undo each other (midpoint rule); commands are
    clipped; a non-finite command is one clear error; the look actions have no counterpart (pitch 0)."""
    import gradleak_bench  # noqa: F401  (registers the ids)

    env = gym.make("gradleak/PointNavContinuous-v0", layouts="train", image_size=16)
    try:
        assert env.action_space == spaces.Box(-1.0, 1.0, (2,), np.float32)
        assert env.spec.max_episode_steps == gym.spec("gradleak/PointNav-v0").max_episode_steps
        _, info = env.reset(seed=0)
        start = info["pose"].astype(np.float64)
        _, reward, _, _, info = env.step(np.array([3.0, 0.0], np.float32))  # clipped to full speed
        moved = np.hypot(*(info["pose"][:2] - start[:2]))
        assert info["collided"] or moved == pytest.approx(0.25, abs=1e-5)
        assert reward <= 1.0 and info["camera_pitch"] == 0.0
        before = info["pose"].astype(np.float64)
        env.step(np.array([0.6, 1.0], np.float32))
        _, _, _, _, info = env.step(np.array([-0.6, -1.0], np.float32))
        np.testing.assert_allclose(info["pose"], before, atol=1e-5)
        with pytest.raises(ValueError, match="two finite numbers"):
            env.step(np.array([np.nan, 0.0], np.float32))
    finally:
        env.close()


def test_blocked_translation_does_not_move_the_robot() -> None:
    from gradleak_bench.envs.pybullet.household import PointNavContinuousEnv

    env = PointNavContinuousEnv(layouts="train", image_size=16)
    try:
        env.reset(seed=0)
        robot = env.robot
        for _ in range(400):  # drive straight on until a wall stops the robot
            x, y, yaw = robot.x, robot.y, robot.yaw
            *_, info = env.step(np.array([1.0, 0.0], np.float32))
            if info["collided"]:
                assert (robot.x, robot.y, robot.yaw) == (x, y, yaw)
                break
        else:
            pytest.fail("the robot never met a wall")
    finally:
        env.close()


# --- victims, episodes and the closed-form attack ---------------------------------------------------

@pytest.fixture(scope="module")
def test_env():
    import gradleak_bench  # noqa: F401

    env = gym.make("gradleak/PointNavContinuous-v0", layouts="test")
    yield env
    env.close()


def _attack(victim_name: str, env, episodes: int = 2, steps: int = 5):
    from gradleak_bench import splits
    from gradleak_bench.baselines.attacks.closed_form_gaussian import ClosedFormGaussian
    from gradleak_bench.records import ObservedEpisode, VictimInfo
    from gradleak_bench.stream.replay import EpisodeGradients
    from gradleak_bench.victims.checkpoint import load_victim
    from gradleak_bench.victims.continuous_rollout import rollout

    victim = load_victim("PointNavContinuous", victim_name, "init")
    gradients = EpisodeGradients(victim.policy, victim.spec.loss, env.observation_space)
    info = VictimInfo("PointNavContinuous", victim_name, "init", victim.spec.loss, victim.policy,
                      env.observation_space, env.action_space, gradients.param_shapes, 2)
    attack = ClosedFormGaussian()
    assert attack.supports(info) is None
    for i, layout in enumerate(splits.layouts("test")[:episodes]):
        episode = rollout(victim, env, layout, seed=i, max_steps=steps)
        released = ObservedEpisode(f"k{i}", np.arange(episode.length), gradients(episode))
        yield episode, attack.reconstruct(released, info)


ACTION_TOL = 1e-4  # action units; measured max 2.4e-7 (docs/continuous-actions.md)


def test_closed_form_recovers_gaussian_ppo_actions_and_advantages(test_env) -> None:
    from gradleak_bench.metrics.continuous import action_mae

    for episode, recon in _attack("ppo_gaussian", test_env):
        truth = episode.steps["action"]
        assert truth.dtype == np.float32 and truth.shape == (episode.length, 2)
        assert not recon.extras["degenerate"].any()
        assert action_mae(recon.fields["action"], truth).max() < ACTION_TOL
        np.testing.assert_allclose(recon.extras["advantage"], episode.steps["advantage"], atol=1e-4)
        # The mean head alone (no log_std) is no answer: mu differs from the executed action.
        assert action_mae(recon.extras["mean_action"], truth).mean() > 100 * ACTION_TOL


def test_closed_form_recovers_sac_actions_from_the_critic(test_env) -> None:
    from gradleak_bench.metrics.continuous import action_mae

    for episode, recon in _attack("sac", test_env, episodes=1):
        assert {"noise", "q_target"} <= set(episode.steps)
        assert action_mae(recon.fields["action"], episode.steps["action"]).max() < ACTION_TOL


def test_closed_form_says_what_it_cannot_read() -> None:
    """A = 0 leaves only the entropy term in the gradient: no action, the step is marked degenerate."""
    from gradleak_bench.baselines.attacks.closed_form_gaussian import gaussian_advantage

    u = torch.tensor([[0.3, -0.8], [0.0, 0.0]], dtype=torch.float64)
    a = torch.tensor([1.7, 0.0], dtype=torch.float64)
    z = torch.tensor([[0.3 / 1.7, -0.8 / 1.7], [0.0, 0.0]], dtype=torch.float64)
    v = a[:, None] * (1 - z.pow(2))
    torch.testing.assert_close(gaussian_advantage(u, v)[:1], a[:1])
    assert gaussian_advantage(u, v)[1] == 0.0


def test_continuous_action_metrics_and_registry() -> None:
    import doctest

    import gradleak_bench.metrics as metrics
    from gradleak_bench.metrics import continuous

    assert doctest.testmod(continuous).failed == 0
    assert metrics.get_metric("action_mae").field == "action"
    assert [m.name for m in metrics.metrics_for_fields(["action"])] == ["action_accuracy", "action_hist_tv"]
    assert np.isnan(continuous.action_mae(np.array([[np.nan, 0.0]]), np.zeros((1, 2))))[0]
    with pytest.raises(ValueError, match=r"\(T, d\)"):
        continuous.action_cosine(np.zeros((3, 2, 1)), np.zeros((3, 2, 1)))
    np.testing.assert_allclose(continuous.action_cosine(np.array([0.5, -2.0]), np.array([1.0, 3.0])), [1.0, -1.0])


def test_the_discrete_actor_refuses_a_continuous_victim_with_one_message() -> None:
    """PolicyActor draws integer actions; a continuous victim gets a GradleakError naming its actor (the
    dataset pipeline picks ContinuousActor itself: tests/test_continuous_pipeline.py)."""
    from gradleak_bench.errors import GradleakError
    from gradleak_bench.victims.checkpoint import load_victim
    from gradleak_bench.victims.policies import PolicyActor

    with pytest.raises(GradleakError, match="continuous_rollout"):
        PolicyActor(load_victim("PointNavContinuous", "sac", "init").policy, "sac")


def test_random_actions_fit_the_box() -> None:
    """(SAC training itself is tested in tests/test_training.py.)"""
    from gradleak_bench.victims.continuous_rollout import random_action

    box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    draws = np.stack([random_action(box, np.random.default_rng(i)) for i in range(50)])
    assert draws.dtype == np.float32 and box.contains(draws[0]) and np.abs(draws).max() <= 1.0
    assert random_action(spaces.Discrete(5), np.random.default_rng(0)) == int(np.random.default_rng(0).integers(5))
