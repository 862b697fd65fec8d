//! PostgreSQL's own settings: the server and database, the schema, the connect timeout.
//! The settings every store reads (clock, limits, pool size, busy timeout, read-only,
//! upgrade) are the [`QueueBuilder`]'s own.

use super::PostgresStore;
use crate::config::QueueBuilder;
use crate::error::Result;
use crate::store::default::DefaultOptions;
use crate::store::{Settings, StoreOptions};
use std::time::Duration;

/// A database URL, shown with its password replaced (`Debug`, errors).
#[derive(Clone)]
pub(crate) struct Url(pub(crate) String);

impl std::fmt::Debug for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::conninfo::redact_connection_string(&self.0))
    }
}

/// The PostgreSQL store's own settings (feature `postgres`): `Queue::builder().url(..)`
/// starts a builder with them, or `Queue::builder().store(PostgresOptions::new(url))`.
///
/// On PostgreSQL the builder's pool size allows up to twice that many connections; its
/// busy timeout is each session's `lock_timeout` (how long a statement waits for a row lock
/// another transaction holds); every session also gets a statement timeout and an idle in
/// transaction timeout (below). `synchronous` does not apply: durability is the server's
/// `synchronous_commit` (on by default: a commit returns once its WAL is flushed on the
/// server).
///
/// ## Defaults
///
/// - schema: none (the connection's current schema, usually `public`)
/// - connect timeout: the URL's `connect_timeout`, else
///   [`PostgresOptions::DEFAULT_CONNECT_TIMEOUT`] (10 seconds)
/// - statement timeout: [`PostgresOptions::STATEMENT_TIMEOUT`] (30 seconds, fixed)
/// - idle in transaction timeout: [`PostgresOptions::IDLE_IN_TRANSACTION_TIMEOUT`] (60
///   seconds, fixed)
/// - prepared statements: on (see [`PostgresOptions::prepared_statements`])
///
/// ```no_run
/// use fenceq::{PostgresOptions, Queue};
/// let options = PostgresOptions::new("postgres://bot@localhost/app").schema("fenceq");
/// let queue = Queue::builder().store(options).pool_size(8).open()?;
/// # Ok::<(), fenceq::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The server and database, shown without its password.
    pub(crate) url: Url,
    pub(crate) schema: Option<String>,
    /// `None`: the URL's `connect_timeout`, else [`PostgresOptions::DEFAULT_CONNECT_TIMEOUT`].
    pub(crate) connect_timeout: Option<Duration>,
    /// Whether each connection keeps the store's statements prepared.
    pub(crate) prepared_statements: bool,
}

impl PostgresOptions {
    /// How long opening a connection may take unless the URL's `connect_timeout` or
    /// [`PostgresOptions::connect_timeout`] says otherwise.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
    /// The longest any one statement may run (`statement_timeout`).
    pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
    /// How long a transaction may sit idle between statements, a caller's closure included,
    /// before the server ends the session (`idle_in_transaction_session_timeout`).
    pub const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

    /// The PostgreSQL server and database: a libpq URL
    /// (`postgres://user:password@host:5432/dbname?sslmode=require`) or key/value string
    /// (`host=db user=bot password='a b' dbname=app`), read as libpq reads it (see
    /// [`ConnInfo`](crate::ConnInfo)); what it leaves unset comes from libpq's `PG*`
    /// environment variables (`postgres://` alone takes everything from them). In a URL, a
    /// password holding `@` or `/` must be percent-encoded (`%40`, `%2F`): libpq would read
    /// it as part of the host or port, so opening refuses such a URL. `?`, `#` and spaces may
    /// be written as they are.
    ///
    /// The password never appears in errors, logs or `Debug` output; prefer a `~/.pgpass`
    /// file or `PGPASSWORD` over a password in the URL.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresOptions { url: Url(url.into()), schema: None, connect_timeout: None, prepared_statements: true }
    }

    /// The schema the queue's tables live in (created if missing), so that the queue can
    /// sit inside the application's own database: a lowercase identifier of `[a-z0-9_]`.
    /// Every connection of the queue gets `search_path` = this schema, then `public`.
    /// Without it, the tables go in the connection's current schema (usually `public`).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// How long opening a connection may take before it counts as failed: each connect
    /// (libpq's `connect_timeout`, in whole seconds; it replaces the URL's), and opening's
    /// wait for a server that does not answer or refuses the TCP connection. A server that
    /// answers with a final refusal (wrong password, no such database or role) is reported
    /// at once whatever this says. A check-out from the pool later waits up to the busy
    /// timeout plus this.
    ///
    /// # Errors
    ///
    /// Opening refuses a timeout outside 1 second..=1 hour with `InvalidInput`.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Whether the queue's connections keep its statements prepared (on by default): each
    /// connection then has the server parse and plan a statement once, and runs it by name
    /// afterwards, where the server would otherwise parse and plan every claim, settle and
    /// clock read again. Turn it off behind a connection pooler that hands one session's
    /// statements to another server connection, such as PgBouncer in transaction mode
    /// before 1.21 (or later with `max_prepared_statements = 0`): the server would answer
    /// `prepared statement "…" does not exist`.
    pub fn prepared_statements(mut self, on: bool) -> Self {
        self.prepared_statements = on;
        self
    }
}

