//! Detector traces: what the field does, poll by poll.
//!
//! A trace is the 4-byte magic `GWT1` followed by little-endian `u32` records:
//!
//! * bit 31 clear — **poll**: bits 24–30 are the milliseconds since the previous poll
//!   (0–127), bits 0–23 the 24 loop inputs (bit `2l` lane `l`'s entry loop, `2l + 1` its
//!   stop-bar loop); the replay advances the timer, sets the loops, and polls once;
//! * bit 31 set — **command**, bits 24–30 the opcode: `1` = force (bits 8–15 the signal
//!   group, bits 0–2 the lamps lit: 1 red, 2 yellow, 4 green): from the next poll on, that
//!   group's field terminals show those lamps whatever its outputs drive (a welded load
//!   switch, a crossed field wire), as its lamp-sense inputs see them.

use embedded_io::Read;
use greenwave_firmware::Lamps;

/// The first four bytes of every trace.
pub const TRACE_MAGIC: [u8; 4] = *b"GWT1";
/// Loop bits a poll record carries.
pub const LOOP_BITS: u32 = 24;
/// Longest step between two polls a record can carry, ms.
pub const MAX_POLL_STEP_MS: u8 = 127;

const COMMAND: u32 = 1 << 31;
const OP_FORCE: u32 = 1;

/// One step of the field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// Advance the timer by `dt_ms`, set the loops, poll the controller once.
    Poll {
        /// Milliseconds since the previous poll.
        dt_ms: u8,
        /// Loop inputs (bit `2l` entry, `2l + 1` stop bar of lane `l`).
        loops: u32,
    },
    /// From now on the field terminals of signal `group` show `lamps`.
    Force {
        /// The signal group.
        group: u8,
        /// The lamps lit.
        lamps: Lamps,
    },
}

/// Why a trace could not be read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// The trace does not start with [`TRACE_MAGIC`].
    #[error("not a detector trace (magic {0:02x?}, expected \"GWT1\")")]
    Magic([u8; 4]),
    /// The source failed.
    #[error("trace read failed")]
    Read,
    /// The trace ends inside a record.
    #[error("trace ends inside record {index}")]
    Truncated {
        /// Record number, from 0.
        index: u32,
    },
    /// A record with an unknown opcode or lamp.
    #[error("trace record {index} ({word:#010x}) is not a poll or a known command")]
    BadRecord {
        /// Record number, from 0.
        index: u32,
        /// The record.
        word: u32,
    },
    /// A poll step or loop set a record cannot carry.
    #[error("poll of {dt_ms} ms with loops {loops:#x} does not fit a record (≤ 127 ms, 24 loops)")]
    Unencodable {
        /// The step.
        dt_ms: u32,
        /// The loops.
        loops: u32,
    },
}

impl Record {
    /// A poll record, if `dt_ms` and `loops` fit one.
    pub fn poll(dt_ms: u32, loops: u32) -> Result<Self, TraceError> {
        if dt_ms > MAX_POLL_STEP_MS as u32 || loops >> LOOP_BITS != 0 {
            return Err(TraceError::Unencodable { dt_ms, loops });
        }
        Ok(Record::Poll {
            dt_ms: dt_ms as u8,
            loops,
        })
    }

    /// The record's word.
    pub fn encode(self) -> u32 {
        match self {
            Record::Poll { dt_ms, loops } => (dt_ms as u32) << LOOP_BITS | loops,
            Record::Force { group, lamps } => {
                let bits =
                    lamps.red as u32 | (lamps.yellow as u32) << 1 | (lamps.green as u32) << 2;
                COMMAND | OP_FORCE << 24 | (group as u32) << 8 | bits
            }
        }
    }

    /// Reads the record `word` (record number `index`, for the error).
    pub fn decode(word: u32, index: u32) -> Result<Self, TraceError> {
        if word & COMMAND == 0 {
            return Ok(Record::Poll {
                dt_ms: (word >> LOOP_BITS) as u8,
                loops: word & ((1 << LOOP_BITS) - 1),
            });
        }
        let bad = TraceError::BadRecord { index, word };
        if (word >> 24) & 0x7f != OP_FORCE || (word >> 16) & 0xff != 0 || word & 0xf8 != 0 {
            return Err(bad);
        }
        Ok(Record::Force {
            group: (word >> 8) as u8,
            lamps: Lamps {
                red: word & 1 != 0,
                yellow: word & 2 != 0,
                green: word & 4 != 0,
            },
        })
    }
}

/// Reads records from any `embedded_io::Read` (a byte slice on the host, a semihosting
/// file on the target).
#[derive(Debug)]
pub struct TraceReader<R> {
    source: R,
    index: u32,
}

impl<R: Read> TraceReader<R> {
    /// Checks the magic and positions at the first record.
    pub fn new(mut source: R) -> Result<Self, TraceError> {
        let mut magic = [0u8; 4];
        source
            .read_exact(&mut magic)
            .map_err(|_| TraceError::Read)?;
        if magic != TRACE_MAGIC {
            return Err(TraceError::Magic(magic));
        }
        Ok(TraceReader { source, index: 0 })
    }

    /// The next record, or `None` at the end of the trace.
    pub fn next_record(&mut self) -> Result<Option<Record>, TraceError> {
        let mut word = [0u8; 4];
        let mut filled = 0;
        while filled < word.len() {
            match self.source.read(&mut word[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(_) => return Err(TraceError::Read),
            }
        }
        match filled {
            0 => return Ok(None),
            4 => {}
            _ => return Err(TraceError::Truncated { index: self.index }),
        }
        let record = Record::decode(u32::from_le_bytes(word), self.index)?;
        self.index += 1;
        Ok(Some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_bad_ones_are_named() {
        let records = [
            Record::poll(10, 0x00ab_cdef).unwrap(),
            Record::poll(127, 0).unwrap(),
            Record::Force {
                group: 11,
                lamps: Lamps::GREEN,
            },
            Record::Force {
                group: 0,
                lamps: Lamps {
                    red: true,
                    yellow: true,
                    green: false,
                },
            },
        ];
        let mut bytes = TRACE_MAGIC.to_vec();
        for r in records {
            bytes.extend_from_slice(&r.encode().to_le_bytes());
        }
        let mut reader = TraceReader::new(&bytes[..]).unwrap();
        for r in records {
            assert_eq!(reader.next_record().unwrap(), Some(r));
        }
        assert_eq!(reader.next_record().unwrap(), None);
        let cut = &bytes[..bytes.len() - 1];
        let mut reader = TraceReader::new(cut).unwrap();
        let read: Vec<_> = core::iter::from_fn(|| Some(reader.next_record()))
            .take(4)
            .collect();
        assert_eq!(read[3], Err(TraceError::Truncated { index: 3 }));
        assert!(Record::poll(128, 0).is_err());
        assert!(Record::poll(1, 1 << 24).is_err());
        assert_eq!(
            Record::decode(0x8200_0000, 3),
            Err(TraceError::BadRecord {
                index: 3,
                word: 0x8200_0000
            })
        );
        assert!(Record::decode(0x8100_0008, 0).is_err(), "lamp bit 3");
        assert!(matches!(
            TraceReader::new(&b"GWT2"[..]),
            Err(TraceError::Magic(_))
        ));
    }
}
