//! Loop detectors: debounced presence, counts and occupancy per decision interval, and the
//! lane estimate (vehicles in storage, standing queue) the observation is built from.
//!
//! Each lane has two loops: an *entry* loop at the upstream end of the lane's storage
//! section and a *stop-bar* loop at the stop line. Vehicles in storage are counted by
//! input–output counting (entries minus departures); the queue is estimated from the signal
//! and the stop-bar loop:
//!
//! * while none of the lane's movements is green, every stored vehicle is queued;
//! * during green, the lane is queued only while the stop-bar loop has been occupied for at
//!   least `standing_queue` (a vehicle standing on the stop line: blocked or spillback);
//! * during green, a stop-bar loop empty for `empty_lane_gap` means the lane has emptied:
//!   the count is reset to zero, which bounds drift from missed or double counts.
//!
//! Counts are clamped to 1.5 × the lane's storage (the observation layout's limit).

use embedded_hal::digital::{Error as _, ErrorKind, InputPin};
use greenwave_core::{LaneReading, Millis};

use crate::board::{BoardConfig, LaneConfig, Polarity};

/// What one detector saw during one decision interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DetectorInterval {
    /// Vehicles that arrived on the loop (debounced rising edges).
    pub count: u16,
    /// Time the loop was occupied.
    pub occupied: Millis,
}

/// One loop detector input with debouncing.
///
/// Times are kept as the low 32 bits of the uptime and compared with wrapping
/// differences (RAM: 12 lanes × 2 loops on a 8 kB budget); a state held for more than
/// 49 days reads as held for (its duration mod 2³² ms), which only delays a count reset.
/// These instants stay raw `u32` (wrapping clock arithmetic); the durations taken from
/// them are [`Millis`].
#[derive(Debug)]
pub struct Detector<I> {
    pin: I,
    /// Last level read, as presence.
    raw_present: bool,
    /// Debounced presence.
    present: bool,
    raw_since_ms: u32,
    present_since_ms: u32,
    last_sample_ms: u32,
    interval: DetectorInterval,
}

impl<I: InputPin> Detector<I> {
    /// A detector that starts absent.
    pub fn new(pin: I) -> Self {
        Detector {
            pin,
            raw_present: false,
            raw_since_ms: 0,
            present: false,
            present_since_ms: 0,
            last_sample_ms: 0,
            interval: DetectorInterval::default(),
        }
    }

    /// Reads the input at uptime `now_ms`. Presence changes once the input has been stable
    /// for `debounce`; each debounced arrival counts one vehicle.
    pub fn sample(
        &mut self,
        now_ms: u64,
        polarity: Polarity,
        debounce: Millis,
    ) -> Result<(), ErrorKind> {
        let high = self.pin.is_high().map_err(|e| e.kind())?;
        let raw = polarity.is_active(high);
        let now_ms = now_ms as u32;
        if self.present {
            let since_last = now_ms.wrapping_sub(self.last_sample_ms);
            self.interval.occupied = self.interval.occupied.saturating_add(Millis(since_last));
        }
        self.last_sample_ms = now_ms;
        if raw != self.raw_present {
            self.raw_present = raw;
            self.raw_since_ms = now_ms;
        }
        if self.raw_present != self.present
            && Millis(now_ms.wrapping_sub(self.raw_since_ms)) >= debounce
        {
            self.present = self.raw_present;
            self.present_since_ms = now_ms;
            if self.present {
                self.interval.count = self.interval.count.saturating_add(1);
            }
        }
        Ok(())
    }

    /// Debounced presence.
    pub fn present(&self) -> bool {
        self.present
    }

    /// How long the debounced presence has had its current value, at uptime `now_ms`.
    pub fn unchanged_for(&self, now_ms: u64) -> Millis {
        Millis((now_ms as u32).wrapping_sub(self.present_since_ms))
    }

    /// Returns this interval's count and occupancy and starts a new interval.
    pub fn take_interval(&mut self) -> DetectorInterval {
        core::mem::take(&mut self.interval)
    }
}

