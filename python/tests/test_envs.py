"""The Python environments on both backends: the Gymnasium and PettingZoo API checkers,
the vectorised step, bad input, and determinism per seed."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from pettingzoo.test import parallel_api_test

from greenwave import NativeEnv, ParallelSignalEnv, SignalEnv, VecSignalEnv, export_mlp

FIXTURES = Path(__file__).resolve().parents[2] / "crates" / "sim" / "fixtures" / "sumo"


def sumo_available() -> bool:
    home = os.environ.get("SUMO_HOME")
    return bool(home) and (Path(home) / "bin" / "sumo").exists()


# Outside CI a machine without SUMO skips the SUMO cases; in CI they must run.
needs_sumo = pytest.mark.skipif(
    not sumo_available() and not os.environ.get("CI"),
    reason="SUMO_HOME is not set (pip install eclipse-sumo==1.28.0)",
)


def sumo_single(**kw):
    args = dict(backend="sumo", net=str(FIXTURES / "single.net.xml"), routes=str(FIXTURES / "single.rou.xml"), episode_s=300)
    args.update(kw)
    return args


def sumo_grid(**kw):
    args = dict(backend="sumo", net=str(FIXTURES / "grid2x2.net.xml"), routes=[str(FIXTURES / "grid2x2.rou.xml")], episode_s=300)
    args.update(kw)
    return args


@pytest.mark.parametrize("mask_in_obs", [False, True])
def test_gymnasium_checker_passes_on_the_embedded_simulator(mask_in_obs):
    check_env(SignalEnv(scenario="single-4way", mask_in_obs=mask_in_obs), skip_render_check=True)


@needs_sumo
def test_gymnasium_checker_passes_on_sumo():
    check_env(SignalEnv(**sumo_single()), skip_render_check=True)


def test_pettingzoo_parallel_api_passes_on_the_embedded_simulator():
    parallel_api_test(ParallelSignalEnv(scenario="arterial-3"), num_cycles=1000)


@needs_sumo
def test_pettingzoo_parallel_api_passes_on_sumo():
    env = ParallelSignalEnv(**sumo_grid())
    assert env.possible_agents == ["A0", "A1", "B0", "B1"]
    parallel_api_test(env, num_cycles=100)


def test_an_episode_truncates_at_its_length_with_the_eval_metrics():
    env = SignalEnv(scenario="single-4way", episode_s=600)
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    assert info["action_mask"].shape == (4,)
    steps = 0
    while True:
        obs, reward, terminated, truncated, info = env.step(int(np.argmax(info["action_mask"])))
        steps += 1
        assert not terminated
        if truncated:
            break
    assert steps == 600 // 5
    m = info["episode_metrics"]
    assert {"mean_delay_s", "mean_wait_s", "throughput_veh", "backlog_veh"} <= set(m)
    assert m["sim_seconds"] == 600
    assert m["throughput_veh"] > 0


def run_fixed(env_kwargs, seed, actions):
    env = SignalEnv(**env_kwargs)
    env.reset(seed=seed)
    rewards = [env.step(a)[1] for a in actions]
    return rewards, env.metrics()


def test_the_same_seed_gives_the_same_episode():
    actions = [k // 6 % 4 for k in range(120)]
    a = run_fixed(dict(scenario="single-4way"), 7, actions)
    b = run_fixed(dict(scenario="single-4way"), 7, actions)
    c = run_fixed(dict(scenario="single-4way"), 8, actions)
    assert a[0] == b[0]
    assert a[1]["mean_delay_s"] == b[1]["mean_delay_s"]
    assert a[0] != c[0]


def test_the_mask_is_the_sequencers():
    env = SignalEnv(scenario="single-4way")
    _, info = env.reset(seed=1)
    # Before min green only the green phase itself may be requested.
    assert info["action_mask"].sum() == 1
    for _ in range(5):
        _, _, _, _, info = env.step(int(np.argmax(info["action_mask"])))
    assert info["action_mask"].sum() == 4
    assert (env.action_masks() == info["action_mask"].astype(bool)).all()


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown backend `carla`"):
        SignalEnv(backend="carla")
    with pytest.raises(ValueError, match="nope"):
        SignalEnv(scenario="nope")
    with pytest.raises(ValueError, match="`speed`: unknown reward"):
        SignalEnv(reward="speed")
    with pytest.raises(ValueError, match="net="):
        SignalEnv(backend="sumo")
    with pytest.raises(ValueError, match="ParallelSignalEnv"):
        SignalEnv(scenario="arterial-3")
    with pytest.raises(ValueError, match="unknown argument `sceanrio`"):
        SignalEnv(sceanrio="single-4way")
    with pytest.raises(ValueError, match="episode_s= must be a number"):
        SignalEnv(episode_s="long")
    with pytest.raises(ValueError, match="reward= must be a string"):
        SignalEnv(reward=3)
    with pytest.raises(ValueError, match="net= must be a path"):
        SignalEnv(backend="sumo", net=3)
    with pytest.raises(ValueError, match="seed= must be a non-negative integer"):
        NativeEnv(scenario="single-4way", seed=-1)
    with pytest.raises(ValueError, match="whole seconds"):
        SignalEnv(scenario="single-4way", episode_s=0.5)
    # Each copy holds a simulator: a count that could only exhaust memory is refused.
    with pytest.raises(ValueError, match="n_envs must be 1 to 1024"):
        VecSignalEnv(10**9, scenario="single-4way")
    with pytest.raises(ValueError, match="n_envs must be 1 to 1024"):
        VecSignalEnv(0, scenario="single-4way")
    env = SignalEnv(scenario="single-4way")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action 9 is not a phase"):
        env.step(9)
    for bad in [2.5, 2.0, float("nan"), None, "1", True, np.array([1, 2]), [[1], [2, 3]]]:
        with pytest.raises(TypeError, match="is not a phase index"):
            env.step(bad)
    with pytest.raises(ValueError, match="is not a phase"):
        env.step(np.uint64(2**63))
    env.step(np.int64(1))
    env.step(np.array([1]))
    native = NativeEnv(scenario="arterial-3")
    native.reset(0)
    with pytest.raises(ValueError, match="expected 3 actions"):
        native.step([0])


def test_sumo_only_timing_is_refused_on_the_embedded_simulator():
    # The embedded scenario has its own timing: a SUMO timing keyword would be ignored.
    for kw in [dict(yellow_s=4), dict(min_green_s=20), dict(all_red_s=1), dict(max_green_s=40),
               dict(begin_s=0), dict(timing="t.toml"), dict(program="0")]:
        with pytest.raises(ValueError, match="are for backend=\"sumo\""):
            SignalEnv(scenario="single-4way", **kw)
    with pytest.raises(ValueError, match="yellow_s= must be a number"):
        SignalEnv(scenario="single-4way", yellow_s="banana")


def test_a_short_episode_of_short_decisions_is_taken():
    env = SignalEnv(scenario="single-4way", episode_s=4, decision_interval_s=2)
    env.reset(seed=0)
    _, _, _, truncated, _ = env.step(0)
    assert not truncated
    _, _, _, truncated, _ = env.step(0)
    assert truncated
    # A decision interval longer than the scenario's episode, with an episode to fit it.
    SignalEnv(scenario="single-4way", episode_s=8000, decision_interval_s=4000)
    assert NativeEnv(reward="delay-delta").reward_name() == "delay-delta"


def test_close_releases_the_environment():
    import gc
    import weakref

    env = SignalEnv(scenario="single-4way")
    env.reset(seed=0)
    native = weakref.ref(env._native_env)
    env.close()
    gc.collect()
    assert native() is None, "the native environment (and its SUMO) outlived close()"
    with pytest.raises(RuntimeError, match="closed"):
        env.step(0)
    env.close()  # twice is fine
    vec = VecSignalEnv(2, scenario="single-4way")
    native = weakref.ref(vec._native_env)
    vec.close()
    gc.collect()
    assert native() is None
    with pytest.raises(RuntimeError, match="closed"):
        vec.reset(0)
    # Asking a PettingZoo environment for its spaces does not keep it alive.
    par = ParallelSignalEnv(scenario="arterial-3")
    par.observation_space(par.possible_agents[0])
    par.action_space(par.possible_agents[0])
    gone = weakref.ref(par)
    del par
    gc.collect()
    assert gone() is None, "something kept the environment alive"


@needs_sumo
def test_sumo_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="missing.net.xml"):
        SignalEnv(backend="sumo", net=str(tmp_path / "missing.net.xml"), routes="r.rou.xml")
    with pytest.raises(ValueError, match="yellow"):
        SignalEnv(**sumo_single(yellow_s=1.0))
    with pytest.raises(ValueError, match="not a multiple of the SUMO step length 0.3 s"):
        SignalEnv(**sumo_single(step_length_s=0.3))
    with pytest.raises(ValueError, match="program_intergreens= and pedestrian_weight= are for"):
        SignalEnv(scenario="single-4way", step_length_s=0.5)
    with pytest.raises(ValueError, match="pedestrian_weight= are for backend"):
        SignalEnv(scenario="single-4way", program_intergreens=False)
    with pytest.raises(ValueError, match="pedestrian_weight= are for backend"):
        SignalEnv(scenario="single-4way", pedestrian_weight=1.0)
    with pytest.raises(ValueError, match="pedestrian_weight = -1 must be a non-negative number"):
        SignalEnv(**sumo_single(pedestrian_weight=-1.0))


@needs_sumo
def test_sumo_step_length_reaches_sumo():
    # Half-second steps move the same traffic differently from whole ones; one step
    # (1 s, the default) gives exactly the default's episode.
    def delay(**kw):
        env = NativeEnv(**sumo_single(episode_s=120, **kw), seed=3)
        env.reset(3)
        done, t = False, 0
        while not done:
            _, _, done = env.step([t // 6 % 2])
            t += 1
        return json.loads(env.metrics_json())["mean_delay_s"]

    whole = delay()
    assert delay(step_length_s=1.0) == whole
    assert delay(step_length_s=0.5) != whole


@needs_sumo
def test_sumo_takes_additional_files_and_options(tmp_path):
    # A program of three green phases in an additional file replaces the net's two.
    plan = tmp_path / "plan.add.xml"
    plan.write_text(
        '<additional><tlLogic id="A0" programID="three" offset="0" type="static">'
        '<phase duration="30" state="GGGgrrrrGGGgrrrr"/><phase duration="3" state="yyyyrrrryyyyrrrr"/>'
        '<phase duration="20" state="rrrrGGGgrrrrrrrr"/><phase duration="3" state="rrrryyyyrrrrrrrr"/>'
        '<phase duration="20" state="rrrrrrrrrrrrGGGg"/><phase duration="3" state="rrrrrrrrrrrryyyy"/>'
        "</tlLogic></additional>"
    )
    assert SignalEnv(**sumo_single()).action_space.n == 2
    env = SignalEnv(**sumo_single(additional=str(plan), sumo_args=["--xml-validation", "never"]))
    assert env.action_space.n == 3
    env.reset(seed=1)
    env.step(2)
    with pytest.raises(ValueError, match="additional="):
        SignalEnv(scenario="single-4way", additional=str(plan))
    with pytest.raises(ValueError, match="sumo_args= must be a list of strings"):
        SignalEnv(**sumo_single(sumo_args="--xml-validation never"))


@needs_sumo
def test_sumo_reads_a_configuration_file(tmp_path):
    # The fixture's own single.sumocfg (relative file names) gives the net and routes.
    def delay(**kw):
        env = SignalEnv(backend="sumo", episode_s=300, **kw)
        env.reset(seed=3)
        done = False
        while not done:
            _, _, done, truncated, _ = env.step(0)
            done = done or truncated
        return env.metrics()

    own = delay(sumocfg=str(FIXTURES / "single.sumocfg"))
    assert own == delay(net=str(FIXTURES / "single.net.xml"), routes=str(FIXTURES / "single.rou.xml")) | {
        "wall_seconds": own["wall_seconds"]
    }
    # Its options reach SUMO (scale 0.3 thins the demand) unless sumo_args gives them too.
    cfg = tmp_path / "thin.sumocfg"
    cfg.write_text(
        f'<configuration><net-file value="{FIXTURES / "single.net.xml"}"/>'
        f'<route-files value="{FIXTURES / "single.rou.xml"}"/><scale value="0.3"/></configuration>'
    )
    thin = delay(sumocfg=str(cfg))
    # Its demand in additional files only, as SUMO's game `square` has it: it runs.
    extra = tmp_path / "in-additional.sumocfg"
    extra.write_text(
        f'<configuration><net-file value="{FIXTURES / "single.net.xml"}"/>'
        f'<additional-files value="{FIXTURES / "single.rou.xml"}"/></configuration>'
    )
    assert delay(sumocfg=str(extra))["throughput_veh"] > 0.8 * own["throughput_veh"]
    with pytest.raises(ValueError, match="at least one route file"):
        SignalEnv(backend="sumo", net=str(FIXTURES / "single.net.xml"))
    assert thin["throughput_veh"] < 0.6 * own["throughput_veh"]
    assert delay(sumocfg=str(cfg), sumo_args=["--scale", "1"])["throughput_veh"] == own["throughput_veh"]
    with pytest.raises(ValueError, match="sumocfg="):
        SignalEnv(scenario="single-4way", sumocfg=str(cfg))
    cfg.write_text("<routes/>")
    with pytest.raises(ValueError, match="root element is <routes>"):
        SignalEnv(backend="sumo", sumocfg=str(cfg))


def test_vectorised_step_stacks_and_resets_each_copy():
    vec = VecSignalEnv(4, scenario="single-4way", episode_s=100)
    obs = vec.reset(seed=5)
    assert obs.shape == (4, 1, 31) and obs.dtype == np.float32
    assert vec.action_masks().shape == (4, 1, 4)
    dones_seen = 0
    for _ in range(20):
        obs, rewards, dones = vec.step(np.zeros((4, 1), dtype=np.int64))
        assert rewards.shape == (4, 1) and dones.shape == (4,)
        dones_seen += int(dones.sum())
    # 100 s of 5 s decisions: every copy ended once, at the same step, and started again.
    assert dones_seen == 4
    assert all(vec.last_metrics(k)["sim_seconds"] == 100 for k in range(4))
    with pytest.raises(ValueError, match="expected actions for 4 environments"):
        vec.step(np.zeros((3, 1), dtype=np.int64))
    with pytest.raises(TypeError, match="not phase indices"):
        vec.step(np.full((4, 1), 1.5, dtype=np.float32))
    with pytest.raises(ValueError, match="expected a 2-D array"):
        vec.step(np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match="copy -1 is not one of"):
        vec.last_metrics(-1)


def test_vectorised_copies_equal_single_environments():
    # Copy k of a vector seeded s runs the episode of a single environment seeded s + k.
    actions = [k // 4 % 4 for k in range(40)]
    vec = VecSignalEnv(2, scenario="single-4way")
    vec.reset(seed=10)
    vec_rewards = [vec.step(np.array([[a], [a]]))[1] for a in actions]
    for k in range(2):
        native = NativeEnv(scenario="single-4way")
        native.reset(10 + k)
        single = [native.step([a])[1][0] for a in actions]
        assert single == [r[k, 0] for r in vec_rewards]


@needs_sumo
def test_vectorised_sumo_environments():
    vec = VecSignalEnv(2, **sumo_grid(episode_s=60))
    obs = vec.reset(seed=1)
    assert obs.shape[:2] == (2, 4)
    for _ in range(12):
        obs, rewards, dones = vec.step(np.zeros((2, 4), dtype=np.int64))
    assert dones.all()
    assert vec.last_metrics(1)["sim_seconds"] >= 60


def zero_layer(outputs, inputs):
    return np.zeros((outputs, inputs), np.float32), np.zeros(outputs, np.float32)


@needs_sumo
def test_sumo_pedestrian_zones_add_two_lanes_per_crossing():
    peds = dict(backend="sumo", net=str(FIXTURES / "peds.net.xml"), episode_s=300,
                routes=[str(FIXTURES / "peds.rou.xml"), str(FIXTURES / "peds.walks.xml")])
    plain = SignalEnv(**peds)
    zoned = SignalEnv(**peds, pedestrian_zones=True)
    # Four crossings, two zones each, a density and a queue per zone.
    assert zoned.observation_space.shape[0] == plain.observation_space.shape[0] + 16
    lanes = (zoned.observation_space.shape[0] - zoned.action_space.n - 3) // 2
    obs, info = zoned.reset(seed=1)
    seen = 0.0
    for _ in range(30):
        seen += float(obs[lanes - 8 : lanes].sum())
        obs, _, _, _, info = zoned.step(int(np.argmax(info["action_mask"])))
    assert seen > 0.0, "nobody at or on a crossing in 150 s of walks"
    with pytest.raises(ValueError, match="pedestrian_zones= is for backend"):
        SignalEnv(scenario="single-4way", pedestrian_zones=True)
    # A net without crossings observes the same either way.
    assert SignalEnv(**sumo_single(pedestrian_zones=True)).observation_space == SignalEnv(**sumo_single()).observation_space


@needs_sumo
def test_sumo_program_clock_adds_one_lane_per_phase(tmp_path):
    plain = SignalEnv(**sumo_single())
    clocked = SignalEnv(**sumo_single(program_clock=True))
    p = plain.action_space.n
    dim = clocked.observation_space.shape[0]
    assert dim == plain.observation_space.shape[0] + 2 * p
    lanes = (dim - p - 3) // 2  # the detector lanes, then the clock's P
    obs, _ = clocked.reset(seed=1)
    seen = set()
    for _ in range(40):  # 200 s: more than one cycle of the fixture's 90 s program
        clock, clock_queue = obs[lanes - p : lanes], obs[2 * lanes - p : 2 * lanes]
        assert sorted(clock.tolist()) == [0.0] * (p - 1) + [1.0]
        assert not clock_queue.any()
        seen.add(int(np.argmax(clock)))
        obs = clocked.step(0)[0]
    assert seen == set(range(p))
    # The export says so, and a controller then supplies the clock (manifest `program_clock`).
    for env, name, want in ((clocked, "c", True), (plain, "p", False)):
        d = env.observation_space.shape[0]
        actor = [zero_layer(8, d), zero_layer(p, 8)]
        critic = [zero_layer(8, d), zero_layer(1, 8)]
        files = export_mlp(env, tmp_path / f"{name}.onnx", actor, critic)
        manifest = json.loads(files[3].read_text())
        assert manifest["program_clock"] is want
    with pytest.raises(ValueError, match="program_clock= is for backend"):
        SignalEnv(scenario="single-4way", program_clock=True)
    SignalEnv(scenario="single-4way", program_clock=False)  # shared keyword sets stay valid
    with pytest.raises(ValueError, match="program_clock= must be True or False"):
        SignalEnv(**sumo_single(program_clock="yes"))
