//! The transition ring and its serial frames.
//!
//! A frame is `COBS(postcard(Transition) ‖ crc32_le(postcard(Transition))) ‖ 0x00`: postcard
//! for the record (the same bytes the transition log stores), CRC-32 (IEEE, the checksum of
//! the transition log's `[len][crc32][postcard]` records, so the host can append a verified
//! payload to a log segment without re-encoding), COBS so that `0x00` only ever ends a frame
//! and a receiver resynchronises after line noise at the next zero.

use embedded_io::{Error as _, ErrorKind, Write};
use greenwave_core::Transition;
use heapless::Deque;
use postcard::ser_flavors::{Cobs, Flavor, Slice};

use crate::{FieldTransition, OBS_CAPACITY};

/// Longest postcard encoding of a [`FieldTransition`]: timestamp (varint u64, ≤ 10),
/// signal (varint u16, ≤ 3), two observations (1 length byte + 4 per float each),
/// requested and served phase (1 each), log-prob and reward (4 each), done (1),
/// policy version (varint u32, ≤ 5), source (1).
pub const MAX_RECORD_BYTES: usize = 10 + 3 + 2 * (1 + 4 * OBS_CAPACITY) + 2 + 8 + 1 + 5 + 1;
/// Longest frame on the wire: record, CRC, COBS overhead (one byte per 254 and one more),
/// and the terminating zero.
pub const MAX_FRAME_BYTES: usize = cobs_max(MAX_RECORD_BYTES + 4) + 1;

const fn cobs_max(n: usize) -> usize {
    n + n / 254 + 1
}

const CRC32_POLY: u32 = 0xEDB8_8320;
const CRC32_NIBBLES: [u32; 16] = {
    let mut table = [0u32; 16];
    let mut i = 0;
    while i < 16 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 4 {
            c = if c & 1 != 0 {
                (c >> 1) ^ CRC32_POLY
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

fn crc32_update(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc ^= b as u32;
        crc = (crc >> 4) ^ CRC32_NIBBLES[(crc & 15) as usize];
        crc = (crc >> 4) ^ CRC32_NIBBLES[(crc & 15) as usize];
    }
    crc
}

/// CRC-32 (IEEE 802.3, as zlib and `crc32fast` compute it), with a 64-byte table.
pub fn crc32(data: &[u8]) -> u32 {
    !crc32_update(!0, data)
}

/// A postcard flavor that appends the CRC-32 of everything serialised, little-endian.
struct Crc32Append<F> {
    inner: F,
    crc: u32,
}

impl<F: Flavor> Flavor for Crc32Append<F> {
    type Output = F::Output;

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.crc = crc32_update(self.crc, &[data]);
        self.inner.try_push(data)
    }

    fn finalize(mut self) -> postcard::Result<F::Output> {
        self.inner.try_extend(&(!self.crc).to_le_bytes())?;
        self.inner.finalize()
    }
}

/// Why a frame could not be written or read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The record does not fit the frame buffer.
    #[error("transition does not fit a {MAX_FRAME_BYTES}-byte frame")]
    Encode,
    /// Nothing between two delimiters.
    #[error("empty frame")]
    Empty,
    /// The COBS encoding is broken (line noise, or a frame cut short).
    #[error("frame is not valid COBS")]
    Cobs,
    /// Too short to hold a CRC.
    #[error("frame of {bytes} bytes is too short for a record and its CRC")]
    TooShort {
        /// Decoded bytes.
        bytes: usize,
    },
    /// The CRC does not match.
    #[error("frame CRC {received:#010x} does not match the record's {computed:#010x}")]
    Crc {
        /// CRC carried by the frame.
        received: u32,
        /// CRC of the record bytes.
        computed: u32,
    },
    /// The record is not a valid postcard transition (or its observation is too long).
    #[error("frame payload is not a transition record")]
    Record,
    /// Bytes left after the record.
    #[error("{bytes} bytes follow the record in the frame")]
    TrailingBytes {
        /// How many.
        bytes: usize,
    },
    /// A frame longer than the reader's buffer (no delimiter seen in time).
    #[error("frame longer than the reader's buffer")]
    TooLong,
}

