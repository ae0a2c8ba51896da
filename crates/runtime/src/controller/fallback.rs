//! The fallback controllers a signal runs whenever the policy may not act.
//!
//! * Fixed time (greenwave-core's [`FixedCycle`]): always available, needs no detector. Its
//!   stage greens come from Webster's method on the scenario's demand (feature `sim`), from
//!   each light's own program on a SUMO net ([`Fallback::from_programs`]), or are equal
//!   splits when neither is known. A detector fault always uses it: actuated
//!   control with a dead detector would rest on one phase (traffic engineers call this
//!   "max recall" on detector failure).
//! * Actuated (greenwave-core's [`ActuatedSignal`], the gap-out / max-out rule greenwave-sim
//!   runs too): used when chosen and the field gives per-movement detector readings
//!   ([`DetectorSource::movement_detectors`](super::DetectorSource::movement_detectors));
//!   a field without them runs fixed time, and the controller says so when it starts.
//!
//! Either one only *requests* phases: the sequencer still enforces min/max green and the
//! full clearance intervals, so switching to or from a fallback never cuts a yellow or an
//! all-red.

use greenwave_core::{ActuatedSignal, Millis, MovementDetector, PhasePlan, Sequencer};

pub use greenwave_core::{CycleStage, FixedCycle};

/// Which fallback a controller uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FallbackKind {
    /// Fixed-time cycle.
    #[default]
    FixedTime,
    /// Vehicle-actuated (needs per-movement detectors; fixed time otherwise).
    Actuated,
}

impl std::str::FromStr for FallbackKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fixed-time" => Ok(FallbackKind::FixedTime),
            "actuated" => Ok(FallbackKind::Actuated),
            _ => Err(format!(
                "unknown fallback `{s}` (known: fixed-time, actuated)"
            )),
        }
    }
}

/// The fallback of every signal of a controller.
#[derive(Clone, Debug)]
pub struct Fallback {
    kind: FallbackKind,
    cycles: Vec<FixedCycle>,
    actuated: Vec<ActuatedSignal>,
    /// Whether the field was found without movement readings (said once).
    no_movement_readings: bool,
}

/// Default green of an equal-split cycle when no demand is known.
pub const EQUAL_SPLIT_GREEN: Millis = Millis::from_secs(20);

impl Fallback {
    /// Fixed time with the given cycles (one per signal).
    pub fn fixed_time(cycles: Vec<FixedCycle>) -> Self {
        Fallback {
            kind: FallbackKind::FixedTime,
            cycles,
            actuated: Vec::new(),
            no_movement_readings: false,
        }
    }

    /// Fixed time with equal splits for each plan.
    pub fn equal_split(plans: &[&PhasePlan], decision_interval: Millis) -> Self {
        Fallback::fixed_time(
            plans
                .iter()
                .map(|p| FixedCycle::equal_split(p, EQUAL_SPLIT_GREEN, decision_interval))
                .collect(),
        )
    }

    /// The fallback of `kind` for `scenario`: Webster's fixed-time cycles for its demand,
    /// and for `Actuated` actuated control with the scenario's max greens (greenwave-sim's
    /// `Actuated::for_scenario`).
    #[cfg(feature = "sim")]
    pub fn for_scenario(scenario: &greenwave_sim::Scenario, kind: FallbackKind) -> Self {
        use greenwave_sim::controllers::{Actuated, FixedTime};
        let cycles = FixedTime::webster(scenario)
            .plans()
            .iter()
            .map(|plan| FixedCycle::new(&plan.stages).unwrap_or_default())
            .collect();
        let f = Fallback::fixed_time(cycles);
        if kind != FallbackKind::Actuated {
            return f;
        }
        let all = Actuated::for_scenario(scenario);
        let rules = (0..scenario.plans().len())
            .map(|i| {
                let max_green = all.max_green.get(i).map_or(&[][..], |m| m);
                ActuatedSignal::new(all.passage_s, max_green)
            })
            .collect();
        f.with_actuated_rules(rules)
    }

