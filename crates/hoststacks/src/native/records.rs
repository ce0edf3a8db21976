//! The records of a perf ring buffer, parsed from bytes copied out of it (no unsafe here).
//!
//! ```text
//!  ring (data_size bytes, a power of two)      records, each 8-byte aligned:
//!  ┌──────────────┬─────────┬──────────┐       header { type: u32, misc: u16, size: u16 }
//!  │ ..end of rec │  free   │ rec 1 .. │       PERF_RECORD_SAMPLE (9), with
//!  └──────────────┴─────────┴──────────┘       sample_type = IP | TID | TIME | CALLCHAIN:
//!     head % size ┘         └ tail % size        ip: u64, pid: u32, tid: u32, time: u64,
//!  the bytes from tail to head, in two             nr: u64, ips: [u64; nr]
//!  pieces where they wrap                        PERF_RECORD_LOST (2): id: u64, lost: u64
//! ```
//!
//! A call chain starts with context markers (`PERF_CONTEXT_USER` and the like, the values from
//! `(u64)-4095` up); they are left out.

use std::ops::Range;

pub const PERF_RECORD_LOST: u32 = 2;
pub const PERF_RECORD_SAMPLE: u32 = 9;
/// Call-chain values from here up are context markers, not addresses.
pub const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;

/// One sample of a thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_REALTIME nanoseconds.
    pub time_ns: u64,
    /// Innermost first: the sampled instruction, then return addresses; markers left out.
    pub callchain: Vec<u64>,
}

/// What one drain of a ring held.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    pub samples: u64,
    /// Samples the kernel dropped because the ring was full.
    pub lost: u64,
    /// The last sample written.
    pub newest: Option<Sample>,
}

