//! Property: whatever is appended, in whatever batches and flushes, reads back exactly.

#![allow(clippy::unwrap_used)] // tests fail loudly by design

use cufall_testkit::tables as common;

use cufall_trace::model::{DeviceId, SampleBatch};
use cufall_trace::{Trace, TraceWriter, WriterOptions};
use proptest::prelude::*;

/// A sample as (start offset, duration, value a, value b).
type Row = (i64, u32, f32, f32);
/// A batch as (device, samples, flush after it?).
type Batch = (u32, Vec<Row>, bool);

fn batches() -> impl Strategy<Value = Vec<Batch>> {
    prop::collection::vec(
        (
            0u32..3,
            prop::collection::vec(
                (
                    0i64..1_000_000_000,
                    1u32..100_000,
                    any::<f32>(),
                    -1e6f32..1e6,
                ),
                0..40,
            ),
            any::<bool>(),
        ),
        1..12,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn samples_round_trip(input in batches()) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p.cufall");
        let mut w = TraceWriter::create(&dir, common::manifest(3), WriterOptions::default()).unwrap();
        let mut expected: Vec<Vec<(i64, i64, u32, u32)>> = vec![Vec::new(); 3];
        for (device, rows, flush) in &input {
            let mut b = SampleBatch::new(DeviceId(*device), 2);
            for (off, dur, a, c) in rows {
                let s = common::T0 + off;
                b.push(s, s + i64::from(*dur), &[f64::from(*a), f64::from(*c)]);
                expected[*device as usize].push((s, s + i64::from(*dur), a.to_bits(), c.to_bits()));
            }
            w.append_samples(&b).unwrap();
            if *flush {
                w.flush().unwrap();
            }
        }
        w.finish(common::T0).unwrap();
        let trace = Trace::open(&dir).unwrap();
        let mut got: Vec<Vec<(i64, i64, u32, u32)>> = vec![Vec::new(); 3];
        for b in trace.sample_batches().unwrap() {
            for i in 0..b.len() {
                got[b.device.0 as usize].push((
                    b.start_ns[i],
                    b.end_ns[i],
                    (b.values[0][i] as f32).to_bits(),
                    (b.values[1][i] as f32).to_bits(),
                ));
            }
        }
        for d in 0..3 {
            // Reads come back sorted by time; compare as multisets in time order. NaN payloads
            // and signed zeros survive bit for bit.
            expected[d].sort();
            got[d].sort();
            prop_assert_eq!(&expected[d], &got[d]);
        }
        let summary = trace.summary().unwrap();
        for d in 0..3u32 {
            prop_assert_eq!(summary.devices[&DeviceId(d)].samples, expected[d as usize].len() as u64);
        }
    }
}
