//! Vehicle-actuated control: gap-out / max-out on detector calls.

use greenwave_core::{ActuatedSignal, Millis, PhasePlan};

use super::{Controller, FixedTime};
use crate::env::Env;
use crate::scenario::Scenario;

/// How much longer than its Webster green a phase may be extended (the usual setting of
/// max green in actuated timing plans: 1.25 to 1.5 times the fixed-time green).
pub const MAX_GREEN_OVER_WEBSTER: f64 = 1.5;

/// Actuated control of every signal: greenwave-core's [`ActuatedSignal`] (gap-out /
/// max-out with spill-back gating, the one actuated rule of the workspace) per signal, with
/// max greens chosen per episode as below, and each signal's detector-to-phase assignment
/// from [`Env::detector_assignment`].
///
/// **Max green.** Where `max_green` gives none for a signal, a signal that replaces a
/// program of its own (a SUMO light) caps each phase at [`MAX_GREEN_OVER_WEBSTER`] times
/// the program's green for it, within the plan's max green ([`max_greens_over`];
/// [`Env::actuated_greens`]: a stage its vehicles go on in
/// after a walk stage counts the walk stage's green too), as a timing plan caps actuated
/// greens at 1.25–1.5 times the fixed-time greens; near saturation, gap-out alone lets each
/// long red's queue earn the next long green, and the cycle grows until every phase maxes
/// out at the plan's max green.
#[derive(Clone, Debug)]
pub struct Actuated {
    /// Largest gap (s) since the detector zone emptied that still extends the green.
    pub passage_s: f32,
    /// Max green per signal and phase; a signal or phase missing here uses
    /// [`MAX_GREEN_OVER_WEBSTER`] times its actuated green (see above), else its plan's max
    /// green (which the sequencer enforces in any case).
    pub max_green: Vec<Vec<Millis>>,
    /// Each signal's rule for this episode: `max_green`, completed at reset.
    episode: Vec<ActuatedSignal>,
}

impl Default for Actuated {
    /// Passage 1 s, max green from the plans.
    fn default() -> Self {
        Actuated::new(1.0, Vec::new())
    }
}

/// The actuated max green of a phase whose fixed-time green (Webster's, or the replaced
/// program's) is `green` and whose plan max green is `plan_max`: [`MAX_GREEN_OVER_WEBSTER`]
/// times `green`, to the millisecond (half a millisecond rounds up), and never above
/// `plan_max`, where the sequencer would end the green in any case. A program that holds a
/// green for 1,000 s (SUMO's game nets) thus gives its plan's 300 s, not 1,500 s.
pub fn max_green_over(green: Millis, plan_max: Millis) -> Millis {
    // Exact: 1.5 times a u32 is a multiple of 0.5 well inside f64's integers; the cast
    // saturates at u32::MAX ms before the cap.
    Millis((f64::from(green.0) * MAX_GREEN_OVER_WEBSTER).round() as u32).min(plan_max)
}

/// [`max_green_over`] for each phase of `plan` whose fixed-time green `greens` gives (in plan
/// order; phases beyond `greens` get none, and so keep the plan's max green).
pub fn max_greens_over(plan: &PhasePlan, greens: &[Millis]) -> Vec<Millis> {
    plan.phases()
        .iter()
        .zip(greens)
        .map(|(phase, &green)| max_green_over(green, phase.timing.max_green))
        .collect()
}

impl Actuated {
    /// Actuated control with passage `passage_s` and max greens `max_green` (per signal
    /// and phase; see [`Actuated::max_green`]).
    pub fn new(passage_s: f32, max_green: Vec<Vec<Millis>>) -> Self {
        Actuated {
            passage_s,
            max_green,
            episode: Vec::new(),
        }
    }

    /// Actuated control for `scenario`: max green of each phase 1.5 times its Webster green
    /// for the scenario's demand (phases Webster leaves out keep their plan's max green).
    pub fn for_scenario(scenario: &Scenario) -> Self {
        let webster = FixedTime::webster(scenario);
        let max_green = webster
            .plans()
            .iter()
            .zip(scenario.plans())
            .map(|(fixed, plan)| {
                let mut max: Vec<Millis> =
                    plan.phases().iter().map(|p| p.timing.max_green).collect();
                for stage in &fixed.stages {
                    if let Some(m) = max.get_mut(stage.phase as usize) {
                        *m = max_green_over(stage.green, *m);
                    }
                }
                max
            })
            .collect();
        Actuated::new(Actuated::default().passage_s, max_green)
    }
}

impl Controller for Actuated {
    fn name(&self) -> &'static str {
        "actuated"
    }

    fn reset(&mut self, env: &dyn Env) {
        self.episode = (0..env.signals().len())
            .map(|i| {
                let max_green = match self.max_green.get(i) {
                    Some(given) if !given.is_empty() => given.clone(),
                    _ => env
                        .actuated_greens(i)
                        .map(|greens| max_greens_over(env.sequencer(i).plan(), &greens))
                        .unwrap_or_default(),
                };
                let assigned = env.detector_assignment(i).unwrap_or_default();
                ActuatedSignal::new(self.passage_s, &max_green).with_assigned(&assigned)
            })
            .collect();
    }

    fn decide(&mut self, env: &dyn Env) -> Vec<u8> {
        if self.episode.len() < env.signals().len() {
            // Before any reset (a controller driven without `run_episode`): as given.
            self.episode = (0..env.signals().len())
                .map(|i| {
                    let max_green = self.max_green.get(i).map_or(&[][..], |v| v);
                    let assigned = env.detector_assignment(i).unwrap_or_default();
                    ActuatedSignal::new(self.passage_s, max_green).with_assigned(&assigned)
                })
                .collect();
        }
        (0..env.signals().len())
            .map(|i| self.episode[i].decide(env.sequencer(i), &env.detectors(i)))
            .collect()
    }
}
