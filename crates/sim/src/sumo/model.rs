//! From a SUMO traffic light to a greenwave phase plan, and back to SUMO state strings.
//!
//! * **Program**: the light's active program (the last `<tlLogic>` of that id in the net,
//!   as in SUMO), or the one named by [`ModelOptions::program`]; static, actuated and
//!   delay-based programs alike (only their phases are read); a NEMA program as the
//!   dual-ring stages it shows (rewritten as it is read, see [`nema`](super::nema)).
//! * **Left on its program**: a light whose program has fewer than two distinct green
//!   phases serving a connection (a pedestrian signal, a ramp meter, a one-approach
//!   light: nothing to choose), more than 16, or whose derived plan is refused, is not
//!   controlled: it keeps running its program in SUMO and is listed in
//!   [`NetModels::on_program`] with the reason. Links with `linkIndex="-1"` pass the
//!   junction uncontrolled.
//! * **Timing** per phase from the program (see [`timing`](super::timing)): yellow and
//!   all-red from the intervals that follow each green, max green from `maxDur` or the
//!   green itself (at least 60 s, at most 300 s), min green 5 s; then the user's overrides.
//! * **Movements** are the traffic light's controlled links grouped by incoming edge,
//!   outgoing edge and green pattern in the static program (so every link of a movement
//!   is green in exactly the same static phases). Links never green in the static program
//!   stay red; links that are off (`o`/`O`) in every phase keep their static character.
//! * **Approaches** are the incoming road edges, numbered clockwise by the bearing traffic
//!   comes from (0 = the first at or after north), as in greenwave-core's four-arm plans.
//! * **Phases** are the distinct green phases of the program (those with a `G`/`g` on a
//!   link that controls a connection, and no `y`/`u`), in program order; phases that
//!   differ only in unconnected links count once. A green shorter than min green whose
//!   links are all green in a longer phase too is a transition between stages and is
//!   left out.
//! * **Conflicts**: two movements conflict when SUMO's junction lists any of their links
//!   as foes (`<request foes=...>`) and the static program never shows them green together.
//!   Pairs the static program runs together are permissive (one yields, `g`) and allowed;
//!   where neither yields (both `G`) the light's notes name the pair, as the program itself
//!   then greens crossing links.
//!   Without internal links (`--no-internal-links`) there are no foe tables; then two
//!   movements conflict whenever the static program never shows them green together.
//! * **Display**: green uses the static program's own `G`/`g` for that link in the phase
//!   (the weaker of the two phases during a change), yellow is `y`, red is `r`.

use std::collections::{BTreeMap, HashMap, HashSet};

use greenwave_core::plan::{ALL_RED_RANGE, MAX_MOVEMENTS, MAX_PHASES, YELLOW_RANGE};
use greenwave_core::{
    ConflictMatrix, Intergreen, Interval, Millis, Movement, MovementId, MovementSet, Phase,
    PhasePlan, Signal, SignalFrame, Turn,
};

use super::net::{NetConnection, NetEdge, NetFile, TlLogic};
use super::timing::{
    is_green, longest_link_yellow_s, net_phase_timing, program_intergreen_s, resolve, same_greens,
    secs_to_ms, secs_to_step, NetPhaseTiming, TimingOverrides, TimingSpec, DEFAULT_MIN_GREEN_S,
};
use super::SumoError;

/// How one position of the state string is driven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkRole {
    /// Part of this movement of the plan.
    Movement(u8),
    /// Never green in the static program: always red.
    Red,
    /// Unsignalised (off in every phase) or unused: always this character.
    Fixed(u8),
}

/// One SUMO traffic light as greenwave drives it.
#[derive(Clone, Debug)]
pub struct TlsModel {
    /// Traffic light id.
    pub id: String,
    /// The program the plan was derived from.
    pub program_id: String,
    /// The derived plan.
    pub plan: PhasePlan,
    /// Role of each link (state-string position).
    pub links: Vec<LinkRole>,
    /// For each plan phase, the index of the program phase it came from (in its own
    /// program, which is `program_id`'s unless the plan joins several programs).
    pub static_phases: Vec<usize>,
    /// For each plan phase, the static program's state string.
    pub phase_states: Vec<String>,
    /// For each plan phase, its green time in the light's program (an actuated program's
    /// initial duration), to the millisecond.
    pub program_greens: Vec<Millis>,
    /// For each plan phase, the phase it is a walk stage of ([`walk_stages`]); none where
    /// nothing calls for pedestrians (`SumoEnv` clears them with the pedestrian zones).
    pub walk_stages: Vec<Option<usize>>,
    /// For each movement, its incoming and outgoing edge.
    pub movement_edges: Vec<(String, String)>,
    /// For each movement, its incoming lanes (shared lanes appear in several movements).
    pub movement_in_lanes: Vec<Vec<String>>,
    /// For each movement, its outgoing lanes.
    pub movement_out_lanes: Vec<Vec<String>>,
    /// Observed incoming lanes, by approach then lane id (the observation's lane order).
    pub in_lanes: Vec<String>,
    /// Outgoing lanes of all movements, sorted.
    pub out_lanes: Vec<String>,
    /// For each movement, the pedestrian crossings (`:J_c…` edges) among its links' ends
    /// (none for a movement of vehicle links only).
    pub movement_crossings: Vec<Vec<String>>,
    /// Observed pedestrian crossings, by approach then edge id: the observation's
    /// pedestrian zones, after the incoming lanes' (tools/README.md, finding 36).
    pub crossings: Vec<String>,
    /// Incoming road edge of each approach index.
    pub approaches: Vec<String>,
    /// Per plan phase, the movements whose detectors speak for it (greenwave-core's
    /// [`assigned_movements`](greenwave_core::control::assigned_movements)) by the
    /// program's `G`/`g` and the movements' shared lanes ([`detector_assignment`]), before walk stages
    /// ([`TlsModel::actuated_assignment`]).
    pub detector_assignment: Vec<MovementSet>,
    /// Whether the conflicts came from junction foe tables (false: from the program only).
    pub conflicts_from_junction: bool,
    /// Where the net's timing was brought into greenwave's safe range (e.g. a 2 s yellow
    /// raised to 3 s).
    pub timing_notes: Vec<String>,
}

fn is_transition(c: u8) -> bool {
    matches!(c, b'y' | b'Y' | b'u')
}

fn turn_order(t: Turn) -> u8 {
    match t {
        Turn::Left => 0,
        Turn::Through => 1,
        Turn::Right => 2,
        Turn::UTurn => 3,
        Turn::Pedestrian => 4,
    }
}

/// How plans are derived from a net.
#[derive(Clone, Copy, Debug)]
pub struct ModelOptions<'a> {
    /// The program to use for lights that have one of this id (`--program`); others run
    /// their active program (the last one in the file, as in SUMO).
    pub program: Option<&'a str>,
    /// Timing overrides on top of what each program says.
    pub timing: &'a TimingSpec,
    /// SUMO's step (ms): net timing is rounded up to it, overrides must be multiples.
    pub step_ms: u32,
}

/// A traffic light greenwave leaves on its own program, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticSignal {
    /// Traffic light id.
    pub id: String,
    /// The program it runs.
    pub program_id: String,
    /// Why it is not controlled, and what would change that.
    pub reason: String,
}

impl std::fmt::Display for StaticSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "traffic light {} stays on its program {:?}: {}",
            self.id, self.program_id, self.reason
        )
    }
}

/// Every traffic light of a net: those greenwave controls and those left on their program.
#[derive(Clone, Debug)]
pub struct NetModels {
    /// Controlled lights, in net order: greenwave's signals.
    pub models: Vec<TlsModel>,
    /// Lights left on their own program.
    pub on_program: Vec<StaticSignal>,
}

/// Why one light is not controlled.
enum Refusal {
    /// It cannot be controlled as it is: it stays on its program.
    Static(String),
    /// The user's settings are wrong for it: the whole run is refused.
    Fatal(SumoError),
}

impl From<SumoError> for Refusal {
    fn from(e: SumoError) -> Self {
        Refusal::Fatal(e)
    }
}

/// Refuses a `--program` that no light of the net (or of its additional files) has: every
/// light would silently keep its own program, as if the option were not given.
fn check_program_exists(net: &NetFile, wanted: &str) -> Result<(), SumoError> {
    if net.tl_logics.iter().any(|t| t.program_id == wanted) {
        return Ok(());
    }
    let mut ids: Vec<&str> = net
        .tl_logics
        .iter()
        .map(|t| t.program_id.as_str())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    Err(SumoError::Config(format!(
        "--program {wanted}: no traffic light of the net or its additional files has a \
         program with that id (the ids there: {})",
        ids.join(", ")
    )))
}

