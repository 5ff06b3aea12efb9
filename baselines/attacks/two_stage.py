"""The QGI/RGI pipeline shared by ``qgi`` and ``rgi``: rule-based action, the objective-agnostic surrogate
``<grad_b J, F(x_rec)>``, two-stage multimodal reconstruction (the input of the linear layers first, then the
images with TV), rule-based supervisory signals.

The paper: "Privacy Risks of Reinforcement Learning in Household Robots" (QGI for DQN, RGI for REINFORCE);
its bibliographic details are recorded in docs/inversion-attacks.md ("References").
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch

from gradleak_bench.baselines.attacks.closed_form import head_parameter_names, logit_gradients
from gradleak_bench.baselines.attacks.common import snapshot_iterations
from gradleak_bench.inversion import (GradientMatcher, VictimNet, adam_inversion, init_unit, modalities,
                                      nan_rows, objective_scalars, original_objective, surrogate_objective, to_fields,
                                      total_variation)
from gradleak_bench.records import ObservedEpisode, VictimInfo

PRESETS = {"quick": dict(stage1=300, stage2=200), "paper": dict(stage1=10_000, stage2=10_000)}


class TwoStagePipeline:
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
        snapshots: stage-2 iteration counts (``"200,1000"``) after which the intermediate images are also
            returned, in ``extras["snapshots"]`` (iteration -> the state fields; stage 1 is complete by then):
            a budget curve of stage 2 from one run.
    """

    algo: ClassVar[str] = ""
    fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, preset: str = "quick", stage1: int | None = None, stage2: int | None = None,
                 lr: float = 0.1, tv: float = 0.1, objective: str = "surrogate", stages: str = "two",
                 linear_solver: str = "adam", seed: int = 0, snapshots: object = ()):
        if linear_solver not in ("adam", "closed_form"):
            raise ValueError(f"linear_solver must be 'adam' or 'closed_form', not {linear_solver!r}")
        self.linear_solver = linear_solver
        if preset not in PRESETS:
            raise ValueError(f"preset must be one of {sorted(PRESETS)}, not {preset!r}")
        if objective not in ("surrogate", "original"):
            raise ValueError(f"objective must be 'surrogate' or 'original', not {objective!r}")
        if stages not in ("two", "joint"):
            raise ValueError(f"stages must be 'two' or 'joint', not {stages!r}")
        self.preset = preset
        self.stage1 = int(stage1 if stage1 is not None else PRESETS[preset]["stage1"])
        self.stage2 = int(stage2 if stage2 is not None else PRESETS[preset]["stage2"])
        self.lr, self.tv, self.objective, self.stages, self.seed = float(lr), float(tv), objective, stages, int(seed)
        self.snapshots = snapshot_iterations(snapshots)

    def settings(self) -> dict[str, object]:
        """The resolved budget and hyper-parameters (what the preset stands for), for results files."""
        return {"preset": self.preset, "stage1": self.stage1, "stage2": self.stage2, "lr": self.lr,
                "lr_decay": "x0.1 at 3/8, 5/8, 7/8 of each stage", "tv": self.tv, "objective": self.objective,
                "stages": self.stages, "linear_solver": self.linear_solver, "seed": self.seed}

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
        error = torch.from_numpy(logit_gradients(episode, victim)).float()
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
        """Two-stage (or joint) multimodal reconstruction -> (fields, features, failed, variables); the
        stage-2 snapshots (:attr:`snapshots`) in ``variables["snapshots"]``."""
        net = VictimNet(victim)
        mods = modalities(victim)
        slices = net.feature_slices()
        # the vector state (and SB3's flattened depth) reaches the linear layers without a convolution: stage 1
        # recovers these keys; stage 2 the images behind the CNNs
        linear_keys = net.linear_keys()
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
            head = GradientMatcher(net, episode.gradients.tensors, net.stage1_names())
            width = sum(s.stop - s.start for s in slices.values())
            v1 = {k: init_unit((length, *mods[k].shape), gen) for k in linear_keys}
            v1["features"] = 0.1 * torch.rand((length, width), generator=gen)
            v1.update(self._scalar_vars(victim, length))
            boxes1 = dict(boxes, features=(0.0, math.inf))

            def features_of(v: Mapping[str, torch.Tensor]) -> torch.Tensor:
                parts = []
                for k, s in slices.items():
                    if k in linear_keys:  # through its own linear layers, or SB3's flattening
                        parts.append(net.extractor.extractors[k](mods[k].to_policy(v[k])).reshape(length, -1))
                    else:
                        parts.append(v["features"][:, s])
                return torch.cat(parts, dim=1)

            def loss1(v: dict[str, torch.Tensor]) -> torch.Tensor:
                objective = self._objective(net, episode, victim, actions, v)
                return head.cosine_loss(lambda: objective(features_of(v))) + tv_of(v, linear_keys)

            if self.linear_solver == "closed_form":
                z, bad = linear_input(net, episode)
                for k in linear_keys:
                    own = net.first_linear(k)
                    if own is not None:  # the key's own first linear layer's input, solved the same way
                        x, off = linear_input(net, episode, own)
                        if off.any():
                            x[off] = silent_layer_input(net, own, int(off.sum()))
                            bad |= ~torch.isfinite(x).all(1)
                    else:
                        x = z[:, slices[k]]
                    v1[k] = mods[k].from_policy(x.reshape(length, *mods[k].shape)).clamp(0.0, 1.0)
                rest = [s for k, s in slices.items() if k not in linear_keys]
                for s in rest:
                    v1["features"][:, s] = z[:, s].clamp_min(0.0)
            else:
                _, bad = adam_inversion(v1, boxes1, loss1, self.stage1, self.lr, signed=False)
            failed |= bad
            fixed = {k: v1[k].detach() for k in linear_keys}
            stage2_keys = [k for k in mods if k not in linear_keys]
        else:
            stage2_keys = list(mods)

        # Stage 2 (or the joint ablation): the images through the whole network, the stage-1 modalities fixed.
        full = GradientMatcher(net, episode.gradients.tensors)
        v2 = {k: init_unit((length, *mods[k].shape), gen) for k in stage2_keys}
        v2.update(self._scalar_vars(victim, length))

        def loss2(v: dict[str, torch.Tensor]) -> torch.Tensor:
            objective = self._objective(net, episode, victim, actions, v)
            obs = {k: mods[k].to_policy(fixed[k] if k in fixed else v[k]) for k in mods}
            return full.cosine_loss(lambda: objective(net.features(obs))) + tv_of(v, stage2_keys)

        snapshots: dict[int, dict[str, np.ndarray]] = {}

        def snapshot(done: int, _: torch.Tensor, bad_now: torch.Tensor) -> None:
            if done in self.snapshots:
                unit_now = {k: (fixed[k] if k in fixed else v2[k].detach()) for k in mods}
                snapshots[done] = nan_rows(to_fields(mods, unit_now), (failed | bad_now).numpy())

        _, bad = adam_inversion(v2, boxes, loss2, self.stage2, self.lr, signed=True,
                                callback=snapshot if self.snapshots else None)
        failed |= bad
        unit = {k: (fixed[k] if k in fixed else v2[k].detach()) for k in mods}
        with torch.no_grad():
            features = net.features({k: mods[k].to_policy(unit[k]) for k in mods})
            if self.stages == "two":  # the linear layers' input is known from stage 1: use it for the outputs
                features = features_of(v1)
        fields = to_fields(mods, unit)
        scal: dict = {k: v for k, v in v2.items() if k.startswith("scalar:")}
        if self.snapshots:
            scal["snapshots"] = snapshots
        return fields, features.detach(), failed.numpy(), scal

    @staticmethod
    def _snapshot_extras(variables: Mapping[str, object]) -> dict[str, object]:
        return {"snapshots": variables["snapshots"]} if "snapshots" in variables else {}

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


