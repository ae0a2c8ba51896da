//! The whole fine-tuning loop on the embedded simulator, in the scenario
//! `crates/runtime/scenarios/finetune-shift.toml` (the single-4way junction and plan):
//!
//! 1. train a PPO policy where north–south carries almost all traffic (demand `train`);
//! 2. export it, sign a bundle with the site key, adopt it into the controller's store;
//! 3. deploy it where the heavy direction has flipped to east–west (demand `field`): the
//!    controller runs one simulated day with bounded exploration (ε = 0.1), logging;
//! 4. fine-tune on the log (default, conservative settings) and gate;
//! 5. if the gate accepts: the version is signed with the controller's own key and switched
//!    in, both policies are evaluated greedily on 5 held-out seeds (one hour each), and the
//!    fine-tuned mean delay must be lower. If it refuses (one day of ε = 0.1 exploration
//!    usually covers too few of the changed choices for the 95 % test), the refusal must
//!    name what is missing, and nothing is switched.
//!
//! Release mode: `cargo test -p greenwave-e2e --release --test finetune_shifted_demand
//! -- --nocapture` (about a minute on 2 cores). The same steps as commands are in the
//! runtime crate's README ("Fine-tuning").

use std::path::Path;

use greenwave_e2e::scratch;
use greenwave_finetune::{self as finetune, candidate_manifest, sim, FinetuneConfig, PolicyStore};
use greenwave_runtime::bundle;
use greenwave_tools::train::{train, Algo, TrainConfig};

const TRAIN_STEPS: u64 = 200_000;
const EVAL_SEEDS: [u64; 5] = [1000, 1001, 1002, 1003, 1004];

#[test]
fn a_policy_deployed_under_shifted_demand_improves_after_one_day_of_fine_tuning() {
    if cfg!(debug_assertions) {
        eprintln!("skipped in debug builds (training is ~20× slower): run with --release");
        return;
    }
    std::env::set_var("RAYON_NUM_THREADS", "1");
    let dir = scratch("ft-shift");
    let scenario_file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/runtime/scenarios/finetune-shift.toml");
    let scenario_path = scenario_file.to_str().unwrap();
    let scenario = greenwave_sim::load(scenario_path).unwrap();

    // 1–2. Train for the `train` demand, export, sign, adopt.
    let mut tc = TrainConfig::new(scenario_path, Algo::Ppo, TRAIN_STEPS, 1);
    tc.demand = Some("train".into());
    tc.episode_s = Some(3600);
    tc.command = "finetune_shifted_demand test".into();
    let run = dir.join("run");
    train(&tc, &run, false, false).unwrap();
    let onnx = dir.join("export/policy.onnx");
    greenwave_tools::export_cmd::export(&run, &onnx).unwrap();
    let (site, _) = bundle::keygen(&dir.join("keys/site"), false).unwrap();
    let (own, _) = bundle::keygen(&dir.join("keys/controller"), false).unwrap();
    let site_pub = bundle::load_public_key(&site.public).unwrap();
    let own_key = bundle::load_signing_key(&own.secret).unwrap();
    greenwave_tools::bundle_cmd::bundle(&onnx, &site.secret, &dir.join("bundle")).unwrap();
    let store = PolicyStore::open(dir.join("store")).unwrap();
    store.adopt(&dir.join("bundle"), &[site_pub]).unwrap();
    let deployed = std::fs::read(store.current().unwrap().unwrap().join("policy.onnx")).unwrap();

    // 3. One day in the field (demand `field`, the scenario's default), ε = 0.1.
    let log = dir.join("log");
    let day = sim::run_controller(&scenario, &deployed, 1, 7, 86_400, 0.1, Some(&log)).unwrap();
    eprintln!(
        "field day (ε = 0.1): mean delay {:.2} s, {} vehicles",
        day.mean_delay_s, day.throughput_veh
    );

    // 4. Fine-tune with the defaults and gate.
    let cfg = FinetuneConfig::default();
    let out =
        finetune::finetune(&deployed, &log, &cfg, &mut |l| eprintln!("finetune: {l}")).unwrap();
    let r = &out.report;
    if !r.gate.accepted {
        eprintln!("gate: {}", r.gate.reason);
        assert!(r.gate.reason.starts_with("refused: "), "{}", r.gate.reason);
        assert!(r.update.policy.epochs > 0, "an update was made and judged");
        let running = bundle::verify(&store.current_link(), &[site_pub]).unwrap();
        assert_eq!(
            running.manifest.policy_version, 1,
            "the deployed version stays"
        );
        return;
    }
    let v = store.next_version(1).unwrap();
    let m = candidate_manifest(&out.parent, v, r, &cfg, "finetune_shifted_demand test");
    store
        .install(&out.weights, &m, &own_key, &[site_pub], &r.gate.reason)
        .unwrap();
    let b = bundle::verify(&store.current_link(), &[site_pub, own_key.verifying_key()]).unwrap();
    assert_eq!(b.manifest.policy_version, 2);

    // 5. Evaluate both, greedy, on held-out seeds.
    let before = sim::evaluate(&scenario, &deployed, &EVAL_SEEDS, 3600).unwrap();
    let after = sim::evaluate(&scenario, &b.model, &EVAL_SEEDS, 3600).unwrap();
    let table = sim::delay_table(&EVAL_SEEDS, &before, &after);
    println!("\n{table}");
    let mean = |m: &[greenwave_sim::EpisodeMetrics]| {
        m.iter().map(|x| x.mean_delay_s).sum::<f64>() / m.len() as f64
    };
    assert!(
        mean(&after) < mean(&before),
        "fine-tuned {:.2} s vs deployed {:.2} s",
        mean(&after),
        mean(&before)
    );
}
