//! The board configuration: signal polarity, lanes and their detectors, timing of the
//! controller loop, and the pin map that binds signal groups and lanes to HAL pins.

use embedded_hal::digital::{InputPin, OutputPin};
use greenwave_core::{Millis, MovementSet};

use crate::detectors::LaneDetectorPins;
use crate::heads::{HeadPins, Lamp};

/// Which electrical level means "on" for a group of pins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Polarity {
    /// High = on (lamp lit, lamp sensed, vehicle present).
    #[default]
    ActiveHigh,
    /// Low = on (open-drain drivers, opto-isolated inputs with pull-ups).
    ActiveLow,
}

impl Polarity {
    /// The level (true = high) that means `on`.
    pub const fn level_for(self, on: bool) -> bool {
        match self {
            Polarity::ActiveHigh => on,
            Polarity::ActiveLow => !on,
        }
    }

    /// Whether the level read (true = high) means "on".
    pub const fn is_active(self, high: bool) -> bool {
        self.level_for(high)
    }
}

/// One incoming lane and its two loop detectors (entry loop at the upstream end of the
/// storage section, stop-bar loop at the stop line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaneConfig {
    /// Movements this lane feeds (the lane discharges while any of them is green).
    pub movements: MovementSet,
    /// Vehicles the lane stores between the entry loop and the stop line.
    pub storage_veh: u16,
}

/// Everything about the cabinet that is not the phase plan. Durations are [`Millis`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BoardConfig<const L: usize> {
    /// Signal id written into transitions (which signal of the site).
    pub signal_id: u16,
    /// Lamp output polarity.
    pub lamp_polarity: Polarity,
    /// Lamp-sense input polarity.
    pub sense_polarity: Polarity,
    /// Detector input polarity.
    pub detector_polarity: Polarity,
    /// The incoming lanes, in observation order.
    pub lanes: [LaneConfig; L],
    /// A detector input must be stable this long before presence changes.
    pub detector_debounce: Millis,
    /// During green, a stop-bar loop occupied at least this long means a standing queue.
    pub standing_queue: Millis,
    /// During green, a stop-bar loop empty at least this long means the lane has emptied
    /// (resets the lane's vehicle count against counting drift).
    pub empty_lane_gap: Millis,
    /// Time between policy decisions (the training environment's delta; above zero).
    pub decision_interval: Millis,
    /// All-red shown at power-up and after a reset from flash, before the first green.
    pub startup_all_red: Millis,
    /// Half period of the red flash (500 ms: 60 flashes per minute; above zero).
    pub flash_half_period: Millis,
    /// A conflict, double indication or dark head must persist this long before the
    /// monitor latches flash (covers lamp-sense latency; zero = latch on the first reading).
    pub fault_persistence: Millis,
    /// The longest any interval (a green, a yellow, an all-red, the start-up all-red)
    /// advances in one poll (above zero; at least the loop's poll period). A clock that
    /// jumps forward then cuts an interval by at most this much (a clearance, a min green,
    /// or a per-pair intergreen that runs on through a green), and a longer gap between
    /// polls lengthens the interval instead of ending it: a green then ends up to the gap
    /// late, as the lamps it held through the gap could not change anyway. (A clock read
    /// behind its last reading counts as no time: [`crate::clock::Uptime::update`].)
    pub max_clearance_step: Millis,
}

