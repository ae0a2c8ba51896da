//! The embedded mesoscopic simulator: discrete vehicles on links with lanes, free-flow
//! travel, stop-line queues discharging at saturation flow, spill-back, Poisson demand.
//!
//! # Model
//!
//! Time advances in 1 s ticks, but every vehicle time is exact (continuous): arrivals are
//! Poisson instants, a vehicle reaches the stop line of its lane exactly one free-flow
//! travel time after entering the link, and crosses it at
//! `max(stop-line arrival, previous crossing + headway, green onset + lost time + headway/2)`,
//! provided that instant lies inside its movement's green or the used part of its yellow.
//! Ticks only bound *when* the simulator looks: spill-back (a full downstream lane) and
//! insertion are resolved once per tick. See the crate README for the full list of
//! modelling choices.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use greenwave_core::sequencer::Segment;
use greenwave_core::{
    LaneReading, Millis, MovementId, ObsLayout, RewardInputs, RewardKind, Sequencer, Signal,
    SignalFrame,
};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::demand::{ArrivalStream, Profile};
use crate::env::{
    lane_phase_incidence, Env, EnvError, EpisodeMetrics, MovementDetector, SignalSpec, StepOutcome,
};
use crate::network::{Model, Network};
use crate::scenario::{Demand, Scenario};

/// `gap_s` reported by a detector no vehicle has ever passed.
pub const GAP_NONE_S: f32 = 1.0e6;

/// Vehicles of room reserved per lane up front: every lane of an urban link (≤ 1.8 km at
/// 7 m per vehicle) fits whole, so the hot loop never reallocates there.
const PREALLOCATED_VEHICLES_PER_LANE: usize = 256;

/// One vehicle. Times are seconds since the episode started.
#[derive(Clone, Copy, Debug)]
struct Vehicle {
    /// When it arrived at the network edge (its demand instant).
    arrival_s: f64,
    /// When it entered its first link (later than `arrival_s` if it had to wait).
    entered_s: f64,
    /// When it reaches (or reached) the stop line of its current lane at free flow.
    stop_line_s: f64,
    /// Free-flow travel time of the links entered so far.
    free_flow_s: f64,
    /// Time spent queued at stop lines of links already left.
    wait_s: f64,
    /// Seeds its turning choices, so they do not depend on the controller.
    route_key: u64,
    /// Links entered so far minus one.
    hop: u16,
    /// Its movement at the signal ahead (`EXIT_MOVEMENT` on an exit link).
    movement: u8,
}

/// Discharge window of one movement (absolute times).
#[derive(Clone, Copy, Debug)]
struct MovementState {
    /// Earliest crossing: green onset + start-up lost time + half a headway.
    serve_from_s: f64,
    /// Latest crossing: end of the used part of the yellow (infinite while green).
    serve_until_s: f64,
    /// Last time a vehicle of this movement crossed the stop line.
    last_crossing_s: f64,
}

impl MovementState {
    const RED: MovementState = MovementState {
        serve_from_s: f64::INFINITY,
        serve_until_s: f64::NEG_INFINITY,
        last_crossing_s: f64::NEG_INFINITY,
    };
}

/// Run-time state of one signal.
#[derive(Clone, Debug)]
struct SignalState {
    seq: Sequencer,
    /// The display as of the last reported segment.
    frame: SignalFrame,
    movements: Vec<MovementState>,
    /// Lane readings at the last decision point (observation order).
    readings: Vec<LaneReading>,
    /// Reward inputs at the last decision point.
    reward_inputs: RewardInputs,
    /// Stop-line wait (s), since the last decision point, of the vehicles that crossed
    /// since (the delay-accrued reward).
    crossed_wait_s: f64,
}

#[derive(Clone, Debug)]
struct LaneState {
    /// Vehicles on the lane, ordered by stop-line arrival (front = at the stop line).
    vehicles: VecDeque<Vehicle>,
    /// Earliest time the next vehicle may cross (previous crossing + headway).
    next_crossing_s: f64,
    /// Earliest time the front vehicle could leave (infinite when empty): lets the tick
    /// loop skip lanes with nothing to do without touching their vehicles.
    ready_s: f64,
}

