//! Rollback by itself: after a policy switch the controller watches live detector KPIs and
//! switches back to the previous version on a significant regression.
//!
//! Two KPIs, from the detectors every decision interval, averaged over all signals' lanes:
//! **queue** (halted vehicles / lane storage) and a **wait proxy** (vehicles present /
//! lane storage: by Little's law, vehicles present integrate to the time they spend at the
//! junction). Per-interval values are averaged into batches of `batch` controller time
//! (5 min by default), which removes most of the autocorrelation of neighbouring
//! intervals. The controller keeps the last `window` of batch means at all times; at a
//! switch, those are the previous version's **comparable period** (the window right
//! before the switch). When the new version has run one full `window`, each KPI's batch
//! means after the switch are compared with those before by a one-sided exact
//! permutation test of the difference of means (all splits of the pooled batches, or
//! 4096 random ones when there are more); the version is rolled back if, for either KPI
//! (Bonferroni: `alpha / 2` each), `p < alpha / 2` **and** the mean rose by at least
//! `min_relative_increase`. One test per switch, at the end of the window: no repeated
//! peeking, so `alpha` is the false-rollback rate under unchanged traffic.
//!
//! A version that ran on the fallback for more than half of its watched decisions (its
//! inferences faulting, say) is rolled back too, whatever the KPIs: what the watch measured
//! was the fallback's traffic, not the version's, and keeping it would record a version as
//! judged that was never seen deciding.

use greenwave_core::{LaneReading, Millis};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::Serialize;

/// Settings of the automatic rollback.
#[derive(Clone, Debug, PartialEq)]
pub struct RollbackConfig {
    /// Watch switched-in versions and roll back on a regression (on by default).
    pub enabled: bool,
    /// Controller time after a switch before the test, and the length of the comparable
    /// period before it.
    pub window: Millis,
    /// Length of one batch (the test's unit).
    pub batch: Millis,
    /// Significance level of the test over both KPIs (one-sided).
    pub alpha: f64,
    /// Smallest relative rise of a KPI's mean that counts as a regression.
    pub min_relative_increase: f64,
}

impl Default for RollbackConfig {
    fn default() -> Self {
        RollbackConfig {
            enabled: true,
            window: Millis::from_secs(1800),
            batch: Millis::from_secs(300),
            alpha: 0.05,
            min_relative_increase: 0.05,
        }
    }
}

/// Why a [`RollbackConfig`] cannot watch.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RollbackConfigError {
    /// A batch zero long.
    #[error("a rollback batch must be longer than 0 (the window is {window})")]
    EmptyBatch {
        /// The window.
        window: Millis,
    },
    /// With so few batches on each side (fewer than two, or too few for the exact test's
    /// smallest p-value to fall below `alpha / 2`) no regression, however large, could be
    /// rolled back.
    #[error(
        "a rollback window of {window} in batches of {batch} compares {per_side} batches on \
         each side of a switch, whose exact test cannot give a p-value below 1/{splits} = \
         {smallest_p:.3}: no regression could be rolled back at alpha/2 = {each:.3}; the \
         watch needs {needed} batches a side (a batch of at most {longest_batch})"
    )]
    CannotReject {
        /// The window.
        window: Millis,
        /// The batch.
        batch: Millis,
        /// Batches on each side of a switch.
        per_side: usize,
        /// Splits of the pooled batches (the exact test's denominator).
        splits: u64,
        /// The smallest p-value the test can give.
        smallest_p: f64,
        /// The level each KPI is tested at.
        each: f64,
        /// The fewest batches a side that can reject at that level.
        needed: usize,
        /// The longest batch giving that many in the window.
        longest_batch: Millis,
    },
    /// `alpha` outside (0, 1), or `min_relative_increase` negative or not a number.
    #[error("rollback watch: {0}")]
    Level(String),
}

impl RollbackConfig {
    /// Batches on each side of a switch: the window's whole batches (at least two).
    pub fn batches_per_side(&self) -> usize {
        (self.window.0 / self.batch.0.max(1)).max(2) as usize
    }

