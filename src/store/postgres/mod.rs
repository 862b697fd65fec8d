//! The PostgreSQL store (feature `postgres`): a pool of diesel `PgConnection`s (libpq,
//! synchronous, no async runtime), the session settings every connection gets (timeouts,
//! `search_path`), the open sequence (validate, migrate: `migrate.rs` and the `schema/postgres/`
//! it embeds, with SQLite's version numbers), the dialect SQL (`statements.rs`), the
//! transitions of the store contract (`jobs.rs`), and the classification of the server's
//! errors (`error.rs`).
//!
//! ## Transactions
//!
//! Every write runs in a `READ COMMITTED` transaction of its own on a pooled connection,
//! begun through diesel's transaction manager, so that a caller's closure may nest
//! `conn.transaction(..)` (a savepoint). There is no group commit yet: [`Store::submit`](crate::store::Store::submit)
//! runs the work on the calling thread in its own transaction, like [`Store::write`](crate::store::Store::write).
//! Ownership is a row lock: an owned write (`with_ownership`, `complete_with`) first locks
//! the row of the exact token's running claim with `SELECT … FOR UPDATE`, then reads the
//! clock and judges the lease, and holds that lock until it commits, so no claim, reap or
//! cancel of another process can change the job in between (claims and reaps skip the
//! locked row, the others wait for it). The lease is judged at an instant read once the
//! row is held, never before a wait for it: a settle's statement skips a row another
//! transaction holds, then waits for it and judges again (`queue/settle.rs`).
//!
//! A lost connection ([`Error::ConnectionLost`]) says whether the work may have committed:
//! not when it broke inside the transaction, or before a statement that writes was sent in
//! autocommit; perhaps once the `COMMIT` (or such a statement) was sent (`run_transaction`).
//!
//! Calls that write in one statement at most (an enqueue, a claim, a settle:
//! [`Store::submit_single`](crate::store::Store::submit_single)) run in autocommit instead:
//! one round trip, and the server commits as the statement ends (with `synchronous_commit`
//! as the server has it, on by default: durable when the call returns).
//!
//! ## Wake-ups across processes
//!
//! Every statement that makes a job due now (an enqueue, a retry without delay, a resume,
//! a replay, an operator's retry, a reap that requeues, an unpause) also runs
//! `pg_notify` on the schema's channel with the queue's name, which the server sends when
//! the transaction commits. Each queue handle whose pools wait starts one listener thread
//! (`listen.rs`) with a connection of its own that `LISTEN`s and wakes those pools.
//!
//! ## Time
//!
//! Leases, `run_at`, deadlines and retention horizons are measured by **the database
//! server's clock**, for every host, whenever the queue runs on the default system clock:
//! hosts whose clocks disagree by minutes still agree on every lease. Each transaction
//! reads the server's `clock_timestamp()` once and moves it on by this host's monotonic
//! clock, and every time its statements get, or that fenceq computes from one and hands
//! back, is that server time (`time.rs` says why `clock_timestamp()` and not `now()`). An
//! injected clock ([`QueueBuilder::clock`](crate::QueueBuilder::clock)) is for tests only: it replaces the server's
//! clock for the handles that use it, as it replaces the system clock on SQLite.

pub(crate) mod error;
mod jobs;
mod listen;
pub(crate) mod migrate;
pub(crate) mod options;
pub use options::PostgresOptions;
#[cfg(test)]
mod plan_tests;
mod prepared;
pub(crate) mod statements;
pub(crate) mod time;
mod wire;

use crate::error::{Error, Result};
use crate::store::scope::{enter_write, WriteFlag};
use crate::store::Settings;
use diesel::connection::{AnsiTransactionManager, SimpleConnection, TransactionManager};
use diesel::r2d2::{ConnectionManager, CustomizeConnection, ManageConnection, PooledConnection};
use diesel::PgConnection;
use error::PgContext;
use options::Url;
use std::cell::{RefCell, RefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub(crate) type PgConn = PgConnection;

/// diesel's connection manager, with a check-out test that costs no round trip.
///
/// r2d2 tests every connection it hands out (`test_on_check_out`), so that one a server
/// restart or an administrator ended is replaced before a call fails on it. diesel's own
/// test is `SELECT 1`, one round trip per call; this one reads what the server has sent
/// meanwhile without waiting (libpq's `PQconsumeInput`, through diesel's
/// `notifications_iter`): an ended session has sent its `FATAL` and closed the socket, and
/// the read of the end of the stream fails. A connection that silently vanished (a network
/// that drops packets, no reset) passes the test and fails its call with `ConnectionLost`,
/// after which the store discards it (see `PgTx::discard`).
///
/// It also holds the connection `PostgresStore::open` made itself (to tell a refusal from an
/// unreachable server at once), which the pool's first new connection then is, instead of a
/// second connect.
pub(crate) struct Manager(ConnectionManager<PgConnection>, parking_lot::Mutex<Option<PgConnection>>, ConnectErrors);

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager").finish_non_exhaustive()
    }
}

impl ManageConnection for Manager {
    type Connection = PgConnection;
    type Error = diesel::r2d2::Error;

    fn connect(&self) -> std::result::Result<PgConnection, diesel::r2d2::Error> {
        if let Some(conn) = self.1.lock().take() {
            return Ok(conn);
        }
        let conn = self.0.connect()?;
        self.2.opened();
        Ok(conn)
    }

    fn is_valid(&self, conn: &mut PgConnection) -> std::result::Result<(), diesel::r2d2::Error> {
        // Twice: the first read may take the server's last message, the second then sees
        // the end of the stream. Pooled connections never `LISTEN`, so a notification here
        // is nobody's and is dropped.
        for _ in 0..2 {
            if let Some(Err(e)) = conn.notifications_iter().next() {
                return Err(diesel::r2d2::Error::QueryError(e));
            }
        }
        Ok(())
    }