impl LaneState {
    fn empty() -> Self {
        LaneState {
            vehicles: VecDeque::new(),
            next_crossing_s: f64::NEG_INFINITY,
            ready_s: f64::INFINITY,
        }
    }

    /// Recomputes `ready_s` after the front vehicle or `next_crossing_s` changed.
    fn refresh_ready(&mut self) {
        self.ready_s = self
            .vehicles
            .front()
            .map_or(f64::INFINITY, |v| v.stop_line_s.max(self.next_crossing_s));
    }
}

#[derive(Clone, Debug)]
struct OriginState {
    link: u32,
    stream: ArrivalStream,
    rng: Pcg64Mcg,
    next_arrival_s: f64,
    /// Vehicles that arrived but found no room on the entry link yet.
    backlog: VecDeque<Vehicle>,
}

/// Running sums for [`EpisodeMetrics`].
#[derive(Clone, Debug, Default)]
struct Stats {
    arrived: u64,
    entered: u64,
    exited: u64,
    completed_travel_s: f64,
    completed_delay_s: f64,
    completed_wait_s: f64,
    decisions: u64,
    queue_sum_veh: f64,
}

/// Vehicle counts, for conservation checks: `entered == exited + inside` and
/// `arrived == entered + backlog`, always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VehicleCounts {
    /// Vehicles that arrived at the network edge.
    pub arrived: u64,
    /// Vehicles that entered the network.
    pub entered: u64,
    /// Vehicles that left it.
    pub exited: u64,
    /// Vehicles on its lanes now (counted lane by lane, independently of the others).
    pub inside: u64,
    /// Vehicles waiting to enter now (counted independently too).
    pub backlog: u64,
}

/// Everything that changes during an episode.
#[derive(Clone, Debug)]
struct State {
    tick: u32,
    /// When the views (and rewards) were last refreshed (s).
    refreshed_s: f64,
    signals: Vec<SignalState>,
    lanes: Vec<LaneState>,
    origins: Vec<OriginState>,
    stats: Stats,
}

/// The embedded simulator as an [`Env`]. `Send`; cloning or building another one for the
/// same scenario shares the network.
#[derive(Clone, Debug)]
pub struct EmbeddedEnv {
    net: Arc<Network>,
    specs: Vec<SignalSpec>,
    profile: Profile,
    /// Whole seconds (the scenario's): `step` simulates this many one-second ticks.
    decision_interval: Millis,
    episode: Millis,
    reward_kind: RewardKind,
    scenario_name: String,
    state: State,
    wall: Duration,
}