/// Builds the model of every traffic light of `net` that greenwave can control; the
/// others are listed with the reason and keep their program (a net where none can be
/// controlled still loads, with no signals). Fails when the net has no light at all, no
/// light has the program asked for, or the timing settings are refused.
pub fn build_models(net: &NetFile, opts: ModelOptions<'_>) -> Result<NetModels, SumoError> {
    let ids = net.tls_ids();
    if ids.is_empty() {
        return Err(SumoError::NoTrafficLights {
            path: net.path.clone(),
        });
    }
    opts.timing.check_signal_ids(ids.iter().copied())?;
    if let Some(wanted) = opts.program {
        check_program_exists(net, wanted)?;
    }
    let foes = FoeIndex::new(net);
    let shared = junctions_of_two_lights(net);
    let mut out = NetModels {
        models: Vec::new(),
        on_program: Vec::new(),
    };
    for id in ids {
        let program = net
            .active_program(id, opts.program)
            .expect("id from tl_logics");
        let built = match shared.get(id) {
            Some(why) => Err(Refusal::Static(why.clone())),
            None => build_one(net, &foes, program, opts),
        };
        match built {
            Ok(m) => out.models.push(m),
            Err(Refusal::Static(reason)) => out.on_program.push(StaticSignal {
                id: id.to_string(),
                program_id: program.program_id.clone(),
                reason,
            }),
            Err(Refusal::Fatal(e)) => return Err(e),
        }
    }
    Ok(out)
}

/// The lights that share a junction with another light, each with the reason it stays on
/// its program: greenwave derives each light's plan and conflicts alone, so two lights of
/// one junction, controlled apart, could show conflicting greens together.
fn junctions_of_two_lights(net: &NetFile) -> HashMap<&str, String> {
    // Ordered, so that a light at two such junctions is named by the same one every run.
    let mut lights_at: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for c in &net.connections {
        let Some(tl) = c.tl.as_deref() else { continue };
        // The junction a link crosses: its edge's end, or an internal edge's own junction
        // (`:J_w0`, a walking area before a crossing).
        let junction = match net.edges.get(&c.from).and_then(|e| e.to.as_deref()) {
            Some(j) => j,
            None => match c.from.strip_prefix(':').and_then(|e| e.rsplit_once('_')) {
                Some((j, _)) => j,
                None => continue,
            },
        };
        let at = lights_at.entry(junction).or_default();
        if !at.contains(&tl) {
            at.push(tl);
        }
    }
    let mut out = HashMap::new();
    for (junction, lights) in lights_at.into_iter().filter(|(_, l)| l.len() > 1) {
        for &tl in &lights {
            let others: Vec<&str> = lights.iter().copied().filter(|&o| o != tl).collect();
            out.entry(tl).or_insert_with(|| {
                format!(
                    "junction {junction} is driven by it and by {}; greenwave controls each \
                     light alone and could show their conflicting greens together (join them \
                     into one light, netconvert --tls.join)",
                    others.join(", ")
                )
            });
        }
    }
    out
}

/// Where each internal lane sits in its junction's foe table.
struct FoeIndex<'a> {
    net: &'a NetFile,
    /// Internal lane -> (junction id, request index).
    slot: HashMap<&'a str, (&'a str, usize)>,
    /// Internal lane -> the next internal lane of the same link (left turns wait halfway).
    next: HashMap<String, &'a str>,
}

impl<'a> FoeIndex<'a> {
    fn new(net: &'a NetFile) -> Self {
        let mut slot = HashMap::new();
        for (jid, j) in &net.junctions {
            if j.kind == "internal" {
                continue;
            }
            for (i, lane) in j.int_lanes.iter().enumerate() {
                slot.insert(lane.as_str(), (jid.as_str(), i));
            }
        }
        let mut next = HashMap::new();
        for c in &net.connections {
            if let (true, Some(via)) = (c.from.starts_with(':'), &c.via) {
                next.insert(c.from_lane_id(), via.as_str());
            }
        }
        FoeIndex { net, slot, next }
    }

    /// The junction request slot of a link, following its chain of internal lanes (the
    /// junction indexes a left turn by its second internal lane).
    fn slot_of(&self, c: &NetConnection) -> Option<(&'a str, usize)> {
        let mut lane: &str = c.via.as_deref()?;
        for _ in 0..8 {
            if let Some(&s) = self.slot.get(lane) {
                return Some(s);
            }
            lane = self.next.get(lane)?;
        }
        None
    }

    fn foes(&self, a: (&str, usize), b: (&str, usize)) -> bool {
        if a.0 != b.0 {
            return false;
        }
        let Some(j) = self.net.junctions.get(a.0) else {
            return false;
        };
        // A row or bit the table lacks (a junction with fewer requests, or shorter foes
        // strings, than internal lanes) is a conflict: the safe reading of a gap.
        let bit = |i: usize, k: usize| j.foes.get(i).and_then(|r| r.get(k)).copied();
        bit(a.1, b.1).unwrap_or(true) || bit(b.1, a.1).unwrap_or(true)
    }
}

/// A light's links (state-string positions), each with the connections it controls.
type LinkConns<'a> = Vec<Vec<&'a NetConnection>>;

fn link_connections<'a>(
    net: &'a NetFile,
    program: &TlLogic,
) -> Result<(usize, LinkConns<'a>), Refusal> {
    let pid = &program.program_id;
    let n = program
        .phases
        .first()
        .map(|p| p.state.len())
        .ok_or_else(|| Refusal::Static(format!("program {pid:?} has no phases")))?;
    if let Some((k, p)) = program
        .phases
        .iter()
        .enumerate()
        .find(|p| p.1.state.len() != n)
    {
        return Err(Refusal::Static(format!(
            "program {pid:?}: phase {k} has {} links, phase 0 has {n}; fix the program's state strings",
            p.state.len()
        )));
    }
    let mut conns: LinkConns<'a> = vec![Vec::new(); n];
    // Connections without a link index (linkIndex -1) pass the junction uncontrolled.
    for c in net
        .connections
        .iter()
        .filter(|c| c.tl.as_deref() == Some(program.id.as_str()))
    {
        let Some(li) = c.link_index else { continue };
        conns
            .get_mut(li)
            .ok_or_else(|| {
                Refusal::Static(format!(
                    "connection {} -> {} has linkIndex {li}, program {pid:?} has {n} links",
                    c.from, c.to
                ))
            })?
            .push(c);
    }
    Ok((n, conns))
}

/// Refuses a program whose phases name a successor (`next`) other than the next in the file:
/// greenwave reads a program's clearances, intergreens and clock in file order.
fn check_file_order(program: &TlLogic) -> Result<(), Refusal> {
    let n = program.phases.len();
    for (k, p) in program.phases.iter().enumerate() {
        let Some(next) = p.next.as_deref() else {
            continue;
        };
        let in_file_order = next
            .split_whitespace()
            .map(str::parse::<usize>)
            .collect::<Result<Vec<_>, _>>()
            .is_ok_and(|v| v == [(k + 1) % n]);
        if !in_file_order {
            return Err(Refusal::Static(format!(
                "program {:?}: phase {k} names the phases after it (next=\"{next}\"); greenwave \
                 reads a program's clearances in file order, so it does not take over a program \
                 that orders its phases otherwise",
                program.program_id
            )));
        }
    }
    Ok(())
}

/// One green phase of a light's program(s).
struct GreenPhase<'a> {
    /// The program it is in.
    program: &'a TlLogic,
    /// Its index there.
    index: usize,
    /// Which links are green (only links that control a connection count).
    mask: Vec<bool>,
}

/// The distinct green phases of `programs`, in order: phases that differ only in
/// unconnected links, and phases that green no connected link, are one or none.
fn green_phases<'a>(programs: &[&'a TlLogic], conns: &LinkConns<'_>) -> Vec<GreenPhase<'a>> {
    let mut greens: Vec<GreenPhase<'a>> = Vec::new();
    for &program in programs {
        for (k, phase) in program.phases.iter().enumerate() {
            let s = phase.state.as_bytes();
            if s.len() != conns.len() || s.iter().any(|&c| is_transition(c)) {
                continue;
            }
            let mask: Vec<bool> = s
                .iter()
                .zip(conns)
                .map(|(&c, cs)| is_green(c) && !cs.is_empty())
                .collect();
            if mask.iter().any(|&g| g) && !greens.iter().any(|g| g.mask == mask) {
                greens.push(GreenPhase {
                    program,
                    index: k,
                    mask,
                });
            }
        }
    }
    greens
}

/// The green phases a plan is derived from: the program's own, or, when it has fewer than
/// two and `union_of_programs` allows, those of every program of the light (lights whose
/// programs each hold one green, switched by an outside controller, as in SUMO's game nets).
fn plan_greens<'a>(
    net: &'a NetFile,
    program: &'a TlLogic,
    conns: &LinkConns<'_>,
    union_of_programs: bool,
) -> Vec<GreenPhase<'a>> {
    let own = green_phases(&[program], conns);
    if own.len() >= 2 || !union_of_programs {
        return own;
    }
    let mut all: Vec<&TlLogic> = vec![program];
    all.extend(
        net.tl_logics
            .iter()
            .filter(|t| t.id == program.id && t.program_id != program.program_id),
    );
    green_phases(&all, conns)
}

/// Drops green phases shorter than `min_green_s` in their program (for actuated programs:
/// `maxDur`) whose green links all appear in a kept phase too: such phases are transitions
/// between stages (German programs show, e.g., a 1 s green of the next stage's first
/// links), not stages a controller would hold. A phase that alone serves some link stays.
fn drop_transitions(greens: Vec<GreenPhase<'_>>, min_green_s: f64) -> Vec<GreenPhase<'_>> {
    let long = |g: &GreenPhase<'_>| {
        let p = &g.program.phases[g.index];
        p.max_dur_s
            .filter(|_| g.program.kind != "static")
            .unwrap_or(p.duration_s)
            >= min_green_s
    };
    let mut keep: Vec<bool> = greens.iter().map(long).collect();
    for k in 0..greens.len() {
        if keep[k] {
            continue;
        }
        let covered = greens[k]
            .mask
            .iter()
            .enumerate()
            .all(|(i, &g)| !g || greens.iter().zip(&keep).any(|(o, &kept)| kept && o.mask[i]));
        keep[k] = !covered;
    }
    greens
        .into_iter()
        .zip(keep)
        .filter_map(|(g, k)| k.then_some(g))
        .collect()
}

