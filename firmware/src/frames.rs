//! The transition ring and its serial frames.
//!
//! The frame format is greenwave-core's ([`greenwave_core::frames`]), re-exported here:
//! `COBS(postcard(Transition) ‖ crc32_le) ‖ 0x00`. This module adds the heapless ring the
//! controller fills and its drain over `embedded-io`.

use embedded_io::{Error as _, ErrorKind, Write};
use heapless::Deque;

pub use greenwave_core::frames::{crc32, decode_frame, encode_frame, FrameError, FrameReader};

use crate::{FieldTransition, OBS_CAPACITY};

/// Longest postcard encoding of a [`FieldTransition`].
pub const MAX_RECORD_BYTES: usize = greenwave_core::frames::max_record_bytes(OBS_CAPACITY);
/// Longest frame on the wire for a [`FieldTransition`], terminating zero included.
pub const MAX_FRAME_BYTES: usize = greenwave_core::frames::max_frame_bytes(OBS_CAPACITY);

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
    use greenwave_core::Transition;
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
            reward_kind: Some(greenwave_core::RewardKind::Queue),
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