    /// Whether the watch can work at all: a window of at least two batches, levels in
    /// range, and enough batches a side for the exact permutation test to reach a p-value
    /// below `alpha / 2` (the smallest it gives is 1 / C(2k, k): 1/6 with two batches a
    /// side, 1/20 with three, 1/70 with four). A disabled watch is not checked.
    pub fn check(&self) -> Result<(), RollbackConfigError> {
        if !self.enabled {
            return Ok(());
        }
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return Err(RollbackConfigError::Level(format!(
                "alpha {} is not between 0 and 1",
                self.alpha
            )));
        }
        if self.min_relative_increase.is_nan() || self.min_relative_increase < 0.0 {
            return Err(RollbackConfigError::Level(format!(
                "the smallest relative rise {} is not a number of at least 0",
                self.min_relative_increase
            )));
        }
        if self.batch.0 == 0 {
            return Err(RollbackConfigError::EmptyBatch {
                window: self.window,
            });
        }
        let each = self.alpha / 2.0;
        let per_side = (self.window.0 / self.batch.0) as usize;
        let splits = exact_splits(per_side);
        if per_side < 2 || splits.is_some_and(|n| 1.0 / n as f64 >= each) {
            let needed = (per_side.max(2)..)
                .find(|&k| exact_splits(k).is_none_or(|n| 1.0 / (n as f64) < each))
                .unwrap_or(per_side);
            return Err(RollbackConfigError::CannotReject {
                window: self.window,
                batch: self.batch,
                per_side,
                splits: splits.unwrap_or(0),
                smallest_p: 1.0 / splits.unwrap_or(1) as f64,
                each,
                needed,
                longest_batch: Millis(self.window.0 / needed as u32),
            });
        }
        Ok(())
    }
}

/// C(2k, k), the exact test's number of splits with `k` batches a side; `None` past the
/// 4096 the exact test enumerates (the random splits then can give any p-value).
fn exact_splits(k: usize) -> Option<u64> {
    split_count(2 * k, k)
}

/// C(n, k), or `None` when there are more than the 4096 the exact test enumerates.
fn split_count(n: usize, k: usize) -> Option<u64> {
    let mut count = 1u128;
    for i in 0..k.min(n) {
        count = count * (n - i) as u128 / (i + 1) as u128;
        if count > 4096 {
            return None;
        }
    }
    Some(count as u64)
}

/// The KPIs of one batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct KpiBatch {
    /// Mean queue (halted / storage) over lanes and intervals.
    pub queue: f64,
    /// Mean vehicles present (density) over lanes and intervals.
    pub wait_proxy: f64,
}

/// The evidence for one KPI.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KpiTest {
    /// Which KPI.
    pub kpi: &'static str,
    /// Batch means before the switch.
    pub before: Vec<f64>,
    /// Batch means after it.
    pub after: Vec<f64>,
    /// Relative change of the mean (after / before − 1); infinite (`null` in JSON) when
    /// the mean before was 0 and the mean after is not, or either is not a number.
    pub relative_change: f64,
    /// One-sided permutation p-value of "after is higher".
    pub p_value: f64,
}

/// What the watch concluded about a switched-in version.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RollbackEvent {
    /// Controller time of the verdict (ms).
    pub at_ms: u64,
    /// Controller time of the switch (ms).
    pub switched_at_ms: u64,
    /// The watched version.
    pub from_version: u32,
    /// The version before it.
    pub to_version: u32,
    /// Whether it was rolled back (else kept).
    pub rolled_back: bool,
    /// The tests.
    pub evidence: Vec<KpiTest>,
    /// The share of the watched decisions the version took itself (the rest were the
    /// fallback's); below [`MIN_POLICY_SHARE`] the version is rolled back.
    pub policy_share: f64,
}

/// The least share of its watched decisions a version must take itself to be judged by
/// the KPIs (see the module docs).
pub const MIN_POLICY_SHARE: f64 = 0.5;

/// Collects batches and runs the test.
#[derive(Clone, Debug)]
pub(crate) struct RegressionWatch {
    cfg: RollbackConfig,
    sum: KpiBatch,
    intervals: u64,
    batch_start_ms: u64,
    history: Vec<KpiBatch>,
    watching: Option<Watched>,
}

#[derive(Clone, Debug)]
struct Watched {
    switched_at_ms: u64,
    from_version: u32,
    to_version: u32,
    before: Vec<KpiBatch>,
    after: Vec<KpiBatch>,
    /// Decisions since the switch, and those the watched version took.
    decisions: u64,
    by_policy: u64,
}

