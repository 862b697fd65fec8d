//! Hostile input: [`hostile`] feeds arbitrary bytes to the API (calls with any arguments,
//! [`HostileCall`]) and as database files: raw bytes, the [`template`] queue file with bytes
//! flipped, or the template tampered with by SQL ([`TAMPERS`]). The engine may refuse; it must
//! not panic, change rows on a failed call, or blame the storage for bad caller input.

use super::ops::{HOUR_MS, LEASE, MAX_OPS};
use super::runner::{check_row, TempDb, T0};
use arbitrary::{Arbitrary, Unstructured};
use fenceq::rusqlite;
use fenceq::{
    Backoff, BackoffScope, ClaimId, ClaimToken, Claimed, Cursor, Error, Job, JobId, JobState, ListFilter, ManualClock,
    NewJob, Queue, Resolution, Retention, RetryPolicy, Snooze,
};
use std::path::Path;
use std::time::Duration;
use uuid::Uuid;

/// Runs hostile bytes through the API: the first byte picks the mode (arbitrary calls on a
/// healthy queue, raw bytes as a database file, a valid queue file with bytes flipped, a
/// valid queue file tampered with by SQL), the rest is the input. Panics only when the engine
/// panics or mishandles the input.
pub fn hostile(bytes: &[u8]) {
    let Some((&mode, rest)) = bytes.split_first() else { return };
    match mode % 4 {
        0 => hostile_calls(rest),
        1 => hostile_raw_file(rest),
        2 => hostile_flipped_file(rest),
        _ => hostile_tampered_file(rest),
    }
}

/// A token for a hostile call: one a claim returned, or any triple.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum HToken {
    /// `issued[i % len]`
    Issued(u8),
    /// Any id, attempt and claim id.
    Raw {
        /// The id.
        id: i64,
        /// The attempt.
        attempt: u32,
        /// The claim id.
        claim: u128,
    },
}

/// A backoff for a hostile retry: (seconds, nanoseconds) pairs and any jitter.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum HBackoff {
    /// A fixed delay.
    After((u64, u32)),
    /// An exponential policy.
    Policy {
        /// Its base.
        base: (u64, u32),
        /// Its cap.
        max: (u64, u32),
        /// Its jitter (any float, NaN included).
        jitter: f64,
    },
}

/// One call with arbitrary arguments.
#[derive(Arbitrary, Debug, Clone)]
pub enum HostileCall {
    /// `enqueue`
    Enqueue {
        /// Queue name.
        queue: String,
        /// Key.
        key: Option<String>,
        /// Payload.
        payload: Vec<u8>,
        /// Priority.
        priority: i32,
        /// Delay in ms.
        delay_ms: u64,
        /// Attempt budget.
        max_attempts: Option<u32>,
    },
    /// `enqueue_batch`
    EnqueueBatch(Vec<(String, Option<String>, Vec<u8>)>),
    /// `claim_batch`
    Claim {
        /// Queue name.
        queue: String,
        /// Worker id.
        worker: String,
        /// Lease (seconds, nanoseconds).
        lease: (u64, u32),
        /// Limit.
        limit: u32,
    },
    /// `renew`
    Renew {
        /// Token.
        token: HToken,
        /// Lease (seconds, nanoseconds).
        lease: (u64, u32),
    },
    /// `owns`
    Owns(HToken),
    /// `complete`
    Complete(HToken),
    /// `retry`
    Retry {
        /// Token.
        token: HToken,
        /// Backoff.
        backoff: HBackoff,
        /// Error text.
        error: String,
    },
    /// `exhaust`
    Exhaust {
        /// Token.
        token: HToken,
        /// Error text.
        error: String,
    },
    /// `mark_unknown`
    MarkUnknown {
        /// Token.
        token: HToken,
        /// Evidence text.
        evidence: String,
    },
    /// `park`
    Park {
        /// Token.
        token: HToken,
        /// Timeout (seconds, nanoseconds).
        timeout: (u64, u32),
        /// Reason text.
        reason: String,
    },
    /// `resume`
    Resume(HToken),
    /// `acknowledge`
    Acknowledge(HToken),
    /// `resolve` (`how % 3` picks the resolution)
    Resolve {
        /// Token.
        token: HToken,
        /// Which resolution.
        how: u8,
    },
    /// `cancel`
    Cancel(i64),
    /// `replay`
    Replay(i64),
    /// `job`
    Job(i64),
    /// `exhaustions`
    Exhaustions {
        /// Cursor.
        cursor: Option<i64>,
        /// Limit.
        limit: u32,
    },
    /// `unknowns`
    Unknowns {
        /// Cursor.
        cursor: Option<i64>,
        /// Limit.
        limit: u32,
    },
    /// `list`
    List {
        /// Queue filter.
        queue: Option<String>,
        /// State filter (`JobState::ALL[i % 7]`).
        state: Option<u8>,
        /// Cursor.
        after: Option<i64>,
        /// Limit.
        limit: u32,
    },
    /// `reap`
    Reap,
    /// `prune`
    Prune {
        /// Retention age (seconds, nanoseconds).
        older_than: (u64, u32),
        /// Batch size.
        batch: u32,
    },
    /// `prune_preview`
    PrunePreview((u64, u32)),
    /// `reap_preview`
    ReapPreview,
    /// `stats`
    Stats,
    /// Sets the clock (clamped to 0..=2^47 ms).
    SetClock(i64),
    /// Advances the clock (by at most 2^40 ms).
    Advance(u64),
    /// `snooze` (`scope % 3` picks the scope)
    Snooze {
        /// Token.
        token: HToken,
        /// Delay (seconds, nanoseconds).
        delay: (u64, u32),
        /// Which scope.
        scope: u8,
        /// The cap.
        cap: u32,
        /// Reason text.
        reason: String,
    },
    /// `queue_backoff`
    QueueBackoff(String),
    /// `clear_backoff`
    ClearBackoff(String),
}