    fn has_broken(&self, conn: &mut PgConnection) -> bool {
        self.0.has_broken(conn)
    }
}

/// The answer to a commit whose session the server ended: it may have committed.
///
/// libpq reports the last result it read before a connection broke as the call's result.
/// The confirmation of a commit is the server's `ReadyForQuery`, which follows the rows and
/// the command's completion (in autocommit the commit runs after them; `SELECT 1; COMMIT`
/// reports the `SELECT` first). A backend ended while its commit waits for a synchronous
/// standby (`pg_terminate_backend`, a failover) flushes what it had written with its
/// warning and exits, and when libpq reads all of it at once it reports those rows as a
/// success. The transaction then has committed on this server but perhaps not on the
/// standby a failover promotes: not an acknowledged write. So a session found ended right
/// after a commit is `commit_unknown`; this also says so, wrongly but safely, of a commit
/// confirmed just before the server ended the session.
fn unconfirmed_commit(statement: &'static str) -> Error {
    Error::ConnectionLost { statement, commit_unknown: true }
}

/// True when the server has ended the session: its goodbye (`FATAL`) and the end of the
/// stream are already here, read without waiting and without a round trip (libpq's
/// `PQconsumeInput`, through diesel's `notifications_iter`, as the pool's check-out test).
/// False when nothing says so; the session may still be gone.
fn session_ended(conn: &mut PgConnection) -> bool {
    // Twice: the first read may take the server's last message, the second the end.
    (0..2).any(|_| matches!(conn.notifications_iter().next(), Some(Err(_))))
}

/// The transaction a caller's closure gets on PostgreSQL (`with_ownership`, `complete_with`,
/// `transaction`, `enqueue_tx`, `with_connection`): one connection of the queue's pool, in
/// the transaction the queue opened (in `with_connection`, in autocommit mode).
///
/// Run SQL on it through [`PgTx::conn`], which lends the connection to diesel:
///
/// ```no_run
/// # fn demo(queue: &fenceq::Queue<fenceq::PostgresStore>, token: &fenceq::ClaimToken) -> fenceq::Result<()> {
/// use fenceq::diesel::{sql_query, sql_types::Text, RunQueryDsl};
/// queue.with_ownership(token, |tx| {
///     sql_query("INSERT INTO replies (text) VALUES ($1)").bind::<Text, _>("hi").execute(&mut *tx.conn())?;
///     Ok(())
/// })?;
/// # Ok(()) }
/// ```
///
/// The borrow must end before the closure calls the queue again (`enqueue_tx` with the same
/// `tx`): a queue call that finds the connection still lent out fails with `InvalidInput`
/// instead of waiting. Never `COMMIT` or `ROLLBACK` by hand; nested `conn.transaction(..)`
/// calls are savepoints and fine.
pub struct PgTx {
    conn: RefCell<Held>,
    /// The server's clock as this transaction read it (`time.rs`).
    time: time::ServerTime,
    /// What the store knows of the server's clock, updated by each read (`None` for a
    /// connection of the application's own, which reads the server's clock every time).
    server_clock: Option<time::ServerClock>,
    /// Whether a statement that writes was sent on the connection ([`PgTx::writing`]): in
    /// autocommit, a connection lost after that may have committed it.
    wrote: std::cell::Cell<bool>,
    /// Whether the connection is inside a transaction (the store's own, or, for a connection
    /// of the application's own, the caller's): a group's release and a grouped enqueue must
    /// run under the group's lock, in one transaction, and open their own in autocommit.
    in_transaction: std::cell::Cell<bool>,
}

enum Held {
    Pooled(PooledConnection<Manager>),
    Own(PgConnection),
}

impl std::fmt::Debug for PgTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTx").finish_non_exhaustive()
    }
}

impl PgTx {
    /// Wraps a connection of the application's own, in whatever transaction the caller
    /// began on it, so that the store's functions (`<PostgresStore as Store>::owns`) and a
    /// queue's `enqueue_tx` can run on it. The caller commits or rolls back (take the
    /// connection back with [`PgTx::into_connection`]).
    pub fn new(conn: PgConnection) -> PgTx {
        PgTx {
            conn: RefCell::new(Held::Own(conn)),
            time: time::ServerTime::default(),
            server_clock: None,
            wrote: std::cell::Cell::new(false),
            in_transaction: std::cell::Cell::new(true),
        }
    }

    fn pooled(conn: PooledConnection<Manager>, server_clock: &time::ServerClock) -> PgTx {
        PgTx {
            conn: RefCell::new(Held::Pooled(conn)),
            time: time::ServerTime::default(),
            server_clock: Some(server_clock.clone()),
            wrote: std::cell::Cell::new(false),
            in_transaction: std::cell::Cell::new(false),
        }
    }

    /// Runs `f` inside a transaction: this one's, or in autocommit a short one of its own on
    /// the same connection, committed when `f` returns `Ok` and rolled back otherwise.
    pub(crate) fn in_own_transaction<T>(&self, f: impl FnOnce(&PgTx) -> Result<T>) -> Result<T> {
        if self.in_transaction.get() {
            return f(self);
        }
        self.with(|conn| AnsiTransactionManager::begin_transaction(conn).pg("BEGIN"))?;
        self.in_transaction.set(true);
        let result = f(self);
        self.in_transaction.set(false);
        self.with(|conn| match result {
            Ok(value) => {
                self.wrote.set(true);
                AnsiTransactionManager::commit_transaction(conn).pg("COMMIT").map(|()| value)
            }
            Err(e) => {
                // A failed rollback marks the connection broken; the pool then discards it.
                let _ = AnsiTransactionManager::rollback_transaction(conn);
                Err(e)
            }
        })
    }