impl StoreOptions for PostgresOptions {
    type Store = PostgresStore;

    fn open_store(&self, settings: &Settings) -> Result<PostgresStore> {
        PostgresStore::open(self, settings)
    }
}

/// Choosing PostgreSQL on a new builder (feature `postgres`).
impl QueueBuilder<DefaultOptions> {
    /// Opens the queue on PostgreSQL, in the database `url` names (see
    /// [`PostgresOptions::new`]), keeping every setting made so far that all stores read:
    /// `Queue::builder().url(url)` is `Queue::builder().store(PostgresOptions::new(url))`.
    pub fn url(self, url: impl Into<String>) -> QueueBuilder<PostgresOptions> {
        self.store(PostgresOptions::new(url))
    }
}

/// PostgreSQL's settings, set through the builder (feature `postgres`).
impl QueueBuilder<PostgresOptions> {
    /// See [`PostgresOptions::schema`].
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.options = self.options.schema(schema);
        self
    }

    /// See [`PostgresOptions::connect_timeout`].
    ///
    /// # Errors
    ///
    /// Opening refuses a timeout outside 1 second..=1 hour with `InvalidInput`.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options = self.options.connect_timeout(timeout);
        self
    }

    /// See [`PostgresOptions::prepared_statements`].
    pub fn prepared_statements(mut self, on: bool) -> Self {
        self.options = self.options.prepared_statements(on);
        self
    }

    /// Opens the queue on PostgreSQL, applying pending schema upgrades: the same as
    /// [`QueueBuilder::open`], named for the store.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for bad settings (a URL libpq cannot read or would misread, a bad
    /// schema name or connect timeout, and the settings [`QueueBuilder::open`] checks for
    /// every store) and, at once, for a connection the server refuses for good (`what` is
    /// "database URL", the server's reason inside: authentication failed, no such database
    /// or role, no permission to connect); `Unavailable` when no connection could be opened
    /// within the connect timeout (an unreachable server, or only a read-only standby
    /// reachable, with the last attempt's reason: retryable);
    /// `SchemaTooNew`, `SchemaTooOld` (read only, or without [`QueueBuilder::upgrade`]), the
    /// server's errors while migrating.
    pub fn open_postgres(self) -> Result<crate::Queue<PostgresStore>> {
        self.open()
    }
}

/// Opening a queue on PostgreSQL (feature `postgres`).
impl crate::Queue<PostgresStore> {
    /// Opens the queue in the PostgreSQL database at `url`
    /// (`postgres://user@host:5432/dbname`), creating or upgrading its tables, with default
    /// settings. See [`PostgresOptions::new`] for the URL and [`PostgresOptions::schema`] to
    /// keep the queue in a schema of its own.
    ///
    /// # Errors
    ///
    /// As [`QueueBuilder::open_postgres`]: `InvalidInput` for a URL that cannot be read and
    /// at once for a final refusal by the server (wrong password, no such database or role),
    /// `Unavailable` when the server could not be reached within the connect timeout (the
    /// server's reason inside, never the password); `SchemaTooNew` (the schema is left untouched); the
    /// server's errors while migrating.
    pub fn open_postgres(url: &str) -> Result<crate::Queue<PostgresStore>> {
        crate::Queue::builder().url(url).open()
    }
}

/// How long opening a connection may take unless the URL's `connect_timeout` or
/// [`PostgresOptions::connect_timeout`] says otherwise: 10 seconds.
#[deprecated(since = "0.1.0", note = "use PostgresOptions::DEFAULT_CONNECT_TIMEOUT")]
pub const POSTGRES_CONNECT_TIMEOUT: Duration = PostgresOptions::DEFAULT_CONNECT_TIMEOUT;
/// The longest any one statement may run (`statement_timeout`): 30 seconds.
#[deprecated(since = "0.1.0", note = "use PostgresOptions::STATEMENT_TIMEOUT")]
pub const POSTGRES_STATEMENT_TIMEOUT: Duration = PostgresOptions::STATEMENT_TIMEOUT;
/// How long a transaction may sit idle between statements before the server ends the
/// session (`idle_in_transaction_session_timeout`): 60 seconds.
#[deprecated(since = "0.1.0", note = "use PostgresOptions::IDLE_IN_TRANSACTION_TIMEOUT")]
pub const POSTGRES_IDLE_IN_TRANSACTION_TIMEOUT: Duration = PostgresOptions::IDLE_IN_TRANSACTION_TIMEOUT;
