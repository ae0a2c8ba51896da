//! The serial frame format of transition records, shared by every sender (the firmware)
//! and receiver (the cabinet's `greenwave-controller collect`, the replay harness).
//!
//! A frame is `COBS(postcard(Transition) ‖ crc32_le(postcard(Transition))) ‖ 0x00`: postcard
//! for the record (the same bytes the transition log stores), CRC-32 (IEEE, the checksum of
//! the transition log's records, so the host can append a verified payload to a log segment
//! without re-encoding), COBS so that `0x00` only ever ends a frame and a receiver
//! resynchronises after line noise at the next zero.
//!
//! The CRC is computed with a 64-byte nibble table (table-driven crates carry kilobytes of
//! tables, too much for an MCU's flash); `tests` check it against the standard check value.

use postcard::ser_flavors::{Cobs, Flavor, Slice};

use crate::transition::Transition;

/// Longest postcard encoding of a [`Transition`] whose observations hold at most
/// `obs_capacity` floats: timestamp (varint u64, ≤ 10), signal (varint u16, ≤ 3), two
/// observations (a varint length, 1 byte below 128 floats and 2 below 16,384, + 4 per float
/// each), requested and served phase (1 each), log-prob and reward (4 each), done (1),
/// policy version (varint u32, ≤ 5), source (1), reward kind (option tag and variant, 2).
pub const fn max_record_bytes(obs_capacity: usize) -> usize {
    10 + 3 + 2 * (varint_bytes(obs_capacity) + 4 * obs_capacity) + 2 + 8 + 1 + 5 + 1 + 2
}

/// Bytes of `n` as a postcard varint (7 bits a byte).
const fn varint_bytes(mut n: usize) -> usize {
    let mut bytes = 1;
    while n >= 0x80 {
        n >>= 7;
        bytes += 1;
    }
    bytes
}

/// Longest frame on the wire for records of `obs_capacity` floats: record, CRC, COBS
/// overhead (one byte per 254 and one more), and the terminating zero.
pub const fn max_frame_bytes(obs_capacity: usize) -> usize {
    cobs_max(max_record_bytes(obs_capacity) + 4) + 1
}

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
    let mut crc = Crc32::new();
    crc.update(data);
    crc.finish()
}

/// [`crc32`] computed a piece at a time: `Crc32::new()`, [`update`](Self::update) with each
/// piece in order, then [`finish`](Self::finish) gives what `crc32` gives for the pieces
/// joined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crc32(u32);

impl Crc32 {
    /// Nothing read yet.
    pub const fn new() -> Self {
        Crc32(!0)
    }

    /// Reads the next piece.
    pub fn update(&mut self, data: &[u8]) {
        self.0 = crc32_update(self.0, data);
    }

    /// The CRC-32 of everything read.
    pub fn finish(self) -> u32 {
        !self.0
    }
}

impl Default for Crc32 {
    fn default() -> Self {
        Self::new()
    }
}

/// A postcard flavor that appends the CRC-32 of everything serialised, little-endian.
struct Crc32Append<F> {
    inner: F,
    crc: u32,
}

impl<F: Flavor> Flavor for Crc32Append<F> {
    type Output = F::Output;

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        // The raw register, not `Crc32`: through it the MPS2 image grew 32 B and a polled
        // decision about 3,200 instructions (QEMU replay, 2026-12-07).
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
    #[error("transition does not fit the frame buffer")]
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
    Transition::from_record_bytes(payload).map_err(|e| match e {
        crate::transition::RecordError::TrailingBytes(bytes) => FrameError::TrailingBytes { bytes },
        crate::transition::RecordError::Decode(_) => FrameError::Record,
    })
}

/// Splits a byte stream into frames and decodes them; `BUF` bounds one encoded frame
/// ([`max_frame_bytes`] of the sender's observation capacity suffices).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_the_ieee_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    proptest::proptest! {
        /// Read in any pieces, the CRC is the CRC of the whole.
        #[test]
        fn crc32_in_pieces_is_crc32_of_the_whole(
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            cuts in proptest::collection::vec(0usize..300, 0..6),
        ) {
            let mut cuts: std::vec::Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort_unstable();
            let mut crc = Crc32::new();
            let mut from = 0;
            for c in cuts.into_iter().chain([data.len()]) {
                crc.update(&data[from..c]);
                from = c;
            }
            proptest::prop_assert_eq!(crc.finish(), crc32(&data));
        }
    }

    /// The longest record of a capacity fits its bound, on either side of the capacity
    /// where an observation's length takes a second byte (128 floats), and at the host's.
    #[test]
    fn the_longest_record_of_each_capacity_fits_its_frame() {
        fn longest<const N: usize>() {
            // 0x80-filled floats: no zero bytes, so COBS adds only its block overhead.
            let obs =
                heapless::Vec::<f32, N>::from_slice(&[f32::from_bits(0x8080_8080); N]).unwrap();
            let t: Transition<N> = Transition {
                timestamp_ms: u64::MAX,
                signal: u16::MAX,
                obs: obs.clone(),
                requested: u8::MAX,
                action: u8::MAX,
                log_prob: f32::MIN,
                reward: f32::MIN,
                next_obs: obs,
                done: true,
                policy_version: u32::MAX,
                source: crate::ActionSource::Fallback,
                reward_kind: Some(crate::RewardKind::Queue),
            };
            let record = postcard::to_allocvec(&t).unwrap();
            assert!(record.len() <= max_record_bytes(N), "{N}: {}", record.len());
            let mut buf = std::vec![0u8; max_frame_bytes(N)];
            let frame = encode_frame(&t, &mut buf).unwrap();
            assert!(frame.len() <= max_frame_bytes(N), "{N}");
        }
        longest::<127>();
        longest::<128>();
        longest::<{ crate::transition::MAX_OBS_DIM }>();
        assert_eq!(varint_bytes(127), 1);
        assert_eq!(varint_bytes(128), 2);
        assert_eq!(varint_bytes(16_383), 2);
        assert_eq!(varint_bytes(16_384), 3);
    }

    #[test]
    fn frames_round_trip_and_refuse_damage() {
        let mut t: Transition<4> = Transition {
            timestamp_ms: 5000,
            signal: 1,
            obs: heapless::Vec::from_slice(&[0.5, 0.0]).unwrap(),
            requested: 1,
            action: 1,
            log_prob: -0.3,
            reward: -2.0,
            next_obs: heapless::Vec::from_slice(&[0.25, 1.0]).unwrap(),
            done: false,
            policy_version: 3,
            source: crate::ActionSource::Policy,
            reward_kind: Some(crate::RewardKind::Queue),
        };
        t.done = true;
        let mut buf = [0u8; max_frame_bytes(4)];
        let frame = encode_frame(&t, &mut buf).unwrap();
        assert_eq!(frame.last(), Some(&0));
        let mut copy = [0u8; max_frame_bytes(4)];
        copy[..frame.len()].copy_from_slice(frame);
        let n = frame.len();
        assert_eq!(decode_frame::<4>(&mut copy[..n]), Ok(t.clone()));
        let mut reader = FrameReader::<{ max_frame_bytes(4) }>::new();
        let mut got = None;
        for &b in frame.iter() {
            if let Some(r) = reader.push::<4>(b) {
                got = Some(r);
            }
        }
        assert_eq!(got, Some(Ok(t)));
        frame[3] ^= 0x40;
        assert!(decode_frame::<4>(frame).is_err());
    }
}
