//! `cufall serve` on fake GPUs (`common/clocked.rs`): the real decode loop, evaluators, sink and
//! live feed, the exporter's supervisor and HTTP server, scraped over TCP as Prometheus would.
//! Faults: counters taken by another profiler and given back, a GPU that disappears, slow and
//! concurrent scrapers, dumps during scrapes and during dumps. The built binary is run for the
//! errors that come before any GPU is touched.
#![allow(clippy::unwrap_used)] // tests fail loudly by design

mod common;

use common::clocked::{BUSY_VALUE, FakeGpus, METRIC, POWER_W, Switches};
use cufall_sampler::serve::serving::{self, Serving};
use cufall_sampler::serve::{self, Exporter, ServeOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

struct Fixture {
    serving: Option<Serving>,
    addr: SocketAddr,
    switches: Vec<Arc<Switches>>,
    dir: tempfile::TempDir,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(s) = self.serving.take() {
            s.stop();
        }
    }
}

impl Fixture {
    fn exporter(&self) -> &Arc<Exporter> {
        &self.serving.as_ref().unwrap().exporter
    }
}

fn serve_fake(gpus: usize) -> Fixture {
    serve_fake_on(gpus, "127.0.0.1:0")
}

fn serve_fake_on(gpus: usize, listen: &str) -> Fixture {
    serve_fake_with(gpus, listen, |o| {
        // Dumps as fast as the tests ask, all kept.
        o.dump_min_interval = Duration::ZERO;
        o.dump_keep = 1000;
    })
}

fn serve_fake_with(gpus: usize, listen: &str, tweak: impl FnOnce(&mut ServeOptions)) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let server = serve::http::bind(listen).unwrap();
    let mut opts = ServeOptions::new(dir.path().to_path_buf());
    opts.keep = Duration::from_secs(60);
    opts.backoff = (Duration::from_millis(100), Duration::from_millis(400));
    opts.hostname = "testhost".into();
    opts.env = vec![("POD_NAME".into(), "llm-0".into())];
    opts.log_prefix = "cufall serve (test)";
    tweak(&mut opts);
    let backend = FakeGpus::new(gpus);
    let switches = backend.switches.clone();
    let serving = serving::start(server, Exporter::new(opts), backend, None).unwrap();
    let addr = serving.addr.unwrap();
    Fixture {
        serving: Some(serving),
        addr,
        switches,
        dir,
    }
}

/// One HTTP/1.0 request; the status code and body.
fn request(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: test\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (code, body)
}

fn scrape(addr: SocketAddr, who: &str) -> String {
    let (code, body) = request(addr, "GET", &format!("/metrics?scraper={who}"));
    assert_eq!(code, 200, "{body}");
    body
}

