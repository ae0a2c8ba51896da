//! The conflict monitor: an independent check of what the signal heads actually show, like
//! a cabinet's malfunction management unit (MMU).
//!
//! It shares no logic with the [`Sequencer`](greenwave_core::Sequencer): it is programmed
//! with a [`MonitorCard`] (which channels conflict, each channel's minimum yellow), reads
//! the lamp-sense inputs after every tick's output writes, and latches a fault on:
//!
//! * two conflicting channels showing green or yellow together;
//! * a channel with more than one lamp lit, or with no lamp lit (red lamp failure);
//! * a channel going from green straight to red (skipped yellow);
//! * a yellow shorter than the channel's minimum yellow;
//! * a channel turning green before every conflicting channel that just ended its yellow
//!   has shown red for that channel's minimum red clearance (a cut all-red; a foe last
//!   read clean in yellow has shown none);
//! * a channel turning green sooner after a conflicting channel's green ended (the start of
//!   its yellow) than the card's intergreen for that pair (a cut intergreen: the clearance
//!   a pair of conflicting streams needs, as German practice times it, RiLSA's
//!   *Zwischenzeit*);
//! * a channel going from yellow back to green.
//!
//! The first three must persist for the card's persistence (lamp-sense latency); the
//! sequence rules act on the first reading. Once latched, the fault stays until
//! [`ConflictMonitor::reset`], which only a technician's reset input may call — never a
//! policy output. Rules act on *clean* readings (exactly one lamp lit); transient double or
//! dark readings are judged by the persistence rule alone.

use greenwave_core::plan::{MAX_INTERGREENS, MAX_MOVEMENTS};
use greenwave_core::{Intergreen, Millis, MovementId, PhasePlan};
use serde::{Deserialize, Serialize};

use crate::heads::{Lamp, Lamps};

/// The monitor's programming: which channels may never be non-red together, each
/// channel's minimum yellow and minimum red clearance (the all-red a conflicting channel
/// must wait after this one's yellow ends), and for some ordered pairs of conflicting
/// channels a minimum intergreen (from the end of the first's green to the start of the
/// second's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MonitorCard {
    channels: u8,
    foes: [u32; MAX_MOVEMENTS],
    min_yellow: [Millis; MAX_MOVEMENTS],
    min_red_clearance: [Millis; MAX_MOVEMENTS],
    persistence: Millis,
    /// The first `n_intergreens` entries are the card's (channels as movement ids).
    intergreens: [Intergreen; MAX_INTERGREENS],
    n_intergreens: u8,
}

const NO_INTERGREEN: Intergreen = Intergreen {
    from: MovementId(0),
    to: MovementId(0),
    time: Millis::ZERO,
};

/// Why a monitor card was refused, or refused a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CardError {
    /// More channels than supported, or a conflict naming a channel not on the card.
    #[error("channel {channel} is outside the card's {channels} channels")]
    ChannelOutOfRange {
        /// The channel named.
        channel: u8,
        /// Channels on the card.
        channels: u8,
    },
    /// A channel conflicting with itself.
    #[error("channel {channel} is listed as conflicting with itself")]
    SelfConflict {
        /// The channel.
        channel: u8,
    },
    /// The plan drives a different number of signal groups.
    #[error("card has {card} channels, the plan has {plan} movements")]
    ChannelCount {
        /// Channels on the card.
        card: u8,
        /// Movements in the plan.
        plan: usize,
    },
    /// A phase of the plan shows two channels green that the card says conflict.
    #[error("phase {phase} shows channels {a} and {b} together, which the card forbids")]
    PhaseConflicts {
        /// The phase.
        phase: u8,
        /// One channel.
        a: u8,
        /// The other.
        b: u8,
    },
    /// The per-channel lists of minimum yellows and minimum red clearances differ in length.
    #[error("card lists {yellow} minimum yellows but {red} minimum red clearances")]
    ClearanceListLength {
        /// Entries in the minimum-yellow list.
        yellow: usize,
        /// Entries in the minimum-red-clearance list.
        red: usize,
    },
    /// A phase's all-red is shorter than the card's minimum red clearance for one of its
    /// channels.
    #[error("phase {phase} all-red {} ms is below channel {channel}'s minimum red clearance {} ms", .all_red.0, .min_red_clearance.0)]
    RedClearanceBelowCard {
        /// The phase.
        phase: u8,
        /// The channel.
        channel: u8,
        /// The phase's all-red.
        all_red: Millis,
        /// The card's minimum.
        min_red_clearance: Millis,
    },
    /// More intergreen entries than a card holds ([`MAX_INTERGREENS`]).
    #[error("card lists {count} intergreens, at most {MAX_INTERGREENS} fit")]
    TooManyIntergreens {
        /// Entries given.
        count: usize,
    },
    /// An intergreen entry naming a channel off the card, two channels the card does not
    /// list as conflicting, a zero time, or a pair listed before.
    #[error("intergreen from channel {from} to channel {to}: not two conflicting channels of the card with a time above zero, listed once")]
    BadIntergreen {
        /// The channel whose green ends.
        from: u8,
        /// The channel whose green starts.
        to: u8,
    },
    /// A switch of the plan from a phase serving `from` to one serving `to` can give less
    /// than the card's intergreen for the pair: the plan has no entry that long, and the
    /// phase's yellow and all-red are shorter.
    #[error("phase {phase} ends channel {from} at least {} ms before channel {to} may start, below the card's intergreen {} ms", .switch.0, .required.0)]
    IntergreenBelowCard {
        /// The phase serving `from` (and not `to`).
        phase: u8,
        /// The channel whose green ends.
        from: u8,
        /// The channel whose green starts.
        to: u8,
        /// What the plan keeps between them: its entry, or the phase's yellow and all-red.
        switch: Millis,
        /// The card's intergreen.
        required: Millis,
    },
    /// A phase's yellow is shorter than the card's minimum for one of its channels.
    #[error("phase {phase} yellow {} ms is below channel {channel}'s minimum {} ms", .yellow.0, .min_yellow.0)]
    YellowBelowCard {
        /// The phase.
        phase: u8,
        /// The channel.
        channel: u8,
        /// The phase's yellow.
        yellow: Millis,
        /// The card's minimum.
        min_yellow: Millis,
    },
}

