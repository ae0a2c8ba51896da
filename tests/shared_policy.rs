//! One policy for junctions of different layouts, end to end: train the shared lane–phase
//! network on an embedded-sim arterial whose two junctions differ (a four-arm junction with
//! 10 lanes and 4 phases, a T-junction with 5 lanes and 3 phases), export one ONNX + blob +
//! manifest per signal, check each against the shared network (tract, ONNX Runtime where
//! installed, the firmware blob), sign each into a bundle, and run each in the controller
//! on its own junction, then both together in one controller on the whole arterial (each
//! signal on its own bundle); a bundle for one junction is refused on the other. Then zero-shot:
//! the same weights compiled for `single-4way`, a junction never trained on, run there.

use std::path::{Path, PathBuf};

use greenwave_core::mlp::MlpBlob;
use greenwave_core::Millis;
use greenwave_e2e::{ort_library, scratch};
use greenwave_finetune::sim;
use greenwave_learn::manifest::plan_hash_hex;
use greenwave_learn::{Incidence, SharedWeights};
use greenwave_runtime::bundle::{self, verify_and_load};
use greenwave_runtime::bundle_set::BundleSet;
use greenwave_runtime::controller::{
    Controller, ControllerConfig, DetectorSource, Fallback, FallbackKind, Policy, SimField,
};
use greenwave_runtime::inference::{load_backend, BackendKind, Explorer, PerSignalBackend};
use greenwave_sim::{EmbeddedEnv, Env, Scenario};
use greenwave_tools::export_cmd::{export_signals, SignalExport};
use greenwave_tools::train::checkpoint::{load_run_policy, RunPolicy};
use greenwave_tools::train::policy::PolicyKind;
use greenwave_tools::train::{train, Algo, TrainConfig};
use rand::{Rng, SeedableRng};

fn scenario_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tools/tests/scenarios/{name}.toml"))
}

fn toy_training(scenario: &Path) -> TrainConfig {
    let mut c = TrainConfig::new(scenario.to_str().unwrap(), Algo::Ppo, 3000, 5);
    c.policy = Some(PolicyKind::Shared);
    c.n_envs = 2;
    c.rollout_steps = 60;
    c.hidden = vec![16, 16];
    c.episode_s = Some(600);
    c.ppo.minibatch = 120;
    c.command = "e2e shared-policy test".into();
    c
}

/// The exported model's outputs on random observations equal the shared network's (tract,
/// the plain matvec, ONNX Runtime where installed, and the firmware blob), to 1e-5.
fn check_against_shared(e: &SignalExport, shared: &SharedWeights, inc: &Incidence) {
    let onnx = std::fs::read(&e.files.onnx).unwrap();
    let layout = inc.layout();
    let mut backends = vec![
        load_backend(BackendKind::Matvec, &onnx, layout, None).unwrap(),
        load_backend(BackendKind::Tract, &onnx, layout, None).unwrap(),
    ];
    if let Some(lib) = &ort_library() {
        backends.push(load_backend(BackendKind::Ort, &onnx, layout, Some(lib)).unwrap());
    }
    let blob_bytes = std::fs::read(&e.files.blob).unwrap();
    let blob = MlpBlob::parse(&blob_bytes).unwrap();
    let mut scratch = vec![0.0f32; 2 * blob.max_width()];
    let (l, p) = (inc.n_lanes(), inc.n_phases());
    let mut rng = rand_pcg::Pcg64::seed_from_u64(11);
    let mut worst = 0.0f32;
    for _ in 0..30 {
        let mut obs = vec![0.0f32; layout.dim()];
        for k in 0..l {
            obs[k] = rng.random_range(0.0..1.2);
            obs[l + k] = rng.random_range(0.0..=obs[k]);
        }
        obs[2 * l + rng.random_range(0..p)] = 1.0;
        obs[2 * l + p + 1] = 1.0;
        obs[2 * l + p + 2] = rng.random_range(0.0..1.0);
        let (want, v_want) = shared.forward(inc, &obs);
        for b in &mut backends {
            let mut logits = vec![0.0; p];
            let v = b.infer(&obs, &mut logits).unwrap();
            worst = worst.max((v - v_want).abs());
            for (x, y) in logits.iter().zip(&want) {
                worst = worst.max((x - y).abs());
            }
        }
        let mut logits = vec![0.0; p];
        blob.forward(&obs, &mut scratch, &mut logits).unwrap();
        for (x, y) in logits.iter().zip(&want) {
            worst = worst.max((x - y).abs());
        }
    }
    eprintln!(
        "signal {}: exported policy vs shared network, max |difference| {worst:.2e}",
        e.signal_id
    );
    assert!(worst <= 1e-5, "signal {}: {worst}", e.signal_id);
}

