//! SUMO backend benchmark and controller comparison (feature `sumo`; needs SUMO_HOME).
//!
//! For each fixture network (`crates/sim/fixtures/sumo`), runs:
//! * `sumo -c <fixture>.sumocfg` alone (the baseline: no TraCI, no greenwave),
//! * greenwave's backend in static-program mode (SUMO's own program, greenwave stepping
//!   every decision interval and reading the detectors: the pure TraCI overhead),
//! * greenwave's backend with the max-pressure and actuated controllers (the sequencer
//!   driving SUMO's signals),
//!
//! and prints one JSON document: each run's episode metrics and simulated seconds per
//! wall second (median and best of `--repeat` runs; SUMO's start-up and shut-down included
//! everywhere), and the backend's overhead over SUMO alone (best against best).
//!
//! ```text
//! SUMO_HOME=... cargo bench -p greenwave-sim --features sumo --bench sumo_speed -- \
//!     [--seconds 1800] [--seed 1] [--repeat 3] [--only single|grid2x2]
//! ```

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use greenwave_sim::controllers::{Actuated, MaxPressure};
use greenwave_sim::sumo::{find_sumo_binary, SumoConfig, SumoEnv};
use greenwave_sim::{run_episode, Controller, EpisodeMetrics};
use serde_json::{json, Value};

struct Args {
    seconds: f64,
    seed: u64,
    repeat: usize,
    only: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        seconds: 1800.0,
        seed: 1,
        repeat: 3,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        // `cargo bench` passes --bench to every bench binary.
        if flag == "--bench" {
            continue;
        }
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--seconds" => a.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--seed" => a.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--repeat" => a.repeat = value()?.parse().map_err(|e| format!("--repeat: {e}"))?,
            "--only" => a.only = Some(value()?),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if a.repeat == 0 {
        return Err("--repeat must be at least 1".into());
    }
    Ok(a)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `once` `repeat` times; reports the last run's metrics and the speed of the median
/// and of the fastest run (the fastest is the least disturbed by other work on the box).
fn run(
    what: &str,
    repeat: usize,
    seconds: f64,
    mut once: impl FnMut() -> Result<EpisodeMetrics, String>,
) -> Result<Value, String> {
    let mut speeds = Vec::new();
    let mut last = EpisodeMetrics::default();
    for _ in 0..repeat {
        let m = once().map_err(|e| format!("{what}: {e}"))?;
        speeds.push(seconds / m.wall_seconds);
        last = m;
    }
    let best = speeds.iter().copied().fold(0.0, f64::max);
    let med = median(speeds);
    eprintln!(
        "  {what:<14} delay {:6.1} s  throughput {:5}  backlog {:3}  sim-s/wall-s median {:6.0} best {:6.0}",
        last.mean_delay_s, last.throughput_veh, last.backlog_veh, med, best
    );
    Ok(json!({
        "metrics": last,
        "sim_s_per_wall_s_median": med,
        "sim_s_per_wall_s_best": best,
    }))
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("sumo_speed: {e}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<(), String> {
    let args = parse_args()?;
    let sumo = find_sumo_binary(None).map_err(|e| e.to_string())?;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/sumo");
    let mut report = Vec::new();
    let mut version = String::new();
    for name in ["single", "grid2x2"] {
        if args.only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        eprintln!("{name}: {} s, seed {}", args.seconds, args.seed);
        let mut cfg = SumoConfig::new(
            dir.join(format!("{name}.net.xml")),
            dir.join(format!("{name}.rou.xml")),
        );
        cfg.seconds = args.seconds;
        cfg.seed = args.seed;

        let bare = run("sumo -c alone", args.repeat, args.seconds, || {
            let t = Instant::now();
            let status = Command::new(&sumo)
                .arg("-c")
                .arg(dir.join(format!("{name}.sumocfg")))
                .args(["--end", &args.seconds.to_string()])
                .args(["--seed", &args.seed.to_string()])
                .stdout(Stdio::null())
                .status()
                .map_err(|e| e.to_string())?;
            if !status.success() {
                return Err(format!("sumo exited with {status}"));
            }
            Ok(EpisodeMetrics {
                sim_seconds: args.seconds,
                wall_seconds: t.elapsed().as_secs_f64(),
                ..EpisodeMetrics::default()
            })
        })?;
        let static_program = run("static program", args.repeat, args.seconds, || {
            let t = Instant::now();
            let mut env = SumoEnv::new(cfg.clone()).map_err(|e| e.to_string())?;
            version = env.sumo_version().unwrap_or_default().to_string();
            let mut m = env.run_static_program().map_err(|e| e.to_string())?;
            m.wall_seconds = t.elapsed().as_secs_f64();
            Ok(m)
        })?;
        let controlled = |what: &str, make: fn() -> Box<dyn Controller>| {
            run(what, args.repeat, args.seconds, || {
                let t = Instant::now();
                let mut env = SumoEnv::new(cfg.clone()).map_err(|e| e.to_string())?;
                let mut ctl = make();
                let mut m = run_episode(&mut env, ctl.as_mut(), args.seed, args.seconds)
                    .map_err(|e| e.to_string())?;
                m.wall_seconds = t.elapsed().as_secs_f64();
                Ok(m)
            })
        };
        let max_pressure = controlled("max-pressure", || Box::new(MaxPressure))?;
        let actuated = controlled("actuated", || Box::new(Actuated::default()))?;
        // Extra wall time per simulated second over SUMO alone, best run against best run.
        let speed = |v: &Value| v["sim_s_per_wall_s_best"].as_f64().unwrap_or(f64::NAN);
        let overhead = |v: &Value| speed(&bare) / speed(v) - 1.0;
        report.push(json!({
            "network": name,
            "seconds": args.seconds,
            "seed": args.seed,
            "sumo_alone": bare,
            "static_program": static_program,
            "max_pressure": max_pressure,
            "actuated": actuated,
            "overhead_vs_sumo_alone": {
                "static_program": overhead(&static_program),
                "max_pressure": overhead(&max_pressure),
            },
        }));
    }
    let doc = json!({
        "bench": "sumo_speed",
        "sumo": version,
        "repeat": args.repeat,
        "runs": report,
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
    );
    Ok(())
}
