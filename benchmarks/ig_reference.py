"""``inverting_gradients`` against an independent implementation: breaching 0.1.2's optimisation attack.

breaching (Geiping et al.'s successor of inversefed, PyPI ``breaching==0.1.2``) is run on the SAME released
gradients, from the SAME initial image, at the same budget, learning rate, step-decay rule, signed Adam and box,
with the same victim loss (PointNav PPO at init: the policy's own SB3 modules, the ratio held at 1, the true
advantage and value target), and its reconstruction is compared per pixel and by metric with ours. Both sides are given the
true scalar targets (advantage, return) and the closed-form action, which is exact at init: breaching
optimises the image only, so ours is run with the same known targets (``InvertingGradients.known_scalars``).

What is and is not the same, by construction (the JSON repeats it):

* loss: 1 - cos(g_rec, g) over all parameters, both sides; breaching differentiates the model itself
  (``torch.autograd.grad`` on its parameters), ours the batched matcher. TV: breaching's ``TotalVariation``
  (a convolution with zero padding, so the bottom/right border adds |x| terms, mean over H*W, eps 1e-8) is
  not inversefed's (mean |x[i+1]-x[i]| over the interior), which ours follows. So ``tv=0`` cases compare the
  identical loss; ``tv=0.1`` cases compare each implementation's own TV.
* schedule: breaching decays at ``N // 2.667, N // 1.6, N // 1.142``, ours at ``int(N*3/8), int(N*5/8),
  int(N*7/8)``: identical at N = 100 (37, 62, 87), not at N = 4800 (1799/3000/4203 vs 1800/3000/4200).
* output: breaching returns the iterate after the step with the lowest loss seen, ours the final iterate;
  the per-pixel comparison is against breaching's final iterate (read, not changed: ``final_iterate_attacker``),
  and the iterate breaching returns is scored beside it.

Install (benchmark-only; its dependencies hydra-core, torchvision and lpips are only needed by parts of
breaching this script does not load, which is why it loads ``breaching.attacks`` without the package's
``__init__``):  pip install --no-deps breaching==0.1.2

Run: OMP_NUM_THREADS=1 python benchmarks/ig_reference.py [--frames 4] [--long-frames 2]
     (writes benchmarks/results/ig_reference.json, resumable per case and frame)
"""
from __future__ import annotations

import argparse
import copy
import importlib
import importlib.util
import json
import os
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "ig_reference.json"
TASK, VICTIM, CHECKPOINT, SPLIT = "PointNav", "ppo", "init", "test"
# (name, iterations, tv, signed, frames option): the identical loss after one step and at the quick budget (Adam
# on the sign of the gradient as the paper, and plain Adam), then each side's TV at the quick and source budget
CASES = (("cosine_1", 1, 0.0, True, "frames"), ("cosine_unsigned_100", 100, 0.0, False, "frames"),
         ("cosine_100", 100, 0.0, True, "frames"),
         ("cosine_tv_100", 100, 0.1, True, "frames"), ("cosine_tv_4800", 4800, 0.1, True, "long_frames"))


def load_breaching_attacks() -> types.ModuleType:
    """``breaching.attacks`` without running ``breaching/__init__.py`` (which imports hydra, torchvision and
    lpips for its case builders): the parent packages are registered as bare namespaces over their folders."""
    spec = importlib.util.find_spec("breaching")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("breaching is not installed: pip install --no-deps breaching==0.1.2")
    root = Path(list(spec.submodule_search_locations)[0])
    for name, folder in (("breaching", root), ("breaching.cases", root / "cases"),
                         ("breaching.cases.models", root / "cases" / "models")):
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [str(folder)]
            sys.modules[name] = module
    return importlib.import_module("breaching.attacks")


