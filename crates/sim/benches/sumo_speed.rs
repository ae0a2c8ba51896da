//! SUMO backend benchmark and controller comparison (feature `sumo`; needs SUMO_HOME).
//!
//! For each fixture network (`crates/sim/fixtures/sumo`), runs:
//! * `sumo -c <fixture>.sumocfg` alone (the baseline: no TraCI, no greenwave),
//! * greenwave's backend in static-program mode (SUMO's own program, greenwave stepping
//!   every decision interval and reading the detectors: the pure TraCI overhead),
//! * greenwave's backend with the max-pressure and actuated controllers (the sequencer
//!   driving SUMO's signals),
//! * `sumo -c` alone again, replaying max-pressure's signal states as a static program
//!   (`SumoEnv::write_replay_programs`): the same traffic as the max-pressure run, so the
//!   two times compare the backend with SUMO alone doing exactly the same simulation,
//!
//! and prints one JSON document: each run's episode metrics, simulated seconds per wall
//! second (median and best of `--repeat` runs; SUMO's start-up and shut-down included
//! everywhere), CPU seconds per simulated hour (greenwave + SUMO, Linux `/proc`), and the
//! backend's overhead over SUMO alone on the same traffic (wall: best against best; CPU).
//!
//! ```text
//! SUMO_HOME=... cargo bench -p greenwave-sim --features sumo --bench sumo_speed -- \
//!     [--seconds 1800] [--seed 1] [--repeat 3] [--only single|grid2x2]
//! ```

use std::path::{Path, PathBuf};
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

