//! The classic signal controllers: fixed-time (Webster), actuated (gap-out / max-out) and
//! max-pressure (Varaiya).
//!
//! Fixed-time and actuated control are greenwave-core's rules ([`greenwave_core::control`]),
//! the same code the roadside runtime's fallback and the firmware run; this module adds how
//! their timing is chosen (Webster's method, max greens from the replaced program).
//!
//! Every controller works through the [`Env`] trait only (`sequencer`, `detectors`,
//! `action_mask`), so the same code drives the embedded simulator and the SUMO backend.
//! Each decision a controller returns one requested phase per signal; the sequencer
//! still enforces min/max green and clearance whatever is requested.

mod actuated;
mod fixed_time;
mod max_pressure;

use std::fmt;
use std::str::FromStr;

use greenwave_core::{Interval, Millis, PhaseId, Sequencer};

pub use actuated::{max_green_over, max_greens_over, Actuated, MAX_GREEN_OVER_WEBSTER};
pub use fixed_time::{webster_plan, FixedTime, FixedTimePlan};
pub use max_pressure::{MaxPressure, DETECTION_RANGE_M};

use crate::env::{Env, EnvError, EpisodeMetrics, MovementDetector};
use crate::scenario::Scenario;

pub use greenwave_core::control::SPILLBACK_FRACTION;

/// A signal controller: one requested phase per signal each decision.
pub trait Controller: Send {
    /// Short name (`fixed-time`, `actuated`, `max-pressure`).
    fn name(&self) -> &'static str;

    /// Prepares for a new episode of `env` (call after `env.reset`).
    fn reset(&mut self, env: &dyn Env);

    /// The phase each signal of `env` should be given next (one entry per signal).
    fn decide(&mut self, env: &dyn Env) -> Vec<u8>;
}

/// The built-in controllers, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ControllerKind {
    /// Fixed cycle with Webster-optimal cycle length and green splits.
    FixedTime,
    /// Vehicle-actuated: extend on detector calls, gap-out or max-out, skip empty phases.
    Actuated,
    /// Varaiya's max-pressure.
    MaxPressure,
}

impl ControllerKind {
    /// Every kind, in the order reports list them.
    pub const ALL: [ControllerKind; 3] = [
        ControllerKind::FixedTime,
        ControllerKind::Actuated,
        ControllerKind::MaxPressure,
    ];

    /// The kind's name.
    pub fn name(self) -> &'static str {
        match self {
            ControllerKind::FixedTime => "fixed-time",
            ControllerKind::Actuated => "actuated",
            ControllerKind::MaxPressure => "max-pressure",
        }
    }

    /// A controller of this kind for `scenario`: fixed-time takes its Webster plan from the
    /// scenario's demand, actuated its max greens (1.5 × the Webster greens); max-pressure
    /// needs nothing from it.
    pub fn build(self, scenario: &Scenario) -> Box<dyn Controller> {
        match self {
            ControllerKind::FixedTime => Box::new(FixedTime::webster(scenario)),
            ControllerKind::Actuated => Box::new(Actuated::for_scenario(scenario)),
            ControllerKind::MaxPressure => Box::new(MaxPressure::default()),
        }
    }
}

impl fmt::Display for ControllerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A controller name that is not one of [`ControllerKind::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown controller `{0}` (known: fixed-time, actuated, max-pressure)")]
pub struct UnknownController(pub String);

impl FromStr for ControllerKind {
    type Err = UnknownController;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ControllerKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownController(s.to_string()))
    }
}

/// Resets `env` with `seed`, then lets `controller` drive it until `episode` has been
/// simulated (to the first decision point at or after it); returns the episode's metrics.
pub fn run_episode(
    env: &mut dyn Env,
    controller: &mut dyn Controller,
    seed: u64,
    episode: Millis,
) -> Result<EpisodeMetrics, EnvError> {
    env.reset(seed)?;
    controller.reset(env);
    while env.now() < episode {
        let actions = controller.decide(env);
        env.step(&actions)?;
    }
    Ok(env.metrics())
}

/// One request per signal of `env`. `choose(signal, sequencer, green phase, detectors)`
/// is asked only for signals free to switch; the others get the only request honoured
/// now: during a change its target, before min green the green itself.
fn decide_switchable(
    env: &dyn Env,
    mut choose: impl FnMut(usize, &Sequencer, PhaseId, &[MovementDetector]) -> u8,
) -> Vec<u8> {
    (0..env.signals().len())
        .map(|i| {
            let seq = env.sequencer(i);
            match seq.interval() {
                Interval::Green { phase } if seq.min_green_served() => {
                    choose(i, seq, phase, &env.detectors(i))
                }
                other => other.target().0,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
