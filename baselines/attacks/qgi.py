"""``qgi``: gradient inversion of a DQN victim (states, action, predicted Q, TD target) by the QGI/RGI paper's
pipeline (:mod:`.two_stage`). docs/inversion-attacks.md.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from gradleak_bench.baselines.attacks.two_stage import TwoStagePipeline
from gradleak_bench.inversion import VictimNet, nan_rows
from gradleak_bench.records import ObservedEpisode, Reconstruction, VictimInfo


class QGI(TwoStagePipeline):
    """QGI: gradient inversion of a DQN victim (states, action, predicted Q, TD target)."""

    name: ClassVar[str] = "qgi"
    summary: ClassVar[str] = (
        "QGI (DQN): rule action, surrogate <grad_b J, F(x)>, two-stage states, rule Q/TD target (params: "
        "preset)"
    )
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
        fields = nan_rows(fields, failed)
        fields.update(action=actions.numpy().astype(np.int64), q_value=q_pred.double().numpy(),
                      q_target=q_target.double().numpy())
        return Reconstruction(fields=fields, extras={"failed": failed, "error_derivative": derivative.numpy(),
                                                     **self._snapshot_extras(scal)})

