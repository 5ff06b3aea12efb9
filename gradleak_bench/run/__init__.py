"""The run path: config, per-episode pipeline, sealed plug-in processes, the scorer that owns the truth, the
resumable store, executors, shards, tracking and the defense grid (docs/evaluate.md).

The API other code calls::

    from gradleak_bench.run import EvaluateConfig, FreshLayouts, evaluate

    result = evaluate(EvaluateConfig(attack="closed_form", episodes=8, sample_seed=0, out=tmp, wandb="disabled"),
                      fresh_layouts=FreshLayouts(seed=secret, n=8))   # optional: secret fresh layouts
    result.summary["metrics"]["action_accuracy"]      # MetricResult.to_dict() form
    result.rows                                         # EpisodeRow per episode (metrics, control, failed frames)

The scorer never imports plug-in code: every attack and defense runs in its own (sealed) process.

May import every layer below it (victims, dataset, priors, gradient_store, plugins, hooks, metrics, stream,
tasks, records, ...); never ``leaderboard/`` or ``cli``. Of ``baselines/`` it imports the package alone, to
show its folder to a sealed process.
"""
from gradleak_bench.run.config import EvaluateConfig
from gradleak_bench.run.results import Interval, MetricResult

__all__ = ["EvaluateConfig", "Interval", "MetricResult", "FreshLayouts", "RunResult", "EpisodeRow", "Reference",
           "evaluate", "Scorer"]


def __getattr__(name: str):  # the heavy modules load on first use (the CLI imports this package early)
    if name in ("evaluate", "RunResult", "Scorer"):
        from gradleak_bench.run import evaluation as module

        return {"evaluate": module.evaluate, "RunResult": module.RunResult, "Scorer": module.Scorer}[name]
    if name == "FreshLayouts":
        from gradleak_bench.run.fresh import FreshLayouts

        return FreshLayouts
    if name in ("EpisodeRow", "Reference"):
        from gradleak_bench.run import scorer

        return getattr(scorer, name)
    raise AttributeError(name)