impl MonitorCard {
    /// A card from explicit conflicting channel pairs and per-channel minimum yellows and
    /// red clearances (as a traffic engineer programs an MMU, independently of the
    /// controller's plan).
    pub fn new(
        conflicts: &[(u8, u8)],
        min_yellow: &[Millis],
        min_red_clearance: &[Millis],
        persistence: Millis,
    ) -> Result<Self, CardError> {
        let channels = min_yellow.len();
        if min_red_clearance.len() != channels {
            return Err(CardError::ClearanceListLength {
                yellow: channels,
                red: min_red_clearance.len(),
            });
        }
        if channels > MAX_MOVEMENTS {
            return Err(CardError::ChannelOutOfRange {
                channel: channels as u8,
                channels: MAX_MOVEMENTS as u8,
            });
        }
        let n = channels as u8;
        let mut card = MonitorCard {
            channels: n,
            foes: [0; MAX_MOVEMENTS],
            min_yellow: [Millis::ZERO; MAX_MOVEMENTS],
            min_red_clearance: [Millis::ZERO; MAX_MOVEMENTS],
            persistence,
            intergreens: [NO_INTERGREEN; MAX_INTERGREENS],
            n_intergreens: 0,
        };
        card.min_yellow[..channels].copy_from_slice(min_yellow);
        card.min_red_clearance[..channels].copy_from_slice(min_red_clearance);
        for &(a, b) in conflicts {
            for c in [a, b] {
                if c >= n {
                    return Err(CardError::ChannelOutOfRange {
                        channel: c,
                        channels: n,
                    });
                }
            }
            if a == b {
                return Err(CardError::SelfConflict { channel: a });
            }
            card.foes[a as usize] |= 1 << b;
            card.foes[b as usize] |= 1 << a;
        }
        Ok(card)
    }

    /// This card with `entries` as its intergreens (replacing any it had): each names two
    /// channels the card lists as conflicting, once, with a time above zero.
    pub fn with_intergreens(mut self, entries: &[Intergreen]) -> Result<Self, CardError> {
        if entries.len() > MAX_INTERGREENS {
            return Err(CardError::TooManyIntergreens {
                count: entries.len(),
            });
        }
        for (k, e) in entries.iter().enumerate() {
            let (from, to) = (e.from.0, e.to.0);
            let foes = self.foes.get(from as usize).copied().unwrap_or(0);
            let conflicting = from < self.channels && to < self.channels && foes & (1 << to) != 0;
            let again = entries[..k]
                .iter()
                .any(|d| (d.from, d.to) == (e.from, e.to));
            if !conflicting || again || e.time == Millis::ZERO {
                return Err(CardError::BadIntergreen { from, to });
            }
        }
        self.set_intergreens(entries);
        Ok(self)
    }

    /// Stores `entries` (at most [`MAX_INTERGREENS`], already checked); those past the count
    /// stay blank, so equal cards compare and hash equal.
    fn set_intergreens(&mut self, entries: &[Intergreen]) {
        self.intergreens = [NO_INTERGREEN; MAX_INTERGREENS];
        self.intergreens[..entries.len()].copy_from_slice(entries);
        self.n_intergreens = entries.len() as u8;
    }

    /// The card's intergreen entries.
    pub fn intergreens(&self) -> &[Intergreen] {
        &self.intergreens[..self.n_intergreens as usize]
    }

    /// The card a plan implies: its conflict matrix, its intergreen entries, and for each
    /// channel the shortest yellow and the shortest all-red of the phases that serve it;
    /// faults other than sequence faults must persist for `persistence`.
    pub fn from_plan(plan: &PhasePlan, persistence: Millis) -> Self {
        let n = plan.movements().len().min(MAX_MOVEMENTS);
        let shortest_yellow = plan
            .phases()
            .iter()
            .map(|p| p.timing.yellow)
            .min()
            .unwrap_or(Millis::ZERO);
        let mut card = MonitorCard {
            channels: n as u8,
            foes: [0; MAX_MOVEMENTS],
            min_yellow: [Millis::ZERO; MAX_MOVEMENTS],
            min_red_clearance: [Millis::ZERO; MAX_MOVEMENTS],
            persistence,
            intergreens: [NO_INTERGREEN; MAX_INTERGREENS],
            n_intergreens: 0,
        };
        card.set_intergreens(plan.intergreens());
        for ch in 0..n {
            let m = greenwave_core::MovementId(ch as u8);
            card.foes[ch] = plan.conflicts().foes(m).0;
            card.min_yellow[ch] = plan
                .phases()
                .iter()
                .filter(|p| p.movements.contains(m))
                .map(|p| p.timing.yellow)
                .min()
                .unwrap_or(shortest_yellow);
            // A channel no phase serves never turns green, so it never owes a clearance.
            card.min_red_clearance[ch] = plan
                .phases()
                .iter()
                .filter(|p| p.movements.contains(m))
                .map(|p| p.timing.all_red)
                .min()
                .unwrap_or(Millis::ZERO);
        }
        card
    }

