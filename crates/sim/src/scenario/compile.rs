//! Validation of a [`ScenarioFile`] and its translation into the simulator's [`Network`].
//!
//! Every check names the field at fault (`signals[2].phases[1].movements[0]`) and, when the
//! scenario came from a file, the line of the table it sits in.

use std::collections::HashMap;
use std::ops::Range;

use greenwave_core::{
    ConflictMatrix, Millis, Movement, MovementId, MovementSet, Phase, PhaseId, PhasePlan,
    PhaseTiming, RewardKind, Turn,
};
use toml::Spanned;

use super::file::{
    ArmFile, DemandFile, LinkFile, ModelFile, PhaseFile, RewardName, ScenarioFile, SignalFile,
    TimingFile,
};
use super::{Demand, ScenarioError};
use crate::demand::Profile;
use crate::network::{
    exit_arm, turn_letter, turn_order, Lane, Link, LinkEnd, Model, Network, SignalNode,
};

/// Most lanes a link may have.
const MAX_LANES_PER_LINK: u32 = 16;
/// Longest link: 50 km is far beyond any link between signals, and bounds the storage a
/// file can ask for (at 2 m jam spacing, 25 000 vehicles per lane).
const MAX_LINK_LENGTH_M: f64 = 50_000.0;
/// Largest demand-profile multiplier: a peak ten times the base flow is already extreme,
/// and it bounds the arrivals per tick.
const MAX_PROFILE_MULTIPLIER: f64 = 10.0;
/// Smallest positive demand-profile multiplier (0 is none). Arrivals are drawn at the peak
/// rate and kept with probability multiplier / peak: a tiny multiplier would have the draw
/// go through billions of candidates for one arrival (hang, in effect).
const MIN_POSITIVE_PROFILE_MULTIPLIER: f64 = 1e-6;
/// Latest demand-profile time: past the longest episode ([`MAX_EPISODE_S`]) by far, and
/// before the draw's clock would stop advancing in `f64`.
const MAX_PROFILE_TIME_S: f64 = 1e8;
/// Name of the preset plan.
pub(crate) const PRESET_FOUR_ARM: &str = "four-arm-protected-left";

/// Cumulative turning shares `(movement, cum)` of a link arriving at a signal.
type TurnCdf = Vec<(u8, f64)>;

/// Where the scenario came from, for error messages.
pub(crate) struct Origin<'a> {
    /// File path, or a description such as "built-in scenario single-4way".
    pub name: &'a str,
    /// The file's text, to turn spans into line numbers.
    pub text: Option<&'a str>,
}

impl Origin<'_> {
    fn line(&self, span: &Range<usize>) -> Option<usize> {
        let text = self.text?;
        let end = span.start.min(text.len());
        Some(
            text.as_bytes()[..end]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1,
        )
    }

    fn err(&self, span: Option<&Range<usize>>, field: String, message: String) -> ScenarioError {
        ScenarioError::Invalid {
            origin: self.name.to_string(),
            line: span.and_then(|s| self.line(s)),
            field,
            message,
        }
    }

    /// An error in a top-level field (no line: the field may be absent from the file).
    fn top(&self, field: &str, message: String) -> ScenarioError {
        self.err(None, field.to_string(), message)
    }
}

/// What compiling produces.
pub(crate) struct Compiled {
    pub network: Network,
    pub demands: Vec<Demand>,
    pub active_demand: usize,
    pub reward: RewardKind,
}

/// Validates `file` and builds its network and demands.
pub(crate) fn compile(file: &ScenarioFile, origin: &Origin) -> Result<Compiled, ScenarioError> {
    check_clock(file, origin)?;
    let model = compile_model(&file.model, origin)?;
    check_not_empty(file, origin)?;
    let link_index = index_links(file, origin)?;
    let wiring = wire_signal_arms(file, &link_index, origin)?;
    let (links, lanes) = compile_links(file, &wiring, origin)?;
    let signals = compile_signal_nodes(file, &wiring.plans, &link_index, &links, &lanes, origin)?;
    let entry_links: Vec<u32> = (0..links.len() as u32)
        .filter(|&l| wiring.link_start_signal[l as usize].is_none())
        .collect();
    let demands = compile_demands(file, &link_index, &entry_links, origin)?;
    let active_demand = default_demand(file, &demands, origin)?;
    Ok(Compiled {
        network: Network {
            links,
            lanes,
            signals,
            entry_links,
            model,
        },
        demands,
        active_demand,
        reward: reward_kind(file.reward),
    })
}

