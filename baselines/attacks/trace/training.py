"""TRACE's training loop: teacher forcing, then scheduled sampling; AdamW with warm-up and cosine decay; one
checkpoint per epoch through the plug-in API's :class:`~gradleak_bench.artifacts.ArtifactCache`, so a stopped
training resumes exactly (same weights as an uninterrupted one)."""
from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from gradleak_bench.artifacts import ArtifactCache
from gradleak_bench.baselines.attacks.trace.data import TraceData, psnr, to_unit
from gradleak_bench.baselines.attacks.trace.model import TraceNet
from gradleak_bench.errors import GradleakError

CHECKPOINT = "train_state"
CURVE = "curve"  # <attacker folder>/curve.json: the learning curve, rewritten after every epoch


@dataclass(frozen=True)
class TrainOptions:
    """How one call trains (not what it trains: that is the :class:`TraceConfig`)."""

    name: str = "trace"
    device: torch.device = torch.device("cpu")
    progress: bool = False
    stop_after: int | None = None  # stop after this many epochs in this call (a checkpoint is written first)
    force: bool = False            # ignore an existing checkpoint


def normalise_features(model: TraceNet, train: TraceData) -> None:
    """Feature standardisation and the last step embedding, from the training episodes (buffers: saved)."""
    valid = torch.arange(train.feats.shape[1])[None] < train.lengths[:, None]
    with torch.no_grad():  # encoder=learned: the statistics of its sketch at initialisation
        flat = torch.cat([model.features(chunk) for chunk in train.feats[valid].split(1024)])
    model.feat_mean.copy_(flat.mean(0))
    model.feat_std.copy_(flat.std(0).clamp(min=1e-6))
    model.step_cap.fill_(min(model.cfg.max_steps, int(train.lengths.max())) - 1)


def train(model: TraceNet, train_data: TraceData, val: TraceData, cache: ArtifactCache, options: TrainOptions,
          collect_seconds: float) -> dict[str, Any]:
    """Train ``model`` in place for ``model.cfg.epochs`` epochs (resuming from ``cache``'s checkpoint);
    returns the training report (history per epoch, seconds).

    Raises:
        GradleakError: ``stop_after`` epochs were run and more remain (the checkpoint is written).
    """
    from gradleak_bench.progress import progress as tqdm

    c = model.cfg
    opt = torch.optim.AdamW(model.parameters(), lr=c.lr, weight_decay=c.weight_decay)
    n = train_data.feats.shape[0]
    per_epoch = math.ceil(n / c.batch_size)
    total_steps = per_epoch * c.epochs
    state: dict[str, Any] = {"epoch": 0, "history": [], "train_seconds": 0.0, "collect_seconds": collect_seconds}
    if not options.force and (resumed := cache.load_checkpoint(CHECKPOINT, model, opt)) is not None:
        state = resumed
        model.to(options.device)
        print(f"[{options.name}] resuming from epoch {state['epoch']} of {c.epochs} ({cache.path(CHECKPOINT)})",
              file=sys.stderr, flush=True)
    bar = tqdm(total=total_steps, initial=state["epoch"] * per_epoch, desc=f"{options.name}: train",
               disable=not options.progress)
    epochs_this_call = 0
    while state["epoch"] < c.epochs:
        state["history"].append(_epoch(model, opt, train_data, val, state["epoch"], per_epoch, total_steps,
                                       options.device, bar))
        state["train_seconds"] += state["history"][-1]["seconds"]
        state["epoch"] += 1
        epochs_this_call += 1
        cache.save_checkpoint(CHECKPOINT, model, opt, state)  # every epoch: an epoch is the unit of resume
        cache.save_json(CURVE, learning_curve(c, state, n, int(val.feats.shape[0])))
        if options.stop_after is not None and epochs_this_call >= options.stop_after and state["epoch"] < c.epochs:
            bar.close()
            raise GradleakError(f"{options.name}: training stopped after epoch {state['epoch']} of {c.epochs} "
                                f"(stop_after={options.stop_after}); run again to resume from "
                                f"{cache.path(CHECKPOINT)}")
    bar.close()
    model.eval()
    return {"epochs": c.epochs, "train_sequences": n, "val_sequences": int(val.feats.shape[0]),
            "collect_seconds": state["collect_seconds"], "train_seconds": state["train_seconds"],
            "history": state["history"]}


