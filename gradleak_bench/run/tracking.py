"""Weights & Biases logging (offline by default) and the reconstruction picture grid.

wandb is imported only in a process of its own (:mod:`gradleak_bench.run.wandb_child`), so the scorer never
pays for it. An evaluation starts that process (:class:`TrackedRun`) as soon as it starts: wandb's import, its
service process and its init (about 1 s of CPU) then run beside the plug-ins' start and the scoring instead of
holding the scorer's interpreter lock, and the scorer hands over only the finished run.
"""
from __future__ import annotations

import json
import select
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from gradleak_bench.errors import GradleakError
from gradleak_bench.metrics.summary import leak_verdict
from gradleak_bench.records import Episode, Reconstruction

CHILD = Path(__file__).with_name("wandb_child.py")
WAIT_SECONDS = 300  # the longest wait on the W&B process (its start, a log and finish) before it is killed


def start_tracking(config: Any) -> TrackedRun | None:
    """The W&B run of an evaluation (its :class:`~gradleak_bench.run.config.EvaluateConfig`), started now in the
    background (None without W&B): wandb's import and init overlap the scorer's waits on the plug-in processes
    instead of following the scoring."""
    return None if config.wandb == "disabled" else TrackedRun(config)


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


class TrackedRun:
    """A W&B run in ``config.wandb`` mode, started at once in a process of its own (:mod:`.wandb_child`).

    :meth:`log` hands it the finished run and waits until it has logged and finished: when it returns, the
    complete offline run is in ``OUT/wandb``. :meth:`discard` closes a run whose evaluation failed and removes
    what it wrote, so a failed evaluation leaves ``OUT`` as it would have without W&B. Errors of the start
    (wandb's own message) are raised by either, in the caller's thread. Every wait is bounded
    (:data:`WAIT_SECONDS`).
    """

    def __init__(self, config: Any):
        self._config, self._out = config, Path(config.out)
        self._had_folder = (self._out / "wandb").exists()
        self._logged = False
        self._started: dict[str, Any] | None = None
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen([sys.executable, str(CHILD)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        init = {"project": "gradleak-bench", "mode": config.wandb, "dir": str(self._out), "config": config.to_dict(),
                "job_type": "evaluate", "name": f"{config.attack}-{config.task}-{config.defense}", "reinit": True}
        self._send(init)

    def _send(self, message: dict[str, Any]) -> None:
        try:
            self._proc.stdin.write(json.dumps(message, default=_plain) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the child has ended; _answer says why

    def _answer(self) -> dict[str, Any]:
        """The child's next answer, or the reason it has none (its last stderr lines)."""
        ready, _, _ = select.select([self._proc.stdout], [], [], WAIT_SECONDS)
        line = self._proc.stdout.readline() if ready else ""
        if line.strip():
            return json.loads(line)
        if ready:  # end of file: the child ended without answering
            self._proc.wait(timeout=WAIT_SECONDS)
        else:
            self._proc.kill()
        self._stderr.seek(0)
        tail = self._stderr.read().decode(errors="replace").strip().splitlines()[-5:]
        return {"error": f"the W&B process {'ended' if ready else f'did not answer in {WAIT_SECONDS} s'}"
                         + (f": {' | '.join(tail)}" if tail else "")}

    def _wait(self) -> bool:
        """Wait for the start; True when a run is open, False when wandb is missing (warned)."""
        if self._started is None:
            self._started = self._answer()
        if self._started.get("error"):
            raise GradleakError(f"W&B could not start ({self._started['error']}); run with --wandb disabled to "
                                "skip W&B logging")
        return bool(self._started.get("ready"))

    def _end(self, message: dict[str, Any]) -> None:
        self._send(message)
        reply = self._answer()
        self._proc.stdin.close()
        self._proc.wait(timeout=WAIT_SECONDS)
        self._stderr.close()
        if reply.get("error"):
            raise GradleakError(f"W&B logging failed ({reply['error']}); the results in {self._out} are complete")

    def log(self, result: Any, recons: dict[str, Reconstruction], truths: dict[str, Episode]) -> None:
        """Write the picture grids, then have the W&B process log config, summary, episode table and grids, and
        finish the run."""
        grids = {f: reconstruction_grid(recons, truths, result.out / f"reconstructions_{f}.png", f)
                 for f in ("rgb", "depth")}
        self._logged = True  # whatever happens now, the run is this evaluation's to keep
        if not self._wait():
            warnings.warn("wandb is not installed; skipping W&B logging (pip install wandb)", stacklevel=2)
            self._proc.wait(timeout=WAIT_SECONDS)
            return
        rows = [r.flat() for r in result.rows]
        columns = sorted({k for r in rows for k in r})
        self._end({"summary": _flat_summary(result.summary), "columns": columns,
                   "rows": [[r.get(c) for c in columns] for r in rows],
                   "images": {f: str(path) for f, path in grids.items() if path is not None}})

    def discard(self) -> None:
        """The evaluation failed before logging: finish the run (marked failed) and remove its files."""
        if self._logged:
            return
        try:
            if not self._wait():
                return
            self._end({"discard": True})
        except Exception:  # noqa: BLE001  the evaluation's own error is the one to report
            self._proc.kill()
        if not self._had_folder:
            shutil.rmtree(self._out / "wandb", ignore_errors=True)


def _plain(value: Any) -> Any:
    """JSON for what a config or an episode row may hold beside JSON's own types (numpy scalars, paths)."""
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def _flat_summary(summary: dict[str, Any]) -> dict[str, Any]:
    flat = {"n_failed": summary["n_failed"], "ms_per_frame": summary["ms_per_frame"],
            # development (the public split: regenerable, never official) or fresh (layouts drawn at run time)
            "split_role": summary.get("split_role")}
    for name, m in summary["metrics"].items():
        flat[name] = m["mean"]
        flat[f"{name}/ci_low"], flat[f"{name}/ci_high"] = m["ci_low"], m["ci_high"]
        if m.get("prior_leakage") is not None:  # metric - best gradient-free prior, paired (not the headline)
            lk = m["prior_leakage"]
            flat[f"{name}/leakage_vs_best_prior"] = lk["mean"]
            flat[f"{name}/leakage_vs_best_prior/ci_low"] = lk["ci_low"]
            flat[f"{name}/leakage_vs_best_prior/ci_high"] = lk["ci_high"]
            flat[f"{name}/best_prior"] = m["best_prior"]
            flat[f"{name}/best_prior_score"] = m["references"][m["best_prior"]]["mean"]
        if m.get("reference_leakage") is not None:  # over max(best prior, swap control): the headline
            flat[f"{name}/strongest_reference"] = m["strongest_reference"]
            rl = m["reference_leakage"]
            flat[f"{name}/leakage_vs_strongest_reference"] = rl["mean"]
            flat[f"{name}/leakage_vs_strongest_reference/ci_low"] = rl["ci_low"]
            flat[f"{name}/leakage_vs_strongest_reference/ci_high"] = rl["ci_high"]
            # the CLI headline's words, so that W&B reads the same: "leaks: 0.73 better than the strongest ..."
            flat[f"{name}/verdict"] = leak_verdict(rl, m.get("higher_is_better", True), m["strongest_reference"])
        if "control" in m:  # the swap control, its own column
            flat[f"{name}/control"], flat[f"{name}/leakage_vs_control"] = m["control"]["mean"], m["leakage"]["mean"]
    return flat
