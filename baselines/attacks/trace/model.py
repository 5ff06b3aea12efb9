"""TRACE's network: fixed gradient features, the gradient encoder, the interleaved causal transformer (or the
single-frame MLP of the ablation) and the image / action decoders (the pipeline is in the package docstring)."""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gradleak_bench.baselines.attacks.trace.config import TraceConfig


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


# --- 1'. the learned full-gradient encoder (``encoder=learned``) ----------------------------------------

def _layer_blocks(shapes: Mapping[str, tuple[int, ...]]) -> list[tuple[str, int, int]]:
    """(name, rows, columns) of every parameter as a matrix: weights out x in*k*k, vectors 1 x n."""
    out = []
    for name, shape in shapes.items():
        shape = tuple(shape)
        out.append((name, shape[0], int(np.prod(shape[1:]))) if len(shape) >= 2 else (name, 1, int(np.prod(shape))))
    return out


class GradientPacker(nn.Module):
    """The input of the learned encoder: every layer's raw per-step gradient, normalised per layer and packed
    into one float16 row ``[G_1/||G_1||, ..., G_L/||G_L||, log||G_1||, ..., log||G_L||]`` (T, dim).

    Normalising per layer first keeps float16 exact enough whatever the layer's scale (a released gradient's
    entries span 1e-9..1e1 across layers and defenses); the scale itself travels as the log norm. No weights:
    the learning happens in :class:`LearnedSketch`."""

    def __init__(self, shapes: Mapping[str, tuple[int, ...]]):
        super().__init__()
        self.shapes = {name: tuple(shape) for name, shape in shapes.items()}
        self.blocks = _layer_blocks(shapes)
        self.size = sum(r * c for _, r, c in self.blocks)
        self.dim = self.size + len(self.blocks)
        self.register_buffer("_device", torch.zeros(0))  # the featuriser's device, as GradientFeaturizer's buffers

    @torch.no_grad()
    def forward(self, tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
        parts, logs = [], []
        for name, _, _ in self.blocks:
            g = tensors[name].to(self._device.device).float().flatten(1)
            norm = g.norm(dim=1)
            parts.append(g / (norm[:, None] + 1e-30))
            logs.append(torch.log(norm + 1e-20)[:, None])
        return torch.cat(parts + logs, dim=1).half()


class LearnedSketch(nn.Module):
    """Per-layer bilinear sketches ``U_l^T (G_l/||G_l||) V_l`` (bias gradients: ``P_l^T b_l/||b_l||``) of every
    layer's gradient, with U, V, P trained end to end with the rest of TRACE; initialised to the fixed
    sketches of :class:`GradientFeaturizer` (same seed), so training starts from the analytic encoder minus
    its closed-form layer inputs. Output: the sketches and the log norms, (..., dim)."""

    def __init__(self, shapes: Mapping[str, tuple[int, ...]], rank: int, bias_dim: int, seed: int):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.blocks = _layer_blocks(shapes)
        self.u, self.v = nn.ParameterList(), nn.ParameterList()
        self.shapes: list[tuple[int, int]] = []
        dim = 0
        for (name, rows, cols), shape in zip(self.blocks, shapes.values()):
            if len(tuple(shape)) < 2:  # a vector: one learned projection
                k = min(cols, bias_dim)
                self.u.append(nn.Parameter(torch.ones(1, 1), requires_grad=False))
                self.v.append(nn.Parameter(torch.randn(cols, k, generator=gen) / math.sqrt(k) if cols > bias_dim
                                           else torch.eye(cols)))
                self.shapes.append((1, k))
            else:
                ro, ri = min(rank, rows), min(rank, cols)
                self.u.append(nn.Parameter(torch.randn(rows, ro, generator=gen) / math.sqrt(ro) if rows > rank
                                           else torch.eye(rows)))
                self.v.append(nn.Parameter(torch.randn(cols, ri, generator=gen) / math.sqrt(ri) if cols > rank
                                           else torch.eye(cols)))
                self.shapes.append((ro, ri))
            dim += self.shapes[-1][0] * self.shapes[-1][1]
        self.dim = dim + len(self.blocks)

    def forward(self, packed: torch.Tensor) -> torch.Tensor:
        """``packed`` (..., GradientPacker.dim) float16 -> sketches (..., dim) float32."""
        lead = packed.shape[:-1]
        x = packed.reshape(-1, packed.shape[-1])
        out, offset = [], 0
        for (name, rows, cols), u, v in zip(self.blocks, self.u, self.v):
            g = x[:, offset: offset + rows * cols].float().reshape(-1, rows, cols)
            offset += rows * cols
            out.append((u.T @ (g @ v) if cols >= rows else (u.T @ g) @ v).flatten(1))
        out.append(x[:, offset:].float())  # the log norms
        return torch.cat(out, dim=1).reshape(*lead, -1)


def make_featurizer(cfg: TraceConfig, shapes: Mapping[str, tuple[int, ...]]) -> nn.Module:
    """The per-episode featuriser (run once, cached): the analytic features, or the packed raw gradients the
    learned encoder reads."""
    if cfg.encoder == "learned":
        return GradientPacker(shapes)
    return GradientFeaturizer(shapes, cfg.sketch_rank, cfg.bias_dim, cfg.feature_seed)


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

    def __init__(self, cfg: TraceConfig, featurizer: nn.Module, n_actions: int, size: tuple[int, int],
                 continuous: bool = False):
        super().__init__()
        self.cfg, self.size, self.continuous = cfg, size, continuous
        self.featurizer = featurizer
        d = cfg.d_model
        # encoder=learned: a trained sketch of the packed raw gradients comes before the standardisation
        self.sketch = (LearnedSketch(featurizer.shapes, cfg.sketch_rank, cfg.bias_dim, cfg.feature_seed)
                       if isinstance(featurizer, GradientPacker) else None)
        feature_dim = featurizer.dim if self.sketch is None else self.sketch.dim
        self.register_buffer("feat_mean", torch.zeros(feature_dim))
        self.register_buffer("feat_std", torch.ones(feature_dim))
        # the last step index seen in training: later steps of a longer stream reuse its embedding
        self.register_buffer("step_cap", torch.tensor(cfg.max_steps - 1))
        self.grad_enc = nn.Sequential(nn.Linear(feature_dim, cfg.enc_hidden), nn.GELU(),
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
        # discrete: one logit per action; continuous (n_actions = the Box's dimension d): the mean of each
        # component, then its log-variance (read by the Gaussian NLL loss; ignored by the MSE one)
        self.act_dec = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, 2 * n_actions if continuous else n_actions))

    # features -> gradient tokens
    def features(self, feats: torch.Tensor) -> torch.Tensor:
        """The gradient features before standardisation: the cached ones, or the learned sketch of them."""
        return feats if self.sketch is None else self.sketch(feats)

    def grad_tokens(self, feats: torch.Tensor, noise: float = 0.0, gen: torch.Generator | None = None
                    ) -> torch.Tensor:
        """``noise``: the augmentation's Gaussian noise on the standardised features (training only)."""
        x = ((self.features(feats) - self.feat_mean) / self.feat_std).clamp(-10, 10)
        if noise > 0:
            x = x + noise * torch.randn(x.shape, generator=gen).to(x.device)
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

    def gaussian(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A continuous head's output (..., 2d) as (mean, log-variance), each (..., d); the log-variance is
        kept in [-10, 10] so the NLL cannot run away on a step the head fits exactly."""
        mean, log_var = out.chunk(2, dim=-1)
        return mean, log_var.clamp(-10.0, 10.0)

    def forward(self, feats: torch.Tensor, prev: torch.Tensor | None, noise: float = 0.0,
                gen: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.decode(self.latent(self.grad_tokens(feats, noise, gen), prev))

    @torch.no_grad()
    def generate(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Autoregressive reconstruction of one episode: feats (T, F) -> images (T, 3, H, W), the action head's
        output (T, A): logits, or for a continuous victim (mean, log-variance) per component (T, 2d).
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

