//! A pool handler's domain write and its job's completion commit together
//! (`Attempt::complete_with`): a crash at any point between the handler's write and the
//! pool's next round leaves exactly one domain write for every completed job and none for
//! the others, and after a restart every job ends completed with exactly one.
//!
//! The child is this test binary, run with `--ignored --exact` on the ignored entry point
//! below: it works a file's jobs with a one-worker pool and ends itself (`exit`, no
//! destructors, no close: the file is left as a crash leaves it) at the chosen point, or is
//! SIGKILLed by the parent after it reported a chosen number of writes. The parent then
//! checks the file, "restarts" (a queue whose clock is past the child's leases), drains the
//! rest with a pool, and checks again.
//!
//! The control runs the same crash against the design the README used to show (write under
//! `with_ownership`, then return `Outcome::Complete`): the checker must find the duplicate
//! reply it allows, or it could not fail.

use crate::support::{assert_integrity, child_process, wall_ms, HANG_GUARD, REPLIES};
use crossbeam_channel::{bounded, unbounded};
use fenceq::rusqlite::Connection;
use fenceq::{ManualClock, NewJob, Outcome, Queue, WorkerPool};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

const CHILD_ENV: &str = "FENCEQ_ATOMIC_CHILD";
const CHILD: &str = concat!(module_path!(), "::child_pool_crashes_at_a_chosen_point");
const JOBS: i64 = 6;
/// The job whose handler the crash points are about.
const VICTIM: i64 = 3;

/// Where the child ends itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    /// Inside the write's closure, after the domain insert, before the commit.
    InClosure,
    /// Right after the write committed, before the handler returns.
    AfterWrite,
    /// At the start of the next job's handler: the victim's attempt is with the dispatcher,
    /// settled or not.
    NextHandler,
    /// Nowhere: the parent SIGKILLs the child after it reported this many writes.
    Killed(usize),
}

impl Point {
    fn encode(self) -> String {
        match self {
            Point::InClosure => "in_closure".into(),
            Point::AfterWrite => "after_write".into(),
            Point::NextHandler => "next_handler".into(),
            Point::Killed(n) => format!("killed_{n}"),
        }
    }

    fn decode(text: &str) -> Point {
        match text {
            "in_closure" => Point::InClosure,
            "after_write" => Point::AfterWrite,
            "next_handler" => Point::NextHandler,
            other => Point::Killed(other.trim_start_matches("killed_").parse().expect("a kill count")),
        }
    }
}

/// Exits the process at once, as a crash would: no destructor runs, nothing is closed.
fn crash() -> ! {
    std::process::exit(86)
}

fn reply(tx: &Connection, job: i64) -> fenceq::Result<()> {
    tx.execute("INSERT INTO replies (job) VALUES (?1)", [job])?;
    Ok(())
}

/// The handler of both designs: `atomic` writes with `complete_with`, the control with
/// `with_ownership` followed by `Outcome::Complete`.
fn handle(attempt: &mut fenceq::Attempt, atomic: bool, point: Option<Point>) -> Outcome {
    let job = attempt.token().id.0;
    if point == Some(Point::NextHandler) && job == VICTIM + 1 {
        crash();
    }
    let write = |tx: &Connection| {
        reply(tx, job)?;
        if point == Some(Point::InClosure) && job == VICTIM {
            crash();
        }
        Ok(())
    };
    let written = if atomic { attempt.complete_with(write) } else { attempt.with_ownership(write) };
    if let Err(e) = written {
        return Outcome::retry(e.to_string());
    }
    println!("WROTE {job}");
    if point == Some(Point::AfterWrite) && job == VICTIM {
        crash();
    }
    Outcome::Complete
}

#[test]
#[ignore = "the child process of the kill tests below, which run it with --ignored --exact"]
fn child_pool_crashes_at_a_chosen_point() {
    let spec = std::env::var(CHILD_ENV).expect("run by the kill tests, which set FENCEQ_ATOMIC_CHILD");
    let parts: Vec<&str> = spec.split('|').collect();
    let (path, atomic, point) = (parts[0].to_string(), parts[1] == "atomic", Point::decode(parts[2]));
    let queue = Queue::open(&path).unwrap();
    let (done_tx, done_rx) = bounded(JOBS as usize);
    let pool = WorkerPool::builder(queue, "q")
        .workers(1)
        .prefetch(0)
        .lease(Duration::from_secs(30))
        .handler(move |attempt| {
            let outcome = handle(attempt, atomic, Some(point));
            let _ = done_tx.send(());
            outcome
        })
        .start()
        .unwrap();
    for _ in 0..JOBS {
        done_rx.recv_timeout(HANG_GUARD).expect("the child's pool works every job");
    }
    // Only a `Killed` point gets here; wait for the parent's SIGKILL (bounded).
    let (_never_tx, never) = bounded::<()>(0);
    let _ = never.recv_timeout(HANG_GUARD);
    drop(pool);
    panic!("the parent never killed the child");
}

