use super::*;

const EXAMPLE: &str = include_str!("../../scenarios/single-4way.toml");

/// A one-signal scenario with a single approach, for error tests: `patch` replaces
/// `from` by `to` in the text.
fn small(patch: Option<(&str, &str)>) -> Result<Scenario, ScenarioError> {
    let mut text = r#"
name = "small"

[[links]]
id = "in"
length_m = 100.0
speed_limit_kmh = 50.0
lanes = 2
lane_turns = ["L", "T"]
turn_ratios = { left = 0.2, through = 0.8 }

[[links]]
id = "out_s"
length_m = 100.0
speed_limit_kmh = 50.0
lanes = 1

[[links]]
id = "out_e"
length_m = 100.0
speed_limit_kmh = 50.0
lanes = 1

[[links]]
id = "x_in"
length_m = 100.0
speed_limit_kmh = 50.0
lanes = 1
lane_turns = ["T"]
turn_ratios = { through = 1.0 }

[[links]]
id = "x_out"
length_m = 100.0
speed_limit_kmh = 50.0
lanes = 1

[[signals]]
id = "J"
arms.north = { in = "in" }
arms.south = { out = "out_s" }
arms.east = { in = "x_in", out = "out_e" }
arms.west = { out = "x_out" }
phases = [ { movements = ["NT", "NL"] }, { movements = ["ET"] } ]

[[demand]]
name = "base"
flows_veh_per_hour = { in = 300.0 }
"#
    .to_string();
    if let Some((from, to)) = patch {
        assert!(text.contains(from), "patch target `{from}` missing");
        text = text.replacen(from, to, 1);
    }
    Scenario::from_toml_str(&text, "small.toml")
}