fn duration_of((secs, nanos): (u64, u32)) -> Duration {
    Duration::new(secs, nanos % 1_000_000_000)
}

const CLOCK_MAX: i64 = 1 << 47;

/// Rows as `list` shows them, to prove that a failed call changed nothing.
fn rows_of(q: &Queue) -> Vec<Job> {
    q.list(&ListFilter { limit: fenceq::MAX_BATCH, ..ListFilter::default() })
        .expect("listing a healthy in-memory queue")
}

/// A name `check_name` must refuse: empty, too long, or with a NUL byte.
fn bad_name(name: &str) -> bool {
    name.is_empty() || name.len() > fenceq::MAX_NAME_LEN || name.contains('\0')
}

/// A job intake must refuse (the name, key and payload checks).
fn bad_job(queue: &str, key: Option<&str>, payload: &[u8]) -> bool {
    bad_name(queue) || payload.is_empty() || key.is_some_and(|k| k.is_empty() || k.len() > fenceq::MAX_KEY_LEN)
}

fn hostile_calls(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let clock = ManualClock::new(T0);
    let q = Queue::builder().clock(clock.clone()).open().expect("an in-memory queue opens");
    let mut issued: Vec<ClaimToken> = Vec::new();
    for _ in 0..MAX_OPS {
        let Ok(call) = HostileCall::arbitrary(&mut u) else { break };
        let token = |h: HToken| match h {
            HToken::Issued(i) if !issued.is_empty() => issued[i as usize % issued.len()],
            HToken::Issued(i) => ClaimToken { id: JobId(i64::from(i)), attempt: 1, claim_id: ClaimId(Uuid::nil()) },
            HToken::Raw { id, attempt, claim } => {
                ClaimToken { id: JobId(id), attempt, claim_id: ClaimId(Uuid::from_u128(claim)) }
            }
        };
        let before = rows_of(&q);
        // Set for input the engine must refuse with `InvalidInput`.
        let mut invalid = false;
        let result: fenceq::Result<()> = match call.clone() {
            HostileCall::Enqueue { queue, key, payload, priority, delay_ms, max_attempts } => {
                invalid = bad_job(&queue, key.as_deref(), &payload);
                let mut job = NewJob::new(queue, payload).priority(priority).delay(Duration::from_millis(delay_ms));
                if let Some(key) = key {
                    job = job.key(key);
                }
                if let Some(n) = max_attempts {
                    job = job.max_attempts(n);
                }
                q.enqueue(job).map(drop)
            }
            HostileCall::EnqueueBatch(jobs) => {
                invalid = jobs.iter().take(8).any(|(queue, key, payload)| bad_job(queue, key.as_deref(), payload));
                q.enqueue_batch(jobs.into_iter().take(8).map(|(queue, key, payload)| {
                    let job = NewJob::new(queue, payload);
                    match key {
                        Some(key) => job.key(key),
                        None => job,
                    }
                }))
                .map(drop)
            }
            HostileCall::Claim { queue, worker, lease, limit } => {
                invalid = bad_name(&queue) || bad_name(&worker) || limit == 0 || limit > fenceq::MAX_BATCH;
                q.claim_batch(&queue, &worker, duration_of(lease), limit).map(|claimed| {
                    issued.extend(claimed.iter().map(Claimed::token));
                })
            }
            HostileCall::Renew { token: t, lease } => q.renew(&token(t), duration_of(lease)).map(drop),
            HostileCall::Owns(t) => q.owns(&token(t)).map(drop),
            HostileCall::Complete(t) => q.complete(&token(t)),
            HostileCall::Retry { token: t, backoff, error } => {
                let backoff = match backoff {
                    HBackoff::After(d) => Backoff::After(duration_of(d)),
                    HBackoff::Policy { base, max, jitter } => {
                        Backoff::Policy(RetryPolicy { base: duration_of(base), max: duration_of(max), jitter })
                    }
                };
                q.retry(&token(t), backoff, &error).map(drop)
            }
            HostileCall::Exhaust { token: t, error } => q.exhaust(&token(t), &error),
            HostileCall::MarkUnknown { token: t, evidence } => q.mark_unknown(&token(t), &evidence),
            HostileCall::Park { token: t, timeout, reason } => q.park(&token(t), duration_of(timeout), &reason),
            HostileCall::Resume(t) => q.resume(&token(t)),
            HostileCall::Acknowledge(t) => q.acknowledge(&token(t)),
            HostileCall::Resolve { token: t, how } => {
                let r = [Resolution::Complete, Resolution::Retry, Resolution::Exhaust][how as usize % 3];
                q.resolve(&token(t), r)
            }
            HostileCall::Cancel(id) => q.cancel(JobId(id)).map(drop),
            HostileCall::Replay(id) => q.replay(JobId(id)),
            HostileCall::Job(id) => q.job(JobId(id)).map(drop),
            HostileCall::Exhaustions { cursor, limit } => {
                invalid = limit == 0;
                q.exhaustions(cursor.map(Cursor), limit).map(drop)
            }
            HostileCall::Unknowns { cursor, limit } => {
                invalid = limit == 0;
                q.unknowns(cursor.map(Cursor), limit).map(drop)
            }
            HostileCall::List { queue, state, after, limit } => {
                invalid = limit == 0;
                let state = state.map(|s| JobState::ALL[s as usize % JobState::ALL.len()]);
                q.list(&ListFilter { queue, state, after: after.map(Cursor), limit }).map(drop)
            }
            HostileCall::Reap => q.reap().map(drop),
            HostileCall::Prune { older_than, batch } => {
                invalid = batch == 0;
                q.prune(&Retention { older_than: duration_of(older_than), batch_size: batch }).map(drop)
            }
            HostileCall::PrunePreview(older_than) => {
                q.prune_preview(&Retention::older_than(duration_of(older_than))).map(drop)
            }
            HostileCall::ReapPreview => q.reap_preview().map(drop),
            HostileCall::Stats => q.stats().map(drop),
            HostileCall::SetClock(ms) => {
                clock.set(ms.clamp(0, CLOCK_MAX));
                Ok(())
            }
            HostileCall::Advance(ms) => {
                use fenceq::Clock;
                clock.set(clock.now_ms().saturating_add(ms.min(1 << 40) as i64).min(CLOCK_MAX));
                Ok(())
            }
            HostileCall::Snooze { token: t, delay, scope, cap, reason } => {
                let delay = duration_of(delay);
                invalid = delay > fenceq::MAX_SNOOZE;
                let scope = [BackoffScope::Job, BackoffScope::Group, BackoffScope::Queue][scope as usize % 3];
                q.snooze(&token(t), Snooze::new(delay).scope(scope).reason(reason).max_snoozes(cap)).map(drop)
            }
            HostileCall::QueueBackoff(queue) => {
                invalid = bad_name(&queue);
                q.queue_backoff(&queue).map(drop)
            }
            HostileCall::ClearBackoff(queue) => {
                invalid = bad_name(&queue);
                q.clear_backoff(&queue).map(drop)
            }
        };
        let after = rows_of(&q);
        for r in &after {
            if let Err(e) = check_row(r) {
                panic!("hostile call {call:?} left a row breaking an invariant: {e}");
            }
        }
        match result {
            Ok(()) if invalid => panic!("hostile call {call:?} succeeded although its input is invalid"),
            Ok(()) => {}
            Err(e) => {
                if after != before {
                    panic!("hostile call {call:?} failed with {e:?} but changed rows:\n  before {before:?}\n  after  {after:?}");
                }
                match e {
                    Error::InvalidInput { .. } => {}
                    _ if invalid => {
                        panic!("hostile call {call:?} with invalid input failed with {e:?}, not InvalidInput")
                    }
                    Error::OwnershipLost { .. }
                    | Error::StaleIdentity { .. }
                    | Error::NotFound(_)
                    | Error::InvalidState { .. } => {}
                    other => {
                        panic!("hostile call {call:?} on a healthy database failed with a storage error: {other:?}")
                    }
                }
            }
        }
    }
}

