"""The victim's network, split where inversion attacks need it (features, then the head), and the per-frame
objectives whose gradient an attack matches: the victim's own loss, or QGI/RGI's objective-agnostic surrogate."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gradleak_bench.records import VictimInfo


class VictimNet:
    """Forward passes of an SB3 policy: features (the input of the linear layers), and from features to
    the outputs that enter the loss (Q-values, or logits and value)."""

    def __init__(self, victim: VictimInfo):
        self.victim = victim
        self.policy = victim.policy
        self.algo = victim.loss.algo
        for p in self.policy.parameters():  # our own copy: no weight gradients needed
            p.requires_grad_(False)
        self.dqn = self.algo == "dqn"
        self.extractor = self.policy.q_net.features_extractor if self.dqn else self.policy.features_extractor
        if not self.dqn and not getattr(self.policy, "share_features_extractor", True):
            raise ValueError("separate actor/critic feature extractors are not supported")

    def features(self, obs: Any) -> torch.Tensor:
        if self.dqn:
            return self.policy.q_net.extract_features(obs, self.extractor)
        return self.policy.extract_features(obs)

    def head(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(Q-values or logits, value or None)."""
        if self.dqn:
            return self.policy.q_net.q_net(features), None
        latent_pi, latent_vf = self.policy.mlp_extractor(features)
        return self.policy.action_net(latent_pi), self.policy.value_net(latent_vf).flatten()

    def head_names(self) -> tuple[str, ...]:
        """Trained parameters after the features (the linear layers QGI/RGI's stage 1 matches)."""
        prefix = self.extractor_prefix()
        return tuple(n for n in self.victim.gradient_shapes if not n.startswith(prefix)
                     and not n.startswith(("pi_features_extractor.", "vf_features_extractor.")))

    def extractor_prefix(self) -> str:
        return "q_net.features_extractor." if self.dqn else "features_extractor."

    def linear_keys(self) -> list[str]:
        """Dict keys whose extractor has no convolution (SB3's ``nn.Flatten``, or a vector's linear layers as in
        the QGI/RGI paper's network): the vector state the two-stage attacks recover in stage 1, through the
        linear layers, as the paper does."""
        ext = self.extractor
        if not hasattr(ext, "extractors"):
            return []
        return [key for key, sub in ext.extractors.items()
                if not any(isinstance(m, nn.modules.conv._ConvNd) for m in sub.modules())]

    def stage1_names(self) -> tuple[str, ...]:
        """The linear layers' parameters: the head's (:meth:`head_names`) and those of the vector keys' own
        linear layers (none for SB3's ``nn.Flatten``)."""
        branches = tuple(f"{self.extractor_prefix()}extractors.{key}." for key in self.linear_keys())
        own = tuple(n for n in self.victim.gradient_shapes if n.startswith(branches)) if branches else ()
        return own + self.head_names()

    def first_linear(self, key: str) -> tuple[str, str] | None:
        """(weight, bias) names of the first linear layer inside ``key``'s extractor, None for ``nn.Flatten``."""
        for name, module in self.extractor.extractors[key].named_modules():
            if isinstance(module, nn.Linear):
                prefix = f"{self.extractor_prefix()}extractors.{key}.{name}."
                return prefix + "weight", prefix + "bias"
        return None

    def feature_slices(self) -> dict[str, slice]:
        """Where each Dict key's extractor output sits in the features (CombinedExtractor concatenates)."""
        ext = self.extractor
        if not hasattr(ext, "extractors"):
            return {}
        out, start = {}, 0
        for key, sub in ext.extractors.items():
            if isinstance(sub, nn.Flatten):
                size = int(np.prod(self.policy.observation_space[key].shape))
            else:
                size = int(sub.features_dim)
            out[key] = slice(start, start + size)
            start += size
        return out


# --- objectives (per frame, summed over the batch by the matcher) --------------------------------------

def surrogate_objective(net: VictimNet, error: torch.Tensor, value_error: torch.Tensor | None):
    """QGI/RGI's objective-agnostic surrogate: <grad_b J, F(x)> (+ the value head's, for actor-critics)."""
    def objective(features: torch.Tensor) -> torch.Tensor:
        out, value = net.head(features)
        j = (error * out).sum(dim=1)
        if value is not None and value_error is not None:
            j = j + value_error * value
        return j
    return objective


def original_objective(net: VictimNet, action: torch.Tensor, targets: Mapping[str, torch.Tensor]):
    """The victim's own loss per frame (as in gradleak_bench.stream.per_sample). ``action`` is (B,) int64 or
    a (B, n_actions) soft label (DLG); ``targets`` hold ``q_target`` (DQN), ``return`` (REINFORCE, A2C/PPO
    value target) and ``advantage`` (A2C/PPO)."""
    spec = net.victim.loss

    def select(values: torch.Tensor) -> torch.Tensor:
        if action.ndim == 2:
            return (values * action).sum(dim=1)
        return values.gather(1, action.reshape(-1, 1)).flatten()

    def objective(features: torch.Tensor) -> torch.Tensor:
        out, value = net.head(features)
        if net.dqn:
            return F.smooth_l1_loss(select(out), targets["q_target"], reduction="none")
        log_pi = torch.log_softmax(out, dim=1)
        log_prob = select(log_pi)
        entropy = -(log_pi.exp() * log_pi).sum(dim=1)
        if spec.algo == "reinforce":
            return -(targets["return"] * log_prob) - spec.ent_coef * entropy
        # A2C, and PPO at ratio 1 (the clipped ratio has the gradient of -A log pi there)
        return (-(targets["advantage"] * log_prob) - spec.ent_coef * entropy
                + spec.vf_coef * (targets["return"] - value) ** 2)
    return objective


def objective_scalars(algo: str) -> tuple[str, ...]:
    """Unknown scalar targets of the original loss, optimised jointly by the baselines."""
    return {"dqn": ("q_target",), "reinforce": ("return",)}.get(algo, ("advantage", "return"))
