"""Optimisation-based gradient inversion: Inverting Gradients, DLG / iDLG, and the QGI / RGI pipelines.

Every attack here searches for an observation whose gradient matches the released one. They share one engine,
:class:`GradientMatcher`, that computes for a *batch of independent candidate frames* the per-frame dot
product and squared norm between the candidate's per-sample parameter gradient and the released gradient,
differentiably with respect to the candidates: one batched forward pass, one ``create_graph`` backward to
each layer's output (row i of it belongs to frame i alone, because the frames' objectives are summed, never
mixed), then per-layer products (``g a^T`` for a Linear layer, ``g`` times the unfolded patches for a
Conv2d). The frames of an episode (and the restarts) are therefore one batched optimisation problem, not a
Python loop over frames; ``benchmarks/bench_inversion.py`` measures the speed-up.

Attacks (see docs/inversion-attacks.md):

* ``inverting_gradients`` (Geiping et al. 2020): cosine matching + total variation, signed Adam lr 0.1 with
  step decay at 3/8, 5/8, 7/8 of the iterations, box constraint, restarts (the best by final loss per
  frame); the action is taken first with the closed-form rule, the loss's unknown scalar targets (TD target,
  advantage, return) are optimised jointly. Any victim.
* ``dlg`` (Zhu et al. 2019): squared L2 gradient distance, L-BFGS, the action optimised jointly as a soft
  label; ``idlg`` (Zhao et al. 2020): the same with the action read from the gradient first.
* ``qgi`` (DQN) and ``rgi`` (REINFORCE): the QGI/RGI paper's pipeline -- rule-based action, the
  objective-agnostic surrogate ``<grad_b J, F(x_rec)>``, two-stage multimodal reconstruction (the input of
  the linear layers first, then the images with TV), rule-based Q / TD target / return.

A frame whose optimisation diverges (non-finite loss or iterate, or a released gradient of norm zero, for
which cosine matching is undefined) is returned as NaN for that frame only.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from stable_baselines3.common.preprocessing import is_image_space
from torch import nn

from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction, head_parameter_names, logit_gradients
from gradleak_bench.records import ObservedEpisode, Reconstruction, VictimInfo

IMAGE_FIELDS = ("rgb", "depth", "bbox")


# --- candidate observations ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Modality:
    """One observation key as the optimiser sees it: a unit-box variable ``u`` in [0, 1] mapped affinely to
    the policy's input range [low, high] (uint8 images: 0..255, which SB3 divides by 255)."""

    key: str
    shape: tuple[int, ...]  # policy format, without the batch dimension
    low: torch.Tensor
    high: torch.Tensor
    spatial: tuple[int, int] | None  # the two image axes (for TV), None for a vector

    def to_policy(self, u: torch.Tensor) -> torch.Tensor:
        return self.low + u * (self.high - self.low)

    def from_policy(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.low) / (self.high - self.low)


def modalities(victim: VictimInfo) -> dict[str, Modality]:
    """The policy's observation keys (``obs`` for a plain Box), with bounds and image axes."""
    space = victim.policy.observation_space
    spaces = dict(space.spaces) if isinstance(space, gym.spaces.Dict) else {"rgb": space}
    out = {}
    for key, sub in spaces.items():
        shape = tuple(sub.shape)
        low = torch.as_tensor(np.broadcast_to(sub.low, shape).astype(np.float32))
        high = torch.as_tensor(np.broadcast_to(sub.high, shape).astype(np.float32))
        if is_image_space(sub):  # channel-first uint8 image
            spatial = (-2, -1)
        elif len(shape) == 3 and shape[-1] in (1, 3, 4):  # channel-last float image (depth)
            spatial = (-3, -2)
        elif len(shape) == 2:
            spatial = (-2, -1)
        else:
            spatial = None
        out[key] = Modality(key, shape, low, high, spatial)
    return out


def as_policy_obs(mods: Mapping[str, Modality], u: Mapping[str, torch.Tensor], plain_box: bool) -> Any:
    obs = {k: mods[k].to_policy(v) for k, v in u.items()}
    return obs["rgb"] if plain_box else obs


