//! Recorded detector readings: a replay file as a [`DetectorSource`], and a recorder that
//! writes one from any source.
//!
//! A replay file is JSON Lines. The first line is a header, then one line per decision
//! point:
//!
//! ```text
//! {"format":"greenwave-replay","version":1,"decision_interval_ms":5000,"signals":[{"id":"c","n_lanes":12}],"reward_kind":"WaitDelta"}
//! {"t_ms":0,"rewards":[0.0],"lanes":[[[0.1,0.0],[0.2,0.05],null, ...]]}
//! ```
//!
//! A signal's `n_lanes` counts its detector lanes ([`SignalSpec::field_lanes`]): where the
//! controller writes a program clock's lanes itself, those are not recorded, so a
//! recording replays on the junction's site with or without the clock (a simulated SUMO
//! field with its clock included: `env_signal_specs`).
//! `lanes[signal][lane]` is `[density, queue]` (fractions of lane storage), or `null` when
//! that detector did not report; `rewards[signal]` is the reward of the interval that
//! ended at this decision point (ignored on the first line), of the header's `reward_kind`
//! (absent when the recorded source could not say). Where the recorded source had
//! per-movement detectors (gaps and calls, what actuated control reads), a line also has
//! `"movements": [[{"queue_veh":2.0,"gap_s":0.5,"call":true,...}, ...] | null, ...]`, one
//! entry per signal (`null` for a signal without them); a replay then runs the actuated
//! fallback on the recorded readings.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use greenwave_core::{LaneReading, Millis, MovementDetector, RewardKind};
use serde::{Deserialize, Serialize};

use greenwave_core::sequencer::Segment;
use greenwave_core::Response;

use super::field::{DetectorError, DetectorSource, Readback, SignalSink, SinkError};
use super::SignalSpec;

const FORMAT: &str = "greenwave-replay";
const VERSION: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
    decision_interval_ms: u32,
    signals: Vec<HeaderSignal>,
    /// Which reward the `rewards` are (absent in files recorded before it was written, or
    /// from a source that could not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reward_kind: Option<RewardKind>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct HeaderSignal {
    id: String,
    n_lanes: u16,
}

/// The longest line read (a record of 64 signals of 64 lanes and movements takes well
/// under 1 MiB): a file without newlines is not read into memory whole.
const MAX_LINE_BYTES: u64 = 16 << 20;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Line {
    t_ms: u64,
    /// `null` where the field gave a non-finite reward (JSON has none): replayed as NaN,
    /// which the controller handles as it did live (that signal's transition is dropped).
    rewards: Vec<Option<f32>>,
    lanes: Vec<Vec<Option<[f32; 2]>>>,
    /// Per signal, its movements' detector readings (absent in files without any).
    #[serde(default, skip_serializing_if = "no_movements")]
    movements: Vec<Option<Vec<MovementDetector>>>,
}

fn no_movements(m: &[Option<Vec<MovementDetector>>]) -> bool {
    m.iter().all(Option::is_none)
}

/// Detector readings replayed from a file (or, with [`ReplaySource::from_reader`], any
/// reader of the same lines).
#[derive(Debug)]
pub struct ReplaySource<R = BufReader<File>> {
    path: PathBuf,
    reader: R,
    /// The last line read (the look-ahead's, once the records began).
    line_no: usize,
    /// The line of the record being replayed, which errors about it name.
    current_line: usize,
    /// The record after the current one, read ahead so the controller knows the current
    /// one is the last ([`DetectorSource::exhausted`]); or the error reading it, returned
    /// when the replay moves on to it.
    next: Result<Option<(Line, usize)>, DetectorError>,
    /// The line number of a last line cut off mid-record (no newline, not JSON): a
    /// recording whose controller was killed while writing. The replay ends before it.
    torn_tail: Option<usize>,
    interval: Millis,
    current: Line,
    reward_kind: Option<RewardKind>,
    /// Per signal, its plan's movement count: what a line's movement readings must hold.
    movements: Vec<usize>,
    /// Per signal, the detector lanes every line must hold (set from the first record).
    lanes: Vec<usize>,
}

