"""greenwave for Python: traffic-signal control environments on greenwave's simulators.

* :class:`SignalEnv` — a Gymnasium environment driving one signal.
* :class:`ParallelSignalEnv` — a PettingZoo ``ParallelEnv``, every signal an agent.
* :class:`VecSignalEnv` — N copies stepped in one call in Rust (GIL released).
* :func:`export_sb3`, :func:`export_mlp` — a Python-trained MLP policy in greenwave's
  contract (ONNX + manifest + firmware blobs), for ``greenwave bundle``.

All three run either the embedded simulator (``scenario="single-4way"``, a built-in name or a
TOML file) or SUMO (``backend="sumo", net=..., routes=[...]``), with greenwave's phase plans,
safety sequencer (min/max green, yellow, all-red), observations and rewards.
"""

from importlib.util import find_spec

from ._native import NativeEnv, NativeVecEnv
from .export import export_mlp, export_sb3, sb3_layers
from .gym_env import SignalEnv
from .vector import VecSignalEnv

__all__ = [
    "NativeEnv",
    "NativeVecEnv",
    "SignalEnv",
    "VecSignalEnv",
    "export_mlp",
    "export_sb3",
    "sb3_layers",
]
# PettingZoo is optional: `from greenwave import *` names ParallelSignalEnv only where it
# can be imported.
if find_spec("pettingzoo") is not None:
    __all__.append("ParallelSignalEnv")


def __getattr__(name):
    # PettingZoo is optional: import it only when asked for.
    if name == "ParallelSignalEnv":
        from .pettingzoo_env import ParallelSignalEnv

        return ParallelSignalEnv
    raise AttributeError(f"module 'greenwave' has no attribute {name!r}")
