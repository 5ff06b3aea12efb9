"""What a warm `evaluate` avoids importing, and what W&B's process still pays: each figure a fresh Python process
timed from inside (CPU = user + sys of that process, ``resource.getrusage``; wall from ``time.perf_counter``),
the probes alternated, median of ``--repeats``:

* ``import_torch``: ``import torch`` (what the scorer and the sealed plug-in process each paid per run before a
  warm run stopped needing it: docs/evaluate.md, "Speed");
* ``import_pandas``, ``import_scipy_special``, ``import_wandb`` (pandas kept out, as the W&B process does);
* ``wandb_init_with_launch_inputs`` / ``wandb_init_without_launch_inputs``: an offline ``wandb.init`` (after its
  import) with W&B's Launch-input step as wandb runs it, and skipped as ``gradleak_bench/run/wandb_child.py``
  skips it (CPU of the Python process only: wandb's service process is not counted).

Run: python benchmarks/bench_imports.py [--repeats 5]   (writes benchmarks/results/bench_imports.json)
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from machine import cpu_model

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "bench_imports.json"

_TIMED = """
import json, resource, sys, time
def cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime
{setup}
wall, start = time.perf_counter(), cpu()
{code}
print(json.dumps({{"wall_s": time.perf_counter() - wall, "cpu_s": cpu() - start}}))
"""
_WANDB_SETUP = """
import os, sys, tempfile
os.environ["WANDB_MODE"] = "offline"; os.environ["WANDB_SILENT"] = "true"
sys.modules["pandas"] = None
import wandb
{skip}
"""
_SKIP = ("from wandb.sdk import wandb_run\n"
         "wandb_run.Run._detect_and_apply_job_inputs = lambda self: None")
_INIT = "run = wandb.init(project='bench', dir=tempfile.mkdtemp(), mode='offline')"
PROBES = {
    "import_torch": ("", "import torch"),
    "import_pandas": ("", "import pandas"),
    "import_scipy_special": ("import numpy", "import scipy.special"),
    "import_wandb": ("import sys\nsys.modules['pandas'] = None", "import wandb"),
    "wandb_init_with_launch_inputs": (_WANDB_SETUP.format(skip=""), _INIT),
    "wandb_init_without_launch_inputs": (_WANDB_SETUP.format(skip=_SKIP), _INIT),
}


def probe(setup: str, code: str) -> dict[str, float]:
    script = _TIMED.format(setup=setup, code=code)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), cwd=ROOT / "benchmarks")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in PROBES}
    for _ in range(args.repeats):
        for name, (setup, code) in PROBES.items():
            runs[name].append(probe(setup, code))
    results = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
               "cpu": cpu_model(), "cpus": os.cpu_count(), "threads": 1, "repeats": args.repeats,
               "load_before": load_before, "load_after": os.getloadavg()[0], "probes": {}}
    for name, values in runs.items():
        results["probes"][name] = {
            "cpu_median_s": statistics.median(v["cpu_s"] for v in values),
            "wall_median_s": statistics.median(v["wall_s"] for v in values),
            "cpu_runs_s": [v["cpu_s"] for v in values], "wall_runs_s": [v["wall_s"] for v in values]}
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results["probes"], indent=1))


if __name__ == "__main__":
    main()
