"""``dlg``: Deep Leakage from Gradients, the squared L2 gradient distance minimised by L-BFGS over the
observation, a soft action label and the loss's scalar targets, all jointly.

Zhu, Liu, Han, "Deep Leakage from Gradients", NeurIPS 2019, arXiv:1906.08935. docs/inversion-attacks.md.
"""
from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch

from gradleak_bench.baselines.attacks.common import ObservationAttack, rule_actions, snapshot_iterations
from gradleak_bench.inversion import (GradientMatcher, VictimNet, as_policy_obs, init_unit, modalities, nan_rows,
                                      objective_scalars, original_objective, to_fields)
from gradleak_bench.records import ObservedEpisode, Reconstruction, VictimInfo


class DLG(ObservationAttack):
    """Deep Leakage from Gradients (Zhu et al. 2019): squared L2 gradient distance minimised by L-BFGS over
    the observation, a soft action label and the loss's scalar targets, all jointly.

    Args:
        preset: ``"quick"`` (30 L-BFGS iterations) or ``"paper"`` (300, as in DLG).
        iterations: override the preset. lr: L-BFGS step (1). seed: initialisation seed.
        snapshots: iteration counts (``"10,30,100"``) after which the intermediate reconstruction is also
            returned, in ``extras["snapshots"]`` (the points of a budget curve from one run).
    """

    name: ClassVar[str] = "dlg"
    summary: ClassVar[str] = "Zhu et al.: L2 gradient distance, L-BFGS, action optimised jointly (params: preset, iterations)"
    label_from_gradient: ClassVar[bool] = False
    _PRESETS: ClassVar[dict[str, int]] = {"quick": 30, "paper": 300}

    def __init__(self, preset: str = "quick", iterations: int | None = None, lr: float = 1.0, seed: int = 0,
                 snapshots: object = ()):
        if preset not in self._PRESETS:
            raise ValueError(f"preset must be one of {sorted(self._PRESETS)}, not {preset!r}")
        self.preset = preset
        self.iterations = int(iterations if iterations is not None else self._PRESETS[preset])
        self.lr, self.seed = float(lr), int(seed)
        self.snapshots = snapshot_iterations(snapshots)

    def settings(self) -> dict[str, object]:
        """The resolved budget and hyper-parameters (what the preset stands for), for results files."""
        return {"preset": self.preset, "iterations": self.iterations,
                "optimizer": "L-BFGS (strong Wolfe, history 100)", "lr": self.lr, "loss": "||g_rec - g||^2 / ||g||^2",
                "label": "closed-form rule" if self.label_from_gradient else "soft label optimised", "seed": self.seed}

    def reconstruct(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction:
        net = VictimNet(victim)
        mods = modalities(victim)
        plain = not isinstance(victim.policy.observation_space, gym.spaces.Dict)
        length = episode.gradients.length
        matcher = GradientMatcher(net, episode.gradients.tensors)
        gen = torch.Generator().manual_seed(self.seed)
        variables = {k: init_unit((length, *m.shape), gen).requires_grad_() for k, m in mods.items()}
        scalars = objective_scalars(victim.loss.algo)
        for s in scalars:
            variables[f"scalar:{s}"] = torch.full((length,), 1.0 if s == "advantage" else 0.0, requires_grad=True)
        rule = rule_actions(episode, victim) if self.label_from_gradient else None
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

        def fields_now(failed_now: torch.Tensor) -> dict[str, np.ndarray]:
            fields = to_fields(mods, {k: variables[k] for k in mods})
            for s in scalars:
                fields[s] = variables[f"scalar:{s}"].detach().double().numpy()
            fields = nan_rows(fields, failed_now.numpy())
            actions = rule if rule is not None else variables["label"].detach().argmax(dim=1)
            fields["action"] = actions.numpy().astype(np.int64)
            return self._fill(fields, victim)

        snapshots: dict[int, dict[str, np.ndarray]] = {}
        for done in range(1, self.iterations + 1):
            optimizer.step(closure)
            with torch.no_grad():
                for k in mods:
                    bad = ~torch.isfinite(variables[k].reshape(length, -1)).all(dim=1)
                    failed |= bad
                    variables[k].nan_to_num_(0.5).clamp_(0.0, 1.0)  # box; a diverged frame stays flagged
            if done in self.snapshots:
                snapshots[done] = fields_now(failed.clone())
        final = per_frame(variables).detach()
        failed |= ~torch.isfinite(final)
        extras = {"loss": final.numpy(), "failed": failed.numpy()}
        if self.snapshots:
            extras["snapshots"] = snapshots
        return Reconstruction(fields=fields_now(failed), extras=extras)
