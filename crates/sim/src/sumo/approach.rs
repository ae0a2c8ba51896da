//! A signal's approach zones: what a detector sees of each incoming lane's queue.
//!
//! On a real net the lane that ends at a stop line is often short: a turn pocket or the
//! last piece of a road that the net splits wherever a lane is added or the speed limit
//! changes. The queue behind the stop line runs back over the edge boundary, and a policy
//! or reward that reads only the stop-line lane cannot see it grow: a starved approach
//! looks full-but-stable while its queue spills back to the network's entry, where the
//! vehicles that cannot even be inserted count as delay but not as waiting.
//!
//! An approach zone covers [`APPROACH_RANGE_M`] of road upstream of the stop line, like a
//! stop-line camera or an advance detector: the incoming lane itself, and the lanes that
//! feed it through junctions without a traffic light, up to that distance. A lane that the
//! range covers only in part contributes the part near its downstream end, where its queue
//! stands.

use std::collections::{HashMap, VecDeque};

use super::env::VEHICLE_SPACING_M;
use super::net::NetFile;

/// How far upstream of the stop line an approach zone reaches (m). The same range as
/// max-pressure's arrival estimate ([`crate::controllers::DETECTION_RANGE_M`]).
pub const APPROACH_RANGE_M: f64 = crate::controllers::DETECTION_RANGE_M as f64;

/// Most lanes one approach zone may hold (a guard against nets with many tiny lanes).
const MAX_ZONE_LANES: usize = 16;

/// One lane of an approach zone.
#[derive(Clone, Debug, PartialEq)]
pub struct ZoneLane {
    /// SUMO lane id.
    pub lane: String,
    /// Distance from the stop line to this lane's downstream end (m).
    pub offset_m: f64,
    /// Length of the lane (m).
    pub length_m: f64,
    /// Length of the lane within the zone, from its downstream end (m).
    pub covered_m: f64,
}

impl ZoneLane {
    /// The part of this lane's readings inside the zone: `(vehicles, halting)`. Halted
    /// vehicles stand from the lane's downstream end back, so the zone holds the first
    /// `covered / spacing` of them; moving ones are spread along the lane.
    pub fn in_zone(&self, vehicles: f32, halting: f32) -> (f32, f32) {
        if self.covered_m >= self.length_m {
            return (vehicles, halting);
        }
        let fits = (self.covered_m / VEHICLE_SPACING_M) as f32;
        let halted_in = halting.min(fits);
        let moving = (vehicles - halting).max(0.0);
        let share = (self.covered_m / self.length_m.max(1e-9)) as f32;
        (halted_in + moving * share, halted_in)
    }

    /// Whether a vehicle at `pos_m` from this lane's start is inside the zone.
    pub fn holds(&self, pos_m: f64) -> bool {
        pos_m >= self.length_m - self.covered_m
    }

    /// Vehicles the zone's part of this lane can store.
    pub fn storage_veh(&self) -> f32 {
        (self.covered_m / VEHICLE_SPACING_M) as f32
    }
}

/// The approach zone of incoming lane `lane` of `net`, whose feeders are `feeders`: the
/// lane itself first, then the lanes feeding it through unsignalised junctions, nearest
/// first, each once.
pub fn approach_zone(net: &NetFile, feeders: &Feeders, lane: &str, range_m: f64) -> Vec<ZoneLane> {
    let mut zone: Vec<ZoneLane> = Vec::new();
    let mut queue = VecDeque::from([(lane.to_string(), 0.0f64)]);
    while let Some((id, offset_m)) = queue.pop_front() {
        if zone.len() >= MAX_ZONE_LANES || zone.iter().any(|z| z.lane == id) {
            continue;
        }
        let length_m = net.lanes.get(&id).map_or(0.0, |l| l.length_m);
        let covered_m = (range_m - offset_m).clamp(0.0, length_m);
        // The stop-line lane always counts, at least one vehicle long.
        let covered_m = if zone.is_empty() {
            covered_m.max(VEHICLE_SPACING_M.min(length_m))
        } else {
            covered_m
        };
        zone.push(ZoneLane {
            lane: id.clone(),
            offset_m,
            length_m,
            covered_m,
        });
        if offset_m + length_m < range_m {
            for f in feeders.0.get(id.as_str()).into_iter().flatten() {
                queue.push_back((f.to_string(), offset_m + length_m));
            }
        }
    }
    zone
}

