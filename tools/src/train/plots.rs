//! Progress bar and PNG plots of a training run.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use plotters::prelude::*;

use super::checkpoint::read_csv;
use super::IterationRow;

/// `greenwave plot`: redraws a run folder's curves from its `metrics.csv`.
#[derive(Debug, clap::Args)]
pub struct PlotArgs {
    /// The run folder (`greenwave train --out`).
    pub run: PathBuf,
}

/// Writes `training.png` and `losses.png` into the run folder from its `metrics.csv`.
pub fn run(args: &PlotArgs) -> Result<()> {
    let csv = args.run.join("metrics.csv");
    if !csv.is_file() {
        anyhow::bail!(
            "{} has no metrics.csv: not a training run folder",
            args.run.display()
        );
    }
    write_plots(&csv, &args.run).with_context(|| format!("plotting {}", csv.display()))?;
    say!(
        "wrote {0}/training.png and {0}/losses.png",
        args.run.display()
    );
    Ok(())
}

/// A progress bar over iterations (hidden when `show` is false or stderr is not a terminal).
pub fn progress_bar(show: bool, total: u64, done: u64) -> ProgressBar {
    let bar = if show {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} it  {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_position(done);
    bar
}

/// Shows the latest iteration's figures on the bar.
pub fn update_bar(bar: &ProgressBar, r: &IterationRow) {
    bar.set_position(r.iteration);
    let delay = if r.episode_delay_s.is_nan() {
        "-".to_string()
    } else {
        format!("{:.1}", r.episode_delay_s)
    };
    bar.set_message(format!(
        "{} steps  {:.0} steps/s  delay {} s  kl {:.4}  ent {:.3}",
        r.env_steps, r.steps_per_s, delay, r.approx_kl, r.entropy
    ));
}

/// Column indices in metrics.csv.
const STEPS: usize = 1;
const DELAY: usize = 5;
const RETURN: usize = 6;
const PLOSS: usize = 8;
const VLOSS: usize = 9;
const KL: usize = 11;

fn series(rows: &[Vec<f64>], col: usize) -> Vec<(f64, f64)> {
    rows.iter()
        .filter(|r| r[col].is_finite())
        .map(|r| (r[STEPS], r[col]))
        .collect()
}

fn panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    title: &str,
    data: &[(f64, f64)],
    color: RGBColor,
) -> Result<()> {
    if data.is_empty() {
        area.titled(&format!("{title} (no data yet)"), ("sans-serif", 18))?;
        return Ok(());
    }
    let (x0, x1) = data
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (y0, y1) = data
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let pad = ((y1 - y0) * 0.05).max(1e-6);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1.max(x0 + 1.0), (y0 - pad)..(y1 + pad))?;
    chart
        .configure_mesh()
        .x_desc("decisions")
        .max_light_lines(2)
        .draw()?;
    chart.draw_series(LineSeries::new(
        data.iter().map(|&(x, y)| (x, y.min(y1 + pad))),
        &color,
    ))?;
    Ok(())
}

/// [`write_plots`] during or at the end of training: curves that cannot be drawn (a
/// headless machine with no fonts, say) are a warning, never a failed run, since the
/// run's data is saved without them.
pub fn write_plots_or_warn(csv: &Path, out: &Path, bar: &ProgressBar) {
    if let Err(e) = write_plots(csv, out) {
        bar.suspend(|| {
            eprintln!(
                "warning: training curves not written: {e:#} (redraw them with `greenwave \
                 plot {}`)",
                out.display()
            )
        });
    }
}

/// Writes `training.png` (episode delay and return) and `losses.png` (policy and value
/// loss, approx-KL) from metrics.csv.
pub fn write_plots(csv: &Path, out: &Path) -> Result<()> {
    let rows = read_csv(csv)?;
    let path = out.join("training.png");
    let root = BitMapBackend::new(&path, (900, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let parts = root.split_evenly((2, 1));
    panel(
        &parts[0],
        "mean episode delay (s)",
        &series(&rows, DELAY),
        RED,
    )?;
    panel(&parts[1], "episode return", &series(&rows, RETURN), BLUE)?;
    root.present()?;
    let path = out.join("losses.png");
    let root = BitMapBackend::new(&path, (900, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let parts = root.split_evenly((3, 1));
    panel(&parts[0], "policy loss", &series(&rows, PLOSS), BLUE)?;
    panel(&parts[1], "value loss", &series(&rows, VLOSS), GREEN)?;
    panel(&parts[2], "approx KL", &series(&rows, KL), MAGENTA)?;
    root.present()?;
    Ok(())
}