    /// Checks that the plan can run under this card: same channel count, no phase showing
    /// two conflicting channels, no phase yellow or all-red below a served channel's minimum,
    /// and no switch that can give a pair less than the card's intergreen for it.
    pub fn check_plan(&self, plan: &PhasePlan) -> Result<(), CardError> {
        if plan.movements().len() != self.channels as usize {
            return Err(CardError::ChannelCount {
                card: self.channels,
                plan: plan.movements().len(),
            });
        }
        for (p, phase) in plan.phases().iter().enumerate() {
            let set = phase.movements.0;
            for a in 0..self.channels {
                if set & (1 << a) == 0 {
                    continue;
                }
                let clash = self.foes[a as usize] & set;
                if clash != 0 {
                    return Err(CardError::PhaseConflicts {
                        phase: p as u8,
                        a,
                        b: clash.trailing_zeros() as u8,
                    });
                }
                let min = self.min_yellow[a as usize];
                if phase.timing.yellow < min {
                    return Err(CardError::YellowBelowCard {
                        phase: p as u8,
                        channel: a,
                        yellow: phase.timing.yellow,
                        min_yellow: min,
                    });
                }
                let min = self.min_red_clearance[a as usize];
                if phase.timing.all_red < min {
                    return Err(CardError::RedClearanceBelowCard {
                        phase: p as u8,
                        channel: a,
                        all_red: phase.timing.all_red,
                        min_red_clearance: min,
                    });
                }
            }
        }
        self.check_plan_intergreens(plan)
    }

    /// Every switch out of a phase serving an entry's `from` (and not its `to`) keeps at
    /// least the entry: the plan's own entry for the pair, or the phase's yellow and all-red.
    fn check_plan_intergreens(&self, plan: &PhasePlan) -> Result<(), CardError> {
        for e in self.intergreens() {
            let kept = plan.intergreen(e.from, e.to).unwrap_or(Millis::ZERO);
            for (p, phase) in plan.phases().iter().enumerate() {
                if !phase.movements.contains(e.from) || phase.movements.contains(e.to) {
                    continue;
                }
                let switch = kept.max(phase.timing.yellow.saturating_add(phase.timing.all_red));
                if switch < e.time {
                    return Err(CardError::IntergreenBelowCard {
                        phase: p as u8,
                        from: e.from.0,
                        to: e.to.0,
                        switch,
                        required: e.time,
                    });
                }
            }
        }
        Ok(())
    }

    /// Number of channels.
    pub fn channels(&self) -> u8 {
        self.channels
    }

    /// Minimum yellow of `channel`.
    pub fn min_yellow(&self, channel: u8) -> Millis {
        self.min_yellow
            .get(channel as usize)
            .copied()
            .unwrap_or(Millis::ZERO)
    }

    /// Minimum red clearance of `channel`: how long a conflicting channel must wait after
    /// this channel's yellow ends.
    pub fn min_red_clearance(&self, channel: u8) -> Millis {
        self.min_red_clearance
            .get(channel as usize)
            .copied()
            .unwrap_or(Millis::ZERO)
    }
}

/// What the monitor found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error, Serialize, Deserialize)]
pub enum FaultKind {
    /// Two conflicting channels showed green or yellow together.
    #[error("conflict: channels {a} and {b} not red together")]
    Conflict {
        /// One channel.
        a: u8,
        /// The other.
        b: u8,
    },
    /// More than one lamp lit on a channel.
    #[error("channel {channel}: more than one lamp lit")]
    MultipleIndications {
        /// The channel.
        channel: u8,
    },
    /// No lamp lit on a channel (red lamp failure).
    #[error("channel {channel}: no lamp lit")]
    NoIndication {
        /// The channel.
        channel: u8,
    },
    /// Green went straight to red.
    #[error("channel {channel}: green to red without yellow")]
    SkippedYellow {
        /// The channel.
        channel: u8,
    },
    /// A yellow shorter than the channel's minimum.
    #[error("channel {channel}: yellow shown {} ms, minimum {} ms", .shown.0, .required.0)]
    ShortYellow {
        /// The channel.
        channel: u8,
        /// How long the yellow was seen.
        shown: Millis,
        /// The card's minimum.
        required: Millis,
    },
    /// A channel turned green before a conflicting channel, whose yellow had just ended,
    /// had shown red for its minimum red clearance (a cut all-red).
    #[error("channel {next} green {} ms after conflicting channel {channel} turned red, minimum red clearance {} ms", .shown.0, .required.0)]
    ShortRedClearance {
        /// The conflicting channel that was clearing.
        channel: u8,
        /// The channel that turned green.
        next: u8,
        /// How long the clearing channel had been red.
        shown: Millis,
        /// The card's minimum red clearance for the clearing channel.
        required: Millis,
    },
    /// Yellow went back to green.
    #[error("channel {channel}: yellow to green")]
    YellowToGreen {
        /// The channel.
        channel: u8,
    },
    /// The readback did not cover every channel.
    #[error("readback covers {read} channels, the card has {channels}")]
    ReadbackIncomplete {
        /// Channels read.
        read: u8,
        /// Channels on the card.
        channels: u8,
    },
    /// A lamp output could not be written (reported by the controller).
    #[error("channel {channel}: {lamp} lamp output failed")]
    LampOutputFailed {
        /// The channel.
        channel: u8,
        /// The lamp.
        lamp: Lamp,
    },
    /// A lamp-sense input could not be read (reported by the controller): the monitor is
    /// blind, which is itself a fault.
    #[error("channel {channel}: {lamp} lamp sense failed")]
    LampSenseFailed {
        /// The channel.
        channel: u8,
        /// The lamp.
        lamp: Lamp,
    },
    /// A channel turned green sooner after a conflicting channel's green ended than the
    /// card's intergreen for the pair (a cut intergreen).
    #[error("channel {to} green {} ms after conflicting channel {from}'s green ended, intergreen {} ms", .shown.0, .required.0)]
    ShortIntergreen {
        /// The channel whose green had ended.
        from: u8,
        /// The channel that turned green.
        to: u8,
        /// Time since `from`'s green ended (its yellow and red).
        shown: Millis,
        /// The card's intergreen for the pair.
        required: Millis,
    },
}