/// For each lane of a net, the road lanes that feed it through a junction without a
/// traffic light: built once per net, read for every approach zone.
#[derive(Clone, Debug, Default)]
pub struct Feeders(HashMap<String, Vec<String>>);

impl Feeders {
    /// The feeders of every lane of `net`.
    pub fn of(net: &NetFile) -> Self {
        let road = |edge: &str| net.edges.get(edge).is_none_or(|e| e.function.is_empty());
        let mut map: HashMap<String, Vec<String>> = HashMap::new();
        for c in &net.connections {
            if c.tl.is_some() || !road(&c.from) || !road(&c.to) || c.dir == "t" {
                continue;
            }
            map.entry(c.to_lane_id())
                .or_default()
                .push(c.from_lane_id());
        }
        Feeders(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sumo::net::{NetConnection, NetEdge, NetLane};

    fn lane(length_m: f64) -> NetLane {
        NetLane {
            edge: String::new(),
            length_m,
            speed_mps: None,
            end_direction: None,
        }
    }

    fn conn(from: &str, to: &str, tl: Option<&str>) -> NetConnection {
        NetConnection {
            from: from.into(),
            to: to.into(),
            from_lane: 0,
            to_lane: 0,
            via: None,
            tl: tl.map(String::from),
            link_index: tl.map(|_| 0),
            dir: "s".into(),
        }
    }

    /// far (300 m) -> mid (100 m) -> pocket (60 m) -> [signal]; `other` reaches `mid`
    /// through another signal.
    fn chain() -> NetFile {
        let mut net = NetFile::default();
        for (id, len) in [("far_0", 300.0), ("mid_0", 100.0), ("pocket_0", 60.0)] {
            net.lanes.insert(id.into(), lane(len));
        }
        net.lanes.insert("other_0".into(), lane(50.0));
        for e in ["far", "mid", "pocket", "other", "out"] {
            net.edges.insert(e.into(), NetEdge::default());
        }
        net.connections = vec![
            conn("far", "mid", None),
            conn("mid", "pocket", None),
            conn("other", "mid", Some("T2")),
            conn("pocket", "out", Some("T1")),
        ];
        net
    }

    fn zone_of(lane: &str, range_m: f64) -> Vec<ZoneLane> {
        let net = chain();
        approach_zone(&net, &Feeders::of(&net), lane, range_m)
    }

    #[test]
    fn zone_follows_unsignalised_feeders_up_to_the_range() {
        let z = zone_of("pocket_0", 200.0);
        let ids: Vec<_> = z.iter().map(|l| l.lane.as_str()).collect();
        assert_eq!(ids, ["pocket_0", "mid_0", "far_0"]);
        assert_eq!(z[0].covered_m, 60.0);
        assert_eq!(z[1].covered_m, 100.0);
        assert_eq!(z[1].offset_m, 60.0);
        // 200 − 160 m of the far lane, from its downstream end.
        assert!((z[2].covered_m - 40.0).abs() < 1e-9);
    }

    #[test]
    fn a_long_stop_line_lane_is_cut_at_the_range() {
        let z = zone_of("far_0", 200.0);
        assert_eq!(z.len(), 1);
        assert_eq!(z[0].covered_m, 200.0);
        // 40 halted vehicles on 300 m: the 200 m zone holds 26.7 of them.
        let (veh, halt) = z[0].in_zone(50.0, 40.0);
        assert!((halt - 200.0 / 7.5).abs() < 1e-4);
        assert!(z[0].holds(z[0].length_m - 200.0) && !z[0].holds(z[0].length_m - 200.5));
        assert!((veh - (halt + 10.0 * 2.0 / 3.0)).abs() < 1e-4);
    }

    #[test]
    fn readings_of_a_fully_covered_lane_are_unchanged() {
        let z = zone_of("pocket_0", 200.0);
        assert_eq!(z[0].in_zone(7.0, 5.0), (7.0, 5.0));
        assert!(z[0].holds(0.0));
    }
}
