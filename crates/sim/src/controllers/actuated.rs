//! Vehicle-actuated control: gap-out / max-out on detector calls.

use greenwave_core::{ActuatedSignal, Millis};

use super::{Controller, FixedTime};
use crate::env::Env;
use crate::scenario::Scenario;

/// How much longer than its Webster green a phase may be extended (the usual setting of
/// max green in actuated timing plans: 1.25 to 1.5 times the fixed-time green).
pub const MAX_GREEN_OVER_WEBSTER: f64 = 1.5;

/// Actuated control of every signal: greenwave-core's [`ActuatedSignal`] (gap-out /
/// max-out with spill-back gating, the one actuated rule of the workspace) per signal, with
/// max greens chosen per episode as below.
///
/// **Max green.** Where `max_green_s` gives none for a signal, a signal that replaces a
/// program of its own (a SUMO light) caps each phase at [`MAX_GREEN_OVER_WEBSTER`] times
/// the program's green for it, as a timing plan caps actuated greens at 1.25–1.5 times the
/// fixed-time greens; near saturation, gap-out alone lets each long red's queue earn the
/// next long green, and the cycle grows until every phase maxes out at the plan's max green.
#[derive(Clone, Debug)]
pub struct Actuated {
    /// Largest gap (s) since the detector zone emptied that still extends the green.
    pub passage_s: f32,
    /// Max green (s) per signal and phase; a signal or phase missing here uses
    /// [`MAX_GREEN_OVER_WEBSTER`] times its program's green (see above), else its plan's max
    /// green (which the sequencer enforces in any case).
    pub max_green_s: Vec<Vec<f64>>,
    /// Each signal's rule for this episode: `max_green_s`, completed at reset.
    episode: Vec<ActuatedSignal>,
}

impl Default for Actuated {
    /// Passage 1 s, max green from the plans.
    fn default() -> Self {
        Actuated::new(1.0, Vec::new())
    }
}

impl Actuated {
    /// Actuated control with passage `passage_s` and max greens `max_green_s` (per signal
    /// and phase; see [`Actuated::max_green_s`]).
    pub fn new(passage_s: f32, max_green_s: Vec<Vec<f64>>) -> Self {
        Actuated {
            passage_s,
            max_green_s,
            episode: Vec::new(),
        }
    }

    /// Actuated control for `scenario`: max green of each phase 1.5 times its Webster green
    /// for the scenario's demand (phases Webster leaves out keep their plan's max green).
    pub fn for_scenario(scenario: &Scenario) -> Self {
        let webster = FixedTime::webster(scenario);
        let max_green_s = webster
            .plans()
            .iter()
            .zip(scenario.plans())
            .map(|(fixed, plan)| {
                let mut max: Vec<f64> = plan
                    .phases()
                    .iter()
                    .map(|p| p.timing.max_green.0 as f64 / 1000.0)
                    .collect();
                for stage in &fixed.stages {
                    if let Some(m) = max.get_mut(stage.phase as usize) {
                        *m = m.min(stage.green.0 as f64 / 1000.0 * MAX_GREEN_OVER_WEBSTER);
                    }
                }
                max
            })
            .collect();
        Actuated::new(Actuated::default().passage_s, max_green_s)
    }
}

impl Controller for Actuated {
    fn name(&self) -> &'static str {
        "actuated"
    }

    fn reset(&mut self, env: &dyn Env) {
        self.episode = (0..env.signals().len())
            .map(|i| {
                let max_green_s = match self.max_green_s.get(i) {
                    Some(given) if !given.is_empty() => given.clone(),
                    _ => env
                        .program_greens_s(i)
                        .map(|greens| greens.iter().map(|g| g * MAX_GREEN_OVER_WEBSTER).collect())
                        .unwrap_or_default(),
                };
                self.signal_rule(&max_green_s)
            })
            .collect();
    }

    fn decide(&mut self, env: &dyn Env) -> Vec<u8> {
        if self.episode.len() < env.signals().len() {
            // Before any reset (a controller driven without `run_episode`): as given.
            self.episode = (0..env.signals().len())
                .map(|i| self.signal_rule(self.max_green_s.get(i).map_or(&[], |v| v)))
                .collect();
        }
        (0..env.signals().len())
            .map(|i| self.episode[i].decide(env.sequencer(i), &env.detectors(i)))
            .collect()
    }
}

impl Actuated {
    fn signal_rule(&self, max_green_s: &[f64]) -> ActuatedSignal {
        let max_green: Vec<Millis> = max_green_s
            .iter()
            .map(|&s| Millis((s * 1000.0).round().clamp(0.0, u32::MAX as f64) as u32))
            .collect();
        ActuatedSignal::new(self.passage_s, &max_green)
    }
}
