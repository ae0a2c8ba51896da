//! The cabinet's site configuration: the phase plans, observation layouts and fallback
//! timing a controller runs, read from a TOML file, so that a field controller needs no
//! simulator (the simulators stay fields for tests and demos).
//!
//! ```toml
//! site = "Main St / 5th Ave"
//! decision_interval_ms = 5000
//!
//! [[signal]]
//! id = "c"
//! n_lanes = 12
//! initial_phase = 0
//! fixed_cycle = [{ phase = 0, green = 20000 }, { phase = 1, green = 10000 }]  # optional
//! actuated = { passage_s = 1.0, max_green = [30000, 15000] }                  # optional
//! # optional, for a policy that reads the junction's program as a clock (its manifest's
//! # `program_clock`): the controller adds one lane per phase after the n_lanes detectors
//! # `offset_ms` is on the controller's time (ms since it started), or with
//! # `program_clock_time = "unix"` (a top-level key) on Unix time
//! program_clock = { offset_ms = 0, stages = [{ phase = 0, duration = 23000 }, { phase = 1, duration = 13000 }] }
//! [signal.plan]            # greenwave-core's PhasePlan, validated as it is read
//! movements = [{ approach = 0, turn = "Through" }, ...]
//! ...
//! ```
//!
//! `greenwave site` writes one from a scenario or a SUMO network. Reading checks
//! everything the controller would otherwise trip over later, and names the signal and
//! field: the plan (through [`PhasePlan`]'s own validation), the lane count (with a program
//! clock's lanes, within a transition record's observation), the initial phase, the fixed
//! cycle and program clock against the plan, the decision interval.

use std::path::{Path, PathBuf};

use greenwave_core::transition::MAX_OBS_DIM;
use greenwave_core::{
    ActuatedSignal, ClockStage, CycleStage, FixedCycle, Millis, ObsLayout, PhaseId, PhasePlan,
    ProgramClock, ProgramClockError,
};
use serde::{Deserialize, Serialize};

use crate::controller::{Fallback, FallbackKind, SignalSpec, EQUAL_SPLIT_GREEN};

/// A site configuration file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteConfig {
    /// Where the cabinet is (free text, for reports).
    pub site: String,
    /// Time between decisions, ms.
    pub decision_interval_ms: u32,
    /// The time the signals' `program_clock` offsets are counted on: `"controller"` (the
    /// default) or `"unix"`.
    #[serde(default, skip_serializing_if = "ClockTime::is_controller")]
    pub program_clock_time: ClockTime,
    /// The signals the cabinet controls, in controller order.
    #[serde(rename = "signal")]
    pub signals: Vec<SiteSignal>,
}

/// The time a site's program clocks count on (the `program_clock_time` key).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockTime {
    /// Milliseconds since the controller started (its first green): where the program
    /// stands in its cycle then depends on when the cabinet was started, so `offset_ms`
    /// must be set for that moment. What `greenwave site` writes (0 at the simulation's
    /// `--begin`).
    #[default]
    Controller,
    /// Milliseconds since the Unix epoch (UTC), as the system clock reads when the
    /// controller starts, and with `--realtime` at each decision: `offset_ms` is a Unix
    /// time (any one, modulo the cycle) at which the program begins a cycle, so a restart
    /// keeps the program where it was and controllers on one time reference stay in step.
    /// `offset_ms = 0` with a cycle that divides a day starts a cycle at every UTC
    /// midnight.
    Unix,
}

impl ClockTime {
    fn is_controller(&self) -> bool {
        *self == ClockTime::Controller
    }

    /// Moves each spec's program clock onto the controller's time, for a controller that
    /// starts (its time 0) at Unix time `started_unix_ms`: for [`ClockTime::Unix`] through
    /// [`ProgramClock::with_time_origin`]; [`ClockTime::Controller`] clocks are on it
    /// already.
    pub fn to_controller_time(self, specs: &mut [SignalSpec], started_unix_ms: u64) {
        if self == ClockTime::Unix {
            for clock in specs.iter_mut().filter_map(|s| s.program_clock.as_mut()) {
                *clock = clock.with_time_origin(started_unix_ms);
            }
        }
    }
}

