//! From a SUMO traffic light to a greenwave phase plan, and back to SUMO state strings.
//!
//! * **Movements** are the traffic light's controlled links grouped by incoming edge,
//!   outgoing edge and green pattern in the static program (so every link of a movement
//!   is green in exactly the same static phases). Links never green in the static program
//!   stay red; links that are off (`o`/`O`) in every phase keep their static character.
//! * **Approaches** are the incoming road edges, numbered clockwise by the bearing traffic
//!   comes from (0 = the first at or after north), as in greenwave-core's four-arm plans.
//! * **Phases** are the distinct green phases of the static program (those with a `G`/`g`
//!   and no `y`/`u`), in program order.
//! * **Conflicts**: two movements conflict when SUMO's junction lists any of their links
//!   as foes (`<request foes=...>`) and the static program never shows them green together.
//!   Pairs the static program runs together are permissive (one yields, `g`) and allowed.
//!   Without internal links (`--no-internal-links`) there are no foe tables; then two
//!   movements conflict whenever the static program never shows them green together.
//! * **Display**: green uses the static program's own `G`/`g` for that link in the phase
//!   (the weaker of the two phases during a change), yellow is `y`, red is `r`.

use std::collections::{BTreeMap, HashMap, HashSet};

use greenwave_core::plan::{MAX_MOVEMENTS, MAX_PHASES};
use greenwave_core::{
    ConflictMatrix, Interval, Movement, MovementId, MovementSet, Phase, PhasePlan, PhaseTiming,
    Signal, SignalFrame, Turn,
};

use super::net::{NetConnection, NetFile};
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
    /// The derived plan.
    pub plan: PhasePlan,
    /// Role of each link (state-string position).
    pub links: Vec<LinkRole>,
    /// For each plan phase, the index of the static program phase it came from.
    pub static_phases: Vec<usize>,
    /// For each plan phase, the static program's state string.
    pub phase_states: Vec<String>,
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
    /// Incoming road edge of each approach index.
    pub approaches: Vec<String>,
    /// Whether the conflicts came from junction foe tables (false: from the program only).
    pub conflicts_from_junction: bool,
}

fn is_green(c: u8) -> bool {
    c == b'G' || c == b'g'
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

/// Builds the model of every traffic light of `net`, each plan with `timing` on every
/// phase.
pub fn build_models(net: &NetFile, timing: PhaseTiming) -> Result<Vec<TlsModel>, SumoError> {
    if net.tl_logics.is_empty() {
        return Err(SumoError::NoTrafficLights {
            path: net.path.clone(),
        });
    }
    let foes = FoeIndex::new(net);
    net.tl_logics
        .iter()
        .map(|tl| build_one(net, &foes, &tl.id, timing))
        .collect()
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
        let bit = |i: usize, k: usize| j.foes.get(i).and_then(|r| r.get(k)).copied();
        bit(a.1, b.1).unwrap_or(false) || bit(b.1, a.1).unwrap_or(false)
    }
}

