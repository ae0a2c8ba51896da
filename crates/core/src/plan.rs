//! Phase plans: movements, phases, the conflict matrix, per-phase timing and per-pair
//! intergreens.
//!
//! A [`PhasePlan`] is validated once, at construction; everything downstream (the
//! [`Sequencer`](crate::sequencer::Sequencer), the simulators, the firmware) relies on it
//! being conflict-free and sanely timed, so an invalid plan can never be represented.

use heapless::Vec;
use serde::{Deserialize, Serialize};

use crate::units::Millis;

/// Most movements (signal groups) a plan may hold; movement sets are `u32` bitmasks.
pub const MAX_MOVEMENTS: usize = 32;
/// Most phases a plan may hold; this is also the largest action space of a policy.
pub const MAX_PHASES: usize = 16;

/// Shortest and longest yellow change interval accepted (ITE practice: 3–6 s).
pub const YELLOW_RANGE: (Millis, Millis) = (Millis(3000), Millis(6000));
/// Shortest and longest all-red (red clearance) interval accepted.
pub const ALL_RED_RANGE: (Millis, Millis) = (Millis(0), Millis(6000));
/// Shortest min green accepted: a green must at least let the queue react.
pub const MIN_GREEN_FLOOR: Millis = Millis(1000);
/// Most intergreen entries a plan may hold (pairs whose clearance is longer than the
/// ending phase's yellow and all-red; pairs without an entry need none).
pub const MAX_INTERGREENS: usize = 64;
/// Longest intergreen accepted: the longest yellow and the longest all-red together.
pub const INTERGREEN_CEILING: Millis = Millis(YELLOW_RANGE.1 .0 + ALL_RED_RANGE.1 .0);

/// What a movement does when it crosses the junction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Turn {
    /// Turns left (crosses opposing traffic in right-hand traffic).
    Left,
    /// Goes straight on.
    Through,
    /// Turns right.
    Right,
    /// Turns back into the approach it came from.
    UTurn,
    /// Pedestrians crossing the approach's arm.
    Pedestrian,
}

/// One signal group: an approach (index of the incoming arm) and a turn.
///
/// For the built-in four-arm plans approaches are numbered clockwise from north:
/// 0 = from north, 1 = from east, 2 = from south, 3 = from west.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Movement {
    /// Index of the arm the traffic arrives on.
    pub approach: u8,
    /// Where it goes.
    pub turn: Turn,
}

impl Movement {
    /// A movement from `approach` doing `turn`.
    pub const fn new(approach: u8, turn: Turn) -> Self {
        Movement { approach, turn }
    }
}

/// Index of a movement in its plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MovementId(pub u8);

/// Index of a phase in its plan; a policy's action is a `PhaseId`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PhaseId(pub u8);

/// A set of movements as a bitmask (bit `i` = movement `i`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MovementSet(pub u32);

impl FromIterator<MovementId> for MovementSet {
    /// The set of the movements yielded (those ≥ [`MAX_MOVEMENTS`] ignored, as by
    /// [`MovementSet::insert`]).
    fn from_iter<I: IntoIterator<Item = MovementId>>(movements: I) -> Self {
        let mut set = MovementSet::EMPTY;
        for m in movements {
            set.insert(m);
        }
        set
    }
}

impl MovementSet {
    /// The empty set.
    pub const EMPTY: MovementSet = MovementSet(0);

    /// A set from movement indices. Indices ≥ 32 are ignored here and caught by
    /// [`PhasePlan::new`], which checks every phase against the plan's movements.
    pub fn from_ids(ids: &[u8]) -> Self {
        let mut bits = 0u32;
        for &i in ids {
            if (i as usize) < MAX_MOVEMENTS {
                bits |= 1 << i;
            }
        }
        MovementSet(bits)
    }

    /// Whether movement `m` is in the set.
    pub const fn contains(self, m: MovementId) -> bool {
        (m.0 as usize) < MAX_MOVEMENTS && self.0 & (1 << m.0) != 0
    }

    /// Adds movement `m`.
    pub fn insert(&mut self, m: MovementId) {
        if (m.0 as usize) < MAX_MOVEMENTS {
            self.0 |= 1 << m.0;
        }
    }

    /// Members in increasing order.
    pub fn iter(self) -> impl Iterator<Item = MovementId> {
        (0..MAX_MOVEMENTS as u8)
            .filter(move |&i| self.0 & (1 << i) != 0)
            .map(MovementId)
    }

    /// Number of members.
    pub const fn len(self) -> u32 {
        self.0.count_ones()
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Set intersection.
    pub const fn and(self, other: MovementSet) -> MovementSet {
        MovementSet(self.0 & other.0)
    }

    /// Set union.
    pub const fn or(self, other: MovementSet) -> MovementSet {
        MovementSet(self.0 | other.0)
    }

    /// Set difference `self \ other`.
    pub const fn minus(self, other: MovementSet) -> MovementSet {
        MovementSet(self.0 & !other.0)
    }
}

/// Which movements may not be non-red at the same time. Symmetric, irreflexive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConflictMatrix {
    rows: [u32; MAX_MOVEMENTS],
}

impl Default for ConflictMatrix {
    fn default() -> Self {
        ConflictMatrix {
            rows: [0; MAX_MOVEMENTS],
        }
    }
}

impl ConflictMatrix {
    /// A matrix from unordered conflicting pairs (each pair is entered both ways).
    pub fn from_pairs(pairs: &[(MovementId, MovementId)]) -> Self {
        let mut m = ConflictMatrix::default();
        for &(a, b) in pairs {
            m.set(a, b);
        }
        m
    }

