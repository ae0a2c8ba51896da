//! Signal timing on SUMO networks: taken from each light's own program by default,
//! overridable by a timing file and by command-line values.
//!
//! Per phase of a derived plan (see [`model`](super::model)), the net gives:
//!
//! * **yellow**: the total duration of the program's yellow phases that follow that green
//!   phase (phases showing a `y`), until the next phase without one;
//! * **all-red**: the total duration of the phases after those yellows that show no green
//!   and no yellow, or green only on links green without a break since that green phase
//!   (and that the plan does not hold as a stage): see [`clearance_after`] (0 when the
//!   program has none);
//! * each raised, where longer, to the clearance the program gives a link of that phase
//!   where the link's green ends stages later ([`link_end_clearance`]: its own yellow and
//!   the dark phases after it; a leading left's through ends in its own stage, and a plan
//!   may end it straight from the first);
//! * **max green**: the phase's `maxDur` in an actuated or delay-based program, else the
//!   larger of [`DEFAULT_MAX_GREEN_S`] and the static green's own duration (so no
//!   controller is held to a shorter green than the program it is compared with), at
//!   most [`MAX_GREEN_CEILING_S`];
//! * **min green**: [`DEFAULT_MIN_GREEN_S`];
//! * **intergreens**: for each pair of conflicting movements, the shortest time the program
//!   keeps between the end of one's green and the start of the other's
//!   ([`program_intergreen_s`], over the pair's links), where that is longer than the plan's
//!   quickest switch between them, with `program_intergreens = true` (off unless set); the
//!   sequencer then starts that movement later, alone.
//!
//! Net values are rounded up to the SUMO step. A net yellow below the ITE floor of
//! greenwave-core ([`YELLOW_RANGE`], 3 s) is raised to it, and a max green above its ceiling
//! lowered to it, each with a note; a net all-red above its ceiling, or a yellow one link
//! shows for longer ([`longest_link_yellow_s`]), leaves the light on its program
//! (`model::check_net_clearance`); a value given by the user outside those bounds is refused.
//! A staggered run of yellows lowered to the ceiling can still shorten some pair's
//! intergreen, which the program-intergreen note reports. Overrides apply in this order, each beating the one before: the net, the timing
//! file's `[defaults]`, its `[signals.ID]` table, then the command line.
//!
//! ```toml
//! # greenwave timing file: every key is optional
//! decision_interval_s = 5
//!
//! [defaults]            # every controlled signal
//! min_green_s = 6
//! all_red_s = 1
//!
//! [signals."cluster_25_26"]   # one signal, by its SUMO id
//! yellow_s = 4
//! max_green_s = 45
//! program_intergreens = true   # keep the program's per-pair intergreens
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use greenwave_core::plan::{ALL_RED_RANGE, MIN_GREEN_FLOOR, YELLOW_RANGE};
use greenwave_core::{Millis, PhaseTiming};
use serde::{Deserialize, Serialize};

use super::net::{TlLogic, TlPhase};
use super::SumoError;

/// Min green when nothing sets it (s).
pub const DEFAULT_MIN_GREEN_S: f64 = 5.0;
/// Max green of a static program's phase whose own green is shorter (s).
pub const DEFAULT_MAX_GREEN_S: f64 = 60.0;
/// Longest max green (s), from a user or the net: a green held longer starves the others.
pub const MAX_GREEN_CEILING_S: f64 = 300.0;

/// Timing values that replace the net's, each optional (absent: keep the value below).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingOverrides {
    /// Yellow change interval (s), 3–6.
    pub yellow_s: Option<f64>,
    /// All-red clearance (s), 0–6.
    pub all_red_s: Option<f64>,
    /// Min green (s), at least 1 and below max green.
    pub min_green_s: Option<f64>,
    /// Max green (s), at most 300.
    pub max_green_s: Option<f64>,
    /// Whether the plan keeps the program's per-pair intergreens where they are longer than
    /// a switch's yellow and all-red (absent: no, for now; see [`program_intergreen_s`]).
    pub program_intergreens: Option<bool>,
}

impl TimingOverrides {
    /// Whether nothing is overridden.
    pub fn is_empty(&self) -> bool {
        *self == TimingOverrides::default()
    }

