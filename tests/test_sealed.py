"""Sealed runs: each class of cheating a hostile plug-in can try fails, and the same cheat unsealed succeeds
(so each test can fail). Tiny budgets: 2-3 episodes of the compact PPO victim."""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from gradleak_bench.errors import GradleakError
from gradleak_bench.run import EvaluateConfig, FreshLayouts, evaluate
from gradleak_bench.run.isolation import isolation

pytestmark = pytest.mark.skipif(isolation()[0] is None, reason=f"no isolation here: {isolation()[1]}")

# Finds the truth anywhere in its own process: the caller's stack frames and every live object.
_FIND_TRUTH = """
import gc, inspect
import numpy as np
from gradleak_bench.records import Episode, Reconstruction

def find_truth(length):
    frame = inspect.currentframe()
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, Episode) and value.length == length:
                return value.steps["action"]
        frame = frame.f_back
    for obj in gc.get_objects():
        if isinstance(obj, Episode) and obj.length == length:
            return obj.steps["action"]
    raise RuntimeError("no truth found")
"""


def _plugin(tmp_path, name, body):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def _run(tmp_path, attack, sealed=True, **kw):
    config = dict(attack=attack, victim="ppo_compact", episodes=2, out=str(tmp_path / "run"), wandb="disabled",
                  sealed=sealed, control=False)
    config.update(kw)
    return evaluate(EvaluateConfig(**config), progress=False)


def _stack_cheat(tmp_path):
    return _plugin(tmp_path, "stack_cheat", _FIND_TRUTH + """
class StackCheat:
    name = "stack_cheat"
    fields = ("action",)
    def reconstruct(self, episode, victim):
        return Reconstruction(fields={"action": np.asarray(find_truth(len(episode.t)))})
""")


def test_truth_through_the_callers_frames_or_memory_is_not_there(tmp_path):
    result = _run(tmp_path, f"{_stack_cheat(tmp_path)}:StackCheat")
    assert [r.status for r in result.rows] == ["failed", "failed"]
    assert all("no truth found" in r.error for r in result.rows)


def test_the_same_cheat_unsealed_reads_the_truth(tmp_path, capfd):
    result = _run(tmp_path, f"{_stack_cheat(tmp_path)}:StackCheat", sealed=False)
    assert "note: running unsealed (--unsealed, debugging only)" in capfd.readouterr().err
    assert result.summary["metrics"]["action_accuracy"]["mean"] == 1.0
    assert result.summary["sealed"] is False and result.summary["isolation"] is None


def test_the_dataset_cache_and_the_run_folder_are_not_reachable(tmp_path, cache_dir):
    out = tmp_path / "run"
    attack = _plugin(tmp_path, "cache_cheat", f"""
import glob, os
import numpy as np
from gradleak_bench.records import Reconstruction

class CacheCheat:
    name = "cache_cheat"
    fields = ("action",)
    def reconstruct(self, episode, victim):
        seen = glob.glob({cache_dir!r} + "/datasets/*.h5") + glob.glob({str(out)!r} + "/.gradleak-run/*")
        for target in ({str(out)!r} + "/results.json", {str(out)!r} + "/.gradleak-run/rows.jsonl",
                       {cache_dir!r} + "/datasets/forged.h5"):
            try:
                with open(target, "a") as f:
                    f.write('{{"episode_id": "forged", "status": "ok"}}\\n')
            except OSError:
                pass
        if seen:
            return Reconstruction(fields={{"action": np.zeros(len(episode.t), np.int64)}})
        raise RuntimeError("nothing reachable")
""")
    result = _run(tmp_path, f"{attack}:CacheCheat")
    assert all(r.status == "failed" and "nothing reachable" in r.error for r in result.rows)
    assert "forged" not in (out / ".gradleak-run" / "rows.jsonl").read_text()
    assert "forged" not in (out / "results.json").read_text()
    assert not (tmp_path.parent / "forged.h5").exists()
    from pathlib import Path

    assert not (Path(cache_dir) / "datasets" / "forged.h5").exists()


