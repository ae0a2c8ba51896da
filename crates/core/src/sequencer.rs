//! The safety sequencer: the supervisor's timing core.
//!
//! The policy proposes, the sequencer disposes. Each decision it takes a *requested* next
//! phase and answers with what it will actually do; [`Sequencer::advance`] moves time on and
//! reports every stretch of constant signal display. Whatever is requested, and whenever:
//!
//! * a green lasts at least its phase's min green (early switch requests are held and served
//!   the moment min green is reached) and at most its max green (a change is then forced);
//! * every change runs the ending phase's full yellow, then its full all-red;
//! * a movement turns green only once every intergreen entry into it (the plan's
//!   [`Intergreen`](crate::plan::Intergreen)s) has passed since the conflicting movement
//!   left green;
//! * no two conflicting movements are ever non-red together.
//!
//! Movements green in both the ending and the next phase stay green through the change
//! (overlaps): they need no clearance, and they conflict with nothing in either phase.
//!
//! With intergreen entries the next phase's movements may start one by one: the
//! [`Interval::AllRed`] stretch then lasts until the last of them is green, and shows each
//! one green from its own start on. Min green counts from the last start, max green from
//! the first, so no movement is green longer than max green; a plan without entries
//! switches exactly as it always did.

use serde::{Deserialize, Serialize};

use crate::plan::{MovementId, MovementSet, PhaseId, PhasePlan, MAX_MOVEMENTS, MAX_PHASES};
use crate::units::Millis;

/// What one movement shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Signal {
    /// Stop.
    Red,
    /// Change interval: stop if safe.
    Yellow,
    /// Go.
    Green,
}

/// The display of every movement at one instant: movements not green or yellow are red.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SignalFrame {
    /// Movements showing green.
    pub green: MovementSet,
    /// Movements showing yellow.
    pub yellow: MovementSet,
}

impl SignalFrame {
    /// What movement `m` shows.
    pub fn signal(&self, m: MovementId) -> Signal {
        if self.green.contains(m) {
            Signal::Green
        } else if self.yellow.contains(m) {
            Signal::Yellow
        } else {
            Signal::Red
        }
    }

    /// Movements showing green or yellow.
    pub fn non_red(&self) -> MovementSet {
        self.green.or(self.yellow)
    }
}

/// The interval the controller is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Interval {
    /// `phase` is green.
    Green {
        /// The green phase.
        phase: PhaseId,
    },
    /// Yellow change interval from `from` towards `to`.
    Yellow {
        /// The ending phase.
        from: PhaseId,
        /// The next green phase.
        to: PhaseId,
    },
    /// All-red clearance from `from` towards `to`: every movement `from` ends is red. With
    /// intergreen entries, movements of `to` may already show green one by one, each from
    /// its own start, until the last has started.
    AllRed {
        /// The ending phase.
        from: PhaseId,
        /// The next green phase.
        to: PhaseId,
    },
}

impl Interval {
    /// The phase that is green now or will be green when the change completes.
    pub fn target(self) -> PhaseId {
        match self {
            Interval::Green { phase } => phase,
            Interval::Yellow { to, .. } | Interval::AllRed { to, .. } => to,
        }
    }
}

/// Why the sequencer did not do exactly what was requested.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OverrideReason {
    /// The current green has not reached min green; the switch is held until it has.
    MinGreen,
    /// A change is already under way; the request is ignored until the next green.
    Clearance,
    /// The requested phase does not exist in the plan; the current target is kept.
    UnknownPhase,
    /// Max green forced a change the policy did not ask for.
    MaxGreen,
}

/// The sequencer's answer to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Response {
    /// The phase that was requested (as given, possibly invalid).
    pub requested: u8,
    /// The phase that is green now or will be green next, as a result.
    pub next_green: PhaseId,
    /// Set when the request was not served as asked, with the reason.
    pub overridden: Option<OverrideReason>,
}

/// A set of phases as a bitmask (bit `i` = phase `i`): which requests are honoured now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PhaseMask(pub u16);

impl PhaseMask {
    /// Whether phase `p` may be requested.
    pub const fn allows(self, p: PhaseId) -> bool {
        (p.0 as usize) < MAX_PHASES && self.0 & (1 << p.0) != 0
    }

    /// Number of allowed phases.
    pub const fn count(self) -> u32 {
        self.0.count_ones()
    }

