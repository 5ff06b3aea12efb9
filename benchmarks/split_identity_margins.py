"""How far the split-identity tolerance sits from float rounding and from a real change (docs/tasks.md).

For one official split it measures, per float field, the RMS difference between two generations divided by
the field's tolerance (split_identity.TOLERANCES), in two families:

* rounding: the same split generated in fresh processes on other CPU code paths (torch ATen without SIMD and
  oneDNN at SSE4.1 with numpy's AVX-512 kernels off; ATen and oneDNN at AVX2), replaying the recorded
  actions -- the largest ratio over episodes must stay far below 1;
* real changes: the trained checkpoint replaying the init split's actions, the loss with gamma 0.98, the
  same layouts with another dataset seed (other start poses), and each episode against the next layout's
  episode -- the smallest ratio over episodes must stay far above 1.

It also generates the split on each code path *without* replay, counting episodes whose sampled actions
differ from the recording (why the official split replays its actions).

Run: python benchmarks/split_identity_margins.py [--victim ppo_compact] [--checkpoint init] [--out FILE]
Writes benchmarks/results/split_identity_margins.json (docs/tasks.md's table is rendered from it);
``--victim ppo_84 --out benchmarks/results/split_identity_margins_ppo_84.json``: the 84x84 split's table.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gradleak_bench import dataset as datasets
from gradleak_bench import split_identity, splits

ROOT = Path(__file__).resolve().parents[1]
CODE_PATHS = {
    "ATen default + oneDNN SSE4.1 + numpy without AVX-512": {
        "ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
        "NPY_DISABLE_CPU_FEATURES": "AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL"},
    "ATen AVX2 + oneDNN AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
_CHILD = """
import sys
from pathlib import Path
from gradleak_bench import dataset as datasets
config = datasets.standard_config(sys.argv[1], sys.argv[2], sys.argv[3], "test")
datasets.write(Path(sys.argv[4]), config, datasets.iter_generate(config, progress=False, replay=sys.argv[5] == "1"))
"""


def ratios(reference: dict[str, split_identity.EpisodeRecord], records) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in records:
        ref = reference[r.episode_id]
        for name, (z_ref, rms_ref) in ref.sketches.items():
            if name in r.sketches and len(r.sketches[name][0]) == len(z_ref):
                d = np.asarray(r.sketches[name][0]) - np.asarray(z_ref)
                out.setdefault(name, []).append(float(np.sqrt(np.mean(d * d))) / split_identity.tolerance(name, rms_ref))
    return out


def exact_max_abs(reference_path: Path, other_path: Path) -> dict[str, float]:
    """The largest element-wise |difference| per field between two files of the same episodes."""
    a, b = datasets.open_dataset(reference_path), datasets.open_dataset(other_path)
    out: dict[str, float] = {}
    for ea, eb in zip(a, b):
        for name, values in ea.steps.items():
            other = eb.steps.get(name)
            if other is not None and other.shape == values.shape:
                diff = float(np.max(np.abs(values.astype(np.float64) - other.astype(np.float64)), initial=0.0))
                out[name] = max(out.get(name, 0.0), diff)
    return out


def child_generate(task: str, victim: str, checkpoint: str, path: Path, env: dict[str, str], replay: bool) -> None:
    subprocess.run([sys.executable, "-c", _CHILD, task, victim, checkpoint, str(path), "1" if replay else "0"],
                   env=dict(os.environ, **env), check=True, cwd=ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="PointNav")
    parser.add_argument("--victim", default="ppo_compact")
    parser.add_argument("--checkpoint", default="init")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "split_identity_margins.json"))
    args = parser.parse_args()
    config = datasets.standard_config(args.task, args.victim, args.checkpoint, "test")
    record = splits.split_record(config.key)
    if record is None:
        raise SystemExit(f"{config.key} is not an official split")
    reference = {r.episode_id: r for r in record.episodes}
    started = time.time()
    result: dict = {"dataset": config.key, "identity": record.identity, "tolerances": {
        k: {"atol": a, "rtol": r} for k, (a, r) in {**split_identity.TOLERANCES,
                                                    "(other float fields)": split_identity.DEFAULT_TOLERANCE}.items()},
        "rounding": {}, "sampling_without_replay": {}, "real_changes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        native = Path(tmp) / "native.h5"
        datasets.write(native, config, datasets.iter_generate(config, progress=False))
        for name, env in CODE_PATHS.items():
            path = Path(tmp) / "replayed.h5"
            child_generate(args.task, args.victim, args.checkpoint, path, env, replay=True)
            verified = datasets.open_dataset(path).verify()
            r = ratios(reference, verified.records)
            result["rounding"][name] = {
                "identity_equal": verified.identity == record.identity,
                "bit_identical_episodes": sum(split_identity.compare(reference[x.episode_id], x)[1]
                                              for x in verified.records),
                "max_ratio": {k: max(v) for k, v in sorted(r.items())},
                "max_abs_difference": exact_max_abs(native, path),
            }
            sampled = Path(tmp) / "sampled.h5"
            child_generate(args.task, args.victim, args.checkpoint, sampled, env, replay=False)
            changed = [e.episode_id for e in datasets.open_dataset(sampled)
                       if tuple(e.steps["action"].tolist()) != reference[e.episode_id].actions]
            result["sampling_without_replay"][name] = {"episodes": len(reference), "actions_differ": len(changed)}

        from gradleak_bench.victims import load_victim

        def replayed(victim, cfg=config):
            import gymnasium as gym

            from gradleak_bench.tasks import get_task
            actions = datasets.recorded_actions(config)
            env = gym.make(get_task(cfg.task).gym_id, layouts=cfg.split, image_size=victim.spec.image_size)
            try:
                return [datasets.generate_episode(env.unwrapped, victim, layout, seed, cfg.sequence_length, e,
                                                  actions[e] if cfg is config else None)
                        for e, layout, seed in datasets.plan(cfg)]
            finally:
                env.close()

        def records_of(episodes):
            return [split_identity.episode_record(e) for e in episodes]

        from gradleak_bench.victims.card import find_checkpoint

        init = load_victim(args.task, args.victim, args.checkpoint)
        other_checkpoint = "trained" if args.checkpoint == "init" else "init"
        changes = {}
        # A victim whose trained checkpoint is pending (the 84x84 ones) has no other checkpoint to compare with.
        if find_checkpoint(init.spec, other_checkpoint) is not None:
            changes[f"{other_checkpoint} checkpoint, same actions"] = records_of(
                replayed(load_victim(args.task, args.victim, other_checkpoint)))
        changes["loss with gamma 0.98, same actions"] = records_of(replayed(dataclasses.replace(
            init, spec=dataclasses.replace(init.spec, loss=dataclasses.replace(init.spec.loss, gamma=0.98)))))
        other_seed = dataclasses.replace(config, seed=1)
        seed_records = records_of(datasets.generate(other_seed, progress=False, replay=False))
        changes["dataset seed 1 (same layouts, other starts)"] = [
            dataclasses.replace(r, episode_id=e.episode_id) for r, e in zip(seed_records, record.episodes)]
        shifted = list(record.episodes[4:]) + list(record.episodes[:4])  # the next layout's episode
        changes["the next layout's episode"] = [dataclasses.replace(r, episode_id=e.episode_id)
                                                for r, e in zip(shifted, record.episodes)]
        for name, records in changes.items():
            r = ratios(reference, records)
            result["real_changes"][name] = {"min_ratio": {k: min(v) for k, v in sorted(r.items())},
                                            "median_ratio": {k: float(np.median(v)) for k, v in sorted(r.items())}}
    result["seconds"] = round(time.time() - started, 1)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
