//! The fallback controllers a signal runs whenever the policy may not act.
//!
//! * Fixed time ([`FixedCycle`]): always available, needs no detector. Its stage greens
//!   come from Webster's method on the scenario's demand (feature `sim`), or are equal
//!   splits when no demand is known. A detector fault always uses it: actuated control
//!   with a dead detector would rest on one phase (traffic engineers call this
//!   "max recall" on detector failure).
//! * Actuated (feature `sim`): greenwave-sim's gap-out / max-out controller, used when
//!   chosen and the field provides per-movement detectors.
//!
//! Either one only *requests* phases: the sequencer still enforces min/max green and the
//! full clearance intervals, so switching to or from a fallback never cuts a yellow or an
//! all-red.

use greenwave_core::{Interval, Millis, PhasePlan, Sequencer};

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

/// One stage of a fixed cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CycleStage {
    /// The phase.
    pub phase: u8,
    /// Its displayed green.
    pub green: Millis,
}

/// A fixed cycle for one signal: each stage's phase green for its time, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedCycle {
    stages: Vec<CycleStage>,
    current: usize,
}

impl FixedCycle {
    /// A cycle of `stages` (phases outside the plan are the sequencer's to refuse).
    pub fn new(stages: Vec<CycleStage>) -> Self {
        FixedCycle { stages, current: 0 }
    }

    /// Every phase of `plan` in order, each green for `green` rounded up to whole
    /// decision intervals and kept within its min and max green.
    pub fn equal_split(plan: &PhasePlan, green: Millis, decision_interval: Millis) -> Self {
        let dt = decision_interval.0.max(1);
        let stages = plan
            .phases()
            .iter()
            .enumerate()
            .map(|(p, phase)| {
                let t = phase.timing;
                let g = green.max(t.min_green);
                let g = Millis(g.0.div_ceil(dt) * dt).min(t.max_green);
                CycleStage {
                    phase: p as u8,
                    green: g,
                }
            })
            .collect();
        FixedCycle::new(stages)
    }

    /// The stages.
    pub fn stages(&self) -> &[CycleStage] {
        &self.stages
    }

    /// The phase to request now. Follows the sequencer when it is out of step (first
    /// decision, after a max-green change, when taking over from the policy).
    pub fn decide(&mut self, seq: &Sequencer) -> u8 {
        let Interval::Green { phase } = seq.interval() else {
            return seq.interval().target().0;
        };
        if self.stages.is_empty() {
            return phase.0;
        }
        if self.stages[self.current].phase != phase.0 {
            match self.stages.iter().position(|s| s.phase == phase.0) {
                Some(k) => self.current = k,
                None => return self.stages[self.current].phase,
            }
        }
        if seq.in_interval() >= self.stages[self.current].green {
            self.current = (self.current + 1) % self.stages.len();
        }
        self.stages[self.current].phase
    }
}

/// The fallback of every signal of a controller.
pub struct Fallback {
    kind: FallbackKind,
    cycles: Vec<FixedCycle>,
    #[cfg(feature = "sim")]
    actuated: Vec<actuated::ActuatedSignal>,
}

impl std::fmt::Debug for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fallback")
            .field("kind", &self.kind)
            .field("cycles", &self.cycles)
            .finish_non_exhaustive()
    }
}

/// Default green of an equal-split cycle when no demand is known.
pub const EQUAL_SPLIT_GREEN: Millis = Millis::from_secs(20);

