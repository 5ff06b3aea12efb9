"""A run is resolved once, at the edge (gradleak_bench/run/plan.py), and the plan carries the backend: unknown
names fail before anything starts, PyBullet keys stay what they were, and `generate` / `evaluate` run end to end
through the CLI on the AI2-THOR and Habitat stand-ins (tests/_fake_simulators.py), or refuse a missing
simulator with what to install."""
from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from gradleak_bench.dataset_config import DatasetConfig
from gradleak_bench.errors import (CorruptFileError, GradleakError, MissingDependencyError, PluginLoadError,
                                   UnknownNameError)
from gradleak_bench.run.config import EvaluateConfig
from gradleak_bench.run.plan import RunPlan, resolve

TESTS = Path(__file__).parent

# The CLI's own entry point, in a fresh process whose simulator packages are the recorded-fixture stand-ins
# (or, with "missing", absent): what a user with AI2-THOR or Habitat installed runs.
LAUNCH = """
import sys
sys.path.insert(0, {tests!r})
from _fake_simulators import fake_ai2thor_modules, fake_habitat_module
if {missing!r}:
    sys.modules.update({{name: None for name in ("ai2thor", "ai2thor.controller", "habitat_sim")}})
else:
    sys.modules.update(fake_ai2thor_modules())
    sys.modules["habitat_sim"] = fake_habitat_module()
from gradleak_bench.cli import main
sys.argv = ["gradleak-bench", *sys.argv[1:]]
main()
"""


def cli(*args: str, missing: bool = False) -> subprocess.CompletedProcess:
    code = LAUNCH.format(tests=str(TESTS), missing=missing)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "80"}, timeout=600)


def test_plan_resolves_every_name_once(tmp_path):
    plan = resolve(EvaluateConfig(attack="closed_form", victim="ppo_compact", defense="topk",
                                  defense_params={"keep": 0.5}, out=str(tmp_path)))
    assert plan.task.name == "PointNav" and plan.victim.key == "PointNav/ppo_compact"
    assert plan.attack.target.endswith("closed_form:ClosedFormAction") and plan.defense.params == {"keep": 0.5}
    assert plan.located is not None and plan.located[0].name == "init.safetensors"
    assert plan.split.key == "PointNav-ppo_compact-init-test-e4-t8-s0-v0" and plan.backend == "pybullet"
    assert resolve(plan) is plan
    assert plan.dataset("trace-windows").protocol == "trace-windows"  # the attack's own protocol
    assert resolve(EvaluateConfig(attack="closed_form", out=str(tmp_path))).defense is None  # `none`: no process
    shipped = pickle.loads(pickle.dumps(plan))  # a Ray worker receives it
    assert isinstance(shipped, RunPlan) and shipped.split == plan.split and shipped.victim == plan.victim
    # on another node the driver's checkpoint path may not exist: the worker locates the same file there
    elsewhere = dataclasses.replace(plan, located=(tmp_path / "driver-only" / "init.safetensors", plan.located[1]))
    assert pickle.loads(pickle.dumps(elsewhere)).located == plan.located
    forged = dataclasses.replace(plan, located=(tmp_path / "driver-only" / "init.safetensors", "0" * 64))
    with pytest.raises(GradleakError, match="same gradleak-bench version"):
        pickle.loads(pickle.dumps(forged))


@pytest.mark.parametrize("change, error, needle", [
    ({"attack": "closed_from"}, UnknownNameError, "Did you mean 'closed_form'"),
    ({"defense": "topkk"}, UnknownNameError, "Did you mean 'topk'"),
    ({"task": "PointNv"}, UnknownNameError, "Did you mean 'PointNav'"),
    ({"victim": "ppo_compat"}, UnknownNameError, "ppo_compact"),
    ({"checkpoint": "trianed"}, UnknownNameError, "trained"),
    ({"protocol": "first9"}, UnknownNameError, "first8"),
    ({"backend": "ai2htor"}, UnknownNameError, "Did you mean 'ai2thor'"),
    ({"attack": "no/such/file.py:Attack"}, PluginLoadError, "does not exist"),
    ({"task": "ActivePerception", "victim": "reinforce", "checkpoint": "trained"}, GradleakError,
     "not published as trained"),  # the checkpoint file is located once, here
])
def test_unknown_names_fail_at_the_edge(tmp_path, change, error, needle):
    out = tmp_path / "run"
    with pytest.raises(error, match=needle):
        resolve(EvaluateConfig(**{"attack": "closed_form", "out": str(out), **change}))
    assert not out.exists()


def test_a_checkpoint_written_for_another_configuration_is_refused_at_the_edge(tmp_path, monkeypatch):
    """The plan locates the checkpoint file once (the run loads that file, looking none up by name again), so a
    stale file in the cache is named before any process starts."""
    from gradleak_bench.victims.card import cached_dir
    from gradleak_bench.victims.zoo import get_victim

    monkeypatch.setenv("GRADLEAK_BENCH_CACHE", str(tmp_path / "cache"))
    folder = cached_dir(get_victim("ActivePerception", "dqn_150"))  # no packaged file: the cache is searched
    folder.mkdir(parents=True)
    (folder / "init.safetensors").write_bytes(b"{}")
    (folder / "init.json").write_text(json.dumps({"config_hash": "0" * 16, "weights_sha256": "0" * 64}))
    with pytest.raises(CorruptFileError, match="another configuration"):
        resolve(EvaluateConfig(task="ActivePerception", victim="dqn_150", attack="closed_form",
                               out=str(tmp_path / "run")))


