//! Checkpoint selection: over the second half of a run, the policy is run greedily (masked
//! argmax under the max-red rule, as `greenwave eval` and the controller run it) on a few
//! validation seeds of its own, and the weights with the lowest mean delay are kept as
//! `best.safetensors` + `best.json`; `greenwave export` takes them unless asked for the
//! last ones (`--last`).
//!
//! Why: on SUMO nets the greedy policy's delay moves by about a second between checkpoints
//! of one run while the sampled training episodes stay flat, and the last weights are often
//! not the best (tools/README.md, finding 15). Selecting on seeds that are neither the
//! training episodes' (hashed from `--seed`) nor `greenwave eval`'s held-out ones (1000 on)
//! keeps the held-out comparison honest.
//!
//! Validation never touches the learner or the training environments, so a run with
//! selection trains exactly the weights the same run without it trains.

use std::path::Path;

use anyhow::{Context, Result};
use greenwave_core::Millis;
use greenwave_learn::PolicyWeights;
use greenwave_sim::{run_episode, Env, EpisodeMetrics};
use serde::{Deserialize, Serialize};

use super::{checkpoint, Learner};
use crate::policy_controller::PolicyController;

/// Where and how a run validates (`--validation-seeds`, `--validation-first-seed`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidationConfig {
    /// Greedy episodes per validation, on seeds `first_seed`, `first_seed + 1`, …; 0 turns
    /// selection off (export then takes the last weights).
    pub seeds: u32,
    /// The first validation seed.
    pub first_seed: u64,
}

impl Default for ValidationConfig {
    /// Off: the library's default and that of runs recorded before selection existed.
    fn default() -> Self {
        ValidationConfig {
            seeds: 0,
            first_seed: DEFAULT_FIRST_SEED,
        }
    }
}

/// `greenwave train`'s default validation seeds: 500, 501, 502 (eval's held-out seeds start
/// at 1000).
pub const DEFAULT_FIRST_SEED: u64 = 500;
/// `greenwave train`'s default number of validation seeds.
pub const DEFAULT_SEEDS: u32 = 3;
/// Validations are this many to the whole run, evenly spaced, of which those in its second
/// half are run (about five, and one at the end): enough to catch the swings finding 15
/// measured, few enough to cost a few percent of a run's time.
const VALIDATIONS_PER_RUN: u64 = 10;
/// Validation episodes run at once per `--threads` thread.
const EPISODES_PER_THREAD: usize = 2;
/// At most this many validation seeds (each costs one episode per validation).
pub const MAX_SEEDS: u32 = 100;

impl ValidationConfig {
    /// Checks the settings: at most [`MAX_SEEDS`] seeds, all representable.
    pub fn check(&self) -> Result<()> {
        if self.seeds > MAX_SEEDS {
            anyhow::bail!(
                "--validation-seeds {} is more than {MAX_SEEDS} (each seed is one episode per validation)",
                self.seeds
            );
        }
        if self.first_seed.checked_add(u64::from(self.seeds)).is_none() {
            anyhow::bail!(
                "--validation-first-seed {} leaves no room for {} seeds",
                self.first_seed,
                self.seeds
            );
        }
        Ok(())
    }

    /// The validation seeds.
    pub fn seed_list(&self) -> Vec<u64> {
        (0..u64::from(self.seeds))
            .map(|k| self.first_seed.saturating_add(k))
            .collect()
    }

    /// Whether the weights after `iteration` (1-based) of `total` are validated: every
    /// `total / 10` iterations (rounded up to a multiple of `checkpoint_every`, so that
    /// every validation falls on a resumable checkpoint) in the run's second half, and at
    /// its end.
    pub fn due(&self, iteration: u64, total: u64, checkpoint_every: u64) -> bool {
        if self.seeds == 0 || iteration == 0 || iteration > total {
            return false;
        }
        let c = checkpoint_every.max(1);
        let every = total.div_ceil(VALIDATIONS_PER_RUN).div_ceil(c) * c;
        iteration == total || (2 * iteration > total && iteration % every == 0)
    }
}

/// One validation: the greedy policy's delay on every validation seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Validation {
    /// Iterations done when the weights were validated.
    pub iteration: u64,
    /// Decisions done then.
    pub env_steps: u64,
    /// The seeds, in order.
    pub seeds: Vec<u64>,
    /// Mean delay per vehicle (s) on each seed.
    pub delay_s: Vec<f64>,
}

impl Validation {
    /// Mean over the seeds of the mean delay (s): the selection score, lower is better.
    pub fn mean_delay_s(&self) -> f64 {
        if self.delay_s.is_empty() {
            return f64::NAN;
        }
        self.delay_s.iter().sum::<f64>() / self.delay_s.len() as f64
    }

