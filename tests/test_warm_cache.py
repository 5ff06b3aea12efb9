"""A warm run imports no torch (docs/evaluate.md, "Speed"): the victim's public card and the released gradients
an attack reads are cached, exactly, under keys that change with everything the gradients depend on; what may
not be kept (defended releases, fresh layouts, every gradient) never is, and a bad cache file is recomputed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gradleak_bench import dataset as datasets
from gradleak_bench.run.config import EvaluateConfig
from gradleak_bench.run.plan import resolve
from gradleak_bench.run.released import MAX_EPISODE_BYTES, ReleasedGradients, cacheable
from gradleak_bench.run.isolation import isolation
from gradleak_bench.run.released import gradient_source, make_gradients
from gradleak_bench.run.setup import run_victim
from gradleak_bench.victims import card as cards
from gradleak_bench.victims.zoo import get_victim

# An attack that fails its episode if its process has torch or SB3 loaded, and otherwise reads the actions off
# the policy head's bias gradient, with numpy.
_PROBE = textwrap.dedent("""
    import sys
    import numpy as np
    from gradleak_bench.records import Reconstruction

    class TorchFree:
        name = "torch_free"
        fields = ("action",)

        def reads(self, victim):  # names no other test reads, so the first run here is cold
            return (victim.policy_head[1], "value_net.bias")

        def reconstruct(self, episode, victim):
            loaded = sorted(m for m in ("torch", "stable_baselines3") if m in sys.modules)
            if loaded:
                raise RuntimeError(f"the plug-in process loaded {loaded}")
            bias = episode.gradients.arrays[victim.policy_head[1]]
            return Reconstruction(fields={"action": np.abs(bias).argmax(axis=1)})
""")

_RUN = """
import json, sys
from gradleak_bench.run import EvaluateConfig, evaluate
result = evaluate(EvaluateConfig(attack={attack!r}, victim="ppo_compact", episodes=3, out={out!r}, wandb="disabled",
                                 control=False), progress=False)
print(json.dumps({{"rows": [[r.episode_id, r.status, r.error, r.metrics] for r in result.rows],
                  "torch": sorted(m for m in ("torch", "stable_baselines3") if m in sys.modules)}}))
