//! The `fenceq` operator CLI, run as a process against temporary databases that the tests
//! fill through the library API.
//!
//! Every test is deterministic and never sleeps. The one place that needs time to pass is
//! `reap`: the CLI process reads the system clock (a `ManualClock` in the test cannot move
//! it), so the test claims with a 1 ms lease and then spins on the system clock, bounded by
//! 50 ms of `Instant` time, until the lease is over, before it runs `reap`.
#![cfg(feature = "cli")]

use assert_cmd::Command;
use fenceq::{JobId, JobState, NewJob, Queue, SCHEMA_VERSION};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tempfile::TempDir;

use crate::cli_support::{run_cmd, Run};
use crate::support::LEASE;

// ------------------------------------------------------------------------------- harness

fn cmd(db: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::cargo_bin("fenceq").expect("the fenceq binary is built");
    cmd.arg("--db").arg(db).args(args);
    cmd
}

fn run(db: &Path, args: &[&str]) -> Run {
    run_cmd(cmd(db, args))
}

fn new_db() -> (TempDir, PathBuf, Queue) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    let queue = Queue::open(&path).unwrap();
    (dir, path, queue)
}

fn enqueue(queue: &Queue, job: NewJob) -> JobId {
    queue.enqueue(job).unwrap().id()
}

/// Enqueues a job alone in `name` and claims it; returns the claim.
fn claimed(queue: &Queue, name: &str, payload: &str) -> fenceq::Claimed {
    let id = enqueue(queue, NewJob::new(name, payload.as_bytes().to_vec()));
    let claim = queue.claim(name, "w", LEASE).unwrap().expect("a due job");
    assert_eq!(claim.id(), id, "the queue held only this job");
    claim
}

fn state(queue: &Queue, id: JobId) -> JobState {
    queue.job(id).unwrap().expect("job exists").state
}

/// One job in each interesting state.
struct Fixture {
    exhausted: JobId,
    unknown: JobId,
    completed: JobId,
    running: JobId,
    other_exhausted: JobId,
    pending: JobId,
}

fn fixture(queue: &Queue) -> Fixture {
    // Claims take the only due job of the queue, so the claimed ones come first.
    let e = claimed(queue, "q", "to exhaust");
    queue.exhaust(&e.token(), "why").unwrap();
    let u = claimed(queue, "q", "to mark unknown");
    queue.mark_unknown(&u.token(), "evidence").unwrap();
    let c = claimed(queue, "q", "to complete");
    queue.complete(&c.token()).unwrap();
    let r = claimed(queue, "q", "running");
    let o = claimed(queue, "other", "other queue");
    queue.exhaust(&o.token(), "why other").unwrap();
    let pending = enqueue(queue, NewJob::new("q", b"pending payload".to_vec()).key("k-p"));
    Fixture { exhausted: e.id(), unknown: u.id(), completed: c.id(), running: r.id(), other_exhausted: o.id(), pending }
}

fn job_count(queue: &Queue) -> u64 {
    queue.stats().unwrap().queues.iter().map(|q| q.total()).sum()
}

fn id(v: &Value) -> i64 {
    v["id"].as_i64().expect("an id")
}

// ------------------------------------------------------------------------------- reading commands

#[test]
fn stats_counts_per_queue_and_state() {
    let (_dir, db, queue) = new_db();
    fixture(&queue);
    let out = run(&db, &["stats"]);
    let text = out.ok();
    assert!(text.contains("PENDING") && text.contains("q") && text.contains("other") && text.contains("TOTAL"));
    assert!(text.contains("attention: 2 exhaustions awaiting acknowledgement"), "{text}");
    assert!(text.contains("1 unknown outcome awaiting resolution"), "{text}");

    let stats = run(&db, &["stats", "--json"]).json();
    let queues = stats["queues"].as_array().unwrap();
    let q = queues.iter().find(|q| q["queue"] == "q").unwrap();
    assert_eq!(q["pending"], 1);
    assert_eq!(q["running"], 1);
    assert_eq!(q["expired_leases"], 0);
    assert_eq!(q["completed"], 1);
    assert_eq!(q["exhausted_unacknowledged"], 1);
    assert_eq!(q["unknown"], 1);
    assert_eq!(q["total"], 5);
    assert!(q["oldest_pending_age_ms"].as_i64().unwrap() >= 0);
    assert_eq!(stats["totals"]["exhausted_unacknowledged"], 2);
    assert_eq!(stats["totals"]["total"], 6);
    // --json is global: it may come before the subcommand too.
    assert_eq!(run(&db, &["--json", "stats"]).json()["totals"]["total"], 6);

    // Counts left short (a process of an older build settled jobs after the upgrade) are
    // repaired by --recount, which then prints what it counted.
    let conn = fenceq::rusqlite::Connection::open(&db).unwrap();
    conn.execute("DELETE FROM fenceq_settled_counts", []).unwrap();
    assert_eq!(run(&db, &["stats", "--json"]).json()["totals"]["completed"], 0);
    let repaired = run(&db, &["stats", "--recount", "--json"]).json();
    assert_eq!((repaired["totals"]["completed"].as_u64(), repaired["totals"]["total"].as_u64()), (Some(1), Some(6)));
    assert_eq!(run(&db, &["stats", "--json"]).json()["totals"]["completed"], 1);
}

#[test]
fn stats_of_an_empty_queue() {
    let (_dir, db, _queue) = new_db();
    assert!(run(&db, &["stats"]).ok().starts_with("no jobs in "));
    assert_eq!(run(&db, &["stats", "--json"]).json()["queues"], serde_json::json!([]));
}

#[test]
fn list_filters_pages_and_prints_json_lines() {
    let (_dir, db, queue) = new_db();
    let f = fixture(&queue);
    let text = run(&db, &["list"]).ok().to_string();
    assert!(text.contains("6 jobs"), "{text}");
    assert!(text.contains("pending payload") && text.contains("exhausted") && text.contains("why"));

    let lines = run(&db, &["list", "--queue", "q", "--state", "pending", "--json"]).json_lines();
    assert_eq!(lines.len(), 1);
    assert_eq!(id(&lines[0]), f.pending.0);
    assert_eq!(lines[0]["key"], "k-p");
    assert_eq!(lines[0]["state"], "pending");
    assert_eq!(lines[0]["payload"]["text"], "pending payload");

    let all = run(&db, &["list", "--json"]).json_lines();
    assert_eq!(all.iter().map(id).collect::<Vec<_>>().len(), 6);
    assert!(all.windows(2).all(|w| id(&w[0]) < id(&w[1])), "id order");

    let first = run(&db, &["list", "--limit", "2"]).ok().to_string();
    let second_id = all[1]["id"].as_i64().unwrap();
    assert!(first.contains(&format!("more may follow: --after {second_id}")), "{first}");
    let rest = run(&db, &["list", "--json", "--after", &second_id.to_string()]).json_lines();
    assert_eq!(rest.len(), 4);

    assert_eq!(run(&db, &["list", "--queue", "nope"]).ok().trim(), "no jobs match");
    assert!(run(&db, &["list", "--queue", "nope", "--json"]).ok().is_empty());
    run(&db, &["list", "--state", "done"]).usage();
    run(&db, &["list", "--limit", "0"]).usage();
}

#[test]
fn show_prints_the_row_and_cuts_long_payloads() {
    let (_dir, db, queue) = new_db();
    let f = fixture(&queue);
    let text = run(&db, &["show", &f.exhausted.to_string()]).ok().to_string();
    for field in ["queue", "state", "exhausted", "claim id", "last error", "why", "acknowledged at", "to exhaust"] {
        assert!(text.contains(field), "{field} missing in {text}");
    }

    let row = run(&db, &["show", &f.running.to_string(), "--json"]).json();
    let job = queue.job(f.running).unwrap().unwrap();
    assert_eq!(row["state"], "running");
    assert_eq!(row["attempt"], 1);
    assert_eq!(row["worker"], "w");
    assert_eq!(row["claim_id"], job.claim_id.unwrap().to_string());
    assert_eq!(row["lease_until"], job.lease_until.unwrap());

    let long = enqueue(&queue, NewJob::new("q", "é".repeat(5000).into_bytes()));
    let text = run(&db, &["show", &long.to_string()]).ok().to_string();
    assert!(text.contains("payload (utf-8, 10000 bytes)"), "{text}");
    assert!(text.contains("showing the first 4096 of 10000 bytes; 5904 bytes cut"), "{text}");
    assert!(!run(&db, &["show", &long.to_string(), "--full"]).ok().contains("bytes cut"));
    let row = run(&db, &["show", &long.to_string(), "--json"]).json();
    assert_eq!(row["payload"]["truncated"], true);
    assert_eq!(row["payload"]["bytes"], 10000);
    assert_eq!(row["payload"]["text"].as_str().unwrap().len(), 4096);
    let row = run(&db, &["show", &long.to_string(), "--json", "--full"]).json();
    assert_eq!(row["payload"]["truncated"], false);

    let binary = enqueue(&queue, NewJob::new("q", vec![0xde, 0xad, 0xbe, 0xef, 0x00]));
    let row = run(&db, &["show", &binary.to_string(), "--json"]).json();
    assert_eq!(row["payload"]["encoding"], "hex");
    assert_eq!(row["payload"]["text"], "deadbeef00");
    assert!(run(&db, &["show", &binary.to_string()]).ok().contains("payload (hex, 5 bytes):\ndeadbeef00"));

    assert_eq!(run(&db, &["show", "999"]).error(), "error: job 999 not found");
    run(&db, &["show", "abc"]).usage();
}