/// A file with `JOBS` pending jobs (ids 1..=JOBS) and an empty `replies` table.
fn prepared(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("bot.db");
    let queue = Queue::open(&path).unwrap();
    queue.transaction(|tx| Ok(tx.execute_batch(REPLIES)?)).unwrap();
    for n in 1..=JOBS {
        let id =
            queue.enqueue(NewJob::new("q", format!("update {n}").into_bytes()).key(format!("update:{n}"))).unwrap();
        assert_eq!(id.id().0, n);
    }
    path
}

/// Runs the child until it ends itself at `point`, or kills it after `Killed(n)` writes.
fn crash_child(path: &Path, atomic: bool, point: Point) {
    let mut child = child_process(CHILD)
        .env(CHILD_ENV, format!("{}|{}|{}", path.display(), if atomic { "atomic" } else { "owned" }, point.encode()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, lines_rx) = unbounded();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut writes = 0;
    loop {
        match lines_rx.recv_timeout(HANG_GUARD) {
            Ok(line) if line.contains("WROTE") => {
                writes += 1;
                if point == Point::Killed(writes) {
                    child.kill().unwrap();
                    break;
                }
            }
            Ok(_) => {}
            // The pipe closed: the child ended itself.
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                panic!("the child hung at {point:?}");
            }
        }
    }
    let status = child.wait().unwrap();
    if !matches!(point, Point::Killed(_)) {
        assert_eq!(status.code(), Some(86), "the child crashed where asked ({point:?}), not elsewhere");
    }
}

/// Per job: (state, replies).
fn states_and_replies(path: &Path) -> Vec<(i64, String, i64)> {
    let conn = Connection::open(path).unwrap();
    assert_integrity(&conn);
    let mut stmt = conn
        .prepare(
            "SELECT id, state, (SELECT count(*) FROM replies WHERE job = fenceq_jobs.id) FROM fenceq_jobs ORDER BY id",
        )
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().collect::<Result<_, _>>().unwrap()
}

/// After a restart (a clock past every lease the child held), a pool of the same design
/// works what is left; returns the jobs with other than exactly one reply.
fn restart_and_drain(path: &Path, atomic: bool) -> Vec<i64> {
    let queue = Queue::builder().path(path).clock(ManualClock::new(wall_ms() + 120_000)).open().unwrap();
    let left = states_and_replies(path).iter().filter(|(_, state, _)| state != "completed").count();
    let (done_tx, done_rx) = bounded(JOBS as usize);
    let pool = WorkerPool::builder(queue.clone(), "q")
        .workers(1)
        .handler(move |attempt| {
            let outcome = handle(attempt, atomic, None);
            let _ = done_tx.send(());
            outcome
        })
        .start()
        .unwrap();
    for _ in 0..left {
        done_rx.recv_timeout(HANG_GUARD).expect("the restarted pool works what is left");
    }
    let report = pool.shutdown(HANG_GUARD).unwrap();
    assert_eq!(report.counters.completed as usize, left, "{:?}", report.counters);
    let rows = states_and_replies(path);
    assert!(rows.iter().all(|(_, state, _)| state == "completed"), "{rows:?}");
    rows.iter().filter(|(_, _, replies)| *replies != 1).map(|(id, _, _)| *id).collect()
}

/// The crash leaves one reply per completed job and none for the rest.
fn check_after_crash(path: &Path, point: Point) {
    for (id, state, replies) in states_and_replies(path) {
        let expected = i64::from(state == "completed");
        assert_eq!(replies, expected, "job {id} is {state} with {replies} replies after a crash at {point:?}");
    }
}

#[test]
fn a_crash_anywhere_between_the_handlers_write_and_the_next_round_leaves_one_reply_per_completed_job() {
    for point in [
        Point::InClosure,
        Point::AfterWrite,
        Point::NextHandler,
        Point::Killed(1),
        Point::Killed(2),
        Point::Killed(4),
        Point::Killed(JOBS as usize),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = prepared(dir.path());
        crash_child(&path, true, point);
        check_after_crash(&path, point);
        if point == Point::AfterWrite {
            let victim = states_and_replies(&path)[(VICTIM - 1) as usize].clone();
            assert_eq!(victim, (VICTIM, "completed".to_string(), 1), "the write and the completion committed together");
        }
        if point == Point::InClosure {
            let victim = states_and_replies(&path)[(VICTIM - 1) as usize].clone();
            assert_eq!((victim.1.as_str(), victim.2), ("running", 0), "neither committed");
        }
        assert_eq!(restart_and_drain(&path, true), Vec::<i64>::new(), "after a crash at {point:?}");
    }
}

#[test]
fn the_checker_catches_the_duplicate_a_write_settled_later_allows() {
    let dir = tempfile::tempdir().unwrap();
    let path = prepared(dir.path());
    crash_child(&path, false, Point::AfterWrite);
    // The reply committed, the completion never did: the job is still running.
    let victim = states_and_replies(&path)[(VICTIM - 1) as usize].clone();
    assert_eq!(victim, (VICTIM, "running".to_string(), 1));
    assert_eq!(restart_and_drain(&path, false), vec![VICTIM], "the job was reclaimed and replied to again");
}
