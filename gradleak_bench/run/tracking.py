"""Weights & Biases logging (offline by default) and the reconstruction picture grid.

wandb is imported here only, lazily, so the rest of the benchmark never pays for it. An evaluation starts its
W&B run (:class:`TrackedRun`) in a background thread as soon as it starts: wandb's import, its service process
and its init (about 2 s of a warm run) then overlap the plug-ins' start and the scoring, which mostly waits
on the sealed plug-in processes, instead of following them.
"""
from __future__ import annotations

import os
import shutil
import threading
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
    TrackedRun(config).log(result, recons, truths)


class TrackedRun:
    """A W&B run in ``config.wandb`` mode, its start (import + init) begun in a background thread at once.

    :meth:`log` waits for the start, logs and finishes the run: when it returns, the complete offline run is in
    ``OUT/wandb``. :meth:`discard` closes a run whose evaluation failed and removes what it wrote, so a failed
    evaluation leaves ``OUT`` as it would have without W&B. Errors of the start are raised by either, in the
    caller's thread.
    """

    def __init__(self, config: Any):
        self._config, self._out = config, Path(config.out)
        self._had_folder = (self._out / "wandb").exists()
        self._run: Any = None
        self._error: BaseException | None = None
        self._missing = self._logged = False
        self._thread = threading.Thread(target=self._start, name="gradleak-wandb-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            import wandb
        except ImportError:
            self._missing = True
            return
        os.environ.setdefault("WANDB_SILENT", "true")
        config = self._config
        try:
            self._run = wandb.init(project="gradleak-bench", mode=config.wandb, dir=str(self._out),
                                   config=asdict(config), job_type="evaluate",
                                   name=f"{config.attack}-{config.task}-{config.defense}", reinit=True)
        except BaseException as exc:  # noqa: BLE001  handed to the caller's thread by _wait
            self._error = exc

    def _wait(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._run

    def log(self, result: Any, recons: dict[str, Reconstruction], truths: dict[str, Episode]) -> None:
        """Write the picture grids, then log config, summary, episode table and grids, and finish the run."""
        grids = {f: reconstruction_grid(recons, truths, result.out / f"reconstructions_{f}.png", f)
                 for f in ("rgb", "depth")}
        self._logged = True  # whatever happens now, the run is this evaluation's to keep
        run = self._wait()
        if self._missing:
            warnings.warn("wandb is not installed; skipping W&B logging (pip install wandb)", stacklevel=2)
            return
        import wandb

        try:
            run.summary.update(_flat_summary(result.summary))
            rows = [r.flat() for r in result.rows]
            columns = sorted({k for r in rows for k in r})
            run.log({"episodes": wandb.Table(columns=columns, data=[[r.get(c) for c in columns] for r in rows])})
            for f, path in grids.items():
                if path is not None:
                    run.log({f"reconstructions/{f}": wandb.Image(str(path), caption="rows: truth, reconstruction")})
        finally:
            run.finish()

    def discard(self) -> None:
        """The evaluation failed before logging: finish the run (marked failed) and remove its files."""
        if self._logged:
            return
        try:
            run = self._wait()
        except Exception:  # noqa: BLE001  the evaluation's own error is the one to report
            run = None
        if run is None:
            return
        run.finish(exit_code=1)
        if not self._had_folder:
            shutil.rmtree(self._out / "wandb", ignore_errors=True)


def _flat_summary(summary: dict[str, Any]) -> dict[str, Any]:
    flat = {"n_failed": summary["n_failed"], "ms_per_frame": summary["ms_per_frame"]}
    for name, m in summary["metrics"].items():
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
    return flat