/// Whether `edge` is a road (not internal, crossing or walking area).
fn is_road(net: &NetFile, edge: &str) -> bool {
    net.edges
        .get(edge)
        .map(|e| e.function.is_empty())
        .unwrap_or(!edge.starts_with(':'))
}

/// The travel direction at the end of `edge` (its first lane's last shape segment).
fn edge_end_direction(net: &NetFile, edge: &str) -> Option<Heading> {
    let (dx, dy) = net.lanes.get(&format!("{edge}_0"))?.end_direction?;
    Some(Heading(dx, dy))
}

/// A direction in the net's plane (x east, y north), not normalised.
#[derive(Clone, Copy)]
struct Heading(f64, f64);

impl Heading {
    fn neg(self) -> Self {
        Heading(-self.0, -self.1)
    }
}

/// Bearing of a direction, clockwise from north, in [0, 360).
fn bearing_deg(d: Heading) -> f64 {
    d.0.atan2(d.1).to_degrees().rem_euclid(360.0)
}

/// Incoming road edges, sorted clockwise by the bearing their traffic comes from.
fn approach_edges<'a>(net: &NetFile, conns: &LinkConns<'a>, pattern: &[u16]) -> Vec<&'a str> {
    let mut edges: Vec<&str> = conns
        .iter()
        .zip(pattern)
        .filter(|(_, &p)| p != 0)
        .flat_map(|(cs, _)| cs.iter().map(|c| c.from.as_str()))
        .filter(|e| is_road(net, e))
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let bearing = |edge: &str| -> f64 {
        // Traffic arrives heading `d`, so it comes from `-d`.
        edge_end_direction(net, edge)
            .map(|d| bearing_deg(d.neg()))
            .unwrap_or(f64::INFINITY)
    };
    edges.sort_by(|a, b| bearing(a).total_cmp(&bearing(b)).then(a.cmp(b)));
    edges
}

/// The pedestrian crossing a link leads onto or comes from: SUMO controls a crossing by
/// its link from the walking area onto it (older nets: from the crossing itself).
fn crossing_of<'n>(net: &'n NetFile, c: &NetConnection) -> Option<&'n NetEdge> {
    crossing_id_of(net, c).and_then(|id| net.edges.get(id))
}

/// The id of [`crossing_of`]'s crossing.
fn crossing_id_of<'c>(net: &NetFile, c: &'c NetConnection) -> Option<&'c String> {
    [&c.to, &c.from].into_iter().find(|e| {
        net.edges
            .get(e.as_str())
            .is_some_and(|e| e.function == "crossing")
    })
}

fn turn_of(net: &NetFile, c: &NetConnection) -> Turn {
    if crossing_of(net, c).is_some() {
        return Turn::Pedestrian;
    }
    match c.dir.as_str() {
        "l" | "L" => Turn::Left,
        "r" | "R" => Turn::Right,
        "t" => Turn::UTurn,
        _ => Turn::Through,
    }
}

/// Movement key: approach, turn order, from edge, to edge, green pattern.
type MovementKey = (u8, u8, String, String, u16);

/// The links (state-string positions) of each movement, by movement key.
type SignalGroups = BTreeMap<MovementKey, Vec<usize>>;

/// How finely links are grouped into movements: links of one movement always share
/// their green pattern, so any grouping is safe; finer ones inform the policy better.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grouping {
    /// By approach, turn, incoming and outgoing edge (the default).
    Edges,
    /// By approach and turn.
    Turns,
    /// By approach only.
    Approaches,
}

/// The approach on whose arm the exit `exit` lies (a crossing over an exit only): the one
/// that comes from where the exit goes, else the one whose bearing is nearest the exit's,
/// within 45°.
fn arm_of_exit(net: &NetFile, approaches: &[&str], exit: &str) -> Option<usize> {
    let towards = net.edges.get(exit).and_then(|e| e.to.as_ref());
    let from = |a: &str| net.edges.get(a).and_then(|e| e.from.as_ref());
    let same_node = approaches
        .iter()
        .position(|a| towards.is_some() && from(a) == towards);
    same_node.or_else(|| {
        let exit_bearing = bearing_deg(edge_end_direction(net, exit)?);
        let gap = |a: &str| {
            let from = bearing_deg(edge_end_direction(net, a)?.neg());
            let d = (from - exit_bearing).rem_euclid(360.0);
            Some(d.min(360.0 - d))
        };
        let (i, d) = approaches
            .iter()
            .enumerate()
            .filter_map(|(i, a)| Some((i, gap(a)?)))
            .min_by(|x, y| x.1.total_cmp(&y.1))?;
        (d <= 45.0).then_some(i)
    })
}

