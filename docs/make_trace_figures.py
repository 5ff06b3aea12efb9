"""Render the TRACE figures of docs/trace.md from the *cached* quick attackers (it never trains: train=never).

* ``docs/img/trace_grid_<victim>.png``: 8-step held-out PointNav sequences; per episode the rows are the true
  frames, TRACE, trace_no_temporal and inverting_gradients (quick preset).
* ``docs/img/trace_per_timestep_psnr.png`` and ``docs/trace_per_timestep.json``: RGB PSNR per step index t
  on the held-out episodes, for TRACE and trace_no_temporal (all ``--episodes``), inverting_gradients (the
  first ``--ig-episodes``), and TRACE's no-leak control (its output for another layout's episode).

Run after the evaluations of docs/trace.md:
``OMP_NUM_THREADS=1 python docs/make_trace_figures.py --episodes 48 --ig-episodes 12`` (``--victims ppo``
recomputes one victim and keeps the other's committed rows).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from gradleak_bench import dataset as datasets
from gradleak_bench import plugins
from gradleak_bench.baselines.attacks.trace.attack import MODEL
from gradleak_bench.baselines.attacks.trace.config import gradient_layout, victim_identity
from gradleak_bench.metrics.images import rgb_psnr
from gradleak_bench.records import ObservedEpisode
from gradleak_bench.run.auxiliary import AuxiliaryData
from gradleak_bench.run.evaluation import select_episodes
from gradleak_bench.run.isolation import sealed_twin
from gradleak_bench.stream.replay import EpisodeGradients
from gradleak_bench.victims.checkpoint import load_victim, victim_info
from gradleak_bench.victims.spaces import env_spaces

DOCS = Path(__file__).resolve().parent
GRID_EPISODES = 3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=48)
    parser.add_argument("--ig-episodes", type=int, default=12)
    parser.add_argument("--victims", default="ppo,a2c",
                        help="victims to recompute; the others keep their rows in trace_per_timestep.json")
    args = parser.parse_args()
    from PIL import Image

    out = DOCS / "trace_per_timestep.json"
    # a victim retrained alone (issue 37) is recomputed alone: the other victims' rows stay as committed
    results: dict = json.loads(out.read_text()) if out.is_file() else {}
    for name in args.victims.split(","):
        victim = load_victim("PointNav", name, "trained")
        gradients = EpisodeGradients(victim.policy, victim.spec.loss, env_spaces("PointNav", 64)[0])
        info = victim_info(victim, gradients)
        ds = datasets.load_or_generate(datasets.standard_config("PointNav", name, "trained", "test"), progress=False)
        ids = select_episodes(ds, args.episodes)
        episodes = [ds.episode(e) for e in ids]
        streams = [gradients(e) for e in episodes]
        attacks = {}
        for attack_name in ("trace", "trace_no_temporal"):
            params = {"preset": "quick", "train": "never", "progress": False}
            attack = plugins.load("attack", attack_name, params)
            # the evaluations of docs/trace.md run sealed: their attackers are in the plug-ins' own cache
            sealed = sealed_twin("attack", attack_name, attack.cache(victim_identity(info),
                                                                     gradient_layout(info)).path(MODEL))
            if sealed.is_file():
                attack = plugins.load("attack", attack_name, {**params, "weights": str(sealed)})
            attack.fit(info, AuxiliaryData(victim, gradients))
            attacks[attack_name] = attack
        ig = plugins.load("attack", "inverting_gradients", {"preset": "quick"})
        recons: dict[str, list] = {k: [] for k in (*attacks, "inverting_gradients")}
        for i, (episode, stream) in enumerate(zip(episodes, streams)):
            observed = ObservedEpisode(f"e{i}", np.arange(episode.length), stream)
            for attack_name, attack in attacks.items():
                recons[attack_name].append(attack.reconstruct(observed, info).fields["rgb"])
            if i < max(args.ig_episodes, GRID_EPISODES):
                recons["inverting_gradients"].append(ig.reconstruct(observed, info).fields["rgb"])
        per_t: dict[str, dict] = {}
        for attack_name, frames in recons.items():
            rows = [rgb_psnr(r, e.steps["rgb"]) for r, e in zip(frames, episodes)]
            per_t[attack_name] = _by_step(rows)
        # the no-leak control of TRACE: the reconstruction of the next episode from another layout
        control = []
        for i, episode in enumerate(episodes):
            for j in range(1, len(episodes)):
                other = (i + j) % len(episodes)
                if episodes[other].layout_id != episode.layout_id and episodes[other].length >= episode.length:
                    control.append(rgb_psnr(recons["trace"][other][: episode.length], episode.steps["rgb"]))
                    break
        per_t["trace_control"] = _by_step(control)
        results[name] = per_t
        _grid(episodes[:GRID_EPISODES], {k: v[:GRID_EPISODES] for k, v in recons.items()},
              DOCS / "img" / f"trace_grid_{name}.png", Image)
        print(name, {k: [round(x, 2) for x in v["mean"]] for k, v in per_t.items()}, flush=True)
    out.write_text(json.dumps(results, indent=1))
    _plot(results, DOCS / "img" / "trace_per_timestep_psnr.png")


def _by_step(rows: list[np.ndarray]) -> dict:
    T = max(len(r) for r in rows)
    mean, n = [], []
    for t in range(T):
        values = [float(r[t]) for r in rows if len(r) > t and np.isfinite(r[t])]
        mean.append(float(np.mean(values)) if values else float("nan"))
        n.append(len(values))
    return {"mean": mean, "n": n}


def _grid(episodes, recons, path: Path, Image) -> None:
    order = ["truth", "trace", "trace_no_temporal", "inverting_gradients"]
    rows = []
    for i, episode in enumerate(episodes):
        for key in order:
            frames = episode.steps["rgb"] if key == "truth" else recons[key][i]
            frames = np.clip(np.nan_to_num(np.asarray(frames, dtype=np.float64)), 0, 255).astype(np.uint8)
            strip = np.full((64, 8 * 66, 3), 255, dtype=np.uint8)
            for t, frame in enumerate(frames[:8]):
                strip[:, t * 66: t * 66 + 64] = frame
            rows.append(strip)
        rows.append(np.full((6, 8 * 66, 3), 255, dtype=np.uint8))
    canvas = np.concatenate(rows, axis=0)
    Image.fromarray(canvas).save(path, optimize=True)


def _plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.6), sharey=True, squeeze=False)
    styles = {"trace": "o-", "trace_no_temporal": "s--", "inverting_gradients": "^:", "trace_control": "x-."}
    for ax, (victim, per_t) in zip(axes[0], results.items()):
        for key, values in per_t.items():
            ax.plot(np.arange(1, len(values["mean"]) + 1), values["mean"], styles[key], label=key)
        ax.set_title(f"PointNav / {victim} / trained, held-out layouts")
        ax.set_xlabel("step t in the episode")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("RGB PSNR (dB)")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