/// A latched fault and when it latched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MonitorFault {
    /// What was found.
    pub kind: FaultKind,
    /// Controller uptime when it latched, ms (an instant on the `u64` uptime, so a raw
    /// integer, not a [`Millis`]).
    pub at_ms: u64,
}

/// The single lamp a channel showed on its last clean reading, and since when (low 32 bits
/// of the uptime, raw for wrapping arithmetic: only differences of a few seconds are ever
/// taken, and those are [`Millis`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CleanIndication {
    lamp: Lamp,
    since_ms: u32,
    /// A red entered from a seen yellow: the channel is clearing and its foes owe it the
    /// card's red clearance. (A red seen first after power-up or reset owes nothing: the
    /// start-up all-red precedes any green.)
    after_yellow: bool,
    /// How long that yellow was seen (zero unless `after_yellow`): with the red's own time,
    /// how long ago the channel's green ended, for the card's intergreens.
    yellow: Millis,
}

impl CleanIndication {
    /// How long this lamp has been seen, at `now_ms`.
    fn held(&self, now_ms: u64) -> Millis {
        Millis((now_ms as u32).wrapping_sub(self.since_ms))
    }

    /// A clearing channel's (time since its green ended, red shown so far), the one count
    /// both clearance rules judge: last seen yellow (its red not yet read clean), its green
    /// ended when the yellow began and no red is shown; red after a yellow, the yellow and
    /// the red. `None` for a green, or a red not entered from a yellow (power-up, reset).
    fn clearing(&self, now_ms: u64) -> Option<(Millis, Millis)> {
        let held = self.held(now_ms);
        match self.lamp {
            Lamp::Yellow => Some((held, Millis::ZERO)),
            Lamp::Red if self.after_yellow => Some((self.yellow.saturating_add(held), held)),
            _ => None,
        }
    }
}

/// How long a red after a yellow still counts as clearing (see [`ConflictMonitor::check`]).
const STALE_CLEARANCE_MS: u32 = 1 << 31;

/// The monitor. See the module docs for its rules.
#[derive(Clone, Debug)]
pub struct ConflictMonitor {
    card: MonitorCard,
    last_clean: [Option<CleanIndication>; MAX_MOVEMENTS],
    anomaly_since_ms: Option<u64>,
    latched: Option<MonitorFault>,
}

impl ConflictMonitor {
    /// A monitor programmed with `card`, with no history.
    pub fn new(card: MonitorCard) -> Self {
        ConflictMonitor {
            card,
            last_clean: [None; MAX_MOVEMENTS],
            anomaly_since_ms: None,
            latched: None,
        }
    }

    /// Its card.
    pub fn card(&self) -> &MonitorCard {
        &self.card
    }

    /// The latched fault, if any.
    pub fn latched(&self) -> Option<MonitorFault> {
        self.latched
    }

    /// Latches `kind` at `now_ms` unless a fault is already latched (the first one is kept).
    pub fn trip(&mut self, kind: FaultKind, now_ms: u64) -> MonitorFault {
        *self.latched.get_or_insert(MonitorFault {
            kind,
            at_ms: now_ms,
        })
    }

    /// Clears the latch and all history. Only a technician's reset may call this.
    pub fn reset(&mut self) {
        *self = ConflictMonitor::new(self.card);
    }

    /// Checks one readback of every channel, taken at `now_ms` after the outputs were
    /// written. Returns the latched fault, if any (new or old).
    pub fn check(&mut self, now_ms: u64, sensed: &[Lamps]) -> Option<MonitorFault> {
        if self.latched.is_some() {
            return self.latched;
        }
        let n = self.card.channels as usize;
        if sensed.len() != n {
            let kind = FaultKind::ReadbackIncomplete {
                read: sensed.len().min(u8::MAX as usize) as u8,
                channels: self.card.channels,
            };
            return Some(self.trip(kind, now_ms));
        }
        match self.persistent_anomaly(sensed) {
            Some(kind) => {
                let since = *self.anomaly_since_ms.get_or_insert(now_ms);
                if now_ms.saturating_sub(since) >= u64::from(self.card.persistence.0) {
                    return Some(self.trip(kind, now_ms));
                }
            }
            None => self.anomaly_since_ms = None,
        }
        // Channels whose clean reading went red -> green now; judged after every channel's
        // reading is taken in, so a foe that ended its yellow in this same reading counts
        // as red for 0 ms.
        let mut new_greens = 0u32;
        for (ch, lamps) in sensed.iter().enumerate() {
            match self.take_clean_reading(ch, *lamps, now_ms) {
                Ok(true) => new_greens |= 1 << ch,
                Ok(false) => {}
                Err(kind) => return Some(self.trip(kind, now_ms)),
            }
        }
        let kind = self
            .short_red_clearance(now_ms, new_greens)
            .or_else(|| self.short_intergreen(now_ms, new_greens))?;
        Some(self.trip(kind, now_ms))
    }

