"""N copies of one greenwave environment stepped in one call, in Rust."""

from __future__ import annotations

import json
from typing import Any, Optional

import numpy as np

from ._handle import NativeHandle
from ._native import NativeVecEnv
from ._spaces import phase_indices


class VecSignalEnv(NativeHandle):
    """``n_envs`` copies of one environment (embedded or SUMO), stepped together in Rust
    with the GIL released and the copies spread over the cores.

    ``reset(seed)`` returns observations ``[n_envs, n_signals, max_dim]`` (signals with
    smaller observations zero-padded); ``step(actions)`` takes ``[n_envs, n_signals]``
    phase requests and returns observations, rewards ``[n_envs, n_signals]`` and
    ``dones[n_envs]``. A copy whose episode ends is reset at once (its next observation is
    the new episode's first; ``last_metrics(k)`` has the finished episode's metrics)."""

    def __init__(self, n_envs: int, **kwargs: Any):
        self._native = NativeVecEnv(n_envs, **kwargs)
        self.n_envs = n_envs
        self.obs_dims = list(self._native.obs_dims())
        self.n_phases = list(self._native.n_phases())

    def reset(self, seed: int = 0) -> np.ndarray:
        return self._native.reset(seed)

    def step(self, actions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a = phase_indices(actions)
        if a.ndim != 2:
            raise ValueError(
                f"actions of shape {a.shape}: expected a 2-D array "
                f"({self.n_envs} copies × {len(self.n_phases)} signals)"
            )
        return self._native.step(a)

    def action_masks(self) -> np.ndarray:
        return self._native.action_masks()

    def last_metrics(self, k: int) -> Optional[dict]:
        if not 0 <= k < self.n_envs:
            raise ValueError(f"copy {k} is not one of 0..{self.n_envs}")
        text = self._native.last_metrics_json(k)
        return None if text is None else json.loads(text)