def test_the_dataset_module_regenerates_only_public_layouts_fresh_ones_expose_it(tmp_path):
    """An attack may regenerate the *public* test split inside its process (it is procedural); on fresh
    layouts drawn from a secret seed, the same cheat has nothing to match."""
    attack = _plugin(tmp_path, "regen_cheat", """
import numpy as np
from gradleak_bench import dataset as datasets
from gradleak_bench.records import Reconstruction

class RegenCheat:
    name = "regen_cheat"
    fields = ("action",)
    def fit(self, victim, auxiliary):
        from gradleak_bench.run.episodes import generate_episodes

        config = datasets.standard_config(victim.task, victim.victim, victim.checkpoint, "test")
        first = sorted(p for p in datasets.plan(config) if p[0].endswith("-E00"))[:2]
        engine = auxiliary._engine()
        self.known = [(e, engine(e)) for e in generate_episodes(auxiliary._victim, "test", first, config.sequence_length)]
    def reconstruct(self, episode, victim):
        flat = episode.gradients.flat()
        for truth, stream in self.known:
            if stream.flat().shape == flat.shape and bool((stream.flat() - flat).abs().max() < 1e-4):
                return Reconstruction(fields={"action": truth.steps["action"]})
        raise RuntimeError("episode not regenerated")
""")
    public = _run(tmp_path, f"{attack}:RegenCheat", out=str(tmp_path / "public"))
    assert public.summary["metrics"]["action_accuracy"]["mean"] == 1.0  # the public split is regenerable
    fresh = evaluate(EvaluateConfig(attack=f"{attack}:RegenCheat", victim="ppo_compact", episodes=2,
                                    out=str(tmp_path / "fresh"), wandb="disabled", control=False),
                     progress=False, fresh_layouts=FreshLayouts(seed=987654321, n=2))
    assert all(r.status == "failed" and "not regenerated" in r.error for r in fresh.rows)
    assert all(r.layout_id >= 2**31 for r in fresh.rows)


def test_fresh_layouts_score_an_honest_attack_and_publish_the_seed_only_after_the_run(tmp_path):
    result = evaluate(EvaluateConfig(attack="closed_form", victim="ppo_compact", episodes=2, out=str(tmp_path / "f"),
                                     wandb="disabled"), progress=False, fresh_layouts=FreshLayouts(seed=424242, n=3))
    assert result.summary["metrics"]["action_accuracy"]["mean"] == 1.0
    assert result.summary["dataset_official"] is False
    assert result.summary["fresh_layouts"]["commitment"] == FreshLayouts(seed=424242).commitment
    # the seed is in results.json, written once every episode is scored, and in no file written during the run
    assert result.summary["fresh_layouts"]["seed"] == 424242
    text = "".join(p.read_text(errors="ignore") for p in (tmp_path / "f").rglob("*")
                   if p.is_file() and p.name != "results.json")
    assert "424242" not in text
    with pytest.raises(GradleakError, match="always sealed"):
        evaluate(EvaluateConfig(attack="closed_form", victim="ppo_compact", episodes=1, out=str(tmp_path / "u"),
                                wandb="disabled", sealed=False), progress=False, fresh_layouts=FreshLayouts(seed=1, n=1))


def test_envs_accept_fresh_ids_only_when_asked():
    import gymnasium as gym

    from gradleak_bench.envs.pybullet.adapter import FreshLayoutIds
    from gradleak_bench.errors import InvalidLayoutError

    with pytest.raises(InvalidLayoutError):
        gym.make("gradleak/PointNav-v0", layouts=[2**31])
    env = gym.make("gradleak/PointNav-v0", layouts="test")
    with pytest.raises(InvalidLayoutError):
        env.reset(seed=0, options={"layout_id": 2**31 + 5})
    env.close()
    with pytest.raises(InvalidLayoutError):
        gym.make("gradleak/PointNav-v0", layouts=FreshLayoutIds([7]))  # a public id is never "fresh"
    env = gym.make("gradleak/PointNav-v0", layouts=FreshLayoutIds([2**31 + 5]))
    _, info = env.reset(seed=0, options={"layout_id": 2**31 + 5})
    assert info["layout_id"] == 2**31 + 5
    env.close()


