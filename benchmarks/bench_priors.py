"""Gradient-free priors on a held-out set: what each scores per metric, and what fitting and applying cost.

Fits the priors of one task / victim / checkpoint on its train layouts (timed; from an empty cache when
``--cold``), then scores every prior on the first N held-out episodes (one per layout in turn, as
``evaluate --episodes N`` takes them) with the default metrics of every field the priors reconstruct plus
the papers' protocols of rgb, depth and bbox (timed per episode). Writes one JSON under docs/data/ that
``tools/make_docs_tables.py`` renders into docs/priors.md.

Run: OMP_NUM_THREADS=1 python benchmarks/bench_priors.py [--task PointNav --victim ppo --checkpoint init
     --episodes 8] [--cold]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PROTOCOL_FIELDS = ("rgb", "depth", "bbox")


def episode_ids(dataset, n: int) -> list[str]:
    ids = sorted(dataset.episode_ids, key=lambda e: (e.split("-E")[1], e))  # the runner's order
    return ids[:n]


def score(spec, recon: np.ndarray, episode) -> float:
    context = {"episode": episode} if spec.needs_episode else {}
    values = np.asarray(spec.fn(recon, episode.steps[spec.field], **context), dtype=np.float64)
    return float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="PointNav")
    parser.add_argument("--victim", default="ppo")
    parser.add_argument("--checkpoint", default="init")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--cold", action="store_true", help="fit in an empty cache (train episodes simulated)")
    parser.add_argument("--overhead", default=None, metavar="ATTACK",
                        help="also time warm `evaluate ATTACK` runs with and without the priors (in-process)")
    parser.add_argument("--eval-episodes", type=int, default=48, help="episodes of the --overhead runs")
    args = parser.parse_args()
    if args.cold:
        os.environ["GRADLEAK_BENCH_CACHE"] = tempfile.mkdtemp(prefix="priors-bench-")

    from gradleak_bench import dataset as datasets
    from gradleak_bench import priors as P
    from gradleak_bench.metrics import metrics_for_fields, summarize

    test = datasets.load_or_generate(datasets.standard_config(args.task, args.victim, args.checkpoint),
                                     progress=False)
    config = P.config_for(args.task, test.config.victim, args.checkpoint, test.config.sequence_length)
    start = time.perf_counter()
    priors = P.load_or_fit(config)
    load_or_fit_s = time.perf_counter() - start
    start = time.perf_counter()
    P.load_or_fit(config)
    warm_load_s = time.perf_counter() - start

    fields = sorted({p.field for p in priors.priors})
    specs = [s for s in metrics_for_fields(fields, optional=True)
             if s.default or s.field in PROTOCOL_FIELDS]
    refs = P.references(priors, fields)
    per: dict[str, dict[str, list[float]]] = {s.name: {r.name: [] for r in refs} for s in specs}
    apply_s = score_s = 0.0
    ids = episode_ids(test, args.episodes)
    for episode_id in ids:
        episode = test.episode(episode_id)
        for ref in refs:
            start = time.perf_counter()
            fields_of = ref.reconstruct(episode.length)
            apply_s += time.perf_counter() - start
            start = time.perf_counter()
            for spec in specs:
                if spec.field in fields_of and spec.field in episode.steps:
                    per[spec.name][ref.name].append(score(spec, fields_of[spec.field], episode))
            score_s += time.perf_counter() - start

    metrics = {}
    for spec in specs:
        scored = {name: summarize(values).to_dict() for name, values in per[spec.name].items() if values}
        finite = {n: s["mean"] for n, s in scored.items() if s["mean"] is not None}
        if not finite:
            continue
        best = (max if spec.higher_is_better else min)(finite, key=finite.get)
        metrics[spec.name] = {"higher_is_better": spec.higher_is_better, "unit": spec.unit, "best_prior": best,
                              "priors": scored}
    out = {
        "command": "OMP_NUM_THREADS=1 python benchmarks/bench_priors.py --task {} --victim {} --checkpoint {} "
                   "--episodes {}{}".format(args.task, test.config.victim, args.checkpoint, args.episodes,
                                            " --cold" if args.cold else ""),
        "dataset": test.config.key, "episodes": ids, "prior_config": config.key,
        "fit": {"n_episodes": priors.n_episodes, "n_steps": priors.n_steps, "fit_seconds": priors.fit_seconds,
                "load_or_fit_seconds": load_or_fit_s, "warm_load_seconds": warm_load_s},
        "apply_ms_per_episode": 1e3 * apply_s / len(ids), "score_ms_per_episode": 1e3 * score_s / len(ids),
        "n_metrics": len(specs), "n_references": len(refs),
        "machine": {"cpus": os.cpu_count(), "load_average": os.getloadavg()[0], "python": platform.python_version(),
                    "omp_num_threads": os.environ.get("OMP_NUM_THREADS")},
        "metrics": metrics,
    }
    if args.overhead:
        out["overhead"] = overhead(args, test.config.victim)
    path = ROOT / "docs" / "data" / f"priors_{args.task}_{test.config.victim}_{args.checkpoint}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)}: fit {priors.fit_seconds:.1f} s, apply {out['apply_ms_per_episode']:.1f} "
          f"ms + score {out['score_ms_per_episode']:.0f} ms per episode")


def overhead(args: argparse.Namespace, victim: str) -> dict:
    """What the priors add to a warm evaluate (dataset, victim, priors and their scores cached).

    Wall times of whole runs swing by tens of percent on a shared machine, more than the priors cost, so the
    priors' own work is timed directly, in the same process and conditions: building the references
    (``references_for``), scoring them on every episode (``score_references``, cached scores), and the extra
    summary work (``summarise_metrics`` with the reference scores minus without). It is compared with the
    median wall time of warm runs without priors.
    """
    from gradleak_bench import dataset as datasets
    from gradleak_bench.metrics import select_metrics
    from gradleak_bench.priors import references_for
    from gradleak_bench.run import EvaluateConfig, evaluate
    from gradleak_bench.run.scorer import EpisodeRow, score_references, summarise_metrics

    def run(priors: bool) -> float:
        config = EvaluateConfig(attack=args.overhead, task=args.task, victim=victim, checkpoint=args.checkpoint,
                                episodes=args.eval_episodes, out=tempfile.mkdtemp(prefix="priors-overhead-"),
                                wandb="disabled", priors=priors)
        start = time.perf_counter()
        evaluate(config, progress=False, resume=False)
        return time.perf_counter() - start

    first = run(True)  # fills the score cache of this dataset
    without = [run(False) for _ in range(3)]
    test = datasets.load_or_generate(datasets.standard_config(args.task, victim, args.checkpoint), progress=False)
    ids = episode_ids(test, args.eval_episodes)
    fields = {"closed_form": ["action"]}.get(args.overhead, ["rgb", "action"])
    metrics, _ = select_metrics(None, fields)
    start = time.perf_counter()
    refs = references_for(test, fields)
    build_s = time.perf_counter() - start
    rows, score_s = [], 0.0
    for episode_id in ids:
        episode = test.episode(episode_id)
        start = time.perf_counter()
        scores = score_references(refs, metrics, episode)
        score_s += time.perf_counter() - start
        rows.append(EpisodeRow(episode_id, episode.layout_id, episode.length, "ok",
                               metrics=dict(scores[refs[0].name]), references=scores))
    start = time.perf_counter()
    summarise_metrics(rows, metrics, 0, False)
    with_refs = time.perf_counter() - start
    for row in rows:
        row.references = {}
    start = time.perf_counter()
    summarise_metrics(rows, metrics, 0, False)
    summary_s = with_refs - (time.perf_counter() - start)
    added = build_s + score_s + summary_s
    return {"attack": args.overhead, "episodes": args.eval_episodes, "fields": fields,
            "first_with_priors_s": first, "without_priors_s": without,
            "build_references_s": build_s, "score_references_s": score_s, "summary_extra_s": summary_s,
            "added_s": added, "overhead": added / float(np.median(without)),
            "load_average_after": os.getloadavg()[0]}


if __name__ == "__main__":
    main()
