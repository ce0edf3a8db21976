//! Bytes into frames: what the recorder reads, every length and value checked.

use std::borrow::Cow;

use crate::frame::{
    Activity, Frame, GraphKernel, MAX_FRAME_BYTES, MAX_GRAPH_KERNELS, Name, Payload, Range,
    WireApiCall, tag,
};
use crate::kinds::{Kinds, MAX_NAME_BYTES, WireActivityKind, WireApiDomain, WireRangeKind};

/// Why a byte stream is not a valid sequence of frames.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("a frame of {0} bytes is larger than the {MAX_FRAME_BYTES}-byte limit")]
    TooLarge(usize),
    #[error("unknown frame tag {0}")]
    UnknownTag(u8),
    #[error("a frame with tag {tag} ends early (needs {needed} more bytes)")]
    Short { tag: u8, needed: usize },
    #[error("a frame with tag {tag} has {extra} bytes left over")]
    Trailing { tag: u8, extra: usize },
    #[error("invalid value {value} for {what}")]
    BadValue { what: &'static str, value: u8 },
    #[error("a string of {0} bytes is longer than the {MAX_NAME_BYTES}-byte limit")]
    NameTooLong(usize),
    #[error("a graph listing {0} kernels, more than the {MAX_GRAPH_KERNELS} allowed")]
    TooManyGraphKernels(usize),
}

/// Splits a byte stream into frames; feed it bytes as they arrive.
#[derive(Default)]
pub struct Decoder {
    buf: Vec<u8>,
    at: usize,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.at > 0 && self.at == self.buf.len() {
            self.buf.clear();
            self.at = 0;
        } else if self.at > (1 << 20) {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received that do not yet form a whole frame.
    pub fn pending_bytes(&self) -> usize {
        self.buf.len() - self.at
    }

    /// The next whole frame, `Ok(None)` when more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'static>>, ProtocolError> {
        let rest = &self.buf[self.at..];
        if rest.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len > MAX_FRAME_BYTES {
            return Err(ProtocolError::TooLarge(len));
        }
        if rest.len() < 4 + len {
            return Ok(None);
        }
        let frame = decode_body(&rest[4..4 + len])?;
        self.at += 4 + len;
        Ok(Some(frame))
    }
}

/// Decodes one frame body (the bytes after the length).
pub fn decode_body(body: &[u8]) -> Result<Frame<'static>, ProtocolError> {
    let mut r = Reader { b: body, tag: 0 };
    let t = r.u8()?;
    r.tag = t;
    let frame = match t {
        tag::HELLO => Frame::Hello {
            version: r.u32()?,
            pid: r.u32()?,
            ppid: r.u32()?,
            kinds: Kinds(r.u32()?),
            exe: r.str()?,
        },
        tag::STRING => Frame::String {
            id: r.u32()?,
            text: r.str()?,
        },
        tag::RANGE => decode_range(&mut r)?,
        tag::ACTIVITY => decode_activity(&mut r)?,
        tag::API => Frame::Api(WireApiCall {
            domain: match r.u8()? {
                0 => WireApiDomain::Runtime,
                1 => WireApiDomain::Driver,
                v => {
                    return Err(ProtocolError::BadValue {
                        what: "API domain",
                        value: v,
                    });
                }
            },
            start_ns: r.i64()?,
            end_ns: r.i64()?,
            tid: r.u32()?,
            correlation: r.u32()?,
            name: r.u32()?,
        }),
        tag::STATUS => Frame::Status {
            t_ns: r.i64()?,
            event: r.str()?,
            count: r.u64()?,
            detail: r.str()?,
        },
        tag::BYE => Frame::Bye { t_ns: r.i64()? },
        tag::DEVICE => Frame::Device {
            id: r.u32()?,
            uuid: r.array()?,
        },
        tag::WINDOW => Frame::Window {
            t_ns: r.i64()?,
            open: match r.u8()? {
                0 => false,
                1 => true,
                v => {
                    return Err(ProtocolError::BadValue {
                        what: "window flag",
                        value: v,
                    });
                }
            },
        },
        tag::CONTEXT => Frame::Context {
            device: r.u32()?,
            context: r.u32()?,
        },
        tag::GRAPH => {
            let graph_id = r.u32()?;
            let exec_id = r.u32()?;
            let nodes = r.u32()?;
            let n = r.u32()? as usize;
            if n > MAX_GRAPH_KERNELS {
                return Err(ProtocolError::TooManyGraphKernels(n));
            }
            let mut kernels = Vec::with_capacity(n);
            for _ in 0..n {
                kernels.push(GraphKernel {
                    name: r.u32()?,
                    count: r.u32()?,
                });
            }
            Frame::Graph {
                graph_id,
                exec_id,
                nodes,
                kernels,
            }
        }
        other => return Err(ProtocolError::UnknownTag(other)),
    };
    if !r.b.is_empty() {
        return Err(ProtocolError::Trailing {
            tag: t,
            extra: r.b.len(),
        });
    }
    Ok(frame)
}