def silent_layer_input(net: VictimNet, layer: tuple[str, str], frames: int) -> torch.Tensor:
    """The input of a linear + ReLU layer on frames where none of its units fired, so its gradient is zero and
    says only that ``W x + b <= 0`` (no attack can learn more from it): the smallest such ``x``, the point of
    that polytope nearest the origin (the zero vector when ``b <= 0``: at SB3's zero-bias initialisation, the
    zero box, the target out of view). NaN rows where no input keeps every unit off. (frames, in)."""
    params = dict(net.policy.named_parameters())
    weight = params[layer[0]].detach().double().numpy()
    bias = params[layer[1]].detach().double().numpy()
    if np.all(bias <= 0.0):
        x = np.zeros(weight.shape[1])
    else:
        from scipy.optimize import minimize

        res = minimize(lambda v: float(v @ v), np.zeros(weight.shape[1]), jac=lambda v: 2 * v, method="SLSQP",
                       constraints=[{"type": "ineq", "fun": lambda v: -(weight @ v + bias), "jac": lambda v: -weight}])
        # no such x (the stream holds a gradient no input gives): the frame fails rather than take a guess
        x = res.x if res.success and np.all(weight @ res.x + bias <= 1e-6) else np.full(weight.shape[1], np.nan)
    return torch.from_numpy(np.tile(x, (frames, 1))).float()


def linear_input(net: VictimNet, episode: ObservedEpisode, layer: tuple[str, str] | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Input of a linear layer: z = sum_i gb_i gW_i / sum_i gb_i^2 (T, in), exact for one sample's gradient.
    ``layer``: its (weight, bias) names; by default the first linear layer after the features."""
    if layer is None:
        first = net.head_names()[0]
        layer = first, first.replace(".weight", ".bias")
    weight, bias = layer
    gw = episode.gradients.tensors[weight].double()
    gb = episode.gradients.tensors[bias].double()
    denom = gb.pow(2).sum(1)
    z = torch.einsum("to,toi->ti", gb, gw) / denom[:, None]
    return z.float(), ~(denom > 0) | ~torch.isfinite(z).all(1)
