"""The command line as a user meets it: help that teaches, clear errors without tracebacks, tiny real runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys

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