impl<const L: usize> BoardConfig<L> {
    /// Defaults for a cabinet whose lane `i` feeds movement `i` only, with `storage_veh`
    /// vehicles of storage per lane: 50 ms debounce, 5 s decisions, 3 s start-up all-red,
    /// 1 Hz flash, 250 ms fault persistence, clearances advanced by at most 250 ms a poll.
    pub fn one_lane_per_movement(signal_id: u16, storage_veh: u16) -> Self {
        let mut i = 0u8;
        let lanes = [(); L].map(|_| {
            let lane = LaneConfig {
                movements: MovementSet::from_ids(&[i]),
                storage_veh,
            };
            i = i.wrapping_add(1);
            lane
        });
        BoardConfig {
            signal_id,
            lamp_polarity: Polarity::ActiveHigh,
            sense_polarity: Polarity::ActiveHigh,
            detector_polarity: Polarity::ActiveHigh,
            lanes,
            detector_debounce: Millis(50),
            standing_queue: Millis::from_secs(3),
            empty_lane_gap: Millis::from_secs(6),
            decision_interval: Millis::from_secs(5),
            startup_all_red: Millis::from_secs(3),
            flash_half_period: Millis(500),
            fault_persistence: Millis(250),
            max_clearance_step: Millis(250),
        }
    }
}

/// A pin of the board: a port (GPIO port or I/O-expander chip) and a pin number on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PinId {
    /// Port index (0 = port A / first expander).
    pub port: u8,
    /// Pin within the port.
    pub pin: u8,
}

impl PinId {
    /// Pin `pin` of port `port`.
    pub const fn new(port: u8, pin: u8) -> Self {
        PinId { port, pin }
    }
}

impl core::fmt::Display for PinId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "P{}.{}", self.port, self.pin)
    }
}

/// What a pin is used for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PinRole {
    /// A lamp output of a signal group.
    LampOutput {
        /// The signal group (movement index).
        group: u8,
        /// The lamp.
        lamp: Lamp,
    },
    /// A lamp-sense input of a signal group.
    LampSense {
        /// The signal group (movement index).
        group: u8,
        /// The lamp.
        lamp: Lamp,
    },
    /// A lane's entry loop.
    EntryLoop {
        /// The lane.
        lane: u8,
    },
    /// A lane's stop-bar loop.
    StopBarLoop {
        /// The lane.
        lane: u8,
    },
}

impl core::fmt::Display for PinRole {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PinRole::LampOutput { group, lamp } => write!(f, "group {group} {lamp} lamp output"),
            PinRole::LampSense { group, lamp } => write!(f, "group {group} {lamp} lamp sense"),
            PinRole::EntryLoop { lane } => write!(f, "lane {lane} entry loop"),
            PinRole::StopBarLoop { lane } => write!(f, "lane {lane} stop-bar loop"),
        }
    }
}

/// Why a pin map could not be turned into pins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PinMapError {
    /// Two roles share one pin.
    #[error("pin {pin} is mapped twice: {first} and {second}")]
    PinUsedTwice {
        /// The pin.
        pin: PinId,
        /// Its first use.
        first: PinRole,
        /// Its second use.
        second: PinRole,
    },
    /// The board has no such pin, or cannot configure it for the role.
    #[error("pin {pin} ({role}) is not available on this board")]
    PinUnavailable {
        /// The pin.
        pin: PinId,
        /// The role asked for.
        role: PinRole,
    },
}

/// Pin numbers of one lane's two loops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LanePinIds {
    /// Entry loop.
    pub entry: PinId,
    /// Stop-bar loop.
    pub stop_bar: PinId,
}

/// The pin map: which pin each lamp output, lamp sense and loop detector is wired to.
/// `G` signal groups (one per movement of the plan), `L` lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PinMap<const G: usize, const L: usize> {
    /// Lamp outputs per signal group.
    pub lamp_outputs: [HeadPins<PinId>; G],
    /// Lamp-sense inputs per signal group (the monitor's readback).
    pub lamp_sense: [HeadPins<PinId>; G],
    /// Loop detector inputs per lane.
    pub loops: [LanePinIds; L],
}