    /// Takes in channel `ch`'s reading at `now_ms` if it is clean (one lamp lit): the
    /// fault its change from the last clean reading shows, else whether it went red ->
    /// green now. A reading with no lamp or several lit is judged by the persistence rule.
    fn take_clean_reading(
        &mut self,
        ch: usize,
        lamps: Lamps,
        now_ms: u64,
    ) -> Result<bool, FaultKind> {
        if lamps.lit() != 1 {
            return Ok(false);
        }
        let lamp = if lamps.red {
            Lamp::Red
        } else if lamps.yellow {
            Lamp::Yellow
        } else {
            Lamp::Green
        };
        let channel = ch as u8;
        let mut yellow = None;
        let mut new_green = false;
        if let Some(prev) = self.last_clean[ch] {
            let held = prev.held(now_ms);
            let fault = match (prev.lamp, lamp) {
                (Lamp::Green, Lamp::Red) => Some(FaultKind::SkippedYellow { channel }),
                (Lamp::Yellow, Lamp::Green) => Some(FaultKind::YellowToGreen { channel }),
                (Lamp::Yellow, Lamp::Red) => {
                    yellow = Some(held);
                    let (shown, required) = (held, self.card.min_yellow[ch]);
                    (shown < required).then_some(FaultKind::ShortYellow {
                        channel,
                        shown,
                        required,
                    })
                }
                _ => None,
            };
            if let Some(kind) = fault {
                return Err(kind);
            }
            if prev.lamp == lamp {
                // A red owed as a clearance for half the 32-bit clock's range (24.8 days)
                // is long paid; forgetting it keeps the wrapped difference from reading
                // as a fresh red after 49.7 days.
                if prev.after_yellow && held.0 >= STALE_CLEARANCE_MS {
                    self.last_clean[ch] = Some(CleanIndication {
                        after_yellow: false,
                        yellow: Millis::ZERO,
                        ..prev
                    });
                }
                return Ok(false);
            }
            new_green = (prev.lamp, lamp) == (Lamp::Red, Lamp::Green);
        }
        self.last_clean[ch] = Some(CleanIndication {
            lamp,
            since_ms: now_ms as u32,
            after_yellow: yellow.is_some(),
            yellow: yellow.unwrap_or(Millis::ZERO),
        });
        Ok(new_green)
    }

    /// The first card intergreen into a channel of `new_greens` that has not run since its
    /// `from` channel's green ended (that channel last seen yellow, or red since a yellow: a
    /// channel red since power-up or reset owes nothing).
    fn short_intergreen(&self, now_ms: u64, new_greens: u32) -> Option<FaultKind> {
        self.card.intergreens().iter().find_map(|e| {
            if new_greens & (1 << e.to.0) == 0 {
                return None;
            }
            let ind = self.last_clean.get(e.from.0 as usize).copied().flatten()?;
            let (shown, _red) = ind.clearing(now_ms)?;
            (shown < e.time).then_some(FaultKind::ShortIntergreen {
                from: e.from.0,
                to: e.to.0,
                shown,
                required: e.time,
            })
        })
    }

    /// The first channel in `new_greens` that turned green before a conflicting, clearing
    /// channel had shown its minimum red clearance.
    fn short_red_clearance(&self, now_ms: u64, new_greens: u32) -> Option<FaultKind> {
        let n = self.card.channels as usize;
        for next in (0..n).filter(|&ch| new_greens & (1 << ch) != 0) {
            let foes = self.card.foes[next];
            for f in (0..n).filter(|&f| foes & (1 << f) != 0) {
                let Some((_green_ended, shown)) =
                    self.last_clean[f].and_then(|i| i.clearing(now_ms))
                else {
                    continue;
                };
                let required = self.card.min_red_clearance[f];
                if shown < required {
                    return Some(FaultKind::ShortRedClearance {
                        channel: f as u8,
                        next: next as u8,
                        shown,
                        required,
                    });
                }
            }
        }
        None
    }

