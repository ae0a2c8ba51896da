//! What the gate batteries (`gate_battery.rs`, embedded simulator; `gate_battery_sumo.rs`,
//! SUMO) share: judging a candidate, measuring its true effect, the report.

use std::path::Path;

use greenwave_finetune::{self as finetune, FinetuneConfig, GateReport};
use greenwave_learn::{onnx, MlpNet, PolicyWeights};
use rand::{Rng, SeedableRng};

/// Mean delay (s) of a policy (ONNX) on held-out seeds.
pub type Eval = Box<dyn Fn(&[u8]) -> f64>;

/// A junction, its running policy, and how a policy's true mean delay is measured there
/// (greedy, on held-out seeds).
pub struct Setting {
    /// The running policy (ONNX).
    pub model: Vec<u8>,
    /// Its mean delay (s).
    pub base_delay: f64,
    /// Mean delay (s) of a policy (ONNX) on the held-out seeds.
    pub eval: Eval,
}

impl Setting {
    /// The setting of `model`, its mean delay measured by `eval`.
    pub fn new(model: Vec<u8>, eval: Eval) -> Self {
        Setting {
            base_delay: eval(&model),
            model,
            eval,
        }
    }
}

pub fn cfg(dir: &Path, name: &str) -> FinetuneConfig {
    FinetuneConfig {
        attempts_file: Some(dir.join(format!("attempts-{name}.json"))),
        ..FinetuneConfig::default()
    }
}

/// `candidate`'s actor rewritten to read the running policy's normalised observations
/// (the normalisation folded into its first layer; exact where no feature is clipped).
pub fn in_running_norm(candidate: &PolicyWeights, running: &PolicyWeights) -> MlpNet {
    let mut layers = candidate.actor.clone();
    let (c, o) = (&candidate.norm, &running.norm);
    let l = &mut layers[0];
    for r in 0..l.outputs {
        for j in 0..l.inputs {
            let w = l.weights[r * l.inputs + j];
            l.bias[r] += w * (o.mean[j] - c.mean[j]) * c.inv_std[j];
            l.weights[r * l.inputs + j] = w * c.inv_std[j] / o.inv_std[j];
        }
    }
    MlpNet::from_dense(&layers, &candidate_device()).unwrap()
}

pub fn candidate_device() -> candle_core::Device {
    candle_core::Device::Cpu
}

pub struct Row {
    /// The candidate.
    pub name: String,
    /// The gate's verdict.
    pub accepted: bool,
    /// The gate's reason.
    pub reason: String,
    /// Change of mean delay against the running policy, in percent.
    pub effect_pct: f64,
    /// The gate's report.
    pub gate: GateReport,
}

pub fn judge_weights(
    setting: &Setting,
    log_dir: &Path,
    dir: &Path,
    name: &str,
    cand: &PolicyWeights,
) -> Row {
    let c = cfg(dir, name);
    let p = finetune::prepare(&setting.model, log_dir, &c, &mut |_| {}).unwrap();
    let actor = in_running_norm(cand, &p.weights);
    let g = finetune::judge_candidate(&p, &actor, &c).unwrap();
    row(setting, name, &g, cand, &p.parent)
}

pub fn row(
    setting: &Setting,
    name: &str,
    g: &GateReport,
    cand: &PolicyWeights,
    parent: &greenwave_learn::Manifest,
) -> Row {
    let bytes = onnx::reexport(cand, parent);
    let d = (setting.eval)(&bytes);
    let r = Row {
        name: name.into(),
        accepted: g.accepted,
        reason: g.reason.clone(),
        effect_pct: 100.0 * (d / setting.base_delay - 1.0),
        gate: g.clone(),
    };
    eprintln!(
        "{:<40} {:>8} {:+7.2}%  {}",
        r.name,
        if r.accepted { "ACCEPT" } else { "refuse" },
        r.effect_pct,
        r.reason
    );
    r
}

/// The "reward sign flipped, large step" candidate's settings: a known-bad update pushed
/// far enough (learning rate 3e-3, KL limits raised) that the gate, not the trust region,
/// has to refuse it.
pub fn flipped_large_step(c: &mut FinetuneConfig, seed: u64) {
    c.seed = seed;
    c.flip_reward_sign = true;
    c.update.learning_rate = 3e-3;
    c.update.max_kl = 0.5;
    c.gate.max_kl = 1.0;
}