fn decode_range(r: &mut Reader<'_>) -> Result<Frame<'static>, ProtocolError> {
    let start_ns = r.i64()?;
    let end_ns = r.i64()?;
    let tid = r.u32()?;
    let depth = r.u32()?;
    let kind = match r.u8()? {
        0 => WireRangeKind::PushPop,
        1 => WireRangeKind::StartEnd,
        2 => WireRangeKind::Mark,
        v => {
            return Err(ProtocolError::BadValue {
                what: "range kind",
                value: v,
            });
        }
    };
    let domain = r.u32()?;
    let category = r.u32()?;
    let color = match r.u8()? {
        0 => None,
        _ => Some(r.u32()?),
    };
    let payload = match r.u8()? {
        0 => Payload::None,
        1 => Payload::Int(r.i64()?),
        2 => Payload::UInt(r.u64()?),
        3 => Payload::Float(f64::from_bits(r.u64()?)),
        v => {
            return Err(ProtocolError::BadValue {
                what: "payload type",
                value: v,
            });
        }
    };
    let name = match r.u8()? {
        0 => Name::Text(r.str()?),
        _ => Name::Registered(r.u32()?),
    };
    Ok(Frame::Range(Range {
        start_ns,
        end_ns,
        tid,
        depth,
        kind,
        domain,
        category,
        color,
        payload,
        name,
    }))
}

fn decode_activity(r: &mut Reader<'_>) -> Result<Frame<'static>, ProtocolError> {
    let kind = match r.u8()? {
        0 => WireActivityKind::Kernel,
        1 => WireActivityKind::Memcpy,
        2 => WireActivityKind::Memset,
        3 => WireActivityKind::Graph,
        v => {
            return Err(ProtocolError::BadValue {
                what: "activity kind",
                value: v,
            });
        }
    };
    let device = r.u32()?;
    let context = r.u32()?;
    let stream = r.u32()?;
    let correlation = r.u32()?;
    let start_ns = r.i64()?;
    let end_ns = r.i64()?;
    let mut dims = [0i32; 6];
    for d in &mut dims {
        *d = r.i32()?;
    }
    Ok(Frame::Activity(Activity {
        kind,
        device,
        context,
        stream,
        correlation,
        start_ns,
        end_ns,
        grid: [dims[0], dims[1], dims[2]],
        block: [dims[3], dims[4], dims[5]],
        graph_id: r.u32()?,
        bytes: r.u64()?,
        copy_kind: r.u8()?,
        name: r.u32()?,
    }))
}

struct Reader<'a> {
    b: &'a [u8],
    tag: u8,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtocolError> {
        if self.b.len() < n {
            return Err(ProtocolError::Short {
                tag: self.tag,
                needed: n - self.b.len(),
            });
        }
        let (head, tail) = self.b.split_at(n);
        self.b = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtocolError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, ProtocolError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, ProtocolError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn i32(&mut self) -> Result<i32, ProtocolError> {
        Ok(i32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, ProtocolError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn i64(&mut self) -> Result<i64, ProtocolError> {
        Ok(i64::from_le_bytes(self.array()?))
    }
    fn str(&mut self) -> Result<Cow<'static, str>, ProtocolError> {
        let n = self.u32()? as usize;
        // The encoder never writes a longer one: a longer length is garbage, not a name.
        if n > MAX_NAME_BYTES {
            return Err(ProtocolError::NameTooLong(n));
        }
        let bytes = self.take(n)?;
        Ok(Cow::Owned(String::from_utf8_lossy(bytes).into_owned()))
    }
}