/// Opens `bytes` as a database file (no panic, only errors) and runs [`probe`] when it opens.
fn open_file_bytes(bytes: &[u8], setup: impl FnOnce(&Path)) {
    let db = TempDb::new("hostile");
    std::fs::write(db.path(), bytes).expect("writing a temp file");
    setup(db.path());
    let clock = ManualClock::new(T0 + HOUR_MS);
    let opened = Queue::builder().path(db.path()).clock(clock.clone()).pool_size(2).open();
    if let Ok(queue) = opened {
        probe(&queue, &clock);
    }
    // A second open of what the first left behind must not panic either.
    if let Ok(queue) = Queue::builder().path(db.path()).clock(clock.clone()).pool_size(1).open() {
        let _ = queue.stats();
        let _ = queue.exhaustions(None, 10);
    }
}

fn hostile_raw_file(bytes: &[u8]) {
    open_file_bytes(bytes, |_| {});
}

fn hostile_flipped_file(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let mut bytes = template().to_vec();
    let truncate: Option<u16> = u.arbitrary().unwrap_or(None);
    for _ in 0..64 {
        let Ok((offset, xor)) = u.arbitrary::<(u16, u8)>() else { break };
        let i = offset as usize % bytes.len();
        bytes[i] ^= xor.max(1);
    }
    if let Some(len) = truncate {
        bytes.truncate(len as usize * 8);
    }
    open_file_bytes(&bytes, |_| {});
}

