//! Which simulator a command runs on: the options `greenwave sim`, `train` and `eval` share
//! (`--backend embedded|sumo`, `--net`, `--routes`, `--begin`), and [`EnvSource`], which
//! makes fresh environments of either backend.
//!
//! The SUMO backend needs a build with feature `sumo`; without it `--backend sumo` is an
//! error that says how to rebuild. A missing `sumo` binary is reported by the backend itself
//! (with how to install SUMO) when the first environment starts.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;
use greenwave_core::Millis;
use greenwave_sim::{run_episode, ControllerKind, EmbeddedEnv, Env, EpisodeMetrics, Scenario};
use serde::{Deserialize, Serialize};

use crate::policy_controller::{ActionRule, PolicyController};

/// `--backend` values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// greenwave's embedded simulator (`--scenario`).
    #[default]
    Embedded,
    /// SUMO over TraCI (`--net`, `--routes`); `fixed-time` is then the network's own
    /// static program.
    Sumo,
}

impl Backend {
    /// Name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Embedded => "embedded",
            Backend::Sumo => "sumo",
        }
    }
}

/// The simulator options of `greenwave sim`, `train` and `eval` (flattened into each).
/// Stored in a training run's `run.json`, so `--resume` and `export` know the backend.
#[derive(Clone, Debug, Default, PartialEq, clap::Args, Serialize, Deserialize)]
pub struct BackendArgs {
    /// Simulator: the embedded one (`--scenario`), or SUMO over TraCI (needs `--net`,
    /// `--routes`, a build with feature `sumo` and SUMO installed:
    /// `pip install eclipse-sumo==1.28.0`, SUMO_HOME).
    #[arg(long, value_enum, default_value_t = Backend::Embedded)]
    #[serde(default)]
    pub backend: Backend,
    /// A SUMO configuration (`.sumocfg`), with `--backend sumo`: the net, route and
    /// additional files and begin it names, where `--net`, `--routes`, `--additional` and
    /// `--begin` do not give them, and its traffic options (a pedestrian model's stripe
    /// width, insertion checks, teleporting, …) passed to SUMO before `--sumo-args` (an
    /// option in both is taken from `--sumo-args`). Its end, step length, seeds, outputs,
    /// TraCI port, logging, GUI settings and `tls.all-off` are not used: greenwave sets
    /// them itself (see "SUMO configuration files" in tools/README.md).
    #[arg(long, value_name = "FILE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sumocfg: Option<PathBuf>,
    /// The options `--sumocfg` passes to SUMO, `--name=value` (filled from the file when a
    /// command starts, and kept in `run.json`).
    #[arg(skip)]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sumocfg_options: Vec<String>,
    /// SUMO network (`.net.xml`), with `--backend sumo`; its traffic lights are the signals.
    #[arg(long)]
    #[serde(default)]
    pub net: Option<PathBuf>,
    /// SUMO routes or trips (`.rou.xml[.gz]`; several comma-separated, as SUMO's
    /// `--route-files`), with `--backend sumo`.
    #[arg(long, value_delimiter = ',')]
    #[serde(default, deserialize_with = "paths_or_path")]
    pub routes: Vec<PathBuf>,
    /// SUMO additional files (comma-separated, as SUMO's `--additional-files`), with
    /// `--backend sumo`: vehicle types the routes use, signal programs (a `<tlLogic>` in
    /// one becomes that light's program, as in SUMO), detectors, ...
    #[arg(long, value_delimiter = ',')]
    #[serde(default)]
    pub additional: Vec<PathBuf>,
    /// Further SUMO options, as one shell-quoted string, with `--backend sumo`: e.g.
    /// `--sumo-args "--xml-validation never"` for route files an older SUMO wrote. Options
    /// greenwave sets itself (net, routes, additional files, begin, end, step length,
    /// seed, TraCI port, outputs) are refused by SUMO when given twice.
    #[arg(long, allow_hyphen_values = true, value_name = "OPTIONS")]
    #[serde(default)]
    pub sumo_args: Option<String>,
    /// SUMO time the episode starts at (s), with `--backend sumo`: 0 unless given here or
    /// by `--sumocfg`.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub begin: Option<f64>,
    /// SUMO's step length (s), with `--backend sumo`: 1 s unless given. The decision
    /// interval must be a whole number of steps; the net's timing is rounded up to them.
    #[arg(long, value_name = "SECONDS")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_length: Option<f64>,
    /// The signals' timing on SUMO: taken from each light's own program unless overridden
    /// here (see "Timing on SUMO networks" in tools/README.md).
    #[command(flatten)]
    #[serde(default)]
    pub timing: SumoTimingArgs,
    /// The reward `train` optimises on SUMO (the embedded scenarios name their own):
    /// `delay-accrued-delta` unless given, or, resuming, the one the run started with; see
    /// "Training on real networks" in tools/README.md.
    #[arg(long, value_enum)]
    #[serde(default = "RewardArg::before_delay_delta")]
    pub reward: Option<RewardArg>,
    /// What a second a pedestrian stands at a signal's crossings costs in the
    /// `delay-accrued` rewards on SUMO, against a second of delay a vehicle loses: 1
    /// unless given (or, resuming, the run's own); 0 leaves pedestrians out. See "Training
    /// on real networks", finding 35, in tools/README.md.
    #[arg(long, value_name = "WEIGHT")]
    #[serde(default = "before_pedestrian_weight")]
    pub pedestrian_weight: Option<f32>,
    /// Program-clock lanes in each signal's observation on SUMO: which phase the light's
    /// own program serves at that moment. `on` unless given (`train`; resuming, as the
    /// run started; `eval` and `sim`, as the policy's manifest says); see "Training on
    /// real networks", finding 25, in tools/README.md.
    #[arg(long, value_enum)]
    #[serde(default = "OnOff::before_program_clock")]
    pub program_clock: Option<OnOff>,
    /// Pedestrian zones in each signal's observation on SUMO: two per crossing a light
    /// controls, the pedestrians at its kerb and on it. `on` unless given (`train`;
    /// resuming, as the run started; `eval`, as the policy fits); see "Training on real
    /// networks", finding 36, in tools/README.md. A net without crossings observes the
    /// same either way.
    #[arg(long, value_enum)]
    #[serde(default = "OnOff::before_pedestrian_zones")]
    pub pedestrian_zones: Option<OnOff>,
    /// Per-pair intergreens from each light's own program on SUMO: where the program keeps
    /// two conflicting links further apart than a switch's yellow and all-red, the plan
    /// starts that movement later, alone. `off` unless given (or the timing file's
    /// `program_intergreens`; resuming, as the run started); see "Timing on SUMO networks"
    /// in tools/README.md.
    #[arg(long, value_enum)]
    #[serde(default = "OnOff::before_program_intergreens")]
    pub program_intergreens: Option<OnOff>,
}

