//! The runner: applies a sequence of [`QueueOp`]s to a real queue and to the reference
//! [`Model`], and checks after every step (the invariants on the real table, every row column
//! by column, the domain rows) and at the end. One runner whatever the store: the private
//! `Backend` trait gives what differs, a store through its [`Harness`] ([`run_on`],
//! [`HarnessRuns`]) or SQLite's own fast paths ([`run`], [`run_bytes`], [`run_bytes_file`]).
//! Also the row invariants on their own ([`check_row`]) and the temporary database files
//! ([`TempDb`]).

use super::ops::{
    decode, BatchLimit, ClaimQueue, ClosureAct, Forgery, InvalidJob, JobRef, JobSpec, LeaseSel, PageLimit, ParkSel,
    QueueOp, QueueSel, ResolutionSel, RetentionSel, ScopeSel, SnoozeSel, TokenRef, WorkerSel, MAX_OPS,
};
use super::reference::{dur_ms, Got, Model, Pass, Planned, DEFAULT_ATTEMPTS};
use crate::harness::Harness;
use fenceq::rusqlite;
use fenceq::store::{Store, TokenAt};
use fenceq::{
    AttemptOutcome, Backoff, ClaimId, ClaimToken, Claimed, Cursor, Enqueued, Error, Exhaustion, Job, JobId, JobState,
    ListFilter, ManualClock, NewJob, Page, Queue, Resolution, Retention, Retried, Snooze, SqliteStore, UnknownOutcome,
};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;
use uuid::Uuid;

/// The manual clock's start (2023-11-14), far from zero so that clock jumps back stay positive.
pub const T0: i64 = 1_700_000_000_000;
/// Most rows the model lets exist at once (enqueues beyond it are skipped).
pub const MAX_LIVE_JOBS: usize = 16;
/// Most jobs in one `EnqueueBatch`.
const MAX_BATCH_JOBS: usize = 4;

/// Counts of one run (to see what a test or a corpus actually exercised).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Steps applied.
    pub steps: usize,
    /// Per operation name: (calls that succeeded, calls that returned an error).
    pub calls: BTreeMap<&'static str, (u64, u64)>,
    /// Most rows at once.
    pub max_rows: usize,
    /// Claims handed out.
    pub claims: usize,
    /// Whether the run's database outlives its handle and the ops reopen it (a file for
    /// SQLite; always so through a harness).
    pub file: bool,
    /// Claims of a queue with limits.
    pub limited_claims: usize,
    /// Claims whose limits held back a job the same claim without them would have taken.
    pub held_back: usize,
    /// Group heads deferred until their group's rate opens.
    pub deferred: usize,
}

impl RunStats {
    /// Adds another run's counts.
    pub fn merge(&mut self, other: &RunStats) {
        self.steps += other.steps;
        for (name, (ok, err)) in &other.calls {
            let entry = self.calls.entry(name).or_default();
            entry.0 += ok;
            entry.1 += err;
        }
        self.max_rows = self.max_rows.max(other.max_rows);
        self.claims += other.claims;
        self.file |= other.file;
        self.limited_claims += other.limited_claims;
        self.held_back += other.held_back;
        self.deferred += other.deferred;
    }
}

/// A database file in its own fresh directory under the temp directory; the directory is
/// removed on drop (a connection the pool opens late cannot recreate a file in it).
#[derive(Debug)]
pub struct TempDb {
    dir: PathBuf,
    path: PathBuf,
}

impl TempDb {
    /// A fresh, unused path.
    pub fn new(tag: &str) -> TempDb {
        // Memory-backed where the machine has it: the model checks what the queue does, not
        // what the disk keeps (tests/power_loss.rs does that), and a checkpoint's fsync on a
        // real disk cost more than the rest of a file-backed run.
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
        let dir = base.join(format!("fenceq-{tag}-{}", Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("creating a temp directory");
        let path = dir.join("queue.db");
        TempDb { dir, path }
    }

    /// A fresh path holding a copy of a current-schema database (made once per thread).
    pub fn from_template() -> TempDb {
        let bytes = TEMPLATE.with(|template| {
            template
                .borrow_mut()
                .get_or_insert_with(|| {
                    let db = TempDb::new("template");
                    let queue = open_queue(&ManualClock::new(T0), Some(db.path())).expect("the template opens");
                    drop(queue);
                    std::fs::read(db.path()).expect("reading the template")
                })
                .clone()
        });
        let db = TempDb::new("model");
        std::fs::write(db.path(), bytes).expect("copying the template");
        db
    }

    /// The database path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        // A connection the reader pool opens in the background just as the queue goes can
        // create the file again between the removal of the files and of the directory.
        for _ in 0..5 {
            if std::fs::remove_dir_all(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn open_queue(clock: &ManualClock, path: Option<&Path>) -> fenceq::Result<Queue> {
    let mut builder = Queue::builder().clock(clock.clone()).max_attempts(DEFAULT_ATTEMPTS);
    if let Some(path) = path {
        builder = builder.path(path).pool_size(2);
    }
    let queue = builder.open()?;
    queue.with_connection(|c| {
        c.execute_batch(
            "CREATE TABLE IF NOT EXISTS model_domain (job INTEGER NOT NULL, attempt INTEGER NOT NULL, note TEXT)",
        )?;
        Ok(())
    })?;
    Ok(queue)
}

/// What the runner needs from the database under the queue that fenceq's public API does not
/// give: a reopen, a transaction of the caller's own for `enqueue_tx`, and the domain table
/// that `complete_with` / `with_ownership` closures write. Everything else (every call, every
/// check) is the shared runner's, whatever the store.
///
/// Two kinds: [`Harnessed`], any store through its conformance [`Harness`]; and [`Sqlite`],
/// SQLite's own fast path behind the fuzz targets (an in-memory queue reused from run to run,
/// a template file copied to /dev/shm), which is worth thousands of runs a second.
trait Backend {
    /// The store under the queue.
    type Store: Store;

    /// The database, as the divergence report names it.
    fn describe(&self) -> &'static str;

    /// The call that replays a report's ops on the same kind of database.
    fn replay_hint(&self) -> &'static str;

    /// Whether the database outlives its handle, so that `Reopen` drops the queue and opens
    /// it again (else, in memory, `Reopen` does nothing).
    fn reopens(&self) -> bool;

    /// A new handle on the same database, the old one dropped (only when [`Backend::reopens`]).
    fn reopen(&self, clock: &ManualClock) -> fenceq::Result<Queue<Self::Store>>;

    /// `queue.enqueue_tx` inside a `BEGIN IMMEDIATE` transaction of the caller's own (the
    /// outbox pattern), then its commit or rollback.
    fn enqueue_tx(&self, queue: &Queue<Self::Store>, job: NewJob, commit: bool) -> fenceq::Result<Enqueued>;

    /// A closure's domain write: one row (job, attempt, note) in the caller's transaction `tx`.
    fn write_domain(tx: &<Self::Store as Store>::Tx, job: i64, attempt: u32, note: &str) -> fenceq::Result<()>;

    /// Every domain row as (job, attempt), in insertion order.
    fn domain(&self, queue: &Queue<Self::Store>) -> fenceq::Result<Vec<(i64, i64)>>;
}

/// Any store, through its [`Harness`]: a place of its own, the queue the harness opens there
/// (and opens again on `Reopen`), its `replies` table as the domain table, and its
/// transaction of the application's own (another connection than the queue's) for
/// `enqueue_tx`.
struct Harnessed<'h, H: Harness> {
    harness: &'h H,
    place: H::Place,
}

impl<H: Harness> Backend for Harnessed<'_, H> {
    type Store = H::Store;

    fn describe(&self) -> &'static str {
        "the harness's place"
    }

    fn replay_hint(&self) -> &'static str {
        "fenceq_conformance::model::run_on(&harness, &ops)"
    }

    fn reopens(&self) -> bool {
        true
    }

    fn reopen(&self, clock: &ManualClock) -> fenceq::Result<Queue<H::Store>> {
        Ok(self.harness.open(&self.place, clock, Some(DEFAULT_ATTEMPTS)))
    }

    fn enqueue_tx(&self, queue: &Queue<H::Store>, job: NewJob, commit: bool) -> fenceq::Result<Enqueued> {
        let mut job = Some(job);
        let mut enqueued = None;
        self.harness.foreign_transaction(&self.place, commit, &mut |tx| {
            let job = job.take().expect("the harness runs the transaction's body once");
            enqueued = Some(queue.enqueue_tx(tx, job));
        });
        enqueued.expect("the harness ran the transaction's body")
    }

    fn write_domain(tx: &<H::Store as Store>::Tx, job: i64, attempt: u32, note: &str) -> fenceq::Result<()> {
        H::insert_reply(tx, job, i64::from(attempt), note)
    }

    fn domain(&self, queue: &Queue<H::Store>) -> fenceq::Result<Vec<(i64, i64)>> {
        let replies = queue.with_connection(H::replies_in)?;
        Ok(replies.into_iter().map(|(job, attempt, _)| (job, attempt)).collect())
    }
}

/// SQLite's fast path: a database file in /dev/shm copied from a template (`db`), or this
/// thread's spare in-memory queue (`db` is `None`).
struct Sqlite {
    db: Option<TempDb>,
}

impl Backend for Sqlite {
    type Store = SqliteStore;

