"""TRACE's configuration (its hash keys the cache), the presets, and what identifies the victim an attacker
was trained for."""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

from gradleak_bench.records import VictimInfo

FORMAT = "gradleak-bench-trace/1"
FEATURES_VERSION = 1


@dataclass(frozen=True)
class TraceConfig:
    """Everything that determines a trained TRACE attacker (its hash keys the cache)."""

    temporal: bool = True
    seq_len: int = 8
    # gradient features
    sketch_rank: int = 16
    bias_dim: int = 64
    feature_seed: int = 0
    # model
    d_model: int = 256
    layers: int = 3
    heads: int = 4
    ff: int = 512
    enc_hidden: int = 512
    img_channels: int = 16
    max_steps: int = 64
    # data (auxiliary trajectories on the train layouts)
    episodes_per_layout: int = 6
    max_episodes: int | None = None
    aux_seed: int = 1
    val_episodes: int = 12
    # the data protocol of the auxiliary episodes: the one TRACE is scored on (its ``data_protocol``), so the
    # attacker trains on windows cut from whole episodes, with whole-episode advantages, as it is tested on
    protocol: str = "trace-windows"
    # training
    epochs: int = 10
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 1e-4
    tf_fraction: float = 0.4
    ss_max: float = 0.5
    action_weight: float = 0.1
    seed: int = 0
    # the action term of a continuous (Box) victim's loss: ``mse`` on the predicted mean, or ``nll``, the
    # Gaussian negative log-likelihood with the head's predicted log-variance (docs/continuous-actions.md)
    action_loss: str = "mse"
    # -- closer to the paper (issue 17). Each is left out of the hash at its default (``to_dict``), so the
    # attackers cached before these fields existed keep their keys.
    # the gradient encoder: ``analytic`` (fixed sketches + closed-form layer inputs, then an MLP) or ``learned``
    # (per-layer bilinear sketches U^T (G/||G||) V of every layer's raw gradient, U and V trained end to end)
    encoder: str = "analytic"
    # an adaptive attacker trains on auxiliary gradients released through the run's defense (its own draws)
    adaptive: bool = False
    # paper loss: rollout_weight x the same reconstruction loss on a second, gradient-carrying pass whose
    # previous-image tokens are the model's own predictions (the scheduled-sampling pass)
    rollout_weight: float = 0.0
    # augmentation: Gaussian noise (std, in standardised units) on the gradient features while training, and a
    # random brightness scale in [1 - a, 1 + a] on the previous-image tokens
    aug_noise: float = 0.0
    aug_brightness: float = 0.0
    # the learning rate's linear warm-up, in optimiser steps; 0: one epoch. A data-size curve at fixed compute
    # (benchmarks/trace_data_curve.py) sets it, so that every data size follows the same schedule per step
    warmup_steps: int = 0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name, default in _LATER_FIELDS.items():  # defaults left out: earlier attackers keep their hash
            if out[name] == default:
                del out[name]
        return out


_LATER_FIELDS = {"action_loss": "mse", "encoder": "analytic", "adaptive": False, "rollout_weight": 0.0,
                 "aug_noise": 0.0, "aug_brightness": 0.0, "warmup_steps": 0}
ENCODERS = ("analytic", "learned")


PRESETS: dict[str, dict[str, Any]] = {
    # fast tests only: a few episodes, one tiny epoch.
    "tiny": dict(sketch_rank=4, bias_dim=8, d_model=32, layers=1, heads=2, ff=64, enc_hidden=64, img_channels=8,
                 episodes_per_layout=1, max_episodes=6, val_episodes=2, epochs=2, batch_size=4),
    # fits in <= 15 min on the 2-core CPU machine (measured: docs/trace.md), data collection included.
    "quick": dict(),
    # the published scale (latent 1024, 6 layers, sequence length 8, ~1000 steps per train scene): a GPU.
    # the published scale (latent 1024, 6 layers, sequence length 8, ~1000 steps per train scene) and the
    # paper's training: the learned full-gradient encoder; scheduled sampling whose probability of feeding the
    # model its own previous frame ramps to 0.8; the rollout term; augmentation; adaptive to the run's defense.
    # A GPU; on the CPU it runs resumably (``stop_after``), writing its learning curve as it goes.
    "paper": dict(sketch_rank=32, bias_dim=128, d_model=1024, layers=6, heads=8, ff=4096, enc_hidden=2048,
                  img_channels=64, episodes_per_layout=125, epochs=60, batch_size=64, lr=3e-4,
                  encoder="learned", adaptive=True, ss_max=0.8, tf_fraction=0.2, rollout_weight=1.0,
                  aug_noise=0.1, aug_brightness=0.1),
}



def victim_fingerprint(victim: VictimInfo) -> str:
    """sha256 of the capture parameters (names, shapes, values): which checkpoint the gradients come from."""
    digest = hashlib.sha256()
    seen = set()
    for name, p in victim.policy.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        digest.update(name.encode())
        digest.update(str(tuple(p.shape)).encode())
        digest.update(p.detach().cpu().contiguous().float().numpy().tobytes())
    return digest.hexdigest()[:16]


ACTION_LOSSES = ("mse", "nll")


def continuous_actions(victim: VictimInfo) -> bool:
    """Whether the victim acts in a ``Box`` (TRACE then regresses the action vector instead of classifying)."""
    import gymnasium as gym

    return isinstance(victim.action_space, gym.spaces.Box)


def victim_identity(victim: VictimInfo) -> dict[str, Any]:
    return {"task": victim.task, "victim": victim.victim, "checkpoint": victim.checkpoint,
            "fingerprint": victim_fingerprint(victim), "loss": victim.loss.to_dict(),
            "n_actions": int(victim.n_actions)}


def defense_identity(config: TraceConfig, auxiliary: Any) -> dict[str, Any] | None:
    """The defense an adaptive attacker trains behind (the run's, public: reference and parameters), or None
    (``adaptive=false``, or a run without a defense): part of the cache keys, since it changes the data."""
    defense = getattr(auxiliary, "defense", None)
    return defense.to_dict() if config.adaptive and defense is not None else None


def gradient_layout(victim: VictimInfo) -> dict[str, list[int]]:
    return {k: list(v) for k, v in victim.gradient_shapes.items()}


def rgb_shape(victim: VictimInfo) -> tuple[int, int]:
    """(H, W) of the truth RGB frame."""
    space = victim.observation_space
    if hasattr(space, "spaces"):
        space = space.spaces["rgb"]
    shape = tuple(space.shape)
    return (shape[0], shape[1]) if shape[-1] in (1, 3, 4) else (shape[1], shape[2])