    /// Whether these weights are better than `best`'s (ties keep the earlier weights; a
    /// NaN score never wins).
    pub fn beats(&self, best: Option<&Validation>) -> bool {
        let score = self.mean_delay_s();
        if !score.is_finite() {
            return false;
        }
        best.is_none_or(|b| !b.mean_delay_s().is_finite() || score < b.mean_delay_s())
    }
}

/// Runs the greedy policy `weights` (one per signal, or one for all) for one `episode` on
/// each of `seeds`, in environments from `make`, up to `EPISODES_PER_THREAD × threads`
/// episodes at once: an episode's thread waits on its simulator (SUMO is a process of its
/// own) about as long as it computes, so a core serves more than one.
pub fn validate<E: Env>(
    make: &(impl Fn(u64) -> Result<E> + Sync),
    weights: &[PolicyWeights],
    seeds: &[u64],
    episode: Millis,
    threads: usize,
) -> Result<Vec<EpisodeMetrics>> {
    let threads = (threads.max(1) * EPISODES_PER_THREAD).min(seeds.len().max(1));
    let run_one = |seed: u64| -> Result<EpisodeMetrics> {
        let mut env = make(seed)?;
        let mut c = PolicyController::per_signal(weights.to_vec());
        run_episode(&mut env, &mut c, seed, episode)
            .with_context(|| format!("validation episode on seed {seed}"))
    };
    let mut out = Vec::with_capacity(seeds.len());
    for chunk in seeds.chunks(threads) {
        let results: Vec<Result<EpisodeMetrics>> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|&seed| s.spawn(move || run_one(seed)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a validation episode panicked")))
                })
                .collect()
        });
        for r in results {
            out.push(r?);
        }
    }
    Ok(out)
}

/// A run's selection state: its validation log (none with validation off) and the best
/// validation so far.
pub(super) struct Selector {
    cfg: ValidationConfig,
    log: Option<ValidationLog>,
    best: Option<Validation>,
    total: u64,
    checkpoint_every: u64,
}

impl Selector {
    /// Selection for the run in `out` (fresh, or resumed at `iteration`) of `total`
    /// iterations with checkpoints every `checkpoint_every`. A fresh run removes an earlier
    /// run's selected weights and log from the folder. A resumed one keeps its selected
    /// weights (`load` refused a resume with other validation settings), even ones
    /// validated after its checkpoint (the end of a run need not be one): validation is
    /// deterministic, so the resumed run validates those weights again and keeps them.
    pub(super) fn start(
        out: &Path,
        cfg: &ValidationConfig,
        resume: bool,
        iteration: u64,
        (total, checkpoint_every): (u64, u64),
    ) -> Result<Self> {
        let best = match resume {
            true => checkpoint::read_selected(out)?.map(|s| s.validation),
            false => None,
        };
        let mut stale = Vec::new();
        if !resume {
            stale.extend(["best.json", "best.safetensors", "validation.csv"]);
        }
        for f in stale {
            let path = out.join(f);
            if path.exists() {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
            }
        }
        let log = match cfg.seeds {
            0 => None,
            _ => Some(ValidationLog::open(out, resume, iteration)?),
        };
        Ok(Selector {
            cfg: cfg.clone(),
            log,
            best,
            total,
            checkpoint_every,
        })
    }

    /// Whether the weights after `iteration` are to be validated and are not yet (a run
    /// resumed at a validation point validates there first).
    pub(super) fn pending(&self, iteration: u64) -> bool {
        let last = self.log.as_ref().and_then(ValidationLog::last_iteration);
        self.cfg.due(iteration, self.total, self.checkpoint_every) && last < Some(iteration)
    }

    /// The validation seeds.
    pub(super) fn seeds(&self) -> Vec<u64> {
        self.cfg.seed_list()
    }

    /// Logs `v`, the learner's current weights' validation, and saves those weights as the
    /// selected ones when they beat the best so far; returns whether they did. (Weights
    /// already selected at this iteration, by a run stopped before it logged them, count
    /// as selected again, as in the uninterrupted run.)
    pub(super) fn record(&mut self, out: &Path, learner: &Learner, v: Validation) -> Result<bool> {
        let again = self
            .best
            .as_ref()
            .is_some_and(|b| b.iteration == v.iteration);
        let better = again || v.beats(self.best.as_ref());
        if better {
            checkpoint::save_selected(out, learner, &v)?;
        }
        if let Some(log) = self.log.as_mut() {
            log.append(&v, better)?;
        }
        if better {
            self.best = Some(v);
        }
        Ok(better)
    }

    /// The best validation so far.
    pub(super) fn best(&self) -> Option<&Validation> {
        self.best.as_ref()
    }
}

const CSV_HEADER: &str = "iteration,env_steps,mean_delay_s,seed_delays_s,best";

/// `validation.csv`: one row per validation (per-seed delays joined by `;`), `best` 1 on
/// the rows that became the selected weights.
pub struct ValidationLog {
    w: std::io::BufWriter<std::fs::File>,
    last_iteration: Option<u64>,
}

