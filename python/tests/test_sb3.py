"""Stable-Baselines3 PPO trains through the package; its exported policy computes what SB3's
own does, and is bundled, verified and run by greenwave-controller for a simulated hour
with its transition log. Needs stable-baselines3 (and so torch): skipped without it outside
CI; CI installs it."""

import json
import os

import numpy as np
import pytest

from greenwave import SignalEnv, export_sb3

from test_export import binaries, run

if not os.environ.get("CI"):
    pytest.importorskip("stable_baselines3")
import stable_baselines3  # noqa: E402  (CI: a missing install fails here)
import torch  # noqa: E402


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    env = SignalEnv(scenario="single-4way", episode_s=600)
    model = stable_baselines3.PPO(
        "MlpPolicy", env, n_steps=256, batch_size=64, n_epochs=2, seed=1, device="cpu", verbose=0
    )
    model.learn(total_timesteps=1024)
    assert model.num_timesteps >= 1024
    return model, env


def test_the_export_computes_what_sb3_computes(trained, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    model, env = trained
    onnx = export_sb3(model, env, tmp_path / "sb3.onnx", seed=1)[0]
    obs = [env.reset(seed=3)[0]]
    for a in [0, 1, 2, 3, 1, 0, 2]:
        for _ in range(3):
            obs.append(env.step(a)[0])
    batch = np.stack(obs).astype(np.float32)
    with torch.no_grad():
        t = torch.as_tensor(batch)
        logits = model.policy.get_distribution(t).distribution.logits.numpy()
        values = model.policy.predict_values(t).numpy()
    got_logits, got_values = ort.InferenceSession(str(onnx)).run(["logits", "value"], {"obs": batch})
    # SB3's logits are log-probabilities: the same up to a constant per row.
    shift = got_logits - logits
    np.testing.assert_allclose(shift, shift[:, :1].repeat(shift.shape[1], 1), atol=1e-4)
    np.testing.assert_allclose(got_values, values, atol=1e-4)
    manifest = json.loads(onnx.with_suffix(".manifest.json").read_text())
    assert manifest["provenance"]["algorithm"] == "sb3-ppo"
    assert manifest["provenance"]["env_steps"] >= 1024


def test_an_sb3_policy_runs_in_the_controller(trained, tmp_path):
    gw, ctl = binaries()
    model, env = trained
    onnx = export_sb3(model, env, tmp_path / "sb3.onnx")[0]
    keys = tmp_path / "site"
    run(gw, "keygen", "--out", keys)
    bundle = tmp_path / "bundle"
    run(gw, "bundle", onnx, "--key", f"{keys}.key", "--out", bundle)
    trust = f"{keys}.pub"
    run(ctl, "verify", "--bundle", bundle, "--trust", trust, "--scenario", "single-4way")
    out = run(ctl, "run", "--bundle", bundle, "--trust", trust, "--scenario", "single-4way",
              "--seconds", "3600", "--log-dir", tmp_path / "log", "--json", "--quiet")
    report = json.loads(out.stdout)
    assert report["decisions"] == 720 and report["transitions_committed"] == 720, report
    log = json.loads(run(ctl, "log", "--log-dir", tmp_path / "log", "--json").stdout)
    assert log["records"] == 720, log