/// Groups links into movements; returns the groups and each link's role.
fn group_links(
    net: &NetFile,
    program: &TlLogic,
    (conns, pattern): (&LinkConns<'_>, &[u16]),
    approaches: &[&str],
    grouping: Grouping,
) -> (SignalGroups, Vec<LinkRole>) {
    let approach_of = |c: &NetConnection| -> u8 {
        let crossed = crossing_of(net, c)
            .map(|e| e.crossing_edges.as_slice())
            .unwrap_or(&[]);
        std::iter::once(&c.from)
            .chain(crossed)
            .find_map(|e| approaches.iter().position(|a| a == e))
            .or_else(|| crossed.iter().find_map(|e| arm_of_exit(net, approaches, e)))
            .unwrap_or(0) as u8
    };
    let mut groups: SignalGroups = BTreeMap::new();
    let mut links = vec![LinkRole::Red; conns.len()];
    for (i, cs) in conns.iter().enumerate() {
        let first_char = program.phases[0].state.as_bytes()[i];
        let Some(&c) = cs.first() else {
            links[i] = LinkRole::Fixed(first_char);
            continue;
        };
        if pattern[i] == 0 {
            let off = program
                .phases
                .iter()
                .all(|p| matches!(p.state.as_bytes()[i], b'o' | b'O'));
            links[i] = if off {
                LinkRole::Fixed(first_char)
            } else {
                LinkRole::Red
            };
            continue;
        }
        let key = match grouping {
            Grouping::Edges => (
                approach_of(c),
                turn_order(turn_of(net, c)),
                c.from.clone(),
                c.to.clone(),
                pattern[i],
            ),
            Grouping::Turns => (
                approach_of(c),
                turn_order(turn_of(net, c)),
                String::new(),
                String::new(),
                pattern[i],
            ),
            Grouping::Approaches => (approach_of(c), 0, String::new(), String::new(), pattern[i]),
        };
        groups.entry(key).or_default().push(i);
    }
    (groups, links)
}

/// The conflict matrix: junction foes the static program never shows green together.
fn conflicts_of(
    foes: &FoeIndex<'_>,
    conns: &LinkConns<'_>,
    movement_links: &[&[usize]],
    movement_pattern: &[u16],
) -> (ConflictMatrix, bool) {
    let slots: Vec<Vec<Option<(&str, usize)>>> = movement_links
        .iter()
        .map(|ls| {
            ls.iter()
                .flat_map(|&i| conns[i].iter())
                .map(|c| foes.slot_of(c))
                .collect()
        })
        .collect();
    let informed = |m: usize| slots[m].iter().all(Option::is_some);
    let n = movement_links.len();
    let from_junction = (0..n).all(informed);
    let mut conflicts = ConflictMatrix::default();
    for a in 0..n {
        for b in a + 1..n {
            if movement_pattern[a] & movement_pattern[b] != 0 {
                continue; // the static program runs them together
            }
            let foe = !informed(a)
                || !informed(b)
                || slots[a]
                    .iter()
                    .flatten()
                    .any(|&sa| slots[b].iter().flatten().any(|&sb| foes.foes(sa, sb)));
            if foe {
                conflicts.set(MovementId(a as u8), MovementId(b as u8));
            }
        }
    }
    (conflicts, from_junction)
}

/// A note where the static program shows two links green together, both with priority
/// (`G`: neither yields), that the junction's foe table says cross or merge. greenwave
/// takes the program's phases as the safe sets of movements (such pairs run together, as
/// the program runs them, and get no clearance between them); a program like that is
/// worth checking before any controller runs it. `None` for a sound program.
fn unyielding_foes_note(
    foes: &FoeIndex<'_>,
    conns: &LinkConns<'_>,
    greens: &[GreenPhase<'_>],
) -> Option<String> {
    let slots: Vec<Vec<(&str, usize)>> = conns
        .iter()
        .map(|cs| cs.iter().filter_map(|c| foes.slot_of(c)).collect())
        .collect();
    let crossing = |a: usize, b: usize| {
        slots[a]
            .iter()
            .any(|&sa| slots[b].iter().any(|&sb| foes.foes(sa, sb)))
    };
    let mut pairs = std::collections::BTreeSet::new();
    let mut first = None;
    for g in greens {
        let state = g.program.phases[g.index].state.as_bytes();
        let prior: Vec<usize> = (0..state.len().min(slots.len()))
            .filter(|&i| state[i] == b'G')
            .collect();
        for (k, &a) in prior.iter().enumerate() {
            for &b in &prior[k + 1..] {
                if crossing(a, b) && pairs.insert((a, b)) && first.is_none() {
                    first = Some((a, b, g.index));
                }
            }
        }
    }
    let (a, b, phase) = first?;
    let more = match pairs.len() - 1 {
        0 => String::new(),
        k => format!(" ({k} more such pairs)"),
    };
    Some(format!(
        "its program shows links {a} and {b} green together in its phase {phase}, both with \
         priority (G), though the junction has them cross or merge{more}: greenwave runs \
         them together as the program does, without clearance between them; check the \
         program (a link that yields is g)"
    ))
}

/// Sorted, deduplicated road lanes of a movement's links (`f` picks the end).
fn movement_lanes(
    net: &NetFile,
    conns: &LinkConns<'_>,
    links: &[usize],
    f: fn(&NetConnection) -> String,
) -> Vec<String> {
    let mut v: Vec<String> = links
        .iter()
        .flat_map(|&i| conns[i].iter())
        .map(|c| f(c))
        .filter(|l| is_road(net, l.rsplit_once('_').map(|(e, _)| e).unwrap_or(l)))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The model of one traffic light, or why it stays on its program.
fn build_one(
    net: &NetFile,
    foes: &FoeIndex<'_>,
    program: &TlLogic,
    opts: ModelOptions<'_>,
) -> Result<TlsModel, Refusal> {
    let id = program.id.as_str();
    let (n, conns) = link_connections(net, program)?;
    let greens = choosable_greens(net, program, &conns, opts)?;
    // Every program the plan reads: the light's own, and those whose greens it joined.
    check_file_order(program)?;
    for g in &greens {
        check_file_order(g.program)?;
    }
    let pattern = green_patterns(&greens, n);
    let approaches = approach_edges(net, &conns, &pattern);
    if approaches.len() > u8::MAX as usize {
        return Err(Refusal::Static(format!("{} approaches", approaches.len())));
    }
    let (groups, mut links) = signal_groups(net, program, &conns, &pattern, &approaches)?;
    let table = movement_table(net, &conns, &groups, &mut links)?;
    let (conflicts, conflicts_from_junction) =
        conflicts_of(foes, &conns, &table.links, &table.pattern);
    let (plan, mut timing_notes) = derive_plan(id, &greens, &table, conflicts, opts)?;
    let stages: Vec<usize> = greens
        .iter()
        .filter(|g| std::ptr::eq(g.program, program))
        .map(|g| g.index)
        .collect();
    let short = short_intergreens(
        program,
        &stages,
        &plan,
        (&table.links, &links),
        opts.step_ms,
    );
    // Off unless asked for (`--program-intergreens on`): the recorded figures and the
    // policies trained before were measured without them.
    let keep = opts.timing.overrides_for(id).program_intergreens == Some(true);
    let plan = match keep {
        true => with_program_intergreens(plan, &short)?,
        false => plan,
    };
    timing_notes.extend(intergreen_note(&short, keep));
    timing_notes.extend(unyielding_foes_note(foes, &conns, &greens));
    timing_notes.extend(net.waut_note(id, &program.program_id));
    let (in_lanes, out_lanes) = observed_lanes(&groups, &table);
    let crossings = observed_crossings(&groups, &table);
    let phase_states: Vec<String> = greens
        .iter()
        .map(|g| g.program.phases[g.index].state.clone())
        .collect();
    let program_greens: Vec<Millis> = greens
        .iter()
        .map(|g| secs_to_ms(g.program.phases[g.index].duration_s))
        .collect();
    Ok(TlsModel {
        detector_assignment: detector_assignment(&plan, &links, &phase_states, &table.in_lanes),
        walk_stages: walk_stages(&plan),
        id: id.to_string(),
        program_id: program.program_id.clone(),
        plan,
        links,
        static_phases: greens.iter().map(|g| g.index).collect(),
        program_greens,
        phase_states,
        movement_edges: table.edges,
        movement_in_lanes: table.in_lanes,
        movement_out_lanes: table.out_lanes,
        in_lanes,
        out_lanes,
        movement_crossings: table.crossings,
        crossings,
        approaches: approaches.iter().map(|s| s.to_string()).collect(),
        conflicts_from_junction,
        timing_notes,
    })
}

/// Per plan phase (with `phase_states`, its program state), the movements whose detectors
/// speak for it: all it serves, less those that yield in it (none of their links shows `G`
/// there) and have right of way in another phase (one of their links shows `G` there) on
/// lanes of their own there: a left turn permitted beside the opposing through and
/// protected in a phase of its own, from a pocket or a lane only the movements of that
/// phase use, belongs to that phase only. SUMO's actuated controller does the like: a
/// lane's loop does not extend a phase where its link is minor green but major in another
/// phase (MSActuatedTrafficLightLogic, "check1a"; its exceptions for single-lane approaches
/// and for conflicts only with pedestrians or bikes are not mirrored). Without this, the
/// waiting left turners hold the through phase to max green and never call their
/// protected phase, which serves nothing the through phase does not (tools/README.md, "Net
/// variants nobody tuned on"). A left turn that shares its lane with the through traffic
/// (`in_lanes`, per movement) stays with every phase that shows it green: a vehicle on that
/// lane may be going straight on, so it would call the protected phase and hold it green
/// while it cannot move (game/bs3d: 28.42 s to 344.37 s under actuated control,
/// BENCHMARKS.md, "Max green from a program that holds its greens"). SUMO instead uses
/// such a lane's loop in neither phase ("check1": none speaks for a phase in which another
/// link from its lane may not drive); greenwave's detectors are per movement, not per
/// lane, so the through movement's detector, which reads that lane too, still does.
fn detector_assignment(
    plan: &PhasePlan,
    links: &[LinkRole],
    states: &[String],
    in_lanes: &[Vec<String>],
) -> Vec<MovementSet> {
    // Per phase, the movements with a link showing `G` (right of way) there.
    let major: Vec<MovementSet> = (0..plan.n_phases())
        .map(|p| {
            let state = states.get(p).map_or(&[][..], |s| s.as_bytes());
            let mut set = MovementSet::EMPTY;
            for (role, &c) in links.iter().zip(state) {
                if let (LinkRole::Movement(m), b'G') = (role, c) {
                    set.insert(MovementId(*m));
                }
            }
            set
        })
        .collect();
    let ever_major = major.iter().fold(MovementSet::EMPTY, |a, &b| a.or(b));
    // Those whose lanes carry only movements that drive wherever they have right of way.
    let on_own_lanes: MovementSet = ever_major
        .iter()
        .filter(|&m| {
            let mates = lane_mates(m, in_lanes);
            plan.phases()
                .iter()
                .zip(&major)
                .filter(|(_, here)| here.contains(m))
                .all(|(phase, _)| mates.minus(phase.movements).is_empty())
        })
        .collect();
    plan.phases()
        .iter()
        .zip(&major)
        .map(|(phase, &here)| phase.movements.minus(on_own_lanes.minus(here)))
        .collect()
}

/// The movements whose entry in `of` (per movement: its incoming lanes, or its crossings)
/// names `id`: more than one where they share a lane.
pub(crate) fn movements_at(of: &[Vec<String>], id: &str) -> MovementSet {
    of.iter()
        .enumerate()
        .filter(|(_, ids)| ids.iter().any(|i| i == id))
        .map(|(m, _)| MovementId(m as u8))
        .collect()
}

/// The other movements that leave from one of `m`'s incoming lanes (`in_lanes`, per
/// movement).
fn lane_mates(m: MovementId, in_lanes: &[Vec<String>]) -> MovementSet {
    let own = in_lanes.get(m.0 as usize).map_or(&[][..], |v| v);
    own.iter()
        .fold(MovementSet::EMPTY, |set, lane| {
            set.or(movements_at(in_lanes, lane))
        })
        .minus(MovementSet::from_ids(&[m.0]))
}

/// Per plan phase, the phase it is a walk stage of, if any: a phase `q` that serves all of
/// its movements but some pedestrian ones, and may hold them as long (its max green no
/// shorter); of several, the one serving most, then the first after it in plan order. SUMO
/// lays out a junction with crossings so: a stage with the crossings green beside the
/// vehicles, then a short one without them (the pedestrians' clearance), the vehicles
/// going on. Each step of a chain (`p ⊃ q ⊃ r`) drops pedestrians only, so none loops.
fn walk_stages(plan: &PhasePlan) -> Vec<Option<usize>> {
    let walking: MovementSet = plan
        .movements()
        .iter()
        .enumerate()
        .filter(|(_, m)| m.turn == greenwave_core::Turn::Pedestrian)
        .map(|(i, _)| MovementId(i as u8))
        .collect();
    let phases = plan.phases();
    let n = phases.len();
    (0..n)
        .map(|p| {
            let outer = &phases[p];
            (0..n)
                .filter(|&q| {
                    let inner = &phases[q];
                    let extra = outer.movements.minus(inner.movements);
                    inner.movements.minus(outer.movements).is_empty()
                        && !extra.is_empty()
                        && extra.minus(walking).is_empty()
                        && inner.timing.max_green >= outer.timing.max_green
                })
                .max_by_key(|&q| {
                    (
                        phases[q].movements.len(),
                        std::cmp::Reverse((q + n - p) % n),
                    )
                })
        })
        .collect()
}

/// `assignment` with each walk stage answering to its own pedestrians only (those its
/// vehicle stage lacks; [`walk_stages`]): a pedestrian's call brings it up, it holds its
/// min green (the walk; a pedestrian does not extend a green), then its vehicles go on in
/// their own stage, where their calls and gaps count. Without this, the vehicles held the
/// walk stage, its crossings green, to max green: turning vehicles yielding to a steady
/// stream of pedestrians kept their loops occupied, and the stage without the crossings,
/// serving nothing the walk stage does not, was never called (BENCHMARKS.md, "Walk
/// stages"). The entry replaces the program's (a crossing never yields, `g`, so the rule
/// of [`detector_assignment`] leaves those pedestrians in it anyway).
fn with_walk_stages(
    mut assignment: Vec<MovementSet>,
    plan: &PhasePlan,
    walks: &[Option<usize>],
) -> Vec<MovementSet> {
    for (p, walk) in walks.iter().enumerate() {
        if let (Some(&q), Some(entry)) = (walk.as_ref(), assignment.get_mut(p)) {
            *entry = plan.phases()[p].movements.minus(plan.phases()[q].movements);
        }
    }
    assignment
}

/// [`TlsModel::actuated_greens`]: `program_greens`, each walk stage's added to the stage
/// at the end of its chain (where its vehicles' calls and gaps count).
fn actuated_greens(program_greens: &[Millis], walks: &[Option<usize>]) -> Vec<Millis> {
    let mut greens = program_greens.to_vec();
    for (p, &own) in program_greens.iter().enumerate() {
        let mut last = None;
        let mut at = walks.get(p).copied().flatten();
        // A chain is at most as long as the plan (each step serves fewer movements).
        for _ in 0..walks.len() {
            let Some(q) = at else { break };
            last = Some(q);
            at = walks.get(q).copied().flatten();
        }
        if let Some(g) = last.and_then(|q| greens.get_mut(q)) {
            *g = Millis(g.0.saturating_add(own.0));
        }
    }
    greens
}

/// The distinct green phases the agent chooses between (amber and short transition
/// greens dropped): at least two and at most [`MAX_PHASES`].
fn choosable_greens<'a>(
    net: &'a NetFile,
    program: &'a TlLogic,
    conns: &LinkConns<'_>,
    opts: ModelOptions<'_>,
) -> Result<Vec<GreenPhase<'a>>, Refusal> {
    let min_green_s = opts
        .timing
        .overrides_for(&program.id)
        .min_green_s
        .unwrap_or(DEFAULT_MIN_GREEN_S);
    let greens = drop_transitions(
        plan_greens(net, program, conns, opts.program.is_none()),
        min_green_s,
    );
    if greens.len() < 2 {
        return Err(Refusal::Static(format!(
            "its program has {} distinct green phase(s) serving a connection: nothing to \
             choose between",
            greens.len()
        )));
    }
    if greens.len() > MAX_PHASES {
        return Err(Refusal::Static(format!(
            "its program has {} distinct green phases; greenwave plans hold at most \
             {MAX_PHASES} (merge phases in the program, e.g. with netedit)",
            greens.len()
        )));
    }
    Ok(greens)
}

/// Green pattern of each of the `n` links: bit k = green in green phase k.
fn green_patterns(greens: &[GreenPhase<'_>], n: usize) -> Vec<u16> {
    (0..n)
        .map(|i| {
            greens
                .iter()
                .enumerate()
                .filter(|(_, g)| g.mask[i])
                .fold(0u16, |acc, (k, _)| acc | (1 << k))
        })
        .collect()
}

/// The links grouped into movements (signal groups), by edge pair first and coarser
/// (by turn, then by approach) until at most [`MAX_MOVEMENTS`] remain.
fn signal_groups(
    net: &NetFile,
    program: &TlLogic,
    conns: &LinkConns<'_>,
    pattern: &[u16],
    approaches: &[&str],
) -> Result<(SignalGroups, Vec<LinkRole>), Refusal> {
    let grouped = |g| group_links(net, program, (conns, pattern), approaches, g);
    let (mut groups, mut links) = grouped(Grouping::Edges);
    for coarser in [Grouping::Turns, Grouping::Approaches] {
        if groups.len() > MAX_MOVEMENTS {
            (groups, links) = grouped(coarser);
        }
    }
    if groups.len() > MAX_MOVEMENTS {
        return Err(Refusal::Static(format!(
            "{} movements (signal groups); greenwave supports at most {MAX_MOVEMENTS}",
            groups.len()
        )));
    }
    Ok((groups, links))
}

/// Per movement (signal group), in plan order: what the plan and the observation need.
struct MovementTable<'g> {
    /// The movement: approach index and turn.
    movements: Vec<Movement>,
    /// The links (state-string positions) it drives.
    links: Vec<&'g [usize]>,
    /// Its green pattern in the static program (bit k: green in green phase k).
    pattern: Vec<u16>,
    /// Its incoming and outgoing edge.
    edges: Vec<(String, String)>,
    /// Its incoming road lanes.
    in_lanes: Vec<Vec<String>>,
    /// Its outgoing road lanes.
    out_lanes: Vec<Vec<String>>,
    /// The pedestrian crossings its links lead onto (a pedestrian movement's).
    crossings: Vec<Vec<String>>,
}

/// The movement table of `groups`; marks each grouped link with its movement. Refused
/// when a movement uses a lane the net lacks.
fn movement_table<'g>(
    net: &NetFile,
    conns: &LinkConns<'_>,
    groups: &'g SignalGroups,
    links: &mut [LinkRole],
) -> Result<MovementTable<'g>, Refusal> {
    let mut table = MovementTable {
        movements: Vec::with_capacity(groups.len()),
        links: Vec::with_capacity(groups.len()),
        pattern: Vec::with_capacity(groups.len()),
        edges: Vec::with_capacity(groups.len()),
        in_lanes: Vec::with_capacity(groups.len()),
        out_lanes: Vec::with_capacity(groups.len()),
        crossings: Vec::with_capacity(groups.len()),
    };
    for (m, (key, ls)) in groups.iter().enumerate() {
        table
            .movements
            .push(Movement::new(key.0, turn_of(net, conns[ls[0]][0])));
        table.links.push(ls.as_slice());
        table.pattern.push(key.4);
        let first = conns[ls[0]][0];
        table.edges.push((first.from.clone(), first.to.clone()));
        let lanes_of = |f| movement_lanes(net, conns, ls, f);
        table.in_lanes.push(lanes_of(NetConnection::from_lane_id));
        table.out_lanes.push(lanes_of(NetConnection::to_lane_id));
        let mut crossings: Vec<String> = ls
            .iter()
            .flat_map(|&i| conns[i].iter())
            .filter_map(|c| crossing_id_of(net, c).cloned())
            .collect();
        crossings.sort();
        crossings.dedup();
        table.crossings.push(crossings);
        for &i in ls.iter() {
            links[i] = LinkRole::Movement(m as u8);
        }
    }
    if let Some(lane) = table
        .in_lanes
        .iter()
        .chain(table.out_lanes.iter())
        .flatten()
        .find(|l| !net.lanes.contains_key(*l))
    {
        return Err(Refusal::Static(format!(
            "it uses lane {lane}, which the net lacks"
        )));
    }
    Ok(table)
}