    /// The action mask rule, the one place it is written: a signal free to switch (green,
    /// min green served) may be asked for any of its `n_phases` phases; otherwise (during a
    /// change, or before min green) only for `target`, the phase green now or next.
    pub const fn for_state(n_phases: usize, target: PhaseId, free_to_switch: bool) -> PhaseMask {
        if free_to_switch {
            PhaseMask(((1u32 << n_phases) - 1) as u16)
        } else {
            PhaseMask(1 << target.0)
        }
    }
}

/// One stretch of constant display reported by [`Sequencer::advance`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The interval during the stretch.
    pub interval: Interval,
    /// What every movement shows.
    pub frame: SignalFrame,
    /// How long it lasted.
    pub duration: Millis,
}

/// Error constructing a sequencer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SequencerError {
    /// The initial phase is not in the plan.
    #[error("initial phase {phase} does not exist (plan has {n_phases} phases)")]
    UnknownInitialPhase {
        /// The phase given.
        phase: u8,
        /// Phases in the plan.
        n_phases: usize,
    },
}

/// The phase sequencer for one intersection. See the module docs for its guarantees.
#[derive(Clone, Debug)]
pub struct Sequencer {
    plan: PhasePlan,
    interval: Interval,
    in_interval: Millis,
    /// A switch requested before min green, served when min green is reached.
    pending: Option<PhaseId>,
    /// Set when the last change was forced by max green, cleared by the next request.
    forced: bool,
    now_ms: u64,
    /// When each movement last left green (its yellow began), for movements in
    /// `ever_green`; what the plan's intergreen entries are counted from.
    green_end_ms: [u64; MAX_MOVEMENTS],
    ever_green: MovementSet,
    /// During a change: when each starting movement turns green, counted from the start of
    /// the all-red stretch; and when the change ends (the last of them green).
    start_in_all_red: [Millis; MAX_MOVEMENTS],
    all_red_for: Millis,
    /// How much earlier than the last the first movement of the green (under way, or being
    /// switched to) started, so that max green (counted from the first start) forces the
    /// change that much sooner.
    head_start: Millis,
}

impl Sequencer {
    /// A sequencer starting at the beginning of `initial`'s green.
    pub fn new(plan: PhasePlan, initial: PhaseId) -> Result<Self, SequencerError> {
        if plan.phase(initial).is_none() {
            return Err(SequencerError::UnknownInitialPhase {
                phase: initial.0,
                n_phases: plan.n_phases(),
            });
        }
        Ok(Sequencer {
            plan,
            interval: Interval::Green { phase: initial },
            in_interval: Millis::ZERO,
            pending: None,
            forced: false,
            now_ms: 0,
            green_end_ms: [0; MAX_MOVEMENTS],
            ever_green: MovementSet::EMPTY,
            start_in_all_red: [Millis::ZERO; MAX_MOVEMENTS],
            all_red_for: Millis::ZERO,
            head_start: Millis::ZERO,
        })
    }

    /// The plan this sequencer enforces.
    pub fn plan(&self) -> &PhasePlan {
        &self.plan
    }

    /// The current interval.
    pub fn interval(&self) -> Interval {
        self.interval
    }

    /// Time spent in the current interval.
    pub fn in_interval(&self) -> Millis {
        self.in_interval
    }

    /// Milliseconds since the sequencer started.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The phase showing green, if the controller is not in a change.
    pub fn green_phase(&self) -> Option<PhaseId> {
        match self.interval {
            Interval::Green { phase } => Some(phase),
            _ => None,
        }
    }

    /// A switch waiting for min green, if any.
    pub fn pending(&self) -> Option<PhaseId> {
        self.pending
    }

    /// Whether the current green has served its min green (false during a change).
    pub fn min_green_served(&self) -> bool {
        match self.interval {
            Interval::Green { phase } => self.in_interval >= self.timing(phase).min_green,
            _ => false,
        }
    }

    /// Whether the last change was forced by max green and no request has come since.
    pub fn max_green_forced(&self) -> bool {
        self.forced
    }

    fn timing(&self, p: PhaseId) -> crate::plan::PhaseTiming {
        self.plan.phases()[p.0 as usize].timing
    }

    fn movements(&self, p: PhaseId) -> MovementSet {
        self.plan.phases()[p.0 as usize].movements
    }

    /// Which phases a request would be honoured for right now: during a green before min
    /// green only the current phase; after min green every phase; during a change only its
    /// target. A policy masks its logits with this.
    pub fn action_mask(&self) -> PhaseMask {
        PhaseMask::for_state(
            self.plan.n_phases(),
            self.interval.target(),
            self.min_green_served(),
        )
    }

