//! The built-in scenarios, written as scenario-file structures so they pass exactly the
//! checks a user's file does. `scenarios/single-4way.toml` in this crate is the first one
//! written out as a file (a test keeps the two identical).

use std::collections::BTreeMap;

use toml::Spanned;

use super::compile::PRESET_FOUR_ARM;
use super::file::{
    ArmFile, ArmsFile, DemandFile, LinkFile, ModelFile, RewardName, ScenarioFile, SignalFile,
    TimingFile, TurnRatiosFile,
};

/// Names of the built-in scenarios.
pub const BUILTIN_NAMES: [&str; 3] = ["single-4way", "arterial-3", "grid-4x4"];

/// The file structures of built-in scenario `name`.
pub(super) fn file(name: &str) -> Option<ScenarioFile> {
    match name {
        "single-4way" => Some(single_4way()),
        "arterial-3" => Some(arterial_3()),
        "grid-4x4" => Some(grid_4x4()),
        _ => None,
    }
}

/// Built-in values carry no position in any file.
fn unspanned<T>(value: T) -> Spanned<T> {
    Spanned::new(0..0, value)
}

const SPEED_KMH: f64 = 50.0;

/// A morning peak over an hour: ramps from 0.4 to 1.4 over 20 minutes, holds for 20, and
/// falls back (mean 0.9; the peak is 1.56 times the mean).
fn morning_peak() -> Vec<[f64; 2]> {
    vec![[0.0, 0.4], [1200.0, 1.4], [2400.0, 1.4], [3600.0, 0.4]]
}

/// A link arriving at a signal: lanes `L`, `T`, `TR` (or those given) with turning shares.
fn approach(id: &str, length_m: f64, lane_turns: &[&str], shares: [f64; 3]) -> Spanned<LinkFile> {
    unspanned(LinkFile {
        id: id.to_string(),
        length_m,
        speed_limit_kmh: SPEED_KMH,
        lanes: lane_turns.len() as u32,
        lane_turns: Some(lane_turns.iter().map(|s| s.to_string()).collect()),
        turn_ratios: Some(TurnRatiosFile {
            left: shares[0],
            through: shares[1],
            right: shares[2],
            u_turn: 0.0,
        }),
    })
}

/// A link leaving the network.
fn exit(id: &str, length_m: f64, lanes: u32) -> Spanned<LinkFile> {
    unspanned(LinkFile {
        id: id.to_string(),
        length_m,
        speed_limit_kmh: SPEED_KMH,
        lanes,
        lane_turns: None,
        turn_ratios: None,
    })
}

fn arm(incoming: &str, out: &str) -> Option<ArmFile> {
    Some(ArmFile {
        incoming: Some(incoming.to_string()),
        out: Some(out.to_string()),
    })
}

/// A four-arm signal with the protected-left preset; arms given as (in, out), N E S W.
fn four_arm_signal(id: &str, arms: [(String, String); 4]) -> Spanned<SignalFile> {
    let [n, e, s, w] = arms;
    unspanned(SignalFile {
        id: id.to_string(),
        arms: ArmsFile {
            north: arm(&n.0, &n.1),
            east: arm(&e.0, &e.1),
            south: arm(&s.0, &s.1),
            west: arm(&w.0, &w.1),
        },
        timing: TimingFile::default(),
        plan: Some(PRESET_FOUR_ARM.to_string()),
        phases: None,
        initial_phase: 0,
    })
}

fn demand(name: &str, description: &str, flows: &[(String, f64)]) -> Spanned<DemandFile> {
    unspanned(DemandFile {
        name: name.to_string(),
        description: description.to_string(),
        profile: morning_peak(),
        flows_veh_per_hour: flows.iter().cloned().collect::<BTreeMap<_, _>>(),
    })
}

fn scenario(
    name: &str,
    description: &str,
    links: Vec<Spanned<LinkFile>>,
    signals: Vec<Spanned<SignalFile>>,
    demand: Vec<Spanned<DemandFile>>,
) -> ScenarioFile {
    ScenarioFile {
        name: name.to_string(),
        description: description.to_string(),
        decision_interval_s: super::file::default_decision_interval_s(),
        episode_s: super::file::default_episode_s(),
        reward: RewardName::WaitDelta,
        default_demand: None,
        model: ModelFile::default(),
        links,
        signals,
        demand,
    }
}

const LTR: [&str; 3] = ["L", "T", "TR"];
const MAIN_SHARES: [f64; 3] = [0.15, 0.7, 0.15];

/// One four-arm junction, 300 m arms, left / through / through-right lanes.
fn single_4way() -> ScenarioFile {
    let arms = ["n", "e", "s", "w"];
    let mut links = Vec::new();
    for a in arms {
        links.push(approach(&format!("{a}_in"), 300.0, &LTR, MAIN_SHARES));
        links.push(exit(&format!("{a}_out"), 300.0, 2));
    }
    let signal = four_arm_signal(
        "center",
        arms.map(|a| (format!("{a}_in"), format!("{a}_out"))),
    );
    let flows = |heavy: [&str; 2], light: [&str; 2]| -> Vec<(String, f64)> {
        heavy
            .iter()
            .map(|a| (format!("{a}_in"), 1000.0))
            .chain(light.iter().map(|a| (format!("{a}_in"), 550.0)))
            .collect()
    };
    scenario(
        "single-4way",
        "One four-arm junction: 300 m approaches with left, through and through-right \
         lanes, a four-phase protected-left plan, a morning peak.",
        links,
        vec![signal],
        vec![
            demand(
                "base",
                "Morning peak, heavy north-south.",
                &flows(["n", "s"], ["e", "w"]),
            ),
            demand(
                "shifted",
                "Morning peak, heavy east-west (the base demand turned a quarter).",
                &flows(["e", "w"], ["n", "s"]),
            ),
        ],
    )
}