/// SQL a hostile application (or a bit of corruption) may have run on a queue database.
/// (Index 0 was the defect "insert-trigger-panic", fixed in ac0020d.)
pub const TAMPERS: &[&str] = &[
    "CREATE TRIGGER hostile_ignore_insert BEFORE INSERT ON fenceq_jobs BEGIN SELECT RAISE(IGNORE); END;",
    "CREATE TRIGGER hostile_ignore_update BEFORE UPDATE ON fenceq_jobs BEGIN SELECT RAISE(IGNORE); END;",
    "CREATE TRIGGER hostile_abort_update BEFORE UPDATE ON fenceq_jobs BEGIN SELECT RAISE(ABORT, 'no'); END;",
    "CREATE TRIGGER hostile_delete_updated AFTER UPDATE ON fenceq_jobs BEGIN DELETE FROM fenceq_jobs WHERE id = NEW.id; END;",
    "CREATE TRIGGER hostile_copy_insert AFTER INSERT ON fenceq_jobs BEGIN INSERT INTO fenceq_jobs (queue, payload, run_at, max_attempts, created_at) VALUES (NEW.queue, NEW.payload, NEW.run_at, NEW.max_attempts, NEW.created_at); END;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET state = 'bogus' WHERE id % 3 = 0;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET attempt = -1 WHERE id % 2 = 0;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET attempt = max_attempts + 5;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET lease_until = NULL, worker = NULL WHERE state = 'running';",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET state = 'running', lease_until = 0, worker = NULL;",
    "UPDATE fenceq_jobs SET claim_id = x'0102' WHERE claim_id IS NOT NULL;",
    "UPDATE fenceq_jobs SET claim_id = 'not a blob' WHERE claim_id IS NOT NULL;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET claim_id = NULL;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET lease_until = 1.5e300 WHERE state = 'running';",
    "UPDATE fenceq_jobs SET lease_until = -9223372036854775808, run_at = 9223372036854775807 WHERE state = 'running';",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET attempt = 4294967295, max_attempts = 4294967295;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET max_attempts = 4294967296;",
    "UPDATE fenceq_jobs SET key = CAST(x'ff00fe' AS TEXT), queue = CAST(x'c3' AS TEXT);",
    "UPDATE fenceq_jobs SET last_error = CAST(x'ff' AS TEXT), worker = CAST(x'fe' AS TEXT);",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET state = CAST(x'ff' AS TEXT) WHERE id = 1;",
    "PRAGMA ignore_check_constraints = ON; UPDATE fenceq_jobs SET priority = 'high', run_at = 'soon';",
    "UPDATE fenceq_jobs SET payload = zeroblob(70000000) WHERE id = 1;",
    "PRAGMA user_version = 2;",
    "PRAGMA user_version = 99;",
    "PRAGMA user_version = -1;",
    "DROP INDEX fenceq_jobs_queue_key;",
    "DROP INDEX fenceq_jobs_claim; DROP INDEX fenceq_jobs_lease; DROP INDEX fenceq_jobs_exhausted;",
    "ALTER TABLE fenceq_jobs RENAME TO hostile_jobs;",
    "ALTER TABLE fenceq_jobs DROP COLUMN acknowledged_at;",
    "DROP TABLE fenceq_jobs; CREATE TABLE fenceq_jobs (id INTEGER PRIMARY KEY, payload);",
    "DROP TABLE fenceq_jobs; CREATE VIEW fenceq_jobs AS SELECT 1 AS id;",
    "UPDATE fenceq_id_floor SET floor = 9223372036854775807;",
    "DELETE FROM fenceq_id_floor;",
    "INSERT INTO fenceq_jobs (id, queue, payload, run_at, max_attempts, created_at) VALUES (9223372036854775807, 'q', x'01', 0, 1, 0);",
    "INSERT INTO fenceq_jobs (id, queue, payload, run_at, max_attempts, created_at, priority) VALUES (-5, 'q', x'01', -9223372036854775808, 10000, 0, -2147483648);",
    "PRAGMA journal_mode = DELETE;",
    "PRAGMA page_size = 512; PRAGMA journal_mode = DELETE; VACUUM;",
    "PRAGMA encoding = 'UTF-16le';",
    "CREATE TABLE hostile_pad (x); INSERT INTO hostile_pad VALUES (zeroblob(100000));",
    "PRAGMA foreign_keys = ON; CREATE TABLE hostile_child (job INTEGER REFERENCES fenceq_jobs(id)); INSERT INTO hostile_child SELECT id FROM fenceq_jobs;",
    "DROP TABLE fenceq_attempts;",
    "CREATE TRIGGER hostile_abort_record BEFORE INSERT ON fenceq_attempts BEGIN SELECT RAISE(ABORT, 'no'); END;",
];