/// The longest episode (s): simulated time is counted in [`Millis`](greenwave_core::Millis),
/// a `u32` of milliseconds.
const MAX_EPISODE_S: u32 = u32::MAX / 1000;

/// The decision interval and the episode length.
fn check_clock(file: &ScenarioFile, origin: &Origin) -> Result<(), ScenarioError> {
    if file.decision_interval_s == 0 {
        return Err(origin.top("decision_interval_s", "must be at least 1 s".into()));
    }
    if file.episode_s > MAX_EPISODE_S {
        return Err(origin.top(
            "episode_s",
            format!(
                "{} s is longer than {MAX_EPISODE_S} s, the most the clock counts (u32 milliseconds)",
                file.episode_s
            ),
        ));
    }
    if file.episode_s < file.decision_interval_s {
        return Err(origin.top(
            "episode_s",
            format!(
                "{} s is shorter than one decision interval ({} s)",
                file.episode_s, file.decision_interval_s
            ),
        ));
    }
    Ok(())
}

/// A scenario has at least one link, one signal and one demand set.
fn check_not_empty(file: &ScenarioFile, origin: &Origin) -> Result<(), ScenarioError> {
    if file.links.is_empty() {
        return Err(origin.top("links", "a scenario needs at least one link".into()));
    }
    if file.signals.is_empty() {
        return Err(origin.top("signals", "a scenario needs at least one signal".into()));
    }
    if file.demand.is_empty() {
        return Err(origin.top("demand", "a scenario needs at least one demand set".into()));
    }
    Ok(())
}

/// Checks every link's id, geometry and lane count; maps link ids to their index.
fn index_links<'f>(
    file: &'f ScenarioFile,
    origin: &Origin,
) -> Result<HashMap<&'f str, u32>, ScenarioError> {
    let mut link_index: HashMap<&str, u32> = HashMap::new();
    for (i, link) in file.links.iter().enumerate() {
        let (span, l) = (link.span(), link.get_ref());
        let field = |f: &str| format!("links[{i}] (`{}`).{f}", l.id);
        if l.id.is_empty() {
            return Err(origin.err(Some(&span), format!("links[{i}].id"), "is empty".into()));
        }
        if link_index.insert(&l.id, i as u32).is_some() {
            return Err(origin.err(
                Some(&span),
                field("id"),
                "another link already has this id".into(),
            ));
        }
        if !(l.length_m.is_finite() && l.length_m > 0.0 && l.length_m <= MAX_LINK_LENGTH_M) {
            return Err(origin.err(
                Some(&span),
                field("length_m"),
                format!(
                    "{} is not a length in (0, {MAX_LINK_LENGTH_M}] m",
                    l.length_m
                ),
            ));
        }
        if !(l.speed_limit_kmh.is_finite() && l.speed_limit_kmh > 0.0) {
            return Err(origin.err(
                Some(&span),
                field("speed_limit_kmh"),
                format!("{} is not a positive speed", l.speed_limit_kmh),
            ));
        }
        if l.lanes == 0 || l.lanes > MAX_LANES_PER_LINK {
            return Err(origin.err(
                Some(&span),
                field("lanes"),
                format!(
                    "{} lanes; between 1 and {MAX_LANES_PER_LINK} are supported",
                    l.lanes
                ),
            ));
        }
    }
    Ok(link_index)
}

/// Which arm each link arrives at and leaves from, and every signal's phase plan.
struct ArmWiring {
    /// Where each link ends: an arm of a signal, or the network's edge.
    link_end: Vec<LinkEnd>,
    /// The signal each link leaves from (`None`: an entry link).
    link_start_signal: Vec<Option<u32>>,
    /// The phase plan of each signal.
    plans: Vec<PhasePlan>,
}

