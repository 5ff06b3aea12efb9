"""Public victim knowledge as it crosses to a plug-in process: the victim's names and capture weights as plain
arrays, rebuilt on the other side into the attacker's own copy (:class:`~gradleak_bench.records.VictimInfo`)."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gradleak_bench.errors import PluginContractError
from gradleak_bench.records import VictimInfo
from gradleak_bench.victims.checkpoint import LoadedVictim
from gradleak_bench.victims.policies import env_spaces


def attacker_copy(victim: LoadedVictim) -> torch.nn.Module:
    """The attacker's own copy of the victim policy: rebuilt from the spec and loaded with the capture
    parameters (a deepcopy fails once SB3 has cached a distribution with grad history in the policy)."""
    from gradleak_bench.victims.policies import build_policy

    policy = build_policy(victim.spec)
    policy.load_state_dict(victim.policy.state_dict())
    return policy.eval()


def victim_info(victim: LoadedVictim, gradients: Any) -> VictimInfo:
    """The public info of ``victim`` with a fresh policy copy; ``gradients`` gives the released parameter shapes."""
    obs_space, action_space = env_spaces(victim.spec.task, victim.spec.image_size)
    return VictimInfo(
        task=victim.spec.task, victim=victim.spec.name, checkpoint=victim.checkpoint, loss=victim.spec.loss,
        policy=attacker_copy(victim), observation_space=obs_space, action_space=action_space,
        gradient_shapes=gradients.param_shapes, n_actions=int(action_space.n),
    )


def victim_message(victim: LoadedVictim, shapes: dict[str, tuple[int, ...]]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and arrays that let a plug-in process rebuild the victim (names + capture weights)."""
    header = {"task": victim.spec.task, "victim": victim.spec.name, "checkpoint": victim.checkpoint,
              "gradient_shapes": {k: list(v) for k, v in shapes.items()}}
    arrays = {f"s/{k}": v.detach().cpu().numpy() for k, v in victim.policy.state_dict().items()}
    return header, arrays


def rebuild_victim(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> tuple[LoadedVictim, VictimInfo]:
    """The plug-in side of :func:`victim_message`: the victim (for auxiliary data) and the attacker's info."""
    from gradleak_bench.victims.policies import build_policy
    from gradleak_bench.victims.zoo import get_victim

    spec = get_victim(header["task"], header["victim"])
    policy = build_policy(spec)
    state = {k[2:]: torch.from_numpy(np.array(v)) for k, v in arrays.items() if k.startswith("s/")}
    policy.load_state_dict(state, strict=True)
    victim = LoadedVictim(spec, str(header["checkpoint"]), policy.eval(), {})
    shapes = {k: tuple(int(d) for d in v) for k, v in header["gradient_shapes"].items()}

    class _Shapes:
        param_shapes = shapes

    return victim, victim_info(victim, _Shapes)


def check_names(value: Any, what: str) -> tuple[str, ...]:
    """A plug-in's declared ``fields`` (or a name) as plain strings, or a clear contract error."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise PluginContractError(f"{what} must be a tuple of field names (strings), got {value!r}")
    return tuple(value)
