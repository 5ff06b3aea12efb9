"""Trajectory attacks: reconstruct where the robot went (pose per step) from its released gradient stream.

``tsp`` — a Temporal State Propagator in the spirit of an anonymous Chinese-language blog post, "Temporal
Gradient Inversion for Private Trajectory Reconstruction in Embodied Reinforcement Learning" (a commentary on
the TRACE paper of Bhujel et al.; no author, date or URL given; read as an idea, not as a recipe; docs/tsp.md says what we kept, what we changed and what we measured). It treats the
stream as a series of measurements of the robot's motion and integrates them into a feasible path:

1. **Gradient-action decoupler (closed form).** The policy head's weight gradient of one step is the outer
   product ``g h^T`` of the logit gradient ``g = dL/dz`` and the head's input features ``h`` (rank 1). Per
   step we factor it by SVD; when the release is noisy we first project every step onto the episode's
   dominant feature subspace (the top right singular vectors of all steps stacked, as many as stand above
   the noise edge), which averages the noise over time. The action is the closed-form sign-free rule
   (largest ``|g_k|``; docs/closed-form.md) applied to the denoised ``g``; with exact gradients it is
   exactly the closed-form action.
2. **State-prior encoder (learned).** A blocked move leaves the robot where it was, so the next step's
   observation, hence ``h``, is the same: the pair ``[W_t; W_{t+1}]`` is exactly rank 1 and
   ``1 - cos(h_t, h_{t+1})`` is (numerically) zero. A small MLP on these feature-change statistics predicts, for every move step, the probability that the move was
   blocked. It is fit on train-layout episodes the attacker collects itself (full-length, with their true
   poses), at the noise level the attacker estimates from the released stream (the rank-1 residual), by
   adding that noise to its own clean gradients: the attacker adapts to the defense without being told it.
3. **Differentiable kinematics + L-BFGS.** A planar robot with state (x, y, yaw, v_forward, v_strafe,
   omega) whose velocities are set by per-step *intents* and decay with damping ``k_d`` inside a step,
   integrated with RK4 (torch, differentiable). The initial pose and the intents are optimised with L-BFGS
   against: the measured motion (action x (1 - p_blocked) x the nominal step, weighted by its certainty), a
   start prior and a free-space occupancy prior learned from the *train* layouts (the held-out layout is
   private), and no sideways slip for a robot without strafe actions. The yaw of the start is unknown and
   the objective is multi-modal in it, so several starts are optimised in one batch and the best kept.

``dead_reckoning`` — the baseline: the closed-form actions integrated with the nominal step sizes from the
same start prior, ignoring collisions.

Neither ever sees a held-out layout, pose or observation: only released gradients, ``VictimInfo`` and what
the threat model lets an attacker collect on train layouts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction, head_parameter_names
from gradleak_bench.records import ObservedEpisode, Reconstruction, VictimInfo

if TYPE_CHECKING:
    from gradleak_bench.tasks import TaskSpec

GRID_CELL = 0.1
GRID_ORIGIN = -2.0  # the occupancy prior covers [-2, 18) m in x and y
GRID_CELLS = 200
_EPS_LOG = 1e-12


# ----------------------------------------------------------------------------------- public task facts


def motion_table(task: TaskSpec) -> np.ndarray:
    """Nominal motion of each action ``(n_actions, 3)``: forward (m), strafe left (m), yaw change (rad), from
    the task's public facts (``victim.task_facts``).

    Raises:
        ValueError: For a task without discrete actions.
    """
    return task.motion_table()


@dataclass(frozen=True)
class LayoutPrior:
    """What the train layouts say about where a robot is, in the world frame: the mean and covariance of a
    start position (uniform in free space, equal weight per layout) and a log-occupancy grid (the fraction
    of train layouts whose free space holds each 0.1 m cell, blurred)."""

    start_mean: np.ndarray
    start_cov: np.ndarray
    log_occupancy: np.ndarray  # (GRID_CELLS, GRID_CELLS), rows = y


@lru_cache(maxsize=4)
def layout_prior(task: TaskSpec, split: str = "train") -> LayoutPrior:
    """The prior of ``split`` (train only in practice) from the public layout facts of the task
    (``task.layouts(split)``: the free-space grid of each layout)."""
    from scipy import ndimage

    if split.startswith("test"):
        raise ValueError("the layout prior may only come from train or val layouts")
    occ = np.zeros((GRID_CELLS, GRID_CELLS))
    means, points = [], []
    layouts = task.layouts(split)
    for facts in layouts:
        if facts.cell != GRID_CELL:
            raise ValueError(f"the occupancy prior needs a {GRID_CELL} m free-space grid, not {facts.cell} m")
        pts = facts.free_points()
        means.append(pts.mean(axis=0))
        points.append(pts[:: max(1, len(pts) // 200)])
        row, col = (int(round((o - GRID_ORIGIN) / GRID_CELL)) for o in facts.origin[::-1])
        h, w = facts.free.shape
        occ[row:row + h, col:col + w] += facts.free
    occ = ndimage.gaussian_filter(occ / len(layouts), sigma=3.0)
    pts = np.concatenate(points)
    return LayoutPrior(np.mean(means, axis=0), np.cov(pts.T), np.log(occ + 0.02))


# ----------------------------------------------------------------------------------- decoupler


@dataclass
class Decomposition:
    """Per-step estimates from the head's gradient: ``g`` (T, n) the logit gradient up to a positive
    per-step scale, ``h`` (T, m) the head's input features up to scale (in a subspace when denoised),
    ``noise`` the estimated per-coordinate noise std of the release, ``denoised`` whether the subspace
    path was taken."""

    g: np.ndarray
    h: np.ndarray
    noise: float
    denoised: bool


def head_weight_gradients(episode: ObservedEpisode, victim: VictimInfo) -> np.ndarray:
    weight, _ = head_parameter_names(victim)
    return episode.gradients.tensors[weight].double().numpy()


def decompose(weights: np.ndarray, snr_threshold: float = 4.0) -> Decomposition:
    """Factor each step's head weight gradient ``W_t (n, d) ~ g_t h_t^T``; see the module docstring."""
    W = torch.as_tensor(weights, dtype=torch.float64)
    T, n, d = W.shape
    U, S, Vh = torch.linalg.svd(W, full_matrices=False)
    # Noise std from what a rank-1 matrix cannot explain (exact gradients leave float round-off only).
    resid = (S[:, 1:] ** 2).sum(dim=1) / max(1, (n - 1) * (d - 1))
    noise = float(resid.median().sqrt())
    edge = noise * (math.sqrt(n) + math.sqrt(d))
    snr = float((S[:, 0] / max(edge, 1e-300)).median())
    if snr >= snr_threshold or T < 2:
        g, h = U[:, :, 0] * S[:, :1], Vh[:, 0, :]
        denoised = False
    else:
        _, Sm, Vm = torch.linalg.svd(W.reshape(T * n, d), full_matrices=False)
        k = int((Sm > 1.1 * noise * (math.sqrt(T * n) + math.sqrt(d))).sum())
        k = min(max(k, 1), 16)
        basis = Vm[:k].T  # (d, k)
        P = W @ basis  # (T, n, k): noise averaged over d coordinates per subspace direction
        Up, Sp, Vp = torch.linalg.svd(P, full_matrices=False)
        g, c = Up[:, :, 0] * Sp[:, :1], Vp[:, 0, :]
        h = c @ basis.T
        denoised = True
    sign = torch.where(h.sum(dim=1, keepdim=True) < 0, -1.0, 1.0)  # ReLU features are non-negative
    return Decomposition((g * sign).numpy(), (h * sign).numpy(), noise, denoised)


