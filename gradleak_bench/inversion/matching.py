"""The batched, differentiable gradient matcher: per frame, the dot product and squared norm between a
candidate's per-sample parameter gradient and the released one, differentiable w.r.t. the candidates."""
from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from gradleak_bench.inversion.network import VictimNet


class GradientMatcher:
    """Per-frame <g_rec, g> and ||g_rec||^2 for a batch of candidates, differentiable w.r.t. them.

    Args:
        net: the victim's network.
        target: released gradients ``{name: (B, *shape)}`` (rows aligned with the candidate batch).
        names: the parameters to match (default: all released ones; QGI/RGI stage 1 uses the linear layers',
            :meth:`VictimNet.stage1_names`).
    """

    def __init__(self, net: VictimNet, target: Mapping[str, torch.Tensor], names: tuple[str, ...] | None = None):
        self.net = net
        names = tuple(names or target)
        owners = {}
        for prefix, layer in net.policy.named_modules():
            if type(layer) in (nn.Linear, nn.Conv2d):
                owners[f"{prefix}.weight"] = (prefix, layer)
                if layer.bias is not None:
                    owners[f"{prefix}.bias"] = (prefix, layer)
        self.layers: dict[str, nn.Module] = {}
        for name in names:
            if name not in owners:
                raise ValueError(f"parameter {name!r} is not the weight or bias of a Linear/Conv2d layer")
            prefix, layer = owners[name]
            self.layers[prefix] = layer
        self.names = names
        self.target = {n: target[n].float() for n in names}
        self.target_norm2 = sum(g.reshape(g.shape[0], -1).double().pow(2).sum(1) for g in self.target.values()).float()

    def terms(self, run: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``run()`` does the candidate forward pass and returns the per-frame objective (B,)."""
        inputs: dict[str, torch.Tensor] = {}
        outputs: dict[str, torch.Tensor] = {}

        def hook_for(prefix: str):
            def hook(_: nn.Module, args: tuple, output: torch.Tensor) -> None:
                if prefix in outputs:
                    raise RuntimeError(f"layer {prefix!r} runs twice in one forward pass")
                inputs[prefix], outputs[prefix] = args[0], output
            return hook

        handles = [layer.register_forward_hook(hook_for(p)) for p, layer in self.layers.items()]
        try:
            objective = run()
        finally:
            for h in handles:
                h.remove()
        used = [p for p in self.layers if p in outputs and outputs[p].requires_grad]
        grads = torch.autograd.grad(objective.sum(), [outputs[p] for p in used], create_graph=True, allow_unused=True)
        batch = objective.shape[0]
        dot = objective.new_zeros(batch)
        norm2 = objective.new_zeros(batch)
        for prefix, g in zip(used, grads):
            if g is None:
                continue
            layer, a = self.layers[prefix], inputs[prefix]
            wname, bname = f"{prefix}.weight", f"{prefix}.bias"
            if isinstance(layer, nn.Linear):
                if wname in self.target:
                    dot = dot + torch.einsum("bo,boi,bi->b", g, self.target[wname], a)
                    norm2 = norm2 + g.pow(2).sum(1) * a.pow(2).sum(1)
                gb = g
            else:
                if wname in self.target:
                    cols = F.unfold(a, layer.kernel_size, layer.dilation, layer.padding, layer.stride)
                    gw = torch.bmm(g.flatten(2), cols.transpose(1, 2))
                    dot = dot + (gw * self.target[wname].reshape(gw.shape)).sum((1, 2))
                    norm2 = norm2 + gw.pow(2).sum((1, 2))
                gb = g.sum((2, 3))
            if bname in self.target:
                dot = dot + (gb * self.target[bname]).sum(1)
                norm2 = norm2 + gb.pow(2).sum(1)
        return dot, norm2

    def cosine_loss(self, run: Callable[[], torch.Tensor]) -> torch.Tensor:
        dot, norm2 = self.terms(run)
        return 1.0 - dot / (norm2.clamp_min(1e-30).sqrt() * self.target_norm2.sqrt())

    def l2_loss(self, run: Callable[[], torch.Tensor]) -> torch.Tensor:
        dot, norm2 = self.terms(run)
        return norm2 - 2.0 * dot + self.target_norm2

