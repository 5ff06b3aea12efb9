"""The command line as a user meets it: help that teaches, clear errors without tracebacks, tiny real runs."""
from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest


def cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradleak_bench.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=dict(os.environ, COLUMNS="200"), timeout=600)


def test_help_teaches():
    result = cli("--help")
    assert result.returncode == 0
    for command in ("list", "generate", "evaluate", "train-victim"):
        assert command in result.stdout


def test_list_shows_every_registry():
    out = cli("list").stdout
    for name in ("PointNav", "ActivePerception", "closed_form", "gaussian_noise", "topk", "action_accuracy",
                 "rgb_psnr", "ppo_compact", "init"):
        assert name in out, name


def test_list_says_why_each_unpublished_trained_checkpoint_is_missing():
    """Issue 37: every victim is listed as trained and learned, or with the reason it stopped."""
    from gradleak_bench.victims.zoo import NOT_LEARNED, not_learned_summary

    out = " ".join(cli("list").stdout.split())  # unwrapped
    for key in NOT_LEARNED:
        block = out.split(f" {key} ", 1)[1]
        reason = not_learned_summary(key)
        assert 0 < len(reason) < 160, key  # the short lead sentence, not the whole account
        assert f"no trained checkpoint: {reason}" in block.split(" victim validation rule")[0][:600], key


@pytest.mark.parametrize("args,needle", [
    (("evaluate", "closed_from"), "Did you mean 'closed_form'"),
    (("evaluate", "closed_form", "--task", "PointNv"), "Did you mean 'PointNav'"),
    (("evaluate", "closed_form", "--checkpoint", "traind"), "Did you mean 'trained'"),
    (("evaluate", "closed_form", "--defense", "gausian_noise"), "gaussian_noise"),
    (("evaluate", "closed_form", "--split", "tset", "--victim", "ppo_compact"), "Did you mean 'test'"),
    (("generate", "PointNav", "--victim", "ppo_compat"), "ppo_compact"),
    (("evaluate", "no/such/file.py:Attack"), "does not exist"),
])
def test_bad_names_exit_2_with_one_clear_message(args, needle):
    result = cli(*args)
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize("count", ["0", "-2"])
def test_threads_must_be_positive(count):
    result = cli("--threads", count, "list")
    assert result.returncode == 2, result.stderr
    assert "--threads must be a positive number" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_generate_then_evaluate_end_to_end(tmp_path):
    gen = cli("generate", "PointNav", "--victim", "ppo_compact", "--episodes", "1", "--out", str(tmp_path / "data"))
    assert gen.returncode == 0, gen.stderr
    sha = gen.stdout.strip().splitlines()[-1]
    assert len(sha) == 64
    assert (tmp_path / "data" / "PointNav-ppo_compact-init-test-e1-t8-s0-v0.h5").is_file()
    out = tmp_path / "run"
    ev = cli("evaluate", "closed_form", "--victim", "ppo_compact", "--episodes", "4", "--out", str(out),
             "--wandb", "disabled", "-D", "keep=0.5", "--defense", "topk")
    assert ev.returncode == 0, ev.stderr
    assert "action_accuracy" in ev.stdout
    summary = json.loads((out / "results.json").read_text())
    assert summary["defense"] == "topk" and summary["n_episodes"] == 4


@pytest.mark.slow
def test_the_readme_main_job_at_full_size(tmp_path):
    """`gradleak-bench evaluate closed_form` on the official default split, as the README runs it."""
    out = tmp_path / "run"
    result = cli("evaluate", "closed_form", "--out", str(out))
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "results.json").read_text())
    assert summary["dataset_official"] is True and summary["n_episodes"] == 48
    assert summary["metrics"]["action_accuracy"]["mean"] == 1.0