impl Fallback {
    /// Fixed time with the given cycles (one per signal).
    pub fn fixed_time(cycles: Vec<FixedCycle>) -> Self {
        Fallback {
            kind: FallbackKind::FixedTime,
            cycles,
            #[cfg(feature = "sim")]
            actuated: Vec::new(),
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
    /// and for `Actuated` greenwave-sim's actuated control with the scenario's max greens.
    #[cfg(feature = "sim")]
    pub fn for_scenario(scenario: &greenwave_sim::Scenario, kind: FallbackKind) -> Self {
        use greenwave_sim::controllers::{Actuated, FixedTime};
        let cycles = FixedTime::webster(scenario)
            .plans()
            .iter()
            .map(|plan| {
                FixedCycle::new(
                    plan.stages
                        .iter()
                        .map(|s| CycleStage {
                            phase: s.phase,
                            green: Millis((s.green_s * 1000.0).round() as u32),
                        })
                        .collect(),
                )
            })
            .collect();
        let mut f = Fallback::fixed_time(cycles);
        if kind == FallbackKind::Actuated {
            let all = Actuated::for_scenario(scenario);
            f.kind = kind;
            f.actuated = scenario
                .plans()
                .iter()
                .enumerate()
                .map(|(i, plan)| actuated::ActuatedSignal::new(&all, i, plan, scenario))
                .collect();
        }
        f
    }

    /// Switches to actuated control where per-movement detectors are available (feature
    /// `sim`; the default actuated settings, max greens from the plans).
    #[cfg(feature = "sim")]
    pub fn with_actuated(mut self, plans: &[&PhasePlan], decision_interval: Millis) -> Self {
        let all = greenwave_sim::controllers::Actuated::default();
        self.kind = FallbackKind::Actuated;
        self.actuated = plans
            .iter()
            .enumerate()
            .map(|(i, plan)| {
                actuated::ActuatedSignal::with_interval(&all, i, plan, decision_interval)
            })
            .collect();
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

    /// The phase `signal` should request now. `detectors_ok` is false when this decision
    /// had a detector fault (fixed time is used then).
    pub(crate) fn decide(
        &mut self,
        signal: usize,
        seq: &Sequencer,
        detectors_ok: bool,
        field: &(impl super::DetectorSource + ?Sized),
    ) -> u8 {
        #[cfg(feature = "sim")]
        if self.kind == FallbackKind::Actuated && detectors_ok {
            if let (Some(a), Some(d)) = (
                self.actuated.get_mut(signal),
                field.movement_detectors(signal),
            ) {
                return a.decide(seq, d);
            }
        }
        let _ = (detectors_ok, field);
        match self.cycles.get_mut(signal) {
            Some(c) => c.decide(seq),
            None => seq.interval().target().0,
        }
    }
}

#[cfg(feature = "sim")]
mod actuated {
    //! greenwave-sim's actuated controller, run against the controller's own sequencer
    //! through a read-only one-signal view of the [`Env`] interface.

    use greenwave_core::{Millis, PhasePlan, RewardKind, Sequencer};
    use greenwave_sim::controllers::Actuated;
    use greenwave_sim::{
        Controller, Env, EnvError, EpisodeMetrics, MovementDetector, SignalSpec, StepOutcome,
    };

    /// One signal's actuated controller and the view it reads.
    pub(super) struct ActuatedSignal {
        controller: Actuated,
        spec: [SignalSpec; 1],
        interval_s: f64,
    }

    impl ActuatedSignal {
        pub(super) fn new(
            all: &Actuated,
            i: usize,
            plan: &PhasePlan,
            scenario: &greenwave_sim::Scenario,
        ) -> Self {
            Self::with_interval(
                all,
                i,
                plan,
                Millis::from_secs(scenario.decision_interval_s()),
            )
        }

        pub(super) fn with_interval(
            all: &Actuated,
            i: usize,
            plan: &PhasePlan,
            interval: Millis,
        ) -> Self {
            let controller = Actuated::new(
                all.passage_s,
                all.max_green_s.get(i).cloned().into_iter().collect(),
            );
            let layout = greenwave_core::ObsLayout {
                n_lanes: 0,
                n_phases: plan.n_phases() as u8,
            };
            ActuatedSignal {
                controller,
                spec: [SignalSpec {
                    id: format!("signal-{i}"),
                    plan: plan.clone(),
                    layout,
                    incidence: vec![Vec::new(); plan.n_phases()],
                }],
                interval_s: interval.as_secs_f32() as f64,
            }
        }

        pub(super) fn decide(&mut self, seq: &Sequencer, detectors: Vec<MovementDetector>) -> u8 {
            let view = View {
                spec: &self.spec,
                seq,
                detectors,
                interval_s: self.interval_s,
            };
            self.controller
                .decide(&view)
                .first()
                .copied()
                .unwrap_or(seq.interval().target().0)
        }
    }

    /// A read-only [`Env`] over one signal of the controller: its sequencer and detectors.
    struct View<'a> {
        spec: &'a [SignalSpec; 1],
        seq: &'a Sequencer,
        detectors: Vec<MovementDetector>,
        interval_s: f64,
    }

    fn read_only() -> EnvError {
        EnvError::Backend("the controller's view of a signal is read-only".into())
    }

    impl Env for View<'_> {
        fn signals(&self) -> &[SignalSpec] {
            self.spec
        }
        fn decision_interval_s(&self) -> f64 {
            self.interval_s
        }
        fn reward_kind(&self) -> RewardKind {
            RewardKind::default()
        }
        fn reset(&mut self, _seed: u64) -> Result<(), EnvError> {
            Err(read_only())
        }
        fn observe(&self, _signal: usize, _out: &mut [f32]) -> Result<(), EnvError> {
            Err(read_only())
        }
        fn sequencer(&self, _signal: usize) -> &Sequencer {
            self.seq
        }
        fn detectors(&self, _signal: usize) -> Vec<MovementDetector> {
            self.detectors.clone()
        }
        fn now_s(&self) -> f64 {
            self.seq.now_ms() as f64 / 1000.0
        }
        fn step(&mut self, _actions: &[u8]) -> Result<StepOutcome, EnvError> {
            Err(read_only())
        }
        fn metrics(&self) -> EpisodeMetrics {
            EpisodeMetrics::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use greenwave_core::{PhaseId, PhaseTiming};

    #[test]
    fn fixed_cycle_runs_its_stages_through_the_sequencer() {
        let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 40, 3, 2)).unwrap();
        let mut cycle = FixedCycle::equal_split(&plan, Millis::from_secs(12), Millis::from_secs(5));
        assert!(cycle
            .stages()
            .iter()
            .all(|s| s.green == Millis::from_secs(15)));
        let mut seq = Sequencer::new(plan, PhaseId(2)).unwrap();
        let mut greens = Vec::new();
        for _ in 0..40 {
            let r = cycle.decide(&seq);
            seq.request(r);
            seq.tick(Millis::from_secs(5));
            if let Interval::Green { phase } = seq.interval() {
                if greens.last() != Some(&phase.0) {
                    greens.push(phase.0);
                }
            }
        }
        // Starts from the sequencer's phase, then cycles in order.
        assert_eq!(&greens[..6], &[2, 3, 0, 1, 2, 3]);
    }
}