    /// Marks `a` and `b` as conflicting (both ways). Out-of-range ids are ignored here
    /// and reported by [`PhasePlan::new`] through its movement count check.
    pub fn set(&mut self, a: MovementId, b: MovementId) {
        let (ai, bi) = (a.0 as usize, b.0 as usize);
        if ai < MAX_MOVEMENTS && bi < MAX_MOVEMENTS {
            self.rows[ai] |= 1 << bi;
            self.rows[bi] |= 1 << ai;
        }
    }

    /// Whether `a` and `b` conflict.
    pub fn conflicts(&self, a: MovementId, b: MovementId) -> bool {
        (a.0 as usize) < MAX_MOVEMENTS && MovementSet(self.rows[a.0 as usize]).contains(b)
    }

    /// Every movement that conflicts with `m`.
    pub fn foes(&self, m: MovementId) -> MovementSet {
        MovementSet(self.rows.get(m.0 as usize).copied().unwrap_or(0))
    }

    /// Conflicts of a four-arm junction in right-hand traffic, derived from geometry.
    ///
    /// Each arm has an entry point and an exit point on a circle around the junction
    /// (arms clockwise from north; on each arm the entry lies counter-clockwise of the exit,
    /// as traffic keeps right). Two vehicle paths conflict when their chords cross or they
    /// share an exit (merge); a pedestrian crossing of an arm conflicts with every vehicle
    /// path entering or leaving through that arm. Movements from the same arm never conflict.
    pub fn four_arm(movements: &[Movement]) -> Self {
        // Positions on the circle in tenths of a degree; arms at 0, 90, 180, 270 degrees.
        fn arm(a: u8) -> i32 {
            (a as i32 % 4) * 900
        }
        fn path(m: Movement) -> (i32, i32) {
            let entry = arm(m.approach) - 50;
            let exit_arm = match m.turn {
                Turn::Through => m.approach + 2,
                Turn::Right => m.approach + 3,
                Turn::Left => m.approach + 1,
                Turn::UTurn => m.approach,
                Turn::Pedestrian => return (arm(m.approach) - 100, arm(m.approach) + 100),
            };
            (entry, arm(exit_arm) + 50)
        }
        fn norm(x: i32) -> i32 {
            x.rem_euclid(3600)
        }
        // Strictly inside the clockwise arc from `from` to `to`.
        fn inside(from: i32, to: i32, x: i32) -> bool {
            let (from, to, x) = (norm(from), norm(to), norm(x));
            let span = (to - from).rem_euclid(3600);
            let off = (x - from).rem_euclid(3600);
            off > 0 && off < span
        }
        let mut m = ConflictMatrix::default();
        for (i, &a) in movements.iter().enumerate() {
            for (j, &b) in movements.iter().enumerate().skip(i + 1) {
                if a.approach == b.approach {
                    continue;
                }
                let (pa, qa) = path(a);
                let (pb, qb) = path(b);
                let ped = a.turn == Turn::Pedestrian || b.turn == Turn::Pedestrian;
                if ped && a.turn == Turn::Pedestrian && b.turn == Turn::Pedestrian {
                    continue;
                }
                let merge = !ped && norm(qa) == norm(qb);
                let cross = inside(pa, qa, pb) != inside(pa, qa, qb);
                if merge || cross {
                    m.set(MovementId(i as u8), MovementId(j as u8));
                }
            }
        }
        m
    }
}

/// Pedestrian timing of a phase that serves a crossing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PedestrianTiming {
    /// Walk indication.
    pub walk: Millis,
    /// Flashing don't-walk clearance that follows the walk.
    pub clearance: Millis,
}

/// Timing of one phase. Clearance intervals (yellow, all-red) belong to the phase that
/// is ending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PhaseTiming {
    /// Shortest green once started.
    pub min_green: Millis,
    /// Longest green before a change is forced.
    pub max_green: Millis,
    /// Yellow change interval (3–6 s).
    pub yellow: Millis,
    /// All-red clearance interval (0–6 s).
    pub all_red: Millis,
    /// Pedestrian walk and clearance, if the phase serves a crossing.
    pub pedestrian: Option<PedestrianTiming>,
}

impl PhaseTiming {
    /// Timing from whole seconds, without pedestrian timing.
    pub const fn from_secs(
        min_green_s: u32,
        max_green_s: u32,
        yellow_s: u32,
        all_red_s: u32,
    ) -> Self {
        PhaseTiming {
            min_green: Millis::from_secs(min_green_s),
            max_green: Millis::from_secs(max_green_s),
            yellow: Millis::from_secs(yellow_s),
            all_red: Millis::from_secs(all_red_s),
            pedestrian: None,
        }
    }
}

/// One phase: movements green together, and its timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Phase {
    /// Movements shown green during this phase.
    pub movements: MovementSet,
    /// Its timing.
    pub timing: PhaseTiming,
}

/// The least time from the end of movement `from`'s green (the start of its yellow) to the
/// start of the conflicting movement `to`'s green: an intergreen (German *Zwischenzeit*)
/// kept for one ordered pair, as programs that time their links apart do.
///
/// An entry only ever lengthens a switch: a movement turns green once the ending phase's
/// yellow and all-red have run *and* every entry into it is served. A pair without an entry
/// gets the ending phase's yellow and all-red, as every pair did before entries existed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Intergreen {
    /// The movement whose green ends.
    pub from: MovementId,
    /// The conflicting movement whose green starts.
    pub to: MovementId,
    /// The least time between the two.
    pub time: Millis,
}