/// Attaches links to the signals' arms (each link arrives at and leaves at most one arm)
/// and compiles each signal's plan.
fn wire_signal_arms(
    file: &ScenarioFile,
    link_index: &HashMap<&str, u32>,
    origin: &Origin,
) -> Result<ArmWiring, ScenarioError> {
    let mut wiring = ArmWiring {
        link_end: vec![LinkEnd::Exit; file.links.len()],
        link_start_signal: vec![None; file.links.len()],
        plans: Vec::with_capacity(file.signals.len()),
    };
    let mut signal_ids: HashMap<&str, usize> = HashMap::new();
    for (s, signal) in file.signals.iter().enumerate() {
        let (span, sig) = (signal.span(), signal.get_ref());
        if signal_ids.insert(&sig.id, s).is_some() || sig.id.is_empty() {
            return Err(origin.err(
                Some(&span),
                format!("signals[{s}].id"),
                format!("`{}` is empty or used by another signal", sig.id),
            ));
        }
        for (arm, (arm_name, a)) in sig.arms.by_index().into_iter().enumerate() {
            let Some(ArmFile { incoming, out }) = a else {
                continue;
            };
            for (key, id, is_in) in [("in", incoming, true), ("out", out, false)] {
                let Some(id) = id else { continue };
                let field = format!("signals[{s}] (`{}`).arms.{arm_name}.{key}", sig.id);
                let Some(&l) = link_index.get(id.as_str()) else {
                    return Err(origin.err(Some(&span), field, format!("no link `{id}`")));
                };
                if is_in {
                    if wiring.link_end[l as usize] != LinkEnd::Exit {
                        return Err(origin.err(
                            Some(&span),
                            field,
                            format!("link `{id}` already arrives at another arm"),
                        ));
                    }
                    wiring.link_end[l as usize] = LinkEnd::Signal {
                        signal: s as u32,
                        arm: arm as u8,
                    };
                } else {
                    if wiring.link_start_signal[l as usize].is_some() {
                        return Err(origin.err(
                            Some(&span),
                            field,
                            format!("link `{id}` already leaves another arm"),
                        ));
                    }
                    wiring.link_start_signal[l as usize] = Some(s as u32);
                }
            }
        }
        wiring.plans.push(compile_plan(sig, s, &span, origin)?);
    }
    Ok(wiring)
}

/// Every link with its lanes: storage, the signal each lane queues at and the movements
/// it serves, and the turning shares of links that arrive at a signal.
fn compile_links(
    file: &ScenarioFile,
    wiring: &ArmWiring,
    origin: &Origin,
) -> Result<(Vec<Link>, Vec<Lane>), ScenarioError> {
    let mut lanes: Vec<Lane> = Vec::new();
    let mut links: Vec<Link> = Vec::with_capacity(file.links.len());
    for (i, link) in file.links.iter().enumerate() {
        let l = link.get_ref();
        let first_lane = lanes.len() as u32;
        let storage_veh = ((l.length_m / file.model.jam_spacing_m).floor() as u32).max(1);
        let end = wiring.link_end[i];
        let (link_lanes, turn_cdf) =
            compile_link_lanes(file, i, end, storage_veh, &wiring.plans, origin)?;
        lanes.extend(link_lanes);
        links.push(Link {
            id: l.id.clone(),
            free_flow_s: l.length_m / (l.speed_limit_kmh / 3.6),
            first_lane,
            n_lanes: l.lanes,
            storage_veh: storage_veh * l.lanes,
            end,
            turn_cdf,
            exit_lanes: if end == LinkEnd::Exit {
                (first_lane..first_lane + l.lanes).collect()
            } else {
                Vec::new()
            },
        });
    }
    Ok((links, lanes))
}

/// The lanes of link `i` and its cumulative turning shares (empty for a link that leaves
/// the network).
fn compile_link_lanes(
    file: &ScenarioFile,
    i: usize,
    end: LinkEnd,
    storage_veh: u32,
    plans: &[PhasePlan],
    origin: &Origin,
) -> Result<(Vec<Lane>, TurnCdf), ScenarioError> {
    let (span, l) = (file.links[i].span(), file.links[i].get_ref());
    let lane = |signal: u32, movements: MovementSet| Lane {
        link: i as u32,
        storage_veh,
        signal,
        movements,
    };
    match end {
        LinkEnd::Exit => {
            for (key, present) in [
                ("lane_turns", l.lane_turns.is_some()),
                ("turn_ratios", l.turn_ratios.is_some()),
            ] {
                if present {
                    return Err(origin.err(
                        Some(&span),
                        format!("links[{i}] (`{}`).{key}", l.id),
                        "the link arrives at no signal arm (it leaves the network), so it \
                         has no turns"
                            .into(),
                    ));
                }
            }
            let lanes = (0..l.lanes)
                .map(|_| lane(u32::MAX, MovementSet::EMPTY))
                .collect();
            Ok((lanes, Vec::new()))
        }
        LinkEnd::Signal { signal, arm } => {
            let sig = file.signals[signal as usize].get_ref();
            let plan: &PhasePlan = &plans[signal as usize];
            let arrival = Arrival {
                l,
                i,
                span: &span,
                sig,
                arm,
                plan,
                origin,
            };
            let lane_sets = compile_lane_turns(&arrival)?;
            let lanes = lane_sets.iter().map(|&m| lane(signal, m)).collect();
            let served = lane_sets.iter().fold(MovementSet::EMPTY, |a, &b| a.or(b));
            let turn_cdf = compile_turn_ratios(&arrival, served)?;
            Ok((lanes, turn_cdf))
        }
    }
}