/// The value of the series `name` whose labels contain every one of `labels`.
fn value(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .find(|l| labels.iter().all(|x| l.contains(x)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn gpu(i: u32) -> String {
    format!("gpu=\"{i}\"")
}

fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Scrapes until GPU `i` has a window with samples, then returns the next scrape after `wait`.
fn warm_scrape(f: &Fixture, who: &str, i: u32, wait: Duration) -> String {
    let g = gpu(i);
    wait_for("samples", Duration::from_secs(20), || {
        value(&scrape(f.addr, who), "cufall_samples_total", &[&g]).is_some_and(|v| v > 0.0)
    });
    std::thread::sleep(wait);
    scrape(f.addr, who)
}

#[test]
fn a_scrape_shows_the_truth_beside_nvidia_smi() {
    let f = serve_fake(1);
    let text = warm_scrape(&f, "p", 0, Duration::from_millis(1500));
    let g = gpu(0);
    let labels = [
        g.as_str(),
        "UUID=\"GPU-fake-0\"",
        "modelName=\"Fake H200\"",
        "Hostname=\"testhost\"",
        "pod=\"llm-0\"",
    ];
    let idle = value(&text, "cufall_idle_ratio", &labels).expect("idle ratio");
    assert!((0.15..=0.25).contains(&idle), "idle {idle}\n{text}");
    let metric = format!("metric=\"{METRIC}\"");
    let mean = value(&text, "cufall_metric_mean", &[&g, &metric, "unit=\"%\""]).unwrap();
    assert!(
        (BUSY_VALUE * 0.75..=BUSY_VALUE * 0.85).contains(&mean),
        "mean {mean}"
    );
    assert_eq!(
        value(&text, "cufall_metric_max", &[&g, &metric]),
        Some(BUSY_VALUE)
    );
    assert_eq!(
        value(&text, "cufall_nvml_gpu_utilization_ratio", &[&g]),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "cufall_power_watts", &[&g]),
        Some(f64::from(POWER_W))
    );
    // 100 gaps of 2 ms end every second.
    let window = value(&text, "cufall_window_seconds", &[]).unwrap();
    let gaps = value(&text, "cufall_window_idle_gaps", &[&g]).unwrap();
    let per_s = gaps / window;
    assert!((60.0..=110.0).contains(&per_s), "{gaps} gaps in {window} s");
    let gap_s = value(&text, "cufall_window_idle_gap_seconds", &[&g]).unwrap();
    assert!(
        (gap_s / gaps - 0.002).abs() < 0.0002,
        "gaps of {} s",
        gap_s / gaps
    );
    assert_eq!(
        value(&text, "cufall_sampling_state", &["state=\"sampling\""]),
        Some(1.0)
    );
    let age = value(&text, "cufall_sample_age_seconds", &[&g]).unwrap();
    assert!(age < 1.0, "age {age}");
    assert!(value(&text, "cufall_exporter_cpu_seconds_total", &[]).unwrap() > 0.0);
    assert!(value(&text, "cufall_samples_lost_total", &[&g]) == Some(0.0));
}

#[test]
fn counters_taken_by_another_profiler_are_said_and_sampling_resumes() {
    let f = serve_fake(1);
    let g = gpu(0);
    warm_scrape(&f, "p", 0, Duration::ZERO);
    f.switches[0].taken.store(true, Ordering::SeqCst);
    wait_for("counters_busy", Duration::from_secs(20), || {
        let t = scrape(f.addr, "p");
        value(&t, "cufall_sampling_state", &["state=\"counters_busy\""]) == Some(1.0)
    });
    std::thread::sleep(Duration::from_millis(1200));
    let busy = scrape(f.addr, "p");
    let age = value(&busy, "cufall_sample_age_seconds", &[&g]).unwrap();
    assert!(
        age >= 1.0,
        "staleness grows while the counters are held: {age}"
    );
    assert_eq!(
        value(&busy, "cufall_idle_ratio", &[&g]),
        None,
        "no samples: no value, not 0"
    );
    assert_eq!(value(&busy, "cufall_metric_mean", &[&g]), None);
    // NVML goes on: nvidia-smi's number is still there.
    assert_eq!(
        value(&busy, "cufall_power_watts", &[&g]),
        Some(f64::from(POWER_W))
    );
    let log = f.exporter().recent_log().join("\n");
    assert!(log.contains("held by another profiler"), "{log}");
    assert!(log.contains("asking for the GPU counters again"), "{log}");
    assert_eq!(
        value(&busy, "cufall_sampling_state", &["state=\"counters_busy\""]),
        Some(1.0),
        "retrying keeps the state"
    );
    let before = value(&busy, "cufall_samples_total", &[&g]).unwrap_or(0.0);
    f.switches[0].taken.store(false, Ordering::SeqCst);
    wait_for("sampling again", Duration::from_secs(20), || {
        let t = scrape(f.addr, "p");
        value(&t, "cufall_sampling_state", &["state=\"sampling\""]) == Some(1.0)
            && value(&t, "cufall_samples_total", &[&g]).is_some_and(|v| v > before)
            && value(&t, "cufall_sample_age_seconds", &[&g]).is_some_and(|a| a < 0.5)
    });
    let t = scrape(f.addr, "p");
    assert!(value(&t, "cufall_sampling_restarts_total", &[]).unwrap() >= 1.0);
}

#[test]
fn a_gpu_that_disappears_goes_stale_and_the_others_go_on() {
    let f = serve_fake(2);
    warm_scrape(&f, "p", 1, Duration::ZERO);
    f.switches[1].gone.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(2000));
    let (g0, g1) = (gpu(0), gpu(1));
    let first = scrape(f.addr, "p");
    std::thread::sleep(Duration::from_millis(500));
    let t = scrape(f.addr, "p");
    let age1 = value(&t, "cufall_sample_age_seconds", &[&g1]).unwrap();
    assert!(age1 >= 1.5, "the GPU that left is stale: {age1}\n{t}");
    assert!(value(&t, "cufall_sample_age_seconds", &[&g0]).unwrap() < 0.5);
    assert!(value(&t, "cufall_idle_ratio", &[&g0]).is_some());
    assert_eq!(value(&t, "cufall_idle_ratio", &[&g1]), None);
    assert!(
        value(&t, "cufall_samples_total", &[&g0]) > value(&first, "cufall_samples_total", &[&g0])
    );
    let log = f.exporter().recent_log().join("\n");
    assert!(log.contains("GPU 1"), "the log names the GPU: {log}");
}

/// A scraper that sends its request a byte at a time, then reads its answer a byte at a time,
/// then closes (slow, as a scraper on a congested link is).
fn slow_scrape(addr: SocketAddr, pause: Duration) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    for b in b"GET /metrics?scraper=slow HTTP/1.0\r\nHost: t\r\n\r\n" {
        s.write_all(&[*b]).unwrap();
        std::thread::sleep(pause);
    }
    let (mut text, mut byte) = (Vec::new(), [0u8; 1]);
    while s.read(&mut byte).unwrap() == 1 {
        text.push(byte[0]);
        if text.len() % 512 == 0 {
            std::thread::sleep(pause);
        }
    }
    String::from_utf8(text).unwrap()
}