/// Three junctions 300 m apart on an east-west corridor with side streets.
fn arterial_3() -> ScenarioFile {
    let nodes = ["J1", "J2", "J3"];
    let mut links = vec![
        approach("w_in", 300.0, &LTR, [0.1, 0.8, 0.1]),
        exit("w_out", 300.0, 2),
        approach("e_in", 300.0, &LTR, [0.1, 0.8, 0.1]),
        exit("e_out", 300.0, 2),
    ];
    for pair in nodes.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        links.push(approach(&format!("{a}-{b}"), 300.0, &LTR, [0.1, 0.8, 0.1]));
        links.push(approach(&format!("{b}-{a}"), 300.0, &LTR, [0.1, 0.8, 0.1]));
    }
    let mut signals = Vec::new();
    let mut flows = vec![("w_in".to_string(), 1000.0), ("e_in".to_string(), 700.0)];
    for (k, node) in nodes.iter().enumerate() {
        for side in ["n", "s"] {
            links.push(approach(
                &format!("{node}_{side}_in"),
                200.0,
                &["L", "TR"],
                [0.25, 0.5, 0.25],
            ));
            links.push(exit(&format!("{node}_{side}_out"), 200.0, 1));
            flows.push((format!("{node}_{side}_in"), 200.0));
        }
        // West arm: from the previous junction (or the west entry), east arm likewise.
        let west = match k {
            0 => ("w_in".to_string(), "w_out".to_string()),
            _ => (
                format!("{}-{node}", nodes[k - 1]),
                format!("{node}-{}", nodes[k - 1]),
            ),
        };
        let east = match nodes.get(k + 1) {
            None => ("e_in".to_string(), "e_out".to_string()),
            Some(next) => (format!("{next}-{node}"), format!("{node}-{next}")),
        };
        signals.push(four_arm_signal(
            node,
            [
                (format!("{node}_n_in"), format!("{node}_n_out")),
                east,
                (format!("{node}_s_in"), format!("{node}_s_out")),
                west,
            ],
        ));
    }
    scenario(
        "arterial-3",
        "Three junctions 300 m apart on an east-west arterial (heavier eastbound) with \
         side streets, a morning peak.",
        links,
        signals,
        vec![demand("base", "Morning peak, eastbound heavier.", &flows)],
    )
}

/// Sixteen junctions on a 4 × 4 grid, 200 m blocks.
fn grid_4x4() -> ScenarioFile {
    const N: usize = 4;
    let node = |r: usize, c: usize| format!("J{r}{c}");
    let mut links = Vec::new();
    let mut flows = Vec::new();
    // Internal links in both directions between neighbours.
    for r in 0..N {
        for c in 0..N {
            if c + 1 < N {
                for (a, b) in [(node(r, c), node(r, c + 1)), (node(r, c + 1), node(r, c))] {
                    links.push(approach(&format!("{a}-{b}"), 200.0, &LTR, [0.1, 0.8, 0.1]));
                }
            }
            if r + 1 < N {
                for (a, b) in [(node(r, c), node(r + 1, c)), (node(r + 1, c), node(r, c))] {
                    links.push(approach(&format!("{a}-{b}"), 200.0, &LTR, [0.1, 0.8, 0.1]));
                }
            }
        }
    }
    // Boundary entries and exits: N0..N3 on top, S0..S3 at the bottom, W0..W3, E0..E3.
    for k in 0..N {
        for (side, q) in [("N", 700.0), ("S", 700.0), ("W", 500.0), ("E", 500.0)] {
            links.push(approach(
                &format!("{side}{k}_in"),
                200.0,
                &LTR,
                [0.1, 0.8, 0.1],
            ));
            links.push(exit(&format!("{side}{k}_out"), 200.0, 2));
            flows.push((format!("{side}{k}_in"), q));
        }
    }
    let mut signals = Vec::new();
    for r in 0..N {
        for c in 0..N {
            let here = node(r, c);
            let pair = |nb: Option<String>, side: String| match nb {
                Some(nb) => (format!("{nb}-{here}"), format!("{here}-{nb}")),
                None => (format!("{side}_in"), format!("{side}_out")),
            };
            let north = pair((r > 0).then(|| node(r - 1, c)), format!("N{c}"));
            let east = pair((c + 1 < N).then(|| node(r, c + 1)), format!("E{r}"));
            let south = pair((r + 1 < N).then(|| node(r + 1, c)), format!("S{c}"));
            let west = pair((c > 0).then(|| node(r, c - 1)), format!("W{r}"));
            signals.push(four_arm_signal(&here, [north, east, south, west]));
        }
    }
    scenario(
        "grid-4x4",
        "Sixteen four-arm junctions on a 4 x 4 grid of 200 m blocks, heavier north-south, \
         a morning peak; spill-back and gridlock are possible.",
        links,
        signals,
        vec![demand("base", "Morning peak, heavier north-south.", &flows)],
    )
}
