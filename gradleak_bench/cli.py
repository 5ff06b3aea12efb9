"""The ``gradleak-bench`` command line: a thin layer over the Python API.

Every command prints one clear message and exits non-zero on bad input (exit code 2), with no traceback;
``evaluate`` exits 3 when some episodes failed (their rows say why; the others are scored and saved).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from gradleak_bench.errors import GradleakError

app = typer.Typer(
    name="gradleak-bench",
    help=(
        "Measure how much an embodied robot's private experience leaks through the policy gradients it "
        "shares.\n\nStart with `gradleak-bench list`, then `gradleak-bench evaluate closed_form` (scores the "
        "closed-form action attack on the PointNav held-out split). Write your own attack as a class with "
        "`name`, `fields` and `reconstruct(episode, victim)` and run it with "
        "`gradleak-bench evaluate path/to/my_attack.py:MyAttack` (docs/write-an-attack.md)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: wraps at any width and never cuts a word (rich panels did at 80)
)
console = Console()
err_console = Console(stderr=True)
# "durable": the command's results are on disk and everything it started has ended, so the process may skip
# CPython's module teardown at exit (:func:`_exit_now`).
_state = {"durable": False}


@app.callback()
def _global_options(
    ctx: typer.Context,
    threads: Optional[int] = typer.Option(
        None, "--threads", metavar="N",
        help="CPU threads for torch (default: 1, or all cores for train-victim/train-defense; docs/evaluate.md)"),
) -> None:
    """Options that apply to every command (give them before the command's name)."""
    from gradleak_bench.threads import apply_threads, check_threads, set_wait_policy

    check_threads(threads)
    set_wait_policy()  # before anything imports torch: OpenMP reads it once, at load
    if ctx.invoked_subcommand is not None and "--help" not in sys.argv:
        apply_threads(threads, ctx.invoked_subcommand)


def _budget_line(spec) -> str:
    """``budget: 512,000 steps; trained in 1.2 h`` (the published training report's seconds, summed over
    resumed sessions), or the budget alone when no trained checkpoint of this spec is at hand."""
    from gradleak_bench.victims.card import find_checkpoint, read_meta

    line = f"budget: {spec.train.total_timesteps:,} steps"
    found = find_checkpoint(spec, "trained")
    if found is not None:
        try:
            report = read_meta(found / "trained.json").get("report", {})
            line += (f"; trained {int(report['timesteps']):,} steps in "
                     f"{float(report['train_seconds']) / 3600:.1f} h of wall time")
        except (GradleakError, KeyError, TypeError, ValueError):
            pass  # an older report without these fields: the budget alone
    return line


@app.command("list")
def list_() -> None:
    """Show the tasks, victims and checkpoints, attacks, defenses and metrics you can use."""
    from gradleak_bench import plugins, registry
    from gradleak_bench.metrics import all_metrics
    from gradleak_bench.tasks import TASKS
    from gradleak_bench.victims.card import find_checkpoint
    from gradleak_bench.victims import validation
    from gradleak_bench.victims.zoo import CHECKPOINTS, NOT_LEARNED, VICTIMS, not_learned_summary

    import gradleak_bench.baselines  # noqa: F401

    width = console.width
    out: list[str] = []

    def section(title: str, items: list[tuple[str, str, list[str]]]) -> None:
        """A titled list: per item its name and facts on one line, then its longer lines indented, each
        wrapped at spaces to the console's width (names are never cut)."""
        if out:
            out.append("")
        out.extend(_wrapped(title, width))
        for name, facts, lines in items:
            out.extend(_wrapped(f"{name}  {facts}" if facts else name, width, "  ", "      "))
            for line in lines:
                out.extend(_wrapped(line, width, "      ", "      "))

    section("tasks (--task NAME)", [
        (t.name, f"gym id {t.gym_id}, {t.n_actions} actions",
         [f"victims: {', '.join(t.victims)}", t.description]) for t in TASKS.values()])
    items = []
    for v in VICTIMS.values():
        marks = [c + ("*" if c == "init" or find_checkpoint(v, c) else "") for c in CHECKPOINTS]
        if v.key in NOT_LEARNED:
            marks = [m if not m.startswith("trained") else "trained-" for m in marks]
        lines = [f"checkpoints: {' '.join(marks)}", _budget_line(v)]
        if v.key in NOT_LEARNED:
            lines.append(f"no trained checkpoint: {not_learned_summary(v.key)}")
        data = validation.read_validation(v)
        if data:  # val success and mean return with 95% intervals (`gradleak-bench validate-victim`)
            rows = data.get("policies", {})
            lines += [f"{p}: {validation.format_row(rows[p])}" for p in validation.POLICIES if p in rows]
            learned = "yes" if data.get("learned") else "no"
            if v.key in NOT_LEARNED:
                learned = "no: trained not published"
            lines.append(f"learned: {learned} ({data['episodes']} val episodes)")
        items.append((v.key, f"{v.algo}, {v.policy}", lines + [v.description]))
    section("victims (TASK/VICTIM: --task TASK --victim VICTIM; checkpoint* = available without training; "
            "trained- = not published as trained: it did not learn, docs/tasks.md)", items)
    out.extend(_wrapped(f"victim validation rule: {validation.RULE}", width))
    for kind in ("attack", "defense"):
        section(f"{kind}s (a name, or module:Class, or path/to/file.py:Class)",
                [(spec.name, "", [spec.summary()]) for spec in plugins.installed(kind).values()])
        for spec in registry.shadowed(kind):  # a built-in name is never shadowed: say which one was ignored
            out.extend(_wrapped(f"ignored: {kind} entry point {spec.name!r} of {spec.distribution} (a built-in has "
                                "that name)", width))
    section("metrics (scored when an attack reconstructs the field; -M NAME or -M FIELD)", [
        (m.name, f"field {m.field}, {'higher' if m.higher_is_better else 'lower'} is better", [m.description])
        for m in all_metrics()])
    _say(out)


BACKEND_HELP = ("simulator of the episodes: pybullet (default, embedded; the only one with official splits and "
                "the leaderboard), ai2thor or habitat where installed (an unofficial run; docs/backends.md)")
SCENES_HELP = ("with --backend habitat: a scene file or a folder of them (repeatable), the layouts of the split "
               "(Habitat takes scenes by path; docs/backends.md)")


@app.command()
def generate(
    task: str = typer.Argument("PointNav", help="task name, e.g. PointNav or ActivePerception"),
    split: str = typer.Option("test", help="train, val or test (the held-out layouts)"),
    victim: Optional[str] = typer.Option(None, help="victim of the task (default: the task's first)"),
    checkpoint: str = typer.Option("init", help="init or trained"),
    episodes: Optional[int] = typer.Option(None, help="episodes per layout (default: the task's standard)"),
    seed: int = typer.Option(0, help="dataset seed (the standard split uses 0)"),
    protocol: str = typer.Option("first8", help="data protocol: first8 (the first steps after reset) or "
                                 "trace-windows (windows cut from whole episodes, TRACE's data; docs/tasks.md)"),
    out: Optional[Path] = typer.Option(None, help="output folder for DATASET_KEY.h5 (default: the cache)"),
    executor: str = typer.Option("local", help="local (this process) or ray (one layout per Ray task; docs/scale-out.md)"),
    ray_address: Optional[str] = typer.Option(None, help="Ray cluster address (HOST:PORT, ray://HOST:10001 or auto; "
                                              "default: start a local Ray instance)"),
    backend: str = typer.Option("pybullet", help=BACKEND_HELP),
    scenes: list[Path] = typer.Option([], "--scenes", help=SCENES_HELP),
) -> None:
    """Generate (or re-verify) an episode dataset; print its split identity and a summary.

    The victim checkpoint acts in each layout of the split. An official split (seed 0, the standard episodes
    per layout) replays its recorded actions and is checked against the manifest's identity and float
    fingerprints, so it verifies on any CPU (docs/tasks.md, "Split identity"); any other draw is unofficial.
    The last line printed is the full identity.
    """
    import numpy as np

    from gradleak_bench.run.executors import get_executor
    from gradleak_bench.run.plan import resolve_split

    # names resolved (and a missing simulator refused) before anything is generated
    config = resolve_split(task, victim, checkpoint, split, episodes, seed, protocol, backend,
                           tuple(str(s) for s in scenes))
    from gradleak_bench import dataset as datasets
    from gradleak_bench import dataset_config

    with get_executor(executor, ray_address) as ex:
        ds = datasets.load_or_generate(config, path=out / f"{config.key}.h5" if out else None, executor=ex)
    verified = ds.verify()
    official = datasets.check_official(ds, verified)
    lengths, actions, rewards, layouts, fields = [], [], [], set(), []
    for e in ds:  # streamed: one episode in memory at a time, whatever the dataset's size
        lengths.append(e.length)
        actions.append(e.steps["action"])
        rewards.append(float(e.steps["reward"].sum()))
        layouts.add(e.layout_id)
        fields = fields or sorted(e.steps)
    lengths, actions, rewards = np.array(lengths), np.concatenate(actions), np.array(rewards)
    table = _Facts(f"dataset {config.key}")
    table.add_row("file", str(ds.path))
    table.add_row("identity", ds.identity)
    table.add_row("content sha256", f"{ds.sha256} (this machine's float bits: local integrity only)")
    if official:
        identical = _bit_identical(config, verified)
        table.add_row("manifest", "the official split" + (", bit-identical to the recording" if identical else
                      ", float fields within tolerance of the recording (another CPU's rounding)"))
    elif config.backend != dataset_config.DEFAULT_BACKEND:
        table.add_row("manifest", f"no official split on the {config.backend} backend: an unofficial draw "
                      "(official splits are PyBullet's)")
    else:
        table.add_row("manifest", "no official split of this config: an unofficial draw")
    table.add_row("episodes x steps", f"{len(lengths)} episodes, {lengths.sum()} steps (length {lengths.min()}-{lengths.max()})")
    table.add_row("layouts", ", ".join(str(x) for x in sorted(layouts)))
    if actions.ndim == 2:  # continuous (linear, angular, ...) commands: their spread per component
        from gradleak_bench.tasks import get_task

        names = get_task(config.task).action_names  # the name resolve_split checked
        table.add_row("actions (mean / std / min / max)", "; ".join(
            f"{n} {c.mean():.3f} / {c.std():.3f} / {c.min():.3f} / {c.max():.3f}" for n, c in zip(names, actions.T)))
    else:
        table.add_row("action histogram", str(np.bincount(actions).tolist()))
    table.add_row("episode return", f"mean {rewards.mean():.3f}, min {rewards.min():.3f}, max {rewards.max():.3f}")
    table.add_row("truth fields", ", ".join(fields))
    _say(table.lines(console.width))
    print(ds.identity)


def _bit_identical(config, verified) -> bool:
    from gradleak_bench import split_identity, splits

    record = splits.split_record(config.key, config.manifest)
    mine = {r.episode_id: r for r in verified.records}
    return all(split_identity.compare(r, mine[r.episode_id])[1] for r in record.episodes)


LIMIT_HELP = ("a hard limit on each plug-in process (repeatable): fit=SECONDS (one fit call, default 4h), "
              "reconstruct=SECONDS (one episode's call, default 1h), load=SECONDS (each set-up call, default 10m), "
              "memory=SIZE (its processes together, default 16G or 3/4 of this machine's), processes=N (default "
              "64), returned=SIZE (arrays in one answer, default 1G), printed=SIZE (stdout/stderr in one call, "
              "default 16M), disk=SIZE (its private cache and /tmp, default 16G); e.g. --limit reconstruct=2h --limit memory=32G (docs/evaluate.md, 'Limits')")


def _limits(options: list[str]):
    from gradleak_bench.run.limits import PluginLimits

    return PluginLimits().with_options(options)


@app.command()
def evaluate(
    attack: str = typer.Argument(..., help="registered name (see `list`), module:Class, or path/to/file.py:Class"),
    task: str = typer.Option("PointNav", help="task name"),
    defense: str = typer.Option("none", help="registered name, module:Class, or path/to/file.py:Class"),
    victim: Optional[str] = typer.Option(None, help="victim of the task (default: the task's first)"),
    checkpoint: str = typer.Option("init", help="victim checkpoint: init or trained"),
    split: str = typer.Option("test", help="test (held-out layouts), val or train; append -full (test-full) for "
                                            "full-length episodes instead of 8 steps (trajectory attacks)"),
    episodes: Optional[int] = typer.Option(None, help="score only the first N episodes (one per layout in turn)"),
    fresh: Optional[int] = typer.Option(None, "--fresh", min=1, max=10_000, metavar="N",
                              help="score N fresh layouts drawn from os.urandom now, their truth generated after "
                                   "the plug-ins start and never written to disk: the honest (official-protocol) "
                                   "number, instead of the public development split anyone can regenerate"),
    seed: int = typer.Option(0, help="seed of the defense's randomness and the bootstrap"),
    dataset_seed: int = typer.Option(0, help="held-out draw: 0 is the standard (official) split; N scores the "
                                     "episodes `generate --seed N` draws in the same held-out layouts (unofficial)"),
    protocol: Optional[str] = typer.Option(None, help="data protocol of the held-out episodes: first8 or "
                                           "trace-windows (default: the attack's own -- trace-windows for TRACE "
                                           "and its ablations -- else first8; docs/tasks.md)"),
    out: Optional[Path] = typer.Option(None, help="output folder (results.json, episodes.csv, pictures; default: a "
                                       "new runs/<time>-<attack> folder, linked as runs/latest; runs/ is "
                                       "$GRADLEAK_BENCH_RUNS when set). An existing run folder of the same command "
                                       "is resumed"),
    wandb: str = typer.Option("offline", help="W&B mode: offline (default, no account needed), online or disabled"),
    attack_param: list[str] = typer.Option([], "--attack-param", "-A", help="attack parameter KEY=VALUE (repeatable)"),
    defense_param: list[str] = typer.Option([], "--defense-param", "-D", help="defense parameter KEY=VALUE (repeatable)"),
    control: bool = typer.Option(True, help="also score the no-leak control (the attack fed another episode's gradients)"),
    metric: list[str] = typer.Option([], "--metric", "-M", help="score only this metric, or every metric of this "
                                     "field, e.g. -M pose (repeatable; default: all of the attack's fields)"),
    executor: str = typer.Option("local", help="local (this process) or ray (episode shards as Ray tasks; docs/scale-out.md)"),
    ray_address: Optional[str] = typer.Option(None, help="Ray cluster address (HOST:PORT, ray://HOST:10001 or auto; "
                                              "default: start a local Ray instance)"),
    shard_size: int = typer.Option(1, help="episodes per unit of work (a Ray task; the resume granularity)"),
    resume: bool = typer.Option(True, help="resume an interrupted run of the same config in OUT (--no-resume: start afresh)"),
    gradients: Optional[Path] = typer.Option(None, help="score gradients from this file (gradleak-bench-gradients "
                                             "HDF5, docs/scale-out.md) instead of recomputing them"),
    sealed: Optional[bool] = typer.Option(None, "--sealed/--unsealed", help="--sealed: refuse to run unless the "
                                          "plug-ins can be isolated; --unsealed (debugging only): run them inside the "
                                          "scorer's process, where they could read the truth (marked in results.json, "
                                          "never submittable). Default: sealed where the OS can isolate, else unsealed "
                                          "with a one-line note"),
    limit: list[str] = typer.Option([], "--limit", metavar="NAME=VALUE", help=LIMIT_HELP),
    priors: bool = typer.Option(True, help="also score the gradient-free priors fitted on train layouts and report "
                                "the leakage over the best of them (--no-priors: skip the fit; docs/priors.md)"),
    backend: str = typer.Option("pybullet", help=BACKEND_HELP),
    scenes: list[Path] = typer.Option([], "--scenes", help=SCENES_HELP),
    threads: Optional[int] = typer.Option(None, "--threads", metavar="N", help="torch threads (as the top-level "
                                          "--threads; default 1 for evaluation)"),
) -> None:
    """Score an attack on a task's held-out episodes, behind a defense.

    The attack and the defense each run sealed in their own process (an unprivileged user in Linux namespaces,
    via bubblewrap): they get only what the threat model gives them (docs/evaluate.md). Without bubblewrap the
    run is unsealed, with a one-line note, and cannot be submitted.

    By default it scores the public held-out split: fast, cached, reproducible, and a development number
    (anyone can regenerate those episodes). --fresh N scores N layouts drawn now instead: the number the
    leaderboard's protocol stands behind.

    Writes OUT/results.json (metrics with 95% bootstrap CIs, the references -- swap control and gradient-free
    priors -- and the leakage = metric - the strongest reference, with a verdict in words),
    OUT/episodes.csv (one row per episode), reconstruction pictures when images are reconstructed, and a W&B
    run (offline unless --wandb online).

    Example: gradleak-bench evaluate closed_form --defense topk -D keep=0.1 --fresh 16
    """
    from gradleak_bench import plugins
    from gradleak_bench.paths import new_run_dir, point_latest
    from gradleak_bench.run.config import EvaluateConfig
    from gradleak_bench.run.evaluation import evaluate as run_evaluate

    if threads is not None:
        from gradleak_bench.threads import apply_threads

        apply_threads(threads, "evaluate")
    if wandb not in ("offline", "online", "disabled"):
        raise GradleakError(f"--wandb must be offline, online or disabled, not {wandb!r}")
    if episodes is not None and episodes < 1:
        raise GradleakError(f"--episodes must be a positive integer (1 or more), got {episodes}")
    attack_params, defense_params = plugins.parse_params(attack_param), plugins.parse_params(defense_param)
    precheck_params("attack", attack, attack_params)
    precheck_params("defense", defense, defense_params)
    own_folder = out is None  # each run without --out gets a folder of its own: none overwrites another
    if out is not None:
        check_out_folder(out)
    new_folder = own_folder or not Path(out).exists()  # made by this run: a failure before scoring removes it
    out = out or new_run_dir(Path(attack.split(":")[-1]).stem)
    config = EvaluateConfig(
        attack=attack, task=task, victim=victim, checkpoint=checkpoint, defense=defense, split=split,
        episodes=episodes, seed=seed, dataset_seed=dataset_seed, protocol=protocol, attack_params=attack_params,
        defense_params=defense_params, out=str(out), wandb=wandb,
        control=control,
        metrics=list(metric) or None, executor=executor, ray_address=ray_address, shard_size=shard_size,
        gradients=str(gradients) if gradients else None, sealed=sealed, limits=_limits(limit), priors=priors,
        backend=backend, scenes=tuple(str(s) for s in scenes),
    )
    from gradleak_bench.run.executors import get_executor
    from gradleak_bench.run.plan import resolve

    layouts = fresh_layouts(fresh, config)
    plan = resolve(config)  # every name, before any plug-in process, executor or dataset starts
    check_episode_count(plan, episodes, fresh)
    _say(_wrapped(f"run folder: {out}", console.width))
    try:
        with get_executor(executor, ray_address) as ex:  # a missing extra or a bad address fails before any work
            result = run_evaluate(plan, resume=resume, executor=ex, fresh_layouts=layouts)
    except KeyboardInterrupt:
        import signal

        # the run is over and what it kept is on disk: a second Ctrl-C (or one that reaches a teardown hook
        # late) must not turn the exit into a traceback or a death by signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _say_interrupted(Path(out), layouts is not None, own_folder)
        if own_folder and Path(out).is_dir():
            point_latest(Path(out))
        raise typer.Exit(130) from None
    except BaseException:
        if new_folder:
            _drop_if_empty(Path(out))  # a run that failed before scoring anything leaves no folder behind
        raise
    if own_folder:
        point_latest(Path(out))
    _state["durable"] = True  # every file is written and closed, the plug-in processes and the executor ended
    print_summary(result.summary)
    if layouts is not None:
        console.print(f"fresh layouts: {layouts.n} drawn from seed {layouts.seed}, published now that the run is "
                      f"over (commitment {layouts.commitment[:16]}...)", markup=False, highlight=False, soft_wrap=True)
    for row in result.rows:
        if row.status != "ok":
            err_console.print(f"episode {row.episode_id} failed: {row.error}", markup=False, highlight=False)
    _say(_wrapped(f"results: {result.out / 'results.json'} (and episodes.csv, episodes.jsonl)", console.width))
    for problem in result.problems:
        err_console.print(f"problem: {problem}", markup=False, highlight=False, soft_wrap=True)
    if result.n_failed:
        err_console.print(f"[red]{result.n_failed} of {len(result.rows)} episodes failed[/red] (rows kept in episodes.csv)")
    if result.n_failed or result.problems:
        raise typer.Exit(3)


def precheck_params(kind: str, reference: str, params: dict) -> None:
    """A built-in plug-in's parameters (names and types, from its constructor's signature) checked in this
    process before anything starts: the package's own code, so importing it is safe. A plug-in from a file or
    another package is checked inside its sealed process, as before (importing it here would run its code)."""
    from gradleak_bench import plugins, registry

    builtin = registry.builtin(kind)
    if not params or ":" in reference or reference not in builtin:
        return
    # A mistyped name is refused from the source alone (no torch import: well under 2 s); the types need the class.
    names = plugins.declared_parameter_names(builtin[reference].target)
    if names is not None and (unknown := [key for key in params if key not in names]):
        raise GradleakError(f"{kind} {reference!r} has no parameter {unknown[0]!r} (its parameters: "
                            f"{', '.join(names) or 'none'})")
    factory = registry.resolve(kind, reference)
    if problem := plugins.parameter_problem(kind, reference, factory, params):
        try:  # the plug-in's own check says more (the range as well as the type): the package's own code
            factory(**params)
        except GradleakError as exc:
            raise GradleakError(f"{kind} {reference!r}: {exc}") from None
        except Exception:  # noqa: BLE001  it has no check of its own for this: the signature's words stand
            pass
        raise GradleakError(problem)


def _drop_if_empty(out: Path) -> None:
    import shutil

    from gradleak_bench.run.store import scored_so_far

    done = scored_so_far(out)
    if out.is_dir() and (done is None or done[0] == 0):
        shutil.rmtree(out, ignore_errors=True)


def utility_lines(report: dict) -> list[str]:
    """The defense's cost in words: defended minus undefended, paired on the same val episodes, with its 95% CI,
    and whether the difference is resolved (else the episode count that would resolve it)."""
    lines = []
    for field, label in (("success", "success"), ("return", "return")):
        d = report.get("paired_difference", {}).get(field)
        if not d:
            continue
        text = (f"cost in val {label} (defended - undefended, paired on the same {d['episodes']} episodes): "
                f"{d['mean']:+.3f}, 95% CI [{d['ci95'][0]:.3f}, {d['ci95'][1]:.3f}]")
        if d["resolved"]:
            text += ": resolved"
        elif d["episodes_to_resolve"]:
            text += (f": not resolved (the CI includes 0); about --eval-episodes {d['episodes_to_resolve']} "
                     "would resolve a difference of this size")
        else:
            text += ": no difference on these episodes"
        lines.append(text)
    return lines


def refuse_run_output(path: Path) -> None:
    """``verify`` is given an entry; a run folder or its results.json gets told to make the entry first."""
    folder = path if path.is_dir() else path.parent if path.name == "results.json" else None
    if folder is None and path.is_file():
        try:
            folder = path.parent if "attack_name" in json.loads(path.read_text(encoding="utf-8")) else None
        except (OSError, ValueError, TypeError, AttributeError):
            folder = None
    if folder is not None:
        raise GradleakError(f"{path} is an evaluate run's output, not a leaderboard entry: make the entry first with "
                            f"`gradleak-bench submit {folder} --name NAME --authors \"YOU\"`, then verify the "
                            "entry file it writes under leaderboard/entries/")


def check_out_folder(out: Path) -> None:
    """An unusable ``--out`` is refused before anything starts, saying what is wrong with it (nothing ran, so
    there is nothing to resume)."""
    import os

    if out.exists() and not out.is_dir():
        raise GradleakError(f"--out {out} is an existing file, not a folder: pass a folder (new or a run folder "
                            "of the same command to resume it)")
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise GradleakError(f"--out {out}: {probe} is not a folder, so the run folder cannot be made there")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise GradleakError(f"--out {out}: {probe} is not writable by this user; pass a folder you can write")
    if str(out.resolve()).startswith(("/proc/", "/sys/", "/dev/")):
        raise GradleakError(f"--out {out} is inside a kernel file system (/proc, /sys, /dev); pass an ordinary folder")


def check_episode_count(plan, episodes: int | None, fresh: int | None) -> None:
    """``--episodes`` above the split's size is refused, naming the option and the size (it would silently score
    every episode). Checked from the split's layouts, before any episode is generated."""
    if episodes is None or fresh:
        return
    from gradleak_bench.dataset import layout_ids

    try:
        total = len(layout_ids(plan.split)) * plan.split.episodes_per_layout
    except GradleakError:
        return  # a backend's scenes are checked by the run itself
    if episodes > total:
        raise GradleakError(f"--episodes {episodes} is more than the {total} episodes of split {plan.split.split!r} "
                            f"({total // plan.split.episodes_per_layout} layouts x {plan.split.episodes_per_layout}); "
                            f"pass --episodes {total} or fewer, or leave it out to score them all")


def _say_interrupted(out: Path, fresh: bool, own_folder: bool) -> None:
    """What Ctrl-C kept, and the exact command that resumes it."""
    import shlex

    from gradleak_bench.run.store import scored_so_far

    if fresh:
        err_console.print("interrupted: a --fresh run keeps nothing. Its layouts were drawn from a secret seed "
                          "for this run and their truth never touches the disk, so a rerun draws new layouts "
                          "and starts over.", markup=False, highlight=False, soft_wrap=True)
        return
    done = scored_so_far(out)
    args = sys.argv[1:]
    if own_folder:
        args = [*args, "--out", str(out)]
    command = "gradleak-bench " + shlex.join(args)
    kept = (f"{done[0]}/{done[1]} episodes scored so far are kept in {out}" if done else
            f"nothing was scored yet (run folder {out})")
    err_console.print(f"interrupted: {kept}. Resume with:\n  {command}", markup=False, highlight=False,
                      soft_wrap=True)


def fresh_layouts(n: int | None, config) -> object | None:
    """``--fresh N``: N layouts from a seed drawn now from os.urandom (None for N = 0); refuses what cannot
    go with it, naming the option."""
    if not n:
        return None
    import os

    from gradleak_bench.run.fresh import FreshLayouts

    clashes = {"--episodes": config.episodes is not None, "--dataset-seed": config.dataset_seed != 0,
               "--gradients": config.gradients is not None, "--executor ray": config.executor != "local",
               "--unsealed": config.sealed is False, "--split train/val": config.split not in ("test", "test-full"),
               f"--backend {config.backend}": config.backend != "pybullet"}
    if bad := [k for k, v in clashes.items() if v]:
        raise GradleakError(f"--fresh {n} scores layouts drawn now and cannot be combined with {', '.join(bad)} "
                            "(fresh layouts are PyBullet apartments, scored sealed, locally, on the test or "
                            "test-full protocol)")
    return FreshLayouts(int.from_bytes(os.urandom(8), "little") >> 1, n)


def _number(value: object, signed: bool = False) -> str:
    """A mean or CI end as the headline shows it (4 significant digits); n/a where undefined (NaN, null)."""
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "n/a"
    return f"{value:+.4g}" if signed else f"{value:.4g}"


from gradleak_bench.metrics.summary import leak_verdict  # noqa: E402  the words W&B and docs share

_KEEP = "\u00a0"  # a space :func:`_wrapped` never breaks at (a CI stays on one line)


def field_overview(summary: dict, width: int) -> list[str]:
    """For an attack that reconstructs several fields (QGI: image, depth, box, action, Q-values), one line per
    field before the per-metric blocks: which of its metrics leak beyond the strongest reference, which do not."""
    from gradleak_bench.metrics import get_metric

    by_field: dict[str, tuple[list[str], list[str]]] = {}
    for name, m in summary.get("metrics", {}).items():
        reference, leak = m.get("strongest_reference"), m.get("reference_leakage")
        if reference is None or leak is None:
            continue
        try:
            field = get_metric(name).field
        except GradleakError:
            field = name.split("_")[0]
        leaks, quiet = by_field.setdefault(field, ([], []))
        (leaks if leak_verdict(leak, m.get("higher_is_better", True), reference).startswith("leaks") else
         quiet).append(name)
    if len(by_field) < 2:
        return []
    out = ["", "which fields leak (each metric against its strongest reference, 95% CI):"]
    for field, (leaks, quiet) in by_field.items():
        text = f"{field}: " + ("leaks on " + ", ".join(leaks) if leaks else "no leakage shown")
        if leaks and quiet:
            text += "; no leakage shown on " + ", ".join(quiet)
        out += _wrapped(text, width, "  ", "      ")
    return out


def _interval(m: dict, signed: bool = False) -> str:
    """``mean [ci_low, ci_high]`` (``signed``: the mean with its sign, as a difference), kept on one line."""
    return f"{_number(m.get('mean'), signed)}{_KEEP}[{_number(m.get('ci_low'))},{_KEEP}{_number(m.get('ci_high'))}]"


def _wrapped(text: str, width: int, indent: str = "", hang: str = "    ") -> list[str]:
    """``text`` broken at spaces into lines of at most ``width`` characters (first line ``indent``, the others
    ``hang``); a word longer than a line is never cut, it overflows its own line instead."""
    import textwrap

    lines = textwrap.wrap(text, width=max(width, 20), initial_indent=indent, subsequent_indent=hang,
                          break_long_words=False, break_on_hyphens=False) or [indent.rstrip()]
    return [line.replace(_KEEP, " ") for line in lines]


def _say(lines: list[str], to: Console | None = None) -> None:
    """Print lines already fitted to the console width, verbatim (no markup, no highlighting, no rewrap)."""
    for line in lines:
        (to or console).print(line, markup=False, highlight=False, soft_wrap=True)


class _Facts:
    """A titled list of ``name  value`` lines (a two-column table that never cuts a value): each value wraps at
    spaces under its own indent; a value whose first word does not fit beside its name (a long path, a sha256)
    starts on a line of its own."""

    def __init__(self, title: str) -> None:
        self.title, self.rows = title, []

    def add_row(self, name: str, value: str) -> None:
        self.rows.append((name, value))

    def lines(self, width: int) -> list[str]:
        pad = max(len(name) for name, _ in self.rows) + 2 if self.rows else 2
        out = _wrapped(self.title, width)
        for name, value in self.rows:
            if 2 + pad + len(value.split(" ", 1)[0]) <= width:
                out += _wrapped(name.ljust(pad) + value, width, "  ", "  " + " " * pad)
            else:  # the value's first word does not fit beside the name
                out += ["  " + name, *_wrapped(value, width, "    ", "    ")]
        return out


SPLIT_ROLES = {
    "development": "the public development split (unofficial: add --fresh N or verify)",
    "fresh": "{n} fresh layouts drawn at run time (official protocol)",
    "unofficial": "the {backend} backend's public split (unofficial: official splits and the leaderboard are "
                  "PyBullet's)",
}


def summary_lines(summary: dict, width: int = 80) -> list[str]:
    """The headline of a run (``results.json``'s summary) as lines of at most ``width`` characters: the run,
    then one block per metric -- its mean [95% CI] and direction, the best gradient-free prior with its
    score, the leakage over that prior (the headline), the swap control -- full names, never cut."""
    out = _wrapped(f"{summary['attack']} on {summary['task']} ({summary['checkpoint_id']}), defense "
                   f"{summary['defense']}, {summary['split']} split", width)
    n, failed = summary.get("n_episodes", 0), summary.get("n_failed", 0)
    ms = summary.get("ms_per_frame")
    speed = f"{ms:.2f} ms/frame" if _number(ms) != "n/a" else "no frames scored"
    sealed = "sealed" if summary.get("sealed", True) else "UNSEALED (debugging only; cannot be submitted)"
    out += _wrapped(f"{n - failed}/{n} episodes scored, {speed}, {sealed}", width)
    role = summary.get("split_role")
    if role is not None:
        fresh = summary.get("fresh_layouts") or {}
        text = SPLIT_ROLES.get(str(role), str(role)).format(n=fresh.get("n", "N") if isinstance(fresh, dict) else "N",
                                                            backend=summary.get("backend", "pybullet"))
        out += _wrapped(f"scored on: {text}", width)
    out += field_overview(summary, width)
    any_prior = False
    for name, m in summary.get("metrics", {}).items():
        direction = "higher" if m.get("higher_is_better", True) else "lower"
        out.append("")
        out += _wrapped(f"{name}  {_interval(m)}  (mean [95% CI]; {direction} is better)", width)
        best = m.get("best_prior")
        if best:
            any_prior = True
            line = f"best prior     {best.removeprefix('prior:')} {_interval(m.get('references', {}).get(best, {}))}"
            if m.get("prior_leakage") is not None:
                line += f", leakage {_interval(m['prior_leakage'], signed=True)}"
            out += _wrapped(line, width, "  ", "      ")
        if m.get("control") is not None:
            line = f"swap control   {_interval(m['control'])}"
            if m.get("leakage") is not None:
                line += f", leakage {_interval(m['leakage'], signed=True)}"
            out += _wrapped(line, width, "  ", "      ")
        reference, leak = m.get("strongest_reference"), m.get("reference_leakage")
        if reference is None and best:  # a results.json written before the strongest reference was stated
            reference, leak = best, m.get("prior_leakage")
        if reference is not None and leak is not None:
            which = "the swap control" if reference == "swap_control" else "the best prior"
            out += _wrapped(f"headline       {_interval(leak, signed=True)} over {which} (the stronger)", width,
                            "  ", "      ")
            out += _wrapped(f"verdict        {leak_verdict(leak, m.get('higher_is_better', True), reference)}",
                            width, "  ", "      ")
        if m.get("failed_frames"):
            out += _wrapped(f"failed frames  {m['failed_frames']} (each scored the metric's worst value)", width,
                            "  ", "      ")
    if any_prior:
        out.append("")
        out += _wrapped("leakage = metric - reference, paired per episode, with its 95% CI (bootstrap over "
                        "episodes); the headline is the leakage over the stronger of the best gradient-free prior "
                        "(fitted on train layouts; docs/priors.md) and the swap control (the attack's output for "
                        "another episode). A lower-is-better metric leaks when its leakage is negative: the "
                        "verdict line says it in words.", width, hang="")
    for note in summary.get("notes", []):
        out += _wrapped(f"note: {note}", width)
    return out


def print_summary(summary: dict) -> None:
    _say(summary_lines(summary, console.width))


@app.command("export-gradients")
def export_gradients(
    task: str = typer.Argument("PointNav", help="task name"),
    out: Path = typer.Option(..., help="the gradient file to write (HDF5, format gradleak-bench-gradients/1)"),
    split: str = typer.Option("train", help="train, val or test"),
    victim: Optional[str] = typer.Option(None, help="victim of the task (default: the task's first)"),
    checkpoint: str = typer.Option("init", help="init or trained"),
    episodes: Optional[int] = typer.Option(None, help="episodes per layout (default: the task's standard)"),
    seed: int = typer.Option(0, help="dataset seed"),
    dtype: str = typer.Option("float16", help="float16 (half the size) or float32 (exact)"),
    executor: str = typer.Option("local", help="local or ray"),
    ray_address: Optional[str] = typer.Option(None, help="Ray cluster address"),
    part_episodes: Optional[int] = typer.Option(
        None, help="write OUT as a folder of part files of this many episodes, each compressed and written by "
                   "the worker that computed it (resumable; OUT must be on storage every worker sees)"),
) -> None:
    """Materialise a split's exact per-step gradients as a chunked, compressed HDF5 file (float16 by default)
    that attackers stream minibatches from (GradientFile.batches) and `evaluate --gradients` can score."""
    from gradleak_bench.gradient_store import export_gradients as export
    from gradleak_bench.run.executors import get_executor

    with get_executor(executor, ray_address) as ex:
        path, sha = export(out, task, victim, checkpoint, split, episodes, seed, dtype, executor=ex,
                           part_episodes=part_episodes)
    size = sum(p.stat().st_size for p in path.glob("*")) if path.is_dir() else path.stat().st_size
    console.print(f"gradients: {path} ({size / 2**20:.1f} MiB)", soft_wrap=True)
    print(sha)


@app.command("train-victim")
def train_victim(
    task: str = typer.Argument("PointNav", help="task name"),
    victim: Optional[str] = typer.Option(None, help="victim of the task"),
    budget: Optional[int] = typer.Option(None, help="environment steps (default: the victim's fixed budget)"),
    eval_episodes: int = typer.Option(24, help="val episodes for the success rate"),
    workers: Optional[int] = typer.Option(
        None, min=0, help="environment worker processes (default: one per CPU core, at most one per environment; "
                          "0: in this process); the trained weights do not depend on it"),
    threads: Optional[int] = typer.Option(None, "--threads", metavar="N", help="torch threads of the policy update "
                                          "(as the top-level --threads; default: all cores)"),
) -> None:
    """Train a victim's `trained` checkpoint on the train layouts and report its success rate on val beside a
    random policy's.

    Resumable and cached by config hash: Ctrl-C keeps the progress saved every 4,096 steps, and the same command
    resumes from it; a larger --budget continues from the saved steps of a smaller one. The environments step in
    worker processes, one per core, with one torch thread each (docs/tasks.md, "Training speed"); a learning
    curve (32 val episodes every 32,768 steps) is saved beside the progress.

    Example: gradleak-bench train-victim PointNav --victim ppo_84 --budget 512000
    """
    from gradleak_bench.victims.training import TrainingInterrupted, train

    if threads is not None:
        from gradleak_bench.threads import apply_threads

        apply_threads(threads, "train-victim")
    try:
        report = train(task, victim, budget=budget, eval_episodes=eval_episodes, workers=workers)
    except TrainingInterrupted as exc:
        err_console.print(str(exc), soft_wrap=True)
        sys.exit(130)
    console.print_json(json.dumps(report))


@app.command("validate-victim")
def validate_victim_cmd(
    task: str = typer.Argument("PointNav", help="task name"),
    victim: Optional[str] = typer.Option(None, help="victim of the task"),
    episodes: Optional[int] = typer.Option(None, help="val episodes (default: 120, as committed)"),
    out: Optional[Path] = typer.Option(None, help="directory of validation.json (default: the victim's committed "
                                                   "checkpoint directory)"),
) -> None:
    """Roll out the random policy, `init` and `trained` on the same val episodes and write validation.json: success
    and return with 95% intervals, and whether `trained` learned (its intervals above the random policy's)."""
    from gradleak_bench.victims import validation

    result = validation.validate_victim(task, victim, episodes or validation.VALIDATION_EPISODES, directory=out)
    for name, row in result["policies"].items():
        console.print(f"{name:8s} {validation.format_row(row)}")
    if "learned" in result:
        console.print(f"learned: {result['learned']} ({validation.RULE})")


@app.command("train-defense")
def train_defense_cmd(
    defense: str = typer.Argument(..., help="registered name (see `list`), module:Class, or path/to/file.py:Class"),
    task: str = typer.Option("PointNav", help="task name"),
    victim: Optional[str] = typer.Option(None, help="victim of the task (default: the task's first)"),
    budget: Optional[int] = typer.Option(None, help="environment steps for both runs (default: the victim's fixed budget)"),
    seed: Optional[int] = typer.Option(None, help="training seed for both runs (default: the victim's)"),
    defense_param: list[str] = typer.Option([], "--defense-param", "-D", help="defense parameter KEY=VALUE (repeatable)"),
    eval_episodes: int = typer.Option(24, help="val episodes for success rate and return"),
    start: str = typer.Option("init", help="weights both runs start from: init, or trained (fine-tune the victim's trained checkpoint, as a federated client would)"),
    out: Optional[Path] = typer.Option(None, help="also write OUT/train_defense.json"),
) -> None:
    """What a defense costs the agent: train the victim on the train layouts with the defense applied to its
    real updates (each minibatch's per-sample gradients are released through the defense and their mean is
    the update), and the undefended victim with the same budget and seed; report val success rate and return
    of both with 95% intervals, their difference paired on the same val episodes (defended - undefended, 95% CI;
    "not resolved" with the --eval-episodes that would resolve it when the CI includes 0), the slowdown, and
    the defense's formal epsilon where it has one.

    Both runs are resumable (re-run the same command) and cached by config hash.

    Example: gradleak-bench train-defense dp_sgd -D C=1 -D sigma=0.5 --task ActivePerception --victim reinforce --budget 8192
    """
    from gradleak_bench import plugins
    from gradleak_bench.registry import bind
    from gradleak_bench.run.plan import resolve_split
    from gradleak_bench.victims.defended import train_defense

    # the run's names resolved as every run's are, before any training starts
    bind("defense", defense)
    spec = resolve_split(task, victim, start)
    report = train_defense(defense, plugins.parse_params(defense_param), task=spec.task, victim=spec.victim,
                           budget=budget, seed=seed, eval_episodes=eval_episodes, out=out, start=start)
    table = Table(title=f"{report['task']}/{report['victim']}, {report['budget']} steps from {start}, seed {report['seed']}: "
                        f"defense {report['defense']['name']} {report['defense']['params']}")
    for col in ("run", "val success [95% CI]", "val return [95% CI]", "steps/s"):
        table.add_column(col)
    for run in ("undefended", "defended"):
        r, v = report[run], report[run]["val"]
        table.add_row(run, f"{v['success_rate']:.3f} [{v['success_ci95'][0]:.3f}, {v['success_ci95'][1]:.3f}]",
                      f"{v['mean_return']:.3f} [{v['return_ci95'][0]:.3f}, {v['return_ci95'][1]:.3f}]",
                      f"{r['steps_per_second']:.0f}")
    console.print(table)
    for line in utility_lines(report):
        _say(_wrapped(line, console.width, hang="    "))
    for key in ("dp_epsilon_per_step", "action_epsilon"):
        if key in report:
            console.print(f"{key}: {report[key]:.4g}")
    console.print(f"report: {(out / 'train_defense.json') if out else report['cache_dir'] + '/report.json'}", soft_wrap=True)


@app.command()
def grid(
    attack: list[str] = typer.Option([], "--attack", "-a", help="an attack (repeatable; default: every registered attack)"),
    setting: list[str] = typer.Option([], "--setting", "-s", help="a defense setting NAME[:KEY=VALUE,...] (repeatable; default: the standard 21 settings)"),
    target: list[str] = typer.Option([], "--target", "-t", help="TASK/VICTIM (repeatable; default: PointNav/ppo and ActivePerception/dqn)"),
    checkpoint: str = typer.Option("init", help="victim checkpoint: init or trained"),
    split: str = typer.Option("test", help="test (held-out layouts), val or train"),
    episodes: Optional[int] = typer.Option(None, help="score only the first N episodes of each cell"),
    seed: int = typer.Option(0, help="seed of the defenses' randomness, the bootstrap and the utility training"),
    utility_budget: Optional[int] = typer.Option(None, help="train-defense budget in environment steps per setting (default: no utility runs)"),
    utility_eval_episodes: int = typer.Option(24, help="val episodes of each utility run"),
    utility_seeds: int = typer.Option(1, help="training seeds per setting (seed, seed+1, ...): the table and plot show mean ± sd"),
    utility_start: str = typer.Option("init", help="weights the utility runs start from: init, or trained (fine-tuning)"),
    attack_param: list[str] = typer.Option([], "--attack-param", "-A", help="ATTACK.KEY=VALUE (repeatable), e.g. inverting_gradients.preset=quick"),
    out: Optional[Path] = typer.Option(None, help="output folder (cells/, grid.md, grid.csv, privacy_utility_*.png; "
                                       "default: runs/grid, or $GRADLEAK_BENCH_RUNS/grid)"),
    executor: str = typer.Option("local", help="local (default) or ray: cells and utility runs as Ray tasks"),
    ray_address: Optional[str] = typer.Option(None, help="Ray cluster address (default: start a local one)"),
    limit: list[str] = typer.Option([], "--limit", metavar="NAME=VALUE", help=LIMIT_HELP),
    backend: str = typer.Option("pybullet", help=BACKEND_HELP),
) -> None:
    """Every attack x every defense setting through the runner, each setting's utility cost from
    train-defense, a privacy-utility plot with the Pareto frontier and a table (docs/defenses.md).

    Resumable: finished cells and utility runs are reused when the same command runs again.

    Example: gradleak-bench grid -a closed_form -t ActivePerception/dqn_compact --utility-budget 5000 --episodes 12
    """
    from gradleak_bench import plugins
    from gradleak_bench.paths import default_run_dir
    from gradleak_bench.run.grid import STANDARD_SETTINGS, STANDARD_TARGETS, DefenseSetting, GridConfig, run_grid

    out = out or Path(default_run_dir("grid"))
    if episodes is not None and episodes < 1:
        raise GradleakError(f"--episodes must be a positive integer (1 or more), got {episodes}")

    targets = []
    for t in target:
        task_name, sep, victim_name = t.partition("/")
        if not sep or not victim_name:
            raise GradleakError(f"--target must be TASK/VICTIM (e.g. PointNav/ppo), got {t!r}")
        targets.append((task_name, victim_name))
    params: dict[str, dict] = {}
    for pair in attack_param:
        name, dot, rest = pair.partition(".")
        if not dot:
            raise GradleakError(f"--attack-param must be ATTACK.KEY=VALUE, got {pair!r}")
        params.setdefault(name, {}).update(plugins.parse_params([rest]))
    config = GridConfig(
        attacks=tuple(attack) or None, settings=tuple(DefenseSetting.parse(s) for s in setting) or STANDARD_SETTINGS,
        targets=tuple(targets) or STANDARD_TARGETS, checkpoint=checkpoint, split=split, episodes=episodes, seed=seed,
        utility_budget=utility_budget, utility_eval_episodes=utility_eval_episodes, utility_seeds=utility_seeds,
        utility_start=utility_start, out=str(out),
        executor=executor, ray_address=ray_address, attack_params=params, limits=_limits(limit), backend=backend,
    )
    result = run_grid(config)
    failed = [c for c in result["cells"] if c["status"] == "failed"]
    skipped = [c for c in result["cells"] if c["status"] == "skipped"]
    console.print((out / "grid.md").read_text(), markup=False, highlight=False)
    for c in failed:
        err_console.print(f"[red]cell {c['task']}/{c['victim']} {c['attack']} x {c['setting']} failed:[/red] {c['error']}",
                          soft_wrap=True)
    console.print(f"{len(result['cells'])} cells ({len(skipped)} skipped, {len(failed)} failed); "
                  f"table, plot and csv in {out}", soft_wrap=True)
    if failed:
        raise typer.Exit(3)


@app.command()
def submit(
    run_dir: Path = typer.Argument(..., help="the --out folder of `gradleak-bench evaluate` (holds results.json)"),
    name: str = typer.Option(..., help="the attack's name on the leaderboard (letters, digits, _ - . +)"),
    authors: list[str] = typer.Option(..., "--authors", help="an author (repeat, or one comma-separated list)"),
    paper: Optional[str] = typer.Option(None, help="paper URL"),
    code: Optional[str] = typer.Option(None, help="code URL"),
    version: Optional[str] = typer.Option(None, help="attack version (default: its `version` attribute or the package version)"),
    out: Path = typer.Option(Path("leaderboard/entries"), help="entries folder"),
    force: bool = typer.Option(False, help="replace an existing entry"),
    allow_unofficial: bool = typer.Option(
        False, help="maintainers only: accept a dataset the manifest records no checksum for (never a mismatch)"),
) -> None:
    """Turn a complete run on the official held-out split into a leaderboard entry.

    Writes OUT/<task>/<defense>/<attack>__<victim>-<checkpoint>.json. Refuses a partial run, failed episodes,
    or a dataset whose sha256 is not the official split's (envs/splits/v0.json).

    Example: gradleak-bench submit runs/latest --name closed_form --authors "Ada Lovelace"
    """
    from gradleak_bench.leaderboard.submit import submit as make_entry

    names = [a.strip() for item in authors for a in item.split(",") if a.strip()]
    path = make_entry(run_dir, name, names, paper, code, version, out, force, allow_unofficial)
    console.print(f"entry: {path}", soft_wrap=True)
    console.print(f"next: gradleak-bench verify {path}; gradleak-bench leaderboard --thumbnails", soft_wrap=True,
                  markup=False)


@app.command()
def verify(
    entry: Path = typer.Argument(..., help="an entry JSON file under leaderboard/entries"),
    episodes: int = typer.Option(8, min=1, help="size of the random subset of public held-out episodes to re-run "
                                                  "(their swap-control partners are re-run beside them)"),
    seed: Optional[int] = typer.Option(
        None, help="seed of the subset draw (default: drawn now and printed, so nobody knew which episodes are "
                   "re-run; give one to repeat a verification)"),
    attack: Optional[str] = typer.Option(
        None, help="the attack you expect the entry to bind (a name, or path.py:Class with the shipped file's "
                   "sha256); refused when the entry binds other code"),
    allow_unofficial: bool = typer.Option(
        False, help="maintainers only: verify an entry whose dataset the manifest records no identity for"),
    fresh_layouts: int = typer.Option(
        16, min=0, help="score the entry on this many fresh layouts drawn from a secret seed after its code is "
                        "fixed: the numbers the leaderboard ranks (0: skip; then no record is written)"),
    record: bool = typer.Option(
        True, help="on success, write the verification record the leaderboard ranks by "
                   "(leaderboard/verified/..., beside the entries folder)"),
    check_record: bool = typer.Option(
        False, "--check-record", help="check the entry's committed verification record against the fresh "
                                      "layouts scored now instead of writing one (what CI does)"),
    limit: list[str] = typer.Option([], "--limit", metavar="NAME=VALUE", help=LIMIT_HELP),
    backend: str = typer.Option("pybullet", help="simulator of the re-run: pybullet (default); an entry is "
                                "verified on PyBullet's official split and fresh layouts, so any other is refused"),
    signing_key: Optional[Path] = typer.Option(
        None, "--signing-key", metavar="PEM",
        help="maintainers' CI only: sign the record with this Ed25519 private key (default: the file "
             "$GRADLEAK_BENCH_SIGNING_KEY names); the board ranks only records signed by a key in "
             "leaderboard/keys/, an unsigned record is a pre-check"),
) -> None:
    """Re-run an entry's own code on public held-out episodes and on fresh layouts nobody could know in advance.

    Checks every metric, its control, references, leakage and failed frames against the entry's own rows on the
    same episodes (each drawn episode's swap-control partner re-run beside it; tolerances from the verifier's own
    spread), refuses an entry whose public-split score beats its
    fresh-layout score beyond noise, and on success writes the verification record: the verifier's own
    fresh-layout scores, swap control and priors, which are what the leaderboard ranks (docs/leaderboard.md).
    Exit 0 verified, 1 not verified, 2 refused before running (impossible values, not the official split, code
    other than the entry binds)."""
    from gradleak_bench.leaderboard import record as records
    from gradleak_bench.leaderboard.verify import make_record, verify_file

    refuse_run_output(entry)
    from gradleak_bench.leaderboard.signing import signing_key as load_signing_key

    private_key = load_signing_key(signing_key)  # a file that is not a key: exit 2 before anything runs
    if backend != "pybullet":
        from gradleak_bench.envs.backend import backend_class

        backend_class(backend)  # an unknown name is named as such
        raise GradleakError(f"entries are scored and verified on PyBullet's official split and fresh layouts (the "
                            f"leaderboard is PyBullet's); a run on the {backend} backend is unofficial: score it "
                            f"with `gradleak-bench evaluate ... --backend {backend}` (docs/backends.md)")
    if seed is None:  # the public subset is drawn now: an entry cannot keep honest just the rows it is checked on
        import secrets

        seed = secrets.randbits(31)
    result = verify_file(entry, check_committed_record=check_record, episodes=episodes, seed=seed, attack=attack,
                         allow_unofficial=allow_unofficial, progress=True, fresh_layouts=fresh_layouts,
                         limits=_limits(limit))
    for check in result.all_checks:  # wrapped at spaces to the console's width (80 in a pipe), never cut
        _say(_wrapped(check.describe(), console.width), console if check.ok else err_console)
    for note in result.notes:
        _say(_wrapped(note, console.width))
    if not result.ok:
        for problem in result.failures():
            _say(_wrapped(f"not verified: {problem}", console.width), err_console)
        raise typer.Exit(1)
    _say(_wrapped(f"verified {entry} on {len(result.episode_ids)} public episodes (seed {seed}) and "
                  f"{len(result.fresh_run.ids) if result.fresh_run else 0} fresh layouts", console.width))
    if record and not check_record and result.fresh_run is not None:
        root = records.entries_root(entry, result.entry.relative_path)
        if root is None:
            err_console.print(f"no record written: {entry} is not at its canonical path "
                              f"<entries>/{result.entry.relative_path}", markup=False, highlight=False, soft_wrap=True)
            return
        from gradleak_bench.paths import atomic_write_bytes

        made = make_record(result.entry, entry, result, seed)
        path = records.record_path(root, result.entry.relative_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = made.to_json() if private_key is None else records.signed_json(made, private_key)
        atomic_write_bytes(path, text.encode())
        _say(_wrapped(f"record: {path} " + ("(signed; ranked by `gradleak-bench leaderboard` when its key is in "
                                            f"{records.keys_dir(root)})" if private_key is not None else
                                            "(unsigned: a pre-check, shown unranked until the maintainers' "
                                            "verifier signs it; docs/leaderboard.md)"), console.width))


@app.command("round")
def round_(
    entries: Path = typer.Option(Path("leaderboard/entries"), help="entries folder"),
    only: Optional[list[str]] = typer.Option(None, "--only", help="only entries whose path contains this "
                                             "(repeatable)"),
    fresh_layouts: int = typer.Option(16, min=2, help="fresh layouts of the round's one shared draw"),
    episodes: int = typer.Option(8, min=1, help="public held-out episodes re-run per entry"),
    signing_key: Optional[Path] = typer.Option(
        None, "--signing-key", metavar="PEM", help="sign each record (maintainers; default: "
                                                   "$GRADLEAK_BENCH_SIGNING_KEY); unsigned records are unranked"),
    limit: list[str] = typer.Option([], "--limit", metavar="NAME=VALUE", help=LIMIT_HELP),
    join: Optional[str] = typer.Option(
        None, "--join", metavar="ROUND", help="verify on the draw of this finished round (its commitment, 8+ hex "
        "digits) the entries it does not hold yet (or the --only ones) and add them to it; built-in attacks and "
        "defenses only"),
) -> None:
    """Re-verify every entry on ONE shared fresh draw (seed committed before, revealed after), so the board
    compares entries on the same layouts and decides ties paired per layout (docs/leaderboard.md, "Rounds").
    Exit 0 all verified, 1 some not (their old records are kept; the others are rewritten).

    Example, after a new baseline entry: gradleak-bench round --join 913987fb --only dlg__ppo-init"""
    from gradleak_bench.leaderboard.rounds import join_round, run_round
    from gradleak_bench.leaderboard.signing import signing_key as load_signing_key

    key = load_signing_key(signing_key)
    say = lambda text: _say(_wrapped(text, console.width))  # noqa: E731
    if join is not None:
        done = join_round(entries, join, only, key, say=say, limits=_limits(limit))
    else:
        done = run_round(entries, only, fresh_layouts, episodes, key, say=say, limits=_limits(limit)).entries
    if not all(e.verified for e in done):
        raise typer.Exit(1)


@app.command()
def keygen(
    private: Path = typer.Argument(..., help="where the private key goes (keep it OUT of the repository)"),
    public: Path = typer.Argument(..., help="where the public key goes (commit it under leaderboard/keys/)"),
) -> None:
    """Make an Ed25519 key pair for signing verification records (maintainers; docs/leaderboard.md)."""
    from gradleak_bench.leaderboard.signing import generate

    kid = generate(private, public)
    console.print(f"key {kid}: private {private} (mode 600, never commit it), public {public}", soft_wrap=True,
                  markup=False)


@app.command()
def leaderboard(
    entries: Path = typer.Option(Path("leaderboard/entries"), help="entries folder"),
    out: Optional[Path] = typer.Option(None, help="where README.md and index.html go (default: the entries folder's parent)"),
    thumbnails: bool = typer.Option(False, "--thumbnails", help="first recompute the thumbnails of entries that have "
                                    "none, or a stale one (a sealed re-run of each entry's code on the fixed frames)"),
    refresh: bool = typer.Option(False, "--refresh-thumbnails", help="recompute every entry's thumbnails"),
    only: Optional[list[str]] = typer.Option(None, "--only", help="with --thumbnails: only entries whose path "
                                             "contains this (repeatable)"),
) -> None:
    """Validate every entry and render the leaderboard: README.md (one board per task and reconstructed field,
    ranked by the leakage on fresh layouts over the strongest reference -- the stronger of the best
    gradient-free prior and the swap control -- with its 95% CI and the verdict in words: "leaks", "no leakage
    shown" or "below the strongest reference") and a self-contained, sortable index.html."""
    from gradleak_bench.leaderboard.render import render

    if thumbnails or refresh:
        from gradleak_bench.leaderboard.make_thumbnails import make_thumbnails

        for path, seconds in make_thumbnails(entries, refresh=refresh, only=only or None, progress=True):
            console.print(f"thumbnails of {path}: {seconds:.0f} s", soft_wrap=True, markup=False)
    md, page = render(entries, out)
    console.print(f"wrote {md} and {page}")


def _reflow_help() -> None:
    """Help that reads at any width, 80 columns in a pipe included (click's plain formatter, which wraps and
    never cuts): each command's docstring as flowing paragraphs (its own line breaks, made for the source's
    width, joined), its first paragraph whole in the command list (click shortens it with "..."), and no line
    broken at a hyphen (``train-victim``, ``gradleak-bench`` stay whole)."""
    import importlib
    import inspect

    for info in app.registered_commands:
        doc = info.help or inspect.getdoc(info.callback) or ""
        info.help = "\n\n".join(" ".join(part.split()) for part in doc.split("\n\n"))
        info.short_help = info.short_help or info.help.split("\n\n")[0]
    for name in ("typer._click._textwrap", "click._textwrap"):  # what each formatting.wrap_text imports per call
        try:
            module = importlib.import_module(name)
        except ImportError:  # another typer or click: its own wrapping
            continue
        base = module.TextWrapper
        if getattr(base, "whole_words", False):
            continue

        class _WholeWords(base):  # type: ignore[misc, valid-type]
            whole_words = True

            def __init__(self, *args: object, **kwargs: object) -> None:
                kwargs.setdefault("break_on_hyphens", False)
                super().__init__(*args, **kwargs)

        module.TextWrapper = _WholeWords


_reflow_help()


def _plain_warnings() -> None:
    """A warning the command raises (a run folder started afresh, a torn log line, a prior refitted) printed as
    one plain line on stderr, ``warning: MESSAGE``: Python's default format adds the file:line and the source
    line, which read like a crash. Code that catches warnings (``pytest.warns``) still gets them."""
    import warnings

    from gradleak_bench.errors import Notice

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        kind = "" if issubclass(category, UserWarning) else f" ({category.__name__})"
        text = " ".join(str(message).split())
        try:
            (file or sys.stderr).write(f"{text}\n" if issubclass(category, Notice) else f"warning{kind}: {text}\n")
        except (OSError, ValueError):  # stderr closed: nothing to tell
            pass

    warnings.showwarning = show


def main() -> None:
    _plain_warnings()
    try:
        app()
    except SystemExit as exc:
        if _state["durable"]:
            _exit_now(exc.code)
        raise
    except GradleakError as exc:
        from rich.markup import escape

        err_console.print(f"[bold red]error:[/bold red] {escape(str(exc))}", soft_wrap=True)  # one line in a log
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted; finished results are kept")
        sys.exit(130)


def _exit_now(code: int | str | None) -> None:
    """End the process as interpreter exit does, minus the module teardown: CPython's destruction of the
    thousands of objects torch, SB3 and W&B imported takes 0.3-1 s of a warm `evaluate` (docs/evaluate.md,
    "Speed") and writes nothing. Safe only once the command's results are durable (``_state["durable"]``):
    results.json, episodes.csv/.jsonl and the run store are written atomically and closed, the W&B run is
    finished, the plug-in processes and the executor have ended. What exit still owes is done here, in the
    interpreter's own order: join the non-daemon threads, run the ``atexit`` callbacks (W&B's service
    teardown, ``logging.shutdown``, temporary folders' finalizers), flush stdout and stderr. Only ``__del__``
    methods of objects still alive are skipped; none of them holds unwritten data."""
    import atexit
    import os
    import threading

    shutdown = getattr(threading, "_shutdown", None)  # what Py_FinalizeEx runs first
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): printed, status 1, as the interpreter does
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


if __name__ == "__main__":
    main()