    /// Requests `phase` as the next green and answers with what will actually happen.
    pub fn request(&mut self, phase: u8) -> Response {
        self.forced = false;
        let requested = phase;
        if phase as usize >= self.plan.n_phases() {
            return Response {
                requested,
                next_green: self.pending.unwrap_or(self.interval.target()),
                overridden: Some(OverrideReason::UnknownPhase),
            };
        }
        let phase = PhaseId(phase);
        match self.interval {
            Interval::Green { phase: current } if phase == current => {
                self.pending = None;
                Response {
                    requested,
                    next_green: phase,
                    overridden: None,
                }
            }
            Interval::Green { phase: current } => {
                if self.in_interval >= self.timing(current).min_green {
                    self.begin_change(current, phase);
                    Response {
                        requested,
                        next_green: phase,
                        overridden: None,
                    }
                } else {
                    self.pending = Some(phase);
                    Response {
                        requested,
                        next_green: phase,
                        overridden: Some(OverrideReason::MinGreen),
                    }
                }
            }
            Interval::Yellow { to, .. } | Interval::AllRed { to, .. } => Response {
                requested,
                next_green: to,
                overridden: if to == phase {
                    None
                } else {
                    Some(OverrideReason::Clearance)
                },
            },
        }
    }

    fn begin_change(&mut self, from: PhaseId, to: PhaseId) {
        self.pending = None;
        self.interval = Interval::Yellow { from, to };
        self.in_interval = Millis::ZERO;
        let (f, t) = (self.movements(from), self.movements(to));
        for m in f.minus(t).iter() {
            self.green_end_ms[m.0 as usize] = self.now_ms;
        }
        self.ever_green = self.ever_green.or(f);
        self.schedule_starts(from, to);
    }

    /// When each movement `to` starts turns green, counted from the all-red's start (the
    /// end of `from`'s yellow): after `from`'s all-red, and after every intergreen entry into
    /// it has passed since its conflicting movement left green. Also the head start of
    /// `to`'s green (the ending green no longer needs its own).
    fn schedule_starts(&mut self, from: PhaseId, to: PhaseId) {
        let t = self.timing(from);
        let all_red_start_ms = self.now_ms + t.yellow.0 as u64;
        let (mut first, mut last) = (None::<Millis>, t.all_red);
        for n in self.movements(to).minus(self.movements(from)).iter() {
            let mut start = t.all_red;
            for e in self.plan.intergreens().iter().filter(|e| e.to == n) {
                if self.ever_green.contains(e.from) {
                    let ready_ms = self.green_end_ms[e.from.0 as usize] + e.time.0 as u64;
                    let after = ready_ms.saturating_sub(all_red_start_ms);
                    start = start.max(Millis(after.min(u32::MAX as u64) as u32));
                }
            }
            self.start_in_all_red[n.0 as usize] = start;
            first = Some(first.map_or(start, |f| f.min(start)));
            last = last.max(start);
        }
        self.all_red_for = last;
        self.head_start = last.saturating_sub(first.unwrap_or(last));
    }

    /// Movements of `to` not in `from` whose start has come, `in_all_red` into the all-red.
    fn started(&self, from: PhaseId, to: PhaseId, in_all_red: Millis) -> MovementSet {
        let mut set = MovementSet::EMPTY;
        for n in self.movements(to).minus(self.movements(from)).iter() {
            if in_all_red >= self.start_in_all_red[n.0 as usize] {
                set.insert(n);
            }
        }
        set
    }

    /// The longest green phase `p` may still show once its last movement has started.
    fn max_green_left(&self, p: PhaseId) -> Millis {
        self.timing(p).max_green.saturating_sub(self.head_start)
    }

    /// The display right now.
    pub fn frame(&self) -> SignalFrame {
        match self.interval {
            Interval::Green { phase } => SignalFrame {
                green: self.movements(phase),
                yellow: MovementSet::EMPTY,
            },
            Interval::Yellow { from, to } => {
                let (f, t) = (self.movements(from), self.movements(to));
                SignalFrame {
                    green: f.and(t),
                    yellow: f.minus(t),
                }
            }
            Interval::AllRed { from, to } => SignalFrame {
                green: self
                    .movements(from)
                    .and(self.movements(to))
                    .or(self.started(from, to, self.in_interval)),
                yellow: MovementSet::EMPTY,
            },
        }
    }

