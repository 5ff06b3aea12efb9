"""Are the official ``trained`` splits' actions their policy's own choices? (issue 37)

An official split replays its recorded actions, so its episodes do not depend on how a CPU rounds the policy's
probabilities. Until 2026-12-06, re-recording the split of a victim retrained in place replayed the record of
the *old* weights (tools/publish_zoo.py without ``--resample``): the new weights then scored the old policy's
trajectories. This samples every episode of each official trained split -- ``test`` on both data protocols
(``first8``, ``trace-windows``) and ``test-full`` -- afresh from its policy (``replay=False``: the same seeds,
so the same draws) and counts the episodes whose actions equal the record.
Rounding flips an action rarely (docs/tasks.md, "Split identity": none on either ATen path), so a split
recorded from its own policy matches on (nearly) every episode, and one that replays another policy's actions
on few.

Run: OMP_NUM_THREADS=1 python benchmarks/split_action_provenance.py   (about 15 CPU-minutes: the
trace-windows and test-full episodes run to 200 steps)
Writes benchmarks/results/split_action_provenance.json.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "split_action_provenance.json"


def main() -> None:
    from gradleak_bench import dataset as datasets
    from gradleak_bench import splits
    from gradleak_bench.dataset_config import FIRST8, TRACE_WINDOWS
    from gradleak_bench.victims.zoo import VICTIMS

    rows = []
    for spec in VICTIMS.values():
        for split, protocol in (("test", FIRST8), ("test", TRACE_WINDOWS), ("test-full", FIRST8)):
            config = datasets.standard_config(spec.task, spec.name, "trained", split, protocol=protocol)
            record = splits.split_record(config.key, config.manifest)
            if record is None:
                continue
            rows.append(_compare(config, record))
    OUT.write_text(json.dumps({"what": __doc__.splitlines()[0], "load_average": os.getloadavg()[0],
                               "rows": rows}, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


def _executed(episode):
    """Every action the episode executed: a trace-windows window keeps the whole episode's beside it."""
    import numpy as np

    return np.asarray(getattr(episode, "episode_actions", ()) or episode.steps["action"], dtype=np.float64)


def _compare(config, record) -> dict:
    import numpy as np

    from gradleak_bench import dataset as datasets

    recorded = {e.episode_id: np.asarray(e.actions, dtype=np.float64) for e in record.episodes}
    sampled = {e.episode_id: _executed(e) for e in datasets.iter_generate(config, progress=False, replay=False)}
    # the record holds every executed action of the episode; a first8 window's are its first steps
    # (a continuous command within float rounding of the recorded one)
    same = sum(bool(np.allclose(recorded[i][:len(a)], a, rtol=0, atol=1e-5)) for i, a in sampled.items())
    print(f"{config.key:60s} {same:3d}/{len(sampled)} episodes sample the recorded actions", flush=True)
    return {"split": config.key, "episodes": len(sampled), "episodes_with_the_recorded_actions": same,
            "own_policy": same >= 0.9 * len(sampled)}


if __name__ == "__main__":
    main()
