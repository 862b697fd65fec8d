//! Wake-ups across processes on PostgreSQL (`LISTEN`/`NOTIFY`): an enqueue in this process
//! wakes an idle pool in a child process (this test binary again, run at its `#[ignore]`d
//! entry `child_pool`) long before the pool's 60 s poll interval; a listener whose
//! connection the server ended reconnects and wakes its pools; the listener thread ends
//! with the last handle of its queue. An `#[ignore]`d test prints the wake-up latency:
//!
//! ```text
//! eval "$(scripts/postgres env)"
//! cargo test --release --features postgres --test postgres -- --ignored --nocapture notify::print_wake_latency
//! ```
//!
//! Each test runs in a schema of its own on the server named by `FENCEQ_POSTGRES_URL`
//! (`scripts/postgres start`); without one the tests say they skipped, except under
//! `CI=true`, where they fail.

use fenceq::diesel::sql_types::{BigInt, Text};
use fenceq::diesel::{sql_query, PgConnection, QueryableByName, RunQueryDsl};
use fenceq::{NewJob, Outcome, Queue, WorkerPool};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::{alone_in_a_process, child_process, Scratch};

/// Far below the child's poll interval (60 s), far above any wake-up (milliseconds).
const PROMPTLY: Duration = Duration::from_secs(10);
const SCHEMA_VARIABLE: &str = "FENCEQ_NOTIFY_SCHEMA";

fn unix_micros() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as i64
}

#[derive(QueryableByName)]
struct Pid {
    #[diesel(sql_type = BigInt)]
    pid: i64,
}

/// The backends that listen on the schema's channel (their last statement was its
/// `LISTEN`, and it finished).
fn listeners(raw: &mut PgConnection, schema: &str) -> Vec<i64> {
    sql_query(
        "SELECT pid::bigint AS pid FROM pg_stat_activity
         WHERE state = 'idle' AND query = 'LISTEN \"' || left('fenceq_' || $1, 63) || '\"' ORDER BY pid",
    )
    .bind::<Text, _>(schema)
    .load::<Pid>(raw)
    .unwrap()
    .into_iter()
    .map(|p| p.pid)
    .collect()
}