#[test]
fn slow_and_concurrent_scrapers_each_get_their_own_window() {
    let f = serve_fake(1);
    warm_scrape(&f, "a", 0, Duration::ZERO);
    let slow = {
        let addr = f.addr;
        std::thread::spawn(move || slow_scrape(addr, Duration::from_millis(20)))
    };
    let g = gpu(0);
    let barrier = Arc::new(Barrier::new(2));
    let scrapers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|who| {
            let (addr, b, g) = (f.addr, Arc::clone(&barrier), g.clone());
            std::thread::spawn(move || {
                b.wait();
                let mut windows = Vec::new();
                for _ in 0..5 {
                    let t0 = Instant::now();
                    let text = scrape(addr, who);
                    assert!(t0.elapsed() < Duration::from_secs(2), "a scrape waited");
                    let w = value(&text, "cufall_window_seconds", &[]).unwrap();
                    let n = value(&text, "cufall_idle_ratio", &[&g]);
                    windows.push((w, n));
                    std::thread::sleep(Duration::from_millis(300));
                }
                windows
            })
        })
        .collect();
    for s in scrapers {
        let windows = s.join().unwrap();
        // After the first scrape, each window is this scraper's own interval (~0.3 s), not the
        // other's, and has values.
        for (w, idle) in &windows[1..] {
            assert!((0.2..1.5).contains(w), "window {w}: {windows:?}");
            assert!(
                idle.is_some_and(|v| (0.05..0.35).contains(&v)),
                "{windows:?}"
            );
        }
    }
    // The slow scraper got its whole answer, with its own window.
    let text = slow.join().unwrap();
    assert!(
        text.starts_with("HTTP/1.1 200") || text.starts_with("HTTP/1.0 200"),
        "{text}"
    );
    assert!(text.contains("cufall_exporter_scrapers 3\n"), "{text}");
}

#[test]
fn dumps_during_scrapes_and_during_dumps() {
    let f = serve_fake(2);
    warm_scrape(&f, "p", 1, Duration::from_millis(1500));
    let addr = f.addr;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scraper = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut n = 0;
            while !done.load(Ordering::SeqCst) {
                let t0 = Instant::now();
                scrape(addr, "during-dumps");
                assert!(
                    t0.elapsed() < Duration::from_secs(2),
                    "a scrape waited for a dump"
                );
                n += 1;
            }
            n
        })
    };
    let (mut ok, mut busy) = (Vec::new(), 0);
    for _ in 0..20 {
        let barrier = Arc::new(Barrier::new(2));
        let posts: Vec<_> = (0..2)
            .map(|_| {
                let b = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    b.wait();
                    request(addr, "POST", "/dump")
                })
            })
            .collect();
        for p in posts {
            let (code, body) = p.join().unwrap();
            match code {
                200 => ok.push(body),
                409 => {
                    assert!(body.contains("being written"), "{body}");
                    busy += 1;
                }
                c => panic!("POST /dump answered {c}: {body}"),
            }
        }
        if busy > 0 && ok.len() >= 2 {
            break;
        }
    }
    done.store(true, Ordering::SeqCst);
    assert!(scraper.join().unwrap() > 0);
    assert!(busy > 0, "two dumps at once never overlapped");
    // Every 200 is a finished trace that the reader opens; no partial folder is left.
    let written: Vec<_> = std::fs::read_dir(f.dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(written.len(), ok.len(), "{written:?}");
    for p in &written {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("flight-testhost-") && name.ends_with(".cufall"),
            "{name}"
        );
        let trace = cufall_trace::Trace::open(p).unwrap();
        let m = trace.manifest();
        assert_eq!(m.devices.len(), 2);
        assert_eq!(m.metric_names(), vec![METRIC]);
        assert!(trace.nvml().unwrap().len() > 50);
    }
    let text = scrape(addr, "p");
    assert_eq!(
        value(&text, "cufall_flight_recorder_dumps_total", &[]),
        Some(ok.len() as f64)
    );
}

#[test]
fn a_dump_is_a_trace_that_info_and_report_read() {
    let f = serve_fake(1);
    warm_scrape(&f, "p", 0, Duration::from_millis(1000));
    let (code, body) = request(f.addr, "POST", "/dump");
    assert_eq!(code, 200, "{body}");
    let path = body
        .trim()
        .strip_prefix("wrote ")
        .unwrap()
        .split(" (")
        .next()
        .unwrap();
    let info = assert_cmd::Command::cargo_bin("cufall")
        .unwrap()
        .args(["info", path])
        .assert()
        .success();
    let out = String::from_utf8_lossy(&info.get_output().stdout).into_owned();
    assert!(out.contains("Fake H200"), "{out}");
    let report = assert_cmd::Command::cargo_bin("cufall")
        .unwrap()
        .args(["report", path, "--json"])
        .assert()
        .success();
    let json: serde_json::Value = serde_json::from_slice(&report.get_output().stdout).unwrap();
    // The report's idle test and the exporter's are one: both find the pattern's 0.2.
    let idle = json["whole_run"]["idle_fraction"]
        .as_f64()
        .expect("idle fraction");
    assert!((0.15..=0.25).contains(&idle), "report: idle {idle}");
    let gaps = json["gap_count"].as_u64().unwrap();
    assert!(
        gaps >= 50,
        "report: {gaps} gaps of 2 ms in a second or more"
    );
    let t = scrape(f.addr, "p");
    let g = gpu(0);
    let ratio = value(&t, "cufall_idle_seconds_total", &[&g]).unwrap()
        / value(&t, "cufall_sampled_seconds_total", &[&g]).unwrap();
    assert!(
        (ratio - idle).abs() < 0.05,
        "exporter {ratio}, report {idle}"
    );
    let (code, _) = request(f.addr, "GET", "/dump");
    assert_eq!(code, 405);
}