/// Why a plan was refused. Every variant names the phase or movement at fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// More movements than [`MAX_MOVEMENTS`].
    #[error("plan has {count} movements; at most {max} are supported")]
    TooManyMovements {
        /// Movements given.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// Fewer than two phases (nothing to switch between), or more than [`MAX_PHASES`].
    #[error("plan has {count} phases; between 2 and {max} are supported")]
    PhaseCount {
        /// Phases given.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A phase with no movement.
    #[error("phase {phase}: serves no movement")]
    EmptyPhase {
        /// The phase.
        phase: u8,
    },
    /// A phase naming a movement the plan does not have.
    #[error("phase {phase}: movement {movement} does not exist (plan has {count} movements)")]
    UnknownMovement {
        /// The phase.
        phase: u8,
        /// The bad movement index.
        movement: u8,
        /// Movements in the plan.
        count: usize,
    },
    /// A conflict entry naming a movement the plan does not have.
    #[error("conflict matrix: movement {movement} does not exist (plan has {count} movements)")]
    ConflictOutOfRange {
        /// The bad movement index.
        movement: u8,
        /// Movements in the plan.
        count: usize,
    },
    /// A movement marked as conflicting with itself.
    #[error("conflict matrix: movement {movement} conflicts with itself")]
    SelfConflict {
        /// The movement.
        movement: u8,
    },
    /// A conflict entered one way only: `a` conflicts with `b`, but not `b` with `a` (the
    /// checks that look up one side, the monitor's red clearance among them, would miss it).
    #[error("conflict matrix: movement {a} conflicts with {b}, but {b} not with {a}")]
    AsymmetricConflict {
        /// The movement whose row has the conflict.
        a: u8,
        /// The movement whose row lacks it.
        b: u8,
    },
    /// A phase holding two conflicting movements.
    #[error("phase {phase}: movements {a} and {b} conflict and cannot be green together")]
    ConflictingPhase {
        /// The phase.
        phase: u8,
        /// First movement.
        a: u8,
        /// Second movement.
        b: u8,
    },
    /// Yellow outside 3–6 s.
    #[error("phase {phase}: yellow {yellow} is outside 3-6 s")]
    Yellow {
        /// The phase.
        phase: u8,
        /// The yellow given.
        yellow: Millis,
    },
    /// All-red outside 0–6 s.
    #[error("phase {phase}: all-red {all_red} is outside 0-6 s")]
    AllRed {
        /// The phase.
        phase: u8,
        /// The all-red given.
        all_red: Millis,
    },
    /// Min green below the 1 s floor.
    #[error("phase {phase}: min green {min_green} is below 1 s")]
    MinGreenTooShort {
        /// The phase.
        phase: u8,
        /// The min green given.
        min_green: Millis,
    },
    /// Min green not strictly below max green.
    #[error("phase {phase}: min green {min_green} must be below max green {max_green}")]
    MinGreenNotBelowMax {
        /// The phase.
        phase: u8,
        /// The min green given.
        min_green: Millis,
        /// The max green given.
        max_green: Millis,
    },
    /// Pedestrian walk + clearance longer than min green.
    #[error("phase {phase}: pedestrian walk + clearance exceed min green {min_green}")]
    PedestrianLongerThanMinGreen {
        /// The phase.
        phase: u8,
        /// The min green given.
        min_green: Millis,
    },
    /// More intergreen entries than [`MAX_INTERGREENS`].
    #[error("plan has {count} intergreen entries; at most {max} are supported")]
    TooManyIntergreens {
        /// Entries given.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// An intergreen entry for movements that do not conflict, or do not exist.
    #[error("intergreen {from} -> {to}: the movements do not conflict (or do not exist)")]
    IntergreenNotConflicting {
        /// The ending movement.
        from: u8,
        /// The starting movement.
        to: u8,
    },
    /// Two intergreen entries for one ordered pair.
    #[error("intergreen {from} -> {to}: given twice")]
    DuplicateIntergreen {
        /// The ending movement.
        from: u8,
        /// The starting movement.
        to: u8,
    },
    /// An intergreen of zero or longer than [`INTERGREEN_CEILING`].
    #[error("intergreen {from} -> {to}: {time} is outside 0-12 s")]
    IntergreenOutOfRange {
        /// The ending movement.
        from: u8,
        /// The starting movement.
        to: u8,
        /// The time given.
        time: Millis,
    },
    /// Intergreens into a phase that stagger its movements' starts so much that the first
    /// to start would pass max green before the last has had min green.
    #[error(
        "phase {phase}: intergreens stagger its starts by up to {stagger}, and min green \
         {min_green} plus that is not below max green {max_green}"
    )]
    IntergreensCrowdMaxGreen {
        /// The phase.
        phase: u8,
        /// The longest possible head start of one of its movements over another.
        stagger: Millis,
        /// Its min green.
        min_green: Millis,
        /// Its max green.
        max_green: Millis,
    },
}

/// A validated phase plan for one intersection.
///
/// Deserializing validates too (through [`PhasePlan::new`]): a plan read from a file or a
/// blob is held to the same rules as one built in code, so a zero yellow or a conflicting
/// phase in a stored plan is an error, never a plan the sequencer runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PlanParts")]
pub struct PhasePlan {
    movements: Vec<Movement, MAX_MOVEMENTS>,
    conflicts: ConflictMatrix,
    phases: Vec<Phase, MAX_PHASES>,
    /// Sorted by (from, to); empty for plans that time every pair by yellow and all-red.
    intergreens: Vec<Intergreen, MAX_INTERGREENS>,
}

