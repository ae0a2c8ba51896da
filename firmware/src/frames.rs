//! The transition ring and its serial frames.
//!
//! The frame format is greenwave-core's ([`greenwave_core::frames`]), re-exported here:
//! `COBS(postcard(Transition) ‖ crc32_le) ‖ 0x00`. This module adds the heapless ring the
//! controller fills and its drain over `embedded-io`. The ring holds the frames already
//! encoded, so a record takes the bytes its observation needs, not the capacity's, and the
//! drain only copies bytes out.

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
    /// The writer failed; the frame stays in the ring and is sent again next time.
    #[error("serial write failed: {0:?}")]
    Write(ErrorKind),
    /// The writer accepted zero bytes; the frame stays in the ring.
    #[error("serial writer accepted no bytes")]
    WriterStalled,
}

/// A fixed ring of `BYTES` bytes holding transitions awaiting collection, each as its
/// frame. When a new frame does not fit, the oldest frames are dropped (and counted) until
/// it does: the newest experience is the most useful for fine-tuning, and the timestamps
/// show the gap.
///
/// COBS leaves exactly one zero byte in a frame, its last, so the frames' boundaries are
/// the zeros in the ring and need no index of their own.
#[derive(Debug)]
pub struct TransitionRing<const BYTES: usize> {
    bytes: Deque<u8, BYTES>,
    /// Frames in `bytes`.
    frames: usize,
    dropped: u32,
    cut: Cut,
}

impl<const BYTES: usize> Default for TransitionRing<BYTES> {
    /// An empty ring ([`TransitionRing::new`], which checks that a frame fits).
    fn default() -> Self {
        Self::new()
    }
}

/// Where the wire stands after a write error cut a frame. The receiver keeps the partial
/// frame until a zero ends it; the next drain sends that zero first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Cut {
    /// Every frame started has been ended.
    #[default]
    None,
    /// The oldest frame was cut after `written` of its bytes. It is sent again whole after
    /// the zero, unless only its own zero was missing: then that zero completes it.
    Oldest { written: usize },
    /// The cut frame was dropped from the ring to make room. The zero ends it; when only
    /// that zero was missing (`completes`), the zero delivers it, so it was not dropped.
    Dropped { completes: bool },
}

impl<const BYTES: usize> TransitionRing<BYTES> {
    /// Every frame of a [`FieldTransition`] fits an empty ring.
    const HOLDS_A_FRAME: () = assert!(BYTES >= MAX_FRAME_BYTES, "ring smaller than a frame");

    /// An empty ring.
    pub const fn new() -> Self {
        let () = Self::HOLDS_A_FRAME;
        TransitionRing {
            bytes: Deque::new(),
            frames: 0,
            dropped: 0,
            cut: Cut::None,
        }
    }

    /// Appends `t`'s frame; returns how many of the oldest records were dropped for it.
    /// A record that cannot be framed (one the controller never writes: its observations
    /// fit [`OBS_CAPACITY`], so its frame fits [`MAX_FRAME_BYTES`]) is dropped itself and
    /// counted with them.
    pub fn push(&mut self, t: &FieldTransition) -> u32 {
        let mut buf = [0u8; MAX_FRAME_BYTES];
        let Ok(frame) = encode_frame(t, &mut buf) else {
            self.dropped = self.dropped.saturating_add(1);
            return 1;
        };
        let mut dropped_now = 0;
        while BYTES - self.bytes.len() < frame.len() && self.frames > 0 {
            dropped_now += self.drop_oldest();
        }
        self.dropped = self.dropped.saturating_add(dropped_now);
        for &b in frame.iter() {
            // Cannot fail: room for the whole frame was made above (an empty ring holds
            // the longest frame, `HOLDS_A_FRAME`).
            let _ = self.bytes.push_back(b);
        }
        self.frames += 1;
        dropped_now
    }

