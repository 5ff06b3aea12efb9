"""Public victim knowledge as it crosses to a plug-in process: the victim's names and capture weights as plain
arrays, rebuilt on the other side into the attacker's own copy (:class:`~gradleak_bench.records.VictimInfo`)."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gradleak_bench.errors import PluginContractError
from gradleak_bench.records import VictimInfo
# attacker_copy and victim_info live with LoadedVictim (a layer below run/, so defended training can use them).
from gradleak_bench.victims.checkpoint import LoadedVictim, attacker_copy, victim_info

__all__ = ["attacker_copy", "check_names", "rebuild_victim", "victim_info", "victim_message"]


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
