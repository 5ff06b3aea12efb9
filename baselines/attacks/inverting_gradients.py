"""``inverting_gradients``: single-frame gradient inversion by cosine matching + total variation.

Geiping, Bauermeister, Droege, Moeller, "Inverting Gradients -- How easy is it to break privacy in federated
learning?", NeurIPS 2020, arXiv:2003.14053. Signed Adam lr 0.1 with step decay at 3/8, 5/8, 7/8 of the
iterations, box constraint, restarts (the best by final loss per frame); the action is taken first with the
closed-form rule, the loss's unknown scalar targets (TD target, advantage, return) are optimised jointly.
Any victim. docs/inversion-attacks.md.
"""
from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch

from gradleak_bench.baselines.attacks.common import ObservationAttack, rule_actions, snapshot_iterations
from gradleak_bench.inversion import (GradientMatcher, VictimNet, adam_inversion, as_policy_obs, best_restart,
                                      init_unit, modalities, nan_rows, objective_scalars, original_objective,
                                      repeat, to_fields, total_variation)
from gradleak_bench.records import ObservedEpisode, Reconstruction, VictimInfo

_PRESETS_IG = {"quick": dict(iterations=100, restarts=1, tv=1e-1), "paper": dict(iterations=4800, restarts=1, tv=1e-1)}


class InvertingGradients(ObservationAttack):
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
        snapshots: iteration counts (``"100,300"``) after which the intermediate reconstruction is also
            returned, in ``extras["snapshots"]`` (points of a budget curve from one run, on the schedule of
            the full ``iterations``: its learning rate is not decayed early).
    """

    name: ClassVar[str] = "inverting_gradients"
    summary: ClassVar[str] = (
        "Geiping et al.: cosine gradient matching + TV, signed Adam, box, restarts (params: preset, "
        "iterations, tv)"
    )

    def __init__(self, preset: str = "quick", iterations: int | None = None, restarts: int | None = None,
                 tv: float | None = None, lr: float = 0.1, signed: bool = True, seed: int = 0,
                 snapshots: object = ()):
        if preset not in _PRESETS_IG:
            raise ValueError(f"preset must be one of {sorted(_PRESETS_IG)}, not {preset!r}")
        p = dict(_PRESETS_IG[preset])
        self.preset = preset
        self.iterations = int(iterations if iterations is not None else p["iterations"])
        self.restarts = int(restarts if restarts is not None else p["restarts"])
        self.tv = float(tv if tv is not None else p["tv"])
        self.lr, self.signed, self.seed = float(lr), bool(signed), int(seed)
        self.snapshots = snapshot_iterations(snapshots)

    def settings(self) -> dict[str, object]:
        """The resolved budget and hyper-parameters (what the preset stands for), for results files."""
        return {"preset": self.preset, "iterations": self.iterations, "restarts": self.restarts, "tv": self.tv,
                "lr": self.lr, "lr_decay": "x0.1 at 3/8, 5/8, 7/8", "signed": self.signed, "optimizer": "Adam",
                "loss": "cosine + TV", "seed": self.seed}

    def known_scalars(self, episode: ObservedEpisode, victim: VictimInfo) -> dict[str, torch.Tensor]:
        """Scalar loss targets (``objective_scalars``) taken as known, ``(T,)`` each, instead of optimised.

        None here: the attacker does not know them. A comparison that must run the exact loss of another
        implementation (``benchmarks/ig_reference.py``, with the true TD target) overrides this."""
        return {}

    def reconstruct(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction:
        net = VictimNet(victim)
        mods = modalities(victim)
        plain = not isinstance(victim.policy.observation_space, gym.spaces.Dict)
        length, r = episode.gradients.length, max(self.restarts, 1)
        actions = rule_actions(episode, victim)
        target = {n: repeat(g, r) for n, g in episode.gradients.tensors.items()}
        matcher = GradientMatcher(net, target)
        gen = torch.Generator().manual_seed(self.seed)
        variables = {k: init_unit((length * r, *m.shape), gen) for k, m in mods.items()}
        scalars = objective_scalars(victim.loss.algo)
        known = {s: repeat(torch.as_tensor(v, dtype=torch.float32), r)
                 for s, v in self.known_scalars(episode, victim).items() if s in scalars}
        for s in scalars:
            if s not in known:
                variables[f"scalar:{s}"] = torch.full((length * r,), 1.0 if s == "advantage" else 0.0)
        scalar_of = lambda v, s: known[s] if s in known else v[f"scalar:{s}"]  # noqa: E731
        boxes = {k: (0.0, 1.0) for k in mods}
        action_r = repeat(actions, r)

        def loss_fn(v: dict[str, torch.Tensor]) -> torch.Tensor:
            objective = original_objective(net, action_r, {s: scalar_of(v, s) for s in scalars})
            obs = as_policy_obs(mods, {k: v[k] for k in mods}, plain)
            loss = matcher.cosine_loss(lambda: objective(net.features(obs)))
            for k, m in mods.items():
                if m.spatial is not None and self.tv:
                    loss = loss + self.tv * total_variation(v[k], m.spatial)
            return loss

        snapshots: dict[int, dict[str, np.ndarray]] = {}

        def fields_of(loss: torch.Tensor, failed: torch.Tensor
                      ) -> tuple[dict[str, np.ndarray], torch.Tensor, np.ndarray]:
            best = best_restart(loss, failed, length, r)
            pick = lambda t: t.reshape(r, length, *t.shape[1:])[best, torch.arange(length)]  # noqa: E731
            chosen_failed = failed.reshape(r, length)[best, torch.arange(length)].numpy()
            fields = to_fields(mods, {k: pick(variables[k]) for k in mods})
            for s in scalars:
                fields["return" if s == "return" else s] = pick(scalar_of(variables, s)).detach().double().numpy()
            fields = nan_rows(fields, chosen_failed)
            fields["action"] = actions.numpy().astype(np.int64)
            return self._fill(fields, victim), pick(loss), chosen_failed

        def snapshot(done: int, loss: torch.Tensor, failed: torch.Tensor) -> None:
            if done in self.snapshots:
                snapshots[done] = fields_of(loss, failed)[0]

        loss, failed = adam_inversion(variables, boxes, loss_fn, self.iterations, self.lr, self.signed,
                                      callback=snapshot if self.snapshots else None)
        fields, chosen_loss, chosen_failed = fields_of(loss, failed)
        extras = {"loss": chosen_loss.numpy(), "failed": chosen_failed}
        if self.snapshots:
            extras["snapshots"] = snapshots
        return Reconstruction(fields=fields, extras=extras)