impl ReplaySource {
    /// Opens `path` for a controller running `signals` (their count and detector lane
    /// counts, [`SignalSpec::field_lanes`], must match the header).
    pub fn open(path: &Path, signals: &[SignalSpec]) -> Result<Self, DetectorError> {
        let file = File::open(path)
            .map_err(|e| DetectorError::Source(format!("replay {}: {e}", path.display())))?;
        Self::from_reader(BufReader::new(file), path, signals)
    }
}

impl<R: BufRead> ReplaySource<R> {
    /// [`ReplaySource::open`] on the lines of `reader`; `path` names it in errors.
    pub fn from_reader(
        reader: R,
        path: &Path,
        signals: &[SignalSpec],
    ) -> Result<Self, DetectorError> {
        let mut src = ReplaySource {
            path: path.to_path_buf(),
            reader,
            line_no: 0,
            current_line: 0,
            next: Ok(None),
            torn_tail: None,
            interval: Millis::ZERO,
            current: Line {
                t_ms: 0,
                rewards: Vec::new(),
                lanes: Vec::new(),
                movements: Vec::new(),
            },
            reward_kind: None,
            movements: signals.iter().map(|s| s.plan.movements().len()).collect(),
            lanes: Vec::new(),
        };
        let header: Header = src
            .next_json()?
            .ok_or_else(|| src.err_at(1, "empty file, expected a header line"))?;
        src.current_line = src.line_no;
        if header.format != FORMAT || header.version != VERSION {
            return Err(src.err(&format!(
                "format {} v{} is not {FORMAT} v{VERSION}",
                header.format, header.version
            )));
        }
        let ids = header.signals.iter().map(|s| s.id.as_str());
        if let Some((i, (recorded, ours))) = ids
            .zip(signals.iter().map(|s| s.id.as_str()))
            .enumerate()
            .find(|(_, (r, o))| r != o)
        {
            return Err(src.err(&format!(
                "signal {i} was recorded as '{recorded}', the controller's is '{ours}'"
            )));
        }
        let lanes: Vec<u16> = header.signals.iter().map(|s| s.n_lanes).collect();
        // The detector lanes: a program clock's lanes are the controller's, never recorded.
        // Files recorded on a site with a program clock before 2026-11-29 gave the whole
        // layout's lanes in the header (with the detector readings on each line).
        let want: Vec<u16> = signals.iter().map(|s| s.field_lanes() as u16).collect();
        let layout: Vec<u16> = signals.iter().map(|s| s.layout.n_lanes).collect();
        if lanes != want && lanes != layout {
            return Err(src.err(&format!(
                "recorded for signals with {lanes:?} lanes, the controller has {want:?}"
            )));
        }
        src.interval = Millis(header.decision_interval_ms);
        src.reward_kind = header.reward_kind;
        src.current = src
            .next_json()?
            .ok_or_else(|| src.err_at(src.line_no + 1, "no decision records after the header"))?;
        src.current_line = src.line_no;
        src.check_line()?;
        // A header with the layout's lanes: the lines must still hold the detector lanes
        // (in a SUMO recording with its program clock they hold the clock's too).
        for (i, (line, &w)) in src.current.lanes.iter().zip(&want).enumerate() {
            if line.len() != usize::from(w) {
                return Err(src.err(&format!(
                    "signal {i}: {} lanes recorded, the controller's detectors are {w} \
                     (program-clock lanes recorded as detector lanes replay only where they \
                     are detector lanes)",
                    line.len()
                )));
            }
        }
        src.lanes = want.iter().map(|&w| usize::from(w)).collect();
        src.read_ahead();
        Ok(src)
    }

