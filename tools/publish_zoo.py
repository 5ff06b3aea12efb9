"""Maintainer tool: publish the victim zoo and the official dataset checksums.

1. Writes every victim's ``init`` checkpoint (once: a committed one is kept) and copies its trained checkpoint (from the training cache,
   `gradleak-bench train-victim`) into ``envs/checkpoints/<task>/<victim>/``, so users load exactly the
   committed weights whatever their torch version's initialisation.
2. Generates every standard held-out dataset (test split, 4 episodes per layout, seed 0) for every victim
   and checkpoint available, and records its identity in ``envs/splits/v0.json`` under ``datasets`` and its
   episodes (executed actions, float fingerprints) in ``envs/splits/v0/<key>.json`` (docs/tasks.md).

3. ``--protocol trace-windows`` records the datasets of that data protocol (docs/tasks.md, "Data protocols").

``--task`` and ``--victim`` restrict steps 1 and 2 to those tasks' victims / those victims (default: all).

Run: python tools/publish_zoo.py [--skip-checkpoints] [--split test-full --task PointNav] [--resample]
     [--protocol trace-windows --task PointNav --victim ppo --victim a2c]
     [--task PointNav --victim ppo_84 --victim a2c_84]   (a new victim: its init checkpoint and test split)
     [--task PointNav --victim ppo_84 --checkpoint trained]   (a newly trained victim: its trained splits only)
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from gradleak_bench import dataset as datasets
from gradleak_bench import dataset_config
from gradleak_bench import splits
from gradleak_bench.victims.checkpoint import save_checkpoint
from gradleak_bench.victims.card import cached_dir, packaged_dir
from gradleak_bench.victims.policies import build_policy
from gradleak_bench.victims.spaces import env_spaces
from gradleak_bench.victims.zoo import NOT_LEARNED, QGI_IMAGE_SIZE, VICTIMS

ROOT = Path(__file__).resolve().parents[1]


def publish_checkpoints(tasks: tuple[str, ...] = (), victims: tuple[str, ...] = ()) -> None:
    """Publish the checkpoints of every victim of ``tasks`` (default: all) named in ``victims`` (default: all)."""
    for spec in VICTIMS.values():
        if (tasks and spec.task not in tasks) or (victims and spec.name not in victims):
            continue
        target = ROOT / "envs" / "checkpoints" / spec.task / spec.name
        # A committed init is never rewritten: on another CPU the seeded initialisation differs in the last
        # bits, and the committed file *is* the checkpoint (its sha256 is part of the split identity). The
        # 150x150 inits are rebuilt from their seed, not committed (21 MB a file: zoo._at_paper_resolution).
        init_committed = spec.image_size != QGI_IMAGE_SIZE
        if init_committed and not (target / "init.safetensors").is_file():
            policy = build_policy(spec, env_spaces(spec.task, spec.image_size))
            save_checkpoint(policy, spec, "init", target, {"note": "seeded initialisation"})
        elif init_committed:
            rehash_init(spec, target)
        source = cached_dir(spec)
        if spec.key in NOT_LEARNED:  # issue 31: a trained checkpoint that did not learn is not published
            print(f"published {spec.key} init (trained not published: {NOT_LEARNED[spec.key]})")
        elif (source / "trained.safetensors").is_file():
            for suffix in ("safetensors", "json"):
                shutil.copyfile(source / f"trained.{suffix}", target / f"trained.{suffix}")
            publish_curve(spec, source, target)
            stale = target / "not_learned"
            if stale.is_dir():  # an earlier recipe's checkpoint that did not learn: replaced, not kept beside
                shutil.rmtree(stale)
            print(f"published {spec.key} {'init' if init_committed else 'init (rebuilt from its seed)'} + trained")
        else:
            print(f"published {spec.key} init (no trained checkpoint in {source})")


def publish_curve(spec, source: Path, target: Path) -> None:
    """The training run's learning curve beside the trained checkpoint (docs/make_training_curves.py draws it),
    with the random policy's success on the same episodes (measured here for a run that did not record it)."""
    from gradleak_bench.victims.training import curve_random_row

    curve = source / "curve.json"
    if not curve.is_file():
        return
    data = json.loads(curve.read_text())
    if not data.get("random"):
        data["random"] = curve_random_row(spec, int(data["episodes"]))
    data["victim"] = spec.key
    (target / "curve.json").write_text(json.dumps(data, indent=1))