/// Waits (bounded) until a listener other than `not` listens on the schema's channel.
fn wait_for_listener(raw: &mut PgConnection, schema: &str, not: Option<i64>) -> i64 {
    let deadline = Instant::now() + PROMPTLY;
    loop {
        if let Some(pid) = listeners(raw, schema).into_iter().find(|pid| Some(*pid) != not) {
            return pid;
        }
        assert!(Instant::now() < deadline, "no listener on the schema's channel within {PROMPTLY:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The child: a pool on the schema's queue `q` with a 60 s poll interval, printing
/// `fenceq-child: handled <payload> <unix µs at the handler's start>` for every job, until stdin closes.
#[test]
#[ignore = "the child process of the cross-process tests"]
fn child_pool() {
    let (Ok(url), Ok(schema)) = (std::env::var("FENCEQ_POSTGRES_URL"), std::env::var(SCHEMA_VARIABLE)) else {
        return;
    };
    let queue = Queue::builder().url(url).schema(schema).open_postgres().unwrap();
    let pool = WorkerPool::builder(queue, "q")
        .workers(1)
        .poll_interval(Duration::from_secs(60))
        .handler(|attempt| {
            let at = unix_micros();
            let payload = String::from_utf8_lossy(attempt.payload()).into_owned();
            let mut out = std::io::stdout().lock();
            writeln!(out, "fenceq-child: handled {payload} {at}").unwrap();
            out.flush().unwrap();
            Outcome::Complete
        })
        .start()
        .unwrap();
    // On a line of its own: the test harness has printed `test child_pool ... ` before.
    println!("\nfenceq-child: ready");
    std::io::stdout().flush().unwrap();
    // Until the parent closes stdin (or dies).
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {}
    pool.shutdown(Duration::from_secs(10)).unwrap();
}

/// A running child and the lines it prints.
struct ChildPool {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl ChildPool {
    fn spawn(s: &Scratch) -> ChildPool {
        let mut child = child_process(concat!(module_path!(), "::child_pool"))
            .env("FENCEQ_POSTGRES_URL", &s.url)
            .env(SCHEMA_VARIABLE, &s.schema)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(std::result::Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let pool = ChildPool { child, lines };
        pool.expect_line(|l| l == "fenceq-child: ready");
        pool
    }

    /// The next line of the child's output that `matches`, within [`PROMPTLY`].
    fn expect_line(&self, matches: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PROMPTLY;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if matches(&line) => return line,
                Ok(_) => {}
                Err(e) => panic!("the child printed no matching line within {PROMPTLY:?}: {e}"),
            }
        }
    }

    /// Waits for `handled <payload> <µs>`; returns the µs.
    fn handled(&self, payload: &str) -> i64 {
        let prefix = format!("fenceq-child: handled {payload} ");
        let line = self.expect_line(|l| l.starts_with(&prefix));
        line[prefix.len()..].parse().unwrap()
    }
}

impl Drop for ChildPool {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + PROMPTLY;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_enqueue_wakes_an_idle_pool_in_another_process_long_before_its_poll_interval() {
    let Some(s) = Scratch::new() else { return };
    let queue = s.open();
    let child = ChildPool::spawn(&s);
    wait_for_listener(&mut s.raw(), &s.schema, None);
    for i in 0..3 {
        let enqueued = Instant::now();
        queue.enqueue(NewJob::new("q", format!("job-{i}").into_bytes())).unwrap();
        child.handled(&format!("job-{i}"));
        assert!(enqueued.elapsed() < PROMPTLY, "woken after {:?}", enqueued.elapsed());
    }
    // The other ways a job becomes due now wake it too: a batch, and a transaction's
    // enqueue_tx (sent as the transaction commits).
    queue.enqueue_batch([NewJob::new("q", b"batch".to_vec())]).unwrap();
    child.handled("batch");
    queue.transaction(|tx| queue.enqueue_tx(tx, NewJob::new("q", b"in-tx".to_vec()))).unwrap();
    child.handled("in-tx");
}

#[test]
fn a_listener_whose_connection_was_ended_reconnects_and_wakes_its_pool() {
    let Some(s) = Scratch::new() else { return };
    let queue = s.open();
    let child = ChildPool::spawn(&s);
    let mut raw = s.raw();
    let first = wait_for_listener(&mut raw, &s.schema, None);
    sql_query("SELECT pg_terminate_backend($1::int)::int::bigint AS pid")
        .bind::<BigInt, _>(first)
        .execute(&mut raw)
        .unwrap();
    // Enqueued while the listener may be away: its notification may be lost, and the
    // listener's wake-up of every pool after reconnecting finds the job.
    queue.enqueue(NewJob::new("q", b"during".to_vec())).unwrap();
    child.handled("during");
    let second = wait_for_listener(&mut raw, &s.schema, Some(first));
    assert_ne!(first, second);
    queue.enqueue(NewJob::new("q", b"after".to_vec())).unwrap();
    child.handled("after");
}

/// The names of this process's threads that are listeners.
fn listener_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "fenceq-listen")
        .count()
}

#[test]
fn the_listener_thread_ends_with_the_last_handle_of_its_queue() {
    // It counts the listener threads of its whole process, and other modules' tests of this
    // binary start pools (and listeners) in it: it runs alone in a process of its own.
    if !alone_in_a_process(concat!(module_path!(), "::the_listener_thread_ends_with_the_last_handle_of_its_queue")) {
        return;
    }
    let Some(s) = Scratch::new() else { return };
    if !std::path::Path::new("/proc/self/task").exists() {
        eprintln!("skipped: no /proc/self/task to count threads in");
        return;
    }
    // The other tests of this file start their pools (and listeners) in child processes,
    // so every listener thread of this process is this test's.
    let queue = s.open();
    assert_eq!(listener_threads(), 0, "no pool, no listener");
    let pool = WorkerPool::builder(queue.clone(), "q").handler(|_| Outcome::Complete).start().unwrap();
    let second = WorkerPool::builder(queue.clone(), "other").handler(|_| Outcome::Complete).start().unwrap();
    // A thread names itself as it starts: wait (bounded) until it has.
    let deadline = Instant::now() + PROMPTLY;
    while listener_threads() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(listener_threads(), 1, "one listener per queue handle, however many pools");
    let clone = queue.clone();
    pool.shutdown(Duration::from_secs(10)).unwrap();
    second.shutdown(Duration::from_secs(10)).unwrap();
    drop(queue);
    assert_eq!(listener_threads(), 1, "a handle is still open");
    drop(clone);
    assert_eq!(listener_threads(), 0, "dropping the last handle stops and joins the listener");
}

/// Prints the wake-up latency, from the return of `enqueue` (its commit) in this process
/// to the start of the handler in the child, over 200 samples (p50, p99, max), and the
/// child's CPU time while idle. Not an assertion.
#[test]
#[ignore = "prints figures; run by hand (see the module docs)"]
fn print_wake_latency() {
    let Some(s) = Scratch::new() else { return };
    let queue = s.open();
    let child = ChildPool::spawn(&s);
    wait_for_listener(&mut s.raw(), &s.schema, None);
    let samples = 200;
    let mut latencies = Vec::with_capacity(samples);
    for i in 0..samples {
        queue.enqueue(NewJob::new("q", format!("s{i}").into_bytes())).unwrap();
        let committed = unix_micros();
        let started = child.handled(&format!("s{i}"));
        latencies.push(started - committed);
        // Let the child go idle again (a random pause, so that the read interval's phase
        // varies): the pool waits on its wake channel, not a poll.
        std::thread::sleep(Duration::from_micros(3_000 + (i as u64 * 7_919) % 9_000));
    }
    latencies.sort_unstable();
    let at = |p: f64| latencies[((samples as f64 * p) as usize).min(samples - 1)];
    println!(
        "wake-up latency, enqueue commit -> handler start in another process, {samples} samples: \
         p50 {} µs, p99 {} µs, max {} µs",
        at(0.50),
        at(0.99),
        latencies[samples - 1]
    );
    let cpu = |pid: u32| -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat.rsplit(')').next().unwrap().split_whitespace().collect();
        // utime and stime, fields 14 and 15 (the 12th and 13th after the name).
        (fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()) / 100.0
    };
    let pid = child.child.id();
    let before = cpu(pid);
    std::thread::sleep(Duration::from_secs(10));
    println!("the idle child used {:.2} s of CPU in 10 s (its listener reads every 5 ms)", cpu(pid) - before);
}
