"""CleanRL-style single-file PPO on greenwave's vectorised environment (every signal of
every copy an agent, one shared network, the sequencer's action mask applied to the
logits), exported for the roadside controller at the end.

    pip install ./python torch
    python python/examples/cleanrl_ppo.py --scenario single-4way --steps 200000 --out export/cleanrl.onnx

The network is greenwave's MLP contract (tanh hidden layers, one logit per phase, one
value), so `export_mlp` writes it for `greenwave bundle` as is. Scenarios whose signals
differ in size are zero-padded to the largest (export then needs equal sizes).
"""

import argparse
import time

import numpy as np
import torch
import torch.nn as nn

from greenwave import NativeEnv, VecSignalEnv, export_mlp


def mlp(n_in: int, n_out: int, hidden: int = 64, out_gain: float = 1.0) -> nn.Sequential:
    def layer(i, o, gain):
        lin = nn.Linear(i, o)
        nn.init.orthogonal_(lin.weight, gain)
        nn.init.zeros_(lin.bias)
        return lin

    return nn.Sequential(
        layer(n_in, hidden, np.sqrt(2)), nn.Tanh(),
        layer(hidden, hidden, np.sqrt(2)), nn.Tanh(),
        layer(hidden, n_out, out_gain),
    )


def linear_layers(seq: nn.Sequential):
    return [(m.weight, m.bias) for m in seq if isinstance(m, nn.Linear)]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="single-4way")
    p.add_argument("--steps", type=int, default=200_000, help="agent decisions in all")
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--rollout", type=int, default=128, help="decisions per env and update")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="export/cleanrl.onnx")
    a = p.parse_args()
    gamma, lam, clip, epochs, minibatches, lr = 0.99, 0.95, 0.2, 4, 4, 2.5e-4
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)

    vec = VecSignalEnv(a.envs, scenario=a.scenario)
    n_sig, dim, n_act = len(vec.n_phases), max(vec.obs_dims), max(vec.n_phases)
    agents = a.envs * n_sig
    actor, critic = mlp(dim, n_act, out_gain=0.01), mlp(dim, 1)
    opt = torch.optim.Adam(list(actor.parameters()) + list(critic.parameters()), lr=lr, eps=1e-5)

    obs = torch.as_tensor(vec.reset(a.seed)).reshape(agents, dim)
    mask = torch.as_tensor(vec.action_masks()).reshape(agents, n_act)
    T = a.rollout
    buf_obs = torch.zeros(T, agents, dim)
    buf_mask = torch.zeros(T, agents, n_act, dtype=torch.bool)
    buf_act, buf_logp, buf_rew, buf_done, buf_val = (torch.zeros(T, agents) for _ in range(5))
    ret_scale, decisions, started = 1.0, 0, time.time()
    finished = []

    def dist(x, m):
        logits = actor(x).masked_fill(~m, -1e9)
        return torch.distributions.Categorical(logits=logits)

    while decisions < a.steps:
        for t in range(T):
            with torch.no_grad():
                d = dist(obs, mask)
                act = d.sample()
                buf_logp[t], buf_val[t] = d.log_prob(act), critic(obs).squeeze(-1)
            buf_obs[t], buf_mask[t], buf_act[t] = obs, mask, act
            o, r, done = vec.step(act.reshape(a.envs, n_sig).numpy())
            buf_rew[t] = torch.as_tensor(r).reshape(agents)
            buf_done[t] = torch.as_tensor(np.repeat(done, n_sig)).float()
            for k in np.flatnonzero(done):
                finished.append(vec.last_metrics(int(k))["mean_delay_s"])
            obs = torch.as_tensor(o).reshape(agents, dim)
            mask = torch.as_tensor(vec.action_masks()).reshape(agents, n_act)
        decisions += T * agents
        # Episodes end by truncation: bootstrap through them (the next observation is the
        # new episode's, so the one step across the boundary is cut, as CleanRL does).
        ret_scale = 0.99 * ret_scale + 0.01 * float(buf_rew.std() + 1e-8)
        rew = buf_rew / ret_scale
        with torch.no_grad():
            next_val = critic(obs).squeeze(-1)
            adv = torch.zeros_like(rew)
            last = torch.zeros(agents)
            for t in reversed(range(T)):
                nv = next_val if t == T - 1 else buf_val[t + 1]
                nonterminal = 1.0 - buf_done[t]
                delta = rew[t] + gamma * nv * nonterminal - buf_val[t]
                last = delta + gamma * lam * nonterminal * last
                adv[t] = last
            ret = adv + buf_val
        b_obs, b_mask = buf_obs.reshape(-1, dim), buf_mask.reshape(-1, n_act)
        b_act, b_logp = buf_act.reshape(-1), buf_logp.reshape(-1)
        b_adv, b_ret = adv.reshape(-1), ret.reshape(-1)
        n = b_obs.shape[0]
        for _ in range(epochs):
            for idx in torch.randperm(n).chunk(minibatches):
                d = dist(b_obs[idx], b_mask[idx])
                ratio = (d.log_prob(b_act[idx]) - b_logp[idx]).exp()
                mb_adv = (b_adv[idx] - b_adv[idx].mean()) / (b_adv[idx].std() + 1e-8)
                pg = torch.max(-mb_adv * ratio, -mb_adv * ratio.clamp(1 - clip, 1 + clip)).mean()
                v = ((critic(b_obs[idx]).squeeze(-1) - b_ret[idx]) ** 2).mean()
                loss = pg + 0.5 * v - 0.01 * d.entropy().mean()
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(list(actor.parameters()) + list(critic.parameters()), 0.5)
                opt.step()
        if finished:
            print(f"{decisions:>9} decisions  {decisions / (time.time() - started):8.0f}/s  "
                  f"episode delay {np.mean(finished[-a.envs:]):7.2f} s")
    if len(set(vec.obs_dims)) == 1 and len(set(vec.n_phases)) == 1:
        env = NativeEnv(scenario=a.scenario)
        for s in range(n_sig):
            path = a.out if n_sig == 1 else a.out.replace(".onnx", f".{env.signal_ids()[s]}.onnx")
            for f in export_mlp(env, path, linear_layers(actor), linear_layers(critic), signal=s,
                                algorithm="cleanrl-ppo", seed=a.seed, env_steps=decisions):
                print(f"wrote {f}")


if __name__ == "__main__":
    main()