#[test]
fn dumps_are_spaced_and_only_the_newest_are_kept() {
    let f = serve_fake_with(1, "127.0.0.1:0", |o| {
        o.dump_min_interval = Duration::from_millis(1500);
        o.dump_keep = 2;
    });
    warm_scrape(&f, "p", 0, Duration::from_millis(200));
    // Not cufall's names: never deleted.
    let mine = ["notes.cufall", "flight-testhost-latest.cufall"];
    for m in mine {
        std::fs::create_dir(f.dir.path().join(m)).unwrap();
    }
    let mut written = Vec::new();
    for k in 0..3 {
        let (code, body) = request(f.addr, "POST", "/dump");
        assert_eq!(code, 200, "dump {k}: {body}");
        written.push(body);
        let (code, body) = request(f.addr, "POST", "/dump");
        assert_eq!(code, 429, "{body}");
        assert!(
            body.starts_with("a flight-recorder dump was asked for")
                && body.contains("one is written at most every 2 s; try again in"),
            "{body}"
        );
        // Distinct names a second apart, so the oldest is the first.
        std::thread::sleep(Duration::from_millis(1600));
    }
    let mut names: Vec<String> = std::fs::read_dir(f.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let dumps: Vec<&String> = names
        .iter()
        .filter(|n| !mine.contains(&n.as_str()))
        .collect();
    assert_eq!(dumps.len(), 2, "{names:?}");
    assert!(written[0].contains("flight-testhost-"));
    for m in mine {
        assert!(names.iter().any(|n| n == m), "{names:?}");
    }
    for (w, d) in written[1..].iter().zip(&dumps) {
        assert!(w.contains(d.as_str()), "{w} {d}");
    }
    assert!(
        f.exporter()
            .recent_log()
            .iter()
            .any(|l| l.starts_with("flight recorder: deleted") && l.ends_with("(--dump-keep 2)")),
        "{:?}",
        f.exporter().recent_log()
    );
}

/// An address of this machine other than loopback (the source address of the default route;
/// connecting a UDP socket sends nothing).
fn outside_address() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[test]
fn dump_is_refused_to_other_machines() {
    let Some(ip) = outside_address() else {
        eprintln!("skipped: this machine has no address but loopback to connect from");
        return;
    };
    let f = serve_fake_on(1, "0.0.0.0:0");
    let at = SocketAddr::new(ip, f.addr.port());
    let (code, body) = request(at, "POST", "/dump");
    assert_eq!(code, 403, "{body}");
    assert!(body.contains(&format!("not from {ip}")), "{body}");
    assert!(body.contains("--allow-remote-dump"), "{body}");
    // Pausing and resuming change what the exporter does, as a dump does.
    for route in ["/pause?for=10s", "/resume"] {
        let (code, body) = request(at, "POST", route);
        assert_eq!(code, 403, "{route}: {body}");
        assert!(body.contains("--allow-remote-dump"), "{body}");
    }
    assert_eq!(f.switches[0].rearmed.load(Ordering::SeqCst), 0);
    // Scrapes from there are served.
    let (code, _) = request(at, "GET", "/metrics");
    assert_eq!(code, 200);
    let (code, body) = request(f.addr, "GET", "/nothing");
    assert_eq!(code, 404, "{body}");
}

fn cufall() -> assert_cmd::Command {
    assert_cmd::Command::cargo_bin("cufall").unwrap()
}

#[test]
fn a_port_in_use_is_said_before_any_gpu_is_touched() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap();
    let out = cufall()
        .args(["serve", "--listen", &addr.to_string()])
        .assert()
        .failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        err.contains("the port is in use by another program"),
        "{err}"
    );
    assert!(err.contains("choose another port"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn a_bind_address_not_allowed_is_said_before_any_gpu_is_touched() {
    // 203.0.113.0/24 is TEST-NET-3: never an address of this machine.
    let out = cufall()
        .args(["serve", "--listen", "203.0.113.7:9401"])
        .assert()
        .failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        err.contains("203.0.113.7 is not an address of this machine"),
        "{err}"
    );
    let out = cufall()
        .args(["serve", "--listen", "port-9401"])
        .assert()
        .failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(err.contains("not an ADDRESS:PORT"), "{err}");
    let out = cufall()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--dump-dir",
            "/no/such/folder",
        ])
        .assert()
        .failure();
    let err = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        err.contains("--dump-dir /no/such/folder: no such folder"),
        "{err}"
    );
}

