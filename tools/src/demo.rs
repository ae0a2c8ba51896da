//! `greenwave demo`: the whole story on the embedded simulator, no install: train a policy
//! on `single-4way`, export it, compare it with fixed-time, actuated and max-pressure on
//! held-out seeds, sign a bundle and run the controller (greenwave-runtime) for a simulated
//! hour with logging, then fine-tune on-device after a demand shift, and write a report
//! folder (Markdown + PNG plots).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use greenwave_finetune::{self as finetune, candidate_manifest, sim, FinetuneConfig, PolicyStore};
use greenwave_runtime::bundle;
use greenwave_runtime::log::read_all;
use greenwave_sim::{Controller, ControllerKind, EmbeddedEnv, Env, EpisodeMetrics, Scenario};
use plotters::prelude::*;

use crate::bundle_cmd::{bundle as sign_bundle, keygen};
use crate::eval_cmd::{compare, load_policy_for, table, EvalRow};
use crate::export_cmd::export;
use crate::policy_controller::PolicyController;
use crate::train::{train, Algo, TrainConfig};

/// Arguments of `greenwave demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Folder for everything the demo writes (the report goes to `OUT/report`).
    #[arg(long, default_value = "runs/demo")]
    pub out: PathBuf,
    /// Training decisions [default: 1,000,000; 2,000 with --quick].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: Option<u64>,
    /// Evaluation seeds.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub seeds: u64,
    /// Seed of the training run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Tiny sizes for a smoke test (seconds, not minutes; the policy will be poor).
    #[arg(long)]
    pub quick: bool,
}

impl DemoArgs {
    /// Training decisions: `--steps`, else the full or the `--quick` budget.
    pub fn steps(&self) -> u64 {
        let default = if self.quick { 2_000 } else { 1_000_000 };
        self.steps.unwrap_or(default)
    }
}

/// Runs the demo and returns the report's path.
pub fn run_demo(args: &DemoArgs) -> Result<PathBuf> {
    let start = Instant::now();
    let scenario = greenwave_sim::load("single-4way")?;
    let out = &args.out;
    claim_out(out)?;
    let report = out.join("report");
    std::fs::create_dir_all(&report).with_context(|| format!("creating {}", report.display()))?;

    let steps = args.steps();
    eprintln!("[1/6] training PPO on single-4way ({steps} decisions)");
    let mut cfg = TrainConfig::new("single-4way", Algo::Ppo, steps, args.seed);
    cfg.command = format!("greenwave demo --steps {steps} --seed {}", args.seed);
    if args.quick {
        cfg.n_envs = 2;
        cfg.rollout_steps = 60;
        cfg.hidden = vec![16, 16];
    }
    let run_dir = out.join("train");
    let summary = train(&cfg, &run_dir, false, true)?;

    eprintln!("[2/6] exporting the policy (ONNX + firmware blobs)");
    let model = out.join("model").join("policy.onnx");
    export(&run_dir, &model)?;

    eprintln!(
        "[3/6] evaluating against fixed-time, actuated and max-pressure on {} seeds",
        args.seeds
    );
    let seeds: Vec<u64> = (1000..1000 + args.seeds).collect();
    let rows = compare(&model, &scenario, &seeds, scenario.episode())?;

    eprintln!("[4/6] signing a bundle; the controller runs it for a simulated hour, logging");
    let (site, signer) = keygen(&out.join("keys/site"), true)?;
    let (own, _) = keygen(&out.join("keys/controller"), true)?;
    let keys = Keys {
        site_secret: site.secret,
        site: bundle::load_public_key(&site.public)?,
        own: bundle::load_signing_key(&own.secret)?,
        signer,
    };
    let hour = controller_hour(out, &keys, &model, &scenario, seeds[0])?;

    eprintln!("[5/6] demand shift: deploy, log a field day, fine-tune on-device, re-evaluate");
    let shift = finetune_after_shift(out, &keys, args, &seeds)?;

    eprintln!("[6/6] writing the report");
    std::fs::copy(run_dir.join("training.png"), report.join("training.png"))?;
    delay_chart(&rows, &report.join("delay_by_controller.png"))?;
    let traces = queue_traces(&model, &scenario, seeds[0])?;
    queue_chart(&traces, &report.join("queue_over_time.png"))?;
    finetune_chart(&shift, &report.join("finetune_before_after.png"))?;
    let md = markdown(&Findings {
        args,
        train: &summary,
        rows: &rows,
        keys: &keys,
        hour: &hour,
        shift: &shift,
        wall_s: start.elapsed().as_secs_f64(),
    });
    std::fs::write(report.join("README.md"), md)?;
    Ok(report.join("README.md"))
}

