//! The vehicles' accumulated waiting times (or time losses) near each signal, for the
//! wait-delta (or delay-delta) reward.
//!
//! SUMO's lane waiting time sums each vehicle's time since it last moved: a queue that
//! creeps one car length starts again from zero, so a reward built on it pays for short,
//! frequent greens that waste clearance time while an approach starves. A vehicle's
//! *accumulated* waiting time (within `--waiting-time-memory`) keeps growing however often
//! it creeps. No lane getter sums it, so the backend reads it per vehicle with one context
//! subscription per junction that a signal's stop-line lanes end at: every vehicle within
//! range, with its lane, position, accumulated waiting time and departure delay (the time
//! it waited to be inserted). The results arrive with each `simulationStep` reply, so they
//! cost no extra round trip.
//!
//! The delay-delta reward reads each vehicle's time loss instead ([`VehicleMeasure`]): the
//! time it has lost against driving at its desired speed, which also counts the braking,
//! slow starts and crawling that a stop costs beyond standing still — what a trip's delay
//! is made of.
//!
//! Vehicles that cannot be inserted at all (their entry edge is full: the queue has spilled
//! back to the network's edge) wait too. [`PendingWaits`] counts them on the edges of the
//! approach zones, from when the backend first sees them pending; once inserted, their
//! departure delay carries that wait on.

use std::collections::{HashMap, HashSet};

use super::approach::APPROACH_RANGE_M;
use super::traci::{cmd, var, ContextObject, Message, SubscriptionResult, Value};

/// How far beyond the approach range the subscriptions reach (m): a junction's centre lies
/// up to this far from its stop lines.
const CENTRE_TO_STOP_LINE_M: f64 = 60.0;

/// How far past the stop line the delay-accrued reward follows a vehicle (m): one that
/// pulls away from a stop is up to speed within it (SUMO's default passenger car,
/// accelerating at 2.6 m/s², reaches 80 km/h in 95 m), so a stop costs the signal all of
/// its delay, the pulling away included.
pub(crate) const EXIT_RANGE_M: f64 = 100.0;

/// What is summed of each vehicle near a signal (with its departure delay).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum VehicleMeasure {
    /// Its accumulated waiting time (the wait-delta reward).
    #[default]
    AccumulatedWait,
    /// Its time loss (the delay-delta reward).
    TimeLoss,
}

impl VehicleMeasure {
    /// The variables read of each vehicle, in this order.
    fn variables(self) -> [u8; 4] {
        let measure = match self {
            VehicleMeasure::AccumulatedWait => var::VEHICLE_ACCUMULATED_WAITING_TIME,
            VehicleMeasure::TimeLoss => var::VEHICLE_TIME_LOSS,
        };
        [
            var::VEHICLE_LANE_ID,
            var::VEHICLE_LANE_POSITION,
            measure,
            var::VEHICLE_DEPART_DELAY,
        ]
    }

    fn name(self) -> &'static str {
        match self {
            VehicleMeasure::AccumulatedWait => "accumulated waiting time",
            VehicleMeasure::TimeLoss => "time loss",
        }
    }
}

/// One vehicle near a signal: its position on its lane (m from the lane's start) and its
/// wait (s): its [`VehicleMeasure`] plus departure delay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct VehicleWait {
    pub pos_m: f64,
    pub wait_s: f32,
    /// The vehicle, hashed ([`DelayAccrual`] follows it from one reading to the next).
    pub id: u64,
}

/// The junctions watched, prepared once per network.
#[derive(Clone, Debug, Default)]
pub(crate) struct WaitWatch {
    junctions: Vec<String>,
    measure: VehicleMeasure,
    /// Whether the pedestrians on each junction's walking areas and crossings are watched
    /// too ([`WaitWatch::apply_pedestrians`]).
    pedestrians: bool,
}

