"""Resumable runs: a run SIGKILLed mid-episode restarts with the same command and finishes with identical
results, redoing no finished unit and losing or duplicating no row; torn and half-written files are never
read as complete; materialised gradient files round-trip and can be scored."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest

from gradleak_bench.errors import CorruptFileError, InvalidGradientError
from gradleak_bench.run import EvaluateConfig, evaluate
from gradleak_bench.run.store import STATE_DIR, AppendLog, RunStore, read_log

# The attack runs sealed: it sees no environment variable and no folder of the test, only its own writable
# cache (GRADLEAK_BENCH_CACHE inside its process), where the test reads its calls log and sets BLOCK_AT.
SLOW_ATTACK = textwrap.dedent("""
    import os, threading
    from gradleak_bench.artifacts import declare_fitted
    from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction

    TAG = "{tag}"

    class SlowClosedForm(ClosedFormAction):
        name = "slow_closed_form"

        def reconstruct(self, episode, victim):
            root = os.environ["GRADLEAK_BENCH_CACHE"]
            with open(os.path.join(root, TAG + "-calls.log"), "a") as f:
                f.write(episode.key + "\\n")
            # kept after the run like a fitted model (a completed run deletes the rest of the cache)
            declare_fitted(os.path.join(root, TAG + "-calls.log"))
            # BLOCK_AT=k: the k-th episode announces itself and never returns (the test kills the run there).
            block = os.path.join(root, TAG + "-block_at")
            if os.path.exists(block) and episode.key == open(block).read():
                open(os.path.join(root, TAG + "-blocked"), "w").close()
                threading.Event().wait()  # never set: blocks until the test kills the run
            return super().reconstruct(episode, victim)