fn build_one(
    net: &NetFile,
    foes: &FoeIndex<'_>,
    id: &str,
    timing: PhaseTiming,
) -> Result<TlsModel, SumoError> {
    let tls_err = |message: String| SumoError::Tls {
        tls: id.to_string(),
        message,
    };
    let program = net
        .tl_logics
        .iter()
        .find(|t| t.id == id)
        .expect("id comes from tl_logics");
    let n = program
        .phases
        .first()
        .map(|p| p.1.len())
        .ok_or_else(|| tls_err(format!("program {} has no phases", program.program_id)))?;
    if let Some((k, p)) = program
        .phases
        .iter()
        .enumerate()
        .find(|p| p.1 .1.len() != n)
    {
        return Err(tls_err(format!(
            "phase {k} has {} links, phase 0 has {n}",
            p.1.len()
        )));
    }
    let mut conns: Vec<Vec<&NetConnection>> = vec![Vec::new(); n];
    for c in net
        .connections
        .iter()
        .filter(|c| c.tl.as_deref() == Some(id))
    {
        let li = c.link_index.ok_or_else(|| {
            tls_err(format!(
                "connection {} -> {} has no linkIndex",
                c.from, c.to
            ))
        })?;
        conns
            .get_mut(li)
            .ok_or_else(|| {
                tls_err(format!(
                    "connection {} -> {} has linkIndex {li}, the program has {n} links",
                    c.from, c.to
                ))
            })?
            .push(c);
    }

    // Distinct green phases of the static program.
    let mut greens: Vec<(usize, Vec<bool>)> = Vec::new();
    for (k, (_, state)) in program.phases.iter().enumerate() {
        let s = state.as_bytes();
        if s.iter().any(|&c| is_transition(c)) || !s.iter().any(|&c| is_green(c)) {
            continue;
        }
        let mask: Vec<bool> = s.iter().map(|&c| is_green(c)).collect();
        if !greens.iter().any(|g| g.1 == mask) {
            greens.push((k, mask));
        }
    }
    if greens.len() < 2 || greens.len() > MAX_PHASES {
        return Err(tls_err(format!(
            "the static program has {} distinct green phases; greenwave needs 2 to {MAX_PHASES}",
            greens.len()
        )));
    }
    // Green pattern of each link: bit k = green in static green phase k.
    let pattern: Vec<u16> = (0..n)
        .map(|i| {
            greens
                .iter()
                .enumerate()
                .filter(|(_, g)| g.1[i])
                .fold(0u16, |acc, (k, _)| acc | (1 << k))
        })
        .collect();

    // Approaches: incoming road edges by the bearing their traffic comes from.
    let road = |edge: &str| {
        net.edges
            .get(edge)
            .map(|e| e.function.is_empty())
            .unwrap_or(!edge.starts_with(':'))
    };
    let mut approach_edges: Vec<&str> = (0..n)
        .filter(|&i| pattern[i] != 0)
        .flat_map(|i| conns[i].iter().map(|c| c.from.as_str()))
        .filter(|e| road(e))
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    let bearing = |edge: &str| -> f64 {
        net.lanes
            .get(&format!("{edge}_0"))
            .and_then(|l| l.end_direction)
            // Traffic arrives heading `d`, so it comes from `-d`; bearing clockwise from
            // north, in [0, 360).
            .map(|(dx, dy)| (-dx).atan2(-dy).to_degrees().rem_euclid(360.0))
            .unwrap_or(f64::INFINITY)
    };
    approach_edges.sort_by(|a, b| bearing(a).total_cmp(&bearing(b)).then(a.cmp(b)));
    if approach_edges.len() > u8::MAX as usize {
        return Err(tls_err(format!("{} approaches", approach_edges.len())));
    }
    let approach_of = |c: &NetConnection| -> u8 {
        let crossed = net
            .edges
            .get(&c.from)
            .map(|e| e.crossing_edges.as_slice())
            .unwrap_or(&[]);
        std::iter::once(&c.from)
            .chain(crossed)
            .find_map(|e| approach_edges.iter().position(|a| a == e))
            .unwrap_or(0) as u8
    };
    let turn_of = |c: &NetConnection| -> Turn {
        let crossing = net
            .edges
            .get(&c.from)
            .is_some_and(|e| e.function == "crossing");
        if crossing {
            return Turn::Pedestrian;
        }
        match c.dir.as_str() {
            "l" | "L" => Turn::Left,
            "r" | "R" => Turn::Right,
            "t" => Turn::UTurn,
            _ => Turn::Through,
        }
    };

    // Movements: links grouped by (from edge, to edge, green pattern).
    type Key = (u8, u8, String, String, u16);
    let mut groups: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    let mut links = vec![LinkRole::Red; n];
    for i in 0..n {
        let first_char = program.phases[0].1.as_bytes()[i];
        let Some(&c) = conns[i].first() else {
            links[i] = LinkRole::Fixed(first_char);
            continue;
        };
        if pattern[i] == 0 {
            let off = program
                .phases
                .iter()
                .all(|p| matches!(p.1.as_bytes()[i], b'o' | b'O'));
            links[i] = if off {
                LinkRole::Fixed(first_char)
            } else {
                LinkRole::Red
            };
            continue;
        }
        let turn = turn_of(c);
        let key = (
            approach_of(c),
            turn_order(turn),
            c.from.clone(),
            c.to.clone(),
            pattern[i],
        );
        groups.entry(key).or_default().push(i);
    }
    if groups.len() > MAX_MOVEMENTS {
        return Err(tls_err(format!(
            "{} movements (signal groups); greenwave supports at most {MAX_MOVEMENTS}",
            groups.len()
        )));
    }

    let mut movements = Vec::with_capacity(groups.len());
    let mut movement_links: Vec<&[usize]> = Vec::with_capacity(groups.len());
    let mut movement_pattern = Vec::with_capacity(groups.len());
    let mut movement_edges = Vec::with_capacity(groups.len());
    let mut movement_in_lanes = Vec::with_capacity(groups.len());
    let mut movement_out_lanes = Vec::with_capacity(groups.len());
    for (m, (key, ls)) in groups.iter().enumerate() {
        let c = conns[ls[0]][0];
        movements.push(Movement::new(key.0, turn_of(c)));
        movement_links.push(ls.as_slice());
        movement_pattern.push(key.4);
        movement_edges.push((key.2.clone(), key.3.clone()));
        let lanes = |f: fn(&NetConnection) -> String, keep: &dyn Fn(&str) -> bool| {
            let mut v: Vec<String> = ls
                .iter()
                .flat_map(|&i| conns[i].iter())
                .map(|c| f(c))
                .filter(|l| keep(l))
                .collect();
            v.sort();
            v.dedup();
            v
        };
        let is_road_lane = |l: &str| road(l.rsplit_once('_').map(|(e, _)| e).unwrap_or(l));
        movement_in_lanes.push(lanes(NetConnection::from_lane_id, &is_road_lane));
        movement_out_lanes.push(lanes(NetConnection::to_lane_id, &is_road_lane));
        for &i in ls.iter() {
            links[i] = LinkRole::Movement(m as u8);
        }
    }
    for lane in movement_in_lanes
        .iter()
        .chain(movement_out_lanes.iter())
        .flatten()
    {
        if !net.lanes.contains_key(lane) {
            return Err(SumoError::Net {
                path: net.path.clone(),
                message: format!("traffic light {id} uses lane {lane}, which the net lacks"),
            });
        }
    }

    // Conflicts.
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
    let conflicts_from_junction = (0..movements.len()).all(informed);
    let mut conflicts = ConflictMatrix::default();
    for a in 0..movements.len() {
        for b in a + 1..movements.len() {
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

    let phases: Vec<Phase> = (0..greens.len())
        .map(|k| {
            let mut set = MovementSet::EMPTY;
            for (m, &p) in movement_pattern.iter().enumerate() {
                if p & (1 << k) != 0 {
                    set.insert(MovementId(m as u8));
                }
            }
            Phase {
                movements: set,
                timing,
            }
        })
        .collect();
    let plan =
        PhasePlan::new(&movements, conflicts, &phases).map_err(|source| SumoError::Plan {
            tls: id.to_string(),
            source,
        })?;

    let mut in_lanes: Vec<(u8, String)> = groups
        .keys()
        .zip(&movement_in_lanes)
        .flat_map(|(k, ls)| ls.iter().map(move |l| (k.0, l.clone())))
        .collect();
    in_lanes.sort();
    in_lanes.dedup_by(|a, b| a.1 == b.1);
    let mut out_lanes: Vec<String> = movement_out_lanes.iter().flatten().cloned().collect();
    out_lanes.sort();
    out_lanes.dedup();

    Ok(TlsModel {
        id: id.to_string(),
        plan,
        links,
        static_phases: greens.iter().map(|g| g.0).collect(),
        phase_states: greens
            .iter()
            .map(|g| program.phases[g.0].1.clone())
            .collect(),
        movement_edges,
        movement_in_lanes,
        movement_out_lanes,
        in_lanes: in_lanes.into_iter().map(|l| l.1).collect(),
        out_lanes,
        approaches: approach_edges.iter().map(|s| s.to_string()).collect(),
        conflicts_from_junction,
    })
}

impl TlsModel {
    /// Number of links (length of the state string).
    pub fn n_links(&self) -> usize {
        self.links.len()
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
