//! The SUMO backend: greenwave's [`Env`](crate::Env) over a `sumo` child process driven
//! through TraCI (feature `sumo`).
//!
//! * [`traci`]: a small std-only TraCI client (binary protocol over TCP, batched messages,
//!   a timeout on every reply, however its bytes arrive).
//! * [`net`]: reads a `.net.xml` (traffic lights, their controlled links, static programs,
//!   junction foes, lanes) with quick-xml.
//! * [`model`]: turns each traffic light into a greenwave [`PhasePlan`](greenwave_core::PhasePlan)
//!   and maps sequencer displays back to SUMO state strings.
//! * [`tripinfo`]: episode metrics from SUMO's own tripinfo output.
//! * [`sumocfg`]: a scenario's `.sumocfg`, read as greenwave runs it.
//! * [`SumoEnv`]: the environment, and [`run_static_program`] for the network's own program.
//!
//! SUMO is found through [`SumoConfig::sumo_binary`], then `$SUMO_HOME/bin/sumo`, then
//! `PATH`; the reference is `pip install eclipse-sumo==1.28.0`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use greenwave_core::{Millis, RewardKind};

pub mod approach;
mod clock;
mod env;
pub mod model;
mod nema;
pub mod net;
mod process;
mod readings;
pub mod sumocfg;
pub mod timing;
pub mod traci;
pub mod tripinfo;
mod waits;
pub mod waut;
mod xml;

pub use env::{
    observed_layout, run_static_program, SumoEnv, PEDESTRIANS_PER_ZONE, STOP_BAR_ZONE_M,
    ZONES_PER_LANE,
};
pub use model::{build_models, ModelOptions, NetModels, StaticSignal, TlsModel};
pub use net::NetFile;
pub use readings::ReadMode;
pub use sumocfg::{SumoCfgFile, SumoFiles};
pub use timing::{TimingOverrides, TimingSpec};

/// Oldest TraCI API level accepted (SUMO 1.28 speaks 22; every command used here is older).
pub const MIN_TRACI_API: i32 = 20;

/// How to install SUMO, quoted in errors.
pub const INSTALL_HINT: &str = "install it with `pip install eclipse-sumo==1.28.0` and set \
SUMO_HOME to the package folder (e.g. SUMO_HOME=<venv>/lib/python3.11/site-packages/sumo), \
or put a `sumo` binary on PATH";