/// `show` lists the job's attempts that did not complete, newest first, one line each, their
/// texts escaped so that no error can forge a line; `--json` carries them; `--attempts N`
/// bounds them and says when older ones were left out. A job that never failed has none.
#[test]
fn show_lists_the_attempts_that_did_not_complete_newest_first() {
    let (_dir, db, queue) = new_db();
    let id = enqueue(&queue, NewJob::new("q", b"x".to_vec()).max_attempts(3));
    let first = queue.claim("q", "worker-1", LEASE).unwrap().unwrap();
    queue.retry(&first.token(), Duration::ZERO, "provider answered 502\nattempt 9: forged, worker nobody").unwrap();
    let second = queue.claim("q", "worker-2", LEASE).unwrap().unwrap();
    queue.exhaust(&second.token(), "gave up \u{1b}[2J").unwrap();

    let text = run(&db, &["show", &id.to_string()]).ok().to_string();
    let lines: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("attempt ")).collect();
    assert_eq!(lines.len(), 2, "one line per record, none forged: {text}");
    assert!(text.contains("attempts that did not complete (2, newest first):"), "{text}");
    assert!(lines[0].contains("attempt 2: exhausted, worker worker-2, started 20"), "{}", lines[0]);
    assert!(lines[0].contains("gave up \\u{1b}[2J"), "{}", lines[0]);
    assert!(lines[1].contains("attempt 1: retry, worker worker-1"), "{}", lines[1]);
    assert!(lines[1].contains("provider answered 502\\nattempt 9: forged"), "{}", lines[1]);
    assert!(!text.contains('\u{1b}'), "no raw escape reaches the terminal");

    let row = run(&db, &["show", &id.to_string(), "--json"]).json();
    let attempts = row["attempts"].as_array().unwrap();
    let outcomes: Vec<&str> = attempts.iter().map(|a| a["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["exhausted", "retry"]);
    assert_eq!(attempts[1]["attempt"], 1);
    assert_eq!(attempts[1]["worker"], "worker-1");
    assert_eq!(attempts[1]["claim_id"], first.token.claim_id.to_string());
    assert_eq!(attempts[1]["started_at"], first.claimed_at);
    assert_eq!(attempts[1]["error"], "provider answered 502\nattempt 9: forged, worker nobody");
    assert_eq!(row["attempts_truncated"], false);

    let text = run(&db, &["show", &id.to_string(), "--attempts", "1"]).ok().to_string();
    assert!(text.contains("attempts that did not complete (the 1 newest, newest first):"), "{text}");
    assert!(text.contains("attempt 2: exhausted") && !text.contains("attempt 1: retry"), "{text}");
    assert!(text.contains("(older records not shown; --attempts 10000 shows more)"), "{text}");
    assert_eq!(run(&db, &["show", &id.to_string(), "--attempts", "1", "--json"]).json()["attempts_truncated"], true);
    run(&db, &["show", &id.to_string(), "--attempts", "0"]).usage();

    let done = enqueue(&queue, NewJob::new("other", b"y".to_vec()));
    let claim = queue.claim("other", "w", LEASE).unwrap().unwrap();
    queue.complete(&claim.token()).unwrap();
    assert!(run(&db, &["show", &done.to_string()]).ok().contains("attempts that did not complete: none"));
    assert_eq!(run(&db, &["show", &done.to_string(), "--json"]).json()["attempts"], serde_json::json!([]));
}

#[test]
fn exhausted_lists_unacknowledged_exhaustions_per_queue() {
    let (_dir, db, queue) = new_db();
    let f = fixture(&queue);
    let text = run(&db, &["exhausted"]).ok().to_string();
    assert!(text.contains("2 unacknowledged exhaustions") && text.contains("why other"), "{text}");

    let lines = run(&db, &["exhausted", "--json"]).json_lines();
    assert_eq!(lines.iter().map(id).collect::<Vec<_>>(), vec![f.exhausted.0, f.other_exhausted.0]);
    assert_eq!(lines[0]["reason"], "why");
    assert_eq!(lines[0]["attempt"], 1);

    let other = run(&db, &["exhausted", "--queue", "other", "--json"]).json_lines();
    assert_eq!(other.iter().map(id).collect::<Vec<_>>(), vec![f.other_exhausted.0]);

    let limited = run(&db, &["exhausted", "--limit", "1"]).ok().to_string();
    assert!(limited.contains(&format!("more may follow: --after {}", f.exhausted)), "{limited}");
    assert_eq!(run(&db, &["exhausted", "--queue", "nope"]).ok().trim(), "no unacknowledged exhaustions");
}

#[test]
fn unknown_lists_unknown_outcomes() {
    let (_dir, db, queue) = new_db();
    let f = fixture(&queue);
    let lines = run(&db, &["unknown", "--json"]).json_lines();
    assert_eq!(lines.iter().map(id).collect::<Vec<_>>(), vec![f.unknown.0]);
    assert_eq!(lines[0]["evidence"], "evidence");
    assert!(run(&db, &["unknown"]).ok().contains("evidence"));
    assert!(run(&db, &["unknown", "--queue", "other", "--json"]).ok().is_empty());
}

/// `schedules` lists what the database records of every periodic job: one registered and
/// ticked through the library, one an older build wrote (no definition), and one whose
/// process stopped long ago (overdue; its definition carries an escape sequence, which the
/// table must not pass to the terminal).
#[cfg(feature = "schedule")]
#[test]
fn schedules_lists_the_recorded_schedules_and_flags_overdue_ones() {
    let (_dir, db, queue) = new_db();
    assert_eq!(run(&db, &["schedules"]).ok().trim(), "no schedules recorded");
    assert!(run(&db, &["schedules", "--json"]).ok().is_empty());

    let hourly = fenceq::Schedule::cron("0 * * * *", "Europe/Berlin").unwrap();
    queue.schedule("hourly", hourly, NewJob::new("reports", b"r".to_vec())).unwrap();
    queue.enqueue_schedules().unwrap();
    let last_tick = queue.last_tick("hourly").unwrap().expect("the registration's first tick");
    let conn = fenceq::rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(
        "INSERT INTO fenceq_schedules (name, last_tick, enqueued_at) VALUES ('old-build', 1000, 1000);
         INSERT INTO fenceq_schedules (name, definition, queue, next_tick, recorded_at)
         VALUES ('stopped', 'every 60000 ms from 0' || char(27) || '[2J', 'q', 60000, 1000);",
    )
    .unwrap();

    let lines = run(&db, &["schedules", "--json"]).json_lines();
    let names: Vec<&str> = lines.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["hourly", "old-build", "stopped"]);
    assert_eq!(lines[0]["definition"], "cron \"0 * * * *\" in Europe/Berlin");
    assert_eq!(lines[0]["queue"], "reports");
    assert_eq!(lines[0]["last_tick"], last_tick);
    assert_eq!(lines[0]["next_tick"], last_tick + 3_600_000, "the next hour (no daylight saving change in reach)");
    assert_eq!(lines[0]["overdue"], false);
    assert!(lines[0]["recorded_at"].as_i64().unwrap() >= last_tick);
    assert_eq!(lines[1]["definition"], Value::Null);
    assert_eq!(lines[1]["next_tick"], Value::Null);
    assert_eq!((lines[1]["last_tick"].as_i64(), &lines[1]["overdue"]), (Some(1000), &Value::Bool(false)));
    assert_eq!(lines[2]["overdue"], true);

    let text = run(&db, &["schedules"]).ok().to_string();
    assert!(text.contains("cron \"0 * * * *\" in Europe/Berlin") && text.contains("reports"), "{text}");
    assert!(text.contains("recorded by an older build"), "{text}");
    assert!(text.contains("3 schedules; 1 overdue"), "{text}");
    assert!(!text.contains('\u{1b}') && text.contains("\\u{1b}[2J"), "the escape is shown, not sent: {text}");
}

// ------------------------------------------------------------------------------- enqueue

#[test]
fn enqueue_creates_the_database_and_reports_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sub").join("new.db");
    let out = run(&db, &["enqueue", "--queue", "q", "--key", "k1", "--payload", "hello", "--priority", "-3"]);
    assert_eq!(out.ok().trim(), "new: enqueued job 1 in queue q");
    let dup = run(&db, &["enqueue", "--queue", "q", "--key", "k1", "--payload", "other", "--json"]).json();
    assert_eq!(dup["id"], 1);
    assert_eq!(dup["duplicate"], true);
    assert_eq!(dup["changed"], 0);
    let text = run(&db, &["enqueue", "--queue", "q", "--key", "k1", "--payload", "x"]).ok().to_string();
    assert!(text.starts_with("duplicate: job 1 in queue q already has key \"k1\""), "{text}");

    let queue = Queue::open(&db).unwrap();
    let job = queue.job(JobId(1)).unwrap().unwrap();
    assert_eq!((job.payload.as_slice(), job.priority, job.key.as_deref()), (&b"hello"[..], -3, Some("k1")));
    assert_eq!(job_count(&queue), 1);

    let new = run(
        &db,
        &["enqueue", "--queue", "q", "--payload", "later", "--delay-secs", "60", "--max-attempts", "2", "--json"],
    )
    .json();
    assert_eq!(new["duplicate"], false);
    assert_eq!(new["changed"], 1);
    let job = queue.job(JobId(new["id"].as_i64().unwrap())).unwrap().unwrap();
    assert_eq!(job.max_attempts, 2);
    assert!(job.run_at >= job.created_at + 60_000);
}

#[test]
fn enqueue_reads_payloads_from_stdin_and_files() {
    let (dir, db, queue) = new_db();
    let bytes = vec![0u8, 0xff, 7, 13, 10];
    let mut c = cmd(&db, &["enqueue", "--queue", "bin", "-", "--json"]);
    c.write_stdin(bytes.clone());
    let from_stdin = run_cmd(c).json();
    assert_eq!(queue.job(JobId(id(&from_stdin))).unwrap().unwrap().payload, bytes);

    let file = dir.path().join("payload.bin");
    std::fs::write(&file, b"from a file").unwrap();
    let from_file = run(&db, &["enqueue", "--queue", "bin", "--payload-file", file.to_str().unwrap(), "--json"]).json();
    assert_eq!(queue.job(JobId(id(&from_file))).unwrap().unwrap().payload, b"from a file");

    let missing = dir.path().join("missing.bin");
    let err = run(&db, &["enqueue", "--queue", "bin", "--payload-file", missing.to_str().unwrap()]).error().to_string();
    assert!(err.starts_with("error: cannot read payload file") && err.contains("missing.bin"), "{err}");

    let mut empty = cmd(&db, &["enqueue", "--queue", "bin", "-"]);
    empty.write_stdin(Vec::new());
    assert!(run_cmd(empty).error().contains("invalid payload"));
    assert!(run(&db, &["enqueue", "--queue", "", "--payload", "x"]).error().contains("invalid queue name"));
    assert_eq!(job_count(&queue), 2);

    run(&db, &["enqueue", "--queue", "bin"]).usage();
    run(&db, &["enqueue", "--queue", "bin", "--payload", "x", "-"]).usage();
    run(&db, &["enqueue", "--payload", "x"]).usage();
}

#[test]
fn enqueue_dry_run_and_expect_change_nothing() {
    let (dir, db, queue) = new_db();
    enqueue(&queue, NewJob::new("q", b"x".to_vec()).key("taken"));

    let dry = run(&db, &["enqueue", "--queue", "q", "--key", "fresh", "--payload", "x", "--dry-run"]);
    assert_eq!(dry.ok().trim(), "dry run: would enqueue a new job in queue q; nothing was changed");
    let dry = run(&db, &["enqueue", "--queue", "q", "--key", "fresh", "--payload", "x", "--dry-run", "--json"]).json();
    assert_eq!(
        (dry["dry_run"].clone(), dry["would_change"].clone(), dry["changed"].clone()),
        (true.into(), 1.into(), 0.into())
    );
    let dry = run(&db, &["enqueue", "--queue", "q", "--key", "taken", "--payload", "x", "--dry-run", "--json"]).json();
    assert_eq!((dry["duplicate"].clone(), dry["would_change"].clone()), (true.into(), 0.into()));
    let err =
        run(&db, &["enqueue", "--queue", "q", "--key", "fresh", "--payload", "x", "--expect", "0"]).error().to_string();
    assert_eq!(err, "error: --expect 0 but 1 job would change; nothing was changed");
    run(&db, &["enqueue", "--queue", "q", "--key", "taken", "--payload", "x", "--expect", "1"]).error();
    assert!(run(&db, &["enqueue", "--queue", "q", "--payload", "", "--dry-run"]).error().contains("invalid payload"));
    assert_eq!(job_count(&queue), 1);
    assert!(queue.list(&Default::default()).unwrap().iter().all(|j| j.key.as_deref() == Some("taken")));

    // The id a rolled-back dry run saw is not used up: the next real enqueue gets it.
    let real =
        run(&db, &["enqueue", "--queue", "q", "--key", "fresh", "--payload", "x", "--expect", "1", "--json"]).json();
    assert_eq!(real["id"], 2);

    // Without a database, a dry run (or a failed --expect) does not create one.
    let missing = dir.path().join("none.db");
    assert!(run(&missing, &["enqueue", "--queue", "q", "--payload", "x", "--dry-run"]).ok().contains("would enqueue"));
    run(&missing, &["enqueue", "--queue", "q", "--payload", "x", "--expect", "0"]).error();
    assert!(run(&missing, &["enqueue", "--queue", "", "--payload", "x", "--dry-run"])
        .error()
        .contains("invalid queue"));
    assert!(!missing.exists());
    run(&missing, &["enqueue", "--queue", "q", "--payload", "x", "--expect", "1"]).ok();
    assert!(missing.exists());
}

