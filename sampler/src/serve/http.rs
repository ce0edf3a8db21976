//! The HTTP side of `cufall serve`: binding the listen address (with one clear message per way
//! it can fail), and the routes.
//!
//! | route | what |
//! |---|---|
//! | `GET /metrics` | the exposition; the scraper is the peer's address and `?scraper=NAME` when given |
//! | `POST /dump` | writes the flight recorder to a trace; loopback peers only unless `--allow-remote-dump` (403); 409 while a dump runs; 429 within 10 s of the last |
//! | `POST /pause?for=DURATION` | releases the GPU counters for DURATION (default 5 min, at most a day; 400 beyond); loopback only as `/dump`; 409 when nothing samples them |
//! | `POST /resume` | ends a pause now; loopback only as `/dump`; 409 when not paused |
//! | `GET /` | a line per route |
//!
//! A few handler threads take requests from tiny_http (which reads each connection on a thread
//! of its own), so a dump being written, or a scraper reading slowly, leaves the others served.
//!
//! A known limit of tiny_http 0.12: its connection threads have no read timeout, a kept-alive
//! connection holds its thread until the client closes it, and a connection that arrives in the
//! instant another wakes a pool thread can be queued behind a thread that is waiting on such a
//! connection. A client that opens a connection and never finishes its request (or keeps an idle
//! connection open) can so delay another scraper's connection until it closes. A read timeout
//! on the listening socket would also time out `accept`, which ends tiny_http's accept thread,
//! so it cannot be set from here.

use super::{DumpRefused, Exporter};
use crate::pipeline::pause::PauseRefused;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;
use tiny_http::{Header, Method, Request, Response, Server};

/// Threads answering requests.
pub const HANDLERS: usize = 4;