#[test]
fn without_a_gpu_serve_says_what_record_says() {
    if std::path::Path::new("/dev/nvidia0").exists() {
        eprintln!("skipped: this machine has an NVIDIA GPU");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let serve = cufall()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .assert()
        .failure();
    let record = cufall()
        .args(["record", "-o"])
        .arg(dir.path().join("x.cufall"))
        .args(["--duration", "1s"])
        .assert()
        .failure();
    let s = String::from_utf8_lossy(&serve.get_output().stderr).into_owned();
    let r = String::from_utf8_lossy(&record.get_output().stderr).into_owned();
    let first = |t: &str| t.lines().next().unwrap_or_default().to_string();
    assert_eq!(first(&s), first(&r), "serve: {s}\nrecord: {r}");
}

/// A free TCP port on loopback (closed again at once; the caller binds it soon after).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A Prometheus server started for a test, killed when dropped.
struct Prometheus {
    child: std::process::Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_prometheus(bin: &std::path::Path, target: SocketAddr) -> Prometheus {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: cufall\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let child = std::process::Command::new(bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    Prometheus {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        _dir: dir,
    }
}

/// The result vector of an instant query (empty while Prometheus is not up yet).
fn query(p: &Prometheus, promql: &str) -> Vec<serde_json::Value> {
    let q: String = promql
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let Ok(mut s) = TcpStream::connect(p.addr) else {
        return Vec::new();
    };
    let _ = write!(s, "GET /api/v1/query?query={q} HTTP/1.0\r\nHost: p\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["data"]["result"].as_array().cloned())
        .unwrap_or_default()
}

fn sample_value(series: &serde_json::Value) -> f64 {
    series["value"][1].as_str().unwrap().parse().unwrap()
}

#[test]
fn a_real_prometheus_scrapes_the_exporter() {
    let bin = std::path::Path::new("/usr/bin/prometheus");
    if !bin.exists() {
        eprintln!(
            "skipped: /usr/bin/prometheus is absent (apt-get install prometheus; .ci/run installs it)"
        );
        return;
    }
    let f = serve_fake_on(2, "127.0.0.1:0");
    let p = start_prometheus(bin, f.addr);
    let mut idle = Vec::new();
    wait_for(
        "Prometheus to hold both GPUs' idle ratio",
        Duration::from_secs(90),
        || {
            idle = query(&p, "cufall_idle_ratio");
            idle.len() == 2
        },
    );
    for s in &idle {
        let m = &s["metric"];
        assert_eq!(m["job"], "cufall");
        assert_eq!(m["modelName"], "Fake H200");
        assert_eq!(m["Hostname"], "testhost");
        assert_eq!(m["pod"], "llm-0");
        let g = m["gpu"].as_str().unwrap();
        assert_eq!(m["UUID"], format!("GPU-fake-{g}"));
        let v = sample_value(s);
        assert!((0.1..=0.3).contains(&v), "idle ratio {v} of GPU {g}");
    }
    let util = query(&p, "cufall_nvml_gpu_utilization_ratio");
    assert_eq!(util.len(), 2);
    assert!(util.iter().all(|s| sample_value(s) == 1.0), "{util:?}");
    let up = query(&p, "up{job=\"cufall\"}");
    assert_eq!(up.len(), 1);
    assert_eq!(sample_value(&up[0]), 1.0);
    // The dashboard's query for gaps per minute, once Prometheus holds more scrapes than its
    // range needs (with fewer, rate() extrapolates only part of the range and reads low).
    wait_for("6 s of scrapes", Duration::from_secs(30), || {
        let n = query(&p, "count_over_time(cufall_idle_gaps_total[6s])");
        n.len() == 2 && n.iter().all(|s| sample_value(s) >= 6.0)
    });
    let gaps = query(&p, "rate(cufall_idle_gaps_total[5s]) * 60");
    assert_eq!(gaps.len(), 2, "{gaps:?}");
    for s in &gaps {
        let per_min = sample_value(s);
        assert!(
            (3_000.0..=7_000.0).contains(&per_min),
            "{per_min} gaps per minute"
        );
    }
}

#[test]
fn promtool_finds_nothing_but_dcgm_label_names() {
    let promtool = std::path::Path::new("/usr/bin/promtool");
    if !promtool.exists() {
        eprintln!(
            "skipped: /usr/bin/promtool is absent (apt-get install prometheus; .ci/run installs it)"
        );
        return;
    }
    let f = serve_fake(2);
    let text = warm_scrape(&f, "p", 1, Duration::from_millis(500));
    assert!(text.contains("cufall_idle_ratio{"));
    let mut child = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The one lint kept on purpose: dcgm-exporter's label names (UUID, modelName, Hostname),
    // so that cufall's series join dcgm-exporter's; promtool asks for snake_case.
    let problems: Vec<&str> = said
        .lines()
        .filter(|l| !l.ends_with(" label names should be written in 'snake_case' not 'camelCase'"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(
        problems.is_empty(),
        "promtool found problems: {problems:?}\n{text}"
    );
    // The exposition itself parses: promtool's parser reached every family.
    assert!(said.contains("cufall_idle_ratio label names"), "{said}");
}

/// Every `cufall_...` name in a PromQL expression.
fn cufall_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut cur = String::new();
    for c in expr.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            cur.push(c);
        } else {
            if cur.starts_with("cufall_") {
                names.push(cur.clone());
            }
            cur.clear();
        }
    }
    names
}

/// The label names an expression matches on (`{a="x",b=~"y"}`).
fn matcher_labels(expr: &str) -> Vec<String> {
    expr.split('{')
        .skip(1)
        .filter_map(|s| s.split_once('}').map(|(m, _)| m))
        .flat_map(|m| m.split(','))
        .filter_map(|m| m.split(['=', '!']).next())
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The `{{label}}` names of a legend.
fn legend_labels(legend: &str) -> Vec<String> {
    legend
        .split("{{")
        .skip(1)
        .filter_map(|s| s.split_once("}}").map(|(l, _)| l.trim().to_string()))
        .collect()
}

#[test]
fn the_grafana_dashboard_asks_only_for_what_the_exporter_exports() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/grafana-cufall.json");
    let d: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for field in [
        "title",
        "uid",
        "panels",
        "schemaVersion",
        "templating",
        "time",
        "version",
    ] {
        assert!(!d[field].is_null(), "the dashboard lacks {field}");
    }
    assert!(d["schemaVersion"].as_u64().unwrap() >= 36);
    let f = serve_fake(1);
    let text = warm_scrape(&f, "p", 0, Duration::from_millis(300));
    let families: std::collections::HashSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    // Labels of the exposition, and the two Prometheus adds to every series.
    let has_label = |l: &str| ["instance", "job"].contains(&l) || text.contains(&format!("{l}=\""));
    let mut exprs: Vec<String> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["definition"].as_str().unwrap().to_string())
        .collect();
    let mut ids = std::collections::HashSet::new();
    for p in d["panels"].as_array().unwrap() {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "panel id twice");
        let g = &p["gridPos"];
        assert!(["h", "w", "x", "y"].iter().all(|k| g[k].is_u64()), "{g}");
        assert!(!p["title"].as_str().unwrap().is_empty());
        for t in p["targets"].as_array().unwrap() {
            assert!(t["refId"].is_string());
            for l in legend_labels(t["legendFormat"].as_str().unwrap()) {
                assert!(has_label(&l), "legend label {l} is not exported");
            }
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    for e in &exprs {
        let names = cufall_names(e);
        assert!(!names.is_empty(), "{e} asks for no cufall metric");
        for n in names {
            assert!(
                families.contains(n.as_str()),
                "{e}: {n} is not exported\n{text}"
            );
        }
        for l in matcher_labels(e) {
            assert!(has_label(&l), "{e}: label {l} is not exported");
        }
    }
    // Each expression parses as PromQL: promtool checks them as recording rules.
    let promtool = std::path::Path::new("/usr/bin/promtool");
    if !promtool.exists() {
        eprintln!("PromQL syntax not checked: /usr/bin/promtool is absent");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("dashboard.rules.yml");
    let mut yaml = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let e = e
            .replace("$__rate_interval", "1m")
            .replace("$host", ".*")
            .replace("$metric", ".*");
        let e = if e.starts_with("label_values(") {
            cufall_names(&e)[0].clone()
        } else {
            e
        };
        yaml.push_str(&format!(
            "      - record: dashboard:expr{i}\n        expr: '{}'\n",
            e.replace('\'', "''")
        ));
    }
    std::fs::write(&rules, yaml).unwrap();
    let out = std::process::Command::new(promtool)
        .args(["check", "rules"])
        .arg(&rules)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The path a `POST /dump` answer names.
fn dumped_path(body: &str) -> String {
    body.trim()
        .strip_prefix("wrote ")
        .unwrap()
        .split(" (")
        .next()
        .unwrap()
        .to_string()
}

fn state_is(f: &Fixture, state: &str) -> bool {
    let t = scrape(f.addr, "state");
    value(
        &t,
        "cufall_sampling_state",
        &[&format!("state=\"{state}\"")],
    ) == Some(1.0)
}

/// A dump after a pause of 2 s: one `paused` drop of about that, NVML rows and no samples in
/// it; `info` and `report` tell it apart from losses and idle time.
fn a_dump_holds_one_pause_of_2s(path: &str) {
    let trace = cufall_trace::Trace::open(std::path::Path::new(path)).unwrap();
    let paused: Vec<_> = trace
        .drops()
        .unwrap()
        .into_iter()
        .filter(|d| d.reason == cufall_trace::model::DropReason::Paused)
        .collect();
    assert_eq!(paused.len(), 1, "{paused:?}");
    let p = &paused[0];
    let span_s = (p.end_ns - p.start_ns) as f64 / 1e9;
    assert!((1.9..3.0).contains(&span_s), "a pause of {span_s} s");
    let nvml_inside = trace
        .nvml()
        .unwrap()
        .iter()
        .filter(|r| r.t_ns > p.start_ns && r.t_ns < p.end_ns)
        .count();
    assert!(
        nvml_inside > 50,
        "{nvml_inside} NVML readings during the pause"
    );
    let inside: usize = trace
        .sample_batches()
        .unwrap()
        .iter()
        .map(|b| {
            b.start_ns
                .iter()
                .filter(|&&s| s > p.start_ns && s < p.end_ns)
                .count()
        })
        .sum();
    assert_eq!(inside, 0);
    // `info` tells the pause from samples lost; the report lists it among the drops.
    let info = cufall().args(["info", path]).assert().success();
    let out = String::from_utf8_lossy(&info.get_output().stdout).into_owned();
    assert!(out.contains(" paused), "), "{out}");
    let report = cufall().args(["report", path]).assert().success();
    let out = String::from_utf8_lossy(&report.get_output().stdout).into_owned();
    assert!(out.contains("paused ×1 ("), "{out}");
    // The report never counts the pause as idle: the pattern's 0.2 over the sampled time.
    let report = cufall().args(["report", path, "--json"]).assert().success();
    let json: serde_json::Value = serde_json::from_slice(&report.get_output().stdout).unwrap();
    let idle = json["whole_run"]["idle_fraction"].as_f64().unwrap();
    assert!((0.15..=0.25).contains(&idle), "report: idle {idle}");
}

#[test]
fn a_pause_releases_the_counters_nvml_goes_on_and_sampling_resumes_by_itself() {
    let f = serve_fake(1);
    let g = gpu(0);
    warm_scrape(&f, "p", 0, Duration::ZERO);
    let sw = &f.switches[0];
    assert_eq!(sw.sources.load(Ordering::SeqCst), 1);
    let (code, body) = request(f.addr, "POST", "/pause?for=2s");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.starts_with("paused: the GPU counters of 1 GPU(s) are released for 2s"),
        "{body}"
    );
    // Released at once: the answer comes once the PM sampling session is gone.
    assert_eq!(sw.sources.load(Ordering::SeqCst), 0);
    // A dump during the pause shows it so far.
    let (code, body) = request(f.addr, "POST", "/dump");
    assert_eq!(code, 200, "{body}");
    let during = cufall_trace::Trace::open(std::path::Path::new(&dumped_path(&body))).unwrap();
    assert!(
        during
            .drops()
            .unwrap()
            .iter()
            .any(|d| d.reason == cufall_trace::model::DropReason::Paused),
        "no paused drop in a dump during the pause"
    );
    let t = scrape(f.addr, "p");
    assert_eq!(
        value(&t, "cufall_sampling_state", &["state=\"paused\""]),
        Some(1.0)
    );
    let left = value(&t, "cufall_pause_remaining_seconds", &[]).unwrap();
    assert!(left > 0.5 && left <= 2.0, "{left} s left");
    let before = value(&t, "cufall_samples_total", &[&g]).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let t = scrape(f.addr, "p");
    assert_eq!(value(&t, "cufall_samples_total", &[&g]), Some(before));
    // NVML goes on: the window of the pause has nvidia-smi's reading.
    assert_eq!(
        value(&t, "cufall_power_watts", &[&g]),
        Some(f64::from(POWER_W))
    );
    // Back by itself.
    wait_for("sampling again", Duration::from_secs(10), || {
        state_is(&f, "sampling")
    });
    assert_eq!(sw.rearmed.load(Ordering::SeqCst), 1);
    assert_eq!(sw.sources.load(Ordering::SeqCst), 1);
    wait_for("samples after the pause", Duration::from_secs(10), || {
        value(&scrape(f.addr, "p"), "cufall_samples_total", &[&g]).unwrap() > before
    });
    let t = scrape(f.addr, "p");
    assert_eq!(value(&t, "cufall_pause_remaining_seconds", &[]), Some(0.0));
    assert_eq!(value(&t, "cufall_samples_lost_total", &[&g]), Some(0.0));
    std::thread::sleep(Duration::from_millis(300));
    let (code, body) = request(f.addr, "POST", "/dump");
    assert_eq!(code, 200, "{body}");
    a_dump_holds_one_pause_of_2s(&dumped_path(&body));
    let log = f.exporter().recent_log();
    assert!(
        log.iter()
            .any(|l| l.contains("the pause is over: sampling the GPU counters again")),
        "{log:?}"
    );
}

#[test]
fn counters_taken_during_a_pause_are_waited_for_and_resume_ends_a_pause_early() {
    let f = serve_fake(1);
    warm_scrape(&f, "p", 0, Duration::ZERO);
    let sw = &f.switches[0];
    let (code, body) = request(f.addr, "POST", "/pause?for=500ms");
    assert_eq!(code, 200, "{body}");
    // Another tool takes the counters while they are released.
    sw.taken.store(true, Ordering::SeqCst);
    wait_for("waiting for the counters", Duration::from_secs(10), || {
        state_is(&f, "counters_busy")
    });
    assert_eq!(sw.sources.load(Ordering::SeqCst), 0);
    let log = f.exporter().recent_log();
    assert!(
        log.iter().any(
            |l| l.contains("the pause is over, but the GPU counters cannot be had")
                && l.contains("held by another profiler")
        ),
        "{log:?}"
    );
    // A resume while they are held says so and keeps trying.
    let (code, body) = request(f.addr, "POST", "/resume");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("cannot be had yet"), "{body}");
    sw.taken.store(false, Ordering::SeqCst);
    wait_for("sampling again", Duration::from_secs(15), || {
        state_is(&f, "sampling")
    });
    assert_eq!(sw.sources.load(Ordering::SeqCst), 1);
    // A long pause ended early.
    let (code, body) = request(f.addr, "POST", "/pause?for=1h");
    assert_eq!(code, 200, "{body}");
    let (code, body) = request(f.addr, "POST", "/pause?for=10m");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.starts_with("paused already: the pause now ends in 10m"),
        "{body}"
    );
    let (code, body) = request(f.addr, "POST", "/resume");
    assert_eq!(code, 200, "{body}");
    assert_eq!(body, "resumed: sampling the GPU counters again\n");
    assert!(state_is(&f, "sampling"));
    assert_eq!(sw.sources.load(Ordering::SeqCst), 1);
}

#[test]
fn a_pause_too_long_or_with_nothing_to_pause_is_refused_in_one_line() {
    let f = serve_fake(1);
    warm_scrape(&f, "p", 0, Duration::ZERO);
    let one_line = |code: u16, body: &str, want: u16, starts: &str| {
        assert_eq!(code, want, "{body}");
        assert!(body.starts_with(starts), "{body}");
        assert_eq!(body.lines().count(), 1, "{body}");
    };
    let (code, body) = request(f.addr, "POST", "/pause?for=2d");
    one_line(
        code,
        &body,
        400,
        "refused: a pause of 2days is longer than a day",
    );
    let (code, body) = request(f.addr, "POST", "/pause?for=soon");
    one_line(code, &body, 400, "refused: for=`soon` is not a duration");
    let (code, body) = request(f.addr, "POST", "/resume");
    one_line(code, &body, 409, "refused: not paused");
    let (code, _) = request(f.addr, "GET", "/pause");
    assert_eq!(code, 405);
    assert_eq!(f.switches[0].sources.load(Ordering::SeqCst), 1);
    // Another profiler holds the counters: the exporter samples NVML only, nothing to pause.
    f.switches[0].taken.store(true, Ordering::SeqCst);
    wait_for("counters_busy", Duration::from_secs(20), || {
        state_is(&f, "counters_busy")
    });
    wait_for("the NVML-only run", Duration::from_secs(20), || {
        request(f.addr, "POST", "/pause?for=10s").0 == 409
    });
    let (code, body) = request(f.addr, "POST", "/pause?for=10s");
    one_line(code, &body, 409, "refused: nothing to pause: ");
}

/// `cufall control pause` and `resume`, the built binary, against an exporter on fake GPUs in
/// this process (its control file names this process).
#[test]
fn cufall_control_pauses_and_resumes_a_running_exporter() {
    let f = serve_fake(1);
    warm_scrape(&f, "p", 0, Duration::ZERO);
    let tmp = tempfile::tempdir().unwrap();
    // The control folder is under TMPDIR, for this process as for the command.
    let dir = tmp
        .path()
        .join(format!("cufall-control-{}", unsafe_free_uid()));
    let _file = cufall_sampler::control_file::ControlFile::create_in(
        &dir,
        cufall_sampler::control_file::Kind::Serve,
        false,
        &f.addr.to_string(),
        Some(serve::control::control_handler(f.exporter())),
    )
    .unwrap();
    let control = |args: &[&str]| {
        let out = cufall()
            .env("TMPDIR", tmp.path())
            .arg("control")
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = control(&["pause", "--for", "30s"]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with(&format!(
            "cufall: cufall serve (process {}): paused: the GPU counters of 1 GPU(s) are released for 30s",
            std::process::id()
        )),
        "{out}"
    );
    assert_eq!(f.switches[0].sources.load(Ordering::SeqCst), 0);
    assert!(state_is(&f, "paused"));
    let (ok, out, err) = control(&["resume"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("resumed: sampling the GPU counters again"),
        "{out}"
    );
    assert!(state_is(&f, "sampling"));
    let (ok, _, err) = control(&["resume"]);
    assert!(!ok);
    assert!(err.contains("refused: not paused"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let (ok, _, err) = control(&["pause", "--for", "25h"]);
    assert!(!ok);
    assert!(err.contains("longer than a day"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // An exporter is never sent a window signal (SIGUSR1 would dump).
    let (ok, _, err) = control(&["start"]);
    assert!(!ok);
    assert!(
        err.contains("no recording that takes window signals"),
        "{err}"
    );
}

fn unsafe_free_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").unwrap().uid()
}