/// The pedestrian weight of runs whose `run.json` names none (written before pedestrians
/// counted in a reward).
fn before_pedestrian_weight() -> Option<f32> {
    Some(0.0)
}

/// `routes` as `run.json` holds it: a list, or (runs from before several were taken) one
/// path or none.
fn paths_or_path<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Recorded {
        Many(Vec<PathBuf>),
        One(Option<PathBuf>),
    }
    Ok(match Recorded::deserialize(d)? {
        Recorded::Many(paths) => paths,
        Recorded::One(path) => path.into_iter().collect(),
    })
}

/// `on` or `off`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnOff {
    /// Enabled.
    #[default]
    On,
    /// Disabled.
    Off,
}

impl OnOff {
    /// The program clock of runs whose `run.json` names none (written before it).
    fn before_program_clock() -> Option<Self> {
        Some(OnOff::Off)
    }

    /// The program intergreens of runs whose `run.json` names none (written before them).
    fn before_program_intergreens() -> Option<Self> {
        Some(OnOff::Off)
    }

    /// The pedestrian zones of runs whose `run.json` names none (written before them).
    fn before_pedestrian_zones() -> Option<Self> {
        Some(OnOff::Off)
    }

    /// Whether it is `on`.
    pub fn is_on(self) -> bool {
        self == OnOff::On
    }
}

/// `--reward` values: [`greenwave_core::RewardKind`] on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RewardArg {
    /// Decrease of the vehicles' accumulated waiting time (insertion delay included)
    /// summed over the approach zones, per 100 s.
    WaitDelta,
    /// Minus the vehicles halted in the approach zones, per 10.
    Queue,
    /// Minus |vehicles in the approach zones − vehicles on the exits|, per 10.
    Pressure,
    /// Minus the approach zones' delay rate (Σ 1 − speed / limit over their vehicles), per 10.
    Delay,
    /// Decrease of the vehicles' delay (time loss against their desired speed, insertion
    /// delay included) summed over the approach zones, per 100 s: counts the stops and
    /// slow starts that waiting time misses, and credits a vehicle's delay back as it
    /// leaves. The SUMO default before `delay-accrued-delta` (tools/README.md, finding 19).
    DelayDelta,
    /// Minus the delay the vehicles lost near each signal during the interval (on its
    /// approach zones, inside its junction and for 100 m past it), per 100 s: every
    /// second lost costs the same, so a stop costs its braking and pulling away in full.
    /// Better on the random nets, far worse near saturation (finding 18).
    DelayAccrued,
    /// `delay-accrued` plus `delay-delta`: each second charged as it is lost, and each
    /// vehicle's delay credited as it leaves the approach, so a long-starved queue pays
    /// back as it discharges. The default ([`greenwave_core::RewardKind::SUMO_DEFAULT`]):
    /// measured on all 17 development nets, and under the bar on more of them than either
    /// part alone (tools/README.md, findings 18 and 19).
    DelayAccruedDelta,
}

impl Default for RewardArg {
    fn default() -> Self {
        greenwave_core::RewardKind::SUMO_DEFAULT.into()
    }
}

impl RewardArg {
    /// The reward of runs whose `run.json` names none (written before `--reward`).
    fn before_delay_delta() -> Option<Self> {
        Some(RewardArg::WaitDelta)
    }
}

impl From<greenwave_core::RewardKind> for RewardArg {
    fn from(r: greenwave_core::RewardKind) -> Self {
        match r {
            greenwave_core::RewardKind::WaitDelta => RewardArg::WaitDelta,
            greenwave_core::RewardKind::Queue => RewardArg::Queue,
            greenwave_core::RewardKind::Pressure => RewardArg::Pressure,
            greenwave_core::RewardKind::Delay => RewardArg::Delay,
            greenwave_core::RewardKind::DelayDelta => RewardArg::DelayDelta,
            greenwave_core::RewardKind::DelayAccrued => RewardArg::DelayAccrued,
            greenwave_core::RewardKind::DelayAccruedDelta => RewardArg::DelayAccruedDelta,
        }
    }
}

impl From<RewardArg> for greenwave_core::RewardKind {
    fn from(r: RewardArg) -> Self {
        match r {
            RewardArg::WaitDelta => greenwave_core::RewardKind::WaitDelta,
            RewardArg::Queue => greenwave_core::RewardKind::Queue,
            RewardArg::Pressure => greenwave_core::RewardKind::Pressure,
            RewardArg::Delay => greenwave_core::RewardKind::Delay,
            RewardArg::DelayDelta => greenwave_core::RewardKind::DelayDelta,
            RewardArg::DelayAccrued => greenwave_core::RewardKind::DelayAccrued,
            RewardArg::DelayAccruedDelta => greenwave_core::RewardKind::DelayAccruedDelta,
        }
    }
}