    /// `self` with every value `over` sets replaced.
    fn then(&self, over: &TimingOverrides) -> TimingOverrides {
        TimingOverrides {
            yellow_s: over.yellow_s.or(self.yellow_s),
            all_red_s: over.all_red_s.or(self.all_red_s),
            min_green_s: over.min_green_s.or(self.min_green_s),
            max_green_s: over.max_green_s.or(self.max_green_s),
            program_intergreens: over.program_intergreens.or(self.program_intergreens),
        }
    }
}

/// Where timing comes from: the net, then these overrides (a timing file and flags).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimingSpec {
    /// Seconds between decisions, if the file sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_interval_s: Option<f64>,
    /// For every controlled signal.
    #[serde(default, skip_serializing_if = "TimingOverrides::is_empty")]
    pub defaults: TimingOverrides,
    /// Per signal, by SUMO traffic-light id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub signals: BTreeMap<String, TimingOverrides>,
    /// From the command line: beats everything else.
    #[serde(default, skip_serializing_if = "TimingOverrides::is_empty")]
    pub command_line: TimingOverrides,
}

impl TimingSpec {
    /// Parses a timing file's text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, SumoError> {
        let spec: TimingSpec = toml::from_str(text).map_err(|e| {
            SumoError::Config(format!("timing file {origin}: {}", e.to_string().trim()))
        })?;
        if !spec.command_line.is_empty() {
            return Err(SumoError::Config(format!(
                "timing file {origin}: `command_line` is set by flags, not by the file"
            )));
        }
        Ok(spec)
    }

    /// Reads a timing file.
    pub fn load(path: &Path) -> Result<Self, SumoError> {
        let text = std::fs::read_to_string(path).map_err(|source| SumoError::Io {
            what: format!("reading timing file {}", path.display()),
            source,
        })?;
        Self::from_toml(&text, &path.display().to_string())
    }

    /// The overrides that apply to signal `id`, in order.
    pub fn overrides_for(&self, id: &str) -> TimingOverrides {
        let mut o = self.defaults.clone();
        if let Some(s) = self.signals.get(id) {
            o = o.then(s);
        }
        o.then(&self.command_line)
    }

    /// Refuses `[signals.ID]` tables naming a light the net lacks.
    pub fn check_signal_ids<'a>(
        &self,
        net_ids: impl IntoIterator<Item = &'a str> + Clone,
    ) -> Result<(), SumoError> {
        for id in self.signals.keys() {
            if !net_ids.clone().into_iter().any(|n| n == id) {
                let known: Vec<&str> = net_ids.into_iter().collect();
                return Err(SumoError::Config(format!(
                    "timing for signal {id:?}: the net has no traffic light of that id (it has: {})",
                    known.join(", ")
                )));
            }
        }
        Ok(())
    }
}

/// One phase's timing as the net gives it, before overrides (ms).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetPhaseTiming {
    /// Yellow after this green.
    pub yellow: Millis,
    /// All-red after that yellow.
    pub all_red: Millis,
    /// Max green.
    pub max_green: Millis,
}

/// Whether a state-string character is a green (`G` priority, `g` permissive).
pub(crate) fn is_green(c: u8) -> bool {
    c == b'G' || c == b'g'
}

fn has_green(state: &str) -> bool {
    state.bytes().any(is_green)
}

fn has_yellow(state: &str) -> bool {
    state.bytes().any(|c| c == b'y' || c == b'Y')
}

/// Seconds from SUMO (a net file, TraCI) as a duration rounded to the millisecond;
/// negative or NaN is zero, past `u32::MAX` ms saturates.
pub(crate) fn secs_to_ms(s: f64) -> Millis {
    Millis((s * 1000.0).round().clamp(0.0, u32::MAX as f64) as u32)
}

pub(crate) fn secs_to_step(s: f64, step_ms: u32) -> Millis {
    let step = step_ms.max(1) as f64;
    Millis(((s * 1000.0 / step).ceil() * step).min(u32::MAX as f64) as u32)
}