impl EmbeddedEnv {
    /// An environment for `scenario` (its active demand), reset with `seed`.
    pub fn from_scenario(scenario: &Scenario, seed: u64) -> Self {
        let net = Arc::clone(scenario.network());
        let demand: &Demand = scenario.demand();
        let specs = net
            .signals
            .iter()
            .map(|s| SignalSpec {
                id: s.id.clone(),
                plan: s.plan.clone(),
                layout: ObsLayout {
                    n_lanes: s.in_lanes.len() as u16,
                    n_phases: s.plan.n_phases() as u8,
                },
                incidence: lane_phase_incidence(
                    &s.plan,
                    &s.in_lanes
                        .iter()
                        .map(|&l| net.lanes[l as usize].movements)
                        .collect::<Vec<_>>(),
                ),
            })
            .collect();
        let signals = net
            .signals
            .iter()
            .map(|s| SignalState {
                seq: new_sequencer(s),
                frame: SignalFrame::default(),
                movements: vec![MovementState::RED; s.plan.movements().len()],
                readings: vec![LaneReading::default(); s.in_lanes.len()],
                reward_inputs: RewardInputs::default(),
                crossed_wait_s: 0.0,
            })
            .collect();
        let origins = demand
            .flows_veh_per_hour
            .iter()
            .map(|&(link, q)| OriginState {
                link,
                stream: ArrivalStream::new(q, &demand.profile),
                rng: Pcg64Mcg::seed_from_u64(0),
                next_arrival_s: f64::INFINITY,
                backlog: VecDeque::new(),
            })
            .collect();
        let lanes = net
            .lanes
            .iter()
            .map(|l| LaneState {
                // Grows to the queues actually seen (and keeps that across resets); a long
                // link's full storage would be memory spent on vehicles that never come.
                vehicles: VecDeque::with_capacity(
                    (l.storage_veh as usize).min(PREALLOCATED_VEHICLES_PER_LANE),
                ),
                ..LaneState::empty()
            })
            .collect();
        let mut env = EmbeddedEnv {
            specs,
            profile: demand.profile.clone(),
            decision_interval: scenario.decision_interval(),
            episode: scenario.episode(),
            reward_kind: scenario.reward_kind(),
            scenario_name: scenario.name().to_string(),
            state: State {
                tick: 0,
                refreshed_s: 0.0,
                signals,
                lanes,
                origins,
                stats: Stats::default(),
            },
            net,
            wall: Duration::ZERO,
        };
        env.reset_state(seed);
        env
    }

    /// The scenario's name.
    pub fn scenario_name(&self) -> &str {
        &self.scenario_name
    }

    /// Episode length (`step` reports `done` from then on).
    pub fn episode(&self) -> Millis {
        self.episode
    }

    /// Vehicle counts now; see [`VehicleCounts`].
    pub fn vehicle_counts(&self) -> VehicleCounts {
        let s = &self.state;
        VehicleCounts {
            arrived: s.stats.arrived,
            entered: s.stats.entered,
            exited: s.stats.exited,
            inside: s.lanes.iter().map(|l| l.vehicles.len() as u64).sum(),
            backlog: s.origins.iter().map(|o| o.backlog.len() as u64).sum(),
        }
    }

    fn reset_state(&mut self, seed: u64) {
        let s = &mut self.state;
        s.tick = 0;
        s.refreshed_s = 0.0;
        s.stats = Stats::default();
        for lane in &mut s.lanes {
            lane.vehicles.clear();
            lane.next_crossing_s = f64::NEG_INFINITY;
            lane.ready_s = f64::INFINITY;
        }
        for (sig, node) in s.signals.iter_mut().zip(&self.net.signals) {
            sig.seq = new_sequencer(node);
            sig.frame = SignalFrame::default();
            sig.movements.fill(MovementState::RED);
            sig.crossed_wait_s = 0.0;
        }
        for (i, o) in s.origins.iter_mut().enumerate() {
            // One independent stream per entry: arrivals do not depend on the controller.
            o.rng = Pcg64Mcg::seed_from_u64(splitmix64(seed ^ splitmix64(i as u64 + 1)));
            o.backlog.clear();
            o.next_arrival_s = o.stream.next_after(0.0, &self.profile, &mut o.rng);
        }
        s.refresh_views(&self.net, self.reward_kind);
        // The reset's own view is not a decision point: start the sums afresh.
        s.stats = Stats::default();
        self.wall = Duration::ZERO;
    }
}

fn new_sequencer(node: &crate::network::SignalNode) -> Sequencer {
    // The compiler checked the initial phase against the plan.
    Sequencer::new(node.plan.clone(), node.initial_phase)
        .unwrap_or_else(|_| unreachable!("initial phase validated by the scenario compiler"))
}

