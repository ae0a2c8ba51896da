"""A Gymnasium environment for one signal."""

from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ._handle import NativeHandle
from ._native import NativeEnv
from ._spaces import metrics, observation_space, pack, phase_index


class SignalEnv(NativeHandle, gym.Env):
    """One signal of a greenwave environment as a Gymnasium ``Env``.

    The action is the phase to request (``Discrete(n_phases)``); greenwave's sequencer
    honours it only where it is safe (min green served, yellow and all-red never cut), and
    ``info["action_mask"]`` says which requests it honours now (also in the observation
    with ``mask_in_obs=True``). The observation is greenwave-core's layout: per incoming
    lane density and queue, the phase one-hot, then three sequencer flags. The reward is
    greenwave's (``reward="delay-delta"`` etc.); an episode ends by truncation at its
    length (``episode_s``). Other keyword arguments pick the simulator: ``scenario``/
    ``demand`` (embedded), or ``backend="sumo"`` with ``net``, ``routes``, ``begin_s``,
    ``timing``, ``yellow_s``, ``all_red_s``, ``min_green_s``, ``max_green_s``,
    ``program``, ``program_clock``; ``decision_interval_s`` for both. A net with several
    signals is refused: use :class:`greenwave.ParallelSignalEnv` there.
    """

    metadata = {"render_modes": []}

    def __init__(self, mask_in_obs: bool = False, **kwargs: Any):
        self._native = NativeEnv(**kwargs)
        ids = self._native.signal_ids()
        if len(ids) != 1:
            raise ValueError(
                f"SignalEnv drives one signal, and this environment has {len(ids)} "
                f"({', '.join(ids)}); use greenwave.ParallelSignalEnv for several"
            )
        self.signal_id = ids[0]
        self._mask_in_obs = mask_in_obs
        dim = self._native.obs_dims()[0]
        n = self._native.n_phases()[0]
        self.observation_space = observation_space(dim, n, mask_in_obs)
        self.action_space = spaces.Discrete(n)

    def _out(self, obs: list, mask: Optional[np.ndarray] = None):
        mask = self._native.action_masks()[0] if mask is None else mask
        return pack(obs[0], mask, self._mask_in_obs), {"action_mask": mask.astype(np.int8)}

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        native_seed = int(self.np_random.integers(0, 2**63 - 1))
        obs = self._native.reset(native_seed)
        return self._out(obs)

    def step(self, action):
        obs, rewards, done = self._native.step([phase_index(action, "step")])
        observation, info = self._out(obs)
        if done:
            info["episode_metrics"] = metrics(self._native)
        return observation, float(rewards[0]), False, bool(done), info

    def action_masks(self) -> np.ndarray:
        """The current action mask (for sb3-contrib's MaskablePPO)."""
        return self._native.action_masks()[0]

    def metrics(self) -> dict:
        """The episode's metrics so far (``greenwave eval``'s fields)."""
        return metrics(self._native)