/// Timing options of `--backend sumo`. Each light's yellow, all-red and max green come
/// from its program; these override them (flags beat the file, which beats the net).
#[derive(Clone, Debug, Default, PartialEq, clap::Args, Serialize, Deserialize)]
pub struct SumoTimingArgs {
    /// Timing file (TOML): `decision_interval_s`, `[defaults]` and `[signals."ID"]` tables
    /// of `yellow_s`, `all_red_s`, `min_green_s`, `max_green_s`.
    #[arg(long, value_name = "FILE.toml")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<PathBuf>,
    /// Program id to run on lights that have it (default: each light's active program).
    #[arg(long, value_name = "ID")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// Yellow of every signal (s, 3-6).
    #[arg(long, value_name = "S")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yellow: Option<f64>,
    /// All-red of every signal (s, 0-6).
    #[arg(long, value_name = "S")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all_red: Option<f64>,
    /// Min green of every signal (s; default 5).
    #[arg(long, value_name = "S")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_green: Option<f64>,
    /// Max green of every signal (s; default the program's, at least 60).
    #[arg(long, value_name = "S")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_green: Option<f64>,
    /// Seconds between decisions (default the timing file's, else 5; `greenwave train` on
    /// SUMO: 2, or 5 where its demand probe finds the net saturated; a policy runs at the
    /// interval it was trained at).
    #[arg(long, value_name = "S")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_interval: Option<f64>,
}

impl SumoTimingArgs {
    /// Whether any option is given.
    pub fn is_set(&self) -> bool {
        *self != SumoTimingArgs::default()
    }

    /// Applies the file and flags to a SUMO configuration.
    #[cfg(feature = "sumo")]
    pub fn apply(&self, cfg: &mut greenwave_sim::sumo::SumoConfig) -> Result<()> {
        let flags = greenwave_sim::sumo::TimingOverrides {
            yellow_s: self.yellow,
            all_red_s: self.all_red,
            min_green_s: self.min_green,
            max_green_s: self.max_green,
            program_intergreens: None,
        };
        cfg.set_timing(
            self.timing.as_deref(),
            flags,
            self.decision_interval,
            self.program.clone(),
        )?;
        Ok(())
    }
}

impl BackendArgs {
    /// The embedded simulator.
    pub fn embedded() -> Self {
        BackendArgs::default()
    }

    /// SUMO on `net` with `routes`, from time 0.
    pub fn sumo(net: impl Into<PathBuf>, routes: impl Into<PathBuf>) -> Self {
        BackendArgs {
            backend: Backend::Sumo,
            sumocfg: None,
            sumocfg_options: Vec::new(),
            net: Some(net.into()),
            routes: vec![routes.into()],
            additional: Vec::new(),
            sumo_args: None,
            begin: None,
            step_length: None,
            timing: SumoTimingArgs::default(),
            reward: None,
            pedestrian_weight: None,
            program_clock: None,
            pedestrian_zones: None,
            program_intergreens: None,
        }
    }

    /// Refuses SUMO options without `--backend sumo` (they would be silently ignored) and
    /// `--backend sumo` without a network and routes.
    pub fn check(&self) -> Result<()> {
        match self.backend {
            Backend::Embedded => {
                if self.net.is_some()
                    || self.sumocfg.is_some()
                    || !self.routes.is_empty()
                    || !self.additional.is_empty()
                    || self.sumo_args.is_some()
                    || self.begin.is_some_and(|b| b != 0.0)
                    || self.step_length.is_some()
                    || self.timing.is_set()
                    || self.reward.is_some()
                    || self.pedestrian_weight.is_some()
                    || self.program_clock.is_some()
                    || self.pedestrian_zones.is_some()
                    || self.program_intergreens.is_some()
                {
                    bail!(
                        "--net, --routes, --additional, --sumocfg, --sumo-args, --begin, \
                         --step-length, --reward, --pedestrian-weight, --program-clock, \
                         --pedestrian-zones, --program-intergreens \
                         and the timing \
                         options (--timing, \
                         --program, --yellow, --all-red, --min-green, --max-green, \
                         --decision-interval) are SUMO options: add `--backend sumo` (an \
                         embedded scenario names its reward in its file)"
                    );
                }
            }
            Backend::Sumo => {
                // A configuration may bring its demand in additional files only (SUMO's
                // game `square`); without one, --routes is needed.
                if self.net.is_none() || (self.routes.is_empty() && self.sumocfg.is_none()) {
                    bail!(
                        "--backend sumo needs --net FILE.net.xml and --routes FILE.rou.xml, \
                         or a --sumocfg FILE.sumocfg that names them{}",
                        match &self.sumocfg {
                            Some(c) => format!(" ({} names no net-file)", c.display()),
                            None => String::new(),
                        }
                    );
                }
                if let Some(b) = self.begin.filter(|b| !b.is_finite() || *b < 0.0) {
                    bail!(
                        "begin {b} s (--begin, or the --sumocfg's) must be a non-negative \
                         number of seconds"
                    );
                }
            }
        }
        Ok(())
    }

    /// Whether a run recorded with `self` may go on with `other`: the same simulator, net,
    /// routes, begin, timing and, on SUMO, reward, pedestrian weight, program clock,
    /// pedestrian zones and intergreens. An embedded run's
    /// recorded reward and clock are not compared: its scenario names its own reward (runs
    /// from before recorded the default then, `delay-delta`) and it has no clock.
    pub fn resumes_as(&self, other: &Self) -> bool {
        let sumo = |b: &Self| b.backend == Backend::Sumo;
        let keyed = |b: &Self| BackendArgs {
            reward: sumo(b).then_some(b.reward).flatten(),
            pedestrian_weight: sumo(b).then_some(b.pedestrian_weight).flatten(),
            program_clock: sumo(b).then_some(b.program_clock).flatten(),
            pedestrian_zones: sumo(b).then_some(b.pedestrian_zones).flatten(),
            program_intergreens: sumo(b).then_some(b.program_intergreens).flatten(),
            begin: Some(b.begin.unwrap_or(0.0)),
            ..b.clone()
        };
        keyed(self) == keyed(other)
    }

    /// A short description for reports and provenance: `sumo:NET` for SUMO.
    pub fn sumo_label(&self) -> Option<String> {
        match (self.backend, &self.net) {
            (Backend::Sumo, Some(net)) => Some(format!("sumo:{}", net.display())),
            _ => None,
        }
    }