/// A plan's serialized fields, before validation (the same names and order as
/// [`PhasePlan`]). `intergreens` may be left out of self-describing formats (a site
/// configuration written before entries existed still reads).
#[derive(Serialize, Deserialize)]
struct PlanParts {
    movements: Vec<Movement, MAX_MOVEMENTS>,
    conflicts: ConflictMatrix,
    phases: Vec<Phase, MAX_PHASES>,
    #[serde(default)]
    intergreens: Vec<Intergreen, MAX_INTERGREENS>,
}

impl TryFrom<PlanParts> for PhasePlan {
    type Error = PlanError;

    fn try_from(p: PlanParts) -> Result<Self, PlanError> {
        PhasePlan::new(&p.movements, p.conflicts, &p.phases)?.with_intergreens(&p.intergreens)
    }
}

/// The conflict matrix of `n` movements (`all` = their bit mask): irreflexive, symmetric,
/// and only between movements that exist.
fn check_conflicts(conflicts: &ConflictMatrix, n: usize, all: u32) -> Result<(), PlanError> {
    for i in 0..MAX_MOVEMENTS {
        let row = conflicts.rows[i];
        if row & (1 << i) != 0 {
            return Err(PlanError::SelfConflict { movement: i as u8 });
        }
        if let Some(j) =
            (0..MAX_MOVEMENTS).find(|&j| row & (1 << j) != 0 && conflicts.rows[j] & (1 << i) == 0)
        {
            return Err(PlanError::AsymmetricConflict {
                a: i as u8,
                b: j as u8,
            });
        }
        if row != 0 && (i >= n || row & !all != 0) {
            let bad = if i >= n {
                i
            } else {
                (row & !all).trailing_zeros() as usize
            };
            return Err(PlanError::ConflictOutOfRange {
                movement: bad as u8,
                count: n,
            });
        }
    }
    Ok(())
}

/// Phase `p8`'s movements: some, all known, none in conflict with another.
fn check_phase_movements(
    p8: u8,
    set: MovementSet,
    conflicts: &ConflictMatrix,
    n: usize,
    all: u32,
) -> Result<(), PlanError> {
    if set.is_empty() {
        return Err(PlanError::EmptyPhase { phase: p8 });
    }
    if set.0 & !all != 0 {
        let movement = (set.0 & !all).trailing_zeros() as u8;
        return Err(PlanError::UnknownMovement {
            phase: p8,
            movement,
            count: n,
        });
    }
    for a in set.iter() {
        if let Some(b) = conflicts.foes(a).and(set).iter().next() {
            return Err(PlanError::ConflictingPhase {
                phase: p8,
                a: a.0,
                b: b.0,
            });
        }
    }
    Ok(())
}

/// Phase `p8`'s timing: yellow and all-red in range, min green above the floor and below max
/// green, pedestrian timing within min green.
fn check_phase_timing(p8: u8, t: PhaseTiming) -> Result<(), PlanError> {
    if t.yellow < YELLOW_RANGE.0 || t.yellow > YELLOW_RANGE.1 {
        return Err(PlanError::Yellow {
            phase: p8,
            yellow: t.yellow,
        });
    }
    if t.all_red > ALL_RED_RANGE.1 {
        return Err(PlanError::AllRed {
            phase: p8,
            all_red: t.all_red,
        });
    }
    if t.min_green < MIN_GREEN_FLOOR {
        return Err(PlanError::MinGreenTooShort {
            phase: p8,
            min_green: t.min_green,
        });
    }
    if t.min_green >= t.max_green {
        return Err(PlanError::MinGreenNotBelowMax {
            phase: p8,
            min_green: t.min_green,
            max_green: t.max_green,
        });
    }
    if let Some(ped) = t.pedestrian {
        if ped.walk.saturating_add(ped.clearance) > t.min_green {
            return Err(PlanError::PedestrianLongerThanMinGreen {
                phase: p8,
                min_green: t.min_green,
            });
        }
    }
    Ok(())
}

impl PhasePlan {
    /// Builds and validates a plan.
    ///
    /// Refused: too many movements or phases, a phase with no or unknown movements, a
    /// phase holding two conflicting movements, yellow outside 3–6 s, all-red outside
    /// 0–6 s, min green below 1 s or not below max green, pedestrian timing longer than
    /// min green.
    pub fn new(
        movements: &[Movement],
        conflicts: ConflictMatrix,
        phases: &[Phase],
    ) -> Result<Self, PlanError> {
        let n = movements.len();
        if n > MAX_MOVEMENTS {
            return Err(PlanError::TooManyMovements {
                count: n,
                max: MAX_MOVEMENTS,
            });
        }
        if phases.len() < 2 || phases.len() > MAX_PHASES {
            return Err(PlanError::PhaseCount {
                count: phases.len(),
                max: MAX_PHASES,
            });
        }
        let all: u32 = if n == 32 { u32::MAX } else { (1u32 << n) - 1 };
        check_conflicts(&conflicts, n, all)?;
        for (p, phase) in phases.iter().enumerate() {
            check_phase_movements(p as u8, phase.movements, &conflicts, n, all)?;
            check_phase_timing(p as u8, phase.timing)?;
        }
        Ok(PhasePlan {
            movements: Vec::from_slice(movements).expect("length checked above"),
            conflicts,
            phases: Vec::from_slice(phases).expect("length checked above"),
            intergreens: Vec::new(),
        })
    }