/// The phase plan: one phase per green, serving the movements green in it, with the
/// net's timing brought into the safe range (the notes say where).
fn derive_plan(
    id: &str,
    greens: &[GreenPhase<'_>],
    table: &MovementTable<'_>,
    conflicts: ConflictMatrix,
    opts: ModelOptions<'_>,
) -> Result<(PhasePlan, Vec<String>), Refusal> {
    let over = opts.timing.overrides_for(id);
    let mut timing_notes = Vec::new();
    let mut phases = Vec::with_capacity(greens.len());
    for (k, g) in greens.iter().enumerate() {
        // By green links, not index: a later phase repeating a stage's greens counts once
        // among the greens, and is that stage.
        let state = |index: usize| g.program.phases[index].state.as_str();
        let is_stage = |index: usize| {
            greens.iter().any(|o| {
                std::ptr::eq(o.program, g.program)
                    && (o.index == index || same_greens(state(o.index), state(index)))
            })
        };
        let net_timing = net_phase_timing(g.program, g.index, is_stage, opts.step_ms);
        check_net_clearance(g, net_timing, &over, opts.step_ms)?;
        let timing = resolve(id, net_timing, &over, opts.step_ms, &mut timing_notes)?;
        let mut set = MovementSet::EMPTY;
        for (m, &p) in table.pattern.iter().enumerate() {
            if p & (1 << k) != 0 {
                set.insert(MovementId(m as u8));
            }
        }
        phases.push(Phase {
            movements: set,
            timing,
        });
    }
    timing_notes.sort();
    timing_notes.dedup();
    let plan = PhasePlan::new(&table.movements, conflicts, &phases).map_err(|source| {
        Refusal::Static(format!(
            "its derived phase plan is refused ({source}); check the program's phases"
        ))
    })?;
    Ok((plan, timing_notes))
}

/// Refuses a light whose program gives a yellow or all-red above greenwave-core's ceiling
/// ([`YELLOW_RANGE`], [`ALL_RED_RANGE`]) that the user did not set: cutting the net's
/// clearance to the ceiling would show a conflicting green earlier than the program does.
/// It stays on its program; a timing file's `yellow_s` / `all_red_s` takes it over. A
/// yellow counts as one link shows it: a run of phases that yellow their links one after
/// another is longer than any link's own yellow, and is lowered to the ceiling with a note.
fn check_net_clearance(
    g: &GreenPhase<'_>,
    net: NetPhaseTiming,
    over: &TimingOverrides,
    step_ms: u32,
) -> Result<(), Refusal> {
    let link_yellow = secs_to_step(longest_link_yellow_s(g.program, g.index), step_ms);
    let too_long = |what: &str, value: Millis, ceiling: Millis, key: &str| {
        Refusal::Static(format!(
            "its program's {what} of {value} is longer than greenwave's {ceiling} ceiling, \
             and greenwave does not cut a clearance short (set {key} in a timing file to \
             control it with a clearance of your own)"
        ))
    };
    if over.yellow_s.is_none() && net.yellow > YELLOW_RANGE.1 && link_yellow > YELLOW_RANGE.1 {
        return Err(too_long("yellow", link_yellow, YELLOW_RANGE.1, "yellow_s"));
    }
    if over.all_red_s.is_none() && net.all_red > ALL_RED_RANGE.1 {
        return Err(too_long(
            "all-red",
            net.all_red,
            ALL_RED_RANGE.1,
            "all_red_s",
        ));
    }
    Ok(())
}

/// A link pair whose program intergreen the plan's switches (on yellow and all-red alone)
/// cut short.
struct ShortIntergreen {
    from_link: usize,
    to_link: usize,
    /// The movements of the two links.
    from: MovementId,
    to: MovementId,
    program: Millis,
    plan: Millis,
    phase: usize,
}

/// `plan` with an intergreen entry for every movement pair the program keeps further apart
/// than the plan's quickest switch between them: the longest over the pair's links.
fn with_program_intergreens(
    plan: PhasePlan,
    short: &[ShortIntergreen],
) -> Result<PhasePlan, Refusal> {
    let mut entries: Vec<Intergreen> = Vec::new();
    for s in short {
        match entries
            .iter_mut()
            .find(|e| (e.from, e.to) == (s.from, s.to))
        {
            Some(e) => e.time = e.time.max(s.program),
            None => entries.push(Intergreen {
                from: s.from,
                to: s.to,
                time: s.program,
            }),
        }
    }
    if entries.is_empty() {
        return Ok(plan);
    }
    plan.with_intergreens(&entries).map_err(|source| {
        Refusal::Static(format!(
            "its program's intergreens do not fit greenwave's plan ({source}); without \
             --program-intergreens on (and the timing file's program_intergreens = true) \
             greenwave switches it on yellow and all-red alone"
        ))
    })
}

/// A note where the light's own program keeps conflicting links further apart than the
/// plan's switches on yellow and all-red alone would (`short`, see [`short_intergreens`]).
/// Kept (`kept`, `--program-intergreens on`), it says how many movement pairs the plan's
/// intergreens hold and the longest; left out (the default), it warns with the pair cut most and how many are cut, since
/// vehicles still crossing then meet the next ones (tools/README.md, finding 28).
fn intergreen_note(short: &[ShortIntergreen], kept: bool) -> Option<String> {
    let worst = short.iter().max_by_key(|s| {
        (
            s.program.0 - s.plan.0,
            std::cmp::Reverse((s.from_link, s.to_link)),
        )
    })?;
    if kept {
        let mut pairs: Vec<(MovementId, MovementId)> =
            short.iter().map(|s| (s.from, s.to)).collect();
        pairs.sort();
        pairs.dedup();
        return Some(format!(
            "its program keeps conflicting links further apart than yellow and all-red: \
             greenwave's plan keeps its intergreens for {} pairs of movements (the most cut \
             otherwise: {} between the end of link {}'s green and the start of link {}'s, \
             against {})",
            pairs.len(),
            worst.program,
            worst.from_link,
            worst.to_link,
            worst.plan
        ));
    }
    let more = match short.len() - 1 {
        0 => String::new(),
        k => format!(", and {k} more pairs of conflicting links get less than it keeps"),
    };
    Some(format!(
        "its program keeps {} between the end of link {}'s green and the start of link {}'s, \
         which conflict; greenwave's switch from its phase {} gives {} (yellow and all-red){more}. \
         Vehicles still crossing can then meet the next ones and lock up (finding 28 in \
         tools/README.md); --program-intergreens on keeps the program's intergreens, pair \
         by pair",
        worst.program, worst.from_link, worst.to_link, worst.phase, worst.plan
    ))
}

/// Every pair of conflicting links the plan's quickest switch between them (on yellow and
/// all-red alone) gives less time than the program keeps. Gaps longer than the longest
/// clearance greenwave allows (yellow and all-red at their ceilings, 12 s) are not counted,
/// nor gaps with one of the plan's `stages` (the program's phase indices it serves) or a
/// conflicting green between: those are the program's stage order, not a clearance.
fn short_intergreens(
    program: &TlLogic,
    stages: &[usize],
    plan: &PhasePlan,
    (movement_links, links): (&[&[usize]], &[LinkRole]),
    step_ms: u32,
) -> Vec<ShortIntergreen> {
    // A longer gap in a fixed cycle is its order (other stages between), not a clearance.
    let longest_clearance = YELLOW_RANGE.1.saturating_add(ALL_RED_RANGE.1);
    let mut short: Vec<ShortIntergreen> = Vec::new();
    for (a, a_links) in movement_links.iter().enumerate() {
        for (b, b_links) in movement_links.iter().enumerate() {
            let (ma, mb) = (MovementId(a as u8), MovementId(b as u8));
            if a == b || !plan.conflicts().conflicts(ma, mb) {
                continue;
            }
            // The quickest switch the plan has from a phase serving `a` but not `b`.
            let Some((phase, gap)) = plan
                .phases()
                .iter()
                .enumerate()
                .filter(|(_, p)| p.movements.contains(ma) && !p.movements.contains(mb))
                .map(|(k, p)| (k, p.timing.yellow.saturating_add(p.timing.all_red)))
                .min_by_key(|&(_, gap)| gap)
            else {
                continue;
            };
            for (&i, &j) in a_links
                .iter()
                .flat_map(|i| b_links.iter().map(move |j| (i, j)))
            {
                let holds_j = |l: usize| match links.get(l) {
                    Some(&LinkRole::Movement(m)) => plan.conflicts().conflicts(MovementId(m), mb),
                    _ => false,
                };
                let Some(kept_s) = program_intergreen_s(program, (i, j), stages, holds_j) else {
                    continue;
                };
                // Whole milliseconds first: a sum such as 3.3000000000000003 s must not
                // round up to the next step.
                let kept_ms = secs_to_ms(kept_s).0;
                let step = step_ms.max(1);
                let kept = Millis(kept_ms.div_ceil(step).saturating_mul(step));
                if kept > gap && kept <= longest_clearance {
                    short.push(ShortIntergreen {
                        from_link: i,
                        to_link: j,
                        from: ma,
                        to: mb,
                        program: kept,
                        plan: gap,
                        phase,
                    });
                }
            }
        }
    }
    short
}

/// The observed incoming lanes (by approach, then lane id; a shared lane once) and the
/// outgoing lanes of all movements (sorted).
fn observed_lanes(groups: &SignalGroups, table: &MovementTable<'_>) -> (Vec<String>, Vec<String>) {
    let mut in_lanes: Vec<(u8, String)> = groups
        .keys()
        .zip(&table.in_lanes)
        .flat_map(|(k, ls)| ls.iter().map(move |l| (k.0, l.clone())))
        .collect();
    in_lanes.sort();
    in_lanes.dedup_by(|a, b| a.1 == b.1);
    let mut out_lanes: Vec<String> = table.out_lanes.iter().flatten().cloned().collect();
    out_lanes.sort();
    out_lanes.dedup();
    (in_lanes.into_iter().map(|l| l.1).collect(), out_lanes)
}

/// The observed pedestrian crossings: each once, by approach then edge id.
fn observed_crossings(groups: &SignalGroups, table: &MovementTable<'_>) -> Vec<String> {
    let mut crossings: Vec<(u8, &String)> = groups
        .keys()
        .zip(&table.crossings)
        .flat_map(|(k, cs)| cs.iter().map(move |c| (k.0, c)))
        .collect();
    crossings.sort();
    crossings.dedup_by(|a, b| a.1 == b.1);
    crossings.into_iter().map(|c| c.1.clone()).collect()
}

impl TlsModel {
    /// Number of links (length of the state string).
    pub fn n_links(&self) -> usize {
        self.links.len()
    }

    /// Actuated control's detector-to-phase assignment: [`TlsModel::detector_assignment`]
    /// with each walk stage answering to its own pedestrians only.
    pub fn actuated_assignment(&self) -> Vec<MovementSet> {
        with_walk_stages(
            self.detector_assignment.clone(),
            &self.plan,
            &self.walk_stages,
        )
    }

    /// The program's green time per plan phase that actuated control's max green scales:
    /// its own, plus that of each walk stage whose vehicles it goes on serving (SUMO's 5 s
    /// stage after a 37 s walk stage serves its vehicles for 42 s of the program).
    pub fn actuated_greens(&self) -> Vec<Millis> {
        actuated_greens(&self.program_greens, &self.walk_stages)
    }

    /// The SUMO state string showing `frame` during `interval`.
    pub fn state(&self, interval: Interval, frame: SignalFrame) -> String {
        let static_char = |phase: greenwave_core::PhaseId, i: usize| {
            self.phase_states
                .get(phase.0 as usize)
                .and_then(|s| s.as_bytes().get(i))
                .copied()
                .filter(|&c| is_green(c))
                .unwrap_or(b'G')
        };
        let bytes: Vec<u8> = self
            .links
            .iter()
            .enumerate()
            .map(|(i, role)| match *role {
                LinkRole::Fixed(c) => c,
                LinkRole::Red => b'r',
                LinkRole::Movement(m) => match frame.signal(MovementId(m)) {
                    Signal::Red => b'r',
                    Signal::Yellow => b'y',
                    Signal::Green => match interval {
                        Interval::Green { phase } => static_char(phase, i),
                        Interval::Yellow { from, to } | Interval::AllRed { from, to } => {
                            // An overlap keeps the weaker right of way of its two phases.
                            if static_char(from, i) == b'g' || static_char(to, i) == b'g' {
                                b'g'
                            } else {
                                b'G'
                            }
                        }
                    },
                },
            })
            .collect();
        // Every byte is ASCII: from the state strings of a valid net or a literal.
        String::from_utf8(bytes).unwrap_or_default()
    }
}

/// What a display audit found wrong in the states sent to one light.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("traffic light {tls}, {at_ms} ms into the episode: {message} (state {state:?})")]
pub struct DisplayFault {
    /// The light.
    pub tls: String,
    /// When the state was sent (ms since the episode began).
    pub at_ms: u64,
    /// The state string at fault.
    pub state: String,
    /// What is wrong.
    pub message: String,
}

/// A movement's display, as read back from a state string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shown {
    Red,
    Yellow,
    Green,
}