/// Signs `e` into a bundle, verifies it for `field`'s signal and runs the controller there.
fn sign_and_run(e: &SignalExport, key: &Path, trusted: &[bundle::VerifyingKey], field: &Scenario) {
    let specs = SimField::new(EmbeddedEnv::from_scenario(field, 0)).signal_specs();
    assert_eq!(specs.len(), 1, "a controller runs one junction");
    let dir = e.files.onnx.with_extension("bundle");
    greenwave_tools::bundle_cmd::bundle(&e.files.onnx, key, &dir).unwrap();
    let verified = verify_and_load(&dir, trusted, &specs[0].plan, specs[0].layout).unwrap();
    assert_eq!(verified.manifest.plan_hash, plan_hash_hex(&specs[0].plan));
    let m = sim::run_controller(
        field,
        &verified.model,
        verified.manifest.policy_version,
        3,
        600,
        0.0,
        None,
    )
    .unwrap();
    eprintln!(
        "signal {} in the controller on {}: delay {:.1} s, throughput {}",
        e.signal_id,
        field.name(),
        m.mean_delay_s,
        m.throughput_veh
    );
    assert!(m.throughput_veh > 0, "{m:?}");
}

/// Runs one controller on the whole of `field` (embedded simulator, seed 3, 600 s), each
/// signal on the signed bundle in `dirs` that `bundle_set` gives it (the bundles are
/// given in reverse order; each names its signal).
fn run_whole_field(dirs: &[PathBuf], trusted: &[bundle::VerifyingKey], field: &Scenario) {
    let field = field.with_episode(Millis::from_secs(600)).unwrap();
    let mut sim = SimField::new(EmbeddedEnv::from_scenario(&field, 3));
    let specs = sim.signal_specs();
    assert_eq!(specs.len(), dirs.len());
    let verified = dirs
        .iter()
        .rev()
        .map(|d| bundle::verify(d, trusted).unwrap())
        .collect();
    let set = BundleSet::assign(verified, &specs).unwrap();
    for (i, s) in specs.iter().enumerate() {
        assert_eq!(set.for_signal(i).unwrap().dir, dirs[i], "signal {}", s.id);
    }
    let backends = set
        .bundles()
        .iter()
        .enumerate()
        .map(|(k, b)| {
            let layout = specs[set.signals_of(k)[0]].layout;
            load_backend(BackendKind::Tract, &b.model, layout, None).unwrap()
        })
        .collect();
    let version = set.bundles()[0].manifest.policy_version;
    let (_, of_signal) = set.into_parts();
    let policy = Policy {
        backend: Box::new(PerSignalBackend::new(backends, of_signal).unwrap()),
        version,
        explorer: Explorer::greedy(),
    };
    let fallback = Fallback::for_scenario(&field, FallbackKind::FixedTime);
    let interval = sim.decision_interval();
    let mut c = Controller::new(
        specs,
        Ok(policy),
        fallback,
        ControllerConfig::for_simulated_time(interval),
        None,
    )
    .unwrap();
    c.run(&mut sim, 600.0, |_| {}).unwrap();
    let m = sim.metrics().unwrap();
    let stats = c.stats();
    eprintln!(
        "both signals in one controller on {}: delay {:.1} s, throughput {}, {} policy decisions, {} fallback",
        field.name(),
        m.mean_delay_s,
        m.throughput_veh,
        stats.policy_decisions,
        stats.fallback_decisions
    );
    assert!(m.throughput_veh > 0, "{m:?}");
    assert_eq!(stats.fallback_decisions, 0, "{stats:?}");
    assert!(stats.policy_decisions > 0, "{stats:?}");
}

