"""Figure of docs/tsp.md: true vs reconstructed paths of held-out episodes over the top-down layout map.

PointNav, PPO NatureCNN victim at init, full-episode held-out split (test-full), exact gradients. tsp is fit
exactly as `gradleak-bench evaluate tsp` fits it (train layouts only); dead_reckoning uses the same start
prior. Top row: the paths as reconstructed, in the world frame (the start pose is private, so both start
from the train-layout prior). Bottom row: after the rigid SE(2) alignment of the *_aligned metrics (shape).
The map (free space, furniture, doorways) is drawn from the truth for the reader; the attacks never see it.

Run: OMP_NUM_THREADS=1 python docs/make_tsp_figures.py   (writes docs/img/tsp_paths.png)
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def draw_map(ax, apt) -> None:
    from gradleak_bench.envs.pybullet.apartment import doorway_centres, furniture_footprints

    w, h = apt.size
    ax.imshow(np.where(apt.free, 1.0, 0.78), cmap="gray", vmin=0, vmax=1, origin="lower",
              extent=(0, apt.free.shape[1] * apt.cell, 0, apt.free.shape[0] * apt.cell), interpolation="nearest")
    for room in apt.rooms:
        x0, y0, x1, y1 = room.inner
        ax.add_patch(plt.Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, lw=0.6, ec="0.35"))
    for x0, y0, x1, y1 in furniture_footprints(apt):
        ax.add_patch(plt.Rectangle((x0, y0), x1 - x0, y1 - y0, fc="#c9a27a", ec="#8a6a4a", lw=0.5, alpha=0.8))
    d = doorway_centres(apt)
    ax.plot(d[:, 0], d[:, 1], "D", color="#2a9d3a", ms=4, label="doorway")
    ax.set_xlim(-1.0, max(w, 6) + 1.0)
    ax.set_ylim(-1.0, max(h, 6) + 1.0)
    ax.set_aspect("equal")
    ax.tick_params(labelsize=6)


def main() -> None:
    torch.set_num_threads(1)
    from gradleak_bench import dataset as datasets
    from gradleak_bench.baselines.attacks.tsp import TSP, DeadReckoning
    from gradleak_bench.envs.pybullet.apartment import generate_apartment
    from gradleak_bench.metrics.trajectory import align_se2
    from gradleak_bench.records import ObservedEpisode
    from gradleak_bench.run.auxiliary import AuxiliaryData
    from gradleak_bench.run.evaluation import select_episodes
    from gradleak_bench.stream.replay import EpisodeGradients
    from gradleak_bench.victims.checkpoint import load_victim, victim_info
    from gradleak_bench.victims.spaces import env_spaces

    victim = load_victim("PointNav", "ppo", "init")
    gradients = EpisodeGradients(victim.policy, victim.spec.loss, env_spaces("PointNav", victim.spec.image_size)[0])
    info = victim_info(victim, gradients)
    ds = datasets.load_or_generate(datasets.standard_config("PointNav", "ppo", "init", "test-full"), progress=False)
    chosen = []
    for episode_id in select_episodes(ds, None):  # one per layout in turn; paths of >= 3 m, distinct layouts
        ep = ds.episode(episode_id)
        travelled = np.hypot(*np.diff(ep.steps["pose"][:, :2], axis=0).T).sum()
        if travelled >= 3.0 and ep.layout_id not in {e.layout_id for e in chosen}:
            chosen.append(ep)
        if len(chosen) == 4:
            break
    tsp, dr = TSP(), DeadReckoning()
    tsp.fit(info, AuxiliaryData(victim, gradients))
    dr.fit(info, None)

    fig, axes = plt.subplots(2, len(chosen), figsize=(3.4 * len(chosen), 6.9))
    for j, ep in enumerate(chosen):
        obs = ObservedEpisode(f"episode-{j}", np.arange(ep.length), gradients(ep))
        truth = ep.steps["pose"].astype(np.float64)
        paths = {"tsp": tsp.reconstruct(obs, info).fields["pose"].astype(np.float64),
                 "dead reckoning": dr.reconstruct(obs, info).fields["pose"].astype(np.float64)}
        apt = generate_apartment(ep.layout_id)
        for i, aligned in enumerate((False, True)):
            ax = axes[i, j]
            draw_map(ax, apt)
            ax.plot(truth[:, 0], truth[:, 1], "-", color="black", lw=1.6, label="true path")
            ax.plot(truth[0, 0], truth[0, 1], "o", color="black", ms=5)
            for (name, path), style in zip(paths.items(), (("-", "#d62728"), ("--", "#1f77b4"))):
                p = align_se2(path, truth)[0] if aligned else path
                err = float(np.sqrt(((p[:, :2] - truth[:, :2]) ** 2).sum(1).mean()))
                ax.plot(p[:, 0], p[:, 1], style[0], color=style[1], lw=1.2, label=f"{name} (ATE {err:.2f} m)")
                ax.plot(p[0, 0], p[0, 1], "o", color=style[1], ms=4)
            ax.set_title(f"layout {ep.layout_id}, {ep.episode_id}, {ep.length} steps\n"
                         f"{'aligned (SE(2), shape only)' if aligned else 'as reconstructed (world frame)'}",
                         fontsize=7)
            ax.legend(fontsize=5.5, loc="upper right", framealpha=0.85)
    fig.suptitle("PointNav held-out episodes (test-full, PPO NatureCNN at init, exact gradients): "
                 "true path vs tsp vs dead reckoning", fontsize=9)
    fig.tight_layout()
    out = ROOT / "docs" / "img" / "tsp_paths.png"
    fig.savefig(out, dpi=130)
    print(out)


if __name__ == "__main__":
    main()