    /// This plan with `entries` as its intergreens (replacing any it had), validated: each
    /// names two conflicting movements, once, with a time above zero and at most
    /// [`INTERGREEN_CEILING`]; and no phase's starts are staggered so far that min green and
    /// max green can no longer both hold (see [`PlanError::IntergreensCrowdMaxGreen`]).
    pub fn with_intergreens(mut self, entries: &[Intergreen]) -> Result<Self, PlanError> {
        if entries.len() > MAX_INTERGREENS {
            return Err(PlanError::TooManyIntergreens {
                count: entries.len(),
                max: MAX_INTERGREENS,
            });
        }
        let mut sorted: Vec<Intergreen, MAX_INTERGREENS> =
            Vec::from_slice(entries).expect("length checked above");
        sorted.sort_unstable_by_key(|e| (e.from, e.to));
        for (k, e) in sorted.iter().enumerate() {
            let (from, to) = (e.from.0, e.to.0);
            if !self.conflicts.conflicts(e.from, e.to) {
                return Err(PlanError::IntergreenNotConflicting { from, to });
            }
            if k > 0 && (sorted[k - 1].from, sorted[k - 1].to) == (e.from, e.to) {
                return Err(PlanError::DuplicateIntergreen { from, to });
            }
            if e.time == Millis::ZERO || e.time > INTERGREEN_CEILING {
                return Err(PlanError::IntergreenOutOfRange {
                    from,
                    to,
                    time: e.time,
                });
            }
        }
        self.intergreens = sorted;
        for (p, phase) in self.phases.iter().enumerate() {
            let stagger = self.stagger_bound(phase.movements);
            let t = phase.timing;
            if t.min_green.saturating_add(stagger) >= t.max_green {
                return Err(PlanError::IntergreensCrowdMaxGreen {
                    phase: p as u8,
                    stagger,
                    min_green: t.min_green,
                    max_green: t.max_green,
                });
            }
        }
        Ok(self)
    }

    /// The most one movement of `set` can start before another in a switch into it: every
    /// start comes at least a yellow (3 s at the least) after the switch began and at most
    /// its longest intergreen.
    fn stagger_bound(&self, set: MovementSet) -> Millis {
        self.intergreens
            .iter()
            .filter(|e| set.contains(e.to))
            .map(|e| e.time.saturating_sub(YELLOW_RANGE.0))
            .max()
            .unwrap_or(Millis::ZERO)
    }

    /// The intergreen entries, sorted by (from, to).
    pub fn intergreens(&self) -> &[Intergreen] {
        &self.intergreens
    }

    /// The intergreen entry for `from` ending and `to` starting, if there is one.
    pub fn intergreen(&self, from: MovementId, to: MovementId) -> Option<Millis> {
        self.intergreens
            .binary_search_by_key(&(from, to), |e| (e.from, e.to))
            .ok()
            .map(|k| self.intergreens[k].time)
    }

    /// How long after a switch from `from` to `to` begins (the start of `from`'s yellow)
    /// movement `n` of `to` may turn green, counting only the movements `from` ends: the
    /// ending phase's yellow and all-red, or longer where an entry from one of them into
    /// `n` asks for it. `None` for unknown phases.
    pub fn start_after(&self, from: PhaseId, to: PhaseId, n: MovementId) -> Option<Millis> {
        let (a, b) = (self.phase(from)?, self.phase(to)?);
        let base = a.timing.yellow.saturating_add(a.timing.all_red);
        let ending = a.movements.minus(b.movements);
        Some(
            self.intergreens
                .iter()
                .filter(|e| e.to == n && ending.contains(e.from))
                .map(|e| e.time)
                .fold(base, Millis::max),
        )
    }

    /// How long a switch from `from` to `to` takes, from the start of `from`'s yellow to the
    /// moment every movement of `to` is green, when the movements `from` ends are the last
    /// to have left green (the usual case; the sequencer also keeps entries from movements
    /// that ended earlier, so a switch straight after a short green can take longer). The
    /// ending phase's yellow and all-red for a plan without entries. The one place every
    /// consumer of a switch's length (cycle lengths, max-red bounds, switch costs) reads it.
    /// Zero for unknown phases.
    pub fn switch_time(&self, from: PhaseId, to: PhaseId) -> Millis {
        let (Some(a), Some(b)) = (self.phase(from), self.phase(to)) else {
            return Millis::ZERO;
        };
        let base = a.timing.yellow.saturating_add(a.timing.all_red);
        b.movements
            .minus(a.movements)
            .iter()
            .filter_map(|n| self.start_after(from, to, n))
            .fold(base, Millis::max)
    }

    /// The longest switch out of phase `from`, to any other phase.
    pub fn longest_switch_from(&self, from: PhaseId) -> Millis {
        (0..self.n_phases() as u8)
            .filter(|&k| k != from.0)
            .map(|k| self.switch_time(from, PhaseId(k)))
            .max()
            .unwrap_or(Millis::ZERO)
    }

    /// Movements, indexed by [`MovementId`].
    pub fn movements(&self) -> &[Movement] {
        &self.movements
    }

    /// Phases, indexed by [`PhaseId`].
    pub fn phases(&self) -> &[Phase] {
        &self.phases
    }

    /// Number of phases (the policy's action count).
    pub fn n_phases(&self) -> usize {
        self.phases.len()
    }

    /// The conflict matrix.
    pub fn conflicts(&self) -> &ConflictMatrix {
        &self.conflicts
    }

    /// A phase by id, if it exists.
    pub fn phase(&self, id: PhaseId) -> Option<&Phase> {
        self.phases.get(id.0 as usize)
    }