    /// The connection, lent to the caller until the guard is dropped.
    ///
    /// # Panics
    ///
    /// When the connection is already lent out (a second guard alive at the same time).
    pub fn conn(&self) -> RefMut<'_, PgConnection> {
        RefMut::map(self.conn.borrow_mut(), Held::connection)
    }

    /// The connection given to [`PgTx::new`] (`None` for one of the queue's own).
    pub fn into_connection(self) -> Option<PgConnection> {
        match self.conn.into_inner() {
            Held::Own(conn) => Some(conn),
            Held::Pooled(_) => None,
        }
    }

    /// After `ConnectionLost`: marks a pooled connection broken (diesel's transaction
    /// manager in error), so that the pool discards it instead of handing it out again. A
    /// connection of the application's own is left as it is.
    fn discard_if_lost<T>(&self, result: &Result<T>) {
        if matches!(result, Err(Error::ConnectionLost { .. })) {
            self.discard();
        }
    }

    /// Marks a pooled connection broken, so that the pool discards it instead of handing it
    /// out again (a connection of the application's own is left as it is).
    fn discard(&self) {
        if let Ok(mut held) = self.conn.try_borrow_mut() {
            if let Held::Pooled(conn) = &mut *held {
                let conn: &mut PgConnection = conn;
                AnsiTransactionManager::transaction_manager_status_mut(conn).set_in_error();
            }
        }
    }

    /// [`PgTx::with`] for a statement that may write: noted first, so that a connection lost
    /// once it was sent says, in autocommit, that the write may have committed.
    pub(crate) fn writing<T>(&self, f: impl FnOnce(&mut PgConnection) -> Result<T>) -> Result<T> {
        self.wrote.set(true);
        self.with(f)
    }

    /// Runs `f` on the connection; `InvalidInput` when the caller still holds it.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut PgConnection) -> Result<T>) -> Result<T> {
        let mut held = self.conn.try_borrow_mut().map_err(|_| {
            Error::invalid("transaction", "its connection is still lent out by PgTx::conn: drop that guard first")
        })?;
        f(held.connection())
    }
}

impl Held {
    fn connection(&mut self) -> &mut PgConnection {
        match self {
            Held::Pooled(conn) => conn,
            Held::Own(conn) => conn,
        }
    }
}

/// The PostgreSQL store (feature `postgres`): one database (and schema) on a server, a pool
/// of connections, and row locks for ownership. Opened by
/// [`Queue::open_postgres`](crate::Queue::open_postgres) and
/// [`QueueBuilder::open`](crate::QueueBuilder::open) with [`PostgresOptions`].
pub struct PostgresStore {
    pool: r2d2::Pool<Manager>,
    url: Url,
    schema: Option<String>,
    transactions: AtomicU64,
    /// The server's clock as last read, and minus this host's (`time.rs`).
    server_clock: time::ServerClock,
    /// The session settings, for the listener's own connection.
    settings: String,
    /// The key/value string libpq connects with (holds the password: never shown).
    conninfo: String,
    /// The `LISTEN` thread, started by the first [`Store::watch`](crate::store::Store::watch).
    listener: parking_lot::Mutex<Option<listen::Listener>>,
    /// Why the pool's latest new connection failed, for the errors of check-outs that time
    /// out, and whether the server is known to be unreachable.
    connect_errors: ConnectErrors,
    /// How long a call waits for a connection while the server is known to be unreachable.
    busy_timeout: Duration,
    /// Opened read-only: a `ReadOnly` is then the caller's, not a demoted server's.
    read_only: bool,
}

/// How often a call waiting for a connection looks again whether the server is known to be
/// unreachable (and its wait therefore shorter).
const CHECKOUT_SLICE: Duration = Duration::from_millis(50);

/// The pool's connection failures, as its error handler sees them: the latest one's message,
/// and when. r2d2 gives the reason to one of the callers waiting when a check-out times out;
/// the others get "timed out waiting for connection" alone, so the store adds it to theirs.
///
/// It also keeps when a connection was last opened: while the latest failure is newer than
/// that, the server is known to be unreachable, and a call waits for a connection only for
/// its busy timeout (not also the connect timeout) before it gets `Error::Unavailable`.
#[derive(Debug, Default, Clone)]
struct ConnectErrors(std::sync::Arc<parking_lot::Mutex<ConnectState>>);

#[derive(Debug, Default)]
struct ConnectState {
    /// The latest failure's message, and when.
    failed: Option<(String, std::time::Instant)>,
    /// When a connection was last opened.
    opened: Option<std::time::Instant>,
}

impl r2d2::HandleError<diesel::r2d2::Error> for ConnectErrors {
    fn handle_error(&self, error: diesel::r2d2::Error) {
        // The message is libpq's: it names the host and port, never the password (a string
        // libpq could not read, whose message might, was refused before any connect).
        self.record(connect_failure(&error));
    }
}

impl ConnectErrors {
    /// A failure of a connect the store made itself, as the pool's own are recorded.
    fn record(&self, message: String) {
        tracing::warn!(error = %message, "a new PostgreSQL connection failed");
        self.0.lock().failed = Some((message, std::time::Instant::now()));
    }

    /// A new connection was opened.
    fn opened(&self) {
        self.0.lock().opened = Some(std::time::Instant::now());
    }

    /// The latest failure's message, if it is newer than the latest connection opened (the
    /// server is unreachable as far as the store knows).
    fn down(&self) -> Option<String> {
        let state = self.0.lock();
        let (message, at) = state.failed.as_ref()?;
        state.opened.is_none_or(|opened| opened < *at).then(|| message.clone())
    }
}