    /// Drops the oldest frame to make room; returns 1 if that loses its record, 0 if the
    /// receiver will still get it whole (a cut frame that lacks only its zero).
    fn drop_oldest(&mut self) -> u32 {
        let lost = match self.cut {
            Cut::Oldest { written } => {
                let completes = written + 1 == self.oldest_len();
                self.cut = Cut::Dropped { completes };
                !completes
            }
            Cut::None | Cut::Dropped { .. } => true,
        };
        self.pop_frame();
        u32::from(lost)
    }

    /// Removes the oldest frame.
    fn pop_frame(&mut self) {
        if self.frames == 0 {
            return;
        }
        while let Some(b) = self.bytes.pop_front() {
            if b == 0 {
                break;
            }
        }
        self.frames -= 1;
    }

    /// Records waiting.
    pub fn len(&self) -> usize {
        self.frames
    }

    /// Whether no record waits.
    pub fn is_empty(&self) -> bool {
        self.frames == 0
    }

    /// Records dropped because the ring was full, since start-up.
    pub fn dropped(&self) -> u32 {
        self.dropped
    }

    /// Bytes the waiting frames take.
    pub fn bytes_used(&self) -> usize {
        self.bytes.len()
    }

    /// The oldest waiting record, decoded from its frame.
    pub fn oldest(&self) -> Option<FieldTransition> {
        let (head, tail) = self.oldest_frame();
        let mut buf = [0u8; MAX_FRAME_BYTES];
        let n = head.len() + tail.len();
        let frame = buf.get_mut(..n)?;
        frame[..head.len()].copy_from_slice(head);
        frame[head.len()..].copy_from_slice(tail);
        decode_frame(frame).ok()
    }

    /// The oldest frame's bytes, zero included, as the two pieces the ring may hold it in
    /// (both empty when no frame waits).
    fn oldest_frame(&self) -> (&[u8], &[u8]) {
        let (front, back) = self.bytes.as_slices();
        match front.iter().position(|&b| b == 0) {
            Some(i) => (&front[..=i], &[]),
            None => {
                let end = back.iter().position(|&b| b == 0).map_or(0, |i| i + 1);
                (front, &back[..end])
            }
        }
    }

    fn oldest_len(&self) -> usize {
        let (head, tail) = self.oldest_frame();
        head.len() + tail.len()
    }

    /// Writes up to `max_frames` of the oldest records to `w` as frames, removing each once
    /// it is fully written. Returns the number written. A record whose frame was cut by a
    /// write error stays in the ring and is sent whole next time, after a zero that ends the
    /// cut frame at the receiver; a frame cut just before its own zero is completed by
    /// that zero instead, so that the receiver does not get it twice.
    pub fn drain<W: Write>(&mut self, w: &mut W, max_frames: usize) -> Result<usize, DrainError> {
        let mut sent = 0;
        if let (Cut::Dropped { completes }, 1..) = (self.cut, max_frames) {
            write_whole(w, &[0], &mut 0)?;
            self.cut = Cut::None;
            sent += usize::from(completes);
        }
        while sent < max_frames && self.frames > 0 {
            if let Cut::Oldest { written } = self.cut {
                write_whole(w, &[0], &mut 0)?;
                self.cut = Cut::None;
                if written + 1 == self.oldest_len() {
                    self.pop_frame();
                    sent += 1;
                    continue;
                }
            }
            let (head, tail) = self.oldest_frame();
            let mut written = 0;
            if let Err(e) =
                write_whole(w, head, &mut written).and_then(|()| write_whole(w, tail, &mut written))
            {
                self.cut = Cut::Oldest { written };
                return Err(e);
            }
            self.pop_frame();
            sent += 1;
        }
        Ok(sent)
    }
}

