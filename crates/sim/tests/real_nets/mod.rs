//! The development set of real SUMO networks, shared by `tests/real_networks.rs` and
//! `benches/real_networks.rs`:
//!
//! * the signalised nets that SUMO's PyPI wheel ships under `$SUMO_HOME/tools/game/`,
//!   with their own demand (DRT's demand is a taxi fleet, so it gets seeded random trips);
//! * sumo-rl's signalised nets other than RESCO and the single intersections (the
//!   held-out set; `OW` and `simple` have no traffic light), from
//!   the `sumo-rl` wheel installed next to SUMO (`pip install --no-deps sumo-rl==1.4.5`);
//! * three seeded random nets: `netgenerate --rand --tls.guess` and `randomTrips.py`.
//!
//! A net whose files are missing is skipped with a message, unless `CI` is set, where the
//! whole set must be there.

#![allow(dead_code)] // each includer uses part of it

use std::path::{Path, PathBuf};
use std::process::Command;

/// One net of the development set.
#[derive(Clone, Debug)]
pub struct DevNet {
    /// Short name for tables.
    pub name: String,
    /// The network.
    pub net: PathBuf,
    /// Its demand.
    pub routes: Vec<PathBuf>,
    /// Where the demand starts (s).
    pub begin_s: f64,
}

/// `$SUMO_HOME`, if set and present.
pub fn sumo_home() -> Option<PathBuf> {
    std::env::var_os("SUMO_HOME")
        .map(PathBuf::from)
        .filter(|p| p.join("bin").is_dir())
}