/// The clearance that follows green phase `k` of `program`: (yellow, all-red) in seconds.
/// A green followed directly by another green has none. After the yellow, a phase that
/// shows no yellow and no green but on links green without a break since `k` counts as
/// all-red unless `is_stage` says greenwave's plan holds it as a stage: a program that
/// keeps one link green through another's change (`GGrG → yyrG → rrrG → rrGG`) gives the
/// ending links their all-red there, and greenwave's all-red holds ending links red while
/// the links both phases serve stay green, as that phase does. A link that went yellow and
/// turns green again (`GGg → yyy → rrG`, a protected turn) ends the clearance.
pub fn clearance_after(
    program: &TlLogic,
    k: usize,
    is_stage: impl Fn(usize) -> bool,
) -> (f64, f64) {
    let n = program.phases.len();
    let own = &program.phases[k].state;
    // Links green in `k` and in every phase since.
    let mut unbroken: Vec<bool> = (0..own.len()).map(|l| link_green(own, l)).collect();
    let mut yellow_s = 0.0;
    let mut all_red_s = 0.0;
    for step in 1..n {
        let index = (k + step) % n;
        let p = &program.phases[index];
        let all_red = !has_green(&p.state) && !has_yellow(&p.state);
        let continuing_only = yellow_s > 0.0
            && !has_yellow(&p.state)
            && !is_stage(index)
            && (0..p.state.len())
                .all(|l| !link_green(&p.state, l) || unbroken.get(l).copied().unwrap_or(false));
        if has_yellow(&p.state) && all_red_s == 0.0 {
            yellow_s += p.duration_s;
        } else if all_red || continuing_only {
            all_red_s += p.duration_s;
        } else {
            break;
        }
        for (l, u) in unbroken.iter_mut().enumerate() {
            *u &= link_green(&p.state, l);
        }
    }
    (yellow_s, all_red_s)
}

/// Whether two program states show green on the same links.
pub(crate) fn same_greens(a: &str, b: &str) -> bool {
    (0..a.len().max(b.len())).all(|l| link_green(a, l) == link_green(b, l))
}

/// The longest yellow any one link green in phase `k` shows in the yellow after it (s).
/// [`clearance_after`]'s yellow is the whole run of phases with a yellow, which in a
/// program that yellows its links one after another (German ones) is longer than any
/// link's own.
pub fn longest_link_yellow_s(program: &TlLogic, k: usize) -> f64 {
    let n = program.phases.len();
    let yellows: Vec<&TlPhase> = (1..n)
        .map(|step| &program.phases[(k + step) % n])
        .take_while(|p| has_yellow(&p.state))
        .collect();
    (0..program.phases[k].state.len())
        .filter(|&link| link_green(&program.phases[k].state, link))
        .map(|link| {
            let mut run = 0.0f64;
            let mut longest = 0.0f64;
            for p in &yellows {
                run = if link_yellow(&p.state, link) {
                    run + p.duration_s
                } else {
                    0.0
                };
                longest = longest.max(run);
            }
            longest
        })
        .fold(0.0, f64::max)
}

fn link_green(state: &str, link: usize) -> bool {
    state.as_bytes().get(link).copied().is_some_and(is_green)
}

fn link_yellow(state: &str, link: usize) -> bool {
    matches!(state.as_bytes().get(link), Some(b'y' | b'Y'))
}

/// The shortest time `program` keeps between the end of link `from`'s green and the start
/// of link `to`'s (s): the intergreen it gives that pair. Counted from each phase change
/// where `from` stops showing green while `to` does not show it, to the next phase where
/// `to` does, unless in between `from` is green again, one of `stages` comes (a program
/// phase that a controller holds as a stage of its own), or a link that `holds_to` (one
/// that conflicts with `to`) turns green: then `to` waited for the program's stage order,
/// not for a clearance. `None` when the program never hands green from one straight to
/// the other. Programs that time their links apart (German ones, with their
/// *Zwischenzeiten*) keep different intergreens for different pairs; greenwave's phase
/// plans keep one yellow and all-red per phase (tools/README.md, finding 28).
pub fn program_intergreen_s(
    program: &TlLogic,
    (from, to): (usize, usize),
    stages: &[usize],
    holds_to: impl Fn(usize) -> bool,
) -> Option<f64> {
    let phases = &program.phases;
    let n = phases.len();
    let green = |k: usize, link: usize| link_green(&phases[k % n].state, link);
    // A link that conflicts with `to` turning green at phase `q` (it was not at `k`).
    let new_foe = |k: usize, q: usize| {
        (0..phases[q % n].state.len())
            .any(|l| l != from && l != to && green(q, l) && !green(k, l) && holds_to(l))
    };
    let mut shortest: Option<f64> = None;
    for k in 0..n {
        if !green(k, from) || green(k + 1, from) || green(k + 1, to) {
            continue;
        }
        let mut gap_s = 0.0;
        for q in k + 1..k + 1 + n {
            if green(q, to) {
                shortest = Some(shortest.map_or(gap_s, |s: f64| s.min(gap_s)));
                break;
            }
            if green(q, from) || stages.contains(&(q % n)) || new_foe(k, q) {
                break;
            }
            gap_s += phases[q % n].duration_s;
        }
    }
    shortest
}

