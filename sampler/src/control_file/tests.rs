use super::*;
use crate::commands::control::{Takes, pick};
use crate::pipeline::pause::MAX_PAUSE;
use std::os::unix::fs::PermissionsExt;

/// A private control folder in a temporary one.
fn private_dir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cufall-control");
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    (tmp, dir)
}

fn announce(pid: u32, start: u64, windows: bool, what: &str) -> Announce {
    Announce {
        pid,
        start_time: start,
        kind: Kind::Record,
        windows,
        what: what.into(),
        command: vec!["cufall".into(), "record".into()],
    }
}

fn write(dir: &Path, name: &str, a: &Announce) {
    std::fs::write(dir.join(name), serde_json::to_vec(a).unwrap()).unwrap();
}

fn me() -> (u32, u64) {
    let pid = std::process::id();
    (pid, start_time(pid).unwrap())
}

#[test]
fn this_process_start_time_is_read_from_proc() {
    let (pid, start) = me();
    assert!(start > 0);
    assert_eq!(start_time(pid), Some(start));
    assert_eq!(start_time(4_194_305), None);
}

#[test]
fn files_of_ended_or_other_processes_are_ignored_and_removed() {
    let (_tmp, dir) = private_dir();
    let (pid, start) = me();
    write(
        &dir,
        &pid.to_string(),
        &announce(pid, start, true, "run.cufall"),
    );
    // No process has pid 4194304 + 1 (above Linux's largest pid).
    let gone = dir.join("4194305");
    write(&dir, "4194305", &announce(4_194_305, 1, true, "old.cufall"));
    std::fs::write(dir.join("notes.txt"), "not ours").unwrap();
    // An older cufall's file (the trace's path alone) of a process that ended.
    let older = dir.join("4194306");
    std::fs::write(&older, "old.cufall").unwrap();
    let r = running_in(&dir).unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].pid, r[0].what.as_str()), (pid, "run.cufall"));
    assert!(!gone.exists() && !older.exists());
    assert!(dir.join("notes.txt").exists());
    // A pid reused by another program (a recording killed long ago): its start time is not
    // the one recorded, so it is never trusted, whatever its name.
    let mut other = std::process::Command::new("sleep")
        .arg("5")
        .spawn()
        .unwrap();
    let reused = dir.join(other.id().to_string());
    let then = start_time(other.id()).unwrap();
    write(
        &dir,
        &other.id().to_string(),
        &announce(other.id(), then + 1, true, "killed.cufall"),
    );
    assert_eq!(running_in(&dir).unwrap().len(), 1);
    assert!(!reused.exists());
    // A file naming another pid than its own name is not trusted either.
    write(
        &dir,
        &other.id().to_string(),
        &announce(pid, start, true, "lying.cufall"),
    );
    assert_eq!(running_in(&dir).unwrap().len(), 1);
    let _ = other.kill();
    let _ = other.wait();
}

#[test]
fn a_folder_others_can_write_is_refused_with_the_fix() {
    let (_tmp, dir) = private_dir();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = running_in(&dir).unwrap_err().to_string();
    assert!(e.contains("has mode 777"), "{e}");
    assert!(e.contains(&format!("chmod 700 {}", dir.display())), "{e}");
    let e = ControlFile::create_in(&dir, Kind::Record, false, "t", None)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("chmod 700"), "{e}");
    // cufall never makes it private itself: it might not be the folder it made.
    let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o777);
}

#[test]
fn a_folder_of_another_user_is_refused() {
    if os::uid() != 0 {
        // Only root can give a folder away; the check is the same owner test either way.
        return;
    }
    let (_tmp, dir) = private_dir();
    std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
    let (pid, start) = me();
    write(&dir, &pid.to_string(), &announce(pid, start, true, "t"));
    let e = running_in(&dir).unwrap_err().to_string();
    assert!(
        e.contains("belongs to user 65534, not to you (user 0)"),
        "{e}"
    );
    assert!(e.contains("TMPDIR"), "{e}");
}

/// A file another user put in the folder (root's folder was once 0777 and `nobody` wrote a
/// pid into it) is never trusted, and never removed either.
#[test]
fn a_file_of_another_user_is_not_trusted() {
    if os::uid() != 0 {
        // Only root can give a file away.
        return;
    }
    let (_tmp, dir) = private_dir();
    let (pid, start) = me();
    write(&dir, &pid.to_string(), &announce(pid, start, true, "t"));
    let file = dir.join(pid.to_string());
    std::os::unix::fs::chown(&file, Some(65534), None).unwrap();
    assert!(running_in(&dir).unwrap().is_empty());
    assert!(file.exists());
}

