"""The W&B side of an evaluation, in a process of its own (started by
:class:`gradleak_bench.run.tracking.TrackedRun`, run by path so that it imports nothing of the benchmark).

Why a process: wandb's import and init cost about 1 s of CPU, and in a thread of the scorer they held its
interpreter lock while it scored (a warm ``evaluate closed_form`` took 1.0 s longer with W&B than without).
Here they run beside the scorer, and the scorer only hands over the finished run's summary, episode table and
picture paths.

Protocol, one JSON object a line: the parent writes the ``wandb.init`` keyword arguments; the child answers
``{"ready": true}``, ``{"missing": true}`` (wandb not installed) or ``{"error": "..."}``; the parent then writes
either ``{"summary": {...}, "columns": [...], "rows": [[...]], "images": {"rgb": path}}`` (logged, then the run
finished) or ``{"discard": true}`` (finished with exit code 1); the child answers ``{"done": true}`` and exits.
If the parent goes away first (its end of the pipe closes), the run is finished as failed.
"""
from __future__ import annotations

import json
import os
import sys


def main() -> int:
    # Answers go to the original stdout; whatever wandb prints goes to stderr (the parent keeps it for errors).
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    def answer(message: dict) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    init = json.loads(sys.stdin.readline())
    os.environ.setdefault("WANDB_SILENT", "true")
    # wandb's log() asks of every value whether it is a pandas DataFrame, importing pandas to ask (0.45 s of
    # CPU); nothing logged here is one, so pandas is kept out of this process (the answer is then "no").
    sys.modules.setdefault("pandas", None)  # type: ignore[arg-type]
    try:
        import wandb
    except ImportError:
        answer({"missing": True})
        return 0
    _skip_launch_inputs()
    try:
        run = wandb.init(**init)
    except Exception as exc:  # noqa: BLE001  reported by the parent, in its own words
        answer({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    answer({"ready": True})
    line = sys.stdin.readline()
    request = json.loads(line) if line.strip() else {"discard": True}
    if request.get("discard"):
        run.finish(exit_code=1)
        answer({"done": True})
        return 0
    try:
        run.summary.update(request["summary"])
        table = wandb.Table(columns=request["columns"])
        for row in request["rows"]:
            table.add_data(*row)
        run.log({"episodes": table})
        for field, path in request["images"].items():
            run.log({f"reconstructions/{field}": wandb.Image(path, caption="rows: truth, reconstruction")})
    finally:
        run.finish()
    answer({"done": True})
    return 0


def _skip_launch_inputs() -> None:
    """``wandb.init`` applies the W&B Launch inputs that user code staged in its process, importing the Launch
    and public-API packages to do so (0.32 s of CPU: benchmarks/results/bench_imports.json). No code stages
    any here, so applying them is a no-op: skip it. If wandb renames the hook, nothing is skipped (slower, the
    same run)."""
    from wandb.sdk import wandb_run

    if hasattr(wandb_run.Run, "_detect_and_apply_job_inputs"):
        wandb_run.Run._detect_and_apply_job_inputs = lambda self: None


if __name__ == "__main__":
    sys.exit(main())