impl WaitWatch {
    /// Watches `measure` of the vehicles near `junctions` (each once, in first-seen order).
    pub(crate) fn new<'a>(
        junctions: impl IntoIterator<Item = &'a str>,
        measure: VehicleMeasure,
    ) -> Self {
        let mut seen = Vec::<String>::new();
        for j in junctions {
            if !seen.iter().any(|s| s == j) {
                seen.push(j.to_string());
            }
        }
        WaitWatch {
            junctions: seen,
            measure,
            pedestrians: false,
        }
    }

    /// Watches the pedestrians standing on each junction's walking areas and crossings
    /// as well, when `on`: one more context subscription per junction.
    pub(crate) fn with_pedestrians(mut self, on: bool) -> Self {
        self.pedestrians = on;
        self
    }

    /// What is read of each vehicle.
    pub(crate) fn measure(&self) -> VehicleMeasure {
        self.measure
    }

    /// The message subscribing to the vehicles around every watched junction; empty when
    /// there is none.
    pub(crate) fn subscribe_message(&self) -> Message {
        let mut m = Message::new();
        for j in &self.junctions {
            m.subscribe_context(
                cmd::subscribe_context_of(cmd::GET_JUNCTION),
                j,
                cmd::GET_VEHICLE,
                APPROACH_RANGE_M + CENTRE_TO_STOP_LINE_M,
                &self.measure.variables(),
            );
            if self.pedestrians {
                // Walking areas lie at the ends of the stop lines, so within the range
                // that holds a junction's stop lines.
                m.subscribe_context(
                    cmd::subscribe_context_of(cmd::GET_JUNCTION),
                    j,
                    cmd::GET_PERSON,
                    CENTRE_TO_STOP_LINE_M,
                    &PEDESTRIAN_VARIABLES,
                );
            }
        }
        m
    }

    /// The watched junctions, in the order [`WaitWatch::apply`] fills `crossing`.
    pub(crate) fn junctions(&self) -> &[String] {
        &self.junctions
    }

    /// Sorts the vehicles of the context results in `subs` onto their lanes: `out[i]`
    /// receives the vehicles on lane `index[lane id] = i`, and, unless `crossing` is
    /// empty, `crossing[j]` those inside watched junction `j` (on its internal lanes,
    /// `:J_…`); vehicles on other lanes are skipped, and a vehicle near two junctions
    /// counts once. `out` and `crossing` are cleared first.
    pub(crate) fn apply(
        &self,
        subs: &[SubscriptionResult],
        index: &HashMap<String, usize>,
        out: &mut [Vec<VehicleWait>],
        crossing: &mut [Vec<VehicleWait>],
    ) -> Result<(), String> {
        for v in out.iter_mut().chain(crossing.iter_mut()) {
            v.clear();
        }
        let mut seen: HashSet<&str> = HashSet::new();
        let response = cmd::context_response(cmd::GET_JUNCTION);
        let vehicles =
            |s: &&SubscriptionResult| s.response == response && s.domain == cmd::GET_VEHICLE;
        for s in subs.iter().filter(vehicles) {
            let inside = if crossing.is_empty() {
                None
            } else {
                self.junctions.iter().position(|j| *j == s.object)
            };
            for o in &s.context {
                let [(_, lane), (_, pos), (_, wait), (_, depart)] = o.values.as_slice() else {
                    return Err(format!(
                        "vehicle {} near {}: {} values, expected {}",
                        o.id,
                        s.object,
                        o.values.len(),
                        self.measure.variables().len()
                    ));
                };
                let Value::Str(lane) = lane else {
                    return Err(format!("vehicle {}: lane {lane:?} is not a string", o.id));
                };
                let slot = match (index.get(lane), inside) {
                    (Some(&i), _) => out.get_mut(i).ok_or(i),
                    (None, Some(j)) if is_internal_lane_of(lane, &s.object) => Ok(&mut crossing[j]),
                    _ => continue,
                };
                if !seen.insert(&o.id) {
                    continue;
                }
                let number = |v: &Value, what: &str| {
                    v.as_f64()
                        .filter(|x| x.is_finite())
                        .ok_or_else(|| format!("vehicle {}: {what} {v:?}", o.id))
                };
                let slot = slot.map_err(|i| format!("lane index {i} of {lane} out of range"))?;
                slot.push(VehicleWait {
                    pos_m: number(pos, "lane position")?,
                    wait_s: (number(wait, self.measure.name())?.max(0.0)
                        + number(depart, "departure delay")?.max(0.0))
                        as f32,
                    id: id_hash(&o.id),
                });
            }
        }
        Ok(())
    }
}

