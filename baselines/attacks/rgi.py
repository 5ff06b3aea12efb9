"""``rgi``: gradient inversion of a REINFORCE victim (states, action by enumeration, return) by the QGI/RGI
paper's pipeline (:mod:`.two_stage`). docs/inversion-attacks.md.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from gradleak_bench.baselines.attacks.two_stage import TwoStagePipeline
from gradleak_bench.inversion import VictimNet, nan_rows
from gradleak_bench.records import ObservedEpisode, Reconstruction, VictimInfo


class RGI(TwoStagePipeline):
    """RGI: gradient inversion of a REINFORCE victim (states, action by enumeration, return)."""

    name: ClassVar[str] = "rgi"
    summary: ClassVar[str] = (
        "RGI (REINFORCE): surrogate objective, two-stage states, action by enumeration, return (params: "
        "preset)"
    )
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
        fields = nan_rows(fields, failed)
        fields.update(action=actions.numpy().astype(np.int64), **{"return": returns.numpy()})
        return Reconstruction(fields=fields, extras={"failed": failed, "probabilities": p.numpy(),
                                                     **self._snapshot_extras(scal)})
