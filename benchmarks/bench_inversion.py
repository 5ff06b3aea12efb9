"""Speed of the optimisation-based inversion attacks on this CPU (baselines/attacks/).

For each attack, on its standard ActivePerception victim at ``init`` (``dqn``: inverting_gradients, dlg, idlg,
qgi; ``reinforce``: rgi), one held-out episode of 8 frames:

* iterations per second of the batched problem (8 frames at once), from two short runs (``LO`` and ``HI``
  iterations: per-iteration time = difference / (HI - LO), the rest is set-up);
* seconds per reconstructed frame at the ``quick`` and ``paper`` presets, *extrapolated* from those
  measurements (the paper presets, 4800 Adam iterations or 2 x 10,000 for QGI/RGI, are not run in full);
* the batching speed-up: the same 8 frames optimised one at a time in a Python loop vs as one batch.

Run: OMP_NUM_THREADS=1 python benchmarks/bench_inversion.py   (writes benchmarks/results/inversion.json)

On a machine shared with other jobs, torch's default intra-op threads oversubscribe the cores and the
double-backward of these attacks runs 10-20x slower (measured here: 4 s vs 0.2 s per QGI stage-2 iteration on
the NatureCNN DQN); the JSON records the thread count used.
"""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from gradleak_bench import dataset as datasets
from gradleak_bench.baselines.attacks.dlg import DLG
from gradleak_bench.baselines.attacks.idlg import IDLG
from gradleak_bench.baselines.attacks.inverting_gradients import InvertingGradients
from gradleak_bench.baselines.attacks.qgi import QGI
from gradleak_bench.baselines.attacks.rgi import RGI
from gradleak_bench.baselines.attacks.two_stage import PRESETS as QR_PRESETS
from gradleak_bench.records import GradientStream, ObservedEpisode
from gradleak_bench.run.evaluation import select_episodes
from gradleak_bench.stream.replay import EpisodeGradients
from gradleak_bench.victims.checkpoint import load_victim, victim_info
from gradleak_bench.victims.spaces import env_spaces

ROOT = Path(__file__).resolve().parents[1]
LO, HI = 5, 25


def setup(victim: str):
    loaded = load_victim("ActivePerception", victim, "init")
    gradients = EpisodeGradients(loaded.policy, loaded.spec.loss, env_spaces("ActivePerception", 64)[0])
    info = victim_info(loaded, gradients)
    ds = datasets.load_or_generate(datasets.standard_config("ActivePerception", victim, "init", "test"), progress=False)
    episode = ds.episode(select_episodes(ds, 1)[0])
    stream = gradients(episode)
    return ObservedEpisode("bench", np.arange(episode.length), stream), info


def timed(attack, observed, info) -> float:
    start = time.perf_counter()
    attack.reconstruct(observed, info)
    return time.perf_counter() - start


def per_iteration(make, observed, info) -> tuple[float, float]:
    """(seconds per iteration, set-up seconds) of ``make(n)`` on the batch."""
    t_lo, t_hi = timed(make(LO), observed, info), timed(make(HI), observed, info)
    per_it = max(t_hi - t_lo, 1e-9) / (HI - LO)
    return per_it, max(t_lo - LO * per_it, 0.0)


def one_frame(observed: ObservedEpisode, t: int) -> ObservedEpisode:
    tensors = {k: v[t:t + 1] for k, v in observed.gradients.tensors.items()}
    return ObservedEpisode(f"bench-{t}", np.arange(1), GradientStream(tensors))


def main() -> None:
    torch.manual_seed(0)
    results: dict = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                     "torch_threads": torch.get_num_threads(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                     "load_average_at_start": os.getloadavg(), "frames_per_batch": None, "attacks": {},
                     "note": ("paper-preset seconds are extrapolated from LO/HI-iteration runs, not measured in full; "
                              "the machine was shared (see load average), so treat times as upper bounds")}
    plans = {
        "inverting_gradients": ("dqn", lambda n: InvertingGradients(iterations=n),
                                {"quick": 100, "paper": 4800}),
        "dlg": ("dqn", lambda n: DLG(iterations=n), {"quick": 30, "paper": 300}),
        "idlg": ("dqn", lambda n: IDLG(iterations=n), {"quick": 30, "paper": 300}),
    }
    cache: dict = {}
    for name, (victim, make, presets) in plans.items():
        observed, info = cache.setdefault(victim, setup(victim))
        frames = observed.gradients.length
        results["frames_per_batch"] = frames
        per_it, overhead = per_iteration(make, observed, info)
        results["attacks"][name] = {
            "victim": victim, "iterations_per_s": 1.0 / per_it, "setup_s": overhead,
            "s_per_frame": {p: (overhead + n * per_it) / frames for p, n in presets.items()},
            "iterations": presets,
        }
        print(name, results["attacks"][name], flush=True)
    for name, cls, victim in (("qgi", QGI, "dqn"), ("rgi", RGI, "reinforce")):
        observed, info = cache.setdefault(victim, setup(victim))
        frames = observed.gradients.length
        it1, o1 = per_iteration(lambda n: cls(stage1=n, stage2=0), observed, info)
        it2, _ = per_iteration(lambda n: cls(stage1=0, stage2=n), observed, info)
        entry = {"victim": victim, "stage1_iterations_per_s": 1.0 / it1, "stage2_iterations_per_s": 1.0 / it2,
                 "setup_s": o1, "s_per_frame": {}, "iterations": {}}
        for preset, p in QR_PRESETS.items():
            entry["iterations"][preset] = p
            entry["s_per_frame"][preset] = (o1 + p["stage1"] * it1 + p["stage2"] * it2) / frames
        results["attacks"][name] = entry
        print(name, entry, flush=True)

    # batched vs looped: the same frames, HI iterations each
    for name, make, victim in (("inverting_gradients", lambda: InvertingGradients(iterations=HI), "dqn"),
                               ("qgi", lambda: QGI(stage1=HI, stage2=HI), "dqn")):
        observed, info = cache[victim]
        batched = timed(make(), observed, info)
        looped = sum(timed(make(), one_frame(observed, t), info) for t in range(observed.gradients.length))
        results["attacks"][name]["batching"] = {"frames": observed.gradients.length, "iterations": HI,
                                                "batched_s": batched, "looped_s": looped, "speedup": looped / batched}
        print(name, "batching", results["attacks"][name]["batching"], flush=True)
    results["load_average_at_end"] = os.getloadavg()
    out = ROOT / "benchmarks" / "results" / "inversion.json"
    out.write_text(json.dumps(results, indent=1))
    print("wrote", out)


if __name__ == "__main__":
    main()
