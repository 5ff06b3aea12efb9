"""Weights & Biases logging (offline by default) and the reconstruction picture grid.

wandb is imported here only, lazily, so the rest of the benchmark never pays for it.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from gradleak_bench.records import Episode, Reconstruction


def reconstruction_grid(recons: dict[str, Reconstruction], truths: dict[str, Episode], path: Path,
                        field: str = "rgb", max_episodes: int = 4) -> Path | None:
    """A PNG with, per episode, the true frames above the reconstructed ones; None when ``field`` is absent."""
    ids = [e for e in recons if field in recons[e].fields][:max_episodes]
    if not ids:
        return None
    from PIL import Image

    rows = []
    for episode_id in ids:
        truth, recon = truths[episode_id].steps[field], recons[episode_id].fields[field]
        rows += [_strip(truth, field), _strip(recon, field)]
    width = max(r.shape[1] for r in rows)
    canvas = np.full((sum(r.shape[0] + 2 for r in rows), width, 3), 255, dtype=np.uint8)
    y = 0
    for row in rows:
        canvas[y:y + row.shape[0], :row.shape[1]] = row
        y += row.shape[0] + 2
    Image.fromarray(canvas).save(path)
    return path


def _strip(frames: np.ndarray, field: str) -> np.ndarray:
    frames = np.asarray(frames, dtype=np.float64)
    if field == "depth":
        frames = np.repeat(np.clip(frames.reshape(frames.shape[:3]) / 10.0, 0, 1)[..., None] * 255, 3, axis=-1)
    frames = np.nan_to_num(np.clip(frames, 0, 255)).astype(np.uint8)
    return np.concatenate(list(frames), axis=1)


def log_run(result: Any, config: Any, recons: dict[str, Reconstruction], truths: dict[str, Episode]) -> None:
    """Log config, summary, the per-episode table and the picture grid to a W&B run in ``config.wandb`` mode."""
    grids = {f: reconstruction_grid(recons, truths, result.out / f"reconstructions_{f}.png", f) for f in ("rgb", "depth")}
    try:
        import wandb
    except ImportError:
        warnings.warn("wandb is not installed; skipping W&B logging (pip install wandb)", stacklevel=2)
        return
    os.environ.setdefault("WANDB_SILENT", "true")
    run = wandb.init(project="gradleak-bench", mode=config.wandb, dir=str(result.out), config=asdict(config),
                     job_type="evaluate", name=f"{config.attack}-{config.task}-{config.defense}", reinit=True)
    try:
        flat = {"n_failed": result.summary["n_failed"], "ms_per_frame": result.summary["ms_per_frame"]}
        for name, m in result.summary["metrics"].items():
            flat[name] = m["mean"]
            flat[f"{name}/ci_low"], flat[f"{name}/ci_high"] = m["ci_low"], m["ci_high"]
            if m.get("prior_leakage") is not None:  # the headline: metric - best gradient-free prior, paired
                lk = m["prior_leakage"]
                flat[f"{name}/leakage_vs_best_prior"] = lk["mean"]
                flat[f"{name}/leakage_vs_best_prior/ci_low"] = lk["ci_low"]
                flat[f"{name}/leakage_vs_best_prior/ci_high"] = lk["ci_high"]
                flat[f"{name}/best_prior"] = m["best_prior"]
                flat[f"{name}/best_prior_score"] = m["references"][m["best_prior"]]["mean"]
            if "control" in m:  # the swap control, its own column
                flat[f"{name}/control"], flat[f"{name}/leakage_vs_control"] = m["control"]["mean"], m["leakage"]["mean"]
        run.summary.update(flat)
        rows = [r.flat() for r in result.rows]
        columns = sorted({k for r in rows for k in r})
        run.log({"episodes": wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in rows])})
        for f, path in grids.items():
            if path is not None:
                run.log({f"reconstructions/{f}": wandb.Image(str(path), caption="rows: truth, reconstruction")})
    finally:
        run.finish()