/// The link on arm `arm` of `sig`: the one arriving (`incoming`) or the one leaving.
fn arm_link(
    sig: &SignalFile,
    link_index: &HashMap<&str, u32>,
    arm: u8,
    incoming: bool,
) -> Option<u32> {
    let a = sig.arms.by_index()[arm as usize].1?;
    let id = if incoming { &a.incoming } else { &a.out };
    id.as_deref().map(|id| link_index[id])
}

/// Every signal node: the lanes it observes, the links leaving it, and for each movement
/// the lanes that serve it and the link it leads to.
fn compile_signal_nodes(
    file: &ScenarioFile,
    plans: &[PhasePlan],
    link_index: &HashMap<&str, u32>,
    links: &[Link],
    lanes: &[Lane],
    origin: &Origin,
) -> Result<Vec<SignalNode>, ScenarioError> {
    let mut signals = Vec::with_capacity(file.signals.len());
    for (s, signal) in file.signals.iter().enumerate() {
        let sig = signal.get_ref();
        let plan = plans[s].clone();
        let link_of = |arm: u8, incoming: bool| arm_link(sig, link_index, arm, incoming);
        let mut in_lanes = Vec::new();
        let mut out_links = Vec::new();
        for arm in 0..4u8 {
            if let Some(l) = link_of(arm, true) {
                let link = &links[l as usize];
                in_lanes.extend(link.first_lane..link.first_lane + link.n_lanes);
            }
            if let Some(l) = link_of(arm, false) {
                out_links.push(l);
            }
        }
        let mut movement_out_link = Vec::with_capacity(plan.movements().len());
        let mut movement_lanes = Vec::with_capacity(plan.movements().len());
        for (m, mv) in plan.movements().iter().enumerate() {
            let out = exit_arm(mv.approach, mv.turn).and_then(|a| link_of(a, false));
            movement_out_link.push(out.unwrap_or(u32::MAX));
            let serving: Vec<u32> = in_lanes
                .iter()
                .copied()
                .filter(|&ln| lanes[ln as usize].movements.contains(MovementId(m as u8)))
                .collect();
            movement_lanes.push(serving);
        }
        if sig.initial_phase as usize >= plan.n_phases() {
            return Err(origin.err(
                Some(&signal.span()),
                format!("signals[{s}] (`{}`).initial_phase", sig.id),
                format!(
                    "phase {} does not exist (the plan has {} phases)",
                    sig.initial_phase,
                    plan.n_phases()
                ),
            ));
        }
        signals.push(SignalNode {
            id: sig.id.clone(),
            initial_phase: PhaseId(sig.initial_phase),
            plan,
            in_lanes,
            out_links,
            movement_out_link,
            movement_lanes,
        });
    }
    Ok(signals)
}

/// Every demand set, with distinct names.
fn compile_demands(
    file: &ScenarioFile,
    link_index: &HashMap<&str, u32>,
    entry_links: &[u32],
    origin: &Origin,
) -> Result<Vec<Demand>, ScenarioError> {
    let demands = file
        .demand
        .iter()
        .enumerate()
        .map(|(d, demand)| compile_demand(demand, d, link_index, entry_links, origin))
        .collect::<Result<Vec<_>, _>>()?;
    for (d, demand) in demands.iter().enumerate() {
        if demands[..d].iter().any(|o| o.name == demand.name) {
            return Err(origin.err(
                Some(&file.demand[d].span()),
                format!("demand[{d}].name"),
                format!("another demand is already called `{}`", demand.name),
            ));
        }
    }
    Ok(demands)
}