def change_features(h: np.ndarray) -> np.ndarray:
    """Per step ``(T, 3)``: log10(1 - cos) of the estimated features to the next step's, to the previous
    step's, and whether the step is the last (no next step)."""
    hn = h / np.maximum(np.linalg.norm(h, axis=1, keepdims=True), 1e-300)
    change = np.clip(1.0 - (hn[1:] * hn[:-1]).sum(axis=1), 0.0, 2.0)
    logc = np.log10(change + _EPS_LOG)
    nxt = np.append(logc, math.log10(_EPS_LOG))
    prv = np.insert(logc, 0, math.log10(_EPS_LOG))
    last = np.zeros(len(h))
    last[-1] = 1.0
    return np.stack([nxt, prv, last], axis=1)


def pair_rank_features(weights: np.ndarray) -> np.ndarray:
    """Per step ``(T, 2)``: how far the stacked pair ``[W_t; W_{t+1}]`` (and ``[W_{t-1}; W_t]``) is from rank
    1, as log10 of its second singular value over the sum of the two steps' first ones. The same features
    (a blocked move: identical observations) make the pair exactly rank 1; unlike the cosine of two noisy
    per-step estimates, this statistic is not confounded by a weak step (a wall fills the view) looking
    noisier. Measured on PointNav (PPO at init), blocked-vs-moved AUC 0.97 at noise sigma 0.01, 0.84 at
    0.03, 0.69 at 0.1 (the cosine: 0.27-0.45, i.e. confounded)."""
    W = torch.as_tensor(weights, dtype=torch.float64)
    if len(W) < 2:
        return np.full((len(W), 2), math.log10(_EPS_LOG))
    s0 = torch.linalg.svdvals(W)[:, 0]
    s2 = torch.linalg.svdvals(torch.cat([W[:-1], W[1:]], dim=1))[:, 1]
    rel = torch.log10(s2 / (s0[:-1] + s0[1:]).clamp_min(1e-300) + _EPS_LOG).numpy()
    return np.stack([np.append(rel, math.log10(_EPS_LOG)), np.insert(rel, 0, math.log10(_EPS_LOG))], axis=1)