/// The byte ranges of a ring of `size` bytes that hold what lies between `tail` and `head`
/// (both count bytes since the ring was made): one range, or two where it wraps. More than
/// `size` bytes (which the kernel does not write) is cut to the newest `size`.
pub fn ring_segments(size: usize, tail: u64, head: u64) -> [Range<usize>; 2] {
    let Ok(size64) = u64::try_from(size) else {
        return [0..0, 0..0];
    };
    if size == 0 || head <= tail {
        return [0..0, 0..0];
    }
    let len = (head - tail).min(size64);
    let start = head - len;
    // Both below `size`, which is a usize.
    let at = usize::try_from(start % size64).unwrap_or(0);
    let len = usize::try_from(len).unwrap_or(0);
    if at + len <= size {
        [at..at + len, 0..0]
    } else {
        [at..size, 0..at + len - size]
    }
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// Reads the records in `bytes`; a record cut short (which the kernel does not write) ends the
/// parse.
pub fn parse(bytes: &[u8]) -> Drained {
    let mut out = Drained::default();
    let mut at = 0;
    while let (Some(kind), Some(size)) = (u32_at(bytes, at), u16_at(bytes, at + 6)) {
        let size = usize::from(size);
        let Some(rec) = bytes.get(at..at + size).filter(|_| size >= 8) else {
            break;
        };
        match kind {
            PERF_RECORD_SAMPLE => {
                if let Some(s) = sample(rec) {
                    out.samples += 1;
                    out.newest = Some(s);
                }
            }
            PERF_RECORD_LOST => out.lost += u64_at(rec, 16).unwrap_or(0),
            _ => {}
        }
        at += size;
    }
    out
}

fn sample(rec: &[u8]) -> Option<Sample> {
    let ip = u64_at(rec, 8)?;
    let pid = u32_at(rec, 16)?;
    let tid = u32_at(rec, 20)?;
    let time_ns = u64_at(rec, 24)?;
    let nr = usize::try_from(u64_at(rec, 32)?).ok()?;
    let callchain = (0..nr.min((rec.len().saturating_sub(40)) / 8))
        .filter_map(|i| u64_at(rec, 40 + 8 * i))
        .filter(|ip| *ip < PERF_CONTEXT_MAX)
        .collect();
    Some(Sample {
        ip,
        pid,
        tid,
        time_ns,
        callchain,
    })
}

#[cfg(test)]
pub mod tests {
    use super::*;

    const PERF_CONTEXT_USER: u64 = -512i64 as u64;

    /// A sample record as the kernel writes it.
    pub fn sample_record(ip: u64, tid: u32, time_ns: u64, chain: &[u64]) -> Vec<u8> {
        let size = 40 + 8 * chain.len();
        let mut b = Vec::with_capacity(size);
        b.extend_from_slice(&PERF_RECORD_SAMPLE.to_ne_bytes());
        b.extend_from_slice(&2u16.to_ne_bytes());
        b.extend_from_slice(&u16::try_from(size).expect("small").to_ne_bytes());
        b.extend_from_slice(&ip.to_ne_bytes());
        b.extend_from_slice(&7u32.to_ne_bytes());
        b.extend_from_slice(&tid.to_ne_bytes());
        b.extend_from_slice(&time_ns.to_ne_bytes());
        b.extend_from_slice(&(chain.len() as u64).to_ne_bytes());
        for ip in chain {
            b.extend_from_slice(&ip.to_ne_bytes());
        }
        b
    }

    fn other_record(kind: u32, body: &[u64]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(&0u16.to_ne_bytes());
        b.extend_from_slice(
            &u16::try_from(8 + 8 * body.len())
                .expect("small")
                .to_ne_bytes(),
        );
        for w in body {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        b
    }

    /// Writes `records` into a ring of `size` bytes starting at byte count `tail`, as the kernel
    /// would, and copies them out again the way [`super::super::perf::Ring::drain`] does.
    fn through_ring(size: usize, tail: u64, records: &[u8]) -> Vec<u8> {
        let mut ring = vec![0xAAu8; size];
        for (i, b) in records.iter().enumerate() {
            ring[usize::try_from((tail + i as u64) % size as u64).expect("small")] = *b;
        }
        let head = tail + records.len() as u64;
        let mut out = Vec::new();
        for seg in ring_segments(size, tail, head) {
            out.extend_from_slice(&ring[seg]);
        }
        out
    }

    #[test]
    fn samples_markers_and_lost_records_are_read() {
        let mut bytes = sample_record(0x1000, 11, 5, &[PERF_CONTEXT_USER, 0x1000, 0x2000]);
        bytes.extend(other_record(PERF_RECORD_LOST, &[1, 3]));
        // A record of another kind (PERF_RECORD_MMAP, 1) is passed over.
        bytes.extend(other_record(1, &[9, 9, 9]));
        bytes.extend(sample_record(
            0x3000,
            11,
            6,
            &[PERF_CONTEXT_USER, 0x3000, 0x4000, 0x5000],
        ));
        let d = parse(&bytes);
        assert_eq!((d.samples, d.lost), (2, 3));
        assert_eq!(
            d.newest,
            Some(Sample {
                ip: 0x3000,
                pid: 7,
                tid: 11,
                time_ns: 6,
                callchain: vec![0x3000, 0x4000, 0x5000],
            })
        );
    }

    #[test]
    fn records_that_wrap_around_the_ring_are_read_whole() {
        let mut records = sample_record(0x10, 1, 100, &[PERF_CONTEXT_USER, 0x10, 0x20]);
        records.extend(sample_record(0x30, 1, 200, &[PERF_CONTEXT_USER, 0x30]));
        assert_eq!(records.len(), 64 + 56);
        // A 128-byte ring whose tail is at 3 rings and 96 bytes: the first record wraps.
        let tail = 3 * 128 + 96;
        let segs = ring_segments(128, tail, tail + records.len() as u64);
        assert_eq!(segs, [96..128, 0..88]);
        let d = parse(&through_ring(128, tail, &records));
        assert_eq!(d.samples, 2);
        let newest = d.newest.expect("a sample");
        assert_eq!((newest.time_ns, newest.callchain), (200, vec![0x30]));
        // Not wrapping, and empty.
        assert_eq!(ring_segments(128, 8, 40), [8..40, 0..0]);
        assert_eq!(ring_segments(128, 40, 40), [0..0, 0..0]);
        // More than the ring holds: the newest `size` bytes.
        assert_eq!(ring_segments(128, 0, 300), [44..128, 0..44]);
    }

    #[test]
    fn cut_or_broken_records_end_the_parse_without_a_panic() {
        let rec = sample_record(0x10, 1, 1, &[0x10, 0x20]);
        for cut in 0..rec.len() {
            let d = parse(&rec[..cut]);
            assert_eq!(d.samples, 0, "cut at {cut}");
        }
        // A header claiming a size below its own.
        let mut bad = rec.clone();
        bad[6] = 4;
        bad[7] = 0;
        assert_eq!(parse(&bad), Drained::default());
        // A call chain longer than its record: only what is there.
        let mut long = rec;
        long[32] = 200;
        let d = parse(&long);
        assert_eq!(d.newest.expect("sample").callchain, vec![0x10, 0x20]);
    }
}