/// Hands out the board's pins, configured for their role (push-pull output, input with the
/// right pull). Implemented by the board support code over its HAL.
pub trait PinProvider {
    /// Lamp output pin type.
    type LampOutput: OutputPin;
    /// Lamp-sense input pin type.
    type LampSense: InputPin;
    /// Loop detector input pin type.
    type Loop: InputPin;
    /// The pin `pin` as a lamp output, if the board has it.
    fn lamp_output(&mut self, pin: PinId) -> Option<Self::LampOutput>;
    /// The pin `pin` as a lamp-sense input, if the board has it.
    fn lamp_sense(&mut self, pin: PinId) -> Option<Self::LampSense>;
    /// The pin `pin` as a loop detector input, if the board has it.
    fn loop_input(&mut self, pin: PinId) -> Option<Self::Loop>;
}

/// The pins of a board, in signal-group and lane order.
#[derive(Debug)]
pub struct BoardPins<O, S, D, const G: usize, const L: usize> {
    /// Lamp outputs per signal group.
    pub lamp_outputs: [HeadPins<O>; G],
    /// Lamp-sense inputs per signal group.
    pub lamp_sense: [HeadPins<S>; G],
    /// Loop inputs per lane.
    pub loops: [LaneDetectorPins<D>; L],
}

/// The roles of a set of head pins (lamp outputs, or lamp sense when `sense`).
fn head_roles(
    pins: &[HeadPins<PinId>],
    sense: bool,
) -> impl Iterator<Item = (PinId, PinRole)> + '_ {
    pins.iter().enumerate().flat_map(move |(g, h)| {
        let group = g as u8;
        [
            (h.red, Lamp::Red),
            (h.yellow, Lamp::Yellow),
            (h.green, Lamp::Green),
        ]
        .map(|(pin, lamp)| {
            let role = if sense {
                PinRole::LampSense { group, lamp }
            } else {
                PinRole::LampOutput { group, lamp }
            };
            (pin, role)
        })
    })
}

/// Takes the three pins of every head from `provider` with `take`, naming the failing role.
fn take_heads<P, T, const G: usize>(
    ids: &[HeadPins<PinId>; G],
    provider: &mut P,
    take: fn(&mut P, PinId) -> Option<T>,
    role: fn(u8, Lamp) -> PinRole,
) -> Result<heapless::Vec<HeadPins<T>, G>, PinMapError> {
    let mut heads = heapless::Vec::new();
    for (g, h) in ids.iter().enumerate() {
        let group = g as u8;
        let mut one = |pin: PinId, lamp: Lamp| {
            take(provider, pin).ok_or(PinMapError::PinUnavailable {
                pin,
                role: role(group, lamp),
            })
        };
        let head = HeadPins {
            red: one(h.red, Lamp::Red)?,
            yellow: one(h.yellow, Lamp::Yellow)?,
            green: one(h.green, Lamp::Green)?,
        };
        // Cannot fail: one head per entry of an array of G.
        let _ = heads.push(head);
    }
    Ok(heads)
}