#[test]
fn shared_policy_trains_on_mixed_layouts_and_runs_per_signal() {
    let dir = scratch("shared");
    let mixed = scenario_file("arterial-mixed");
    let scenario = greenwave_sim::load(mixed.to_str().unwrap()).unwrap();
    let env = EmbeddedEnv::from_scenario(&scenario, 0);
    assert_ne!(
        env.signals()[0].layout,
        env.signals()[1].layout,
        "mixed layouts"
    );

    let run = dir.join("run");
    let summary = train(&toy_training(&mixed), &run, false, false).unwrap();
    assert!(summary.env_steps >= 3000, "{summary:?}");
    let (RunPolicy::Shared(shared), _, _) = load_run_policy(&run, Default::default()).unwrap()
    else {
        panic!("the run holds a shared policy")
    };

    let exported = export_signals(&run, &dir.join("export/policy.onnx"), None).unwrap();
    let ids: Vec<&str> = exported.iter().map(|e| e.signal_id.as_str()).collect();
    assert_eq!(ids, ["J1", "J2"]);
    let (site, _) = greenwave_tools::bundle_cmd::keygen(&dir.join("keys/site"), false).unwrap();
    let trusted = [bundle::load_public_key(&site.public).unwrap()];
    let fields: Vec<Scenario> = ["arterial-mixed-J1", "arterial-mixed-J2"]
        .iter()
        .map(|n| greenwave_sim::load(scenario_file(n).to_str().unwrap()).unwrap())
        .collect();
    for (k, e) in exported.iter().enumerate() {
        assert!(e
            .files
            .onnx
            .ends_with(format!("policy.{}.onnx", e.signal_id)));
        let spec = &env.signals()[k];
        let manifest =
            greenwave_learn::onnx::read_manifest(&std::fs::read(&e.files.onnx).unwrap()).unwrap();
        assert_eq!(manifest.plan_hash, plan_hash_hex(&spec.plan));
        assert_eq!(manifest.obs_layout, spec.layout);
        let inc = Incidence::new(&spec.incidence).unwrap();
        check_against_shared(e, &shared, &inc);
        sign_and_run(e, &site.secret, &trusted, &fields[k]);
    }

    // One controller on the whole arterial, each signal on its own signed bundle.
    let bundles: Vec<PathBuf> = exported
        .iter()
        .map(|e| e.files.onnx.with_extension("bundle"))
        .collect();
    run_whole_field(&bundles, &trusted, &scenario);

    // `eval` runs the per-signal exports together, each on its own junction.
    let out = dir.join("export/policy.onnx");
    let rows = greenwave_tools::eval_cmd::compare(&out, &scenario, &[1000], Millis::from_secs(600))
        .unwrap();
    assert_eq!(rows[0].controller, "policy");
    assert!(rows[0].metrics.throughput_veh > 0, "{:?}", rows[0]);
    let missing = greenwave_tools::eval_cmd::compare(
        &dir.join("none.onnx"),
        &scenario,
        &[1000],
        Millis::from_secs(60),
    )
    .unwrap_err();
    assert!(
        format!("{missing:#}").contains("none.J1.onnx"),
        "{missing:#}"
    );

    // Each bundle binds its own junction's plan: J1's is refused on J2.
    let j2 = SimField::new(EmbeddedEnv::from_scenario(&fields[1], 0)).signal_specs();
    let refused = verify_and_load(
        &exported[0].files.onnx.with_extension("bundle"),
        &trusted,
        &j2[0].plan,
        j2[0].layout,
    )
    .unwrap_err();
    eprintln!("J1's bundle on J2: {refused}");

    // Zero-shot: compiled for a junction the policy never saw.
    let zs = export_signals(
        &run,
        &dir.join("zero-shot/policy.onnx"),
        Some("single-4way"),
    )
    .unwrap();
    assert_eq!(zs.len(), 1);
    let s4 = greenwave_sim::load("single-4way").unwrap();
    let s4_env = EmbeddedEnv::from_scenario(&s4, 0);
    let spec = &s4_env.signals()[0];
    check_against_shared(&zs[0], &shared, &Incidence::new(&spec.incidence).unwrap());
    sign_and_run(&zs[0], &site.secret, &trusted, &s4);

    let _ = std::fs::remove_dir_all(&dir);
}