"""


def _evaluate_in_a_fresh_process(attack: str, out: str, **env: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _RUN.format(attack=attack, out=out)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _released_dirs(cache_dir: str) -> set[str]:
    root = os.path.join(cache_dir, "released")
    return set(os.listdir(root)) if os.path.isdir(root) else set()


# sealed: the probe must run in a process of its own (unsealed, it would share the scorer's)
@pytest.mark.skipif(isolation()[0] is None, reason=f"no isolation here: {isolation()[1]}")
def test_a_warm_run_loads_no_torch_and_scores_what_the_cold_run_scored(tmp_path, cache_dir):
    (tmp_path / "probe.py").write_text(_PROBE)
    attack = f"{tmp_path / 'probe.py'}:TorchFree"
    before = _released_dirs(cache_dir)
    cold = _evaluate_in_a_fresh_process(attack, str(tmp_path / "cold"))
    assert {r[1] for r in cold["rows"]} == {"ok"}, cold["rows"]
    assert cold["torch"], "the first run recomputes the gradients, with torch"
    new = _released_dirs(cache_dir) - before
    assert len(new) == 1

    warm = _evaluate_in_a_fresh_process(attack, str(tmp_path / "warm"))
    assert warm["torch"] == [], "a warm run's scorer loaded torch"
    assert warm["rows"] == cold["rows"]  # every plug-in process ran without torch too (else its episode fails)
    assert all(r[3]["action_accuracy"] == 1.0 for r in warm["rows"])

    # another CPU kernel path computes its own gradients (other last bits) into its own entry: same actions
    other = _evaluate_in_a_fresh_process(attack, str(tmp_path / "other"), ATEN_CPU_CAPABILITY="default")
    assert other["torch"] and other["rows"] == cold["rows"]
    assert len(_released_dirs(cache_dir) - before) == 2


def _setup():
    cfg = EvaluateConfig(attack="closed_form", victim="ppo_compact")
    card, victim, gradients = run_victim(resolve(cfg), load=True)
    dataset = datasets.load_or_generate(datasets.standard_config("PointNav", "ppo_compact"), progress=False)
    return cfg, card, victim, gradients, dataset


def test_cached_gradients_are_the_exact_gradients_bit_for_bit(tmp_path):
    cfg, card, victim, gradients, dataset = _setup()
    reads = ("action_net.weight", "action_net.bias")
    source = gradient_source(resolve(cfg), card, victim, gradients, reads, dataset, fresh=False)
    assert isinstance(source, ReleasedGradients)
    episode = dataset.episode(sorted(dataset.episode_ids)[0])
    first = source(episode).arrays  # computed (or read, if another test wrote it) and cached
    again = ReleasedGradients(card, dataset.sha256, reads, compute=lambda: pytest.fail("recomputed"))(episode)
    exact = make_gradients(cfg, victim)(episode).arrays
    for name in reads:
        assert np.array_equal(first[name], exact[name]) and np.array_equal(again.arrays[name], exact[name])
        assert again.arrays[name].dtype == np.float32


def test_a_bad_cache_file_is_recomputed_and_rewritten(tmp_path):
    cfg, card, victim, gradients, dataset = _setup()
    reads = ("action_net.bias",)
    source = ReleasedGradients(card, dataset.sha256, reads, compute=lambda: make_gradients(cfg, victim))
    episode = dataset.episode(sorted(dataset.episode_ids)[1])
    exact = source(episode).arrays["action_net.bias"]
    path = source.path(episode.episode_id)
    for damage in (b"not safetensors", path.read_bytes()[:-7]):  # garbage, truncated
        path.write_bytes(damage)
        fresh = ReleasedGradients(card, dataset.sha256, reads, compute=lambda: make_gradients(cfg, victim))
        assert np.array_equal(fresh(episode).arrays["action_net.bias"], exact) and fresh.misses == 1
        reader = ReleasedGradients(card, dataset.sha256, reads, compute=None)
        assert reader.read(episode.episode_id, episode.length) is not None
    # a file holding other names or shapes is not read as this entry
    from safetensors.numpy import save

    path.write_bytes(save({"action_net.bias": np.zeros((episode.length + 1, 5), np.float32)}))
    assert source.read(episode.episode_id, episode.length) is None


def test_only_undefended_read_gradients_of_a_checkpoint_file_are_kept(tmp_path):
    cfg, card, victim, gradients, dataset = _setup()
    reads = ("action_net.bias",)
    assert isinstance(gradient_source(resolve(cfg), card, victim, gradients, reads, dataset, fresh=False), ReleasedGradients)
    kept_none = [
        gradient_source(resolve(cfg), card, victim, gradients, None, dataset, fresh=False),  # the attack reads every one
        gradient_source(resolve(cfg), card, victim, gradients, reads, dataset, fresh=True),  # fresh layouts: never on disk
        gradient_source(resolve(EvaluateConfig(attack="closed_form", victim="ppo_compact", defense="clip_norm")), card, victim,
                        gradients, reads, dataset, fresh=False),  # a defense's draws belong to its run
        gradient_source(resolve(EvaluateConfig(attack="closed_form", victim="ppo_compact", defense_params={"C": 1.0})), card,
                        victim, gradients, reads, dataset, fresh=False),
    ]
    assert not any(isinstance(s, ReleasedGradients) for s in kept_none)
    import dataclasses

    # the default victim's whole stream, 604k parameters x 8 steps (19 MB an episode): recomputed, not kept
    wide = dataclasses.replace(card, gradient_shapes={**card.gradient_shapes, "wide": (604_000,)})
    assert 4 * 8 * 604_000 > MAX_EPISODE_BYTES and not cacheable(wide, ("wide",), 8) and cacheable(wide, reads, 8)
    assert not cacheable(dataclasses.replace(card, key=None), reads, 8)  # no checkpoint file, no key


def test_the_card_key_changes_with_what_the_gradients_depend_on(monkeypatch):
    spec = get_victim("PointNav", "ppo_compact")
    key = cards.card_key(spec, "init", "a" * 64)
    assert cards.card_key(spec, "init", "a" * 64) == key
    assert cards.card_key(spec, "init", "b" * 64) != key  # other checkpoint bytes
    assert cards.card_key(spec, "trained", "a" * 64) != key
    assert cards.card_key(get_victim("PointNav", "ppo"), "init", "a" * 64) != key
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    assert cards.card_key(spec, "init", "a" * 64) != key  # another CPU kernel path
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    monkeypatch.setattr(cards, "code_fingerprint", lambda: "edited")
    assert cards.card_key(spec, "init", "a" * 64) != key  # other code computing the gradients


def _found_card():
    spec = get_victim("PointNav", "ppo_compact")
    return cards.find_card(spec, "init", cards.locate(spec, "init"))


def test_the_card_matches_the_loaded_victim_and_a_bad_card_is_rewritten(cache_dir):
    from gradleak_bench.victims.checkpoint import load_victim

    cfg = EvaluateConfig(attack="closed_form", victim="ppo_compact")
    card, victim, gradients = run_victim(resolve(cfg), load=True)
    loaded = load_victim("PointNav", "ppo_compact", "init")
    assert card.gradient_shapes == gradients.param_shapes and list(card.gradient_shapes) == list(gradients.param_shapes)
    assert card.policy_head == ("action_net.weight", "action_net.bias") and card.n_actions == 5
    arrays = card.arrays()
    state = loaded.policy.state_dict()
    assert all(np.array_equal(arrays[k], state[k].numpy()) for k in arrays)
    assert _found_card() == card
    path = os.path.join(cache_dir, "victim-cards", f"{card.key}.json")
    with open(path, "w") as f:
        f.write('{"format": "gradleak-bench-victim-card/1", "key": "')  # truncated
    assert _found_card() is None  # -> the run loads the victim with torch
    assert run_victim(resolve(cfg))[1] is not None and _found_card() == card
    assert run_victim(resolve(cfg))[1] is None  # warm: no policy loaded


def test_an_edited_checkpoint_file_is_refused_on_the_warm_path_too(tmp_path, monkeypatch):
    from gradleak_bench.errors import CorruptFileError

    card, _, _ = run_victim(resolve(EvaluateConfig(attack="closed_form", victim="ppo_compact")), load=True)
    edited = tmp_path / "init.safetensors"
    data = bytearray(card.weights.read_bytes())
    data[-1] ^= 1
    edited.write_bytes(bytes(data))
    import dataclasses

    with pytest.raises(CorruptFileError, match="does not match the sha256"):
        dataclasses.replace(card, weights=edited).arrays()


def test_victim_info_builds_its_policy_on_first_read_only():
    from gradleak_bench.records import LossSpec, VictimInfo

    built = []
    info = VictimInfo.lazy(lambda: built.append(1) or "policy", task="PointNav", victim="ppo", checkpoint="init",
                           loss=LossSpec("ppo"), observation_space=None, action_space=None, gradient_shapes={},
                           n_actions=5, policy_head=("action_net.weight", "action_net.bias"))
    assert type(info) is VictimInfo and built == [] and info.n_actions == 5
    assert info.policy == "policy" and info.policy == "policy" and built == [1]
    import dataclasses

    with pytest.raises(dataclasses.FrozenInstanceError):
        info.policy = "other"  # type: ignore[misc]
