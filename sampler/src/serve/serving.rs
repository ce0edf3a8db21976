//! A running exporter: the HTTP handler threads over the [`Exporter`] and the supervisor that
//! keeps its sampling run going, started and stopped together.

use super::http;
use super::{Backend, Exporter, Started, supervise};
use std::sync::Arc;

/// A running exporter: its HTTP server, handler threads and supervisor.
pub struct Serving {
    pub exporter: Arc<Exporter>,
    pub addr: Option<std::net::SocketAddr>,
    threads: Vec<std::thread::JoinHandle<()>>,
    server: Arc<tiny_http::Server>,
}

/// Starts serving `server` and supervising `backend` (with `first`, a run already started).
pub fn start(
    server: tiny_http::Server,
    exporter: Arc<Exporter>,
    backend: impl Backend,
    first: Option<Started>,
) -> std::io::Result<Serving> {
    let addr = http::local_addr(&server);
    let server = Arc::new(server);
    let mut threads = Vec::new();
    for i in 0..http::HANDLERS {
        let (s, e) = (Arc::clone(&server), Arc::clone(&exporter));
        threads.push(
            std::thread::Builder::new()
                .name(format!("cufall-http-{i}"))
                .spawn(move || http::serve(&s, &e))?,
        );
    }
    let e = Arc::clone(&exporter);
    threads.push(
        std::thread::Builder::new()
            .name("cufall-serve".into())
            .spawn(move || supervise(&e, backend, first))?,
    );
    Ok(Serving {
        exporter,
        addr,
        threads,
        server,
    })
}

impl Serving {
    /// Stops sampling and serving, and waits for every thread.
    pub fn stop(self) {
        self.exporter.shut_down();
        self.server.unblock();
        for t in self.threads {
            let _ = t.join();
        }
    }
}
