"""TRACE: the learned temporal attack that rebuilds frames and actions from an ordered gradient stream.

TRACE (Temporal Reconstruction Attack on Consecutive Encodings, Bhujel et al.; ../shared/papers/) is an
amortised attack: a network trained on auxiliary trajectories maps the per-step gradients of an episode to
its RGB frames and actions, autoregressively. This implementation uses only the public plug-in API:
``fit(victim, auxiliary)`` collects train-layout episodes with ``auxiliary.collect(...)`` (the threat
model's auxiliary trajectories, never the held-out split) and ``reconstruct(episode, victim)`` sees only the
released gradients. See docs/trace.md for the architecture, the presets and measured results.

Pipeline, per step t of an episode:

1. **Gradient features (fixed, no training).** For every weight gradient G (out x in; conv kernels
   flattened to out x in*k*k) a factorised sketch ``U^T (G/||G||) V`` with fixed Gaussian U, V (rank r,
   seeded) plus ``log ||G||``; for every bias gradient its normalised entries (or a fixed projection when
   long); and for every Linear layer with a bias the *closed-form layer input* ``z = G^T b / ||b||^2``:
   for one sample ``G = delta z^T`` and ``b = delta``, so this recovers the layer's input exactly (the
   NatureCNN's 1024 conv features, the policy head's 512 hidden features) and degrades gracefully when a
   defense perturbs G. The features are cheap (one pass per episode) and cached, so the learned part
   trains on a CPU.
2. **Gradient encoder (learned):** standardised features -> MLP -> a ``d_model`` gradient token.
3. **Interleaved causal sequence:** ``[START, g_1, p_2, g_2, ..., p_t, g_t]`` where ``g_s`` is the
   gradient token of step s and ``p_s`` the token of the attacker's own reconstruction of frame s-1 (a small
   CNN encoder), with a learned start token, type embeddings (start / gradient / image) and step
   embeddings. A causal transformer reads frame t at ``g_t``: it sees gradients up to t only.
4. **Decoders:** a transposed-conv image decoder (sigmoid RGB) and a linear action classifier.

``seq_len`` L is the *context window*: frame t sees the gradients of steps t-L+1..t and the attacker's own
reconstructions of the frames inside that window before t (L=1: one gradient, no previous image). With
L >= the episode length the window is the whole prefix. ``temporal=False`` (``trace_no_temporal``)
replaces steps 3 by an MLP on the single gradient token: a Learning-to-Invert-style single-frame learned
inversion with the same features, decoders, data and budget.

Training: teacher forcing (previous-image tokens from the true frames) for ``tf_fraction`` of the epochs,
then scheduled sampling (the parallel two-pass form: a no-grad teacher-forced pass predicts every frame,
then each previous-image token is replaced by the prediction with a probability that ramps to
``ss_max``). Loss: MSE + L1 on [0, 1] RGB + ``action_weight`` x cross-entropy on the action.

Weights are safetensors + JSON metadata, cached under ``<cache>/attackers/trace-<config hash>/``; training
checkpoints every epoch (model and optimiser state, safetensors + JSON) and resumes
exactly. A cached or given (``weights=``) attacker trained for another victim, task, checkpoint or gradient
layout is refused with a :class:`~gradleak_bench.errors.GradleakError`.
"""
from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import safetensors.torch
import torch
import torch.nn.functional as F
from torch import nn

from gradleak_bench.errors import CorruptFileError, GradleakError
from gradleak_bench.paths import atomic_write_bytes, cache_dir
from gradleak_bench.records import ObservedEpisode, Reconstruction, VictimInfo

FORMAT = "gradleak-bench-trace/1"
FEATURES_VERSION = 1