    /// The first conflict, double indication or dark channel in `sensed`.
    fn persistent_anomaly(&self, sensed: &[Lamps]) -> Option<FaultKind> {
        let mut non_red = 0u32;
        for (ch, l) in sensed.iter().enumerate() {
            if l.green || l.yellow {
                non_red |= 1 << ch;
            }
        }
        for (ch, &foes) in self.card.foes.iter().enumerate().take(sensed.len()) {
            if non_red & (1 << ch) != 0 && foes & non_red != 0 {
                return Some(FaultKind::Conflict {
                    a: ch as u8,
                    b: (foes & non_red).trailing_zeros() as u8,
                });
            }
        }
        sensed.iter().enumerate().find_map(|(ch, l)| match l.lit() {
            0 => Some(FaultKind::NoIndication { channel: ch as u8 }),
            1 => None,
            _ => Some(FaultKind::MultipleIndications { channel: ch as u8 }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three channels: 0 and 1 conflict, 2 is compatible with both. Min yellow 3 s, min
    /// red clearance 2 s.
    fn monitor(persistence_ms: u32) -> ConflictMonitor {
        ConflictMonitor::new(
            MonitorCard::new(
                &[(0, 1)],
                &[Millis(3000); 3],
                &[Millis(2000); 3],
                Millis(persistence_ms),
            )
            .unwrap(),
        )
    }

    const R: Lamps = Lamps::RED;
    const Y: Lamps = Lamps::YELLOW;
    const G: Lamps = Lamps::GREEN;

    #[test]
    fn a_correct_change_passes() {
        let mut m = monitor(0);
        assert_eq!(m.check(0, &[G, R, G]), None);
        assert_eq!(m.check(1000, &[Y, R, G]), None);
        assert_eq!(m.check(4000, &[R, R, G]), None);
        assert_eq!(m.check(6000, &[R, G, G]), None);
    }

    #[test]
    fn short_yellow_latches_until_reset() {
        let mut m = monitor(0);
        m.check(0, &[G, R, R]);
        m.check(1000, &[Y, R, R]);
        let f = m.check(3999, &[R, R, R]).unwrap();
        assert_eq!(
            f.kind,
            FaultKind::ShortYellow {
                channel: 0,
                shown: Millis(2999),
                required: Millis(3000)
            }
        );
        assert_eq!(f.at_ms, 3999);
        assert_eq!(
            std::format!("{}", f.kind),
            "channel 0: yellow shown 2999 ms, minimum 3000 ms"
        );
        // Latched: a clean display later does not clear it.
        assert_eq!(m.check(10_000, &[R, R, R]), Some(f));
        m.reset();
        assert_eq!(m.check(11_000, &[R, R, R]), None);
    }

    /// A monitor that saw channel 0 green, then yellow from 1 s.
    fn clearing_from_yellow_at_1s() -> ConflictMonitor {
        let mut m = monitor(0);
        m.check(0, &[G, R, R]);
        m.check(1000, &[Y, R, R]);
        m
    }

    fn short_red(shown_ms: u32) -> FaultKind {
        FaultKind::ShortRedClearance {
            channel: 0,
            next: 1,
            shown: Millis(shown_ms),
            required: Millis(2000),
        }
    }

    #[test]
    fn cut_all_red_latches() {
        let mut m = clearing_from_yellow_at_1s();
        assert_eq!(m.check(4000, &[R, R, R]), None);
        assert_eq!(m.check(5999, &[R, G, R]).unwrap().kind, short_red(1999));
        // The foe's yellow ending in the same reading as the green: 0 ms of red.
        let mut m = clearing_from_yellow_at_1s();
        assert_eq!(m.check(4000, &[R, G, R]).unwrap().kind, short_red(0));
        // A compatible channel may turn green at once; a red seen first after power-up
        // owes nothing.
        let mut m = clearing_from_yellow_at_1s();
        assert_eq!(m.check(4000, &[R, R, G]), None);
        let mut m = monitor(0);
        m.check(0, &[R, R, R]);
        assert_eq!(m.check(10, &[G, R, R]), None);
    }

    fn entry(from: u8, to: u8, ms: u32) -> Intergreen {
        Intergreen {
            from: MovementId(from),
            to: MovementId(to),
            time: Millis(ms),
        }
    }

    /// `monitor(0)`'s card with an 8 s intergreen from channel 0 to channel 1.
    fn monitor_with_intergreen() -> ConflictMonitor {
        let card = *monitor(0).card();
        ConflictMonitor::new(card.with_intergreens(&[entry(0, 1, 8000)]).unwrap())
    }

    #[test]
    fn cut_intergreen_latches() {
        // Channel 0 green to 1 s, yellow to 4 s, then red: channel 1 may start at 9 s.
        let clearing = || {
            let mut m = monitor_with_intergreen();
            m.check(0, &[G, R, R]);
            m.check(1000, &[Y, R, R]);
            m.check(4000, &[R, R, R]);
            m
        };
        let mut m = clearing();
        let f = m.check(8999, &[R, G, R]).unwrap();
        assert_eq!(
            f.kind,
            FaultKind::ShortIntergreen {
                from: 0,
                to: 1,
                shown: Millis(7999),
                required: Millis(8000)
            }
        );
        assert_eq!(
            std::format!("{}", f.kind),
            "channel 1 green 7999 ms after conflicting channel 0's green ended, intergreen 8000 ms"
        );
        // Latched until reset; the reset keeps the card's entries.
        assert_eq!(m.check(20_000, &[R, R, R]), Some(f));
        m.reset();
        assert_eq!(m.card().intergreens(), &[entry(0, 1, 8000)]);
        let mut m = clearing();
        assert_eq!(m.check(9000, &[R, G, R]), None);
        // The entry is for 0 → 1 only: 1 → 0 needs the red clearance alone, and channel 2
        // (compatible) is not held.
        let mut m = monitor_with_intergreen();
        m.check(0, &[R, G, R]);
        m.check(1000, &[R, Y, R]);
        m.check(4000, &[R, R, R]);
        assert_eq!(m.check(6000, &[G, R, R]), None);
        let mut m = clearing();
        assert_eq!(m.check(4000, &[R, R, G]), None);
        // A channel red since power-up owes nothing.
        let mut m = monitor_with_intergreen();
        m.check(0, &[R, R, R]);
        assert_eq!(m.check(10, &[R, G, R]), None);
    }

    use proptest::prelude::*;

    proptest! {
        /// Channels 0 and 1 conflict and take turns: each green, then a yellow of at least
        /// the card's minimum, then a red gap before the other's green. With a random
        /// intergreen entry each way, the monitor latches `ShortIntergreen` at exactly the
        /// first green whose yellow and gap fall short of its entry (an oracle over the
        /// generated timeline), and nothing else ever.
        #[test]
        fn short_intergreen_latches_exactly_at_the_first_cut(
            entries in (3000u32..12_000, 3000u32..12_000),
            turns in proptest::collection::vec((1000u32..20_000, 3000u32..6000, 0u32..9000), 1..12),
        ) {
            let base = MonitorCard::new(&[(0, 1)], &[Millis(3000); 3], &[Millis::ZERO; 3], Millis::ZERO)
                .unwrap();
            let card = base
                .with_intergreens(&[entry(0, 1, entries.0), entry(1, 0, entries.1)])
                .unwrap();
            let mut m = ConflictMonitor::new(card);
            let show = |ch: usize, lamp: Lamps| {
                let mut d = [R, R, R];
                d[ch] = lamp;
                d
            };
            prop_assert_eq!(m.check(0, &[R, R, R]), None);
            let mut t = 1000u64;
            let mut expected = None;
            for (k, &(green, yellow, gap)) in turns.iter().enumerate() {
                let ch = k % 2;
                // This green starts `gap` after the previous channel's yellow ended.
                let fault = m.check(t, &show(ch, G));
                if k > 0 && expected.is_none() {
                    let required = if ch == 1 { entries.0 } else { entries.1 };
                    let shown = turns[k - 1].1 + turns[k - 1].2;
                    if shown < required {
                        expected = Some(FaultKind::ShortIntergreen {
                            from: (1 - ch) as u8,
                            to: ch as u8,
                            shown: Millis(shown),
                            required: Millis(required),
                        });
                        prop_assert_eq!(fault.map(|f| (f.kind, f.at_ms)), Some((expected.unwrap(), t)));
                        continue;
                    }
                }
                if expected.is_none() {
                    prop_assert_eq!(fault, None);
                }
                t += u64::from(green);
                m.check(t, &show(ch, Y));
                t += u64::from(yellow);
                m.check(t, &[R, R, R]);
                t += u64::from(gap);
            }
            prop_assert_eq!(m.latched().map(|f| f.kind), expected);
        }
    }

    #[test]
    fn an_intergreen_counts_from_an_earlier_end_and_through_dirty_readings() {
        // Three channels all conflicting, no red clearance: 0 → 2 needs 8 s.
        let card = MonitorCard::new(
            &[(0, 1), (0, 2), (1, 2)],
            &[Millis(3000); 3],
            &[Millis::ZERO; 3],
            Millis(1000),
        )
        .unwrap()
        .with_intergreens(&[entry(0, 2, 8000)])
        .unwrap();
        // 0 ends at 1 s (yellow to 4 s), 1 is served 4–5 s (yellow to 8 s), 2 starts at
        // 8.5 s: 7.5 s after 0's green ended, though 1 ended just now.
        let mut m = ConflictMonitor::new(card);
        m.check(0, &[G, R, R]);
        m.check(1000, &[Y, R, R]);
        m.check(4000, &[R, G, R]);
        m.check(5000, &[R, Y, R]);
        m.check(8000, &[R, R, R]);
        let f = m.check(8500, &[R, R, G]).unwrap();
        assert_eq!(
            f.kind,
            FaultKind::ShortIntergreen {
                from: 0,
                to: 2,
                shown: Millis(7500),
                required: Millis(8000)
            }
        );
        // 0's yellow → red read dirty in the same reading as 2's green: its last clean
        // reading is the yellow, from which the intergreen counts.
        let both = Lamps {
            red: true,
            green: false,
            yellow: true,
        };
        let mut m = ConflictMonitor::new(card);
        m.check(0, &[G, R, R]);
        m.check(1000, &[Y, R, R]);
        let f = m.check(4000, &[both, R, G]).unwrap();
        assert_eq!(
            f.kind,
            FaultKind::ShortIntergreen {
                from: 0,
                to: 2,
                shown: Millis(3000),
                required: Millis(8000)
            }
        );
        // Same-reading yellow → red counts 0 ms of red: 3 s of yellow, short of 8 s.
        let mut m = ConflictMonitor::new(card);
        m.check(0, &[G, R, R]);
        m.check(1000, &[Y, R, R]);
        assert!(matches!(
            m.check(4000, &[R, R, G]).unwrap().kind,
            FaultKind::ShortIntergreen {
                shown: Millis(3000),
                ..
            }
        ));
    }

    #[test]
    fn a_long_red_does_not_read_as_fresh_when_the_clock_wraps() {
        let mut m = monitor_with_intergreen();
        m.check(0, &[G, R, R]);
        m.check(1000, &[Y, R, R]);
        m.check(4000, &[R, R, R]);
        // Channel 0 red for 2^32 ms and a little: the 32-bit difference reads 1 s, but the
        // red, polled meanwhile, has been forgotten as a clearance.
        let mut t = 4000u64;
        while t < 4000 + (1u64 << 32) {
            t += 1 << 26;
            assert_eq!(m.check(t, &[R, R, R]), None);
        }
        let wrapped = 4000 + (1u64 << 32) + 1000;
        assert_eq!(m.check(wrapped, &[R, G, R]), None);
    }

    #[test]
    fn card_intergreens_are_validated() {
        let card = *monitor(0).card();
        let bad = |from, to| Err(CardError::BadIntergreen { from, to });
        // Not conflicting, off the card, zero time, twice.
        assert_eq!(card.with_intergreens(&[entry(0, 2, 5000)]), bad(0, 2));
        assert_eq!(card.with_intergreens(&[entry(0, 3, 5000)]), bad(0, 3));
        assert_eq!(card.with_intergreens(&[entry(1, 0, 0)]), bad(1, 0));
        assert_eq!(
            card.with_intergreens(&[entry(0, 1, 5000), entry(1, 0, 5000), entry(0, 1, 6000)]),
            bad(0, 1)
        );
        let many = [entry(0, 1, 5000); MAX_INTERGREENS + 1];
        assert_eq!(
            card.with_intergreens(&many),
            Err(CardError::TooManyIntergreens {
                count: MAX_INTERGREENS + 1
            })
        );
        let ok = card.with_intergreens(&[entry(1, 0, 5000)]).unwrap();
        assert_eq!(ok.intergreens(), &[entry(1, 0, 5000)]);
        assert_eq!(ok.with_intergreens(&[]).unwrap(), card);
    }

    #[test]
    fn card_intergreens_check_the_plan() {
        use greenwave_core::{PhasePlan, PhaseTiming};
        let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 30, 3, 2)).unwrap();
        // Phase 0's movements against phase 2's: every switch between them gives 5 s.
        let a = plan.phases()[0].movements.iter().next().unwrap();
        let b = plan.phases()[2]
            .movements
            .iter()
            .find(|&b| plan.conflicts().conflicts(a, b))
            .unwrap();
        let e = Intergreen {
            from: a,
            to: b,
            time: Millis(7000),
        };
        let card = MonitorCard::from_plan(&plan, Millis::ZERO)
            .with_intergreens(&[e])
            .unwrap();
        let err = card.check_plan(&plan).unwrap_err();
        assert!(
            matches!(
                err,
                CardError::IntergreenBelowCard {
                    from,
                    to,
                    switch: Millis(5000),
                    required: Millis(7000),
                    ..
                } if (from, to) == (a.0, b.0)
            ),
            "{err}"
        );
        // The plan keeping the pair 7 s passes, and the card it implies carries the entry.
        let keeping = plan.clone().with_intergreens(&[e]).unwrap();
        assert_eq!(card.check_plan(&keeping), Ok(()));
        let implied = MonitorCard::from_plan(&keeping, Millis::ZERO);
        assert_eq!(implied.intergreens(), &[e]);
        assert_eq!(implied.check_plan(&keeping), Ok(()));
        assert!(implied.check_plan(&plan).is_err());
    }

    #[test]
    fn skipped_yellow_and_yellow_to_green() {
        let mut m = monitor(0);
        m.check(0, &[G, R, R]);
        assert_eq!(
            m.check(10, &[R, R, R]).unwrap().kind,
            FaultKind::SkippedYellow { channel: 0 }
        );
        let mut m = monitor(0);
        m.check(0, &[Y, R, R]);
        assert_eq!(
            m.check(10, &[G, R, R]).unwrap().kind,
            FaultKind::YellowToGreen { channel: 0 }
        );
    }

    #[test]
    fn conflicts_and_lamp_faults_need_to_persist() {
        let both = Lamps {
            red: true,
            green: true,
            yellow: false,
        };
        let mut m = monitor(200);
        assert_eq!(m.check(0, &[both, R, R]), None);
        assert_eq!(m.check(150, &[R, R, R]), None, "cleared before 200 ms");
        assert_eq!(m.check(200, &[G, G, R]), None);
        assert_eq!(m.check(300, &[G, G, R]), None);
        let f = m.check(400, &[G, G, R]).unwrap();
        assert_eq!(f.kind, FaultKind::Conflict { a: 0, b: 1 });
        let mut m = monitor(0);
        assert_eq!(
            m.check(0, &[R, both, R]).unwrap().kind,
            FaultKind::MultipleIndications { channel: 1 }
        );
        let mut m = monitor(0);
        assert_eq!(
            m.check(0, &[R, R, Lamps::DARK]).unwrap().kind,
            FaultKind::NoIndication { channel: 2 }
        );
        let mut m = monitor(0);
        assert!(matches!(
            m.check(0, &[R, R]).unwrap().kind,
            FaultKind::ReadbackIncomplete {
                read: 2,
                channels: 3
            }
        ));
    }

    #[test]
    fn compatible_channels_may_overlap() {
        let mut m = monitor(0);
        assert_eq!(m.check(0, &[G, R, G]), None);
        assert_eq!(m.check(100, &[G, R, Y]), None);
    }

    #[test]
    fn card_checks_the_plan() {
        use greenwave_core::{PhasePlan, PhaseTiming};
        let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 30, 3, 2)).unwrap();
        let card = MonitorCard::from_plan(&plan, Millis::ZERO);
        assert_eq!(card.check_plan(&plan), Ok(()));
        assert_eq!(card.min_yellow(4), Millis(3000));
        assert_eq!(card.min_red_clearance(4), Millis(2000));
        // A card that forbids N-S through with S-N through refuses phase 0.
        let strict = MonitorCard::new(
            &[(1, 7)],
            &[Millis(3000); 12],
            &[Millis(2000); 12],
            Millis::ZERO,
        )
        .unwrap();
        assert_eq!(
            strict.check_plan(&plan),
            Err(CardError::PhaseConflicts {
                phase: 0,
                a: 1,
                b: 7
            })
        );
        let long =
            MonitorCard::new(&[], &[Millis(4000); 12], &[Millis(2000); 12], Millis::ZERO).unwrap();
        assert!(matches!(
            long.check_plan(&plan),
            Err(CardError::YellowBelowCard { phase: 0, .. })
        ));
        let long_red =
            MonitorCard::new(&[], &[Millis(3000); 12], &[Millis(2500); 12], Millis::ZERO).unwrap();
        let channel = plan.phases()[0].movements.iter().next().unwrap().0;
        let err = long_red.check_plan(&plan).unwrap_err();
        assert_eq!(
            err,
            CardError::RedClearanceBelowCard {
                phase: 0,
                channel,
                all_red: Millis(2000),
                min_red_clearance: Millis(2500)
            }
        );
        // Messages give durations in whole milliseconds, as before they were Millis.
        assert_eq!(
            std::format!("{err}"),
            std::format!(
                "phase 0 all-red 2000 ms is below channel {channel}'s minimum red clearance 2500 ms"
            )
        );
        assert_eq!(
            MonitorCard::new(&[], &[Millis(3000); 3], &[Millis(2000); 2], Millis::ZERO),
            Err(CardError::ClearanceListLength { yellow: 3, red: 2 })
        );
        assert_eq!(
            MonitorCard::new(
                &[(0, 5)],
                &[Millis(3000); 3],
                &[Millis(2000); 3],
                Millis::ZERO
            ),
            Err(CardError::ChannelOutOfRange {
                channel: 5,
                channels: 3
            })
        );
    }
}