    /// The options greenwave passes to SUMO beyond its own: `--sumocfg`'s, less any that
    /// `--sumo-args` also gives, then `--sumo-args` split as a shell would.
    pub fn sumo_extra_args(&self) -> Result<Vec<String>> {
        let user = match &self.sumo_args {
            None => Vec::new(),
            Some(options) => shlex::split(options).with_context(|| {
                format!("--sumo-args {options:?}: unbalanced quotes or a bad escape")
            })?,
        };
        #[cfg(feature = "sumo")]
        let user = greenwave_sim::sumo::sumocfg::merge_options(&self.sumocfg_options, &user);
        Ok(user)
    }

    /// Fills the net, routes, additional files and begin from `--sumocfg` where the flags
    /// do not give them, and keeps the file's options for SUMO; notes on stderr which of
    /// its options are not used. Does nothing without `--sumocfg`; call it once, as a
    /// command starts.
    pub fn resolve_sumocfg(&mut self) -> Result<()> {
        let Some(path) = self.sumocfg.clone() else {
            return Ok(());
        };
        if self.backend != Backend::Sumo {
            return self.check();
        }
        self.take_sumocfg(&path)
    }

    #[cfg(feature = "sumo")]
    fn take_sumocfg(&mut self, path: &std::path::Path) -> Result<()> {
        let file = greenwave_sim::sumo::SumoCfgFile::read(path)?;
        let files = file.under(greenwave_sim::sumo::SumoFiles {
            net: self.net.take(),
            routes: std::mem::take(&mut self.routes),
            additional: std::mem::take(&mut self.additional),
            begin_s: self.begin,
        });
        (self.net, self.routes, self.additional) = (files.net, files.routes, files.additional);
        self.begin = files.begin_s;
        self.sumocfg_options = file.passed;
        if !file.left_out.is_empty() {
            eprintln!(
                "note: {}: not used (greenwave sets these itself): {}",
                path.display(),
                file.left_out.join(", ")
            );
        }
        Ok(())
    }

    #[cfg(not(feature = "sumo"))]
    fn take_sumocfg(&mut self, _path: &std::path::Path) -> Result<()> {
        Err(sumo_not_built())
    }

    /// The SUMO backend's configuration: episode length `seconds` (default the backend's,
    /// 3600 s), first episode seeded `seed`.
    #[cfg(feature = "sumo")]
    pub fn sumo_config(
        &self,
        seconds: Option<f64>,
        seed: u64,
    ) -> Result<greenwave_sim::sumo::SumoConfig> {
        self.check()?;
        let Some(net) = &self.net else {
            bail!("--backend sumo needs --net (or a --sumocfg that names a net-file)");
        };
        let mut cfg = greenwave_sim::sumo::SumoConfig::with_routes(net, self.routes.clone());
        cfg.additional = self.additional.clone();
        cfg.extra_args = self.sumo_extra_args()?;
        cfg.begin_s = self.begin.unwrap_or(0.0);
        if let Some(step) = self.step_length {
            cfg.step_length_s = step;
        }
        cfg.seed = seed;
        cfg.reward = self.reward.unwrap_or_default().into();
        if let Some(w) = self.pedestrian_weight {
            cfg.pedestrian_weight = w;
        }
        cfg.program_clock = self.program_clock.unwrap_or_default().is_on();
        cfg.pedestrian_zones = self.pedestrian_zones.unwrap_or_default().is_on();
        if let Some(s) = seconds {
            cfg.seconds = s;
        }
        self.timing.apply(&mut cfg)?;
        if let Some(on) = self.program_intergreens {
            cfg.timing.command_line.program_intergreens = Some(on.is_on());
        }
        cfg.validate()
            .with_context(|| format!("SUMO options for {}", net.display()))?;
        Ok(cfg)
    }
}

/// A `--seconds`-style episode length in whole seconds as a duration; an error past
/// `u32::MAX` ms (49.7 days), the longest time the simulators count.
pub fn episode_of_secs(seconds: u32) -> Result<Millis> {
    seconds.checked_mul(1000).map(Millis).with_context(|| {
        format!(
            "an episode of {seconds} s is longer than the simulators count ({} s)",
            u32::MAX / 1000
        )
    })
}

/// The error `--backend sumo` gives in a build without feature `sumo`.
pub fn sumo_not_built() -> anyhow::Error {
    anyhow::anyhow!(
        "this greenwave was built without SUMO support; rebuild with \
         `cargo build --release -p greenwave-tools --features sumo` to use `--backend sumo`"
    )
}

/// Where fresh environments come from: a scenario of the embedded simulator, or a SUMO
/// configuration (each environment then runs its own `sumo` process).
#[derive(Clone, Debug)]
pub enum EnvSource {
    /// The embedded simulator on a scenario.
    Embedded(Scenario),
    /// SUMO.
    #[cfg(feature = "sumo")]
    Sumo(Box<greenwave_sim::sumo::SumoConfig>),
}

impl EnvSource {
    /// The source the options describe: `scenario` (with `demand`) on the embedded
    /// simulator, or the SUMO files (episode length SUMO's default, 3600 s, unless the
    /// `run_*` calls say otherwise).
    pub fn from_args(backend: &BackendArgs, scenario: &str, demand: Option<&str>) -> Result<Self> {
        backend.check()?;
        match backend.backend {
            Backend::Embedded => {
                let sc = greenwave_sim::load(scenario)
                    .with_context(|| format!("loading scenario '{scenario}'"))?;
                match demand {
                    None => Ok(EnvSource::Embedded(sc)),
                    Some(d) => Ok(EnvSource::Embedded(
                        sc.with_demand(d)
                            .with_context(|| format!("choosing demand '{d}'"))?,
                    )),
                }
            }
            Backend::Sumo => Self::sumo(backend),
        }
    }

    #[cfg(feature = "sumo")]
    fn sumo(backend: &BackendArgs) -> Result<Self> {
        let cfg = backend.sumo_config(None, 0)?;
        let models = cfg
            .models()
            .with_context(|| format!("deriving phase plans from {}", cfg.net.display()))?;
        for s in &models.on_program {
            eprintln!("warning: {s}");
        }
        for m in &models.models {
            for note in &m.timing_notes {
                eprintln!("note: traffic light {}: {note}", m.id);
            }
        }
        Ok(EnvSource::Sumo(Box::new(cfg)))
    }

