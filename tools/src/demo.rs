//! `greenwave demo`: the whole workstation story on the embedded simulator, no install:
//! train a policy on `single-4way`, export it, compare it with fixed-time, actuated and
//! max-pressure on held-out seeds, and write a report folder (Markdown + PNG plots).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use greenwave_sim::{Controller, ControllerKind, EmbeddedEnv, Env, Scenario};
use plotters::prelude::*;

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
    /// Training decisions.
    #[arg(long, default_value_t = 1_000_000)]
    pub steps: u64,
    /// Evaluation seeds.
    #[arg(long, default_value_t = 5)]
    pub seeds: u64,
    /// Seed of the training run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Tiny sizes for a smoke test (seconds, not minutes; the policy will be poor).
    #[arg(long)]
    pub quick: bool,
}

/// Runs the demo and returns the report's path.
pub fn run_demo(args: &DemoArgs) -> Result<PathBuf> {
    let start = Instant::now();
    let scenario = greenwave_sim::load("single-4way")?;
    let out = &args.out;
    let report = out.join("report");
    std::fs::create_dir_all(&report).with_context(|| format!("creating {}", report.display()))?;

    eprintln!(
        "[1/4] training PPO on single-4way ({} decisions)",
        args.steps
    );
    let mut cfg = TrainConfig::new("single-4way", Algo::Ppo, args.steps, args.seed);
    cfg.command = format!("greenwave demo --steps {} --seed {}", args.steps, args.seed);
    if args.quick {
        cfg.n_envs = 2;
        cfg.rollout_steps = 60;
        cfg.hidden = vec![16, 16];
    }
    let run_dir = out.join("train");
    let summary = train(&cfg, &run_dir, false, true)?;

    eprintln!("[2/4] exporting the policy (ONNX + firmware blobs)");
    let model = out.join("model").join("policy.onnx");
    export(&run_dir, &model)?;

    eprintln!(
        "[3/4] evaluating against fixed-time, actuated and max-pressure on {} seeds",
        args.seeds
    );
    let seeds: Vec<u64> = (1000..1000 + args.seeds.max(1)).collect();
    let seconds = scenario.episode_s() as f64;
    let rows = compare(&model, &scenario, &seeds, seconds)?;

    eprintln!("[4/4] writing the report");
    std::fs::copy(run_dir.join("training.png"), report.join("training.png"))?;
    delay_chart(&rows, &report.join("delay_by_controller.png"))?;
    let traces = queue_traces(&model, &scenario, seeds[0])?;
    queue_chart(&traces, &report.join("queue_over_time.png"))?;
    let md = markdown(args, &summary, &rows, start.elapsed().as_secs_f64());
    std::fs::write(report.join("README.md"), md)?;
    Ok(report.join("README.md"))
}

/// Runs `greenwave demo`.
pub fn run(args: &DemoArgs) -> Result<()> {
    let report = run_demo(args)?;
    println!("report: {}", report.display());
    Ok(())
}

fn markdown(
    args: &DemoArgs,
    s: &crate::train::TrainSummary,
    rows: &[EvalRow],
    wall_s: f64,
) -> String {
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
    if let (Some(p), Some(ft), Some(mp)) = (get("policy"), get("fixed-time"), get("max-pressure")) {
        let _ = writeln!(
            md,
            "\nThe policy's mean delay is {:.1}% {} than fixed-time and {:.1}% {} than max-pressure.\n",
            ((p - ft) / ft * 100.0).abs(),
            if p < ft { "lower" } else { "higher" },
            ((p - mp) / mp * 100.0).abs(),
            if p < mp { "lower" } else { "higher" }
        );
    }
    md.push_str("\n![delay by controller](delay_by_controller.png)\n\n![queue over time](queue_over_time.png)\n");
    let _ = writeln!(md, "\nFiles: `../train/` (run folder: metrics.csv, losses.png, checkpoints), `../model/` (policy.onnx, policy.blob, policy.int8.blob, policy.manifest.json).\n\nDemo wall time: {wall_s:.1} s.");
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
        while env.now_s() < scenario.episode_s() as f64 {
            let a = c.decide(&env);
            env.step(&a)?;
            let q: f32 = (0..env.signals().len())
                .flat_map(|s| env.detectors(s))
                .map(|d| d.queue_veh)
                .sum();
            trace.push((env.now_s() / 60.0, q as f64));
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
