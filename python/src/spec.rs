//! What environment to build: the keyword arguments of `greenwave._native.NativeEnv`, checked
//! once, and the constructor of either backend from them.

use std::path::PathBuf;

use greenwave_core::{Millis, RewardKind};
use greenwave_sim::sumo::{SumoConfig, SumoEnv, TimingOverrides, TimingSpec};
use greenwave_sim::{scenario, EmbeddedEnv, Env};

/// A boxed environment the vectorised step can move between threads.
pub type BoxEnv = Box<dyn Env + Send>;

/// Which simulator.
#[derive(Clone, Debug, PartialEq)]
pub enum Backend {
    /// The embedded simulator, on a built-in scenario or a TOML file.
    Embedded {
        /// Built-in name or path.
        scenario: String,
        /// Demand set, if not the scenario's.
        demand: Option<String>,
    },
    /// SUMO over TraCI.
    Sumo {
        /// The `.net.xml` (or `.net.xml.gz`).
        net: PathBuf,
        /// Route files.
        routes: Vec<PathBuf>,
        /// Additional files (vehicle types, signal programs, ...).
        additional: Vec<PathBuf>,
        /// Further SUMO options.
        sumo_args: Vec<String>,
        /// Simulation time of the episode's start (s).
        begin_s: f64,
        /// SUMO's step (s); 1 s unless given (`greenwave train --step-length`).
        step_length_s: Option<f64>,
        /// TOML timing file.
        timing_file: Option<PathBuf>,
        /// Timing overrides, beating the file.
        overrides: TimingOverrides,
        /// Program to derive plans from, if not each light's active one.
        program: Option<String>,
        /// Observe each light's own program as a clock (`greenwave train
        /// --program-clock`); off unless asked for.
        program_clock: bool,
        /// Observe the pedestrians at each crossing a light controls (`greenwave train
        /// --pedestrian-zones`); off unless asked for.
        pedestrian_zones: bool,
    },
}

/// Everything needed to build one environment.
#[derive(Clone, Debug)]
pub struct EnvSpec {
    /// The simulator and its inputs.
    pub backend: Backend,
    /// Episode length (s); the scenario's, or 3600 s on SUMO.
    pub episode_s: Option<f64>,
    /// Seconds between decisions; the scenario's (or the timing file's), else 5 s.
    pub decision_interval_s: Option<f64>,
    /// Reward; the scenario's on the embedded simulator, `delay-accrued-delta` on SUMO (as
    /// `greenwave train`).
    pub reward: Option<RewardKind>,
    /// What a second a pedestrian stands at a crossing costs in SUMO's delay-accrued
    /// rewards (`greenwave train --pedestrian-weight`); 1 unless given.
    pub pedestrian_weight: Option<f32>,
}

/// A reward by its command-line name (`greenwave train --reward`).
pub fn parse_reward(name: &str) -> Result<RewardKind, String> {
    name.parse().map_err(|e| format!("`{name}`: {e}"))
}

/// Whole seconds for a scenario setting, refusing fractions and nonsense.
fn whole_seconds(name: &str, v: f64) -> Result<Millis, String> {
    // Simulated time is counted in u32 milliseconds.
    let most = u32::MAX / 1000;
    if v.is_finite() && v >= 1.0 && v.fract() == 0.0 && v <= f64::from(most) {
        Ok(Millis::from_secs(v as u32))
    } else {
        Err(format!(
            "{name} = {v}: the embedded simulator takes whole seconds, at least 1 and at most {most}"
        ))
    }
}

impl EnvSpec {
    /// Builds the environment (SUMO is started on the first reset).
    pub fn build(&self, seed: u64) -> Result<BoxEnv, String> {
        match &self.backend {
            Backend::Embedded { scenario, demand } => self.embedded(scenario, demand, seed),
            Backend::Sumo {
                net,
                routes,
                additional,
                sumo_args,
                begin_s,
                step_length_s,
                timing_file,
                overrides,
                program,
                program_clock,
                pedestrian_zones,
            } => {
                let files = [routes.as_slice(), additional.as_slice()];
                let times = (*begin_s, *step_length_s);
                let cfg = self.sumo_config(net, files, times, timing_file, overrides)?;
                let cfg = SumoConfig {
                    extra_args: sumo_args.clone(),
                    program: program.clone(),
                    program_clock: *program_clock,
                    pedestrian_zones: *pedestrian_zones,
                    seed,
                    ..cfg
                };
                let env = SumoEnv::new(cfg).map_err(|e| e.to_string())?;
                Ok(Box::new(env))
            }
        }
    }

    fn embedded(&self, name: &str, demand: &Option<String>, seed: u64) -> Result<BoxEnv, String> {
        let err = |e: greenwave_sim::ScenarioError| e.to_string();
        let mut s = scenario::load(name).map_err(err)?;
        if let Some(d) = demand {
            s = s.with_demand(d).map_err(err)?;
        }
        let episode = self
            .episode_s
            .map(|e| whole_seconds("episode_s", e))
            .transpose()?;
        let interval = self
            .decision_interval_s
            .map(|d| whole_seconds("decision_interval_s", d))
            .transpose()?;
        s = s
            .with_episode_and_interval(episode, interval)
            .map_err(err)?;
        if let Some(r) = self.reward {
            s = s.with_reward(r);
        }
        Ok(Box::new(EmbeddedEnv::from_scenario(&s, seed)))
    }

    /// The SUMO configuration for `net` with `[routes, additional]` files, beginning at
    /// `begin_s` with SUMO steps of `step_length_s` (1 s when `None`), validated.
    fn sumo_config(
        &self,
        net: &PathBuf,
        [routes, additional]: [&[PathBuf]; 2],
        (begin_s, step_length_s): (f64, Option<f64>),
        timing_file: &Option<PathBuf>,
        overrides: &TimingOverrides,
    ) -> Result<SumoConfig, String> {
        let mut cfg = SumoConfig::with_routes(net, routes.to_vec());
        cfg.additional = additional.to_vec();
        cfg.begin_s = begin_s;
        if let Some(step) = step_length_s {
            cfg.step_length_s = step;
        }
        cfg.seconds = self.episode_s.unwrap_or(3600.0);
        cfg.reward = self.reward.unwrap_or(RewardKind::SUMO_DEFAULT);
        if let Some(w) = self.pedestrian_weight {
            cfg.pedestrian_weight = w;
        }
        let mut timing = match timing_file {
            Some(p) => TimingSpec::load(p).map_err(|e| e.to_string())?,
            None => TimingSpec::default(),
        };
        cfg.decision_interval_s = self
            .decision_interval_s
            .or(timing.decision_interval_s)
            .unwrap_or(5.0);
        timing.command_line = overrides.clone();
        cfg.timing = timing;
        cfg.validate().map_err(|e| e.to_string())?;
        Ok(cfg)
    }
}