    /// Reads the record after the current one into `next`.
    fn read_ahead(&mut self) {
        self.next = self
            .next_json::<Line>()
            .map(|l| l.map(|l| (l, self.line_no)));
    }

    /// An error about the current record, naming its line.
    fn err(&self, problem: &str) -> DetectorError {
        self.err_at(self.current_line, problem)
    }

    fn err_at(&self, line: usize, problem: &str) -> DetectorError {
        DetectorError::Source(format!(
            "replay {} line {}: {problem}",
            self.path.display(),
            line
        ))
    }

    /// The next record, or `None` at the end of the file. A last line without its newline
    /// that is not a record is where a recording was cut off (its controller killed while
    /// writing it): the file ends before it, and [`ReplaySource::torn_tail`] says so. Any
    /// other line that is not a record is an error naming it.
    fn next_json<T: for<'de> Deserialize<'de>>(&mut self) -> Result<Option<T>, DetectorError> {
        let mut line = String::new();
        loop {
            line.clear();
            let read = (&mut self.reader)
                .take(MAX_LINE_BYTES + 1)
                .read_line(&mut line);
            let read = read.map_err(|e| self.err_at(self.line_no + 1, &e.to_string()))?;
            if read == 0 {
                return Ok(None);
            }
            self.line_no += 1;
            if read as u64 > MAX_LINE_BYTES {
                return Err(self.err_at(
                    self.line_no,
                    &format!("longer than {MAX_LINE_BYTES} bytes: not a recording's line"),
                ));
            }
            if line.trim().is_empty() {
                continue;
            }
            return match serde_json::from_str(&line) {
                Ok(v) => Ok(Some(v)),
                Err(_) if !line.ends_with('\n') && self.line_no > 1 => {
                    self.torn_tail = Some(self.line_no);
                    tracing::warn!(
                        "replay {} line {}: the last line is cut off (no newline, not a \
                         record: the recording stopped while writing it); the replay ends \
                         before it",
                        self.path.display(),
                        self.line_no
                    );
                    Ok(None)
                }
                Err(e) => Err(self.err_at(self.line_no, &e.to_string())),
            };
        }
    }

    /// The line number of a cut-off last line the replay ended before, if there was one.
    pub fn torn_tail(&self) -> Option<usize> {
        self.torn_tail
    }

    fn check_line(&self) -> Result<(), DetectorError> {
        let n_signals = self.movements.len();
        let line = &self.current;
        if line.lanes.len() != n_signals || line.rewards.len() != n_signals {
            return Err(self.err(&format!(
                "expected lanes and rewards for {n_signals} signals"
            )));
        }
        if let Some(i) = line
            .rewards
            .iter()
            .position(|r| r.is_some_and(|r| !r.is_finite()))
        {
            return Err(self.err(&format!(
                "signal {i}: reward {:?} is not finite",
                line.rewards[i]
            )));
        }
        // Every line holds the lanes the first did (checked against the controller's there).
        if let Some((i, got)) = (line.lanes.iter().map(Vec::len).zip(&self.lanes))
            .enumerate()
            .find_map(|(i, (got, &want))| (got != want).then_some((i, got)))
        {
            return Err(self.err(&format!(
                "signal {i}: {got} lanes recorded, the first record held {}",
                self.lanes[i]
            )));
        }
        if !line.movements.is_empty() && line.movements.len() != n_signals {
            return Err(self.err(&format!(
                "expected movement readings for {n_signals} signals (or none)"
            )));
        }
        for (signal, (readings, &want)) in line.movements.iter().zip(&self.movements).enumerate() {
            let Some(readings) = readings else { continue };
            if let Some(problem) = MovementDetector::check_readings(readings, want) {
                return Err(self.err(&format!("signal {signal}: {problem}")));
            }
        }
        Ok(())
    }
}

