"""Capturing the gradient stream while SB3 learns: the per-sample gradients of the real update.

:class:`RolloutGradientCallback` is an SB3 callback. At each rollout end, before ``train()`` changes any
parameter, it computes the per-sample gradient of every step in the rollout buffer at the current
parameters (PPO's ratio is 1 there) with the same engine as every other stream in the benchmark, and hands
the records to ``on_records``. For A2C (one batch per rollout) and for PPO with ``batch_size`` equal to the
rollout size, the mean of these per-sample gradients *is* the first gradient SB3 applies (tested); with
smaller PPO minibatches, SB3 normalises advantages per random minibatch, and the captured stream uses the
normalisation over the whole rollout instead.

Example:
    >>> from stable_baselines3 import A2C
    >>> records = []
    >>> model = A2C("MlpPolicy", "CartPole-v1", n_steps=4, seed=0)
    >>> _ = model.learn(8, callback=RolloutGradientCallback(records.extend))
    >>> len(records), records[0].gradient["action_net.weight"].shape
    (8, torch.Size([2, 64]))
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback

from gradleak_bench.records import LossSpec, StepRecord
from gradleak_bench.stream.inputs import rollout_inputs
from gradleak_bench.stream.per_sample import PerSampleGradients


def loss_spec_of(model: BaseAlgorithm) -> LossSpec:
    """The :class:`LossSpec` of an on-policy SB3 model's current hyper-parameters.

    A model whose class declares ``loss_algo`` (the project's ``Reinforce``) is taken at its word; otherwise
    PPO and A2C by class."""
    from stable_baselines3 import A2C, PPO

    if not isinstance(model, (PPO, A2C)):
        raise TypeError(f"live capture supports on-policy SB3 models (PPO, A2C, REINFORCE), not {type(model).__name__}")
    algo = getattr(model, "loss_algo", None) or ("ppo" if isinstance(model, PPO) else "a2c")
    if getattr(model, "baseline", "none") != "none":
        # Its update weights log pi by G - V(s); the stream's REINFORCE loss weights it by G: the captured
        # gradient would not be the one the model shares.
        raise TypeError(f"live capture of a REINFORCE model trained with a learned baseline "
                        f"(baseline={model.baseline!r}) is not supported: the stream computes plain REINFORCE. "
                        "Capture a model built with baseline='none'.")
    if algo == "reinforce" and getattr(model, "normalize_advantage", False):
        # Its update standardises the batch's returns; the stream's REINFORCE loss weights log pi by G itself.
        raise TypeError("live capture of a REINFORCE model trained with normalize_advantage=True is not "
                        "supported: the stream computes plain REINFORCE. Capture a model built with "
                        "normalize_advantage=False.")
    clip = model.clip_range(model._current_progress_remaining) if algo == "ppo" else 0.2
    normalise = "episode" if getattr(model, "normalize_advantage", False) else "none"
    return LossSpec(algo=algo, gamma=model.gamma, gae_lambda=model.gae_lambda, ent_coef=float(model.ent_coef),
                    vf_coef=float(model.vf_coef), clip_range=float(clip), advantage_normalization=normalise)


class RolloutGradientCallback(BaseCallback):
    """Emits the per-sample gradients of every rollout step at rollout end.

    Args:
        on_records: called once per rollout with its :class:`StepRecord` list, in (step, env) order.
    """

    def __init__(self, on_records: Callable[[list[StepRecord]], None], verbose: int = 0):
        super().__init__(verbose)
        self.on_records = on_records
        self.rollouts = 0

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        buffer = self.model.rollout_buffer
        inputs = rollout_inputs(self.model)
        grads = PerSampleGradients(self.model.policy, loss_spec_of(self.model))(inputs)
        values = buffer.swap_and_flatten(buffer.values).reshape(inputs.batch_size)
        truth = {"action": inputs.actions.numpy(), "advantage": inputs.advantages.numpy(),
                 "return": inputs.returns.numpy(), "value": values, "log_prob": inputs.old_log_prob.numpy()}
        steps_per_env = buffer.buffer_size
        records = [
            StepRecord(episode_id=f"rollout-{self.rollouts:05d}-env{i // steps_per_env}", t=i % steps_per_env,
                       gradient={k: v[i] for k, v in grads.items()},
                       truth={k: np.asarray(v[i]) for k, v in truth.items()})
            for i in range(inputs.batch_size)
        ]
        self.rollouts += 1
        self.on_records(records)