/// Index of the demand set named by `default_demand` (the first when none is named).
fn default_demand(
    file: &ScenarioFile,
    demands: &[Demand],
    origin: &Origin,
) -> Result<usize, ScenarioError> {
    match &file.default_demand {
        None => Ok(0),
        Some(name) => demands.iter().position(|d| &d.name == name).ok_or_else(|| {
            origin.top(
                "default_demand",
                format!(
                    "no demand called `{name}` (have: {})",
                    demand_names(demands)
                ),
            )
        }),
    }
}

/// The reward the scenario file names.
pub(super) fn reward_kind(name: RewardName) -> RewardKind {
    match name {
        RewardName::WaitDelta => RewardKind::WaitDelta,
        RewardName::Queue => RewardKind::Queue,
        RewardName::Pressure => RewardKind::Pressure,
        RewardName::Delay => RewardKind::Delay,
        RewardName::DelayDelta => RewardKind::DelayDelta,
        RewardName::DelayAccrued => RewardKind::DelayAccrued,
        RewardName::DelayAccruedDelta => RewardKind::DelayAccruedDelta,
    }
}

/// Comma-separated demand names.
pub(crate) fn demand_names(demands: &[Demand]) -> String {
    demands
        .iter()
        .map(|d| d.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn compile_model(m: &ModelFile, origin: &Origin) -> Result<Model, ScenarioError> {
    let checks: [(&str, f64, f64, f64); 5] = [
        (
            "saturation_flow_veh_per_hour_per_lane",
            m.saturation_flow_veh_per_hour_per_lane,
            100.0,
            7200.0,
        ),
        ("startup_lost_time_s", m.startup_lost_time_s, 0.0, 10.0),
        ("yellow_used_s", m.yellow_used_s, 0.0, 6.0),
        ("jam_spacing_m", m.jam_spacing_m, 2.0, 50.0),
        ("detector_zone_s", m.detector_zone_s, 0.0, 60.0),
    ];
    for (field, value, lo, hi) in checks {
        if !(value.is_finite() && (lo..=hi).contains(&value)) {
            return Err(origin.err(
                None,
                format!("model.{field}"),
                format!("{value} is outside {lo}..={hi}"),
            ));
        }
    }
    let headway_s = 3600.0 / m.saturation_flow_veh_per_hour_per_lane;
    Ok(Model {
        headway_s,
        first_crossing_s: m.startup_lost_time_s + 0.5 * headway_s,
        yellow_used_s: m.yellow_used_s,
        detector_zone_s: m.detector_zone_s,
        jam_spacing_m: m.jam_spacing_m,
    })
}

fn timing(
    t: &TimingFile,
    field: &str,
    span: &Range<usize>,
    origin: &Origin,
) -> Result<PhaseTiming, ScenarioError> {
    let ms = |name: &str, v: f64| {
        Millis::from_secs_f32(v as f32).ok_or_else(|| {
            origin.err(
                Some(span),
                format!("{field}.{name}"),
                format!("{v} is not a duration in seconds"),
            )
        })
    };
    Ok(PhaseTiming {
        min_green: ms("min_green_s", t.min_green_s)?,
        max_green: ms("max_green_s", t.max_green_s)?,
        yellow: ms("yellow_s", t.yellow_s)?,
        all_red: ms("all_red_s", t.all_red_s)?,
        pedestrian: None,
    })
}

/// Parses `NT`, `EL`, ... into a movement.
fn parse_movement(token: &str) -> Option<Movement> {
    let mut chars = token.chars();
    let arm = match chars.next()?.to_ascii_uppercase() {
        'N' => 0,
        'E' => 1,
        'S' => 2,
        'W' => 3,
        _ => return None,
    };
    let turn = parse_turn(chars.next()?)?;
    chars.next().is_none().then_some(Movement::new(arm, turn))
}

fn parse_turn(c: char) -> Option<Turn> {
    Some(match c.to_ascii_uppercase() {
        'L' => Turn::Left,
        'T' => Turn::Through,
        'R' => Turn::Right,
        'U' => Turn::UTurn,
        _ => return None,
    })
}

/// The movement `arm`+`turn` written as in files (`NT`).
pub(crate) fn movement_name(m: Movement) -> String {
    let arm = ['N', 'E', 'S', 'W'][(m.approach % 4) as usize];
    format!("{arm}{}", turn_letter(m.turn))
}

fn compile_plan(
    sig: &SignalFile,
    s: usize,
    span: &Range<usize>,
    origin: &Origin,
) -> Result<PhasePlan, ScenarioError> {
    let base = format!("signals[{s}] (`{}`)", sig.id);
    let default_timing = timing(&sig.timing, &format!("{base}.timing"), span, origin)?;
    let plan_err =
        |field: String, e: greenwave_core::PlanError| origin.err(Some(span), field, e.to_string());
    match (&sig.plan, &sig.phases) {
        (Some(_), Some(_)) => Err(origin.err(
            Some(span),
            format!("{base}.plan"),
            "give either a preset `plan` or explicit `phases`, not both".into(),
        )),
        (None, None) => Err(origin.err(
            Some(span),
            format!("{base}.phases"),
            format!("missing: give explicit `phases` or `plan = \"{PRESET_FOUR_ARM}\"`"),
        )),
        (Some(preset), None) => {
            if preset != PRESET_FOUR_ARM {
                return Err(origin.err(
                    Some(span),
                    format!("{base}.plan"),
                    format!("unknown preset `{preset}` (known: {PRESET_FOUR_ARM})"),
                ));
            }
            PhasePlan::four_arm_protected_left(default_timing)
                .map_err(|e| plan_err(format!("{base}.timing"), e))
        }
        (None, Some(phases)) => {
            let at = SignalAt {
                sig,
                base,
                span,
                origin,
            };
            explicit_plan(&at, phases)
        }
    }
}

/// A signal of the file, as the plan compiler needs it for its errors: the entry, the
/// field path of it (`signals[s] (`id`)`), its span and the file.
struct SignalAt<'a> {
    sig: &'a SignalFile,
    base: String,
    span: &'a Range<usize>,
    origin: &'a Origin<'a>,
}

/// The plan of explicit `phases`: their movements (in a canonical order), the four-arm
/// conflicts between them, and each phase's timing.
fn explicit_plan(at: &SignalAt<'_>, phases: &[PhaseFile]) -> Result<PhasePlan, ScenarioError> {
    let (sig, base, span, origin) = (at.sig, &at.base, at.span, at.origin);
    let parsed = parse_phases(at, phases)?;
    let mut movements: Vec<Movement> = parsed.iter().flatten().copied().collect();
    movements.sort_by_key(|m| (m.approach, turn_order(m.turn)));
    movements.dedup();
    let conflicts = ConflictMatrix::four_arm(&movements);
    let mut plan_phases = Vec::with_capacity(phases.len());
    for (p, (phase, ms)) in phases.iter().zip(&parsed).enumerate() {
        let mut set = MovementSet::EMPTY;
        for m in ms {
            let id = movements.iter().position(|x| x == m).unwrap_or(0);
            set.insert(MovementId(id as u8));
        }
        let t = TimingFile {
            min_green_s: phase.min_green_s.unwrap_or(sig.timing.min_green_s),
            max_green_s: phase.max_green_s.unwrap_or(sig.timing.max_green_s),
            yellow_s: phase.yellow_s.unwrap_or(sig.timing.yellow_s),
            all_red_s: phase.all_red_s.unwrap_or(sig.timing.all_red_s),
        };
        plan_phases.push(Phase {
            movements: set,
            timing: timing(&t, &format!("{base}.phases[{p}]"), span, origin)?,
        });
    }
    PhasePlan::new(&movements, conflicts, &plan_phases).map_err(|e| {
        // Name the conflicting movements as written in the file.
        let message = match e {
            greenwave_core::PlanError::ConflictingPhase { phase, a, b } => format!(
                "phase {phase}: movements {} and {} conflict and cannot be green together",
                movement_name(movements[a as usize]),
                movement_name(movements[b as usize])
            ),
            other => other.to_string(),
        };
        origin.err(Some(span), format!("{base}.phases"), message)
    })
}

/// Each phase's movements, parsed from their names (`NT`, `EL`, ...).
fn parse_phases(
    at: &SignalAt<'_>,
    phases: &[PhaseFile],
) -> Result<Vec<Vec<Movement>>, ScenarioError> {
    let mut parsed: Vec<Vec<Movement>> = Vec::with_capacity(phases.len());
    for (p, phase) in phases.iter().enumerate() {
        let mut ms = Vec::new();
        for (k, token) in phase.movements.iter().enumerate() {
            let m = parse_movement(token).ok_or_else(|| {
                at.origin.err(
                    Some(at.span),
                    format!("{}.phases[{p}].movements[{k}]", at.base),
                    format!(
                        "`{token}` is not a movement (arm N/E/S/W then turn L/T/R/U, e.g. `NT`)"
                    ),
                )
            })?;
            ms.push(m);
        }
        parsed.push(ms);
    }
    Ok(parsed)
}

/// A link arriving at a signal arm, as the lane and turn compilers need it: its entry,
/// index and span in the file (for errors), and the signal, arm and plan it arrives at.
struct Arrival<'a> {
    l: &'a LinkFile,
    i: usize,
    span: &'a Range<usize>,
    sig: &'a SignalFile,
    arm: u8,
    plan: &'a PhasePlan,
    origin: &'a Origin<'a>,
}

