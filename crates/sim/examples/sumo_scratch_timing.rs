#[cfg(feature = "sumo")]
fn main() {
    use greenwave_sim::sumo::*;
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/sumo");
    let name = std::env::args().nth(1).unwrap_or("grid2x2".into());
    for mode in [
        ReadMode::Getters,
        ReadMode::Subscriptions,
        ReadMode::Getters,
    ] {
        let mut cfg = SumoConfig::new(
            dir.join(format!("{name}.net.xml")),
            dir.join(format!("{name}.rou.xml")),
        );
        cfg.seconds = 1800.0;
        cfg.seed = 1;
        cfg.read_mode = mode;
        let mut env = SumoEnv::new(cfg).unwrap();
        let mut c = greenwave_sim::controllers::MaxPressure;
        let m = greenwave_sim::run_episode(&mut env, &mut c, 1, 1800.0).unwrap();
        eprintln!(
            "{mode:?} delay {} thr {} wall {}",
            m.mean_delay_s, m.throughput_veh, m.wall_seconds
        );
    }
}
#[cfg(not(feature = "sumo"))]
fn main() {}