pub fn finetuned(
    setting: &Setting,
    log_dir: &Path,
    dir: &Path,
    name: &str,
    tweak: impl FnOnce(&mut FinetuneConfig),
) -> Row {
    let mut c = cfg(dir, name);
    tweak(&mut c);
    match finetune::finetune(&setting.model, log_dir, &c, &mut |_| {}) {
        Ok(o) => row(setting, name, &o.report.gate, &o.weights, &o.parent),
        Err(e) => Row {
            name: name.into(),
            accepted: false,
            reason: format!("error: {e}"),
            effect_pct: f64::NAN,
            gate: GateReport::default(),
        },
    }
}

pub fn perturbed(w: &PolicyWeights, sigma: f32, seed: u64) -> PolicyWeights {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = w.clone();
    for l in &mut out.actor {
        let rms = (l.weights.iter().map(|x| x * x).sum::<f32>() / l.weights.len() as f32).sqrt();
        for x in l.weights.iter_mut() {
            // Box–Muller from two uniforms.
            let (u1, u2): (f32, f32) = (rng.random(), rng.random());
            let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f32::consts::TAU * u2).cos();
            *x += sigma * rms * z;
        }
    }
    out
}

/// The gate's refusal in a few words, with its numbers.
pub fn short_reason(g: &GateReport, reason: &str) -> String {
    if reason.starts_with("error") {
        return reason.to_string();
    }
    if g.accepted || reason.contains("lower bound") {
        return format!(
            "Δ {:+.4}, 95 % LB {:+.4}, covered {} of {} changed, EV {:.2}",
            g.estimate, g.lower_bound, g.covered_records, g.changed_states, g.explained_variance
        );
    }
    if reason.contains("explain only") {
        return format!("critic fit: EV {:.2} < 0.5", g.explained_variance);
    }
    if reason.contains("exploration served") {
        return format!(
            "coverage: {} of {} changed states",
            g.covered_records, g.changed_states
        );
    }
    if reason.contains("KL to the running") {
        return format!("KL {:.3}", g.kl);
    }
    if reason.contains("held-back decision states (at least") {
        return format!("{} held-back decision states", g.held_back_decision_states);
    }
    if reason.contains("nothing would change") {
        return "no greedy choice changed".into();
    }
    reason.to_string()
}

/// Prints the Markdown table and the counts after `header`; fails on any false accept, and
/// when fewer than `min_bad` candidates turned out not better than the running policy.
pub fn report(rows: &[Row], header: &str, min_bad: usize) {
    let mut md = format!(
        "{header}\n\n| candidate | gate | refused by / gate's numbers | true effect on mean delay |\n\
         |---|---|---|---:|\n"
    );
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {} | {:+.2} % |\n",
            r.name,
            if r.accepted {
                "**accepted**"
            } else {
                "refused"
            },
            short_reason(&r.gate, &r.reason),
            r.effect_pct,
        ));
    }
    let worse = |r: &&Row| r.effect_pct.is_nan() || r.effect_pct >= 0.0;
    let better = |r: &&Row| r.effect_pct < -1.0;
    let n_bad = rows.iter().filter(worse).count();
    let false_acc = rows.iter().filter(worse).filter(|r| r.accepted).count();
    let n_good = rows.iter().filter(better).count();
    let true_acc = rows.iter().filter(better).filter(|r| r.accepted).count();
    let n_mid = rows.len() - n_bad - n_good;
    let mid_acc = rows.iter().filter(|r| r.accepted).count() - false_acc - true_acc;
    md.push_str(&format!(
        "\nFalse accepts: {false_acc} of {n_bad} candidates not better than the running policy. \
         True accepts: {true_acc} of {n_good} candidates better by more than 1 %. \
         Accepted {mid_acc} of the {n_mid} better by less than 1 %.\n"
    ));
    println!("\n{md}");
    for r in rows {
        eprintln!("{}: {}", r.name, r.reason);
    }
    assert_eq!(
        false_acc, 0,
        "the gate accepted a candidate that is not better"
    );
    assert!(
        n_bad >= min_bad,
        "only {n_bad} candidates turned out not better: the battery needs at least {min_bad}"
    );
}