impl PostgresStore {
    /// A connection of the pool; a time-out says why the latest new connection failed, if
    /// one failed within the check-out's wait.
    ///
    /// While the server is known to be unreachable (the latest connect failed, none opened
    /// since) the wait is the busy timeout alone, so that a call during an outage or a
    /// failover returns `Unavailable` within its own bound instead of also waiting out the
    /// connect timeout; the pool keeps connecting meanwhile, and the first connection opened
    /// ends that.
    fn checkout(&self) -> Result<PooledConnection<Manager>> {
        let started = std::time::Instant::now();
        let mut limit = self.pool.connection_timeout();
        loop {
            let left = limit.saturating_sub(started.elapsed());
            match self.pool.get_timeout(left.min(CHECKOUT_SLICE).max(Duration::from_millis(1))) {
                Ok(conn) => return Ok(conn),
                Err(e) => {
                    // Judged again after every slice, and once: the server may be found
                    // unreachable during the wait, or come back at the slice's end (a
                    // connection opened then ends the shorter wait, and the error of a wait
                    // that ends is mapped by the same judgement that ended it).
                    let down = self.connect_errors.down().is_some();
                    limit = if down { self.busy_timeout } else { self.pool.connection_timeout() };
                    if started.elapsed() < limit {
                        continue;
                    }
                    return Err(self.checkout_error(e, down, limit));
                }
            }
        }
    }

    /// [`PostgresStore::checkout`], waiting at most `waited` (once, while the store opens).
    fn checkout_within(&self, waited: Duration) -> Result<PooledConnection<Manager>> {
        self.pool.get_timeout(waited).map_err(|e| {
            let down = self.connect_errors.down().is_some();
            self.checkout_error(e, down, waited)
        })
    }

    /// A check-out that timed out: `Unavailable` (with the latest connect failure) when the
    /// server is known to be unreachable, `Pool` when every connection stayed busy.
    fn checkout_error(&self, e: r2d2::Error, down: bool, waited: Duration) -> Error {
        let reason = {
            let state = self.connect_errors.0.lock();
            state
                .failed
                .as_ref()
                .filter(|(_, at)| at.elapsed() <= waited.max(self.pool.connection_timeout()))
                .map(|(m, _)| m.clone())
        };
        let said = e.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
        match reason {
            Some(reason) if down => Error::Unavailable {
                statement: "connect",
                reason: if said.contains(reason.as_str()) { said } else { format!("{said}: {reason}") },
            },
            reason => {
                let reason = reason.filter(|reason| !said.contains(reason.as_str()));
                Error::Pool(crate::error::PoolError::with_reason(e, reason))
            }
        }
    }

    /// A `ReadOnly` on a queue opened to write means the server under the connection became
    /// a read-only standby (a failover demoted it, or an administrator made it read-only):
    /// the connection is discarded, so that no later call reuses it, and the call gets
    /// `Unavailable`, which a retry on a new connection (to the new primary) resolves.
    fn demoted<T>(&self, tx: &PgTx, result: Result<T>) -> Result<T> {
        match result {
            Err(Error::ReadOnly { statement }) if !self.read_only => {
                tx.discard();
                Err(Error::Unavailable {
                    statement,
                    reason: "the server is a read-only standby now (a failover may have demoted it); its connection was discarded".into(),
                })
            }
            other => other,
        }
    }
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").field("url", &self.url).field("schema", &self.schema).finish()
    }
}

/// The session settings of every pooled connection.
#[derive(Debug)]
struct Session {
    settings: String,
    /// [`PostgresOptions::prepared_statements`]: off, diesel sends every statement unnamed.
    prepared_statements: bool,
}

impl CustomizeConnection<PgConnection, diesel::r2d2::Error> for Session {
    fn on_acquire(&self, conn: &mut PgConnection) -> std::result::Result<(), diesel::r2d2::Error> {
        if !self.prepared_statements {
            diesel::Connection::set_prepared_statement_cache_size(conn, diesel::connection::CacheSize::Disabled);
        }
        conn.batch_execute(&self.settings).map_err(diesel::r2d2::Error::QueryError)
    }
}

/// `SET` statements for a session: the timeouts, the isolation level, the messages' language,
/// the schema, read-only.
///
/// `READ COMMITTED` whatever the database's default: the fenced statements rely on its
/// re-check of a row that changed under them, where `REPEATABLE READ` or `SERIALIZABLE`
/// would fail them with serialization errors instead. (A caller's closure may still raise
/// its own transaction's level with `SET TRANSACTION ISOLATION LEVEL` as its first
/// statement.) Messages in `C`, untranslated, where the role may set `lc_messages` (see
/// `error.rs`); elsewhere the `DO` block leaves it as it is, without failing.
///
/// Plans for each call's values (`plan_cache_mode = force_custom_plan`) although the
/// statements are prepared (`prepared.rs`): a generic plan is kept until the table's next
/// `ANALYZE`, with the statistics of when it was made, and a queue's table starts empty and
/// grows by thousands of rows a second. A plan made while it held a few dozen rows scans it
/// whole, and every call keeps scanning it as it grows; a plan for the call's values reads
/// the table's current size each time. The connection still parses and analyses each
/// statement once. The claim is the exception: the schema's `fenceq_claim` sets its own plan
/// mode and keeps one generic plan, whose shape its settings pin whatever the statistics.
///
/// No just-in-time compilation (`jit = off`, for an application's statements in the queue's
/// closures too): the store's statements are short, and a compile costs the server tenths
/// of a second, paid again on every call of a statement whose estimate crosses
/// `jit_above_cost` (stale statistics on a table that grew, or a plan whose paths are priced
/// out, as the claim's function showed before it turned JIT off itself).
fn session_settings(options: &PostgresOptions, settings: &Settings) -> String {
    let ms = |d: Duration| d.as_millis().min(i32::MAX as u128);
    let mut sql = format!(
        "SET statement_timeout = {}; SET lock_timeout = {}; SET idle_in_transaction_session_timeout = {}; \
         SET default_transaction_isolation = 'read committed'; SET plan_cache_mode = force_custom_plan; \
         SET jit = off; \
         DO $$ BEGIN PERFORM set_config('lc_messages', 'C', false); \
         EXCEPTION WHEN insufficient_privilege THEN NULL; END $$;",
        ms(PostgresOptions::STATEMENT_TIMEOUT),
        ms(settings.busy_timeout).max(1),
        ms(PostgresOptions::IDLE_IN_TRANSACTION_TIMEOUT),
    );
    if let Some(schema) = &options.schema {
        // Unqualified names resolve in the queue's schema first (where the migrations
        // create the tables), then in `public`, where an application's own tables often are.
        sql.push_str(&format!(" SET search_path TO \"{schema}\", public;"));
    }
    if settings.read_only {
        sql.push_str(" SET default_transaction_read_only = on;");
    }
    sql
}