    /// Stable 64-bit fingerprint (FNV-1a over a canonical encoding of movements,
    /// conflicts, phases and timing). Bundles carry it so a controller never loads a
    /// policy trained for another plan.
    pub fn hash(&self) -> u64 {
        let mut h = Fnv1a::new();
        h.u32(self.movements.len() as u32);
        for m in &self.movements {
            h.u32(m.approach as u32);
            h.u32(m.turn as u32);
        }
        for row in &self.conflicts.rows[..self.movements.len()] {
            h.u32(*row);
        }
        h.u32(self.phases.len() as u32);
        for p in &self.phases {
            h.u32(p.movements.0);
            let t = p.timing;
            for v in [t.min_green, t.max_green, t.yellow, t.all_red] {
                h.u32(v.0);
            }
            match t.pedestrian {
                Some(ped) => {
                    h.u32(1);
                    h.u32(ped.walk.0);
                    h.u32(ped.clearance.0);
                }
                None => h.u32(0),
            }
        }
        // Only when there are entries, so every plan without them keeps its hash (and every
        // bundle signed for it keeps verifying).
        if !self.intergreens.is_empty() {
            h.u32(self.intergreens.len() as u32);
            for e in &self.intergreens {
                h.u32(e.from.0 as u32);
                h.u32(e.to.0 as u32);
                h.u32(e.time.0);
            }
        }
        h.finish()
    }

    /// The standard four-arm, four-phase plan of `single-4way`: left, through and right
    /// from every arm; phases N–S through+right, N–S protected left, E–W through+right,
    /// E–W protected left. Movement `3·arm + k` with k = 0 left, 1 through, 2 right.
    pub fn four_arm_protected_left(timing: PhaseTiming) -> Result<Self, PlanError> {
        let mut movements: Vec<Movement, MAX_MOVEMENTS> = Vec::new();
        for arm in 0..4u8 {
            for turn in [Turn::Left, Turn::Through, Turn::Right] {
                let _ = movements.push(Movement::new(arm, turn));
            }
        }
        let conflicts = ConflictMatrix::four_arm(&movements);
        let id = |arm: u8, k: u8| 3 * arm + k;
        let phases = [
            MovementSet::from_ids(&[id(0, 1), id(0, 2), id(2, 1), id(2, 2)]),
            MovementSet::from_ids(&[id(0, 0), id(2, 0)]),
            MovementSet::from_ids(&[id(1, 1), id(1, 2), id(3, 1), id(3, 2)]),
            MovementSet::from_ids(&[id(1, 0), id(3, 0)]),
        ]
        .map(|movements| Phase { movements, timing });
        PhasePlan::new(&movements, conflicts, &phases)
    }
}

/// FNV-1a, 64-bit: tiny, dependency-free and stable across platforms and releases.
pub(crate) struct Fnv1a(u64);

impl Fnv1a {
    pub(crate) const fn new() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= x as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    pub(crate) const fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    fn t() -> PhaseTiming {
        PhaseTiming::from_secs(5, 40, 3, 2)
    }

    fn ids(arm: u8, turn: Turn) -> MovementId {
        let k = match turn {
            Turn::Left => 0,
            Turn::Through => 1,
            _ => 2,
        };
        MovementId(3 * arm + k)
    }

    #[test]
    fn four_arm_geometry() {
        let plan = PhasePlan::four_arm_protected_left(t()).unwrap();
        let c = plan.conflicts();
        use Turn::*;
        // Perpendicular throughs cross.
        assert!(c.conflicts(ids(0, Through), ids(1, Through)));
        // Opposing throughs do not.
        assert!(!c.conflicts(ids(0, Through), ids(2, Through)));
        // A left crosses the opposing through.
        assert!(c.conflicts(ids(0, Left), ids(2, Through)));
        // Opposing lefts pass each other.
        assert!(!c.conflicts(ids(0, Left), ids(2, Left)));
        // Right from north merges with through from east (both exit west).
        assert!(c.conflicts(ids(0, Right), ids(1, Through)));
        // Right from north and left from south merge into the west arm.
        assert!(c.conflicts(ids(0, Right), ids(2, Left)));
        // Right from north does not touch the opposing through.
        assert!(!c.conflicts(ids(0, Right), ids(2, Through)));
        // Symmetric.
        for a in 0..12 {
            for b in 0..12 {
                assert_eq!(
                    c.conflicts(MovementId(a), MovementId(b)),
                    c.conflicts(MovementId(b), MovementId(a))
                );
            }
        }
        assert_eq!(plan.n_phases(), 4);
    }

    #[test]
    fn pedestrians_conflict_with_traffic_on_their_arm() {
        let ms = [
            Movement::new(0, Turn::Pedestrian),
            Movement::new(0, Turn::Through),
            Movement::new(1, Turn::Right), // exits north
            Movement::new(1, Turn::Left),  // exits south
            Movement::new(2, Turn::Pedestrian),
        ];
        let c = ConflictMatrix::four_arm(&ms);
        assert!(
            c.conflicts(MovementId(0), MovementId(2)),
            "right turn into the crossed arm"
        );
        assert!(
            !c.conflicts(MovementId(0), MovementId(3)),
            "left turn away from it"
        );
        assert!(
            !c.conflicts(MovementId(0), MovementId(4)),
            "two crossings never conflict"
        );
        assert!(
            c.conflicts(MovementId(4), MovementId(1)),
            "through traffic leaving south"
        );
    }

    #[test]
    fn refuses_a_conflict_entered_one_way_only() {
        let ms = [
            Movement::new(0, Turn::Through),
            Movement::new(1, Turn::Through),
        ];
        let phases = [0, 1].map(|m| Phase {
            movements: MovementSet::from_ids(&[m]),
            timing: t(),
        });
        let mut c = ConflictMatrix::default();
        c.rows[1] = 1;
        let err = PhasePlan::new(&ms, c, &phases).unwrap_err();
        assert_eq!(err, PlanError::AsymmetricConflict { a: 1, b: 0 });
        assert_eq!(
            format!("{err}"),
            "conflict matrix: movement 1 conflicts with 0, but 0 not with 1"
        );
        c.rows[0] = 2;
        assert!(PhasePlan::new(&ms, c, &phases).is_ok());
    }