/// The longest clearance (yellow, all-red; s) `program` gives any link green in phase `k`
/// where that link's green ends, which can be stages later: a link that stays green into
/// the next stage (a leading left's through) ends there, and a plan switch straight out of
/// `k` ends it too. A link's clearance is its own: the phases right after its green that
/// show it yellow, then the phases that show no green and no yellow at all (a phase where
/// other links stay green is the program's stage order, which a plan's switch does not
/// keep; per-pair gaps are the intergreens' business). A link green in every phase never
/// ends.
pub fn link_end_clearance(program: &TlLogic, k: usize) -> (f64, f64) {
    let n = program.phases.len();
    let phase = |q: usize| &program.phases[q % n];
    let dark = |q: usize| !has_green(&phase(q).state) && !has_yellow(&phase(q).state);
    let mut longest = (0.0f64, 0.0f64);
    for l in (0..phase(k).state.len()).filter(|&l| link_green(&phase(k).state, l)) {
        let run = (k..k + n)
            .take_while(|&q| link_green(&phase(q).state, l))
            .count();
        if run == n {
            continue;
        }
        let end = k + run;
        let yellow: Vec<usize> = (end..end + n)
            .take_while(|&q| link_yellow(&phase(q).state, l))
            .collect();
        let yellow_s: f64 = yellow.iter().map(|&q| phase(q).duration_s).sum();
        let after = end + yellow.len();
        let all_red_s: f64 = (after..end + n)
            .take_while(|&q| dark(q))
            .map(|q| phase(q).duration_s)
            .sum();
        longest = (longest.0.max(yellow_s), longest.1.max(all_red_s));
    }
    longest
}

/// Net timing of the green phase at index `k` of `program`, rounded up to the SUMO step:
/// the clearance after it ([`clearance_after`]), or where it is longer the clearance the
/// program gives a link of it that ends later ([`link_end_clearance`]).
pub fn net_phase_timing(
    program: &TlLogic,
    k: usize,
    is_stage: impl Fn(usize) -> bool,
    step_ms: u32,
) -> NetPhaseTiming {
    let (own_yellow_s, own_all_red_s) = clearance_after(program, k, &is_stage);
    let (link_yellow_s, link_all_red_s) = link_end_clearance(program, k);
    let yellow_s = own_yellow_s.max(link_yellow_s);
    let all_red_s = own_all_red_s.max(link_all_red_s);
    let phase = &program.phases[k];
    let max_green_s = match phase.max_dur_s.filter(|_| program.kind != "static") {
        Some(max) => max,
        None => phase.duration_s.max(DEFAULT_MAX_GREEN_S),
    };
    NetPhaseTiming {
        yellow: secs_to_step(yellow_s, step_ms),
        all_red: secs_to_step(all_red_s, step_ms),
        max_green: secs_to_step(max_green_s, step_ms),
    }
}

/// A net value outside `range`, brought inside it, with a note saying so.
/// The floor and ceiling are taken on the SUMO step's grid (the floor rounded up, the
/// ceiling down): a display change SUMO applies at its next step would otherwise show an
/// interval raised to the floor shorter than the floor.
fn clamp_net(
    value: Millis,
    range: (Millis, Millis),
    step_ms: u32,
    what: &str,
    notes: &mut Vec<String>,
) -> Millis {
    let step = step_ms.max(1);
    let floor = Millis(range.0 .0.div_ceil(step).saturating_mul(step));
    let ceiling = Millis(range.1 .0 / step * step).max(floor);
    if value < floor {
        notes.push(format!("{what} {value} raised to the {floor} floor"));
        floor
    } else if value > ceiling {
        notes.push(format!("{what} {value} lowered to the {ceiling} ceiling"));
        ceiling
    } else {
        value
    }
}

/// The net's max green, brought below `ceiling` (a program that holds a green for hours, as
/// SUMO's game nets do for their player, would otherwise let actuated control hold it as
/// long) and above `min_green`, each with a note.
fn net_max_green(
    net: Millis,
    min_green: Millis,
    ceiling: Millis,
    step_ms: u32,
    notes: &mut Vec<String>,
) -> Millis {
    let max_green = clamp_net(net, (Millis::ZERO, ceiling), step_ms, "max green", notes);
    if max_green > min_green {
        return max_green;
    }
    let raised = min_green.saturating_add(Millis(step_ms.max(1)));
    notes.push(format!(
        "max green {max_green} raised above min green to {raised}"
    ));
    raised
}