    #[cfg(not(feature = "sumo"))]
    fn sumo(_backend: &BackendArgs) -> Result<Self> {
        Err(sumo_not_built())
    }

    /// What runs: the scenario's name, or `sumo:NET`.
    pub fn name(&self) -> String {
        match self {
            EnvSource::Embedded(sc) => sc.name().to_string(),
            #[cfg(feature = "sumo")]
            EnvSource::Sumo(cfg) => format!("sumo:{}", cfg.net.display()),
        }
    }

    /// For messages: `scenario 'NAME'` or `SUMO net FILE`.
    pub fn describe(&self) -> String {
        match self {
            EnvSource::Embedded(sc) => format!("scenario '{}'", sc.name()),
            #[cfg(feature = "sumo")]
            EnvSource::Sumo(cfg) => format!("SUMO net {}", cfg.net.display()),
        }
    }

    /// Default episode length.
    pub fn episode(&self) -> Millis {
        match self {
            EnvSource::Embedded(sc) => sc.episode(),
            #[cfg(feature = "sumo")]
            EnvSource::Sumo(cfg) => cfg.episode(),
        }
    }

    /// Time between decisions in this source's environments.
    pub fn decision_interval(&self) -> Millis {
        match self {
            EnvSource::Embedded(sc) => sc.decision_interval(),
            #[cfg(feature = "sumo")]
            EnvSource::Sumo(cfg) => cfg.decision_interval(),
        }
    }

    /// The same source deciding every `interval`: SUMO runs at any multiple of its step;
    /// an embedded scenario has its own interval, and another one is refused.
    pub fn with_decision_interval(&self, interval: Millis) -> Result<Self> {
        if interval == self.decision_interval() {
            return Ok(self.clone());
        }
        match self {
            EnvSource::Embedded(sc) => bail!(
                "the policy decides every {} ms but scenario '{}' every {} ms",
                interval.0,
                sc.name(),
                sc.decision_interval().0
            ),
            #[cfg(feature = "sumo")]
            EnvSource::Sumo(cfg) => {
                let mut cfg = cfg.clone();
                cfg.decision_interval_s = f64::from(interval.0) / 1000.0;
                cfg.validate()
                    .with_context(|| format!("running the policy every {} ms", interval.0))?;
                Ok(EnvSource::Sumo(cfg))
            }
        }
    }

    /// Whether observations end with program-clock lanes (SUMO's option; the embedded
    /// simulator has none).
    pub fn program_clock(&self) -> bool {
        match self {
            EnvSource::Embedded(_) => false,
            #[cfg(feature = "sumo")]
            EnvSource::Sumo(cfg) => cfg.program_clock,
        }
    }

    /// The same source with program-clock lanes `on` or not: SUMO has them either way;
    /// the embedded simulator has none, and asking for them is refused.
    pub fn with_program_clock(&self, on: bool) -> Result<Self> {
        if on == self.program_clock() {
            return Ok(self.clone());
        }
        match self {
            EnvSource::Embedded(sc) => bail!(
                "the policy reads a program clock, which scenario '{}' of the embedded \
                 simulator has not (it was trained on SUMO)",
                sc.name()
            ),
            #[cfg(feature = "sumo")]
            EnvSource::Sumo(cfg) => {
                let mut cfg = cfg.clone();
                cfg.program_clock = on;
                Ok(EnvSource::Sumo(cfg))
            }
        }
    }

    /// On SUMO with pedestrian zones: the same source without them (the observation of
    /// before they existed); `None` otherwise.
    pub fn without_pedestrian_zones(&self) -> Option<Self> {
        match self {
            EnvSource::Embedded(_) => None,
            #[cfg(feature = "sumo")]
            EnvSource::Sumo(cfg) => cfg.pedestrian_zones.then(|| {
                let mut cfg = cfg.clone();
                cfg.pedestrian_zones = false;
                EnvSource::Sumo(cfg)
            }),
        }
    }

    /// The scenario, on the embedded simulator.
    pub fn scenario(&self) -> Option<&Scenario> {
        match self {
            EnvSource::Embedded(sc) => Some(sc),
            #[cfg(feature = "sumo")]
            EnvSource::Sumo(_) => None,
        }
    }

    /// A fresh environment whose first episode is seeded `seed` and lasts `episode` (for
    /// SUMO this starts `sumo`; SUMO's trip metrics exist only once an episode has run to
    /// its end, so episodes must be run for exactly this long there).
    pub fn make(&self, seed: u64, episode: Millis) -> Result<Box<dyn Env>> {
        match self {
            EnvSource::Embedded(sc) => {
                let _ = episode; // the caller's episode loop stops the embedded simulator
                Ok(Box::new(EmbeddedEnv::from_scenario(sc, seed)))
            }
            #[cfg(feature = "sumo")]
            EnvSource::Sumo(cfg) => {
                let cfg = Self::sumo_episode(cfg, seed, episode);
                let env = greenwave_sim::sumo::SumoEnv::new(cfg.clone())
                    .with_context(|| format!("starting SUMO on {}", cfg.net.display()))?;
                Ok(Box::new(env))
            }
        }
    }

    #[cfg(feature = "sumo")]
    fn sumo_episode(
        cfg: &greenwave_sim::sumo::SumoConfig,
        seed: u64,
        episode: Millis,
    ) -> greenwave_sim::sumo::SumoConfig {
        let mut cfg = cfg.clone();
        cfg.seed = seed;
        // SUMO takes seconds; a length given in whole ms comes back to the same f64.
        cfg.seconds = f64::from(episode.0) / 1000.0;
        cfg
    }

    /// The signals' specs (plans, observation layouts), from an environment made for the
    /// purpose (for SUMO: one short start of `sumo`, which also shows early whether SUMO
    /// runs at all).
    pub fn signals(&self) -> Result<Vec<greenwave_sim::SignalSpec>> {
        let env = self.make(0, self.episode())?;
        Ok(env.signals().to_vec())
    }