impl TlsModel {
    /// What each movement shows in `state`: its links must agree.
    fn shown(&self, state: &[u8]) -> Result<Vec<Shown>, String> {
        let mut shown: Vec<Option<Shown>> = vec![None; self.plan.movements().len()];
        for (i, role) in self.links.iter().enumerate() {
            let LinkRole::Movement(m) = *role else {
                continue;
            };
            let s = match state.get(i) {
                Some(b'G' | b'g') => Shown::Green,
                Some(b'y' | b'Y') => Shown::Yellow,
                Some(b'r' | b'R' | b's') => Shown::Red,
                other => return Err(format!("link {i} shows {other:?}")),
            };
            let slot = &mut shown[m as usize];
            if slot.is_some_and(|p| p != s) {
                return Err(format!("movement {m}: its links show different signals"));
            }
            *slot = Some(s);
        }
        Ok(shown.into_iter().map(|s| s.unwrap_or(Shown::Red)).collect())
    }

    /// Checks every state sent to this light in one episode (`(ms, state)` in time order,
    /// as [`SumoEnv::state_history`](super::SumoEnv::state_history) returns them),
    /// independently of the sequencer that made them:
    ///
    /// * the right length, and no link of a movement red while another is not;
    /// * no two conflicting movements of the plan non-red together;
    /// * a green is never followed directly by red: it shows yellow for at least the
    ///   shortest yellow of the plan;
    /// * no movement turns green before every conflicting movement has been red for at
    ///   least the shortest all-red of the plan, nor before each of the plan's intergreen
    ///   entries into it has passed since the conflicting movement left green.
    pub fn audit_states(&self, history: &[(u64, String)]) -> Result<(), DisplayFault> {
        let mut audit = Audit::new(self);
        for (t, state) in history {
            audit.check(*t, state).map_err(|message| DisplayFault {
                tls: self.id.clone(),
                at_ms: *t,
                state: state.clone(),
                message,
            })?;
        }
        Ok(())
    }
}

