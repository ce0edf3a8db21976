//! Frames into bytes: what the capture library sends.

use crate::frame::{Activity, Frame, GraphKernel, MAX_GRAPH_KERNELS, Name, Payload, Range, tag};
use crate::kinds::{MAX_NAME_BYTES, WireActivityKind, WireApiDomain, WireRangeKind};

/// Appends the encoding of `frame` to `out`.
pub fn encode(frame: &Frame<'_>, out: &mut Vec<u8>) {
    // One reservation up front: the field writes below then never reallocate for the fixed
    // part of a frame (the hot path encodes an NVTX range per pop).
    out.reserve(96);
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    let mut w = Writer(out);
    match frame {
        Frame::Hello {
            version,
            pid,
            ppid,
            kinds,
            exe,
        } => {
            w.u8(tag::HELLO);
            w.u32(*version);
            w.u32(*pid);
            w.u32(*ppid);
            w.u32(kinds.0);
            w.str(exe);
        }
        Frame::String { id, text } => {
            w.u8(tag::STRING);
            w.u32(*id);
            w.str(text);
        }
        Frame::Range(r) => encode_range(&mut w, r),
        Frame::Activity(a) => encode_activity(&mut w, a),
        Frame::Api(c) => {
            w.u8(tag::API);
            w.u8(match c.domain {
                WireApiDomain::Runtime => 0,
                WireApiDomain::Driver => 1,
            });
            w.i64(c.start_ns);
            w.i64(c.end_ns);
            w.u32(c.tid);
            w.u32(c.correlation);
            w.u32(c.name);
        }
        Frame::Status {
            t_ns,
            event,
            count,
            detail,
        } => {
            w.u8(tag::STATUS);
            w.i64(*t_ns);
            w.str(event);
            w.u64(*count);
            w.str(detail);
        }
        Frame::Device { id, uuid } => {
            w.u8(tag::DEVICE);
            w.u32(*id);
            w.0.extend_from_slice(uuid);
        }
        Frame::Bye { t_ns } => {
            w.u8(tag::BYE);
            w.i64(*t_ns);
        }
        Frame::Window { t_ns, open } => {
            w.u8(tag::WINDOW);
            w.i64(*t_ns);
            w.u8(u8::from(*open));
        }
        Frame::Context { device, context } => {
            w.u8(tag::CONTEXT);
            w.u32(*device);
            w.u32(*context);
        }
        Frame::Graph {
            graph_id,
            exec_id,
            nodes,
            kernels,
        } => encode_graph(&mut w, *graph_id, *exec_id, *nodes, kernels),
    }
    let body = out.len() - at - 4;
    let len = u32::try_from(body).unwrap_or(u32::MAX).to_le_bytes();
    out[at..at + 4].copy_from_slice(&len);
}

/// The body of a [`Frame::Activity`].
fn encode_activity(w: &mut Writer<'_>, a: &Activity) {
    w.u8(tag::ACTIVITY);
    w.u8(match a.kind {
        WireActivityKind::Kernel => 0,
        WireActivityKind::Memcpy => 1,
        WireActivityKind::Memset => 2,
        WireActivityKind::Graph => 3,
    });
    w.u32(a.device);
    w.u32(a.context);
    w.u32(a.stream);
    w.u32(a.correlation);
    w.i64(a.start_ns);
    w.i64(a.end_ns);
    for v in a.grid.iter().chain(&a.block) {
        w.i32(*v);
    }
    w.u32(a.graph_id);
    w.u64(a.bytes);
    w.u8(a.copy_kind);
    w.u32(a.name);
}

/// The body of a [`Frame::Graph`]: at most [`MAX_GRAPH_KERNELS`] kernels.
fn encode_graph(
    w: &mut Writer<'_>,
    graph_id: u32,
    exec_id: u32,
    nodes: u32,
    kernels: &[GraphKernel],
) {
    w.u8(tag::GRAPH);
    w.u32(graph_id);
    w.u32(exec_id);
    w.u32(nodes);
    let kernels = &kernels[..kernels.len().min(MAX_GRAPH_KERNELS)];
    w.u32(u32::try_from(kernels.len()).unwrap_or(0));
    for k in kernels {
        w.u32(k.name);
        w.u32(k.count);
    }
}

/// The body of a [`Frame::Range`].
fn encode_range(w: &mut Writer<'_>, r: &Range<'_>) {
    w.u8(tag::RANGE);
    w.i64(r.start_ns);
    w.i64(r.end_ns);
    w.u32(r.tid);
    w.u32(r.depth);
    w.u8(match r.kind {
        WireRangeKind::PushPop => 0,
        WireRangeKind::StartEnd => 1,
        WireRangeKind::Mark => 2,
    });
    w.u32(r.domain);
    w.u32(r.category);
    match r.color {
        Some(c) => {
            w.u8(1);
            w.u32(c);
        }
        None => w.u8(0),
    }
    match r.payload {
        Payload::None => w.u8(0),
        Payload::Int(v) => {
            w.u8(1);
            w.i64(v);
        }
        Payload::UInt(v) => {
            w.u8(2);
            w.u64(v);
        }
        Payload::Float(v) => {
            w.u8(3);
            w.u64(v.to_bits());
        }
    }
    match &r.name {
        Name::Text(t) => {
            w.u8(0);
            w.str(t);
        }
        Name::Bytes(b) => {
            w.u8(0);
            w.bytes(b);
        }
        Name::Registered(id) => {
            w.u8(1);
            w.u32(*id);
        }
    }
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        // A name longer than 64 KiB is cut (at a character boundary): no real name is, and a
        // bounded frame keeps a runaway string from stalling the stream.
        let mut end = s.len().min(MAX_NAME_BYTES);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.bytes(&s.as_bytes()[..end]);
    }
    fn bytes(&mut self, b: &[u8]) {
        let b = &b[..b.len().min(MAX_NAME_BYTES)];
        self.u32(u32::try_from(b.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(b);
    }
}