class Config(dict):
    """The attribute-and-key access breaching expects of its hydra config."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def breaching_config(iterations: int, tv: float, signed: bool) -> Config:
    # breaching/config/attack/invertinggradients.yaml, with the budget, TV and a fixed restart count of one
    return Config(
        type="invertinggradients", attack_type="optimization", label_strategy=None, text_strategy="no-preprocessing",
        token_recovery="from-embedding", normalize_gradients=False, differentiable_augmentations=False,
        init="randn", augmentations=Config(),
        objective=Config(type="cosine-similarity", scale=1.0, task_regularization=0.0),
        regularization=Config(total_variation=Config(scale=tv, inner_exp=1, outer_exp=1)) if tv else Config(),
        restarts=Config(num_trials=1, scoring="cosine-similarity"),
        impl=Config(dtype="float", mixed_precision=False, JIT=""),
        optim=Config(optimizer="adam", signed="hard" if signed else None, step_size=0.1, boxed=True,
                     max_iterations=iterations,
                     step_size_decay="step-lr", langevin_noise=0.0, warmup=0, grad_clip=None,
                     callback=10 ** 9),
    )


def final_iterate_attacker(attacks: types.ModuleType) -> type:
    """breaching's attacker, keeping a handle on its optimisation variable: it returns the iterate after the
    lowest-loss step, and this reads its final iterate too (the algorithm itself is not touched)."""

    class Observed(attacks.OptimizationBasedAttacker):
        def _init_optimizer(self, candidate):
            self.final_iterate = candidate[0]  # updated in place (``candidate.data = ...``) until the end
            return super()._init_optimizer(candidate)

    return Observed


class PolicyOutputs(torch.nn.Module):
    """The victim's SB3 policy as breaching's model: image in [0, 1] -> (logits, value)."""

    def __init__(self, policy: torch.nn.Module):
        super().__init__()
        self.policy = policy

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        features = self.policy.extract_features(u * 255.0)  # SB3 divides image inputs by 255
        latent_pi, latent_vf = self.policy.mlp_extractor(features)
        return torch.cat([self.policy.action_net(latent_pi), self.policy.value_net(latent_vf)], dim=1)


class PolicyOutputs64(PolicyOutputs):
    """The same in float64 (SB3's preprocessing casts image inputs to float32, so its /255 is done here)."""

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        latent_pi, latent_vf = self.policy.mlp_extractor(self.policy.features_extractor(u))
        return torch.cat([self.policy.action_net(latent_pi), self.policy.value_net(latent_vf)], dim=1)


class PPOLoss(torch.nn.Module):
    """SB3's PPO loss of one sample at ratio 1: -A log pi(a|s) - ent_coef H + vf_coef (R - V)^2; labels (B, 3)
    hold the action, the advantage and the value target.

    The ratio is held at 1 as a constant, as the released gradient was taken (and as ours models it): written
    as exp(log pi - log pi.detach()) it has the same value and parameter gradient, but a candidate image then
    also moves the detached reference, which adds a term to the image gradient (measured: 0.5% of it)."""

    def __init__(self, ent_coef: float, vf_coef: float):
        super().__init__()
        self.ent_coef, self.vf_coef = ent_coef, vf_coef

    def forward(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        dist = torch.distributions.Categorical(logits=outputs[:, :-1])
        log_prob = dist.log_prob(labels[:, 0].long())
        value = outputs[:, -1]
        loss = -labels[:, 1] * log_prob - self.ent_coef * dist.entropy() + self.vf_coef * (labels[:, 2] - value) ** 2
        return loss.sum()


def loss_agreement(frames, k: int, policy: torch.nn.Module, param_names: list[str], attacks) -> dict:
    """Both implementations' loss and its gradient with respect to the image, at the same images (the initial
    one and 20 random ones in the box): does the reference compute the same loss? Ours is composed from the
    toolkit exactly as ``inverting_gradients`` composes it (cosine matcher on the victim's own objective)."""
    from gradleak_bench.baselines.attacks.common import rule_actions
    from gradleak_bench.inversion import GradientMatcher, VictimNet, init_unit, original_objective
    from gradleak_bench.records import GradientStream, ObservedEpisode

    episode, t = frames.frame(k)
    stream = frames.gradients(episode)
    inputs = frames.gradients.inputs(dict(episode.steps))
    released = {n: g[t:t + 1] for n, g in stream.tensors.items()}
    scalars = {"advantage": inputs.advantages[t:t + 1].float(), "return": inputs.returns[t:t + 1].float()}
    action = rule_actions(ObservedEpisode("a", np.arange(1), GradientStream(released)), frames.info)
    net = VictimNet(frames.info)
    matcher = GradientMatcher(net, released)
    objective = original_objective(net, action, scalars)
    spec = frames.info.loss
    reference = attacks.OptimizationBasedAttacker(PolicyOutputs(policy), PPOLoss(spec.ent_coef, spec.vf_coef),
                                                  breaching_config(1, 0.0, True))
    reference.objective.initialize(reference.loss_fn, reference.cfg.impl, None)
    model = reference.model_template
    labels = torch.tensor([[float(action[0]), float(scalars["advantage"][0]), float(scalars["return"][0])]])
    target = [released[n][0].float() for n in param_names]
    model64 = PolicyOutputs64(copy.deepcopy(policy)).double()
    target64 = [g.double() for g in target]
    gen = torch.Generator().manual_seed(k)
    points = [init_unit((1, 3, 64, 64), torch.Generator().manual_seed(k))]
    points += [torch.rand((1, 3, 64, 64), generator=gen) for _ in range(20)]
    rows = []
    for x in points:
        u = x.clone().requires_grad_()
        ours = matcher.cosine_loss(lambda: objective(net.features(u * 255.0)))
        (g_ours,) = torch.autograd.grad(ours.sum(), u)
        v = x.clone().requires_grad_()
        theirs, _ = reference.objective(model, target, v, labels)
        (g_theirs,) = torch.autograd.grad(theirs.sum(), v)
        # breaching in float64: the size of float32 rounding in this double backward, for scale
        w = x.double().clone().requires_grad_()
        exact, _ = reference.objective(model64, target64, w, labels.double())
        (g_exact,) = torch.autograd.grad(exact.sum(), w)
        big = g_ours.abs() > 1e-3 * g_ours.abs().max()
        rows.append({"loss_ours": float(ours.detach()), "loss_breaching": float(theirs.detach()),
                     "grad_rel_l2_diff": float((g_ours - g_theirs).norm() / g_theirs.norm()),
                     "grad_sign_disagreement": float((g_ours.sign() != g_theirs.sign()).float().mean()),
                     "grad_rel_l2_diff_ours_vs_float64": float((g_ours.double() - g_exact).norm() / g_exact.norm()),
                     "grad_rel_l2_diff_breaching_vs_float64": float((g_theirs.double() - g_exact).norm()
                                                                    / g_exact.norm()),
                     "grad_sign_disagreement_large": float((g_ours.sign() != g_theirs.sign())[big].float().mean()),
                     "grad_components_below_1e-3_of_max": float((~big).float().mean())})
    worst = lambda key: max(r[key] for r in rows)  # noqa: E731
    return {"frame": frames.names()[k], "points": len(rows),
            "max_loss_abs_diff": max(abs(r["loss_ours"] - r["loss_breaching"]) for r in rows),
            **{f"max_{key}": worst(key) for key in ("grad_rel_l2_diff", "grad_rel_l2_diff_ours_vs_float64",
                                                    "grad_rel_l2_diff_breaching_vs_float64", "grad_sign_disagreement",
                                                    "grad_sign_disagreement_large",
                                                    "grad_components_below_1e-3_of_max")}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=4, help="frames of the 100-iteration cases")
    parser.add_argument("--long-frames", type=int, default=2, help="frames of the 4800-iteration case")
    parser.add_argument("--cases", nargs="*", default=None, choices=["loss_agreement"] + [c[0] for c in CASES],
                        help="default: all")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from budget_curves import Frames, machine, one_step, strict

    from gradleak_bench.baselines.attacks.inverting_gradients import InvertingGradients
    from gradleak_bench.inversion import init_unit
    from gradleak_bench.metrics.registry import get_metric
    from gradleak_bench.records import GradientStream, ObservedEpisode
    from gradleak_bench.metrics.scoring import score
    from gradleak_bench.victims.checkpoint import load_victim

    attacks = load_breaching_attacks()
    frames = Frames(VICTIM, max(args.frames, args.long_frames), task=TASK)
    names = frames.names()
    metrics = [get_metric("rgb_psnr"), get_metric("rgb_ssim")]
    reference_policy = load_victim(TASK, VICTIM, CHECKPOINT).policy  # breaching's own copy, trainable
    released_names = list(frames.info.gradient_shapes)
    param_names = [n for n, _ in reference_policy.named_parameters()]
    if param_names != released_names:
        raise SystemExit(f"breaching matches model.parameters() in order; the released gradients are {released_names}")
    loss_spec = frames.info.loss
    record = json.loads(OUT.read_text()) if OUT.is_file() else {}
    record.update(task=TASK, victim=VICTIM, checkpoint=CHECKPOINT, split=SPLIT, reference="breaching 0.1.2 (PyPI)",
                  threads=torch.get_num_threads(), note=__doc__.split("What is and is not the same")[0].strip())
    record.setdefault("cases", {})

    attacker_class = final_iterate_attacker(attacks)
    agreement = record.setdefault("loss_agreement", [])
    for k in range(args.frames if args.cases is None or "loss_agreement" in args.cases else 0):
        if any(a["frame"] == names[k] for a in agreement):
            continue
        agreement.append(loss_agreement(frames, k, reference_policy, param_names, attacks))
        OUT.write_text(json.dumps(strict(record), indent=1, allow_nan=False) + "\n")
        print("loss_agreement", agreement[-1], flush=True)
    for case, iterations, tv, signed, option in CASES:
        if args.cases is not None and case not in args.cases:
            continue
        entry = record["cases"].setdefault(case, {"iterations": iterations, "tv": tv, "signed": signed,
                                                        "frames": []})
        done = {f["frame"] for f in entry["frames"]}
        for k in range(getattr(args, option)):
            if names[k] in done:
                continue
            episode, t = frames.frame(k)
            stream = frames.gradients(episode)
            inputs = frames.gradients.inputs(dict(episode.steps))
            released = {n: g[t:t + 1] for n, g in stream.tensors.items()}
            truth = {"advantage": inputs.advantages[t:t + 1].float(), "return": inputs.returns[t:t + 1].float()}

            class KnownTargets(InvertingGradients):
                def known_scalars(self, episode, victim):
                    return truth

            ours_attack = KnownTargets(iterations=iterations, tv=tv, signed=signed, seed=k)
            assert ours_attack.supports(frames.info) is None
            observed = ObservedEpisode(f"ref-{k}", np.arange(1), GradientStream(released))
            start, cpu = time.perf_counter(), time.process_time()
            ours = ours_attack.reconstruct(observed, frames.info)
            ours_wall, ours_cpu = time.perf_counter() - start, time.process_time() - cpu
            control = {}
            if iterations <= 100:  # ours against ours on the released gradient times (1 + 1e-6 noise): the float-level
                # difference two implementations have anyway; signed/Adam steps amplify it to +-lr per pixel
                noise = torch.Generator().manual_seed(1000 + k)
                jittered = {n: g * (1 + 1e-6 * torch.randn(g.shape, generator=noise)) for n, g in released.items()}
                again = ours_attack.reconstruct(ObservedEpisode(f"ref-{k}", np.arange(1), GradientStream(jittered)),
                                                frames.info)
                again_u = torch.as_tensor(again.fields["rgb"]).permute(0, 3, 1, 2).float() / 255.0
            action = int(ours.fields["action"][0])
            if action != int(inputs.actions[t]):
                raise SystemExit(f"frame {names[k]}: the rule action {action} is not the true one at init")
            init = init_unit((1, 3, 64, 64), torch.Generator().manual_seed(k))  # ours: this draw, restarts 1
            model = PolicyOutputs(reference_policy)
            attacker = attacker_class(model, PPOLoss(loss_spec.ent_coef, loss_spec.vf_coef),
                                      breaching_config(iterations, tv, signed))
            labels = torch.tensor([[float(action), float(truth["advantage"][0]), float(truth["return"][0])]])
            payload = [dict(parameters=[p.detach().clone() for p in reference_policy.parameters()], buffers=None,
                            metadata=Config(shape=(3, 64, 64), modality="vision"))]
            shared = [dict(gradients=[released[n][0].float() for n in param_names], buffers=None,
                           metadata=dict(num_data_points=1, labels=labels, local_hyperparams=None))]
            # the reference's loss reproduces the released gradient at the true frame (else nothing compares)
            true_u = (torch.as_tensor(inputs.obs[t:t + 1]).float() / 255.0)
            g_true = torch.autograd.grad(PPOLoss(loss_spec.ent_coef, loss_spec.vf_coef)(model(true_u), labels),
                                         list(model.parameters()))
            flat_true = torch.cat([g.reshape(-1) for g in g_true])
            flat_released = torch.cat([released[n][0].float().reshape(-1) for n in param_names])
            cosine_at_truth = float(torch.nn.functional.cosine_similarity(flat_true, flat_released, dim=0))
            start, cpu = time.perf_counter(), time.process_time()
            theirs, _ = attacker.reconstruct(payload, shared, server_secrets={}, initial_data=init.clone())
            ref_wall, ref_cpu = time.perf_counter() - start, time.process_time() - cpu
            ours_u = torch.as_tensor(ours.fields["rgb"]).permute(0, 3, 1, 2).float() / 255.0
            if iterations <= 100:
                self_diff = (ours_u - again_u).abs()
                control = {"self_max_abs_diff_unit": float(self_diff.max()),
                           "self_mean_abs_diff_unit": float(self_diff.mean()),
                           "self_metric_diff": {m: v - w for (m, v), w in zip(
                               score(metrics, {"rgb": ours.fields["rgb"]}, one_step(episode, t))[0].items(),
                               score(metrics, {"rgb": again.fields["rgb"]}, one_step(episode, t))[0].values())}}
            theirs_u = attacker.final_iterate.detach().float()
            returned_u = theirs["data"].detach().float()
            diff = (ours_u - theirs_u).abs()
            truth_episode = one_step(episode, t)
            mine = score(metrics, {"rgb": ours.fields["rgb"]}, truth_episode)[0]
            ref = score(metrics, {"rgb": theirs_u.permute(0, 2, 3, 1).double().numpy() * 255.0}, truth_episode)[0]
            returned_rgb = returned_u.permute(0, 2, 3, 1).double().numpy() * 255.0
            row = {"frame": names[k], "reference_cosine_at_truth": cosine_at_truth,
                   "max_abs_diff_unit": float(diff.max()), "mean_abs_diff_unit": float(diff.mean()),
                   "frac_pixels_diff_over_1_255": float((diff > 1 / 255).float().mean()),
                   "breaching_returned_vs_final_mean_abs_diff": float((returned_u - theirs_u).abs().mean()),
                   "breaching_returned": score(metrics, {"rgb": returned_rgb}, truth_episode)[0],
                   "ours": mine, "breaching_final": ref, "metric_diff": {m: mine[m] - ref[m] for m in mine},
                   "ours_final_loss": float(ours.extras["loss"][0]), **control,
                   "ours_wall_s": round(ours_wall, 2), "ours_cpu_s": round(ours_cpu, 2),
                   "breaching_wall_s": round(ref_wall, 2), "breaching_cpu_s": round(ref_cpu, 2), "machine": machine()}
            entry["frames"].append(row)
            for m in ("max_abs_diff_unit", "mean_abs_diff_unit"):
                entry[f"{m}_max_over_frames"] = max(f[m] for f in entry["frames"])
            entry["metric_diff_mean"] = {m: float(np.mean([f["metric_diff"][m] for f in entry["frames"]]))
                                         for m in row["metric_diff"]}
            OUT.write_text(json.dumps(strict(record), indent=1, allow_nan=False) + "\n")
            print(case, row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
