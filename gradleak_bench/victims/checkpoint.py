"""Victim checkpoints on disk: ``<checkpoint>.safetensors`` (the policy's tensors) beside
``<checkpoint>.json`` (the victim spec, its config hash, the weights' sha256, versions, training report).

Committed checkpoints live in ``envs/checkpoints/<task>/<victim>/``; checkpoints trained locally live in
the cache under ``checkpoints/<config hash>/``. No pickle anywhere.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import safetensors.torch
import stable_baselines3
import torch
from stable_baselines3.common.policies import BasePolicy

from gradleak_bench.errors import CorruptFileError
from gradleak_bench.paths import atomic_write_bytes, file_sha256
from gradleak_bench.records import VictimInfo, policy_head_names
from gradleak_bench.victims.card import Located, VictimCard, locate, read_meta, record_card
from gradleak_bench.victims.policies import build_policy
from gradleak_bench.tasks import TaskSpec, get_task
from gradleak_bench.victims.spaces import action_count, task_spaces
from gradleak_bench.victims.zoo import VictimSpec, check_checkpoint, get_victim


@dataclass(frozen=True)
class LoadedVictim:
    spec: VictimSpec
    checkpoint: str
    policy: BasePolicy
    meta: dict[str, Any]
    # its task's environment (observation, action) spaces at its image size, found once when it was built
    spaces: tuple[gym.Space, gym.Space]
    # the checkpoint file it was read from (weights, sha256); None: rebuilt from its seed, or not from a file
    located: Located | None = None

    @property
    def checkpoint_id(self) -> str:
        return f"{self.spec.task}/{self.spec.name}/{self.checkpoint}"


def attacker_copy(victim: LoadedVictim) -> torch.nn.Module:
    """The attacker's own copy of the victim policy: rebuilt from the spec and loaded with the capture
    parameters (a deepcopy fails once SB3 has cached a distribution with grad history in the policy)."""
    policy = build_policy(victim.spec, victim.spaces)
    policy.load_state_dict(victim.policy.state_dict())
    return policy.eval()


def victim_info(victim: LoadedVictim, gradients: Any) -> VictimInfo:
    """The public info of ``victim`` with a fresh policy copy; ``gradients`` gives the released parameter shapes."""
    obs_space, action_space = victim.spaces
    return VictimInfo(
        task=victim.spec.task, victim=victim.spec.name, checkpoint=victim.checkpoint, loss=victim.spec.loss,
        policy=attacker_copy(victim), observation_space=obs_space, action_space=action_space,
        gradient_shapes=gradients.param_shapes, n_actions=action_count(action_space),
    )


def save_checkpoint(policy: BasePolicy, spec: VictimSpec, checkpoint: str, directory: Path,
                    report: dict[str, Any] | None = None) -> Path:
    """Write ``directory/<checkpoint>.safetensors`` and its JSON spec atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{checkpoint}.safetensors.tmp"
    # save_model (not save_file): SB3 shares one feature extractor under several names.
    safetensors.torch.save_model(policy, str(tmp))
    weights = directory / f"{checkpoint}.safetensors"
    tmp.replace(weights)
    meta = {
        "format": "gradleak-bench-checkpoint/1",
        "victim": spec.to_dict(),
        "checkpoint": checkpoint,
        "config_hash": spec.config_hash(),
        "weights_sha256": file_sha256(weights),
        "n_parameters": sum(p.numel() for p in policy.parameters()),
        "torch": torch.__version__,
        "stable_baselines3": stable_baselines3.__version__,
        "report": report or {},
    }
    atomic_write_bytes(directory / f"{checkpoint}.json", json.dumps(meta, indent=1).encode())
    return weights


def load_victim(task: str, victim: str | None = None, checkpoint: str = "init") -> LoadedVictim:
    """The victim ``victim`` of ``task`` at a named checkpoint (:func:`load_spec` of the zoo's spec)."""
    return load_spec(get_victim(task, victim), checkpoint)


def load_spec(spec: VictimSpec, checkpoint: str = "init") -> LoadedVictim:
    """The policy of a resolved victim spec at a named checkpoint (:func:`load_located` of its file).

    ``init`` is rebuilt from its seed when no file exists. ``trained`` must have been committed or trained
    (``gradleak-bench train-victim``); a file written for another spec (config hash) is refused.
    """
    return load_located(spec, get_task(spec.task), checkpoint, locate(spec, check_checkpoint(checkpoint)))


def load_located(spec: VictimSpec, task: TaskSpec, checkpoint: str, located: Located | None) -> LoadedVictim:
    """The policy of a checkpoint already located (:func:`~gradleak_bench.victims.card.locate`, which refused a
    missing or foreign file) of victim ``spec`` of ``task``: a run's plan hands its resolved specs and located
    file here, so nothing is looked up by name again. ``located`` None: an ``init`` rebuilt from its seed. The
    weights must still match their recorded sha256."""
    spaces = task_spaces(task, spec.image_size)
    policy = build_policy(spec, spaces)
    if located is None:
        return LoadedVictim(spec, checkpoint, policy, {"config_hash": spec.config_hash(), "report": {}}, spaces)
    weights, sha = located
    meta = read_meta(weights.with_suffix(".json"))
    if file_sha256(weights) != sha:
        raise CorruptFileError(f"{weights} does not match the sha256 in its JSON: the file is corrupt or edited.")
    try:
        missing, unexpected = safetensors.torch.load_model(policy, str(weights), strict=True)
    except Exception as exc:  # safetensors raises several types for a bad file
        raise CorruptFileError(f"cannot load {weights}: {exc}") from exc
    return LoadedVictim(spec, checkpoint, policy.eval(), meta, spaces, located)


def victim_card(victim: LoadedVictim, gradient_shapes: dict[str, tuple[int, ...]], record: bool = True) -> VictimCard:
    """The public card of a loaded victim; with ``record``, cached when its checkpoint has a file, so the next
    run needs no torch to describe it (:mod:`gradleak_bench.victims.card`)."""
    _, action_space = victim.spaces
    return record_card(victim.spec, victim.checkpoint, victim.located, gradient_shapes, action_count(action_space),
                       policy_head_names(victim.policy), record)