impl<R: BufRead> DetectorSource for ReplaySource<R> {
    fn read(&mut self, signal: usize, lanes: &mut [LaneReading]) -> Result<(), DetectorError> {
        let recorded = self
            .current
            .lanes
            .get(signal)
            .ok_or_else(|| self.err(&format!("no readings for signal {signal}")))?;
        if recorded.len() != lanes.len() {
            return Err(self.err(&format!(
                "signal {signal}: {} lanes recorded, {} expected",
                recorded.len(),
                lanes.len()
            )));
        }
        for (lane, (out, r)) in lanes.iter_mut().zip(recorded).enumerate() {
            let [density, queue] = r.ok_or(DetectorError::NoReport { signal, lane })?;
            *out = LaneReading { density, queue };
        }
        Ok(())
    }

    fn advance(&mut self, dt: Millis) -> Result<Option<Vec<f32>>, DetectorError> {
        if dt != self.interval {
            return Err(self.err(&format!(
                "recorded every {}, the controller decides every {dt}",
                self.interval
            )));
        }
        let next = std::mem::replace(&mut self.next, Ok(None));
        let Some((next, line)) = next? else {
            return Ok(None);
        };
        let (was, want) = (
            self.current.t_ms,
            self.current.t_ms.checked_add(dt.0.into()),
        );
        self.current = next;
        self.current_line = line;
        if Some(self.current.t_ms) != want {
            return Err(self.err(&format!(
                "t_ms goes from {was} to {}: a recording advances by its decision interval \
                 ({}) each line",
                self.current.t_ms, self.interval
            )));
        }
        self.check_line()?;
        self.read_ahead();
        let rewards = self.current.rewards.iter();
        Ok(Some(rewards.map(|r| r.unwrap_or(f32::NAN)).collect()))
    }

    /// At the last record: its readings end the last transition, and no decision follows.
    fn exhausted(&self) -> bool {
        matches!(self.next, Ok(None))
    }

    fn movement_detectors(&self, signal: usize) -> Option<Vec<MovementDetector>> {
        self.current.movements.get(signal).cloned().flatten()
    }

    fn reward_kind(&self) -> Option<RewardKind> {
        self.reward_kind
    }
}

/// Passes readings through from `inner` and records them as a replay file.
#[derive(Debug)]
pub struct ReplayRecorder<D> {
    inner: D,
    out: BufWriter<File>,
    path: PathBuf,
    line: Line,
}

impl<D: DetectorSource> ReplayRecorder<D> {
    /// Records what `inner` reads for `signals`, every `interval`, into a new file `path`.
    /// An existing file is refused, never truncated: it may be an earlier recording, or the
    /// very replay being read.
    pub fn create(
        inner: D,
        path: &Path,
        signals: &[SignalSpec],
        interval: Millis,
    ) -> Result<Self, DetectorError> {
        let io =
            |e: std::io::Error| DetectorError::Source(format!("recording {}: {e}", path.display()));
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => DetectorError::Source(format!(
                    "recording {}: it already exists; a recording never replaces a file \
                     (remove it, or record elsewhere)",
                    path.display()
                )),
                _ => io(e),
            })?;
        let mut out = BufWriter::new(file);
        let header = Header {
            format: FORMAT.into(),
            version: VERSION,
            decision_interval_ms: interval.0,
            reward_kind: inner.reward_kind(),
            signals: signals
                .iter()
                .map(|s| HeaderSignal {
                    id: s.id.clone(),
                    n_lanes: s.field_lanes() as u16,
                })
                .collect(),
        };
        serde_json::to_writer(&mut out, &header).map_err(|e| io(e.into()))?;
        out.write_all(b"\n")
            .and_then(|()| out.flush())
            .map_err(io)?;
        let n = signals.len();
        Ok(ReplayRecorder {
            inner,
            out,
            path: path.to_path_buf(),
            line: Line {
                t_ms: 0,
                rewards: vec![Some(0.0); n],
                lanes: signals
                    .iter()
                    .map(|s| vec![None; s.field_lanes()])
                    .collect(),
                movements: vec![None; n],
            },
        })
    }

    /// The wrapped source.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Writes the current line and hands it to the file: a controller stopped by a signal
    /// or killed keeps every line recorded before (at most the line being written is cut,
    /// which [`ReplaySource`] reads as the end). One write a decision interval.
    fn write_line(&mut self) -> Result<(), DetectorError> {
        let io = |e: std::io::Error| {
            DetectorError::Source(format!("recording {}: {e}", self.path.display()))
        };
        serde_json::to_writer(&mut self.out, &self.line).map_err(|e| io(e.into()))?;
        self.out
            .write_all(b"\n")
            .and_then(|()| self.out.flush())
            .map_err(io)
    }
}