    /// Carries out every interval change due at the current instant.
    fn settle(&mut self) {
        loop {
            match self.interval {
                Interval::Green { phase } => {
                    let t = self.timing(phase);
                    if let Some(to) = self.pending {
                        if self.in_interval >= t.min_green {
                            self.begin_change(phase, to);
                            continue;
                        }
                    }
                    if self.in_interval >= self.max_green_left(phase) {
                        let next = PhaseId(((phase.0 as usize + 1) % self.plan.n_phases()) as u8);
                        self.begin_change(phase, next);
                        self.forced = true;
                        continue;
                    }
                }
                Interval::Yellow { from, to } => {
                    if self.in_interval >= self.timing(from).yellow {
                        self.interval = Interval::AllRed { from, to };
                        self.in_interval = Millis::ZERO;
                        continue;
                    }
                }
                Interval::AllRed { to, .. } => {
                    if self.in_interval >= self.all_red_for {
                        self.interval = Interval::Green { phase: to };
                        self.in_interval = Millis::ZERO;
                        continue;
                    }
                }
            }
            return;
        }
    }

    /// Time until the next interval change if no request comes (zero if one is due now).
    /// A controller that updates its outputs only on polls can stop a tick here, so every
    /// interval begins exactly on a poll.
    pub fn time_to_boundary(&self) -> Millis {
        let end = match self.interval {
            Interval::Green { phase } => {
                if self.pending.is_some() {
                    self.timing(phase).min_green
                } else {
                    self.max_green_left(phase)
                }
            }
            Interval::Yellow { from, .. } => self.timing(from).yellow,
            Interval::AllRed { from, to } => {
                // The next start still to come, or the end of the change.
                let mut next = self.all_red_for;
                for n in self.movements(to).minus(self.movements(from)).iter() {
                    let start = self.start_in_all_red[n.0 as usize];
                    if start > self.in_interval {
                        next = next.min(start);
                    }
                }
                next
            }
        };
        end.saturating_sub(self.in_interval)
    }

    /// Advances time by `dt`, calling `on_segment` for every stretch of constant display
    /// (a tick may cross several interval boundaries; each is reported, none is skipped).
    pub fn advance(&mut self, dt: Millis, mut on_segment: impl FnMut(&Segment)) {
        let mut left = dt;
        self.settle();
        while left > Millis::ZERO {
            let step = left.min(self.time_to_boundary());
            on_segment(&Segment {
                interval: self.interval,
                frame: self.frame(),
                duration: step,
            });
            self.in_interval += step;
            self.now_ms += step.0 as u64;
            left = left - step;
            self.settle();
        }
    }

    /// Advances time by `dt` and returns the display at its end.
    pub fn tick(&mut self, dt: Millis) -> SignalFrame {
        self.advance(dt, |_| {});
        self.frame()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Intergreen, PhaseTiming};