/// Encodes `t` as one frame (terminating zero included) into `buf`.
pub fn encode_frame<'a, const N: usize>(
    t: &Transition<N>,
    buf: &'a mut [u8],
) -> Result<&'a mut [u8], FrameError> {
    let cobs = Cobs::try_new(Slice::new(buf)).map_err(|_| FrameError::Encode)?;
    postcard::serialize_with_flavor(
        t,
        Crc32Append {
            inner: cobs,
            crc: !0,
        },
    )
    .map_err(|_| FrameError::Encode)
}

/// Decodes one frame, with or without its terminating zero. The buffer is decoded in place.
/// Usable from host code: decode into `Transition` (default capacity) there.
pub fn decode_frame<const N: usize>(frame: &mut [u8]) -> Result<Transition<N>, FrameError> {
    let frame = match frame.split_last_mut() {
        Some((0, body)) => body,
        _ => frame,
    };
    if frame.is_empty() {
        return Err(FrameError::Empty);
    }
    if frame.contains(&0) {
        return Err(FrameError::Cobs);
    }
    let n = cobs::decode_in_place(frame).map_err(|_| FrameError::Cobs)?;
    if n < 4 {
        return Err(FrameError::TooShort { bytes: n });
    }
    let (payload, crc_bytes) = frame[..n].split_at(n - 4);
    let received = u32::from_le_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
    let computed = crc32(payload);
    if received != computed {
        return Err(FrameError::Crc { received, computed });
    }
    let (t, rest) =
        postcard::take_from_bytes::<Transition<N>>(payload).map_err(|_| FrameError::Record)?;
    if !rest.is_empty() {
        return Err(FrameError::TrailingBytes { bytes: rest.len() });
    }
    Ok(t)
}

/// Splits a byte stream into frames and decodes them; `BUF` bounds one encoded frame
/// ([`MAX_FRAME_BYTES`] suffices for firmware frames).
#[derive(Clone, Debug, Default)]
pub struct FrameReader<const BUF: usize> {
    buf: heapless::Vec<u8, BUF>,
    overflowed: bool,
}

impl<const BUF: usize> FrameReader<BUF> {
    /// An empty reader.
    pub const fn new() -> Self {
        FrameReader {
            buf: heapless::Vec::new(),
            overflowed: false,
        }
    }

    /// Feeds one byte; at a frame's end returns its decoded record or why it was refused.
    /// Zeros between frames are ignored.
    pub fn push<const N: usize>(&mut self, byte: u8) -> Option<Result<Transition<N>, FrameError>> {
        if byte != 0 {
            if self.buf.push(byte).is_err() {
                self.overflowed = true;
            }
            return None;
        }
        let result = if core::mem::take(&mut self.overflowed) {
            Some(Err(FrameError::TooLong))
        } else if self.buf.is_empty() {
            None
        } else {
            Some(decode_frame(&mut self.buf))
        };
        self.buf.clear();
        result
    }
}

/// Why draining the ring stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DrainError {
    /// A record could not be framed (cannot happen for records the controller writes).
    #[error("a transition could not be framed")]
    Encode,
    /// The writer failed; the frame stays in the ring and is sent again next time.
    #[error("serial write failed: {0:?}")]
    Write(ErrorKind),
    /// The writer accepted zero bytes; the frame stays in the ring.
    #[error("serial writer accepted no bytes")]
    WriterStalled,
}

/// A fixed-capacity ring of transitions awaiting collection. When full, the oldest record
/// is dropped (and counted): the newest experience is the most useful for fine-tuning, and
/// the timestamps show the gap.
#[derive(Debug, Default)]
pub struct TransitionRing<const CAP: usize> {
    queue: Deque<FieldTransition, CAP>,
    dropped: u32,
    /// A frame was cut short on the wire: send a zero first so the receiver discards the
    /// partial frame before the record is sent again.
    cut_frame_pending: bool,
}

impl<const CAP: usize> TransitionRing<CAP> {
    /// An empty ring.
    pub const fn new() -> Self {
        TransitionRing {
            queue: Deque::new(),
            dropped: 0,
            cut_frame_pending: false,
        }
    }