def learning_curve(config: Any, state: Mapping[str, Any], train_sequences: int, val_sequences: int
                   ) -> dict[str, Any]:
    """The learning curve so far (JSON): per epoch the train loss (and its terms), the scheduled-sampling
    probability and the val metrics, with the configuration, so a stopped training still reports its curve."""
    return {"config": config.to_dict(), "epochs_planned": config.epochs, "epochs_done": state["epoch"],
            "train_sequences": train_sequences, "val_sequences": val_sequences,
            "collect_seconds": state["collect_seconds"], "train_seconds": state["train_seconds"],
            "history": state["history"]}


def sampling_probability(config: Any, epoch: int) -> float:
    """Scheduled sampling: the probability that a previous-image token is the model's own prediction in
    (0-based) ``epoch``: 0 for the first ``tf_fraction`` of the epochs (teacher forcing), then a linear ramp
    that reaches ``ss_max`` (the paper: 0.8) halfway through the remaining epochs and stays there."""
    c = config
    if epoch < c.tf_fraction * c.epochs:
        return 0.0
    return c.ss_max * min(1.0, (epoch + 1 - c.tf_fraction * c.epochs) / max(1.0, (1 - c.tf_fraction) * c.epochs / 2))


def learning_rate(config: Any, step: int, per_epoch: int, total_steps: int) -> float:
    """The learning rate at (0-based) global ``step``: a linear warm-up over ``warmup_steps`` steps (0: one
    epoch of ``per_epoch`` steps), then cosine decay to 0 at ``total_steps``; a function of the step alone, so
    a resumed training continues the same schedule."""
    warmup = config.warmup_steps or per_epoch
    return config.lr * min(1.0, (step + 1) / max(1, warmup)) * \
        0.5 * (1 + math.cos(math.pi * step / max(1, total_steps)))

