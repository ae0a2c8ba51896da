"""A policy made in Python, exported in greenwave's contract, then signed by `greenwave
bundle` and run by `greenwave-controller` for a simulated hour with its transition log."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from greenwave import NativeEnv, SignalEnv, export_mlp, export_sb3, sb3_layers

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("GREENWAVE_BIN_DIR", ROOT / "target" / "release"))


def sb3_state_dict(obs_dim, n_phases, hidden=(64, 64), seed=0):
    """A state dict shaped like Stable-Baselines3's PPO MlpPolicy (numpy, no torch)."""
    rng = np.random.default_rng(seed)
    sd = {}
    for net, out in (("policy_net", None), ("value_net", None)):
        width = obs_dim
        for k, h in enumerate(hidden):
            sd[f"mlp_extractor.{net}.{2 * k}.weight"] = rng.normal(0, 0.3, (h, width)).astype(np.float32)
            sd[f"mlp_extractor.{net}.{2 * k}.bias"] = rng.normal(0, 0.1, h).astype(np.float32)
            width = h
    sd["action_net.weight"] = rng.normal(0, 0.3, (n_phases, hidden[-1])).astype(np.float32)
    sd["action_net.bias"] = rng.normal(0, 0.1, n_phases).astype(np.float32)
    sd["value_net.weight"] = rng.normal(0, 0.3, (1, hidden[-1])).astype(np.float32)
    sd["value_net.bias"] = rng.normal(0, 0.1, 1).astype(np.float32)
    return sd


def forward(layers, x):
    for k, (w, b) in enumerate(layers):
        x = x @ w.T + b
        if k + 1 < len(layers):
            x = np.tanh(x)
    return x


def test_sb3_layers_are_read_in_order():
    sd = sb3_state_dict(31, 4, hidden=(8, 16, 32))
    actor, critic = sb3_layers(sd)
    assert [w.shape for w, _ in actor] == [(8, 31), (16, 8), (32, 16), (4, 32)]
    assert [w.shape for w, _ in critic] == [(8, 31), (16, 8), (32, 16), (1, 32)]
    with pytest.raises(ValueError, match="not a Stable-Baselines3 MlpPolicy"):
        sb3_layers({"foo.weight": 1})


def test_the_exported_onnx_computes_the_python_network(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    env = SignalEnv(scenario="single-4way")
    sd = sb3_state_dict(31, 4)
    actor, critic = sb3_layers(sd)
    mean = np.linspace(0.0, 0.3, 31).astype(np.float32)
    std = np.linspace(0.5, 1.5, 31).astype(np.float32)
    files = export_mlp(env, tmp_path / "p.onnx", actor, critic, obs_mean=mean, obs_std=std, clip=5.0)
    assert [f.name for f in files] == ["p.onnx", "p.blob", "p.int8.blob", "p.manifest.json"]
    assert all(f.is_file() for f in files)
    manifest = json.loads(files[3].read_text())
    assert manifest["obs_layout"] == {"n_lanes": 12, "n_phases": 4}
    assert manifest["hidden"] == [64, 64]
    obs, _ = env.reset(seed=2)
    batch = [obs]
    for a in [0, 1, 2, 3, 0, 1]:
        for _ in range(4):
            obs = env.step(a)[0]
        batch.append(obs)
    batch = np.stack(batch).astype(np.float32)
    sess = ort.InferenceSession(str(files[0]))
    logits, value = sess.run(["logits", "value"], {"obs": batch})
    x = np.clip((batch - mean) / std, -5.0, 5.0)
    np.testing.assert_allclose(logits, forward(actor, x), atol=1e-5)
    np.testing.assert_allclose(value, forward(critic, x), atol=1e-5)


def test_bad_networks_are_refused_with_the_layer_named(tmp_path):
    env = NativeEnv(scenario="single-4way")
    actor, critic = sb3_layers(sb3_state_dict(30, 4))  # one input short
    with pytest.raises(ValueError, match="actor layer 0: takes 30 inputs, but 31 come in"):
        export_mlp(env, tmp_path / "p.onnx", actor, critic)
    actor, critic = sb3_layers(sb3_state_dict(31, 3))  # one phase short
    with pytest.raises(ValueError, match="last layer gives 3 outputs; this signal needs 4"):
        export_mlp(env, tmp_path / "p.onnx", actor, critic)
    actor, critic = sb3_layers(sb3_state_dict(31, 4))
    actor[0][0][0, 0] = np.nan
    with pytest.raises(ValueError, match="actor layer 0: a weight or bias is not finite"):
        export_mlp(env, tmp_path / "p.onnx", actor, critic)
    actor, critic = sb3_layers(sb3_state_dict(31, 4))
    with pytest.raises(ValueError, match="obs_std"):
        export_mlp(env, tmp_path / "p.onnx", actor, critic, obs_std=np.zeros(31))
    with pytest.raises(ValueError, match="no signal 3"):
        export_mlp(env, tmp_path / "p.onnx", actor, critic, signal=3)


def test_a_relu_sb3_policy_is_refused():
    class ReLU:  # stands in for torch.nn.ReLU
        pass

    class Policy:
        activation_fn = ReLU

        def state_dict(self):
            return sb3_state_dict(31, 4)

    class Model:
        policy = Policy()

    with pytest.raises(ValueError, match="uses ReLU; greenwave's MLP contract has tanh"):
        export_sb3(Model(), SignalEnv(scenario="single-4way"), "unused.onnx")


def binaries():
    gw, ctl = BIN / "greenwave", BIN / "greenwave-controller"
    if gw.is_file() and ctl.is_file():
        return gw, ctl
    if os.environ.get("CI"):
        pytest.fail(f"greenwave binaries not found in {BIN} (set GREENWAVE_BIN_DIR)")
    pytest.skip(f"greenwave binaries not built in {BIN}")


def run(*args, ok=True):
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600)
    if ok:
        assert out.returncode == 0, f"{args}: {out.stderr}"
    return out


def test_a_python_policy_is_bundled_verified_and_run_by_the_controller(tmp_path):
    gw, ctl = binaries()
    env = SignalEnv(scenario="single-4way")
    actor, critic = sb3_layers(sb3_state_dict(31, 4, seed=4))
    onnx = export_mlp(env, tmp_path / "py.onnx", actor, critic, algorithm="test")[0]
    keys = tmp_path / "keys" / "site"
    run(gw, "keygen", "--out", keys)
    bundle = tmp_path / "bundle"
    run(gw, "bundle", onnx, "--key", f"{keys}.key", "--out", bundle)
    trust = f"{keys}.pub"
    run(ctl, "verify", "--bundle", bundle, "--trust", trust, "--scenario", "single-4way")
    # Bound to its plan: refused on another junction.
    refused = run(ctl, "verify", "--bundle", bundle, "--trust", trust, "--scenario", "arterial-3", ok=False)
    assert refused.returncode != 0
    logs = tmp_path / "log"
    out = run(ctl, "run", "--bundle", bundle, "--trust", trust, "--scenario", "single-4way",
              "--seconds", "3600", "--log-dir", logs, "--json", "--quiet")
    report = json.loads(out.stdout)
    assert report["decisions"] == 720, report
    assert report["transitions_committed"] == 720, report
    assert report["sim_seconds"] == 3600 and report["throughput_veh"] > 0, report
    summary = json.loads(run(ctl, "log", "--log-dir", logs, "--json").stdout)
    assert summary["records"] == 720, summary