fn hostile_tampered_file(data: &[u8]) {
    let picks: Vec<usize> = data.iter().take(6).map(|b| *b as usize % TAMPERS.len()).collect();
    open_file_bytes(template(), |path| {
        let conn = rusqlite::Connection::open(path).expect("opening the template copy");
        for i in picks {
            // Any of these may fail (e.g. after a table was dropped); what is left is the input.
            let _ = conn.execute_batch(TAMPERS[i]);
        }
    });
}

/// A queue database with a row in every state, made once per process.
pub fn template() -> &'static [u8] {
    static TEMPLATE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let db = TempDb::new("template");
        let clock = ManualClock::new(T0);
        {
            let q =
                Queue::builder().path(db.path()).clock(clock.clone()).max_attempts(2).open().expect("template open");
            let add = |payload: &str, key: Option<&str>| {
                let job = NewJob::new("q", payload.as_bytes().to_vec());
                q.enqueue(match key {
                    Some(k) => job.key(k),
                    None => job,
                })
                .expect("template enqueue")
            };
            for i in 0..9 {
                add(&format!("job {i}"), (i % 2 == 0).then_some(format!("key-{i}").as_str()));
            }
            let claimed = q.claim_batch("q", "w", LEASE, 8).expect("template claim");
            let t = |i: usize| claimed[i].token();
            q.complete(&t(0)).expect("complete");
            q.exhaust(&t(1), "exhausted").expect("exhaust");
            q.exhaust(&t(2), "acknowledged").expect("exhaust");
            q.acknowledge(&t(2)).expect("acknowledge");
            q.mark_unknown(&t(3), "unknown").expect("unknown");
            q.park(&t(4), Duration::from_secs(60), "parked").expect("park");
            q.cancel(t(5).id).expect("cancel");
            q.retry(&t(6), Duration::ZERO, "retried").expect("retry");
            // t(7) stays running; the ninth job stays pending.
            let _ = q.checkpoint();
        }
        std::fs::read(db.path()).expect("reading the template")
    })
}