/// One signal of a site.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteSignal {
    /// Its name (bundles for multi-signal sites are per signal id).
    pub id: String,
    /// Incoming lanes (or detection zones) with detectors: the observation layout's lanes,
    /// less a program clock's (which the controller writes).
    pub n_lanes: u16,
    /// The phase green at start.
    #[serde(default)]
    pub initial_phase: u8,
    /// The fixed-time fallback's cycle; empty: every phase in order for 20 s (rounded up
    /// to decision intervals, within min and max green).
    #[serde(default)]
    pub fixed_cycle: Vec<CycleStage>,
    /// The actuated fallback's settings; absent: passage 1 s, max greens from the plan.
    #[serde(default)]
    pub actuated: Option<ActuatedSignal>,
    /// The phase plan the supervisor enforces and bundles are checked against.
    pub plan: PhasePlan,
    /// The junction's timing program, for a policy that reads program-clock lanes
    /// (manifest `program_clock`): the controller then adds one lane per phase after the
    /// `n_lanes` detector lanes, set for the phase this program serves at the time the
    /// site's `program_clock_time` counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_clock: Option<SiteProgramClock>,
}

impl SiteSignal {
    /// Its observation layout: the `n_lanes` detector lanes, then with `program_clock` one
    /// lane per phase (greenwave-core's [`ObsLayout::for_signal`]). `None` when they do not
    /// fit a layout (refused when the file is read).
    fn layout(&self, program_clock: bool) -> Option<ObsLayout> {
        ObsLayout::for_signal(self.n_lanes.into(), self.plan.n_phases(), program_clock)
    }
}

/// A junction's timing program as a site configuration writes it:
/// `program_clock = { offset_ms = 13000, stages = [{ phase = 0, duration = 45000 }, ...] }`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteProgramClock {
    /// A time at which the program's cycle begins (any sign; only its remainder modulo
    /// the cycle matters), in ms on the site's `program_clock_time`: since the controller
    /// started (the default), or since the Unix epoch.
    pub offset_ms: i64,
    /// The program's stages in order: each phase with the time it holds, its change
    /// interval included (greenwave-core's `ClockStage`).
    pub stages: Vec<ClockStage>,
}

impl SiteProgramClock {
    /// The clock, checked against `plan`.
    pub fn clock(&self, plan: &PhasePlan) -> Result<ProgramClock, ProgramClockError> {
        let clock = ProgramClock::new(&self.stages, self.offset_ms)?;
        clock.check_plan(plan)?;
        Ok(clock)
    }

    /// How a site configuration writes `clock`.
    pub fn of(clock: &ProgramClock) -> Self {
        SiteProgramClock {
            offset_ms: i64::from(clock.offset().0),
            stages: clock.stages().to_vec(),
        }
    }
}

/// Why a site configuration was refused. Each names the file and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum SiteError {
    /// The file could not be read.
    #[error("site configuration {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not valid TOML, an unknown or missing field, or a plan that fails validation.
    #[error("site configuration {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser says (it names the line and field).
        #[source]
        source: toml::de::Error,
    },
    /// A value that parses but cannot run.
    #[error("site configuration {path}: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the signal named.
        problem: String,
    },
}