// ------------------------------------------------------------------------------- ack, replay

#[test]
fn ack_one_exhaustion() {
    let (_dir, db, queue) = new_db();
    let f = fixture(&queue);
    let id = f.exhausted.to_string();
    let acked = |queue: &Queue| queue.job(f.exhausted).unwrap().unwrap().acknowledged_at.is_some();

    assert!(run(&db, &["ack", &id, "--dry-run"]).ok().starts_with("dry run: would acknowledge job"));
    assert_eq!(
        run(&db, &["ack", &id, "--expect", "0"]).error(),
        "error: --expect 0 but 1 job would change; nothing was changed"
    );
    assert!(!acked(&queue));

    let out = run(&db, &["ack", &id, "--expect", "1", "--json"]).json();
    assert_eq!((out["ids"].clone(), out["changed"].clone()), (serde_json::json!([f.exhausted.0]), 1.into()));
    assert!(acked(&queue));
    assert!(run(&db, &["ack", &id]).ok().contains("already acknowledged"));
    assert_eq!(run(&db, &["ack", &id, "--json"]).json()["changed"], 0);

    let err = run(&db, &["ack", &f.pending.to_string()]).error().to_string();
    assert!(err.contains("is pending; ack needs an exhausted job"), "{err}");
    assert_eq!(run(&db, &["ack", "999"]).error(), "error: job 999 not found");
    assert_eq!(state(&queue, f.pending), JobState::Pending);
}

#[test]
fn ack_all_of_a_queue() {
    let (_dir, db, queue) = new_db();
    let mut bulk = Vec::new();
    for i in 0..3 {
        let c = claimed(&queue, "bulk", &format!("bulk {i}"));
        queue.exhaust(&c.token(), "bulk failure").unwrap();
        bulk.push(c.id());
    }
    let other = claimed(&queue, "other", "other");
    queue.exhaust(&other.token(), "other failure").unwrap();
    let unacked = |queue: &Queue| {
        let page = queue.exhaustions(None, 100).unwrap();
        page.items.iter().map(|e| e.token.id).collect::<Vec<_>>()
    };

    let err = run(&db, &["ack", "--all", "--queue", "bulk", "--expect", "2"]).error().to_string();
    assert_eq!(err, "error: --expect 2 but 3 jobs would change; nothing was changed");
    let dry = run(&db, &["ack", "--all", "--queue", "bulk", "--dry-run", "--json"]).json();
    assert_eq!(dry["would_change"], 3);
    assert_eq!(dry["changed"], 0);
    assert!(run(&db, &["ack", "--all", "--queue", "bulk", "--dry-run"])
        .ok()
        .contains("would acknowledge 3 exhaustions"));
    assert_eq!(unacked(&queue).len(), 4);

    let text = run(&db, &["ack", "--all", "--queue", "bulk", "--expect", "3"]).ok().to_string();
    let ids = bulk.iter().map(|id| id.to_string()).collect::<Vec<_>>().join(", ");
    assert_eq!(text.trim(), format!("acknowledged 3 exhaustions of queue bulk (ids {ids})"));
    assert_eq!(unacked(&queue), vec![other.id()]);
    let again = run(&db, &["ack", "--all", "--queue", "bulk", "--json"]).json();
    assert_eq!((again["would_change"].clone(), again["changed"].clone()), (0.into(), 0.into()));

    run(&db, &["ack", "--all"]).usage();
    run(&db, &["ack", "--queue", "bulk"]).usage();
    run(&db, &["ack"]).usage();
    run(&db, &["ack", "1", "--all", "--queue", "bulk"]).usage();
}

#[test]
fn replay_sends_an_exhaustion_back_to_pending() {
    let (_dir, db, queue) = new_db();
    let f = fixture(&queue);
    let id = f.exhausted.to_string();
    assert!(run(&db, &["replay", &id, "--dry-run"]).ok().starts_with("dry run: would replay job"));
    run(&db, &["replay", &id, "--expect", "0"]).error();
    assert_eq!(state(&queue, f.exhausted), JobState::Exhausted);

    let out = run(&db, &["replay", &id, "--json"]).json();
    assert_eq!((out["id"].clone(), out["changed"].clone()), (f.exhausted.0.into(), 1.into()));
    let job = queue.job(f.exhausted).unwrap().unwrap();
    assert_eq!((job.state, job.attempt), (JobState::Pending, 0));

    let err = run(&db, &["replay", &id]).error().to_string();
    assert!(err.contains("is pending; replay needs an exhausted job"), "{err}");
}

// ------------------------------------------------------------------------------- resolve, cancel

#[test]
fn resolve_settles_an_unknown_outcome() {
    let (_dir, db, queue) = new_db();
    let f = fixture(&queue);
    let id = f.unknown.to_string();
    assert!(run(&db, &["resolve", &id, "--as", "retry", "--dry-run"]).ok().starts_with("dry run: would resolve job"));
    run(&db, &["resolve", &id, "--as", "retry", "--expect", "2"]).error();
    assert_eq!(state(&queue, f.unknown), JobState::Unknown);

    let text = run(&db, &["resolve", &id, "--as", "complete"]).ok().to_string();
    assert_eq!(
        text.trim(),
        format!("resolved job {id} (queue q) as complete: the job is completed (the side effect happened)")
    );
    assert_eq!(state(&queue, f.unknown), JobState::Completed);
    let err = run(&db, &["resolve", &id, "--as", "retry"]).error().to_string();
    assert!(err.contains("is completed; resolve needs a job in state unknown"), "{err}");

    let u = claimed(&queue, "u", "again");
    queue.mark_unknown(&u.token(), "timeout").unwrap();
    // The old spellings still parse.
    assert_eq!(run(&db, &["resolve", &u.id().to_string(), "--as", "exhausted", "--json"]).json()["changed"], 1);
    assert_eq!(state(&queue, u.id()), JobState::Exhausted);
    let v = claimed(&queue, "v", "once more");
    queue.mark_unknown(&v.token(), "timeout").unwrap();
    run(&db, &["resolve", &v.id().to_string(), "--as", "completed"]).ok();
    assert_eq!(state(&queue, v.id()), JobState::Completed);

    run(&db, &["resolve", &id]).usage();
    run(&db, &["resolve", &id, "--as", "maybe"]).usage();
}

#[test]
fn cancel_cancels_live_jobs_only() {
    let (_dir, db, queue) = new_db();
    let f = fixture(&queue);
    let id = f.running.to_string();
    assert!(run(&db, &["cancel", &id, "--dry-run"]).ok().starts_with("dry run: would cancel job"));
    run(&db, &["cancel", &id, "--expect", "0"]).error();
    assert_eq!(state(&queue, f.running), JobState::Running);

    assert!(run(&db, &["cancel", &id, "--expect", "1"]).ok().contains("was running"));
    assert_eq!(state(&queue, f.running), JobState::Cancelled);
    assert_eq!(run(&db, &["cancel", &f.pending.to_string(), "--json"]).json()["changed"], 1);

    let err = run(&db, &["cancel", &f.completed.to_string()]).error().to_string();
    assert!(err.contains("is completed; cancel needs a pending, waiting or running job"), "{err}");
    assert_eq!(state(&queue, f.completed), JobState::Completed);
}

// ------------------------------------------------------------------------------- reap, prune

/// Claims the only job of `name` with a 1 ms lease.
fn claim_briefly(queue: &Queue, name: &str, max_attempts: u32) -> fenceq::Claimed {
    let id = enqueue(queue, NewJob::new(name, b"brief".to_vec()).max_attempts(max_attempts));
    let claim = queue.claim(name, "w", Duration::from_millis(1)).unwrap().unwrap();
    assert_eq!(claim.id(), id);
    claim
}

#[test]
fn reap_returns_expired_leases() {
    let (_dir, db, queue) = new_db();
    let requeue = claim_briefly(&queue, "a", 3);
    let exhaust = claim_briefly(&queue, "b", 1);
    let live = claimed(&queue, "c", "live lease");
    // The CLI reads the system clock: wait (busily, at most 50 ms) until both 1 ms leases
    // are over on it. A lease counts as expired once `lease_until <= now`.
    let until = requeue.lease_until.max(exhaust.lease_until);
    let started = Instant::now();
    while queue.now_ms() <= until {
        assert!(started.elapsed() < Duration::from_millis(50), "the system clock did not move");
        std::hint::spin_loop();
    }

    let dry = run(&db, &["reap", "--dry-run", "--json"]).json();
    assert_eq!((dry["requeued"].clone(), dry["exhausted"].clone()), (1.into(), 1.into()));
    assert_eq!((dry["would_change"].clone(), dry["changed"].clone()), (2.into(), 0.into()));
    assert!(run(&db, &["reap", "--dry-run"]).ok().starts_with("dry run: would reap 2 jobs"));
    let err = run(&db, &["reap", "--expect", "1"]).error().to_string();
    assert_eq!(err, "error: --expect 1 but 2 jobs would change; nothing was changed");
    assert_eq!(state(&queue, requeue.id()), JobState::Running);
    assert_eq!(state(&queue, exhaust.id()), JobState::Running);

    let out = run(&db, &["reap", "--expect", "2", "--json"]).json();
    assert_eq!(
        (out["requeued"].clone(), out["exhausted"].clone(), out["changed"].clone()),
        (1.into(), 1.into(), 2.into())
    );
    assert_eq!(state(&queue, requeue.id()), JobState::Pending);
    assert_eq!(state(&queue, exhaust.id()), JobState::Exhausted);
    assert_eq!(state(&queue, live.id()), JobState::Running);
    assert!(run(&db, &["reap"]).ok().starts_with("reaped 0 jobs"));
}

#[test]
fn prune_deletes_old_terminal_rows_only() {
    let (_dir, db, queue) = new_db();
    let f = fixture(&queue);
    let acked = claimed(&queue, "acked", "acked");
    queue.exhaust(&acked.token(), "done with").unwrap();
    queue.acknowledge(&acked.token()).unwrap();
    let before = job_count(&queue);

    // Everything is fresh: the default retention of 7 days deletes nothing.
    assert_eq!(run(&db, &["prune", "--json"]).json()["changed"], 0);
    let dry = run(&db, &["prune", "--older-than", "0s", "--dry-run", "--json"]).json();
    assert_eq!((dry["settled"].clone(), dry["acknowledged"].clone()), (1.into(), 1.into()));
    assert_eq!((dry["would_change"].clone(), dry["changed"].clone()), (2.into(), 0.into()));
    assert!(run(&db, &["prune", "--older-than", "0s", "--dry-run"]).ok().starts_with("dry run: would prune 2 jobs"));
    run(&db, &["prune", "--older-than", "0s", "--expect", "3"]).error();
    assert_eq!(job_count(&queue), before);

    let text = run(&db, &["prune", "--older-than", "0s", "--expect", "2"]).ok().to_string();
    assert!(text.starts_with("pruned 2 jobs older than 0s: 1 completed or cancelled, 1 acknowledged exhaustion"));
    assert!(queue.job(f.completed).unwrap().is_none());
    assert!(queue.job(acked.id()).unwrap().is_none());
    for kept in [f.exhausted, f.unknown, f.running, f.pending, f.other_exhausted] {
        assert!(queue.job(kept).unwrap().is_some(), "job {kept} must not be pruned");
    }

    for bad in ["7", "7y", "d", "-1d"] {
        run(&db, &["prune", "--older-than", bad]).usage();
    }
    for good in ["30s", "15m", "12h", "7d"] {
        run(&db, &["prune", "--older-than", good, "--dry-run"]).ok();
    }
}

