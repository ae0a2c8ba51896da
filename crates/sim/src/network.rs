//! The compiled road network the embedded simulator runs on.
//!
//! Built once per scenario by the scenario compiler (which validates everything), then
//! shared read-only (`Arc`) by every environment running that scenario, so `reset` and
//! constructing another environment are cheap.

use greenwave_core::{MovementSet, PhaseId, PhasePlan, Turn};

/// Marks a vehicle on an exit link (it has no movement ahead of it).
pub(crate) const EXIT_MOVEMENT: u8 = u8::MAX;

/// Where a link ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LinkEnd {
    /// It leaves the network.
    Exit,
    /// It arrives at signal `signal` on arm `arm`.
    Signal {
        /// Index of the signal.
        signal: u32,
        /// Arm index (0 north, clockwise).
        arm: u8,
    },
}

/// One directed link.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Link {
    pub id: String,
    pub free_flow_s: f64,
    /// Its lanes are `first_lane .. first_lane + n_lanes` (global lane indices).
    pub first_lane: u32,
    pub n_lanes: u32,
    /// Vehicles all its lanes hold at jam density.
    pub storage_veh: u32,
    pub end: LinkEnd,
    /// For a link ending at a signal: `(movement, cumulative share)`, last share 1.
    pub turn_cdf: Vec<(u8, f64)>,
    /// Lanes a vehicle may take when the link ends at an exit: all of them.
    pub exit_lanes: Vec<u32>,
}

/// One lane.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Lane {
    pub link: u32,
    /// Vehicles it holds at jam density (at least 1).
    pub storage_veh: u32,
    /// The signal at its downstream end, or `u32::MAX` on an exit link.
    pub signal: u32,
    /// Movements it serves at that signal.
    pub movements: MovementSet,
}

/// One signalised junction.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SignalNode {
    pub id: String,
    pub plan: PhasePlan,
    pub initial_phase: PhaseId,
    /// Incoming lanes in observation order: arms 0..4, lanes left to right.
    pub in_lanes: Vec<u32>,
    /// Links leaving the junction (for pressure).
    pub out_links: Vec<u32>,
    /// Per movement: the link it leads to (`u32::MAX` if it leads nowhere).
    pub movement_out_link: Vec<u32>,
    /// Per movement: the incoming lanes serving it.
    pub movement_lanes: Vec<Vec<u32>>,
}

/// Model parameters, in the units the simulator uses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Model {
    /// Saturation headway at the stop line.
    pub headway_s: f64,
    /// From green onset to the first crossing of a standing queue: start-up lost time plus
    /// half a headway (a vehicle crosses mid-way through its headway slot, so a queue of
    /// `n` discharges over exactly `n` headways after the lost time, as in Webster's model).
    pub first_crossing_s: f64,
    /// Part of the yellow still used.
    pub yellow_used_s: f64,
    /// Detector zone length in seconds of travel.
    pub detector_zone_s: f64,
    /// Road length one stored vehicle takes (m).
    pub jam_spacing_m: f64,
}

/// The compiled network.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Network {
    pub links: Vec<Link>,
    pub lanes: Vec<Lane>,
    pub signals: Vec<SignalNode>,
    /// Links entering the network from outside.
    pub entry_links: Vec<u32>,
    pub model: Model,
}

impl Network {
    /// Lanes a vehicle may enter on `link` given its `movement` at the link's end.
    pub fn candidate_lanes(&self, link: u32, movement: u8) -> &[u32] {
        let l = &self.links[link as usize];
        match l.end {
            LinkEnd::Exit => &l.exit_lanes,
            LinkEnd::Signal { signal, .. } => {
                &self.signals[signal as usize].movement_lanes[movement as usize]
            }
        }
    }

    /// The movement a vehicle takes at the end of `link`, for a uniform draw `u` in [0, 1).
    pub fn choose_movement(&self, link: u32, u: f64) -> u8 {
        let l = &self.links[link as usize];
        match l.end {
            LinkEnd::Exit => EXIT_MOVEMENT,
            LinkEnd::Signal { .. } => l
                .turn_cdf
                .iter()
                .find(|&&(_, cum)| u < cum)
                .or(l.turn_cdf.last())
                .map_or(EXIT_MOVEMENT, |&(m, _)| m),
        }
    }

    /// Mean flow on every link (veh/h) when `entry_flows` (per entry link, veh/h) enter
    /// and vehicles turn by the links' turning shares. Iterated to a fixed point, since a
    /// grid's flows feed back into themselves (vehicles can circle a block).
    pub fn link_flows(&self, entry_flows: &[(u32, f64)]) -> Vec<f64> {
        let mut inflow = vec![0.0; self.links.len()];
        for _ in 0..10_000 {
            let mut next = vec![0.0; self.links.len()];
            for &(link, q) in entry_flows {
                next[link as usize] += q;
            }
            for (l, link) in self.links.iter().enumerate() {
                if let LinkEnd::Signal { signal, .. } = link.end {
                    let node = &self.signals[signal as usize];
                    let mut prev_cum = 0.0;
                    for &(m, cum) in &link.turn_cdf {
                        let out = node.movement_out_link[m as usize];
                        if out != u32::MAX {
                            next[out as usize] += inflow[l] * (cum - prev_cum);
                        }
                        prev_cum = cum;
                    }
                }
            }
            let change = next
                .iter()
                .zip(&inflow)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            inflow = next;
            if change < 1e-9 {
                break;
            }
        }
        inflow
    }
}

/// The letter of a turn in the file notation.
pub(crate) fn turn_letter(turn: Turn) -> char {
    match turn {
        Turn::Left => 'L',
        Turn::Through => 'T',
        Turn::Right => 'R',
        Turn::UTurn => 'U',
        Turn::Pedestrian => 'P',
    }
}

/// Rank of a turn within an arm, the order plans list movements in (left to right).
pub(crate) fn turn_order(turn: Turn) -> u8 {
    match turn {
        Turn::Left => 0,
        Turn::Through => 1,
        Turn::Right => 2,
        Turn::UTurn => 3,
        Turn::Pedestrian => 4,
    }
}

/// The arm a movement from `approach` doing `turn` leaves by (four-arm geometry, arms
/// clockwise from north, right-hand traffic).
pub(crate) fn exit_arm(approach: u8, turn: Turn) -> Option<u8> {
    let offset = match turn {
        Turn::Left => 1,
        Turn::Through => 2,
        Turn::Right => 3,
        Turn::UTurn => 0,
        Turn::Pedestrian => return None,
    };
    Some((approach + offset) % 4)
}
