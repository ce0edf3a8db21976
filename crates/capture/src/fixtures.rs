//! Frames as the capture library sends them, for the tests of this crate and of the recorder
//! (`cufall`'s `recorder/` tests), so that a frame the tests script is written once. Compiled
//! for this crate's tests and behind the `test-support` feature, which only dev-dependencies
//! turn on: nothing here ships.

use crate::encode::encode;
use crate::frame::{Activity, Frame, Name, PROTOCOL_VERSION, Payload, Range};
use crate::kinds::{Kinds, WireActivityKind, WireRangeKind};

/// The first frame of process `pid` (a child of pid 1, a Python program) capturing the default
/// kinds.
pub fn hello(pid: u32) -> Frame<'static> {
    Frame::Hello {
        version: PROTOCOL_VERSION,
        pid,
        ppid: 1,
        kinds: Kinds::DEFAULT,
        exe: "/usr/bin/python3".into(),
    }
}

/// A push/pop range of thread 1 named `name`, outermost, in the default domain, without colour
/// or payload.
pub fn range<'a>(name: Name<'a>, start_ns: i64, end_ns: i64) -> Range<'a> {
    Range {
        start_ns,
        end_ns,
        tid: 1,
        depth: 0,
        kind: WireRangeKind::PushPop,
        domain: 0,
        category: 0,
        color: None,
        payload: Payload::None,
        name,
    }
}

/// [`range`] with its name as text, as a frame.
pub fn push_pop(name: &str, start_ns: i64, end_ns: i64) -> Frame<'static> {
    Frame::Range(range(Name::Text(name.to_string().into()), start_ns, end_ns))
}

/// A kernel of grid `[4, 1, 1]` and block `[128, 1, 1]` on device 0 (context 1, stream 7,
/// correlation 9), outside any graph, whose mangled name is string `name`.
pub fn kernel(name: u32, start_ns: i64, end_ns: i64) -> Activity {
    Activity {
        kind: WireActivityKind::Kernel,
        device: 0,
        context: 1,
        stream: 7,
        correlation: 9,
        start_ns,
        end_ns,
        grid: [4, 1, 1],
        block: [128, 1, 1],
        graph_id: 0,
        bytes: 0,
        copy_kind: 0,
        name,
    }
}

/// The bytes of `frames`, one after another, as a connection carries them.
pub fn encoded<'a>(frames: impl IntoIterator<Item = Frame<'a>>) -> Vec<u8> {
    let mut bytes = Vec::new();
    for f in frames {
        encode(&f, &mut bytes);
    }
    bytes
}