# ------------------------------------------------------------------------------ output that reads at any width
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def piped(*args: str, cwd=None) -> subprocess.CompletedProcess:
    """The CLI as a pipe, a CI log or `| less` sees it: not a terminal, no COLUMNS (rich falls back to 80)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run([sys.executable, "-m", "gradleak_bench.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


def _fits(text: str, width: int = 80) -> None:
    assert "…" not in text
    long = [line for line in text.splitlines() if len(line) > width]
    assert not long, long


def _summary(**extra) -> dict:
    interval = lambda m, lo, hi: {"mean": m, "ci_low": lo, "ci_high": hi}  # noqa: E731
    metric = lambda hib, best: {  # noqa: E731
        **interval(0.7969, 0.7531, 0.8375), "n": 48, "higher_is_better": hib, "unit": "", "failed_frames": 0,
        "control": interval(0.2656, 0.2266, 0.3099), "leakage": interval(0.5313, 0.4688, 0.5938),
        "references": {f"prior:{best}": interval(0.0104, 0.0, 0.0313), "prior:mean_frame": interval(0.1, 0.0, 0.2)},
        "best_prior": f"prior:{best}", "prior_leakage": interval(0.7865, 0.7406, 0.8281)}
    return {"attack": "inverting_gradients", "task": "ActivePerception", "checkpoint_id": "ActivePerception/dqn/init",
            "defense": "none", "split": "test", "n_episodes": 48, "n_failed": 0, "ms_per_frame": 1234.5, "sealed": True,
            "metrics": {"action_accuracy": metric(True, "majority_action_per_step"),
                        "action_hist_tv": metric(False, "majority_action"),
                        "rgb_psnr@gauss11": metric(True, "mean_frame_from_train_layouts"),
                        "room_sequence_accuracy_aligned": metric(True, "action_histogram")},
            **extra}


@pytest.mark.parametrize("width", [80, 100, 200])
def test_the_headline_names_every_metric_and_prior_in_full_at_any_width(width):
    from gradleak_bench.cli import summary_lines

    text = "\n".join(summary_lines(_summary(), width))
    _fits(text, width)
    for name in ("action_accuracy", "action_hist_tv", "rgb_psnr@gauss11", "room_sequence_accuracy_aligned",
                 "majority_action_per_step", "mean_frame_from_train_layouts", "majority_action 0.0104 [0, 0.0313]"):
        assert name in text, name
    for line in ("action_accuracy  0.7969 [0.7531, 0.8375]  (mean [95% CI]; higher is better)",
                 "  best prior     majority_action_per_step 0.0104 [0, 0.0313], leakage +0.7865 [0.7406, 0.8281]",
                 "  swap control   0.2656 [0.2266, 0.3099], leakage +0.5313 [0.4688, 0.5938]",
                 "  headline       +0.7865 [0.7406, 0.8281] over the best prior (the stronger)",
                 "  verdict        leaks: 0.7865 better than the strongest reference (majority_action_per_step), "
                 "95% CI [0.7406, 0.8281]"):
        assert line in text.replace("\n      ", " ").splitlines(), line  # a long line wraps at spaces only
    assert "48/48 episodes scored, 1234.50 ms/frame, sealed" in text


@pytest.mark.parametrize("role,line", [
    ("development", "scored on: the public development split (unofficial: add --fresh N or verify)"),
    ("fresh", "scored on: 8 fresh layouts drawn at run time (official protocol)"),
])
def test_the_headline_says_which_split_role_it_was_scored_on(role, line):
    from gradleak_bench.cli import summary_lines

    lines = summary_lines(_summary(split_role=role, fresh_layouts={"n": 8, "commitment": "c" * 64}), 80)
    assert line in lines
    assert not any(x.startswith("scored on") for x in summary_lines(_summary(), 80))  # older results: no line


def test_an_undefined_number_reads_n_a_not_nan():
    from gradleak_bench.cli import summary_lines

    summary = _summary(ms_per_frame=None, n_episodes=0, metrics={})
    assert "0/0 episodes scored, no frames scored, sealed" in summary_lines(summary, 80)


def test_list_and_every_help_read_at_80_columns_in_a_pipe():
    from gradleak_bench.tasks import TASKS

    listing = piped("list")
    assert listing.returncode == 0, listing.stderr
    _fits(listing.stdout)
    for task in TASKS.values():
        assert f"  {task.name}  gym id {task.gym_id}," in listing.stdout
    for line in ("  ActivePerception/dqn_compact  dqn, MultiInputPolicy", "      checkpoints: init* trained*",
                 "  room_sequence_accuracy_aligned  field pose, higher is better"):
        assert line in listing.stdout.splitlines(), line
    for command in ("", "evaluate", "submit", "grid"):
        result = piped(*filter(None, [command, "--help"]))
        assert result.returncode == 0, result.stderr
        cut = [line for line in result.stdout.splitlines()[1:] if line.endswith("...")]  # click shortens with ...
        assert not cut, (command, cut)
        _fits(result.stdout)
    assert "--allow-unofficial / --no-allow-unofficial" in piped("submit", "--help").stdout


def test_a_run_without_out_writes_nothing_into_the_working_tree_and_reads_at_80_columns(tmp_path):
    """Run from the repository root without --out: the results go to a folder of their own under
    $GRADLEAK_BENCH_RUNS (the tests' temp dir, tests/conftest.py), linked as latest; nothing new appears in the tree; the output fits 80 columns in a pipe; the
    unsealed notice is one plain line; every file the run writes is strict JSON."""
    def tree() -> set[str]:
        status = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=REPO,
                                capture_output=True, text=True)
        assert status.returncode == 0, status.stderr
        return {line for line in status.stdout.splitlines() if "__pycache__" not in line and ".pytest_cache" not in line}

    before = tree()
    result = piped("evaluate", "closed_form", "--victim", "ppo_compact", "--episodes", "2", "--wandb", "disabled",
                   "--unsealed", cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert tree() == before
    # a folder of its own under $GRADLEAK_BENCH_RUNS, said first, and runs/latest points at it
    folder = re.search(r"^run folder: (\S+)$", result.stdout, re.M).group(1)
    assert Path(folder).parent == Path(os.environ["GRADLEAK_BENCH_RUNS"])
    assert Path(os.environ["GRADLEAK_BENCH_RUNS"], "latest").resolve() == Path(folder).resolve()
    assert f"results: {folder}/results.json" in " ".join(result.stdout.split())
    _fits(result.stdout)
    for name in ("action_accuracy  ", "action_hist_tv  ", "  best prior     ", "  swap control   "):
        assert name in result.stdout, name
    notes = [line for line in result.stderr.splitlines() if "unsealed" in line]
    assert len(notes) == 1 and notes[0].startswith("note: running unsealed (--unsealed, debugging only)"), notes
    assert "Warning" not in result.stderr and ".py:" not in result.stderr

    def strict(text: str):
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))

    summary = strict(open(os.path.join(folder, "results.json")).read())
    assert summary["sealed"] is False and summary["n_episodes"] == 2
    rows = [strict(line) for line in open(os.path.join(folder, "episodes.jsonl")).read().splitlines()]
    assert len(rows) == 2


@pytest.mark.parametrize("value", ["0", "-3"])
def test_episodes_must_be_positive(value, tmp_path):
    result = cli("evaluate", "closed_form", "--episodes", value, "--out", str(tmp_path / "run"))
    assert result.returncode == 2, result.stderr
    assert f"--episodes must be a positive integer (1 or more), got {value}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "results.json").exists()


def test_a_bad_plugin_parameter_names_the_parameter_its_type_and_range(tmp_path):
    result = cli("evaluate", "closed_form", "--victim", "ppo_compact", "--episodes", "1", "--defense", "topk",
                 "-D", "keep=abc", "--out", str(tmp_path / "run"), "--wandb", "disabled")
    assert result.returncode == 2, result.stderr
    assert "defense 'topk': keep must be a number in (0, 1], got 'abc'" in result.stderr
    assert "Traceback" not in result.stderr and "not supported between" not in result.stderr


@pytest.mark.parametrize("kind,name,params,needle", [
    ("defense", "topk", {"keep": 2}, "defense 'topk': keep must be in (0, 1], got 2"),
    ("defense", "topk", {"kep": 0.5}, "defense 'topk' has no parameter 'kep' (its parameters: keep)"),
    ("defense", "gaussian_noise", {"sigma": "big"}, "defense 'gaussian_noise': sigma must be a number in [0.0, inf]"),
    ("attack", "closed_form", {"foo": 1}, "attack 'closed_form' has no parameter 'foo' (its parameters: rule)"),
    ("attack", "dlg", {"iterations": "abc"}, "attack 'dlg': parameter iterations expects an integer or null, got 'abc'"),
    ("attack", "dlg", {"iterations": 1.5}, "attack 'dlg': parameter iterations expects an integer or null, got 1.5"),
    ("attack", "dlg", {"lr": "fast"}, "attack 'dlg': parameter lr expects a number, got 'fast'"),
    ("attack", "closed_form", {"rule": "x"}, "rule must be 'auto', 'sign_free' or 'signed'"),
])
def test_plugin_parameter_errors_name_the_parameter(kind, name, params, needle):
    import gradleak_bench.baselines  # noqa: F401
    from gradleak_bench import plugins
    from gradleak_bench.errors import PluginLoadError

    with pytest.raises(PluginLoadError) as info:
        plugins.load(kind, name, params)
    assert needle in str(info.value)


def test_files_for_users_are_strict_json_and_their_readers_take_null():
    import math

    import numpy as np

    from gradleak_bench.leaderboard.submit import episode_rows
    from gradleak_bench.paths import dumps_strict

    text = dumps_strict({"a": math.nan, "b": [math.inf, -math.inf, np.float32(1.5), np.int64(3), np.bool_(True)],
                         "c": np.array([1.0, np.nan])})
    assert json.loads(text) == {"a": None, "b": [None, None, 1.5, 3, True], "c": [1.0, None]}
    rows = [{"episode_id": "e1", "status": "ok", "length": 8, "m": None, "m/control": 0.5},
            {"episode_id": "e2", "status": "ok", "length": 8, "m": math.nan, "m/control": 0.25}]
    got = episode_rows(rows, {"m": {"control": {}}}, "test")
    assert got["values"]["m"] == [None, None] and got["controls"]["m"] == [0.5, 0.25]
    from gradleak_bench.errors import CorruptFileError

    with pytest.raises(CorruptFileError, match="not a finite number"):  # a missing column is still corrupt
        episode_rows([{"episode_id": "e1", "status": "ok", "length": 8}], {"m": {}}, "test")


def test_generate_facts_never_cut_a_path_or_a_sha256():
    from gradleak_bench.cli import _Facts

    facts = _Facts("dataset PointNav-ppo_compact-init-test-e4-t8-s0-v0")
    facts.add_row("identity", "d" * 64)
    facts.add_row("content sha256", "0" * 64 + " (this machine's float bits: local integrity only)")
    facts.add_row("layouts", ", ".join(str(i) for i in range(40)))
    lines = facts.lines(80)
    _fits("\n".join(lines))
    assert lines[1:3] == ["  identity", "    " + "d" * 64]
    assert lines[3:5] == ["  content sha256", "    " + "0" * 64 + " (this"]
    assert lines[6].startswith("  layouts         0, 1, 2,")


def test_the_verdict_reads_the_same_for_both_directions():
    """A lower-is-better metric whose leakage is negative leaks, in the same words as a higher-is-better one
    whose leakage is positive (issue 39: two headlines of opposite sign read as opposite results)."""
    from gradleak_bench.cli import leak_verdict

    up = leak_verdict({"mean": 0.73, "ci_low": 0.69, "ci_high": 0.77}, True, "swap_control")
    down = leak_verdict({"mean": -0.73, "ci_low": -0.77, "ci_high": -0.69}, False, "swap_control")
    assert up == down == "leaks: 0.73 better than the strongest reference (swap control), 95% CI [0.69, 0.77]"
    assert leak_verdict({"mean": 0.1, "ci_low": -0.2, "ci_high": 0.3}, True, "prior:mean_frame").startswith(
        "no leakage shown: +0.1 against the strongest reference (mean_frame), 95% CI [-0.2, 0.3] includes 0")
    assert "below the strongest reference" in leak_verdict({"mean": -1.4, "ci_low": -2, "ci_high": -1}, True, "x")

