"""Public victim knowledge as it crosses to a plug-in process: the victim's names and capture weights as plain
arrays, rebuilt on the other side into the attacker's own copy (:class:`~gradleak_bench.records.VictimInfo`).

Nothing here imports torch at load: a warm run sends a victim from its card (:mod:`gradleak_bench.victims.card`)
and the plug-in process builds the SB3 policy only when its plug-in first reads ``victim.policy``."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from gradleak_bench.errors import PluginContractError
from gradleak_bench.records import VictimInfo

if TYPE_CHECKING:
    from gradleak_bench.victims.card import VictimCard
    from gradleak_bench.victims.checkpoint import LoadedVictim

__all__ = ["card_message", "check_names", "info_from_message", "rebuild_victim", "victim_message"]


def _header(card: VictimCard) -> dict[str, Any]:
    return {"task": card.spec.task, "victim": card.spec.name, "checkpoint": card.checkpoint,
            "gradient_shapes": {k: list(v) for k, v in card.gradient_shapes.items()},
            "policy_head": None if card.policy_head is None else list(card.policy_head)}


def victim_message(victim: LoadedVictim, card: VictimCard) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and arrays that let a plug-in process rebuild a loaded victim (names + capture weights)."""
    arrays = {f"s/{k}": v.detach().cpu().numpy() for k, v in victim.policy.state_dict().items()}
    return _header(card), arrays


def card_message(card: VictimCard) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """:func:`victim_message` read off the card and the checkpoint file, without torch (the file keeps one name
    per tensor SB3 shares between extractors; the plug-in side loads it as safetensors' ``load_model`` does)."""
    return _header(card), {f"s/{k}": v for k, v in card.arrays().items()}


def rebuild_victim(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> LoadedVictim:
    """The plug-in side of a victim message: the victim's SB3 policy with the capture weights (torch)."""
    import torch

    from gradleak_bench.victims.checkpoint import LoadedVictim
    from gradleak_bench.victims.policies import build_policy
    from gradleak_bench.victims.spaces import env_spaces
    from gradleak_bench.victims.zoo import get_victim

    spec = get_victim(header["task"], header["victim"])
    spaces = env_spaces(spec.task, spec.image_size)
    policy = build_policy(spec, spaces)
    state = {k[2:]: torch.from_numpy(np.array(v)) for k, v in arrays.items() if k.startswith("s/")}
    missing, unexpected = policy.load_state_dict(state, strict=False)
    # a name left out must be another name of a tensor that was loaded (SB3's shared feature extractor)
    tensors = policy.state_dict()
    loaded = {tensors[k].data_ptr() for k in state if k in tensors}
    if unexpected or any(tensors[k].data_ptr() not in loaded for k in missing):
        raise PluginContractError(f"victim weights do not fit {spec.key}: missing {list(missing)[:4]}, "
                                  f"unexpected {list(unexpected)[:4]}")
    return LoadedVictim(spec, str(header["checkpoint"]), policy.eval(), {}, spaces)


def info_from_message(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> VictimInfo:
    """The attacker's :class:`VictimInfo` from a victim message; its policy is built when first read."""
    from gradleak_bench.victims.card import head_from_json
    from gradleak_bench.victims.spaces import action_count, env_spaces
    from gradleak_bench.victims.zoo import get_victim

    spec = get_victim(header["task"], header["victim"])
    obs_space, action_space = env_spaces(spec.task, spec.image_size)
    return VictimInfo.lazy(
        lambda: rebuild_victim(header, arrays).policy,
        task=spec.task, victim=spec.name, checkpoint=str(header["checkpoint"]), loss=spec.loss,
        observation_space=obs_space, action_space=action_space,
        gradient_shapes={k: tuple(int(d) for d in v) for k, v in header["gradient_shapes"].items()},
        n_actions=action_count(action_space),
        policy_head=head_from_json(header.get("policy_head")))


def check_names(value: Any, what: str) -> tuple[str, ...]:
    """A plug-in's declared ``fields`` (or a name) as plain strings, or a clear contract error."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise PluginContractError(f"{what} must be a tuple of field names (strings), got {value!r}")
    return tuple(value)
