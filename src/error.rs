//! The one public error enum and the mapping of SQLite result codes onto it.

use crate::job::{ClaimToken, JobId, JobState};
use std::sync::Arc;

/// Result type of every fallible fenceq call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a token no longer owns its job (carried by [`Error::OwnershipLost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The lease ran out at the clock's now; the job may be reclaimed at any moment.
    LeaseExpired,
    /// Another claim (or a replay) replaced this one: the attempt or claim id differs.
    Superseded,
    /// The job left `running` (settled, cancelled, reaped); the state it is in now.
    NotRunning(JobState),
    /// The row no longer exists (it was pruned).
    Missing,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LostReason::LeaseExpired => f.write_str("its lease expired"),
            LostReason::Superseded => f.write_str("another claim replaced it"),
            LostReason::NotRunning(s) => write!(f, "the job is {s}"),
            LostReason::Missing => f.write_str("the job no longer exists"),
        }
    }
}

/// Why a call found the database busy ([`Error::Busy`]). Whatever the cause, nothing was
/// written and the call may be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BusyCause {
    /// What the call needed stayed locked past the busy timeout: another process's write
    /// lock (SQLite); a row or table lock, a statement that ran past its timeout, or no free
    /// connection slot on the server (PostgreSQL).
    Locked,
    /// Another thread's closure (`transaction`, `with_ownership`, `complete_with`, an
    /// in-memory queue's `with_connection`) held the queue's one writer past the busy
    /// timeout (SQLite). A closure that waits for a call of its own queue from another thread
    /// ends here instead of waiting for itself.
    WriterHeld,
    /// A settle found the job's row held by other transactions again and again while its
    /// lease was judged live (PostgreSQL).
    RowHeld,
    /// The server aborted the transaction to break a deadlock (PostgreSQL's 40P01). fenceq
    /// runs its own transactions again a few times before it reports one.
    Deadlock,
    /// The server could not serialize the transaction (PostgreSQL's 40001). fenceq runs its
    /// own transactions again a few times before it reports one.
    SerializationFailure,
}

impl std::fmt::Display for BusyCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BusyCause::Locked => "locked past the busy timeout",
            BusyCause::WriterHeld => "the queue's writer held by another thread's closure past the busy timeout",
            BusyCause::RowHeld => "the job's row held by other transactions",
            BusyCause::Deadlock => "deadlock",
            BusyCause::SerializationFailure => "serialization failure",
        })
    }
}