impl<const G: usize, const L: usize> PinMap<G, L> {
    /// Every mapped pin with its role.
    pub fn roles(&self) -> impl Iterator<Item = (PinId, PinRole)> + '_ {
        let loops = self.loops.iter().enumerate().flat_map(|(l, p)| {
            let lane = l as u8;
            [
                (p.entry, PinRole::EntryLoop { lane }),
                (p.stop_bar, PinRole::StopBarLoop { lane }),
            ]
        });
        head_roles(&self.lamp_outputs, false)
            .chain(head_roles(&self.lamp_sense, true))
            .chain(loops)
    }

    /// Checks that no pin is used twice.
    pub fn validate(&self) -> Result<(), PinMapError> {
        for (k, (pin, first)) in self.roles().enumerate() {
            if let Some((_, second)) = self.roles().skip(k + 1).find(|(p, _)| *p == pin) {
                return Err(PinMapError::PinUsedTwice { pin, first, second });
            }
        }
        Ok(())
    }

    /// Validates the map and takes every pin from `provider`.
    #[allow(clippy::type_complexity)]
    pub fn take_pins<P: PinProvider>(
        &self,
        provider: &mut P,
    ) -> Result<BoardPins<P::LampOutput, P::LampSense, P::Loop, G, L>, PinMapError> {
        self.validate()?;
        let lamp_outputs = take_heads(
            &self.lamp_outputs,
            provider,
            P::lamp_output,
            |group, lamp| PinRole::LampOutput { group, lamp },
        )?;
        let lamp_sense = take_heads(&self.lamp_sense, provider, P::lamp_sense, |group, lamp| {
            PinRole::LampSense { group, lamp }
        })?;
        let mut loops: heapless::Vec<LaneDetectorPins<P::Loop>, L> = heapless::Vec::new();
        for (l, ids) in self.loops.iter().enumerate() {
            let lane = l as u8;
            let entry = provider
                .loop_input(ids.entry)
                .ok_or(PinMapError::PinUnavailable {
                    pin: ids.entry,
                    role: PinRole::EntryLoop { lane },
                })?;
            let stop_bar =
                provider
                    .loop_input(ids.stop_bar)
                    .ok_or(PinMapError::PinUnavailable {
                        pin: ids.stop_bar,
                        role: PinRole::StopBarLoop { lane },
                    })?;
            let _ = loops.push(LaneDetectorPins { entry, stop_bar });
        }
        // The vectors were filled from arrays of exactly G and L entries.
        match (
            lamp_outputs.into_array(),
            lamp_sense.into_array(),
            loops.into_array(),
        ) {
            (Ok(lamp_outputs), Ok(lamp_sense), Ok(loops)) => Ok(BoardPins {
                lamp_outputs,
                lamp_sense,
                loops,
            }),
            _ => unreachable!("filled from arrays of the same lengths"),
        }
    }
}

impl PinMap<12, 12> {
    /// The example pin map of the single-4way cabinet (12 signal groups, 12 lanes) used in
    /// the README: lamp outputs on ports 0–2, lamp sense on ports 3–5, loops on ports 6–7,
    /// 16 pins per port, consecutive in group (R, Y, G) and lane (entry, stop bar) order.
    pub const fn example_single_4way() -> Self {
        const fn pin(base_port: u8, index: usize) -> PinId {
            PinId::new(base_port + (index / 16) as u8, (index % 16) as u8)
        }
        const fn head(base_port: u8, group: usize) -> HeadPins<PinId> {
            HeadPins {
                red: pin(base_port, 3 * group),
                yellow: pin(base_port, 3 * group + 1),
                green: pin(base_port, 3 * group + 2),
            }
        }
        let mut lamp_outputs = [head(0, 0); 12];
        let mut lamp_sense = [head(3, 0); 12];
        let mut loops = [LanePinIds {
            entry: pin(6, 0),
            stop_bar: pin(6, 1),
        }; 12];
        let mut i = 0;
        while i < 12 {
            lamp_outputs[i] = head(0, i);
            lamp_sense[i] = head(3, i);
            loops[i] = LanePinIds {
                entry: pin(6, 2 * i),
                stop_bar: pin(6, 2 * i + 1),
            };
            i += 1;
        }
        PinMap {
            lamp_outputs,
            lamp_sense,
            loops,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    #[test]
    fn example_map_is_valid_and_duplicates_are_named() {
        let map = PinMap::example_single_4way();
        assert_eq!(map.validate(), Ok(()));
        assert_eq!(map.roles().count(), 12 * 6 + 12 * 2);
        assert_eq!(map.lamp_outputs[11].green, PinId::new(2, 3));
        assert_eq!(map.loops[11].stop_bar, PinId::new(7, 7));
        let mut bad = map;
        bad.loops[4].stop_bar = PinId::new(0, 5);
        let err = bad.validate().unwrap_err();
        assert_eq!(
            format!("{err}"),
            "pin P0.5 is mapped twice: group 1 green lamp output and lane 4 stop-bar loop"
        );
    }
}