/// The demo's keys: the site's (signs what the workstation exports) and the controller's
/// own (signs its fine-tuned versions).
struct Keys {
    site_secret: PathBuf,
    site: bundle::VerifyingKey,
    own: bundle::SigningKey,
    signer: String,
}

/// The file that marks a folder as the demo's own: a later demo may replace what is in it.
const DEMO_MARK: &str = ".greenwave-demo";
/// What the demo writes at the top of `--out`.
const DEMO_ENTRIES: [&str; 8] = [
    DEMO_MARK,
    "report",
    "train",
    "model",
    "keys",
    "bundle",
    "controller",
    "finetune",
];

/// Makes `out` the demo's folder: a new or empty folder, or one an earlier demo wrote (its
/// mark, or, from before the mark, its report and nothing but the demo's own entries).
/// The demo replaces its keys, bundles, stores and logs on each run, so any other folder
/// (`--out .` beside a site's keys) is refused rather than written over.
fn claim_out(out: &Path) -> Result<()> {
    let entries: Vec<String> = match std::fs::read_dir(out) {
        Ok(dir) => dir
            .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
            .collect::<std::io::Result<_>>()
            .with_context(|| format!("listing {}", out.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", out.display())),
    };
    let an_earlier_demo = out.join(DEMO_MARK).is_file()
        || (out.join("report").is_dir()
            && entries.iter().all(|e| DEMO_ENTRIES.contains(&e.as_str())));
    if !entries.is_empty() && !an_earlier_demo {
        bail!(
            "--out {} holds files the demo did not write ({}); the demo replaces keys, \
             bundles, stores and logs in its folder, so give it a new or empty one",
            out.display(),
            entries.join(", ")
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    std::fs::write(
        out.join(DEMO_MARK),
        "greenwave demo output: `greenwave demo` replaces this folder's contents\n",
    )
    .with_context(|| format!("writing {}", out.join(DEMO_MARK).display()))
}

/// Removes a folder the demo is about to write afresh (a previous run's).
fn fresh(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(())
}

/// What the controller did in its simulated hour.
struct ControllerHour {
    seed: u64,
    metrics: EpisodeMetrics,
    records_read_back: usize,
    log_issues: usize,
}

/// The site signs the exported policy; the controller verifies the bundle, adopts it into
/// its policy store and runs it for a simulated hour on `scenario`, logging every
/// transition; the log is read back.
fn controller_hour(
    out: &Path,
    keys: &Keys,
    model: &Path,
    scenario: &Scenario,
    seed: u64,
) -> Result<ControllerHour> {
    let bundle_dir = out.join("bundle");
    fresh(&bundle_dir)?;
    sign_bundle(model, &keys.site_secret, &bundle_dir)?;
    let trusted = [keys.site];
    let store_dir = out.join("controller/store");
    fresh(&store_dir)?;
    let store = PolicyStore::open(&store_dir)?;
    let adopted = store.adopt(&bundle_dir, &trusted)?;
    let verified = bundle::verify(&adopted.dir, &trusted)?;
    let log = out.join("controller/log");
    fresh(&log)?;
    let metrics = sim::run_controller(
        scenario,
        &verified.model,
        verified.manifest.policy_version,
        seed,
        3600,
        0.0,
        Some(&log),
    )?;
    let (records, issues) = read_all(&log)?;
    Ok(ControllerHour {
        seed,
        metrics,
        records_read_back: records.len(),
        log_issues: issues.len(),
    })
}

/// The fine-tuning story, in runtime's `finetune-shift` scenario (single-4way's junction
/// and plan): a policy trained where north–south dominates is deployed where the heavy
/// direction has flipped; the controller logs a simulated day with bounded exploration,
/// fine-tunes on that log, and the gate decides; both policies are evaluated greedily.
struct ShiftStory {
    train_steps: u64,
    field: EpisodeMetrics,
    records: u64,
    report: finetune::FinetuneReport,
    switched_to: Option<u32>,
    seeds: Vec<u64>,
    before: Vec<EpisodeMetrics>,
    after: Vec<EpisodeMetrics>,
}

fn finetune_after_shift(
    out: &Path,
    keys: &Keys,
    args: &DemoArgs,
    seeds: &[u64],
) -> Result<ShiftStory> {
    let dir = out.join("finetune");
    std::fs::create_dir_all(&dir)?;
    let scenario_path = dir.join("finetune-shift.toml");
    std::fs::write(&scenario_path, sim::SHIFT_SCENARIO_TOML)?;
    let scenario_s = scenario_path.to_string_lossy().into_owned();
    let scenario = greenwave_sim::load(&scenario_s)?;
    let train_steps = if args.quick { 2_000 } else { 200_000 };
    let mut tc = TrainConfig::new(&scenario_s, Algo::Ppo, train_steps, args.seed);
    tc.demand = Some("train".into());
    tc.episode_s = Some(3600);
    tc.command = format!("greenwave demo (fine-tune story), seed {}", args.seed);
    if args.quick {
        tc.n_envs = 2;
        tc.rollout_steps = 60;
        tc.hidden = vec![16, 16];
    }
    let run = dir.join("train");
    train(&tc, &run, false, false)?;
    let onnx = dir.join("model/policy.onnx");
    export(&run, &onnx)?;
    let (site_pub, own_key) = (keys.site, &keys.own);
    let bundle_dir = dir.join("bundle");
    fresh(&bundle_dir)?;
    sign_bundle(&onnx, &keys.site_secret, &bundle_dir)?;
    let store_dir = dir.join("store");
    fresh(&store_dir)?;
    let store = PolicyStore::open(&store_dir)?;
    let v1 = store.adopt(&bundle_dir, &[site_pub])?;
    let deployed = bundle::verify(&v1.dir, &[site_pub])?;

    // A day in the field (demand `field`), with the runtime's bounded exploration.
    let log = dir.join("log");
    fresh(&log)?;
    let field = sim::run_controller(
        &scenario,
        &deployed.model,
        v1.version,
        7,
        86_400,
        0.1,
        Some(&log),
    )?;

    let cfg = FinetuneConfig::default();
    let (switched_to, report, after_model) =
        match finetune::finetune(&deployed.model, &log, &cfg, &mut |l| eprintln!("      {l}")) {
            Ok(o) if o.report.gate.accepted => {
                let v = store.next_version(v1.version)?;
                let m = candidate_manifest(&o.parent, v, &o.report, &cfg, "greenwave demo");
                let s =
                    store.install(&o.weights, &m, own_key, &[site_pub], &o.report.gate.reason)?;
                let b = bundle::verify(&s.dir, &[site_pub, own_key.verifying_key()])?;
                (Some(s.version), o.report, b.model)
            }
            Ok(o) => (None, o.report, deployed.model.clone()),
            Err(e) => return Err(e).context("fine-tuning on the field log"),
        };
    let before = sim::evaluate(&scenario, &deployed.model, seeds, 3600)?;
    let after = sim::evaluate(&scenario, &after_model, seeds, 3600)?;
    Ok(ShiftStory {
        train_steps,
        field,
        records: report.log.records_used,
        report,
        switched_to,
        seeds: seeds.to_vec(),
        before,
        after,
    })
}

/// Runs `greenwave demo`.
pub fn run(args: &DemoArgs) -> Result<()> {
    let report = run_demo(args)?;
    say!("report: {}", report.display());
    Ok(())
}

/// What the demo found, step by step: what its report is written from.
struct Findings<'a> {
    args: &'a DemoArgs,
    /// Step 1: training.
    train: &'a crate::train::TrainSummary,
    /// Step 3: the policy next to the classic controllers.
    rows: &'a [EvalRow],
    /// Step 4: the keys, and the controller's simulated hour.
    keys: &'a Keys,
    hour: &'a ControllerHour,
    /// Step 5: the demand shift and fine-tuning.
    shift: &'a ShiftStory,
    /// The whole demo's wall time.
    wall_s: f64,
}

/// The report (`report/README.md`).
fn markdown(findings: &Findings<'_>) -> String {
    let Findings {
        args,
        train: s,
        rows,
        keys,
        hour,
        shift,
        wall_s,
    } = *findings;
    let mut md = String::from("# greenwave demo report\n\n");
    let _ = writeln!(
        md,
        "Scenario `single-4way` (one four-arm junction, protected lefts, morning peak), embedded simulator.\n\n\
         ## Training\n\nPPO, {} decisions in {} iterations, {:.1} s ({:.0} decisions/s), seed {}.\n\n![training curve](training.png)\n",
        s.env_steps, s.iterations, s.wall_s, s.steps_per_s, args.seed
    );
    let _ = writeln!(
        md,
        "## Evaluation\n\nMean over {} held-out seeds (1000..), one simulated hour each.\n",
        args.seeds
    );
    md.push_str(&table(rows));
    let get = |name: &str| {
        rows.iter()
            .find(|r| r.controller == name)
            .map(|r| r.metrics.mean_delay_s)
    };
    if let (Some(p), Some(ft), Some(mp)) = (
        get(crate::eval_cmd::POLICY_ROW),
        get("fixed-time"),
        get("max-pressure"),
    ) {
        let _ = writeln!(
            md,
            "\nThe policy's mean delay is {:.1}% {} than fixed-time and {:.1}% {} than max-pressure.\n",
            ((p - ft) / ft * 100.0).abs(),
            if p < ft { "lower" } else { "higher" },
            ((p - mp) / mp * 100.0).abs(),
            if p < mp { "lower" } else { "higher" }
        );
    }
    if let Some(v) = crate::eval_cmd::verdict(rows) {
        let _ = writeln!(md, "\n{v}\n");
    }
    md.push_str("\n![delay by controller](delay_by_controller.png)\n\n![queue over time](queue_over_time.png)\n");
    let m = &hour.metrics;
    let _ = writeln!(
        md,
        "\n## The controller\n\nThe exported policy, signed with the site key (`../keys/site.pub`, signer `{}`), \
         verified and adopted by the controller's policy store (`../controller/store`), ran one simulated hour \
         (seed {}) under greenwave-runtime's supervisor and watchdog: mean delay {:.2} s, {} vehicles served. \
         The transition log (`../controller/log`) read back {} records with {} issues.\n",
        keys.signer, hour.seed, m.mean_delay_s, m.throughput_veh, hour.records_read_back, hour.log_issues
    );
    let r = &shift.report;
    let _ = writeln!(
        md,
        "## On-device fine-tuning after a demand shift\n\nScenario `finetune-shift` (single-4way's junction and plan): a policy trained \
         for {} decisions where north–south carries almost all traffic is deployed where the heavy direction has flipped to east–west. \
         The controller logs a simulated day with bounded exploration (ε = 0.1; mean delay {:.2} s), then fine-tunes on the log \
         ({} records; off-policy clipped PPO, default settings, {:.1} s).\n\n**Gate: {}** — {}\n",
        shift.train_steps,
        shift.field.mean_delay_s,
        shift.records,
        r.wall_s,
        match shift.switched_to {
            Some(v) => format!("accepted, switched to v{v} (signed with the controller's own key)"),
            None => "refused, the deployed policy stays (the gate switches a version in only when the log shows, at 95 % one-sided, that it is better; the reason says what was missing)".to_string(),
        },
        r.gate.reason
    );
    md.push_str(
        "Greedy evaluation, one hour per seed (after = the version running after the gate):\n\n",
    );
    md.push_str(&sim::delay_table(&shift.seeds, &shift.before, &shift.after));
    md.push_str("\n![fine-tune before/after](finetune_before_after.png)\n");
    let _ = writeln!(md, "\nFiles: `../train/` (run folder: metrics.csv, losses.png, checkpoints), `../model/` (policy.onnx, policy.blob, policy.int8.blob, policy.manifest.json), `../bundle/` (signed), `../controller/` (policy store, transition log), `../finetune/` (the shift story's run, bundle, store and log).\n\nDemo wall time: {wall_s:.1} s.");
    md
}

/// One controller's queue over an episode: (minute, halted vehicles) per decision.
type QueueTrace = (String, Vec<(f64, f64)>);

/// Total queue (halted vehicles, all movements) at each decision of one episode, per
/// controller.
fn queue_traces(model: &Path, scenario: &Scenario, seed: u64) -> Result<Vec<QueueTrace>> {
    let weights = load_policy_for(model, scenario)?;
    let mut controllers: Vec<Box<dyn Controller>> = vec![Box::new(PolicyController::new(weights))];
    controllers.extend(ControllerKind::ALL.iter().map(|k| k.build(scenario)));
    let mut out = Vec::new();
    for mut c in controllers {
        let mut env = EmbeddedEnv::from_scenario(scenario, seed);
        env.reset(seed)?;
        c.reset(&env);
        let mut trace = Vec::new();
        while env.now() < scenario.episode() {
            let a = c.decide(&env);
            env.step(&a)?;
            let q: f32 = (0..env.signals().len())
                .flat_map(|s| env.detectors(s))
                .map(|d| d.queue_veh)
                .sum();
            let minute = f64::from(env.now().0) / 1000.0 / 60.0;
            trace.push((minute, q as f64));
        }
        out.push((c.name().to_string(), trace));
    }
    Ok(out)
}

const COLORS: [RGBColor; 4] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
];

fn delay_chart(rows: &[EvalRow], path: &Path) -> Result<()> {
    let root = BitMapBackend::new(path, (800, 450)).into_drawing_area();
    root.fill(&WHITE)?;
    let max = rows
        .iter()
        .map(|r| r.metrics.mean_delay_s)
        .fold(0.0, f64::max)
        * 1.15;
    let names: Vec<String> = rows.iter().map(|r| r.controller.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "mean delay per vehicle by controller (s)",
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..rows.len() as f64, 0f64..max.max(1.0))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(rows.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.01 {
                names.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()?;
    chart.draw_series(rows.iter().enumerate().map(|(i, r)| {
        Rectangle::new(
            [
                (i as f64 + 0.15, 0.0),
                (i as f64 + 0.85, r.metrics.mean_delay_s),
            ],
            COLORS[i % 4].filled(),
        )
    }))?;
    root.present()?;
    Ok(())
}

fn queue_chart(traces: &[QueueTrace], path: &Path) -> Result<()> {
    let root = BitMapBackend::new(path, (900, 450)).into_drawing_area();
    root.fill(&WHITE)?;
    let x1 = traces
        .iter()
        .flat_map(|(_, t)| t.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let y1 = traces
        .iter()
        .flat_map(|(_, t)| t.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "queued vehicles over the hour (one seed)",
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..x1, 0f64..y1)?;
    chart
        .configure_mesh()
        .x_desc("minute")
        .y_desc("halted vehicles")
        .draw()?;
    for (i, (name, t)) in traces.iter().enumerate() {
        let c = COLORS[i % 4];
        chart
            .draw_series(LineSeries::new(t.iter().copied(), &c))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}

/// Mean delay per evaluation seed, deployed vs after the fine-tune and gate.
fn finetune_chart(story: &ShiftStory, path: &Path) -> Result<()> {
    let root = BitMapBackend::new(path, (800, 450)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = story.seeds.len();
    let max = story
        .before
        .iter()
        .chain(&story.after)
        .map(|m| m.mean_delay_s)
        .fold(1.0, f64::max)
        * 1.15;
    let seeds = story.seeds.clone();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "mean delay by eval seed: deployed (left) vs fine-tuned (right), s",
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..n as f64, 0f64..max)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.01 {
                seeds
                    .get(i)
                    .map(|s| format!("seed {s}"))
                    .unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()?;
    for (k, (series, color)) in [(&story.before, COLORS[1]), (&story.after, COLORS[0])]
        .into_iter()
        .enumerate()
    {
        let x0 = 0.1 + 0.4 * k as f64;
        chart.draw_series(series.iter().enumerate().map(|(i, m)| {
            Rectangle::new(
                [(i as f64 + x0, 0.0), (i as f64 + x0 + 0.38, m.mean_delay_s)],
                color.filled(),
            )
        }))?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder holding a site's keys (or anything else not the demo's) is refused before
    /// the demo writes a byte; a new, empty, marked or earlier-demo folder is taken.
    #[test]
    fn the_demo_writes_only_into_a_folder_of_its_own() {
        let base = std::env::temp_dir().join(format!("gw-demo-claim-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let keys = base.join("keys-only");
        std::fs::create_dir_all(keys.join("keys")).unwrap();
        std::fs::write(keys.join("keys/site.key"), "secret").unwrap();
        let err = claim_out(&keys).unwrap_err().to_string();
        assert!(err.contains("keys"), "{err}");
        assert!(!keys.join(DEMO_MARK).exists());
        assert_eq!(
            std::fs::read_to_string(keys.join("keys/site.key")).unwrap(),
            "secret"
        );
        let other = base.join("a-project");
        std::fs::create_dir_all(other.join("report")).unwrap();
        std::fs::write(other.join("Cargo.toml"), "").unwrap();
        assert!(claim_out(&other).is_err(), "a report beside other files");

        let new = base.join("new");
        claim_out(&new).unwrap();
        assert!(new.join(DEMO_MARK).is_file());
        std::fs::create_dir_all(new.join("keys")).unwrap();
        std::fs::write(new.join("notes.txt"), "").unwrap();
        claim_out(&new).unwrap();
        let earlier = base.join("earlier");
        for d in ["report", "train", "keys", "finetune"] {
            std::fs::create_dir_all(earlier.join(d)).unwrap();
        }
        claim_out(&earlier).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }
}
