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

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.action_loss == "mse":  # the default is left out, so attackers cached before it keep their hash
            del out["action_loss"]
        return out


PRESETS: dict[str, dict[str, Any]] = {
    # fast tests only: a few episodes, one tiny epoch.
    "tiny": dict(sketch_rank=4, bias_dim=8, d_model=32, layers=1, heads=2, ff=64, enc_hidden=64, img_channels=8,
                 episodes_per_layout=1, max_episodes=6, val_episodes=2, epochs=2, batch_size=4),
    # fits in <= 15 min on the 2-core CPU machine (measured: docs/trace.md), data collection included.
    "quick": dict(),
    # the published scale (latent 1024, 6 layers, sequence length 8, ~1000 steps per train scene): a GPU.
    "paper": dict(sketch_rank=32, bias_dim=128, d_model=1024, layers=6, heads=8, ff=4096, enc_hidden=2048,
                  img_channels=64, episodes_per_layout=125, epochs=60, batch_size=64, lr=3e-4),
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


def gradient_layout(victim: VictimInfo) -> dict[str, list[int]]:
    return {k: list(v) for k, v in victim.gradient_shapes.items()}


def rgb_shape(victim: VictimInfo) -> tuple[int, int]:
    """(H, W) of the truth RGB frame."""
    space = victim.observation_space
    if hasattr(space, "spaces"):
        space = space.spaces["rgb"]
    shape = tuple(space.shape)
    return (shape[0], shape[1]) if shape[-1] in (1, 3, 4) else (shape[1], shape[2])

