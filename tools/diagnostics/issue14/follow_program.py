"""Rewrites an MLP policy exported by the program-clock experiment build
(`program-clock.patch`, run with GW_PLAN_CLOCK=1) so that it plays the net's own program:
the phase the observation's program-clock one-hot marks, and nothing else.

usage: python follow_program.py IN.onnx OUT.onnx

The observation of that build is greenwave's layout with P extra "lanes" after the real
zones, whose density is 1 for the phase the light's program serves (or changes to) now.
The rewritten network keeps the export's input, outputs, initializer names and manifest
(so `greenwave eval --model OUT.onnx` loads it): normalisation off, one hidden unit per
phase carrying that phase's clock input to its logit (difference about 20 between the
marked phase and the others), value 0.
"""
import json
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def main(src_path, out_path):
    m = onnx.load(src_path)
    meta = {p.key: p.value for p in m.metadata_props}
    layout = json.loads(meta["greenwave.manifest"])["obs_layout"]
    lanes, phases = layout["n_lanes"], layout["n_phases"]
    dim = 2 * lanes + phases + 3
    w = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    h0 = w["actor.0.weight"].shape[0]
    h1 = w["actor.1.weight"].shape[0]
    if h0 < phases or h1 < phases:
        sys.exit(f"{src_path}: hidden layers narrower than its {phases} phases")
    new = {
        "obs_mean": np.zeros(dim, np.float32),
        "obs_inv_std": np.ones(dim, np.float32),
        "actor.0.bias": np.zeros(h0, np.float32),
        "actor.1.bias": np.zeros(h1, np.float32),
        "actor.2.bias": np.zeros(phases, np.float32),
        "critic.2.weight": np.zeros_like(w["critic.2.weight"]),
        "critic.2.bias": np.zeros_like(w["critic.2.bias"]),
    }
    a0 = np.zeros((h0, dim), np.float32)
    a1 = np.zeros((h1, h0), np.float32)
    a2 = np.zeros((phases, h1), np.float32)
    for p in range(phases):
        a0[p, lanes - phases + p] = 3.0
        a1[p, p] = 3.0
        a2[p, p] = 20.0
    new.update({"actor.0.weight": a0, "actor.1.weight": a1, "actor.2.weight": a2})
    for i, init in enumerate(m.graph.initializer):
        if init.name in new:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(new[init.name], init.name))
    onnx.save(m, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:3])
