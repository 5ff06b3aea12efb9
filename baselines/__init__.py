"""Reference attacks and defenses, written against exactly the public plug-in API
(:mod:`gradleak_bench.plugins`). Registering them here only records entry points; nothing heavy is
imported until a plug-in is used."""
from gradleak_bench.plugins import register

register("attack", "closed_form", "gradleak_bench.baselines.attacks.closed_form:ClosedFormAction",
         "actions from the policy head's gradient (TRACE's column-sum theorem, QGI's one-hot bias rule)")

register("defense", "none", "gradleak_bench.baselines.defenses.basic:NoDefense", "release exact gradients")
register("defense", "gaussian_noise", "gradleak_bench.baselines.defenses.basic:GaussianNoise",
         "add N(0, sigma^2) per coordinate (param: sigma)")
register("defense", "topk", "gradleak_bench.baselines.defenses.basic:TopK",
         "keep the largest `keep` fraction of coordinates per step (param: keep)")
