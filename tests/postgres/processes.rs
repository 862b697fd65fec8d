//! The PostgreSQL store with several OS processes on one server (RELIABILITY.md §3 T15, T4,
//! T9): worker pools in four processes through 10,000 jobs while whole processes pause past
//! their leases, a worker process killed with SIGKILL mid-run, and eight processes opening an
//! old schema at once.
//!
//! The children are this test binary, run with `--ignored --exact processes::pg_child` and
//! their role in `FENCEQ_PG_CHILD`. A child's pool completes every job with
//! `Attempt::complete_with`, writing a `settle_log` row (job, attempt, claim id, process) in
//! the completion's own transaction, and prints `STALE <id> <attempt>` for every completion the
//! fence refused and a `SUMMARY` of its counters at the end. A trigger logs every update of a
//! job row into `completed`, whoever makes it, in `completions`. After a run, on the server:
//! every job completed, exactly one `settle_log` row and one completion per job, both at the
//! job's final attempt and claim id (so no stale attempt ever wrote), and the children's
//! counters add up: claims = jobs + refusals, and every refused completion was of an attempt
//! that did not win.
//!
//! Time: real leases (the children cannot share a manual clock), but no assertion depends on
//! timing. A pause is SIGSTOP (the whole process, heartbeat included, as a GC pause, swap or
//! a VM stall would stop it); the parent continues the process only once the server shows
//! that another process reclaimed one of its jobs, so each pause yields at least one stale
//! attempt whose completion must be refused. A lease lost to a slow machine outside a pause
//! only adds refusals, which the same checks cover. Every wait is bounded.
//!
//! Also here, in one process with a manual clock: the three deterministic reproductions of
//! what the paused run found (a token refused for an ended lease that a renewal brought
//! back, so that it settled after all; fixed in `renew_all` and `OWNED_LEASE`).
//!
//! `FENCEQ_PG_PROCS_JOBS` (default 10,000) sizes the paused run; `FENCEQ_PG_RACE_ITERS`
//! (default: one per older schema version) the schema races.

use crate::support::*;
use fenceq::diesel::connection::SimpleConnection;
use fenceq::diesel::sql_types::Text;
use fenceq::diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
use fenceq::{Error, NewJob, Outcome, Queue, RetryPolicy, WorkerPool, SCHEMA_VERSION};
use std::collections::{HashMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const CHILD: &str = concat!(module_path!(), "::pg_child");
const CHILD_ENV: &str = "FENCEQ_PG_CHILD";
/// The bound of a whole run (a child's pool, the parent's wait for the children).
const RUN_BOUND: Duration = Duration::from_secs(150);
/// The bound of one wait for the server to show something another process does.
const WAIT_BOUND: Duration = Duration::from_secs(30);
const NO_BACKOFF: RetryPolicy = RetryPolicy { base: Duration::ZERO, max: Duration::ZERO, jitter: 0.0 };
/// Jobs may be reclaimed many times on a slow machine; none must ever run out of attempts
/// (claims skip an expired last attempt, which only a reaper would exhaust): the limit.
const ATTEMPTS: u32 = 10_000;

// ------------------------------------------------------------------------ the children

/// What a child does, from `FENCEQ_PG_CHILD`: `role|url|schema|index|lease_ms|arg`.
struct Spec {
    role: String,
    url: String,
    schema: String,
    index: i32,
    lease: Duration,
    /// `victim`: completions before its workers hang; `open`: the start instant.
    arg: i64,
}

impl Spec {
    fn encode(&self) -> String {
        format!("{}|{}|{}|{}|{}|{}", self.role, self.url, self.schema, self.index, self.lease.as_millis(), self.arg)
    }

    fn decode(text: &str) -> Spec {
        let p: Vec<&str> = text.split('|').collect();
        Spec {
            role: p[0].into(),
            url: p[1].into(),
            schema: p[2].into(),
            index: p[3].parse().unwrap(),
            lease: Duration::from_millis(p[4].parse().unwrap()),
            arg: p[5].parse().unwrap(),
        }
    }

    fn worker(&self) -> String {
        format!("proc-{}", self.index)
    }

    /// The `application_name` of the child's sessions (unique per test schema).
    fn application(&self) -> String {
        application(&self.schema, self.index)
    }
}

fn application(schema: &str, index: i32) -> String {
    format!("fq{}-proc-{index}", &schema[schema.len() - 12..])
}

/// Child side: one role, chosen by `FENCEQ_PG_CHILD`.
#[test]
#[ignore = "child process of the multi-process tests below; run by them with --ignored --exact"]
fn pg_child() {
    let spec = Spec::decode(&std::env::var(CHILD_ENV).expect("run by the multi-process tests"));
    match spec.role.as_str() {
        "pool" | "victim" => pool_child(&spec),
        "open" => open_child(&spec),
        other => panic!("unknown role {other}"),
    }
}

static DONE: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);
static OTHER_ERRORS: AtomicU64 = AtomicU64::new(0);

