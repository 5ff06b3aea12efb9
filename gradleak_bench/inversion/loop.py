"""The shared optimisation loop: Adam (optionally signed, with step decay) on a batch of independent frames,
per-frame failure flags, restarts and the NaN rows of failed frames."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import torch


def repeat(t: torch.Tensor, r: int) -> torch.Tensor:
    """``t`` stacked ``r`` times along the batch axis (restarts are rows of one batch)."""
    return t.repeat(r, *([1] * (t.ndim - 1)))


def adam_inversion(variables: dict[str, torch.Tensor], boxes: Mapping[str, tuple[float, float]],
                   loss_fn: Callable[[dict[str, torch.Tensor]], torch.Tensor], iterations: int, lr: float,
                   signed: bool, decay: bool = True,
                   callback: Callable[[int, torch.Tensor, torch.Tensor], None] | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Adam on a batch of independent frames; returns (final per-frame loss, per-frame failed flag).

    Each frame's loss is its own term of the summed objective, so frames never influence each other; a
    frame whose loss or iterate turns non-finite is masked out of the sum and flagged.

    ``callback(done, loss, failed)``, if given, runs after each step (``done`` steps taken, the box applied)
    with the per-frame loss of the iterate before that step: a budget curve reads intermediate iterates of
    one run from it (``benchmarks/budget_curves.py``) instead of rerunning each budget from scratch."""
    params = [v.requires_grad_() for v in variables.values()]
    batch = params[0].shape[0]
    if iterations <= 0:  # nothing to optimise: the initialisation is returned as is
        return torch.zeros(batch), torch.zeros(batch, dtype=torch.bool)
    optimizer = torch.optim.Adam(params, lr=lr)
    milestones = [int(iterations * f) for f in (3 / 8, 5 / 8, 7 / 8)]
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones, gamma=0.1) if decay else None
    failed = torch.zeros(batch, dtype=torch.bool)
    for step in range(iterations):
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
        if callback is not None:
            callback(step + 1, loss.detach(), failed.clone())
    loss = loss_fn(variables)  # at the final iterate (the matcher differentiates, so grad mode stays on)
    failed |= ~torch.isfinite(loss.detach())
    return loss.detach(), failed

def nan_rows(fields: dict[str, np.ndarray], failed: np.ndarray) -> dict[str, np.ndarray]:
    """``fields`` as float64 with the rows of failed frames set to NaN (scored as failed frames)."""
    out = {}
    for k, v in fields.items():
        v = np.asarray(v, dtype=np.float64).copy()
        v[failed] = np.nan
        out[k] = v
    return out


def best_restart(loss: torch.Tensor, failed: torch.Tensor, length: int, r: int) -> torch.Tensor:
    """Per frame, the restart with the lowest final loss (a failed or non-finite one never wins)."""
    score = torch.where(failed, torch.full_like(loss, math.inf), loss.nan_to_num(math.inf)).reshape(r, length)
    return score.argmin(dim=0)