/// [`TlsModel::audit_states`] going through a light's history: the plan's shortest
/// clearances, the last display, and since when each movement shows what it shows.
struct Audit<'a> {
    model: &'a TlsModel,
    min_yellow: u64,
    min_all_red: u64,
    prev: Option<Vec<Shown>>,
    since: Vec<u64>,
    /// When each movement last went from green to yellow, once it has.
    left_green: Vec<Option<u64>>,
}

impl<'a> Audit<'a> {
    fn new(model: &'a TlsModel) -> Self {
        let phases = model.plan.phases();
        let min_yellow = phases
            .iter()
            .map(|p| p.timing.yellow.0 as u64)
            .min()
            .unwrap_or(0);
        let min_all_red = phases
            .iter()
            .map(|p| p.timing.all_red.0 as u64)
            .min()
            .unwrap_or(0);
        Audit {
            model,
            min_yellow,
            min_all_red,
            prev: None,
            since: vec![0u64; model.plan.movements().len()],
            left_green: vec![None; model.plan.movements().len()],
        }
    }

    /// Checks the state sent at `t` (ms) against the plan and the states before it.
    fn check(&mut self, t: u64, state: &str) -> Result<(), String> {
        let model = self.model;
        if state.len() != model.n_links() {
            return Err(format!(
                "{} links, the light has {}",
                state.len(),
                model.n_links()
            ));
        }
        let now = model.shown(state.as_bytes())?;
        self.check_conflicts(&now)?;
        if let Some(prev) = &self.prev {
            for m in 0..now.len() {
                self.check_change(m, prev, &now, t)?;
                if prev[m] != now[m] {
                    self.since[m] = t;
                }
                if (prev[m], now[m]) == (Shown::Green, Shown::Yellow) {
                    self.left_green[m] = Some(t);
                }
            }
        }
        self.prev = Some(now);
        Ok(())
    }

    /// No two conflicting movements non-red together.
    fn check_conflicts(&self, now: &[Shown]) -> Result<(), String> {
        let n = now.len();
        for a in 0..n {
            for b in a + 1..n {
                let both = now[a] != Shown::Red && now[b] != Shown::Red;
                if both
                    && self
                        .model
                        .plan
                        .conflicts()
                        .conflicts(MovementId(a as u8), MovementId(b as u8))
                {
                    return Err(format!("conflicting movements {a} and {b} both non-red"));
                }
            }
        }
        Ok(())
    }

    /// Movement `m`'s change from `prev` to `now` at `t`: green only through a long enough
    /// yellow to red, and red to green only after every foe's all-red.
    fn check_change(&self, m: usize, prev: &[Shown], now: &[Shown], t: u64) -> Result<(), String> {
        let (since, min_yellow, min_all_red) = (&self.since, self.min_yellow, self.min_all_red);
        match (prev[m], now[m]) {
            (Shown::Green, Shown::Red) => Err(format!(
                "movement {m} went from green to red with no yellow"
            )),
            (Shown::Yellow, Shown::Red) if t - since[m] < min_yellow => Err(format!(
                "movement {m} showed yellow for {} ms, the plan's shortest is {min_yellow} ms",
                t - since[m]
            )),
            (Shown::Red, Shown::Green) => {
                let foes = self.model.plan.conflicts().foes(MovementId(m as u8));
                // How long each foe has been red (0: it turns red now).
                let red_for = |f: usize| {
                    if prev[f] == Shown::Red {
                        t - since[f]
                    } else {
                        0
                    }
                };
                if let Some(f) = foes
                    .iter()
                    .map(|f| f.0 as usize)
                    .find(|&f| now[f] == Shown::Red && red_for(f) < min_all_red)
                {
                    return Err(format!(
                        "movement {m} turned green {} ms after conflicting movement {f} turned red; all-red is {min_all_red} ms",
                        red_for(f)
                    ));
                }
                self.check_intergreens(m, t)
            }
            _ => Ok(()),
        }
    }