impl Arrival<'_> {
    fn err(&self, field: String, message: String) -> ScenarioError {
        self.origin.err(Some(self.span), field, message)
    }
}

/// The movements (plan ids) each lane of the arriving link serves.
fn compile_lane_turns(a: &Arrival<'_>) -> Result<Vec<MovementSet>, ScenarioError> {
    let (l, sig) = (a.l, a.sig);
    let field = format!("links[{}] (`{}`).lane_turns", a.i, l.id);
    let Some(turns) = &l.lane_turns else {
        return Err(a.err(
            field,
            format!(
                "missing: the link arrives at signal `{}`, so say which turns each lane \
                 serves, e.g. [\"L\", \"T\", \"TR\"]",
                sig.id
            ),
        ));
    };
    if turns.len() != l.lanes as usize {
        return Err(a.err(
            field,
            format!("{} entries for {} lanes", turns.len(), l.lanes),
        ));
    }
    turns
        .iter()
        .enumerate()
        .map(|(k, token)| lane_movements(a, &format!("{field}[{k}]"), token))
        .collect()
}

/// The movements (plan ids) of one lane's entry `token` (`"TR"`, at `field`): each must be
/// in a phase, and lead to an arm with an `out` link.
fn lane_movements(a: &Arrival<'_>, field: &str, token: &str) -> Result<MovementSet, ScenarioError> {
    let (arm, sig) = (a.arm, a.sig);
    if token.is_empty() {
        return Err(a.err(field.to_string(), "a lane must serve a turn".into()));
    }
    let arms = sig.arms.by_index();
    let mut set = MovementSet::EMPTY;
    for c in token.chars() {
        let turn = parse_turn(c).ok_or_else(|| {
            a.err(
                field.to_string(),
                format!("`{c}` is not a turn (L, T, R or U)"),
            )
        })?;
        let mv = Movement::new(arm, turn);
        let id = a
            .plan
            .movements()
            .iter()
            .position(|&x| x == mv)
            .ok_or_else(|| {
                a.err(
                    field.to_string(),
                    format!(
                        "movement {} is in no phase of signal `{}`",
                        movement_name(mv),
                        sig.id
                    ),
                )
            })?;
        let out_arm = exit_arm(arm, turn).unwrap_or(arm);
        let has_out = arms[out_arm as usize]
            .1
            .is_some_and(|x: &ArmFile| x.out.is_some());
        if !has_out {
            return Err(a.err(
                field.to_string(),
                format!(
                    "movement {} leads to the {} arm of signal `{}`, which has no `out` link",
                    movement_name(mv),
                    arms[out_arm as usize].0,
                    sig.id
                ),
            ));
        }
        set.insert(MovementId(id as u8));
    }
    Ok(set)
}

