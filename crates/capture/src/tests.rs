//! Round trips of every frame, the limits, and damaged streams.

use crate::frame::tag;
use crate::*;
use proptest::prelude::*;

fn frames() -> Vec<Frame<'static>> {
    vec![
        fixtures::hello(42),
        Frame::String {
            id: 7,
            text: "_Z6kernelPf".into(),
        },
        Frame::Range(Range {
            start_ns: 1_764_000_000_000_000_000,
            end_ns: 1_764_000_000_000_123_456,
            tid: 4242,
            depth: 2,
            kind: WireRangeKind::PushPop,
            domain: 0,
            category: 3,
            color: Some(0xff00_ff00),
            payload: Payload::Float(1.5),
            name: Name::Text("verify".into()),
        }),
        Frame::Range(Range {
            start_ns: 5,
            end_ns: 5,
            tid: 1,
            depth: 0,
            kind: WireRangeKind::Mark,
            domain: 9,
            category: 0,
            color: None,
            payload: Payload::UInt(u64::MAX),
            name: Name::Registered(11),
        }),
        Frame::Activity(Activity {
            device: 1,
            grid: [132, 1, 1],
            block: [256, 1, 1],
            ..fixtures::kernel(7, 10, 20)
        }),
        Frame::Api(WireApiCall {
            domain: WireApiDomain::Driver,
            start_ns: 1,
            end_ns: 2,
            tid: 3,
            correlation: 99,
            name: 8,
        }),
        Frame::Status {
            t_ns: 3,
            event: CaptureEventKind::CuptiDropped.as_str().into(),
            count: 12,
            detail: "context 1".into(),
        },
        Frame::Device {
            id: 0,
            uuid: [7; 16],
        },
        Frame::Bye { t_ns: 4 },
        Frame::Window {
            t_ns: 5,
            open: true,
        },
        Frame::Window {
            t_ns: 6,
            open: false,
        },
        Frame::Context {
            device: 1,
            context: 3,
        },
        Frame::Graph {
            graph_id: 12,
            exec_id: 13,
            nodes: 48,
            kernels: vec![
                GraphKernel { name: 7, count: 24 },
                GraphKernel { name: 9, count: 1 },
            ],
        },
    ]
}

#[test]
fn every_frame_round_trips_through_a_byte_stream_cut_anywhere() {
    let bytes = fixtures::encoded(frames());
    for cut in 0..bytes.len() {
        let mut d = Decoder::new();
        let mut got = Vec::new();
        for part in [&bytes[..cut], &bytes[cut..]] {
            d.push(part);
            while let Some(f) = d.next_frame().expect("valid stream") {
                got.push(f);
            }
        }
        assert_eq!(got, frames(), "cut at {cut}");
        assert_eq!(d.pending_bytes(), 0);
    }
}

/// A cost row crosses the wire whole.
#[test]
fn cost_rows_round_trip() {
    let nvtx = CaptureEventKind::Cost {
        kind: CostKind::Nvtx,
        measured: true,
    };
    let f = Frame::Status {
        t_ns: 1_764_000_000_000_000_000,
        event: nvtx.as_str().into(),
        count: 187,
        detail: "187 ns per NVTX range".into(),
    };
    let mut bytes = Vec::new();
    encode(&f, &mut bytes);
    let mut d = Decoder::new();
    d.push(&bytes);
    assert_eq!(d.next_frame().unwrap(), Some(f));
}

#[test]
fn unchecked_bytes_decode_as_text_with_bad_utf8_replaced() {
    let mut bytes = Vec::new();
    let range = |name| {
        Frame::Range(Range {
            tid: 3,
            ..fixtures::range(name, 1, 2)
        })
    };
    encode(&range(Name::Bytes(b"draft\xff")), &mut bytes);
    let mut d = Decoder::new();
    d.push(&bytes);
    assert_eq!(
        d.next_frame().unwrap(),
        Some(range(Name::Text("draft\u{fffd}".into())))
    );
}

#[test]
fn broken_streams_are_errors_not_panics() {
    let mut d = Decoder::new();
    d.push(&(MAX_FRAME_BYTES as u32 + 1).to_le_bytes());
    assert!(matches!(d.next_frame(), Err(ProtocolError::TooLarge(_))));
    assert_eq!(decode_body(&[99]), Err(ProtocolError::UnknownTag(99)));
    assert!(matches!(
        decode_body(&[tag::BYE, 1, 2]),
        Err(ProtocolError::Short { .. })
    ));
    let mut bytes = Vec::new();
    encode(&Frame::Bye { t_ns: 1 }, &mut bytes);
    let mut body = bytes[4..].to_vec();
    body.push(0);
    assert!(matches!(
        decode_body(&body),
        Err(ProtocolError::Trailing { .. })
    ));
}

#[test]
fn uuids_are_spelled_like_nvml() {
    let mut u = [0u8; 16];
    u[0] = 0xab;
    u[15] = 0x01;
    assert_eq!(uuid_string(&u), "GPU-ab000000-0000-0000-0000-000000000001");
}

