"""The plug-in registry (gradleak_bench/registry.py): built-ins are gradleak-bench's own entry points, a third
party's entry point is found by name but never shadows a built-in, and an out-of-tree attack, defense and
metric installed from a temp dir run through `gradleak-bench evaluate`."""
from __future__ import annotations

import doctest
import importlib
import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from gradleak_bench import plugins, registry
from gradleak_bench.errors import PluginLoadError, UnknownNameError

ROOT = Path(__file__).resolve().parents[1]

TOY_MODULE = '''
"""A third-party package: one attack, one defense, one metric, found through entry points."""
from typing import ClassVar

import numpy as np

from gradleak_bench.metrics import MetricSpec
from gradleak_bench.plugins import DefenseBase
from gradleak_bench.records import GradientStream, Reconstruction


class ToyAttack:
    """Guesses the action whose policy-head bias gradient is the most negative."""

    name: ClassVar[str] = "toy_attack"
    fields: ClassVar[tuple[str, ...]] = ("action",)

    def reconstruct(self, episode, victim):
        bias = [k for k in episode.gradients.tensors if k.endswith("bias")]
        head = [k for k in bias if episode.gradients.tensors[k].shape[1] == victim.n_actions][0]
        g = episode.gradients.tensors[head].detach().cpu().numpy()
        return Reconstruction(fields={"action": g.argmin(axis=1).astype(np.int64)})


class ToyDefense(DefenseBase):
    """Scales every released gradient by a positive factor."""

    name: ClassVar[str] = "toy_defense"

    def __init__(self, scale: float = 2.0):
        self.scale = float(scale)

    def release(self, gradients, rng):
        return GradientStream({k: v * self.scale for k, v in gradients.tensors.items()})


def _first_action_right(recon, truth):
    return np.asarray([float(recon[0] == truth[0])])


TOY_METRIC = MetricSpec("toy_first_action", "action", _first_action_right, True, "",
                        "1 when the first action is right", per_step=False, worst=0.0)


class NotAnAttack:
    pass
'''

ENTRY_POINTS = '''
[gradleak_bench.attacks]
toy_attack = toy_plugins:ToyAttack
closed_form = toy_plugins:NotAnAttack

[gradleak_bench.defenses]
toy_defense = toy_plugins:ToyDefense

[gradleak_bench.metrics]
toy_metrics = toy_plugins:TOY_METRIC
'''


@pytest.fixture
def toy_site(tmp_path, monkeypatch) -> Path:
    """An installed third-party distribution: a module and its dist-info (entry points) on sys.path."""
    site = tmp_path / "site"
    dist = site / "toy_plugins-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "toy_plugins.py").write_text(textwrap.dedent(TOY_MODULE))
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-plugins\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield site
    sys.modules.pop("toy_plugins", None)


def test_builtins_are_the_entry_points_declared_in_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    for kind, group in registry.GROUPS.items():
        declared = project.get(group, {})
        assert {n: s.target for n, s in registry.builtin(kind).items()} == declared
    assert "closed_form" in registry.builtin("attack") and "topk" in registry.builtin("defense")
    for kind in plugins.KINDS:  # every declared built-in is a loadable plug-in class
        for name, spec in registry.builtin(kind).items():
            assert plugins.check_plugin_class(kind, name, spec.load()).name == name


def test_a_third_party_entry_point_is_found_but_never_shadows_a_builtin(toy_site):
    assert registry.find("attack", "toy_attack").origin == "entry_point"
    assert registry.find("attack", "toy_attack").distribution == "toy-plugins"
    # the shadowing attempt is ignored and reported; the built-in answers its name
    assert [s.name for s in registry.shadowed("attack")] == ["closed_form"]
    assert registry.find("attack", "closed_form").origin == "builtin"
    assert type(plugins.load("attack", "closed_form")).__name__ == "ClosedFormAction"
    # and a leaderboard entry's `registered` binding resolves to the built-in, never the third party's
    from gradleak_bench.leaderboard import binding

    bound, _ = binding.bind("attack", "closed_form")
    assert bound.source == "registered"
    assert binding.reference("attack", bound, toy_site) == "closed_form"
    third, _ = binding.bind("attack", "toy_attack")
    assert (third.source, third.distribution, third.version) == ("entry_point", "toy-plugins", "0.1")


def test_run_time_registration_never_shadows(toy_site):
    with pytest.raises(PluginLoadError, match="built-in has that name"):
        registry.register("defense", "topk", "toy_plugins:ToyDefense")
    with pytest.raises(PluginLoadError, match="installed entry point"):
        registry.register("defense", "toy_defense", "toy_plugins:ToyDefense")
    registry.register("defense", "toy_runtime", "toy_plugins:ToyDefense")
    try:
        assert plugins.load("defense", "toy_runtime", {"scale": 3.0}).scale == 3.0
        assert registry.names("defense")[: len(registry.builtin("defense"))] == list(registry.builtin("defense"))
    finally:
        registry.unregister("defense", "toy_runtime")
    with pytest.raises(UnknownNameError):
        registry.find("defense", "toy_runtime")


def test_unknown_kind_and_bad_references():
    with pytest.raises(UnknownNameError, match="plug-in kind"):
        registry.builtin("sensor")
    with pytest.raises(PluginLoadError, match="module:Class"):
        registry.import_target("no_colon_here")


def test_an_installed_metric_is_added_but_never_replaces_one(toy_site, monkeypatch):
    from gradleak_bench.metrics import registry as metrics

    monkeypatch.setattr(metrics, "_entry_points_loaded", False)
    monkeypatch.setattr(metrics, "_REGISTRY", dict(metrics._REGISTRY))
    monkeypatch.setattr(metrics, "IGNORED", [])
    (toy_site / "toy_plugins-0.1.dist-info" / "entry_points.txt").write_text(
        ENTRY_POINTS + "bad = toy_plugins:NotAnAttack\n")
    before = metrics._REGISTRY["action_accuracy"]
    assert metrics.get_metric("toy_first_action").field == "action"
    assert metrics._REGISTRY["action_accuracy"] is before
    assert any("not a MetricSpec" in note for note in metrics.IGNORED)


def test_docstring_examples():
    for module in (registry, importlib.import_module("gradleak_bench.artifacts")):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0


def test_out_of_tree_attack_defense_and_metric_through_evaluate(toy_site, tmp_path):
    """Installed from a temp dir (PYTHONPATH holds the distribution), found by name, run sealed."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(toy_site), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "evaluate", "toy_attack", "--defense",
                           "toy_defense", "-D", "scale=3", "--episodes", "2", "-M", "toy_first_action", "-M",
                           "action_accuracy", "--wandb", "disabled", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["attack"] == "toy_attack" and results["defense"] == "toy_defense"
    assert results["metrics"]["toy_first_action"]["n"] == 2
    assert results["defense_params"] == {"scale": 3}
    assert results["metrics"]["toy_first_action"]["mean"] in (0.0, 0.5, 1.0)  # one 0/1 value per episode
    assert 0.0 <= results["metrics"]["action_accuracy"]["mean"] <= 1.0