/// The two loop inputs of one lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaneDetectorPins<D> {
    /// Entry loop (upstream end of the storage section).
    pub entry: D,
    /// Stop-bar loop.
    pub stop_bar: D,
}

/// What a lane reported at the end of a decision interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LaneEstimate {
    /// Density and queue as fractions of the lane's storage (the observation's input).
    pub reading: LaneReading,
    /// Estimated vehicles in storage.
    pub vehicles: u16,
    /// Estimated standing queue, vehicles.
    pub halted_veh: u16,
    /// The entry loop's interval.
    pub entry: DetectorInterval,
    /// The stop-bar loop's interval.
    pub stop_bar: DetectorInterval,
    /// A loop input failed to read during the interval: the estimate is not trustworthy.
    pub detector_fault: bool,
}

/// One incoming lane: its loops and its running vehicle count.
#[derive(Debug)]
pub struct Lane<D> {
    entry: Detector<D>,
    stop_bar: Detector<D>,
    config: LaneConfig,
    vehicles: u16,
    detector_fault: bool,
}

impl<D: InputPin> Lane<D> {
    /// A lane, empty.
    pub fn new(pins: LaneDetectorPins<D>, config: LaneConfig) -> Self {
        Lane {
            entry: Detector::new(pins.entry),
            stop_bar: Detector::new(pins.stop_bar),
            config,
            vehicles: 0,
            detector_fault: false,
        }
    }

    /// The lane's configuration.
    pub fn config(&self) -> &LaneConfig {
        &self.config
    }

    /// Time since a vehicle last left the stop-bar loop (zero while one is on it), at
    /// uptime `now_ms`: the gap actuated control extends a green on.
    pub fn stop_bar_gap(&self, now_ms: u64) -> Millis {
        if self.stop_bar.present() {
            Millis::ZERO
        } else {
            self.stop_bar.unchanged_for(now_ms)
        }
    }

    /// Samples both loops; a read failure marks the interval as faulty.
    pub fn sample<const L: usize>(&mut self, now_ms: u64, board: &BoardConfig<L>) {
        let (pol, db) = (board.detector_polarity, board.detector_debounce);
        let entry = self.entry.sample(now_ms, pol, db);
        let stop = self.stop_bar.sample(now_ms, pol, db);
        if entry.is_err() || stop.is_err() {
            self.detector_fault = true;
        }
    }

    /// Closes the decision interval: updates the vehicle count and estimates the queue.
    /// `lane_green` tells whether any of the lane's movements shows green now.
    pub fn close_interval<const L: usize>(
        &mut self,
        now_ms: u64,
        lane_green: bool,
        board: &BoardConfig<L>,
    ) -> LaneEstimate {
        let entry = self.entry.take_interval();
        let stop_bar = self.stop_bar.take_interval();
        let storage = self.config.storage_veh.max(1);
        let cap = storage.saturating_add(storage / 2);
        let mut vehicles = self
            .vehicles
            .saturating_add(entry.count)
            .saturating_sub(stop_bar.count)
            .min(cap);
        // Compared as integers: the derived `Ord` calls made this function too costly to
        // inline into the decision, adding instructions to every decision on the target.
        let stop_held = self.stop_bar.unchanged_for(now_ms).0;
        if lane_green && !self.stop_bar.present() && stop_held >= board.empty_lane_gap.0 {
            vehicles = 0;
        }
        self.vehicles = vehicles;
        let standing = self.stop_bar.present() && stop_held >= board.standing_queue.0;
        let halted_veh = if !lane_green || standing { vehicles } else { 0 };
        let fault = core::mem::take(&mut self.detector_fault);
        LaneEstimate {
            reading: LaneReading {
                density: vehicles as f32 / storage as f32,
                queue: halted_veh as f32 / storage as f32,
            },
            vehicles,
            halted_veh,
            entry,
            stop_bar,
            detector_fault: fault,
        }
    }
}
