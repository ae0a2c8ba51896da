//! The event log a replay writes: every decision, every change of the displayed signal
//! states or the mode, the latched fault, and a closing summary — postcard records, one
//! after another, so that host and target logs compare byte for byte.

use embedded_io::Write;
use greenwave_firmware::{Decision, Lamps, Mode, MonitorFault};
use serde::{Deserialize, Serialize};

use crate::GROUPS;

/// Longest postcard encoding of an [`Event`] (the display event: tag, varint time, mode and
/// 2 × 12 × 3 lamp booleans).
pub const MAX_EVENT_BYTES: usize = 96;

/// One entry of the event log.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// A decision was taken in the poll at `uptime_ms`.
    Decision {
        /// Controller uptime, ms.
        uptime_ms: u64,
        /// What was decided.
        decision: Decision,
    },
    /// The lamps commanded or sensed, or the mode, changed in the poll at `uptime_ms`.
    Display {
        /// Controller uptime, ms.
        uptime_ms: u64,
        /// Mode after the poll.
        mode: Mode,
        /// Lamps driven, per signal group.
        commanded: [Lamps; GROUPS],
        /// Lamps read back from the field terminals, per signal group.
        sensed: [Lamps; GROUPS],
    },
    /// The monitor latched a fault.
    Fault(MonitorFault),
    /// The trace ended.
    End(Summary),
}

/// How a replay ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Polls made (one per poll record).
    pub polls: u32,
    /// Decisions taken.
    pub decisions: u32,
    /// Transition frames written to the serial port.
    pub frames: u32,
    /// Controller uptime at the end, ms.
    pub uptime_ms: u64,
    /// Time cut off at interval boundaries, ms.
    pub clock_slip_ms: u64,
    /// Transitions dropped from the ring.
    pub transitions_dropped: u32,
    /// The acting policy's version (`None`: the fixed-time program ran).
    pub policy_version: Option<u32>,
}

/// The event log could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EventLogError {
    /// The event does not fit [`MAX_EVENT_BYTES`] (cannot happen for the events above).
    #[error("event does not fit {MAX_EVENT_BYTES} bytes")]
    Encode,
    /// The sink failed.
    #[error("event sink failed: {0:?}")]
    Write(embedded_io::ErrorKind),
}

/// Writes events to `W` as postcard records.
#[derive(Debug)]
pub struct EventLog<W> {
    sink: W,
}

impl<W: Write> EventLog<W> {
    /// A log over `sink`.
    pub fn new(sink: W) -> Self {
        EventLog { sink }
    }

    /// Appends one event.
    pub fn push(&mut self, event: &Event) -> Result<(), EventLogError> {
        let mut buf = [0u8; MAX_EVENT_BYTES];
        let bytes = postcard::to_slice(event, &mut buf).map_err(|_| EventLogError::Encode)?;
        self.sink
            .write_all(bytes)
            .map_err(|e| EventLogError::Write(embedded_io::Error::kind(&e)))
    }

    /// Flushes the sink and hands it back.
    pub fn finish(mut self) -> Result<W, EventLogError> {
        self.sink
            .flush()
            .map_err(|e| EventLogError::Write(embedded_io::Error::kind(&e)))?;
        Ok(self.sink)
    }
}

/// Reads an event log back (host side), event by event; stops after the first error.
pub fn decode_events(
    mut bytes: &[u8],
) -> impl Iterator<Item = Result<Event, postcard::Error>> + '_ {
    core::iter::from_fn(move || {
        if bytes.is_empty() {
            return None;
        }
        match postcard::take_from_bytes::<Event>(bytes) {
            Ok((event, rest)) => {
                bytes = rest;
                Some(Ok(event))
            }
            Err(e) => {
                bytes = &[];
                Some(Err(e))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use greenwave_core::{ActionSource, Millis};
    use greenwave_firmware::{FaultKind, Lamps};

    #[test]
    fn the_largest_events_fit_and_decode() {
        let lamps = [Lamps {
            red: true,
            yellow: true,
            green: true,
        }; GROUPS];
        let events = [
            Event::Display {
                uptime_ms: u64::MAX,
                mode: Mode::Flash,
                commanded: lamps,
                sensed: lamps,
            },
            Event::Decision {
                uptime_ms: u64::MAX,
                decision: Decision {
                    requested: 3,
                    served: 2,
                    source: ActionSource::Supervisor,
                    log_prob: -0.25,
                },
            },
            Event::Fault(MonitorFault {
                kind: FaultKind::ShortRedClearance {
                    channel: 1,
                    next: 2,
                    shown: Millis(u32::MAX),
                    required: Millis(u32::MAX),
                },
                at_ms: u64::MAX,
            }),
            Event::End(Summary {
                polls: u32::MAX,
                decisions: u32::MAX,
                frames: u32::MAX,
                uptime_ms: u64::MAX,
                clock_slip_ms: u64::MAX,
                transitions_dropped: u32::MAX,
                policy_version: Some(u32::MAX),
            }),
        ];
        let mut log = EventLog::new(Vec::new());
        for e in &events {
            log.push(e).unwrap();
        }
        let bytes = log.finish().unwrap();
        let back: Vec<Event> = decode_events(&bytes).map(Result::unwrap).collect();
        assert_eq!(back, events.to_vec());
        assert!(decode_events(&bytes[..bytes.len() - 1])
            .last()
            .unwrap()
            .is_err());
    }
}
