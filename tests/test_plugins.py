from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch

from gradleak_bench import plugins
from gradleak_bench.errors import PluginLoadError, UnknownNameError
from gradleak_bench.records import GradientStream


def test_builtin_names_resolve():
    assert plugins.load("attack", "closed_form").name == "closed_form"
    assert plugins.load("defense", "topk", {"keep": 0.5}).keep == 0.5


def test_unknown_name_suggests_close_match():
    with pytest.raises(UnknownNameError, match="closed_form"):
        plugins.load("attack", "closed_from")


def test_module_colon_class():
    defense = plugins.load("defense", "gradleak_bench.baselines.defenses.basic:GaussianNoise", {"sigma": 0.5})
    assert defense.sigma == 0.5


def test_file_plugin_and_import_error(tmp_path):
    good = tmp_path / "my_attack.py"
    good.write_text(textwrap.dedent("""
        from gradleak_bench.records import Reconstruction
        class Mine:
            name = "mine"
            fields = ("action",)
            def reconstruct(self, episode, victim):
                return Reconstruction(fields={"action": episode.t * 0})
    """))
    assert plugins.load("attack", f"{good}:Mine").name == "mine"
    broken = tmp_path / "broken.py"
    broken.write_text("import does_not_exist_anywhere\n")
    with pytest.raises(PluginLoadError, match="does_not_exist_anywhere"):
        plugins.load("attack", f"{broken}:Mine")
    with pytest.raises(UnknownNameError, match="Mine"):
        plugins.load("attack", f"{good}:Mien")


def test_non_plugin_is_refused():
    with pytest.raises(PluginLoadError, match="not a attack|not an attack|is not a"):
        plugins.load("attack", "collections:OrderedDict")


def test_entry_point_plugins_are_found(monkeypatch):
    import importlib.metadata as md

    ep = md.EntryPoint("third_party", "gradleak_bench.baselines.attacks.closed_form:ClosedFormAction",
                       "gradleak_bench.attacks")
    real = md.entry_points
    monkeypatch.setattr(md, "entry_points", lambda **kw: [ep] if kw.get("group") == "gradleak_bench.attacks" else real(**kw))
    assert plugins.load("attack", "third_party").name == "closed_form"


def test_parse_params():
    assert plugins.parse_params(["sigma=0.1", "mode=fast", "layers=[1,2]"]) == {"sigma": 0.1, "mode": "fast", "layers": [1, 2]}
    with pytest.raises(PluginLoadError):
        plugins.parse_params(["sigma"])


def _stream() -> GradientStream:
    g = torch.Generator().manual_seed(0)
    return GradientStream({"a": torch.randn(3, 4, 5, generator=g), "b": torch.randn(3, 7, generator=g)})


def test_topk_keeps_the_largest_fraction_per_step():
    released = plugins.load("defense", "topk", {"keep": 0.25}).release(_stream(), np.random.default_rng(0))
    flat, orig = released.flat(), _stream().flat()
    for t in range(3):
        kept = flat[t] != 0
        assert kept.sum() == round(0.25 * orig.shape[1])
        assert orig[t].abs()[kept].min() >= orig[t].abs()[~kept].max()


def test_gaussian_noise_is_seeded_and_has_the_right_scale():
    defense = plugins.load("defense", "gaussian_noise", {"sigma": 0.1})
    a = defense.release(_stream(), np.random.default_rng(1)).flat() - _stream().flat()
    b = defense.release(_stream(), np.random.default_rng(1)).flat() - _stream().flat()
    assert torch.equal(a, b)
    assert 0.05 < a.std() < 0.2


def test_invalid_parameters_are_refused_before_work():
    with pytest.raises(PluginLoadError, match="sigma"):
        plugins.load("defense", "gaussian_noise", {"sigma": -1.0})
    with pytest.raises(PluginLoadError, match=r"has no parameter 'kep' \(its parameters: keep\)"):
        plugins.load("defense", "topk", {"kep": 0.1})
