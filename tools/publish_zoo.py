"""Maintainer tool: publish the victim zoo and the official dataset checksums.

1. Writes every victim's ``init`` checkpoint and copies its trained checkpoint (from the training cache,
   `gradleak-bench train-victim`) into ``envs/checkpoints/<task>/<victim>/``, so users load exactly the
   committed weights whatever their torch version's initialisation.
2. Generates every standard held-out dataset (test split, 4 episodes per layout, seed 0) for every victim
   and checkpoint available, and records its content sha256 in ``envs/splits/v0.json`` under ``datasets``.

Run: python tools/publish_zoo.py [--skip-checkpoints] [--split test-full --task PointNav]
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from gradleak_bench import dataset as datasets
from gradleak_bench import splits
from gradleak_bench.victims.checkpoint import cached_dir, load_victim, packaged_dir, save_checkpoint
from gradleak_bench.victims.policies import build_policy
from gradleak_bench.victims.zoo import VICTIMS

ROOT = Path(__file__).resolve().parents[1]


def publish_checkpoints() -> None:
    for spec in VICTIMS.values():
        target = ROOT / "envs" / "checkpoints" / spec.task / spec.name
        save_checkpoint(build_policy(spec), spec, "init", target, {"note": "seeded initialisation"})
        source = cached_dir(spec)
        if (source / "trained.safetensors").is_file():
            for suffix in ("safetensors", "json"):
                shutil.copyfile(source / f"trained.{suffix}", target / f"trained.{suffix}")
            print(f"published {spec.key} init + trained")
        else:
            print(f"published {spec.key} init (no trained checkpoint in {source})")


def record_checksums(split: str = "test", tasks: tuple[str, ...] | None = None) -> None:
    """Record the sha256 of the standard datasets of ``split`` (``test`` or ``test-full``) for every victim of
    ``tasks`` (default: all), keeping the manifest's other entries."""
    manifest_file = Path(splits.manifest_path())
    manifest = json.loads(manifest_file.read_text())
    recorded = dict(manifest.get("datasets", {}))
    with tempfile.TemporaryDirectory() as tmp:
        for spec in VICTIMS.values():
            if tasks and spec.task not in tasks:
                continue
            for checkpoint in ("init", "trained"):
                if checkpoint == "trained" and not (packaged_dir(spec) / "trained.safetensors").is_file():
                    continue
                load_victim(spec.task, spec.name, checkpoint)
                config = datasets.standard_config(spec.task, spec.name, checkpoint, split)
                sha = datasets.write(Path(tmp) / f"{config.key}.h5", config, datasets.generate(config, progress=False))
                recorded[config.key] = sha
                print(f"{config.key}: {sha}")
    manifest["datasets"] = dict(sorted(recorded.items()))
    manifest_file.write_text(json.dumps(manifest, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-checkpoints", action="store_true")
    parser.add_argument("--split", default="test", help="test (default) or test-full (issue 6's full episodes)")
    parser.add_argument("--task", action="append", help="only this task's victims (repeatable)")
    args = parser.parse_args()
    if not args.skip_checkpoints:
        publish_checkpoints()
    splits.manifest.cache_clear()
    record_checksums(args.split, tuple(args.task or ()))


if __name__ == "__main__":
    main()