impl RegressionWatch {
    pub(crate) fn new(cfg: RollbackConfig) -> Self {
        RegressionWatch {
            cfg,
            sum: KpiBatch::default(),
            intervals: 0,
            batch_start_ms: 0,
            history: Vec::new(),
            watching: None,
        }
    }

    /// One decision interval's readings (all signals' lanes observed in it).
    pub(crate) fn record(&mut self, lanes: &[&[LaneReading]]) {
        let n: usize = lanes.iter().map(|l| l.len()).sum();
        if n == 0 {
            return;
        }
        let mean = |f: fn(&LaneReading) -> f32| {
            lanes
                .iter()
                .flat_map(|l| l.iter())
                .map(|r| f(r) as f64)
                .sum::<f64>()
                / n as f64
        };
        self.sum.queue += mean(|r| r.queue);
        self.sum.wait_proxy += mean(|r| r.density);
        self.intervals += 1;
    }

    /// Counts one interval's `decisions`, `by_policy` of them the running version's own
    /// (the rest the fallback's), towards the watched version's share.
    pub(crate) fn record_decisions(&mut self, decisions: u64, by_policy: u64) {
        if let Some(w) = &mut self.watching {
            w.decisions += decisions;
            w.by_policy += by_policy;
        }
    }

    /// Closes a batch when `now_ms` reaches its end; returns a verdict when the watched
    /// window is complete.
    pub(crate) fn tick(&mut self, now_ms: u64) -> Option<RollbackEvent> {
        if now_ms < self.batch_start_ms + self.cfg.batch.0 as u64 {
            return None;
        }
        self.batch_start_ms = now_ms;
        if self.intervals == 0 {
            return None;
        }
        let k = self.intervals as f64;
        let b = KpiBatch {
            queue: self.sum.queue / k,
            wait_proxy: self.sum.wait_proxy / k,
        };
        (self.sum, self.intervals) = (KpiBatch::default(), 0);
        let keep = self.cfg.batches_per_side();
        self.history.push(b);
        if self.history.len() > keep {
            self.history.remove(0);
        }
        let w = self.watching.as_mut()?;
        w.after.push(b);
        if w.after.len() < keep {
            return None;
        }
        let w = self.watching.take()?;
        Some(self.verdict(w, now_ms))
    }

    /// Whether a switch now would be watched: enabled, no watch in progress, and a whole
    /// window of batches of the running version to compare with (the comparable period as
    /// long as the one after).
    pub(crate) fn ready(&self) -> bool {
        self.cfg.enabled
            && self.watching.is_none()
            && self.history.len() >= self.cfg.batches_per_side()
    }

    /// Forgets every batch and any watch in progress, starting afresh at `now_ms`: the
    /// KPIs recorded so far were another version's (after a rollback, or a switch not
    /// watched), and a later switch must be compared with the version that runs now.
    pub(crate) fn forget(&mut self, now_ms: u64) {
        (self.sum, self.intervals, self.batch_start_ms) = (KpiBatch::default(), 0, now_ms);
        self.history.clear();
        self.watching = None;
    }

    /// Starts watching a switch from `to_version` (the previous) to `from_version`.
    /// Returns `false` (not watched) unless [`ready`](Self::ready); then the KPIs so far
    /// (the previous version's, or a mix) are forgotten, and any watch in progress ends
    /// without a verdict.
    pub(crate) fn start(&mut self, now_ms: u64, from_version: u32, to_version: u32) -> bool {
        if !self.ready() {
            self.forget(now_ms);
            return false;
        }
        // The batch in progress mixes versions: start a fresh one at the switch.
        (self.sum, self.intervals, self.batch_start_ms) = (KpiBatch::default(), 0, now_ms);
        self.watching = Some(Watched {
            switched_at_ms: now_ms,
            from_version,
            to_version,
            before: self.history.clone(),
            after: Vec::new(),
            decisions: 0,
            by_policy: 0,
        });
        true
    }