    #[test]
    fn refuses_conflicting_phase_naming_it() {
        let ms = [
            Movement::new(0, Turn::Through),
            Movement::new(1, Turn::Through),
        ];
        let c = ConflictMatrix::four_arm(&ms);
        let phases = [
            Phase {
                movements: MovementSet::from_ids(&[0]),
                timing: t(),
            },
            Phase {
                movements: MovementSet::from_ids(&[0, 1]),
                timing: t(),
            },
        ];
        let err = PhasePlan::new(&ms, c, &phases).unwrap_err();
        assert_eq!(
            err,
            PlanError::ConflictingPhase {
                phase: 1,
                a: 0,
                b: 1
            }
        );
        assert_eq!(
            format!("{err}"),
            "phase 1: movements 0 and 1 conflict and cannot be green together"
        );
    }

    #[test]
    fn refuses_short_yellow_and_bad_greens() {
        let ms = [Movement::new(0, Turn::Through)];
        let phase = |timing| {
            [Phase {
                movements: MovementSet::from_ids(&[0]),
                timing,
            }; 2]
        };
        let err = PhasePlan::new(
            &ms,
            ConflictMatrix::default(),
            &phase(PhaseTiming::from_secs(5, 40, 2, 2)),
        )
        .unwrap_err();
        assert_eq!(
            err,
            PlanError::Yellow {
                phase: 0,
                yellow: Millis(2000)
            }
        );
        assert_eq!(format!("{err}"), "phase 0: yellow 2.000 s is outside 3-6 s");
        let err = PhasePlan::new(
            &ms,
            ConflictMatrix::default(),
            &phase(PhaseTiming::from_secs(40, 40, 3, 2)),
        )
        .unwrap_err();
        assert!(matches!(
            err,
            PlanError::MinGreenNotBelowMax { phase: 0, .. }
        ));
        assert!(format!("{err}").contains("min green 40.000 s must be below max green 40.000 s"));
        let err = PhasePlan::new(
            &ms,
            ConflictMatrix::default(),
            &phase(PhaseTiming::from_secs(5, 40, 3, 7)),
        )
        .unwrap_err();
        assert!(matches!(err, PlanError::AllRed { phase: 0, .. }));
        let mut ped = PhaseTiming::from_secs(5, 40, 3, 2);
        ped.pedestrian = Some(PedestrianTiming {
            walk: Millis(4000),
            clearance: Millis(3000),
        });
        let err = PhasePlan::new(&ms, ConflictMatrix::default(), &phase(ped)).unwrap_err();
        assert!(matches!(
            err,
            PlanError::PedestrianLongerThanMinGreen { phase: 0, .. }
        ));
    }

    #[test]
    fn refuses_structural_errors() {
        let ms = [
            Movement::new(0, Turn::Through),
            Movement::new(2, Turn::Through),
        ];
        let ok = Phase {
            movements: MovementSet::from_ids(&[0, 1]),
            timing: t(),
        };
        assert!(matches!(
            PhasePlan::new(&ms, ConflictMatrix::default(), &[]),
            Err(PlanError::PhaseCount { count: 0, .. })
        ));
        let empty = Phase {
            movements: MovementSet::EMPTY,
            timing: t(),
        };
        assert_eq!(
            PhasePlan::new(&ms, ConflictMatrix::default(), &[ok, empty]),
            Err(PlanError::EmptyPhase { phase: 1 })
        );
        let unknown = Phase {
            movements: MovementSet::from_ids(&[5]),
            timing: t(),
        };
        assert!(matches!(
            PhasePlan::new(&ms, ConflictMatrix::default(), &[ok, unknown]),
            Err(PlanError::UnknownMovement {
                phase: 1,
                movement: 5,
                count: 2
            })
        ));
        let far = ConflictMatrix::from_pairs(&[(MovementId(0), MovementId(7))]);
        assert!(matches!(
            PhasePlan::new(&ms, far, &[ok, ok]),
            Err(PlanError::ConflictOutOfRange { .. })
        ));
    }

    #[test]
    fn deserializing_validates() {
        let plan = PhasePlan::four_arm_protected_left(t()).unwrap();
        let bytes = postcard::to_allocvec(&plan).unwrap();
        assert_eq!(postcard::from_bytes::<PhasePlan>(&bytes).unwrap(), plan);
        // The same plan with every timing zeroed, as a corrupt file would carry it.
        let mut phases = plan.phases.clone();
        for p in phases.iter_mut() {
            p.timing = PhaseTiming::from_secs(0, 0, 0, 0);
        }
        let parts = PlanParts {
            movements: plan.movements.clone(),
            conflicts: plan.conflicts,
            phases,
            intergreens: Vec::new(),
        };
        let bytes = postcard::to_allocvec(&parts).unwrap();
        assert!(postcard::from_bytes::<PhasePlan>(&bytes).is_err());
    }

    fn entry(from: u8, to: u8, ms: u32) -> Intergreen {
        Intergreen {
            from: MovementId(from),
            to: MovementId(to),
            time: Millis(ms),
        }
    }