def test_pybullet_keys_and_records_unchanged():
    """The backend enters a dataset's key and identity header only off the default: every PyBullet key,
    identity and recorded config is what it was before backends entered the run."""
    default = DatasetConfig("PointNav", "ppo", "init")
    assert default.key == "PointNav-ppo-init-test-e4-t8-s0-v0"
    assert "backend" not in default.to_dict() and "scenes" not in default.to_dict()
    thor = DatasetConfig("PointNav", "ppo", "init", backend="ai2thor")
    assert thor.key == "PointNav-ppo-init-test-e4-t8-s0-ai2thor-v0" and thor.to_dict()["backend"] == "ai2thor"
    scenes = DatasetConfig("PointNav", "ppo", "init", backend="habitat", scenes=("/a.glb", "/b.glb"))
    assert scenes.key.startswith("PointNav-ppo-init-test-e4-t8-s0-habitat-") and scenes.to_dict()["scenes"]
    assert DatasetConfig(**json.loads(json.dumps(scenes.to_dict()))) == scenes  # read back from a file
    config = EvaluateConfig(attack="closed_form")
    assert "backend" not in config.to_dict() and "scenes" not in config.to_dict()
    assert EvaluateConfig(attack="closed_form", backend="ai2thor").to_dict()["backend"] == "ai2thor"


def test_missing_simulator_is_refused_at_the_edge(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "habitat_sim", None)
    with pytest.raises(MissingDependencyError, match="conda install habitat-sim"):
        resolve(EvaluateConfig(attack="closed_form", backend="habitat", scenes=(str(tmp_path),), priors=False,
                               out=str(tmp_path / "run")))


def _evaluate_on(backend: str, tmp_path: Path, *extra: str, priors: bool = False) -> dict:
    common = ("PointNav", "--victim", "ppo_compact", "--backend", backend, *extra)
    made = cli("generate", *common)
    assert made.returncode == 0, made.stderr
    assert f"no official split on the {backend} backend" in made.stdout
    identity = made.stdout.strip().splitlines()[-1]
    out = tmp_path / f"run-{backend}"
    run = cli("evaluate", "closed_form", "--task", *common, "--episodes", "2", "--wandb", "disabled",
              "--out", str(out), *(() if priors else ("--no-priors",)))
    assert run.returncode == 0, run.stderr
    assert f"the {backend} backend's public split (unofficial" in run.stdout
    summary = json.loads((out / "results.json").read_text())
    assert summary["backend"] == backend and summary["split_role"] == "unofficial"
    assert summary["dataset_identity"] == identity and f"-{backend}" in summary["dataset"]
    assert summary["dataset_official"] is None and summary["n_episodes"] == 2 and summary["n_failed"] == 0
    # the actions of the episodes the attack saw, recovered from their gradients (closed form: exact)
    assert summary["metrics"]["action_accuracy"]["mean"] == 1.0
    return summary


def test_generate_and_evaluate_on_ai2thor_through_the_cli(tmp_path, cache_dir):
    summary = _evaluate_on("ai2thor", tmp_path, "--split", "val", priors=True)
    # the priors were fitted on AI2-THOR's own train split, never on PyBullet's
    assert summary["metrics"]["action_accuracy"]["best_prior"].startswith("prior:")
    from safetensors import safe_open

    fitted = []
    for path in Path(cache_dir).glob("priors/*.safetensors"):
        with safe_open(str(path), framework="numpy") as f:
            fitted.append(json.loads(f.metadata()["config"]))
    assert {"task": "PointNav", "victim": "ppo_compact", "backend": "ai2thor"}.items() <= \
        next(c for c in fitted if c.get("backend") == "ai2thor").items()


def test_generate_and_evaluate_on_habitat_through_the_cli(tmp_path):
    scenes = tmp_path / "scenes"
    scenes.mkdir()
    for name in ("apartment_0.glb", "apartment_1.glb"):
        (scenes / name).write_bytes(b"glTF")  # the stand-in simulator only checks that the file exists
    summary = _evaluate_on("habitat", tmp_path, "--scenes", str(scenes))
    assert summary["dataset"].startswith("PointNav-ppo_compact-init-test-e4-t8-s0-habitat-")
    refused = cli("evaluate", "closed_form", "--backend", "habitat", "--scenes", str(scenes),
                  "--out", str(tmp_path / "priors"))  # no train split to fit the priors on
    assert refused.returncode == 2 and "--no-priors" in refused.stderr


def test_missing_simulator_through_the_cli(tmp_path, cache_dir):
    out = tmp_path / "run"
    for backend, install in (("ai2thor", "pip install 'gradleak-bench[ai2thor]'"),
                             ("habitat", "conda install habitat-sim")):
        extra = ("--scenes", str(tmp_path)) if backend == "habitat" else ()
        for args in (("generate", "PointNav", "--backend", backend, *extra),
                     ("evaluate", "closed_form", "--backend", backend, "--no-priors", "--out", str(out), *extra)):
            result = cli(*args, missing=True)
            assert result.returncode == 2, result.stderr
            assert install in " ".join(result.stderr.split()) and "Traceback" not in result.stderr
    assert not out.exists() and not any(Path(cache_dir).glob("datasets/PointNav-ppo-init-test-*-ai2thor-*"))
    fresh = cli("evaluate", "closed_form", "--backend", "ai2thor", "--fresh", "2", "--out", str(out))
    assert fresh.returncode == 2 and "--backend ai2thor" in fresh.stderr