    fn verdict(&self, w: Watched, now_ms: u64) -> RollbackEvent {
        let each = self.cfg.alpha / 2.0;
        let kpis: [(&'static str, KpiOf); 2] =
            [("queue", |b| b.queue), ("wait proxy", |b| b.wait_proxy)];
        let evidence: Vec<KpiTest> = kpis
            .iter()
            .map(|(name, f)| {
                let before: Vec<f64> = w.before.iter().map(f).collect();
                let after: Vec<f64> = w.after.iter().map(f).collect();
                let (mb, ma) = (mean(&before), mean(&after));
                KpiTest {
                    kpi: name,
                    relative_change: relative_change(mb, ma),
                    p_value: permutation_p(&before, &after),
                    before,
                    after,
                }
            })
            .collect();
        let policy_share = if w.decisions == 0 {
            1.0
        } else {
            w.by_policy as f64 / w.decisions as f64
        };
        let rolled_back = policy_share < MIN_POLICY_SHARE
            || evidence
                .iter()
                .any(|t| t.p_value < each && t.relative_change >= self.cfg.min_relative_increase);
        RollbackEvent {
            at_ms: now_ms,
            switched_at_ms: w.switched_at_ms,
            from_version: w.from_version,
            to_version: w.to_version,
            rolled_back,
            evidence,
            policy_share,
        }
    }
}

/// `after / before − 1`: any rise from an empty junction (mean 0) is infinitely large, so
/// that a version that queues vehicles where there were none is not kept for dividing by 0;
/// so is a mean that is not a number, so that it is not kept for comparing false.
fn relative_change(before: f64, after: f64) -> f64 {
    if !(before.is_finite() && after.is_finite()) {
        return f64::INFINITY;
    }
    match (before > 0.0, after > before) {
        (true, _) => after / before - 1.0,
        (false, true) => f64::INFINITY,
        (false, false) => 0.0,
    }
}

/// Reads one KPI of a batch.
type KpiOf = fn(&KpiBatch) -> f64;

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// One-sided permutation p-value of `mean(after) − mean(before)` being this large: exact
/// over all splits when there are at most 4096, else 4096 random ones (fixed seed).
pub(crate) fn permutation_p(before: &[f64], after: &[f64]) -> f64 {
    let pooled: Vec<f64> = before.iter().chain(after).copied().collect();
    let (n, k) = (pooled.len(), after.len());
    let observed = mean(after) - mean(before);
    let total: f64 = pooled.iter().sum();
    let stat = |sel_sum: f64| sel_sum / k as f64 - (total - sel_sum) / (n - k) as f64;
    let tol = 1e-12 * (1.0 + observed.abs());
    let mut splits = combinations(n, k);
    if splits.as_ref().is_none_or(|s| s.len() > 4096) {
        let mut rng = StdRng::seed_from_u64(0x0b5e);
        let mut idx: Vec<usize> = (0..n).collect();
        splits = Some(
            (0..4096)
                .map(|_| {
                    idx.shuffle(&mut rng);
                    idx[..k].to_vec()
                })
                .collect(),
        );
    }
    let splits = splits.unwrap_or_default();
    let hits = splits
        .iter()
        .filter(|s| stat(s.iter().map(|&i| pooled[i]).sum()) >= observed - tol)
        .count();
    (hits as f64) / splits.len().max(1) as f64
}

/// Every `k`-subset of `0..n`, or `None` when there are more than 4096.
fn combinations(n: usize, k: usize) -> Option<Vec<Vec<usize>>> {
    split_count(n, k)?;
    let mut out = Vec::new();
    let mut cur: Vec<usize> = (0..k).collect();
    loop {
        out.push(cur.clone());
        let Some(i) = (0..k).rev().find(|&i| cur[i] < n - k + i) else {
            return Some(out);
        };
        cur[i] += 1;
        let base = cur[i];
        for (off, c) in cur[i + 1..].iter_mut().enumerate() {
            *c = base + off + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 60 s window of 10 s batches (six a side).
    fn small_window() -> RollbackConfig {
        RollbackConfig {
            window: Millis::from_secs(60),
            batch: Millis::from_secs(10),
            ..Default::default()
        }
    }

    #[test]
    fn permutation_test_is_exact_and_one_sided() {
        // Six after all above six before: only 1 split of 924 is as extreme.
        let before = [1.0, 1.1, 0.9, 1.0, 1.05, 0.95];
        let after = [2.0, 2.1, 1.9, 2.0, 2.05, 1.95];
        let p = permutation_p(&before, &after);
        assert!((p - 1.0 / 924.0).abs() < 1e-9, "{p}");
        // The other direction is not significant.
        assert!(permutation_p(&after, &before) > 0.99);
        assert_eq!(combinations(4, 2).unwrap().len(), 6);
    }

    #[test]
    fn a_window_of_higher_queues_rolls_back_and_equal_ones_do_not() {
        let cfg = small_window();
        let run = |after_queue: f32| {
            let mut w = RegressionWatch::new(cfg.clone());
            let mut t = 0;
            let mut verdict = None;
            for i in 0..120u64 {
                let q = if w.watching.is_some() {
                    after_queue
                } else {
                    0.2
                };
                let wobble = 0.01 * ((i * 7 % 5) as f32);
                let lane = [LaneReading {
                    queue: q + wobble,
                    density: 0.3,
                }];
                w.record(&[&lane]);
                t += 5000;
                if let Some(v) = w.tick(t) {
                    verdict = Some(v);
                    break;
                }
                if i == 60 {
                    assert!(w.start(t, 2, 1));
                }
            }
            verdict.expect("a verdict within the window")
        };
        let bad = run(0.4);
        assert_eq!(bad.evidence[0].before.len(), 6, "a whole window before");
        assert!(bad.rolled_back, "{bad:?}");
        assert!(bad.at_ms - bad.switched_at_ms <= 60_000 + 10_000);
        assert!(!run(0.2).rolled_back);
    }

    /// A version that left most of its watched decisions to the fallback is rolled back
    /// though its KPIs did not rise (they were the fallback's); one that decided is kept.
    #[test]
    fn a_version_that_ran_on_the_fallback_is_rolled_back() {
        let verdict = |own_share_of_ten: u64| {
            let mut w = RegressionWatch::new(RollbackConfig::default());
            for i in 1..=100_000u64 {
                let lane = [LaneReading {
                    queue: 0.2 + 0.01 * ((i * 7 % 5) as f32),
                    density: 0.3,
                }];
                w.record(&[&lane]);
                w.record_decisions(1, u64::from(i % 10 < own_share_of_ten));
                if let Some(v) = w.tick(i * 1000) {
                    return v;
                }
                if w.watching.is_none() && w.ready() {
                    assert!(w.start(i * 1000, 2, 1));
                }
            }
            panic!("no verdict");
        };
        let faulting = verdict(3);
        assert!(faulting.rolled_back, "{faulting:?}");
        assert!((faulting.policy_share - 0.3).abs() < 0.01, "{faulting:?}");
        let deciding = verdict(9);
        assert!(!deciding.rolled_back, "{deciding:?}");
    }

    /// Runs `cfg`'s watch on 1 s intervals: queues of about 0.2 until the watch is ready,
    /// a switch, then about 0.6 (three times as high) until its verdict.
    fn verdict_on_a_clear_regression(cfg: &RollbackConfig) -> RollbackEvent {
        let mut w = RegressionWatch::new(cfg.clone());
        for i in 1..=10_000u64 {
            let q = if w.watching.is_some() { 0.6 } else { 0.2 };
            let lane = [LaneReading {
                queue: q + 0.01 * ((i * 7 % 5) as f32),
                density: 0.3,
            }];
            w.record(&[&lane]);
            if let Some(v) = w.tick(i * 1000) {
                return v;
            }
            if w.watching.is_none() && w.ready() {
                assert!(w.start(i * 1000, 2, 1));
            }
        }
        panic!("no verdict for {cfg:?}");
    }

    #[test]
    fn the_watch_needs_four_batches_a_side_at_the_default_level() {
        let with = |window, batch| RollbackConfig {
            window: Millis::from_secs(window),
            batch: Millis::from_secs(batch),
            ..Default::default()
        };
        assert!(RollbackConfig::default().check().is_ok());
        for (window, batch, per_side) in [(600, 300, 2), (1800, 600, 3), (1800, 900, 2)] {
            match with(window, batch).check() {
                Err(RollbackConfigError::CannotReject {
                    per_side: k,
                    needed,
                    longest_batch,
                    ..
                }) => {
                    assert_eq!((k, needed), (per_side, 4));
                    assert_eq!(longest_batch, Millis::from_secs(window / 4));
                }
                other => panic!("{window}/{batch}: {other:?}"),
            }
        }
        assert!(with(1200, 300).check().is_ok());
        for (window, batch, per_side) in [(600, 301, 1), (600, 700, 0)] {
            match with(window, batch).check() {
                Err(RollbackConfigError::CannotReject {
                    per_side: k,
                    needed: 4,
                    ..
                }) => assert_eq!(k, per_side),
                other => panic!("{window}/{batch}: {other:?}"),
            }
        }
        let empty = RollbackConfig {
            batch: Millis::ZERO,
            ..Default::default()
        };
        assert!(matches!(
            empty.check(),
            Err(RollbackConfigError::EmptyBatch { .. })
        ));
        let off = RollbackConfig {
            enabled: false,
            ..with(600, 300)
        };
        assert!(off.check().is_ok(), "a disabled watch is not checked");
        for alpha in [0.0, 1.0, f64::NAN] {
            assert!(RollbackConfig {
                alpha,
                ..Default::default()
            }
            .check()
            .is_err());
        }
        let rise = f64::NAN;
        let bad = RollbackConfig {
            min_relative_increase: rise,
            ..Default::default()
        };
        assert!(bad.check().is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// The check passes exactly the settings under which a clear regression (queues
        /// three times as high after the switch) is rolled back.
        #[test]
        fn the_check_passes_the_settings_that_can_roll_back(
            batch_s in 2u32..=30,
            per_side in 2u32..=9,
            extra_s in 0u32..2,
            alpha in proptest::sample::select(vec![0.02, 0.05, 0.1, 0.2]),
        ) {
            let cfg = RollbackConfig {
                window: Millis::from_secs(batch_s * per_side + extra_s.min(batch_s - 1)),
                batch: Millis::from_secs(batch_s),
                alpha,
                ..Default::default()
            };
            let v = verdict_on_a_clear_regression(&cfg);
            proptest::prop_assert_eq!(v.rolled_back, cfg.check().is_ok(), "{:?}: {:?}", cfg, v);
        }
    }

    /// Queues where there were none are a regression, however small (the relative
    /// change used to be forced to 0 when the mean before was 0).
    #[test]
    fn queues_where_there_were_none_roll_back() {
        assert_eq!(relative_change(0.0, 0.0), 0.0);
        assert_eq!(relative_change(f64::NAN, 0.1), f64::INFINITY);
        assert_eq!(relative_change(0.1, f64::NAN), f64::INFINITY);
        assert_eq!(relative_change(0.0, 0.1), f64::INFINITY);
        assert!((relative_change(0.2, 0.3) - 0.5).abs() < 1e-12);
        let cfg = small_window();
        let mut w = RegressionWatch::new(cfg);
        let mut verdict = None;
        for i in 1..=30u64 {
            if i == 13 {
                assert!(w.start((i - 1) * 5000, 2, 1));
            }
            let q = if w.watching.is_some() { 0.05 } else { 0.0 };
            let lane = [LaneReading {
                queue: q,
                density: 0.0,
            }];
            w.record(&[&lane]);
            verdict = verdict.or(w.tick(i * 5000));
        }
        let v = verdict.expect("a verdict");
        assert!(v.rolled_back, "{v:?}");
        assert_eq!(v.evidence[0].relative_change, f64::INFINITY);
        let json = serde_json::to_string(&v).unwrap();
        assert!(json.contains("\"relative_change\":null"), "{json}");
    }

    #[test]
    fn a_switch_is_watched_only_with_a_whole_window_of_history_before_it() {
        let cfg = small_window();
        let mut w = RegressionWatch::new(cfg.clone());
        let lane = [LaneReading {
            queue: 0.2,
            density: 0.3,
        }];
        for i in 1..=12u64 {
            assert!(!w.ready(), "ready after {i} intervals");
            w.record(&[&lane]);
            w.tick(i * 5000);
        }
        assert!(w.ready(), "six 10 s batches: the 60 s window");
        assert!(w.start(60_000, 2, 1));
        assert!(!w.ready(), "a watch in progress");
        // A switch during the watch ends it unwatched and forgets the mixed KPIs.
        assert!(!w.start(65_000, 3, 2));
        assert!(w.watching.is_none() && w.history.is_empty());
        for i in 14..=25u64 {
            assert!(!w.ready(), "a whole window of the new version first");
            w.record(&[&lane]);
            w.tick(i * 5000);
        }
        assert!(w.ready());
        let mut off = RegressionWatch::new(RollbackConfig {
            enabled: false,
            ..cfg
        });
        for i in 1..=24u64 {
            off.record(&[&lane]);
            off.tick(i * 5000);
        }
        assert!(!off.ready() && !off.start(120_000, 2, 1), "disabled");
    }
}
