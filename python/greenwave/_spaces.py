"""Spaces shared by the Gymnasium and PettingZoo environments."""

import json

import numpy as np
from gymnasium import spaces

# Lane readings (density, queue) lie in 0..=1.5 (greenwave-core's MAX_LANE_FRACTION); the
# phase one-hot and the three sequencer flags in 0..=1.
OBS_HIGH = 1.5


def observation_space(dim: int, n_phases: int, mask_in_obs: bool) -> spaces.Space:
    box = spaces.Box(low=0.0, high=OBS_HIGH, shape=(dim,), dtype=np.float32)
    if not mask_in_obs:
        return box
    return spaces.Dict({"observation": box, "action_mask": spaces.MultiBinary(n_phases)})


def pack(obs: np.ndarray, mask: np.ndarray, mask_in_obs: bool):
    if not mask_in_obs:
        return obs
    return {"observation": obs, "action_mask": mask.astype(np.int8)}


def phase_index(action, who: str) -> int:
    """An action as a phase index: an integer (Python's, NumPy's, or a one-element integer
    array, as Stable-Baselines3 hands them). A float (even 2.0: a phase is not a
    quantity), a bool, a string or None is refused, naming it: ``int()`` turned 2.5 into
    phase 2 without a word."""
    a = np.asarray(action)
    if a.size == 1 and np.issubdtype(a.dtype, np.integer):
        return int(a.reshape(()))
    raise TypeError(f"{who}: action {action!r} is not a phase index (an integer)")


def phase_indices(actions) -> np.ndarray:
    """An array of actions as phase indices (int64), refusing any that are not integers."""
    a = np.asarray(actions)
    if not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"actions of dtype {a.dtype} are not phase indices (integers)")
    return a.astype(np.int64, copy=False)


def metrics(native) -> dict:
    """The episode metrics (same fields as ``greenwave eval``)."""
    return json.loads(native.metrics_json())
