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


def phase_indices(actions, what: str = "actions") -> np.ndarray:
    """Actions as phase indices (int64): integers (Python's, NumPy's, integer arrays, as
    Stable-Baselines3 hands them). A float (even 2.0: a phase is not a quantity), a bool,
    None, a string or anything else is refused with ``TypeError``, naming it (``int()``
    turned 2.5 into phase 2 without a word); an integer past int64 with ``ValueError``."""
    try:
        a = np.asarray(actions)
    except Exception as e:  # a ragged list, a tensor that needs grad, an odd __array__
        raise TypeError(f"{what} {actions!r} are not phase indices (integers)") from e
    if not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"{what} {actions!r} are not phase indices (integers)")
    if a.size and a.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{what} {actions!r}: {a.max()} is not a phase")
    return a.astype(np.int64, copy=False)


def phase_index(action, who: str) -> int:
    """One action as a phase index (an integer, or a one-element integer array), by
    :func:`phase_indices`' rule."""
    refused = f"{who}: action {action!r} is not a phase index (an integer)"
    try:
        a = phase_indices(action, f"{who}: action")
    except TypeError as e:
        raise TypeError(refused) from e
    if a.size != 1:
        raise TypeError(refused)
    return int(a.reshape(()))


def metrics(native) -> dict:
    """The episode metrics (same fields as ``greenwave eval``)."""
    return json.loads(native.metrics_json())