/// A worker pool on the queue until it is idle (bounded), then its counters.
fn pool_child(spec: &Spec) {
    let q = Queue::builder()
        .url(with_application_name(&spec.url, &spec.application()))
        .schema(spec.schema.clone())
        // Longer than any pause of another process, so that no row lock a paused process
        // holds can time a statement out here.
        .busy_timeout(Duration::from_secs(30))
        .open_postgres()
        .unwrap_or_else(|e| panic!("child open: {e:?}"));
    let (index, lease) = (spec.index, spec.lease);
    let hang_after = (spec.role == "victim").then_some(spec.arg as u64);
    let pool = WorkerPool::builder(q.clone(), "q")
        .workers(4)
        .lease(lease)
        .renew_every(lease / 4)
        .poll_interval(Duration::from_millis(20))
        .retry_policy(NO_BACKOFF)
        .worker_id(spec.worker())
        .handler(move |a| {
            let token = a.token();
            if hang_after.is_some_and(|n| DONE.load(Ordering::SeqCst) >= n) {
                // The victim's workers hang here until the parent kills the process; the
                // heartbeat keeps their leases alive until then.
                println!("\n{MARK}HOLD {} {}", token.id.0, token.attempt);
                let bound = Instant::now() + RUN_BOUND;
                while Instant::now() < bound {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            if token.id.0 % 250 == 0 {
                // A slow handler, past its nominal lease: the heartbeat keeps it owned.
                std::thread::sleep(lease * 3 / 2);
            }
            match a.complete_with(|tx| log_settle(tx, &token, index)) {
                Ok(()) => {
                    DONE.fetch_add(1, Ordering::SeqCst);
                    Outcome::Complete
                }
                Err(Error::OwnershipLost { .. }) => {
                    REFUSED.fetch_add(1, Ordering::SeqCst);
                    println!("\n{MARK}STALE {} {}", token.id.0, token.attempt);
                    // The pool's settle of this outcome is refused as well (and counted).
                    Outcome::Complete
                }
                Err(e) => {
                    OTHER_ERRORS.fetch_add(1, Ordering::SeqCst);
                    eprintln!("child {index}: complete_with of {token:?}: {e:?}");
                    Outcome::retry_after(Duration::ZERO, e.to_string())
                }
            }
        })
        .start()
        .unwrap();
    println!("\n{MARK}STARTED");
    let bound = Instant::now() + RUN_BOUND;
    let mut wait_errors = 0u64;
    loop {
        match pool.wait_idle(Duration::from_secs(1)) {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                wait_errors += 1;
                eprintln!("child {index}: wait_idle: {e:?}");
            }
        }
        assert!(Instant::now() < bound, "child {index}: the queue did not go idle in {RUN_BOUND:?}");
    }
    let report = pool.shutdown(WAIT_BOUND).unwrap();
    let c = report.counters;
    println!(
        "\n{MARK}SUMMARY claimed={} completed={} stale={} renewals_failed={} errors={} refused={} other={} \
         wait_errors={wait_errors} still_running={} dropped={} handed_back={}",
        c.claimed,
        c.completed,
        c.stale_settles_rejected,
        c.renewals_failed,
        c.errors,
        REFUSED.load(Ordering::SeqCst),
        OTHER_ERRORS.load(Ordering::SeqCst),
        report.still_running.len(),
        c.dropped_lost,
        c.handed_back,
    );
    std::process::exit(0);
}

/// Spins until the start instant, opens (upgrading), exits 0 when the schema is current, 3
/// on `Busy`, 4 otherwise (the reason on stderr).
fn open_child(spec: &Spec) {
    spin_until(spec.arg);
    let code = match Queue::builder().url(spec.url.clone()).schema(spec.schema.clone()).open_postgres() {
        Ok(q) => match q.schema_version() {
            Ok(v) if v == SCHEMA_VERSION => 0,
            other => {
                eprintln!("open child: version {other:?}");
                4
            }
        },
        Err(e @ Error::Busy { .. }) => {
            eprintln!("open child: {e:?}");
            3
        }
        Err(e) => {
            eprintln!("open child: {e:?}");
            4
        }
    };
    std::process::exit(code);
}

// ------------------------------------------------------------------------ the parent

fn spawn_pool(s: &Scratch, index: i32, role: &str, lease: Duration, arg: i64) -> ChildProc {
    let spec = Spec { role: role.into(), url: s.url.clone(), schema: s.schema.clone(), index, lease, arg };
    ChildProc::spawn(&spec.worker(), CHILD, &[(CHILD_ENV, spec.encode())])
}

fn enqueue_jobs(q: &Queue<fenceq::PostgresStore>, jobs: usize) {
    for start in (0..jobs).step_by(1_000) {
        let batch = (start..jobs.min(start + 1_000))
            .map(|i| NewJob::new("q", format!("job {i}").into_bytes()).key(format!("job-{i}")).max_attempts(ATTEMPTS));
        q.enqueue_batch(batch).unwrap();
    }
}

fn settled(raw: &mut PgConnection) -> i64 {
    scalar(raw, "SELECT count(*) AS n FROM settle_log")
}

/// The jobs' attempts now, by id.
fn current_attempts(raw: &mut PgConnection) -> HashMap<i64, i32> {
    attempts(raw, "SELECT id, attempt FROM fenceq_jobs").into_iter().map(|a| (a.id, a.attempt)).collect()
}

/// Of `held`, the attempts that no longer own their jobs: the job was claimed again since.
fn superseded(raw: &mut PgConnection, held: &[Attempted]) -> Vec<Attempted> {
    let ids: Vec<String> = held.iter().map(|a| a.id.to_string()).collect();
    let now: HashMap<i64, i32> =
        attempts(raw, &format!("SELECT id, attempt FROM fenceq_jobs WHERE id IN ({})", ids.join(",")))
            .into_iter()
            .map(|a| (a.id, a.attempt))
            .collect();
    held.iter().filter(|a| now[&a.id] > a.attempt).cloned().collect()
}

/// Stops a process (SIGSTOP: the whole process, its heartbeat too), waits until the server
/// shows that another process reclaimed at least one of the jobs it held, and continues it
/// (SIGCONT). Returns which process it was and the reclaimed attempts: the paused process
/// still runs them, and their completions must be refused. The victim is `first`, or, when a
/// try finds it holding no job, or holding only jobs no other process can take (the stop
/// came inside one of its transactions, whose row locks keep them from every claimer until
/// it goes on; given up after 10 leases), the next of processes 1..=3 (process 0 is never
/// paused), for up to `WAIT_BOUND`; `None` when no try succeeded (the run ended).
fn pause_until_reclaimed(
    children: &[ChildProc],
    first: usize,
    schema: &str,
    raw: &mut PgConnection,
    lease: Duration,
) -> Option<(usize, Vec<Attempted>)> {
    let give_up = lease * 10;
    let bound = Instant::now() + WAIT_BOUND;
    let mut tries = 0;
    while Instant::now() < bound {
        let k = 1 + (first - 1 + tries) % 3;
        let child = &children[k];
        tries += 1;
        signal(child.pid(), "STOP");
        let stopped = Instant::now();
        let held = held_by(raw, &child.name);
        let mut reclaimed = Vec::new();
        while !held.is_empty() && reclaimed.is_empty() && stopped.elapsed() < give_up {
            std::thread::sleep(Duration::from_millis(10));
            reclaimed = superseded(raw, &held);
        }
        signal(child.pid(), "CONT");
        if !reclaimed.is_empty() {
            eprintln!(
                "pause of {} (try {tries}): held {}, {} reclaimed after {:.1?}",
                child.name,
                held.len(),
                reclaimed.len(),
                stopped.elapsed()
            );
            return Some((k, reclaimed));
        }
        if held.is_empty() && tries % 30 == 1 {
            let by = lines(
                raw,
                "SELECT concat_ws(' ', coalesce(worker, '-'), state, count(*)) AS line FROM fenceq_jobs
                 WHERE $1 <> '' GROUP BY worker, state ORDER BY 1",
                "x",
            );
            eprintln!(
                "pause of {} (try {tries}): holds nothing; its sessions {:?}; jobs by worker and state: {by:?}",
                child.name,
                sessions_doing(raw, &application(schema, k as i32))
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("no pause of {tries} tries caught a process holding a job another process could take");
    None
}

/// A child's `SUMMARY` line and its `STALE` attempts.
struct Report {
    summary: String,
    stale: HashSet<(i64, i32)>,
    holds: Vec<(i64, i32)>,
}

fn report_of(ended: &Ended) -> Report {
    let pair = |line: &str| {
        let mut it = line.split_whitespace().skip(1).map(|v| v.parse::<i64>().unwrap());
        (it.next().unwrap(), it.next().unwrap() as i32)
    };
    let summary = ended.lines.iter().find(|l| l.starts_with("SUMMARY")).cloned().unwrap_or_default();
    let stale = ended.lines.iter().filter(|l| l.starts_with("STALE")).map(|l| pair(l)).collect();
    let holds = ended.lines.iter().filter(|l| l.starts_with("HOLD")).map(|l| pair(l)).collect();
    Report { summary, stale, holds }
}

/// The counters of the surviving children, summed, after checking each child's own.
#[derive(Debug, Default)]
struct Sums {
    claimed: u64,
    completed: u64,
    refused: u64,
    pool_stale: u64,
    renewals_failed: u64,
    /// Prefetched attempts a pool dropped unstarted, their leases lost (or handed back).
    dropped: u64,
}

fn check_child(ended: &Ended, report: &Report, raw: &mut PgConnection, index: i32, sums: &mut Sums) {
    assert!(ended.status.success(), "{}: {:?}, lines {:?}", ended.name, ended.status, ended.lines);
    let s = &report.summary;
    assert!(s.starts_with("SUMMARY"), "{}: no summary in {:?}", ended.name, ended.lines);
    for zero in ["errors", "other", "wait_errors", "still_running"] {
        assert_eq!(field(s, zero), 0, "{}: {zero} in {s}", ended.name);
    }
    let (claimed, completed, refused, pool_stale) =
        (field(s, "claimed"), field(s, "completed"), field(s, "refused"), field(s, "stale"));
    // A prefetched attempt whose lease was lost while it waited (its process paused) is
    // dropped unstarted: it neither wins nor is refused.
    let dropped = field(s, "dropped") + field(s, "handed_back");
    assert_eq!(
        claimed,
        completed + refused + dropped,
        "{}: every attempt won, was refused, or was dropped unstarted: {s}",
        ended.name
    );
    assert_eq!(
        pool_stale, refused,
        "{}: each refused completion's outcome was refused by the pool too: {s}",
        ended.name
    );
    assert_eq!(refused as usize, report.stale.len(), "{}: one STALE line per refusal", ended.name);
    let logged = scalar(raw, &format!("SELECT count(*) AS n FROM settle_log WHERE process = {index}"));
    assert_eq!(logged, completed as i64, "{}: its settle_log rows are its completions", ended.name);
    sums.claimed += claimed;
    sums.completed += completed;
    sums.refused += refused;
    sums.pool_stale += pool_stale;
    sums.renewals_failed += field(s, "renewals_failed");
    sums.dropped += dropped;
}

/// Four processes, each a pool of 4 workers (500 ms leases), work through 10,000 jobs while
/// three of them are paused in turn past their leases: no job lost, none settled twice,
/// every attempt that lost its job refused.
#[test]
fn four_processes_work_ten_thousand_jobs_through_pauses_past_the_lease_and_settle_each_once() {
    let Some(s) = Scratch::new() else { return };
    let jobs = env_or("FENCEQ_PG_PROCS_JOBS", 10_000);
    let started = Instant::now();
    let q = s.open();
    let mut raw = s.raw();
    create_domain_tables(&mut raw, &s.schema);
    enqueue_jobs(&q, jobs);
    let lease = Duration::from_millis(500);
    let children: Vec<ChildProc> = (0..4).map(|k| spawn_pool(&s, k, "pool", lease, 0)).collect();
    // Pause processes 1, 2 and 3 in turn, at a fifth, two fifths and three fifths of the run.
    let mut pauses: Vec<(usize, Vec<Attempted>)> = Vec::new();
    for (k, fifths) in [(1, 1), (2, 2), (3, 3)] {
        let target = (jobs * fifths / 5) as i64;
        wait_for(&format!("{target} completions"), RUN_BOUND, || settled(&mut raw) >= target);
        pauses.extend(pause_until_reclaimed(&children, k, &s.schema, &mut raw, lease));
    }
    let deadline = Instant::now() + RUN_BOUND;
    let ended: Vec<Ended> = children.into_iter().map(|c| c.wait(deadline)).collect();
    let reports: Vec<Report> = ended.iter().map(report_of).collect();

    let ledger = ledger(&mut raw);
    let jobs = jobs as i64;
    assert_eq!(ledger, Ledger { jobs, completed: jobs, ..Ledger::default() }, "lost or settled twice");
    let mut sums = Sums::default();
    for (k, (ended, report)) in ended.iter().zip(&reports).enumerate() {
        check_child(ended, report, &mut raw, k as i32, &mut sums);
        assert!(field(&report.summary, "claimed") > 0, "{}: claimed nothing", ended.name);
    }
    assert_eq!(sums.completed, jobs as u64, "{sums:?}");
    assert_eq!(sums.claimed, jobs as u64 + sums.refused + sums.dropped, "{sums:?}");
    // Every refused attempt lost its job to a later one, which won.
    let finals = current_attempts(&mut raw);
    for report in &reports {
        for (id, attempt) in &report.stale {
            assert!(finals[id] > *attempt, "job {id}: the refused attempt {attempt} is its final one");
        }
    }
    // Each pause produced stale attempts: the paused process's completions of those it had
    // started were refused when it continued, and those it held unstarted it never started.
    let reclaimed: usize = pauses.iter().map(|(_, r)| r.len()).sum();
    assert!(!pauses.is_empty() && reclaimed > 0, "no pause caught a process holding jobs");
    for (k, pairs) in &pauses {
        let unstarted = pairs.iter().filter(|a| !reports[*k].stale.contains(&(a.id, a.attempt))).count() as u64;
        let dropped = field(&reports[*k].summary, "dropped");
        assert!(
            unstarted <= dropped,
            "proc-{k}: {unstarted} of its attempts reclaimed while it was paused were neither refused nor \
             dropped unstarted (it dropped {dropped}): {pairs:?}"
        );
    }
    assert!(sums.refused > 0);
    println!(
        "4 processes, {jobs} jobs: {} pauses reclaimed {reclaimed} attempts; claims {}, refused {} \
         (pool settles refused {}), renewals failed {}; 0 lost, 0 settled twice; {:.1?}",
        pauses.len(),
        sums.claimed,
        sums.refused,
        sums.pool_stale,
        sums.renewals_failed,
        started.elapsed()
    );
}

/// Four processes work 3,000 jobs; one is killed with SIGKILL while its workers are stuck
/// in handlers (its leases kept alive by its heartbeat until the kill): the jobs it held are
/// reclaimed after their leases by the survivors, and everything completes exactly once.
#[test]
fn a_worker_process_killed_with_sigkill_mid_run_loses_nothing_and_its_jobs_are_reclaimed() {
    let Some(s) = Scratch::new() else { return };
    const JOBS: usize = 3_000;
    const HANG_AFTER: u64 = 200;
    let started = Instant::now();
    let q = s.open();
    let mut raw = s.raw();
    create_domain_tables(&mut raw, &s.schema);
    enqueue_jobs(&q, JOBS);
    let lease = Duration::from_secs(2);
    // The victim starts alone, so that it surely completes its HANG_AFTER jobs and has four
    // more to hang on: started together, the survivors (whose prefetch grows while their
    // handlers outrun the claim rounds) could take every job first. The survivors start
    // while its hung workers still hold their leases, renewed, and work beside it until the
    // kill.
    let victim = spawn_pool(&s, 0, "victim", lease, HANG_AFTER as i64);
    wait_for("the victim's four workers to hang", RUN_BOUND, || {
        victim.lines().iter().filter(|l| l.starts_with("HOLD")).count() >= 4
    });
    let survivors: Vec<ChildProc> = (1..4).map(|k| spawn_pool(&s, k, "pool", lease, 0)).collect();
    wait_for("the survivors to start", WAIT_BOUND, || {
        survivors.iter().all(|c| c.lines().iter().any(|l| l.starts_with("STARTED")))
    });
    let mut victim = victim;
    victim.child.kill().unwrap();
    let ended = victim.wait(Instant::now() + WAIT_BOUND);
    assert_eq!(ended.status.signal(), Some(9), "killed by SIGKILL: {:?}", ended.status);
    let holds = report_of(&ended).holds;
    // Once the server has ended the dead process's sessions nothing of it can still commit:
    // what it holds now, it held when it died.
    let app = application(&s.schema, 0);
    wait_for("the server to end the killed process's sessions", WAIT_BOUND, || sessions_of(&mut raw, &app) == 0);
    let held = held_by(&mut raw, "proc-0");
    assert!(!held.is_empty(), "the killed process held no job (HOLD lines {holds:?})");

    let deadline = Instant::now() + RUN_BOUND;
    let ended: Vec<Ended> = survivors.into_iter().map(|c| c.wait(deadline)).collect();
    let ledger = ledger(&mut raw);
    assert_eq!(ledger, Ledger { jobs: JOBS as i64, completed: JOBS as i64, ..Ledger::default() });
    let mut sums = Sums::default();
    for (ended, k) in ended.iter().zip(1..) {
        check_child(ended, &report_of(ended), &mut raw, k, &mut sums);
    }
    let by_victim = scalar(&mut raw, "SELECT count(*) AS n FROM settle_log WHERE process = 0");
    assert!(
        by_victim >= HANG_AFTER as i64,
        "the victim's {HANG_AFTER} acknowledged completions survive it: {by_victim}"
    );
    assert_eq!(by_victim + sums.completed as i64, JOBS as i64);
    // Every job the dead process held was completed by a survivor, at a later attempt.
    #[derive(QueryableByName)]
    struct Winner {
        #[diesel(sql_type = fenceq::diesel::sql_types::BigInt)]
        job_id: i64,
        #[diesel(sql_type = fenceq::diesel::sql_types::Integer)]
        attempt: i32,
        #[diesel(sql_type = fenceq::diesel::sql_types::Integer)]
        process: i32,
    }
    let winners: HashMap<i64, (i32, i32)> = sql_query("SELECT job_id, attempt, process FROM settle_log")
        .load::<Winner>(&mut raw)
        .unwrap()
        .into_iter()
        .map(|w| (w.job_id, (w.attempt, w.process)))
        .collect();
    for a in &held {
        let (attempt, process) = winners[&a.id];
        assert!(process != 0 && attempt > a.attempt, "job {} held by the dead process at attempt {}", a.id, a.attempt);
    }
    println!(
        "SIGKILL of 1 of 4 processes: it held {} jobs ({} in hung handlers), all reclaimed; {by_victim} completions \
         by it survive; survivors claimed {}, refused {}; 0 lost, 0 settled twice; {:.1?}",
        held.len(),
        holds.len(),
        sums.claimed,
        sums.refused,
        started.elapsed()
    );
}

// ------------------------------------------------------------------------ schema race

/// Schema 10 on PostgreSQL: a schedule row an older build wrote keeps its tick, gets the
/// definition columns empty and lists through the library; a registration afterwards fills
/// them in and keeps the tick.
#[cfg(feature = "schedule")]
#[test]
fn schema_10_gives_old_schedule_rows_the_definition_columns_empty() {
    let Some(url) = server() else { return };
    let scratch = Scratch::on(url.clone());
    old_schema(&url, &scratch.schema, 9);
    raw_in(&url, &scratch.schema)
        .batch_execute(
            "INSERT INTO fenceq_schedules (name, last_tick, enqueued_at) VALUES ('hourly', 3600000, 3600005)",
        )
        .unwrap();
    let queue = scratch.open();
    assert_eq!(queue.schema_version().unwrap(), SCHEMA_VERSION);
    let old_row = fenceq::ScheduleRecord {
        name: "hourly".into(),
        definition: None,
        queue: None,
        last_tick: Some(3_600_000),
        next_tick: None,
        recorded_at: None,
    };
    assert_eq!(queue.schedule_records().unwrap(), vec![old_row]);
    let every_hour = fenceq::Schedule::every(Duration::from_secs(3600)).unwrap();
    queue.schedule("hourly", every_hour, NewJob::new("q", b"x".to_vec())).unwrap();
    let [record] = &queue.schedule_records().unwrap()[..] else { panic!("one schedule") };
    assert_eq!(record.definition.as_deref(), Some("every 3600000 ms from 0"));
    assert_eq!((record.queue.as_deref(), record.last_tick), (Some("q"), Some(3_600_000)));
    assert!(record.next_tick.is_some() && record.recorded_at.is_some(), "{record:?}");
    assert_eq!(queue.last_tick("hourly").unwrap(), Some(3_600_000), "the registration kept the tick");
}

/// The migrations, by version, for building an old schema by hand (the store's own list is
/// private); a new migration must be added here as well for its level to be raced.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "create_jobs", include_str!("../../schema/postgres/0001_create_jobs.sql")),
    (2, "add_claim_id", include_str!("../../schema/postgres/0002_add_claim_id.sql")),
    (3, "durable_exhaustion", include_str!("../../schema/postgres/0003_durable_exhaustion.sql")),
    (4, "decisions", include_str!("../../schema/postgres/0004_decisions.sql")),
    (5, "schedules", include_str!("../../schema/postgres/0005_schedules.sql")),
    (6, "paused_queues", include_str!("../../schema/postgres/0006_paused_queues.sql")),
    (7, "checks_in_table", include_str!("../../schema/postgres/0007_checks_in_table.sql")),
    (8, "flow_control", include_str!("../../schema/postgres/0008_flow_control.sql")),
    (9, "limited_claim", include_str!("../../schema/postgres/0009_limited_claim.sql")),
    (10, "schedule_specs", include_str!("../../schema/postgres/0010_schedule_specs.sql")),
    (11, "counted_starts", include_str!("../../schema/postgres/0011_counted_starts.sql")),
    (12, "backoff_lifts", include_str!("../../schema/postgres/0012_backoff_lifts.sql")),
    (13, "settled_counts", include_str!("../../schema/postgres/0013_settled_counts.sql")),
    (14, "grouped_claim", include_str!("../../schema/postgres/0014_grouped_claim.sql")),
    (15, "fair_group_claims", include_str!("../../schema/postgres/0015_fair_group_claims.sql")),
    (16, "claim_function", include_str!("../../schema/postgres/0016_claim_function.sql")),
    (17, "stats_function", include_str!("../../schema/postgres/0017_stats_function.sql")),
    (18, "ids_without_autoincrement", include_str!("../../schema/postgres/0018_ids_without_autoincrement.sql")),
];

/// Creates `schema` at version `level`, as an older build left it, with rows in every
/// interesting state (a running one claimed by an old build, a completed and an exhausted
/// one, 40 pending), written at level 1 so that later migrations' updates meet them.
fn old_schema(url: &str, schema: &str, level: i64) {
    let mut raw = PgConnection::establish(url).unwrap();
    raw.batch_execute(&format!("CREATE SCHEMA \"{schema}\"; SET search_path TO \"{schema}\"")).unwrap();
    raw.batch_execute(MIGRATIONS[0].2).unwrap();
    raw.batch_execute(
        "CREATE TABLE fenceq_schema_version (version BIGINT PRIMARY KEY, name TEXT NOT NULL,
                                             applied_at TIMESTAMPTZ NOT NULL DEFAULT now());
         INSERT INTO fenceq_schema_version (version, name) VALUES (1, 'create_jobs');
         INSERT INTO fenceq_jobs (queue, key, payload, run_at, max_attempts, created_at)
         SELECT 'q', 'k' || n, convert_to('old ' || n, 'UTF8'), n, 3, n FROM generate_series(1, 40) AS n;
         INSERT INTO fenceq_jobs (queue, payload, state, worker, lease_until, attempt, run_at, max_attempts, created_at)
         VALUES ('q', 'claimed by an old build', 'running', 'w', 1, 1, 0, 3, 0);
         INSERT INTO fenceq_jobs (queue, payload, state, attempt, run_at, max_attempts, created_at, settled_at)
         VALUES ('q', 'done', 'completed', 1, 0, 3, 0, 5), ('q', 'gave up', 'exhausted', 3, 0, 3, 0, 7);",
    )
    .unwrap();
    for (version, name, sql) in &MIGRATIONS[1..] {
        if *version > level {
            break;
        }
        raw.batch_execute(sql).unwrap();
        raw.batch_execute(&format!("INSERT INTO fenceq_schema_version (version, name) VALUES ({version}, '{name}')"))
            .unwrap();
    }
}

#[derive(QueryableByName)]
struct Line {
    #[diesel(sql_type = Text)]
    line: String,
}

fn lines(raw: &mut PgConnection, sql: &str, schema: &str) -> Vec<String> {
    sql_query(sql).bind::<Text, _>(schema).load::<Line>(raw).unwrap().into_iter().map(|l| l.line).collect()
}

/// The schema as a whole, without its name: versions, columns, constraints, indexes, functions.
fn schema_of(url: &str, schema: &str) -> Vec<String> {
    let mut raw = raw_in(url, schema);
    let mut all = lines(
        &mut raw,
        "SELECT 'version ' || version || ' ' || name AS line FROM fenceq_schema_version WHERE $1 <> '' ORDER BY version",
        schema,
    );
    all.extend(lines(
        &mut raw,
        "SELECT 'column ' || table_name || '.' || column_name || ' #' || ordinal_position || ' ' || data_type
                || ' ' || is_nullable || ' ' || coalesce(column_default, '') AS line
         FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, ordinal_position",
        schema,
    ));
    all.extend(lines(
        &mut raw,
        "SELECT 'constraint ' || c.relname || ' ' || k.conname || ' ' || pg_get_constraintdef(k.oid) AS line
         FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 ORDER BY 1",
        schema,
    ));
    all.extend(lines(
        &mut raw,
        "SELECT 'index ' || replace(indexdef, schemaname || '.', '') AS line FROM pg_indexes
         WHERE schemaname = $1 ORDER BY indexname",
        schema,
    ));
    all.extend(lines(
        &mut raw,
        "SELECT 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') '
                || md5(p.prosrc) || ' ' || coalesce(array_to_string(p.proconfig, ','), '') AS line
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY 1",
        schema,
    ));
    all
}

/// Every job row, without the random claim ids (only whether there is one).
fn rows_of(url: &str, schema: &str) -> Vec<String> {
    let mut raw = raw_in(url, schema);
    lines(
        &mut raw,
        "SELECT concat_ws('|', id, queue, key, encode(payload, 'hex'), state, attempt, max_attempts, worker,
                          lease_until, run_at, created_at, settled_at, exhausted_at, acknowledged_at,
                          claim_id IS NOT NULL) AS line
         FROM fenceq_jobs WHERE $1 <> '' ORDER BY id",
        schema,
    )
}

/// Eight processes, released at one instant, open a schema an older build left (each older
/// level in turn): every open succeeds, each version is recorded once, the schema equals an
/// uncontended upgrade's from the same start, every row is intact, and a second open changes
/// nothing.
#[test]
fn eight_processes_opening_an_old_schema_at_once_all_succeed_with_one_schema_and_every_row() {
    let Some(url) = server() else { return };
    let processes = 8;
    let started = Instant::now();
    let levels: Vec<i64> = MIGRATIONS.iter().map(|m| m.0).filter(|v| *v < SCHEMA_VERSION).collect();
    assert!(!levels.is_empty());
    // Every older level at least once by default.
    let iterations = env_or("FENCEQ_PG_RACE_ITERS", levels.len());
    for iteration in 0..iterations {
        let level = levels[iteration % levels.len()];
        let (raced, reference) = (Scratch::on(url.clone()), Scratch::on(url.clone()));
        old_schema(&url, &raced.schema, level);
        old_schema(&url, &reference.schema, level);
        drop(reference.open());
        let expected = (schema_of(&url, &reference.schema), rows_of(&url, &reference.schema));

        let start = wall_ms() + 300;
        let children: Vec<_> = (0..processes)
            .map(|index| {
                let spec = Spec {
                    role: "open".into(),
                    url: url.clone(),
                    schema: raced.schema.clone(),
                    index,
                    lease: Duration::from_secs(1),
                    arg: start,
                };
                child_process(CHILD)
                    .env(CHILD_ENV, spec.encode())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut codes = Vec::new();
        let mut stderr = String::new();
        for child in children {
            // Each child ends on its own: its spin is bounded by 10 s, its open by the
            // server's timeouts.
            let out = child.wait_with_output().unwrap();
            codes.push(out.status.code().unwrap_or(-1));
            stderr.push_str(&String::from_utf8_lossy(&out.stderr));
        }
        let label = format!("iteration {iteration} (from level {level})");
        assert!(codes.iter().all(|c| *c == 0), "{label}: exit codes {codes:?} (3 busy, 4 other)\n{stderr}");
        let got = (schema_of(&url, &raced.schema), rows_of(&url, &raced.schema));
        assert_eq!(got.0, expected.0, "{label}: the schema equals an uncontended upgrade's");
        assert_eq!(got.1, expected.1, "{label}: every row intact");
        assert_eq!(got.1.len(), 43, "{label}");
        let versions: Vec<&String> = got.0.iter().filter(|l| l.starts_with("version ")).collect();
        assert_eq!(versions.len() as i64, SCHEMA_VERSION, "{label}: each version once: {versions:?}");
        for column in [
            "fenceq_jobs.claim_id",
            "fenceq_jobs.exhausted_at",
            "fenceq_jobs.decision",
            "fenceq_queues.queue",
            "fenceq_schedules.next_tick",
            "fenceq_attempts.outcome",
        ] {
            let found = got.0.iter().filter(|l| l.starts_with(&format!("column {column} "))).count();
            assert_eq!(found, 1, "{label}: column {column}");
        }
        drop(raced.open());
        assert_eq!((schema_of(&url, &raced.schema), rows_of(&url, &raced.schema)), got, "{label}: second open");
    }
    println!(
        "schema race: {iterations} iterations x {processes} processes, levels {levels:?}, 0 failures, {:.1?}",
        started.elapsed()
    );
}

// ------------------------------------------------------------------------ found by the paused run

/// Found by the paused run above (2 of 10 loops ended with a job completed by the pool's
/// own settle, without the `settle_log` row of its handler, whose `complete_with` had been
/// refused as `OwnershipLost`): a heartbeat round renews its tokens one after another in one
/// transaction, and on PostgreSQL one row's lock can make it wait (a completion of another
/// in-flight job holds it). A round that took its `now` once, before the wait, then renews
/// the next token with that old instant: a lease that expired meanwhile, and that another
/// call of the same token was refused for (`LeaseExpired`), comes back to life, and the
/// refused token settles after all. A token refused for an expired lease must stay dead.
#[test]
fn a_heartbeat_round_that_waited_for_a_row_lock_does_not_revive_a_lease_seen_expired() {
    let Some(s) = Scratch::new() else { return };
    let clock = fenceq::ManualClock::new(1_700_000_000_000);
    let q = Queue::builder().url(s.url.clone()).schema(s.schema.clone()).clock(clock.clone()).open_postgres().unwrap();
    q.enqueue_batch([NewJob::new("q", b"y".to_vec()), NewJob::new("q", b"x".to_vec())]).unwrap();
    let lease = Duration::from_secs(30);
    let mut claimed = q.claim_batch("q", "w", lease, 2).unwrap();
    claimed.sort_by_key(|c| c.id());
    let (y, x) = (claimed[0].token(), claimed[1].token());
    // Another transaction holds y's row (as a completion of y in progress would).
    let mut holder = s.raw();
    let holder_pid = scalar(&mut holder, "SELECT pg_backend_pid()::bigint AS n");
    holder.batch_execute(&format!("BEGIN; SELECT 1 FROM fenceq_jobs WHERE id = {} FOR UPDATE", y.id.0)).unwrap();
    clock.advance(Duration::from_secs(29));
    let round = {
        let q = q.clone();
        std::thread::spawn(move || q.renew_all(&[y, x], lease).unwrap())
    };
    let mut watcher = s.raw();
    wait_for("the heartbeat round to wait for y's row lock", WAIT_BOUND, || {
        let blocked =
            format!("SELECT count(*) AS n FROM pg_stat_activity WHERE {holder_pid} = ANY(pg_blocking_pids(pid))");
        scalar(&mut watcher, &blocked) > 0
    });
    // x's lease ends at +30 s; at +31 s its owner's completion is refused as expired.
    clock.advance(Duration::from_secs(2));
    let refused = q.complete_with(&x, |_| Ok(())).unwrap_err();
    assert!(matches!(refused, Error::OwnershipLost { reason: fenceq::LostReason::LeaseExpired, .. }), "{refused:?}");
    holder.batch_execute("ROLLBACK").unwrap();
    let renewed = round.join().unwrap();
    // y is judged once the round holds its row, at +31 s too: past its end as well.
    assert!(matches!(renewed[0], Err(Error::OwnershipLost { .. })), "y: {:?}", renewed[0]);
    assert!(
        matches!(renewed[1], Err(Error::OwnershipLost { .. })),
        "x's lease, refused as expired, was renewed: {:?}",
        renewed[1]
    );
    let late = q.complete(&x);
    assert!(matches!(late, Err(Error::OwnershipLost { .. })), "the refused token settled after all: {late:?}");
}

/// Found by the long-horizon bench (`fenceq-bench --only long_horizon`): a pool's heartbeat
/// renewed every lease in one transaction, so while one renewal waited for a job's row (a
/// settle in progress, a busy server) the round held every row it had renewed until then, and
/// settles of those jobs stalled for seconds behind the whole round. The heartbeat now renews
/// each lease in a transaction of its own: while it waits for one row, it holds no other.
#[test]
fn a_heartbeat_waiting_for_one_jobs_row_holds_no_other() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    let ids: Vec<i64> =
        q.enqueue_batch((0..8u8).map(|n| NewJob::new("q", vec![n]))).unwrap().iter().map(|e| e.id().0).collect();
    let (started_tx, started) = std::sync::mpsc::channel::<()>();
    let (release_tx, release) = std::sync::mpsc::channel::<()>();
    let release = std::sync::Mutex::new(release);
    let pool = WorkerPool::builder(q.clone(), "q")
        .workers(8)
        .lease(Duration::from_secs(30))
        .renew_every(Duration::from_millis(50))
        .handler(move |_| {
            started_tx.send(()).unwrap();
            release.lock().unwrap().recv_timeout(Duration::from_secs(120)).expect("released");
            Outcome::Complete
        })
        .start()
        .unwrap();
    for _ in 0..ids.len() {
        started.recv_timeout(Duration::from_secs(60)).expect("every job's handler started");
    }
    // Another transaction holds one job's row, as a settle in progress would.
    let held = ids[3];
    let mut holder = s.raw();
    let holder_pid = scalar(&mut holder, "SELECT pg_backend_pid()::bigint AS n");
    holder.batch_execute(&format!("BEGIN; SELECT 1 FROM fenceq_jobs WHERE id = {held} FOR UPDATE")).unwrap();
    let mut watcher = s.raw();
    wait_for("a heartbeat renewal to wait for the held row", WAIT_BOUND, || {
        let blocked =
            format!("SELECT count(*) AS n FROM pg_stat_activity WHERE {holder_pid} = ANY(pg_blocking_pids(pid))");
        scalar(&mut watcher, &blocked) > 0
    });
    // Nothing else runs (every handler waits, nothing is pending): a row lock on any other
    // job would be the waiting heartbeat's.
    let others: Vec<String> = ids.iter().filter(|&&id| id != held).map(i64::to_string).collect();
    let mut prober = s.raw();
    let probe = prober.batch_execute(&format!(
        "BEGIN; SELECT 1 FROM fenceq_jobs WHERE id IN ({}) FOR UPDATE NOWAIT; ROLLBACK",
        others.join(", ")
    ));
    if probe.is_err() {
        let _ = prober.batch_execute("ROLLBACK");
    }
    holder.batch_execute("ROLLBACK").unwrap();
    for _ in 0..ids.len() {
        release_tx.send(()).unwrap();
    }
    assert!(probe.is_ok(), "the waiting heartbeat held another job's row: {probe:?}");
    assert!(pool.wait_drained(Duration::from_secs(60)).unwrap(), "every job settled");
    let report = pool.shutdown(Duration::from_secs(30)).unwrap();
    assert!(report.still_running.is_empty());
    for id in ids {
        assert_eq!(q.job(fenceq::JobId(id)).unwrap().unwrap().state, fenceq::JobState::Completed, "job {id}");
    }
}

/// Found by the PostgreSQL demo (one run in 20 to 45): a job whose handler asked for a retry
/// on its first attempt of three ended exhausted. A settle's retry skips a row another
/// transaction holds (a heartbeat renewing the lease), and the exhaustion that follows a
/// missed retry (meant for a job out of attempts) ran next; with the row let go in between,
/// it exhausted a job that had attempts left. Here a statement-level trigger (it fires even
/// for an `UPDATE` that changed no row) stops the settle's session after its first statement
/// until the test has let the row go: the next statement then finds the row free. The retry
/// must still be scheduled.
#[test]
fn a_retry_that_skipped_a_held_row_never_exhausts_a_job_with_attempts_left() {
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    q.enqueue(NewJob::new("q", b"x".to_vec()).max_attempts(3)).unwrap();
    let token = q.claim("q", "w", Duration::from_secs(30)).unwrap().expect("the job").token();
    let mut setup = s.raw();
    setup
        .batch_execute(
            "CREATE TABLE settle_gate (armed boolean NOT NULL);
             INSERT INTO settle_gate VALUES (true);
             CREATE FUNCTION stop_once_after_an_update() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 DELETE FROM settle_gate WHERE armed;
                 IF FOUND THEN
                     PERFORM pg_advisory_xact_lock(4242);
                 END IF;
                 RETURN NULL;
             END $$;
             CREATE TRIGGER stop_once AFTER UPDATE ON fenceq_jobs
                 FOR EACH STATEMENT EXECUTE FUNCTION stop_once_after_an_update();",
        )
        .unwrap();
    let mut gate = s.raw();
    let gate_pid = scalar(&mut gate, "SELECT pg_backend_pid()::bigint AS n");
    gate.batch_execute("SELECT pg_advisory_lock(4242)").unwrap();
    // Another transaction holds the row, as a heartbeat's renewal in progress would.
    let mut holder = s.raw();
    holder.batch_execute(&format!("BEGIN; SELECT 1 FROM fenceq_jobs WHERE id = {} FOR UPDATE", token.id.0)).unwrap();
    let retrying = {
        let q = q.clone();
        std::thread::spawn(move || q.retry(&token, Duration::from_millis(5), "telegram 502 bad gateway"))
    };
    let mut watcher = s.raw();
    wait_for("the settle's first statement to stop at the gate", WAIT_BOUND, || {
        let stopped =
            format!("SELECT count(*) AS n FROM pg_stat_activity WHERE {gate_pid} = ANY(pg_blocking_pids(pid))");
        scalar(&mut watcher, &stopped) > 0
    });
    holder.batch_execute("ROLLBACK").unwrap();
    gate.batch_execute("SELECT pg_advisory_unlock(4242)").unwrap();
    let retried = retrying.join().unwrap();
    let job = q.job(token.id).unwrap().unwrap();
    assert!(
        matches!(retried, Ok(fenceq::Retried::Scheduled(_))),
        "a retry on attempt 1 of 3 ended {retried:?}: the job is {:?} ({:?})",
        job.state,
        job.last_error
    );
    assert_eq!((job.state, job.attempt), (fenceq::JobState::Pending, 1));
    assert_eq!(scalar(&mut watcher, "SELECT count(*) AS n FROM settle_gate"), 0, "the gate stopped the settle");
}

/// Sessions that keep locking running jobs' rows and letting them go (as heartbeats,
/// operators' reads `FOR UPDATE` and other processes' settles do), so that a pool's settles
/// skip held rows in every interleaving the server gives.
struct Lockers {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

impl Lockers {
    fn start(s: &Scratch, sessions: usize) -> Lockers {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..sessions)
            .map(|_| {
                let (mut conn, stop) = (s.raw(), stop.clone());
                std::thread::spawn(move || {
                    let mut locked = 0u64;
                    // Bounded: the pool drains long before; `stop` ends it sooner.
                    for _ in 0..2_000_000 {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let running = attempts(
                            &mut conn,
                            "SELECT id, attempt FROM fenceq_jobs WHERE state = 'running' ORDER BY random() LIMIT 4",
                        );
                        // One row per transaction: a locker that waits holds nothing, so it
                        // is never part of a deadlock with the pool.
                        for row in running {
                            conn.batch_execute(&format!(
                                "BEGIN; SELECT 1 FROM fenceq_jobs WHERE id = {} FOR UPDATE; COMMIT",
                                row.id
                            ))
                            .unwrap();
                            locked += 1;
                        }
                    }
                    locked
                })
            })
            .collect();
        Lockers { stop, threads }
    }

    /// Stops every session; how many times they locked a running job's row.
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        self.threads.into_iter().map(|t| t.join().unwrap()).sum()
    }
}

/// What the stress tests' handler answers for job `n` at `attempt`: retries with attempts
/// left (on the first, and on the first two of three), a snooze, an unknown, completions.
fn outcome_of(n: usize, attempt: u32, unknowns: bool) -> Outcome {
    match (n % 5, attempt) {
        (1, 1) | (3, 1 | 2) => Outcome::retry_after(Duration::ZERO, "transient"),
        (2, 1) => Outcome::snooze(Duration::ZERO),
        (4, _) if unknowns => Outcome::Unknown("the reply may have gone out".into()),
        _ => Outcome::Complete,
    }
}

/// The jobs of queue `q` whose end is not `expected` (a SQL expression of the row), with
/// their payload, state, attempt and last error.
fn not_ended_as(s: &Scratch, q: &Queue<fenceq::PostgresStore>, expected: &str) -> Vec<impl std::fmt::Debug> {
    let mut raw = s.raw();
    let sql = format!("SELECT id, attempt FROM fenceq_jobs WHERE state <> {expected} ORDER BY id");
    attempts(&mut raw, &sql)
        .into_iter()
        .map(|r| {
            let job = q.job(fenceq::JobId(r.id)).unwrap().unwrap();
            (String::from_utf8_lossy(&job.payload).into_owned(), job.state, job.attempt, job.last_error)
        })
        .collect()
}

/// The same hazard in general: every outcome a handler can return, settled by a pool while
/// other sessions lock its jobs' rows and let them go. Whatever the interleaving, each job
/// ends as its handler said: a retry or a snooze with attempts left is never an exhaustion,
/// and nothing is lost.
#[test]
fn settles_that_meet_rows_locked_and_let_go_end_as_their_handlers_said() {
    const JOBS: usize = 2_000;
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    q.enqueue_batch((0..JOBS).map(|n| NewJob::new("q", n.to_string().into_bytes()).max_attempts(3))).unwrap();
    let lockers = Lockers::start(&s, 2);
    let pool = WorkerPool::builder(q.clone(), "q")
        .workers(4)
        .lease(Duration::from_secs(60))
        .renew_every(Duration::from_millis(5))
        .handler(|a| {
            let n: usize = std::str::from_utf8(a.payload()).unwrap().parse().unwrap();
            outcome_of(n, a.attempt(), true)
        })
        .start()
        .unwrap();
    let drained = pool.wait_drained(RUN_BOUND);
    let locked = lockers.stop();
    assert!(drained.unwrap(), "the queue drained within {RUN_BOUND:?}");
    pool.shutdown(WAIT_BOUND).unwrap();
    assert!(locked > 0, "no session ever locked a running job's row");
    assert_eq!(scalar(&mut s.raw(), "SELECT count(*) AS n FROM fenceq_jobs"), JOBS as i64, "every job is kept");
    let wrong = not_ended_as(
        &s,
        &q,
        "CASE WHEN convert_from(payload, 'UTF8')::int % 5 = 4 THEN 'unknown' ELSE 'completed' END",
    );
    assert!(wrong.is_empty(), "jobs not ended as their handlers said (payload, state, attempt, error): {wrong:?}");
}

/// And with groups: the same outcomes (no unknowns, which would hold their groups) on jobs
/// of six groups, while other sessions lock and let go their rows. Each group still runs one
/// job at a time, in enqueue order (a retried or snoozed head runs again before the next),
/// and every job completes.
#[test]
fn grouped_settles_that_meet_rows_locked_and_let_go_keep_each_groups_order() {
    const JOBS: usize = 1_200;
    const GROUPS: usize = 6;
    let Some(s) = Scratch::new() else { return };
    let q = s.open();
    q.enqueue_batch(
        (0..JOBS).map(|n| {
            NewJob::new("q", n.to_string().into_bytes()).max_attempts(3).group(format!("chat-{}", n % GROUPS))
        }),
    )
    .unwrap();
    let started = std::sync::Arc::new(std::sync::Mutex::new(Vec::<usize>::new()));
    let running: std::sync::Arc<Vec<std::sync::atomic::AtomicBool>> =
        std::sync::Arc::new((0..GROUPS).map(|_| std::sync::atomic::AtomicBool::new(false)).collect());
    let overlaps = std::sync::Arc::new(AtomicU64::new(0));
    let lockers = Lockers::start(&s, 2);
    let pool = {
        let (started, running, overlaps) = (started.clone(), running.clone(), overlaps.clone());
        WorkerPool::builder(q.clone(), "q")
            .workers(4)
            .lease(Duration::from_secs(60))
            .renew_every(Duration::from_millis(5))
            .handler(move |a| {
                let n: usize = std::str::from_utf8(a.payload()).unwrap().parse().unwrap();
                if running[n % GROUPS].swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                started.lock().unwrap().push(n);
                let outcome = outcome_of(n, a.attempt(), false);
                running[n % GROUPS].store(false, Ordering::SeqCst);
                outcome
            })
            .start()
            .unwrap()
    };
    let drained = pool.wait_drained(RUN_BOUND);
    let locked = lockers.stop();
    assert!(drained.unwrap(), "the queue drained within {RUN_BOUND:?}");
    pool.shutdown(WAIT_BOUND).unwrap();
    assert!(locked > 0, "no session ever locked a running job's row");
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two jobs of one group ran at once");
    let wrong = not_ended_as(&s, &q, "'completed'");
    assert!(wrong.is_empty(), "jobs not completed (payload, state, attempt, error): {wrong:?}");
    let started = started.lock().unwrap();
    for group in 0..GROUPS {
        let order: Vec<usize> = started.iter().copied().filter(|n| n % GROUPS == group).collect();
        let out_of_order = order.windows(2).find(|w| w[1] < w[0]);
        assert!(out_of_order.is_none(), "group {group} ran {out_of_order:?} out of enqueue order: {order:?}");
        let mut distinct = order.clone();
        distinct.dedup();
        assert_eq!(distinct.len(), JOBS / GROUPS, "group {group} ran every job");
    }
}

/// The same run's other way to revive a refused token: the heartbeat round renews x (live
/// at its instant) and goes on to the next token, whose row lock makes it wait, so x's
/// renewal is written but not committed. An owned check of x meanwhile, at a later instant
/// past x's old lease end, must not judge x by the version from before the renewal (and be
/// refused while the renewal commits a moment later): it waits for the round, and then sees
/// the renewed lease. Either the check owns the job, or the token stays refused for good.
#[test]
fn an_owned_check_waits_for_a_renewal_in_flight_instead_of_refusing_a_token_that_it_renews() {
    let Some(s) = Scratch::new() else { return };
    let clock = fenceq::ManualClock::new(1_700_000_000_000);
    let q = Queue::builder().url(s.url.clone()).schema(s.schema.clone()).clock(clock.clone()).open_postgres().unwrap();
    q.enqueue_batch([NewJob::new("q", b"x".to_vec()), NewJob::new("q", b"y".to_vec())]).unwrap();
    let lease = Duration::from_secs(30);
    let mut claimed = q.claim_batch("q", "w", lease, 2).unwrap();
    claimed.sort_by_key(|c| c.id());
    let (x, y) = (claimed[0].token(), claimed[1].token());
    let mut holder = s.raw();
    let holder_pid = scalar(&mut holder, "SELECT pg_backend_pid()::bigint AS n");
    holder.batch_execute(&format!("BEGIN; SELECT 1 FROM fenceq_jobs WHERE id = {} FOR UPDATE", y.id.0)).unwrap();
    let mut watcher = s.raw();
    let blocked_by = |watcher: &mut PgConnection, pid: i64| {
        scalar(watcher, &format!("SELECT count(*) AS n FROM pg_stat_activity WHERE {pid} = ANY(pg_blocking_pids(pid))"))
    };
    // The round renews x at +29 s (to +59 s), then waits for y's row.
    clock.advance(Duration::from_secs(29));
    let round = {
        let q = q.clone();
        std::thread::spawn(move || q.renew_all(&[x, y], lease).unwrap())
    };
    wait_for("the round to wait for y's row lock", WAIT_BOUND, || blocked_by(&mut watcher, holder_pid) > 0);
    let round_pid = scalar(
        &mut watcher,
        &format!("SELECT min(pid)::bigint AS n FROM pg_stat_activity WHERE {holder_pid} = ANY(pg_blocking_pids(pid))"),
    );
    // At +31 s, past x's old end (+30 s) and before its renewed one, x's owner completes it.
    clock.advance(Duration::from_secs(2));
    let completing = {
        let q = q.clone();
        std::thread::spawn(move || q.complete_with(&x, |_| Ok(())))
    };
    // The completion either waits for the round (then it is let go) or has already decided.
    wait_for("the completion to wait for the round, or to end", WAIT_BOUND, || {
        completing.is_finished() || blocked_by(&mut watcher, round_pid) > 0
    });
    holder.batch_execute("ROLLBACK").unwrap();
    let renewed = round.join().unwrap();
    let completed = completing.join().unwrap();
    assert!(renewed[0].is_ok(), "x's lease was live at the round's instant: {:?}", renewed[0]);
    assert!(
        completed.is_ok(),
        "x's completion was refused ({completed:?}) while the renewal that kept it owned was in flight"
    );
    assert_eq!(q.job(x.id).unwrap().unwrap().state, fenceq::JobState::Completed);
}

/// And the last way: a renewal whose instant was taken before it waited for the job's own
/// row. Another transaction judged the token at a later instant, found the lease ended and
/// holds the row (`owns_in` in an application's transaction; `complete_with`'s check until
/// its rollback); the renewal must judge the lease at an instant taken once it holds the
/// row, not at the earlier one, or it renews a lease that was already seen ended.
#[test]
fn a_renewal_judges_the_lease_after_it_holds_the_row_not_before() {
    let Some(s) = Scratch::new() else { return };
    let clock = fenceq::ManualClock::new(1_700_000_000_000);
    let q = Queue::builder().url(s.url.clone()).schema(s.schema.clone()).clock(clock.clone()).open_postgres().unwrap();
    q.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
    let lease = Duration::from_secs(30);
    let x = q.claim("q", "w", lease).unwrap().unwrap().token();
    let past_the_end = 1_700_000_000_000 + 31_000;
    let mut observer = s.raw();
    let observer_pid = scalar(&mut observer, "SELECT pg_backend_pid()::bigint AS n");
    observer.batch_execute("BEGIN").unwrap();
    assert!(!fenceq::PostgresStore::owns_in(&mut observer, &x, past_the_end).unwrap(), "ended at +31 s");
    clock.advance(Duration::from_secs(29));
    let round = {
        let q = q.clone();
        std::thread::spawn(move || q.renew_all(&[x], lease).unwrap())
    };
    let mut watcher = s.raw();
    wait_for("the renewal to wait for the observer's row lock", WAIT_BOUND, || {
        let blocked =
            format!("SELECT count(*) AS n FROM pg_stat_activity WHERE {observer_pid} = ANY(pg_blocking_pids(pid))");
        scalar(&mut watcher, &blocked) > 0
    });
    clock.advance(Duration::from_secs(2));
    observer.batch_execute("ROLLBACK").unwrap();
    let renewed = round.join().unwrap();
    assert!(
        matches!(renewed[0], Err(Error::OwnershipLost { .. })),
        "a lease seen ended at +31 s was renewed by a round that waited for its row: {:?}",
        renewed[0]
    );
    assert!(!q.owns(&x).unwrap());
}
