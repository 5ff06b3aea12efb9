"""The plug-in API's artifact cache (gradleak_bench/artifacts.py): keyed by config hash, safetensors + JSON
only, refuses edited files and other configurations' metadata, and resumes training exactly."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gradleak_bench.artifacts import ArtifactCache, config_hash
from gradleak_bench.errors import CorruptFileError, GradleakError


def test_key_is_the_config_hash_and_folders_do_not_collide(cache_dir):
    a, b = ArtifactCache("toy", {"epochs": 3}), ArtifactCache("toy", {"epochs": 4})
    assert a.key == config_hash({"epochs": 3}) != b.key
    assert a.directory.parent == Path(cache_dir) / "attackers" and a.directory.name == f"toy-{a.key}"
    assert config_hash({"x": 1, "y": 2}) == config_hash({"y": 2, "x": 1})  # key order is not identity


def test_tensors_round_trip_as_safetensors_and_json_only(cache_dir):
    cache = ArtifactCache("toy", {"epochs": 3})
    assert not cache.exists("model")
    cache.save_tensors("model", {"w": torch.arange(6.0).reshape(2, 3)}, {"note": "x"})
    tensors, meta = cache.load_tensors("model")
    assert torch.equal(tensors["w"], torch.arange(6.0).reshape(2, 3)) and meta["note"] == "x"
    assert sorted(p.name for p in cache.directory.iterdir()) == ["model.json", "model.safetensors"]


def test_edited_tensors_and_foreign_metadata_are_refused(cache_dir):
    cache = ArtifactCache("toy", {"epochs": 3})
    path = cache.save_tensors("model", {"w": torch.ones(4)})
    data = path.read_bytes()
    path.write_bytes(data[:-4] + b"\0\0\0\0")
    with pytest.raises(CorruptFileError, match="sha256"):
        cache.load_tensors("model")
    path.write_bytes(data)
    meta = json.loads(path.with_suffix(".json").read_text())
    path.with_suffix(".json").write_text(json.dumps(dict(meta, config_hash="0" * 16)))
    with pytest.raises(GradleakError, match="config hash"):
        cache.load_tensors("model")
    path.with_suffix(".json").write_text("{not json")
    with pytest.raises(CorruptFileError, match="metadata"):
        cache.load_tensors("model")


def _step(model, opt, x):
    opt.zero_grad()
    model(x).pow(2).sum().backward()
    opt.step()


def test_checkpoint_resumes_model_and_optimiser_exactly(cache_dir):
    def fresh():
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        return model, torch.optim.AdamW(model.parameters(), lr=0.1)

    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(1))
    straight, opt = fresh()
    for _ in range(4):
        _step(straight, opt, x)
    cache = ArtifactCache("toy", {"run": 1})
    model, opt = fresh()
    assert cache.load_checkpoint("state", model, opt) is None  # nothing to resume yet
    for _ in range(2):
        _step(model, opt, x)
    cache.save_checkpoint("state", model, opt, {"epoch": 2})
    resumed, opt2 = fresh()
    assert cache.load_checkpoint("state", resumed, opt2) == {"epoch": 2}
    for _ in range(2):
        _step(resumed, opt2, x)
    for name, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[name]), name
    # another configuration's folder holds no checkpoint of this one
    assert ArtifactCache("toy", {"run": 2}).load_checkpoint("state", *fresh()) is None


def test_modules_round_trip_and_refuse_another_architecture(cache_dir):
    cache = ArtifactCache("toy", {"arch": "linear"})
    cache.save_module("model", torch.nn.Linear(3, 2), {"format": "toy/1"})
    cache.load_module("model", torch.nn.Linear(3, 2), "toy/1")
    with pytest.raises(CorruptFileError, match="not a toy/2"):
        cache.load_module("model", torch.nn.Linear(3, 2), "toy/2")
    with pytest.raises(CorruptFileError, match="cannot load"):
        cache.load_module("model", torch.nn.Linear(4, 2), "toy/1")


def test_file_sha256_reads_in_chunks_and_matches_the_one_shot_hash(tmp_path, monkeypatch) -> None:
    """A multi-GB artifact is hashed without reading it whole (the learned TRACE encoder's raw gradients hit the
    plug-in memory limit when they were): the digest is hashlib's, on empty, sub-chunk and multi-chunk files,
    and no read asks for more than one chunk."""
    import builtins
    import hashlib

    from gradleak_bench.paths import file_sha256

    sizes_read: list[int] = []
    real_open = builtins.open

    class Recording:
        def __init__(self, f):
            self.f = f

        def read(self, n=-1):
            sizes_read.append(n)
            return self.f.read(n)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(builtins, "open", lambda path, mode="r", *a, **k: Recording(real_open(path, mode, *a, **k)))
    for size in (0, 1000, 3 * 2**20 + 17):
        path = tmp_path / f"blob{size}"
        data = bytes(range(256)) * (size // 256) + bytes(size % 256)
        with real_open(path, "wb") as f:
            f.write(data)
        sizes_read.clear()
        assert file_sha256(path) == hashlib.sha256(data).hexdigest()
        assert sizes_read and all(0 < n <= 2**20 for n in sizes_read)