    fn describe(&self) -> &'static str {
        if self.db.is_some() {
            "a SQLite file"
        } else {
            "SQLite in memory"
        }
    }

    fn replay_hint(&self) -> &'static str {
        "fenceq_conformance::model::run(&ops)"
    }

    fn reopens(&self) -> bool {
        self.db.is_some()
    }

    fn reopen(&self, clock: &ManualClock) -> fenceq::Result<Queue> {
        let db = self.db.as_ref().expect("only a file is reopened");
        open_queue(clock, Some(db.path()))
    }

    fn enqueue_tx(&self, queue: &Queue, job: NewJob, commit: bool) -> fenceq::Result<Enqueued> {
        queue.with_connection(|c| {
            let tx = rusqlite::Transaction::new_unchecked(c, rusqlite::TransactionBehavior::Immediate)?;
            let enqueued = queue.enqueue_tx(&tx, job)?;
            if commit {
                tx.commit()?;
            } else {
                tx.rollback()?;
            }
            Ok(enqueued)
        })
    }

    fn write_domain(tx: &rusqlite::Connection, job: i64, attempt: u32, note: &str) -> fenceq::Result<()> {
        tx.prepare_cached("INSERT INTO model_domain (job, attempt, note) VALUES (?1, ?2, ?3)")?
            .execute(rusqlite::params![job, attempt, note])?;
        Ok(())
    }

    fn domain(&self, queue: &Queue) -> fenceq::Result<Vec<(i64, i64)>> {
        queue.with_connection(|c| {
            let mut stmt = c.prepare_cached("SELECT job, attempt FROM model_domain ORDER BY rowid")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }
}

struct Runner<'a, B: Backend> {
    // Dropped in this order: the queue before its database.
    queue: Option<Queue<B::Store>>,
    backend: B,
    ops: &'a [QueueOp],
    clock: ManualClock,
    model: Model,
    step: usize,
    stats: RunStats,
}

type Check = Result<(), String>;

/// Applies `ops` to a real queue and to the model; panics at the first divergence or
/// invariant violation with the step, the operation, the model's expectation, what the engine
/// did, the ops so far and the model's rows. `FENCEQ_MODEL_TRACE=1` prints every step.
///
/// SQLite's fast path: in memory, or on a database file when the ops hold a `Reopen`.
/// [`run_on`] runs the same on any store through its harness.
pub fn run(ops: &[QueueOp]) -> RunStats {
    try_run(ops).unwrap_or_else(|e| panic!("{e}"))
}

/// Decodes fuzzer bytes with [`decode`] and runs them on an in-memory queue (`Reopen` does
/// nothing there): the `fence_invariants` target, cheap enough for thousands of runs a second.
pub fn run_bytes(data: &[u8]) -> RunStats {
    try_run_sqlite(&decode(data), false).unwrap_or_else(|e| panic!("{e}"))
}

/// Decodes fuzzer bytes and [`run`]s them, on a database file when they hold a `Reopen`: the
/// `fence_invariants_file` target, for what needs a file (a queue closed and opened again).
pub fn run_bytes_file(data: &[u8]) -> RunStats {
    run(&decode(data))
}

/// [`run`] that returns the divergence report instead of panicking (for proptest). Panics
/// that come from the engine itself still unwind.
pub fn try_run(ops: &[QueueOp]) -> Result<RunStats, String> {
    try_run_sqlite(ops, true)
}

/// [`run`] on the store of `harness`: a fresh scratch place of the harness's own
/// ([`Harness::create_scratch`]), the queue the harness opens there with [`DEFAULT_ATTEMPTS`]
/// (opened again there by every `Reopen`), the harness's `replies` table as the domain table,
/// and the harness's own transaction for `enqueue_tx`. For many runs, [`HarnessRuns`] reuses
/// the place from one run to the next.
pub fn run_on<H: Harness>(harness: &H, ops: &[QueueOp]) -> RunStats {
    HarnessRuns::new(harness).run(ops)
}

/// [`run_on`] that returns the divergence report instead of panicking.
pub fn try_run_on<H: Harness>(harness: &H, ops: &[QueueOp]) -> Result<RunStats, String> {
    HarnessRuns::new(harness).try_run(ops)
}

/// Model runs on the store of one harness, one after the other (the conformance kit's corpus
/// replay and property test): each is [`run_on`]'s, but a run that ended without a
/// divergence hands its place and open queue on to the next when the harness can empty them
/// ([`Harness::recycle`]), as opening a queue costs more than most runs. A run that diverged or
/// panicked never hands its place on.
pub struct HarnessRuns<'h, H: Harness> {
    harness: &'h H,
    spare: Option<Spare<H>>,
}

/// A place emptied for the next run, with its open queue and the queue's clock.
struct Spare<H: Harness> {
    // Dropped in this order: the queue before its place.
    queue: Queue<H::Store>,
    place: H::Place,
    clock: ManualClock,
}

impl<'h, H: Harness> HarnessRuns<'h, H> {
    /// No run yet.
    pub fn new(harness: &'h H) -> Self {
        HarnessRuns { harness, spare: None }
    }