    /// Each signal's own program (`env`'s [`program_greens`](greenwave_sim::Env::program_greens),
    /// one entry per signal of `plans`) as its fixed cycle, each green within its phase's
    /// min and max green, and 1.5 × its actuated greens (`env`'s `actuated_greens`: a walk
    /// stage's green counted in the stage its vehicles go on in), within the plan's max
    /// greens, as actuated max greens with
    /// the program's detector-to-phase assignment (`env`'s `detector_assignment`): what a
    /// cabinet on a SUMO net falls back to (`greenwave site` writes the same into a site
    /// configuration). A signal without a program gets its plan's midpoint cycle.
    #[cfg(feature = "sim")]
    pub fn from_programs(env: &dyn greenwave_sim::Env, plans: &[&PhasePlan]) -> Self {
        let (cycles, rules) = plans
            .iter()
            .enumerate()
            .map(|(i, plan)| {
                let greens = env.program_greens(i).unwrap_or_default();
                let assigned = env.detector_assignment(i).unwrap_or_default();
                let actuated_greens = env.actuated_greens(i).unwrap_or_default();
                let actuated = program_actuated(plan, &actuated_greens).with_assigned(&assigned);
                (program_cycle(plan, &greens), actuated)
            })
            .unzip();
        Fallback::fixed_time(cycles).with_actuated_rules(rules)
    }

    /// Switches to actuated control (passage 1 s, max greens from the plans) for every
    /// signal, where the field gives per-movement detector readings.
    pub fn with_actuated(self, plans: &[&PhasePlan]) -> Self {
        let rules = plans.iter().map(|_| ActuatedSignal::default()).collect();
        self.with_actuated_rules(rules)
    }

    /// Switches to actuated control with the given rule per signal.
    pub fn with_actuated_rules(mut self, rules: Vec<ActuatedSignal>) -> Self {
        self.kind = FallbackKind::Actuated;
        self.actuated = rules;
        self
    }

    /// The kind in use.
    pub fn kind(&self) -> FallbackKind {
        self.kind
    }

    /// The fixed cycles, one per signal.
    pub fn cycles(&self) -> &[FixedCycle] {
        &self.cycles
    }

    /// The actuated rules, one per signal (empty unless actuated).
    pub fn actuated_rules(&self) -> &[ActuatedSignal] {
        &self.actuated
    }

    /// The phase `signal` should request now. `detectors_ok` is false when this decision
    /// had a detector fault (fixed time is used then).
    pub(crate) fn decide(
        &mut self,
        signal: usize,
        seq: &Sequencer,
        detectors_ok: bool,
        field: &(impl super::DetectorSource + ?Sized),
    ) -> u8 {
        if self.kind == FallbackKind::Actuated && detectors_ok {
            let readings = usable_readings(signal, seq.plan(), field.movement_detectors(signal));
            match (self.actuated.get(signal), readings) {
                (Some(rule), Some(d)) => return rule.decide(seq, &d),
                (Some(_), None) if !self.no_movement_readings => {
                    self.no_movement_readings = true;
                    tracing::warn!(
                        signal,
                        "actuated fallback: the field gives no per-movement detector readings; \
                         running the fixed-time cycle instead"
                    );
                }
                _ => {}
            }
        }
        match self.cycles.get_mut(signal) {
            Some(c) => c.decide(seq),
            None => seq.interval().target().0,
        }
    }
}

/// A field's movement readings for `signal` if they can be a detector's: one per movement
/// of `plan`, each a finite number ≥ 0 ([`MovementDetector::problem`]). Others are dropped
/// with a warning, as if the field gave none: the actuated fallback then runs its fixed
/// cycle and the max-red rule forces nothing, rather than acting on a faulty loop.
pub(crate) fn usable_readings(
    signal: usize,
    plan: &PhasePlan,
    readings: Option<Vec<MovementDetector>>,
) -> Option<Vec<MovementDetector>> {
    let readings = readings?;
    match MovementDetector::check_readings(&readings, plan.movements().len()) {
        None => Some(readings),
        Some(problem) => {
            tracing::warn!(
                signal,
                "{problem}: this decision's movement readings are not used"
            );
            None
        }
    }
}

/// A program's greens (per plan phase, 0 where it does not serve one) as a fixed cycle.
#[cfg(feature = "sim")]
fn program_cycle(plan: &PhasePlan, greens: &[Millis]) -> FixedCycle {
    let stages: Vec<CycleStage> = plan
        .phases()
        .iter()
        .zip(greens)
        .enumerate()
        .filter(|(_, (_, &g))| g > Millis::ZERO)
        .map(|(p, (phase, &g))| CycleStage {
            phase: p as u8,
            green: g.max(phase.timing.min_green).min(phase.timing.max_green),
        })
        .collect();
    match FixedCycle::new(&stages) {
        Ok(c) if !stages.is_empty() => c,
        _ => FixedCycle::midpoint(plan),
    }
}

/// Actuated control with 1.5 × a program's greens as max greens, within `plan`'s.
#[cfg(feature = "sim")]
fn program_actuated(plan: &PhasePlan, greens: &[Millis]) -> ActuatedSignal {
    let max = greenwave_sim::controllers::max_greens_over(plan, greens);
    ActuatedSignal::new(ActuatedSignal::default().passage_s, &max)
}