/// Why the listen address could not be had.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("--listen {given}: not an ADDRESS:PORT (e.g. 0.0.0.0:9401 or 127.0.0.1:9401)")]
    Syntax { given: String },
    #[error(
        "--listen {addr}: the port is in use by another program (another cufall serve or \
exporter?); choose another port, e.g. --listen {ip}:{next}, or stop the other program",
        ip = addr.ip(), next = addr.port().wrapping_add(1).max(1024)
    )]
    InUse { addr: SocketAddr },
    #[error(
        "--listen {addr}: {ip} is not an address of this machine; use 0.0.0.0 (every \
interface), 127.0.0.1 (this machine only) or one of the addresses `ip addr` lists",
        ip = addr.ip()
    )]
    NotLocal { addr: SocketAddr },
    #[error(
        "--listen {addr}: not allowed to listen on port {port} (ports below 1024 need root); \
use a port above 1023, such as the default 9401",
        port = addr.port()
    )]
    Denied { addr: SocketAddr },
    #[error("--listen {addr}: cannot listen")]
    Other {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Binds `given` (`ADDRESS:PORT`; port 0 picks a free one).
pub fn bind(given: &str) -> Result<Server, BindError> {
    let syntax = || BindError::Syntax {
        given: given.to_string(),
    };
    let addr = given
        .to_socket_addrs()
        .map_err(|_| syntax())?
        .next()
        .ok_or_else(syntax)?;
    let listener = TcpListener::bind(addr).map_err(|e| match e.kind() {
        ErrorKind::AddrInUse => BindError::InUse { addr },
        ErrorKind::AddrNotAvailable => BindError::NotLocal { addr },
        ErrorKind::PermissionDenied => BindError::Denied { addr },
        _ => BindError::Other { addr, source: e },
    })?;
    Server::from_listener(listener, None).map_err(|e| BindError::Other {
        addr,
        source: std::io::Error::other(e.to_string()),
    })
}

/// The address `server` listens on.
pub fn local_addr(server: &Server) -> Option<SocketAddr> {
    server.server_addr().to_ip()
}

/// Answers requests until the exporter shuts down.
pub fn serve(server: &Server, exporter: &Arc<Exporter>) {
    while !exporter.is_shut_down() {
        match server.recv_timeout(Duration::from_millis(200)) {
            Ok(Some(req)) => handle(req, exporter),
            Ok(None) => {}
            Err(_) => break,
        }
    }
}

fn text(status: u16, body: String) -> Response<std::io::Cursor<Vec<u8>>> {
    let ct = Header::from_bytes("Content-Type", "text/plain; charset=utf-8")
        .or_else(|_| Header::from_bytes("Content-Type", "text/plain"));
    let r = Response::from_string(body).with_status_code(status);
    match ct {
        Ok(h) => r.with_header(h),
        Err(()) => r,
    }
}

fn handle(req: Request, exporter: &Arc<Exporter>) {
    let url = req.url().to_string();
    let (path, query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let peer = req.remote_addr().copied();
    let response = match (req.method(), path) {
        (Method::Get, "/metrics") => {
            let body = exporter.scrape(&scraper_key(query, peer));
            let ct = Header::from_bytes("Content-Type", "text/plain; version=0.0.4; charset=utf-8");
            let r = Response::from_string(body);
            match ct {
                Ok(h) => r.with_header(h),
                Err(()) => r,
            }
        }
        (Method::Post, "/dump") => refuse_remote(exporter, peer, "/dump").unwrap_or_else(|| dump(exporter)),
        (_, "/dump") => text(405, "use POST /dump to write the flight recorder\n".into()),
        (Method::Post, "/pause") => refuse_remote(exporter, peer, "/pause")
            .unwrap_or_else(|| pause(exporter, query)),
        (Method::Post, "/resume") => refuse_remote(exporter, peer, "/resume")
            .unwrap_or_else(|| resume(exporter)),
        (_, "/pause" | "/resume") => text(
            405,
            format!("use POST {path} (e.g. curl -X POST 'http://127.0.0.1:PORT/pause?for=30s')\n"),
        ),
        (Method::Get, "/") => text(
            200,
            "cufall serve\nGET  /metrics           Prometheus exposition\nPOST /dump              write the flight recorder to a trace\nPOST /pause?for=30s     release the GPU counters for another tool (default 5m)\nPOST /resume            sample the GPU counters again now\n"
                .into(),
        ),
        _ => text(404, format!("no such page: {path} (try /metrics)\n")),
    };
    // A scraper that hung up gets nothing; there is no one to tell.
    let _ = req.respond(response);
}

/// Who a scrape is for: the peer's address, and the `?scraper=` name when given. The address
/// is part of it so that a client elsewhere naming another's scraper gets a window of its own
/// instead of consuming that scraper's.
fn scraper_key(query: &str, peer: Option<SocketAddr>) -> String {
    let ip = peer.map_or_else(
        || "unknown".to_string(),
        |p| p.ip().to_canonical().to_string(),
    );
    match query
        .split('&')
        .find_map(|kv| kv.strip_prefix("scraper="))
        .filter(|v| !v.is_empty())
    {
        Some(name) => format!("{ip} {name}"),
        None => ip,
    }
}

/// Whether `peer` is this machine. A dual-stack listener (`[::]`) sees an IPv4 loopback peer
/// as `::ffff:127.0.0.1`, which `Ipv6Addr::is_loopback` says is not loopback.
fn is_loopback(peer: SocketAddr) -> bool {
    peer.ip().to_canonical().is_loopback()
}

type Reply = Response<std::io::Cursor<Vec<u8>>>;

/// 403 for a peer of another machine, unless `--allow-remote-dump`: `/dump`, `/pause` and
/// `/resume` change what the exporter does, scrapes only read.
fn refuse_remote(exporter: &Exporter, peer: Option<SocketAddr>, route: &str) -> Option<Reply> {
    let loopback = peer.is_some_and(is_loopback);
    if loopback || exporter.options().allow_remote_dump {
        return None;
    }
    let who = peer.map_or("an unknown peer".to_string(), |p| p.ip().to_string());
    Some(text(
        403,
        format!(
            "refused: {route} is only accepted from this machine (127.0.0.1 or ::1), not from \
{who}; run `curl -X POST http://127.0.0.1:PORT{route}` on the GPU node, or start cufall serve \
with --allow-remote-dump\n"
        ),
    ))
}

/// The `for=` of a pause: default 5 minutes.
fn pause_duration(query: &str) -> Result<Duration, crate::args::duration::DurationError> {
    match query.split('&').find_map(|kv| kv.strip_prefix("for=")) {
        None => Ok(crate::pipeline::pause::DEFAULT_PAUSE),
        Some(v) => {
            // `%20` and `+` are what a client makes of a space (`for=1m 30s`).
            let v = v.replace("%20", " ").replace('+', " ");
            crate::args::duration::parse_positive_duration(&v)
        }
    }
}

fn pause(exporter: &Exporter, query: &str) -> Reply {
    let d = match pause_duration(query) {
        Ok(d) => d,
        Err(e) => return text(400, format!("refused: for={e}\n")),
    };
    match exporter.pause(d) {
        Ok(done) => text(200, format!("{done}\n")),
        Err(e @ PauseRefused::TooLong { .. }) => text(400, format!("refused: {e}\n")),
        Err(e) => text(409, format!("refused: {e}\n")),
    }
}

fn resume(exporter: &Exporter) -> Reply {
    match exporter.resume() {
        Ok(done) => text(200, format!("{done}\n")),
        Err(e) => text(409, format!("refused: {e}\n")),
    }
}

fn dump(exporter: &Arc<Exporter>) -> Reply {
    match exporter.dump() {
        Ok(d) => text(
            200,
            format!(
                "wrote {} ({} samples, {:.1} s)\n",
                d.path.display(),
                d.samples,
                d.span_ns as f64 / 1e9
            ),
        ),
        Err(DumpRefused::Busy) => text(
            409,
            "a flight-recorder dump is being written; try again when it finishes\n".into(),
        ),
        Err(e @ DumpRefused::TooSoon { since, every }) => text(
            429,
            format!(
                "{e}; try again in {:.0} s\n",
                every.saturating_sub(since).as_secs_f64().ceil()
            ),
        ),
        Err(DumpRefused::Failed(e)) => text(500, format!("dump failed: {e}\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scraper_is_its_peer_and_its_name() {
        let peer = |s: &str| Some(s.parse::<SocketAddr>().unwrap());
        let here = scraper_key("scraper=prom", peer("10.0.0.1:5000"));
        // Another connection of the same client is the same scraper; another peer is not.
        assert_eq!(here, scraper_key("x=1&scraper=prom", peer("10.0.0.1:6000")));
        assert_ne!(here, scraper_key("scraper=prom", peer("10.0.0.2:5000")));
        assert_ne!(here, scraper_key("scraper=other", peer("10.0.0.1:5000")));
        assert_eq!(scraper_key("", peer("[::ffff:10.0.0.1]:1")), "10.0.0.1");
        assert_eq!(scraper_key("scraper=", peer("10.0.0.1:1")), "10.0.0.1");
    }

    #[test]
    fn a_pause_is_five_minutes_unless_given() {
        assert_eq!(pause_duration("").unwrap(), Duration::from_secs(300));
        assert_eq!(pause_duration("for=30s").unwrap(), Duration::from_secs(30));
        assert_eq!(
            pause_duration("x=1&for=1m+30s").unwrap(),
            Duration::from_secs(90)
        );
        assert!(pause_duration("for=0").is_err());
        assert!(pause_duration("for=soon").is_err());
    }

    #[test]
    fn an_ipv4_loopback_peer_on_a_dual_stack_listener_is_loopback() {
        let peer = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(is_loopback(peer("127.0.0.1:5000")));
        assert!(is_loopback(peer("[::1]:5000")));
        assert!(is_loopback(peer("[::ffff:127.0.0.1]:5000")));
        assert!(!is_loopback(peer("[::ffff:192.0.2.1]:5000")));
        assert!(!is_loopback(peer("192.0.2.1:5000")));
        assert!(!is_loopback(peer("[2001:db8::1]:5000")));
    }
}