/// Everything that can go wrong in the SUMO backend. Each message names the file, traffic
/// light or command at fault, and SUMO's own last log lines where it has any.
#[derive(Debug, thiserror::Error)]
pub enum SumoError {
    /// No `sumo` binary was found.
    #[error("SUMO binary not found (looked at: {looked}); {hint}", hint = INSTALL_HINT)]
    NotFound {
        /// The places looked at.
        looked: String,
    },
    /// The binary exists but could not be started.
    #[error("cannot start SUMO {binary:?}: {source}")]
    Spawn {
        /// The binary.
        binary: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// SUMO exited (or was killed) while greenwave needed it.
    #[error("SUMO exited ({status}) while {context}; its log ends with:\n{log_tail}")]
    Died {
        /// Exit status as the OS reports it.
        status: String,
        /// What greenwave was doing.
        context: String,
        /// The last lines SUMO printed.
        log_tail: String,
    },
    /// SUMO did not accept the TraCI connection in time.
    #[error("SUMO did not accept a TraCI connection on port {port} within {waited_s:.1} s; its log ends with:\n{log_tail}")]
    ConnectTimeout {
        /// The port.
        port: u16,
        /// Seconds waited.
        waited_s: f64,
        /// The last lines SUMO printed.
        log_tail: String,
    },
    /// Talking to SUMO failed (timeout, malformed reply, refused command).
    #[error("{context}: {source}")]
    Traci {
        /// What greenwave was doing.
        context: String,
        /// The protocol-level error.
        source: traci::TraciError,
    },
    /// The connection was closed after an earlier error or the episode's end.
    #[error("no SUMO connection: {0}")]
    NotConnected(String),
    /// SUMO's TraCI API is too old.
    #[error("SUMO speaks TraCI API {got} ({version}); greenwave needs API >= {min}")]
    Version {
        /// The API level SUMO reported.
        got: i32,
        /// SUMO's version string.
        version: String,
        /// The oldest accepted.
        min: i32,
    },
    /// A network file that cannot be read or used.
    #[error("{path}: {message}")]
    Net {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A SUMO configuration file (`.sumocfg`) that cannot be read or used.
    #[error("{path}: {message}")]
    ConfigFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A network without traffic lights.
    #[error("{path}: the network has no traffic lights; the SUMO backend controls traffic-light junctions (build the net with junction type traffic_light or --tls.guess)")]
    NoTrafficLights {
        /// The file.
        path: PathBuf,
    },
    /// A traffic light greenwave cannot control as it is.
    #[error("traffic light {tls}: {message}")]
    Tls {
        /// The traffic light id.
        tls: String,
        /// What is wrong.
        message: String,
    },
    /// No sequencer could be built on the phase plan derived from a traffic light.
    #[error("traffic light {tls}: {source}")]
    Sequencer {
        /// The traffic light id.
        tls: String,
        /// Why.
        source: greenwave_core::sequencer::SequencerError,
    },
    /// The phase plan derived from a traffic light was refused.
    #[error("traffic light {tls}: derived phase plan refused: {source}")]
    Plan {
        /// The traffic light id.
        tls: String,
        /// Why.
        source: greenwave_core::PlanError,
    },
    /// A tripinfo file that cannot be read.
    #[error("{path}: {message}")]
    Tripinfo {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A configuration value that cannot work.
    #[error("invalid SUMO configuration: {0}")]
    Config(String),
    /// A local file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// How to run an episode on SUMO.
#[derive(Clone, Debug, PartialEq)]
pub struct SumoConfig {
    /// The network (`.net.xml`); traffic lights, their static programs and the junction
    /// conflicts are read from it.
    pub net: PathBuf,
    /// Route or trip files (`.rou.xml`).
    pub routes: Vec<PathBuf>,
    /// Further SUMO additional files (vehicle types, signal programs, detectors, ...),
    /// loaded after the net; the `<tlLogic>` programs in them count as the net's own (see
    /// [`SumoConfig::read_net`]).
    pub additional: Vec<PathBuf>,
    /// Simulation time the episode starts at (SUMO `--begin`), in seconds.
    pub begin_s: f64,
    /// Episode length in simulated seconds; the episode ends at the first decision point
    /// at or after it.
    pub seconds: f64,
    /// Seed of the first episode (SUMO `--seed`; `reset` takes its own).
    pub seed: u64,
    /// Simulated seconds per decision (`Env::step`).
    pub decision_interval_s: f64,
    /// SUMO's step length (`--step-length`); every interval must be a multiple of it.
    pub step_length_s: f64,
    /// Timing overrides on top of each light's own program (see [`timing`]); the
    /// default keeps the net's yellow, all-red and max green, with min green 5 s.
    pub timing: TimingSpec,
    /// Program to run on lights that have one of this id (`--program`); the others, and
    /// all lights when `None`, run their active program (the last in the net file).
    pub program: Option<String>,
    /// The reward signals are scored on.
    pub reward: RewardKind,
    /// What a second a pedestrian stands on a signal's walking areas or crossings (at a
    /// red crossing, mostly) costs in the delay-accrued rewards, against a second of delay
    /// a vehicle loses: 1 (a person's second counts as a vehicle's) unless set; 0 leaves
    /// pedestrians out, as every reward did before. The other rewards do not count
    /// pedestrians. Read only on nets with walking areas; tools/README.md, finding 35.
    pub pedestrian_weight: f32,
    /// An explicit `sumo` binary; otherwise `$SUMO_HOME/bin/sumo`, then `PATH`.
    pub sumo_binary: Option<PathBuf>,
    /// Longest wait for any one TraCI reply, in seconds (a reply to a step includes the
    /// time SUMO takes to simulate it).
    pub reply_timeout_s: f64,
    /// Longest wait for SUMO to load the network and accept the connection, in seconds.
    pub startup_timeout_s: f64,
    /// Extra command-line options passed to SUMO as they are.
    pub extra_args: Vec<String>,
    /// How readings travel from SUMO (batched getters or subscriptions).
    pub read_mode: ReadMode,
    /// Whether each signal's observation ends with program-clock lanes: one per plan
    /// phase, set for the phase the light's own program serves at that moment
    /// (greenwave-core's `ProgramClock`; tools/README.md, "Training on real networks",
    /// finding 25).
    pub program_clock: bool,
    /// Whether each signal's observation has two pedestrian zones per crossing it controls
    /// (the kerb and the crossing), after its lanes' zones; on unless set off (policies
    /// trained before finding 36 of tools/README.md observe none). A net without crossings
    /// observes the same either way.
    pub pedestrian_zones: bool,
    /// Whether SUMO runs in a process group of its own (Unix), out of reach of a Ctrl-C
    /// at the terminal: for a caller that stops cleanly on SIGINT and then closes SUMO
    /// itself (`greenwave-controller run`), under which SUMO would otherwise die mid-step.
    /// Off by default, so that a Ctrl-C ends SUMO with greenwave, even while SUMO still
    /// loads the net (in a group of its own it would then wait for a connection that
    /// never comes). Once connected SUMO ends with greenwave either way: it quits when
    /// the TraCI socket closes.
    pub own_process_group: bool,
}

/// The longest TraCI reply or start-up timeout taken: a deadline this far off is no
/// deadline, and one far past it is beyond what the clock can add.
const MAX_TIMEOUT_S: f64 = 1e6;

impl SumoConfig {
    /// Defaults for `net` and `routes`: a 3600 s episode from time 0, 5 s decisions, 1 s
    /// SUMO steps, each light's timing from its own program (min green 5 s), seed 0, the
    /// reward [`RewardKind::SUMO_DEFAULT`], program-clock lanes and pedestrian zones in the
    /// observation.
    pub fn new(net: impl Into<PathBuf>, routes: impl Into<PathBuf>) -> Self {
        Self::with_routes(net, vec![routes.into()])
    }

    /// [`SumoConfig::new`] with any number of route files, none included (the demand may
    /// be in additional files, as a `.sumocfg` can have it).
    pub fn with_routes(net: impl Into<PathBuf>, routes: Vec<PathBuf>) -> Self {
        SumoConfig {
            net: net.into(),
            routes,
            additional: Vec::new(),
            begin_s: 0.0,
            seconds: 3600.0,
            seed: 0,
            decision_interval_s: 5.0,
            step_length_s: 1.0,
            timing: TimingSpec::default(),
            program: None,
            reward: RewardKind::SUMO_DEFAULT,
            pedestrian_weight: RewardKind::PEDESTRIAN_WEIGHT_DEFAULT,
            sumo_binary: None,
            reply_timeout_s: 60.0,
            startup_timeout_s: 60.0,
            extra_args: Vec::new(),
            read_mode: ReadMode::default(),
            program_clock: true,
            pedestrian_zones: true,
            own_process_group: false,
        }
    }

    /// Checks the values that SUMO would otherwise reject late, that would desynchronise
    /// greenwave's sequencer from SUMO's clock, or that no clock can count (a timeout).
    pub fn validate(&self) -> Result<(), SumoError> {
        let bad = |m: String| Err(SumoError::Config(m));
        for (name, v) in [
            ("begin_s", self.begin_s),
            ("seconds", self.seconds),
            ("decision_interval_s", self.decision_interval_s),
            ("step_length_s", self.step_length_s),
            ("reply_timeout_s", self.reply_timeout_s),
            ("startup_timeout_s", self.startup_timeout_s),
        ] {
            if !v.is_finite() || v < 0.0 || (v == 0.0 && name != "begin_s") {
                return bad(format!("{name} = {v} must be a positive number of seconds"));
            }
        }
        for (name, v) in [
            ("reply_timeout_s", self.reply_timeout_s),
            ("startup_timeout_s", self.startup_timeout_s),
        ] {
            if v > MAX_TIMEOUT_S {
                return bad(format!(
                    "{name} = {v} s is longer than {MAX_TIMEOUT_S} s (about 11 days)"
                ));
            }
        }
        for arg in &self.extra_args {
            if let Some(why) = sumocfg::refused_argument(arg) {
                return bad(format!("SUMO option {arg}: {why}"));
            }
        }
        if !self.pedestrian_weight.is_finite() || self.pedestrian_weight < 0.0 {
            return bad(format!(
                "pedestrian_weight = {} must be a non-negative number",
                self.pedestrian_weight
            ));
        }
        // Simulated time is counted in `Millis` (u32 milliseconds, 49.7 days).
        let longest_s = f64::from(u32::MAX / 1000);
        for (name, v) in [
            ("seconds", self.seconds),
            ("decision_interval_s", self.decision_interval_s),
        ] {
            if v > longest_s {
                return bad(format!(
                    "{name} = {v} is longer than {longest_s} s, the most the clock counts \
                     (u32 milliseconds)"
                ));
            }
        }
        let forever_s = traci::SUBSCRIBE_FOREVER.1;
        if self.begin_s + self.seconds > forever_s {
            return bad(format!(
                "begin_s + seconds = {} s ends after {forever_s} s, where TraCI's \"forever\" \
                 ends (SUMO would end greenwave's subscriptions there)",
                self.begin_s + self.seconds
            ));
        }
        let step_ms = (self.step_length_s * 1000.0).round();
        if step_ms < 1.0 || (self.step_length_s * 1000.0 - step_ms).abs() > 1e-6 {
            return bad(format!(
                "step_length_s = {} must be a whole number of milliseconds",
                self.step_length_s
            ));
        }
        if self.step_length_s > self.decision_interval_s {
            return bad(format!(
                "step_length_s = {} s is longer than the decision interval ({} s): the \
                 signals change at most once a SUMO step",
                self.step_length_s, self.decision_interval_s
            ));
        }
        let multiple = |name: &str, ms: f64| -> Result<(), SumoError> {
            if (ms / step_ms - (ms / step_ms).round()).abs() > 1e-9 {
                return bad(format!(
                    "{name} = {} s is not a multiple of the SUMO step length {} s: the \
                     sequencer's display changes must fall on SUMO steps",
                    ms / 1000.0,
                    self.step_length_s
                ));
            }
            Ok(())
        };
        multiple("decision_interval_s", self.decision_interval_s * 1000.0)?;
        for (what, p) in std::iter::once(("network", &self.net))
            .chain(self.routes.iter().map(|r| ("route file", r)))
            .chain(self.additional.iter().map(|a| ("additional file", a)))
        {
            if p.is_dir() {
                return bad(format!("{what} {} is a folder, not a file", p.display()));
            }
            if !p.is_file() {
                return bad(format!("{what} {} does not exist", p.display()));
            }
        }
        if self.routes.is_empty() && self.additional.is_empty() {
            return bad(
                "no route file given (nor an additional file the demand could be in)".into(),
            );
        }
        Ok(())
    }

    /// Sets the timing from a timing file (if any) and command-line overrides, which beat
    /// the file; the decision interval is `decision_interval_s`, else the file's, else
    /// unchanged; `program` picks the program of lights that have one of that id.
    pub fn set_timing(
        &mut self,
        file: Option<&Path>,
        command_line: TimingOverrides,
        decision_interval_s: Option<f64>,
        program: Option<String>,
    ) -> Result<(), SumoError> {
        let mut spec = match file {
            Some(path) => TimingSpec::load(path)?,
            None => TimingSpec::default(),
        };
        spec.command_line = command_line;
        if let Some(d) = decision_interval_s.or(spec.decision_interval_s) {
            self.decision_interval_s = d;
        }
        self.timing = spec;
        self.program = program;
        Ok(())
    }

    /// The episode length, `seconds` to the millisecond.
    pub fn episode(&self) -> Millis {
        timing::secs_to_ms(self.seconds)
    }

    /// The decision interval, `decision_interval_s` to the millisecond.
    pub fn decision_interval(&self) -> Millis {
        timing::secs_to_ms(self.decision_interval_s)
    }

    /// SUMO's step in whole milliseconds (valid once [`validate`](Self::validate) passed).
    pub fn step_ms(&self) -> u32 {
        (self.step_length_s * 1000.0).round().max(1.0) as u32
    }

    /// Reads the net with the traffic-light programs of the additional files, in the order
    /// SUMO loads them (a program an additional file gives a light becomes its active one).
    pub fn read_net(&self) -> Result<NetFile, SumoError> {
        let mut net = NetFile::read(&self.net)?;
        for file in &self.additional {
            net.add_programs(file)?;
        }
        net.begin_s = self.begin_s;
        Ok(net)
    }

    /// Reads the net and derives every light's model under this configuration's program
    /// choice and timing: what [`SumoEnv::new`] controls and what it leaves on its program.
    pub fn models(&self) -> Result<NetModels, SumoError> {
        let net = self.read_net()?;
        build_models(
            &net,
            ModelOptions {
                program: self.program.as_deref(),
                timing: &self.timing,
                step_ms: self.step_ms(),
            },
        )
    }
}

/// Finds the `sumo` binary: `explicit` if given (it must exist), else
/// `$SUMO_HOME/bin/sumo`, else the first `sumo` on `PATH`.
pub fn find_sumo_binary(explicit: Option<&Path>) -> Result<PathBuf, SumoError> {
    find_sumo_binary_in(
        explicit,
        std::env::var_os("SUMO_HOME").as_deref(),
        std::env::var_os("PATH").as_deref(),
    )
}

/// For test suites that run SUMO: whether a `sumo` binary is found ([`find_sumo_binary`]).
/// Without one the caller skips, and this says why on stderr, except under CI (`CI` set),
/// where SUMO is required and this panics: a SUMO test is never skipped where it is meant
/// to run.
pub fn available_for_tests() -> bool {
    match find_sumo_binary(None) {
        Ok(_) => true,
        Err(e) => {
            if std::env::var_os("CI").is_some() {
                panic!("SUMO is required under CI (.ci/run installs it): {e}");
            }
            eprintln!("SKIPPED: {e}");
            false
        }
    }
}

/// [`find_sumo_binary`] with the environment given explicitly (testable without touching
/// the process environment).
pub fn find_sumo_binary_in(
    explicit: Option<&Path>,
    sumo_home: Option<&OsStr>,
    path: Option<&OsStr>,
) -> Result<PathBuf, SumoError> {
    let exe = format!("sumo{}", std::env::consts::EXE_SUFFIX);
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(SumoError::NotFound {
                looked: p.display().to_string(),
            })
        };
    }
    let mut looked = Vec::new();
    if let Some(home) = sumo_home.filter(|h| !h.is_empty()) {
        let p = Path::new(home).join("bin").join(&exe);
        if p.is_file() {
            return Ok(p);
        }
        looked.push(format!("{} (from SUMO_HOME)", p.display()));
    } else {
        looked.push("$SUMO_HOME/bin (SUMO_HOME not set)".into());
    }
    if let Some(path) = path {
        for dir in std::env::split_paths(path) {
            let p = dir.join(&exe);
            if p.is_file() {
                return Ok(p);
            }
        }
        looked.push("every PATH entry".into());
    }
    Err(SumoError::NotFound {
        looked: looked.join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binary_says_how_to_install() {
        let err = find_sumo_binary_in(
            None,
            Some(OsStr::new("/nonexistent/sumo-home")),
            Some(OsStr::new("/nonexistent/bin")),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("pip install eclipse-sumo==1.28.0"), "{msg}");
        assert!(msg.contains("/nonexistent/sumo-home/bin/sumo"), "{msg}");
        let err = find_sumo_binary_in(Some(Path::new("/no/such/sumo")), None, None).unwrap_err();
        assert!(err.to_string().contains("/no/such/sumo"));
    }

    #[test]
    fn config_refuses_intervals_off_the_sumo_step() {
        let dir = env!("CARGO_MANIFEST_DIR");
        let mut cfg = SumoConfig::new(
            format!("{dir}/fixtures/sumo/single.net.xml"),
            format!("{dir}/fixtures/sumo/single.rou.xml"),
        );
        cfg.validate().unwrap();
        cfg.decision_interval_s = 2.5;
        assert!(cfg.validate().unwrap_err().to_string().contains("multiple"));
        cfg.decision_interval_s = 5.0;
        cfg.step_length_s = 6e9; // passed the multiple check: 5000 / 6e12 rounds to 0
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("longer than the decision interval"), "{err}");
        cfg.step_length_s = 0.5;
        cfg.validate().unwrap();
        cfg.step_length_s = 1.0;
        cfg.seconds = f64::NAN;
        assert!(cfg.validate().is_err());
        cfg.seconds = 5e6;
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("u32 milliseconds"));
        cfg.seconds = 60.0;
        cfg.begin_s = 1e12;
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("TraCI's \"forever\""), "{err}");
        cfg.begin_s = 1e9;
        cfg.validate().unwrap();
        cfg.routes = vec!["/no/such.rou.xml".into()];
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("/no/such.rou.xml"));
        // No route files: the demand may be in additional files (SUMO's game `square`),
        // but with neither there is none.
        cfg.routes.clear();
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("no route file given"), "{err}");
        cfg.additional = vec![format!("{dir}/fixtures/sumo/single.rou.xml").into()];
        cfg.validate().unwrap();
    }

    #[test]
    fn an_env_error_keeps_the_sumo_error_and_its_source() {
        use std::error::Error as _;
        let sumo = SumoError::Traci {
            context: "reading SUMO's replies".into(),
            source: traci::TraciError::Timeout { timeout_s: 60.0 },
        };
        let shown = sumo.to_string();
        let env = crate::EnvError::from(sumo);
        assert_eq!(env.to_string(), shown, "same message as before");
        let source = env.source().expect("the TraCI error is kept as the source");
        assert!(
            source.to_string().contains("no reply from SUMO"),
            "{source}"
        );
        assert!(matches!(
            env,
            crate::EnvError::Sumo(SumoError::Traci {
                source: traci::TraciError::Timeout { .. },
                ..
            })
        ));
    }
}
