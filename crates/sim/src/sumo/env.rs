//! [`SumoEnv`]: greenwave's [`Env`] over a SUMO child process.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use greenwave_core::observation::MAX_LANE_FRACTION;
use greenwave_core::{
    LaneReading, Millis, MovementSet, ObsLayout, PhaseId, ProgramClock, Response, RewardInputs,
    RewardKind, Sequencer,
};

use super::approach::{approach_zone, Feeders, ZoneLane, APPROACH_RANGE_M};
use super::model::{build_models, movements_at, ModelOptions, NetModels, StaticSignal, TlsModel};
use super::net::{NetFile, NetLane};
use super::process::{SumoProcess, WorkDir};
use super::readings::{number, Answer, LaneRole, ReadMode, ReadPlan, Slot, LOOP_PREFIX};
use super::traci::{cmd, var, Message, Reply, SubscriptionResult, TraciError, Value};
use super::waits::{
    junction_of_crossing, CrossingCount, CrossingCounts, DelayAccrual, PendingWaits,
    VehicleMeasure, VehicleWait, WaitWatch, EXIT_RANGE_M,
};
use super::{clock, find_sumo_binary, tripinfo, SumoConfig, SumoError};
use crate::env::{
    lane_phase_incidence, Env, EnvError, EpisodeMetrics, MovementDetector, SignalSpec, StepOutcome,
    StepStarted,
};
use crate::GAP_NONE_S;

/// Road space one queued vehicle takes (m): SUMO's default car, 5 m long with a 2.5 m gap.
pub const VEHICLE_SPACING_M: f64 = 7.5;

/// The movements each observed incoming lane of `m` carries (a shared lane, several), then
/// those each observed pedestrian crossing carries: the observation's lane order.
fn lane_movements(m: &TlsModel) -> Vec<MovementSet> {
    let lanes = m
        .in_lanes
        .iter()
        .map(|l| movements_at(&m.movement_in_lanes, l));
    let crossings = m
        .crossings
        .iter()
        .map(|c| movements_at(&m.movement_crossings, c));
    lanes.chain(crossings).collect()
}

/// How many pedestrians fill a pedestrian zone (reading 1): as many as the vehicles that
/// fill a [`STOP_BAR_ZONE_M`] stop-bar zone, since the reward weighs a pedestrian's second
/// like a vehicle's (`--pedestrian-weight`, 1 by default).
pub const PEDESTRIANS_PER_ZONE: f64 = STOP_BAR_ZONE_M / VEHICLE_SPACING_M;

/// A crossing's two pedestrian zones: at the kerb (on a walking area, the crossing next)
/// and on the crossing; each as those there (density) and those standing (queue), per
/// [`PEDESTRIANS_PER_ZONE`].
fn crossing_readings(c: CrossingCount) -> [LaneReading; 2] {
    let per_zone = |n: u32| (f64::from(n) / PEDESTRIANS_PER_ZONE) as f32;
    [
        LaneReading {
            density: per_zone(c.at_kerb),
            queue: per_zone(c.at_kerb_standing),
        },
        LaneReading {
            density: per_zone(c.on),
            queue: per_zone(c.on_standing),
        },
    ]
}