def test_abstaining_with_nan_scores_the_worst_value(tmp_path):
    attack = _plugin(tmp_path, "abstain", """
import numpy as np
from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction
from gradleak_bench.records import Reconstruction

class Abstain(ClosedFormAction):
    name = "abstain"
    def reconstruct(self, episode, victim):
        actions = np.asarray(super().reconstruct(episode, victim).fields["action"], dtype=np.float64)
        actions[1::2] = np.nan  # "unsure" on every other frame
        return Reconstruction(fields={"action": actions})
""")
    result = _run(tmp_path, f"{attack}:Abstain")
    acc = result.summary["metrics"]["action_accuracy"]
    frames = result.summary["n_frames"]
    assert acc["failed_frames"] == sum((r.length) // 2 for r in result.rows) and acc["failed_frames"] > 0
    # every abstained frame scores 0: the mean is the share of answered frames, never 1.0
    assert acc["mean"] == pytest.approx(np.mean([(r.length - r.length // 2) / r.length for r in result.rows]))
    assert acc["mean"] < 1.0 and frames == sum(r.length for r in result.rows)
    assert "action_accuracy/failed_frames" in (tmp_path / "run" / "episodes.csv").read_text()


def test_plugin_misbehaviour_is_an_error(tmp_path):
    exits = _plugin(tmp_path, "exits", """
import sys
class Exits:
    name = "exits"
    fields = ("action",)
    def reconstruct(self, episode, victim):
        sys.exit(0)
""")
    result = _run(tmp_path, f"{exits}:Exits", out=str(tmp_path / "a"))
    assert all(r.status == "failed" and "sys.exit(0)" in r.error for r in result.rows)

    dies = _plugin(tmp_path, "dies", """
import os
class Dies:
    name = "dies"
    fields = ("action",)
    def reconstruct(self, episode, victim):
        os._exit(0)
""")
    with pytest.raises(GradleakError, match="ended its process"):
        _run(tmp_path, f"{dies}:Dies", out=str(tmp_path / "b"))

    typo = _plugin(tmp_path, "typo", """
class Typo:
    name = "typo"
    fields = ("actoin",)
    def reconstruct(self, episode, victim):
        raise AssertionError("never reached")
""")
    with pytest.raises(GradleakError, match="actoin"):
        _run(tmp_path, f"{typo}:Typo", out=str(tmp_path / "c"))

    all_nan = _plugin(tmp_path, "all_nan", """
import numpy as np
from gradleak_bench.records import Reconstruction
class AllNaN:
    name = "all_nan"
    fields = ("action",)
    def reconstruct(self, episode, victim):
        return Reconstruction(fields={"action": np.full(len(episode.t), np.nan)})
""")
    result = _run(tmp_path, f"{all_nan}:AllNaN", out=str(tmp_path / "d"))
    assert result.problems and "every frame failed" in result.problems[0]
    assert result.summary["metrics"]["action_accuracy"]["mean"] == 0.0


def test_the_scorer_never_imports_plugin_code(tmp_path):
    before = {m for m in sys.modules if m.startswith("gradleak_bench_user_plugin_")}
    attack = _plugin(tmp_path, "marker", """
from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction
class Marker(ClosedFormAction):
    name = "marker"
""")
    result = _run(tmp_path, f"{attack}:Marker")
    assert result.summary["metrics"]["action_accuracy"]["mean"] == 1.0
    assert {m for m in sys.modules if m.startswith("gradleak_bench_user_plugin_")} == before
    assert json.loads((tmp_path / "run" / "results.json").read_text())["isolation"].startswith("bwrap")


def test_a_file_plugin_named_relative_to_the_working_directory_runs_sealed(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text(textwrap.dedent("""
        from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction

        class Mine(ClosedFormAction):
            name = "mine"
    """))
    monkeypatch.chdir(tmp_path)
    result = _run(tmp_path, "mine.py:Mine", priors=False)
    assert [r.status for r in result.rows] == ["ok", "ok"]
    assert result.summary["metrics"]["action_accuracy"]["mean"] == 1.0


def test_a_tool_finds_what_a_sealed_run_fitted_at_the_same_path_in_the_plugins_cache(tmp_path, cache_dir):
    """docs/make_trace_figures.py and benchmarks/continuous_pipeline.py read the attackers the sealed runs
    trained: the same relative path as an unsealed run's, inside the plug-in's own cache."""
    from gradleak_bench.run.isolation import plugin_cache, sealed_twin

    unsealed = Path(cache_dir) / "attackers" / "trace-0123" / "model.safetensors"
    twin = sealed_twin("attack", "trace", unsealed)
    assert twin == plugin_cache("attack", "trace") / "attackers" / "trace-0123" / "model.safetensors"
    assert twin.parents[3] == Path(cache_dir) / "plugins"
    with pytest.raises(ValueError):  # only a path under the scorer's cache has a twin
        sealed_twin("attack", "trace", tmp_path / "model.safetensors")