def to_fields(mods: Mapping[str, Modality], u: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """Unit variables -> truth-shaped reconstruction fields (rgb (T,H,W,3) 0..255, depth (T,H,W) m, ...)."""
    out = {}
    for key, value in u.items():
        x = mods[key].to_policy(value.detach()).double().numpy()
        if key == "rgb" and x.ndim == 4 and x.shape[1] in (1, 3, 4):
            x = x.transpose(0, 2, 3, 1)
        if key == "depth" and x.ndim == 4 and x.shape[-1] == 1:
            x = x[..., 0]
        out[key] = x
    return out


def total_variation(u: torch.Tensor, spatial: tuple[int, int]) -> torch.Tensor:
    """Per-frame anisotropic TV: mean |horizontal| + mean |vertical| differences (Geiping et al.)."""
    a, b = spatial
    dims = tuple(range(1, u.ndim))
    dx = (u.narrow(a, 1, u.shape[a] - 1) - u.narrow(a, 0, u.shape[a] - 1)).abs().mean(dim=dims)
    dy = (u.narrow(b, 1, u.shape[b] - 1) - u.narrow(b, 0, u.shape[b] - 1)).abs().mean(dim=dims)
    return dx + dy


# --- the victim's network, split where the attacks need it ---------------------------------------------

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
        prefix = "q_net.features_extractor." if self.dqn else "features_extractor."
        return tuple(n for n in self.victim.gradient_shapes if not n.startswith(prefix)
                     and not n.startswith(("pi_features_extractor.", "vf_features_extractor.")))

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


# --- the batched, differentiable gradient matcher -------------------------------------------------------

class GradientMatcher:
    """Per-frame <g_rec, g> and ||g_rec||^2 for a batch of candidates, differentiable w.r.t. them.

    Args:
        net: the victim's network.
        target: released gradients ``{name: (B, *shape)}`` (rows aligned with the candidate batch).
        names: the parameters to match (default: all released ones; QGI/RGI stage 1 uses the head's).
    """

    def __init__(self, net: VictimNet, target: Mapping[str, torch.Tensor], names: tuple[str, ...] | None = None):
        self.net = net
        names = tuple(names or target)
        owners = {}
        for prefix, layer in net.policy.named_modules():
            if type(layer) in (nn.Linear, nn.Conv2d):
                owners[f"{prefix}.weight"] = (prefix, layer)
                if layer.bias is not None:
                    owners[f"{prefix}.bias"] = (prefix, layer)
        self.layers: dict[str, nn.Module] = {}
        for name in names:
            if name not in owners:
                raise ValueError(f"parameter {name!r} is not the weight or bias of a Linear/Conv2d layer")
            prefix, layer = owners[name]
            self.layers[prefix] = layer
        self.names = names
        self.target = {n: target[n].float() for n in names}
        self.target_norm2 = sum(g.reshape(g.shape[0], -1).double().pow(2).sum(1) for g in self.target.values()).float()

    def terms(self, run: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``run()`` does the candidate forward pass and returns the per-frame objective (B,)."""
        inputs: dict[str, torch.Tensor] = {}
        outputs: dict[str, torch.Tensor] = {}

        def hook_for(prefix: str):
            def hook(_: nn.Module, args: tuple, output: torch.Tensor) -> None:
                if prefix in outputs:
                    raise RuntimeError(f"layer {prefix!r} runs twice in one forward pass")
                inputs[prefix], outputs[prefix] = args[0], output
            return hook

        handles = [layer.register_forward_hook(hook_for(p)) for p, layer in self.layers.items()]
        try:
            objective = run()
        finally:
            for h in handles:
                h.remove()
        used = [p for p in self.layers if p in outputs and outputs[p].requires_grad]
        grads = torch.autograd.grad(objective.sum(), [outputs[p] for p in used], create_graph=True, allow_unused=True)
        batch = objective.shape[0]
        dot = objective.new_zeros(batch)
        norm2 = objective.new_zeros(batch)
        for prefix, g in zip(used, grads):
            if g is None:
                continue
            layer, a = self.layers[prefix], inputs[prefix]
            wname, bname = f"{prefix}.weight", f"{prefix}.bias"
            if isinstance(layer, nn.Linear):
                if wname in self.target:
                    dot = dot + torch.einsum("bo,boi,bi->b", g, self.target[wname], a)
                    norm2 = norm2 + g.pow(2).sum(1) * a.pow(2).sum(1)
                gb = g
            else:
                if wname in self.target:
                    cols = F.unfold(a, layer.kernel_size, layer.dilation, layer.padding, layer.stride)
                    gw = torch.bmm(g.flatten(2), cols.transpose(1, 2))
                    dot = dot + (gw * self.target[wname].reshape(gw.shape)).sum((1, 2))
                    norm2 = norm2 + gw.pow(2).sum((1, 2))
                gb = g.sum((2, 3))
            if bname in self.target:
                dot = dot + (gb * self.target[bname]).sum(1)
                norm2 = norm2 + gb.pow(2).sum(1)
        return dot, norm2

    def cosine_loss(self, run: Callable[[], torch.Tensor]) -> torch.Tensor:
        dot, norm2 = self.terms(run)
        return 1.0 - dot / (norm2.clamp_min(1e-30).sqrt() * self.target_norm2.sqrt())

    def l2_loss(self, run: Callable[[], torch.Tensor]) -> torch.Tensor:
        dot, norm2 = self.terms(run)
        return norm2 - 2.0 * dot + self.target_norm2


# --- shared optimisation loop ---------------------------------------------------------------------------

def _repeat(t: torch.Tensor, r: int) -> torch.Tensor:
    return t.repeat(r, *([1] * (t.ndim - 1)))


def adam_inversion(variables: dict[str, torch.Tensor], boxes: Mapping[str, tuple[float, float]],
                   loss_fn: Callable[[dict[str, torch.Tensor]], torch.Tensor], iterations: int, lr: float,
                   signed: bool, decay: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Adam on a batch of independent frames; returns (final per-frame loss, per-frame failed flag).

    Each frame's loss is its own term of the summed objective, so frames never influence each other; a
    frame whose loss or iterate turns non-finite is masked out of the sum and flagged."""
    params = [v.requires_grad_() for v in variables.values()]
    batch = params[0].shape[0]
    if iterations <= 0:  # nothing to optimise: the initialisation is returned as is
        return torch.zeros(batch), torch.zeros(batch, dtype=torch.bool)
    optimizer = torch.optim.Adam(params, lr=lr)
    milestones = [int(iterations * f) for f in (3 / 8, 5 / 8, 7 / 8)]
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones, gamma=0.1) if decay else None
    failed = torch.zeros(batch, dtype=torch.bool)
    for _ in range(iterations):
        optimizer.zero_grad(set_to_none=False)
        loss = loss_fn(variables)
        failed |= ~torch.isfinite(loss.detach())
        torch.where(failed, torch.zeros_like(loss), loss).sum().backward()
        with torch.no_grad():
            for p in params:
                if p.grad is None:
                    continue
                rows = failed.reshape(-1, *([1] * (p.ndim - 1))).expand_as(p)
                p.grad[rows] = 0.0
                if signed:
                    p.grad.sign_()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        with torch.no_grad():
            for key, v in variables.items():
                if key in boxes:
                    v.clamp_(*boxes[key])
                failed |= ~torch.isfinite(v.reshape(batch, -1)).all(dim=1)
    loss = loss_fn(variables)  # at the final iterate (the matcher differentiates, so grad mode stays on)
    failed |= ~torch.isfinite(loss.detach())
    return loss.detach(), failed


def _nan_rows(fields: dict[str, np.ndarray], failed: np.ndarray) -> dict[str, np.ndarray]:
    out = {}
    for k, v in fields.items():
        v = np.asarray(v, dtype=np.float64).copy()
        v[failed] = np.nan
        out[k] = v
    return out


def _init_unit(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Gaussian noise around mid-range, clipped into the unit box."""
    return (0.5 + 0.25 * torch.randn(shape, generator=generator)).clamp_(0.0, 1.0)


def _rule_actions(episode: ObservedEpisode, victim: VictimInfo) -> torch.Tensor:
    return torch.as_tensor(ClosedFormAction().reconstruct(episode, victim).fields["action"])


def _unsupported_head(victim: VictimInfo) -> str | None:
    try:
        head_parameter_names(victim)
    except (AttributeError, IndexError, KeyError):
        return "the victim has no linear policy/Q head"
    return None


_PRESETS_IG = {"quick": dict(iterations=100, restarts=1, tv=1e-1), "paper": dict(iterations=4800, restarts=1, tv=1e-1)}


class _ImageAttack:
    """Shared parts of the baselines that optimise the raw observation with the original objective."""

    fields: tuple[str, ...] = ("rgb", "action")  # narrowed per victim by supports()

    def supports(self, victim: VictimInfo) -> str | None:
        if victim.loss.algo not in ("dqn", "reinforce", "a2c", "ppo"):
            return f"loss {victim.loss.algo!r} is not one of dqn, reinforce, a2c, ppo"
        reason = _unsupported_head(victim)
        if reason is None:
            # what this victim's gradient can reveal: the modalities it observes, the action, the loss targets
            self.fields = self._fields_for(victim)
        return reason

    @staticmethod
    def _fields_for(victim: VictimInfo) -> tuple[str, ...]:
        scalars = tuple("return" if s == "return" else s for s in objective_scalars(victim.loss.algo))
        return (*modalities(victim), "action", *scalars)

    def _fill(self, fields: dict[str, np.ndarray], victim: VictimInfo) -> dict[str, np.ndarray]:
        return {k: fields[k] for k in self._fields_for(victim)}


class InvertingGradients(_ImageAttack):
    """Geiping et al. (2020) single-frame inversion: cosine matching + TV, signed Adam, box, restarts.

    Args:
        preset: ``"quick"`` (100 iterations, 1 restart, TV 0.1) or ``"paper"`` (4800 iterations, TV 0.1).
        iterations, restarts, tv: override the preset.
        lr: Adam learning rate (0.1), decayed by 10x at 3/8, 5/8 and 7/8 of the iterations.
        signed: step on the sign of the gradient, as the paper's experiments do (``signed=True`` in
            inversefed's ``reconstruct_image.py`` "ours" config and its notebooks). Not inversefed's
            ``DEFAULT_CONFIG``: since its 2020-09-15 "Updated defaults" commit that has ``signed=False``
            (with the 4800 iterations and TV 0.1 of the ``paper`` preset); before it, ``signed=True``.
        seed: seed of the Gaussian initialisation.
    """

    name: ClassVar[str] = "inverting_gradients"

    def __init__(self, preset: str = "quick", iterations: int | None = None, restarts: int | None = None,
                 tv: float | None = None, lr: float = 0.1, signed: bool = True, seed: int = 0):
        if preset not in _PRESETS_IG:
            raise ValueError(f"preset must be one of {sorted(_PRESETS_IG)}, not {preset!r}")
        p = dict(_PRESETS_IG[preset])
        self.preset = preset
        self.iterations = int(iterations if iterations is not None else p["iterations"])
        self.restarts = int(restarts if restarts is not None else p["restarts"])
        self.tv = float(tv if tv is not None else p["tv"])
        self.lr, self.signed, self.seed = float(lr), bool(signed), int(seed)

    def reconstruct(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction:
        net = VictimNet(victim)
        mods = modalities(victim)
        plain = not isinstance(victim.policy.observation_space, gym.spaces.Dict)
        length, r = episode.gradients.length, max(self.restarts, 1)
        actions = _rule_actions(episode, victim)
        target = {n: _repeat(g, r) for n, g in episode.gradients.tensors.items()}
        matcher = GradientMatcher(net, target)
        gen = torch.Generator().manual_seed(self.seed)
        variables = {k: _init_unit((length * r, *m.shape), gen) for k, m in mods.items()}
        scalars = objective_scalars(victim.loss.algo)
        for s in scalars:
            variables[f"scalar:{s}"] = torch.full((length * r,), 1.0 if s == "advantage" else 0.0)
        boxes = {k: (0.0, 1.0) for k in mods}
        action_r = _repeat(actions, r)

        def loss_fn(v: dict[str, torch.Tensor]) -> torch.Tensor:
            objective = original_objective(net, action_r, {s: v[f"scalar:{s}"] for s in scalars})
            obs = as_policy_obs(mods, {k: v[k] for k in mods}, plain)
            loss = matcher.cosine_loss(lambda: objective(net.features(obs)))
            for k, m in mods.items():
                if m.spatial is not None and self.tv:
                    loss = loss + self.tv * total_variation(v[k], m.spatial)
            return loss

        loss, failed = adam_inversion(variables, boxes, loss_fn, self.iterations, self.lr, self.signed)
        best = _best_restart(loss, failed, length, r)
        pick = lambda t: t.reshape(r, length, *t.shape[1:])[best, torch.arange(length)]  # noqa: E731
        chosen_failed = failed.reshape(r, length)[best, torch.arange(length)].numpy()
        fields = to_fields(mods, {k: pick(variables[k]) for k in mods})
        for s in scalars:
            fields["return" if s == "return" else s] = pick(variables[f"scalar:{s}"]).detach().double().numpy()
        fields = _nan_rows(fields, chosen_failed)
        fields["action"] = actions.numpy().astype(np.int64)
        return Reconstruction(fields=self._fill(fields, victim),
                              extras={"loss": pick(loss).numpy(), "failed": chosen_failed})


def _best_restart(loss: torch.Tensor, failed: torch.Tensor, length: int, r: int) -> torch.Tensor:
    score = torch.where(failed, torch.full_like(loss, math.inf), loss.nan_to_num(math.inf)).reshape(r, length)
    return score.argmin(dim=0)


class DLG(_ImageAttack):
    """Deep Leakage from Gradients (Zhu et al. 2019): squared L2 gradient distance minimised by L-BFGS over
    the observation, a soft action label and the loss's scalar targets, all jointly.

    Args:
        preset: ``"quick"`` (30 L-BFGS iterations) or ``"paper"`` (300, as in DLG).
        iterations: override the preset. lr: L-BFGS step (1). seed: initialisation seed.
    """

    name: ClassVar[str] = "dlg"
    label_from_gradient: ClassVar[bool] = False
    _PRESETS: ClassVar[dict[str, int]] = {"quick": 30, "paper": 300}

    def __init__(self, preset: str = "quick", iterations: int | None = None, lr: float = 1.0, seed: int = 0):
        if preset not in self._PRESETS:
            raise ValueError(f"preset must be one of {sorted(self._PRESETS)}, not {preset!r}")
        self.preset = preset
        self.iterations = int(iterations if iterations is not None else self._PRESETS[preset])
        self.lr, self.seed = float(lr), int(seed)

    def reconstruct(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction:
        net = VictimNet(victim)
        mods = modalities(victim)
        plain = not isinstance(victim.policy.observation_space, gym.spaces.Dict)
        length = episode.gradients.length
        matcher = GradientMatcher(net, episode.gradients.tensors)
        gen = torch.Generator().manual_seed(self.seed)
        variables = {k: _init_unit((length, *m.shape), gen).requires_grad_() for k, m in mods.items()}
        scalars = objective_scalars(victim.loss.algo)
        for s in scalars:
            variables[f"scalar:{s}"] = torch.full((length,), 1.0 if s == "advantage" else 0.0, requires_grad=True)
        rule = _rule_actions(episode, victim) if self.label_from_gradient else None
        if rule is None:
            variables["label"] = torch.randn((length, victim.n_actions), generator=gen).requires_grad_()

        def per_frame(v: dict[str, torch.Tensor]) -> torch.Tensor:
            action = rule if rule is not None else torch.softmax(v["label"], dim=1)
            objective = original_objective(net, action, {s: v[f"scalar:{s}"] for s in scalars})
            obs = as_policy_obs(mods, {k: v[k] for k in mods}, plain)
            # ||g_rec - g||^2 / ||g||^2: the same minimiser per frame, but on a scale where L-BFGS's stopping
            # tolerances do not end the run at once (released gradients have norms around 1e-3)
            return matcher.l2_loss(lambda: objective(net.features(obs))) / matcher.target_norm2

        params = list(variables.values())
        optimizer = torch.optim.LBFGS(params, lr=self.lr, max_iter=1, history_size=100, tolerance_grad=0.0,
                                      tolerance_change=0.0, line_search_fn="strong_wolfe")
        failed = torch.zeros(length, dtype=torch.bool)

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = per_frame(variables)
            bad = ~torch.isfinite(loss.detach())
            failed.logical_or_(bad)
            total = torch.where(failed, torch.zeros_like(loss), loss).sum()
            total.backward()
            with torch.no_grad():  # a diverged frame must not steer the others' shared L-BFGS direction
                for p in params:
                    p.grad[failed.reshape(-1, *([1] * (p.ndim - 1))).expand_as(p)] = 0.0
                    p.grad.nan_to_num_(0.0, 0.0, 0.0)
            return total

        for _ in range(self.iterations):
            optimizer.step(closure)
            with torch.no_grad():
                for k in mods:
                    bad = ~torch.isfinite(variables[k].reshape(length, -1)).all(dim=1)
                    failed |= bad
                    variables[k].nan_to_num_(0.5).clamp_(0.0, 1.0)  # box; a diverged frame stays flagged
        final = per_frame(variables).detach()
        failed |= ~torch.isfinite(final)
        fields = to_fields(mods, {k: variables[k] for k in mods})
        for s in scalars:
            fields[s] = variables[f"scalar:{s}"].detach().double().numpy()
        fields = _nan_rows(fields, failed.numpy())
        actions = rule if rule is not None else variables["label"].detach().argmax(dim=1)
        fields["action"] = actions.numpy().astype(np.int64)
        return Reconstruction(fields=self._fill(fields, victim), extras={"loss": final.numpy(), "failed": failed.numpy()})


class IDLG(DLG):
    """iDLG (Zhao et al. 2020): DLG with the action read off the gradient first (the closed-form rule)."""

    name: ClassVar[str] = "idlg"
    label_from_gradient: ClassVar[bool] = True


# --- QGI / RGI ------------------------------------------------------------------------------------------

_PRESETS_QR = {"quick": dict(stage1=300, stage2=200), "paper": dict(stage1=10_000, stage2=10_000)}


class _PaperPipeline:
    """QGI/RGI (Privacy Risks in RL for Household Robots): rule-based action, surrogate objective,
    two-stage multimodal reconstruction, rule-based supervisory signals.

    Args:
        preset: ``"quick"`` (300 + 200 iterations) or ``"paper"`` (10,000 + 10,000: the paper's 2x10^4).
        stage1, stage2: iterations of each stage (override the preset).
        lr: Adam learning rate (0.1, decayed at 3/8, 5/8, 7/8). tv: TV weight lambda (0.1, the paper's).
        objective: ``"surrogate"`` (the paper's) or ``"original"`` (ablation: the victim's loss with the rule
            action and the scalar target optimised jointly).
        stages: ``"two"`` (the paper's) or ``"joint"`` (ablation: every modality in one optimisation).
        linear_solver: stage 1 by ``"adam"`` (the paper's optimisation) or ``"closed_form"`` (ours: the first
            linear layer's weight gradient is g z^T and its bias gradient g, so its input z is the
            least-squares ratio of the two -- exact for a single-sample gradient, no iterations).
        seed: initialisation seed.
    """

    algo: ClassVar[str] = ""
    fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, preset: str = "quick", stage1: int | None = None, stage2: int | None = None,
                 lr: float = 0.1, tv: float = 0.1, objective: str = "surrogate", stages: str = "two",
                 linear_solver: str = "adam", seed: int = 0):
        if linear_solver not in ("adam", "closed_form"):
            raise ValueError(f"linear_solver must be 'adam' or 'closed_form', not {linear_solver!r}")
        self.linear_solver = linear_solver
        if preset not in _PRESETS_QR:
            raise ValueError(f"preset must be one of {sorted(_PRESETS_QR)}, not {preset!r}")
        if objective not in ("surrogate", "original"):
            raise ValueError(f"objective must be 'surrogate' or 'original', not {objective!r}")
        if stages not in ("two", "joint"):
            raise ValueError(f"stages must be 'two' or 'joint', not {stages!r}")
        self.preset = preset
        self.stage1 = int(stage1 if stage1 is not None else _PRESETS_QR[preset]["stage1"])
        self.stage2 = int(stage2 if stage2 is not None else _PRESETS_QR[preset]["stage2"])
        self.lr, self.tv, self.objective, self.stages, self.seed = float(lr), float(tv), objective, stages, int(seed)

    def supports(self, victim: VictimInfo) -> str | None:
        if victim.loss.algo != self.algo:
            other = {"dqn": "qgi", "reinforce": "rgi"}.get(victim.loss.algo)
            hint = f"; use {other!r} for it" if other else "; use inverting_gradients, dlg or idlg"
            return (f"{self.name} attacks {self.algo.upper()} victims only, and {victim.victim!r} trains with "
                    f"{victim.loss.algo!r}{hint}")
        if not isinstance(victim.policy.observation_space, gym.spaces.Dict):
            return f"{self.name} reconstructs a multimodal (Dict) observation; this victim's is not one"
        _, bias = head_parameter_names(victim)
        if bias is None:
            return f"{self.name} needs the last layer's bias gradient (the error direction); the head has no bias"
        return None

    # the error direction dJ/dF: the last layer's bias gradient (T, n_out), and the value head's (T,) if any
    def _errors(self, episode: ObservedEpisode, victim: VictimInfo) -> tuple[torch.Tensor, torch.Tensor | None]:
        error = logit_gradients(episode, victim).float()
        vb = episode.gradients.tensors.get("value_net.bias")
        return error, (None if vb is None else vb[:, 0].float())

    def _objective(self, net: VictimNet, episode: ObservedEpisode, victim: VictimInfo, actions: torch.Tensor,
                   v: Mapping[str, torch.Tensor]):
        if self.objective == "surrogate":
            return surrogate_objective(net, *self._errors(episode, victim))
        scalars = {s: v[f"scalar:{s}"] for s in objective_scalars(victim.loss.algo)}
        return original_objective(net, actions, scalars)

    def _scalar_vars(self, victim: VictimInfo, length: int) -> dict[str, torch.Tensor]:
        if self.objective == "surrogate":
            return {}
        return {f"scalar:{s}": torch.full((length,), 1.0 if s == "advantage" else 0.0)
                for s in objective_scalars(victim.loss.algo)}

    def _states(self, episode: ObservedEpisode, victim: VictimInfo, actions: torch.Tensor
                ) -> tuple[dict[str, np.ndarray], torch.Tensor, np.ndarray, dict[str, torch.Tensor]]:
        """Two-stage (or joint) multimodal reconstruction -> (fields, features, failed, variables)."""
        net = VictimNet(victim)
        mods = modalities(victim)
        slices = net.feature_slices()
        flat_keys = [k for k, s in slices.items() if isinstance(net.extractor.extractors[k], nn.Flatten)]
        length = episode.gradients.length
        gen = torch.Generator().manual_seed(self.seed)
        failed = torch.zeros(length, dtype=torch.bool)
        boxes = {k: (0.0, 1.0) for k in mods}

        def tv_of(v: Mapping[str, torch.Tensor], keys) -> torch.Tensor:
            out = 0.0
            for k in keys:
                if mods[k].spatial is not None and self.tv:
                    out = out + self.tv * total_variation(v[k], mods[k].spatial)
            return out

        fixed: dict[str, torch.Tensor] = {}
        if self.stages == "two":
            # Stage 1: the input of the linear layers (vector state, flattened depth, CNN features), matched on
            # the linear layers' gradients; the CNN features are free non-negative variables (ReLU outputs).
            head = GradientMatcher(net, episode.gradients.tensors, net.head_names())
            width = sum(s.stop - s.start for s in slices.values())
            v1 = {k: _init_unit((length, *mods[k].shape), gen) for k in flat_keys}
            v1["features"] = 0.1 * torch.rand((length, width), generator=gen)
            v1.update(self._scalar_vars(victim, length))
            boxes1 = dict(boxes, features=(0.0, math.inf))

            def features_of(v: Mapping[str, torch.Tensor]) -> torch.Tensor:
                parts = []
                for k, s in slices.items():
                    if k in flat_keys:
                        parts.append(mods[k].to_policy(v[k]).reshape(length, -1))
                    else:
                        parts.append(v["features"][:, s])
                return torch.cat(parts, dim=1)

            def loss1(v: dict[str, torch.Tensor]) -> torch.Tensor:
                objective = self._objective(net, episode, victim, actions, v)
                return head.cosine_loss(lambda: objective(features_of(v))) + tv_of(v, flat_keys)

            if self.linear_solver == "closed_form":
                z, bad = _linear_input(net, episode)
                for k in flat_keys:
                    v1[k] = mods[k].from_policy(z[:, slices[k]].reshape(length, *mods[k].shape)).clamp(0.0, 1.0)
                rest = [s for k, s in slices.items() if k not in flat_keys]
                for s in rest:
                    v1["features"][:, s] = z[:, s].clamp_min(0.0)
            else:
                _, bad = adam_inversion(v1, boxes1, loss1, self.stage1, self.lr, signed=False)
            failed |= bad
            fixed = {k: v1[k].detach() for k in flat_keys}
            stage2_keys = [k for k in mods if k not in flat_keys]
        else:
            stage2_keys = list(mods)

        # Stage 2 (or the joint ablation): the images through the whole network, the stage-1 modalities fixed.
        full = GradientMatcher(net, episode.gradients.tensors)
        v2 = {k: _init_unit((length, *mods[k].shape), gen) for k in stage2_keys}
        v2.update(self._scalar_vars(victim, length))

        def loss2(v: dict[str, torch.Tensor]) -> torch.Tensor:
            objective = self._objective(net, episode, victim, actions, v)
            obs = {k: mods[k].to_policy(fixed[k] if k in fixed else v[k]) for k in mods}
            return full.cosine_loss(lambda: objective(net.features(obs))) + tv_of(v, stage2_keys)

        _, bad = adam_inversion(v2, boxes, loss2, self.stage2, self.lr, signed=True)
        failed |= bad
        unit = {k: (fixed[k] if k in fixed else v2[k].detach()) for k in mods}
        with torch.no_grad():
            features = net.features({k: mods[k].to_policy(unit[k]) for k in mods})
            if self.stages == "two":  # the linear layers' input is known from stage 1: use it for the outputs
                features = features_of(v1)
        fields = to_fields(mods, unit)
        scal = {**{k: v for k, v in v2.items() if k.startswith("scalar:")}}
        return fields, features.detach(), failed.numpy(), scal

    def _head_norm_ratio(self, net: VictimNet, episode: ObservedEpisode, features: torch.Tensor,
                         unit_error: torch.Tensor) -> torch.Tensor:
        """||g|| / ||g_rec||, both on the linear layers, with g_rec the gradient of <unit_error, F(x_rec)>."""
        names = net.head_names()
        g = episode.gradients.tensors
        norm_true = torch.sqrt(sum(g[n].reshape(g[n].shape[0], -1).double().pow(2).sum(1) for n in names))
        matcher = GradientMatcher(net, g, names)
        f = features.clone().requires_grad_()
        _, norm2 = matcher.terms(lambda: (unit_error * net.head(f)[0]).sum(1))
        return (norm_true / norm2.detach().double().sqrt()).float()


def _linear_input(net: VictimNet, episode: ObservedEpisode) -> tuple[torch.Tensor, torch.Tensor]:
    """Input of the first linear layer after the features: z = sum_i gb_i gW_i / sum_i gb_i^2 (T, in)."""
    first = net.head_names()[0]
    weight, bias = first, first.replace(".weight", ".bias")
    gw = episode.gradients.tensors[weight].double()
    gb = episode.gradients.tensors[bias].double()
    denom = gb.pow(2).sum(1)
    z = torch.einsum("to,toi->ti", gb, gw) / denom[:, None]
    return z.float(), ~(denom > 0) | ~torch.isfinite(z).all(1)


class QGI(_PaperPipeline):
    """QGI: gradient inversion of a DQN victim (states, action, predicted Q, TD target)."""

    name: ClassVar[str] = "qgi"
    algo: ClassVar[str] = "dqn"
    fields: ClassVar[tuple[str, ...]] = ("rgb", "depth", "bbox", "action", "q_value", "q_target")

    def reconstruct(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction:
        error, _ = self._errors(episode, victim)
        actions = error.abs().argmax(dim=1)  # one-hot bias gradient (paper eq. 5)
        fields, features, failed, scal = self._states(episode, victim, actions)
        net = VictimNet(victim)
        rows = torch.arange(len(actions))
        with torch.no_grad():
            q_pred = net.head(features)[0][rows, actions]
        # Target Q from the gradient-norm ratio: |dJ/dQ| = ||g|| / ||dQ_rec/dw|| (on the linear layers),
        # its sign from the bias gradient; SB3's DQN loss is smooth-L1, whose derivative clamp(Q^ - Q, -1, 1)
        # is inverted where |dJ/dQ| < 1 (at 1 only |Q^ - Q| >= 1 is known: the bound is returned).
        onehot = F.one_hot(actions, victim.n_actions).float()
        magnitude = self._head_norm_ratio(net, episode, features, onehot)
        sign = torch.sign(error[rows, actions])
        derivative = sign * magnitude
        if self.objective == "original":
            q_target = scal["scalar:q_target"].detach()
        else:
            q_target = q_pred - derivative.clamp(-1.0, 1.0)
        fields = _nan_rows(fields, failed)
        fields.update(action=actions.numpy().astype(np.int64), q_value=q_pred.double().numpy(),
                      q_target=q_target.double().numpy())
        return Reconstruction(fields=fields, extras={"failed": failed, "error_derivative": derivative.numpy()})


class RGI(_PaperPipeline):
    """RGI: gradient inversion of a REINFORCE victim (states, action by enumeration, return)."""

    name: ClassVar[str] = "rgi"
    algo: ClassVar[str] = "reinforce"
    fields: ClassVar[tuple[str, ...]] = ("rgb", "depth", "bbox", "action", "return")

    def reconstruct(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction:
        error, _ = self._errors(episode, victim)
        # the action is needed only by the "original" ablation's objective before the states are known
        provisional = error.abs().argmax(dim=1)
        fields, features, failed, scal = self._states(episode, victim, provisional)
        net = VictimNet(victim)
        with torch.no_grad():
            log_p = torch.log_softmax(net.head(features)[0].double(), dim=1)
        p = log_p.exp()
        entropy = -(p * log_p).sum(1, keepdim=True)
        # eq. 6: remove the entropy term's gradient dJ_ent/dz = ent_coef * p (log p + H)
        pg = error.double() - victim.loss.ent_coef * p * (log_p + entropy)
        # enumerate actions: dJ_pg/dz at R = 1 is p - e_a; pick the best-aligned direction (either sign), R by least squares
        eye = torch.eye(victim.n_actions, dtype=torch.float64)
        directions = p[:, None, :] - eye[None]  # (T, A, A)
        cos = (directions * pg[:, None, :]).sum(-1) / (directions.norm(dim=-1) * pg.norm(dim=-1, keepdim=True))
        actions = cos.abs().argmax(dim=1)  # the return may be negative: R (p - e_a) then points the other way
        u = directions[torch.arange(len(actions)), actions]
        returns = (u * pg).sum(-1) / u.pow(2).sum(-1)  # eq. 7
        if self.objective == "original":
            returns = scal["scalar:return"].detach().double()
        fields = _nan_rows(fields, failed)
        fields.update(action=actions.numpy().astype(np.int64), **{"return": returns.numpy()})
        return Reconstruction(fields=fields, extras={"failed": failed, "probabilities": p.numpy()})