    /// Runs `ops`; panics at the first divergence, as [`run`] does.
    pub fn run(&mut self, ops: &[QueueOp]) -> RunStats {
        self.try_run(ops).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs `ops`; returns the divergence report instead of panicking (for proptest). Panics
    /// that come from the store itself still unwind.
    pub fn try_run(&mut self, ops: &[QueueOp]) -> Result<RunStats, String> {
        let ops = bounded(ops);
        let harness = self.harness;
        let Spare { queue, place, clock } = self.spare.take().unwrap_or_else(|| {
            let place = harness.create_scratch();
            let clock = ManualClock::new(T0);
            let queue = harness.open(&place, &clock, Some(DEFAULT_ATTEMPTS));
            Spare { queue, place, clock }
        });
        clock.set(T0);
        let reopens = ops.iter().any(|op| matches!(op, QueueOp::Reopen));
        let (stats, queue, backend) = drive(ops, Harnessed { harness, place }, queue, clock.clone(), reopens)?;
        if harness.recycle(&backend.place, &queue) {
            self.spare = Some(Spare { queue, place: backend.place, clock });
        }
        Ok(stats)
    }
}

/// [`try_run`], on a database file when `file_for_reopen` and the ops hold a `Reopen`, else in
/// memory.
fn try_run_sqlite(ops: &[QueueOp], file_for_reopen: bool) -> Result<RunStats, String> {
    let ops = bounded(ops);
    let file = file_for_reopen && ops.iter().any(|op| matches!(op, QueueOp::Reopen));
    let (queue, clock, db) = if file {
        let clock = ManualClock::new(T0);
        let db = TempDb::from_template();
        let queue = open_queue(&clock, Some(db.path())).map_err(|e| format!("opening the queue: {e:?}"))?;
        (queue, clock, Some(db))
    } else {
        let (queue, clock) = spare_memory_queue().map_err(|e| format!("opening the queue: {e:?}"))?;
        (queue, clock, None)
    };
    let (stats, queue, backend) = drive(ops, Sqlite { db }, queue, clock.clone(), file)?;
    // Close the queue before the file goes; an in-memory queue serves the next run.
    match backend.db {
        Some(db) => {
            drop(queue);
            drop(db);
        }
        None => SPARE.with(|spare| *spare.borrow_mut() = Some((queue, clock))),
    }
    Ok(stats)
}

/// The runner, whatever the store: applies `ops` (at most `4 * MAX_OPS` of them) to `queue`
/// and to a fresh model, checking after every step and at the end. `file`: the database
/// outlives its handle (what [`RunStats::file`] reports). On success it hands back the queue
/// and the backend, for the caller to close or reuse; on a divergence both are dropped here.
fn drive<B: Backend>(
    ops: &[QueueOp],
    backend: B,
    queue: Queue<B::Store>,
    clock: ManualClock,
    file: bool,
) -> Result<(RunStats, Queue<B::Store>, B), String> {
    let ops = bounded(ops);
    let mut runner = Runner {
        ops,
        clock,
        backend,
        queue: Some(queue),
        model: Model::new(),
        step: 0,
        stats: RunStats { file, ..RunStats::default() },
    };
    let trace = std::env::var_os("FENCEQ_MODEL_TRACE").is_some();
    for (i, op) in ops.iter().enumerate() {
        runner.step = i;
        runner.apply(op).map_err(|e| runner.report(&e))?;
        runner.model.release_groups();
        runner.after_step().map_err(|e| runner.report(&e))?;
        runner.stats.steps += 1;
        if trace {
            eprintln!("step {i}: {op:?}\n{}", runner.rows());
        }
    }
    runner.step = ops.len();
    runner.full_check().map_err(|e| runner.report(&format!("final check: {e}")))?;
    let queue = runner.queue.take().expect("the queue is open after a run without a divergence");
    Ok((runner.stats, queue, runner.backend))
}

/// The first `4 * MAX_OPS` ops: what a run applies of a longer sequence.
fn bounded(ops: &[QueueOp]) -> &[QueueOp] {
    &ops[..ops.len().min(4 * MAX_OPS)]
}

thread_local! {
    /// The in-memory queue of this thread's last run that ended without a divergence, emptied
    /// and reused by the next one: opening a queue (its migrations, its statement caches) cost
    /// more than most runs. A run that diverged or panicked never hands its queue on.
    static SPARE: std::cell::RefCell<Option<(Queue, ManualClock)>> = const { std::cell::RefCell::new(None) };
    /// A current-schema database file (with the model's domain table), copied for every
    /// file-backed run instead of created and migrated each time.
    static TEMPLATE: std::cell::RefCell<Option<Vec<u8>>> = const { std::cell::RefCell::new(None) };
}

/// An empty in-memory queue at `T0`: this thread's spare, reset as a fresh one would be (no
/// rows, no domain rows, ids from 1 again), or a new one.
fn spare_memory_queue() -> fenceq::Result<(Queue, ManualClock)> {
    if let Some((queue, clock)) = SPARE.with(|spare| spare.borrow_mut().take()) {
        queue.transaction(|tx| {
            Ok(tx.execute_batch("DELETE FROM fenceq_jobs; DELETE FROM fenceq_attempts; DELETE FROM fenceq_queue_flow; DELETE FROM fenceq_limits; DELETE FROM fenceq_starts; DELETE FROM fenceq_settled_counts; DELETE FROM model_domain; UPDATE fenceq_id_floor SET floor = 0;")?)
        })?;
        clock.set(T0);
        return Ok((queue, clock));
    }
    let clock = ManualClock::new(T0);
    Ok((open_queue(&clock, None)?, clock))
}

/// The unknown outcome the engine reports for a terminal record the model reads like an
/// exhaustion's (the same row fields; its text is the evidence).
fn unknown_of(record: Exhaustion) -> UnknownOutcome {
    let Exhaustion { token, queue, key, payload, reason, at } = record;
    // The deprecated `reason` holds the evidence too, so that old code still builds.
    #[allow(deprecated)]
    UnknownOutcome { token, queue, key, payload, evidence: reason.clone(), at, reason }
}

fn got_of<T>(r: &fenceq::Result<T>) -> Got {
    match r {
        Ok(_) => Got::Ok,
        Err(e) => got_err(e),
    }
}

fn got_err(e: &Error) -> Got {
    match e {
        Error::OwnershipLost { reason, .. } => Got::Lost(*reason),
        Error::StaleIdentity { .. } => Got::Stale,
        Error::NotFound(_) => Got::NotFound,
        Error::InvalidState { state, .. } => Got::InvalidState(*state),
        Error::InvalidInput { .. } => Got::InvalidInput,
        Error::Domain(_) => Got::Domain,
        Error::NestedWrite => Got::Nested,
        Error::WaitExpired { .. } => Got::WaitExpired,
        other => Got::Other(format!("{other} ({other:?})")),
    }
}

/// Cuts a stored text as the engine does (`MAX_ERROR_LEN` bytes at a char boundary).
fn clip(text: &str) -> String {
    let mut end = text.len().min(fenceq::MAX_ERROR_LEN);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

impl<B: Backend> Runner<'_, B> {
    fn q(&self) -> &Queue<B::Store> {
        self.queue.as_ref().expect("the queue is open between steps")
    }

    fn now(&self) -> i64 {
        use fenceq::Clock;
        self.clock.now_ms()
    }

    fn report(&self, what: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "fenceq model divergence at step {} of {}: {what}", self.step, self.ops.len());
        if let Some(op) = self.ops.get(self.step) {
            let _ = writeln!(s, "  operation: {op:?}");
        }
        let _ = writeln!(s, "  clock: T0{:+} ms, database: {}", self.now() - T0, self.backend.describe());
        let _ = writeln!(s, "  ops so far (replay with {}):", self.backend.replay_hint());
        let _ = writeln!(s, "  {:?}", &self.ops[..(self.step + 1).min(self.ops.len())]);
        let _ = writeln!(s, "  model rows:");
        s.push_str(&self.rows());
        s
    }

    fn rows(&self) -> String {
        let mut s = String::new();
        for j in self.model.jobs.values() {
            let _ = writeln!(
                s,
                "    {} {} {:?} attempt {}/{} claim {:?} lease_until {:?} run_at {:?} wait_until {:?}",
                j.id,
                j.queue,
                j.state,
                j.attempt,
                j.max_attempts,
                j.claim_id.map(|c| c.0.to_string()),
                j.lease_until.map(|t| t - T0),
                j.run_at - T0,
                j.wait_until.map(|t| t - T0),
            );
        }
        s
    }

