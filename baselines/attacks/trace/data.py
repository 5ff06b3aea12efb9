"""TRACE's training data: auxiliary episodes the attacker collects itself (train and val layouts, never the
held-out split), reduced to fixed gradient features once and cached with the plug-in API's
:class:`~gradleak_bench.artifacts.ArtifactCache`."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gradleak_bench.artifacts import ArtifactCache
from gradleak_bench.baselines.attacks.trace.config import FEATURES_VERSION, TraceConfig


@dataclass
class TraceData:
    feats: torch.Tensor    # (N, T, F) float32, zero-padded
    images: torch.Tensor   # (N, T, H, W, 3) uint8
    actions: torch.Tensor  # (N, T) int64, -1 where padded; continuous: (N, T, d) float32, 0 where padded
    lengths: torch.Tensor  # (N,) int64

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"feats": self.feats, "images": self.images, "actions": self.actions, "lengths": self.lengths}


def stack(items: list[tuple[torch.Tensor, np.ndarray, np.ndarray]], T: int) -> TraceData:
    n, F_ = len(items), items[0][0].shape[1]
    H, W = items[0][1].shape[1:3]
    feats = torch.zeros(n, T, F_, dtype=items[0][0].dtype)
    images = torch.zeros(n, T, H, W, 3, dtype=torch.uint8)
    first = np.asarray(items[0][2])
    actions = (torch.zeros((n, T, first.shape[1]), dtype=torch.float32) if first.ndim == 2 else
               torch.full((n, T), -1, dtype=torch.long))
    lengths = torch.zeros(n, dtype=torch.long)
    for i, (f, rgb, act) in enumerate(items):
        k = f.shape[0]
        feats[i, :k], images[i, :k] = f, torch.as_tensor(rgb)
        actions[i, :k], lengths[i] = torch.as_tensor(np.asarray(act)).to(actions.dtype), k
    return TraceData(feats, images, actions, lengths)


def to_unit(images: torch.Tensor) -> torch.Tensor:  # (..., H, W, 3) uint8 -> (..., 3, H, W) float
    return images.movedim(-1, -3).float() / 255.0


def psnr(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    mse = (a - b).pow(2).flatten(-3).mean(-1)
    return 10 * torch.log10(1.0 / mse.clamp(min=1e-10))



def feature_cache(config: TraceConfig, identity: Mapping[str, Any], layout: Mapping[str, Any],
                  defense: Mapping[str, Any] | None = None) -> ArtifactCache:
    """Where the features of this configuration's auxiliary episodes are cached: everything that determines
    them (featuriser, episodes, protocol, victim, gradient layout, the defense an adaptive attacker releases
    them through) is in the key; the model's settings are not, so ablations and longer trainings share one
    collection. (The encoder and the defense enter the key only when set, so the keys of earlier
    collections are unchanged.)"""
    c = config
    return ArtifactCache("trace-features", {
        "features": FEATURES_VERSION, "rank": c.sketch_rank, "bias_dim": c.bias_dim, "feature_seed": c.feature_seed,
        "episodes_per_layout": c.episodes_per_layout, "max_episodes": c.max_episodes,
        "val_episodes": c.val_episodes, "aux_seed": c.aux_seed, "protocol": c.protocol, "victim": dict(identity),
        "gradient_layout": dict(layout),
        **({"encoder": c.encoder} if c.encoder != "analytic" else {}),
        **({"defense": dict(defense)} if defense is not None else {})})


# the learned encoder keeps every step's raw gradient (float16) in memory while it trains: refuse to collect
# more than this rather than exhaust a shared machine's memory
MAX_RAW_BYTES = 8 * 2**30


def collect(config: TraceConfig, auxiliary: Any, featurizer: torch.nn.Module, cache: ArtifactCache,
            progress: bool = False, desc: str = "trace") -> tuple[TraceData, TraceData]:
    """(train, val) features, frames and actions: read from ``cache`` or collected with
    ``auxiliary.collect`` on ``config.protocol`` (released through the run's defense when the attacker is
    adaptive and the run has one) and cached."""
    from gradleak_bench.progress import progress as tqdm

    from gradleak_bench.baselines.attacks.trace.config import defense_identity
    from gradleak_bench.errors import GradleakError

    defended = defense_identity(config, auxiliary) is not None

    out = []
    for split, per_layout, limit in (("train", config.episodes_per_layout, config.max_episodes),
                                     ("val", 1, config.val_episodes)):
        if cache.exists(split):
            out.append(TraceData(**cache.load_tensors(split)[0]))
            continue
        items, held = [], 0
        stream = auxiliary.collect(episodes_per_layout=per_layout, seed=config.aux_seed, split=split,
                                   max_episodes=limit, protocol=config.protocol,
                                   **({"defended": True} if defended else {}))
        for episode, grads in tqdm(stream, desc=f"{desc}: collect {split} episodes + features",
                                   disable=not progress, total=limit):
            items.append((featurizer(grads.tensors), episode.steps["rgb"], episode.steps["action"]))
            held += items[-1][0].numel() * items[-1][0].element_size()
            if held > MAX_RAW_BYTES:
                raise GradleakError(
                    f"{desc}: the {split} features of {len(items)} episodes already take {held / 2**30:.1f} GiB "
                    f"(encoder={config.encoder} keeps each step's whole gradient): train on fewer episodes "
                    "(-A max_episodes=N or -A episodes_per_layout=N) or use -A encoder=analytic")
        data = stack(items, max(f.shape[0] for f, _, _ in items))
        cache.save_tensors(split, data.tensors(), {"split": split, "protocol": config.protocol})
        out.append(data)
    return out[0], out[1]