    /// Appends `t`; returns `false` if the oldest record had to be dropped for it.
    pub fn push(&mut self, t: FieldTransition) -> bool {
        let mut kept_all = true;
        if self.queue.is_full() {
            self.queue.pop_front();
            self.dropped = self.dropped.saturating_add(1);
            kept_all = false;
        }
        // Cannot fail: a slot was freed above if the ring was full.
        let _ = self.queue.push_back(t);
        kept_all
    }

    /// Records waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no record waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Records dropped because the ring was full, since start-up.
    pub fn dropped(&self) -> u32 {
        self.dropped
    }

    /// The oldest waiting record.
    pub fn oldest(&self) -> Option<&FieldTransition> {
        self.queue.front()
    }

    /// Writes up to `max_frames` of the oldest records to `w` as frames, removing each once
    /// it is fully written. Returns the number written. A record whose frame was cut by a
    /// write error stays in the ring and is sent whole next time, after a zero that ends the
    /// cut frame at the receiver.
    pub fn drain<W: Write>(&mut self, w: &mut W, max_frames: usize) -> Result<usize, DrainError> {
        let mut buf = [0u8; MAX_FRAME_BYTES];
        let mut sent = 0;
        while sent < max_frames {
            let Some(t) = self.queue.front() else {
                break;
            };
            if self.cut_frame_pending {
                write_whole(w, &[0])?;
                self.cut_frame_pending = false;
            }
            let frame = encode_frame(t, &mut buf).map_err(|_| DrainError::Encode)?;
            if let Err(e) = write_whole(w, frame) {
                self.cut_frame_pending = true;
                return Err(e);
            }
            self.queue.pop_front();
            sent += 1;
        }
        Ok(sent)
    }
}