/// The key/value string libpq connects with, and how long opening a connection may take:
/// the URL read as libpq reads it (`crate::conninfo`), with a connect timeout, an application
/// name and `gssencmode=disable` added unless it sets its own (or, for the GSS mode,
/// `PGGSSENCMODE` does).
///
/// Written back as a key/value string with every value quoted, never appended to the URL as
/// text: a password may hold `?` or `#`, and libpq would take whatever fenceq appended after
/// them as part of the password or of the database name.
///
/// The connect timeout is the builder's (which then replaces the URL's), else the URL's
/// `connect_timeout` when it bounds the wait, else [`PostgresOptions::DEFAULT_CONNECT_TIMEOUT`]
/// (also in place of a URL's `0` or negative value, which libpq would take as "wait
/// forever"); libpq counts it in whole seconds.
///
/// Why no GSS encryption by default: libpq's default `gssencmode=prefer` asks libkrb5 for
/// credentials at every connect, and a process that exits while a connection is still being
/// opened on another thread (a worker's, or, before the pool kept no idle minimum, the
/// pool's own top-up after each checkout) then aborts in libkrb5's exit-time finalizer ("k5_mutex_lock: Assertion `r == 0' failed", or
/// "krb5int_getspecific"). Measured at about 1 exit in 100 under load for short-lived
/// processes, none in 900 with GSS encryption off. GSS authentication (`gss` in pg_hba.conf)
/// does not need it; a deployment that wants GSS encryption says `gssencmode=require`.
fn connection_string(url: &str, connect_timeout: Option<Duration>) -> Result<(String, Duration)> {
    let info = crate::ConnInfo::parse(url)?;
    let from_url = info.connect_timeout_secs().map(Duration::from_secs);
    let timeout = connect_timeout.or(from_url).unwrap_or(PostgresOptions::DEFAULT_CONNECT_TIMEOUT);
    let whole_seconds = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
    let mut info = match connect_timeout {
        Some(_) => info.set("connect_timeout", &whole_seconds.to_string()),
        None => info.with_connect_timeout_bound(whole_seconds),
    };
    info = info.or_set("application_name", "fenceq");
    if std::env::var_os("PGGSSENCMODE").is_none() {
        info = info.or_set("gssencmode", "disable");
    }
    Ok((info.to_libpq(), timeout))
}

/// libpq's message for a failed connect, on one line.
fn connect_failure(error: &diesel::r2d2::Error) -> String {
    error.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
}

/// True when a failed connect is final: authentication failed, no such database or role, no
/// permission to connect, a setting libpq or the server refuses. Trying again cannot change
/// those, so `open` reports them at once. Not final: a server that does not answer, a port
/// nothing listens on (the server may be restarting), a server starting up or shutting down,
/// no free connection slot, a host name that does not resolve (yet): those are tried again
/// until the connect timeout. The server words these messages in its own `lc_messages` (the
/// session's setting comes later); a translated one counts as not final, and is reported
/// with the connect timeout's error.
fn is_refusal(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    let said = |s: &str| m.contains(s);
    said("authentication failed") // 28P01, and every method's own failure
        || said("no pg_hba.conf entry") // 28000
        || said("pg_hba.conf rejects connection") // 28000
        || said("is not permitted to log in") // 28000
        || said("no password supplied") // libpq: the server asked for a password
        || said("permission denied for database") // 42501
        || said("is not currently accepting connections") // 55000, datallowconn
        || (said("does not exist") && (said("database \"") || said("role \""))) // 3D000, 28000
        || said("invalid connection option") // libpq: an unknown keyword
        || (said("invalid ") && (said(" value") || said("port number"))) // libpq or the server: a bad setting
        || said("server does not support ssl")
        || said("certificate verify failed")
        || said("channel binding")
}

/// A schema name fenceq quotes into SQL itself: a plain lowercase identifier.
pub(crate) fn check_schema(schema: &str) -> Result<()> {
    let valid = !schema.is_empty()
        && schema.len() <= 63
        && schema.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !schema.starts_with(|c: char| c.is_ascii_digit())
        && !schema.starts_with("pg_");
    if valid {
        Ok(())
    } else {
        Err(Error::invalid("schema", format!("{schema:?} is not 1..=63 of [a-z0-9_], starting with a letter or _")))
    }
}