/// SplitMix64: a stateless 64-bit mixer (seeding, and per-vehicle turning draws).
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The uniform draw in [0, 1) a vehicle with `route_key` uses for its turn on hop `hop`.
fn route_draw(route_key: u64, hop: u16) -> f64 {
    let bits = splitmix64(route_key ^ (hop as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

impl State {
    /// Simulates one second.
    fn tick(&mut self, net: &Network, profile: &Profile) {
        let t0 = self.tick as f64;
        let t1 = t0 + 1.0;
        for sig in &mut self.signals {
            advance_signal(sig, t0, &net.model);
        }
        self.serve_origins(net, profile, t0, t1);
        for lane in 0..self.lanes.len() {
            if self.lanes[lane].ready_s <= t1 {
                self.serve_lane(net, lane, t0, t1);
            }
        }
        self.tick += 1;
    }

    /// The least-occupied lane with room among those `link` offers to `movement`.
    fn pick_lane(&self, net: &Network, link: u32, movement: u8) -> Option<u32> {
        let mut best: Option<(u32, usize)> = None;
        for &lane in net.candidate_lanes(link, movement) {
            let n = self.lanes[lane as usize].vehicles.len();
            if n < net.lanes[lane as usize].storage_veh as usize && best.is_none_or(|(_, b)| n < b)
            {
                best = Some((lane, n));
            }
        }
        best.map(|b| b.0)
    }

    /// Puts `v` onto `lane` of `link` at time `at`, keeping the lane ordered by stop-line
    /// arrival (vehicles from different upstream lanes can merge out of order in a tick).
    fn enter_lane(&mut self, net: &Network, mut v: Vehicle, link: u32, lane: u32, at: f64) {
        let ff = net.links[link as usize].free_flow_s;
        v.free_flow_s += ff;
        v.stop_line_s = at + ff;
        let state = &mut self.lanes[lane as usize];
        let q = &mut state.vehicles;
        match q.back() {
            Some(last) if last.stop_line_s > v.stop_line_s => {
                let pos = q.partition_point(|x| x.stop_line_s <= v.stop_line_s);
                q.insert(pos, v);
                state.refresh_ready();
            }
            Some(_) => q.push_back(v),
            None => {
                q.push_back(v);
                state.refresh_ready();
            }
        }
    }

    fn serve_origins(&mut self, net: &Network, profile: &Profile, t0: f64, t1: f64) {
        for o in 0..self.origins.len() {
            let link = self.origins[o].link;
            // Earlier arrivals first: the backlog, in order, as long as there is room.
            while let Some(v) = self.origins[o].backlog.front().copied() {
                let Some(lane) = self.pick_lane(net, link, v.movement) else {
                    break;
                };
                self.origins[o].backlog.pop_front();
                let at = v.arrival_s.max(t0);
                let v = Vehicle { entered_s: at, ..v };
                self.enter_lane(net, v, link, lane, at);
                self.stats.entered += 1;
            }
            while self.origins[o].next_arrival_s < t1 {
                let origin = &mut self.origins[o];
                let at = origin.next_arrival_s;
                let route_key: u64 = origin.rng.random();
                origin.next_arrival_s = origin.stream.next_after(at, profile, &mut origin.rng);
                let movement = net.choose_movement(link, route_draw(route_key, 0));
                let v = Vehicle {
                    arrival_s: at,
                    entered_s: at,
                    stop_line_s: at,
                    free_flow_s: 0.0,
                    wait_s: 0.0,
                    route_key,
                    hop: 0,
                    movement,
                };
                self.stats.arrived += 1;
                let lane = if self.origins[o].backlog.is_empty() {
                    self.pick_lane(net, link, movement)
                } else {
                    None
                };
                match lane {
                    Some(lane) => {
                        self.enter_lane(net, v, link, lane, at);
                        self.stats.entered += 1;
                    }
                    None => self.origins[o].backlog.push_back(v),
                }
            }
        }
    }

    /// Lets vehicles leave `lane` during `[t0, t1]`.
    fn serve_lane(&mut self, net: &Network, lane: usize, t0: f64, t1: f64) {
        let spec = &net.lanes[lane];
        if spec.signal == u32::MAX {
            // Exit link: vehicles leave when they reach its end.
            while let Some(v) = self.lanes[lane].vehicles.front() {
                if v.stop_line_s > t1 {
                    break;
                }
                let v = *v;
                self.lanes[lane].vehicles.pop_front();
                self.record_exit(&v);
            }
            self.lanes[lane].refresh_ready();
            return;
        }
        let sig = spec.signal as usize;
        let node = &net.signals[sig];
        let headway_s = net.model.headway_s;
        loop {
            let state = &self.lanes[lane];
            let Some(&head) = state.vehicles.front() else {
                return;
            };
            let m = head.movement as usize;
            let mv = self.signals[sig].movements[m];
            let crossing_s = head
                .stop_line_s
                .max(state.next_crossing_s)
                .max(mv.serve_from_s)
                .max(t0);
            if crossing_s > t1 || crossing_s > mv.serve_until_s {
                return;
            }
            let out_link = node.movement_out_link[m];
            let next_movement =
                net.choose_movement(out_link, route_draw(head.route_key, head.hop + 1));
            // Spill-back: no room downstream, the head (and the lane behind it) waits.
            let Some(target) = self.pick_lane(net, out_link, next_movement) else {
                return;
            };
            let state = &mut self.lanes[lane];
            state.vehicles.pop_front();
            state.next_crossing_s = crossing_s + headway_s;
            state.refresh_ready();
            self.signals[sig].movements[m].last_crossing_s = crossing_s;
            self.signals[sig].crossed_wait_s +=
                (crossing_s - head.stop_line_s.max(self.refreshed_s)).max(0.0);
            let v = Vehicle {
                wait_s: head.wait_s + (crossing_s - head.stop_line_s),
                hop: head.hop + 1,
                movement: next_movement,
                ..head
            };
            self.enter_lane(net, v, out_link, target, crossing_s);
        }
    }

    fn record_exit(&mut self, v: &Vehicle) {
        let exit_s = v.stop_line_s;
        let delay_s = (v.entered_s - v.arrival_s) + v.wait_s;
        debug_assert!(
            ((exit_s - v.arrival_s - v.free_flow_s) - delay_s).abs() < 1e-6,
            "delay identity"
        );
        self.stats.exited += 1;
        self.stats.completed_travel_s += exit_s - v.entered_s;
        self.stats.completed_delay_s += delay_s;
        self.stats.completed_wait_s += v.wait_s;
    }

    /// Recomputes lane readings and reward inputs at a decision point; returns the rewards.
    fn refresh_views(&mut self, net: &Network, reward_kind: RewardKind) -> Vec<f32> {
        let now = self.tick as f64;
        let mut rewards = Vec::with_capacity(self.signals.len());
        let mut total_queue = 0usize;
        for (s, node) in net.signals.iter().enumerate() {
            let mut wait_s = 0.0;
            let mut accrued_s = std::mem::take(&mut self.signals[s].crossed_wait_s);
            let mut queue = 0usize;
            let mut incoming = 0usize;
            for (k, &lane) in node.in_lanes.iter().enumerate() {
                let q = &self.lanes[lane as usize].vehicles;
                let halted = q.partition_point(|v| v.stop_line_s <= now);
                wait_s += q.range(..halted).map(|v| now - v.stop_line_s).sum::<f64>();
                accrued_s += q
                    .range(..halted)
                    .map(|v| now - v.stop_line_s.max(self.refreshed_s))
                    .sum::<f64>();
                queue += halted;
                incoming += q.len();
                self.signals[s].readings[k] = LaneReading::from_counts(
                    q.len() as f32,
                    halted as f32,
                    net.lanes[lane as usize].storage_veh as f32,
                );
            }
            let outgoing: usize = node
                .out_links
                .iter()
                .map(|&l| self.link_vehicles(net, l))
                .sum();
            let inputs = RewardInputs {
                total_wait_s: wait_s as f32,
                // Vehicles here run at free speed until they join the queue: their delay
                // is their wait.
                total_delay_s: wait_s as f32,
                queue_veh: queue as f32,
                pressure_veh: incoming as f32 - outgoing as f32,
                // Vehicles here run at free speed until they join the queue.
                delay_veh: queue as f32,
                accrued_delay_s: accrued_s as f32,
            };
            let sig = &mut self.signals[s];
            rewards.push(reward_kind.reward(&sig.reward_inputs, &inputs));
            sig.reward_inputs = inputs;
            total_queue += queue;
        }
        self.stats.decisions += 1;
        self.refreshed_s = now;
        self.stats.queue_sum_veh += total_queue as f64;
        rewards
    }

    fn link_vehicles(&self, net: &Network, link: u32) -> usize {
        let l = &net.links[link as usize];
        (l.first_lane..l.first_lane + l.n_lanes)
            .map(|lane| self.lanes[lane as usize].vehicles.len())
            .sum()
    }
}

/// Advances a signal's sequencer by one second from `t0`, updating its movements'
/// discharge windows at every change of display.
fn advance_signal(sig: &mut SignalState, t0: f64, model: &Model) {
    let SignalState {
        seq,
        frame,
        movements,
        ..
    } = sig;
    let mut offset_ms = 0u32;
    seq.advance(Millis(1000), |seg: &Segment| {
        if seg.frame != *frame {
            let at = t0 + offset_ms as f64 * 1e-3;
            apply_display_change(*frame, seg.frame, at, movements, model);
            *frame = seg.frame;
        }
        offset_ms += seg.duration.0;
    });
}

fn apply_display_change(
    old: SignalFrame,
    new: SignalFrame,
    at: f64,
    movements: &mut [MovementState],
    model: &Model,
) {
    let mut changed = (old.green.0 ^ new.green.0) | (old.yellow.0 ^ new.yellow.0);
    while changed != 0 {
        let m = changed.trailing_zeros() as usize;
        changed &= changed - 1;
        let Some(ms) = movements.get_mut(m) else {
            continue;
        };
        let id = MovementId(m as u8);
        match (old.signal(id), new.signal(id)) {
            (Signal::Red, Signal::Green) => {
                ms.serve_from_s = at + model.first_crossing_s;
                ms.serve_until_s = f64::INFINITY;
            }
            (Signal::Green, Signal::Yellow) => ms.serve_until_s = at + model.yellow_used_s,
            (Signal::Yellow, Signal::Green) => ms.serve_until_s = f64::INFINITY,
            (_, Signal::Red) => ms.serve_until_s = ms.serve_until_s.min(at),
            _ => {}
        }
    }
}

impl Env for EmbeddedEnv {
    fn signals(&self) -> &[SignalSpec] {
        &self.specs
    }

    fn decision_interval(&self) -> Millis {
        self.decision_interval
    }

    fn reward_kind(&self) -> RewardKind {
        self.reward_kind
    }

    fn reset(&mut self, seed: u64) -> Result<(), EnvError> {
        self.reset_state(seed);
        Ok(())
    }

    fn observe(&self, signal: usize, out: &mut [f32]) -> Result<(), EnvError> {
        let (spec, sig) = self.signal_pair(signal)?;
        spec.layout
            .write(&sig.readings, &sig.seq, out)
            .map_err(|source| EnvError::Observation { signal, source })
    }

    fn sequencer(&self, signal: usize) -> &Sequencer {
        &self.state.signals[signal].seq
    }

    fn detectors(&self, signal: usize) -> Vec<MovementDetector> {
        let Some(node) = self.net.signals.get(signal) else {
            return Vec::new();
        };
        let s = &self.state;
        let now = s.tick as f64;
        let zone_s = self.net.model.detector_zone_s;
        let mut detectors = vec![MovementDetector::default(); node.movement_lanes.len()];
        // One pass over the approach lanes; a shared lane feeds several movements.
        let mut in_zone = 0u32;
        for &lane in &node.in_lanes {
            for v in &s.lanes[lane as usize].vehicles {
                let Some(d) = detectors.get_mut(v.movement as usize) else {
                    continue;
                };
                d.upstream_veh += 1.0;
                if v.stop_line_s <= now {
                    d.queue_veh += 1.0;
                }
                if v.stop_line_s - zone_s <= now {
                    in_zone |= 1 << v.movement;
                }
            }
        }
        let movements = &s.signals[signal].movements;
        for (m, d) in detectors.iter_mut().enumerate() {
            let out = node.movement_out_link[m];
            if out != u32::MAX {
                d.downstream_veh = s.link_vehicles(&self.net, out) as f32;
                d.downstream_storage_veh = self.net.links[out as usize].storage_veh as f32;
            }
            d.upstream_length_m = node.movement_lanes[m]
                .iter()
                .map(|&l| {
                    (self.net.lanes[l as usize].storage_veh as f64 * self.net.model.jam_spacing_m)
                        as f32
                })
                .fold(0.0, f32::max);
            d.call = in_zone & (1 << m) != 0;
            d.gap_s = if d.call {
                0.0
            } else {
                ((now - movements[m].last_crossing_s) as f32).min(GAP_NONE_S)
            };
        }
        detectors
    }

    fn now(&self) -> Millis {
        // One tick is one second; past u32 milliseconds (49.7 days, beyond any episode a
        // scenario allows) the clock stops.
        Millis(self.state.tick.saturating_mul(1000))
    }

    fn step(&mut self, actions: &[u8]) -> Result<StepOutcome, EnvError> {
        if actions.len() != self.specs.len() {
            return Err(EnvError::ActionCount {
                expected: self.specs.len(),
                got: actions.len(),
            });
        }
        let started = Instant::now();
        let responses = self
            .state
            .signals
            .iter_mut()
            .zip(actions)
            .map(|(sig, &a)| sig.seq.request(a))
            .collect();
        for _ in 0..self.decision_interval.0 / 1000 {
            self.state.tick(&self.net, &self.profile);
        }
        let rewards = self.state.refresh_views(&self.net, self.reward_kind);
        self.wall += started.elapsed();
        Ok(StepOutcome {
            rewards,
            responses,
            done: self.now() >= self.episode,
        })
    }

    fn metrics(&self) -> EpisodeMetrics {
        let s = &self.state;
        let now = s.tick as f64;
        let mut delay_s = s.stats.completed_delay_s;
        let mut wait_s = s.stats.completed_wait_s;
        for (lane, state) in s.lanes.iter().enumerate() {
            let at_signal = self.net.lanes[lane].signal != u32::MAX;
            for v in &state.vehicles {
                let queued = if at_signal {
                    (now - v.stop_line_s).max(0.0)
                } else {
                    0.0
                };
                delay_s += (v.entered_s - v.arrival_s) + v.wait_s + queued;
                wait_s += v.wait_s + queued;
            }
        }
        let mut backlog = 0u64;
        for o in &s.origins {
            backlog += o.backlog.len() as u64;
            delay_s += o.backlog.iter().map(|v| now - v.arrival_s).sum::<f64>();
        }
        let per = |x: f64, n: u64| if n == 0 { 0.0 } else { x / n as f64 };
        EpisodeMetrics {
            mean_delay_s: per(delay_s, s.stats.arrived),
            mean_wait_s: per(wait_s, s.stats.arrived),
            mean_travel_time_s: per(s.stats.completed_travel_s, s.stats.exited),
            throughput_veh: s.stats.exited,
            backlog_veh: backlog,
            mean_queue_veh: per(s.stats.queue_sum_veh, s.stats.decisions),
            sim_seconds: now,
            wall_seconds: self.wall.as_secs_f64(),
            ..EpisodeMetrics::default()
        }
    }
}

impl EmbeddedEnv {
    fn signal_pair(&self, signal: usize) -> Result<(&SignalSpec, &SignalState), EnvError> {
        match (self.specs.get(signal), self.state.signals.get(signal)) {
            (Some(spec), Some(sig)) => Ok((spec, sig)),
            _ => Err(EnvError::UnknownSignal {
                signal,
                count: self.specs.len(),
            }),
        }
    }
}

#[cfg(test)]
mod tests;
