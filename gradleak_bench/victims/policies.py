"""Building a victim's SB3 policy and letting it act."""
from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first
from stable_baselines3.common.vec_env import VecTransposeImage

from gradleak_bench.victims.architectures import EXTRACTORS
from gradleak_bench.victims.zoo import VictimSpec


def algorithm_class(algo: str) -> type:
    from stable_baselines3 import A2C, DQN, PPO, SAC

    from gradleak_bench.victims.reinforce import Reinforce

    return {"ppo": PPO, "a2c": A2C, "dqn": DQN, "reinforce": Reinforce, "sac": SAC}[algo]


def resolve_policy_kwargs(policy_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Turn the JSON-able kwargs of a spec into SB3 kwargs (extractor names become classes)."""
    kwargs = copy.deepcopy(policy_kwargs)
    name = kwargs.pop("features_extractor", None)
    if name is not None:
        kwargs["features_extractor_class"] = EXTRACTORS[name]
    return kwargs


def policy_observation_space(space: gym.Space) -> gym.Space:
    """The observation space as SB3's policy sees it: images channel-first, as VecTransposeImage does."""
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({k: policy_observation_space(s) for k, s in space.spaces.items()})
    if is_image_space(space) and not is_image_space_channels_first(space):
        return VecTransposeImage.transpose_space(space)
    return space


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Run torch on one thread: with more, some kernels (the QR of SB3's orthogonal initialisation, conv
    reductions) sum in another order and change the last bits, and with them sampled actions and checksums."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class _NoOptimizer:
    """Stands in for the optimiser SB3's policy builder creates: evaluation never steps one, and building
    the first ``torch.optim.Adam`` of a process imports ``torch._dynamo`` (measured 2.3-3.1 s, over half the
    fixed cost of a warm ``evaluate``). It draws no random numbers, so the ``init`` weights are unchanged."""

    def __init__(self, params: Any, **_: Any):
        self.param_groups: list[dict[str, Any]] = []

    def step(self, *_: Any, **__: Any) -> None:
        raise RuntimeError("this policy was built for evaluation and has no optimiser; training builds its own")

    def zero_grad(self, set_to_none: bool = True) -> None:
        return None


def build_policy(spec: VictimSpec, spaces: tuple[gym.Space, gym.Space]) -> BasePolicy:
    """The victim's policy with its seeded ``init`` weights, in evaluation mode on the CPU; ``spaces``: its
    task's environment (observation, action) spaces (:func:`~gradleak_bench.victims.spaces.task_spaces`).

    The policy has no real optimiser (:class:`_NoOptimizer`); training builds the SB3 model, which makes its
    own, and copies these weights into it.
    """
    obs_space, action_space = spaces
    policy_cls = algorithm_class(spec.algo).policy_aliases[spec.policy]
    lr = float(spec.train.hyperparams.get("learning_rate", 3e-4))
    kwargs = {**resolve_policy_kwargs(spec.policy_kwargs), "optimizer_class": _NoOptimizer}
    with single_thread():
        torch.manual_seed(spec.init_seed)
        policy = policy_cls(policy_observation_space(obs_space), action_space, lambda _: lr, **kwargs)
    return policy.eval()


class PolicyActor:
    """Lets a victim policy act reproducibly: actions are drawn with a numpy Generator from the policy's
    probabilities (epsilon-greedy for DQN), so the same seed gives the same trajectory."""

    def __init__(self, policy: BasePolicy, algo: str, exploration_eps: float = 0.0):
        if not isinstance(policy.action_space, gym.spaces.Discrete):
            from gradleak_bench.errors import GradleakError

            raise GradleakError(
                "PolicyActor draws discrete actions; a continuous-action victim (PointNavContinuous) acts with "
                "gradleak_bench.victims.continuous_rollout.ContinuousActor (gradleak_bench.dataset.make_actor "
                "picks the right one; docs/continuous-actions.md).")
        self.policy, self.algo, self.eps = policy, algo, exploration_eps

    @torch.no_grad()
    def act(self, obs: Any, rng: np.random.Generator) -> int:
        obs_tensor, _ = self.policy.obs_to_tensor(obs)
        if self.algo == "dqn":
            u, explore = rng.random(), rng.integers(self.policy.action_space.n)
            if u < self.eps:
                return int(explore)
            return int(self.policy.q_net(obs_tensor)[0].argmax())
        return draw_action(self.policy.get_distribution(obs_tensor).distribution.probs[0].double().numpy(), rng)


def draw_action(probs: np.ndarray, rng: np.random.Generator) -> int:
    """One action drawn from ``probs`` with one uniform of ``rng`` (inverse CDF): how every discrete victim
    acts, so a seed fixes the trajectory."""
    cdf = np.cumsum(probs / probs.sum())
    return int(min(np.searchsorted(cdf, rng.random(), side="right"), len(cdf) - 1))