impl ValidationLog {
    /// Opens the log in `out`: fresh, or on resume keeping the rows up to `iteration`
    /// (as `metrics.csv`).
    pub fn open(out: &Path, resume: bool, iteration: u64) -> Result<Self> {
        let (w, last_iteration) =
            checkpoint::reopen_csv(&out.join("validation.csv"), CSV_HEADER, resume, iteration)?;
        Ok(ValidationLog { w, last_iteration })
    }

    /// The iteration of the log's last row, if any.
    pub fn last_iteration(&self) -> Option<u64> {
        self.last_iteration
    }

    /// Appends `v`'s row (and flushes).
    pub fn append(&mut self, v: &Validation, best: bool) -> Result<()> {
        use std::io::Write as _;
        let seeds: Vec<String> = v.delay_s.iter().map(|d| format!("{d:.3}")).collect();
        writeln!(
            self.w,
            "{},{},{:.3},{},{}",
            v.iteration,
            v.env_steps,
            v.mean_delay_s(),
            seeds.join(";"),
            u8::from(best)
        )?;
        self.w.flush().context("writing validation.csv")?;
        self.last_iteration = Some(v.iteration);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(seeds: u32) -> ValidationConfig {
        ValidationConfig {
            seeds,
            first_seed: DEFAULT_FIRST_SEED,
        }
    }

    fn validation(iteration: u64, delay_s: &[f64]) -> Validation {
        Validation {
            iteration,
            env_steps: iteration * 100,
            seeds: (0..delay_s.len() as u64).collect(),
            delay_s: delay_s.to_vec(),
        }
    }

    #[test]
    fn the_second_half_is_validated_about_five_times_and_the_end_always() {
        let v = on(3);
        let due: Vec<u64> = (1..=93).filter(|&i| v.due(i, 93, 10)).collect();
        assert_eq!(due, vec![50, 60, 70, 80, 90, 93]);
        let due: Vec<u64> = (1..=7).filter(|&i| v.due(i, 7, 1)).collect();
        assert_eq!(due, vec![4, 5, 6, 7]);
        assert_eq!((1..=1).filter(|&i| v.due(i, 1, 1)).count(), 1);
        assert!(!v.due(0, 10, 1) && !v.due(11, 10, 1));
    }

    #[test]
    fn validations_fall_on_checkpoints() {
        let v = on(3);
        let due: Vec<u64> = (1..=93).filter(|&i| v.due(i, 93, 4)).collect();
        assert_eq!(due, vec![48, 60, 72, 84, 93]);
        // Checkpoints rarer than the run: the end only.
        let due: Vec<u64> = (1..=93).filter(|&i| v.due(i, 93, 103)).collect();
        assert_eq!(due, vec![93]);
        for (total, every) in [(93, 4), (200, 7), (31, 3), (1000, 10)] {
            for i in 1..total {
                assert!(!v.due(i, total, every) || i % every == 0, "{i} of {total}");
            }
        }
    }

    #[test]
    fn no_seeds_means_no_validation() {
        assert!((1..=100).all(|i| !on(0).due(i, 100, 1)));
        assert!(on(0).seed_list().is_empty());
        assert_eq!(on(3).seed_list(), vec![500, 501, 502]);
    }

    #[test]
    fn the_lowest_mean_delay_wins_and_ties_keep_the_earlier_weights() {
        let first = validation(50, &[20.0, 22.0]);
        assert!(first.beats(None));
        assert!(validation(60, &[19.0, 22.0]).beats(Some(&first)));
        assert!(!validation(60, &[21.0, 21.0]).beats(Some(&first)));
        assert!(!validation(60, &[23.0, 22.0]).beats(Some(&first)));
    }

    #[test]
    fn a_nan_or_empty_score_never_wins_and_never_blocks() {
        let nan = validation(50, &[f64::NAN, 20.0]);
        assert!(!nan.beats(None));
        assert!(!validation(50, &[]).beats(None));
        assert!(validation(60, &[30.0]).beats(Some(&nan)));
    }

    #[test]
    fn a_resumed_log_keeps_the_rows_up_to_the_checkpoint() {
        let dir = std::env::temp_dir().join(format!("gw-vlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut log = ValidationLog::open(&dir, false, 0).unwrap();
        log.append(&validation(50, &[20.0]), true).unwrap();
        log.append(&validation(60, &[21.0]), false).unwrap();
        let mut log = ValidationLog::open(&dir, true, 55).unwrap();
        assert_eq!(log.last_iteration(), Some(50));
        log.append(&validation(60, &[19.5]), true).unwrap();
        let text = std::fs::read_to_string(dir.join("validation.csv")).unwrap();
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(
            rows,
            vec![
                CSV_HEADER,
                "50,5000,20.000,20.000,1",
                "60,6000,19.500,19.500,1"
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