""")


def _cli(args, env, **kw):
    return subprocess.Popen([sys.executable, "-m", "gradleak_bench.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _comparable(out):
    summary = json.loads((out / "results.json").read_text())
    for key in ("ms_per_frame", "fit_seconds", "plugin_usage"):  # timings and measured resource use
        summary.pop(key)
    rows = [{k: v for k, v in json.loads(line).items() if k != "attack_ms"}
            for line in (out / "episodes.jsonl").read_text().splitlines()]
    csv = [line.split(",") for line in (out / "episodes.csv").read_text().splitlines()]
    drop = csv[0].index("attack_ms")
    return summary, rows, [[c for i, c in enumerate(line) if i != drop] for line in csv]


def test_a_sigkilled_run_resumes_to_identical_results(tmp_path, cache_dir):
    from pathlib import Path

    from gradleak_bench.run.isolation import plugin_cache

    tag = tmp_path.name
    plugin = tmp_path / "slow.py"
    plugin.write_text(SLOW_ATTACK.replace("{tag}", tag))
    n = 8
    args = ["evaluate", f"{plugin}:SlowClosedForm", "--victim", "ppo_compact", "--episodes", str(n), "--wandb",
            "disabled", "--defense", "gaussian_noise", "-D", "sigma=0.001"]
    own = plugin_cache("attack", f"{plugin}:SlowClosedForm")  # the plug-in's own cache, keyed by its code
    calls_log, blocked = own / f"{tag}-calls.log", own / f"{tag}-blocked"
    (own / f"{tag}-block_at").write_text("episode-0003")
    env = dict(os.environ)
    out = tmp_path / "run"
    # wait for an event (episode 3 inside its reconstruct), not for a time: the plug-in opens this FIFO for
    # writing when it blocks, which wakes the select below (bounded, so a broken run cannot hang the suite)
    os.mkfifo(blocked)
    os.chmod(blocked, 0o666)  # the sealed plug-in runs as nobody
    reader = os.open(blocked, os.O_RDONLY | os.O_NONBLOCK)
    proc = _cli([*args, "--out", str(out)], env)
    rows_log = out / STATE_DIR / "rows.jsonl"
    try:
        ready, _, _ = select.select([reader], [], [], 240)
    finally:
        os.close(reader)
    assert ready, proc.stderr.read() if proc.poll() is not None else "episode 3 never started"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = len(read_log(rows_log)[0])
    assert 3 <= done_before < n, "the run must be killed part-way"
    assert not (out / "results.json").exists()
    calls_before = calls_log.read_text().splitlines()
    (own / f"{tag}-block_at").unlink()
    assert Path(cache_dir) in own.parents

    resumed = _cli([*args, "--out", str(out)], env)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    calls = calls_log.read_text().splitlines()
    after = calls[len(calls_before):]
    # finished episodes were not redone; the one killed mid-reconstruct (and the rest) were done once more
    assert sorted(set(after)) == sorted(f"episode-{i:04d}" for i in range(done_before, n))
    assert len(after) == n - done_before

    reference = _cli([*args, "--out", str(tmp_path / "reference")], env)
    assert reference.wait(timeout=300) == 0
    a, b = _comparable(out), _comparable(tmp_path / "reference")
    assert a == b
    assert len(a[1]) == n and [r["episode_id"] for r in a[1]] == [r["episode_id"] for r in b[1]]


def test_a_torn_log_line_is_ignored_and_redone(tmp_path):
    base = dict(attack="closed_form", victim="ppo_compact", episodes=4, out=str(tmp_path / "run"), wandb="disabled")
    full = evaluate(EvaluateConfig(**base), progress=False)
    log = tmp_path / "run" / STATE_DIR / "rows.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:2]) + lines[2][: len(lines[2]) // 2])  # killed mid-write of row 3
    (tmp_path / "run" / "results.json").unlink()
    assert len(read_log(log)[0]) == 2
    with pytest.warns(UserWarning, match="torn last line"):
        again = evaluate(EvaluateConfig(**base), progress=False)
    assert [r.flat() | {"attack_ms": 0} for r in again.rows] == [r.flat() | {"attack_ms": 0} for r in full.rows]
    assert len(read_log(log)[0]) == 4 and log.read_bytes().endswith(b"\n")
    assert again.summary["metrics"] == full.summary["metrics"]


def test_a_finished_run_is_not_recomputed_and_a_changed_one_starts_fresh(tmp_path):
    base = dict(attack="closed_form", victim="ppo_compact", episodes=3, out=str(tmp_path / "run"), wandb="disabled")
    first = evaluate(EvaluateConfig(**base), progress=False)
    again = evaluate(EvaluateConfig(**base), progress=False)
    assert [r.attack_ms for r in again.rows] == [r.attack_ms for r in first.rows]  # read back, not re-run
    with pytest.warns(UserWarning, match="starting fresh"):
        other = evaluate(EvaluateConfig(**dict(base, defense="topk", defense_params={"keep": 0.5})), progress=False)
    assert other.summary["defense"] == "topk"
    assert len((tmp_path / "run" / "episodes.csv").read_text().splitlines()) == 4


def test_append_log_survives_garbage_and_run_state_is_atomic(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"episode_id": "a"}\n{"episode_id": "b"}\n{"episo')
    with pytest.warns(UserWarning):
        log = AppendLog(path)
    assert [r["episode_id"] for r in log.records] == ["a", "b"]
    log.append({"episode_id": "c"})
    log.close()
    assert [r["episode_id"] for r in read_log(path)[0]] == ["a", "b", "c"]
    store = RunStore(tmp_path / "run", "k1", {})
    store.record({"episode_id": "x", "status": "ok"}, {"action": np.arange(3)})
    store.record({"episode_id": "x", "status": "ok"}, {"action": np.arange(3)})  # a retried unit: no duplicate
    store.close()
    assert len(read_log(tmp_path / "run" / STATE_DIR / "rows.jsonl")[0]) == 1
    assert not list((tmp_path / "run" / STATE_DIR).rglob(".*tmp-*"))  # nothing half-written left behind
    again = RunStore(tmp_path / "run", "k1", {})
    assert again.resumed and again.finished("x", needs_recon=True)
    again.close()
    assert RunStore(tmp_path / "run", "k2", {}).discarded


def test_gradient_file_roundtrip_streaming_and_scoring(tmp_path):
    from gradleak_bench.gradient_store import GradientFile, GradientWriter, export_gradients

    path, sha = export_gradients(tmp_path / "g.h5", "PointNav", "ppo_compact", split="test",
                                 progress=False)
    grads = GradientFile(path)
    assert len(sha) == 64 and grads.meta["dtype"] == "float16"
    with h5py.File(path) as f:
        first = f["episodes"][grads.episode_ids[0]]
        assert first.dtype == np.float16 and first.chunks[0] == 1 and first.compression == "gzip"
    batches = list(grads.batches(batch_size=5, seed=0, shuffle_buffer=16))
    total = sum(len(k) for k, _ in batches)
    assert total == sum(grads.flat(e).shape[0] for e in grads.episode_ids)
    assert len({k for keys, _ in batches for k in keys}) == total  # every step once
    # scoring external gradients: the closed-form attack still reads every action from float16 gradients
    result = evaluate(EvaluateConfig(attack="closed_form", victim="ppo_compact", episodes=4, wandb="disabled",
                                     out=str(tmp_path / "run"), gradients=str(path)), progress=False)
    assert result.n_failed == 0
    assert result.summary["metrics"]["action_accuracy"]["mean"] == 1.0
    # an attack with fit works with external gradients: its AuxiliaryData has its own engine
    plugin = tmp_path / "fits.py"
    plugin.write_text(textwrap.dedent("""
        from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction
        class Fits(ClosedFormAction):
            name = "fits"
            def fit(self, victim, auxiliary):
                episode, stream = next(auxiliary.collect(max_episodes=1))
                assert stream.length == episode.length and set(stream.tensors) == set(victim.gradient_shapes)
    """))
    fitted = evaluate(EvaluateConfig(attack=f"{plugin}:Fits", victim="ppo_compact", episodes=2, wandb="disabled",
                                     out=str(tmp_path / "fitted"), gradients=str(path)), progress=False)
    assert fitted.n_failed == 0 and fitted.summary["fit_seconds"] > 0

    # a half-written file (writer killed before close) is never read as complete
    writer = GradientWriter(tmp_path / "half.h5", dict(grads.meta))
    writer.add("L000-E00", np.zeros((2, sum(int(np.prod(s)) for s in grads.shapes))))
    writer.file.flush()
    os.replace(writer.tmp, tmp_path / "half.h5")  # as if someone renamed the temp file by hand
    with pytest.raises(CorruptFileError, match="incomplete gradient file"):
        GradientFile(tmp_path / "half.h5")
    writer.file.close()
    with pytest.raises(InvalidGradientError, match="expected"):
        GradientWriter(tmp_path / "bad.h5", dict(grads.meta)).add("x", np.zeros((2, 3)))


def test_export_gradients_and_evaluate_them_from_the_cli(tmp_path):
    env = dict(os.environ, COLUMNS="200")
    grads = tmp_path / "g.h5"
    exported = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "export-gradients", "PointNav", "--victim",
                               "ppo_compact", "--split", "test", "--out", str(grads)], capture_output=True, text=True,
                              env=env, timeout=600)
    assert exported.returncode == 0, exported.stderr
    assert len(exported.stdout.strip().splitlines()[-1]) == 64 and grads.is_file()
    run = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "evaluate", "closed_form", "--victim",
                          "ppo_compact", "--episodes", "3", "--wandb", "disabled", "--gradients", str(grads),
                          "--out", str(tmp_path / "run")], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    assert json.loads((tmp_path / "run" / "results.json").read_text())["metrics"]["action_accuracy"]["mean"] == 1.0
    wrong = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "evaluate", "closed_form", "--victim", "a2c",
                            "--episodes", "1", "--wandb", "disabled", "--gradients", str(grads), "--out",
                            str(tmp_path / "wrong")], capture_output=True, text=True, env=env, timeout=600)
    assert wrong.returncode == 2 and "export it for this victim" in " ".join(wrong.stderr.split())


def test_a_sharded_export_is_resumable_and_reads_like_one_file(tmp_path):
    from gradleak_bench.gradient_store import GradientFile, export_gradients

    one, _ = export_gradients(tmp_path / "one.h5", "PointNav", "ppo_compact", split="test", episodes_per_layout=1,
                              progress=False)
    parts, sha = export_gradients(tmp_path / "parts", "PointNav", "ppo_compact", split="test", episodes_per_layout=1,
                                  progress=False, part_episodes=5)
    a, b = GradientFile(one), GradientFile(parts)
    assert a.episode_ids == b.episode_ids and len(list(parts.glob("part-*.h5"))) == 3
    for e in a.episode_ids:
        np.testing.assert_array_equal(a.flat(e), b.flat(e))
    # an interrupted export: the index and one part are missing; the rerun redoes that part only
    (parts / "index.json").unlink()
    with pytest.raises(CorruptFileError, match="unfinished sharded export"):
        GradientFile(parts)
    (parts / "part-00001.h5").unlink()
    kept = (parts / "part-00000.h5").stat().st_mtime_ns
    again, sha_again = export_gradients(tmp_path / "parts", "PointNav", "ppo_compact", split="test",
                                        episodes_per_layout=1, progress=False, part_episodes=5)
    assert sha_again == sha and (parts / "part-00000.h5").stat().st_mtime_ns == kept


def test_two_processes_never_write_the_same_run(tmp_path):
    from gradleak_bench.errors import RunStateError

    first = RunStore(tmp_path / "run", "k", {})
    code = ("from gradleak_bench.run.store import RunStore\n"
            f"RunStore({str(tmp_path / 'run')!r}, 'k', {{}})\n")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert other.returncode != 0 and "another gradleak-bench process is writing" in other.stderr
    first.close()
    with pytest.raises(RunStateError):  # and within one process, while the first is open
        second = RunStore(tmp_path / "run", "k", {})
        third = RunStore(tmp_path / "run", "k", {})
        second.close(), third.close()


def test_filesystem_errors_are_one_message_and_lose_nothing(tmp_path, monkeypatch):
    from gradleak_bench.errors import RunStateError
    from gradleak_bench.run import store as run_store

    base = dict(attack="closed_form", victim="ppo_compact", episodes=3, out=str(tmp_path / "run"), wandb="disabled")
    # --out is not a folder that can be written
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunStateError, match="cannot write the run"):
        evaluate(EvaluateConfig(**dict(base, out=str(tmp_path / "file"))), progress=False)
    # the disk fills up after the first episode: one message; the finished episode is kept and not redone
    real, calls = run_store.save_arrays, []

    def full_after_one(path, arrays):
        calls.append(path)
        if len(calls) > 1:
            raise OSError(28, "No space left on device", str(path))
        real(path, arrays)

    monkeypatch.setattr(run_store, "save_arrays", full_after_one)
    with pytest.raises(RunStateError, match="No space left on device"):
        evaluate(EvaluateConfig(**base), progress=False)
    monkeypatch.setattr(run_store, "save_arrays", real)
    log = tmp_path / "run" / STATE_DIR / "rows.jsonl"
    assert len(read_log(log)[0]) == 1
    full = evaluate(EvaluateConfig(**base), progress=False)
    assert full.n_failed == 0 and len(read_log(log)[0]) == 3
    # a corrupt stored reconstruction: one message naming the file and the fix
    (tmp_path / "run" / "results.json").unlink()
    next((tmp_path / "run" / STATE_DIR / "recons").glob("*.npz")).write_bytes(b"not a zip")
    with pytest.raises(CorruptFileError, match="Delete that file"):
        evaluate(EvaluateConfig(**base), progress=False)
    # a row without an id: one message, the log is left as it is
    log.write_text(log.read_text() + '{"status": "ok"}\n')
    with pytest.raises(RunStateError, match="no episode id"):
        evaluate(EvaluateConfig(**base), progress=False)
    assert '{"status": "ok"}' in log.read_text()
