"""The optimisation-based inversion attacks, by their former module (kept so ``...attacks.inverting:QGI``
references and imports keep working). Each attack now lives in its own file; the shared machinery is the
public toolkit :mod:`gradleak_bench.inversion`."""
from gradleak_bench.baselines.attacks.common import ObservationAttack, rule_actions, unsupported_head  # noqa: F401
from gradleak_bench.baselines.attacks.dlg import DLG  # noqa: F401
from gradleak_bench.baselines.attacks.idlg import IDLG  # noqa: F401
from gradleak_bench.baselines.attacks.inverting_gradients import InvertingGradients  # noqa: F401
from gradleak_bench.baselines.attacks.qgi import QGI  # noqa: F401
from gradleak_bench.baselines.attacks.rgi import RGI  # noqa: F401
from gradleak_bench.baselines.attacks.two_stage import PRESETS as _PRESETS_QR  # noqa: F401
from gradleak_bench.baselines.attacks.two_stage import TwoStagePipeline, linear_input  # noqa: F401
from gradleak_bench.inversion import *  # noqa: F401,F403