def rehash_init(spec, target: Path) -> bool:
    """A victim whose *training recipe* changed (issue 31) keeps its ``init`` weights: the same file, the same
    sha256, so the same ``init`` splits (their identity holds the weights' sha256 and the loss spec, not the
    config hash). Only its JSON names the new spec and config hash, which loading checks. Refused when the spec
    changed in more than its training (then the init weights are another network's)."""
    meta_file = target / "init.json"
    meta = json.loads(meta_file.read_text())
    if meta["config_hash"] == spec.config_hash():
        return False
    old = {k: v for k, v in meta["victim"].items() if k not in ("train", "description")}
    new = {k: v for k, v in spec.to_dict().items() if k not in ("train", "description")}
    if old != new:
        raise SystemExit(f"{spec.key}: the committed init was written for another network ({old} != {new}); "
                         f"delete it to publish a new one")
    meta["victim"], meta["config_hash"] = spec.to_dict(), spec.config_hash()
    meta_file.write_text(json.dumps(meta, indent=1))
    print(f"{spec.key}: init.json names the new training recipe (config {spec.config_hash()}); weights unchanged")
    return True


def record_splits(split: str = "test", tasks: tuple[str, ...] | None = None, resample: bool = False,
                  protocol: str = dataset_config.FIRST8, victims: tuple[str, ...] | None = None,
                  checkpoints: tuple[str, ...] = ("init", "trained")) -> None:
    """Record the official datasets of ``split`` (``test`` or ``test-full``) and data ``protocol`` for every
    victim of ``tasks`` (default: all) named in ``victims`` (default: all): the identity in
    ``envs/splits/v0.json`` and the episode record (executed actions of the whole episode, window start, float
    fingerprints) in ``envs/splits/v0/<key>.json``, for each of ``checkpoints`` the victim has. A split already
    recorded replays its actions unless ``resample`` (a new split: actions sampled from the policy on this
    machine)."""
    manifest_file = Path(splits.manifest_path())
    manifest = json.loads(manifest_file.read_text())
    recorded = dict(manifest.get("datasets", {}))
    records_dir = manifest_file.parent / splits.MANIFEST_VERSION
    records_dir.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for spec in VICTIMS.values():
            if (tasks and spec.task not in tasks) or (victims and spec.name not in victims):
                continue
            for checkpoint in checkpoints:
                if checkpoint == "trained" and not (packaged_dir(spec) / "trained.safetensors").is_file():
                    continue
                config = datasets.standard_config(spec.task, spec.name, checkpoint, split, protocol=protocol)
                path = Path(tmp) / f"{config.key}.h5"
                datasets.write(path, config, datasets.iter_generate(config, progress=True, replay=not resample))
                ds = datasets.open_dataset(path)
                verified = ds.verify()
                record = {
                    "format": splits.RECORD_FORMAT, "key": config.key, "identity": verified.identity,
                    "header": ds.identity_header, "recorded_on": recording_machine(),
                    "episodes": [r.to_json() for r in verified.records],
                }
                (records_dir / f"{config.key}.json").write_text(json.dumps(record, separators=(",", ":")) + "\n")
                recorded[config.key] = verified.identity
                print(f"{config.key}: identity {verified.identity}")
    manifest["datasets"] = dict(sorted(recorded.items()))
    manifest_file.write_text(json.dumps(manifest, indent=1) + "\n")


def recording_machine() -> dict[str, str]:
    """Where a split was recorded (informative: the identity does not depend on it)."""
    import platform

    import torch

    return {"machine": platform.machine(), "processor": platform.processor() or "",
            "torch": torch.__version__, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-checkpoints", action="store_true")
    parser.add_argument("--split", default="test", help="test (default) or test-full (issue 6's full episodes)")
    parser.add_argument("--task", action="append", help="only this task's victims (repeatable)")
    parser.add_argument("--resample", action="store_true",
                        help="sample the actions anew instead of replaying a recorded split (a new split)")
    parser.add_argument("--protocol", default=dataset_config.FIRST8, choices=dataset_config.PROTOCOLS,
                        help="data protocol of the datasets recorded (docs/tasks.md, 'Data protocols')")
    parser.add_argument("--victim", action="append", help="only this victim (repeatable)")
    parser.add_argument("--checkpoint", action="append", choices=("init", "trained"),
                        help="only this checkpoint's splits (repeatable; default both): a newly trained victim's "
                             "splits without re-recording its committed init ones")
    args = parser.parse_args()
    if not args.skip_checkpoints:
        publish_checkpoints(tuple(args.task or ()), tuple(args.victim or ()))
    splits.manifest.cache_clear()
    splits.split_record.cache_clear()
    record_splits(args.split, tuple(args.task or ()), args.resample, args.protocol, tuple(args.victim or ()),
                  tuple(args.checkpoint or ("init", "trained")))


if __name__ == "__main__":
    main()
