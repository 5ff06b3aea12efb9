"""Hard limits on plug-ins (docs/evaluate.md, "Limits"): a plug-in that sleeps, allocates past its memory,
forks 200 processes, returns a 2 GiB array or prints 50 MB fails its episode with one message naming the limit
(or, in ``fit``, stops the run with exit 2), finished rows are kept, and no process it started is left.
Tiny budgets: 2-3 episodes of the compact PPO victim, no priors, no control."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from gradleak_bench.errors import GradleakError
from gradleak_bench.run import EvaluateConfig, evaluate
from gradleak_bench.run.limits import GiB, MiB, PluginLimits, is_limit_failure, parse_value
from gradleak_bench.run.isolation import isolation

sealed_only = pytest.mark.skipif(isolation()[0] is None, reason=f"no isolation here: {isolation()[1]}")

# A closed-form attack that misbehaves in the episode whose opaque key is "episode-0001" (the second one).
_TEMPLATE = """
import os, sys, time
import numpy as np
from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction
from gradleak_bench.records import Reconstruction

class Hostile(ClosedFormAction):
    name = "hostile"
    def reconstruct(self, episode, victim):
        if episode.key == "episode-0001":
{body}
        return super().reconstruct(episode, victim)
"""

SLEEPS = "            time.sleep(3600)"
# 3 GiB, which this machine would give (and the watchdog would then catch): refused at once by RLIMIT_DATA
ALLOCATES = "            self.hog = np.ones(3 << 30, dtype=np.uint8)"
TOUCHES = """\
            import mmap
            pages = mmap.mmap(-1, 4 << 30)  # shared anonymous memory: not in RLIMIT_DATA, seen by the watchdog
            chunk = b"\\1" * (64 << 20)
            for offset in range(0, 4 << 30, 64 << 20):
                pages[offset:offset + len(chunk)] = chunk
                time.sleep(0.05)  # paced so the watchdog stops it near 1 GiB, not at 4 GiB on a fast machine
            while True:  # held until the watchdog sees it, however late it polls on a loaded machine
                time.sleep(1)"""
FILLS_TMP = """\
            chunk = b"\\1" * (64 << 20)
            try:
                with open("/tmp/fill", "wb") as f:  # its private /tmp is a tmpfs: memory, seen by the watchdog
                    for _ in range(24):
                        f.write(chunk)
                        f.flush()
                        time.sleep(0.05)
            except OSError:  # the tmpfs is full (it is as large as the memory limit)
                pass
            while True:
                time.sleep(1)"""
FORKS = """\
            for _ in range(200):
                if os.fork() == 0:
                    time.sleep(3600)
                    os._exit(0)"""
RETURNS = "            return Reconstruction(fields={'action': np.zeros(2 << 30, dtype=np.uint8)})  # 2 GiB, untouched"
PRINTS = """\
            for _ in range(50):
                sys.stdout.write("x" * (1 << 20))
            sys.stdout.flush()"""


def _plugin(tmp_path: Path, body: str, name: str = "hostile") -> str:
    folder = tmp_path / f"code-{name}"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(_TEMPLATE.format(body=body))
    return f"{path}:Hostile"


def _run(tmp_path: Path, attack: str, limits: list[str], episodes: int = 3, sealed: bool = True,
         out: str = "run", **kw):
    config = EvaluateConfig(attack=attack, victim="ppo_compact", episodes=episodes, out=str(tmp_path / out),
                            wandb="disabled", sealed=sealed, control=False, priors=False,
                            limits=PluginLimits().with_options(limits), **kw)
    return evaluate(config, progress=False)


def _descendants(pid: int | None = None) -> list[str]:
    """This process's live descendants (``pid: command``): none may be left after a run."""
    found, queue = [], [pid or os.getpid()]
    while queue:
        parent = queue.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                children = Path(f"/proc/{parent}/task/{tid}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                try:
                    stat = Path(f"/proc/{child}/stat").read_text()
                    cmd = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
                except OSError:
                    continue
                if stat[stat.rindex(")") + 2] != "Z":
                    found.append(f"{child}: {cmd}")
                queue.append(child)
    return found


def _one_failure(result, limit_words: str) -> str:
    """The run scored episodes 0 and 2 (the second after a restart of the plug-in) and failed episode 1 on a
    limit, with one message that names it and how to raise it."""
    assert [r.status for r in result.rows] == ["ok", "failed", "ok"], [r.error for r in result.rows]
    error = result.rows[1].error
    assert limit_words in error and "(raise it with --limit " in error and "\n" not in error, error
    assert is_limit_failure(error)
    assert result.summary["metrics"]["action_accuracy"]["n"] == 2
    assert _descendants() == []
    return error


@pytest.fixture(autouse=True)
def _no_plugin_process_left():
    yield
    assert _plugin_hosts() == []


def _plugin_hosts() -> list[str]:
    return [p for p in _descendants() if "gradleak_bench.run.host" in p or "bwrap" in p]


# --- parsing ------------------------------------------------------------------------------------------------


def test_limit_options_parse_and_refuse_with_what_to_write():
    limits = PluginLimits().with_options(["fit=90m", "reconstruct=2", "memory=1.5G", "processes=8",
                                           "returned=64M", "printed=1M", "load=1h"])
    assert (limits.fit, limits.reconstruct, limits.load) == (5400.0, 2.0, 3600.0)
    assert (limits.memory, limits.processes, limits.returned, limits.printed) == (int(1.5 * GiB), 8, 64 * MiB, MiB)
    assert PluginLimits.from_dict(limits.to_dict()) == limits
    assert PluginLimits().fit >= 4 * 3600 and PluginLimits().reconstruct >= 3600  # TRACE's 48-min fit fits
    for bad, words in (("memory", "NAME=VALUE"), ("cpu=3", "one of fit, reconstruct"), ("fit=-1", "seconds"),
                       ("memory=lots", "e.g. memory=512M"), ("processes=0", "whole number")):
        with pytest.raises(GradleakError, match=words):
            PluginLimits().with_options([bad])
    assert parse_value("returned", "2048") == 2048


def test_grid_cells_carry_the_limits(tmp_path):
    from gradleak_bench.run.grid import GridConfig, _cell_config, plan

    limits = PluginLimits().with_options(["reconstruct=5m"])
    cells = plan(GridConfig(attacks=("closed_form",), targets=(("PointNav", "ppo_compact"),), out=str(tmp_path),
                            limits=limits))
    assert cells and all(_cell_config(c).limits == limits for c in cells)


def test_the_cli_states_the_limits_and_refuses_a_bad_one(tmp_path):
    done = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "evaluate", "closed_form", "--limit",
                           "memory=a-lot", "--out", str(tmp_path / "x")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr
    assert "memory=a-lot" in done.stderr and "e.g. memory=512M" in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "verify", str(tmp_path / "entry.json"),
                           "--limit", "reconstruct=soon"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "e.g. reconstruct=3600" in done.stderr, done.stderr


# --- sealed: each hostile plug-in -----------------------------------------------------------------------------


@sealed_only
def test_a_plugin_that_sleeps_fails_its_episode_and_a_resume_redoes_only_that_one(tmp_path):
    attack = _plugin(tmp_path, SLEEPS)
    first = _run(tmp_path, attack, ["reconstruct=2"])
    error = _one_failure(first, "reconstruct exceeded its wall-time limit of 2 s")
    assert error == "attack 'hostile': reconstruct exceeded its wall-time limit of 2 s " \
                    "(raise it with --limit reconstruct=SECONDS)"
    assert first.summary["limits"]["reconstruct"] == 2.0
    # the same command again (a raised limit would do the same): only the episode that failed on a limit runs
    again = _run(tmp_path, attack, ["reconstruct=3"])
    assert [r.status for r in again.rows] == ["ok", "failed", "ok"]
    assert "limit of 3 s" in again.rows[1].error
    assert [again.rows[i].attack_ms for i in (0, 2)] == [first.rows[i].attack_ms for i in (0, 2)]  # kept, not redone
    assert _descendants() == []


@sealed_only
def test_a_plugin_that_allocates_past_its_memory_limit_fails_its_episode(tmp_path):
    result = _run(tmp_path, _plugin(tmp_path, ALLOCATES, "allocates"), ["memory=2G"])
    error = _one_failure(result, "MemoryError")
    assert error.startswith("MemoryError: ")
    assert error.endswith("; its memory limit is 2 GiB (raise it with --limit memory=SIZE)")


@sealed_only
def test_a_plugin_that_fills_its_private_tmp_fails_its_episode(tmp_path):
    result = _run(tmp_path, _plugin(tmp_path, FILLS_TMP, "fills"), ["memory=1G", "reconstruct=600"])
    error = _one_failure(result, "exceeded its memory limit of 1 GiB")
    assert error.startswith("attack 'hostile': exceeded its memory limit of 1 GiB (its processes held ")


def test_a_script_run_from_tmp_leaves_the_plugin_its_own_tmp(monkeypatch):
    """A script in /tmp puts /tmp on the import path, which the sealed process is shown: bound read-only over its
    private /tmp, it left QGI no writable temporary folder (and showed it every file of the host's /tmp)."""
    from gradleak_bench.run.isolation import bwrap_command, shown_paths

    monkeypatch.setattr(sys, "path", ["/tmp", *sys.path])
    assert Path("/tmp") not in {p.resolve() for p in shown_paths("closed_form")}
    cmd = bwrap_command(3, 4, shown_paths("closed_form"), [], Path("/var/empty"))
    binds = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--ro-bind"]
    assert "/tmp" not in binds and cmd[cmd.index("--tmpfs") + 1] == "/tmp"


def test_the_scorers_own_disk_is_never_a_plugins_memory():
    """A process whose /tmp is still the scorer's (a sealed one before bubblewrap has mounted its tmpfs) adds
    nothing: counting the scorer's disk killed plug-ins at load wherever more of it was used than the limit."""
    from gradleak_bench.run.sandbox import _tmp_used

    assert _tmp_used(os.getpid()) == 0


@sealed_only
def test_memory_the_kernel_does_not_count_is_seen_by_the_watchdog(tmp_path):
    # the wall-time limit only bounds the test should the watchdog never see the pages (it would fail on it)
    result = _run(tmp_path, _plugin(tmp_path, TOUCHES, "touches"), ["memory=1G", "reconstruct=600"])
    error = _one_failure(result, "exceeded its memory limit of 1 GiB")
    assert error.startswith("attack 'hostile': exceeded its memory limit of 1 GiB (its processes held ")
    assert error.endswith("during reconstruct) (raise it with --limit memory=SIZE)")


@sealed_only
def test_a_plugin_that_forks_200_processes_fails_its_episode_and_leaves_none(tmp_path):
    result = _run(tmp_path, _plugin(tmp_path, FORKS, "forks"), [])
    _one_failure(result, "exceeded its process limit of 64")


@sealed_only
def test_a_plugin_that_returns_2_gib_is_refused_on_its_declared_size(tmp_path):
    result = _run(tmp_path, _plugin(tmp_path, RETURNS, "returns"), [])
    error = _one_failure(result, "reconstruct returned 2 GiB of arrays, over its limit of 1 GiB per call")
    assert error.endswith("(raise it with --limit returned=SIZE)")


@sealed_only
def test_a_plugin_that_prints_50_mb_is_stopped_at_its_output_limit(tmp_path, capfd):
    result = _run(tmp_path, _plugin(tmp_path, PRINTS, "prints"), ["printed=1M"])
    _one_failure(result, "printed more than 1 MiB during reconstruct")
    forwarded = capfd.readouterr().err.count("x")
    assert MiB <= forwarded <= MiB + 4096  # forwarded up to the limit, the rest dropped


@sealed_only
def test_a_defense_over_its_limit_fails_the_episode_and_is_started_again(tmp_path):
    path = tmp_path / "slow_defense.py"
    path.write_text(textwrap.dedent("""
        import time

        class SlowSecond:
            name = "slow_second"
            calls = 0
            def release(self, gradients, rng):
                SlowSecond.calls += 1
                if SlowSecond.calls == 2:  # its process's second episode; a restarted process counts again
                    time.sleep(3600)
                return gradients
    """))
    # 12 s: a defense process's first release imports torch (GradientStream), seconds on a loaded machine
    result = _run(tmp_path, "closed_form", ["reconstruct=12"], defense=f"{path}:SlowSecond")
    _one_failure(result, "defense 'slow_second': release exceeded its wall-time limit of 12 s (raise it with "
                         "--limit reconstruct=SECONDS)")


@sealed_only
def test_a_fit_over_its_limit_stops_the_run_with_exit_2_and_one_message(tmp_path):
    path = tmp_path / "slow_fit.py"
    path.write_text(textwrap.dedent("""
        import time
        from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction

        class SlowFit(ClosedFormAction):
            name = "slow_fit"
            def fit(self, victim, auxiliary):
                time.sleep(3600)
    """))
    done = subprocess.run([sys.executable, "-m", "gradleak_bench.cli", "evaluate", f"{path}:SlowFit", "--victim",
                           "ppo_compact", "--episodes", "1", "--wandb", "disabled", "--no-control", "--limit",
                           "fit=1", "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "400"})  # rich wraps at 80 otherwise
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: attack 'slow_fit': fit exceeded its wall-time limit of 1 s (raise it with --limit "
                      "fit=SECONDS); finished episodes are kept: run the same command to resume"], done.stderr
    assert "Traceback" not in done.stderr
    assert _descendants() == []


@sealed_only
def test_the_plugin_cache_is_private_to_the_plugins_code(tmp_path, cache_dir):
    """Two submitters' plug-ins never share a cache: each sees only its own folder (what it fitted there is
    still there in its next run), never another's."""
    snoop = """
import os
from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction
from gradleak_bench.artifacts import declare_fitted
from gradleak_bench.paths import cache_dir

class Snoop(ClosedFormAction):
    name = "snoop_{tag}"
    def fit(self, victim, auxiliary):
        (cache_dir() / "fitted-{tag}").write_text("mine")
        declare_fitted(cache_dir() / "fitted-{tag}")
    def reconstruct(self, episode, victim):
        own = cache_dir()
        seen = sorted(os.listdir(own.parent)) + sorted(os.listdir(own))
        if seen != [own.name, "fitted-{tag}", "fitted.json"]:
            raise RuntimeError(f"saw {{seen}}")
        return super().reconstruct(episode, victim)
"""
    results = []
    for tag in ("a", "b"):
        folder = tmp_path / tag
        folder.mkdir()
        (folder / "snoop.py").write_text(snoop.format(tag=tag))
        results.append(_run(tmp_path, f"{folder / 'snoop.py'}:Snoop", [], episodes=1, out=f"run-{tag}"))
    assert [r.status for result in results for r in result.rows] == ["ok", "ok"], \
        [r.error for result in results for r in result.rows]
    from gradleak_bench.run.isolation import plugin_cache

    a, b = (plugin_cache("attack", f"{tmp_path / t / 'snoop.py'}:Snoop") for t in "ab")
    assert a != b and a.parent == b.parent == Path(cache_dir) / "plugins"
    assert (a / "fitted-a").is_file() and not (a / "fitted-b").exists()
    assert plugin_cache("attack", "closed_form") == plugin_cache("attack", "closed_form", scope="elsewhere")
    assert plugin_cache("attack", "some.module:Attack", "run1") != plugin_cache("attack", "some.module:Attack", "run2")


# --- unsealed: what can hold in the scorer's own process -------------------------------------------------------


def test_unsealed_wall_time_output_and_returned_bytes_are_held(tmp_path, capfd):
    slept = _run(tmp_path, _plugin(tmp_path, SLEEPS), ["reconstruct=1"], sealed=False, out="a")
    _one_failure(slept, "reconstruct exceeded its wall-time limit of 1 s")
    printed = _run(tmp_path, _plugin(tmp_path, PRINTS, "prints"), ["printed=1M"], sealed=False, out="b")
    _one_failure(printed, "printed more than 1 MiB during reconstruct")
    big = "            return Reconstruction(fields={'action': np.zeros(4 << 20, dtype=np.uint8)})"
    returned = _run(tmp_path, _plugin(tmp_path, big, "big"), ["returned=1M"], sealed=False, out="c")
    _one_failure(returned, "reconstruct returned 4 MiB of arrays, over its limit of 1 MiB per call")
    assert capfd.readouterr().err.count("note: running unsealed") == 3  # one plain line per run


def test_results_record_the_limits(tmp_path):
    result = _run(tmp_path, "closed_form", ["memory=3G"], episodes=1, sealed=False)
    recorded = json.loads((tmp_path / "run" / "results.json").read_text())["limits"]
    assert recorded == result.summary["limits"] and recorded["memory"] == 3 * GiB
    assert np.isclose(recorded["fit"], PluginLimits().fit)


# --- Ray: the same limits in a worker's sealed plug-in processes -----------------------------------------------


@sealed_only
def test_a_plugin_that_fills_its_cache_fails_its_episode_on_the_disk_limit_and_leaves_nothing(tmp_path, cache_dir):
    """Issue 38: a sealed plug-in wrote 3 GiB into its private cache, which outlived the run. Past --limit disk
    the call fails naming the limit, and the cache is emptied."""
    from gradleak_bench.run.isolation import plugin_cache

    attack = _plugin(tmp_path, FILLS_CACHE, "fillscache")
    result = _run(tmp_path, attack, ["disk=128M", "reconstruct=600"])
    error = _one_failure(result, "exceeded its disk limit of 128 MiB")
    assert error.endswith("(raise it with --limit disk=SIZE)")
    own = plugin_cache("attack", attack, str((tmp_path / "run").resolve()))
    assert not (own / "scratch").exists()


SCRATCH_AND_MODEL = """
import os
from gradleak_bench.baselines.attacks.closed_form import ClosedFormAction
from gradleak_bench.artifacts import declare_fitted
from gradleak_bench.paths import cache_dir

class Fits(ClosedFormAction):
    name = "fits"
    def fit(self, victim, auxiliary):
        own = cache_dir()
        (own / "features").mkdir(exist_ok=True)
        (own / "features" / "aux.bin").write_bytes(b"x" * 4096)  # scratch: auxiliary data
        (own / "checkpoint.bin").write_bytes(b"c" * 4096)  # scratch: a training checkpoint
        (own / "model").mkdir(exist_ok=True)
        (own / "model" / "weights.bin").write_bytes(b"w" * 4096)
        declare_fitted(own / "model" / "weights.bin")
        os.symlink("/etc/passwd", own / "model" / "link")  # removed, never followed
"""


@sealed_only
def test_a_completed_run_keeps_only_the_declared_fitted_model_of_the_plugin_cache(tmp_path, cache_dir):
    """Issue 38: a run's scratch space (auxiliary data, checkpoints) does not outlive the run; the declared
    fitted model does (artifacts.declare_fitted, ArtifactCache.save_module(fitted=True)), so the next run
    loads it instead of fitting again."""
    from gradleak_bench.artifacts import FITTED_MANIFEST
    from gradleak_bench.run.isolation import plugin_cache

    folder = tmp_path / "code-fits"
    folder.mkdir()
    (folder / "fits.py").write_text(SCRATCH_AND_MODEL)
    attack = f"{folder / 'fits.py'}:Fits"
    result = _run(tmp_path, attack, [], episodes=2)
    assert [r.status for r in result.rows] == ["ok", "ok"], [r.error for r in result.rows]
    own = plugin_cache("attack", attack)
    left = sorted(p.relative_to(own).as_posix() for p in own.rglob("*"))
    assert left == sorted(["model", "model/weights.bin", FITTED_MANIFEST])
    assert Path("/etc/passwd").is_file()


def test_a_run_prunes_the_shared_cache_only_when_no_other_run_holds_it(tmp_path):
    """Every run of the same code shares its cache (all built-in attacks share one): a round's closed-form verify
    that finished pruned the cache under a TRACE fit running beside it, which lost its auxiliary file mid-write.
    A run holds the cache's lock while it may run; the one that finishes last prunes."""
    import os

    from gradleak_bench.run.sandbox import _hold_cache, _sole_user

    cache = tmp_path / "plugins" / "attack-x"
    cache.mkdir(parents=True)
    first, second = _hold_cache(cache), _hold_cache(cache)
    try:
        assert not _sole_user(first)  # the second run is still using it
        os.close(second)
        second = None
        assert _sole_user(first)
        assert not (cache / "attack-x.lock").exists() and (cache.parent / "attack-x.lock").is_file()
    finally:
        for fd in (first, second):
            if fd is not None:
                os.close(fd)


def test_pruning_ignores_a_manifest_that_points_outside_the_cache(tmp_path):
    from gradleak_bench.artifacts import FITTED_MANIFEST, fitted_paths
    from gradleak_bench.run.sandbox import prune_scratch

    cache, outside = tmp_path / "cache", tmp_path / "outside.txt"
    cache.mkdir()
    outside.write_text("not the plug-in's")
    (cache / "kept.bin").write_text("model")
    (cache / "scratch.bin").write_text("scratch")
    (cache / FITTED_MANIFEST).write_text(json.dumps(["kept.bin", "../outside.txt", "/etc/passwd", 3]))
    assert fitted_paths(cache) == ["kept.bin"]
    assert prune_scratch(cache) == ["scratch.bin"]
    assert outside.read_text() == "not the plug-in's" and (cache / "kept.bin").is_file()
    (cache / FITTED_MANIFEST).write_text("{not json")
    assert prune_scratch(cache) == ["kept.bin"]  # an unreadable manifest declares nothing


@pytest.fixture(scope="module")
def ray_cluster(hermetic_env):
    ray = pytest.importorskip("ray")
    env = {**hermetic_env, "GRADLEAK_BENCH_WORKER_IDLE": "1"}  # a worker closes its plug-ins 1 s after its last unit
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": env})
    yield ray
    ray.shutdown()


@sealed_only
def test_limits_hold_on_ray_workers_and_their_plugins_end_with_the_run(ray_cluster, tmp_path):
    import time

    from gradleak_bench.run.executors import get_executor

    attack = _plugin(tmp_path, SLEEPS)
    with get_executor("ray") as ex:
        config = EvaluateConfig(attack=attack, victim="ppo_compact", episodes=3, out=str(tmp_path / "run"),
                                wandb="disabled", sealed=True, control=False, priors=False, executor="ray",
                                limits=PluginLimits().with_options(["reconstruct=2"]))
        result = evaluate(config, progress=False, executor=ex)
    assert [r.status for r in result.rows] == ["ok", "failed", "ok"], [r.error for r in result.rows]
    assert "reconstruct exceeded its wall-time limit of 2 s (raise it with --limit reconstruct=SECONDS)" \
        in result.rows[1].error
    for _ in range(300):  # the worker closes its plug-in processes once idle: wait for that event (bounded)
        if not _plugin_hosts():
            break
        time.sleep(0.1)
    assert _plugin_hosts() == []


FILLS_CACHE = """\
            from gradleak_bench.paths import cache_dir
            chunk = b"\\1" * (16 << 20)
            with open(cache_dir() / "scratch", "wb") as f:  # the one host folder it may write: its cache
                for _ in range(64):
                    f.write(chunk)
                    f.flush()
                    time.sleep(0.05)
            while True:
                time.sleep(1)"""


def test_the_disk_limit_parses_like_the_others():
    assert PluginLimits().with_options(["disk=2G"]).disk == 2 << 30
    assert PluginLimits().disk == 16 << 30 and "disk=16 GiB" in PluginLimits().describe()


def test_a_locked_file_is_not_read_as_the_process_limit():
    """EAGAIN is both the kernel refusing a process and a file another process holds locked (two runs creating
    the same dataset at once: h5py "unable to lock file"); the hint appended to the error names the right one."""
    from gradleak_bench.run.limits import PluginLimits
    from gradleak_bench.run.sandbox import resource_hint

    limits = PluginLimits.from_dict(None)
    locked = {"type": "BlockingIOError", "error": "[Errno 11] Unable to synchronously create file (unable to lock "
                                                  "file, errno = 11, error message = 'Resource temporarily unavailable')"}
    assert "another process holds a lock" in resource_hint(locked, limits)
    fork = {"type": "BlockingIOError", "error": "[Errno 11] Resource temporarily unavailable"}
    assert resource_hint(fork, limits).startswith(f"; its process limit is {limits.processes} ")
    assert resource_hint({"type": "MemoryError", "error": ""}, limits).startswith("; its memory limit is ")
    assert resource_hint({"type": "ValueError", "error": "bad"}, limits) == ""