/// `write_all` without its panic on a writer that accepts zero bytes.
fn write_whole<W: Write>(w: &mut W, mut bytes: &[u8]) -> Result<(), DrainError> {
    while !bytes.is_empty() {
        match w.write(bytes) {
            Ok(0) => return Err(DrainError::WriterStalled),
            Ok(n) => bytes = &bytes[n.min(bytes.len())..],
            Err(e) => return Err(DrainError::Write(e.kind())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use greenwave_core::ActionSource;
    use std::vec::Vec;

    fn sample(ts: u64) -> FieldTransition {
        let obs: heapless::Vec<f32, OBS_CAPACITY> = (0..31).map(|i| i as f32 * 0.03).collect();
        Transition {
            timestamp_ms: ts,
            signal: 1,
            obs: obs.clone(),
            requested: 2,
            action: 2,
            log_prob: -0.3,
            reward: -0.8,
            next_obs: obs,
            done: false,
            policy_version: 3,
            source: ActionSource::Policy,
        }
    }

    #[test]
    fn crc_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn the_largest_record_fits_a_frame() {
        let mut t = sample(u64::MAX);
        t.signal = u16::MAX;
        t.policy_version = u32::MAX;
        t.obs = (0..OBS_CAPACITY).map(|_| f32::MAX).collect();
        t.next_obs = t.obs.clone();
        let mut raw = [0u8; 512];
        let record = postcard::to_slice(&t, &mut raw).unwrap();
        assert_eq!(record.len(), MAX_RECORD_BYTES);
        let mut buf = [0u8; MAX_FRAME_BYTES];
        let frame = encode_frame(&t, &mut buf).unwrap();
        assert!(frame.len() <= MAX_FRAME_BYTES);
        assert_eq!(frame.last(), Some(&0));
        assert_eq!(frame.iter().filter(|&&b| b == 0).count(), 1);
    }

    #[test]
    fn frames_round_trip_into_the_host_capacity() {
        let t = sample(42);
        let mut buf = [0u8; MAX_FRAME_BYTES];
        let frame = encode_frame(&t, &mut buf).unwrap();
        let back: Transition = decode_frame(frame).unwrap();
        assert_eq!(back.obs.as_slice(), t.obs.as_slice());
        assert_eq!(back.timestamp_ms, 42);
        // postcard's own COBS reader also accepts the frame (it ignores the CRC).
        let mut buf = [0u8; MAX_FRAME_BYTES];
        let frame = encode_frame(&t, &mut buf).unwrap();
        let plain: Transition = postcard::from_bytes_cobs(frame).unwrap();
        assert_eq!(plain.reward, t.reward);
    }

    #[test]
    fn corrupt_frames_are_refused_not_misread() {
        let t = sample(7);
        let mut buf = [0u8; MAX_FRAME_BYTES];
        let len = encode_frame(&t, &mut buf).unwrap().len();
        let mut flipped = buf;
        flipped[len / 2] ^= 0x10;
        if flipped[len / 2] == 0 {
            flipped[len / 2] = 0x55;
        }
        let err = decode_frame::<96>(&mut flipped[..len]).unwrap_err();
        assert!(
            matches!(err, FrameError::Crc { .. } | FrameError::Cobs),
            "{err:?}"
        );
        let mut cut = buf;
        assert!(decode_frame::<96>(&mut cut[..len / 2]).is_err());
        assert_eq!(decode_frame::<96>(&mut [0u8]), Err(FrameError::Empty));
        assert_eq!(
            decode_frame::<96>(&mut [2, 1, 1, 0]),
            Err(FrameError::TooShort { bytes: 2 })
        );
    }

    #[test]
    fn reader_resynchronises_after_noise() {
        let mut stream = Vec::new();
        stream.extend_from_slice(&[0x13, 0x37, 0x00, 0x00]);
        let mut buf = [0u8; MAX_FRAME_BYTES];
        for ts in [1, 2] {
            stream.extend_from_slice(encode_frame(&sample(ts), &mut buf).unwrap());
        }
        let mut reader = FrameReader::<MAX_FRAME_BYTES>::new();
        let results: Vec<Result<Transition, FrameError>> =
            stream.iter().filter_map(|&b| reader.push(b)).collect();
        assert_eq!(results.len(), 3);
        assert!(results[0].is_err());
        assert_eq!(results[1].as_ref().unwrap().timestamp_ms, 1);
        assert_eq!(results[2].as_ref().unwrap().timestamp_ms, 2);
        let mut small = FrameReader::<8>::new();
        let r: Vec<_> = stream[4..]
            .iter()
            .filter_map(|&b| small.push::<96>(b))
            .collect();
        assert!(r.iter().all(|x| *x == Err(FrameError::TooLong)));
    }

    /// A writer that takes at most 7 bytes per call and fails on demand.
    struct Chunky {
        out: Vec<u8>,
        fail_after: usize,
    }
    impl embedded_io::ErrorType for Chunky {
        type Error = ErrorKind;
    }
    impl Write for Chunky {
        fn write(&mut self, buf: &[u8]) -> Result<usize, ErrorKind> {
            if self.out.len() >= self.fail_after {
                return Err(ErrorKind::TimedOut);
            }
            let n = buf.len().min(7);
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> Result<(), ErrorKind> {
            Ok(())
        }
    }

    #[test]
    fn ring_drops_oldest_and_keeps_unsent_frames() {
        let mut ring = TransitionRing::<3>::new();
        for ts in 0..5 {
            ring.push(sample(ts));
        }
        assert_eq!((ring.len(), ring.dropped()), (3, 2));
        assert_eq!(ring.oldest().unwrap().timestamp_ms, 2);
        let mut w = Chunky {
            out: Vec::new(),
            fail_after: 400,
        };
        assert_eq!(
            ring.drain(&mut w, 10),
            Err(DrainError::Write(ErrorKind::TimedOut))
        );
        assert_eq!(ring.len(), 2, "the first frame went out, the second stays");
        w.fail_after = usize::MAX;
        assert_eq!(ring.drain(&mut w, 10), Ok(2));
        let mut reader = FrameReader::<MAX_FRAME_BYTES>::new();
        let got: Vec<Result<Transition, FrameError>> =
            w.out.iter().filter_map(|&b| reader.push(b)).collect();
        let ok: Vec<u64> = got
            .iter()
            .filter_map(|r| r.as_ref().ok().map(|t| t.timestamp_ms))
            .collect();
        assert_eq!(ok, [2, 3, 4], "the cut frame is refused, then resent whole");
        assert_eq!(got.len(), 4);
        assert!(got[1].is_err());
    }
}