/// `write_all` without its panic on a writer that accepts zero bytes; counts the bytes
/// written into `written`.
fn write_whole<W: Write>(
    w: &mut W,
    mut bytes: &[u8],
    written: &mut usize,
) -> Result<(), DrainError> {
    while !bytes.is_empty() {
        match w.write(bytes) {
            Ok(0) => return Err(DrainError::WriterStalled),
            Ok(n) => {
                let n = n.min(bytes.len());
                bytes = &bytes[n..];
                *written += n;
            }
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
    use proptest::prelude::*;
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

    /// A writer that takes at most 7 bytes per call (or `chunk`, where set) and, once
    /// `fail_after` bytes are out, fails (or accepts no bytes, with `stall`).
    #[derive(Default)]
    struct Chunky {
        out: Vec<u8>,
        fail_after: usize,
        chunk: Option<usize>,
        stall: bool,
    }
    impl embedded_io::ErrorType for Chunky {
        type Error = ErrorKind;
    }
    impl Write for Chunky {
        fn write(&mut self, buf: &[u8]) -> Result<usize, ErrorKind> {
            if self.out.len() >= self.fail_after {
                return if self.stall {
                    Ok(0)
                } else {
                    Err(ErrorKind::TimedOut)
                };
            }
            let n = buf.len().min(self.chunk.unwrap_or(7));
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> Result<(), ErrorKind> {
            Ok(())
        }
    }

    fn frame_len(t: &FieldTransition) -> usize {
        let mut buf = [0u8; MAX_FRAME_BYTES];
        encode_frame(t, &mut buf).unwrap().len()
    }

    fn decode_all(stream: &[u8]) -> Vec<Result<FieldTransition, FrameError>> {
        let mut reader = FrameReader::<MAX_FRAME_BYTES>::new();
        stream
            .iter()
            .filter_map(|&b| reader.push::<OBS_CAPACITY>(b))
            .collect()
    }

    #[test]
    fn ring_drops_oldest_and_keeps_unsent_frames() {
        // Room for three of these frames and not four.
        let len = frame_len(&sample(0));
        assert!((211..=280).contains(&len), "{len}");
        let mut ring = TransitionRing::<840>::new();
        for ts in 0..5 {
            ring.push(&sample(ts));
        }
        assert_eq!((ring.len(), ring.dropped()), (3, 2));
        assert_eq!(ring.bytes_used(), 3 * len);
        assert_eq!(ring.oldest().unwrap().timestamp_ms, 2);
        let mut w = Chunky {
            fail_after: len + 100,
            ..Chunky::default()
        };
        assert_eq!(
            ring.drain(&mut w, 10),
            Err(DrainError::Write(ErrorKind::TimedOut))
        );
        assert_eq!(ring.len(), 2, "the first frame went out, the second stays");
        w.fail_after = usize::MAX;
        assert_eq!(ring.drain(&mut w, 10), Ok(2));
        assert!(ring.is_empty() && ring.oldest().is_none());
        let got = decode_all(&w.out);
        let ok: Vec<u64> = got
            .iter()
            .filter_map(|r| r.as_ref().ok().map(|t| t.timestamp_ms))
            .collect();
        assert_eq!(ok, [2, 3, 4], "the cut frame is refused, then resent whole");
        assert_eq!(got.len(), 4);
        assert!(got[1].is_err());
    }

    /// A frame that the ring's end splits in two reads, drains and, cut in its second
    /// piece, resends whole.
    #[test]
    fn a_frame_split_by_the_rings_end_arrives_whole() {
        let len = frame_len(&sample(0));
        let mut ring = TransitionRing::<840>::new();
        for ts in 0..3 {
            ring.push(&sample(ts));
        }
        let mut w = Chunky {
            fail_after: usize::MAX,
            ..Chunky::default()
        };
        assert_eq!(ring.drain(&mut w, 1), Ok(1));
        // 840 − 3·len bytes are left before the end: the next frame wraps.
        ring.push(&sample(3));
        assert!(840 - 3 * len < len);
        assert_eq!(ring.drain(&mut w, 2), Ok(2));
        let split = ring.oldest().expect("frame 3 waits");
        assert_eq!(split, sample(3), "read across the ring's end");
        // Cut 10 bytes before its end, in the piece at the ring's start.
        w.fail_after = w.out.len() + len - 10;
        w.chunk = Some(1);
        assert!(ring.drain(&mut w, 1).is_err());
        w.fail_after = usize::MAX;
        assert_eq!(ring.drain(&mut w, 1), Ok(1));
        let got: Vec<Result<u64, FrameError>> = decode_all(&w.out)
            .into_iter()
            .map(|r| r.map(|t| t.timestamp_ms))
            .collect();
        assert_eq!(got.len(), 5, "{got:?}");
        assert_eq!(got[..3], [Ok(0), Ok(1), Ok(2)]);
        assert!(got[3].is_err(), "the cut piece");
        assert_eq!(got[4], Ok(3));
    }

    /// A frame cut just before its own zero is completed by the zero that ends a cut
    /// frame, and not sent again: the receiver gets it once. So too when the ring drops
    /// that frame to make room before the next drain: it is not counted as dropped.
    #[test]
    fn a_frame_cut_before_its_zero_arrives_once() {
        let len = frame_len(&sample(0));
        for drop_it in [false, true] {
            let mut ring = TransitionRing::<840>::new();
            ring.push(&sample(0));
            ring.push(&sample(1));
            let mut w = Chunky {
                fail_after: len - 1,
                chunk: Some(1),
                ..Chunky::default()
            };
            assert!(ring.drain(&mut w, 10).is_err());
            if drop_it {
                for ts in 2..5 {
                    ring.push(&sample(ts));
                }
                assert_eq!((ring.len(), ring.dropped()), (3, 1), "1 dropped, 0 lost");
            }
            w.fail_after = usize::MAX;
            let waiting = ring.len();
            assert_eq!(ring.drain(&mut w, 10), Ok(waiting + usize::from(drop_it)));
            let got: Vec<u64> = decode_all(&w.out)
                .into_iter()
                .map(|r| r.unwrap().timestamp_ms)
                .collect();
            let want: &[u64] = if drop_it { &[0, 2, 3, 4] } else { &[0, 1] };
            assert_eq!(got, want);
        }
    }

    /// What the default ring holds (the controller's documentation): 12 frames of the
    /// single-4way cabinet (31 floats), 10 with the program clock's lanes (39), with
    /// timestamps of an uptime from 35 minutes to 3 days (a 4-byte varint).
    #[test]
    fn the_default_ring_holds_a_minute_of_single_4way_records() {
        use crate::controller::DEFAULT_RING_BYTES;
        for (floats, frames, bytes) in [(31, 12, 276), (39, 10, 340)] {
            for uptime_ms in [2_100_000, 86_400_000, 268_000_000] {
                let mut t = sample(uptime_ms);
                t.obs = (0..floats).map(|i| i as f32 * 0.03).collect();
                t.next_obs = t.obs.clone();
                assert_eq!(frame_len(&t), bytes, "{floats} floats at {uptime_ms} ms");
            }
            assert_eq!(DEFAULT_RING_BYTES / bytes, frames, "{floats} floats");
        }
    }

    /// Frames of different lengths make room for each other: a long frame pushes out as
    /// many short ones as it needs, and no more.
    #[test]
    fn a_longer_frame_drops_as_many_as_it_needs() {
        let mut short = sample(1);
        short.obs.truncate(4);
        short.next_obs.truncate(4);
        let mut long = sample(2);
        long.obs = (0..OBS_CAPACITY).map(|i| i as f32).collect();
        long.next_obs = long.obs.clone();
        let (s, l) = (frame_len(&short), frame_len(&long));
        const BYTES: usize = 2 * MAX_FRAME_BYTES;
        let mut ring = TransitionRing::<BYTES>::new();
        let fit = BYTES / s;
        for _ in 0..fit {
            assert_eq!(ring.push(&short), 0);
        }
        let need = (l - (BYTES - fit * s)).div_ceil(s);
        assert!(0 < need && need < fit, "{need} of {fit}");
        assert_eq!(ring.push(&long), need as u32);
        assert_eq!(ring.len(), fit - need + 1);
        assert_eq!(ring.bytes_used(), (fit - need) * s + l);
        assert_eq!(ring.oldest(), Some(short));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Push {
            obs_len: usize,
        },
        Drain {
            max_frames: usize,
            fail_after: usize,
            stall: bool,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..=OBS_CAPACITY).prop_map(|obs_len| Op::Push { obs_len }),
            1 => (0usize..4, 0usize..1200, any::<bool>()).prop_map(
                |(max_frames, fail_after, stall)| Op::Drain { max_frames, fail_after, stall }
            ),
        ]
    }

    proptest! {
        /// Against a model of frames in a byte budget: after any pushes and drains (some
        /// cut by a failing writer), the ring holds what the model holds, within its
        /// bytes; and once drained whole, the receiver has every record the ring did not
        /// count as dropped, each once, unchanged and in order.
        #[test]
        fn every_record_arrives_once_or_is_counted_dropped(
            ops in proptest::collection::vec(op(), 1..60)
        ) {
            const BYTES: usize = 1000;
            let mut ring = TransitionRing::<BYTES>::new();
            let mut model: std::collections::VecDeque<(u64, usize)> = Default::default();
            let mut pushed = Vec::new();
            // Records that left the ring through a drain: they must arrive.
            let mut must_arrive = std::collections::BTreeSet::new();
            let mut w = Chunky::default();
            for (i, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Push { obs_len } => {
                        let mut t = sample(i as u64);
                        t.obs = (0..obs_len).map(|k| (i * 100 + k) as f32).collect();
                        t.next_obs = t.obs.iter().map(|x| -x).collect();
                        let len = frame_len(&t);
                        let mut popped = 0;
                        while BYTES - model.iter().map(|m| m.1).sum::<usize>() < len {
                            model.pop_front();
                            popped += 1;
                        }
                        model.push_back((i as u64, len));
                        // A popped frame that was cut just before its zero still arrives.
                        let d = ring.push(&t);
                        prop_assert!(d == popped || d + 1 == popped, "{} of {}", d, popped);
                        pushed.push(t);
                    }
                    Op::Drain { max_frames, fail_after, stall } => {
                        w.fail_after = w.out.len() + fail_after;
                        w.stall = stall;
                        let want = if stall {
                            DrainError::WriterStalled
                        } else {
                            DrainError::Write(ErrorKind::TimedOut)
                        };
                        match ring.drain(&mut w, max_frames) {
                            Ok(n) => prop_assert!(n <= max_frames),
                            Err(e) => prop_assert_eq!(e, want),
                        }
                        while model.len() > ring.len() {
                            must_arrive.insert(model.pop_front().unwrap().0);
                        }
                    }
                }
                prop_assert_eq!(ring.len(), model.len());
                prop_assert_eq!(ring.bytes_used(), model.iter().map(|m| m.1).sum::<usize>());
                prop_assert!(ring.bytes_used() <= BYTES);
                prop_assert_eq!(ring.oldest().map(|t| t.timestamp_ms), model.front().map(|m| m.0));
            }
            w.fail_after = usize::MAX;
            w.stall = false;
            ring.drain(&mut w, usize::MAX).unwrap();
            must_arrive.extend(model.iter().map(|m| m.0));
            prop_assert!(ring.is_empty());
            let got: Vec<FieldTransition> =
                decode_all(&w.out).into_iter().filter_map(Result::ok).collect();
            prop_assert_eq!(got.len() + ring.dropped() as usize, pushed.len());
            let ts: Vec<u64> = got.iter().map(|t| t.timestamp_ms).collect();
            prop_assert!(ts.windows(2).all(|p| p[0] < p[1]), "in order, once: {:?}", ts);
            prop_assert!(must_arrive.iter().all(|m| ts.contains(m)), "{:?} in {:?}", must_arrive, ts);
            for t in &got {
                prop_assert_eq!(Some(t), pushed.iter().find(|p| p.timestamp_ms == t.timestamp_ms));
            }
        }
    }
}