impl<D: DetectorSource> DetectorSource for ReplayRecorder<D> {
    fn read(&mut self, signal: usize, lanes: &mut [LaneReading]) -> Result<(), DetectorError> {
        let result = self.inner.read(signal, lanes);
        if let Some(slot) = self.line.lanes.get_mut(signal) {
            slot.clear();
            match &result {
                // A reading the replay would refuse (not finite) is recorded as silent:
                // live, it sent the signal to its fallback, as a silent lane does.
                Ok(()) => slot.extend(lanes.iter().map(|r| {
                    let pair = [r.density, r.queue];
                    pair.iter().all(|v| v.is_finite()).then_some(pair)
                })),
                // Which lanes are good is the source's business: record the signal silent.
                Err(_) => slot.resize(lanes.len(), None),
            }
        }
        if let Some(slot) = self.line.movements.get_mut(signal) {
            // Readings the controller refused live (a NaN, a negative count) are not
            // recorded either: the replay would refuse the whole line.
            *slot = self
                .inner
                .movement_detectors(signal)
                .filter(|r| r.iter().all(|d| d.problem().is_none()));
        }
        result
    }

    fn advance(&mut self, dt: Millis) -> Result<Option<Vec<f32>>, DetectorError> {
        self.write_line()?;
        self.line.t_ms += dt.0 as u64;
        let rewards = self.inner.advance(dt)?;
        if let Some(r) = &rewards {
            self.line.rewards = r.iter().map(|&x| x.is_finite().then_some(x)).collect();
        }
        Ok(rewards)
    }

    fn movement_detectors(&self, signal: usize) -> Option<Vec<MovementDetector>> {
        self.inner.movement_detectors(signal)
    }

    fn exhausted(&self) -> bool {
        self.inner.exhausted()
    }

    fn reward_kind(&self) -> Option<RewardKind> {
        self.inner.reward_kind()
    }

    #[cfg(feature = "sim")]
    fn metrics(&self) -> Option<greenwave_sim::EpisodeMetrics> {
        self.inner.metrics()
    }

    fn finish(&mut self) -> Result<(), DetectorError> {
        self.write_line()?;
        self.out.flush().map_err(|e| {
            DetectorError::Source(format!("recording {}: {e}", self.path.display()))
        })?;
        self.inner.finish()
    }
}

/// A recorded simulator still drives its signals: outputs pass through to the inner field.
impl<D: SignalSink> SignalSink for ReplayRecorder<D> {
    fn request(
        &mut self,
        signal: usize,
        requested: u8,
        response: &Response,
    ) -> Result<(), SinkError> {
        self.inner.request(signal, requested, response)
    }

    fn show(&mut self, signal: usize, at_ms: u64, segment: &Segment) -> Result<(), SinkError> {
        self.inner.show(signal, at_ms, segment)
    }

    fn readback(&self, signal: usize) -> Option<Readback> {
        self.inner.readback(signal)
    }
}

#[cfg(test)]
mod tests {
    use greenwave_core::{ClockStage, ObsLayout, PhaseId, PhasePlan, PhaseTiming, ProgramClock};

    use super::*;