fn error_of(patch: (&str, &str)) -> String {
    match small(Some(patch)) {
        Ok(_) => panic!("patch {patch:?} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn builtins_load_and_have_the_promised_shape() {
    for name in BUILTIN_NAMES {
        let s = load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.name(), name);
        assert_eq!(s.decision_interval(), Millis::from_secs(5));
        assert_eq!(s.episode(), Millis::from_secs(3600));
    }
    assert_eq!(load("single-4way").unwrap().signal_ids(), ["center"]);
    assert_eq!(load("arterial-3").unwrap().signal_ids().len(), 3);
    let grid = load("grid-4x4").unwrap();
    assert_eq!(grid.signal_ids().len(), 16);
    for plan in grid.plans() {
        assert_eq!(plan.n_phases(), 4);
    }
    assert_eq!(grid.network().entry_links.len(), 16);
}

#[test]
fn example_file_is_the_builtin() {
    let file = Scenario::from_toml_str(EXAMPLE, "single-4way.toml").unwrap();
    let builtin = load("single-4way").unwrap();
    assert_eq!(file.network(), builtin.network());
    assert_eq!(file.demands, builtin.demands);
    assert_eq!(file.reward_kind(), builtin.reward_kind());
    assert_eq!(file.name(), builtin.name());
    assert_eq!(file.description(), builtin.description());
}

#[test]
fn toml_round_trip_keeps_the_scenario() {
    for name in BUILTIN_NAMES {
        let s = load(name).unwrap();
        let again = Scenario::from_toml_str(&s.to_toml_string(), name).unwrap();
        assert_eq!(again.network(), s.network(), "{name}");
        assert_eq!(again.demands, s.demands, "{name}");
    }
}

#[test]
fn load_reads_files_and_names_unknown_scenarios() {
    let dir = std::env::temp_dir().join(format!("greenwave-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mine.toml");
    std::fs::write(&path, EXAMPLE).unwrap();
    assert_eq!(load(path.to_str().unwrap()).unwrap().name(), "single-4way");
    std::fs::remove_dir_all(&dir).ok();
    let err = load("no-such-scenario").unwrap_err().to_string();
    assert!(
        err.contains("no-such-scenario") && err.contains("grid-4x4"),
        "{err}"
    );
}

#[test]
fn shifted_demand_turns_the_heavy_direction() {
    let base = load("single-4way").unwrap();
    assert_eq!(base.demand().name, "base");
    assert_eq!(base.demand_names(), ["base", "shifted"]);
    let shifted = base.with_demand("shifted").unwrap();
    let flow_of = |s: &Scenario, id: &str| {
        let link = s.network().links.iter().position(|l| l.id == id).unwrap() as u32;
        s.demand()
            .flows_veh_per_hour
            .iter()
            .find(|f| f.0 == link)
            .unwrap()
            .1
    };
    assert_eq!(flow_of(&base, "n_in"), 1000.0);
    assert_eq!(flow_of(&shifted, "n_in"), 550.0);
    assert_eq!(flow_of(&shifted, "e_in"), 1000.0);
    let err = base.with_demand("evening").unwrap_err().to_string();
    assert!(
        err.contains("evening") && err.contains("base, shifted"),
        "{err}"
    );
    // The TOML of the variant names it as the default demand.
    let again = Scenario::from_toml_str(&shifted.to_toml_string(), "x").unwrap();
    assert_eq!(again.demand().name, "shifted");
}

/// Episode and interval set together, in whichever order keeps the pair valid.
#[test]
fn episode_and_interval_are_set_as_a_pair() {
    let s = load("single-4way").unwrap();
    let secs = Millis::from_secs;
    let short = s
        .with_episode_and_interval(Some(secs(4)), Some(secs(2)))
        .unwrap();
    assert_eq!(
        (short.episode(), short.decision_interval()),
        (secs(4), secs(2))
    );
    let long = s
        .with_episode_and_interval(Some(secs(8000)), Some(secs(4000)))
        .unwrap();
    assert_eq!(long.decision_interval(), secs(4000));
    assert!(s
        .with_episode_and_interval(Some(secs(4)), Some(secs(6)))
        .is_err());
    assert_eq!(
        s.with_episode_and_interval(None, None).unwrap().episode(),
        s.episode()
    );
}

#[test]
fn settings_can_be_changed_within_range() {
    let s = load("single-4way").unwrap();
    let secs = Millis::from_secs;
    assert_eq!(s.with_episode(secs(600)).unwrap().episode(), secs(600));
    assert!(s.with_episode(secs(2)).is_err());
    assert!(s.with_episode(Millis(600_500)).is_err());
    assert_eq!(
        s.with_decision_interval(secs(1))
            .unwrap()
            .decision_interval(),
        secs(1)
    );
    assert!(s.with_decision_interval(Millis::ZERO).is_err());
    assert!(s.with_decision_interval(Millis(1500)).is_err());
    assert_eq!(
        s.with_reward(RewardKind::Queue).reward_kind(),
        RewardKind::Queue
    );
    let double = s.with_demand_scale(2.0).unwrap();
    assert_eq!(
        double.demand().flows_veh_per_hour[0].1,
        2.0 * s.demand().flows_veh_per_hour[0].1
    );
    assert!(s.with_demand_scale(f64::NAN).is_err());
}

#[test]
fn the_small_scenario_is_valid() {
    let s = small(None).unwrap();
    let plan = s.plans()[0];
    // Movements sorted by arm then turn: NL, NT, ET.
    assert_eq!(plan.movements().len(), 3);
    assert_eq!(s.network().signals[0].in_lanes.len(), 3);
}

#[test]
fn syntax_errors_name_the_line() {
    let err = error_of(("lanes = 2", "lanes = = 2"));
    assert!(err.starts_with("small.toml: "), "{err}");
    assert!(err.contains("line 8"), "{err}");
}

#[test]
fn type_and_unknown_key_errors_name_line_and_key() {
    let err = error_of(("length_m = 100.0\nspeed", "length_m = \"long\"\nspeed"));
    assert!(err.contains("line 6") && err.contains("length_m"), "{err}");
    let err = error_of(("lanes = 2", "lanes = 2\nwidth_m = 3.5"));
    assert!(
        err.contains("line 9") && err.contains("width_m") && err.contains("unknown field"),
        "{err}"
    );
}

#[test]
fn semantic_errors_name_line_and_field() {
    let err = error_of((
        r#"arms.south = { out = "out_s" }"#,
        r#"arms.south = { out = "nowhere" }"#,
    ));
    assert_eq!(
        err,
        "small.toml:38: signals[0] (`J`).arms.south.out: no link `nowhere`"
    );
    let err = error_of((r#"lane_turns = ["L", "T"]"#, r#"lane_turns = ["L"]"#));
    assert_eq!(
        err,
        "small.toml:4: links[0] (`in`).lane_turns: 1 entries for 2 lanes"
    );
    let err = error_of((r#"lane_turns = ["L", "T"]"#, r#"lane_turns = ["L", "X"]"#));
    assert!(
        err.contains("links[0] (`in`).lane_turns[1]") && err.contains("`X` is not a turn"),
        "{err}"
    );
}

#[test]
fn plan_errors_name_the_movements() {
    let err = error_of((
        r#"{ movements = ["ET"] }"#,
        r#"{ movements = ["ET", "NT"] }"#,
    ));
    assert!(
        err.contains("signals[0] (`J`).phases") && err.contains("movements NT and ET conflict"),
        "{err}"
    );
    let err = error_of((r#"{ movements = ["ET"] }"#, r#"{ movements = ["EX"] }"#));
    assert!(err.contains("phases[1].movements[0]"), "{err}");
    let err = error_of((
        r#"{ movements = ["ET"] }"#,
        r#"{ movements = ["ET"], yellow_s = 1.0 }"#,
    ));
    assert!(err.contains("yellow 1.000 s is outside 3-6 s"), "{err}");
}

#[test]
fn turns_must_have_lanes_and_exits() {
    // A share for a turn no lane serves.
    let err = error_of((
        "{ left = 0.2, through = 0.8 }",
        "{ left = 0.2, through = 0.7, right = 0.1 }",
    ));
    assert!(
        err.contains("turn_ratios.right") && err.contains("NR"),
        "{err}"
    );
    // A lane serving a movement that leads to an arm without an out link.
    let err = error_of((r#"lane_turns = ["T"]"#, r#"lane_turns = ["TL"]"#));
    assert!(err.contains("movement EL") || err.contains("EL"), "{err}");
    // Exit links have no turns.
    let err = error_of((
        "id = \"x_out\"\nlength_m = 100.0\nspeed_limit_kmh = 50.0\nlanes = 1",
        "id = \"x_out\"\nlength_m = 100.0\nspeed_limit_kmh = 50.0\nlanes = 1\nlane_turns = [\"T\"]",
    ));
    assert!(
        err.contains("x_out") && err.contains("leaves the network"),
        "{err}"
    );
}

#[test]
fn demand_errors_are_specific() {
    let err = error_of(("{ in = 300.0 }", "{ out_s = 300.0 }"));
    assert!(
        err.contains("flows_veh_per_hour.out_s") && err.contains("entry"),
        "{err}"
    );
    let err = error_of(("{ in = 300.0 }", "{ in = -1.0 }"));
    assert!(err.contains("flows_veh_per_hour.in"), "{err}");
    let err = error_of((
        "name = \"base\"\n",
        "name = \"base\"\nprofile = [[0.0, 1.0], [0.0, 2.0]]\n",
    ));
    assert!(err.contains("profile[1]") && err.contains("later"), "{err}");
    // Unbounded work or memory is refused with the field named.
    let err = error_of((
        "name = \"base\"\n",
        "name = \"base\"\nprofile = [[0.0, 1.0], [60.0, 1e300]]\n",
    ));
    assert!(
        err.contains("profile[1]") && err.contains("outside 0..=10"),
        "{err}"
    );
    // Arrivals so rare (or so far off) that drawing one would never end.
    let err = error_of((
        "name = \"base\"\n",
        "name = \"base\"\nprofile = [[0.0, 0.0], [1e300, 10.0]]\n",
    ));
    assert!(
        err.contains("profile[1]") && err.contains("within"),
        "{err}"
    );
    let err = error_of((
        "name = \"base\"\n",
        "name = \"base\"\nprofile = [[0.0, 10.0], [1.0, 1e-300]]\n",
    ));
    assert!(
        err.contains("profile[1]") && err.contains("give 0"),
        "{err}"
    );
    let err = error_of(("length_m = 100.0\nspeed", "length_m = 1e9\nspeed"));
    assert!(
        err.contains("links[0] (`in`).length_m") && err.contains("50000"),
        "{err}"
    );
    let err = error_of((
        "name = \"small\"",
        "name = \"small\"\ndefault_demand = \"peak\"",
    ));
    assert!(
        err.contains("default_demand") && err.contains("peak"),
        "{err}"
    );
}

#[test]
fn settings_errors_are_specific() {
    let err = error_of((
        "name = \"small\"",
        "name = \"small\"\ndecision_interval_s = 0",
    ));
    assert!(err.contains("decision_interval_s"), "{err}");
    let err = error_of(("name = \"small\"", "name = \"small\"\nepisode_s = 4294968"));
    assert!(
        err.contains("episode_s") && err.contains("4294967"),
        "{err}"
    );
    let err = error_of(("name = \"small\"", "name = \"small\"\nreward = \"speed\""));
    assert!(err.contains("reward") || err.contains("speed"), "{err}");
    let err = error_of((
        "name = \"small\"",
        "name = \"small\"\n[model]\nsaturation_flow_veh_per_hour_per_lane = 0.0",
    ));
    assert!(
        err.contains("model.saturation_flow_veh_per_hour_per_lane"),
        "{err}"
    );
}

#[test]
fn lane_groups_join_shared_lanes() {
    let s = load("single-4way").unwrap();
    let groups = &s.lane_group_demand()[0];
    // Per approach: the left lane alone, the through and through-right lanes together.
    assert_eq!(groups.len(), 8);
    let north: Vec<_> = groups
        .iter()
        .filter(|g| g.movements.iter().all(|m| m.0 < 3))
        .collect();
    assert_eq!(north.len(), 2);
    let mean = s.demand().profile.mean_over(3600.0);
    let left = north.iter().find(|g| g.lanes == 1).unwrap();
    assert!((left.flow_veh_per_hour - 1000.0 * mean * 0.15).abs() < 1e-6);
    let straight = north.iter().find(|g| g.lanes == 2).unwrap();
    assert!((straight.flow_veh_per_hour - 1000.0 * mean * 0.85).abs() < 1e-6);
}

#[test]
fn link_flows_propagate_through_a_grid() {
    let s = load("grid-4x4").unwrap();
    let net = s.network();
    let entry: Vec<(u32, f64)> = s.demand().flows_veh_per_hour.clone();
    let flows = net.link_flows(&entry);
    // Everything that enters leaves: total exit flow equals total entry flow.
    let total_in: f64 = entry.iter().map(|e| e.1).sum();
    let total_out: f64 = net
        .links
        .iter()
        .enumerate()
        .filter(|(_, l)| l.end == LinkEnd::Exit)
        .map(|(i, _)| flows[i])
        .sum();
    assert!(
        (total_in - total_out).abs() < 1e-6 * total_in,
        "{total_in} vs {total_out}"
    );
}

/// A scenario file names its reward as `greenwave train --reward` and the Python
/// environments do: greenwave-core's `RewardKind::name`, every one of them.
#[test]
fn every_reward_is_written_in_a_scenario_file_by_its_core_name() {
    #[derive(serde::Deserialize)]
    struct Reward {
        reward: file::RewardName,
    }
    for kind in RewardKind::ALL {
        let r: Reward = toml::from_str(&format!("reward = \"{}\"", kind.name())).unwrap();
        assert_eq!(compile::reward_kind(r.reward), kind, "{}", kind.name());
    }
}
