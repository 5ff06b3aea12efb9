"""End-to-end runs of the runner on tiny victims: scoring, controls, failure isolation, bad plug-ins."""
from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

from gradleak_bench.run import EvaluateConfig, evaluate


def _run(tmp_path, **kw):
    base = dict(attack="closed_form", task="PointNav", victim="ppo_compact", episodes=6, out=str(tmp_path / "run"),
                wandb="disabled")
    base.update(kw)
    return evaluate(EvaluateConfig(**base), progress=False)


@pytest.mark.parametrize("task,victim", [("PointNav", "ppo_compact"), ("PointNav", "a2c"),
                                         ("ActivePerception", "dqn_compact"), ("ActivePerception", "reinforce")])
def test_closed_form_recovers_every_action_at_init(tmp_path, task, victim):
    """TRACE's theorem (PPO/A2C/REINFORCE) and QGI's one-hot rule (DQN) as a fidelity check of the stream."""
    result = _run(tmp_path, task=task, victim=victim)
    summary = json.loads((tmp_path / "run" / "results.json").read_text())
    acc = summary["metrics"]["action_accuracy"]
    assert acc["mean"] == 1.0 and acc["ci_low"] == 1.0
    assert summary["n_failed"] == 0 and summary["n_episodes"] == 6
    assert len(summary["dataset_sha256"]) == 64
    # the control (another episode's gradients) must not recover this episode's actions perfectly
    assert acc["control"]["mean"] < 0.95
    assert acc["leakage"]["mean"] > 0.05
    assert (tmp_path / "run" / "episodes.csv").read_text().count("\n") == 7
    assert result.n_failed == 0