impl SiteConfig {
    /// Reads and checks the site configuration at `path`.
    pub fn load(path: &Path) -> Result<Self, SiteError> {
        let text = std::fs::read_to_string(path).map_err(|source| SiteError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and checks `text` (`path` only names it in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Self, SiteError> {
        let cfg: SiteConfig = toml::from_str(text).map_err(|source| SiteError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        cfg.check().map_err(|problem| SiteError::Invalid {
            path: path.to_path_buf(),
            problem,
        })?;
        Ok(cfg)
    }

    /// The file's text.
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        toml::to_string(self)
    }

    /// A site configuration of `specs` with the fixed cycles of `fallback` (one per signal,
    /// in order), e.g. taken from a simulator scenario.
    pub fn from_specs(
        site: &str,
        decision_interval: Millis,
        specs: &[SignalSpec],
        fallback: &Fallback,
    ) -> Self {
        let signals = specs
            .iter()
            .enumerate()
            .map(|(i, s)| SiteSignal {
                id: s.id.clone(),
                n_lanes: s.field_lanes() as u16,
                initial_phase: s.initial_phase.0,
                fixed_cycle: fallback
                    .cycles()
                    .get(i)
                    .map(|c| c.stages().to_vec())
                    .unwrap_or_default(),
                actuated: fallback.actuated_rules().get(i).cloned(),
                plan: s.plan.clone(),
                program_clock: s.program_clock.as_ref().map(SiteProgramClock::of),
            })
            .collect();
        SiteConfig {
            site: site.to_string(),
            decision_interval_ms: decision_interval.0,
            program_clock_time: ClockTime::Controller,
            signals,
        }
    }

    /// Puts program clocks counted on the controller's time onto Unix time, for a
    /// controller whose time 0 stands for Unix time `unix_ms_at_zero` (for a site from a
    /// simulation, the Unix time its `--begin` stands for): each `offset_ms` moves by it
    /// (reduced modulo the cycle) and `program_clock_time` becomes `"unix"`. A site on Unix
    /// time already is left as it is.
    pub fn put_on_unix_time(&mut self, unix_ms_at_zero: u64) -> Result<(), String> {
        if self.program_clock_time == ClockTime::Unix {
            return Ok(());
        }
        if self.signals.iter().all(|s| s.program_clock.is_none()) {
            return Err("no signal has a program clock to put on Unix time".into());
        }
        let shift = i64::try_from(unix_ms_at_zero)
            .map_err(|_| format!("Unix time {unix_ms_at_zero} ms is out of range"))?;
        for s in &mut self.signals {
            if let Some(c) = &mut s.program_clock {
                let offset = c.offset_ms.checked_add(shift).ok_or_else(|| {
                    format!("signal `{}`: offset_ms {} overflows", s.id, c.offset_ms)
                })?;
                let moved = ProgramClock::new(&c.stages, offset)
                    .map_err(|e| format!("signal `{}`: program_clock: {e}", s.id))?;
                *c = SiteProgramClock::of(&moved);
            }
        }
        self.program_clock_time = ClockTime::Unix;
        Ok(())
    }

    /// Time between decisions.
    pub fn decision_interval(&self) -> Millis {
        Millis(self.decision_interval_ms)
    }

    /// The controller's signals.
    pub fn signal_specs(&self) -> Vec<SignalSpec> {
        self.signals
            .iter()
            .map(|s| {
                // Checked when the file was read.
                let program_clock = s.program_clock.as_ref().and_then(|c| c.clock(&s.plan).ok());
                let layout = s.layout(program_clock.is_some()).unwrap_or(ObsLayout {
                    n_lanes: u16::MAX,
                    n_phases: s.plan.n_phases() as u8,
                });
                SignalSpec {
                    id: s.id.clone(),
                    plan: s.plan.clone(),
                    layout,
                    initial_phase: PhaseId(s.initial_phase),
                    program_clock,
                }
            })
            .collect()
    }

    /// The fallback of `kind`: each signal's fixed cycle (or an equal split), and for
    /// actuated its settings (or the defaults).
    pub fn fallback(&self, kind: FallbackKind) -> Fallback {
        let cycles = self
            .signals
            .iter()
            .map(|s| match FixedCycle::new(&s.fixed_cycle) {
                Ok(c) if !s.fixed_cycle.is_empty() => c,
                _ => FixedCycle::equal_split(&s.plan, EQUAL_SPLIT_GREEN, self.decision_interval()),
            })
            .collect();
        let fallback = Fallback::fixed_time(cycles);
        if kind != FallbackKind::Actuated {
            return fallback;
        }
        let rules = self
            .signals
            .iter()
            .map(|s| s.actuated.clone().unwrap_or_default())
            .collect();
        fallback.with_actuated_rules(rules)
    }

    fn check(&self) -> Result<(), String> {
        if self.decision_interval_ms == 0 {
            return Err("decision_interval_ms must be above 0".into());
        }
        if self.signals.is_empty() {
            return Err("no [[signal]]".into());
        }
        for (i, s) in self.signals.iter().enumerate() {
            let name = format!("signal {i} (`{}`)", s.id);
            if self.signals[..i].iter().any(|o| o.id == s.id) {
                return Err(format!("{name}: id used twice"));
            }
            if s.n_lanes == 0 {
                return Err(format!("{name}: n_lanes must be above 0"));
            }
            if s.initial_phase as usize >= s.plan.n_phases() {
                return Err(format!(
                    "{name}: initial_phase {} is not in its plan ({} phases)",
                    s.initial_phase,
                    s.plan.n_phases()
                ));
            }
            if !s.fixed_cycle.is_empty() {
                let cycle = FixedCycle::new(&s.fixed_cycle).map_err(|e| format!("{name}: {e}"))?;
                cycle
                    .check_plan(&s.plan)
                    .map_err(|e| format!("{name}: fixed_cycle: {e}"))?;
            }
            if let Some(c) = &s.program_clock {
                c.clock(&s.plan)
                    .map_err(|e| format!("{name}: program_clock: {e}"))?;
            }
            let dim = s.layout(s.program_clock.is_some()).map(|l| l.dim());
            if dim.is_none_or(|d| d > MAX_OBS_DIM) {
                let clock = match s.program_clock {
                    Some(_) => format!(" and the program clock's {}", s.plan.n_phases()),
                    None => String::new(),
                };
                return Err(format!(
                    "{name}: n_lanes {}{clock} lanes make an observation of more than the \
                     {MAX_OBS_DIM} floats a transition record holds",
                    s.n_lanes
                ));
            }
            if let Some(a) = &s.actuated {
                if !(a.passage_s.is_finite() && a.passage_s >= 0.0) {
                    return Err(format!("{name}: actuated.passage_s must be a number ≥ 0"));
                }
                for (field, len) in [
                    ("max_green", a.max_green.len()),
                    ("assigned", a.assigned.len()),
                ] {
                    if len > s.plan.n_phases() {
                        return Err(format!(
                            "{name}: actuated.{field} has {len} entries, the plan {} phases",
                            s.plan.n_phases()
                        ));
                    }
                }
                for (i, (max, phase)) in a.max_green.iter().zip(s.plan.phases()).enumerate() {
                    if *max < phase.timing.min_green {
                        return Err(format!(
                            "{name}: actuated.max_green[{i}] = {} ms is below the phase's min \
                             green {} ms: the fallback would max out the phase as soon as \
                             min green is served",
                            max.0, phase.timing.min_green.0
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use greenwave_core::{MovementSet, PhaseTiming};

    fn site() -> SiteConfig {
        let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 40, 3, 2)).unwrap();
        let spec = SignalSpec {
            id: "c".into(),
            layout: ObsLayout {
                n_lanes: 12,
                n_phases: 4,
            },
            initial_phase: PhaseId(0),
            plan: plan.clone(),
            program_clock: None,
        };
        let fallback = Fallback::fixed_time(vec![FixedCycle::midpoint(&plan)])
            .with_actuated_rules(vec![ActuatedSignal::new(1.5, &[Millis(30_000); 4])]);
        SiteConfig::from_specs("test junction", Millis(5000), &[spec], &fallback)
    }

    #[test]
    fn a_program_clock_adds_its_lanes_and_round_trips() {
        let mut spec = site().signal_specs().remove(0);
        let stages =
            [(0u8, 25_000u32), (1, 10_000), (2, 25_000), (3, 10_000)].map(|(p, ms)| ClockStage {
                phase: p,
                duration: Millis(ms),
            });
        spec.program_clock = Some(ProgramClock::new(&stages, 13_000).unwrap());
        spec.layout.n_lanes += 4;
        let fallback = Fallback::fixed_time(vec![FixedCycle::midpoint(&spec.plan)]);
        let s = SiteConfig::from_specs("clocked", Millis(5000), &[spec.clone()], &fallback);
        assert_eq!(
            s.signals[0].n_lanes, 12,
            "n_lanes counts the detector lanes"
        );
        let text = s.to_toml().unwrap();
        assert!(text.contains("offset_ms = 13000"), "{text}");
        let back = SiteConfig::parse(&text, Path::new("site.toml")).unwrap();
        let specs = back.signal_specs();
        assert_eq!(specs[0], spec);
        assert_eq!(specs[0].layout.n_lanes, 16);
        assert_eq!(specs[0].field_lanes(), 12);
        // A stage for a phase the plan lacks is refused, naming the signal and field.
        let mut bad = s.clone();
        bad.signals[0].program_clock.as_mut().unwrap().stages[3].phase = 9;
        let bad = bad.to_toml().unwrap();
        let e = SiteConfig::parse(&bad, Path::new("site.toml")).unwrap_err();
        assert!(
            e.to_string()
                .contains("signal 0 (`c`): program_clock: stage 3: phase 9"),
            "{e}"
        );
        // Detector lanes that leave no room in a transition record for the clock's are
        // refused too: 2 × (120 + 4) + 4 + 3 = 255 floats fit the 256, 121 lanes do not.
        let mut wide = s.clone();
        wide.signals[0].n_lanes = 121;
        let e = SiteConfig::parse(&wide.to_toml().unwrap(), Path::new("site.toml")).unwrap_err();
        assert!(
            e.to_string().contains(
                "signal 0 (`c`): n_lanes 121 and the program clock's 4 lanes make an \
                 observation of more than the 256 floats"
            ),
            "{e}"
        );
        wide.signals[0].n_lanes = 120;
        let ok = SiteConfig::parse(&wide.to_toml().unwrap(), Path::new("site.toml")).unwrap();
        assert_eq!(ok.signal_specs()[0].layout.dim(), 255);
        // Without the clock, 124 lanes fit (255 floats).
        wide.signals[0].program_clock = None;
        wide.signals[0].n_lanes = 124;
        assert!(SiteConfig::parse(&wide.to_toml().unwrap(), Path::new("site.toml")).is_ok());
        wide.signals[0].n_lanes = 125;
        assert!(SiteConfig::parse(&wide.to_toml().unwrap(), Path::new("site.toml")).is_err());
        wide.signals[0].n_lanes = u16::MAX;
        assert!(SiteConfig::parse(&wide.to_toml().unwrap(), Path::new("site.toml")).is_err());
    }

    #[test]
    fn a_unix_program_clock_keeps_its_place_in_the_cycle_across_starts() {
        let stages =
            [(0u8, 25_000u32), (1, 5_000), (2, 25_000), (3, 5_000)].map(|(p, ms)| ClockStage {
                phase: p,
                duration: Millis(ms),
            });
        let mut spec = site().signal_specs().remove(0);
        spec.program_clock = Some(ProgramClock::new(&stages, 0).unwrap());
        spec.layout.n_lanes += 4;
        let fallback = Fallback::fixed_time(vec![FixedCycle::midpoint(&spec.plan)]);
        let mut s = SiteConfig::from_specs("unix", Millis(5000), &[spec], &fallback);
        s.program_clock_time = ClockTime::Unix;
        let text = s.to_toml().unwrap();
        assert!(text.contains("program_clock_time = \"unix\""), "{text}");
        let back = SiteConfig::parse(&text, Path::new("site.toml")).unwrap();
        assert_eq!(back, s);
        let on_unix = back.signal_specs()[0].program_clock.clone().unwrap();
        // Two controllers, started 23 s and 51 s into a cycle (Unix time mod 60 s), see
        // the program where the Unix clock has it, each on its own time.
        for started in [1_700_000_003_000u64, 1_700_000_031_000] {
            let mut specs = back.signal_specs();
            ClockTime::Unix.to_controller_time(&mut specs, started);
            let clock = specs[0].program_clock.as_ref().unwrap();
            for t in (0..120_000).step_by(1_000) {
                assert_eq!(clock.phase_at(t), on_unix.phase_at(started + t), "t = {t}");
            }
        }
        let mut specs = back.signal_specs();
        specs[0].program_clock = Some(on_unix.clone());
        // 1_700_000_003_000 is 23 s into a cycle: phase 0 until 25 s, then phase 1.
        ClockTime::Unix.to_controller_time(&mut specs, 1_700_000_003_000);
        let clock = specs[0].program_clock.as_ref().unwrap();
        assert_eq!(clock.phase_at(1_000), PhaseId(0));
        assert_eq!(clock.phase_at(2_000), PhaseId(1));
        // The controller's own time is left as it is.
        let mut specs = back.signal_specs();
        ClockTime::Controller.to_controller_time(&mut specs, 1_700_000_003_000);
        assert_eq!(specs[0].program_clock.as_ref(), Some(&on_unix));
        // A site on the controller's time, put on Unix time for a start at `started`,
        // gives the same clocks as it did on the controller's time.
        let mut on_controller = back.clone();
        on_controller.program_clock_time = ClockTime::Controller;
        let mut moved = on_controller.clone();
        moved.put_on_unix_time(1_700_000_003_000).unwrap();
        assert_eq!(moved.program_clock_time, ClockTime::Unix);
        let mut specs = moved.signal_specs();
        ClockTime::Unix.to_controller_time(&mut specs, 1_700_000_003_000);
        assert_eq!(specs, on_controller.signal_specs());
        let again = moved.clone();
        moved.put_on_unix_time(5).unwrap();
        assert_eq!(moved, again, "already on Unix time: unchanged");
        let e = site().put_on_unix_time(5).unwrap_err();
        assert!(e.contains("no signal has a program clock"), "{e}");
        // The default is not written, and an unknown time is refused by name.
        assert!(!site().to_toml().unwrap().contains("program_clock_time"));
        let bad = text.replace("\"unix\"", "\"local\"");
        let e = SiteConfig::parse(&bad, Path::new("site.toml")).unwrap_err();
        assert!(e.to_string().contains("local"), "{e}");
    }

    #[test]
    fn round_trips_through_toml() {
        let mut s = site();
        let through = MovementSet::from_ids(&[1, 2, 7, 8]);
        let a = s.signals[0].actuated.take().unwrap();
        s.signals[0].actuated = Some(a.with_assigned(&[through]));
        let text = s.to_toml().unwrap();
        let back = SiteConfig::parse(&text, Path::new("site.toml")).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.signal_specs()[0].layout.dim(), 31);
        let f = back.fallback(FallbackKind::Actuated);
        assert_eq!(f.actuated_rules()[0].assigned[0], through);
        assert_eq!(f.cycles()[0].stages()[1].green, Millis(22_500));
        assert_eq!(f.actuated_rules()[0].passage_s, 1.5);
    }

    #[test]
    fn refuses_what_cannot_run_naming_signal_and_field() {
        let text = site().to_toml().unwrap();
        let err = |t: &str| {
            SiteConfig::parse(t, Path::new("s.toml"))
                .unwrap_err()
                .to_string()
        };
        let e = err(&text.replace("n_lanes = 12", "n_lanes = 0"));
        assert!(e.contains("signal 0 (`c`): n_lanes"), "{e}");
        let e = err(&text.replace("initial_phase = 0", "initial_phase = 7"));
        assert!(e.contains("initial_phase 7"), "{e}");
        let e = err(&text.replace("green = 22500", "green = 90000"));
        assert!(e.contains("fixed_cycle") && e.contains("90000"), "{e}");
        let e = err(&text.replace("site = ", "colour = \"red\"\nsite = "));
        assert!(e.contains("colour"), "{e}");
        let e = err(&text.replace("yellow = 3000", "yellow = 0"));
        assert!(e.contains("s.toml") && e.contains("yellow"), "{e}");
        let e = err("site = 1");
        assert!(e.contains("s.toml"), "{e}");
        let mut long = site();
        let a = long.signals[0].actuated.take().unwrap();
        let n = long.signals[0].plan.n_phases();
        long.signals[0].actuated = Some(a.with_assigned(&vec![MovementSet(1); n + 1]));
        let e = err(&long.to_toml().unwrap());
        assert!(e.contains("actuated.assigned has"), "{e}");
        let mut short = site();
        let zeros = vec![Millis::ZERO; short.signals[0].plan.n_phases()];
        short.signals[0].actuated = Some(ActuatedSignal::new(1.0, &zeros));
        let e = err(&short.to_toml().unwrap());
        assert!(e.contains("actuated.max_green[0] = 0 ms is below"), "{e}");
    }

    #[test]
    fn an_empty_cycle_is_an_equal_split() {
        let mut s = site();
        s.signals[0].fixed_cycle.clear();
        s.signals[0].actuated = None;
        let f = s.fallback(FallbackKind::Actuated);
        assert!(f.cycles()[0]
            .stages()
            .iter()
            .all(|st| st.green == Millis(20_000)));
        assert_eq!(f.actuated_rules()[0], ActuatedSignal::default());
    }
}
