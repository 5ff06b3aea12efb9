"""Reference attacks and defenses, written against exactly the public plug-in API
(:mod:`gradleak_bench.plugins`). Registering them here only records entry points; nothing heavy is
imported until a plug-in is used."""
from gradleak_bench.plugins import register

register("attack", "closed_form", "gradleak_bench.baselines.attacks.closed_form:ClosedFormAction",
         "actions from the policy head's gradient (TRACE's column-sum theorem, QGI's one-hot bias rule)")

register("attack", "closed_form_gaussian",
         "gradleak_bench.baselines.attacks.closed_form_gaussian:ClosedFormGaussian",
         "continuous actions in closed form: Gaussian PPO's mean head + log_std, or SAC's first critic layer")

register("defense", "none", "gradleak_bench.baselines.defenses.basic:NoDefense", "release exact gradients")
register("defense", "gaussian_noise", "gradleak_bench.baselines.defenses.basic:GaussianNoise",
         "add N(0, sigma^2) per coordinate (param: sigma)")
register("defense", "topk", "gradleak_bench.baselines.defenses.basic:TopK",
         "keep the largest `keep` fraction of coordinates per step (param: keep)")

register("attack", "inverting_gradients", "gradleak_bench.baselines.attacks.inverting:InvertingGradients",
         "Geiping et al.: cosine gradient matching + TV, signed Adam, box, restarts (params: preset, iterations, tv)")
register("attack", "dlg", "gradleak_bench.baselines.attacks.inverting:DLG",
         "Zhu et al.: L2 gradient distance, L-BFGS, action optimised jointly (params: preset, iterations)")
register("attack", "idlg", "gradleak_bench.baselines.attacks.inverting:IDLG",
         "Zhao et al.: DLG with the action read from the gradient first (params: preset, iterations)")
register("attack", "qgi", "gradleak_bench.baselines.attacks.inverting:QGI",
         "QGI (DQN): rule action, surrogate <grad_b J, F(x)>, two-stage states, rule Q/TD target (params: preset)")
register("attack", "rgi", "gradleak_bench.baselines.attacks.inverting:RGI",
         "RGI (REINFORCE): surrogate objective, two-stage states, action by enumeration, return (params: preset)")

# The defense suite (issue 7, item 1): baselines/defenses/suite.py, docs/defenses.md.
_SUITE = "gradleak_bench.baselines.defenses.suite"
register("defense", "clip_norm", f"{_SUITE}:ClipNorm", "clip each step's whole gradient to L2 norm C (param: C)")
register("defense", "dp_sgd", f"{_SUITE}:DPSGD",
         "clip each step to C + N(0, (sigma*C)^2), epsilon from Opacus's RDP accountant (params: C, sigma, delta)")
register("defense", "quantize", f"{_SUITE}:Quantize",
         "per-step per-tensor uniform quantisation, 1 bit = signSGD-like (params: bits, stochastic)")
register("defense", "temporal_mean", f"{_SUITE}:TemporalMean",
         "release the mean of each window of k steps, repeated over the window (param: k)")
register("defense", "shuffle_window", f"{_SUITE}:ShuffleWindow", "shuffle step order within windows of k (param: k)")
register("defense", "withhold_layers", f"{_SUITE}:WithholdLayers",
         "release only the named parameters / dotted prefixes, zero the rest (param: layers)")
register("defense", "correlated_noise", f"{_SUITE}:CorrelatedNoise",
         "Gaussian noise AR(1)-correlated across steps, per-step std sigma (params: sigma, rho)")
register("defense", "random_release", f"{_SUITE}:RandomRelease",
         "release each step with probability p, else zeros or the previous release (params: p, fill)")
register("defense", "action_obfuscation", "gradleak_bench.baselines.defenses.action:ActionObfuscation",
         "client-side randomised response on the reported action label (param: p)")

# TRACE (issue 5): baselines/attacks/trace/, docs/trace.md.
_TRACE = "gradleak_bench.baselines.attacks.trace"
register("attack", "trace", f"{_TRACE}:TRACE",
         "TRACE: learned gradient encoder + interleaved causal transformer, autoregressive frames and actions "
         "(params: preset=quick|paper|tiny, weights, train=auto|never|force, seq_len, epochs, ...)")
register("attack", "trace_no_temporal", f"{_TRACE}:TRACENoTemporal",
         "TRACE ablation: single-frame learned inversion (Learning-to-Invert style), same features and budget")
for _n in (1, 4, 8, 16):
    register("attack", f"trace_seq{_n}", f"{_TRACE}:TRACESeq{_n}",
             f"TRACE ablation: context window of {_n} step(s) of gradients and own previous frames")

# Trajectory attacks (issue 6): baselines/attacks/tsp.py, docs/tsp.md.
register("attack", "tsp", "gradleak_bench.baselines.attacks.tsp:TSP",
         "Temporal State Propagator: poses from decoupled actions, a learned blocked-move encoder and damped "
         "RK4 kinematics fit by L-BFGS (params: fit_layouts, damping, yaw_starts, occupancy_weight, iterations)")
register("attack", "dead_reckoning", "gradleak_bench.baselines.attacks.tsp:DeadReckoning",
         "poses by integrating the closed-form actions with the nominal step sizes, collisions ignored")