def _epoch(model: TraceNet, opt: torch.optim.Optimizer, data: TraceData, val: TraceData, epoch: int,
           per_epoch: int, total_steps: int, device: torch.device, bar: Any) -> dict[str, Any]:
    c = model.cfg
    t0 = time.perf_counter()
    # the epoch's order and sampling draws depend on (seed, epoch) only: a resumed run draws the same
    gen = torch.Generator().manual_seed(c.seed * 1_000_003 + epoch)
    order = torch.randperm(data.feats.shape[0], generator=gen)
    term = action_term(model)
    sums = {"loss": 0.0, "mse": 0.0, term: 0.0, "rollout": 0.0, "n": 0}
    p_sample = sampling_probability(c, epoch)
    model.train()
    for b in range(per_epoch):
        step = epoch * per_epoch + b
        for group in opt.param_groups:
            group["lr"] = learning_rate(c, step, per_epoch, total_steps)
        ids = order[b * c.batch_size: (b + 1) * c.batch_size]
        loss, parts = loss_of(model, data, ids, p_sample, gen, device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sums["loss"] += float(loss.detach()) * len(ids)
        sums["mse"] += parts["mse"] * len(ids)
        sums[term] += parts[term] * len(ids)
        sums["rollout"] += parts["rollout"] * len(ids)
        sums["n"] += len(ids)
        bar.update(1)
        bar.set_postfix(epoch=epoch + 1, loss=f"{float(loss.detach()):.4f}", p_ss=f"{p_sample:.2f}")
    seconds = time.perf_counter() - t0
    val_psnr, val_action = validate(model, val, device)
    return {"epoch": epoch + 1, "loss": sums["loss"] / sums["n"], "mse": sums["mse"] / sums["n"],
            term: sums[term] / sums["n"], "rollout": sums["rollout"] / sums["n"], "p_scheduled_sampling": p_sample,
            "seconds": seconds,
            "sequences_per_s": sums["n"] / seconds, "val_psnr_autoregressive": val_psnr,
            ("val_action_mae" if model.continuous else "val_action_accuracy"): val_action}


def action_term(model: TraceNet) -> str:
    """The name of the loss's action term in the training history: ``ce`` (discrete), ``action_mse`` or
    ``action_nll`` (continuous, :attr:`TraceConfig.action_loss`)."""
    return f"action_{model.cfg.action_loss}" if model.continuous else "ce"


def action_loss(model: TraceNet, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The action term on the valid steps: cross-entropy of the logits (discrete); for a continuous victim
    the MSE of the predicted mean, or the Gaussian NLL with the predicted log-variance (``nll``, up to its
    constant), both averaged over steps and components."""
    if not model.continuous:
        return F.cross_entropy(out, target)
    mean, log_var = model.gaussian(out)
    if model.cfg.action_loss == "nll":
        return 0.5 * (log_var + (target - mean).pow(2) * torch.exp(-log_var)).mean()
    return (target - mean).pow(2).mean()


def loss_of(model: TraceNet, data: TraceData, ids: torch.Tensor, p_sample: float, gen: torch.Generator,
            device: torch.device) -> tuple[torch.Tensor, dict[str, float]]:
    """The training loss of one batch.

    Main term: MSE + L1 on [0, 1] RGB + ``action_weight`` x the action term (:func:`action_loss`), on a pass
    whose previous-image tokens are the true frames, each replaced by the model's own (no-grad,
    teacher-forced) prediction with probability ``p_sample`` (scheduled sampling). ``rollout_weight`` > 0 adds
    the same loss on a pass fed *only* the model's own predictions (what generation sees). Augmentation
    (``aug_noise``, ``aug_brightness``) perturbs the gradient features and the previous-image tokens of the
    training passes."""
    c = model.cfg
    feats = data.feats[ids].to(device)
    target = to_unit(data.images[ids]).to(device)
    actions = data.actions[ids].to(device)
    B, T = actions.shape[:2]
    valid = (torch.arange(T)[None] < data.lengths[ids][:, None]).to(device)
    prev = torch.zeros_like(target)
    prev[:, 1:] = target[:, :-1]
    own = None
    if model.cfg.temporal and (p_sample > 0 or c.rollout_weight > 0):
        with torch.no_grad():
            own, _ = model(feats, prev)
        own = torch.cat([torch.zeros_like(own[:, :1]), own[:, :-1]], dim=1)  # own[:, t]: predicted frame t-1
    if own is not None and p_sample > 0:
        mix = (torch.rand(B, T, generator=gen) < p_sample).to(device)[:, :, None, None, None]
        prev[:, 1:] = torch.where(mix[:, 1:], own[:, 1:], prev[:, 1:])

    def term(previous: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if previous is not None and c.aug_brightness > 0:
            scale = 1 + c.aug_brightness * (2 * torch.rand(B, T, 1, 1, 1, generator=gen) - 1)
            previous = (previous * scale.to(device)).clamp(0, 1)
        images, logits = model(feats, previous, c.aug_noise, gen)
        err = (images - target)[valid]
        mse = err.pow(2).mean()
        act = action_loss(model, logits[valid], actions[valid])
        return mse + err.abs().mean() + c.action_weight * act, mse, act

    loss, mse, act = term(prev if model.cfg.temporal else None)
    rollout = torch.zeros(())
    if own is not None and c.rollout_weight > 0:
        rollout, _, _ = term(own)
        loss = loss + c.rollout_weight * rollout
    return loss, {"mse": float(mse.detach()), action_term(model): float(act.detach()),
                  "rollout": float(rollout.detach())}


@torch.no_grad()
def validate(model: TraceNet, val: TraceData, device: torch.device) -> tuple[float, float]:
    """Autoregressive PSNR and action accuracy (continuous: the mean absolute error of the predicted mean,
    per step and component) on the attacker's own val-layout episodes."""
    model.eval()
    psnrs, hits = [], []
    for i in range(val.feats.shape[0]):
        k = int(val.lengths[i])
        images, logits = model.generate(val.feats[i, :k].to(device))
        psnrs.append(psnr(images.cpu(), to_unit(val.images[i, :k])))
        if model.continuous:
            hits.append((model.gaussian(logits)[0].cpu() - val.actions[i, :k]).abs().flatten())
        else:
            hits.append(logits.argmax(-1).cpu() == val.actions[i, :k])
    model.train()
    return float(torch.cat(psnrs).mean()), float(torch.cat(hits).float().mean())