/// CPU seconds used so far by this process and its waited-for children (SUMO), from
/// `/proc/self/stat` (Linux; clock ticks of 1/100 s). CPU time, unlike wall time, hardly
/// moves when other work shares the machine; NaN where `/proc` is missing.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    // Fields after the command name: state is field 3; utime..cstime are fields 14..17.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return f64::NAN;
    };
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|x| x.parse().ok())
        .collect();
    if f.len() == 4 {
        f.iter().sum::<f64>() / 100.0
    } else {
        f64::NAN
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `once` `repeat` times; reports the last run's metrics, the wall-clock speed of the
/// median and of the fastest run (the least disturbed by other work on the box), and the
/// CPU seconds (greenwave + SUMO) per simulated hour, averaged over the runs.
fn run(
    what: &str,
    repeat: usize,
    seconds: f64,
    mut once: impl FnMut() -> Result<EpisodeMetrics, String>,
) -> Result<Value, String> {
    let mut speeds = Vec::new();
    let mut last = EpisodeMetrics::default();
    let cpu0 = cpu_seconds();
    for _ in 0..repeat {
        let m = once().map_err(|e| format!("{what}: {e}"))?;
        speeds.push(seconds / m.wall_seconds);
        last = m;
    }
    let cpu_per_sim_hour = (cpu_seconds() - cpu0) / repeat as f64 * 3600.0 / seconds;
    let best = speeds.iter().copied().fold(0.0, f64::max);
    let med = median(speeds);
    eprintln!(
        "  {what:<14} delay {:5.1} s  throughput {:5}  backlog {:3}  sim-s/wall-s median {:6.0} \
         best {:6.0}  CPU s per sim-hour {:5.3}",
        last.mean_delay_s, last.throughput_veh, last.backlog_veh, med, best, cpu_per_sim_hour
    );
    Ok(json!({
        "metrics": last,
        "sim_s_per_wall_s_median": med,
        "sim_s_per_wall_s_best": best,
        "cpu_s_per_sim_hour": cpu_per_sim_hour,
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
        let fixture = Fixture {
            args: &args,
            sumo: &sumo,
            dir: &dir,
            name,
        };
        report.push(fixture.bench(&mut version)?);
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

/// One fixture network (`<dir>/<name>.net.xml`, `.rou.xml`, `.sumocfg`) under the
/// benchmark's settings.
struct Fixture<'a> {
    args: &'a Args,
    sumo: &'a Path,
    dir: &'a Path,
    name: &'a str,
}

impl Fixture<'_> {
    /// Every run on this network, and its part of the report; `version` gets SUMO's.
    fn bench(&self, version: &mut String) -> Result<Value, String> {
        let (args, name) = (self.args, self.name);
        eprintln!("{name}: {} s, seed {}", args.seconds, args.seed);
        let mut cfg = SumoConfig::new(
            self.dir.join(format!("{name}.net.xml")),
            self.dir.join(format!("{name}.rou.xml")),
        );
        cfg.seconds = args.seconds;
        cfg.seed = args.seed;
        let bare = run("sumo -c alone", args.repeat, args.seconds, || {
            self.sumo_alone(None)
        })?;
        let static_program = run("static program", args.repeat, args.seconds, || {
            let t = Instant::now();
            let mut env = SumoEnv::new(cfg.clone()).map_err(|e| e.to_string())?;
            *version = env.sumo_version().unwrap_or_default().to_string();
            let mut m = env.run_static_program().map_err(|e| e.to_string())?;
            m.wall_seconds = t.elapsed().as_secs_f64();
            Ok(m)
        })?;
        // The signal states of each controlled run, as a program `sumo -c` can replay.
        let replay = std::env::temp_dir().join(format!(
            "greenwave-sumo-bench-{}-{name}.add.xml",
            std::process::id()
        ));
        let controlled = |what: &str, make: fn() -> Box<dyn Controller>| {
            run(what, args.repeat, args.seconds, || {
                let t = Instant::now();
                let mut env = SumoEnv::new(cfg.clone()).map_err(|e| e.to_string())?;
                let mut ctl = make();
                let episode = env.episode();
                let mut m = run_episode(&mut env, ctl.as_mut(), args.seed, episode)
                    .map_err(|e| e.to_string())?;
                m.wall_seconds = t.elapsed().as_secs_f64();
                env.write_replay_programs(&replay)
                    .map_err(|e| e.to_string())?;
                Ok(m)
            })
        };
        let max_pressure = controlled("max-pressure", || Box::new(MaxPressure::default()))?;
        // SUMO alone on exactly max-pressure's traffic: its signal states replayed.
        let bare_replay = run("sumo -c replay", args.repeat, args.seconds, || {
            self.sumo_alone(Some(&replay))
        })?;
        let actuated = controlled("actuated", || Box::new(Actuated::default()))?;
        let _ = std::fs::remove_file(&replay);
        Ok(self.report(Runs {
            bare,
            bare_replay,
            static_program,
            max_pressure,
            actuated,
        }))
    }

    /// `sumo -c` alone, optionally with extra additional files (a replayed program).
    fn sumo_alone(&self, additional: Option<&PathBuf>) -> Result<EpisodeMetrics, String> {
        let args = self.args;
        let t = Instant::now();
        let mut cmd = Command::new(self.sumo);
        cmd.arg("-c")
            .arg(self.dir.join(format!("{}.sumocfg", self.name)))
            .args(["--end", &args.seconds.to_string()])
            .args(["--seed", &args.seed.to_string()])
            .stdout(Stdio::null());
        if let Some(a) = additional {
            // The replayed program wraps after the episode without a yellow: SUMO warns.
            cmd.arg("--additional-files").arg(a).arg("--no-warnings");
        }
        let status = cmd.status().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("sumo exited with {status}"));
        }
        Ok(EpisodeMetrics {
            sim_seconds: args.seconds,
            wall_seconds: t.elapsed().as_secs_f64(),
            ..EpisodeMetrics::default()
        })
    }

    /// The network's part of the report: every run, and the backend's overheads.
    fn report(&self, r: Runs) -> Value {
        // Extra wall time per simulated second over SUMO alone, best run against best run.
        let speed = |v: &Value| v["sim_s_per_wall_s_best"].as_f64().unwrap_or(f64::NAN);
        let overhead = |base: &Value, v: &Value| speed(base) / speed(v) - 1.0;
        let cpu = |v: &Value| v["cpu_s_per_sim_hour"].as_f64().unwrap_or(f64::NAN);
        let cpu_overhead = |base: &Value, v: &Value| cpu(v) / cpu(base) - 1.0;
        json!({
            "network": self.name,
            "seconds": self.args.seconds,
            "seed": self.args.seed,
            "sumo_alone": r.bare,
            "sumo_alone_replaying_max_pressure": r.bare_replay,
            "static_program": r.static_program,
            "max_pressure": r.max_pressure,
            "actuated": r.actuated,
            // Same traffic on both sides: the static program against SUMO alone, and
            // max-pressure against SUMO alone replaying max-pressure's signal states.
            "overhead_vs_sumo_alone": {
                "static_program": overhead(&r.bare, &r.static_program),
                "max_pressure": overhead(&r.bare_replay, &r.max_pressure),
            },
            "cpu_overhead_vs_sumo_alone": {
                "static_program": cpu_overhead(&r.bare, &r.static_program),
                "max_pressure": cpu_overhead(&r.bare_replay, &r.max_pressure),
            },
        })
    }
}

/// The results of [`run`] for each kind of run on one network.
struct Runs {
    /// `sumo -c` alone.
    bare: Value,
    /// `sumo -c` alone replaying max-pressure's signal states.
    bare_replay: Value,
    static_program: Value,
    max_pressure: Value,
    actuated: Value,
}