impl PostgresStore {
    /// Connects to the builder's URL and validates and upgrades the schema.
    ///
    /// The first connection is made here, not through the pool: a pool's check-out retries
    /// every failure until its timeout, so a wrong password or a missing database would take
    /// the whole wait to be reported. A final refusal ([`is_refusal`]) is reported at once,
    /// with the server's reason; any other failure (an unreachable server) is waited out
    /// through the pool until the connect timeout. The connection made here does the schema
    /// work and then becomes the pool's first connection.
    pub(crate) fn open(options: &PostgresOptions, settings: &Settings) -> Result<PostgresStore> {
        let url = options.url.clone();
        if let Some(schema) = &options.schema {
            check_schema(schema)?;
        }
        if let Some(timeout) = options.connect_timeout {
            if timeout < Duration::from_secs(1) || timeout > Duration::from_secs(3600) {
                return Err(Error::invalid("connect timeout", format!("{timeout:?} is not in 1 s..=1 h")));
            }
        }
        let (conninfo, connect_timeout) = connection_string(&url.0, options.connect_timeout)?;
        let started = std::time::Instant::now();
        let session = session_settings(options, settings);
        let connect_errors = ConnectErrors::default();
        let manager =
            Manager(ConnectionManager::new(conninfo.clone()), parking_lot::Mutex::new(None), connect_errors.clone());
        let first = match manager.connect() {
            Ok(mut conn) => {
                conn.batch_execute(&session).pg("session settings")?;
                prepare_schema(&mut conn, options, settings)?;
                Some(conn)
            }
            Err(e) => {
                let reason = connect_failure(&e);
                if is_refusal(&reason) {
                    return Err(Error::invalid("database URL", format!("the server refused the connection: {reason}")));
                }
                connect_errors.record(reason);
                None
            }
        };
        let opened = first.is_some();
        *manager.1.lock() = first;
        let pool = r2d2::Pool::builder()
            .thread_pool(crate::store::pool_threads())
            .max_size(settings.pool_size.saturating_mul(2))
            // No idle minimum: with one, every checkout of the last idle connection starts a
            // new one in the background, and a process that exits while that connect is
            // under way (a CLI command, a script that enqueues one job) crashes in the exit
            // handlers of libpq's libraries (SIGSEGV or SIGBUS in about 1 exit in 16 with
            // SCRAM password logins, whose hashing is OpenSSL's). Connections returned to the
            // pool stay idle for r2d2's idle timeout (10 minutes), so a busy pool stays warm;
            // a new connection is opened only for a caller that waits for it.
            .min_idle(Some(0))
            .connection_timeout(settings.busy_timeout + connect_timeout)
            // Every checkout looks for a session the server ended (no round trip: see
            // `Manager`), so that connections a server restart broke are replaced before a
            // call uses them.
            .test_on_check_out(true)
            .connection_customizer(Box::new(Session {
                settings: session.clone(),
                prepared_statements: options.prepared_statements,
            }))
            .error_handler(Box::new(connect_errors.clone()))
            // Without waiting for a first connection: the one made above is handed over.
            .build_unchecked(manager);
        let store = PostgresStore {
            pool,
            url,
            schema: options.schema.clone(),
            transactions: AtomicU64::new(0),
            server_clock: time::ServerClock::unmeasured(),
            settings: session,
            conninfo,
            listener: parking_lot::Mutex::new(None),
            connect_errors,
            busy_timeout: settings.busy_timeout,
            read_only: settings.read_only,
        };
        if !opened {
            let mut conn = store.checkout_within(connect_timeout.saturating_sub(started.elapsed()))?;
            prepare_schema(&mut conn, options, settings)?;
        }
        if settings.clock.is_host_clock() {
            // A first measure of the server's clock, for `Queue::now_ms` before any call.
            store.run_read(|tx| time::now(tx, &*settings.clock))?;
        }
        Ok(store)
    }

    /// True when `token` owns its job, checked inside a transaction the caller began on
    /// `conn` (of the application's own). While the row holds the token's running claim it
    /// is locked until that transaction ends (also when the lease has ended: the lock comes
    /// first, so that a renewal in flight is waited for, not missed), so that no reclaim can
    /// commit between this check and the caller's commit.
    ///
    /// `at` is the caller's now as it calls (ms since the epoch, by the queue's clock:
    /// [`Queue::now_ms`](crate::Queue::now_ms)). The lease is judged once the row is locked,
    /// at `at` moved on by the time taking the lock took (on this host's monotonic clock):
    /// a call that waited for another transaction holding the row judges the lease at the
    /// end of that wait, as the queue's own owned writes do, not at an instant read before it.
    ///
    /// # Errors
    ///
    /// A token that does not own its job is `Ok(false)`, never `OwnershipLost`. Only the
    /// server's error for the query (`Busy` after the lock timeout when another
    /// transaction holds the row).
    pub fn owns_in(conn: &mut PgConnection, token: &crate::ClaimToken, at: i64) -> Result<bool> {
        let asked = std::time::Instant::now();
        let locked = jobs::owned_lease_on(conn, token, i64::MIN)?;
        let waited_ms = i64::try_from(asked.elapsed().as_millis()).unwrap_or(i64::MAX);
        Ok(locked.is_some_and(|lease| lease.until > at.saturating_add(waited_ms)))
    }

    /// Runs `f` on a connection in autocommit (reads, and a caller's `with_connection`,
    /// whose own statements may write: a connection lost in one of them may have committed
    /// it).
    fn run_read<T>(&self, f: impl FnOnce(&PgTx) -> Result<T>) -> Result<T> {
        let tx = PgTx::pooled(self.checkout()?, &self.server_clock);
        let result = self.demoted(&tx, f(&tx));
        tx.discard_if_lost(&result);
        result.map_err(|e| {
            let callers = matches!(e, Error::ConnectionLost { statement: error::CALLER_STATEMENT, .. });
            error::lost_in(error::Phase::Autocommit { wrote: tx.wrote.get() || callers }, e)
        })
    }

    /// Runs `f` without a transaction of its own (autocommit: each statement is its own
    /// transaction, committed by the server as it ends, with no `BEGIN` or `COMMIT` round
    /// trip); for work that writes in one statement at most
    /// ([`Store::submit_single`](crate::store::Store::submit_single)).
    ///
    /// A write's success is checked as a commit's is (`unconfirmed_commit`): a session the
    /// server has ended since may have sent the statement's rows without the commit's
    /// confirmation.
    fn run_autocommit<T>(&self, f: impl FnOnce(&PgTx) -> Result<T>) -> Result<T> {
        let tx = PgTx::pooled(self.checkout()?, &self.server_clock);
        let result = match self.demoted(&tx, f(&tx)) {
            Ok(_) if tx.wrote.get() && tx.with(|conn| Ok(session_ended(conn)))? => {
                Err(unconfirmed_commit("autocommit"))
            }
            result => result,
        };
        tx.discard_if_lost(&result);
        if result.is_ok() {
            self.transactions.fetch_add(1, Ordering::Relaxed);
        }
        result.map_err(|e| error::lost_in(error::Phase::Autocommit { wrote: tx.wrote.get() }, e))
    }