// ------------------------------------------------------------------------------- migrate

#[test]
fn migrate_creates_and_reports_versions() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let dry = run(&db, &["migrate", "--dry-run", "--json"]).json();
    assert_eq!((dry["before"].clone(), dry["created"].clone()), (0.into(), false.into()));
    assert!(!db.exists());

    let out = run(&db, &["migrate"]).ok().to_string();
    assert!(out.contains("schema version before: 0"), "{out}");
    assert!(out.contains(&format!("schema version after: {SCHEMA_VERSION} (created)")), "{out}");
    assert_eq!(fenceq::SqliteStore::schema_version_of(&db).unwrap(), SCHEMA_VERSION);
    let again = run(&db, &["migrate", "--json"]).json();
    assert_eq!(again["before"], SCHEMA_VERSION);
    assert_eq!(again["after"], SCHEMA_VERSION);
    assert_eq!(again["supported"], SCHEMA_VERSION);
    assert_eq!(again["created"], false);
}

#[test]
fn migrate_upgrades_an_old_schema_and_keeps_rows() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    {
        let conn = fenceq::rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(include_str!("../../schema/sqlite/0001_create_jobs.sql")).unwrap();
        conn.execute_batch(
            "INSERT INTO fenceq_jobs (queue, payload, run_at, max_attempts, created_at) VALUES ('q', x'01', 0, 5, 0);
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let out = run(&db, &["migrate", "--json"]).json();
    assert_eq!((out["before"].clone(), out["after"].clone()), (1.into(), SCHEMA_VERSION.into()));
    let queue = Queue::open(&db).unwrap();
    assert_eq!(queue.job(JobId(1)).unwrap().unwrap().payload, vec![1]);
}

#[test]
fn a_newer_schema_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("new.db");
    {
        let conn = fenceq::rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("PRAGMA user_version = 999;").unwrap();
    }
    for args in [&["migrate"][..], &["stats"], &["enqueue", "--queue", "q", "--payload", "x"]] {
        let err = run(&db, args).error().to_string();
        assert!(err.contains("newer than this fenceq supports"), "{args:?}: {err}");
    }
    assert_eq!(fenceq::SqliteStore::schema_version_of(&db).unwrap(), 999);
}

// ------------------------------------------------------------------------------- bad files and usage

const READING_AND_CHANGING: &[&[&str]] = &[
    &["stats"],
    &["list"],
    &["show", "1"],
    &["exhausted"],
    &["unknown"],
    &["ack", "1"],
    &["ack", "--all", "--queue", "q"],
    &["replay", "1"],
    &["resolve", "1", "--as", "retry"],
    &["cancel", "1"],
    &["pause", "q"],
    &["unpause", "q"],
    &["reap"],
    &["prune"],
];

#[test]
fn a_missing_database_is_an_error_and_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("absent.db");
    for args in READING_AND_CHANGING {
        for json in [false, true] {
            let mut args = args.to_vec();
            if json {
                args.push("--json");
            }
            let out = run(&db, &args);
            assert_eq!(out.error(), format!("error: no database at {}", db.display()), "{args:?}");
            assert!(out.stdout.is_empty());
        }
    }
    assert!(!db.exists());
    // The default path is ./fenceq.db, relative to the working directory.
    let mut c = Command::cargo_bin("fenceq").unwrap();
    c.current_dir(dir.path()).arg("stats");
    assert_eq!(run_cmd(c).error(), "error: no database at fenceq.db");
    assert!(!dir.path().join("fenceq.db").exists());
}

#[test]
fn a_file_that_is_not_a_database_is_an_error_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("garbage.db");
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&db, &garbage).unwrap();
    let mut all: Vec<&[&str]> = READING_AND_CHANGING.to_vec();
    all.push(&["migrate"]);
    all.push(&["enqueue", "--queue", "q", "--payload", "x"]);
    all.push(&["enqueue", "--queue", "q", "--payload", "x", "--dry-run"]);
    for args in all {
        let err = run(&db, args).error().to_string();
        assert!(err.contains("is not an sqlite database") && err.contains("garbage.db"), "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(&db).unwrap(), garbage);
}

#[test]
fn an_empty_file_or_a_directory_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    let err = run(&empty, &["stats"]).error().to_string();
    assert!(err.contains("holds no fenceq queue (schema version 0)"), "{err}");
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);

    for args in [&["stats"][..], &["migrate"], &["enqueue", "--queue", "q", "--payload", "x"]] {
        let err = run(dir.path(), args).error().to_string();
        assert!(err.contains("is a directory"), "{args:?}: {err}");
    }
}

#[test]
fn usage_errors_exit_2_and_help_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("u.db");
    run(&db, &[]).usage();
    run(&db, &["bogus"]).usage();
    run(&db, &["stats", "--bogus"]).usage();
    run(&db, &["cancel"]).usage();
    run(&db, &["cancel", "0"]).usage();
    run(&db, &["reap", "--expect", "many"]).usage();
    assert!(!db.exists());

    let help = run(&db, &["--help"]).ok().to_string();
    for command in [
        "stats",
        "list",
        "show",
        "exhausted",
        "unknown",
        "enqueue",
        "ack",
        "replay",
        "resolve",
        "cancel",
        "pause",
        "unpause",
        "reap",
        "prune",
        "migrate",
    ] {
        assert!(help.contains(command), "{command} missing from --help");
        let sub = run(&db, &[command, "--help"]).ok().to_string();
        assert!(sub.contains("--db") && sub.contains("--json"), "{command} --help lacks the global options");
    }
    for command in ["enqueue", "ack", "replay", "resolve", "cancel", "pause", "unpause", "reap", "prune"] {
        let sub = run(&db, &[command, "--help"]).ok().to_string();
        assert!(sub.contains("--dry-run") && sub.contains("--expect"), "{command} --help lacks --dry-run/--expect");
    }
}

#[test]
fn reading_commands_never_upgrade_an_old_schema() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    {
        let conn = fenceq::rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(include_str!("../../schema/sqlite/0001_create_jobs.sql")).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
    }
    let bytes = std::fs::read(&db).unwrap();
    for args in [&["stats"][..], &["list"], &["exhausted"], &["unknown"], &["show", "1"]] {
        let out = run(&db, args);
        let err = out.error();
        assert!(err.contains("older") && err.contains("fenceq migrate"), "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(&db).unwrap(), bytes, "the file is untouched");
    assert_eq!(fenceq::SqliteStore::schema_version_of(&db).unwrap(), 1);
}

#[test]
fn changing_commands_and_their_dry_runs_never_upgrade_or_touch_an_old_schema() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    {
        // A level-2 file in rollback-journal mode, as an older build could have left it, with
        // a row in every state the commands below would act on.
        let conn = fenceq::rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(include_str!("../../schema/sqlite/0001_create_jobs.sql")).unwrap();
        conn.execute_batch(include_str!("../../schema/sqlite/0002_add_claim_id.sql")).unwrap();
        conn.execute_batch(
            "INSERT INTO fenceq_jobs (queue, payload, state, run_at, attempt, max_attempts, worker, lease_until,
                                      created_at, claim_id)
             VALUES ('q', x'01', 'running', 0, 1, 5, 'w', 1, 0, randomblob(16));
             INSERT INTO fenceq_jobs (queue, payload, state, run_at, attempt, max_attempts, created_at, settled_at,
                                      claim_id)
             VALUES ('q', x'02', 'exhausted', 0, 5, 5, 0, 0, randomblob(16));",
        )
        .unwrap();
        conn.pragma_update(None, "user_version", 2).unwrap();
        let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
        assert_eq!(mode, "delete");
    }
    let bytes = std::fs::read(&db).unwrap();
    let changing: &[&[&str]] = &[
        &["reap"],
        &["prune", "--older-than", "0s"],
        &["ack", "2"],
        &["ack", "--all", "--queue", "q"],
        &["replay", "2"],
        &["resolve", "1", "--as", "retry"],
        &["cancel", "1"],
        &["pause", "q"],
        &["unpause", "q"],
        &["enqueue", "--queue", "q", "--payload", "x"],
        &["enqueue", "--queue", "q", "--payload", "x", "--key", "k"],
    ];
    for args in changing {
        for extra in [&[][..], &["--dry-run"], &["--expect", "1"], &["--dry-run", "--json"]] {
            let args: Vec<&str> = args.iter().chain(extra).copied().collect();
            let out = run(&db, &args);
            let err = out.error();
            assert!(err.contains("older") && err.contains("fenceq migrate"), "{args:?}: {err}");
        }
    }
    assert_eq!(std::fs::read(&db).unwrap(), bytes, "the file is untouched: schema, journal mode and rows");
    assert!(!dir.path().join("old.db-wal").exists(), "no WAL was started");
    assert_eq!(fenceq::SqliteStore::schema_version_of(&db).unwrap(), 2);
}

#[test]
fn a_real_ack_all_reports_what_its_transaction_acknowledged() {
    let (_dir, db, queue) = new_db();
    let mut ids = Vec::new();
    for n in 0..3 {
        let c = claimed(&queue, "bulk", &format!("job {n}"));
        queue.exhaust(&c.token(), "why").unwrap();
        ids.push(c.id().0);
    }
    // The mismatch is found inside the transaction that would acknowledge: nothing changes.
    let err = run(&db, &["ack", "--all", "--queue", "bulk", "--expect", "4"]).error().to_string();
    assert_eq!(err, "error: --expect 4 but 3 jobs would change; nothing was changed");
    assert_eq!(queue.exhaustions(None, 10).unwrap().items.len(), 3);
    let out = run(&db, &["ack", "--all", "--queue", "bulk", "--expect", "3", "--json"]).json();
    assert_eq!(out["ids"], serde_json::json!(ids));
    assert_eq!((out["would_change"].clone(), out["changed"].clone()), (3.into(), 3.into()));
    assert!(queue.exhaustions(None, 10).unwrap().items.is_empty());
}