    #[test]
    fn intergreens_are_validated_naming_the_pair() {
        let plan = PhasePlan::four_arm_protected_left(t()).unwrap();
        // Movement 1 (north through) and 7 (south through) do not conflict.
        let err = plan
            .clone()
            .with_intergreens(&[entry(1, 7, 5000)])
            .unwrap_err();
        assert_eq!(err, PlanError::IntergreenNotConflicting { from: 1, to: 7 });
        assert_eq!(
            format!("{err}"),
            "intergreen 1 -> 7: the movements do not conflict (or do not exist)"
        );
        let err = plan
            .clone()
            .with_intergreens(&[entry(1, 40, 5000)])
            .unwrap_err();
        assert_eq!(err, PlanError::IntergreenNotConflicting { from: 1, to: 40 });
        let err = plan
            .clone()
            .with_intergreens(&[entry(1, 4, 5000), entry(1, 4, 6000)])
            .unwrap_err();
        assert_eq!(err, PlanError::DuplicateIntergreen { from: 1, to: 4 });
        for ms in [0, 12_001] {
            let err = plan
                .clone()
                .with_intergreens(&[entry(1, 4, ms)])
                .unwrap_err();
            assert!(matches!(
                err,
                PlanError::IntergreenOutOfRange { from: 1, to: 4, .. }
            ));
        }
        // min green 5 s + a stagger of 12 - 3 = 9 s is not below max green 14 s.
        let tight =
            PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 14, 3, 2)).unwrap();
        let err = tight.with_intergreens(&[entry(1, 4, 12_000)]).unwrap_err();
        assert_eq!(
            err,
            PlanError::IntergreensCrowdMaxGreen {
                phase: 2,
                stagger: Millis(9000),
                min_green: Millis(5000),
                max_green: Millis(14_000),
            }
        );
        let many: std::vec::Vec<Intergreen> = (0..=MAX_INTERGREENS as u32)
            .map(|k| entry(1, 4, 3000 + k))
            .collect();
        assert!(matches!(
            plan.with_intergreens(&many),
            Err(PlanError::TooManyIntergreens { count: 65, max: 64 })
        ));
    }

    #[test]
    fn switch_time_is_yellow_and_all_red_or_the_longest_entry() {
        let plan = PhasePlan::four_arm_protected_left(t()).unwrap();
        for (a, b) in [(0, 1), (0, 2), (2, 0), (3, 1)] {
            assert_eq!(plan.switch_time(PhaseId(a), PhaseId(b)), Millis(5000));
        }
        let plan = plan
            .with_intergreens(&[entry(4, 1, 7000), entry(1, 4, 9000), entry(1, 3, 4000)])
            .unwrap();
        assert_eq!(
            plan.intergreen(MovementId(1), MovementId(4)),
            Some(Millis(9000))
        );
        assert_eq!(
            plan.intergreen(MovementId(4), MovementId(1)),
            Some(Millis(7000))
        );
        assert_eq!(plan.intergreen(MovementId(1), MovementId(5)), None);
        // 0 -> 2 ends movement 1 and starts 4: 9 s. Movement 3 starts in phase 3 only.
        assert_eq!(plan.switch_time(PhaseId(0), PhaseId(2)), Millis(9000));
        assert_eq!(plan.switch_time(PhaseId(2), PhaseId(0)), Millis(7000));
        // An entry shorter than yellow and all-red changes nothing.
        assert_eq!(plan.switch_time(PhaseId(0), PhaseId(3)), Millis(5000));
        // Phase 1 does not end movement 1's green (it is not in it).
        assert_eq!(plan.switch_time(PhaseId(1), PhaseId(2)), Millis(5000));
        assert_eq!(plan.longest_switch_from(PhaseId(0)), Millis(9000));
        assert_eq!(plan.switch_time(PhaseId(0), PhaseId(9)), Millis::ZERO);
    }

    #[test]
    fn intergreens_change_the_hash_and_survive_a_round_trip() {
        let plain = PhasePlan::four_arm_protected_left(t()).unwrap();
        // (That a plan without entries keeps the hash it had before entries existed is
        // pinned by greenwave-policy's manifest tests, which hold a fixed hash.)
        let with = plain
            .clone()
            .with_intergreens(&[entry(1, 4, 9000)])
            .unwrap();
        let longer = plain
            .clone()
            .with_intergreens(&[entry(1, 4, 9100)])
            .unwrap();
        assert_ne!(plain.hash(), with.hash());
        assert_ne!(with.hash(), longer.hash());
        // Order given does not matter: entries are kept sorted.
        let a = plain
            .clone()
            .with_intergreens(&[entry(4, 1, 7000), entry(1, 4, 9000)])
            .unwrap();
        let b = plain
            .clone()
            .with_intergreens(&[entry(1, 4, 9000), entry(4, 1, 7000)])
            .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.hash(), b.hash());
        let bytes = postcard::to_allocvec(&a).unwrap();
        assert_eq!(postcard::from_bytes::<PhasePlan>(&bytes).unwrap(), a);
        // A stored plan with a bad entry is refused as it is read.
        let parts = PlanParts {
            movements: plain.movements.clone(),
            conflicts: plain.conflicts,
            phases: plain.phases.clone(),
            intergreens: Vec::from_slice(&[entry(1, 7, 9000)]).unwrap(),
        };
        let bytes = postcard::to_allocvec(&parts).unwrap();
        assert!(postcard::from_bytes::<PhasePlan>(&bytes).is_err());
    }

    #[test]
    fn hash_is_stable_and_sensitive() {
        let a = PhasePlan::four_arm_protected_left(t()).unwrap();
        let b = PhasePlan::four_arm_protected_left(t()).unwrap();
        assert_eq!(a.hash(), b.hash());
        let c = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 41, 3, 2)).unwrap();
        assert_ne!(a.hash(), c.hash());
    }
}