def test_crashing_plugin_fails_one_episode_only(tmp_path):
    plugin = tmp_path / "flaky.py"
    plugin.write_text(textwrap.dedent("""
        from gradleak_bench.records import Reconstruction
        class Flaky:
            name = "flaky"
            fields = ("action",)
            def __init__(self):
                self.calls = 0
            def reconstruct(self, episode, victim):
                self.calls += 1
                if self.calls == 2:
                    raise RuntimeError("boom on the second episode")
                return Reconstruction(fields={"action": episode.t * 0})
    """))
    result = _run(tmp_path, attack=f"{plugin}:Flaky", episodes=4)
    statuses = [r.status for r in result.rows]
    assert statuses == ["ok", "failed", "ok", "ok"]
    assert "boom on the second episode" in result.rows[1].error
    assert result.summary["n_failed"] == 1
    lines = (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 4


def test_wrong_shapes_are_reported(tmp_path):
    plugin = tmp_path / "bad.py"
    plugin.write_text(textwrap.dedent("""
        import numpy as np
        from gradleak_bench.records import Reconstruction
        class Bad:
            name = "bad"
            fields = ("rgb",)
            def reconstruct(self, episode, victim):
                return Reconstruction(fields={"rgb": np.zeros((len(episode.t), 8, 8, 3))})
    """))
    result = _run(tmp_path, attack=f"{plugin}:Bad", episodes=2)
    assert all(r.status == "failed" and "shape" in r.error for r in result.rows)


def test_nan_gradients_are_rejected(tmp_path):
    plugin = tmp_path / "nan_defense.py"
    plugin.write_text(textwrap.dedent("""
        import torch
        from gradleak_bench.records import GradientStream
        class NaNDefense:
            name = "nan"
            def release(self, gradients, rng):
                return GradientStream({k: v * float("nan") for k, v in gradients.tensors.items()})
    """))
    result = _run(tmp_path, defense=f"{plugin}:NaNDefense", episodes=2)
    assert all(r.status == "failed" and "NaN/Inf" in r.error for r in result.rows)


def test_attack_gets_released_gradients_and_a_private_policy_copy(tmp_path):
    plugin = tmp_path / "spy.py"
    plugin.write_text(textwrap.dedent("""
        import torch
        from gradleak_bench.records import ObservedEpisode, Reconstruction, VictimInfo
        SEEN = []
        class Spy:
            name = "spy"
            fields = ("action",)
            def reconstruct(self, episode, victim):
                assert type(episode) is ObservedEpisode and type(victim) is VictimInfo
                SEEN.append(sorted(vars(episode)))
                with torch.no_grad():
                    for p in victim.policy.parameters():
                        p.zero_()  # vandalism must not reach the scorer
                return Reconstruction(fields={"action": episode.t * 0})
    """))
    result = _run(tmp_path, attack=f"{plugin}:Spy", episodes=3)
    assert result.n_failed == 0
    # gradients of later episodes were computed with the intact victim: closed_form still scores 100%
    again = _run(tmp_path, episodes=3, out=str(tmp_path / "again"))  # its own folder: no resume to refuse
    assert again.summary["metrics"]["action_accuracy"]["mean"] == 1.0


def test_topk_defense_and_wandb_offline(tmp_path):
    result = _run(tmp_path, defense="topk", defense_params={"keep": 0.1}, wandb="offline", episodes=3)
    assert result.summary["defense_params"] == {"keep": 0.1}
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert runs and list(runs[0].glob("run-*.wandb"))  # complete when evaluate returns (W&B in its own process)
    tables = list(runs[0].glob("files/media/table/episodes_*.table.json"))
    logged = json.loads(tables[0].read_text())
    assert len(logged["data"]) == 3 and "action_accuracy/control" in logged["columns"]
    assert np.isfinite(result.summary["ms_per_frame"])


def test_a_wandb_process_that_dies_is_one_clear_error_after_the_results_are_written(tmp_path, monkeypatch):
    from gradleak_bench.errors import GradleakError
    from gradleak_bench.run import tracking

    child = tmp_path / "dying_child.py"
    child.write_text("import sys; sys.stdin.readline(); print('wandb exploded', file=sys.stderr); sys.exit(1)\n")
    monkeypatch.setattr(tracking, "CHILD", child)
    with pytest.raises(GradleakError, match="W&B could not start .*wandb exploded.*--wandb disabled"):
        _run(tmp_path, wandb="offline", episodes=2)
    assert json.loads((tmp_path / "run" / "results.json").read_text())["n_episodes"] == 2


def test_a_failed_run_leaves_no_wandb_run(tmp_path):
    """W&B starts in the background when the run starts; a run that then fails discards it, leaving OUT as
    it was without W&B."""
    from gradleak_bench.errors import GradleakError

    plugin = tmp_path / "unfit.py"
    plugin.write_text(textwrap.dedent("""
        from gradleak_bench.records import Reconstruction

        class Unfit:
            name = "unfit"
            fields = ("action",)

            def supports(self, victim):
                return "no fit today"

            def reconstruct(self, episode, victim):
                return Reconstruction(fields={"action": episode.t * 0})
    """))
    with pytest.raises(GradleakError, match="no fit today"):
        _run(tmp_path, attack=f"{plugin}:Unfit", episodes=1, wandb="offline")
    assert not (tmp_path / "run" / "wandb").exists()


def test_the_tutorial_attack_in_the_docs_runs(tmp_path):
    """docs/write-an-attack.md's code block is executed, not just shown."""
    import re
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "write-an-attack.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    (tmp_path / "my_attack.py").write_text(code)
    result = _run(tmp_path, attack=f"{tmp_path / 'my_attack.py'}:HeadBiasArgmax", episodes=4)
    assert result.n_failed == 0
    assert result.summary["metrics"]["action_accuracy"]["mean"] > 0.9


def test_a_failing_fit_is_one_clear_error(tmp_path):
    from gradleak_bench.errors import GradleakError

    plugin = tmp_path / "fitter.py"
    plugin.write_text(textwrap.dedent("""
        class Fitter:
            name = "fitter"
            fields = ("action",)
            def fit(self, victim, auxiliary):
                episode, stream = next(auxiliary.collect(episodes_per_layout=1, max_episodes=1))
                assert episode.layout_id not in (13, 31, 33)  # train layouts only
                raise ValueError("cannot learn from this")
            def reconstruct(self, episode, victim):
                raise AssertionError("never reached")
    """))
    with pytest.raises(GradleakError, match="failed in fit\\(\\).*cannot learn from this"):
        _run(tmp_path, attack=f"{plugin}:Fitter", episodes=2)


def test_auxiliary_data_refuses_the_test_split(tmp_path):
    from gradleak_bench.errors import GradleakError
    from gradleak_bench.run.auxiliary import AuxiliaryData

    with pytest.raises(GradleakError, match="never the test split"):
        next(AuxiliaryData(None, None).collect(split="test"))


def test_victim_info_copies_a_policy_that_has_already_run_forward():
    """SB3 caches a distribution with grad history after a forward pass, which deepcopy cannot copy; the
    attacker's copy is rebuilt from the spec instead and holds the same parameters."""
    import torch

    from gradleak_bench.stream.replay import EpisodeGradients
    from gradleak_bench.victims import load_victim
    from gradleak_bench.victims.checkpoint import victim_info
    from gradleak_bench.victims.spaces import env_spaces

    victim = load_victim("PointNav", "ppo_compact", "init")
    victim.policy.evaluate_actions(torch.zeros(2, 3, 64, 64), torch.zeros(2).long())
    info = victim_info(victim, EpisodeGradients(victim.policy, victim.spec.loss, env_spaces("PointNav", 64)[0]))
    assert info.policy is not victim.policy
    for (name, a), (_, b) in zip(info.policy.state_dict().items(), victim.policy.state_dict().items()):
        assert torch.equal(a, b), name


def test_without_isolation_the_default_run_is_unsealed_and_says_so(tmp_path, monkeypatch, capfd):
    """The README's main job must run on a machine without bubblewrap: the default (sealed=None) falls back
    to an unsealed run with a notice -- one plain line on stderr, not a Python warning with its file:line --
    marked in results.json (submit refuses it); --sealed refuses instead."""
    import warnings

    from gradleak_bench.errors import GradleakError
    from gradleak_bench.run import isolation

    monkeypatch.setattr(isolation, "isolation", lambda: (None, "bubblewrap (bwrap) is not installed"))
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _run(tmp_path, episodes=2, control=False, priors=False)
    assert not [w for w in caught if "unsealed" in str(w.message).lower()]
    notes = [line for line in capfd.readouterr().err.splitlines() if "unsealed" in line]
    assert notes == ["note: running unsealed (bubblewrap (bwrap) is not installed): the plug-ins could read the "
                     "truth, so the results are marked unsealed and cannot be submitted; apt-get install "
                     "bubblewrap to seal (docs/evaluate.md)."]
    assert result.summary["sealed"] is False and result.summary["isolation"] is None
    with pytest.raises(GradleakError, match="apt-get install bubblewrap"):
        _run(tmp_path / "b", episodes=2, sealed=True)


def test_wandb_summary_names_the_headline_and_the_control(tmp_path):
    """W&B's summary carries the headline (the leakage over the strongest reference, named, and the CLI's verdict
    in the same words), the leakage over the best prior and the swap control's, each named."""
    from gradleak_bench.run.tracking import _flat_summary

    result = _run(tmp_path, episodes=3)
    logged = _flat_summary(result.summary)
    acc = result.summary["metrics"]["action_accuracy"]
    assert logged["action_accuracy/leakage_vs_best_prior"] == pytest.approx(acc["prior_leakage"]["mean"])
    assert logged["action_accuracy/best_prior"] == acc["best_prior"]
    assert logged["action_accuracy/best_prior_score"] == pytest.approx(acc["references"][acc["best_prior"]]["mean"])
    assert logged["action_accuracy/leakage_vs_control"] == pytest.approx(acc["leakage"]["mean"])
    assert logged["action_accuracy/strongest_reference"] == acc["strongest_reference"]
    verdict = logged["action_accuracy/verdict"]
    assert verdict.startswith(("leaks: ", "no leakage shown", "below the strongest reference")) and "95% CI [" in verdict
    assert "strongest reference (" in verdict