    /// On SUMO, what `fixed-time` runs where some lights' own programs are not static:
    /// each light's program as SUMO runs it, so an `actuated` or `delay_based` one adapts
    /// (it is the incumbent either way). `None` where every program is static, or on the
    /// embedded simulator.
    pub fn adaptive_programs_note(&self) -> Option<String> {
        match self {
            EnvSource::Embedded(_) => None,
            #[cfg(feature = "sumo")]
            EnvSource::Sumo(cfg) => {
                let net = cfg.read_net().ok()?;
                adaptive_programs_note(&net.tl_logics)
            }
        }
    }

    /// A note when no vehicle entered the SUMO net in any of `runs` (none arrived, none
    /// left in it): their delays of 0 s say nothing. A begin past the routes' departures
    /// gives such runs.
    #[cfg_attr(not(feature = "sumo"), allow(unused_mut, unused_variables))]
    pub fn empty_runs_note<'a>(
        &self,
        mut runs: impl Iterator<Item = &'a EpisodeMetrics>,
    ) -> Option<String> {
        match self {
            EnvSource::Embedded(_) => None,
            #[cfg(feature = "sumo")]
            EnvSource::Sumo(cfg) => runs
                .all(|m| m.throughput_veh == 0 && m.backlog_veh == 0)
                .then(|| {
                    format!(
                        "note: no vehicle entered {} in these runs (throughput 0, backlog 0), \
                         so their delays say nothing: do the routes depart between begin {} s \
                         and the episode's end?",
                        cfg.net.display(),
                        cfg.begin_s
                    )
                }),
        }
    }

    /// One episode of a classic controller, seeded `seed`, `episode` long. On SUMO,
    /// `fixed-time` is the network's own static program and actuated control uses its
    /// default max greens (there is no scenario demand to derive Webster greens from),
    /// as in `greenwave sim --backend sumo`.
    pub fn run_classic(
        &self,
        kind: ControllerKind,
        seed: u64,
        episode: Millis,
    ) -> Result<EpisodeMetrics> {
        match self {
            EnvSource::Embedded(sc) => {
                let mut env = EmbeddedEnv::from_scenario(sc, seed);
                let mut c = kind.build(sc);
                Ok(run_episode(&mut env, c.as_mut(), seed, episode)?)
            }
            #[cfg(feature = "sumo")]
            EnvSource::Sumo(cfg) => {
                use greenwave_sim::controllers::{Actuated, MaxPressure};
                let mut c: Box<dyn greenwave_sim::Controller> = match kind {
                    ControllerKind::FixedTime => {
                        return greenwave_sim::sumo::run_static_program(Self::sumo_episode(
                            cfg, seed, episode,
                        ))
                        .context("running the network's static program");
                    }
                    ControllerKind::Actuated => Box::new(Actuated::default()),
                    ControllerKind::MaxPressure => Box::new(MaxPressure::default()),
                };
                let mut env = self.make(seed, episode)?;
                Ok(run_episode(env.as_mut(), c.as_mut(), seed, episode)?)
            }
        }
    }

    /// One episode of a policy acting by `rule` under the max-red rule with bound
    /// `max_red`, seeded `seed`, `episode` long.
    pub fn run_policy(
        &self,
        weights: &[greenwave_learn::PolicyWeights],
        max_red: greenwave_sim::MaxRedBound,
        rule: ActionRule,
        seed: u64,
        episode: Millis,
    ) -> Result<EpisodeMetrics> {
        let mut env = self.make(seed, episode)?;
        let mut c = PolicyController::per_signal(weights.to_vec())
            .with_max_red(max_red)
            .with_rule(rule, seed);
        Ok(run_episode(env.as_mut(), &mut c, seed, episode)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_embedded_scenario_keeps_its_own_decision_interval() {
        let sc = greenwave_sim::load("single-4way").unwrap();
        let own = sc.decision_interval();
        let source = EnvSource::Embedded(sc);
        assert_eq!(
            source
                .with_decision_interval(own)
                .unwrap()
                .decision_interval(),
            own
        );
        let other = Millis(own.0 + 1000);
        let err = source
            .with_decision_interval(other)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains(&format!("every {} ms", other.0)), "{err}");
        assert!(err.contains("single-4way"), "{err}");
    }

    #[test]
    fn every_reward_round_trips_through_its_command_line_value() {
        for &arg in RewardArg::value_variants() {
            let kind: greenwave_core::RewardKind = arg.into();
            assert_eq!(RewardArg::from(kind), arg);
            // The flag, run.json and the Python environments use the core's name.
            assert_eq!(arg.to_possible_value().unwrap().get_name(), kind.name());
            assert_eq!(serde_json::to_value(arg).unwrap(), kind.name());
        }
        assert_eq!(
            RewardArg::value_variants().len(),
            greenwave_core::RewardKind::ALL.len()
        );
        assert_eq!(
            greenwave_core::RewardKind::from(RewardArg::default()),
            greenwave_core::RewardKind::SUMO_DEFAULT
        );
    }

    #[test]
    fn a_run_resumes_with_its_own_sumo_reward_and_any_embedded_record() {
        let sumo = |reward| BackendArgs {
            reward,
            ..BackendArgs::sumo("n.net.xml", "r.rou.xml")
        };
        let accrued = sumo(Some(RewardArg::DelayAccrued));
        assert_eq!(RewardArg::default(), RewardArg::DelayAccruedDelta);
        assert!(accrued.resumes_as(&accrued.clone()));
        assert!(!accrued.resumes_as(&sumo(Some(RewardArg::DelayDelta))));
        assert!(!accrued.resumes_as(&sumo(None)));
        // Embedded runs from before recorded the SUMO default of then.
        let old_embedded = BackendArgs {
            reward: Some(RewardArg::DelayDelta),
            ..BackendArgs::embedded()
        };
        assert!(old_embedded.resumes_as(&BackendArgs::embedded()));
        assert!(!old_embedded.resumes_as(&sumo(Some(RewardArg::DelayDelta))));
        // `--reward` on the embedded simulator is refused (its scenario names its own).
        let err = old_embedded.check().unwrap_err().to_string();
        assert!(err.contains("--reward"), "{err}");
        // A run.json from before `--reward` trained on the accumulated-wait reward.
        let mut v = serde_json::to_value(&accrued).unwrap();
        assert_eq!(v["reward"], "delay-accrued");
        v.as_object_mut().unwrap().remove("reward");
        let old: BackendArgs = serde_json::from_value(v).unwrap();
        assert_eq!(old.reward, Some(RewardArg::WaitDelta));
    }

    #[test]
    fn a_run_resumes_with_its_own_pedestrian_weight() {
        let weighted = |w| BackendArgs {
            pedestrian_weight: w,
            ..BackendArgs::sumo("n.net.xml", "r.rou.xml")
        };
        assert!(weighted(Some(1.0)).resumes_as(&weighted(Some(1.0))));
        assert!(!weighted(Some(1.0)).resumes_as(&weighted(Some(0.0))));
        // It reaches SUMO's configuration; a negative one is refused there.
        #[cfg(feature = "sumo")]
        {
            let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/sim/fixtures/sumo");
            let cfg = |w| {
                let mut b = weighted(w);
                b.net = Some(format!("{fixtures}/single.net.xml").into());
                b.routes = vec![format!("{fixtures}/single.rou.xml").into()];
                b.sumo_config(None, 1)
            };
            assert_eq!(cfg(None).unwrap().pedestrian_weight, 1.0);
            assert_eq!(cfg(Some(0.5)).unwrap().pedestrian_weight, 0.5);
            let err = format!("{:#}", cfg(Some(-1.0)).unwrap_err());
            assert!(err.contains("pedestrian_weight = -1"), "{err}");
        }
        // Refused on the embedded simulator, which has no pedestrians.
        let embedded = BackendArgs {
            pedestrian_weight: Some(1.0),
            ..BackendArgs::embedded()
        };
        let err = embedded.check().unwrap_err().to_string();
        assert!(err.contains("--pedestrian-weight"), "{err}");
        // Runs from before it counted no pedestrians.
        let mut v = serde_json::to_value(weighted(Some(1.0))).unwrap();
        v.as_object_mut().unwrap().remove("pedestrian_weight");
        let old: BackendArgs = serde_json::from_value(v).unwrap();
        assert_eq!(old.pedestrian_weight, Some(0.0));
    }

    #[test]
    fn pedestrian_zones_are_on_unless_off_and_runs_from_before_had_none() {
        let zoned = |z| BackendArgs {
            pedestrian_zones: z,
            ..BackendArgs::sumo("n.net.xml", "r.rou.xml")
        };
        assert!(zoned(Some(OnOff::On)).resumes_as(&zoned(Some(OnOff::On))));
        assert!(!zoned(Some(OnOff::On)).resumes_as(&zoned(Some(OnOff::Off))));
        #[cfg(feature = "sumo")]
        {
            let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/sim/fixtures/sumo");
            let cfg = |z| {
                let mut b = zoned(z);
                b.net = Some(format!("{fixtures}/peds.net.xml").into());
                b.routes = vec![format!("{fixtures}/peds.rou.xml").into()];
                b.sumo_config(None, 1).unwrap().pedestrian_zones
            };
            assert!(cfg(None) && cfg(Some(OnOff::On)) && !cfg(Some(OnOff::Off)));
        }
        let embedded = BackendArgs {
            pedestrian_zones: Some(OnOff::Off),
            ..BackendArgs::embedded()
        };
        let err = embedded.check().unwrap_err().to_string();
        assert!(err.contains("--pedestrian-zones"), "{err}");
        // Runs from before them observed none.
        let mut v = serde_json::to_value(zoned(Some(OnOff::On))).unwrap();
        v.as_object_mut().unwrap().remove("pedestrian_zones");
        let old: BackendArgs = serde_json::from_value(v).unwrap();
        assert_eq!(old.pedestrian_zones, Some(OnOff::Off));
    }

    #[test]
    fn program_intergreens_are_a_sumo_option_and_runs_from_before_had_none() {
        let mut on = BackendArgs::sumo("n.net.xml", "r.rou.xml");
        on.program_intergreens = Some(OnOff::On);
        assert!(on.resumes_as(&on.clone()));
        assert!(!on.resumes_as(&BackendArgs::sumo("n.net.xml", "r.rou.xml")));
        let mut v = serde_json::to_value(&on).unwrap();
        assert_eq!(v["program_intergreens"], "on");
        // A run.json written before the option: its plans had no intergreens.
        v.as_object_mut().unwrap().remove("program_intergreens");
        let old: BackendArgs = serde_json::from_value(v).unwrap();
        assert_eq!(old.program_intergreens, Some(OnOff::Off));
        // A new run given none records none (the timing file's, else off).
        let none = BackendArgs::sumo("n.net.xml", "r.rou.xml");
        let back: BackendArgs =
            serde_json::from_value(serde_json::to_value(&none).unwrap()).unwrap();
        assert_eq!(back.program_intergreens, None);
        let embedded = BackendArgs {
            program_intergreens: Some(OnOff::On),
            ..BackendArgs::embedded()
        };
        let err = embedded.check().unwrap_err().to_string();
        assert!(err.contains("--program-intergreens"), "{err}");
    }

    #[test]
    #[cfg(feature = "sumo")]
    fn a_run_from_before_begin_was_optional_resumes_and_sumocfg_options_come_first() {
        // run.json from before: `"begin": 0.0` always written.
        let mut v = serde_json::to_value(BackendArgs::sumo("n.net.xml", "r.rou.xml")).unwrap();
        v["begin"] = 0.0.into();
        let old: BackendArgs = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(old.begin, Some(0.0));
        let now = BackendArgs::sumo("n.net.xml", "r.rou.xml");
        assert!(old.resumes_as(&now) && now.resumes_as(&old));
        v["begin"] = 54_000.0.into();
        let later: BackendArgs = serde_json::from_value(v).unwrap();
        assert!(!later.resumes_as(&now));
        // A configuration's options, then the user's; the user's win by name.
        let mut both = now.clone();
        both.sumocfg = Some(PathBuf::from("s.sumocfg"));
        both.sumocfg_options = vec!["--scale=0.5".into(), "--xml-validation=never".into()];
        both.sumo_args = Some("--scale 1".into());
        assert_eq!(
            both.sumo_extra_args().unwrap(),
            ["--xml-validation=never", "--scale", "1"]
        );
        let other_options = BackendArgs {
            sumocfg_options: vec!["--scale=0.5".into()],
            ..both.clone()
        };
        assert!(
            !both.resumes_as(&other_options),
            "other options from the configuration are another run"
        );
        let back: BackendArgs =
            serde_json::from_value(serde_json::to_value(&both).unwrap()).unwrap();
        assert_eq!(back, both);
        let mut embedded = BackendArgs::embedded();
        embedded.sumocfg = both.sumocfg.clone();
        let err = embedded.resolve_sumocfg().unwrap_err().to_string();
        assert!(
            err.contains("--sumocfg") && err.contains("--backend sumo"),
            "{err}"
        );
        let mut missing = BackendArgs {
            net: None,
            routes: Vec::new(),
            sumocfg: Some(PathBuf::from("/no/such.sumocfg")),
            ..now
        };
        let err = format!("{:#}", missing.resolve_sumocfg().unwrap_err());
        assert!(
            err.contains("/no/such.sumocfg") && err.contains("cannot open"),
            "{err}"
        );
    }

    #[test]
    fn routes_and_additional_files_are_lists_and_old_runs_still_read() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            sim: BackendArgs,
        }
        let cli = Cli::parse_from([
            "x",
            "--backend",
            "sumo",
            "--net",
            "n.net.xml",
            "--routes",
            "cars.rou.xml,bikes.rou.xml",
            "--routes",
            "walk.rou.xml",
            "--additional",
            "types.add.xml,plan.add.xml",
            "--sumo-args",
            "--xml-validation never",
        ]);
        assert_eq!(cli.sim.sumo_args.as_deref(), Some("--xml-validation never"));
        let routes = ["cars.rou.xml", "bikes.rou.xml", "walk.rou.xml"].map(PathBuf::from);
        assert_eq!(cli.sim.routes, routes);
        let additional = ["types.add.xml", "plan.add.xml"].map(PathBuf::from);
        assert_eq!(cli.sim.additional, additional);
        let back: BackendArgs =
            serde_json::from_value(serde_json::to_value(&cli.sim).unwrap()).unwrap();
        assert_eq!(back, cli.sim);
        assert!(!back.resumes_as(&BackendArgs {
            additional: Vec::new(),
            ..back.clone()
        }));
        // run.json from before: one route path (or none), no additional files.
        let mut v = serde_json::to_value(BackendArgs::sumo("n.net.xml", "r.rou.xml")).unwrap();
        v["routes"] = "r.rou.xml".into();
        v.as_object_mut().unwrap().remove("additional");
        let old: BackendArgs = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(old, BackendArgs::sumo("n.net.xml", "r.rou.xml"));
        v["routes"] = serde_json::Value::Null;
        let embedded: BackendArgs = serde_json::from_value(v).unwrap();
        assert!(embedded.routes.is_empty());
        let mut quoted = cli.sim.clone();
        quoted.sumo_args = Some("--log 'a b.log' --xml-validation never".into());
        let split = quoted.sumo_extra_args().unwrap();
        assert_eq!(split, ["--log", "a b.log", "--xml-validation", "never"]);
        quoted.sumo_args = Some("--log 'a b.log".into());
        let err = quoted.sumo_extra_args().unwrap_err().to_string();
        assert!(err.contains("unbalanced quotes"), "{err}");
        // On the embedded simulator they are refused, named.
        let err = BackendArgs {
            additional: additional.to_vec(),
            ..BackendArgs::embedded()
        };
        assert!(err
            .check()
            .unwrap_err()
            .to_string()
            .contains("--additional"));
    }
}