    fn seq() -> Sequencer {
        let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 30, 3, 2)).unwrap();
        Sequencer::new(plan, PhaseId(0)).unwrap()
    }

    #[test]
    fn change_runs_yellow_then_all_red() {
        let mut s = seq();
        s.tick(Millis::from_secs(6));
        let r = s.request(2);
        assert_eq!(r.overridden, None);
        assert_eq!(
            s.interval(),
            Interval::Yellow {
                from: PhaseId(0),
                to: PhaseId(2)
            }
        );
        s.tick(Millis(2999));
        assert!(matches!(s.interval(), Interval::Yellow { .. }));
        s.tick(Millis(1));
        assert!(matches!(s.interval(), Interval::AllRed { .. }));
        assert!(s.frame().non_red().is_empty());
        s.tick(Millis(2000));
        assert_eq!(s.interval(), Interval::Green { phase: PhaseId(2) });
    }

    #[test]
    fn early_request_is_held_until_min_green() {
        let mut s = seq();
        s.tick(Millis::from_secs(2));
        let r = s.request(1);
        assert_eq!(r.overridden, Some(OverrideReason::MinGreen));
        assert_eq!(s.action_mask(), PhaseMask(1));
        let mut segments = 0;
        s.advance(Millis::from_secs(4), |seg| {
            segments += 1;
            if segments == 1 {
                assert_eq!(seg.duration, Millis::from_secs(3));
            }
        });
        assert_eq!(segments, 2, "green until min green, then yellow");
        assert_eq!(
            s.interval(),
            Interval::Yellow {
                from: PhaseId(0),
                to: PhaseId(1)
            }
        );
        assert_eq!(s.in_interval(), Millis::from_secs(1));
    }

    #[test]
    fn max_green_forces_a_change() {
        let mut s = seq();
        s.request(0);
        s.tick(Millis::from_secs(30));
        assert_eq!(
            s.interval(),
            Interval::Yellow {
                from: PhaseId(0),
                to: PhaseId(1)
            }
        );
        assert!(s.max_green_forced());
    }

    #[test]
    fn requests_during_clearance_are_ignored() {
        let mut s = seq();
        s.tick(Millis::from_secs(5));
        s.request(3);
        s.tick(Millis::from_secs(1));
        let r = s.request(1);
        assert_eq!(r.overridden, Some(OverrideReason::Clearance));
        assert_eq!(r.next_green, PhaseId(3));
        assert_eq!(s.request(9).overridden, Some(OverrideReason::UnknownPhase));
        assert_eq!(s.action_mask(), PhaseMask(1 << 3));
    }

    /// The standard plan with one intergreen: 9 s from the end of the north through's green
    /// (movement 1) to the start of the east through's (movement 4).
    fn staggered(timing: PhaseTiming) -> Sequencer {
        let plan = PhasePlan::four_arm_protected_left(timing)
            .unwrap()
            .with_intergreens(&[Intergreen {
                from: MovementId(1),
                to: MovementId(4),
                time: Millis::from_secs(9),
            }])
            .unwrap();
        Sequencer::new(plan, PhaseId(0)).unwrap()
    }

    #[test]
    fn an_intergreen_holds_only_its_own_movement() {
        let mut s = staggered(PhaseTiming::from_secs(5, 30, 3, 2));
        s.tick(Millis::from_secs(6));
        s.request(2);
        let mut segs = std::vec::Vec::new();
        s.advance(Millis::from_secs(10), |seg| segs.push(*seg));
        let east_rest = MovementSet::from_ids(&[5, 10, 11]);
        let shown: std::vec::Vec<_> = segs
            .iter()
            .map(|g| (g.duration, g.frame.green, g.frame.yellow))
            .collect();
        assert_eq!(
            shown,
            [
                (
                    Millis::from_secs(3),
                    MovementSet::EMPTY,
                    MovementSet::from_ids(&[1, 2, 7, 8])
                ),
                // The phase's own all-red: nothing green.
                (Millis::from_secs(2), MovementSet::EMPTY, MovementSet::EMPTY),
                // The rest of the east-west phase starts; movement 4 waits out its 9 s.
                (Millis::from_secs(4), east_rest, MovementSet::EMPTY),
                (
                    Millis::from_secs(1),
                    east_rest.or(MovementSet::from_ids(&[4])),
                    MovementSet::EMPTY
                ),
            ]
        );
        assert_eq!(s.interval(), Interval::Green { phase: PhaseId(2) });
        assert_eq!(
            s.plan().switch_time(PhaseId(0), PhaseId(2)),
            Millis::from_secs(9)
        );
        // Max green counts from the first start, 4 s before the last: 30 s of green for
        // movements 5, 10 and 11 means a change 26 s after movement 4 turned green.
        s.request(2);
        s.tick(Millis::from_secs(25) - Millis(1));
        assert_eq!(s.interval(), Interval::Green { phase: PhaseId(2) });
        s.tick(Millis(1));
        assert!(matches!(s.interval(), Interval::Yellow { .. }));
        assert!(s.max_green_forced());
    }

    #[test]
    fn an_intergreen_counts_from_an_earlier_end_too() {
        // Movement 1 leaves green at 1 s (into the north-south lefts); the switch to
        // east-west begins at 5 s, so its yellow ends at 8 s, but movement 4 waits to 10 s.
        let mut s = staggered(PhaseTiming::from_secs(1, 30, 3, 0));
        s.tick(Millis::from_secs(1));
        s.request(1);
        s.tick(Millis::from_secs(4));
        assert_eq!(s.interval(), Interval::Green { phase: PhaseId(1) });
        s.request(2);
        s.tick(Millis::from_secs(3));
        assert!(!s.frame().green.contains(MovementId(4)));
        assert!(s.frame().green.contains(MovementId(5)));
        assert_eq!(s.time_to_boundary(), Millis::from_secs(2));
        s.tick(Millis::from_secs(2));
        assert_eq!(s.interval(), Interval::Green { phase: PhaseId(2) });
        assert!(s.frame().green.contains(MovementId(4)));
    }

    #[test]
    fn unknown_initial_phase_is_refused() {
        let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 30, 3, 2)).unwrap();
        assert_eq!(
            Sequencer::new(plan, PhaseId(4)).unwrap_err(),
            SequencerError::UnknownInitialPhase {
                phase: 4,
                n_phases: 4
            }
        );
    }
}