/// Per signal, per movement of `models`: the indices (per `signal_crossings`, as
/// [`CrossingCounts::for_signals`] gives them) of the observed crossings the movement
/// serves. A crossing not observed (`--pedestrian-zones off`) has none.
fn crossings_by_movement(
    models: &[TlsModel],
    signal_crossings: &[Vec<usize>],
) -> Vec<Vec<Vec<usize>>> {
    models
        .iter()
        .zip(signal_crossings)
        .map(|(m, counted)| {
            m.movement_crossings
                .iter()
                .map(|ids| {
                    ids.iter()
                        .filter_map(|id| m.crossings.iter().position(|c| c == id))
                        .filter_map(|k| counted.get(k).copied())
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// Whether a pedestrian is at the kerb of one of the crossings `of` (indices into
/// `counts`), about to step onto it: a push button's call, which says that someone waits,
/// not how many.
fn pedestrian_call(counts: &[CrossingCount], of: &[usize]) -> bool {
    of.iter()
        .filter_map(|&c| counts.get(c))
        .any(|c| c.at_kerb > 0)
}

/// Seconds of free-flow travel before the stop line that a lane's detector zone covers:
/// the loop sits that far upstream (at the lane's speed limit), like SUMO's own actuated
/// detectors and the embedded simulator's `detector_zone_s`.
pub const DETECTOR_ZONE_S: f64 = 3.0;

/// Speed assumed for a lane without a speed limit in the net (m/s, 50 km/h).
const DEFAULT_SPEED_MPS: f64 = 13.89;

/// Where a lane's loop sits: `DETECTOR_ZONE_S` of travel before the stop line, at least
/// 1 m and at most 1 m short of the lane's start. Returns (setback m, zone travel s).
fn loop_setback(length_m: f64, speed_mps: Option<f64>) -> (f64, f64) {
    let speed = speed_mps.unwrap_or(DEFAULT_SPEED_MPS);
    let setback = (speed * DETECTOR_ZONE_S).min(length_m - 1.0).max(1.0);
    (setback, setback / speed)
}

/// The shortest `--waiting-time-memory` the backend sets (s).
const WAIT_MEMORY_MIN_S: f64 = 1000.0;

/// Per-lane readings, refreshed from the subscriptions after each step.
#[derive(Clone, Debug, Default)]
struct Lanes {
    ids: Vec<String>,
    index: HashMap<String, usize>,
    storage_veh: Vec<f32>,
    /// What is read of each lane.
    role: Vec<LaneRole>,
    vehicles: Vec<f32>,
    halting: Vec<f32>,
    mean_speed_mps: Vec<f32>,
    /// Per lane: the vehicles on it within the wait subscriptions' range.
    vehicle_waits: Vec<Vec<VehicleWait>>,
    /// Per lane: its speed limit (m/s).
    limit_mps: Vec<f32>,
    since_detection_s: Vec<f32>,
    /// Per lane: the loop's setback (m) and the free-flow travel from it to the stop line (s).
    loop_at: Vec<(f64, f32)>,
}

impl Lanes {
    fn add(&mut self, id: &str, lane: Option<&NetLane>, role: LaneRole) -> usize {
        if let Some(&i) = self.index.get(id) {
            self.role[i] = self.role[i].max(role);
            return i;
        }
        let i = self.ids.len();
        self.ids.push(id.to_string());
        self.index.insert(id.to_string(), i);
        let length_m = lane.map_or(0.0, |l| l.length_m);
        self.storage_veh
            .push((length_m / VEHICLE_SPACING_M).max(1.0) as f32);
        let speed_mps = lane.and_then(|l| l.speed_mps);
        self.limit_mps
            .push(speed_mps.unwrap_or(DEFAULT_SPEED_MPS).max(0.1) as f32);
        let (setback_m, zone_s) = loop_setback(length_m, speed_mps);
        self.loop_at.push((setback_m, zone_s as f32));
        self.role.push(role);
        i
    }

    fn reset_readings(&mut self) {
        let n = self.ids.len();
        for v in [
            &mut self.vehicles,
            &mut self.halting,
            &mut self.mean_speed_mps,
            &mut self.since_detection_s,
        ] {
            v.clear();
            v.resize(n, 0.0);
        }
        self.vehicle_waits.clear();
        self.vehicle_waits.resize(n, Vec::new());
    }

    fn sum(&self, lanes: &[usize], of: &[f32]) -> f32 {
        lanes.iter().map(|&l| of[l]).sum()
    }

    /// The readings of an approach zone.
    fn zone_reading(&self, zone: &[(usize, ZoneLane)]) -> ZoneReading {
        let mut r = ZoneReading::default();
        for (i, z) in zone {
            let (v, h) = z.in_zone(self.vehicles[*i], self.halting[*i]);
            let w: f32 = self.vehicle_waits[*i]
                .iter()
                .filter(|x| z.holds(x.pos_m))
                .map(|x| x.wait_s)
                .sum();
            // SUMO's mean speed counts the halted vehicles at 0: the moving ones' mean is
            // the rest. Halted vehicles are all delay, moving ones their slowdown.
            let (n, halted) = (self.vehicles[*i], self.halting[*i]);
            let moving_mps = if n > halted {
                self.mean_speed_mps[*i] * n / (n - halted)
            } else {
                self.limit_mps[*i]
            };
            let slowdown = (1.0 - moving_mps / self.limit_mps[*i]).clamp(0.0, 1.0);
            r.vehicles += v;
            r.halting += h;
            r.waiting_s += w;
            r.storage_veh += z.storage_veh();
            r.delay_veh += h + (v - h).max(0.0) * slowdown;
        }
        r
    }

    /// An approach zone's readings split at [`STOP_BAR_ZONE_M`]: (stop-bar zone, advance
    /// zone). Vehicles are placed by their positions (from the context subscription);
    /// halted ones stand from the stop line back, so the stop-bar zone holds the first
    /// of them up to its storage.
    fn zone_split(&self, zone: &[(usize, ZoneLane)]) -> [LaneReading; 2] {
        let z = self.zone_reading(zone);
        let mut near = 0.0f32;
        for (i, zl) in zone {
            near += self.vehicle_waits[*i]
                .iter()
                .filter(|v| zl.holds(v.pos_m))
                .filter(|v| zl.offset_m + (zl.length_m - v.pos_m) < STOP_BAR_ZONE_M)
                .count() as f32;
        }
        let zone_m: f64 = zone.iter().map(|(_, zl)| zl.covered_m).sum();
        let near_store = (STOP_BAR_ZONE_M.min(zone_m) / VEHICLE_SPACING_M).max(1.0) as f32;
        let far_store = (z.storage_veh - near_store).max(1.0);
        let near = near.min(z.vehicles);
        // Halted vehicles stand from the stop line back, but never more of them in the
        // stop-bar zone than vehicles placed there.
        let near_halted = z.halting.min(near_store).min(near);
        [
            LaneReading::from_counts(near, near_halted, near_store),
            LaneReading::from_counts(
                (z.vehicles - near).max(0.0),
                (z.halting - near_halted).max(0.0),
                far_store,
            ),
        ]
    }
}

/// What an approach zone holds.
#[derive(Clone, Copy, Debug, Default)]
struct ZoneReading {
    vehicles: f32,
    halting: f32,
    /// Σ accumulated waiting time (or time loss, per the reward) of the zone's vehicles (s).
    waiting_s: f32,
    storage_veh: f32,
    /// Σ (1 − speed / limit) over the zone's vehicles.
    delay_veh: f32,
}

/// One signal's lanes as indices into [`Lanes`].
#[derive(Clone, Debug)]
struct SignalLanes {
    incoming: Vec<usize>,
    /// Per incoming lane, its approach zone (observations).
    approach: Vec<Vec<(usize, ZoneLane)>>,
    /// The union of the approach zones, each lane once (rewards).
    zone: Vec<(usize, ZoneLane)>,
    outgoing: Vec<usize>,
    movement_in: Vec<Vec<usize>>,
    movement_out: Vec<Vec<usize>>,
}

impl SignalLanes {
    /// Registers the lanes of signal `m` in `lanes`: its stop-line lanes with their
    /// approach zones, and its outgoing lanes.
    fn new(net: &NetFile, feeders: &Feeders, m: &TlsModel, lanes: &mut Lanes) -> Self {
        let mut add = |ids: &[String], role: LaneRole| -> Vec<usize> {
            ids.iter()
                .map(|id| lanes.add(id, net.lanes.get(id), role))
                .collect()
        };
        let incoming = add(&m.in_lanes, LaneRole::StopLine);
        let outgoing = add(&m.out_lanes, LaneRole::Outgoing);
        let movement_in = m
            .movement_in_lanes
            .iter()
            .map(|l| add(l, LaneRole::StopLine))
            .collect();
        let movement_out = m
            .movement_out_lanes
            .iter()
            .map(|l| add(l, LaneRole::Outgoing))
            .collect();
        let approach: Vec<Vec<(usize, ZoneLane)>> = m
            .in_lanes
            .iter()
            .map(|id| {
                approach_zone(net, feeders, id, APPROACH_RANGE_M)
                    .into_iter()
                    .map(|z| {
                        (
                            lanes.add(&z.lane, net.lanes.get(&z.lane), LaneRole::Approach),
                            z,
                        )
                    })
                    .collect()
            })
            .collect();
        let mut zone: Vec<(usize, ZoneLane)> = Vec::new();
        for (i, z) in approach.iter().flatten() {
            match zone.iter_mut().find(|(j, _)| j == i) {
                Some((_, have)) if have.covered_m < z.covered_m => *have = z.clone(),
                Some(_) => {}
                None => zone.push((*i, z.clone())),
            }
        }
        SignalLanes {
            incoming,
            approach,
            zone,
            outgoing,
            movement_in,
            movement_out,
        }
    }
}

/// greenwave's [`Env`] over SUMO: every traffic light of the network is a signal driven by
/// its own [`Sequencer`], which sets SUMO's state (`setRedYellowGreenState`) on every
/// display change; SUMO's static programs are not used (see
/// [`run_static_program`](SumoEnv::run_static_program) for that).
///
/// * Observations: per signal, for each incoming lane the vehicle count and halting count
///   in its approach zone (the lane and its unsignalised feeders up to
///   [`APPROACH_RANGE_M`], see [`super::approach`]) over the zone's storage (`length /
///   7.5 m`), split at [`STOP_BAR_ZONE_M`]; then for each pedestrian crossing the light
///   controls, the pedestrians at its kerb and on it, standing ones as the queue, per
///   [`PEDESTRIANS_PER_ZONE`]; in greenwave-core's [`ObsLayout`].
/// * Rewards from [`RewardInputs`] over the union of the approach zones: the vehicles'
///   summed accumulated waiting time or time loss (a context subscription, see
///   [`super::waits`]),
///   halting vehicles, vehicles minus those on the outgoing lanes (pressure), and the delay
///   rate Σ (1 − speed / limit).
/// * Detectors ([`Env::detectors`]): per movement, halting vehicles (queue) and vehicles on
///   its incoming lanes (upstream; a lane shared by two movements counts for both), on its
///   outgoing lanes (downstream) with their storage; `gap_s` from an induction loop the
///   backend places 1 m before each incoming lane's stop line (SUMO's
///   `timeSinceDetection`, the lowest over the movement's lanes); `call` when any vehicle
///   is on an incoming lane.
/// * One decision interval costs one round trip: per display change a message of
///   `setRedYellowGreenState` and one of `simulationStep(t_change)`, then one of the
///   readings (batched getters, or subscriptions per [`ReadMode`]), all sent together.
pub struct SumoEnv {
    cfg: SumoConfig,
    binary: PathBuf,
    models: Vec<TlsModel>,
    /// Lights left on their own program.
    on_program: Vec<StaticSignal>,
    /// Lights switched to `cfg.program` at the start of each episode.
    program_switches: Vec<String>,
    specs: Vec<SignalSpec>,
    seqs: Vec<Sequencer>,
    lanes: Lanes,
    signal_lanes: Vec<SignalLanes>,
    reads: ReadPlan,
    waits: WaitWatch,
    /// The vehicles waiting to be inserted on the approach zones' edges.
    pending: PendingWaits,
    /// Per signal: indices of its zones' edges in `pending`.
    signal_pending: Vec<Vec<usize>>,
    sim: Option<SumoProcess>,
    /// Last state string sent per signal (empty: none yet, SUMO runs its program).
    sent: Vec<String>,
    /// Every state sent this episode, per signal: (ms since the episode began, state).
    history: Vec<Vec<(u64, String)>>,
    now_ms: u64,
    episode_ms: u64,
    interval_ms: u32,
    seed: u64,
    prev_inputs: Vec<RewardInputs>,
    /// What the delay-accrued reward follows (`None` for the other rewards).
    accrual: Option<Accrual>,
    /// The pedestrians at every observed crossing.
    crossings: CrossingCounts,
    /// Per signal: indices of its observed crossings in `crossings`.
    signal_crossings: Vec<Vec<usize>>,
    /// Per signal, per movement: indices in `crossings` of the observed crossings it
    /// serves (its pedestrians' calls, [`SumoEnv::detectors`]).
    movement_crossings: Vec<Vec<Vec<usize>>>,
    queue_sum: f64,
    queue_samples: u64,
    metrics: EpisodeMetrics,
    wall: Duration,
    finished: bool,
    /// The decision interval sent to SUMO whose replies are not read yet.
    in_flight: Option<InFlight>,
    /// Per signal, its program as a clock on the episode's time base (0 at `begin_s`) when
    /// the observation has program-clock lanes (`None` there: a program with nothing to
    /// follow, its clock lanes read 0).
    clocks: Vec<Option<ProgramClock>>,
}

/// A decision interval [`Env::step_begin`] sent, waiting for [`Env::step_end`].
struct InFlight {
    target_s: f64,
    responses: Vec<Response>,
    sent_at: Instant,
}

/// What the messages of a decision interval are about (error context).
const STEP_CONTEXT: &str = "simulating a decision interval";

impl SumoEnv {
    /// Reads the network, builds every traffic light's plan, and starts SUMO for the first
    /// episode (seed `cfg.seed`).
    pub fn new(cfg: SumoConfig) -> Result<Self, SumoError> {
        cfg.validate()?;
        let binary = find_sumo_binary(cfg.sumo_binary.as_deref())?;
        let net = cfg.read_net()?;
        let NetModels {
            mut models,
            on_program,
        } = build_models(
            &net,
            ModelOptions {
                program: cfg.program.as_deref(),
                timing: &cfg.timing,
                step_ms: cfg.step_ms(),
            },
        )?;
        if !cfg.pedestrian_zones {
            // Nothing observes them then: the layout, incidence and subscriptions are those
            // of before pedestrian zones existed. Nor does a pedestrian call, so a walk
            // stage answers to its vehicles again, as before walk stages were told apart.
            for m in &mut models {
                m.crossings.clear();
                m.walk_stages.iter_mut().for_each(|w| *w = None);
            }
        }
        let program_switches = program_switches(&net, cfg.program.as_deref());
        let (lanes, signal_lanes) = lanes_of(&net, &models);
        let specs = signal_specs(&models, cfg.program_clock)?;
        let clocks = program_clocks(&net, &models, &cfg)?;
        let interval_ms = cfg.decision_interval().0;
        let episode_ms = u64::from(cfg.episode().0);
        let seqs = new_sequencers(&models)?;
        let n = models.len();
        let ZoneWaits {
            waits,
            pending_edges,
            signal_pending,
            accrual,
            crossings,
            signal_crossings,
        } = ZoneWaits::new(&cfg, &net, &models, &lanes, &signal_lanes);
        let reads = ReadPlan::new(
            lanes
                .ids
                .iter()
                .map(String::as_str)
                .zip(lanes.role.iter().copied()),
            &pending_edges,
        );
        let movement_crossings = crossings_by_movement(&models, &signal_crossings);
        let mut env = SumoEnv {
            seed: cfg.seed,
            cfg,
            binary,
            models,
            on_program,
            program_switches,
            specs,
            seqs,
            lanes,
            signal_lanes,
            reads,
            waits,
            pending: PendingWaits::new(pending_edges.len()),
            signal_pending,
            sim: None,
            sent: vec![String::new(); n],
            history: vec![Vec::new(); n],
            now_ms: 0,
            episode_ms,
            interval_ms,
            prev_inputs: vec![RewardInputs::default(); n],
            accrual,
            crossings,
            signal_crossings,
            movement_crossings,
            queue_sum: 0.0,
            queue_samples: 0,
            metrics: EpisodeMetrics::default(),
            wall: Duration::ZERO,
            finished: false,
            in_flight: None,
            clocks,
        };
        env.start(env.seed)?;
        Ok(env)
    }

    /// Episode length (`step` reports `done` from the first decision point at or after it).
    pub fn episode(&self) -> Millis {
        Millis(u32::try_from(self.episode_ms).unwrap_or(u32::MAX))
    }

    /// The models (plans, links, lanes) of the signals, in signal order.
    pub fn models(&self) -> &[TlsModel] {
        &self.models
    }

    /// The traffic lights left on their own program, with the reason for each.
    pub fn on_program(&self) -> &[StaticSignal] {
        &self.on_program
    }

    /// Every state string sent to signal `signal` this episode, with the time it was sent
    /// (ms since the episode began); empty for an unknown signal.
    pub fn state_history(&self, signal: usize) -> &[(u64, String)] {
        self.history.get(signal).map_or(&[], Vec::as_slice)
    }

    /// The configuration.
    pub fn config(&self) -> &SumoConfig {
        &self.cfg
    }

    /// SUMO's process id while an episode runs (for monitoring, and for tests that kill it).
    pub fn sumo_pid(&self) -> Option<u32> {
        self.sim.as_ref().map(|s| s.pid())
    }

    /// SUMO's version string from the handshake.
    pub fn sumo_version(&self) -> Option<&str> {
        self.sim.as_ref().map(|s| s.version.as_str())
    }

    /// Asks SUMO for signal `signal`'s current red/yellow/green state string (one round
    /// trip; for checks and debugging, not for control).
    pub fn sumo_state(&mut self, signal: usize) -> Result<String, SumoError> {
        let id = self
            .models
            .get(signal)
            .map(|m| m.id.clone())
            .ok_or_else(|| SumoError::Config(format!("no signal {signal}")))?;
        let mut m = Message::new();
        m.get(cmd::GET_TL, var::TL_RED_YELLOW_GREEN_STATE, &id);
        match self.sim_mut()?.call(&m, "reading a signal state")?.pop() {
            Some(Reply::Value(Value::Str(s))) => Ok(s),
            other => Err(SumoError::Traci {
                context: "reading a signal state".into(),
                source: TraciError::Protocol(format!("unexpected reply {other:?}")),
            }),
        }
    }

    /// Writes the signal states greenwave showed this episode as SUMO static programs
    /// (an additional file, program id `greenwave-replay`): `sumo -c ... --additional-files
    /// FILE` then replays the episode's signals without greenwave, for inspection in
    /// sumo-gui or for timing SUMO alone on exactly the same traffic.
    pub fn write_replay_programs(&self, path: &std::path::Path) -> Result<(), SumoError> {
        let mut xml = String::from("<additional>\n");
        for (model, h) in self.models.iter().zip(&self.history) {
            if h.is_empty() {
                continue;
            }
            xml.push_str(&format!(
                "  <tlLogic id=\"{}\" type=\"static\" programID=\"greenwave-replay\" \
                 offset=\"0\">\n",
                quick_xml::escape::escape(model.id.as_str()),
            ));
            // Programs run from time 0: hold the first state until the episode begins.
            if self.cfg.begin_s > 0.0 {
                xml.push_str(&format!(
                    "    <phase duration=\"{}\" state=\"{}\"/>\n",
                    fmt_s(self.cfg.begin_s),
                    h[0].1
                ));
            }
            for (k, (at_ms, state)) in h.iter().enumerate() {
                let until_ms = h.get(k + 1).map_or(self.now_ms.max(at_ms + 1), |n| n.0);
                xml.push_str(&format!(
                    "    <phase duration=\"{}\" state=\"{state}\"/>\n",
                    fmt_s((until_ms - at_ms) as f64 / 1000.0)
                ));
            }
            xml.push_str("  </tlLogic>\n");
        }
        xml.push_str("</additional>\n");
        std::fs::write(path, xml).map_err(|source| SumoError::Io {
            what: format!("writing {}", path.display()),
            source,
        })
    }

    /// Whether the episode has ended (SUMO closed, metrics final).
    pub fn finished(&self) -> bool {
        self.finished
    }

    fn sumo_args(&self, seed: u64, work: &WorkDir) -> Result<Vec<OsString>, SumoError> {
        let loops = work.file("greenwave-loops.add.xml");
        let mut xml = String::from("<additional>\n");
        for (i, id) in self.lanes.ids.iter().enumerate() {
            if self.lanes.role[i] != LaneRole::StopLine {
                continue;
            }
            xml.push_str(&format!(
                "  <inductionLoop id=\"{}\" lane=\"{}\" pos=\"-{:.2}\" \
                 period=\"86400\" file=\"NUL\" friendlyPos=\"true\"/>\n",
                quick_xml::escape::escape(format!("{LOOP_PREFIX}{id}")),
                quick_xml::escape::escape(id.as_str()),
                self.lanes.loop_at[i].0,
            ));
        }
        xml.push_str("</additional>\n");
        std::fs::write(&loops, xml).map_err(|source| SumoError::Io {
            what: format!("writing {}", loops.display()),
            source,
        })?;
        let join = |ps: &mut dyn Iterator<Item = &PathBuf>| -> OsString {
            let mut s = OsString::new();
            for (i, p) in ps.enumerate() {
                if i > 0 {
                    s.push(",");
                }
                s.push(p.as_os_str());
            }
            s
        };
        let end_s = self.cfg.begin_s
            + self.episode_steps() as f64 * self.interval_ms as f64 / 1000.0
            + self.cfg.step_length_s;
        let mut args: Vec<OsString> = vec!["--net-file".into(), self.cfg.net.clone().into()];
        // A scenario may bring its demand in additional files only (SUMO's game `square`).
        if !self.cfg.routes.is_empty() {
            args.extend(["--route-files".into(), join(&mut self.cfg.routes.iter())]);
        }
        args.extend([
            "--additional-files".into(),
            join(&mut self.cfg.additional.iter().chain(std::iter::once(&loops))),
            "--begin".into(),
            fmt_s(self.cfg.begin_s).into(),
            // One step past the last decision, so SUMO is still there to be closed.
            "--end".into(),
            fmt_s(end_s).into(),
            "--step-length".into(),
            fmt_s(self.cfg.step_length_s).into(),
            "--seed".into(),
            sumo_seed(seed).to_string().into(),
            "--tripinfo-output".into(),
            work.file("tripinfo.xml").into(),
            "--tripinfo-output.write-unfinished".into(),
            "--statistic-output".into(),
            work.file("statistics.xml").into(),
            "--no-step-log".into(),
            "--duration-log.disable".into(),
        ]);
        // A vehicle's accumulated waiting time (the wait-delta reward, see `super::waits`)
        // counts only the last `--waiting-time-memory` seconds, 100 by default: a vehicle
        // starved for longer would stop costing more. Remember the whole episode instead,
        // unless the user chose.
        if !self
            .cfg
            .extra_args
            .iter()
            .any(|a| a.starts_with("--waiting-time-memory"))
        {
            args.push("--waiting-time-memory".into());
            args.push(fmt_s(self.cfg.seconds.max(WAIT_MEMORY_MIN_S).ceil()).into());
        }
        args.extend(self.cfg.extra_args.iter().map(OsString::from));
        Ok(args)
    }

    fn episode_steps(&self) -> u64 {
        self.episode_ms.div_ceil(self.interval_ms as u64).max(1)
    }

    /// Starts a SUMO process for episode `seed`: once more on a fresh port if the first
    /// start lost a race for its port (see [`SumoProcess::lost_startup_race`]).
    fn launch(&self, seed: u64) -> Result<SumoProcess, SumoError> {
        let mut attempt = 0;
        loop {
            let work = WorkDir::new()?;
            let args = self.sumo_args(seed, &work)?;
            let started = SumoProcess::start(
                &self.binary,
                &args,
                work,
                Duration::from_secs_f64(self.cfg.startup_timeout_s),
                Duration::from_secs_f64(self.cfg.reply_timeout_s),
                self.cfg.own_process_group,
            );
            match started {
                Err(e) if attempt < 2 && SumoProcess::lost_startup_race(&e) => attempt += 1,
                other => return other,
            }
        }
    }

    /// Starts SUMO for a new episode: subscriptions, sanity checks, first readings.
    fn start(&mut self, seed: u64) -> Result<(), SumoError> {
        let t0 = Instant::now();
        self.sim = None; // stops the previous SUMO first
        self.in_flight = None;
        // A start that fails part-way must not leave the last episode looking finished,
        // with its metrics: nothing runs until a reset succeeds.
        self.finished = false;
        self.metrics = EpisodeMetrics::default();
        let mut sim = self.launch(seed)?;
        let mut switches = Message::new();
        for id in &self.program_switches {
            switches.set_tl_program(id, self.cfg.program.as_deref().unwrap_or_default());
        }
        if !switches.is_empty() {
            sim.exchange(&[switches], "switching lights to the chosen --program")?;
        }
        let subscribing = self.cfg.read_mode == ReadMode::Subscriptions;
        let messages = self.first_messages(subscribing);
        let mut replies = sim.exchange(&messages, "checking signals, first readings")?;
        let waits = subscribed(replies.pop().unwrap_or_default());
        let readings = replies.pop().unwrap_or_default();
        let states = replies.pop().unwrap_or_default();
        self.check_link_counts(&states)?;
        self.lanes.reset_readings();
        self.pending.clear();
        if subscribing {
            self.store_readings(Answer::Subscriptions(&subscribed(readings)))?;
        } else {
            self.store_readings(Answer::Gets(&readings))?;
        }
        self.store_waits(&waits)?;
        self.sim = Some(sim);
        self.seqs = new_sequencers(&self.models)?;
        self.clear_episode(seed);
        self.wall = t0.elapsed();
        Ok(())
    }

    /// The messages of an episode's first exchange: every light's state (to check its link
    /// count), the first readings (subscribing to them, or getting them), and the
    /// subscriptions of the vehicles' waits.
    fn first_messages(&self, subscribing: bool) -> Vec<Message> {
        let mut checks = Message::new();
        for model in &self.models {
            checks.get(cmd::GET_TL, var::TL_RED_YELLOW_GREEN_STATE, &model.id);
        }
        let second = if subscribing {
            self.reads.subscribe_message()
        } else {
            self.reads.get_message().clone()
        };
        // An empty message would get no reply to pair with (a net whose lights all stay
        // on their programs has no signal to check and no lane to read).
        [checks, second, self.waits.subscribe_message()]
            .into_iter()
            .map(|mut m| {
                if m.is_empty() {
                    m.get(cmd::GET_SIM, var::SIM_TIME, "");
                }
                m
            })
            .collect()
    }

    /// Checks that SUMO runs every light with the links the net file gives it (`states`:
    /// the replies of [`SumoEnv::first_messages`]' state checks).
    fn check_link_counts(&self, states: &[Reply]) -> Result<(), SumoError> {
        for (model, r) in self.models.iter().zip(states) {
            let n = match r {
                Reply::Value(Value::Str(state)) => state.len(),
                other => {
                    return Err(SumoError::Traci {
                        context: format!("reading the state of {}", model.id),
                        source: TraciError::Protocol(format!("unexpected reply {other:?}")),
                    })
                }
            };
            if n != model.n_links() {
                return Err(SumoError::Tls {
                    tls: model.id.clone(),
                    message: format!(
                        "SUMO reports {n} links, the net file {} (was the program replaced \
                         by a file greenwave did not read?)",
                        model.n_links()
                    ),
                });
            }
        }
        Ok(())
    }

    /// The episode's own state back to its start: nothing sent, clock, counters and
    /// metrics at zero, the rewards' previous inputs from the first readings.
    fn clear_episode(&mut self, seed: u64) {
        for s in &mut self.sent {
            s.clear();
        }
        for h in &mut self.history {
            h.clear();
        }
        self.now_ms = 0;
        self.seed = seed;
        self.queue_sum = 0.0;
        self.queue_samples = 0;
        self.metrics = EpisodeMetrics::default();
        self.finished = false;
        if let Some(a) = &mut self.accrual {
            a.clear();
        }
        self.prev_inputs = (0..self.models.len())
            .map(|s| self.reward_inputs(s))
            .collect();
    }

    /// Stores one reading; returns SUMO's clock when that is what it was.
    fn store(
        lanes: &mut Lanes,
        pending: &mut PendingWaits,
        slot: Slot,
        value: &Value,
    ) -> Result<Option<f64>, String> {
        let reading = || number(value, "a reading").map(|x| x as f32);
        // Counts and times are never negative (SUMO's -1 means "none", never for these).
        let count = || match reading()? {
            x if x < 0.0 => Err(format!("negative count or time {x}")),
            x => Ok(x),
        };
        match slot {
            Slot::Pending(e) => {
                let Value::StrList(ids) = value else {
                    return Err(format!("pending vehicles: expected a list, got {value:?}"));
                };
                pending.ids[e].clone_from(ids);
            }
            Slot::Vehicles(i) => lanes.vehicles[i] = count()?,
            Slot::Halting(i) => lanes.halting[i] = count()?,
            Slot::MeanSpeed(i) => lanes.mean_speed_mps[i] = reading()?,
            Slot::SinceDetection(i) => lanes.since_detection_s[i] = count()?,
            Slot::Time => return Ok(Some(number(value, "SUMO's clock")?)),
        }
        Ok(None)
    }

    /// Stores the readings in `answer`; returns SUMO's clock if it was among them.
    fn store_readings(&mut self, answer: Answer<'_>) -> Result<Option<f64>, SumoError> {
        let mut time = None;
        let (lanes, pending) = (&mut self.lanes, &mut self.pending);
        self.reads
            .apply(answer, |slot, value| {
                time = Self::store(lanes, pending, slot, value)?.or(time);
                Ok(())
            })
            .map_err(malformed)?;
        if let Some(t) = time {
            self.pending.note(t);
        }
        Ok(time)
    }

    /// Stores the vehicles' waits from the context results among `subs`.
    fn store_waits(&mut self, subs: &[SubscriptionResult]) -> Result<(), SumoError> {
        let lanes = &mut self.lanes;
        let (crossing, walkways) = match self.accrual.as_mut() {
            Some(a) => (&mut a.crossing[..], &mut a.walkways[..]),
            None => (&mut [][..], &mut [][..]),
        };
        self.waits
            .apply(subs, &lanes.index, &mut lanes.vehicle_waits, crossing)
            .map_err(malformed)?;
        self.waits
            .apply_pedestrians(subs, walkways, &mut self.crossings)
            .map_err(malformed)
    }

    /// The delay-accrued reward's reading at the end of an interval: per signal, the time
    /// loss gained since the last one by the vehicles on its approach zones, inside its
    /// junctions and on the first [`EXIT_RANGE_M`] of its outgoing lanes, plus the
    /// interval for each vehicle waiting to be inserted on its zones' edges.
    fn accrue(&mut self) {
        let Some(acc) = &mut self.accrual else {
            return;
        };
        let interval_s = self.interval_ms as f32 / 1000.0;
        let l = &self.lanes;
        for (s, sl) in self.signal_lanes.iter().enumerate() {
            let approach = sl
                .zone
                .iter()
                .flat_map(|(i, z)| l.vehicle_waits[*i].iter().filter(move |v| z.holds(v.pos_m)));
            let crossing = acc.junctions[s].iter().flat_map(|&j| &acc.crossing[j]);
            let exit = sl.outgoing.iter().flat_map(|&i| {
                l.vehicle_waits[i]
                    .iter()
                    .filter(|v| v.pos_m <= EXIT_RANGE_M)
            });
            let pending: usize = self.signal_pending[s]
                .iter()
                .map(|&e| self.pending.ids[e].len())
                .sum();
            acc.gained_s[s] = acc.signals[s].accrue(approach.chain(crossing).chain(exit))
                + pending as f32 * interval_s;
            acc.gained_s[s] += acc.pedestrians_gained_s(s);
        }
    }

    fn reward_inputs(&self, signal: usize) -> RewardInputs {
        let sl = &self.signal_lanes[signal];
        let l = &self.lanes;
        let zone = l.zone_reading(&sl.zone);
        // The zone's vehicles' summed wait or time loss, whichever the reward reads.
        let watched = zone.waiting_s + self.pending.wait_s(&self.signal_pending[signal]);
        let (total_wait_s, total_delay_s) = match self.waits.measure() {
            VehicleMeasure::TimeLoss => (0.0, watched),
            VehicleMeasure::AccumulatedWait => (watched, 0.0),
        };
        RewardInputs {
            total_wait_s,
            total_delay_s,
            queue_veh: zone.halting,
            pressure_veh: zone.vehicles - l.sum(&sl.outgoing, &l.vehicles),
            delay_veh: zone.delay_veh,
            accrued_delay_s: self.accrual.as_ref().map_or(0.0, |a| a.gained_s[signal]),
        }
    }

    fn sample_queue(&mut self) {
        let q: f32 = (0..self.models.len())
            .map(|s| {
                self.lanes
                    .sum(&self.signal_lanes[s].incoming, &self.lanes.halting)
            })
            .sum();
        self.queue_sum += q as f64;
        self.queue_samples += 1;
    }

    fn sim_mut(&mut self) -> Result<&mut SumoProcess, SumoError> {
        if self.finished {
            return Err(SumoError::NotConnected(
                "the episode is over; call reset for a new one".into(),
            ));
        }
        self.sim.as_mut().ok_or_else(|| {
            SumoError::NotConnected("SUMO stopped after an earlier error; call reset".into())
        })
    }

    /// Sends `messages` (the last one a simulation step) followed by the reads, stores
    /// the readings, and checks SUMO reached `target_s`: [`SumoEnv::send_steps`] then
    /// [`SumoEnv::receive_steps`], one round trip.
    fn run_steps(&mut self, messages: Vec<Message>, target_s: f64) -> Result<(), SumoError> {
        self.send_steps(messages)?;
        self.receive_steps(target_s)
    }

    /// Writes `messages` (the last one a simulation step) followed by the reads, without
    /// waiting for SUMO. Any failure stops SUMO: its state is unknown then, so the episode
    /// must be reset.
    fn send_steps(&mut self, mut messages: Vec<Message>) -> Result<(), SumoError> {
        if self.cfg.read_mode != ReadMode::Subscriptions {
            messages.push(self.reads.get_message().clone());
        }
        let r = self
            .sim_mut()
            .and_then(|sim| sim.send(&messages, STEP_CONTEXT));
        if r.is_err() {
            self.sim = None;
        }
        r
    }

    /// Reads the replies to [`SumoEnv::send_steps`], stores the readings, and checks SUMO
    /// reached `target_s`. Any failure stops SUMO, as there.
    fn receive_steps(&mut self, target_s: f64) -> Result<(), SumoError> {
        let r = self.try_receive_steps(target_s);
        if r.is_err() {
            self.sim = None;
        }
        r
    }

    fn try_receive_steps(&mut self, target_s: f64) -> Result<(), SumoError> {
        let subscribing = self.cfg.read_mode == ReadMode::Subscriptions;
        let mut replies = self.sim_mut()?.receive(STEP_CONTEXT)?;
        let reads = if subscribing {
            Vec::new()
        } else {
            replies.pop().unwrap_or_default()
        };
        let subs = match replies.pop().and_then(|mut r| r.pop()) {
            Some(Reply::Step(subs)) => subs,
            other => return Err(malformed(format!("expected step results, got {other:?}"))),
        };
        self.store_waits(&subs)?;
        let time = if subscribing {
            let variables: Vec<_> = subs.into_iter().filter(|s| !s.is_context()).collect();
            self.store_readings(Answer::Subscriptions(&variables))?
        } else {
            self.store_readings(Answer::Gets(&reads))?
        };
        match time {
            Some(t) if (t - target_s).abs() < 1e-6 => Ok(()),
            other => Err(malformed(format!(
                "SUMO reports time {other:?} after stepping to {target_s} s"
            ))),
        }
    }

    fn abs_time_s(&self, offset_ms: u64) -> f64 {
        self.cfg.begin_s + (self.now_ms + offset_ms) as f64 / 1000.0
    }

    /// After the last step: asks SUMO for the vehicles never inserted, closes it (SUMO then
    /// writes tripinfo, unfinished vehicles included) and computes the final metrics.
    fn finish(&mut self) -> Result<(), SumoError> {
        let mut sim = self
            .sim
            .take()
            .ok_or_else(|| SumoError::NotConnected("SUMO stopped after an earlier error".into()))?;
        let mut m = Message::new();
        m.get(cmd::GET_SIM, var::SIM_PENDING_VEHICLES, "");
        let pending = match sim.call(&m, "listing vehicles never inserted")?.pop() {
            Some(Reply::Value(Value::StrList(ids))) => ids,
            other => {
                return Err(SumoError::Traci {
                    context: "listing vehicles never inserted".into(),
                    source: TraciError::Protocol(format!("unexpected reply {other:?}")),
                })
            }
        };
        let mut waits = Vec::with_capacity(pending.len());
        if !pending.is_empty() {
            let mut m = Message::new();
            for id in &pending {
                m.get(cmd::GET_VEHICLE, var::VEHICLE_DEPART_DELAY, id);
            }
            let context = "reading waits of vehicles never inserted";
            for r in sim.call(&m, context)? {
                let w = match &r {
                    Reply::Value(v) => v.as_f64().filter(|w| !w.is_nan()),
                    _ => None,
                };
                // Vehicles loaded ahead of their departure report a negative delay: not
                // due yet, so not waiting. Anything else but a number is an error, not a
                // vehicle left out of the backlog.
                match w {
                    Some(w) if w >= 0.0 => waits.push(w),
                    Some(_) => {}
                    None => {
                        return Err(SumoError::Traci {
                            context: context.into(),
                            source: TraciError::Protocol(format!("unexpected reply {r:?}")),
                        })
                    }
                }
            }
        }
        let work = sim.close()?;
        let trips = tripinfo::summarize(&work.file("tripinfo.xml"), &waits)?;
        let teleports = tripinfo::teleports(&work.file("statistics.xml"))?;
        self.metrics = EpisodeMetrics {
            mean_delay_s: trips.mean_delay_s,
            mean_wait_s: trips.mean_wait_s,
            mean_travel_time_s: trips.mean_travel_time_s,
            throughput_veh: trips.throughput_veh,
            backlog_veh: trips.backlog_veh,
            pedestrians: trips.pedestrians,
            mean_pedestrian_wait_s: trips.mean_pedestrian_wait_s,
            mean_queue_veh: self.mean_queue(),
            teleports,
            sim_seconds: self.now_ms as f64 / 1000.0,
            wall_seconds: self.wall.as_secs_f64(),
        };
        self.finished = true;
        Ok(())
    }

    fn mean_queue(&self) -> f64 {
        if self.queue_samples == 0 {
            0.0
        } else {
            self.queue_sum / self.queue_samples as f64
        }
    }

    /// Runs a whole episode under the network's own static programs (greenwave sets no
    /// state), sampling queues every decision interval, and returns its metrics. This is
    /// what `--controller fixed-time` means on SUMO. Restarts SUMO first (same seed) if the
    /// current episode has already been stepped.
    pub fn run_static_program(&mut self) -> Result<EpisodeMetrics, SumoError> {
        let used = self.now_ms > 0 || self.queue_samples > 0 || self.in_flight.is_some();
        let live = self.sim.as_ref().is_some_and(|s| s.connected());
        if used || self.finished || !live {
            self.start(self.seed)?;
        }
        let t0 = Instant::now();
        let wall0 = self.wall;
        self.sample_queue();
        while self.now_ms < self.episode_ms {
            let target = self.abs_time_s(self.interval_ms as u64);
            let mut m = Message::new();
            m.simulation_step(target);
            self.run_steps(vec![m], target)?;
            self.now_ms += self.interval_ms as u64;
            self.sample_queue();
        }
        self.wall = wall0 + t0.elapsed();
        self.finish()?;
        self.wall = wall0 + t0.elapsed();
        self.metrics.wall_seconds = self.wall.as_secs_f64();
        Ok(self.metrics.clone())
    }

    fn try_step(&mut self, actions: &[u8]) -> Result<StepOutcome, EnvError> {
        self.try_step_begin(actions)?;
        self.try_step_end()
    }

    /// Applies the requests and sends one decision interval's messages to SUMO (one
    /// write), without waiting for its replies: [`SumoEnv::try_step_end`] reads them.
    fn try_step_begin(&mut self, actions: &[u8]) -> Result<(), EnvError> {
        if self.in_flight.is_some() {
            return Err(EnvError::Backend(
                "step_begin while the previous interval is in flight; call step_end first".into(),
            ));
        }
        let n = self.models.len();
        if actions.len() != n {
            return Err(EnvError::ActionCount {
                expected: n,
                got: actions.len(),
            });
        }
        self.sim_mut()?;
        let sent_at = Instant::now();
        if self.now_ms == 0 && self.queue_samples == 0 {
            self.sample_queue();
        }
        let responses: Vec<_> = self
            .seqs
            .iter_mut()
            .zip(actions)
            .map(|(s, &a)| s.request(a))
            .collect();
        // Every display change of every signal in this interval, as (offset ms, signal,
        // state). Each offset with a change gets a message setting the changed states,
        // then a message stepping to the next offset. They are separate messages because
        // SUMO ignores commands after a simulation step in the same message and drops the
        // replies of those before it; sent back to back they still cost one round trip.
        let dt = Millis(self.interval_ms);
        let mut changes: Vec<(u32, usize, String)> = Vec::new();
        for (s, (seq, model)) in self.seqs.iter_mut().zip(&self.models).enumerate() {
            let mut offset = 0u32;
            seq.advance(dt, |seg| {
                changes.push((offset, s, model.state(seg.interval, seg.frame)));
                offset += seg.duration.0;
            });
        }
        changes.sort_by_key(|c| c.0);
        let mut messages: Vec<Message> = Vec::new();
        let mut i = 0;
        while i < changes.len() {
            let offset = changes[i].0;
            let mut m = Message::new();
            while i < changes.len() && changes[i].0 == offset {
                let (_, s, state) = &changes[i];
                if self.sent[*s] != *state {
                    m.set_tl_state(&self.models[*s].id, state);
                    self.sent[*s].clone_from(state);
                    self.history[*s].push((self.now_ms + offset as u64, state.clone()));
                }
                i += 1;
            }
            if m.is_empty() {
                continue; // nothing changed here: the previous step runs on through
            }
            if offset > 0 {
                let mut step = Message::new();
                step.simulation_step(self.abs_time_s(offset as u64));
                messages.push(step);
            }
            messages.push(m);
        }
        let target = self.abs_time_s(self.interval_ms as u64);
        let mut step = Message::new();
        step.simulation_step(target);
        messages.push(step);
        self.send_steps(messages)?;
        self.in_flight = Some(InFlight {
            target_s: target,
            responses,
            sent_at,
        });
        Ok(())
    }

    /// Reads the replies to the interval [`SumoEnv::try_step_begin`] sent, and scores it.
    fn try_step_end(&mut self) -> Result<StepOutcome, EnvError> {
        let Some(InFlight {
            target_s,
            responses,
            sent_at,
        }) = self.in_flight.take()
        else {
            return Err(EnvError::Backend(
                "step_end without a pending step_begin".into(),
            ));
        };
        let n = self.models.len();
        self.receive_steps(target_s)?;
        self.now_ms += self.interval_ms as u64;
        self.sample_queue();
        self.accrue();
        let rewards = (0..n)
            .map(|s| {
                let now = self.reward_inputs(s);
                let r = self.cfg.reward.reward(&self.prev_inputs[s], &now);
                self.prev_inputs[s] = now;
                r
            })
            .collect();
        let done = self.now_ms >= self.episode_ms;
        // From the send: with several environments in flight, it overlaps theirs.
        self.wall += sent_at.elapsed();
        if done {
            let t1 = Instant::now();
            self.finish()?;
            self.wall += t1.elapsed();
            self.metrics.wall_seconds = self.wall.as_secs_f64();
        }
        Ok(StepOutcome {
            rewards,
            responses,
            done,
        })
    }
}

/// The edges of the lanes of every signal's approach zones, each once, and per signal the
/// indices of its own among them.
fn zone_edges(
    net: &NetFile,
    lanes: &Lanes,
    signal_lanes: &[SignalLanes],
) -> (Vec<String>, Vec<Vec<usize>>) {
    let mut edges: Vec<String> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let of_signal = signal_lanes
        .iter()
        .map(|sl| {
            let mut mine: Vec<usize> = Vec::new();
            for (i, _) in &sl.zone {
                let Some(lane) = net.lanes.get(&lanes.ids[*i]) else {
                    continue;
                };
                let e = *index.entry(lane.edge.clone()).or_insert_with(|| {
                    edges.push(lane.edge.clone());
                    edges.len() - 1
                });
                if !mine.contains(&e) {
                    mine.push(e);
                }
            }
            mine
        })
        .collect();
    (edges, of_signal)
}

/// The subscription results among `replies` (the replies to a subscribe message).
fn subscribed(replies: Vec<Reply>) -> Vec<SubscriptionResult> {
    replies
        .into_iter()
        .filter_map(|r| match r {
            Reply::Subscribed(s) => Some(s),
            _ => None,
        })
        .collect()
}

/// The lights that switch to the program `wanted` at the start of each episode (those that
/// have it).
fn program_switches(net: &NetFile, wanted: Option<&str>) -> Vec<String> {
    match wanted {
        Some(wanted) => net
            .tl_logics
            .iter()
            .filter(|t| t.program_id == wanted)
            .map(|t| t.id.clone())
            .collect(),
        None => Vec::new(),
    }
}

/// Every lane the signals read (their incoming lanes, approach zones and outgoing lanes),
/// and each signal's view of them.
fn lanes_of(net: &NetFile, models: &[TlsModel]) -> (Lanes, Vec<SignalLanes>) {
    let mut lanes = Lanes::default();
    let mut signal_lanes = Vec::with_capacity(models.len());
    let feeders = Feeders::of(net);
    for m in models {
        signal_lanes.push(SignalLanes::new(net, &feeders, m, &mut lanes));
    }
    lanes.reset_readings();
    (lanes, signal_lanes)
}

/// Detection zones observed per incoming lane: the stop-bar zone and the advance zone.
pub const ZONES_PER_LANE: usize = 2;

/// How far upstream of the stop line the stop-bar zone reaches (m): about 4 s of travel at
/// 50 km/h, 8 queued cars. The advance zone is the rest of the approach zone, out to
/// [`APPROACH_RANGE_M`]. Counts over the whole 200 m say how many vehicles come but not
/// when: two zones tell a platoon about to reach the stop line from one that is 10 s out,
/// which is what starting a green as it arrives needs (tools/README.md, "Training on real
/// networks", finding 10).
pub const STOP_BAR_ZONE_M: f64 = 60.0;

/// The signal's observation layout: [`ZONES_PER_LANE`] zones per incoming lane, as many
/// per pedestrian crossing (at the kerb, on the crossing), then with `program_clock` one
/// program-clock lane per plan phase.
pub fn observed_layout(m: &TlsModel, program_clock: bool) -> Result<ObsLayout, SumoError> {
    (m.in_lanes.len() + m.crossings.len())
        .checked_mul(ZONES_PER_LANE)
        .and_then(|zones| ObsLayout::for_signal(zones, m.plan.n_phases(), program_clock))
        .ok_or_else(|| SumoError::Tls {
            tls: m.id.clone(),
            message: format!(
                "{} incoming lanes and {} pedestrian crossings",
                m.in_lanes.len(),
                m.crossings.len()
            ),
        })
}

/// The signals' specs: id, plan, observation layout and lane–phase incidence. A
/// program-clock lane carries its phase's movements, so it is "green" in every phase that
/// shares one with it.
fn signal_specs(models: &[TlsModel], program_clock: bool) -> Result<Vec<SignalSpec>, SumoError> {
    let mut specs = Vec::with_capacity(models.len());
    for m in models {
        // Each lane's (and crossing's) movements serve both of its zones.
        let mut zone_movements: Vec<MovementSet> = lane_movements(m)
            .into_iter()
            .flat_map(|x| std::iter::repeat_n(x, ZONES_PER_LANE))
            .collect();
        if program_clock {
            zone_movements.extend(m.plan.phases().iter().map(|ph| ph.movements));
        }
        specs.push(SignalSpec {
            id: m.id.clone(),
            plan: m.plan.clone(),
            layout: observed_layout(m, program_clock)?,
            incidence: lane_phase_incidence(&m.plan, &zone_movements),
        });
    }
    Ok(specs)
}

/// Each signal's program clock on the episode's time base (SUMO time less `begin_s`), when
/// the observation has program-clock lanes.
fn program_clocks(
    net: &NetFile,
    models: &[TlsModel],
    cfg: &SumoConfig,
) -> Result<Vec<Option<ProgramClock>>, SumoError> {
    if !cfg.program_clock {
        return Ok(vec![None; models.len()]);
    }
    let begin_ms = (cfg.begin_s * 1000.0).round() as u64;
    models
        .iter()
        .map(|m| {
            let clock = clock::program_clock(net, m);
            let clock = clock.map(|c| c.map(|c| c.with_time_origin(begin_ms)));
            clock.map_err(|e| SumoError::Tls {
                tls: m.id.clone(),
                message: format!(
                    "its program cannot be the observation's program clock ({e}); \
                     train without it (`--program-clock off`)"
                ),
            })
        })
        .collect()
}

/// What the reward reads of the vehicles' waits or time losses on the approach zones.
struct ZoneWaits {
    /// The context subscriptions around the signals' junctions.
    waits: WaitWatch,
    /// The zones' edges, whose vehicles waiting to be inserted count too.
    pending_edges: Vec<String>,
    /// Per signal: indices of its zones' edges in `pending_edges`.
    signal_pending: Vec<Vec<usize>>,
    /// The delay-accrued reward's state, for that reward.
    accrual: Option<Accrual>,
    /// The pedestrians at the signals' observed crossings.
    crossings: CrossingCounts,
    /// Per signal: indices of its observed crossings in `crossings`.
    signal_crossings: Vec<Vec<usize>>,
}

/// What the delay-accrued reward follows between decision points.
struct Accrual {
    /// Per signal: its vehicles, followed from one reading to the next.
    signals: Vec<DelayAccrual>,
    /// Per signal: indices of its junctions (those its stop-line lanes end at) in the
    /// wait watch's list.
    junctions: Vec<Vec<usize>>,
    /// Per watched junction: the vehicles inside it at the last reading.
    crossing: Vec<Vec<VehicleWait>>,
    /// Per signal: its pedestrians, followed from one reading to the next.
    walkers: Vec<DelayAccrual>,
    /// Per watched junction: the pedestrians on its walking areas and crossings at the
    /// last reading (none unless `pedestrian_weight` is above 0).
    walkways: Vec<Vec<VehicleWait>>,
    /// What a second a pedestrian stands counts for against a second a vehicle loses.
    pedestrian_weight: f32,
    /// Per signal: the delay (s) gained in the interval just ended.
    gained_s: Vec<f32>,
}

impl Accrual {
    fn new(watch: &WaitWatch, signal_junctions: Vec<Vec<usize>>, pedestrian_weight: f32) -> Self {
        let n = signal_junctions.len();
        Accrual {
            signals: vec![DelayAccrual::default(); n],
            junctions: signal_junctions,
            crossing: vec![Vec::new(); watch.junctions().len()],
            walkers: vec![DelayAccrual::default(); n],
            walkways: vec![Vec::new(); watch.junctions().len()],
            pedestrian_weight,
            gained_s: vec![0.0; n],
        }
    }

    /// Forgets every vehicle and pedestrian (a new episode).
    fn clear(&mut self) {
        self.signals.iter_mut().for_each(DelayAccrual::clear);
        self.walkers.iter_mut().for_each(DelayAccrual::clear);
        self.crossing.iter_mut().for_each(Vec::clear);
        self.walkways.iter_mut().for_each(Vec::clear);
        self.gained_s.iter_mut().for_each(|g| *g = 0.0);
    }

    /// The waiting time signal `s`'s pedestrians gained since the last reading, weighted
    /// (0 when pedestrians are not counted).
    fn pedestrians_gained_s(&mut self, s: usize) -> f32 {
        if self.pedestrian_weight == 0.0 {
            return 0.0;
        }
        let walkways = &self.walkways;
        let standing = self.junctions[s].iter().flat_map(|&j| &walkways[j]);
        self.pedestrian_weight * self.walkers[s].accrue(standing)
    }
}

impl ZoneWaits {
    /// Every reward subscribes: the observation places each vehicle in its lane's
    /// stop-bar or advance zone ([`Lanes::zone_split`]). Only the wait- and delay-delta
    /// rewards sum the waits or time losses (and those waiting to be inserted); the
    /// delay-accrued rewards follow the vehicles, inside the junctions and past them too,
    /// and, on a net with walking areas and `pedestrian_weight` above 0, the pedestrians
    /// standing at the junctions' crossings ([`Accrual`]).
    fn new(
        cfg: &SumoConfig,
        net: &NetFile,
        models: &[TlsModel],
        lanes: &Lanes,
        signal_lanes: &[SignalLanes],
    ) -> Self {
        // The observation's zone split needs every vehicle's position whatever the reward.
        let measure = match cfg.reward {
            RewardKind::WaitDelta => VehicleMeasure::AccumulatedWait,
            RewardKind::DelayDelta
            | RewardKind::DelayAccrued
            | RewardKind::DelayAccruedDelta
            | RewardKind::Queue
            | RewardKind::Pressure
            | RewardKind::Delay => VehicleMeasure::TimeLoss,
        };
        let accrued = matches!(
            cfg.reward,
            RewardKind::DelayAccrued | RewardKind::DelayAccruedDelta
        );
        let walkways = net
            .edges
            .values()
            .any(|e| e.function == "walkingarea" || e.function == "crossing");
        let pedestrian_weight = if accrued && walkways {
            cfg.pedestrian_weight
        } else {
            0.0
        };
        let (crossings, signal_crossings) =
            CrossingCounts::for_signals(models.iter().map(|m| m.crossings.as_slice()));
        let waits = WaitWatch::new(models.iter().flat_map(|m| junctions_of(net, m)), measure)
            .with_pedestrians(pedestrian_weight > 0.0 || !crossings.is_empty());
        let accrual = accrued.then(|| {
            let watched = waits.junctions();
            let per_signal = models
                .iter()
                .map(|m| {
                    let mut js: Vec<usize> = junctions_of(net, m)
                        .filter_map(|j| watched.iter().position(|w| w == j))
                        .collect();
                    js.sort_unstable();
                    js.dedup();
                    js
                })
                .collect();
            Accrual::new(&waits, per_signal, pedestrian_weight)
        });
        let (pending_edges, signal_pending) = zone_edges(net, lanes, signal_lanes);
        ZoneWaits {
            waits,
            pending_edges,
            signal_pending,
            accrual,
            crossings,
            signal_crossings,
        }
    }
}

/// The junctions signal `m`'s stop-line lanes end at.
fn junctions_of<'a>(net: &'a NetFile, m: &'a TlsModel) -> impl Iterator<Item = &'a str> + 'a {
    let stop_lines = m.in_lanes.iter().filter_map(|l| {
        let edge = &net.lanes.get(l)?.edge;
        net.edges.get(edge)?.to.as_deref()
    });
    // A crossing's junction is its stop lines' too, unless the light's vehicle links are
    // at another junction than its crossings.
    stop_lines.chain(m.crossings.iter().filter_map(|c| junction_of_crossing(c)))
}

fn new_sequencers(models: &[TlsModel]) -> Result<Vec<Sequencer>, SumoError> {
    models
        .iter()
        .map(|m| {
            Sequencer::new(m.plan.clone(), PhaseId(0)).map_err(|source| SumoError::Sequencer {
                tls: m.id.clone(),
                source,
            })
        })
        .collect()
}

/// A reply that does not make sense where it came.
fn malformed(message: String) -> SumoError {
    SumoError::Traci {
        context: "reading SUMO's replies".into(),
        source: TraciError::Protocol(message),
    }
}

/// Seconds as SUMO reads them, without float noise for whole milliseconds.
/// SUMO's seed (a 31-bit int) for episode seed `seed`: every bit of `seed` folded in, so
/// seeds that differ only above bit 31 (training's slot bits) get different SUMO seeds;
/// seeds below 2^31 are used as they are.
fn sumo_seed(seed: u64) -> u64 {
    (seed ^ (seed >> 31) ^ (seed >> 62)) & 0x7fff_ffff
}

fn fmt_s(s: f64) -> String {
    format!("{:.3}", s)
}

impl Env for SumoEnv {
    fn signals(&self) -> &[SignalSpec] {
        &self.specs
    }

    fn decision_interval(&self) -> Millis {
        Millis(self.interval_ms)
    }

    fn reward_kind(&self) -> RewardKind {
        self.cfg.reward
    }

    fn reset(&mut self, seed: u64) -> Result<(), EnvError> {
        // A SUMO just started with this seed and not stepped yet is already that episode.
        // (A connection a failed call dropped is no episode: that SUMO was stopped.)
        let fresh = self.sim.as_ref().is_some_and(|s| s.connected())
            && !self.finished
            && self.now_ms == 0
            && self.queue_samples == 0
            && self.seed == seed;
        if fresh {
            return Ok(());
        }
        self.start(seed).map_err(EnvError::from)
    }

    fn observe(&self, signal: usize, out: &mut [f32]) -> Result<(), EnvError> {
        let count = self.specs.len();
        let spec = self
            .specs
            .get(signal)
            .ok_or(EnvError::UnknownSignal { signal, count })?;
        let l = &self.lanes;
        // Short vehicles can pack a lane past the 7.5 m-per-car storage estimate; that is
        // real traffic, not a faulty detector, so it saturates.
        let sat = |r: LaneReading| LaneReading {
            density: r.density.min(MAX_LANE_FRACTION),
            queue: r.queue.min(MAX_LANE_FRACTION),
        };
        let mut readings = Vec::with_capacity(spec.layout.n_lanes as usize);
        for zone in &self.signal_lanes[signal].approach {
            let [stop_bar, advance] = l.zone_split(zone);
            readings.push(sat(stop_bar));
            readings.push(sat(advance));
        }
        for &c in &self.signal_crossings[signal] {
            readings.extend(crossing_readings(self.crossings.counts[c]).map(sat));
        }
        if self.cfg.program_clock {
            let from = readings.len();
            // The layout's remaining lanes are the clock's (ObsLayout::for_signal).
            readings.resize(spec.layout.n_lanes as usize, LaneReading::default());
            if let Some(clock) = &self.clocks[signal] {
                clock.write_readings(self.now_ms, &mut readings[from..]);
            }
        }
        spec.layout
            .write(&readings, &self.seqs[signal], out)
            .map_err(|source| EnvError::Observation { signal, source })
    }

    fn sequencer(&self, signal: usize) -> &Sequencer {
        &self.seqs[signal]
    }

    fn program_greens(&self, signal: usize) -> Option<Vec<Millis>> {
        self.models.get(signal).map(|m| m.program_greens.clone())
    }

    fn actuated_greens(&self, signal: usize) -> Option<Vec<Millis>> {
        self.models.get(signal).map(TlsModel::actuated_greens)
    }

    fn detector_assignment(&self, signal: usize) -> Option<Vec<MovementSet>> {
        self.models.get(signal).map(TlsModel::actuated_assignment)
    }

    fn program_clock(&self, signal: usize) -> Option<ProgramClock> {
        self.clocks.get(signal)?.clone()
    }

    fn detectors(&self, signal: usize) -> Vec<MovementDetector> {
        let Some(sl) = self.signal_lanes.get(signal) else {
            return Vec::new();
        };
        let l = &self.lanes;
        let no_crossings = Vec::new();
        let crossings = self.movement_crossings.get(signal).unwrap_or(&no_crossings);
        sl.movement_in
            .iter()
            .zip(&sl.movement_out)
            .enumerate()
            .map(|(mv, (ins, outs))| {
                let pedestrians = pedestrian_call(
                    &self.crossings.counts,
                    crossings.get(mv).map_or(&[][..], Vec::as_slice),
                );
                let queue_veh = l.sum(ins, &l.halting);
                // Time since the detector zone last held a vehicle: since the loop last
                // saw one, less its travel from the loop to the stop line.
                let gap_s = ins
                    .iter()
                    .map(|&i| (l.since_detection_s[i] - l.loop_at[i].1).max(0.0))
                    .fold(f32::INFINITY, f32::min)
                    .min(GAP_NONE_S);
                MovementDetector {
                    queue_veh,
                    upstream_veh: l.sum(ins, &l.vehicles),
                    upstream_length_m: ins
                        .iter()
                        .map(|&i| l.storage_veh[i] * VEHICLE_SPACING_M as f32)
                        .fold(0.0, f32::max),
                    downstream_veh: l.sum(outs, &l.vehicles),
                    downstream_storage_veh: l.sum(outs, &l.storage_veh),
                    gap_s,
                    call: queue_veh > 0.0 || gap_s == 0.0 || pedestrians,
                }
            })
            .collect()
    }

    fn now(&self) -> Millis {
        // The configuration keeps the episode within u32 milliseconds; the last decision
        // point may pass it by less than one interval.
        Millis(u32::try_from(self.now_ms).unwrap_or(u32::MAX))
    }

    fn step(&mut self, actions: &[u8]) -> Result<StepOutcome, EnvError> {
        self.try_step(actions)
    }

    fn step_begin(&mut self, actions: &[u8]) -> Result<StepStarted, EnvError> {
        self.try_step_begin(actions).map(|()| StepStarted::Pending)
    }

    fn step_end(&mut self) -> Result<StepOutcome, EnvError> {
        self.try_step_end()
    }

    fn step_ready(&mut self, wait: Duration) -> bool {
        match (&self.in_flight, self.sim.as_mut()) {
            (Some(_), Some(sim)) => sim.reply_ready(wait),
            _ => true,
        }
    }

    fn metrics(&self) -> EpisodeMetrics {
        if self.finished {
            return self.metrics.clone();
        }
        // Trip-based figures come from SUMO's tripinfo, written when the episode ends.
        EpisodeMetrics {
            mean_queue_veh: self.mean_queue(),
            sim_seconds: self.now_ms as f64 / 1000.0,
            wall_seconds: self.wall.as_secs_f64(),
            ..EpisodeMetrics::default()
        }
    }
}

/// Runs one episode of `cfg` under the network's own static programs and returns its
/// metrics (what `--controller fixed-time` means on SUMO).
pub fn run_static_program(cfg: SumoConfig) -> Result<EpisodeMetrics, SumoError> {
    SumoEnv::new(cfg)?.run_static_program()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sumo_seeds_keep_small_seeds_and_separate_high_bits() {
        assert_eq!(sumo_seed(0), 0);
        assert_eq!(sumo_seed(1000), 1000);
        assert_eq!(sumo_seed((1 << 31) - 1), (1 << 31) - 1);
        // Training's episode seeds put the slot in bits 40..: eight slots, eight seeds.
        let base = 7u64.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let seeds: std::collections::HashSet<u64> = (0..8u64)
            .map(|slot| sumo_seed(base ^ (slot << 40)))
            .collect();
        assert_eq!(seeds.len(), 8);
        assert!(seeds.iter().all(|&s| s < 1 << 31));
    }
}