# --- configuration ---------------------------------------------------------------------------------------

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
    # training
    epochs: int = 10
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 1e-4
    tf_fraction: float = 0.4
    ss_max: float = 0.5
    action_weight: float = 0.1
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def config_hash(blob: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


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


# --- 1. fixed gradient features --------------------------------------------------------------------------

class GradientFeaturizer(nn.Module):
    """Fixed per-step features of a gradient stream (see the module docstring). The projection matrices are
    buffers, so they travel inside the attacker's safetensors file."""

    def __init__(self, shapes: Mapping[str, tuple[int, ...]], rank: int, bias_dim: int, seed: int):
        super().__init__()
        self.names = list(shapes)
        gen = torch.Generator().manual_seed(seed)
        self.matrices: list[tuple[str, str, int, int]] = []  # (param, buffer prefix, out, in)
        self.vectors: list[tuple[str, str, int]] = []
        self.linear_inputs: list[tuple[str, str]] = []  # (weight, bias) of Linear layers with a bias
        dim = 0
        for i, (name, shape) in enumerate(shapes.items()):
            shape = tuple(shape)
            if len(shape) >= 2:
                out, inp = shape[0], int(np.prod(shape[1:]))
                ro, ri = min(rank, out), min(rank, inp)
                self.register_buffer(f"u{i}", torch.randn(out, ro, generator=gen) / math.sqrt(ro) if out > rank
                                     else torch.eye(out))
                self.register_buffer(f"v{i}", torch.randn(inp, ri, generator=gen) / math.sqrt(ri) if inp > rank
                                     else torch.eye(inp))
                self.matrices.append((name, str(i), out, inp))
                dim += ro * ri + 1
                bias = name[: -len("weight")] + "bias" if name.endswith("weight") else None
                if len(shape) == 2 and bias in shapes:
                    self.linear_inputs.append((name, bias))
                    dim += inp
            else:
                n = int(np.prod(shape))
                if n > bias_dim:
                    self.register_buffer(f"p{i}", torch.randn(n, bias_dim, generator=gen) / math.sqrt(bias_dim))
                self.vectors.append((name, str(i), n))
                dim += min(n, bias_dim) + 1
        self.dim = dim

    @torch.no_grad()
    def forward(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``tensors[name]`` (T, *shape) -> features (T, dim) float32."""
        eps = 1e-12
        device = next(self.buffers()).device
        tensors = {k: v.to(device) for k, v in tensors.items()}
        parts = []
        for name, i, out, inp in self.matrices:
            g = tensors[name].reshape(-1, out, inp).float()
            norm = g.flatten(1).norm(dim=1)
            u, v = getattr(self, f"u{i}"), getattr(self, f"v{i}")
            sketch = u.T @ (g @ v) if inp >= out else (u.T @ g) @ v  # (T, ro, ri), the cheaper order
            parts.append((sketch / (norm[:, None, None] + eps)).flatten(1))
            parts.append(torch.log(norm + 1e-20)[:, None])
        for name, i, n in self.vectors:
            b = tensors[name].float().reshape(-1, n)
            norm = b.norm(dim=1)
            bn = b / (norm[:, None] + eps)
            if hasattr(self, f"p{i}"):
                bn = bn @ getattr(self, f"p{i}")
            parts.append(bn)
            parts.append(torch.log(norm + 1e-20)[:, None])
        for weight, bias in self.linear_inputs:
            g, b = tensors[weight].float(), tensors[bias].float()
            # one sample: G = b z^T, so z = G^T b / ||b||^2 exactly
            z = (b[:, None, :] @ g)[:, 0] / (b.pow(2).sum(dim=1, keepdim=True) + 1e-20)
            parts.append(z)
        return torch.cat(parts, dim=1)


# --- 2-4. the learned model ------------------------------------------------------------------------------

class ImageEncoder(nn.Module):
    def __init__(self, d: int, c: int, size: tuple[int, int]):
        super().__init__()
        # previous frames are seen at <= 32x32: they are context, not the target, and this halves the cost
        self.net = nn.Sequential(
            nn.AdaptiveAvgPool2d((min(size[0], 32), min(size[1], 32))),
            nn.Conv2d(3, c, 4, 2, 1), nn.GELU(), nn.Conv2d(c, 2 * c, 4, 2, 1), nn.GELU(),
            nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(2 * c * 16, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, 3, H, W) in [0, 1]
        return self.net(x)


class ImageDecoder(nn.Module):
    def __init__(self, d: int, c: int, size: tuple[int, int]):
        super().__init__()
        self.size = size
        self.base = (math.ceil(size[0] / 8), math.ceil(size[1] / 8))
        self.c = c
        self.fc = nn.Linear(d, 4 * c * self.base[0] * self.base[1])
        self.net = nn.Sequential(
            nn.GELU(), nn.ConvTranspose2d(4 * c, 2 * c, 4, 2, 1), nn.GELU(),
            nn.ConvTranspose2d(2 * c, c, 4, 2, 1), nn.GELU(), nn.ConvTranspose2d(c, c, 4, 2, 1), nn.GELU(),
            nn.Conv2d(c, 3, 3, 1, 1))

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (N, d) -> (N, 3, H, W) in [0, 1]
        x = self.fc(h).reshape(-1, 4 * self.c, *self.base)
        x = self.net(x)
        if tuple(x.shape[-2:]) != self.size:
            x = x[..., : self.size[0], : self.size[1]]
        return torch.sigmoid(x)


class Block(nn.Module):
    """Pre-norm transformer block; causal self-attention with an optional key/value cache (generation)."""

    def __init__(self, d: int, heads: int, ff: int):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))

    def forward(self, x: torch.Tensor, cache: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        B, n, d = x.shape
        q, k, v = self.qkv(self.n1(x)).reshape(B, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        m = k.shape[2] - n  # cached tokens before these queries
        mask = torch.ones(n, m + n, dtype=torch.bool, device=x.device).tril(diagonal=m)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(att.transpose(1, 2).reshape(B, n, d))
        return x + self.ff(self.n2(x))


class CausalTransformer(nn.Module):
    def __init__(self, d: int, heads: int, ff: int, layers: int):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d, heads, ff) for _ in range(layers))

    def forward(self, x: torch.Tensor, caches: list[dict[str, torch.Tensor]] | None = None) -> torch.Tensor:
        for i, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[i])
        return x


class TraceNet(nn.Module):
    """Gradient encoder, interleaved causal transformer (or, ``temporal=False``, an MLP), decoders."""

    START, GRAD, IMAGE = 0, 1, 2

    def __init__(self, cfg: TraceConfig, featurizer: GradientFeaturizer, n_actions: int, size: tuple[int, int]):
        super().__init__()
        self.cfg, self.size = cfg, size
        self.featurizer = featurizer
        d = cfg.d_model
        self.register_buffer("feat_mean", torch.zeros(featurizer.dim))
        self.register_buffer("feat_std", torch.ones(featurizer.dim))
        # the last step index seen in training: later steps of a longer stream reuse its embedding
        self.register_buffer("step_cap", torch.tensor(cfg.max_steps - 1))
        self.grad_enc = nn.Sequential(nn.Linear(featurizer.dim, cfg.enc_hidden), nn.GELU(),
                                      nn.Linear(cfg.enc_hidden, d), nn.LayerNorm(d))
        if cfg.temporal:
            self.img_enc = ImageEncoder(d, cfg.img_channels, size)
            self.start = nn.Parameter(torch.randn(d) * 0.02)
            self.type_emb = nn.Embedding(3, d)
            self.step_emb = nn.Embedding(cfg.max_steps, d)
            self.transformer = CausalTransformer(d, cfg.heads, cfg.ff, cfg.layers)
            self.out_norm = nn.LayerNorm(d)
        else:
            blocks: list[nn.Module] = []
            for _ in range(cfg.layers):
                blocks += [nn.Linear(d, cfg.ff), nn.GELU(), nn.Linear(cfg.ff, d), nn.GELU()]
            self.mlp = nn.Sequential(*blocks, nn.LayerNorm(d))
        self.img_dec = ImageDecoder(d, cfg.img_channels, size)
        self.act_dec = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, n_actions))

    # features -> gradient tokens
    def grad_tokens(self, feats: torch.Tensor) -> torch.Tensor:
        x = ((feats - self.feat_mean) / self.feat_std).clamp(-10, 10)
        return self.grad_enc(x)

    def _steps(self, T: int, device: torch.device) -> torch.Tensor:
        return self.step_emb(torch.arange(T, device=device).clamp(max=int(self.step_cap)))

    def window_index(self, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Token indices of frame t's context into the bank ``[START, g_0..g_{T-1}, p_0..p_{T-1}]`` (p_s holds
        frame s-1): ``[START, g_a, p_{a+1}, g_{a+1}, ..., p_t, g_t]`` with a = max(0, t-L+1), right-padded;
        and the position of g_t in each row."""
        L = self.cfg.seq_len
        width = 2 * min(L, T)
        idx = torch.zeros(T, width, dtype=torch.long)
        last = torch.zeros(T, dtype=torch.long)
        for t in range(T):
            a = max(0, t - L + 1)
            row = [0, 1 + a]
            for s in range(a + 1, t + 1):
                row += [1 + T + s, 1 + s]
            idx[t, : len(row)] = torch.tensor(row)
            last[t] = len(row) - 1
        return idx, last

    def latent(self, gtok: torch.Tensor, prev: torch.Tensor | None) -> torch.Tensor:
        """Latent of every frame (B, T, d) from gradient tokens (B, T, d) and previous images (B, T, 3, H, W)
        (``prev[:, t]`` is frame t-1 as the attacker knows it; ``prev[:, 0]`` is ignored)."""
        if not self.cfg.temporal:
            return self.mlp(gtok)
        B, T, d = gtok.shape
        dev = gtok.device
        steps = self._steps(T, dev)
        g = gtok + self.type_emb.weight[self.GRAD] + steps
        p = torch.zeros_like(g)
        if T > 1:
            p[:, 1:] = self.img_enc(prev[:, 1:].flatten(0, 1)).reshape(B, T - 1, d)
        p = p + self.type_emb.weight[self.IMAGE] + steps
        start = (self.start + self.type_emb.weight[self.START]).expand(B, 1, d)
        if self.cfg.seq_len >= T:  # one causal pass over the whole prefix
            seq = torch.stack([p, g], dim=2).flatten(1, 2)[:, 1:]  # g_0, p_1, g_1, ..., p_{T-1}, g_{T-1}
            seq = torch.cat([start, seq], dim=1)
            out = self.transformer(seq)
            return self.out_norm(out[:, 1::2])
        bank = torch.cat([start, g, p], dim=1)
        idx, last = self.window_index(T)
        seq = bank[:, idx.to(dev)].flatten(0, 1)  # (B*T, width, d)
        out = self.transformer(seq)
        out = out.reshape(B, T, -1, d).gather(2, last.to(dev)[None, :, None, None].expand(B, T, 1, d))[:, :, 0]
        return self.out_norm(out)

    def decode(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lead = h.shape[:-1]
        img = self.img_dec(h.reshape(-1, h.shape[-1])).reshape(*lead, 3, *self.size)
        return img, self.act_dec(h)

    def forward(self, feats: torch.Tensor, prev: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.decode(self.latent(self.grad_tokens(feats), prev))

    @torch.no_grad()
    def generate(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Autoregressive reconstruction of one episode: feats (T, F) -> images (T, 3, H, W), logits (T, A).
        Frame t is decoded from the gradients up to t and the attacker's own frames before t."""
        T = feats.shape[0]
        gtok = self.grad_tokens(feats)[None]
        if not self.cfg.temporal:
            return tuple(x[0] for x in self.decode(self.mlp(gtok)))
        d = gtok.shape[-1]
        steps = self._steps(T, gtok.device)
        g = gtok + self.type_emb.weight[self.GRAD] + steps
        p = torch.zeros_like(g) + self.type_emb.weight[self.IMAGE] + steps
        start = (self.start + self.type_emb.weight[self.START]).expand(1, 1, d)
        full = self.cfg.seq_len >= T
        caches: list[dict[str, torch.Tensor]] = [{} for _ in range(self.cfg.layers)]
        idx, last = self.window_index(T)
        images, logits = [], []
        for t in range(T):
            if t > 0:
                p[:, t] = self.img_enc(images[-1][None])[0] + self.type_emb.weight[self.IMAGE] + steps[t]
            if full:  # the prefix grows by [p_t, g_t]: reuse the keys and values of the earlier tokens
                new = torch.cat([start, g[:, :1]], dim=1) if t == 0 else torch.stack([p[:, t], g[:, t]], dim=1)
                out = self.transformer(new, caches)
            else:  # a sliding window: frame t's context is a sequence of its own
                seq = torch.cat([start, g, p], dim=1)[:, idx[t, : last[t] + 1].to(g.device)]
                out = self.transformer(seq)
            img, logit = self.decode(self.out_norm(out[:, -1]))
            images.append(img[0])
            logits.append(logit[0])
        return torch.stack(images), torch.stack(logits)


# --- data ------------------------------------------------------------------------------------------------

@dataclass
class TraceData:
    feats: torch.Tensor    # (N, T, F) float32, zero-padded
    images: torch.Tensor   # (N, T, H, W, 3) uint8
    actions: torch.Tensor  # (N, T) int64, -1 where padded
    lengths: torch.Tensor  # (N,) int64

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"feats": self.feats, "images": self.images, "actions": self.actions, "lengths": self.lengths}


def _stack(items: list[tuple[torch.Tensor, np.ndarray, np.ndarray]], T: int) -> TraceData:
    n, F_ = len(items), items[0][0].shape[1]
    H, W = items[0][1].shape[1:3]
    feats = torch.zeros(n, T, F_)
    images = torch.zeros(n, T, H, W, 3, dtype=torch.uint8)
    actions = torch.full((n, T), -1, dtype=torch.long)
    lengths = torch.zeros(n, dtype=torch.long)
    for i, (f, rgb, act) in enumerate(items):
        k = f.shape[0]
        feats[i, :k], images[i, :k] = f, torch.as_tensor(rgb)
        actions[i, :k], lengths[i] = torch.as_tensor(act), k
    return TraceData(feats, images, actions, lengths)


def _to_unit(images: torch.Tensor) -> torch.Tensor:  # (..., H, W, 3) uint8 -> (..., 3, H, W) float
    return images.movedim(-1, -3).float() / 255.0


def psnr(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    mse = (a - b).pow(2).flatten(-3).mean(-1)
    return 10 * torch.log10(1.0 / mse.clamp(min=1e-10))


# --- the attack ------------------------------------------------------------------------------------------

class TRACE:
    """TRACE: gradient encoder + interleaved causal transformer + image / action decoders, trained on
    auxiliary train-layout episodes (see the module docstring and docs/trace.md).

    Args:
        preset: ``quick`` (fits on a 2-core CPU in <= 15 min), ``paper`` (the published scale, a GPU) or
            ``tiny`` (tests).
        weights: path to a trained attacker's ``.safetensors`` (its ``.json`` beside it); it is checked
            against the victim (task, checkpoint fingerprint, loss, gradient layout) and refused on mismatch.
        train: ``auto`` (load the cached attacker of this config, else train and cache it, saying so),
            ``never`` (refuse to train: error if nothing is cached) or ``force`` (retrain).
        device: ``cpu``, ``cuda`` or ``auto``.
        progress: show a tqdm bar while collecting and training.
        stop_after: stop training after this many epochs *in this call* (a checkpoint is written; the next
            call resumes). For time-boxed runs and tests.
        **overrides: any :class:`TraceConfig` field (``epochs=20``, ``seq_len=4``, ``d_model=128``, ...).
    """

    name: ClassVar[str] = "trace"
    fields: ClassVar[tuple[str, ...]] = ("rgb", "action")
    defaults: ClassVar[dict[str, Any]] = {}
    # The public TRACE code's data: windows cut from whole episodes, advantages from whole-episode GAE
    # (docs/tasks.md, "Data protocols"). Inherited by the ablations; `evaluate --protocol first8` overrides.
    data_protocol: ClassVar[str] = "trace-windows"

    def __init__(self, preset: str = "quick", weights: str | None = None, train: str = "auto",
                 device: str = "cpu", progress: bool = True, stop_after: int | None = None, **overrides: Any):
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
        if train not in ("auto", "never", "force"):
            raise ValueError(f"train must be 'auto', 'never' or 'force', not {train!r}")
        known = {f.name for f in fields(TraceConfig)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown TRACE parameter(s) {sorted(unknown)}; known: {sorted(known)}")
        values = {**PRESETS[preset], **self.defaults, **overrides}
        self.config = replace(TraceConfig(), **values)
        if self.config.seq_len < 1:
            raise ValueError("seq_len must be >= 1")
        self.preset, self.weights, self.train, self.progress, self.stop_after = preset, weights, train, progress, stop_after
        self.device = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                                   ("cpu" if device == "auto" else device))
        self.model: TraceNet | None = None
        self.meta: dict[str, Any] = {}
        self.path: Path | None = None

    # -- plug-in hooks --

    def supports(self, victim: VictimInfo) -> str | None:
        try:
            rgb_shape(victim)
        except (KeyError, AttributeError, IndexError):
            return "TRACE reconstructs RGB frames and this victim observes none"
        return None

    def fit(self, victim: VictimInfo, auxiliary: Any) -> None:
        identity, layout = victim_identity(victim), gradient_layout(victim)
        if self.weights is not None:
            self._load(Path(self.weights), identity, layout, expected_hash=None)
            return
        key = self.cache_key(identity, layout)
        directory = cache_dir() / "attackers" / f"trace-{key}"
        final = directory / "model.safetensors"
        if final.is_file() and self.train != "force":
            self._load(final, identity, layout, expected_hash=key)
            return
        if self.train == "never":
            raise GradleakError(
                f"no trained {self.name} attacker for victim {identity['task']}/{identity['victim']}/"
                f"{identity['checkpoint']} with this configuration is cached (expected {final}); run without "
                "-A train=never to train it (it is then cached), or pass -A weights=PATH")
        self._train(victim, auxiliary, identity, layout, key, directory)

    def reconstruct(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction:
        if self.model is None:
            raise GradleakError(f"{self.name} has no trained model: fit() was not called (the runner calls it)")
        shapes = {k: tuple(v) for k, v in gradient_layout(victim).items()}
        got = {k: tuple(g.shape[1:]) for k, g in episode.gradients.tensors.items()}
        if got != shapes:
            raise GradleakError(f"{self.name}: released gradient layout {got} differs from the one the attacker "
                                f"was trained for {shapes}")
        feats = self.model.featurizer(episode.gradients.tensors).to(self.device)
        with torch.no_grad():
            images, logits = self.model.generate(feats)
        rgb = images.clamp(0, 1).movedim(1, -1).cpu().double().numpy() * 255.0
        return Reconstruction(fields={"rgb": rgb, "action": logits.argmax(-1).cpu().numpy().astype(np.int64)},
                              extras={"action_probs": logits.softmax(-1).cpu().numpy()})

    # -- cache keys --

    def cache_key(self, identity: Mapping[str, Any], layout: Mapping[str, Any]) -> str:
        return config_hash({"format": FORMAT, "features": FEATURES_VERSION, "config": self.config.to_dict(),
                            "victim": identity, "gradient_layout": layout})

    def data_key(self, identity: Mapping[str, Any], layout: Mapping[str, Any], split: str) -> str:
        c = self.config
        return config_hash({"features": FEATURES_VERSION, "rank": c.sketch_rank, "bias_dim": c.bias_dim,
                            "feature_seed": c.feature_seed, "episodes_per_layout": c.episodes_per_layout,
                            "max_episodes": c.max_episodes, "val_episodes": c.val_episodes,
                            "aux_seed": c.aux_seed, "split": split, "victim": identity, "gradient_layout": layout})

    # -- loading and checking --

    def _load(self, path: Path, identity: dict[str, Any], layout: dict[str, Any], expected_hash: str | None) -> None:
        meta_path = path.with_suffix(".json")
        if not path.is_file():
            raise GradleakError(f"TRACE weights {path} do not exist")
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise CorruptFileError(f"cannot read the TRACE metadata {meta_path} beside {path}: {exc}") from exc
        if meta.get("format") != FORMAT:
            raise CorruptFileError(f"{meta_path} is not a TRACE attacker ({meta.get('format')!r} != {FORMAT!r})")
        check_compatible(meta, identity, layout, path)
        if expected_hash is not None and meta.get("config_hash") != expected_hash:
            raise GradleakError(f"cached TRACE attacker {path} has config hash {meta.get('config_hash')}, expected "
                                f"{expected_hash}: it was trained with another configuration. Retrain with "
                                "-A train=force")
        if hashlib.sha256(path.read_bytes()).hexdigest() != meta.get("weights_sha256"):
            raise CorruptFileError(f"{path} does not match the sha256 in {meta_path}: the file is corrupt or edited")
        cfg = replace(TraceConfig(), **meta["config"])
        model = self._build(cfg, {k: tuple(v) for k, v in meta["gradient_layout"].items()},
                            meta["victim"]["n_actions"], tuple(meta["image_size"]))
        try:
            safetensors.torch.load_model(model, str(path), strict=True)
        except Exception as exc:
            raise CorruptFileError(f"cannot load TRACE weights {path}: {exc}") from exc
        self.config, self.model, self.meta, self.path = cfg, model.to(self.device).eval(), meta, path

    def _build(self, cfg: TraceConfig, shapes: Mapping[str, tuple[int, ...]], n_actions: int,
               size: tuple[int, int]) -> TraceNet:
        featurizer = GradientFeaturizer(shapes, cfg.sketch_rank, cfg.bias_dim, cfg.feature_seed)
        torch.manual_seed(cfg.seed)
        return TraceNet(cfg, featurizer, n_actions, size)

    # -- data collection --

    def _collect(self, victim: VictimInfo, auxiliary: Any, identity: dict[str, Any], layout: dict[str, Any],
                 featurizer: GradientFeaturizer) -> tuple[TraceData, TraceData]:
        from tqdm.auto import tqdm

        c = self.config
        out = []
        for split, per_layout, limit in (("train", c.episodes_per_layout, c.max_episodes),
                                         ("val", 1, c.val_episodes)):
            path = cache_dir() / "attackers" / "features" / f"{self.data_key(identity, layout, split)}.safetensors"
            if path.is_file():
                out.append(TraceData(**safetensors.torch.load_file(str(path))))
                continue
            items = []
            stream = auxiliary.collect(episodes_per_layout=per_layout, seed=c.aux_seed, split=split,
                                       max_episodes=limit)
            for episode, grads in tqdm(stream, desc=f"{self.name}: collect {split} episodes + features",
                                       disable=not self.progress, total=limit):
                items.append((featurizer(grads.tensors), episode.steps["rgb"], episode.steps["action"]))
            T = max(f.shape[0] for f, _, _ in items)
            data = _stack(items, T)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            safetensors.torch.save_file(data.tensors(), str(tmp))
            tmp.replace(path)
            out.append(data)
        return out[0], out[1]

    # -- training --

    def _train(self, victim: VictimInfo, auxiliary: Any, identity: dict[str, Any], layout: dict[str, Any],
               key: str, directory: Path) -> None:
        from tqdm.auto import tqdm

        c = self.config
        size = rgb_shape(victim)
        shapes = {k: tuple(v) for k, v in layout.items()}
        model = self._build(c, shapes, victim.n_actions, size)
        print(f"[{self.name}] no cached attacker for this victim and config: training one "
              f"(preset {self.preset!r}, {c.epochs} epochs); weights will be cached in {directory}",
              file=sys.stderr, flush=True)
        t_start = time.perf_counter()
        train, val = self._collect(victim, auxiliary, identity, layout, model.featurizer)
        collect_s = time.perf_counter() - t_start
        valid = torch.arange(train.feats.shape[1])[None] < train.lengths[:, None]
        flat = train.feats[valid]
        model.feat_mean.copy_(flat.mean(0))
        model.feat_std.copy_(flat.std(0).clamp(min=1e-6))
        model.step_cap.fill_(min(c.max_steps, int(train.lengths.max())) - 1)
        model.to(self.device)
        opt = torch.optim.AdamW(model.parameters(), lr=c.lr, weight_decay=c.weight_decay)
        n = train.feats.shape[0]
        per_epoch = math.ceil(n / c.batch_size)
        total_steps = per_epoch * c.epochs
        state_path = directory / "train_state.safetensors"
        state: dict[str, Any] = {"epoch": 0, "history": [], "train_seconds": 0.0, "collect_seconds": collect_s}
        if state_path.is_file() and self.train != "force":
            state = self._load_state(state_path, model, opt, key)
            print(f"[{self.name}] resuming from epoch {state['epoch']} of {c.epochs} ({state_path})",
                  file=sys.stderr, flush=True)
        bar = tqdm(total=total_steps, initial=state["epoch"] * per_epoch, desc=f"{self.name}: train",
                   disable=not self.progress)
        epochs_this_call = 0
        while state["epoch"] < c.epochs:
            epoch = state["epoch"]
            t0 = time.perf_counter()
            gen = torch.Generator().manual_seed(c.seed * 1_000_003 + epoch)
            order = torch.randperm(n, generator=gen)
            tf = epoch < c.tf_fraction * c.epochs
            sums = {"loss": 0.0, "mse": 0.0, "ce": 0.0, "n": 0}
            model.train()
            for b in range(per_epoch):
                step = epoch * per_epoch + b
                for group in opt.param_groups:  # warm-up then cosine decay, a function of the global step
                    group["lr"] = c.lr * min(1.0, (step + 1) / max(1, per_epoch)) * \
                        0.5 * (1 + math.cos(math.pi * step / max(1, total_steps)))
                ids = order[b * c.batch_size: (b + 1) * c.batch_size]
                p_sample = 0.0 if tf else c.ss_max * min(1.0, (epoch + 1 - c.tf_fraction * c.epochs) /
                                                         max(1.0, (1 - c.tf_fraction) * c.epochs / 2))
                loss, parts = self._loss(model, train, ids, p_sample, gen)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sums["loss"] += float(loss.detach()) * len(ids)
                sums["mse"] += parts["mse"] * len(ids)
                sums["ce"] += parts["ce"] * len(ids)
                sums["n"] += len(ids)
                bar.update(1)
                bar.set_postfix(epoch=epoch + 1, loss=f"{float(loss.detach()):.4f}", p_ss=f"{p_sample:.2f}")
            seconds = time.perf_counter() - t0
            state["train_seconds"] += seconds
            val_psnr, val_acc = self._validate(model, val)
            state["history"].append({
                "epoch": epoch + 1, "loss": sums["loss"] / sums["n"], "mse": sums["mse"] / sums["n"],
                "ce": sums["ce"] / sums["n"], "p_scheduled_sampling": p_sample, "seconds": seconds,
                "sequences_per_s": sums["n"] / seconds, "val_psnr_autoregressive": val_psnr,
                "val_action_accuracy": val_acc})
            state["epoch"] = epoch + 1
            epochs_this_call += 1
            self._save_state(state_path, model, opt, state, key)  # every epoch: an epoch is the unit of resume
            if self.stop_after is not None and epochs_this_call >= self.stop_after and state["epoch"] < c.epochs:
                bar.close()
                raise GradleakError(f"{self.name}: training stopped after epoch {state['epoch']} of {c.epochs} "
                                    f"(stop_after={self.stop_after}); run again to resume from {state_path}")
        bar.close()
        model.eval()
        report = {"epochs": c.epochs, "train_sequences": n, "val_sequences": int(val.feats.shape[0]),
                  "collect_seconds": state["collect_seconds"], "train_seconds": state["train_seconds"],
                  "history": state["history"]}
        self._save_final(directory / "model.safetensors", model, identity, layout, key, size, report)
        self._load(directory / "model.safetensors", identity, layout, expected_hash=key)

    def _loss(self, model: TraceNet, data: TraceData, ids: torch.Tensor, p_sample: float,
              gen: torch.Generator) -> tuple[torch.Tensor, dict[str, float]]:
        feats = data.feats[ids].to(self.device)
        target = _to_unit(data.images[ids]).to(self.device)
        actions = data.actions[ids].to(self.device)
        B, T = actions.shape
        valid = (torch.arange(T)[None] < data.lengths[ids][:, None]).to(self.device)
        prev = torch.zeros_like(target)
        prev[:, 1:] = target[:, :-1]
        if p_sample > 0 and model.cfg.temporal:
            with torch.no_grad():
                pred, _ = model(feats, prev)
            mix = (torch.rand(B, T, generator=gen) < p_sample).to(self.device)[:, :, None, None, None]
            prev[:, 1:] = torch.where(mix[:, 1:], pred[:, :-1], prev[:, 1:])
        images, logits = model(feats, prev if model.cfg.temporal else None)
        err = (images - target)[valid]
        mse, l1 = err.pow(2).mean(), err.abs().mean()
        ce = F.cross_entropy(logits[valid], actions[valid])
        return mse + l1 + model.cfg.action_weight * ce, {"mse": float(mse.detach()), "ce": float(ce.detach())}

    @torch.no_grad()
    def _validate(self, model: TraceNet, val: TraceData) -> tuple[float, float]:
        """Autoregressive PSNR and action accuracy on the attacker's own val-layout episodes."""
        model.eval()
        psnrs, hits = [], []
        for i in range(val.feats.shape[0]):
            k = int(val.lengths[i])
            images, logits = model.generate(val.feats[i, :k].to(self.device))
            psnrs.append(psnr(images.cpu(), _to_unit(val.images[i, :k])))
            hits.append(logits.argmax(-1).cpu() == val.actions[i, :k])
        model.train()
        return float(torch.cat(psnrs).mean()), float(torch.cat(hits).float().mean())

    # -- files --

    def _save_state(self, path: Path, model: TraceNet, opt: torch.optim.Optimizer, state: dict[str, Any],
                    key: str) -> None:
        tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
        opt_state = opt.state_dict()
        for pid, st in opt_state["state"].items():
            for k, v in st.items():
                tensors[f"opt.{pid}.{k}"] = torch.as_tensor(v).detach().cpu().contiguous()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        safetensors.torch.save_file(tensors, str(tmp))
        tmp.replace(path)
        meta = {"format": FORMAT + "/train-state", "config_hash": key, "state": state,
                "param_groups": opt_state["param_groups"]}
        atomic_write_bytes(path.with_suffix(".json"), json.dumps(meta, indent=1).encode())

    def _load_state(self, path: Path, model: TraceNet, opt: torch.optim.Optimizer, key: str) -> dict[str, Any]:
        meta = json.loads(path.with_suffix(".json").read_text())
        if meta.get("config_hash") != key:
            raise GradleakError(f"training checkpoint {path} belongs to config {meta.get('config_hash')}, not {key}")
        tensors = safetensors.torch.load_file(str(path))
        model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, strict=True)
        opt_state: dict[str, Any] = {"state": {}, "param_groups": meta["param_groups"]}
        for name, value in tensors.items():
            if name.startswith("opt."):
                _, pid, k = name.split(".", 2)
                opt_state["state"].setdefault(int(pid), {})[k] = value
        opt.load_state_dict(opt_state)
        model.to(self.device)
        return meta["state"]

    def _save_final(self, path: Path, model: TraceNet, identity: dict[str, Any], layout: dict[str, Any],
                    key: str, size: tuple[int, int], report: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        safetensors.torch.save_model(model.cpu(), str(tmp))
        tmp.replace(path)
        meta = {"format": FORMAT, "attack": self.name, "preset": self.preset, "config": self.config.to_dict(),
                "config_hash": key, "victim": identity, "gradient_layout": layout, "image_size": list(size),
                "feature_dim": model.featurizer.dim,
                "n_parameters": sum(p.numel() for p in model.parameters()),
                "weights_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "torch": torch.__version__, "report": report}
        atomic_write_bytes(path.with_suffix(".json"), json.dumps(meta, indent=1).encode())


def check_compatible(meta: Mapping[str, Any], identity: Mapping[str, Any], layout: Mapping[str, Any],
                     path: Path) -> None:
    """Refuse an attacker trained for another victim, task, checkpoint, loss or gradient layout."""
    theirs = meta.get("victim", {})
    problems = []
    for k in ("task", "victim", "checkpoint"):
        if theirs.get(k) != identity[k]:
            problems.append(f"{k} {theirs.get(k)!r} (this run: {identity[k]!r})")
    if theirs.get("fingerprint") != identity["fingerprint"]:
        problems.append(f"victim parameters fingerprint {theirs.get('fingerprint')} (this run: {identity['fingerprint']})")
    if theirs.get("loss") != identity["loss"]:
        problems.append("the victim's loss")
    their_layout = meta.get("gradient_layout", {})
    if their_layout != dict(layout):
        diff = sorted(k for k in set(their_layout) | set(layout) if their_layout.get(k) != layout.get(k))
        problems.append(f"gradient layout (parameters with other shapes or missing: {diff[:4]})")
    if problems:
        v = meta.get("victim", {})
        raise GradleakError(
            f"TRACE attacker {path} was trained for victim {v.get('task')}/{v.get('victim')}/{v.get('checkpoint')} "
            f"and does not match this run: {'; '.join(problems)}. An attacker only applies to the victim "
            "checkpoint and gradient layout it was trained on: drop -A weights=... (a matching attacker is then "
            "trained and cached) or point it at one trained for this victim.")


class TRACENoTemporal(TRACE):
    """``trace_no_temporal``: the single-frame learned inversion (Learning-to-Invert style): same features,
    gradient encoder, decoders, data and budget, an MLP instead of the causal transformer, no image tokens."""

    name: ClassVar[str] = "trace_no_temporal"
    defaults: ClassVar[dict[str, Any]] = {"temporal": False, "seq_len": 1}


def _seq(length: int) -> type[TRACE]:
    cls = type(f"TRACESeq{length}", (TRACE,), {
        "name": f"trace_seq{length}", "defaults": {"seq_len": length},
        "__doc__": f"``trace_seq{length}``: TRACE with a context window of {length} step(s)."})
    cls.__module__ = __name__
    return cls


TRACESeq1, TRACESeq4, TRACESeq8, TRACESeq16 = (_seq(n) for n in (1, 4, 8, 16))