fn python() -> String {
    std::env::var("GREENWAVE_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// One of SUMO's `tools/game` nets, `name` its folder.
pub fn game(home: &Path, name: &str, net: &str, routes: &[&str]) -> DevNet {
    let dir = home.join("tools/game").join(name);
    DevNet {
        name: format!("game/{name}"),
        net: dir.join(net),
        routes: routes.iter().map(|r| dir.join(r)).collect(),
        begin_s: 0.0,
    }
}

fn sumo_rl(nets: &Path, dir: &str, net: &str, routes: &str) -> DevNet {
    DevNet {
        name: format!("sumo-rl/{dir}"),
        net: nets.join(dir).join(net),
        routes: vec![nets.join(dir).join(routes)],
        begin_s: 0.0,
    }
}

/// Seeded random trips on `net` into `out` (`randomTrips.py`, 3600 s), starting at the
/// fringe `fringe` times as often as inside (`"max"`: only there).
pub fn random_trips(
    home: &Path,
    net: &Path,
    out: &Path,
    period_s: f64,
    seed: u64,
    fringe: &str,
) -> Result<(), String> {
    let trips = out.with_extension("trips.xml");
    let status = Command::new(python())
        .arg(home.join("tools/randomTrips.py"))
        .args(["-n"])
        .arg(net)
        .args(["-r"])
        .arg(out)
        .args(["-o"])
        .arg(&trips)
        .args(["-b", "0", "-e", "3600", "-p", &period_s.to_string()])
        .args([
            "--seed",
            &seed.to_string(),
            "--validate",
            "--fringe-factor",
            fringe,
        ])
        .env("SUMO_HOME", home)
        .output()
        .map_err(|e| format!("running randomTrips.py: {e}"))?;
    if !status.status.success() || !out.is_file() {
        return Err(format!(
            "randomTrips.py on {} failed: {}",
            net.display(),
            String::from_utf8_lossy(&status.stderr)
        ));
    }
    Ok(())
}

/// Runs SUMO's `netgenerate` with `args`, writing `net`.
fn netgenerate<S: AsRef<std::ffi::OsStr>>(
    home: &Path,
    net: &Path,
    args: &[S],
) -> Result<(), String> {
    let out = Command::new(home.join("bin/netgenerate"))
        .args(args)
        .arg("-o")
        .arg(net)
        .output()
        .map_err(|e| format!("running netgenerate: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "netgenerate failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// A seeded random signalised net with random demand, made in `work`.
pub fn random_net(home: &Path, work: &Path, seed: u64) -> Result<DevNet, String> {
    let net = work.join(format!("rand{seed}.net.xml"));
    let seed_s = seed.to_string();
    netgenerate(
        home,
        &net,
        &[
            "--rand",
            "--rand.iterations",
            "60",
            "--tls.guess",
            "--seed",
            &seed_s,
            "--default.lanenumber",
            "2",
        ],
    )?;
    let routes = work.join(format!("rand{seed}.rou.xml"));
    random_trips(home, &net, &routes, 3.0, seed, "5")?;
    Ok(DevNet {
        name: format!("random/seed{seed}"),
        net,
        routes: vec![routes],
        begin_s: 0.0,
    })
}

/// A single four-arm junction made like a real one: 400 m arms of two lanes that widen
/// to three (a left-turn pocket) over the last 64 m, so the lanes at the stop line are
/// short edges and queues run back past them; four-phase program (protected lefts);
/// seeded through traffic every `period_s` (0.9 s: about 4000 veh/h, near saturation).
pub fn pocket_junction(
    home: &Path,
    work: &Path,
    period_s: f64,
    seed: u64,
) -> Result<DevNet, String> {
    let net = work.join("pocket.net.xml");
    let pockets = ["--turn-lanes", "1", "--turn-lanes.length", "80"];
    let opposites = ["--tls.guess", "--tls.layout", "opposites"];
    netgenerate(home, &net, &junction_args(400, &[&pockets, &opposites]))?;
    let name = format!("random/pocket-junction-{period_s}");
    with_trips(home, work, net, name, period_s, seed)
}

/// A single four-arm junction with SUMO's NEMA controller (`netgenerate
/// --tls.default-type NEMA`: 200 m arms of two lanes, one NEMA phase per approach, rings
/// `0,2,0,4` and `0,6,0,8`, 4 s yellow and 1 s red per phase, not SUMO's defaults), with seeded traffic every
/// `period_s`. Not in the development set: a check that NEMA programs are read as SUMO
/// runs them.
pub fn nema_junction(home: &Path, work: &Path, period_s: f64, seed: u64) -> Result<DevNet, String> {
    let net = work.join("nema.net.xml");
    let nema = ["--tls.guess", "--tls.default-type", "NEMA"];
    let clearance = ["--tls.nema.yellow", "4", "--tls.nema.red", "1"];
    netgenerate(home, &net, &junction_args(200, &[&nema, &clearance]))?;
    with_trips(
        home,
        work,
        net,
        "random/nema-junction".into(),
        period_s,
        seed,
    )
}

/// `netgenerate` arguments of one four-arm junction with `arm_m` arms of two lanes, no
/// U-turns, and `extra`.
fn junction_args(arm_m: u32, extra: &[&[&str]]) -> Vec<String> {
    let mut args: Vec<String> = ["--grid", "--grid.x-number=1", "--grid.y-number=1"]
        .map(String::from)
        .to_vec();
    args.push(format!("--grid.attach-length={arm_m}"));
    args.extend(["-L", "2"].map(String::from));
    args.extend(extra.iter().flat_map(|e| e.iter().map(|a| a.to_string())));
    args.push("--no-turnarounds".into());
    args
}

/// `net` with seeded random trips every `period_s` from its fringe, as a [`DevNet`].
fn with_trips(
    home: &Path,
    work: &Path,
    net: PathBuf,
    name: String,
    period_s: f64,
    seed: u64,
) -> Result<DevNet, String> {
    let stem = net.file_stem().and_then(|s| s.to_str()).unwrap_or("net");
    let stem = stem.trim_end_matches(".net");
    let routes = work.join(format!("{stem}-{seed}.rou.xml"));
    random_trips(home, &net, &routes, period_s, seed, "max")?;
    Ok(DevNet {
        name,
        net,
        routes: vec![routes],
        begin_s: 0.0,
    })
}

/// The development set; random nets and DRT's demand are made in `work`.
pub fn dev_set(work: &Path) -> Result<Vec<DevNet>, String> {
    let home = sumo_home().ok_or("SUMO_HOME is not set (or has no bin/)")?;
    let mut nets = vec![
        game(
            &home,
            "fkk_in",
            "ingolstadt.net.xml.gz",
            &["fkk_in.rou.xml"],
        ),
        game(&home, "bs3d", "bs.net.xml", &["bs3d.rou.xml"]),
        game(&home, "kuehne", "kuehne.net.xml", &["kuehne.rou.xml"]),
        game(&home, "corridor", "corridor.net.xml", &["corridor.rou.xml"]),
        game(&home, "cross", "cross.net.xml", &["cross.rou.xml"]),
        game(&home, "grid6", "grid6.net.xml", &["grid6.rou.xml"]),
        game(&home, "square", "square.net.xml", &["square.rou.xml"]),
        game(&home, "ramp", "ramp.net.xml", &["ramp.rou.xml"]),
    ];
    let drt = home.join("tools/game/DRT/osm.net.xml");
    let drt_routes = work.join("drt.rou.xml");
    random_trips(&home, &drt, &drt_routes, 4.0, 7, "5")?;
    nets.push(DevNet {
        name: "game/DRT".into(),
        net: drt,
        routes: vec![drt_routes],
        begin_s: 0.0,
    });
    let rl = home.join("../sumo_rl/nets");
    if rl.is_dir() {
        nets.extend([
            sumo_rl(&rl, "2x2grid", "2x2.net.xml", "2x2.rou.xml"),
            sumo_rl(
                &rl,
                "3x3grid",
                "3x3Grid2lanes.net.xml",
                "routes14000.rou.xml",
            ),
            sumo_rl(&rl, "4x4-Lucas", "4x4.net.xml", "4x4c1c2c1c2.rou.xml"),
            sumo_rl(&rl, "4x4loop", "4x4loop.net.xml", "4x4loop.rou.xml"),
            sumo_rl(&rl, "Nguyen", "nguyentl.net.xml", "nguyencontext.rou.xml"),
            sumo_rl(&rl, "double", "network.net.xml", "flow.rou.xml"),
        ]);
    } else if std::env::var_os("CI").is_some() {
        return Err(format!(
            "sumo-rl's nets are missing at {} (pip install --no-deps sumo-rl==1.4.5)",
            rl.display()
        ));
    } else {
        eprintln!("skipping sumo-rl's nets: {} not found", rl.display());
    }
    for seed in [1, 2, 3] {
        nets.push(random_net(&home, work, seed)?);
    }
    nets.push(pocket_junction(&home, work, 0.9, 7)?);
    for n in &nets {
        for f in std::iter::once(&n.net).chain(&n.routes) {
            if !f.is_file() {
                return Err(format!("{}: {} is missing", n.name, f.display()));
            }
        }
    }
    Ok(nets)
}

/// The controllers compared on every net.
pub const CONTROLLERS: [&str; 3] = ["static", "actuated", "max-pressure"];

/// The SUMO configuration of `net` for one episode.
pub fn config(net: &DevNet, seconds: f64, seed: u64) -> greenwave_sim::sumo::SumoConfig {
    let mut cfg = greenwave_sim::sumo::SumoConfig::new(&net.net, &net.routes[0]);
    cfg.routes = net.routes.clone();
    cfg.begin_s = net.begin_s;
    cfg.seconds = seconds;
    cfg.seed = seed;
    cfg
}

/// One episode of `controller` on `net`, checked as it runs: every state string sent is
/// audited ([`TlsModel::audit_states`](greenwave_sim::sumo::TlsModel::audit_states)), and
/// every 60 s each light's state as SUMO reports it must equal the last one sent.
pub fn run_checked(
    net: &DevNet,
    controller: &str,
    seconds: f64,
    seed: u64,
) -> Result<greenwave_sim::EpisodeMetrics, String> {
    run_config_checked(config(net, seconds, seed), controller, seed)
}

/// [`run_checked`] on a configuration of one's own.
pub fn run_config_checked(
    cfg: greenwave_sim::sumo::SumoConfig,
    controller: &str,
    seed: u64,
) -> Result<greenwave_sim::EpisodeMetrics, String> {
    use greenwave_core::Millis;
    use greenwave_sim::controllers::{Actuated, MaxPressure};
    use greenwave_sim::sumo::SumoEnv;
    use greenwave_sim::{Controller, Env};
    if controller == "static" {
        return greenwave_sim::sumo::run_static_program(cfg).map_err(|e| e.to_string());
    }
    let mut c: Box<dyn Controller> = match controller {
        "actuated" => Box::new(Actuated::default()),
        "max-pressure" => Box::new(MaxPressure::default()),
        other => return Err(format!("unknown controller {other}")),
    };
    let mut env = SumoEnv::new(cfg).map_err(|e| e.to_string())?;
    env.reset(seed).map_err(|e| e.to_string())?;
    c.reset(&env);
    let mut next_readback = Millis::from_secs(60);
    while env.now() < env.episode() {
        let actions = c.decide(&env);
        let done = env.step(&actions).map_err(|e| e.to_string())?.done;
        if done {
            break;
        }
        if env.now() >= next_readback {
            next_readback += Millis::from_secs(60);
            for i in 0..env.signals().len() {
                let sent = env.state_history(i).last().map(|s| s.1.clone());
                let shown = env.sumo_state(i).map_err(|e| e.to_string())?;
                if sent.as_ref().is_some_and(|s| *s != shown) {
                    return Err(format!(
                        "{}: SUMO shows {shown:?}, greenwave sent {sent:?}",
                        env.models()[i].id
                    ));
                }
            }
        }
    }
    for (i, m) in env.models().iter().enumerate() {
        m.audit_states(env.state_history(i))
            .map_err(|e| e.to_string())?;
    }
    Ok(env.metrics())
}