    /// Movement `m` turning green at `t`: every intergreen entry into it has passed since
    /// its conflicting movement last left green.
    fn check_intergreens(&self, m: usize, t: u64) -> Result<(), String> {
        let plan = &self.model.plan;
        for e in plan.intergreens().iter().filter(|e| e.to.0 as usize == m) {
            let f = e.from.0 as usize;
            if let Some(left) = self.left_green[f] {
                if t - left < e.time.0 as u64 {
                    return Err(format!(
                        "movement {m} turned green {} ms after conflicting movement {f} left green; its intergreen is {}",
                        t - left,
                        e.time
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use greenwave_core::{ConflictMatrix, Movement, Phase, PhaseTiming, Turn};
    use proptest::prelude::*;

    /// A junction whose foe table lacks a row or a bit: the gap reads as a conflict, never
    /// as two links that may go together.
    #[test]
    fn a_gap_in_a_junctions_foe_table_is_a_conflict() {
        let xml = r#"<net><junction id="J" type="traffic_light" intLanes=":J_0_0 :J_1_0 :J_2_0">
            <request index="0" response="000" foes="000" cont="0"/>
            <request index="1" response="00" foes="00" cont="0"/>
        </junction></net>"#;
        let net = NetFile::parse(xml.as_bytes()).unwrap();
        let foes = FoeIndex::new(&net);
        assert!(!foes.foes(("J", 0), ("J", 1)), "the table says no");
        assert!(foes.foes(("J", 0), ("J", 2)), "row 2 is missing");
        assert!(foes.foes(("J", 1), ("J", 2)), "bit 2 of row 1 is missing");
        assert!(
            !foes.foes(("J", 0), ("K", 1)),
            "links of two junctions never cross"
        );
    }

    /// Two lights at one junction (each with some of its links, or one with its crossing)
    /// are both left on their programs, each naming the other; one light driving several
    /// junctions is not.
    #[test]
    fn two_lights_of_one_junction_are_both_named() {
        let xml = r#"<net>
            <edge id="n" from="N" to="J"><lane id="n_0" length="50"/></edge>
            <edge id="w" from="W" to="J"><lane id="w_0" length="50"/></edge>
            <edge id="s" from="S" to="K"><lane id="s_0" length="50"/></edge>
            <edge id="o" from="J" to="O"><lane id="o_0" length="50"/></edge>
            <connection from="n" to="o" fromLane="0" toLane="0" tl="A" linkIndex="0"/>
            <connection from="w" to="o" fromLane="0" toLane="0" tl="B" linkIndex="0"/>
            <connection from=":J_w0" to=":J_c0" fromLane="0" toLane="0" tl="B" linkIndex="1"/>
            <connection from="s" to="o" fromLane="0" toLane="0" tl="A" linkIndex="1"/>
        </net>"#;
        let net = NetFile::parse(xml.as_bytes()).unwrap();
        let shared = junctions_of_two_lights(&net);
        assert_eq!(shared.len(), 2, "{shared:?}");
        assert!(shared["A"].contains("junction J") && shared["A"].contains("by B"));
        assert!(shared["B"].contains("by A"));
        let one = xml.replace(r#"tl="B""#, r#"tl="A""#);
        let net = NetFile::parse(one.as_bytes()).unwrap();
        assert!(junctions_of_two_lights(&net).is_empty());
    }

    /// A plan of `turns` (no conflicts) whose phases are the non-empty sets of `phases`.
    fn plan(turns: &[bool], phases: &[u32]) -> Option<PhasePlan> {
        let movements: Vec<Movement> = turns
            .iter()
            .enumerate()
            .map(|(i, &walk)| {
                let turn = if walk {
                    Turn::Pedestrian
                } else {
                    Turn::Through
                };
                Movement::new((i % 4) as u8, turn)
            })
            .collect();
        let all = (1u32 << turns.len()) - 1;
        let phases: Vec<Phase> = phases
            .iter()
            .map(|&bits| bits & all)
            .filter(|&bits| bits != 0)
            .map(|bits| Phase {
                movements: MovementSet(bits),
                timing: PhaseTiming::from_secs(5, 60, 3, 0),
            })
            .collect();
        PhasePlan::new(&movements, ConflictMatrix::from_pairs(&[]), &phases).ok()
    }

    /// Per phase, a state string with link `m` (movement `m`) `G` where `major` has it,
    /// `g` where only the phase has it, `r` elsewhere.
    fn states(plan: &PhasePlan, major: &[u32]) -> Vec<String> {
        plan.phases()
            .iter()
            .zip(major)
            .map(|(phase, &bits)| {
                (0..plan.movements().len())
                    .map(|m| {
                        match (
                            bits >> m & 1 == 1,
                            phase.movements.contains(MovementId(m as u8)),
                        ) {
                            (_, false) => 'r',
                            (true, true) => 'G',
                            (false, true) => 'g',
                        }
                    })
                    .collect()
            })
            .collect()
    }

    fn lanes(ids: &[&[&str]]) -> Vec<Vec<String>> {
        ids.iter()
            .map(|l| l.iter().map(|s| s.to_string()).collect())
            .collect()
    }

    #[test]
    fn a_left_goes_to_its_protected_phase_only_from_a_lane_of_its_own() {
        // Movement 0 through, 1 left, 2 U-turn; phase 0 the through with the left and
        // U-turn yielding, phase 1 those two protected.
        let plan = plan(&[false; 3], &[0b111, 0b110]).unwrap();
        let links: Vec<LinkRole> = (0..3).map(LinkRole::Movement).collect();
        let st = states(&plan, &[0b001, 0b110]);
        assert_eq!(st, ["Ggg", "rGG"]);
        let set = |ids: &[u8]| MovementSet::from_ids(ids);
        // A pocket for the left and the U-turn: they answer to their protected phase only.
        let pocket = lanes(&[&["in_0", "in_1"], &["in_2"], &["in_2"]]);
        assert_eq!(
            detector_assignment(&plan, &links, &st, &pocket),
            [set(&[0]), set(&[1, 2])]
        );
        // The left and U-turn share the through's inner lane: they stay with both phases.
        let shared = lanes(&[&["in_0", "in_1"], &["in_1"], &["in_1"]]);
        assert_eq!(
            detector_assignment(&plan, &links, &st, &shared),
            [set(&[0, 1, 2]), set(&[1, 2])]
        );
        assert_eq!(lane_mates(MovementId(1), &shared), set(&[0, 2]));
        assert_eq!(movements_at(&shared, "in_1"), set(&[0, 1, 2]));
    }

    proptest! {
        /// On any plan, program and lanes: each phase answers to a subset of its movements
        /// that holds every movement with right of way there; a movement left out yields
        /// there, has right of way elsewhere, and every movement sharing a lane with it
        /// is served wherever it has right of way.
        #[test]
        fn detector_assignment_drops_only_yielding_movements_on_lanes_of_their_own(
            n in 1usize..8,
            phases in proptest::collection::vec(any::<u32>(), 2..6),
            major in proptest::collection::vec(any::<u32>(), 6),
            lane_of in proptest::collection::vec((0u8..4, 0u8..4), 8),
        ) {
            let Some(plan) = plan(&vec![false; n], &phases) else { return Ok(()) };
            let major: Vec<u32> = plan.phases().iter().zip(&major).map(|(p, &b)| b & p.movements.0).collect();
            let st = states(&plan, &major);
            let links: Vec<LinkRole> = (0..n as u8).map(LinkRole::Movement).collect();
            let in_lanes: Vec<Vec<String>> = lane_of[..n]
                .iter()
                .map(|&(a, b)| vec![format!("in_{a}"), format!("in_{b}")])
                .collect();
            let assigned = detector_assignment(&plan, &links, &st, &in_lanes);
            for (p, phase) in plan.phases().iter().enumerate() {
                prop_assert!(assigned[p].minus(phase.movements).is_empty());
                prop_assert!(MovementSet(major[p]).minus(assigned[p]).is_empty());
                for m in phase.movements.minus(assigned[p]).iter() {
                    let protected: Vec<usize> =
                        (0..plan.n_phases()).filter(|&q| major[q] >> m.0 & 1 == 1).collect();
                    prop_assert!(!protected.is_empty());
                    for q in protected {
                        let mates = lane_mates(m, &in_lanes);
                        prop_assert!(mates.minus(plan.phases()[q].movements).is_empty());
                    }
                }
            }
        }
    }

    proptest! {
        /// On any plan: a walk stage's vehicle stage serves all its movements but some
        /// pedestrian ones; a walk stage answers to those, a non-empty subset of its own;
        /// every other phase keeps its assignment; and actuated greens move each walk
        /// stage's green onto a stage that is no walk stage, losing none.
        #[test]
        fn walk_stages_keep_every_phase_a_non_empty_subset(
            turns in proptest::collection::vec(any::<bool>(), 1..12),
            phases in proptest::collection::vec(any::<u32>(), 2..8),
            greens_s in proptest::collection::vec(1u32..100, 8),
        ) {
            let Some(plan) = plan(&turns, &phases) else { return Ok(()) };
            let walks = walk_stages(&plan);
            let base: Vec<MovementSet> = plan.phases().iter().map(|p| p.movements).collect();
            let assigned = with_walk_stages(base.clone(), &plan, &walks);
            let greens: Vec<Millis> = greens_s[..plan.n_phases()]
                .iter()
                .map(|&s| Millis::from_secs(s))
                .collect();
            let actuated = actuated_greens(&greens, &walks);
            for (p, walk) in walks.iter().enumerate() {
                let own = plan.phases()[p].movements;
                prop_assert!(!assigned[p].is_empty() && assigned[p].minus(own).is_empty());
                match walk {
                    Some(q) => {
                        let inner = plan.phases()[*q].movements;
                        prop_assert!(inner.minus(own).is_empty() && inner != own);
                        prop_assert!(assigned[p]
                            .iter()
                            .all(|m| plan.movements()[m.0 as usize].turn == Turn::Pedestrian));
                        prop_assert_eq!(actuated[p], greens[p]);
                    }
                    None => {
                        prop_assert_eq!(assigned[p], base[p]);
                        prop_assert!(actuated[p] >= greens[p]);
                    }
                }
            }
            let total = |g: &[Millis]| g.iter().map(|m| u64::from(m.0)).sum::<u64>();
            let walk_greens: u64 = (0..plan.n_phases())
                .filter(|&p| walks[p].is_some())
                .map(|p| u64::from(greens[p].0))
                .sum();
            // Every walk stage's green lands once on a stage that is none.
            prop_assert_eq!(total(&actuated), total(&greens) + walk_greens);
        }
    }
}