#[test]
fn every_operator_change_records_what_when_by_whom_and_why_on_the_row() {
    let (_dir, db, queue) = new_db();
    let f = fixture(&queue);
    let decision = |id: JobId| queue.job(id).unwrap().unwrap().decision.expect("a decision on the row");
    run(
        &db,
        &["resolve", &f.unknown.to_string(), "--as", "complete", "--by", "alice", "--note", "seen in the chat log"],
    )
    .ok();
    let d = decision(f.unknown);
    assert_eq!(
        (d.action.as_str(), d.by.as_deref(), d.note.as_deref()),
        ("resolve complete", Some("alice"), Some("seen in the chat log"))
    );
    run(&db, &["replay", &f.exhausted.to_string(), "--by", "bob"]).ok();
    let d = decision(f.exhausted);
    assert_eq!((d.action.as_str(), d.by.as_deref(), d.note.as_deref()), ("replay", Some("bob"), None));
    run(&db, &["cancel", &f.pending.to_string(), "--by", "carol", "--note", "duplicate order"]).ok();
    assert_eq!(decision(f.pending).action, "cancel");
    run(&db, &["ack", "--all", "--queue", "other", "--by", "dave"]).ok();
    let d = decision(f.other_exhausted);
    assert_eq!((d.action.as_str(), d.by.as_deref()), ("acknowledge", Some("dave")));
    // Without --by, the OS user.
    let mut c = cmd(&db, &["cancel", &f.running.to_string()]);
    c.env("USER", "operator-on-call");
    run_cmd(c).ok();
    assert_eq!(decision(f.running).by.as_deref(), Some("operator-on-call"));
    // show and --json print it.
    let shown = run(&db, &["show", &f.unknown.to_string()]).ok().to_string();
    assert!(shown.contains("resolve complete by alice") && shown.contains("seen in the chat log"), "{shown}");
    let json = run(&db, &["show", &f.exhausted.to_string(), "--json"]).json();
    assert_eq!(json["decision"]["action"], "replay");
    assert_eq!(json["decision"]["by"], "bob");
    assert!(json["decision"]["at"].as_i64().is_some());
    // A dry run records nothing; a bad name changes nothing.
    let before = queue.job(f.completed).unwrap().unwrap();
    assert!(before.decision.is_none());
    run(&db, &["replay", &f.other_exhausted.to_string(), "--by", "erin", "--dry-run"]).ok();
    assert_eq!(decision(f.other_exhausted).by.as_deref(), Some("dave"), "the dry run recorded nothing");
    let long = "x".repeat(200);
    let err = run(&db, &["replay", &f.other_exhausted.to_string(), "--by", &long]).error().to_string();
    assert!(err.contains("invalid operator name"), "{err}");
    assert_eq!(state(&queue, f.other_exhausted), JobState::Exhausted, "nothing changed");
}

// ------------------------------------------------------------------------------- pause, unpause