def motion_features(weights: np.ndarray, dec: Decomposition) -> np.ndarray:
    """The encoder's input per step ``(T, 5)``: :func:`pair_rank_features` and :func:`change_features`."""
    return np.concatenate([pair_rank_features(weights), change_features(dec.h)], axis=1)


class BlockedEncoder(torch.nn.Module):
    """The learned state-prior encoder: feature-change statistics -> logit of "this move was blocked"."""

    def __init__(self, n_in: int = 5, hidden: int = 16):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(n_in, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))
        self.register_buffer("mu", torch.zeros(n_in, dtype=torch.float64))
        self.register_buffer("sd", torch.ones(n_in, dtype=torch.float64))
        self.double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mu) / self.sd).squeeze(-1)

    def fit(self, x: np.ndarray, y: np.ndarray, seed: int = 0, steps: int = 300) -> "BlockedEncoder":
        torch.manual_seed(seed)
        for m in self.net:
            if isinstance(m, torch.nn.Linear):
                m.reset_parameters()
        X, Y = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
        self.mu, self.sd = X.mean(0), X.std(0).clamp_min(1e-6)
        opt = torch.optim.Adam(self.net.parameters(), lr=0.03)
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.binary_cross_entropy_with_logits(self(X), Y)
            loss.backward()
            opt.step()
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return torch.sigmoid(self(torch.as_tensor(x, dtype=torch.float64))).numpy()


# ----------------------------------------------------------------------------------- kinematics


def rk4_step_displacements(intents: torch.Tensor, damping: float, substeps: int = 4) -> torch.Tensor:
    """Displacement (dx, dy, dyaw) in each step's own frame ``(..., T, 3)`` of the damped planar robot.

    At the start of a step the velocities are set from the intents (forward, strafe, yaw rate), scaled so
    that with no turning the step covers exactly the intent: v0 = u k / (1 - exp(-k)); inside the step
    ``dv/dt = -k v`` and the pose follows the unicycle-with-strafe kinematics. RK4 with ``substeps`` steps
    over the unit interval; every step of the episode is integrated in parallel (the motion inside a step
    does not depend on where it starts, so the world path is their composition).
    """
    k = float(damping)
    scale = k / (1.0 - math.exp(-k)) if k > 0 else 1.0
    v = intents * scale  # (..., T, 3): v_forward, v_strafe, omega
    zeros = torch.zeros_like(v)
    state = torch.cat([zeros, v], dim=-1)  # x, y, yaw, vf, vs, w

    def deriv(s: torch.Tensor) -> torch.Tensor:
        yaw, vf, vs, w = s[..., 2], s[..., 3], s[..., 4], s[..., 5]
        c, sn = torch.cos(yaw), torch.sin(yaw)
        return torch.stack([vf * c - vs * sn, vf * sn + vs * c, w, -k * vf, -k * vs, -k * w], dim=-1)

    h = 1.0 / substeps
    for _ in range(substeps):
        k1 = deriv(state)
        k2 = deriv(state + 0.5 * h * k1)
        k3 = deriv(state + 0.5 * h * k2)
        k4 = deriv(state + h * k3)
        state = state + (h / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4)
    return state[..., :3]