/// A user's value in seconds: a whole number of SUMO steps inside `[lo, hi]`.
fn user_value(
    signal: &str,
    what: &str,
    s: f64,
    (lo, hi): (Millis, Millis),
    step_ms: u32,
) -> Result<Millis, SumoError> {
    let bad =
        |why: String| SumoError::Config(format!("timing for signal {signal}: {what} {s} s {why}"));
    let ms = Millis::from_secs_f32(s as f32).ok_or_else(|| bad("is not a duration".into()))?;
    if ms < lo || ms > hi {
        return Err(bad(format!("is outside the safe range {lo} to {hi}")));
    }
    if ms.0 % step_ms.max(1) != 0 {
        return Err(bad(format!(
            "is not a multiple of the SUMO step ({} ms): display changes must fall on SUMO steps",
            step_ms
        )));
    }
    Ok(ms)
}

/// The timing of one phase of signal `signal`: the net's, then `over`. Notes say where a
/// net value was brought into the safe range; user values out of range are errors.
pub fn resolve(
    signal: &str,
    net: NetPhaseTiming,
    over: &TimingOverrides,
    step_ms: u32,
    notes: &mut Vec<String>,
) -> Result<PhaseTiming, SumoError> {
    let user = |v: Option<f64>, what: &str, range| {
        v.map(|s| user_value(signal, what, s, range, step_ms))
            .transpose()
    };
    let green_range = (
        MIN_GREEN_FLOOR,
        Millis((MAX_GREEN_CEILING_S * 1000.0) as u32),
    );
    let yellow = match user(over.yellow_s, "yellow", YELLOW_RANGE)? {
        Some(v) => v,
        None => clamp_net(net.yellow, YELLOW_RANGE, step_ms, "yellow", notes),
    };
    let all_red = match user(over.all_red_s, "all-red", ALL_RED_RANGE)? {
        Some(v) => v,
        None => clamp_net(net.all_red, ALL_RED_RANGE, step_ms, "all-red", notes),
    };
    // Below the ceiling by a step, so that a max green above it stays within it.
    let min_green_range = (
        green_range.0,
        green_range.1.saturating_sub(Millis(step_ms.max(1))),
    );
    let min_green = user(over.min_green_s, "min green", min_green_range)?
        .unwrap_or(secs_to_step(DEFAULT_MIN_GREEN_S, step_ms));
    let max_green = match user(over.max_green_s, "max green", green_range)? {
        Some(v) => v,
        None => net_max_green(net.max_green, min_green, green_range.1, step_ms, notes),
    };
    if min_green >= max_green {
        return Err(SumoError::Config(format!(
            "timing for signal {signal}: min green {min_green} must be below max green {max_green}"
        )));
    }
    Ok(PhaseTiming {
        min_green,
        max_green,
        yellow,
        all_red,
        pedestrian: None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::net::TlPhase;
    use super::*;

    fn program(kind: &str, phases: &[(f64, &str)]) -> TlLogic {
        TlLogic {
            id: "J".into(),
            program_id: "0".into(),
            kind: kind.into(),
            offset_s: 0.0,
            phases: phases
                .iter()
                .map(|&(d, s)| TlPhase {
                    duration_s: d,
                    state: s.into(),
                    min_dur_s: None,
                    max_dur_s: Some(d + 30.0),
                    next: None,
                })
                .collect(),
        }
    }

    #[test]
    fn clearance_comes_from_the_program() {
        let p = program(
            "static",
            &[
                (31.0, "GGrr"),
                (4.0, "yyrr"),
                (2.0, "rrrr"),
                (20.0, "rrGG"),
                (3.0, "rryy"),
            ],
        );
        let t = net_phase_timing(&p, 0, |k| k == 3, 1000);
        assert_eq!((t.yellow, t.all_red), (Millis(4000), Millis(2000)));
        assert_eq!(t.max_green, Millis(60_000), "static: max(60 s, green)");
        let t = net_phase_timing(&p, 3, |k| k == 0, 1000);
        assert_eq!(
            (t.yellow, t.all_red),
            (Millis(3000), Millis::ZERO),
            "wraps around"
        );
        let a = program(
            "actuated",
            &[(31.0, "GGrr"), (3.0, "yyrr"), (20.0, "rrGG"), (3.0, "rryy")],
        );
        assert_eq!(
            net_phase_timing(&a, 0, |k| k == 2, 1000).max_green,
            Millis(61_000),
            "maxDur"
        );
    }

    /// A program that yellows its links one after another: the run of yellow phases is 7 s,
    /// no link's own yellow longer than 4 s; a link yellow for two phases in a row counts
    /// both.
    #[test]
    fn a_links_own_yellow_is_its_longest_run() {
        let p = program(
            "static",
            &[
                (30.0, "GGGr"),
                (3.0, "yGGr"),
                (1.0, "ryGr"),
                (3.0, "ryyr"),
                (2.0, "rrrr"),
                (30.0, "rrrG"),
            ],
        );
        assert_eq!(clearance_after(&p, 0, |k| k == 5), (7.0, 2.0));
        assert_eq!(longest_link_yellow_s(&p, 0), 4.0);
        assert_eq!(longest_link_yellow_s(&p, 5), 0.0, "no yellow follows");
    }

    /// A program that keeps link 3 green through the change from links 0–1 to link 2: its
    /// 2 s of `rrrG` are the ending links' all-red, unless greenwave holds it as a stage
    /// (a lagging turn); a phase that turns a link green ends the clearance.
    #[test]
    fn a_link_kept_green_through_a_change_does_not_hide_its_all_red() {
        let p = program(
            "static",
            &[
                (30.0, "GGrG"),
                (3.0, "yyrG"),
                (2.0, "rrrG"),
                (30.0, "rrGG"),
                (3.0, "rryy"),
                (1.0, "rrrr"),
            ],
        );
        let stages = |k: usize| k == 0 || k == 3;
        assert_eq!(clearance_after(&p, 0, stages), (3.0, 2.0));
        assert_eq!(clearance_after(&p, 0, |k| k != 1), (3.0, 0.0), "a stage");
        assert_eq!(clearance_after(&p, 3, stages), (3.0, 1.0));
        // A link that went yellow and turns green again (a protected turn after the
        // permissive one) ends the clearance, stage or not.
        let t = program(
            "static",
            &[
                (30.0, "GGg"),
                (3.0, "yyy"),
                (2.0, "rrG"),
                (3.0, "rry"),
                (30.0, "GrG"),
            ],
        );
        assert_eq!(clearance_after(&t, 0, |k| k == 0 || k == 4), (3.0, 0.0));
        // Before any yellow a green is the next stage's (a link going straight to red is
        // not a clearance greenwave reads); after it, a new green ends the clearance.
        let q = program(
            "static",
            &[
                (30.0, "GGr"),
                (2.0, "Grr"),
                (3.0, "yrr"),
                (2.0, "rrG"),
                (30.0, "rGG"),
            ],
        );
        assert_eq!(clearance_after(&q, 0, |k| k == 0 || k == 4), (0.0, 0.0));
        assert_eq!(clearance_after(&q, 1, |k| k == 0 || k == 4), (3.0, 0.0));
    }

    /// A leading left: the through (link 1) stays green into its own stage and ends there
    /// with 5 s of yellow and 1 s of all-red. A plan may switch straight out of the first
    /// stage to the cross street, ending the through there too: that stage gets the
    /// through's clearance, not only the left's 3 s.
    #[test]
    fn a_link_that_ends_stages_later_keeps_its_own_clearance() {
        let p = program(
            "static",
            &[
                (20.0, "GGrr"),
                (3.0, "yGrr"),
                (20.0, "rGrr"),
                (5.0, "ryrr"),
                (1.0, "rrrr"),
                (30.0, "rrrG"),
                (3.0, "rrry"),
                (1.0, "rrrr"),
                (30.0, "rrGr"),
                (4.0, "rryr"),
                (1.0, "rrrr"),
            ],
        );
        let stages = |k: usize| k == 0 || k == 2 || k == 5 || k == 8;
        assert_eq!(clearance_after(&p, 0, stages), (3.0, 0.0));
        assert_eq!(link_end_clearance(&p, 0), (5.0, 1.0));
        let t = net_phase_timing(&p, 0, stages, 1000);
        assert_eq!((t.yellow, t.all_red), (Millis(5000), Millis(1000)));
        // The through's own stage, and the others, are as their programs end them.
        let t = net_phase_timing(&p, 2, stages, 1000);
        assert_eq!((t.yellow, t.all_red), (Millis(5000), Millis(1000)));
        let t = net_phase_timing(&p, 8, stages, 1000);
        assert_eq!((t.yellow, t.all_red), (Millis(4000), Millis(1000)));
        // A link green in every phase never ends: it adds nothing.
        let always = program(
            "static",
            &[(30.0, "GGr"), (3.0, "Gyr"), (30.0, "GrG"), (3.0, "Gry")],
        );
        assert_eq!(link_end_clearance(&always, 0), (3.0, 0.0));
        // A link's own yellow, not the whole run a program yellows its links in one after
        // another, and no all-red where other links stay green after it.
        let staggered = program(
            "static",
            &[
                (30.0, "GGr"),
                (2.0, "yGr"),
                (2.0, "ryr"),
                (2.0, "rrr"),
                (30.0, "rrG"),
            ],
        );
        assert_eq!(link_end_clearance(&staggered, 0), (2.0, 2.0));
        assert_eq!(
            clearance_after(&staggered, 0, |k| k == 0 || k == 4),
            (4.0, 2.0)
        );
    }

    #[test]
    fn intergreens_are_read_pair_by_pair() {
        let none = |_: usize| false;
        // Link 0 ends with 3 s yellow and 2 s red; link 1 starts 1 s after link 0's
        // yellow; link 2 waits for the all-red; link 3 overlaps link 0 and keeps going.
        let p = program(
            "static",
            &[
                (30.0, "GrrG"),
                (3.0, "yrrG"),
                (1.0, "rrrG"),
                (1.0, "rGrG"),
                (20.0, "rGGr"),
                (4.0, "ryyr"),
                (2.0, "rrrr"),
            ],
        );
        assert_eq!(program_intergreen_s(&p, (0, 1), &[], none), Some(4.0));
        assert_eq!(program_intergreen_s(&p, (0, 2), &[], none), Some(5.0));
        assert_eq!(
            program_intergreen_s(&p, (1, 0), &[], none),
            Some(6.0),
            "wraps around"
        );
        assert_eq!(program_intergreen_s(&p, (2, 3), &[], none), Some(6.0));
        assert_eq!(
            program_intergreen_s(&p, (0, 3), &[], none),
            None,
            "link 3 is green when link 0's ends"
        );
        assert_eq!(
            program_intergreen_s(&p, (3, 0), &[], none),
            Some(26.0),
            "20 s of link 1 between"
        );
        // The shortest of several hand-overs counts.
        let q = program(
            "static",
            &[
                (10.0, "Gr"),
                (5.0, "yr"),
                (10.0, "rG"),
                (3.0, "ry"),
                (10.0, "Gr"),
                (3.0, "yr"),
                (10.0, "rG"),
                (3.0, "ry"),
            ],
        );
        assert_eq!(program_intergreen_s(&q, (0, 1), &[], none), Some(3.0));
        assert_eq!(program_intergreen_s(&q, (1, 0), &[], none), Some(3.0));
        // A stage between (link 1, 6 s, phase 2) holds link 2 red: the gap from link 0 to
        // link 2 is the order of the stages, not a clearance.
        let r = program(
            "static",
            &[
                (30.0, "Grr"),
                (3.0, "yrr"),
                (6.0, "rGr"),
                (3.0, "ryr"),
                (20.0, "rrG"),
                (3.0, "rry"),
            ],
        );
        assert_eq!(program_intergreen_s(&r, (0, 2), &[], none), Some(12.0));
        assert_eq!(program_intergreen_s(&r, (0, 2), &[2], none), None);
        assert_eq!(program_intergreen_s(&r, (1, 2), &[2], none), Some(3.0));
        // So is a link that conflicts with link 2 turning green between, but not one that
        // was green with link 0 and goes on.
        assert_eq!(program_intergreen_s(&r, (0, 2), &[], |l| l == 1), None);
        let s = program(
            "static",
            &[
                (30.0, "GGr"),
                (5.0, "rGr"),
                (3.0, "ryr"),
                (20.0, "rrG"),
                (3.0, "rry"),
            ],
        );
        assert_eq!(program_intergreen_s(&s, (0, 2), &[], |l| l == 1), Some(8.0));
    }

    #[test]
    fn net_values_are_clamped_with_a_note_user_values_refused() {
        let net = NetPhaseTiming {
            yellow: Millis(2000),
            all_red: Millis::ZERO,
            max_green: Millis(60_000),
        };
        let mut notes = Vec::new();
        let t = resolve("J", net, &TimingOverrides::default(), 1000, &mut notes).unwrap();
        assert_eq!(t.yellow, Millis(3000));
        assert_eq!(t.min_green, Millis(5000));
        assert!(notes[0].contains("raised"), "{notes:?}");
        let over = TimingOverrides {
            yellow_s: Some(2.0),
            ..Default::default()
        };
        let err = refusal(net, &over);
        assert!(
            err.contains("signal J") && err.contains("yellow 2 s"),
            "{err}"
        );
        let over = TimingOverrides {
            all_red_s: Some(1.5),
            ..Default::default()
        };
        let err = refusal(net, &over);
        assert!(err.contains("multiple of the SUMO step"), "{err}");
        let over = TimingOverrides {
            min_green_s: Some(30.0),
            max_green_s: Some(20.0),
            ..Default::default()
        };
        assert!(resolve("J", net, &over, 1000, &mut notes).is_err());
        // On a 0.4 s step the floor and ceilings are on the step's grid (SUMO applies a
        // change at its next step: a yellow raised to 3 s would show 2.8 s).
        let t = resolve("J", net, &TimingOverrides::default(), 400, &mut notes).unwrap();
        assert_eq!(t.yellow, Millis(3200));
        let hold = NetPhaseTiming {
            max_green: Millis(10_000_000),
            ..net
        };
        let t = resolve("J", hold, &TimingOverrides::default(), 700, &mut notes).unwrap();
        assert_eq!((t.yellow, t.max_green), (Millis(3500), Millis(299_600)));
    }

    /// The error `resolve` gives for `net` with `over`.
    fn refusal(net: NetPhaseTiming, over: &TimingOverrides) -> String {
        resolve("J", net, over, 1000, &mut Vec::new())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_net_max_green_above_the_ceiling_is_lowered_with_a_note() {
        // A program that holds its green for hours (SUMO's game nets, for their player).
        let hold = NetPhaseTiming {
            yellow: Millis(3000),
            all_red: Millis::ZERO,
            max_green: Millis(10_000_000),
        };
        let mut notes = Vec::new();
        let t = resolve("J", hold, &TimingOverrides::default(), 1000, &mut notes).unwrap();
        assert_eq!(t.max_green, Millis(300_000));
        assert!(
            notes
                .iter()
                .any(|n| n.contains("max green") && n.contains("lowered")),
            "{notes:?}"
        );
        let over = TimingOverrides {
            max_green_s: Some(90.0),
            ..Default::default()
        };
        let mut notes = Vec::new();
        let t = resolve("J", hold, &over, 1000, &mut notes).unwrap();
        assert_eq!(
            t.max_green,
            Millis(90_000),
            "the user's value beats the net's"
        );
        assert!(!notes.iter().any(|n| n.contains("max green")), "{notes:?}");
        // A min green at the ceiling would need a max green above it.
        let over = TimingOverrides {
            min_green_s: Some(300.0),
            ..Default::default()
        };
        let err = refusal(hold, &over);
        assert!(err.contains("min green 300 s"), "{err}");
    }

    #[test]
    fn overrides_stack_file_then_signal_then_flags() {
        let mut spec = TimingSpec::from_toml(
            "decision_interval_s = 4\n[defaults]\nmin_green_s = 6\nyellow_s = 4\n\
             [signals.A]\nyellow_s = 5\n",
            "test",
        )
        .unwrap();
        assert_eq!(spec.decision_interval_s, Some(4.0));
        assert_eq!(spec.overrides_for("A").yellow_s, Some(5.0));
        assert_eq!(spec.overrides_for("B").yellow_s, Some(4.0));
        spec.command_line.yellow_s = Some(6.0);
        assert_eq!(spec.overrides_for("A").yellow_s, Some(6.0));
        assert_eq!(spec.overrides_for("A").min_green_s, Some(6.0));
        assert!(spec.check_signal_ids(["A", "B"]).is_ok());
        let err = spec.check_signal_ids(["B"]).unwrap_err().to_string();
        assert!(err.contains("\"A\"") && err.contains("it has: B"), "{err}");
        let err = TimingSpec::from_toml("[defaults]\nyelow_s = 3\n", "t.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("t.toml") && err.contains("yelow_s"), "{err}");
    }
}
