"""Policies trained in Python, written in greenwave's policy contract.

The result is what ``greenwave export`` writes — ``X.onnx`` (``obs`` → ``logits``, ``value``;
the manifest with the plan hash, observation layout and timing inside), ``X.blob``,
``X.int8.blob`` and ``X.manifest.json`` — so ``greenwave bundle X.onnx --key ... --out B``
signs it and ``greenwave-controller run --bundle B ...`` runs it. The network must be
greenwave's MLP: dense layers with tanh between them (Stable-Baselines3's ``MlpPolicy``
default), the actor giving one logit per phase and the critic one value.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

Layer = tuple  # (weight [out, in], bias [out])


def _native(env):
    # SignalEnv / ParallelSignalEnv hold a NativeEnv; a NativeEnv is one.
    return getattr(env, "_native", env)


def _as_layers(layers: Iterable[Sequence[Any]]) -> list:
    out = []
    for w, b in layers:
        out.append((np.ascontiguousarray(_numpy(w), dtype=np.float32),
                    np.ascontiguousarray(_numpy(b), dtype=np.float32)))
    return out


def _numpy(x) -> np.ndarray:
    # torch tensors without importing torch.
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def export_mlp(
    env,
    path,
    actor: Iterable[Sequence[Any]],
    critic: Iterable[Sequence[Any]],
    *,
    signal: int = 0,
    obs_mean=None,
    obs_std=None,
    clip: float = 10.0,
    algorithm: str = "python",
    seed: int = 0,
    env_steps: int = 0,
    scenario: str = "",
    details: Optional[Mapping[str, Any]] = None,
) -> list[Path]:
    """Writes an MLP policy for ``signal`` of ``env`` (a :class:`SignalEnv`,
    :class:`ParallelSignalEnv` or :class:`NativeEnv`) to ``path`` and its side files.

    ``actor`` and ``critic`` are ``(weight, bias)`` pairs from input to output, weights
    ``[outputs, inputs]`` as ``torch.nn.Linear`` holds them (numpy arrays or torch
    tensors); tanh runs between layers. ``obs_mean``/``obs_std`` are the observation
    normalisation the network was trained with (e.g. a ``VecNormalize``'s ``obs_rms``),
    clipped to ``±clip`` after normalising. Returns the four paths written."""
    provenance = {
        "command": " ".join(sys.argv) or "python",
        "git_rev": "unknown",
        "seed": int(seed),
        "scenario": scenario,
        "algorithm": algorithm,
        "env_steps": int(env_steps),
        "parent_version": None,
        "details": dict(details or {}),
    }
    written = _native(env).export_policy(
        str(path),
        signal,
        _as_layers(actor),
        _as_layers(critic),
        None if obs_mean is None else [float(v) for v in _numpy(obs_mean).ravel()],
        None if obs_std is None else [float(v) for v in _numpy(obs_std).ravel()],
        float(clip),
        json.dumps(provenance),
    )
    return [Path(p) for p in written]


def _linear_stack(state: Mapping[str, Any], prefix: str) -> list:
    idx = sorted(
        {int(m.group(1)) for k in state for m in [re.fullmatch(re.escape(prefix) + r"\.(\d+)\.weight", k)] if m}
    )
    return [(state[f"{prefix}.{i}.weight"], state[f"{prefix}.{i}.bias"]) for i in idx]


def sb3_layers(state_dict: Mapping[str, Any]) -> tuple[list, list]:
    """The actor and critic layers of a Stable-Baselines3 ``ActorCriticPolicy``
    (``MlpPolicy``) state dict: ``mlp_extractor.policy_net`` then ``action_net``, and
    ``mlp_extractor.value_net`` then ``value_net``."""
    for key in ("action_net.weight", "value_net.weight"):
        if key not in state_dict:
            raise ValueError(
                f"not a Stable-Baselines3 MlpPolicy state dict: no `{key}` "
                f"(keys: {', '.join(sorted(state_dict)[:8])}…)"
            )
    actor = _linear_stack(state_dict, "mlp_extractor.policy_net")
    actor.append((state_dict["action_net.weight"], state_dict["action_net.bias"]))
    critic = _linear_stack(state_dict, "mlp_extractor.value_net")
    critic.append((state_dict["value_net.weight"], state_dict["value_net.bias"]))
    return actor, critic


def export_sb3(model, env, path, *, signal: int = 0, obs_mean=None, obs_std=None,
               clip: float = 10.0, seed: int = 0) -> list[Path]:
    """Writes a trained Stable-Baselines3 PPO (or A2C) ``MlpPolicy`` in greenwave's
    contract. Its activation must be tanh (SB3's default for these); a model trained on a
    ``VecNormalize`` env needs that env's ``obs_rms.mean`` and ``sqrt(obs_rms.var + eps)``
    as ``obs_mean`` and ``obs_std``, and its ``clip_obs`` as ``clip``."""
    policy = model.policy
    act = getattr(policy, "activation_fn", None)
    if act is not None and getattr(act, "__name__", "") != "Tanh":
        raise ValueError(
            f"the policy uses {act.__name__}; greenwave's MLP contract has tanh hidden layers "
            "(train with policy_kwargs=dict(activation_fn=torch.nn.Tanh))"
        )
    actor, critic = sb3_layers(policy.state_dict())
    return export_mlp(
        env, path, actor, critic, signal=signal, obs_mean=obs_mean, obs_std=obs_std,
        clip=clip, algorithm=f"sb3-{type(model).__name__.lower()}", seed=seed,
        env_steps=int(getattr(model, "num_timesteps", 0)),
    )