/// The note of [`EnvSource::adaptive_programs_note`] for a net's programs: how many lights
/// have a program of each kind other than `static`.
#[cfg(feature = "sumo")]
fn adaptive_programs_note(logics: &[greenwave_sim::sumo::net::TlLogic]) -> Option<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let lights: BTreeSet<&str> = logics.iter().map(|l| l.id.as_str()).collect();
    let mut adaptive: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for l in logics.iter().filter(|l| l.kind != "static") {
        adaptive
            .entry(l.kind.as_str())
            .or_default()
            .insert(l.id.as_str());
    }
    if adaptive.is_empty() {
        return None;
    }
    let kinds: Vec<String> = adaptive
        .iter()
        .map(|(kind, ids)| format!("{} `{kind}`", ids.len()))
        .collect();
    Some(format!(
        "note: fixed-time runs each light's own program as SUMO does; of the {} lights, {} \
         have a program SUMO adapts to traffic, not a fixed cycle",
        lights.len(),
        kinds.join(" and ")
    ))
}

#[cfg(all(test, feature = "sumo"))]
mod adaptive_note_tests {
    use super::adaptive_programs_note;
    use greenwave_sim::sumo::net::TlLogic;

    fn logic(id: &str, kind: &str) -> TlLogic {
        TlLogic {
            id: id.into(),
            program_id: "0".into(),
            kind: kind.into(),
            phases: vec![],
            offset_s: 0.0,
        }
    }

    #[test]
    fn a_net_with_actuated_programs_says_so_and_a_static_one_does_not() {
        let statics = [logic("A", "static"), logic("B", "static")];
        assert_eq!(adaptive_programs_note(&statics), None);
        let mixed = [
            logic("A", "actuated"),
            logic("B", "static"),
            logic("C", "delay_based"),
            logic("D", "actuated"),
        ];
        let note = adaptive_programs_note(&mixed).unwrap();
        assert!(
            note.contains("of the 4 lights, 2 `actuated` and 1 `delay_based` have"),
            "{note}"
        );
    }
}
