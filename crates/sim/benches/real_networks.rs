//! The real-network suite as a benchmark: every net of the development set (see
//! `tests/real_nets/mod.rs`) under the net's own static program, actuated and
//! max-pressure control, with every state string audited; prints one Markdown table row
//! per net and controller (means over the seeds).
//!
//! ```sh
//! cargo bench -p greenwave-sim --features sumo --bench real_networks -- \
//!     [--seconds 3600] [--seeds 1,2,3] [--net SUBSTRING] [--controllers static,actuated,max-pressure] \
//!     [--decision-interval-s 5]
//! ```
//!
//! `--decision-interval-s` sets how often actuated and max-pressure control decide (SUMO's
//! default configuration: 5 s); `greenwave eval` also runs them at a policy's own interval.

#[path = "../tests/real_nets/mod.rs"]
mod real_nets;

use real_nets::{dev_set, CONTROLLERS};

struct Args {
    seconds: f64,
    seeds: Vec<u64>,
    net: Option<String>,
    controllers: Vec<String>,
    decision_interval_s: Option<f64>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        seconds: 3600.0,
        seeds: vec![1],
        net: None,
        controllers: CONTROLLERS.iter().map(|s| s.to_string()).collect(),
        decision_interval_s: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--seconds" => a.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--seeds" => {
                a.seeds = value()?
                    .split(',')
                    .map(|s| s.parse().map_err(|e| format!("--seeds: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--net" => a.net = Some(value()?),
            "--controllers" => a.controllers = value()?.split(',').map(str::to_string).collect(),
            "--decision-interval-s" => {
                let s: f64 = value()?
                    .parse()
                    .map_err(|e| format!("--decision-interval-s: {e}"))?;
                if !(s.is_finite() && s > 0.0) {
                    return Err(format!("--decision-interval-s must be positive, not {s}"));
                }
                a.decision_interval_s = Some(s);
            }
            "--bench" => {}
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(a)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let work = std::env::temp_dir().join(format!("greenwave-real-nets-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("temp dir");
    let nets = match dev_set(&work) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "{} s per episode, seeds {:?}, decisions every {} s; delay/wait: mean per vehicle due (s); throughput and never inserted: vehicles per episode",
        args.seconds,
        args.seeds,
        args.decision_interval_s
            .unwrap_or(greenwave_sim::sumo::SumoConfig::new("", "").decision_interval_s)
    );
    println!("\n| net | signals (controlled / on program) | controller | delay (s) | wait (s) | throughput | never inserted | wall (s) |");
    println!("|---|---|---|---:|---:|---:|---:|---:|");
    for net in nets.iter().filter(|n| {
        args.net
            .as_ref()
            .is_none_or(|f| n.name.contains(f.as_str()))
    }) {
        let models = match real_nets::config(net, args.seconds, 1).models() {
            Ok(m) => m,
            Err(e) => {
                println!("| {} | does not load: {e} | | | | | | |", net.name);
                continue;
            }
        };
        for s in &models.on_program {
            eprintln!("{}: {s}", net.name);
        }
        let signals = format!("{} / {}", models.models.len(), models.on_program.len());
        for c in &args.controllers {
            let mut rows = Vec::new();
            for &seed in &args.seeds {
                let mut cfg = real_nets::config(net, args.seconds, seed);
                if let Some(s) = args.decision_interval_s {
                    cfg.decision_interval_s = s;
                }
                match real_nets::run_config_checked(cfg, c, seed) {
                    Ok(m) => rows.push(m),
                    Err(e) => {
                        println!("| {} | {signals} | {c} | failed: {e} | | | | |", net.name);
                        break;
                    }
                }
            }
            if rows.len() != args.seeds.len() {
                continue;
            }
            let mean = |f: &dyn Fn(&greenwave_sim::EpisodeMetrics) -> f64| {
                rows.iter().map(f).sum::<f64>() / rows.len() as f64
            };
            println!(
                "| {} | {signals} | {c} | {:.2} | {:.2} | {:.0} | {:.0} | {:.1} |",
                net.name,
                mean(&|m| m.mean_delay_s),
                mean(&|m| m.mean_wait_s),
                mean(&|m| m.throughput_veh as f64),
                mean(&|m| m.backlog_veh as f64),
                mean(&|m| m.wall_seconds),
            );
        }
    }
    let _ = std::fs::remove_dir_all(&work);
}
