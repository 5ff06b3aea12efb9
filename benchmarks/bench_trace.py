"""Speed of TRACE (baselines/attacks/trace/) on this CPU: inference ms per frame and training sequences/s.

* Inference: ``reconstruct`` on real held-out PointNav episodes of the trained PPO victim (NatureCNN, 604k
  gradient coordinates per step): fixed gradient features + autoregressive generation, per frame, for the
  ``quick`` configuration, with 1 and 2 torch threads. The model is the cached quick attacker when one is
  trained (``gradleak-bench evaluate trace --victim ppo --checkpoint trained``), otherwise a freshly
  initialised one of the same architecture (same cost). ``trace_no_temporal`` and ``trace_seq4`` beside it.
* Training: sequences (8-step episodes) per second of the optimisation step, teacher forcing and scheduled
  sampling (which adds a no-grad pass), batch 32, on feature tensors of the real size.

Run: OMP_NUM_THREADS=1 python benchmarks/bench_trace.py   (writes benchmarks/results/trace.json)
The machine is shared: the JSON records the load average at start and end, and beside each wall-clock
figure the process's CPU time (``cpu_ms_per_frame``, ``sequences_per_cpu_s``): what it costs on cores that
are not shared with other jobs. With 2 threads on a loaded machine the wall time explodes (oversubscription).
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
from gradleak_bench.baselines.attacks import trace as tr
from gradleak_bench.records import ObservedEpisode
from gradleak_bench.run.evaluation import select_episodes
from gradleak_bench.stream.replay import EpisodeGradients
from gradleak_bench.victims.checkpoint import load_victim, victim_info
from gradleak_bench.victims.spaces import env_spaces

ROOT = Path(__file__).resolve().parents[1]
EPISODES = 6
TRAIN_BATCHES = 4


def model_for(attack: tr.TRACE, info) -> tuple[tr.TraceNet, str]:
    identity, layout = tr.victim_identity(info), tr.gradient_layout(info)
    cache = attack.cache(identity, layout)
    if cache.exists("model"):
        attack._load(cache.path("model"), identity, layout, cache=cache)
        return attack.model, "cached trained attacker"
    return attack._build(attack.config, {k: tuple(v) for k, v in layout.items()}, info.n_actions,
                         tr.rgb_shape(info)).eval(), "untrained model of the same architecture"


def main() -> None:
    victim = load_victim("PointNav", "ppo", "trained")
    gradients = EpisodeGradients(victim.policy, victim.spec.loss, env_spaces("PointNav", 64)[0])
    info = victim_info(victim, gradients)
    ds = datasets.load_or_generate(datasets.standard_config("PointNav", "ppo", "trained", "test"), progress=False)
    streams = [(ep.length, gradients(ep)) for ep in (ds.episode(e) for e in select_episodes(ds, EPISODES))]
    out = {"setup": {"victim": "PointNav/ppo/trained (NatureCNN)", "episodes": EPISODES,
                     "frames": sum(n for n, _ in streams), "torch": torch.__version__,
                     "machine": platform.machine(), "load_average_start": os.getloadavg()},
           "inference": {}, "training": {}}
    for name, cls in (("trace", tr.TRACE), ("trace_no_temporal", tr.TRACENoTemporal), ("trace_seq4", tr.TRACESeq4)):
        attack = cls(preset="quick", progress=False)
        attack.model, source = model_for(attack, info)
        attack.model.eval()
        row = {"model": source, "n_parameters": sum(p.numel() for p in attack.model.parameters())}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            attack.reconstruct(ObservedEpisode("w", np.arange(streams[0][0]), streams[0][1]), info)  # warm-up
            start, cpu = time.perf_counter(), time.process_time()
            for length, stream in streams:
                attack.reconstruct(ObservedEpisode("k", np.arange(length), stream), info)
            row[f"ms_per_frame_{threads}_threads"] = (time.perf_counter() - start) * 1e3 / out["setup"]["frames"]
            # CPU time of this process: what the frame costs when the cores are not shared with other jobs
            row[f"cpu_ms_per_frame_{threads}_threads"] = (time.process_time() - cpu) * 1e3 / out["setup"]["frames"]
            feats_start = time.perf_counter()
            for _, stream in streams:
                attack.model.featurizer(stream.tensors)
            row[f"feature_ms_per_frame_{threads}_threads"] = \
                (time.perf_counter() - feats_start) * 1e3 / out["setup"]["frames"]
        out["inference"][name] = row
        print(name, row, flush=True)

        torch.set_num_threads(1)
        model = attack._build(attack.config, {k: tuple(v) for k, v in info.gradient_shapes.items()}, 5, (64, 64))
        n = 32 * TRAIN_BATCHES
        gen = torch.Generator().manual_seed(0)
        data = tr.TraceData(torch.randn(n, 8, model.featurizer.dim, generator=gen),
                            torch.randint(0, 256, (n, 8, 64, 64, 3), dtype=torch.uint8, generator=gen),
                            torch.randint(0, 5, (n, 8), generator=gen), torch.full((n,), 8))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        train_row = {}
        for phase, p_sample in (("teacher_forcing", 0.0), ("scheduled_sampling", 0.5)):
            attack._loss(model, data, torch.arange(32), p_sample, gen)[0].backward()  # warm-up
            start, cpu = time.perf_counter(), time.process_time()
            for b in range(TRAIN_BATCHES):
                loss, _ = attack._loss(model, data, torch.arange(b * 32, (b + 1) * 32), p_sample, gen)
                opt.zero_grad()
                loss.backward()
                opt.step()
            train_row[f"{phase}_sequences_per_s_1_thread"] = n / (time.perf_counter() - start)
            train_row[f"{phase}_sequences_per_cpu_s_1_thread"] = n / (time.process_time() - cpu)
        out["training"][name] = train_row
        print(name, train_row, flush=True)
    out["setup"]["load_average_end"] = os.getloadavg()
    path = ROOT / "benchmarks" / "results" / "trace.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
