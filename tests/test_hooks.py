"""Optional plug-in hooks are typed protocols with one signature each (gradleak_bench/hooks.py)."""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest

from gradleak_bench import hooks, plugins
from gradleak_bench.errors import PluginContractError


class Bare:
    """A defense written without the base class: conforming by its methods alone."""

    name: ClassVar[str] = "bare"
    delta = 1e-5

    def release(self, gradients, rng):
        return gradients

    def epsilon(self, sample_rate=None, steps=None):
        return 1.0 if steps is None else float(steps)

    def action_epsilon(self, n_actions):
        return float(n_actions)


class Legacy(Bare):
    def epsilon(self):  # the old zero-argument form: refused with the fix, never guessed around
        return 1.0


class Based(plugins.DefenseBase):
    name: ClassVar[str] = "based"

    def release(self, gradients, rng):
        return gradients


def test_a_class_without_the_base_conforms_by_its_methods():
    assert hooks.capabilities(Bare()) == ["epsilon", "action_epsilon"]
    assert isinstance(Bare(), plugins.Defense)
    assert hooks.guarantees(Bare(), 4) == {"defense_epsilon": 1.0, "defense_delta": 1e-5, "defense_action_epsilon": 4.0}
    # train-defense asks the same method, same signature, with the run's accounting
    assert hooks.guarantees(Bare(), 4, sample_rate=0.5, steps=7)["defense_epsilon"] == 7.0


def test_epsilon_has_one_signature():
    with pytest.raises(PluginContractError, match="sample_rate and steps"):
        hooks.guarantees(Legacy(), 4)


def test_base_classes_give_only_neutral_hooks():
    based = Based()
    assert hooks.capabilities(based) == ["check"] and based.check(None) is None
    assert plugins.check_plugin_class("defense", "based", Based) is Based
    assert hooks.guarantees(based, 4) == {}  # no guarantee is invented


def test_builtin_dp_sgd_answers_both_callers():
    dp = plugins.load("defense", "dp_sgd", {"sigma": 1.0, "sample_rate": 0.02, "steps": 200})
    own = hooks.guarantees(dp, 5)["defense_epsilon"]
    assert own == dp.epsilon(sample_rate=None, steps=None) == dp.epsilon(sample_rate=0.02, steps=200)
    assert hooks.guarantees(dp, 5, sample_rate=1.0, steps=1)["defense_epsilon"] > own
    released = dp.release(_stream(), np.random.default_rng(0))
    assert set(released.tensors) == {"w"}


def _stream():
    import torch

    from gradleak_bench.records import GradientStream

    return GradientStream({"w": torch.ones(2, 3)})


@pytest.mark.parametrize("error, status", [("typed", "skipped"), ("message", "failed")])
def test_grid_classifies_errors_by_type_not_by_message(monkeypatch, error, status):
    from gradleak_bench.errors import AttackNotApplicableError, GradleakError
    from gradleak_bench.run import evaluation, grid

    def evaluate(config, progress=False):
        if error == "typed":
            raise AttackNotApplicableError("attack 'qgi' cannot run here")
        raise GradleakError("a dataset that does not apply to this run")  # the old substring, untyped

    monkeypatch.setattr(grid, "_finished", lambda cell: None)
    monkeypatch.setattr(grid, "_cell_config", lambda cell: None)
    monkeypatch.setattr(evaluation, "evaluate", evaluate)
    assert grid.run_cell(None)["status"] == status
