//! The whole greenwave chain at toy size, checking the contract at every hand-over:
//! train → export → (tract = ONNX Runtime) → keygen/bundle → the controller verifies and
//! runs with logging → the log reads back → fine-tune → the candidate is signed with the
//! controller's own key, verified and switched in → it loads and runs → rollback.

use std::path::Path;

use greenwave_e2e::{ort_library, scratch};
use greenwave_finetune::{self as finetune, candidate_manifest, sim, FinetuneConfig, PolicyStore};
use greenwave_learn::manifest::plan_hash_hex;
use greenwave_runtime::bundle::{self, verify_and_load};
use greenwave_runtime::controller::SimField;
use greenwave_runtime::inference::{load_backend, BackendKind};
use greenwave_runtime::log::read_all;
use greenwave_sim::EmbeddedEnv;
use greenwave_tools::train::{train, Algo, TrainConfig};
use rand::{Rng, SeedableRng};

/// Seconds the controller runs in the field stretch: 240 decisions of 5 s.
const FIELD_S: u32 = 1200;

fn toy_training() -> TrainConfig {
    let mut c = TrainConfig::new("single-4way", Algo::Ppo, 480, 3);
    c.n_envs = 2;
    c.rollout_steps = 60;
    c.hidden = vec![16, 16];
    c.episode_s = Some(600);
    c.ppo.minibatch = 60;
    c.command = "e2e chain test".into();
    c
}

/// Fine-tune settings for a toy log: few records, short fits. A toy log cannot show an
/// improvement at the gate's level, so the candidate is installed whatever the verdict:
/// this test exercises the install, reload and rollback hand-overs (the gate's own
/// decisions are tested in greenwave-runtime and measured by the gate battery).
fn toy_finetune() -> FinetuneConfig {
    let mut f = FinetuneConfig {
        min_records: 100,
        ..FinetuneConfig::default()
    };
    f.update.q_epochs = 5;
    f.update.epochs = 2;
    f.update.minibatch = 64;
    f.gate.min_states = 10;
    f.gate.min_covered = 1;
    f.gate.q_epochs = 5;
    f.gate.ensemble = 2;
    f.gate.bootstrap = 100;
    f.gate.block_records = 20;
    f.gate.max_kl = f32::MAX;
    f
}