/// Every kind of call on a queue opened from a hostile file; errors are fine, panics are not.
fn probe(q: &Queue, clock: &ManualClock) {
    let _ = q.schema_version();
    let _ = q.stats();
    let _ = q.list(&ListFilter::default());
    for id in 0..10 {
        let _ = q.job(JobId(id));
    }
    let _ = q.enqueue(NewJob::new("q", b"keyed".to_vec()).key("key-0"));
    let _ = q.enqueue(NewJob::new("q", b"keyed".to_vec()).key("fresh"));
    let _ = q.enqueue(NewJob::new("q", b"plain".to_vec()));
    let _ = q.enqueue_batch([NewJob::new("q", b"b1".to_vec()), NewJob::new("q", b"b2".to_vec()).key("key-2")]);
    let _ = q.reap_preview();
    let _ = q.prune_preview(&Retention::older_than(Duration::ZERO));
    if let Ok(claimed) = q.claim_batch("q", "w", LEASE, 16) {
        for (i, c) in claimed.iter().enumerate() {
            let t = c.token();
            let _ = q.owns(&t);
            let _ = q.renew(&t, LEASE);
            let _ = match i % 6 {
                0 => q.complete(&t),
                1 => q.retry(&t, RetryPolicy::default(), "again").map(drop),
                2 => q.exhaust(&t, "gave up"),
                3 => q.mark_unknown(&t, "maybe"),
                4 => q.park(&t, LEASE, "later"),
                _ => q.with_ownership(&t, |_| Ok(())),
            };
        }
    }
    let mut cursor = None;
    for _ in 0..32 {
        let Ok(page) = q.exhaustions(cursor, 3) else { break };
        for e in &page.items {
            let _ = q.acknowledge(&e.token);
            let _ = q.replay(e.token.id);
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if let Ok(page) = q.unknowns(None, 100) {
        for (i, e) in page.items.iter().enumerate() {
            let r = [Resolution::Complete, Resolution::Retry, Resolution::Exhaust][i % 3];
            let _ = q.resolve(&e.token, r);
        }
    }
    if let Ok(rows) = q.list(&ListFilter::default()) {
        for j in rows {
            if let Some(t) = j.token() {
                let _ = q.resume(&t);
            }
            let _ = q.cancel(j.id);
        }
    }
    let _ = q.reap();
    clock.set(T0 + 30 * 24 * HOUR_MS);
    let _ = q.reap();
    let _ = q.prune(&Retention::older_than(Duration::ZERO));
    let _ = q.prune(&Retention { older_than: Duration::ZERO, batch_size: 1 });
    let _ = q.checkpoint();
    let _ = q.stats();
}
