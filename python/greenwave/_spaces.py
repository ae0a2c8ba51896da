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


def metrics(native) -> dict:
    """The episode metrics (same fields as ``greenwave eval``)."""
    return json.loads(native.metrics_json())