/// Cumulative turning shares `(movement, cum)` of the arriving link, over the movements its
/// lanes serve (`served`).
fn compile_turn_ratios(a: &Arrival<'_>, served: MovementSet) -> Result<TurnCdf, ScenarioError> {
    let field = format!("links[{}] (`{}`).turn_ratios", a.i, a.l.id);
    let Some(r) = &a.l.turn_ratios else {
        return Err(a.err(
            field,
            "missing: the link arrives at a signal, so give the turning shares, e.g. \
             { left = 0.1, through = 0.8, right = 0.1 }"
                .into(),
        ));
    };
    let shares = [
        ("left", Turn::Left, r.left),
        ("through", Turn::Through, r.through),
        ("right", Turn::Right, r.right),
        ("u_turn", Turn::UTurn, r.u_turn),
    ];
    let total: f64 = shares.iter().map(|s| s.2).sum();
    let mut cdf = Vec::new();
    let mut cum = 0.0;
    for (name, turn, share) in shares {
        if !(share.is_finite() && share >= 0.0) {
            return Err(a.err(
                format!("{field}.{name}"),
                format!("{share} is not a share ≥ 0"),
            ));
        }
        if share == 0.0 {
            continue;
        }
        let mv = Movement::new(a.arm, turn);
        let id = a
            .plan
            .movements()
            .iter()
            .position(|&x| x == mv)
            .filter(|&id| served.contains(MovementId(id as u8)))
            .ok_or_else(|| {
                a.err(
                    format!("{field}.{name}"),
                    format!(
                        "vehicles turn {} here but no lane serves it (see lane_turns)",
                        movement_name(mv)
                    ),
                )
            })?;
        cum += share / total;
        cdf.push((id as u8, cum));
    }
    match cdf.last_mut() {
        // Guard against rounding: the last share closes at exactly 1.
        Some(last) => last.1 = 1.0,
        None => {
            return Err(a.err(
                field,
                "all shares are 0: vehicles on this link must go somewhere".into(),
            ))
        }
    }
    Ok(cdf)
}

