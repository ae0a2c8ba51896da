//! Scenarios shared by the unit tests.

use crate::scenario::Scenario;

/// `tests/data/single-approach.toml` with its approach `in_m` long, `flow` veh/h on it,
/// `initial_phase` green first and the given max green. Movements: 0 = NT, 1 = ET;
/// phases: 0 = north through, 1 = east through.
pub(crate) fn approach(flow: f64, in_m: f64, initial_phase: u8, max_green_s: f64) -> Scenario {
    let text = include_str!("../tests/data/single-approach.toml")
        .replacen("length_m = 2000.0", &format!("length_m = {in_m:?}"), 1)
        .replacen("in = 900.0", &format!("in = {flow:?}"), 1)
        .replacen(
            "initial_phase = 0",
            &format!("initial_phase = {initial_phase}"),
            1,
        )
        .replacen(
            "max_green_s = 100.0",
            &format!("max_green_s = {max_green_s:?}"),
            1,
        );
    Scenario::from_toml_str(&text, "single-approach").unwrap_or_else(|e| panic!("{e}"))
}