    /// Runs `f` in a transaction of its own and commits it when `f` returns `Ok`.
    ///
    /// The commit is `SELECT 1; COMMIT` in one round trip: in a transaction that an earlier
    /// error aborted (a statement the closure ran failed, and it carried on), the `SELECT`
    /// fails and the `COMMIT` never runs, so the call reports `TransactionLost` instead of
    /// the success PostgreSQL's `COMMIT` of an aborted transaction would report while
    /// rolling it back.
    ///
    /// A lost connection says whether the work may have committed (`commit_unknown`): not
    /// before the `COMMIT` is sent (the server rolls back the transaction of a session that
    /// ends), nor when the session is found ended just before sending it (the server's
    /// goodbye already arrived, read without a round trip as the pool's check-out test
    /// does); once the `COMMIT` was sent, it may have.
    fn run_transaction<T>(&self, f: impl FnOnce(&PgTx) -> Result<T>) -> Result<T> {
        let tx = PgTx::pooled(self.checkout()?, &self.server_clock);
        let before_commit = |e| error::lost_in(error::Phase::Transaction, e);
        tx.with(|conn| AnsiTransactionManager::begin_transaction(conn).pg("BEGIN")).map_err(before_commit)?;
        tx.in_transaction.set(true);
        let result = self.demoted(&tx, f(&tx).map_err(before_commit));
        tx.discard_if_lost(&result);
        let mut held = tx.conn.try_borrow_mut().map_err(|_| Error::invalid("transaction", "still lent out"))?;
        let conn = held.connection();
        match result {
            Ok(value) => {
                let phase = if session_ended(conn) { error::Phase::CommitNotSent } else { error::Phase::CommitSent };
                let committed = match phase {
                    error::Phase::CommitNotSent => {
                        Err(Error::ConnectionLost { statement: "COMMIT", commit_unknown: false })
                    }
                    _ => match conn.batch_execute("SELECT 1; COMMIT").pg("COMMIT") {
                        Ok(()) if session_ended(conn) => Err(unconfirmed_commit("COMMIT")),
                        sent => sent,
                    },
                }
                .map_err(|e| error::lost_in(phase, e));
                match committed {
                    Ok(()) => {
                        self.transactions.fetch_add(1, Ordering::Relaxed);
                        Ok(value)
                    }
                    Err(e) => {
                        let _ = AnsiTransactionManager::rollback_transaction(conn);
                        if matches!(e, Error::ConnectionLost { .. }) {
                            AnsiTransactionManager::transaction_manager_status_mut(conn).set_in_error();
                        }
                        Err(e)
                    }
                }
            }
            Err(e) => {
                // A failed rollback marks the connection broken; the pool then discards it.
                let _ = AnsiTransactionManager::rollback_transaction(conn);
                Err(e)
            }
        }
    }

    fn run_write<T>(&self, f: impl FnOnce(&PgTx) -> Result<T>) -> Result<T> {
        let _flag = enter_write()?;
        self.run_transaction(f)
    }

    fn run_submit<T>(&self, f: impl FnOnce(&PgTx) -> Result<T>) -> Result<T> {
        let _flag = WriteFlag::set()?;
        self.run_transaction(f)
    }

    fn run_submit_single<T>(&self, f: impl FnOnce(&PgTx) -> Result<T>) -> Result<T> {
        let _flag = WriteFlag::set()?;
        self.run_autocommit(f)
    }

    /// Starts the listener (once) and adds `wake` to what it calls.
    fn run_watch(&self, wake: crate::store::Wake) {
        let mut listener = self.listener.lock();
        listener.get_or_insert_with(|| listen::Listener::start(self.conninfo.clone(), self.settings.clone())).add(wake);
    }
}

/// Checks the schema version (read only, or without upgrades) or brings the schema up to
/// this build's, on the connection `open` got first.
fn prepare_schema(conn: &mut PgConnection, options: &PostgresOptions, settings: &Settings) -> Result<()> {
    if settings.read_only || !settings.upgrade {
        let found = match &options.schema {
            Some(name) if !migrate_schema_exists(conn, name)? => 0,
            _ => migrate::check_not_newer(conn)?,
        };
        if found < migrate::SCHEMA_VERSION {
            return Err(Error::SchemaTooOld { found, supported: migrate::SCHEMA_VERSION });
        }
    } else {
        migrate::migrate(conn, options.schema.as_deref(), migrate::SCHEMA_VERSION)?;
    }
    Ok(())
}

fn migrate_schema_exists(conn: &mut PgConnection, name: &str) -> Result<bool> {
    use diesel::sql_types::Text;
    use diesel::{sql_query, OptionalExtension, QueryableByName, RunQueryDsl};
    #[derive(QueryableByName)]
    struct Found {
        #[diesel(sql_type = Text)]
        #[allow(dead_code)]
        nspname: String,
    }
    sql_query("SELECT nspname::text AS nspname FROM pg_namespace WHERE nspname = $1")
        .bind::<Text, _>(name)
        .get_result::<Found>(conn)
        .optional()
        .map(|f| f.is_some())
        .pg("schema exists")
}

impl Drop for PostgresStore {
    /// Stops the listener thread and waits for it (the last handle of the queue is gone).
    fn drop(&mut self) {
        if let Some(listener) = self.listener.lock().take() {
            listener.stop();
        }
    }
}