fn compile_demand(
    demand: &Spanned<DemandFile>,
    d: usize,
    link_index: &HashMap<&str, u32>,
    entry_links: &[u32],
    origin: &Origin,
) -> Result<Demand, ScenarioError> {
    let (span, dm) = (demand.span(), demand.get_ref());
    let base = format!("demand[{d}] (`{}`)", dm.name);
    if dm.name.is_empty() {
        return Err(origin.err(Some(&span), format!("demand[{d}].name"), "is empty".into()));
    }
    let mut points = Vec::with_capacity(dm.profile.len());
    for (k, &[t, m]) in dm.profile.iter().enumerate() {
        let field = format!("{base}.profile[{k}]");
        let in_range = t.is_finite() && t.abs() <= MAX_PROFILE_TIME_S;
        if !in_range || points.last().is_some_and(|&(prev, _)| t <= prev) {
            return Err(origin.err(
                Some(&span),
                field,
                format!(
                    "time {t} must be within ±{MAX_PROFILE_TIME_S} s and later than the point before"
                ),
            ));
        }
        if !(m.is_finite() && (0.0..=MAX_PROFILE_MULTIPLIER).contains(&m)) {
            return Err(origin.err(
                Some(&span),
                field,
                format!("multiplier {m} is outside 0..={MAX_PROFILE_MULTIPLIER}"),
            ));
        }
        if m > 0.0 && m < MIN_POSITIVE_PROFILE_MULTIPLIER {
            return Err(origin.err(
                Some(&span),
                field,
                format!(
                    "multiplier {m} is above 0 but below {MIN_POSITIVE_PROFILE_MULTIPLIER}: give 0 \
                     for no demand (arrivals this rare cannot be drawn in time)"
                ),
            ));
        }
        points.push((t, m));
    }
    let profile = if points.is_empty() {
        Profile::flat()
    } else {
        Profile::from_points(points)
    };
    let mut flows = Vec::new();
    for (id, &q) in &dm.flows_veh_per_hour {
        let field = format!("{base}.flows_veh_per_hour.{id}");
        let Some(&l) = link_index.get(id.as_str()) else {
            return Err(origin.err(Some(&span), field, format!("no link `{id}`")));
        };
        if !entry_links.contains(&l) {
            return Err(origin.err(
                Some(&span),
                field,
                format!("link `{id}` leaves a signal; demand enters only on entry links"),
            ));
        }
        if !(q.is_finite() && (0.0..=20_000.0).contains(&q)) {
            return Err(origin.err(
                Some(&span),
                field,
                format!("{q} is not a flow in 0..=20000 veh/h"),
            ));
        }
        if q > 0.0 {
            flows.push((l, q));
        }
    }
    flows.sort_by_key(|f| f.0);
    Ok(Demand {
        name: dm.name.clone(),
        description: dm.description.clone(),
        profile,
        flows_veh_per_hour: flows,
    })
}