    fn count(&mut self, name: &'static str, ok: bool) {
        let entry = self.stats.calls.entry(name).or_default();
        if ok {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }

    fn expect(&mut self, what: &str, expected: &Got, got: &Got) -> Check {
        if expected != got {
            return Err(format!("{what}: the model expected {expected:?}, the engine returned {got:?}"));
        }
        Ok(())
    }

    fn job_id(&self, r: JobRef) -> JobId {
        let ever = |i: u8| match self.model.ever.len() {
            0 => JobId(1_000_000),
            n => self.model.ever[i as usize % n],
        };
        match r {
            JobRef::Ever(i) => ever(i),
            JobRef::InState(state, i) => {
                let ids: Vec<JobId> =
                    self.model.jobs.values().filter(|j| j.state == state.state()).map(|j| j.id).collect();
                if ids.is_empty() {
                    ever(i)
                } else {
                    ids[i as usize % ids.len()]
                }
            }
            JobRef::Missing => JobId(1_000_000),
        }
    }

    fn issued(&self, i: u8) -> Option<ClaimToken> {
        let issued = &self.model.issued;
        (!issued.is_empty()).then(|| issued[i as usize % issued.len()])
    }

    /// A token no claim ever had: a claim id outside UUID v4 (the engine's generator).
    fn forged_claim_id(&self, salt: u64) -> ClaimId {
        ClaimId(Uuid::from_u128(
            0xF0F0_0000_0000_0000_0000_0000_0000_0000 | (u128::from(salt) << 16) | self.step as u128,
        ))
    }

    fn fallback_token(&self) -> ClaimToken {
        ClaimToken {
            id: self.model.ever.first().copied().unwrap_or(JobId(1)),
            attempt: 1,
            claim_id: self.forged_claim_id(0),
        }
    }

    fn token(&self, r: TokenRef) -> ClaimToken {
        match r {
            TokenRef::Latest => self.model.issued.last().copied().unwrap_or_else(|| self.fallback_token()),
            TokenRef::Issued(i) => self.issued(i).unwrap_or_else(|| self.fallback_token()),
            TokenRef::CurrentOf(j) => self
                .model
                .jobs
                .get(&self.job_id(j))
                .and_then(Job::token)
                .unwrap_or_else(|| self.token(TokenRef::Latest)),
            TokenRef::Forged(i, forgery) => {
                let t = self.issued(i).unwrap_or_else(|| self.fallback_token());
                match forgery {
                    Forgery::FreshClaimId => ClaimToken { claim_id: self.forged_claim_id(1), ..t },
                    Forgery::OtherClaimId(k) => {
                        ClaimToken { claim_id: self.issued(k).map_or(self.forged_claim_id(2), |o| o.claim_id), ..t }
                    }
                    Forgery::OtherJob(k) => ClaimToken { id: self.job_id(JobRef::Ever(k)), ..t },
                    Forgery::UnknownJob => ClaimToken { id: JobId(self.model.next_id() + 1000), ..t },
                    Forgery::NextAttempt => ClaimToken { attempt: t.attempt.wrapping_add(1), ..t },
                    Forgery::PrevAttempt => ClaimToken { attempt: t.attempt.wrapping_sub(1), ..t },
                    Forgery::ZeroAttempt => ClaimToken { attempt: 0, ..t },
                    Forgery::MaxAttempt => ClaimToken { attempt: u32::MAX, ..t },
                    Forgery::NilClaimId => ClaimToken { claim_id: ClaimId(Uuid::nil()), ..t },
                }
            }
        }
    }

    fn plan(&mut self, spec: &JobSpec) -> Planned {
        self.model.seq += 1;
        Planned {
            queue: spec.queue.name().to_string(),
            payload: format!("payload-{}", self.model.seq).into_bytes(),
            key: spec.key.map(|key| key.name().to_string()),
            priority: spec.priority.value(),
            delay: Duration::from_millis(spec.delay.ms() as u64),
            max_attempts: spec.attempts.value(),
            group: spec.group.map(|g| g.name().to_string()),
        }
    }

    /// True when enqueuing `jobs` would create more rows than [`MAX_LIVE_JOBS`].
    fn too_many(&self, jobs: &[Planned]) -> bool {
        let mut keys = BTreeSet::new();
        let new = jobs
            .iter()
            .filter(|j| match &j.key {
                None => true,
                Some(k) => self.model.by_key(&j.queue, k).is_none() && keys.insert((j.queue.clone(), k.clone())),
            })
            .count();
        self.model.jobs.len() + new > MAX_LIVE_JOBS
    }

    // ------------------------------------------------------------ one step

    fn apply(&mut self, op: &QueueOp) -> Check {
        let now = self.now();
        match *op {
            QueueOp::Enqueue(spec) => {
                let job = self.plan(&spec);
                if self.too_many(std::slice::from_ref(&job)) {
                    return Ok(());
                }
                let got = self.q().enqueue(job.new_job());
                self.count("enqueue", got.is_ok());
                match got {
                    Ok(e) => self.model.insert(&job, e, now),
                    Err(e) => Err(format!("enqueue: the model expected Ok, the engine returned {e:?}")),
                }
            }
            QueueOp::EnqueueBatch { ref jobs, poison } => {
                let planned: Vec<Planned> = jobs.iter().take(MAX_BATCH_JOBS).map(|s| self.plan(s)).collect();
                if self.too_many(&planned) {
                    return Ok(());
                }
                let mut batch: Vec<NewJob> = planned.iter().map(Planned::new_job).collect();
                if poison {
                    batch.push(InvalidJob::EmptyPayload.job());
                }
                let got = self.q().enqueue_batch(batch);
                self.count("enqueue_batch", got.is_ok());
                if poison {
                    return self.expect("enqueue_batch with an invalid job", &Got::InvalidInput, &got_of(&got));
                }
                match got {
                    Ok(results) if results.len() == planned.len() => {
                        planned.iter().zip(results).try_for_each(|(job, e)| self.model.insert(job, e, now))
                    }
                    other => {
                        Err(format!("enqueue_batch: the model expected one Ok per job, the engine returned {other:?}"))
                    }
                }
            }
            QueueOp::EnqueueInvalid(bad) => {
                let got = got_of(&self.q().enqueue(bad.job()));
                self.count("enqueue_invalid", got == Got::Ok);
                self.expect("enqueue of an invalid job", &Got::InvalidInput, &got)
            }
            QueueOp::EnqueueTx { job: spec, commit } => {
                let job = self.plan(&spec);
                if self.too_many(std::slice::from_ref(&job)) {
                    return Ok(());
                }
                let got = self.backend.enqueue_tx(self.q(), job.new_job(), commit);
                self.count("enqueue_tx", got.is_ok());
                match got {
                    Ok(e) if commit => self.model.insert(&job, e, now),
                    Ok(e) => match (self.model.expect_insert(&job), e) {
                        (Some(existing), Enqueued::Duplicate(id)) if id == existing => Ok(()),
                        (None, Enqueued::New(id)) if id.0 >= self.model.next_id() => Ok(()),
                        (expected, other) => Err(format!(
                            "enqueue_tx (rolled back): returned {other:?}, the model expected {expected:?} or a new id"
                        )),
                    },
                    Err(e) => Err(format!("enqueue_tx: the model expected Ok, the engine returned {e:?}")),
                }
            }
            QueueOp::RenewAll { ref tokens, lease } => {
                let tokens: Vec<ClaimToken> = tokens.iter().take(4).map(|r| self.token(*r)).collect();
                let got = self.q().renew_all(&tokens, lease.duration());
                self.count("renew_all", got.as_ref().is_ok_and(|r| r.iter().any(Result::is_ok)));
                let Some(lease_ms) = lease.valid_ms() else {
                    return self.expect("renew_all with an invalid lease", &Got::InvalidInput, &got_of(&got));
                };
                let results =
                    got.map_err(|e| format!("renew_all: the model expected Ok, the engine returned {e:?}"))?;
                if results.len() != tokens.len() {
                    return Err(format!("renew_all returned {} results for {} tokens", results.len(), tokens.len()));
                }
                for (t, result) in tokens.iter().zip(results) {
                    self.expect(&format!("renew_all of {t:?}"), &self.model.owned(t, now), &got_of(&result))?;
                    if let Ok(until) = result {
                        if until != now + lease_ms {
                            return Err(format!("renew_all returned lease end {until}, expected {}", now + lease_ms));
                        }
                        let j = self.model.job_mut(t.id);
                        j.lease_until = Some(until);
                        j.heartbeat_at = Some(now);
                    }
                }
                Ok(())
            }
            QueueOp::CompleteAll(ref tokens) => {
                let tokens: Vec<ClaimToken> = tokens.iter().take(4).map(|r| self.token(*r)).collect();
                let got = self.q().complete_all(&tokens);
                self.count("complete_all", got.as_ref().is_ok_and(|r| r.iter().any(Result::is_ok)));
                let results =
                    got.map_err(|e| format!("complete_all: the model expected Ok, the engine returned {e:?}"))?;
                if results.len() != tokens.len() {
                    return Err(format!("complete_all returned {} results for {} tokens", results.len(), tokens.len()));
                }
                for (t, result) in tokens.iter().zip(results) {
                    let got = got_of(&result);
                    self.expect(&format!("complete_all of {t:?}"), &self.model.owned(t, now), &got)?;
                    if got == Got::Ok {
                        self.model.settle(t.id, JobState::Completed, now);
                    }
                }
                Ok(())
            }
            QueueOp::Claim { queue, worker, lease } => self.claim(queue, worker, lease, None),
            QueueOp::ClaimBatch { queue, worker, lease, limit } => self.claim(queue, worker, lease, Some(limit)),
            QueueOp::Renew { token, lease } => {
                let t = self.token(token);
                let got = self.q().renew(&t, lease.duration());
                self.count("renew", got.is_ok());
                let Some(lease_ms) = lease.valid_ms() else {
                    return self.expect("renew with an invalid lease", &Got::InvalidInput, &got_of(&got));
                };
                let expected = self.model.owned(&t, now);
                self.expect("renew", &expected, &got_of(&got))?;
                if let Ok(until) = got {
                    if until != now + lease_ms {
                        return Err(format!("renew returned lease end {until}, the model expected {}", now + lease_ms));
                    }
                    let j = self.model.job_mut(t.id);
                    j.lease_until = Some(until);
                    j.heartbeat_at = Some(now);
                }
                Ok(())
            }
            QueueOp::Owns(token) => {
                let t = self.token(token);
                let got = self.q().owns(&t);
                self.count("owns", matches!(got, Ok(true)));
                let expected = self.model.owned(&t, now) == Got::Ok;
                // `owns` inside a transaction of the caller's (for SQLite, `fenceq::SqliteStore::owns_in`).
                let inside = self.q().with_connection(|c| <B::Store as Store>::owns(c, TokenAt { token: &t, now }));
                if !matches!(inside, Ok(owns) if owns == expected) {
                    return Err(format!(
                        "owns_in({t:?}): the model expected Ok({expected}), the engine returned {inside:?}"
                    ));
                }
                match got {
                    Ok(owns) if owns == expected => Ok(()),
                    other => {
                        Err(format!("owns({t:?}): the model expected Ok({expected}), the engine returned {other:?}"))
                    }
                }
            }
            QueueOp::Complete(token) => {
                let t = self.token(token);
                let got = got_of(&self.q().complete(&t));
                self.count("complete", got == Got::Ok);
                self.expect("complete", &self.model.owned(&t, now), &got)?;
                if got == Got::Ok {
                    self.model.settle(t.id, JobState::Completed, now);
                }
                Ok(())
            }
            QueueOp::CompleteWith { token, act } => self.with_closure(token, act, true),
            QueueOp::WithOwnership { token, act } => self.with_closure(token, act, false),
            QueueOp::Retry { token, backoff, error } => {
                let t = self.token(token);
                let text = error.text("retry");
                let got = self.q().retry(&t, backoff.backoff(), &text);
                self.count("retry", got.is_ok());
                let expected = self.model.owned(&t, now);
                self.expect("retry", &expected, &got_of(&got))?;
                let Ok(retried) = got else { return Ok(()) };
                let j = self.model.jobs[&t.id].clone();
                if j.attempt >= j.max_attempts {
                    if retried != Retried::Exhausted {
                        return Err(format!("retry at the last attempt returned {retried:?}, expected Exhausted"));
                    }
                    self.model.exhaust_claim(t.id, clip(&text), now);
                    return Ok(());
                }
                let Retried::Scheduled(at) = retried else {
                    return Err(format!("retry with attempts left returned {retried:?}, expected Scheduled"));
                };
                let (lo, hi) = match backoff.backoff() {
                    Backoff::After(d) => {
                        let at = now.saturating_add(dur_ms(d));
                        (at, at)
                    }
                    Backoff::Policy(p) => (
                        now.saturating_add(dur_ms(p.delay(t.attempt, 0.0))),
                        now.saturating_add(dur_ms(p.delay(t.attempt, 1.0))),
                    ),
                };
                if at < lo || at > hi {
                    return Err(format!(
                        "retry scheduled at T0{:+}, the model expected T0{:+}..=T0{:+}",
                        at - T0,
                        lo - T0,
                        hi - T0
                    ));
                }
                let j = self.model.job_mut(t.id);
                j.state = JobState::Pending;
                j.lease_until = None;
                j.run_at = at;
                j.last_error = Some(clip(&text));
                self.model.record(t.id, AttemptOutcome::Retry, now);
                Ok(())
            }
            QueueOp::Exhaust { token, error } => {
                let t = self.token(token);
                let text = error.text("exhaust");
                let got = got_of(&self.q().exhaust(&t, &text));
                self.count("exhaust", got == Got::Ok);
                self.expect("exhaust", &self.model.owned(&t, now), &got)?;
                if got == Got::Ok {
                    self.model.exhaust_claim(t.id, clip(&text), now);
                }
                Ok(())
            }
            QueueOp::MarkUnknown { token, evidence } => {
                let t = self.token(token);
                let text = evidence.text("evidence");
                let got = got_of(&self.q().mark_unknown(&t, &text));
                self.count("mark_unknown", got == Got::Ok);
                self.expect("mark_unknown", &self.model.owned(&t, now), &got)?;
                if got == Got::Ok {
                    self.model.settle(t.id, JobState::Unknown, now);
                    self.model.job_mut(t.id).last_error = Some(clip(&text));
                    self.model.record(t.id, AttemptOutcome::Unknown, now);
                }
                Ok(())
            }
            QueueOp::Park { token, timeout, reason } => {
                let t = self.token(token);
                let text = reason.text("park");
                let got = got_of(&self.q().park(&t, timeout.duration(), &text));
                self.count("park", got == Got::Ok);
                if matches!(timeout, ParkSel::Zero | ParkSel::TooLong) {
                    return self.expect("park with an invalid timeout", &Got::InvalidInput, &got);
                }
                self.expect("park", &self.model.owned(&t, now), &got)?;
                if got == Got::Ok {
                    let j = self.model.job_mut(t.id);
                    j.state = JobState::Waiting;
                    j.lease_until = None;
                    j.wait_until = Some(now + dur_ms(timeout.duration()));
                    j.last_error = Some(clip(&text));
                    self.model.record(t.id, AttemptOutcome::Parked, now);
                }
                Ok(())
            }
            QueueOp::Snooze { token, delay, scope, cap, reason } => {
                let t = self.token(token);
                let text = reason.text("snooze");
                let snooze =
                    Snooze::new(delay.duration()).scope(scope.scope()).reason(text.clone()).max_snoozes(cap.value());
                let got = self.q().snooze(&t, snooze);
                self.count("snooze", got.is_ok());
                if delay == SnoozeSel::TooLong {
                    return self.expect("snooze beyond a year", &Got::InvalidInput, &got_of(&got));
                }
                self.expect("snooze", &self.model.owned(&t, now), &got_of(&got))?;
                let Ok(snoozed) = got else { return Ok(()) };
                let run_at = now.saturating_add(dur_ms(delay.duration()));
                let (queue, snoozes) = {
                    let j = &self.model.jobs[&t.id];
                    (j.queue.clone(), j.snoozes)
                };
                let reason = clip(&text);
                if snoozes >= cap.value() {
                    if snoozed != Retried::Exhausted {
                        return Err(format!("a snooze past the cap returned {snoozed:?}, expected Exhausted"));
                    }
                    let error = clip(&format!(
                        "snoozed {} times, the cap (max_snoozes): exhausted instead of snoozing again ({reason})",
                        cap.value()
                    ));
                    self.model.exhaust_claim(t.id, error, now);
                } else {
                    if snoozed != Retried::Scheduled(run_at) {
                        return Err(format!("snooze returned {snoozed:?}, expected Scheduled(T0{:+})", run_at - T0));
                    }
                    let j = self.model.job_mut(t.id);
                    j.state = JobState::Pending;
                    j.lease_until = None;
                    j.run_at = run_at;
                    j.last_error = Some(reason.clone());
                    j.max_attempts += 1;
                    j.snoozes += 1;
                    let outcome = match scope {
                        ScopeSel::Job => AttemptOutcome::Snooze,
                        _ => AttemptOutcome::Backoff,
                    };
                    self.model.record(t.id, outcome, now);
                }
                if scope == ScopeSel::Queue {
                    self.model.back_off(&queue, run_at, reason, now);
                }
                Ok(())
            }
            QueueOp::ClearBackoff(queue) => {
                let name = queue.name();
                let got = self.q().clear_backoff(name);
                self.count("clear_backoff", got.is_ok());
                let expected = self.model.backoff(name, now).is_some();
                match got {
                    Ok(cleared) if cleared == expected => {
                        if cleared {
                            self.model.backoffs.remove(name);
                        }
                        Ok(())
                    }
                    other => {
                        Err(format!("clear_backoff({name}) returned {other:?}, the model expected Ok({expected})"))
                    }
                }
            }
            QueueOp::Resume(token) => {
                let t = self.token(token);
                let got = got_of(&self.q().resume(&t));
                self.count("resume", got == Got::Ok);
                let expected = match self.model.identified(&t, JobState::Waiting) {
                    // Past the deadline a resume is refused, reaped or not (the clock decides).
                    Got::Ok if self.model.jobs[&t.id].wait_until.is_some_and(|w| w <= now) => Got::WaitExpired,
                    other => other,
                };
                self.expect("resume", &expected, &got)?;
                if got == Got::Ok {
                    let j = self.model.job_mut(t.id);
                    j.state = JobState::Pending;
                    j.wait_until = None;
                    j.run_at = now;
                    j.max_attempts += 1;
                }
                Ok(())
            }
            QueueOp::Cancel(job) => {
                let id = self.job_id(job);
                let got = got_of(&self.q().cancel(id));
                self.count("cancel", got == Got::Ok);
                let from = [JobState::Pending, JobState::Waiting, JobState::Running];
                self.expect("cancel", &self.model.by_id(id, &from), &got)?;
                if got == Got::Ok {
                    self.model.settle(id, JobState::Cancelled, now);
                    self.model.job_mut(id).wait_until = None;
                    self.model.job_mut(id).held_by_group = false;
                    self.model.decide(id, "cancel", now);
                }
                Ok(())
            }
            QueueOp::Acknowledge(token) => {
                let t = self.token(token);
                let got = got_of(&self.q().acknowledge(&t));
                self.count("acknowledge", got == Got::Ok);
                self.expect("acknowledge", &self.model.identified(&t, JobState::Exhausted), &got)?;
                if got == Got::Ok && self.model.jobs[&t.id].acknowledged_at.is_none() {
                    // A repeat changes nothing, not even the recorded decision.
                    self.model.job_mut(t.id).acknowledged_at = Some(now);
                    self.model.decide(t.id, "acknowledge", now);
                }
                Ok(())
            }
            QueueOp::Replay(job) => {
                let id = self.job_id(job);
                let got = got_of(&self.q().replay(id));
                self.count("replay", got == Got::Ok);
                self.expect("replay", &self.model.by_id(id, &[JobState::Exhausted]), &got)?;
                if got == Got::Ok {
                    let j = self.model.job_mut(id);
                    j.state = JobState::Pending;
                    j.attempt = 0;
                    j.snoozes = 0;
                    j.run_at = now;
                    j.settled_at = None;
                    j.exhausted_at = None;
                    j.acknowledged_at = None;
                    // Back held; the step's release hands the group to it unless a job holds it.
                    j.held_by_group = j.group.is_some();
                    self.model.decide(id, "replay", now);
                }
                Ok(())
            }
            QueueOp::Resolve { token, resolution } => {
                let t = self.token(token);
                let r = match resolution {
                    ResolutionSel::Completed => Resolution::Complete,
                    ResolutionSel::Retry => Resolution::Retry,
                    ResolutionSel::Exhaust => Resolution::Exhaust,
                };
                let got = got_of(&self.q().resolve(&t, r));
                self.count("resolve", got == Got::Ok);
                self.expect("resolve", &self.model.identified(&t, JobState::Unknown), &got)?;
                if got == Got::Ok {
                    match r {
                        Resolution::Complete => {
                            let j = self.model.job_mut(t.id);
                            j.state = JobState::Completed;
                            j.settled_at = Some(now);
                        }
                        Resolution::Retry => {
                            let j = self.model.job_mut(t.id);
                            j.state = JobState::Pending;
                            j.run_at = now;
                            j.settled_at = None;
                            j.max_attempts = j.max_attempts.max(j.attempt + 1);
                            j.held_by_group = j.group.is_some();
                        }
                        Resolution::Exhaust => self.model.exhaust(t.id, None, now),
                    }
                    let action = match r {
                        Resolution::Complete => "resolve complete",
                        Resolution::Retry => "resolve retry",
                        Resolution::Exhaust => "resolve exhaust",
                    };
                    self.model.decide(t.id, action, now);
                }
                Ok(())
            }
            QueueOp::Reap => {
                let waiting_before: BTreeSet<JobId> =
                    self.model.jobs.values().filter(|j| j.state == JobState::Waiting).map(|j| j.id).collect();
                let got = self.q().reap();
                self.count("reap", got.is_ok());
                let expected = self.model.reap(now);
                match got {
                    Ok(r) if r == expected => {}
                    other => {
                        return Err(format!("reap: the model expected Ok({expected:?}), the engine returned {other:?}"))
                    }
                }
                // Invariant 7: a parked job is never reclaimed as stale (only its deadline ends it).
                for id in waiting_before {
                    let j = &self.model.jobs[&id];
                    if j.state == JobState::Pending || j.state == JobState::Running {
                        return Err(format!("invariant 7: reap turned waiting job {id} into {:?}", j.state));
                    }
                }
                Ok(())
            }
            QueueOp::Prune(sel) => self.prune(sel),
            QueueOp::ExhaustionsPage(limit) => self.exhaustions_page(limit),
            QueueOp::UnknownsPage { after, limit } => {
                let cursor = after.map(|j| Cursor(self.job_id(j).0));
                let got = self.q().unknowns(cursor, limit.value());
                self.count("unknowns", got.is_ok());
                if limit == PageLimit::Zero {
                    return self.expect("unknowns with limit 0", &Got::InvalidInput, &got_of(&got));
                }
                let page = self.model.page(JobState::Unknown, cursor.map_or(0, |c| c.0), limit.value());
                let items = page.items.into_iter().map(unknown_of).collect();
                let expected = Page { items, next: page.next };
                match got {
                    Ok(page) if page == expected => Ok(()),
                    other => {
                        Err(format!("unknowns: the model expected Ok({expected:?}), the engine returned {other:?}"))
                    }
                }
            }
            QueueOp::Advance(step) => {
                self.clock.set(now + step.ms());
                Ok(())
            }
            QueueOp::ClockBack(back) => {
                self.clock.set((now - back.ms()).max(0));
                self.model.limits.clock_stepped_back();
                Ok(())
            }
            QueueOp::Reopen => {
                if !self.backend.reopens() {
                    return Ok(());
                }
                self.queue = None;
                let queue = self.backend.reopen(&self.clock).map_err(|e| format!("reopening the queue: {e:?}"))?;
                self.queue = Some(queue);
                self.count("reopen", true);
                Ok(())
            }
            QueueOp::Check => {
                self.count("check", true);
                self.full_check()
            }
            QueueOp::SetLimits { queue, limits } => self.set_limits(queue, &limits.limits(), true),
            QueueOp::SetBadLimits { queue, bad } => self.set_limits(queue, &bad.limits(), false),
            QueueOp::ClearLimits(queue) => {
                let got = got_of(&self.q().clear_limits(queue.name()));
                self.count("clear_limits", got == Got::Ok);
                self.expect("clear_limits", &Got::Ok, &got)?;
                self.model.limits.set(queue.name(), &fenceq::Limits::default());
                Ok(())
            }
            QueueOp::ReadLimits(queue) => {
                let got = self.q().limits(queue.name());
                self.count("limits", got.is_ok());
                self.read_limits(queue, got)
            }
        }
    }

    /// `set_limits` of `limits`, which the store takes when `valid`, else refuses with
    /// `InvalidInput`, storing nothing (read back at once).
    fn set_limits(&mut self, queue: QueueSel, limits: &fenceq::Limits, valid: bool) -> Check {
        let got = got_of(&self.q().set_limits(queue.name(), limits));
        self.count("set_limits", got == Got::Ok);
        if valid {
            self.expect(&format!("set_limits({limits})"), &Got::Ok, &got)?;
            self.model.limits.set(queue.name(), limits);
            return Ok(());
        }
        self.expect(&format!("set_limits of bad limits {limits:?}"), &Got::InvalidInput, &got)?;
        let stored = self.q().limits(queue.name());
        self.read_limits(queue, stored)
    }

    /// What `limits` returned for `queue`, against the model's.
    fn read_limits(&mut self, queue: QueueSel, got: fenceq::Result<fenceq::Limits>) -> Check {
        let expected = self.model.limits.of(queue.name());
        match got {
            Ok(limits) if limits == expected => Ok(()),
            other => Err(format!(
                "limits({}): the model expected Ok({expected:?}), the engine returned {other:?}",
                queue.name()
            )),
        }
    }

    fn claim(&mut self, queue: ClaimQueue, worker: WorkerSel, lease: LeaseSel, limit: Option<BatchLimit>) -> Check {
        let now = self.now();
        let name = queue.name();
        let got = match limit {
            None => self.q().claim(&name, worker.name(), lease.duration()).map(|c| c.into_iter().collect::<Vec<_>>()),
            Some(limit) => self.q().claim_batch(&name, worker.name(), lease.duration(), limit.value()),
        };
        let op = if limit.is_some() { "claim_batch" } else { "claim" };
        self.count(op, got.as_ref().is_ok_and(|c| !c.is_empty()));
        let limit = limit.map_or(1, BatchLimit::value);
        let lease_ms = match lease.valid_ms() {
            Some(ms)
                if !matches!(queue, ClaimQueue::Empty | ClaimQueue::TooLong)
                    && worker != WorkerSel::Empty
                    && (1..=fenceq::MAX_BATCH).contains(&limit) =>
            {
                ms
            }
            _ => return self.expect(&format!("{op} with invalid input"), &Got::InvalidInput, &got_of(&got)),
        };
        let claimed: Vec<Claimed> = match got {
            Ok(c) => c,
            Err(e) => return Err(format!("{op}: the model expected Ok, the engine returned {e:?}")),
        };
        let taken = self.model.take_claim(&name, limit, now);
        // A limited claim starts no earlier than the queue's latest recorded start.
        let now = taken.at;
        self.stats.limited_claims += usize::from(taken.limited);
        self.stats.held_back += usize::from(taken.held_back);
        self.stats.deferred += taken.deferred;
        let expected = taken.ids;
        let ids: Vec<JobId> = claimed.iter().map(Claimed::id).collect();
        if ids != expected {
            let limits = self.model.limits.of(&name);
            return Err(format!(
                "{op}: claimed {ids:?}, the model (priority, run_at, id; limits: {limits}) expected {expected:?}"
            ));
        }
        for c in claimed {
            let before = self.model.jobs[&c.id()].clone();
            // Invariant 7: a parked job is never claimed.
            if before.state == JobState::Waiting {
                return Err(format!("invariant 7: claim handed out waiting job {}", c.id()));
            }
            // Invariant 2: a fresh claim id, attempt + 1.
            if !self.model.claim_ids.insert(c.token.claim_id) || c.token.claim_id.0.is_nil() {
                return Err(format!("invariant 2: claim of {} reused claim id {}", c.id(), c.token.claim_id));
            }
            if before.state == JobState::Running {
                // A reclaim: the attempt it takes over is recorded, at the claim's instant.
                self.model.record_reclaimed(c.id(), now);
            }
            self.model.claimed_at.insert(c.id(), now);
            let j = self.model.job_mut(c.id());
            j.state = JobState::Running;
            j.attempt += 1;
            j.claim_id = Some(c.token.claim_id);
            j.worker = Some(worker.name().to_string());
            j.lease_until = Some(now + lease_ms);
            j.heartbeat_at = Some(now);
            j.wait_until = None;
            let expected = Claimed {
                token: ClaimToken { id: j.id, attempt: j.attempt, claim_id: c.token.claim_id },
                queue: j.queue.clone(),
                key: j.key.clone(),
                payload: j.payload.clone(),
                priority: j.priority,
                max_attempts: j.max_attempts,
                lease_until: now + lease_ms,
                last_error: j.last_error.clone(),
                group: j.group.clone(),
                claimed_at: now,
            };
            if c != expected {
                return Err(format!(
                    "invariant 2 / claim record: the engine returned {c:?}, the model expected {expected:?}"
                ));
            }
            if c.token.attempt != before.attempt + 1 || c.token.attempt > c.max_attempts {
                return Err(format!("invariant 2/6: claim moved attempt {} to {}", before.attempt, c.token.attempt));
            }
            self.model.issued.push(c.token);
            self.stats.claims += 1;
        }
        self.model.claimed_under_limits(&name, &ids, now)
    }

    fn with_closure(&mut self, token: TokenRef, act: ClosureAct, complete: bool) -> Check {
        let now = self.now();
        let t = self.token(token);
        let ran = Cell::new(false);
        let queue = self.q().clone();
        let write = |tx: &<B::Store as Store>::Tx| -> fenceq::Result<()> {
            ran.set(true);
            B::write_domain(tx, t.id.0, t.attempt, if complete { "complete_with" } else { "with_ownership" })?;
            match act {
                ClosureAct::Write => Ok(()),
                ClosureAct::Fail => Err(Error::domain("injected domain failure")),
                ClosureAct::Nested => {
                    queue.enqueue(NewJob::new("a", b"nested".to_vec()))?;
                    Ok(())
                }
                ClosureAct::Panic => std::panic::resume_unwind(Box::new("injected closure panic")),
            }
        };
        let name = if complete { "complete_with" } else { "with_ownership" };
        let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if complete {
                got_of(&queue.complete_with(&t, write))
            } else {
                got_of(&queue.with_ownership(&t, write))
            }
        }));
        // A panic that left the closure reaches the caller; `Got::Other` records it.
        let got = called.unwrap_or_else(|_| Got::Other("the closure's panic".into()));
        self.count(name, got == Got::Ok);
        let owned = self.model.owned(&t, now);
        if owned != Got::Ok && ran.get() {
            return Err(format!("{name}: the closure ran although the token does not own its job ({owned:?})"));
        }
        let expected = match (owned, act) {
            (Got::Ok, ClosureAct::Write) => Got::Ok,
            (Got::Ok, ClosureAct::Fail) => Got::Domain,
            (Got::Ok, ClosureAct::Nested) => Got::Nested,
            (Got::Ok, ClosureAct::Panic) => Got::Other("the closure's panic".into()),
            (lost, _) => lost,
        };
        self.expect(name, &expected, &got)?;
        if got == Got::Ok {
            self.model.domain.push((t.id.0, t.attempt));
            if complete {
                self.model.settle(t.id, JobState::Completed, now);
            } else {
                // The owned write's commit extends the lease from the commit by the length
                // the claim or last renewal granted, never shortening it.
                let j = self.model.job_mut(t.id);
                if let (Some(until), Some(granted_at)) = (j.lease_until, j.heartbeat_at) {
                    let extended = now.saturating_add(until.saturating_sub(granted_at).max(0));
                    if extended > until {
                        j.lease_until = Some(extended);
                        j.heartbeat_at = Some(now);
                    }
                }
            }
        }
        Ok(())
    }

    fn prune(&mut self, sel: RetentionSel) -> Check {
        let now = self.now();
        let retention = sel.retention();
        let got = self.q().prune(&retention);
        self.count("prune", got.as_ref().is_ok_and(|r| r.deleted() > 0));
        if matches!(sel, RetentionSel::ZeroBatch | RetentionSel::HugeBatch) {
            return self.expect("prune with an invalid batch size", &Got::InvalidInput, &got_of(&got));
        }
        let report = got.map_err(|e| format!("prune: the model expected Ok, the engine returned {e:?}"))?;
        let (settled, acknowledged) = self.model.prunable(&retention, now);
        let batch = u64::from(retention.batch_size);
        let batches = (settled.len() as u64).div_ceil(batch) + (acknowledged.len() as u64).div_ceil(batch);
        let expected =
            fenceq::PruneReport { settled: settled.len() as u64, acknowledged: acknowledged.len() as u64, batches };
        if report != expected {
            return Err(format!("prune: the engine reported {report:?}, the model expected {expected:?}"));
        }
        for id in settled.into_iter().chain(acknowledged) {
            let j = self.model.jobs.remove(&id).expect("prunable rows exist");
            // Invariant 7/8: only completed, cancelled and acknowledged exhausted rows go.
            if !(matches!(j.state, JobState::Completed | JobState::Cancelled)
                || (j.state == JobState::Exhausted && j.acknowledged_at.is_some()))
            {
                return Err(format!("invariant 7: the model pruned protected row {j:?}"));
            }
            self.model.pruned.insert(id);
            self.model.terminal.remove(&id);
            // Its records go with it.
            self.model.attempts.remove(&id);
            self.model.claimed_at.remove(&id);
        }
        Ok(())
    }

    fn exhaustions_page(&mut self, limit: PageLimit) -> Check {
        let pass = self.model.pass.get_or_insert_with(|| Pass {
            cursor: None,
            stable: self
                .model
                .jobs
                .values()
                .filter(|j| j.state == JobState::Exhausted && j.acknowledged_at.is_none())
                .map(|j| j.id)
                .collect(),
            returned: BTreeSet::new(),
        });
        let cursor = pass.cursor;
        let got = self.q().exhaustions(cursor, limit.value());
        self.count("exhaustions", got.as_ref().is_ok_and(|p| !p.items.is_empty()));
        if limit == PageLimit::Zero {
            return self.expect("exhaustions with limit 0", &Got::InvalidInput, &got_of(&got));
        }
        let expected = self.model.page(JobState::Exhausted, cursor.map_or(0, |c| c.0), limit.value());
        let page = match got {
            Ok(page) if page == expected => page,
            other => {
                return Err(format!("exhaustions: the model expected Ok({expected:?}), the engine returned {other:?}"))
            }
        };
        let pass = self.model.pass.as_mut().expect("opened above");
        for item in &page.items {
            if !pass.returned.insert(item.token.id) {
                return Err(format!("invariant 10: the exhaustion pass returned job {} twice", item.token.id));
            }
        }
        pass.cursor = page.next;
        if page.next.is_none() {
            let pass = self.model.pass.take().expect("opened above");
            let missed: Vec<&JobId> = pass.stable.difference(&pass.returned).collect();
            if !missed.is_empty() {
                return Err(format!("invariant 10: the exhaustion pass missed {missed:?}"));
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------ checks

    /// After every step: the invariants on the real table and a row-by-row comparison.
    fn after_step(&mut self) -> Check {
        if let Some(pass) = &mut self.model.pass {
            let jobs = &self.model.jobs;
            pass.stable.retain(|id| {
                jobs.get(id).is_some_and(|j| j.state == JobState::Exhausted && j.acknowledged_at.is_none())
            });
        }
        let now = self.now();
        let rows = self
            .q()
            .list(&ListFilter { limit: fenceq::MAX_BATCH, ..ListFilter::default() })
            .map_err(|e| format!("listing the table: {e:?}"))?;
        self.stats.max_rows = self.stats.max_rows.max(rows.len());
        let mut claim_ids = BTreeSet::new();
        for r in &rows {
            check_row(r)?;
            if let Some(c) = r.claim_id {
                // Invariant 2: a claim id names one claim of one row, and only ids claims issued.
                if !claim_ids.insert(c) {
                    return Err(format!("invariant 2: claim id {c} is on two rows"));
                }
                if !self.model.claim_ids.contains(&c) {
                    return Err(format!("invariant 2: row {} carries claim id {c} that no claim returned", r.id));
                }
            }
            // Invariant 4: completed (and cancelled) rows never change again.
            if let Some(t) = self.model.terminal.get(&r.id) {
                if t != r {
                    return Err(format!("invariant 4: terminal row changed from {t:?} to {r:?}"));
                }
            }
        }
        // Invariant 8: every enqueued job is in exactly one row until pruned; row by row equal.
        let real: Vec<JobId> = rows.iter().map(|r| r.id).collect();
        let model: Vec<JobId> = self.model.jobs.keys().copied().collect();
        if real != model {
            return Err(format!("invariant 8: the table holds ids {real:?}, the model {model:?}"));
        }
        for (r, m) in rows.iter().zip(self.model.jobs.values()) {
            if r != m {
                return Err(format!("row {} differs:\n    engine {r:?}\n    model  {m:?}", r.id));
            }
        }
        // Invariant 1: a job under a live lease has exactly one live claim, its row's current
        // token; every other token ever issued for it is refused.
        for r in rows.iter().filter(|r| r.state == JobState::Running && r.lease_until.is_some_and(|l| l > now)) {
            let current = r.token();
            for t in self.model.issued.iter().filter(|t| t.id == r.id) {
                let owns = self.q().owns(t).map_err(|e| format!("owns: {e:?}"))?;
                if owns != (Some(*t) == current) {
                    return Err(format!("invariant 1: owns({t:?}) is {owns} while the row's claim is {current:?}"));
                }
            }
        }
        for r in rows {
            if matches!(r.state, JobState::Completed | JobState::Cancelled) {
                self.model.terminal.entry(r.id).or_insert(r);
            }
        }
        // Domain rows: exactly those of committed `complete_with` / `with_ownership` calls.
        let domain = self.backend.domain(self.q()).map_err(|e| format!("reading the domain table: {e:?}"))?;
        if !domain.iter().copied().eq(self.model.domain.iter().map(|&(job, attempt)| (job, i64::from(attempt)))) {
            return Err(format!("domain rows {domain:?}, the model expected {:?}", self.model.domain));
        }
        // The records of the jobs whose attempts this step ended (every job's at a full check).
        for id in std::mem::take(&mut self.model.recorded) {
            self.check_records(id)?;
        }
        Ok(())
    }

    /// Job `id`'s records of attempts, as the store returns them, against the model's.
    fn check_records(&self, id: JobId) -> Check {
        let got = self.q().attempts(id, fenceq::MAX_BATCH).map_err(|e| format!("attempts({id}): {e:?}"))?;
        let expected = self.model.records_of(id);
        if got != expected {
            return Err(format!("attempts({id}):\n    engine {got:?}\n    model  {expected:?}"));
        }
        Ok(())
    }

    /// `owns` for every token ever issued (invariants 1, 3 and 5), `stats`, and the previews.
    fn full_check(&mut self) -> Check {
        let now = self.now();
        let mut live: BTreeMap<JobId, ClaimToken> = BTreeMap::new();
        for t in self.model.issued.clone() {
            let owns = self.q().owns(&t).map_err(|e| format!("owns: {e:?}"))?;
            let expected = self.model.owned(&t, now) == Got::Ok;
            if owns != expected {
                let dead = match self.model.jobs.get(&t.id) {
                    None => "its job was pruned",
                    Some(j) if j.claim_id != Some(t.claim_id) || j.attempt != t.attempt => "a later claim replaced it",
                    Some(_) => "its job is not running under a live lease",
                };
                return Err(format!("invariants 3/5: owns({t:?}) is {owns}, but {dead}"));
            }
            if owns {
                if let Some(other) = live.insert(t.id, t) {
                    return Err(format!("invariant 1: job {} has two live claims {other:?} and {t:?}", t.id));
                }
            }
        }
        for &id in &self.model.ever {
            let job = self.q().job(id).map_err(|e| format!("job({id}): {e:?}"))?;
            if job.as_ref() != self.model.jobs.get(&id) {
                return Err(format!("job({id}) returned {job:?}, the model has {:?}", self.model.jobs.get(&id)));
            }
            // Every job's history, a pruned job's too (none: its records went with it).
            self.check_records(id)?;
        }
        fenceq::Checkpointer::new(self.q().clone()).run_once().map_err(|e| format!("checkpoint: {e:?}"))?;
        let stats = self.q().stats().map_err(|e| format!("stats: {e:?}"))?;
        let expected = self.model.stats(now);
        if stats != expected {
            return Err(format!("stats: the engine reported {stats:?}, the model expected {expected:?}"));
        }
        let all = self.q().all_limits().map_err(|e| format!("all_limits: {e:?}"))?;
        if all != self.model.limits.all() {
            return Err(format!(
                "all_limits: the engine returned {all:?}, the model expected {:?}",
                self.model.limits.all()
            ));
        }
        let reap = self.q().reap_preview().map_err(|e| format!("reap_preview: {e:?}"))?;
        let expected = self.model.clone().reap(now);
        if reap != expected {
            return Err(format!("reap_preview: the engine reported {reap:?}, the model expected {expected:?}"));
        }
        let retention = Retention::default();
        let prune = self.q().prune_preview(&retention).map_err(|e| format!("prune_preview: {e:?}"))?;
        let (settled, acknowledged) = self.model.prunable(&retention, now);
        if (prune.settled, prune.acknowledged) != (settled.len() as u64, acknowledged.len() as u64) {
            return Err(format!(
                "prune_preview: the engine reported {prune:?}, the model {settled:?} {acknowledged:?}"
            ));
        }
        Ok(())
    }
}

/// The invariants one row must satisfy on its own (DESIGN 6 and the schema's CHECKs),
/// independent of any model.
pub fn check_row(r: &Job) -> Result<(), String> {
    let fail = |what: &str| Err(format!("{what}: {r:?}"));
    if r.attempt > r.max_attempts {
        return fail("invariant 6: attempt above max_attempts");
    }
    if r.state == JobState::Pending && r.attempt >= r.max_attempts {
        return fail("invariant 6: pending without attempts left");
    }
    if (r.state == JobState::Running) != (r.lease_until.is_some() && r.worker.is_some()) {
        return fail("a running row has a lease and a worker, and only a running row has a lease");
    }
    if (r.state == JobState::Waiting) != r.wait_until.is_some() {
        return fail("a waiting row has a deadline, and only a waiting row has one");
    }
    let keeps_claim =
        matches!(r.state, JobState::Running | JobState::Waiting | JobState::Exhausted | JobState::Unknown);
    if keeps_claim && r.claim_id.is_none() {
        return fail("a claimed row carries its claim id");
    }
    if r.acknowledged_at.is_some() && r.state != JobState::Exhausted {
        return fail("only an exhausted row is acknowledged");
    }
    if r.state == JobState::Exhausted && r.exhausted_at.is_none() {
        return fail("an exhausted row records when");
    }
    Ok(())
}