impl WaitWatch {
    /// Sorts the pedestrians of the context results in `subs` onto the watched junctions
    /// and the observed crossings. Unless `out` is empty, `out[j]` receives, with their
    /// waiting times, those on junction `j`'s walking areas and crossings (`:J_w…`,
    /// `:J_c…`), where a pedestrian stands while its crossing is red; those elsewhere (on
    /// sidewalks, in vehicles) are skipped. `crossings` counts those at and on each of its
    /// crossings ([`CrossingCounts::note`]). One seen from two junctions counts once.
    /// `out` and the counts are cleared first; both stay empty unless the watch was made
    /// [`WaitWatch::with_pedestrians`].
    pub(crate) fn apply_pedestrians(
        &self,
        subs: &[SubscriptionResult],
        out: &mut [Vec<VehicleWait>],
        crossings: &mut CrossingCounts,
    ) -> Result<(), String> {
        out.iter_mut().for_each(Vec::clear);
        crossings.clear();
        let response = cmd::context_response(cmd::GET_JUNCTION);
        let mut seen: HashSet<&str> = HashSet::new();
        let persons = subs
            .iter()
            .filter(|s| s.response == response && s.domain == cmd::GET_PERSON);
        for s in persons {
            let Some(j) = self.junctions.iter().position(|j| *j == s.object) else {
                continue;
            };
            for o in &s.context {
                let (edge, wait_s, next) = pedestrian_values(o, &s.object)?;
                if !is_walkway_of(edge, &s.object) || !seen.insert(&o.id) {
                    continue;
                }
                crossings.note(edge, next, wait_s > 0.0);
                if out.is_empty() {
                    continue;
                }
                out.get_mut(j)
                    .ok_or_else(|| format!("junction index {j} of {} out of range", s.object))?
                    .push(VehicleWait {
                        pos_m: 0.0,
                        wait_s: wait_s.max(0.0) as f32,
                        id: id_hash(&o.id),
                    });
            }
        }
        Ok(())
    }
}

/// One pedestrian's edge, waiting time (s) and next edge (`""` if none) from its context
/// result near `junction`.
fn pedestrian_values<'o>(
    o: &'o ContextObject,
    junction: &str,
) -> Result<(&'o str, f64, &'o str), String> {
    let [(_, edge), (_, wait), (_, next)] = o.values.as_slice() else {
        return Err(format!(
            "pedestrian {} near {junction}: {} values, expected {}",
            o.id,
            o.values.len(),
            PEDESTRIAN_VARIABLES.len()
        ));
    };
    let (Value::Str(edge), Value::Str(next)) = (edge, next) else {
        return Err(format!(
            "pedestrian {}: edge {edge:?} or next edge {next:?} is not a string",
            o.id
        ));
    };
    let wait_s = wait
        .as_f64()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("pedestrian {}: waiting time {wait:?}", o.id))?;
    Ok((edge, wait_s, next))
}

/// What is read of each pedestrian near a junction, in this order.
const PEDESTRIAN_VARIABLES: [u8; 3] = [
    var::PERSON_ROAD_ID,
    var::PERSON_WAITING_TIME,
    var::PERSON_NEXT_EDGE,
];

/// The pedestrians at one observed crossing at the last reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CrossingCount {
    /// On a walking area, about to step onto the crossing (its next edge).
    pub at_kerb: u32,
    /// Of those, the ones standing (waiting time above 0): waiting for the green.
    pub at_kerb_standing: u32,
    /// On the crossing.
    pub on: u32,
    /// Of those, the ones standing.
    pub on_standing: u32,
}

/// The pedestrians at and on each observed crossing ([`CrossingCount`]), by crossing.
#[derive(Clone, Debug, Default)]
pub(crate) struct CrossingCounts {
    /// Crossing edge id → its index in `counts`.
    index: HashMap<String, usize>,
    /// Per crossing, in the order given to [`CrossingCounts::new`].
    pub counts: Vec<CrossingCount>,
}