pub(crate) fn transactions(store: &PostgresStore) -> u64 {
    store.transactions.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(conninfo: &str) -> crate::ConnInfo {
        crate::ConnInfo::parse(conninfo).unwrap()
    }

    #[test]
    fn urls_get_a_connect_timeout_and_no_gss_encryption_unless_they_choose() {
        let gss_chosen = std::env::var_os("PGGSSENCMODE").is_some();
        let (conninfo, timeout) = connection_string("postgres://u@h/d", None).unwrap();
        let info = parsed(&conninfo);
        assert_eq!(timeout, PostgresOptions::DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(info.get("connect_timeout"), Some("10"));
        assert_eq!(info.get("application_name"), Some("fenceq"));
        assert_eq!(info.get("gssencmode"), if gss_chosen { None } else { Some("disable") });
        assert_eq!((info.get("user"), info.get("host"), info.get("dbname")), (Some("u"), Some("h"), Some("d")));

        let (conninfo, timeout) =
            connection_string("postgres://u@h/d?connect_timeout=3&gssencmode=require", None).unwrap();
        let info = parsed(&conninfo);
        assert_eq!(timeout, Duration::from_secs(3));
        assert_eq!((info.get("connect_timeout"), info.get("gssencmode")), (Some("3"), Some("require")));

        // 0 and negative values are libpq's "wait forever": the default bound replaces them.
        for unbounded in ["0", "-1", " 0 "] {
            let url = format!("host=h dbname=d connect_timeout='{unbounded}'");
            let (conninfo, timeout) = connection_string(&url, None).unwrap();
            assert_eq!(timeout, PostgresOptions::DEFAULT_CONNECT_TIMEOUT, "{unbounded}");
            assert_eq!(parsed(&conninfo).get("connect_timeout"), Some("10"), "{unbounded}");
        }

        // The builder's setting replaces the URL's, in whole seconds.
        let (conninfo, timeout) =
            connection_string("host=h dbname=d connect_timeout=30", Some(Duration::from_millis(1500))).unwrap();
        assert_eq!(timeout, Duration::from_millis(1500));
        assert_eq!(parsed(&conninfo).get("connect_timeout"), Some("2"));
    }

    #[test]
    fn passwords_with_reserved_characters_keep_the_database_and_password() {
        for (url, password) in [
            ("postgres://bot:se?cret@db:5432/fenceq_test", "se?cret"),
            ("postgres://bot:se#cret@db:5432/fenceq_test", "se#cret"),
            ("postgres://bot:a%40b c?d#e@db:5432/fenceq_test", "a@b c?d#e"),
            ("postgresql://bot:se?cret@db/fenceq_test?sslmode=prefer", "se?cret"),
            (r"host=db port=5432 user=bot password='a b\'c?#@' dbname=fenceq_test", r"a b'c?#@"),
        ] {
            let (conninfo, _) = connection_string(url, None).unwrap();
            let info = parsed(&conninfo);
            assert_eq!(info.get("dbname"), Some("fenceq_test"), "{url} -> {conninfo}");
            assert_eq!(info.get("password"), Some(password), "{url}");
            assert_eq!(info.get("host"), Some("db"), "{url}");
            assert_eq!(info.get("connect_timeout"), Some("10"), "{url}");
        }
    }

    #[test]
    fn final_refusals_are_told_from_an_unreachable_server() {
        for message in [
            r#"connection to server at "127.0.0.1", port 5432 failed: FATAL: password authentication failed for user "bot""#,
            r#"connection to server at "127.0.0.1", port 5432 failed: FATAL: database "nope" does not exist"#,
            r#"connection to server at "127.0.0.1", port 5432 failed: FATAL: role "nobody" does not exist"#,
            r#"connection to server at "127.0.0.1", port 5432 failed: FATAL: no pg_hba.conf entry for host "127.0.0.1""#,
            "connection to server at \"h\", port 5432 failed: fe_sendauth: no password supplied",
            r#"invalid connection option "colour""#,
            r#"invalid sslmode value: "sometimes""#,
        ] {
            assert!(is_refusal(message), "{message}");
        }
        for message in [
            r#"connection to server at "127.0.0.1", port 1 failed: Connection refused Is the server running on that host and accepting TCP/IP connections?"#,
            r#"connection to server at "10.255.255.1", port 5432 failed: timeout expired"#,
            r#"connection to server at "127.0.0.1", port 5432 failed: FATAL: the database system is starting up"#,
            r#"connection to server at "127.0.0.1", port 5432 failed: FATAL: sorry, too many clients already"#,
            r#"connection to server at "127.0.0.1", port 5432 failed: FATAL: too many connections for role "bot""#,
            r#"could not translate host name "db" to address: Temporary failure in name resolution"#,
        ] {
            assert!(!is_refusal(message), "{message}");
        }
    }

    #[test]
    fn schema_names_are_plain_identifiers() {
        assert!(check_schema("fenceq").is_ok());
        assert!(check_schema("_q1").is_ok());
        for bad in ["", "Fenceq", "a\"b", "1a", "pg_catalog", "a b", &"x".repeat(64)] {
            assert!(check_schema(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn debug_output_hides_the_password() {
        let builder = crate::QueueBuilder::default().url("postgres://bot:s3cret@localhost/app");
        let shown = format!("{builder:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("bot:***@localhost"), "{shown}");
        for (url, secret) in [
            ("postgres://bot:se?cret@db.internal:5432/app", "cret"),
            ("postgres://bot:se#cret@db.internal:5432/app", "cret"),
            ("postgres://bot:p@ss/w?rd@db.internal:5432/app", "ss/w"),
            ("postgres://bot:p%40ss@db.internal:5432/app", "ss"),
            ("host=db user=bot password = s3cretvalue dbname=app", "s3cret"),
            (r"host=db password='a b\'c s3cret' dbname=app", "s3cret"),
            ("postgres://db/app?password=s3cret", "s3cret"),
        ] {
            let shown = format!("{:?}", crate::QueueBuilder::default().url(url));
            assert!(!shown.contains(secret), "{url}: {shown}");
            assert!(shown.contains("db"), "{url}: {shown}");
        }
    }
}