    /// single-4way's plan with 12 detector lanes, and the program clock's 4 when `clock`.
    fn spec(clock: bool) -> SignalSpec {
        let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 40, 3, 2)).unwrap();
        let stages = [0u8, 1, 2, 3].map(|phase| ClockStage {
            phase,
            duration: Millis::from_secs(15),
        });
        SignalSpec {
            id: "c".into(),
            layout: ObsLayout::for_signal(12, plan.n_phases(), clock).unwrap(),
            plan,
            initial_phase: PhaseId(0),
            program_clock: clock.then(|| ProgramClock::new(&stages, 0).unwrap()),
        }
    }

    fn file(header_lanes: u16) -> String {
        file_with(header_lanes, 12)
    }

    fn file_with(header_lanes: u16, line_lanes: usize) -> String {
        let line = |t: u64| {
            let lanes = vec!["[0.25,0.5]"; line_lanes].join(",");
            format!("{{\"t_ms\":{t},\"rewards\":[0.0],\"lanes\":[[{lanes}]]}}\n")
        };
        format!(
            "{{\"format\":\"greenwave-replay\",\"version\":1,\"decision_interval_ms\":5000,\
             \"signals\":[{{\"id\":\"c\",\"n_lanes\":{header_lanes}}}]}}\n{}{}",
            line(0),
            line(5000)
        )
    }

    /// A file of two records for signal `id`: the second at `t1_ms`, with `reward` and,
    /// where given, the movement readings `movements` (a JSON array) on both.
    fn file_of(id: &str, t1_ms: u64, reward: &str, movements: Option<&str>) -> String {
        let lanes = ["[0.25,0.5]"; 12].join(",");
        let mv = movements.map_or(String::new(), |m| format!(",\"movements\":[{m}]"));
        let line = |t: u64, r: &str| {
            format!("{{\"t_ms\":{t},\"rewards\":[{r}],\"lanes\":[[{lanes}]]{mv}}}\n")
        };
        format!(
            "{{\"format\":\"greenwave-replay\",\"version\":1,\"decision_interval_ms\":5000,\
             \"signals\":[{{\"id\":\"{id}\",\"n_lanes\":12}}]}}\n{}{}",
            line(0, "0.0"),
            line(t1_ms, reward)
        )
    }

    /// Replays `text` to its end; the first error, if any.
    fn replay_all(text: &str) -> Result<(), DetectorError> {
        let mut src =
            ReplaySource::from_reader(text.as_bytes(), Path::new("r.jsonl"), &[spec(false)])?;
        while src.advance(Millis(5000))?.is_some() {}
        Ok(())
    }

    #[test]
    fn a_recording_no_controller_could_have_written_is_refused_naming_its_line() {
        let n = spec(false).plan.movements().len();
        let reading = |d: MovementDetector| serde_json::to_string(&d).unwrap();
        let good = MovementDetector {
            gap_s: 2.0,
            ..MovementDetector::default()
        };
        let all = |d: MovementDetector| format!("[{}]", vec![reading(d); n].join(","));
        let short = format!("[{}]", vec![reading(good); n - 1].join(","));
        let negative_queue = all(MovementDetector {
            queue_veh: -1.0e30,
            ..good
        });
        assert!(replay_all(&file_of("c", 5000, "1.5", Some(&all(good)))).is_ok());
        for (text, says) in [
            (file_of("other", 5000, "0.0", None), "recorded as 'other'"),
            (file_of("c", 4000, "0.0", None), "t_ms goes from 0 to 4000"),
            (
                file_of("c", 1_239_567, "0.0", None),
                "t_ms goes from 0 to 1239567",
            ),
            (file_of("c", 5000, "1e39", None), "line 3: signal 0: reward"),
            (
                file_of("c", 5000, "0.0", Some(&short)),
                "movement readings, its plan has",
            ),
            (
                file_of("c", 5000, "0.0", Some(&negative_queue)),
                "movement 0: queue_veh",
            ),
        ] {
            let err = replay_all(&text).expect_err(says).to_string();
            assert!(err.contains(says), "{says}: {err}");
        }
    }

    /// Every line holds the lanes the first did; a line far longer than any record is
    /// not read into memory whole.
    #[test]
    fn a_damaged_later_line_or_an_endless_one_is_refused_naming_it() {
        let whole = file(12);
        let short = format!(
            "{whole}{{\"t_ms\":10000,\"rewards\":[0.0],\"lanes\":[[{}]]}}\n",
            ["[0.25,0.5]"; 11].join(",")
        );
        let e = replay_all(&short).unwrap_err().to_string();
        assert!(
            e.contains("line 4") && e.contains("11 lanes recorded, the first record held 12"),
            "{e}"
        );
        let endless = format!("{whole}{}", "x".repeat(MAX_LINE_BYTES as usize + 10));
        let e = replay_all(&endless).unwrap_err().to_string();
        assert!(e.contains("line 4") && e.contains("longer than"), "{e}");
    }

    /// A detector source that reads NaN on lane 3 and gives a NaN reward.
    struct Broken;

    impl DetectorSource for Broken {
        fn read(&mut self, _: usize, lanes: &mut [LaneReading]) -> Result<(), DetectorError> {
            lanes.fill(LaneReading {
                density: 0.25,
                queue: 0.5,
            });
            lanes[3].density = f32::NAN;
            Ok(())
        }

        fn advance(&mut self, _: Millis) -> Result<Option<Vec<f32>>, DetectorError> {
            Ok(Some(vec![f32::NAN]))
        }

        fn movement_detectors(&self, _: usize) -> Option<Vec<MovementDetector>> {
            let bad = MovementDetector {
                queue_veh: f32::NAN,
                ..MovementDetector::default()
            };
            Some(vec![bad; 12])
        }
    }

    /// What a live field gave that the replay would refuse (a NaN reading, reward or
    /// movement reading) is recorded so that the recording replays: a NaN lane as silent,
    /// a NaN reward as `null` (replayed as NaN, which the controller drops as it did
    /// live), bad movement readings not at all.
    #[test]
    fn a_recording_of_readings_the_controller_refused_still_replays() {
        let dir = std::env::temp_dir().join(format!("gw-rec-nan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.jsonl");
        let mut rec = ReplayRecorder::create(Broken, &path, &[spec(false)], Millis(5000)).unwrap();
        let mut lanes = [LaneReading::default(); 12];
        for _ in 0..2 {
            rec.read(0, &mut lanes).unwrap();
            rec.advance(Millis(5000)).unwrap();
        }
        rec.read(0, &mut lanes).unwrap();
        rec.finish().unwrap();
        drop(rec);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut src =
            ReplaySource::from_reader(text.as_bytes(), Path::new("r"), &[spec(false)]).unwrap();
        assert!(src.read(0, &mut lanes).is_err(), "lane 3 silent");
        assert_eq!(src.movement_detectors(0), None);
        let rewards = src.advance(Millis(5000)).unwrap().unwrap();
        assert!(rewards[0].is_nan(), "{rewards:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn detector_lanes_replay_with_or_without_the_clock_and_old_clocked_files_still_do() {
        let path = Path::new("r.jsonl");
        // The header of today's files counts the 12 detector lanes; files recorded on a
        // clocked site before gave the layout's 16.
        for (header, clock, opens) in [
            (12, false, true),
            (12, true, true),
            (16, true, true),
            (16, false, false),
            (11, true, false),
        ] {
            let text = file(header);
            let src = ReplaySource::from_reader(text.as_bytes(), path, &[spec(clock)]);
            assert_eq!(src.is_ok(), opens, "header {header}, clock {clock}");
            let Ok(mut src) = src else { continue };
            let mut lanes = [LaneReading::default(); 12];
            src.read(0, &mut lanes).unwrap();
            assert_eq!(
                lanes[11],
                LaneReading {
                    density: 0.25,
                    queue: 0.5
                }
            );
            assert_eq!(src.advance(Millis(5000)).unwrap(), Some(vec![0.0]));
            assert_eq!(src.advance(Millis(5000)).unwrap(), None);
        }
        // A SUMO recording with its clock's lanes as detector lanes (16 on each line) is
        // refused on a clocked site as it opens, saying why.
        let text = file_with(16, 16);
        let e = ReplaySource::from_reader(text.as_bytes(), path, &[spec(true)]).unwrap_err();
        assert!(e.to_string().contains("16 lanes recorded"), "{e}");
    }

    /// Every line a recorder has written is in its file at once, not only when it
    /// finishes: a controller killed mid-run leaves a recording that replays to the kill.
    #[test]
    fn a_recording_holds_every_line_while_it_is_written() {
        let dir = std::env::temp_dir().join(format!("gw-rec-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.jsonl");
        let text = file(12);
        let src =
            ReplaySource::from_reader(text.as_bytes(), Path::new("in"), &[spec(false)]).unwrap();
        let mut rec = ReplayRecorder::create(src, &path, &[spec(false)], Millis(5000)).unwrap();
        let lines = || std::fs::read_to_string(&path).unwrap().lines().count();
        assert_eq!(lines(), 1, "the header");
        let mut lanes = [LaneReading::default(); 12];
        rec.read(0, &mut lanes).unwrap();
        rec.advance(Millis(5000)).unwrap();
        assert_eq!(lines(), 2, "the first decision point's line");
        std::mem::forget(rec);
        let recorded = std::fs::read_to_string(&path).unwrap();
        assert!(recorded.ends_with('\n'), "{recorded}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A recording cut off while writing its last line (the controller killed) replays up
    /// to that line, saying where it was cut; the same damage before the end, or a last
    /// line whose newline was written, is an error naming the line. The source says when
    /// its current record is the last (read one ahead), so no decision is taken on it.
    #[test]
    fn a_recording_cut_off_mid_line_replays_up_to_the_cut() {
        fn open(text: &str) -> Result<ReplaySource<&[u8]>, DetectorError> {
            ReplaySource::from_reader(text.as_bytes(), Path::new("r.jsonl"), &[spec(false)])
        }
        let whole = file(12);
        let cut = format!("{whole}{{\"t_ms\":10000,\"rewards\":[0.0],\"lanes\":[[[0.2");
        let mut src = open(&cut).unwrap();
        assert!(!src.exhausted());
        assert_eq!(src.advance(Millis(5000)).unwrap(), Some(vec![0.0]));
        assert!(src.exhausted());
        assert_eq!(src.torn_tail(), Some(4));
        assert_eq!(src.advance(Millis(5000)).unwrap(), None);
        // A whole file has no cut, and neither does one whose last record lacks only the
        // newline (written by hand).
        for text in [whole.as_str(), whole.trim_end()] {
            let mut src = open(text).unwrap();
            assert!(!src.exhausted());
            assert_eq!(src.advance(Millis(5000)).unwrap(), Some(vec![0.0]));
            assert!(src.exhausted());
            assert_eq!(src.advance(Millis(5000)).unwrap(), None);
            assert_eq!(src.torn_tail(), None);
        }
        let third = whole.lines().nth(2).unwrap();
        for damaged in [format!("{cut}\n"), format!("{cut}\n{third}\n")] {
            let mut src = open(&damaged).unwrap();
            assert_eq!(src.advance(Millis(5000)).unwrap(), Some(vec![0.0]));
            assert!(!src.exhausted(), "the damaged line is not the end");
            let e = src.advance(Millis(5000)).unwrap_err().to_string();
            assert!(e.contains("line 4"), "{e}");
        }
    }
}