def compose(start: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """World poses ``(..., T, 3)`` before each step from a start pose ``(..., 3)`` and per-step local
    displacements ``(..., T, 3)`` (pose 0 is the start)."""
    dyaw = local[..., 2]
    yaw = start[..., 2:3] + torch.cumsum(dyaw, dim=-1) - dyaw  # heading at the start of each step
    c, s = torch.cos(yaw), torch.sin(yaw)
    dx = c * local[..., 0] - s * local[..., 1]
    dy = s * local[..., 0] + c * local[..., 1]
    x = start[..., 0:1] + torch.cumsum(dx, dim=-1) - dx
    y = start[..., 1:2] + torch.cumsum(dy, dim=-1) - dy
    return torch.stack([x, y, yaw], dim=-1)


def _occupancy_nll(log_occ: torch.Tensor, xy: torch.Tensor) -> torch.Tensor:
    """-log occupancy at positions ``(..., T, 2)`` by bilinear interpolation (differentiable), plus a
    quadratic wall outside the grid."""
    extent = GRID_CELL * GRID_CELLS
    norm = (xy - GRID_ORIGIN) / extent * 2.0 - 1.0
    flat = norm.reshape(1, -1, 1, 2)
    val = torch.nn.functional.grid_sample(log_occ[None, None], flat, mode="bilinear", padding_mode="border",
                                          align_corners=False).reshape(xy.shape[:-1])
    outside = torch.relu(norm.abs() - 0.98).pow(2).sum(-1) * 100.0
    return -val + outside


def wrap(angle: np.ndarray) -> np.ndarray:
    return (angle + np.pi) % (2 * np.pi) - np.pi


# ----------------------------------------------------------------------------------- attacks


class DeadReckoning:
    """Baseline: closed-form actions integrated with the nominal step sizes, collisions ignored, from the
    train layouts' mean start position with yaw 0 (the start pose is private).

    Args:
        actions: ``"closed_form"`` (the plain rule on the head's bias gradient, :mod:`closed_form`) or
            ``"decoupled"`` (the rule on tsp's temporally denoised logit gradient: an ablation that gives
            dead reckoning tsp's actions, so the difference left is the motion model).
    """

    name: ClassVar[str] = "dead_reckoning"
    summary: ClassVar[str] = "poses by integrating the closed-form actions with the nominal step sizes, collisions ignored"
    fields: ClassVar[tuple[str, ...]] = ("pose", "action")

    def __init__(self, actions: str = "closed_form"):
        if actions not in ("closed_form", "decoupled"):
            raise ValueError(f"actions must be 'closed_form' or 'decoupled', not {actions!r}")
        self.actions = actions

    def supports(self, victim: VictimInfo) -> str | None:
        try:
            motion_table(victim.task_facts)
        except ValueError as exc:
            return str(exc)
        return ClosedFormAction().supports(victim)

    def fit(self, victim: VictimInfo, auxiliary: Any) -> None:
        self.prior = layout_prior(victim.task_facts, "train")

    def reconstruct(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction:
        prior = getattr(self, "prior", None) or layout_prior(victim.task_facts, "train")
        if self.actions == "decoupled" and victim.n_actions >= 3:
            actions = np.abs(decompose(head_weight_gradients(episode, victim)).g).argmax(axis=1).astype(np.int64)
        else:
            actions = np.asarray(ClosedFormAction().reconstruct(episode, victim).fields["action"], dtype=np.int64)
        local = torch.as_tensor(motion_table(victim.task_facts)[actions])
        start = torch.tensor([*prior.start_mean, 0.0], dtype=torch.float64)
        pose = compose(start, local).numpy()
        pose[:, 2] = wrap(pose[:, 2])
        return Reconstruction(fields={"pose": pose.astype(np.float32), "action": actions})


class TSP:
    """Temporal State Propagator: decoupled actions, a learned blocked-move encoder and a damped RK4
    kinematic model whose start pose and intents L-BFGS fits to the stream (module docstring).

    Args:
        fit_layouts: train layouts whose full-length episodes the attacker collects for the encoder.
        damping: ``k_d`` of the kinematic model (the blog's 0.35).
        yaw_starts: start yaws optimised in parallel (the start yaw is private and the prior multi-modal).
        occupancy_weight: weight of the train-layout occupancy prior per step.
        iterations: L-BFGS iterations.
        seed: seed of the encoder's fit and of the noise it is fit under.
    """

    name: ClassVar[str] = "tsp"
    summary: ClassVar[str] = (
        "Temporal State Propagator: poses from decoupled actions, a learned blocked-move encoder and damped "
        "RK4 kinematics fit by L-BFGS (params: fit_layouts, damping, yaw_starts, occupancy_weight, "
        "iterations)"
    )
    fields: ClassVar[tuple[str, ...]] = ("pose", "action")

    def __init__(self, fit_layouts: int = 24, damping: float = 0.35, yaw_starts: int = 8,
                 occupancy_weight: float = 0.5, iterations: int = 60, seed: int = 0):
        self.fit_layouts, self.damping, self.yaw_starts = int(fit_layouts), float(damping), int(yaw_starts)
        self.occupancy_weight, self.iterations, self.seed = float(occupancy_weight), int(iterations), int(seed)
        self._train: list[tuple[np.ndarray, np.ndarray]] = []  # (head weight grads (T, n, d), blocked label (T,) or -1)
        self._encoders: dict[float, BlockedEncoder] = {}

    def supports(self, victim: VictimInfo) -> str | None:
        return DeadReckoning().supports(victim)

    # ---- fit: collect train-layout episodes with the victim, keep the head gradients and motion truth
    def fit(self, victim: VictimInfo, auxiliary: Any) -> None:
        self.prior = layout_prior(victim.task_facts, "train")
        self.table = motion_table(victim.task_facts)
        weight, _ = head_parameter_names(victim)
        length = victim.task_facts.max_episode_steps
        self._train, self._encoders = [], {}
        for episode, grads in auxiliary.collect(episodes_per_layout=1, seed=1, split="train",
                                                 max_episodes=self.fit_layouts, sequence_length=length):
            pose, actions = episode.steps["pose"], episode.steps["action"]
            translates = np.abs(self.table[actions, :2]).sum(axis=1) > 0
            moved = np.ones(len(actions), dtype=bool)
            moved[:-1] = np.hypot(*(pose[1:, :2] - pose[:-1, :2]).T) > 1e-4
            label = np.where(translates[: len(moved)], (~moved).astype(np.float64), -1.0)
            if len(actions) >= 2:
                self._train.append((grads.tensors[weight].float().numpy(), label))  # float32, as released
        self._encoder_for(0.0)

    def _encoder_for(self, noise: float) -> BlockedEncoder:
        """The encoder fit at this noise level (a half-octave grid; exact gradients are level 0)."""
        level = 0.0 if noise < 1e-6 else float(2.0 ** (round(2 * math.log2(noise)) / 2))
        if level not in self._encoders:
            rng = np.random.default_rng([self.seed, int(level * 1e6)])
            xs, ys = [], []
            for W, label in self._train:
                W = W.astype(np.float64)
                Wn = W + rng.normal(0.0, level, W.shape) if level else W
                feats = motion_features(Wn, decompose(Wn))
                keep = label >= 0
                xs.append(feats[keep])
                ys.append(label[keep])
            x, y = np.concatenate(xs), np.concatenate(ys)
            if len(np.unique(y)) < 2:  # no blocked (or no free) move seen: a constant encoder
                rate = float(y.mean()) if len(y) else 0.0
                enc = BlockedEncoder()
                with torch.no_grad():
                    enc.net[-1].weight.zero_()
                    enc.net[-1].bias.fill_(math.log((rate + 1e-3) / (1 - rate + 1e-3)))
            else:
                enc = BlockedEncoder().fit(x, y, seed=self.seed)
            self._encoders[level] = enc
        return self._encoders[level]

    # ---- reconstruct
    def reconstruct(self, episode: ObservedEpisode, victim: VictimInfo) -> Reconstruction:
        if not hasattr(self, "prior"):
            raise RuntimeError("tsp must be fit first (the runner calls fit before reconstruct)")
        weights = head_weight_gradients(episode, victim)
        dec = decompose(weights)
        actions = np.abs(dec.g).argmax(axis=1).astype(np.int64)  # closed-form sign-free rule on denoised g
        if victim.n_actions < 3:  # the sign-free rule needs >= 3 actions; fall back to the signed rule
            actions = np.asarray(ClosedFormAction().reconstruct(episode, victim).fields["action"], dtype=np.int64)
        p_blocked = self._encoder_for(dec.noise).predict(motion_features(weights, dec))
        pose = self._integrate(actions, p_blocked)
        return Reconstruction(fields={"pose": pose.astype(np.float32), "action": actions},
                              extras={"p_blocked": p_blocked, "noise": dec.noise, "denoised": dec.denoised})

    def _integrate(self, actions: np.ndarray, p_blocked: np.ndarray) -> np.ndarray:
        nominal = self.table[actions]  # (T, 3)
        translates = np.abs(nominal[:, :2]).sum(axis=1) > 0
        p = np.where(translates, p_blocked, 0.0)
        meas = nominal.copy()
        meas[:, :2] *= (1.0 - p)[:, None]
        var = np.full_like(meas, 1e-4)
        var[:, :2] = (p * (1 - p))[:, None] * nominal[:, :2] ** 2 + 1e-4
        strafe = bool(np.abs(self.table[:, 1]).max() > 0)

        S, T = self.yaw_starts, len(actions)
        meas_t, inv_var = torch.as_tensor(meas), torch.as_tensor(1.0 / var)
        mu = torch.as_tensor(self.prior.start_mean)
        cov_inv = torch.as_tensor(np.linalg.inv(self.prior.start_cov))
        log_occ = torch.as_tensor(self.prior.log_occupancy)
        xy0 = mu.repeat(S, 1).clone().requires_grad_(True)
        yaw0 = torch.arange(S, dtype=torch.float64).mul(2 * math.pi / S).requires_grad_(True)
        intents = meas_t.repeat(S, 1, 1).clone().requires_grad_(True)
        mask = torch.ones(3, dtype=torch.float64)
        if not strafe:
            mask[1] = 0.0  # no sideways slip for a robot without strafe actions

        def losses() -> torch.Tensor:
            u = intents * mask
            poses = compose(torch.cat([xy0, yaw0[:, None]], dim=1), rk4_step_displacements(u, self.damping))
            fit = (((u - meas_t) ** 2) * inv_var).sum(dim=(1, 2))
            d = xy0 - mu
            start = 0.5 * torch.einsum("si,ij,sj->s", d, cov_inv, d)
            occ = self.occupancy_weight * _occupancy_nll(log_occ, poses[..., :2]).sum(dim=1)
            return fit + start + occ

        opt = torch.optim.LBFGS([xy0, yaw0, intents], lr=1.0, max_iter=self.iterations,
                                line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = losses().sum()
            loss.backward()
            return loss

        opt.step(closure)
        with torch.no_grad():
            per_start = losses()
            best = int(per_start.argmin())
            u = intents[best] * mask
            pose = compose(torch.cat([xy0[best], yaw0[best:best + 1]]), rk4_step_displacements(u, self.damping))
        out = pose.numpy().copy()
        out[:, 2] = wrap(out[:, 2])
        return out
