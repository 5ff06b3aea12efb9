"""The victim zoo: SB3 models per task at named checkpoints (safetensors + JSON, no pickle)."""
from gradleak_bench.victims.checkpoint import LoadedVictim, load_victim
from gradleak_bench.victims.zoo import CHECKPOINTS, VICTIMS, VictimSpec, get_victim

__all__ = ["CHECKPOINTS", "VICTIMS", "LoadedVictim", "VictimSpec", "get_victim", "load_victim"]