impl CrossingCounts {
    /// Counts at each signal's crossings (edge ids); returns, per signal, its crossings'
    /// indices in [`CrossingCounts::counts`] (a crossing two signals list is counted once).
    pub(crate) fn for_signals<'a>(
        signals: impl IntoIterator<Item = &'a [String]>,
    ) -> (Self, Vec<Vec<usize>>) {
        let mut index = HashMap::new();
        let per_signal = signals
            .into_iter()
            .map(|crossings| {
                crossings
                    .iter()
                    .map(|c| {
                        let next = index.len();
                        *index.entry(c.clone()).or_insert(next)
                    })
                    .collect()
            })
            .collect();
        let counts = CrossingCounts {
            counts: vec![CrossingCount::default(); index.len()],
            index,
        };
        (counts, per_signal)
    }

    /// Whether no crossing is counted.
    pub(crate) fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    fn clear(&mut self) {
        self.counts.fill(CrossingCount::default());
    }

    /// Counts a pedestrian on edge `edge` whose next edge is `next`, `standing` or not:
    /// on a counted crossing, or on a walking area with a counted crossing next.
    pub(crate) fn note(&mut self, edge: &str, next: &str, standing: bool) {
        let standing = u32::from(standing);
        if let Some(&c) = self.index.get(edge) {
            self.counts[c].on += 1;
            self.counts[c].on_standing += standing;
        } else if let Some(&c) = self.index.get(next) {
            self.counts[c].at_kerb += 1;
            self.counts[c].at_kerb_standing += standing;
        }
    }
}

/// Whether `edge` is a walking area or crossing of junction `junction`: SUMO names them
/// `:<junction>_w<n>` and `:<junction>_c<n>`.
fn is_walkway_of(edge: &str, junction: &str) -> bool {
    internal_name(edge, junction).is_some_and(|rest| {
        rest.strip_prefix('w')
            .or_else(|| rest.strip_prefix('c'))
            .is_some_and(is_number)
    })
}

/// The junction whose crossing `edge` is: SUMO names crossings `:<junction>_c<n>`.
pub(crate) fn junction_of_crossing(edge: &str) -> Option<&str> {
    let (junction, n) = edge.strip_prefix(':')?.rsplit_once("_c")?;
    (is_number(n) && !junction.is_empty()).then_some(junction)
}

/// Whether `lane` is an internal lane of junction `junction`: SUMO names them
/// `:<junction>_<link>_<lane>`, both numbers, so `:A_1_0_0` is junction `A_1`'s, not `A`'s.
fn is_internal_lane_of(lane: &str, junction: &str) -> bool {
    // Called for every vehicle off the watched lanes at every step: no allocation.
    internal_name(lane, junction)
        .and_then(|rest| rest.split_once('_'))
        .is_some_and(|(link, lane)| is_number(link) && is_number(lane))
}

/// What follows `:<junction>_` in the name of one of `junction`'s internal edges or lanes.
fn internal_name<'a>(name: &'a str, junction: &str) -> Option<&'a str> {
    name.strip_prefix(':')?
        .strip_prefix(junction)?
        .strip_prefix('_')
}

/// Whether `n` is a non-empty run of decimal digits.
fn is_number(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
}

/// A vehicle id's hash: what [`DelayAccrual`] knows a vehicle by between readings.
fn id_hash(id: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

/// One signal's delay counted as it is lost (the delay-accrued reward): each reading,
/// every vehicle near the signal that was near it at the last reading adds what its time
/// loss grew by since; one seen for the first time adds nothing (what it lost before
/// was lost elsewhere, or is counted by its insertion wait). A vehicle that leaves is
/// forgotten, with nothing credited back.
#[derive(Clone, Debug, Default)]
pub(crate) struct DelayAccrual {
    /// The vehicles near the signal at the last reading: id hash → time loss (s).
    last: HashMap<u64, f32>,
    /// This reading's, swapped in.
    now: HashMap<u64, f32>,
}

impl DelayAccrual {
    /// Forgets every vehicle (a new episode).
    pub(crate) fn clear(&mut self) {
        self.last.clear();
        self.now.clear();
    }

    /// Takes the reading `vehicles` (a vehicle listed twice counts once) and returns the
    /// time loss (s) they gained since the last one.
    pub(crate) fn accrue<'a>(
        &mut self,
        vehicles: impl IntoIterator<Item = &'a VehicleWait>,
    ) -> f32 {
        self.now.clear();
        let mut gained = 0.0f64;
        for v in vehicles {
            // A lane both upstream and downstream of the signal lists its vehicles twice.
            if self.now.insert(v.id, v.wait_s).is_some() {
                continue;
            }
            if let Some(&before) = self.last.get(&v.id) {
                gained += f64::from((v.wait_s - before).max(0.0));
            }
        }
        std::mem::swap(&mut self.last, &mut self.now);
        gained as f32
    }
}

