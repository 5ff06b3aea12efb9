"""What one evaluation run is (:class:`EvaluateConfig`), recorded in results.json and the W&B config."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gradleak_bench.dataset_config import record_backend
from gradleak_bench.errors import GradleakError
from gradleak_bench.paths import default_run_dir
from gradleak_bench.run.limits import PluginLimits


@dataclass(frozen=True)
class EvaluateConfig:
    """One evaluation run. Every field is recorded in results.json and the W&B config."""

    attack: str
    task: str = "PointNav"
    victim: str | None = None
    checkpoint: str = "init"
    defense: str = "none"
    split: str = "test"
    episodes: int | None = None
    seed: int = 0
    # The held-out draw: 0 is the standard split (official when the manifest records its identity); any other
    # value draws other episode seeds in the same held-out layouts (`generate --seed N`), scored as unofficial.
    dataset_seed: int = 0
    # The data protocol of the held-out episodes (docs/tasks.md, "Data protocols"): first8 or trace-windows;
    # None: the attack's own ``data_protocol`` attribute (TRACE: trace-windows), else first8.
    protocol: str | None = None
    # None: the first ``episodes`` (one per layout in turn); an int: a random subset of that size drawn with
    # this seed, in canonical order (what `gradleak-bench verify` re-runs).
    sample_seed: int | None = None
    # With a sampled subset: also score each drawn episode's swap-control partner in a run over all episodes, so
    # the subset's controls are the full run's (`verify` pairs them with an entry's rows).
    control_partners: bool = False
    attack_params: dict[str, Any] = field(default_factory=dict)
    defense_params: dict[str, Any] = field(default_factory=dict)
    # runs/latest, or $GRADLEAK_BENCH_RUNS/latest (gradleak_bench.paths.default_run_dir)
    out: str = field(default_factory=lambda: default_run_dir("latest"))
    wandb: str = "offline"
    control: bool = True
    # Score the gradient-free priors fitted on train layouts (gradleak_bench.priors) beside the attack and report
    # leakage against the best of them (docs/priors.md). False skips the fit (tests, quick debugging runs).
    priors: bool = True
    # Metric or field names to score (None: every metric of the attack's fields); one whose field the attack
    # does not reconstruct is skipped with a note in results.json (summary["notes"]), not an error.
    metrics: list[str] | None = None
    # Where the episode units run (docs/scale-out.md); none of these changes a row or a metric.
    executor: str = "local"
    ray_address: str | None = None
    shard_size: int = 1
    # A materialised gradient file (gradleak_bench.gradient_store) to score instead of recomputing gradients.
    gradients: str | None = None
    # True: each plug-in runs in its own isolated process (docs/evaluate.md, "Sealed runs"); where the OS
    # cannot isolate, the run stops. False: plug-ins run inside the scorer's process (debugging only; marked
    # in results.json, never submittable). None (the default): sealed where the OS can isolate, else unsealed
    # with a warning -- so the README's main job runs on a machine without bubblewrap, and its results say so.
    sealed: bool | None = None
    # Hard limits on each plug-in process: wall time per call (fit, reconstruct, set-up), memory, processes,
    # bytes returned and printed per call (gradleak_bench/run/limits.py; `--limit NAME=VALUE`). Recorded in
    # results.json, not part of the run's fingerprint: raising one resumes the run.
    limits: PluginLimits = field(default_factory=PluginLimits)
    # The simulator the held-out episodes run on (docs/backends.md): official splits and the leaderboard are
    # PyBullet's, so a run on another one is unofficial. ``scenes``: the scene files of a backend that takes
    # its layouts by path (Habitat). Both are recorded only off their defaults (:meth:`to_dict`), so a PyBullet
    # run's results.json, W&B config and resume state are what they were before backends entered the run.
    backend: str = "pybullet"
    scenes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.limits, PluginLimits):  # a dict, e.g. read back from a run's state
            object.__setattr__(self, "limits", PluginLimits.from_dict(self.limits))
        if not isinstance(self.scenes, tuple):
            object.__setattr__(self, "scenes", tuple(str(s) for s in self.scenes))

    def to_dict(self) -> dict[str, Any]:
        """The recorded form (results.json's run, the W&B config, the resume state)."""
        recorded = asdict(self)
        if not self.control_partners:  # recorded only when set (a verifier's re-run): runs read as before
            del recorded["control_partners"]
        return record_backend(recorded, self.backend, self.scenes)


def check_config(config: EvaluateConfig) -> None:
    """Refuse counts outside their range before any work, naming the option, its type and its range
    (exit 2 in the CLI)."""
    for option, value, low in (("--episodes", config.episodes, 1), ("--shard-size", config.shard_size, 1)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise GradleakError(f"{option} must be a positive integer ({low} or more), got {value!r}")