#[test]
fn graphs_are_whole_unless_nodes_are_asked_for() {
    assert_eq!(
        Kinds::parse("nvtx,kernels,memcpy,graphs"),
        Ok(Kinds::DEFAULT)
    );
    let nodes = Kinds::parse("nvtx,kernels,memcpy,graph-nodes").unwrap();
    assert!(nodes.contains(Kinds::GRAPH_NODES) && !nodes.contains(Kinds::GRAPHS));
    let all_nodes = Kinds::parse("all,graph-nodes").unwrap();
    assert!(all_nodes.contains(Kinds::GRAPH_NODES) && !all_nodes.contains(Kinds::GRAPHS));
    assert!(all_nodes.contains(Kinds::API));
    assert!(matches!(
        Kinds::parse("graphs,graph-nodes"),
        Err(UnknownKind::GraphsTwice(_))
    ));
    assert_eq!(Kinds::parse(&nodes.to_env()), Ok(nodes));
}

#[test]
fn capture_ranges_parse_and_round_trip() {
    assert_eq!(
        RangeTrigger::parse("cuda-profiler-api"),
        Ok(RangeTrigger::ProfilerApi)
    );
    let n = RangeTrigger::parse("nvtx:serve step").unwrap();
    assert_eq!(n, RangeTrigger::Nvtx("serve step".into()));
    assert_eq!(RangeTrigger::parse(&n.to_env()), Ok(n));
    assert_eq!(RangeTrigger::parse("nvtx:"), Err(BadRange::EmptyName));
    assert!(matches!(
        RangeTrigger::parse("profiler"),
        Err(BadRange::Unknown(_))
    ));
}

#[test]
fn kinds_parse_and_print() {
    assert_eq!(
        Kinds::parse("nvtx,kernels,memcpy"),
        Ok(Kinds::NVTX.union(Kinds::KERNELS).union(Kinds::MEMCPY))
    );
    assert_eq!(Kinds::parse("none"), Ok(Kinds::NONE));
    assert_eq!(
        Kinds::parse(" NVTX , api "),
        Ok(Kinds::NVTX.union(Kinds::API))
    );
    assert_eq!(
        Kinds::parse("all").map(Kinds::to_env).as_deref(),
        Ok("nvtx,kernels,memcpy,api,graphs")
    );
    assert_eq!(Kinds::DEFAULT.to_env(), "nvtx,kernels,memcpy,graphs");
    assert_eq!(Kinds::NONE.to_env(), "none");
    assert!(Kinds::parse("kernel").is_err());
    assert_eq!(
        Kinds::parse("nvtx,none"),
        Err(UnknownKind::NoneWithOthers("nvtx,none".into()))
    );
    assert!(!Kinds::NVTX.needs_cupti());
    assert!(Kinds::DEFAULT.needs_cupti());
    assert!(!Kinds::NONE.contains(Kinds::NONE));
}

/// A valid stream of every frame kind, for the mutation tests.
fn valid_stream() -> Vec<u8> {
    fixtures::encoded(frames())
}

/// Decodes everything `bytes` holds; the decoder must stop at the first error.
fn decode_all(bytes: &[u8], chunk: usize) -> Result<usize, ProtocolError> {
    let mut d = Decoder::new();
    let mut n = 0;
    for part in bytes.chunks(chunk.max(1)) {
        d.push(part);
        while let Some(_f) = d.next_frame()? {
            n += 1;
        }
    }
    Ok(n)
}

#[test]
fn a_huge_string_length_is_an_error_before_any_allocation() {
    // A STRING frame whose length field claims 1 GiB inside a small frame.
    let mut body = vec![tag::STRING];
    body.extend_from_slice(&1u32.to_le_bytes());
    body.extend_from_slice(&(1u32 << 30).to_le_bytes());
    assert_eq!(decode_body(&body), Err(ProtocolError::NameTooLong(1 << 30)));
}

proptest! {
    /// Garbage from a hostile or broken process: the decoder returns frames or an error,
    /// never panics, never reads past its input.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096),
                                chunk in 1usize..300) {
        let _ = decode_all(&bytes, chunk);
    }

    /// A valid stream with bytes flipped, inserted or cut: frames up to the damage, then
    /// an error or a wait for more bytes; never a panic.
    #[test]
    fn damaged_streams_never_panic(at in any::<prop::sample::Index>(), byte in any::<u8>(),
                                   cut in any::<prop::sample::Index>(), mode in 0u8..3) {
        let mut bytes = valid_stream();
        let i = at.index(bytes.len());
        match mode {
            0 => bytes[i] ^= byte | 1,
            1 => bytes.insert(i, byte),
            _ => bytes.truncate(cut.index(bytes.len())),
        }
        let _ = decode_all(&bytes, 7);
    }

    #[test]
    fn ranges_round_trip(start in any::<i64>(), len in 0i64..1_000_000, tid in any::<u32>(),
                         depth in 0u32..64, cat in any::<u32>(), color in any::<Option<u32>>(),
                         name in ".{0,40}", payload in any::<i64>()) {
        let f = Frame::Range(Range {
            start_ns: start,
            end_ns: start.saturating_add(len),
            tid, depth, kind: WireRangeKind::StartEnd, domain: 3, category: cat, color,
            payload: Payload::Int(payload),
            name: Name::Text(name.into()),
        });
        let mut bytes = Vec::new();
        encode(&f, &mut bytes);
        let mut d = Decoder::new();
        d.push(&bytes);
        prop_assert_eq!(d.next_frame().unwrap(), Some(f));
    }
}