/// The vehicles waiting to be inserted on some edges, and since when.
#[derive(Clone, Debug, Default)]
pub(crate) struct PendingWaits {
    /// Per edge: the ids pending there at the last reading.
    pub ids: Vec<Vec<String>>,
    /// Per pending vehicle: SUMO time (s) it was first seen pending.
    since_s: HashMap<String, f64>,
    /// SUMO time (s) of the last reading.
    now_s: f64,
}

impl PendingWaits {
    /// Watches `n_edges` edges, none pending.
    pub(crate) fn new(n_edges: usize) -> Self {
        PendingWaits {
            ids: vec![Vec::new(); n_edges],
            ..Default::default()
        }
    }

    /// Forgets every vehicle (a new episode).
    pub(crate) fn clear(&mut self) {
        self.ids.iter_mut().for_each(Vec::clear);
        self.since_s.clear();
        self.now_s = 0.0;
    }

    /// Notes that `ids` were read at SUMO time `now_s`: vehicles seen pending for the
    /// first time start waiting now, those no longer pending are forgotten.
    pub(crate) fn note(&mut self, now_s: f64) {
        let pending: HashSet<&String> = self.ids.iter().flatten().collect();
        self.since_s.retain(|id, _| pending.contains(id));
        for id in pending {
            self.since_s.entry(id.clone()).or_insert(now_s);
        }
        self.now_s = now_s;
    }