#[test]
fn a_symlinked_folder_is_refused_and_nothing_in_its_target_is_deleted() {
    let (tmp, target) = private_dir();
    let victim = target.join("4194305");
    std::fs::write(&victim, "someone's file").unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = running_in(&link).unwrap_err().to_string();
    assert!(e.contains("is a symbolic link"), "{e}");
    assert!(e.contains(&format!("rm {}", link.display())), "{e}");
    assert!(ControlFile::create_in(&link, Kind::Record, false, "t", None).is_err());
    assert!(victim.exists());
}

#[test]
fn a_symlinked_control_file_is_never_read_or_deleted_through() {
    let (tmp, dir) = private_dir();
    let (pid, start) = me();
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::write(
        &elsewhere,
        serde_json::to_vec(&announce(pid, start, true, "t")).unwrap(),
    )
    .unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join(pid.to_string())).unwrap();
    assert!(running_in(&dir).unwrap().is_empty());
    assert!(elsewhere.exists());
}

#[test]
fn what_a_file_holds_is_printed_escaped() {
    let (_tmp, dir) = private_dir();
    let (pid, start) = me();
    write(
        &dir,
        &pid.to_string(),
        &announce(pid, start, true, "\u{1b}[2Jrun.cufall"),
    );
    let r = running_with_start(&dir).unwrap();
    let d = r[0].0.describe();
    assert!(!d.contains('\u{1b}'), "{d}");
    assert!(d.contains("\\e[2Jrun.cufall"), "{d}");
    let e = pick(&r, Some(1), &dir, Takes::Windows)
        .unwrap_err()
        .to_string();
    assert!(!e.contains('\u{1b}') && e.contains("\\e[2J"), "{e}");
}

#[test]
fn a_request_with_nothing_running_says_how_to_start_one() {
    let (_tmp, dir) = private_dir();
    let e = pick(&[], None, &dir, Takes::Windows)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--capture-range signal"), "{e}");
    let e = pick(&[], None, &dir, Takes::Pause).unwrap_err().to_string();
    assert!(e.starts_with("nothing to pause:"), "{e}");
    let run = |pid, what: &str| {
        (
            Running {
                pid,
                kind: Kind::Record,
                windows: true,
                what: what.into(),
                command: Vec::new(),
                socket: PathBuf::new(),
            },
            0,
        )
    };
    let two = [run(1, "a"), run(2, "b")];
    let e = pick(&two, None, &dir, Takes::Windows)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--pid"), "{e}");
    assert_eq!(pick(&two, Some(2), &dir, Takes::Pause).unwrap().0.what, "b");
    assert!(pick(&two, Some(3), &dir, Takes::Pause).is_err());
}

#[test]
fn requests_round_trip_and_nothing_else_parses() {
    for r in [
        Request::Pause(Duration::from_secs(30)),
        Request::Resume,
        Request::State,
    ] {
        assert_eq!(Request::parse(&r.line()), Some(r));
    }
    for bad in ["", "pause", "pause x", "resume now", "kill 1", "pause 1 2"] {
        assert_eq!(Request::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn a_pause_reaches_the_process_over_its_socket() {
    let (_tmp, dir) = private_dir();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let handler: Handler = Arc::new(move |r| {
        s.lock().unwrap().push(r);
        match r {
            Request::Pause(d) if d > MAX_PAUSE => Err("too long".into()),
            _ => Ok("done".into()),
        }
    });
    let file =
        ControlFile::create_in(&dir, Kind::Serve, false, "127.0.0.1:9401", Some(handler)).unwrap();
    let r = running_in(&dir).unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].kind, Kind::Serve);
    assert!(!r[0].windows);
    let t = Duration::from_secs(5);
    let d = Duration::from_secs(30);
    assert_eq!(ask(&r[0], Request::Pause(d), t).unwrap(), Ok("done".into()));
    assert_eq!(
        ask(&r[0], Request::Pause(MAX_PAUSE * 2), t).unwrap(),
        Err("too long".into())
    );
    assert_eq!(ask(&r[0], Request::Resume, t).unwrap(), Ok("done".into()));
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            Request::Pause(d),
            Request::Pause(MAX_PAUSE * 2),
            Request::Resume
        ]
    );
    let sock = dir.join(format!("{}.sock", std::process::id()));
    assert!(sock.exists());
    drop(file);
    assert!(!sock.exists());
    assert!(running_in(&dir).unwrap().is_empty());
}