#[test]
fn train_export_sign_run_log_finetune_reload() {
    let dir = scratch("chain");
    let scenario = greenwave_sim::load("single-4way").unwrap();
    let specs = SimField::new(EmbeddedEnv::from_scenario(&scenario, 0)).signal_specs();
    let (plan, layout) = (specs[0].plan.clone(), specs[0].layout);

    // Training → export: the model names this plan and layout.
    let run = dir.join("run");
    train(&toy_training(), &run, false, false).unwrap();
    let onnx_path = dir.join("export/policy.onnx");
    greenwave_tools::export_cmd::export(&run, &onnx_path).unwrap();
    let onnx = std::fs::read(&onnx_path).unwrap();
    let manifest = greenwave_learn::onnx::read_manifest(&onnx).unwrap();
    assert_eq!(manifest.plan_hash, plan_hash_hex(&plan));
    assert_eq!(manifest.obs_layout, layout);
    assert_eq!(manifest.provenance.command, "e2e chain test");

    // Export → inference: tract and ONNX Runtime agree on the same model.
    check_backends_agree(&onnx, layout);

    // Workstation → controller: the bundle verifies against the site key only.
    let (site, _) = greenwave_tools::bundle_cmd::keygen(&dir.join("keys/site"), false).unwrap();
    let (own, _) = bundle::keygen(&dir.join("keys/controller"), false).unwrap();
    let (other, _) = bundle::keygen(&dir.join("keys/other"), false).unwrap();
    let site_pub = bundle::load_public_key(&site.public).unwrap();
    let own_key = bundle::load_signing_key(&own.secret).unwrap();
    let other_pub = bundle::load_public_key(&other.public).unwrap();
    let bundle_dir = dir.join("bundle");
    greenwave_tools::bundle_cmd::bundle(&onnx_path, &site.secret, &bundle_dir).unwrap();
    let verified = verify_and_load(&bundle_dir, &[site_pub], &plan, layout).unwrap();
    assert_eq!(
        verified.model, onnx,
        "the controller runs exactly the exported bytes"
    );
    let refused = verify_and_load(&bundle_dir, &[other_pub], &plan, layout).unwrap_err();
    assert!(refused.to_string().contains("trust check"), "{refused}");
    let store = PolicyStore::open(dir.join("store")).unwrap();
    store.adopt(&bundle_dir, &[site_pub]).unwrap();
    let v1 = verified.manifest.policy_version;

    // Controller → log: a stretch of field operation with bounded exploration; every
    // record reads back, in order, from this policy version.
    let log = dir.join("log");
    let field =
        sim::run_controller(&scenario, &verified.model, v1, 5, FIELD_S, 0.1, Some(&log)).unwrap();
    assert!(field.throughput_veh > 0, "{field:?}");
    let (records, issues) = read_all(&log).unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(records.len(), (FIELD_S / 5) as usize);
    for (k, r) in records.iter().enumerate() {
        let t = &r.transition;
        assert_eq!(t.timestamp_ms, k as u64 * 5000, "record {k} out of order");
        assert_eq!(t.policy_version, v1);
        assert_eq!(t.obs.len(), layout.dim());
        assert!(t.reward.is_finite() && t.log_prob <= 0.0, "{t:?}");
    }

    // Log → fine-tune → a candidate signed with the controller's own key, switched in
    // (installed whatever the gate said: see `toy_finetune`).
    let cfg = toy_finetune();
    let out = finetune::finetune(&verified.model, &log, &cfg, &mut |_| {}).unwrap();
    assert_eq!(out.report.log.records_used, records.len() as u64);
    assert!(!out.report.gate.reason.is_empty());
    let v2 = store.next_version(v1).unwrap();
    assert!(v2 > v1);
    let m = candidate_manifest(&out.parent, v2, &out.report, &cfg, "e2e chain test");
    let switched = store
        .install(&out.weights, &m, &own_key, &[site_pub], "e2e")
        .unwrap();
    assert_eq!((switched.version, switched.from), (v2, Some(v1)));

    // Fine-tune → controller: the new bundle verifies (site key plus the controller's own),
    // has the same graph contract, and runs the controller.
    let trusted = [site_pub, own_key.verifying_key()];
    let tuned = verify_and_load(&store.current_link(), &trusted, &plan, layout).unwrap();
    assert_eq!(tuned.manifest.policy_version, v2);
    assert_eq!(tuned.manifest.provenance.parent_version, Some(v1));
    assert!(verify_and_load(&store.current_link(), &[site_pub], &plan, layout).is_err());
    check_backends_agree(&tuned.model, layout);
    let rerun = sim::run_controller(&scenario, &tuned.model, v2, 6, 600, 0.0, None).unwrap();
    assert!(rerun.throughput_veh > 0, "{rerun:?}");

    // Rollback restores the parent.
    let back = store.rollback(&trusted, "e2e").unwrap();
    assert_eq!(back.version, v1);
    let current = verify_and_load(&store.current_link(), &trusted, &plan, layout).unwrap();
    assert_eq!(current.model, onnx);

    let _ = std::fs::remove_dir_all(Path::new(&dir));
}

/// tract and ONNX Runtime (when installed) give the same logits and value as the plain
/// matvec reference on random observations, to 1e-5.
fn check_backends_agree(onnx: &[u8], layout: greenwave_core::ObsLayout) {
    let ort = ort_library();
    let mut backends = vec![
        load_backend(BackendKind::Matvec, onnx, layout, None).unwrap(),
        load_backend(BackendKind::Tract, onnx, layout, None).unwrap(),
    ];
    if let Some(lib) = &ort {
        backends.push(load_backend(BackendKind::Ort, onnx, layout, Some(lib)).unwrap());
    }
    let mut rng = rand_pcg::Pcg64::seed_from_u64(9);
    let n_actions = layout.n_phases as usize;
    for _ in 0..50 {
        let obs: Vec<f32> = (0..layout.dim())
            .map(|_| rng.random_range(0.0..1.0))
            .collect();
        let mut reference = vec![0.0; n_actions];
        let v_ref = backends[0].infer(&obs, &mut reference).unwrap();
        for b in &mut backends[1..] {
            let mut logits = vec![0.0; n_actions];
            let v = b.infer(&obs, &mut logits).unwrap();
            assert!(
                (v - v_ref).abs() <= 1e-5,
                "{}: value {v} vs {v_ref}",
                b.name()
            );
            for (x, y) in logits.iter().zip(&reference) {
                assert!(
                    (x - y).abs() <= 1e-5,
                    "{}: logits {logits:?} vs {reference:?}",
                    b.name()
                );
            }
        }
    }
}