/// Everything that can go wrong in fenceq. Every variant says when it happens; a call that
/// returns an error has changed nothing, unless the variant says otherwise.
///
/// `Clone`: the sources are shared (`Arc`), so that every caller whose write rode on one
/// failed transaction (an intake group, a group commit) gets the store's own error.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The token no longer owns its job: the lease ran out, another claim replaced it, or
    /// the job left `running`. Nothing was written; stop working on the job.
    #[error("job {} attempt {} is no longer owned by claim {}: {reason}", token.id, token.attempt, token.claim_id)]
    OwnershipLost {
        /// The token that was presented.
        token: ClaimToken,
        /// Why it lost ownership.
        reason: LostReason,
    },
    /// A token presented for a non-running record (acknowledge, resume, resolve) does not
    /// match the record's current identity. Nothing was written.
    #[error("job {} attempt {} claim {} is not the job's current identity", token.id, token.attempt, token.claim_id)]
    StaleIdentity {
        /// The token that was presented.
        token: ClaimToken,
    },
    /// No job has this id (it never existed or was pruned).
    #[error("job {0} not found")]
    NotFound(JobId),
    /// The job is in a state that does not allow the operation. Nothing was written.
    #[error("job {id} is {state}; {operation} needs {expected}")]
    InvalidState {
        /// The job.
        id: JobId,
        /// Its current state.
        state: JobState,
        /// The operation that was refused.
        operation: &'static str,
        /// The state(s) the operation needs.
        expected: &'static str,
    },
    /// An argument is out of range: empty or oversized names, keys, payloads, zero or absurd
    /// leases, bad configuration. Nothing was written.
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// Which argument.
        what: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The database was written by a newer fenceq; it was left untouched. Upgrade fenceq.
    #[error("database schema version {found} is newer than this fenceq supports ({supported}); upgrade fenceq")]
    SchemaTooNew {
        /// The schema version found in the file.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// A read-only open found a database at an older schema version; it was left untouched.
    /// Open it writable once (or run `fenceq migrate`) to upgrade it.
    #[error("database schema version {found} is older than this fenceq's ({supported}); open it writable once or run `fenceq migrate`")]
    SchemaTooOld {
        /// The schema version found in the file (0: no fenceq schema at all).
        found: i64,
        /// The version this build writes.
        supported: i64,
    },
    /// The file is not an SQLite database (or is encrypted); it was left untouched.
    #[error("{path} is not an sqlite database")]
    NotADatabase {
        /// The file that was opened.
        path: String,
    },
    /// The disk (or the configured page limit) is full. The transaction was rolled back as a
    /// whole; free space and call again.
    #[error("storage full in {statement}: free disk space (or raise the page limit) and retry")]
    StorageFull {
        /// The statement that failed.
        statement: &'static str,
    },
    /// The call could not get what it needed in time, for the reason its [`BusyCause`] says:
    /// a lock held past the busy timeout (by another process, by another thread's closure
    /// holding the queue's writer, on PostgreSQL by another transaction or a statement
    /// timeout), or a deadlock or serialization failure the server aborted the transaction
    /// for (fenceq's own transactions are run again a few times before that is reported, a
    /// caller's closure never is). Nothing was written; the call may be retried.
    #[error("database busy in {statement} ({cause}); retry later")]
    Busy {
        /// The statement that failed.
        statement: &'static str,
        /// Why it was busy.
        cause: BusyCause,
    },
    /// The database file (or its directory) cannot be written.
    #[error("database is read-only in {statement}: check file and directory permissions")]
    ReadOnly {
        /// The statement that failed.
        statement: &'static str,
    },
    /// The store ran out of memory (SQLite: or hit its heap limit). Nothing was written.
    #[error("out of memory in {statement}")]
    OutOfMemory {
        /// The statement that failed.
        statement: &'static str,
    },
    /// A value exceeded one of the store's size limits (SQLite's `SQLITE_MAX_LENGTH` and
    /// friends). Nothing was written.
    #[error("value too big for the store in {statement}")]
    TooBig {
        /// The statement that failed.
        statement: &'static str,
    },
    /// The database file is corrupt. Restore it from a backup.
    #[error("database corrupt in {statement}: restore from a backup")]
    Corrupt {
        /// The statement that failed.
        statement: &'static str,
    },
    /// A queue call was made from inside a closure that already holds what the call needs:
    /// the queue's write transaction (`with_ownership`, `complete_with`, `transaction`), or
    /// the only connection of an in-memory queue (`with_connection`). Use the transaction or
    /// connection handed to the closure instead (`enqueue_tx` works there), or the call would
    /// wait for itself. Nothing was written.
    #[error("nested queue call from inside a closure that holds the queue's transaction or connection: use the closure's transaction")]
    NestedWrite,
    /// The store rolled the closure's transaction back by itself while the closure ran, and
    /// the closure carried on. On SQLite: an `INSERT OR ROLLBACK` or `RAISE(ROLLBACK)`, disk
    /// full, an I/O error, and the closure returned `Ok`; statements it ran after that point
    /// ran outside any transaction and did commit, so a closure should return the first
    /// error it meets. On PostgreSQL: a statement of the transaction failed earlier ("current
    /// transaction is aborted"). Nothing the transaction held was committed, the queue's
    /// change included.
    #[error("the store rolled the transaction back while the closure ran; nothing of it was committed")]
    TransactionLost,
    /// An operator change (`reap_expecting`, `prune_expecting`, `acknowledge_all`, ...) would
    /// have changed a different number of jobs than the caller expected. The count and the
    /// change were one transaction, which was rolled back: nothing changed.
    #[error("{operation}: expected {expected} {} to change but {found} would; nothing was changed", if *expected == 1 { "job" } else { "jobs" })]
    CountMismatch {
        /// The operation that was refused.
        operation: &'static str,
        /// The count the caller expected.
        expected: u64,
        /// The count the change found.
        found: u64,
    },
    /// The kept counts of settled rows (what `stats` reads) hold fewer rows of a queue and
    /// state than a prune (or a replay of an acknowledged exhaustion) was about to take off:
    /// rows were settled without being counted, by a process of a fenceq older than schema
    /// 13 still running after the upgrade, or by hand. Nothing was changed. Repair with [`Queue::recount_settled`](crate::Queue::recount_settled)
    /// (`fenceq stats --recount`), then try again. SQLite only: PostgreSQL's counts are
    /// spread over shards that may each go below zero.
    #[error("queue {queue:?} counts fewer {state} rows than it holds: rows were settled without being counted (by a fenceq older than schema 13, or by hand); repair with `fenceq stats --recount` (Queue::recount_settled)")]
    SettledCountsShort {
        /// The queue.
        queue: String,
        /// The counted state: `completed`, `cancelled` or `acknowledged`.
        state: String,
    },
    /// `resume` came after the park's deadline: the wait expired (whether or not the reaper
    /// has exhausted the job yet). Nothing was written.
    #[error("job {id}'s wait expired at {deadline} (ms since the epoch); it can no longer be resumed")]
    WaitExpired {
        /// The job.
        id: JobId,
        /// The park's deadline, in ms since the epoch.
        deadline: i64,
    },
    /// A backup's target file could not be written: its directory is missing or not
    /// writable, the disk is full, or its file system refuses the hard link that publishes
    /// the backup without overwriting. Nothing was left at the target path, and the queue is
    /// unchanged.
    #[error("cannot write the backup at {path}: check that its directory exists and is writable")]
    BackupWrite {
        /// The target path.
        path: String,
        /// The file system's error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// A backup did not finish within its time limit
    /// ([`BackupOptions::time_limit`](crate::BackupOptions::time_limit)). Nothing was left at
    /// the target path, and the queue is unchanged: raise the limit and back up again.
    #[error("backup did not finish within {limit:?} ({copied_pages} of {total_pages} pages copied); nothing was left at the target: raise the time limit")]
    BackupTimedOut {
        /// The time limit that ran out.
        limit: std::time::Duration,
        /// Pages copied when it ran out.
        copied_pages: u64,
        /// Pages of the database.
        total_pages: u64,
    },
    /// A job's payload did not decode as the type asked for (`payload_json` and
    /// `WorkerPoolBuilder::json_handler`, feature `serde`): it is not JSON, or not JSON of
    /// that shape. Nothing was read into the type and nothing was written; decoding the same
    /// payload again fails the same way, so a handler should exhaust the job rather than
    /// retry it (`json_handler` does).
    #[cfg(feature = "serde")]
    #[error("job {id}'s payload does not decode as {type_name}: {reason}")]
    Decode {
        /// The job whose payload it is.
        id: JobId,
        /// The type it was decoded as (`std::any::type_name`).
        type_name: &'static str,
        /// serde_json's message, with the line and column where decoding stopped (cut to
        /// [`MAX_ERROR_LEN`](crate::MAX_ERROR_LEN) bytes).
        reason: String,
    },
    /// An error returned by a caller's closure (a domain write); the transaction was rolled back.
    #[error("caller's closure failed")]
    Domain(#[source] Arc<dyn std::error::Error + Send + Sync>),
    /// Any other SQLite error; `statement` names the SQL constant that failed.
    #[error("sqlite error in {statement}")]
    Sqlite {
        /// The statement that failed.
        statement: &'static str,
        /// SQLite's error.
        #[source]
        source: Arc<rusqlite::Error>,
    },
    /// Any other PostgreSQL error (feature `postgres`); `statement` names the statement that
    /// failed. The server's message is in the source; it never carries the URL's password.
    /// The variant exists in every build (no other store returns it), so that matching on
    /// `Error` does not depend on cargo features.
    #[error("postgresql error in {statement}")]
    Postgres {
        /// The statement that failed.
        statement: &'static str,
        /// diesel's error, with the server's message
        /// (`source.downcast_ref::<fenceq::diesel::result::Error>()`).
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// The connection to the PostgreSQL server was lost during the call (feature
    /// `postgres`): the server went down or restarted, or the session was ended by a
    /// timeout or an administrator. The connection is discarded and the pool opens a new
    /// one. `commit_unknown` says whether anything may have been written:
    ///
    /// - `false`: the connection broke before the work could commit (during the
    ///   transaction, before its `COMMIT` was sent; or before a statement that writes was
    ///   sent, for a call that runs in autocommit). Nothing was written: retry the call.
    /// - `true`: it broke while committing (after the `COMMIT` was sent, or after a
    ///   statement that writes in autocommit was sent, such as an enqueue or a settle of
    ///   one job), so the work may have committed. A retry is safe only for a call that
    ///   cannot apply twice: an enqueue whose jobs carry idempotency keys finds them
    ///   (`Duplicate`), and a settle or renewal by a token that already committed is
    ///   refused (`OwnershipLost`); an enqueue without keys may insert its jobs a second
    ///   time. [`Error::is_retryable`] is false for it.
    ///
    /// Only a store that talks to a server returns it; the variant exists in every build.
    #[error("lost the connection to the postgresql server in {statement}; {}", if *commit_unknown {
        "it broke while committing: the work may have committed; retry only calls that carry idempotency keys"
    } else {
        "nothing was written; the pool reconnects, retry the call"
    })]
    ConnectionLost {
        /// The statement that failed.
        statement: &'static str,
        /// True when the connection broke while the work was committing: whether it
        /// committed is unknown. False: nothing was written.
        commit_unknown: bool,
    },
    /// The connection pool could not hand out a connection in time.
    #[error("connection pool")]
    Pool(#[source] PoolError),
    /// No database server that accepts writes could be reached in time (PostgreSQL): the
    /// server is down or restarting, a failover is under way, or the node the connection
    /// reached is a read-only standby (one a failover demoted: that connection is discarded,
    /// so the next call connects to the new primary). Nothing was written: retry the call
    /// ([`Error::is_retryable`] is true). While the store knows the server unreachable, a call
    /// waits at most its busy timeout for a connection before it gets this error.
    ///
    /// Only a store that talks to a server returns it; the variant exists in every build.
    #[error("no database server that accepts writes could be reached in {statement}: {reason}; retry the call")]
    Unavailable {
        /// The statement (or `connect`) that could not run.
        statement: &'static str,
        /// Why: the last connection attempt's failure, or the read-only server (never a
        /// password).
        reason: String,
    },
    /// An I/O error outside SQLite (creating the database directory, a worker thread).
    #[error("i/o error")]
    Io(#[source] Arc<std::io::Error>),
}

impl Error {
    /// Wraps an error of a caller's closure, so it can be returned from `with_ownership`
    /// and `complete_with` closures with `?` or `map_err(Error::domain)`.
    pub fn domain(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Error::Domain(Arc::from(e.into()))
    }

    /// True for errors that a later retry of the same call may not see (busy, locked, no server
    /// reachable or a connection lost before anything was written), and after which nothing was written,
    /// so that any call may be retried as it is.
    ///
    /// False for a `ConnectionLost` (PostgreSQL) whose `commit_unknown` is true: the work may
    /// have committed. The answer is the error's, not the call's: after such an error a
    /// retry is still safe for a call that cannot apply twice (an enqueue whose jobs carry
    /// idempotency keys, a settle or renewal fenced by its token), but not for an enqueue
    /// without keys, which may insert its jobs a second time.
    pub fn is_retryable(&self) -> bool {
        if let Error::ConnectionLost { commit_unknown, .. } = self {
            return !commit_unknown;
        }
        matches!(self, Error::Busy { .. } | Error::Unavailable { .. })
    }

    /// True for a `Busy` that was a serialization failure or a deadlock (PostgreSQL), which
    /// running the same transaction again resolves; not for a `Busy` that waited out a
    /// timeout. See `queue/retry.rs`.
    pub(crate) fn is_conflict(&self) -> bool {
        matches!(self, Error::Busy { cause: BusyCause::Deadlock | BusyCause::SerializationFailure, .. })
    }

    /// True for an error of the statement itself, which the store refused for the rows it
    /// carried (a constraint, an application's trigger, a value the store cannot hold):
    /// another row's statement would not meet it, and the store is fine.
    pub(crate) fn is_statement_refused(&self) -> bool {
        matches!(self, Error::Sqlite { .. } | Error::Postgres { .. } | Error::TooBig { .. })
    }

    /// True when the error proves that a statement run alone, in autocommit, changed
    /// nothing: the store refused it (see [`Error::is_statement_refused`]) or could not run
    /// it (input refused before it ran, a full disk, a read-only store, a lock held too long,
    /// no memory). A lost connection proves nothing: the statement may have committed.
    pub(crate) fn proves_nothing_written(&self) -> bool {
        self.is_statement_refused()
            || matches!(
                self,
                Error::InvalidInput { .. }
                    | Error::StorageFull { .. }
                    | Error::ReadOnly { .. }
                    | Error::Busy { .. }
                    | Error::Unavailable { .. }
                    | Error::OutOfMemory { .. }
            )
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidInput { what, reason: reason.into() }
    }
}

/// From `std::io::Error`: I/O outside SQLite (`Error::Io`).
impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(Arc::new(e))
    }
}

/// The connection pool's reason ([`Error::Pool`]): r2d2's error, shared, so that every caller
/// whose write rode on one failed check-out (an intake group, a group transaction) gets it,
/// and why the pool's last attempt to connect failed, where r2d2's own error does not say.
#[derive(Debug, Clone)]
pub struct PoolError {
    error: std::sync::Arc<r2d2::Error>,
    last_connect_error: Option<String>,
}

impl PoolError {
    /// `error`, with why the pool's latest new connection failed (r2d2 hands that reason to
    /// one of the callers waiting when it times out, and the others only say they timed out).
    pub(crate) fn with_reason(error: r2d2::Error, last_connect_error: Option<String>) -> PoolError {
        PoolError { error: std::sync::Arc::new(error), last_connect_error }
    }
}

impl std::fmt::Display for PoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)?;
        match &self.last_connect_error {
            Some(reason) => write!(f, " (the last attempt to connect failed: {reason})"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for PoolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// From `r2d2::Error`: the connection pool could not hand out a connection (`Error::Pool`).
impl From<r2d2::Error> for Error {
    fn from(e: r2d2::Error) -> Self {
        Error::Pool(PoolError::with_reason(e, None))
    }
}