    /// The summed wait (s) of the vehicles pending on `edges`.
    pub(crate) fn wait_s(&self, edges: &[usize]) -> f32 {
        edges
            .iter()
            .flat_map(|&e| &self.ids[e])
            .map(|id| self.now_s - self.since_s.get(id).copied().unwrap_or(self.now_s))
            .sum::<f64>() as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vehicle(id: &str, lane: &str, pos: f64, wait: f64) -> ContextObject {
        ContextObject {
            id: id.into(),
            values: vec![
                (var::VEHICLE_LANE_ID, Value::Str(lane.into())),
                (var::VEHICLE_LANE_POSITION, Value::Double(pos)),
                (var::VEHICLE_ACCUMULATED_WAITING_TIME, Value::Double(wait)),
                // Vehicles inserted on time report 0; loaded early ones a negative delay.
                (var::VEHICLE_DEPART_DELAY, Value::Double(-1.0)),
            ],
        }
    }

    fn result(junction: &str, vehicles: Vec<ContextObject>) -> SubscriptionResult {
        SubscriptionResult {
            response: cmd::context_response(cmd::GET_JUNCTION),
            object: junction.into(),
            domain: cmd::GET_VEHICLE,
            values: Vec::new(),
            context: vehicles,
        }
    }

    #[test]
    fn vehicles_are_sorted_onto_watched_lanes_once() {
        let watch = WaitWatch::new(["J1", "J2", "J1"], VehicleMeasure::AccumulatedWait);
        assert_eq!(watch.junctions, ["J1", "J2"]);
        let index = HashMap::from([("a_0".to_string(), 0), ("b_0".to_string(), 1)]);
        let subs = [
            result(
                "J1",
                vec![
                    vehicle("v0", "a_0", 10.0, 30.0),
                    vehicle("v1", ":J1_0_0", 1.0, 5.0),
                ],
            ),
            result(
                "J2",
                vec![
                    vehicle("v0", "a_0", 10.0, 30.0),
                    vehicle("v2", "b_0", 4.0, 2.5),
                ],
            ),
        ];
        let mut out = vec![
            vec![VehicleWait {
                pos_m: 0.0,
                wait_s: 9.0,
                id: 0,
            }],
            Vec::new(),
        ];
        watch.apply(&subs, &index, &mut out, &mut []).unwrap();
        assert_eq!(
            out[0],
            [VehicleWait {
                pos_m: 10.0,
                wait_s: 30.0,
                id: id_hash("v0"),
            }]
        );
        assert_eq!(
            out[1],
            [VehicleWait {
                pos_m: 4.0,
                wait_s: 2.5,
                id: id_hash("v2"),
            }]
        );
    }

    #[test]
    fn malformed_vehicles_are_errors() {
        let watch = WaitWatch::new(["J1"], VehicleMeasure::AccumulatedWait);
        let index = HashMap::from([("a_0".to_string(), 0)]);
        let mut out = vec![Vec::new()];
        let mut bad = vehicle("v0", "a_0", 1.0, f64::NAN);
        let err = watch
            .apply(
                &[result("J1", vec![bad.clone()])],
                &index,
                &mut out,
                &mut [],
            )
            .unwrap_err();
        assert!(err.contains("accumulated waiting time"), "{err}");
        bad.values.pop();
        let err = watch
            .apply(&[result("J1", vec![bad])], &index, &mut out, &mut [])
            .unwrap_err();
        assert!(err.contains("3 values"), "{err}");
    }

    #[test]
    fn the_delay_reward_reads_time_loss() {
        let watch = WaitWatch::new(["J1"], VehicleMeasure::TimeLoss);
        assert_eq!(
            watch.measure.variables()[2],
            var::VEHICLE_TIME_LOSS,
            "time loss in the measure's slot"
        );
        let index = HashMap::from([("a_0".to_string(), 0)]);
        let mut out = vec![Vec::new()];
        let bad = vehicle("v0", "a_0", 1.0, f64::INFINITY);
        let err = watch
            .apply(&[result("J1", vec![bad])], &index, &mut out, &mut [])
            .unwrap_err();
        assert!(err.contains("time loss"), "{err}");
    }

    #[test]
    fn vehicles_inside_a_junction_are_sorted_onto_it() {
        let watch = WaitWatch::new(["J1", "J10"], VehicleMeasure::TimeLoss);
        let index = HashMap::from([("a_0".to_string(), 0)]);
        let subs = [
            result(
                "J1",
                vec![
                    vehicle("v0", ":J1_0_0", 1.0, 3.0),
                    // J10's internal lane seen from J1: not J1's, and J10 has it below.
                    vehicle("v1", ":J10_2_0", 1.0, 4.0),
                    vehicle("v2", "a_0", 5.0, 6.0),
                    vehicle("v3", ":elsewhere_0_0", 1.0, 7.0),
                ],
            ),
            result("J10", vec![vehicle("v1", ":J10_2_0", 1.0, 4.0)]),
        ];
        let mut out = vec![Vec::new()];
        let mut crossing = vec![Vec::new(), Vec::new()];
        watch.apply(&subs, &index, &mut out, &mut crossing).unwrap();
        let ids = |v: &[VehicleWait]| v.iter().map(|x| x.id).collect::<Vec<_>>();
        assert_eq!(ids(&out[0]), [id_hash("v2")]);
        assert_eq!(ids(&crossing[0]), [id_hash("v0")]);
        assert_eq!(ids(&crossing[1]), [id_hash("v1")]);
        // Not collected when not asked for.
        watch.apply(&subs, &index, &mut out, &mut []).unwrap();
        assert_eq!(ids(&out[0]), [id_hash("v2")]);
        assert!(is_internal_lane_of(":J1_0_0", "J1"));
        assert!(is_internal_lane_of(":joinedS_0_12_1", "joinedS_0"));
        assert!(!is_internal_lane_of(":J10_0_0", "J1"));
        assert!(!is_internal_lane_of("J1_0_0", "J1"));
        // Junction `A_1`'s, not `A`'s; and not a vehicle lane of the form SUMO writes.
        assert!(!is_internal_lane_of(":A_1_0_0", "A"));
        assert!(is_internal_lane_of(":A_1_0_0", "A_1"));
        assert!(!is_internal_lane_of(":A_w0_0", "A"));
        assert!(!is_internal_lane_of(":A_0_", "A"));
    }

    fn near(id: &str, loss_s: f32) -> VehicleWait {
        VehicleWait {
            pos_m: 0.0,
            wait_s: loss_s,
            id: id_hash(id),
        }
    }

    #[test]
    fn accrual_counts_the_loss_gained_near_the_signal_and_credits_nothing() {
        let mut a = DelayAccrual::default();
        // Newcomers bring their earlier loss in uncounted.
        assert_eq!(a.accrue(&[near("a", 30.0), near("b", 2.0)]), 0.0);
        // a gains 4 s, b 1 s, c arrives.
        assert_eq!(
            a.accrue(&[near("a", 34.0), near("b", 3.0), near("c", 50.0)]),
            5.0
        );
        // a leaves: nothing back; c gains 2 s.
        assert_eq!(a.accrue(&[near("b", 3.0), near("c", 52.0)]), 2.0);
        // a returns: new again.
        assert_eq!(a.accrue(&[near("a", 40.0), near("c", 52.5)]), 0.5);
        // Time loss never shrinks in SUMO; a reading that does counts nothing.
        assert_eq!(a.accrue(&[near("a", 39.0)]), 0.0);
        // Listed twice (a lane both before and after the signal): counted once.
        assert_eq!(a.accrue(&[near("a", 41.0), near("a", 41.0)]), 2.0);
        a.clear();
        assert_eq!(a.accrue(&[near("a", 45.0)]), 0.0);
    }

    #[test]
    fn insertion_delay_adds_to_the_wait() {
        let watch = WaitWatch::new(["J1"], VehicleMeasure::AccumulatedWait);
        let index = HashMap::from([("a_0".to_string(), 0)]);
        let mut v = vehicle("v0", "a_0", 1.0, 4.0);
        v.values[3].1 = Value::Double(30.0);
        let mut out = vec![Vec::new()];
        watch
            .apply(&[result("J1", vec![v])], &index, &mut out, &mut [])
            .unwrap();
        assert_eq!(out[0][0].wait_s, 34.0);
    }

    #[test]
    fn pending_vehicles_wait_from_when_first_seen_until_inserted() {
        let mut p = PendingWaits::new(2);
        p.ids[0] = vec!["a".into(), "b".into()];
        p.note(100.0);
        assert_eq!(p.wait_s(&[0, 1]), 0.0);
        p.ids[1] = vec!["c".into()];
        p.note(105.0);
        assert_eq!(p.wait_s(&[0]), 10.0);
        assert_eq!(p.wait_s(&[0, 1]), 10.0);
        // "a" was inserted; "b" and "c" keep waiting; "a" pending again starts afresh.
        p.ids[0] = vec!["b".into()];
        p.note(110.0);
        assert_eq!(p.wait_s(&[0, 1]), 10.0 + 5.0);
        p.ids[0] = vec!["a".into(), "b".into()];
        p.note(115.0);
        assert_eq!(p.wait_s(&[0]), 15.0);
        p.clear();
        assert_eq!(p.wait_s(&[0, 1]), 0.0);
    }

    fn pedestrian(id: &str, edge: &str, wait: f64) -> ContextObject {
        walker(id, edge, wait, "")
    }

    fn walker(id: &str, edge: &str, wait: f64, next: &str) -> ContextObject {
        ContextObject {
            id: id.into(),
            values: vec![
                (var::PERSON_ROAD_ID, Value::Str(edge.into())),
                (var::PERSON_WAITING_TIME, Value::Double(wait)),
                (var::PERSON_NEXT_EDGE, Value::Str(next.into())),
            ],
        }
    }

    fn persons(junction: &str, found: Vec<ContextObject>) -> SubscriptionResult {
        SubscriptionResult {
            domain: cmd::GET_PERSON,
            ..result(junction, found)
        }
    }

    #[test]
    fn pedestrians_count_on_their_junctions_walkways_only_and_apart_from_vehicles() {
        let watch = WaitWatch::new(["J1", "J2"], VehicleMeasure::TimeLoss).with_pedestrians(true);
        let subs = [
            result("J1", vec![vehicle("v0", "a_0", 1.0, 3.0)]),
            persons(
                "J1",
                vec![
                    pedestrian("p0", ":J1_w0", 12.0),
                    pedestrian("p1", ":J1_c3", 0.0),
                    // On a sidewalk, on another junction's walking area, in a vehicle.
                    pedestrian("p2", "a", 40.0),
                    pedestrian("p3", ":J2_w1", 7.0),
                    pedestrian("p4", "b", 9.0),
                ],
            ),
            persons("J2", vec![pedestrian("p3", ":J2_w1", 7.0)]),
        ];
        let mut out = vec![Vec::new(); 2];
        let mut none = CrossingCounts::default();
        watch.apply_pedestrians(&subs, &mut out, &mut none).unwrap();
        let waits = |v: &[VehicleWait]| v.iter().map(|x| (x.id, x.wait_s)).collect::<Vec<_>>();
        assert_eq!(
            waits(&out[0]),
            [(id_hash("p0"), 12.0), (id_hash("p1"), 0.0)]
        );
        assert_eq!(waits(&out[1]), [(id_hash("p3"), 7.0)]);
        // The vehicles read past the persons' results, which have two values each.
        let index = HashMap::from([("a_0".to_string(), 0)]);
        let mut lanes = vec![Vec::new()];
        watch.apply(&subs, &index, &mut lanes, &mut []).unwrap();
        assert_eq!(waits(&lanes[0]), [(id_hash("v0"), 3.0)]);
        // And the pedestrians past the vehicles'.
        let mut bad = pedestrian("p5", ":J1_w0", f64::NAN);
        let err = watch
            .apply_pedestrians(&[persons("J1", vec![bad.clone()])], &mut out, &mut none)
            .unwrap_err();
        assert!(err.contains("p5") && err.contains("waiting time"), "{err}");
        bad.values.pop();
        let err = watch
            .apply_pedestrians(&[persons("J1", vec![bad.clone()])], &mut out, &mut none)
            .unwrap_err();
        assert!(err.contains("2 values"), "{err}");
        bad.values[1].1 = Value::Double(1.0);
        bad.values.push((var::PERSON_NEXT_EDGE, Value::Double(1.0)));
        let err = watch
            .apply_pedestrians(&[persons("J1", vec![bad])], &mut out, &mut none)
            .unwrap_err();
        assert!(err.contains("next edge"), "{err}");
        assert!(is_walkway_of(":J1_w0", "J1") && is_walkway_of(":A_1_c12", "A_1"));
        assert!(!is_walkway_of(":A_1_w0", "A") && !is_walkway_of(":J1_0_0", "J1"));
        assert!(!is_walkway_of(":J1_w", "J1") && !is_walkway_of("J1_w0", "J1"));
        assert_eq!(junction_of_crossing(":A_1_c12"), Some("A_1"));
        assert_eq!(junction_of_crossing(":cluster_c_7_c0"), Some("cluster_c_7"));
        for not in [":A_1_w0", "A_c0", ":A_c", ":_c0", ":A_0_0"] {
            assert_eq!(junction_of_crossing(not), None, "{not}");
        }
    }

    #[test]
    fn pedestrians_count_at_the_kerb_of_their_next_crossing_and_on_it() {
        let watch = WaitWatch::new(["J1", "J2"], VehicleMeasure::TimeLoss).with_pedestrians(true);
        let signals = [
            vec![":J1_c0".to_string(), ":J1_c1".into()],
            vec![":J1_c0".into(), ":J2_c0".into()],
        ];
        let (mut counts, per_signal) =
            CrossingCounts::for_signals(signals.iter().map(Vec::as_slice));
        assert_eq!(per_signal, [vec![0, 1], vec![0, 2]]);
        let subs = [
            persons(
                "J1",
                vec![
                    // Two at c0's kerb, one standing; one at c1's kerb, standing; one
                    // walking over c0 and one stuck on it; one on a walking area bound
                    // for a sidewalk; one on a sidewalk bound for the walking area.
                    walker("p0", ":J1_w0", 12.0, ":J1_c0"),
                    walker("p1", ":J1_w1", 0.0, ":J1_c0"),
                    walker("p2", ":J1_w1", 3.0, ":J1_c1"),
                    walker("p3", ":J1_c0", 0.0, ":J1_w1"),
                    walker("p4", ":J1_c0", 2.0, ":J1_w1"),
                    walker("p5", ":J1_w2", 5.0, "out"),
                    walker("p6", "in", 5.0, ":J1_w2"),
                ],
            ),
            // From J2 only J2's walkways count: p0, on J1's, is not counted again.
            persons("J2", vec![walker("p0", ":J1_w0", 12.0, ":J1_c0")]),
        ];
        watch
            .apply_pedestrians(&subs, &mut [], &mut counts)
            .unwrap();
        let count = |at_kerb, at_kerb_standing, on, on_standing| CrossingCount {
            at_kerb,
            at_kerb_standing,
            on,
            on_standing,
        };
        assert_eq!(
            counts.counts,
            [count(2, 1, 2, 1), count(1, 1, 0, 0), count(0, 0, 0, 0)]
        );
        // The next reading starts from zero.
        watch.apply_pedestrians(&[], &mut [], &mut counts).unwrap();
        assert_eq!(counts.counts, [CrossingCount::default(); 3]);
    }

    #[test]
    fn pedestrians_are_subscribed_only_when_watched() {
        let watch = WaitWatch::new(["J1", "J2"], VehicleMeasure::TimeLoss);
        let context = cmd::subscribe_context_of(cmd::GET_JUNCTION);
        assert_eq!(watch.subscribe_message().commands(), [context; 2]);
        let with = watch.with_pedestrians(true).subscribe_message();
        assert_eq!(with.commands(), [context; 4]);
    }
}