#[test]
fn pause_and_unpause_with_their_guards_and_a_record_of_who_and_why() {
    let (_dir, db, queue) = new_db();
    let f = fixture(&queue);
    let is_paused = |queue: &Queue| queue.is_paused("q").unwrap();

    // A dry run and an --expect the change cannot meet change nothing.
    let dry = run(&db, &["pause", "q", "--dry-run"]).ok().to_string();
    assert_eq!(dry.trim(), "dry run: would pause queue q (1 pending job held); nothing was changed");
    let dry = run(&db, &["pause", "q", "--dry-run", "--json"]).json();
    assert_eq!(
        (dry["would_change"].clone(), dry["changed"].clone(), dry["paused"].clone()),
        (1.into(), 0.into(), false.into())
    );
    assert_eq!(
        run(&db, &["pause", "q", "--expect", "0"]).error(),
        "error: --expect 0 but 1 queue would change; nothing was changed"
    );
    assert_eq!(
        run(&db, &["pause", "q", "--expect", "2"]).error(),
        "error: --expect 2 but 1 queue would change; nothing was changed"
    );
    assert!(!is_paused(&queue));

    // The pause, made by another process, holds the claims of this process's open handle.
    let out = run(&db, &["pause", "q", "--expect", "1", "--by", "alice", "--note", "telegram outage", "--json"]).json();
    assert_eq!(
        (out["command"].clone(), out["changed"].clone(), out["paused"].clone()),
        ("pause".into(), 1.into(), true.into())
    );
    assert_eq!((out["pause"]["by"].clone(), out["pause"]["note"].clone()), ("alice".into(), "telegram outage".into()));
    assert_eq!(out["pending"], 1);
    assert!(is_paused(&queue));
    assert!(queue.claim("q", "w", LEASE).unwrap().is_none());
    let held = enqueue(&queue, NewJob::new("q", b"held".to_vec()));
    assert_eq!(state(&queue, held), JobState::Pending);
    assert!(queue.claim("other", "w", LEASE).unwrap().is_none(), "other has no pending job, and is not paused");
    assert!(!queue.is_paused("other").unwrap());
    // The running attempt claimed before the pause still settles.
    let running = queue.job(f.running).unwrap().unwrap().token().unwrap();
    queue.complete(&running).unwrap();

    // Again: idempotent, the first record stays; --expect 1 now fails, --expect 0 holds.
    let again = run(&db, &["pause", "q", "--by", "bob"]).ok().to_string();
    assert!(again.starts_with("queue q is already paused (paused since "), "{again}");
    assert!(again.contains("by alice: telegram outage; 2 pending jobs held); nothing changed"), "{again}");
    assert_eq!(
        run(&db, &["pause", "q", "--expect", "1"]).error(),
        "error: --expect 1 but 0 queues would change; nothing was changed"
    );
    assert_eq!(run(&db, &["pause", "q", "--expect", "0", "--json"]).json()["changed"], 0);
    assert_eq!(queue.paused_queues().unwrap()[0].by.as_deref(), Some("alice"));

    // stats shows it, in text and JSON.
    let text = run(&db, &["stats"]).ok().to_string();
    assert!(text.contains("q (paused)"), "{text}");
    assert!(text.contains("queue q is paused (") && text.contains(" by alice: telegram outage)"), "{text}");
    assert!(text.contains("its claims find nothing"), "{text}");
    assert!(text.contains("(fenceq unpause q)"), "{text}");
    let stats = run(&db, &["stats", "--json"]).json();
    assert_eq!(stats["paused_queues"], serde_json::json!(["q"]));
    let queues = stats["queues"].as_array().unwrap();
    let q = queues.iter().find(|q| q["queue"] == "q").unwrap();
    assert_eq!((q["paused"]["by"].clone(), q["paused"]["note"].clone()), ("alice".into(), "telegram outage".into()));
    assert!(q["paused"]["since"].as_i64().is_some() && q["paused"]["age_ms"].as_i64().unwrap() >= 0);
    assert_eq!(queues.iter().find(|q| q["queue"] == "other").unwrap()["paused"], Value::Null);
    assert!(stats["totals"].get("paused").is_none());

    // unpause: a dry run, the guard, then the change, recorded in place of the pause.
    let dry = run(&db, &["unpause", "q", "--dry-run"]).ok().to_string();
    assert!(dry.starts_with("dry run: would unpause queue q (paused since ") && dry.contains("by alice"), "{dry}");
    assert_eq!(
        run(&db, &["unpause", "q", "--expect", "0"]).error(),
        "error: --expect 0 but 1 queue would change; nothing was changed"
    );
    assert!(is_paused(&queue));
    let text = run(&db, &["unpause", "q", "--by", "carol", "--note", "outage over"]).ok().to_string();
    assert!(text.starts_with("unpaused queue q: its 2 pending jobs are claimable again"), "{text}");
    assert!(!is_paused(&queue));
    assert!(queue.claim("q", "w", LEASE).unwrap().is_some(), "the open handle claims again");
    let conn = fenceq::rusqlite::Connection::open(&db).unwrap();
    let record: (String, Option<String>, Option<String>) = conn
        .query_row("SELECT decision, decided_by, decision_note FROM fenceq_queues WHERE queue = 'q'", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(record, ("unpause".to_string(), Some("carol".to_string()), Some("outage over".to_string())));
    assert_eq!(run(&db, &["unpause", "q"]).ok().trim(), "queue q is not paused; nothing changed");
    let out = run(&db, &["unpause", "q", "--json"]).json();
    assert_eq!(
        (out["would_change"].clone(), out["changed"].clone(), out["pause"].clone()),
        (0.into(), 0.into(), Value::Null)
    );
    assert!(!run(&db, &["stats"]).ok().contains("paused"));
}

#[test]
fn a_queue_without_jobs_can_be_paused_and_bad_names_are_refused() {
    let (_dir, db, queue) = new_db();
    // Without --by, the OS user.
    let mut c = cmd(&db, &["pause", "later"]);
    c.env("USER", "operator-on-call");
    assert!(run_cmd(c).ok().starts_with("paused queue later: claims of it find nothing until `fenceq unpause later`"));
    assert_eq!(queue.paused_queues().unwrap()[0].by.as_deref(), Some("operator-on-call"));
    let text = run(&db, &["stats"]).ok().to_string();
    assert!(text.contains("later (paused)"), "a paused queue with no jobs is listed: {text}");
    let stats = run(&db, &["stats", "--json"]).json();
    assert_eq!(stats["queues"][0]["total"], 0);
    assert_eq!(stats["queues"][0]["paused"]["by"], "operator-on-call");

    let long = "x".repeat(129);
    for name in ["", long.as_str()] {
        for command in ["pause", "unpause"] {
            for extra in [&[][..], &["--dry-run"]] {
                let args: Vec<&str> = [command, name].iter().chain(extra).copied().collect();
                let err = run(&db, &args).error().to_string();
                assert!(err.starts_with("error: invalid queue name"), "{args:?}: {err}");
            }
        }
    }
    let err = run(&db, &["pause", "q", "--by", &long]).error().to_string();
    assert!(err.contains("invalid operator name"), "{err}");
    assert_eq!(queue.paused_queues().unwrap().len(), 1, "nothing else was paused");
    run(&db, &["pause"]).usage();
    run(&db, &["unpause"]).usage();
    run(&db, &["pause", "a", "b"]).usage();
}

/// Texts from the database (keys, errors, notes, payloads, and names an older fenceq let
/// through) reach the terminal escaped: no escape sequence, and no line of output forged by a
/// line feed in a field.
#[test]
fn texts_from_the_database_reach_the_terminal_escaped() {
    let (_dir, db, queue) = new_db();
    let hostile = "boom\u{1b}[2J\u{1b}]0;pwned\u{7}\nFORGED: all ok";
    let id = enqueue(&queue, NewJob::new("q", b"p\x1b[31mred".to_vec()).key(hostile));
    let claim = queue.claim("q", "w", LEASE).unwrap().unwrap();
    queue.exhaust(&claim.token, hostile).unwrap();
    queue.operator("ops").note(hostile).pause("q").unwrap();
    let old = enqueue(&queue, NewJob::new("old", b"x".to_vec()));
    drop(queue);
    // A queue name written before names refused control characters.
    let conn = fenceq::rusqlite::Connection::open(&db).unwrap();
    conn.execute("UPDATE fenceq_jobs SET queue = ?1 WHERE id = ?2", (hostile, old.0)).unwrap();
    drop(conn);
    let id = id.0.to_string();
    for args in [
        vec!["stats"],
        vec!["list"],
        vec!["list", "--state", "exhausted"],
        vec!["show", id.as_str()],
        vec!["exhausted"],
        vec!["show", &old.0.to_string()],
    ] {
        let out = run(&db, &args);
        let stdout = out.ok();
        assert!(!stdout.contains('\u{1b}') && !stdout.contains('\u{7}'), "{args:?} printed a raw control: {stdout}");
        for line in stdout.lines() {
            let text = line.trim_start_matches(|c: char| !c.is_alphanumeric());
            assert!(!text.starts_with("FORGED"), "{args:?} printed a forged line: {stdout}");
        }
    }
}

// ------------------------------------------------------------------------------- groups

#[test]
fn groups_lists_blocked_groups_and_group_policy_releases_them() {
    let (_dir, db, queue) = new_db();
    for n in 1..=3 {
        let out = run(&db, &["enqueue", "--queue", "q", "--group", "chat:1", "--payload", &format!("m{n}")]);
        assert!(out.ok().contains("new"), "{}", out.ok());
    }
    enqueue(&queue, NewJob::new("q", b"other".to_vec()).group("chat:2"));
    let show = run(&db, &["--json", "show", "2"]).json();
    assert_eq!((show["group"].as_str(), show["held_by_group"].as_bool()), (Some("chat:1"), Some(true)));
    let head = queue.claim_batch("q", "w", LEASE, 10).unwrap();
    assert_eq!(head.iter().map(|c| c.payload.clone()).collect::<Vec<_>>(), [b"m1".to_vec(), b"other".to_vec()]);
    let head = &head[0];
    queue.mark_unknown(&head.token(), "timed out after sending").unwrap();

    let text = run(&db, &["groups"]);
    assert!(text.ok().contains("chat:1") && text.ok().contains("unknown"), "{}", text.ok());
    let blocked = run(&db, &["--json", "groups", "--blocked"]).json_lines();
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert_eq!(
        (blocked[0]["group"].as_str(), blocked[0]["held"].as_u64(), blocked[0]["reason"].as_str()),
        (Some("chat:1"), Some(2), Some("head_unknown"))
    );
    assert_eq!(blocked[0]["head"]["id"].as_i64(), Some(head.id().0));
    let paged = run(&db, &["--json", "groups", "--limit", "1", "--after", "q/chat:1"]).json_lines();
    assert_eq!(paged.iter().map(|g| g["group"].as_str().unwrap()).collect::<Vec<_>>(), ["chat:2"]);

    let policy = run(&db, &["--json", "group-policy", "q"]).json();
    assert_eq!(policy["group_policy"].as_str(), Some("stop"));
    let set = run(&db, &["group-policy", "q", "continue"]);
    assert!(set.ok().contains("now continue"), "{}", set.ok());
    assert_eq!(queue.group_policy("q").unwrap(), fenceq::GroupPolicy::ContinueAfterFailure);
    assert!(run(&db, &["groups", "--blocked"]).ok().contains("no blocked groups"));
    assert!(!queue.job(JobId(2)).unwrap().unwrap().held_by_group, "the change released the group");

    let bad = run(&db, &["enqueue", "--queue", "q", "--group", "", "--payload", "x"]);
    assert!(bad.error().contains("group"), "{}", bad.error());
    let bad = run(&db, &["groups", "--after", "no-slash"]);
    assert!(bad.error().contains("QUEUE/GROUP"), "{}", bad.error());
    run(&db, &["group-policy", "q", "sometimes"]).usage();
}

// ------------------------------------------------------------------------------- limits

#[test]
fn limit_set_show_and_clear_store_the_limits_and_refuse_bad_input() {
    let (_dir, db, queue) = new_db();
    let set =
        run(&db, &["limit", "set", "telegram", "--rate", "30/1s", "--group-rate", "1/1s", "--group-rate", "20/60s"]);
    assert!(set.ok().contains("rate 30/1s, group rate 1/1s, group rate 20/1m"), "{}", set.ok());
    let limits = queue.limits("telegram").unwrap();
    assert_eq!(limits.rate, Some(fenceq::Rate::parse("30/1s").unwrap()));
    assert_eq!(limits.group_rates.len(), 2);
    let shown = run(&db, &["--json", "limit", "show", "telegram"]).json();
    assert_eq!(shown["rate"]["window_ms"].as_u64(), Some(1000));
    assert_eq!(shown["group_rates"][1]["count"].as_u64(), Some(20));
    let all = run(&db, &["--json", "limit", "show"]).json_lines();
    assert_eq!(all.len(), 1);
    let replaced = run(&db, &["limit", "set", "telegram", "--max-running", "4"]);
    assert!(replaced.ok().contains("at most 4 running"), "{}", replaced.ok());
    assert_eq!(queue.limits("telegram").unwrap().rate, None, "set replaces every limit");

    for bad in
        [["--rate", "30/0s"], ["--rate", "abc"], ["--rate", "0/1s"], ["--group-rate", "1/2d"], ["--max-running", "0"]]
    {
        let mut args = vec!["limit", "set", "telegram"];
        args.extend(bad);
        run(&db, &args).usage();
    }
    assert!(run(&db, &["limit", "set", "telegram"]).error().contains("at least one"));
    assert_eq!(queue.limits("telegram").unwrap().max_running, Some(4), "nothing changed by the refusals");
    assert!(run(&db, &["limit", "clear", "telegram"]).ok().contains("no limits"));
    assert!(queue.limits("telegram").unwrap().is_empty());
    assert!(run(&db, &["limit", "show"]).ok().contains("no queue has limits"));
}

/// What limits hold back shows on `stats`: due jobs a queue-wide rate holds, and the heads of
/// groups whose group rate is spent (deferred until it opens), each with until when.
#[test]
fn stats_shows_what_a_queue_rate_and_a_group_rate_hold_back() {
    let (_dir, db, queue) = new_db();
    run(&db, &["limit", "set", "r", "--rate", "1/1h"]).ok();
    run(&db, &["limit", "set", "g", "--group-rate", "1/1h"]).ok();
    for n in 0..3 {
        enqueue(&queue, NewJob::new("r", format!("{n}").into_bytes()));
    }
    for chat in ["chat:1", "chat:2"] {
        for n in 0..2 {
            enqueue(&queue, NewJob::new("g", format!("{chat} {n}").into_bytes()).group(chat));
        }
    }
    assert!(queue.claim("r", "w", LEASE).unwrap().is_some());
    for c in queue.claim_batch("g", "w", LEASE, 10).unwrap() {
        queue.complete(&c.token()).unwrap();
    }
    assert!(queue.claim_batch("g", "w", LEASE, 10).unwrap().is_empty(), "both chats' rates are spent");

    let text = run(&db, &["stats"]).ok().to_string();
    assert!(text.contains("queue r is throttled: 2 due jobs held back until "), "{text}");
    assert!(text.contains("queue g: 2 heads of groups whose rate is spent wait until "), "{text}");
    let stats = run(&db, &["stats", "--json"]).json();
    let queues = stats["queues"].as_array().unwrap();
    let of = |name: &str| queues.iter().find(|q| q["queue"] == name).unwrap()["throttled"].clone();
    assert_eq!(of("r")["due"].as_u64(), Some(2), "{stats}");
    assert!(of("r")["opens_at"].as_i64().is_some(), "{stats}");
    assert_eq!((of("g")["group_heads"].as_u64(), of("g")["due"].as_u64()), (Some(2), Some(0)), "{stats}");
    assert!(of("g")["group_heads_open_at"].as_i64().is_some(), "{stats}");
}

/// A queue backing off (a handler's provider back-off for the whole queue): `stats` marks it
/// and says until when, `backoff show` prints it, `backoff clear` lifts it (with the usual
/// --dry-run and --expect), and the queue claims again at once.
#[test]
fn backoff_show_and_clear_a_queues_backoff_and_stats_shows_it() {
    let (_dir, db, queue) = new_db();
    enqueue(&queue, NewJob::new("q", b"first".to_vec()));
    enqueue(&queue, NewJob::new("q", b"second".to_vec()));
    let token = queue.claim("q", "w", LEASE).unwrap().unwrap().token();
    let snooze =
        fenceq::Snooze::new(Duration::from_secs(3600)).scope(fenceq::BackoffScope::Queue).reason("429 too many");
    queue.snooze(&token, snooze).unwrap();
    assert!(queue.claim("q", "w", LEASE).unwrap().is_none());

    let text = run(&db, &["stats"]).ok().to_string();
    assert!(text.contains("q (backing off)"), "{text}");
    assert!(text.contains("queue q backs off until ") && text.contains("(in 59m"), "{text}");
    assert!(text.contains("429 too many") && text.contains("(fenceq backoff clear q)"), "{text}");
    let stats = run(&db, &["stats", "--json"]).json();
    assert_eq!(stats["backoff_queues"], serde_json::json!(["q"]));
    assert_eq!(stats["queues"][0]["backoff"]["reason"], "429 too many");
    assert!(stats["totals"].get("backoff").is_none());

    let shown = run(&db, &["backoff", "show", "q"]).ok().to_string();
    assert!(shown.starts_with("queue q backs off until ") && shown.contains(": 429 too many"), "{shown}");
    let all = run(&db, &["backoff", "show"]).ok().to_string();
    assert!(all.starts_with("queue q backs off until ") && all.lines().count() == 1, "every queue backing off: {all}");
    assert_eq!(run(&db, &["backoff", "show", "other"]).ok().trim(), "queue other is not backing off");
    let json = run(&db, &["backoff", "show", "--json"]).json();
    assert!(json["backoffs"][0]["remaining_ms"].as_i64().unwrap() > 3_500_000, "{json}");

    let dry = run(&db, &["backoff", "clear", "q", "--dry-run"]).ok().to_string();
    assert!(dry.starts_with("dry run: would lift the back-off (queue q backs off until "), "{dry}");
    assert_eq!(
        run(&db, &["backoff", "clear", "q", "--expect", "0"]).error(),
        "error: --expect 0 but 1 queue would change; nothing was changed"
    );
    assert!(run(&db, &["backoff", "clear", "q", "--by", ""]).error().contains("operator name"));
    assert!(queue.queue_backoff("q").unwrap().is_some(), "nothing changed yet");
    assert_eq!(run(&db, &["backoff", "show", "q", "--json"]).json()["last_lift"], serde_json::Value::Null);
    let text = run(&db, &["backoff", "clear", "q", "--by", "alice", "--note", "provider recovered"]).ok().to_string();
    assert!(text.starts_with("lifted the back-off of queue q"), "{text}");
    assert!(queue.claim("q", "w", LEASE).unwrap().is_some(), "claimable again at once");
    let shown = run(&db, &["backoff", "show", "q"]).ok().to_string();
    assert!(shown.starts_with("queue q is not backing off\nlast lifted "), "{shown}");
    assert!(shown.contains(" by alice: provider recovered (the back-off: 429 too many)"), "{shown}");
    let lift = &run(&db, &["backoff", "show", "q", "--json"]).json()["last_lift"];
    assert_eq!((lift["by"].as_str(), lift["note"].as_str()), (Some("alice"), Some("provider recovered")), "{lift}");
    assert_eq!(run(&db, &["backoff", "clear", "q"]).ok().trim(), "queue q is not backing off; nothing changed");
    assert_eq!(
        queue.last_backoff_lift("q").unwrap().unwrap().by.as_deref(),
        Some("alice"),
        "a clear that lifts nothing records nothing"
    );
    assert_eq!(run(&db, &["backoff", "clear", "q", "--json"]).json()["changed"], 0);
    assert!(!run(&db, &["stats"]).ok().contains("backs off"));
    assert!(run(&db, &["backoff", "show", ""]).error().contains("queue name"));
}

// ------------------------------------------------------------------------------- names in lines

/// A group name may hold any character but NUL; a queue name an older fenceq wrote may hold
/// control characters too.
const FORGING_GROUP: &str = "g\nFORGED: all groups ok\u{1b}[2J\u{7}";
const FORGING_QUEUE: &str = "old\nFORGED: all queues ok\u{1b}]0;pwned\u{7}";

/// Renames queue `from` to `to` in every table of the file that has a `queue` column (what a
/// database written before names refused control characters holds).
fn rename_queue_everywhere(db: &Path, from: &str, to: &str) {
    let conn = fenceq::rusqlite::Connection::open(db).unwrap();
    let tables: Vec<String> = {
        let mut stmt = conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").unwrap();
        stmt.query_map([], |row| row.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
    };
    for table in tables {
        let has_queue: bool = conn
            .query_row(&format!("SELECT count(*) FROM pragma_table_info('{table}') WHERE name = 'queue'"), [], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n > 0)
            .unwrap();
        if has_queue {
            conn.execute(&format!("UPDATE {table} SET queue = ?1 WHERE queue = ?2"), (to, from)).unwrap();
        }
    }
}

/// What is wrong with `stdout`: a raw escape or bell, or a line that a name forged.
fn forged_output(stdout: &str) -> Option<&'static str> {
    if stdout.contains('\u{1b}') || stdout.contains('\u{7}') {
        return Some("a raw control character");
    }
    let forged = |line: &str| line.trim_start_matches(|c: char| !c.is_alphanumeric()).starts_with("FORGED");
    stdout.lines().any(forged).then_some("a forged line")
}

/// Every name a command interpolates into a line of prose (a paging hint, a stats attention
/// line, the queue of the job a change touched) is escaped: a line feed in a group name or
/// in a queue name cannot write a line of its own, and no escape sequence reaches the terminal.
#[test]
fn names_with_line_feeds_cannot_forge_a_line_of_any_command() {
    let (_dir, db, queue) = new_db();
    for group in ["a", FORGING_GROUP, "z"] {
        enqueue(&queue, NewJob::new("q", group.as_bytes().to_vec()).group(group));
    }
    // Queue "old" is renamed below: an exhaustion, an unknown outcome, a back-off (its
    // snoozed job pending), a group, a pause and limits.
    let exhausted = claimed(&queue, "old", "to exhaust");
    queue.exhaust(&exhausted.token(), "why").unwrap();
    let unknown = claimed(&queue, "old", "to mark unknown");
    queue.mark_unknown(&unknown.token(), "evidence").unwrap();
    let snoozed = claimed(&queue, "old", "backing off");
    let snooze = fenceq::Snooze::new(Duration::from_secs(3600)).scope(fenceq::BackoffScope::Queue).reason("429");
    queue.snooze(&snoozed.token(), snooze).unwrap();
    for n in 0..2 {
        enqueue(&queue, NewJob::new("old", format!("grouped {n}").into_bytes()).group("g1"));
    }
    queue.operator("ops").note("outage").pause("old").unwrap();
    queue
        .set_limits("old", &fenceq::Limits { rate: Some(fenceq::Rate::parse("5/1s").unwrap()), ..Default::default() })
        .unwrap();
    drop(queue);
    rename_queue_everywhere(&db, "old", FORGING_QUEUE);

    let (e, u, s) = (exhausted.id().0.to_string(), unknown.id().0.to_string(), snoozed.id().0.to_string());
    let commands: Vec<Vec<&str>> = vec![
        vec!["groups"],
        vec!["groups", "--limit", "1"],
        vec!["groups", "--limit", "2"],
        vec!["groups", "--queue", "q", "--limit", "2"],
        vec!["groups", "--blocked"],
        vec!["stats"],
        vec!["backoff", "show"],
        vec!["limit", "show"],
        vec!["list"],
        vec!["exhausted"],
        vec!["unknown"],
        vec!["ack", &e, "--dry-run"],
        vec!["replay", &e, "--dry-run"],
        vec!["resolve", &u, "--as", "complete", "--dry-run"],
        vec!["cancel", &s, "--dry-run"],
        vec!["ack", "--all", "--queue", FORGING_QUEUE, "--dry-run"],
        vec!["ack", &e],
        vec!["cancel", &s],
    ];
    let mut forged = Vec::new();
    for args in &commands {
        let out = run(&db, args);
        if let Some(what) = forged_output(out.ok()) {
            forged.push(format!("{args:?} printed {what}:\n{}", out.stdout));
        }
    }
    assert!(forged.is_empty(), "{}", forged.join("\n"));
    // The hint names the group escaped, and pages on from it.
    let page = run(&db, &["groups", "--queue", "q", "--limit", "2"]).ok().to_string();
    let after = "q/g%0AFORGED:%20all%20groups%20ok%1B%5B2J%07";
    assert_eq!(page.lines().last(), Some(format!("2 groups; more may follow: --after {after}").as_str()), "{page}");
    let next = run(&db, &["--json", "groups", "--queue", "q", "--after", after]);
    assert_eq!(next.json_lines().iter().map(|g| g["group"].clone()).collect::<Vec<_>>(), ["z"]);
    // A name given on the command line is refused in one line, or echoed escaped.
    for args in [
        vec!["pause", FORGING_QUEUE],
        vec!["backoff", "clear", FORGING_QUEUE],
        vec!["limit", "set", FORGING_QUEUE, "--rate", "1/1s"],
        vec!["group-policy", FORGING_QUEUE, "continue"],
    ] {
        let out = run(&db, &args);
        assert!(out.error().contains("control character"), "{args:?}: {}", out.error());
    }
}

/// Runs `fenceq --db DB LINE` through `sh -c`, LINE as a person would paste it.
fn run_in_shell(db: &Path, line: &str) -> Run {
    let mut sh = Command::new("sh");
    sh.arg("-c").arg(format!("exec \"$0\" --db \"$1\" {line}")).arg(assert_cmd::cargo::cargo_bin("fenceq")).arg(db);
    run_cmd(sh)
}

/// `groups`' paging hint pages on for every name the library accepts: a slash in a queue
/// name (`tenant/a` beside `tenant` with group `a/g1`), a group with a slash, a space and a
/// line feed, percent signs, quotes and shell syntax, a leading dash, letters of any script.
/// Pasted into a shell as printed, each hint with --limit 1 visits every group once, in
/// order, and the last page has none.
#[test]
fn groups_after_pages_every_queue_and_group_name_exactly_once() {
    let (_dir, db, queue) = new_db();
    let groups: &[(&str, &[&str])] = &[
        ("tenant/a", &["g1", "g2", "g3"]),
        ("tenant", &["a/g1", "a"]),
        ("q 100%", &["a/b c\nd", "50%", "%2F", "it's \"quoted\" $(x) `y` ; & | * ? ~ # ! \\", "чат 1", "tab\there"]),
        ("-x", &["-y"]),
    ];
    let mut expected = Vec::new();
    for (name, names) in groups {
        for group in *names {
            enqueue(&queue, NewJob::new(*name, b"x".to_vec()).group(*group));
            expected.push((name.to_string(), group.to_string()));
        }
    }
    expected.sort();

    let mut visited = Vec::new();
    let mut after = String::new();
    let mut pages = 0;
    for _ in 0..expected.len() + 2 {
        pages += 1;
        let line = format!("groups --limit 1 {after}");
        let page = run_in_shell(&db, &format!("--json {line}")).json_lines();
        visited.extend(page.iter().map(|g| (g["queue"].as_str().unwrap().to_string(), g["group"].to_string())));
        let text = run_in_shell(&db, &line).ok().to_string();
        let summary = text.lines().last().unwrap();
        match summary.split_once("; more may follow: ") {
            None => {
                // The last group fills its page, so one more (empty) page may follow it.
                assert!(["1 group", "no groups with live jobs"].contains(&summary), "{text}");
                break;
            }
            Some((_, hint)) => {
                let value = hint.strip_prefix("--after ").unwrap_or_else(|| panic!("{summary}"));
                let safe = |c: char| c.is_alphanumeric() || "%/-._:@,+=".contains(c);
                assert!(value.chars().all(safe), "a hint a shell reads as it is: {hint}");
                after = hint.to_string();
            }
        }
    }
    let expected: Vec<(String, String)> =
        expected.into_iter().map(|(q, g)| (q, Value::String(g).to_string())).collect();
    assert_eq!(visited, expected, "every group once, in order");
    assert!(pages <= expected.len() + 1, "the paging ends ({pages} pages)");

    // The hint's form is also what a person types: a plain QUEUE/GROUP, or parts escaped.
    let paged = |after: &str| {
        let page = run(&db, &["--json", "groups", "--limit", "1", "--after", after]).json_lines();
        page.iter()
            .map(|g| (g["queue"].as_str().unwrap().to_string(), g["group"].as_str().unwrap().to_string()))
            .collect::<Vec<_>>()
    };
    let pair = |q: &str, g: &str| vec![(q.to_string(), g.to_string())];
    assert_eq!(paged("tenant/a"), pair("tenant", "a/g1"));
    assert_eq!(paged("tenant/a%2Fg1"), pair("tenant/a", "g1"));
    assert_eq!(paged("tenant%2Fa/g1"), pair("tenant/a", "g2"));
    assert_eq!(paged("q%20100%25/50%25"), pair("q 100%", "a/b c\nd"));
    let err = run(&db, &["groups", "--after", "tenant/a/g1"]).error().to_string();
    assert!(err.contains("%2F"), "{err}");
    // A `%` that starts no escape stands for itself, as typed.
    assert_eq!(paged("q 100%/50%"), pair("q 100%", "a/b c\nd"));
    let err = run(&db, &["groups", "--after", "tenant/%FF"]).error().to_string();
    assert!(err.contains("UTF-8"), "{err}");
}

// ------------------------------------------------------------------------------- flow control: change options

/// `head` followed by `tail`, as one command line.
fn args_of<'a>(head: &[&'a str], tail: &[&'a str]) -> Vec<&'a str> {
    [head, tail].concat()
}

/// `limit set` and `limit clear` take the options of every change: --dry-run says what would
/// change and changes nothing, --expect N counts the queues whose limits would change (1, or 0
/// when they are so already) and refuses a mismatch unchanged, --backup PATH backs the file
/// up first (a dry run takes none).
#[test]
fn limit_set_and_clear_take_dry_run_expect_and_backup() {
    let (dir, db, queue) = new_db();
    let limits_in =
        |path: &Path| Queue::builder().path(path).read_only(true).open().unwrap().limits("telegram").unwrap();
    let set = ["limit", "set", "telegram", "--rate", "30/1s", "--group-rate", "1/1s"];

    let dry = run(&db, &args_of(&set, &["--dry-run"])).ok().to_string();
    assert_eq!(
        dry.trim(),
        "dry run: queue telegram would have rate 30/1s, group rate 1/1s (it has no limits); nothing was changed"
    );
    let dry = run(&db, &args_of(&set, &["--dry-run", "--json"])).json();
    assert_eq!(
        (&dry["command"], &dry["dry_run"], &dry["would_change"], &dry["changed"], &dry["backup"]),
        (&"limit set".into(), &true.into(), &1.into(), &0.into(), &Value::Null),
        "{dry}"
    );
    assert_eq!((dry["rate"]["text"].as_str(), dry["before"]["rate"].is_null()), (Some("30/1s"), true), "{dry}");
    let err = run(&db, &["limit", "set", "telegram", "--group-rate", "1/1s", "--group-rate", "5/1s", "--dry-run"]);
    assert!(err.error().contains("window"), "a dry run refuses what the change would: {}", err.error());
    assert_eq!(
        run(&db, &args_of(&set, &["--expect", "0"])).error(),
        "error: --expect 0 but 1 queue would change; nothing was changed"
    );
    assert_eq!(
        run(&db, &args_of(&set, &["--expect", "2"])).error(),
        "error: --expect 2 but 1 queue would change; nothing was changed"
    );
    let not_taken = dir.path().join("not-taken.db");
    run(&db, &args_of(&set, &["--dry-run", "--backup", not_taken.to_str().unwrap()])).ok();
    assert!(!not_taken.exists(), "a dry run takes no backup");
    assert!(queue.limits("telegram").unwrap().is_empty(), "nothing changed yet");

    let before_set = dir.path().join("before-set.db");
    let out = run(&db, &args_of(&set, &["--expect", "1", "--backup", before_set.to_str().unwrap()])).ok().to_string();
    assert!(out.starts_with("backed up ") && out.contains("before the change"), "{out}");
    assert!(out.contains("\nqueue telegram now has rate 30/1s, group rate 1/1s (it had no limits)"), "{out}");
    assert!(limits_in(&before_set).is_empty(), "the backup holds the queue as it was");
    assert_eq!(queue.limits("telegram").unwrap().rate, Some(fenceq::Rate::parse("30/1s").unwrap()));

    // The same limits again (group rates in any order) change nothing.
    let same = ["limit", "set", "telegram", "--group-rate", "1/1s", "--rate", "30/1s"];
    assert_eq!(
        run(&db, &args_of(&same, &["--expect", "1"])).error(),
        "error: --expect 1 but 0 queues would change; nothing was changed"
    );
    let again = run(&db, &args_of(&same, &["--expect", "0"])).ok().to_string();
    assert_eq!(again.trim(), "queue telegram has rate 30/1s, group rate 1/1s already; nothing changed");
    assert_eq!(run(&db, &args_of(&set, &["--json"])).json()["changed"], 0);
    let taken = dir.path().join("taken.db");
    std::fs::write(&taken, b"keep").unwrap();
    let err = run(&db, &["limit", "set", "telegram", "--max-running", "2", "--backup", taken.to_str().unwrap()]);
    assert!(err.error().contains("--backup failed; nothing was changed"), "{}", err.error());
    assert_eq!(queue.limits("telegram").unwrap().max_running, None, "a failed backup changes nothing");

    // clear: the same options.
    let dry = run(&db, &["limit", "clear", "telegram", "--dry-run"]).ok().to_string();
    assert_eq!(
        dry.trim(),
        "dry run: queue telegram would have no limits (it has rate 30/1s, group rate 1/1s); nothing was changed"
    );
    assert_eq!(
        run(&db, &["limit", "clear", "telegram", "--expect", "0"]).error(),
        "error: --expect 0 but 1 queue would change; nothing was changed"
    );
    assert!(!queue.limits("telegram").unwrap().is_empty());
    let before_clear = dir.path().join("before-clear.db");
    let out = run(
        &db,
        &["--json", "limit", "clear", "telegram", "--expect", "1", "--backup", before_clear.to_str().unwrap()],
    )
    .json();
    assert_eq!(
        (&out["command"], &out["would_change"], &out["changed"], &out["backup"]["path"]),
        (&"limit clear".into(), &1.into(), &1.into(), &before_clear.to_str().unwrap().into()),
        "{out}"
    );
    assert_eq!(out["before"]["rate"]["text"], "30/1s", "{out}");
    assert!(queue.limits("telegram").unwrap().is_empty());
    assert_eq!(limits_in(&before_clear).group_rates.len(), 1, "the backup holds the limits cleared");
    assert_eq!(
        run(&db, &["limit", "clear", "telegram", "--expect", "1"]).error(),
        "error: --expect 1 but 0 queues would change; nothing was changed"
    );
    assert_eq!(
        run(&db, &["limit", "clear", "telegram"]).ok().trim(),
        "queue telegram has no limits already; nothing changed"
    );
    // show changes nothing and takes none of them.
    run(&db, &["limit", "show", "--dry-run"]).usage();
}

/// `group-policy QUEUE POLICY` takes the options of every change: setting `continue` hands the
/// groups that failed heads stop on (one held job of each may start), so --expect N counts
/// those jobs, --dry-run names them and changes nothing, --backup PATH backs the file up first.
#[test]
fn group_policy_takes_dry_run_expect_and_backup() {
    let (dir, db, queue) = new_db();
    for (group, n) in [("chat:1", 2), ("chat:2", 2)] {
        for m in 0..n {
            enqueue(&queue, NewJob::new("q", format!("{group} {m}").into_bytes()).group(group));
        }
    }
    let heads = queue.claim_batch("q", "w", LEASE, 10).unwrap();
    assert_eq!(heads.len(), 2);
    queue.mark_unknown(&heads[0].token(), "timed out after sending").unwrap();
    queue.exhaust(&heads[1].token(), "chat not found").unwrap();
    for m in 0..2 {
        enqueue(&queue, NewJob::new("q", format!("chat:3 {m}").into_bytes()).group("chat:3"));
    }
    let held = |queue: &Queue| queue.list(&Default::default()).unwrap().iter().filter(|j| j.held_by_group).count();
    assert_eq!(held(&queue), 3);
    let policy_in =
        |path: &Path| Queue::builder().path(path).read_only(true).open().unwrap().group_policy("q").unwrap();

    let dry = run(&db, &["group-policy", "q", "continue", "--dry-run"]).ok().to_string();
    assert_eq!(
        dry.trim(),
        "dry run: would set queue q's group policy to continue (it is stop): a failed head no longer blocks its \
         group; would hand 2 groups on (chat:1, chat:2), whose next jobs may start; nothing was changed"
    );
    let dry = run(&db, &["--json", "group-policy", "q", "continue", "--dry-run"]).json();
    assert_eq!(
        (&dry["command"], &dry["dry_run"], &dry["would_change"], &dry["changed"], &dry["previous_policy"]),
        (&"group-policy".into(), &true.into(), &2.into(), &0.into(), &"stop".into()),
        "{dry}"
    );
    assert_eq!(dry["handed_on"], serde_json::json!(["chat:1", "chat:2"]), "{dry}");
    assert_eq!(
        run(&db, &["group-policy", "q", "continue", "--expect", "1"]).error(),
        "error: --expect 1 but 2 jobs would change; nothing was changed"
    );
    let not_taken = dir.path().join("not-taken.db");
    run(&db, &["group-policy", "q", "continue", "--dry-run", "--backup", not_taken.to_str().unwrap()]).ok();
    assert!(!not_taken.exists(), "a dry run takes no backup");
    let taken = dir.path().join("taken.db");
    std::fs::write(&taken, b"keep").unwrap();
    let err = run(&db, &["group-policy", "q", "continue", "--backup", taken.to_str().unwrap()]);
    assert!(err.error().contains("--backup failed; nothing was changed"), "{}", err.error());
    assert_eq!((queue.group_policy("q").unwrap(), held(&queue)), (fenceq::GroupPolicy::StopOnFailure, 3));

    let before = dir.path().join("before.db");
    let out = run(&db, &["group-policy", "q", "continue", "--expect", "2", "--backup", before.to_str().unwrap()]);
    let out = out.ok().to_string();
    assert!(out.starts_with("backed up ") && out.contains("before the change"), "{out}");
    assert!(
        out.contains(
            "\nqueue q's group policy is now continue: a failed head no longer blocks its group; handed 2 groups on \
             (chat:1, chat:2)"
        ),
        "{out}"
    );
    assert_eq!((queue.group_policy("q").unwrap(), held(&queue)), (fenceq::GroupPolicy::ContinueAfterFailure, 1));
    assert_eq!(policy_in(&before), fenceq::GroupPolicy::StopOnFailure, "the backup holds the policy as it was");

    // Again: nothing to hand on; --expect counts 0.
    assert_eq!(
        run(&db, &["group-policy", "q", "continue", "--expect", "1"]).error(),
        "error: --expect 1 but 0 jobs would change; nothing was changed"
    );
    let again = run(&db, &["--json", "group-policy", "q", "continue", "--expect", "0"]).json();
    assert_eq!(
        (&again["would_change"], &again["changed"], &again["policy_changed"]),
        (&0.into(), &0.into(), &false.into())
    );
    // stop hands nothing on (and stops no job that started).
    let dry = run(&db, &["group-policy", "q", "stop", "--dry-run"]).ok().to_string();
    assert!(dry.starts_with("dry run: would set queue q's group policy to stop (it is continue): "), "{dry}");
    assert_eq!(queue.group_policy("q").unwrap(), fenceq::GroupPolicy::ContinueAfterFailure);
    let stop = run(&db, &["--json", "group-policy", "q", "stop", "--expect", "0"]).json();
    assert_eq!((&stop["changed"], &stop["policy_changed"]), (&0.into(), &true.into()), "{stop}");
    assert_eq!(queue.group_policy("q").unwrap(), fenceq::GroupPolicy::StopOnFailure);
    // Without a policy it only shows, and takes none of them.
    let err = run(&db, &["group-policy", "q", "--dry-run"]).error().to_string();
    assert!(err.contains("POLICY"), "{err}");
}

/// `pause`, `unpause` and `backoff clear` take --backup PATH like every change, and
/// `backoff clear` records --by and --note as the queue's last lift, in its JSON too.
#[test]
fn pause_unpause_and_backoff_clear_take_backup_and_record_who_and_why() {
    let (dir, db, queue) = new_db();
    enqueue(&queue, NewJob::new("q", b"first".to_vec()));
    let token = queue.claim("q", "w", LEASE).unwrap().unwrap().token();
    let snooze = fenceq::Snooze::new(Duration::from_secs(3600)).scope(fenceq::BackoffScope::Queue).reason("429");
    queue.snooze(&token, snooze).unwrap();
    let open = |path: &Path| Queue::builder().path(path).read_only(true).open().unwrap();

    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let out = run(&db, &["pause", "q", "--backup", &path("before-pause.db")]).ok().to_string();
    assert!(out.starts_with("backed up ") && out.contains("\npaused queue q"), "{out}");
    assert!(!open(Path::new(&path("before-pause.db"))).is_paused("q").unwrap());
    let out = run(&db, &["unpause", "q", "--backup", &path("before-unpause.db")]).ok().to_string();
    assert!(out.starts_with("backed up ") && out.contains("\nunpaused queue q"), "{out}");
    assert!(open(Path::new(&path("before-unpause.db"))).is_paused("q").unwrap());
    run(&db, &["pause", "q", "--dry-run", "--backup", &path("not-taken.db")]).ok();
    assert!(!Path::new(&path("not-taken.db")).exists(), "a dry run takes no backup");

    let out = run(
        &db,
        &[
            "--json",
            "backoff",
            "clear",
            "q",
            "--by",
            "alice",
            "--note",
            "provider recovered",
            "--backup",
            &path("before-lift.db"),
        ],
    )
    .json();
    assert_eq!((&out["changed"], &out["backup"]["path"]), (&1.into(), &path("before-lift.db").into()), "{out}");
    assert_eq!(
        (out["last_lift"]["by"].as_str(), out["last_lift"]["note"].as_str()),
        (Some("alice"), Some("provider recovered"))
    );
    assert!(open(Path::new(&path("before-lift.db"))).queue_backoff("q").unwrap().is_some());
    let lift = queue.last_backoff_lift("q").unwrap().unwrap();
    assert_eq!((lift.by.as_deref(), lift.note.as_deref()), (Some("alice"), Some("provider recovered")));
}
