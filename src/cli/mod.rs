//! The operator CLI: the clap definitions, the dispatch of one subcommand, opening the
//! database, the error type with its one-line rendering, and the `--dry-run` / `--expect`
//! rule shared by every command that changes rows.
//!
//! Adding a subcommand is one variant of [`Command`] (with its doc comment as help text),
//! one arm in [`Command::run`], and one module in `src/cli/` whose `Args` struct has a
//! `run(self, &mut Context)` method.

pub mod admin;
pub mod backoff;
pub mod backup;
pub mod bench;
pub mod decision;
pub mod demo;
pub mod groups;
pub mod inspect;
pub mod limits;
pub mod maintenance;
pub mod output;
pub mod pause;
pub mod schedules;
#[cfg(feature = "web")]
pub mod serve;
pub mod store;

use clap::{Args, Parser, Subcommand, ValueEnum};
use fenceq::{BackupReport, Job, JobId, JobState, Queue, SqliteStore};
use output::Output;
use serde_json::Value;
use std::error::Error as StdError;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use store::{CliStore, Open};

/// Operator tool for a fenceq queue database (an embedded durable work queue in SQLite, or a
/// PostgreSQL database).
///
/// Exit codes: 0 success, 1 error (one line on stderr starting with `error:`), 2 usage error.
/// Every command that changes rows takes `--dry-run` (print what would change, change nothing),
/// `--expect N` (abort with exit 1, changing nothing, unless exactly N jobs would change; for
/// `pause`, `unpause`, `backoff clear`, `limit set` and `limit clear`, N queues) and `--backup
/// PATH` (back the database up to PATH first; `fenceq backup` alone takes one).
#[derive(Debug, Parser)]
#[command(name = "fenceq", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    /// The queue database: an SQLite file, or a PostgreSQL URL or connection string.
    ///
    /// Defaults to `fenceq.db` (for `demo`: a temporary file, deleted afterwards). Only
    /// `enqueue`, `migrate` and `demo` create it when it is missing; every other command
    /// fails with "no database at PATH".
    ///
    /// PostgreSQL (a build with the `postgres` feature), where every command works the same
    /// except `backup` (use pg_dump): a URL (`postgres://user:password@host:5432/dbname`,
    /// `postgresql://...`; percent-encode `@` and `/` in a password as %40 and %2F) or a
    /// libpq key/value string (`host=db port=5432 user=bot password='a b' dbname=app`).
    /// What it leaves unset comes from libpq's PG* environment variables (PGHOST, PGPORT,
    /// PGUSER, PGPASSWORD, PGDATABASE, ...): `--db postgres://` takes everything from them.
    /// A value that starts with `postgres:` or holds a libpq keyword followed by `=` (host=,
    /// dbname=, password=, ...) is always taken as PostgreSQL, never as a file name (write
    /// ./NAME for such a file). A wrong password or a missing database is reported at once;
    /// a server that does not answer is waited for up to the connect timeout (10 s; set
    /// `connect_timeout=N` in the URL to wait less). The CLI never prints the password.
    /// Prefer ~/.pgpass or PGPASSWORD to a password on the command line.
    #[arg(long, global = true, value_name = "PATH|URL")]
    pub db: Option<PathBuf>,

    /// The PostgreSQL schema the queue's tables live in (only with a PostgreSQL --db).
    ///
    /// A lowercase identifier of [a-z0-9_]; created by the commands that create a queue
    /// (`enqueue`, `migrate`, `demo`). Without it, the connection's current schema
    /// (usually `public`). `bench` without it uses scratch schemas of its own.
    #[arg(long, global = true, value_name = "NAME")]
    pub schema: Option<String>,

    /// Print JSON for scripts: JSON Lines for listings and bench, else one document.
    ///
    /// Listings (`list`, `exhausted`, `unknown`, `schedules`) print one compact JSON object per line (JSON
    /// Lines; nothing for an empty listing), and so does `bench` (one line per scenario, as it
    /// finishes); every other command prints exactly one JSON document (`demo`: its figures). Commands that change rows report `dry_run`, `would_change` and `changed`.
    /// Times are integer milliseconds since the Unix epoch. Progress bars are off with --json.
    /// Errors still go to stderr as one `error:` line.
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The main job: records a few thousand bot updates (with redeliveries), works them
    /// with a worker pool (transient failures, exhaustions, one ambiguous outcome, one
    /// worker stalled past its lease whose late write the fence rejects) and explains it.
    ///
    /// With --json it prints one document with every figure instead (`deliveries`, `updates`,
    /// `duplicates_dropped`, `completed`, `retries`, `exhausted`, `acknowledged`, `unknown`,
    /// `stale_writes_rejected`, `replies`, `attempts`, timings, the `queue`, and the `db`
    /// path or null without --db) and `adds_up`. Either way it exits 1 if the figures do not
    /// add up.
    Demo(demo::DemoArgs),
    /// Measures throughput and claim latency beside raw SQL loops in the same run, on
    /// SQLite or on a postgres:// --db: runs the `fenceq-bench` program beside this one
    /// (`cargo build --release -p fenceq-bench` builds it) with --db, --schema, --json and
    /// OPTIONS, and exits as it exits. `fenceq bench --help` lists its options.
    Bench(bench::BenchArgs),
    /// Counts per queue and state: pending (and the oldest pending age), running (and how
    /// many have expired leases), waiting, completed, exhaustions awaiting acknowledgement,
    /// acknowledged exhaustions, unknown outcomes, cancelled; which queues are paused
    /// (since when, by whom, why), a paused queue with no jobs too; and which queues back off
    /// (until when, why: see `fenceq backoff`).
    ///
    /// `--format prometheus` prints them as Prometheus metrics (text format 0.0.4; see
    /// docs/operations.md for node-exporter's textfile collector): `fenceq_jobs{queue,state}`,
    /// `fenceq_oldest_pending_age_seconds`, `fenceq_exhaustions_unacknowledged`,
    /// `fenceq_unknown_outcomes_unresolved`, `fenceq_expired_leases`, `fenceq_queue_paused` and
    /// `fenceq_queue_backoff_seconds`, each per queue.
    Stats(inspect::StatsArgs),
    /// Jobs in id order, optionally of one queue and one state.
    List(inspect::ListArgs),
    /// One job's whole record, with its payload (as text when it is UTF-8, else as hex; the
    /// first 4 KiB unless --full) and its attempts that did not complete, newest first, one
    /// line each (the 100 newest unless --attempts N).
    Show(inspect::ShowArgs),
    /// Exhaustions awaiting acknowledgement (the dead letters), in id order.
    Exhausted(inspect::ExhaustedArgs),
    /// Unknown outcomes awaiting resolution (the side effect may or may not have happened).
    Unknown(inspect::UnknownArgs),
    /// Groups with live jobs (a job's group, `NewJob::group`: one job of a group at a time, in
    /// enqueue order): each group's head, how many jobs wait behind it, and why a blocked
    /// group cannot go on (a head that is unknown, exhausted, parked or backing off). With
    /// --blocked, only those.
    Groups(groups::GroupsArgs),
    /// Shows, or sets for every process, what a failed head does to its queue's groups:
    /// `stop` (the default: an unknown or unacknowledged exhausted head stops its group until
    /// a person decides) or `continue` (it no longer blocks; setting it releases such groups).
    ///
    /// --expect counts the jobs the change hands on: one of each group a failed head stops,
    /// which `continue` lets start (--dry-run names the groups); `stop` hands none on. It is
    /// checked against the groups read just before the change.
    GroupPolicy(groups::GroupPolicyArgs),
    /// A queue's rate and concurrency limits, stored in the database so that every process
    /// obeys them: `limit set QUEUE --rate 30/1s --group-rate 1/1s --group-rate 20/60s
    /// --max-running 8`, `limit show [QUEUE]`, `limit clear QUEUE`. A claim never hands out a
    /// job that would break one; held-back jobs wait as pending, spending no attempt.
    Limit(limits::LimitArgs),
    /// Adds a job (creating the database if it is missing) and prints its id and whether it
    /// was new or a duplicate of an existing job with the same queue and key.
    Enqueue(admin::EnqueueArgs),
    /// Acknowledges one exhaustion by job id, or every unacknowledged exhaustion of a queue
    /// with --all --queue Q, so that retention may prune them.
    Ack(admin::AckArgs),
    /// Sends an exhausted job back to pending, due now, with a fresh attempt budget.
    Replay(admin::ReplayArgs),
    /// Settles an unknown outcome: complete (it happened), retry (run it again) or exhaust
    /// (give up, as an unacknowledged exhaustion). Records --by and --note on the job.
    Resolve(admin::ResolveArgs),
    /// Cancels a pending, waiting or running job (a running owner finds out at its next
    /// renew or settle).
    Cancel(admin::CancelArgs),
    /// Pauses a queue: claims of it find nothing, in every process, until `fenceq unpause`.
    /// Enqueues still land, running attempts finish and settle, and `reap` still returns
    /// expired leases to pending. A queue with no jobs can be paused. Records --by and --note
    /// on the queue; pausing a paused queue changes nothing (its first record stays).
    ///
    /// --expect counts queues here: 1 when the command pauses the queue, 0 when it is paused
    /// already.
    Pause(pause::PauseArgs),
    /// Unpauses a paused queue: its due jobs are claimable again (worker pools find them at
    /// their next poll). Records --by and --note on the queue in place of the pause.
    ///
    /// --expect counts queues here: 1 when the command unpauses the queue, 0 when it is not
    /// paused.
    Unpause(pause::UnpauseArgs),
    /// A queue's back-off, set by a handler's provider back-off for the whole queue
    /// (`Outcome::RetryAfter` with the queue scope): no claim of the queue, in any process,
    /// hands out anything before it ends. `backoff show [QUEUE]` prints it (every queue
    /// backing off without QUEUE); `backoff clear QUEUE` lifts it early.
    Backoff(backoff::BackoffArgs),
    /// The periodic jobs the database records (registered with `Queue::schedule` by the
    /// application's processes; this build need not have the `schedule` feature): each one's
    /// definition (cron expression and time zone, or interval), queue, latest tick, next tick
    /// and when its process last recorded them. A next tick more than a minute in the past
    /// is overdue: no process with the schedule registered has run its scheduler since.
    Schedules(schedules::SchedulesArgs),
    /// Returns running jobs with expired leases to pending (exhausted when no attempts are
    /// left) and exhausts waiting jobs past their deadline.
    Reap(maintenance::ReapArgs),
    /// Deletes completed and cancelled jobs, and acknowledged exhaustions, older than the
    /// retention. Never deletes pending, running, waiting, unknown or unacknowledged rows.
    Prune(maintenance::PruneArgs),
    /// Creates the database or upgrades its schema to this build's version, printing the
    /// version before and after. (No other command upgrades a file: those that read or change
    /// rows refuse an older schema and say to run this.)
    Migrate(maintenance::MigrateArgs),
    /// Writes an online backup of the database to OUT: consistent while the application keeps
    /// writing, read-only on the database (any schema version, never upgraded), a new
    /// owner-only file that appears only once it is whole and synced.
    ///
    /// A PostgreSQL queue is backed up by its server (pg_dump), not by fenceq: a
    /// postgres:// URL is refused with that advice.
    Backup(backup::BackupArgs),
    /// Serves the operator's web dashboard: every queue's counts, a queue's jobs, a job's
    /// record, the exhaustions and unknown outcomes awaiting someone, /metrics; and, unless
    /// --read-only, acknowledge, replay, cancel, resolve, pause and unpause, each guarded by
    /// the state the page showed and recorded with who and why (see docs/operations.md).
    #[cfg(feature = "web")]
    Serve(serve::ServeArgs),
}

impl Command {
    /// Runs the subcommand on the store `--db` names: PostgreSQL for a `postgres://` URL,
    /// else SQLite. The store is chosen here, once; every command is written once, generic
    /// over it.
    pub fn run(self, ctx: &mut Context) -> CliResult<()> {
        // The bench is a program of its own, which reads --db and --schema itself.
        if let Command::Bench(args) = self {
            return args.run(ctx);
        }
        if let Some(backup) = self.backup_opts() {
            backup.check_store(ctx)?;
        }
        match (ctx.is_postgres(), &ctx.schema) {
            (true, _) => {
                // Read as libpq would, before anything connects; the refusal never repeats it.
                let db = ctx.db.to_string_lossy();
                if let Err(e) = fenceq::ConnInfo::parse(&db) {
                    let lower = db.to_ascii_lowercase();
                    if (lower.starts_with("postgres:") || lower.starts_with("postgresql:")) && !lower.contains("://") {
                        return Err(fail(
                            "--db starts with `postgres:` but is not a postgres:// URL: write \
                             postgres://user@host:5432/dbname, or postgres:// alone to take every setting from \
                             the PG* environment variables (write ./NAME for a file of that name)",
                        ));
                    }
                    return Err(e.into());
                }
                self.run_on_postgres(ctx)
            }
            (false, Some(_)) => {
                Err(fail("--schema names a PostgreSQL schema; it needs a PostgreSQL --db (postgres://... or host=...)"))
            }
            (false, None) => self.run_on::<SqliteStore>(ctx),
        }
    }

    /// The command's `--backup PATH`, for those that take one.
    fn backup_opts(&self) -> Option<&backup::BackupOpts> {
        match self {
            Command::Enqueue(args) => Some(&args.backup),
            Command::Ack(args) => Some(&args.backup),
            Command::Replay(args) => Some(&args.backup),
            Command::Resolve(args) => Some(&args.backup),
            Command::Cancel(args) => Some(&args.backup),
            Command::Reap(args) => Some(&args.backup),
            Command::Prune(args) => Some(&args.backup),
            Command::Migrate(args) => Some(&args.backup),
            Command::Pause(args) => Some(&args.backup),
            Command::Unpause(args) => Some(&args.backup),
            Command::GroupPolicy(args) => Some(&args.backup),
            Command::Backoff(args) => match &args.action {
                backoff::BackoffAction::Clear { backup, .. } => Some(backup),
                backoff::BackoffAction::Show { .. } => None,
            },
            Command::Limit(args) => match &args.action {
                limits::LimitAction::Set(set) => Some(&set.backup),
                limits::LimitAction::Clear(clear) => Some(&clear.backup),
                limits::LimitAction::Show(_) => None,
            },
            _ => None,
        }
    }

    #[cfg(feature = "postgres")]
    fn run_on_postgres(self, ctx: &mut Context) -> CliResult<()> {
        self.run_on::<fenceq::PostgresStore>(ctx)
    }

    #[cfg(not(feature = "postgres"))]
    fn run_on_postgres(self, _ctx: &mut Context) -> CliResult<()> {
        if let Command::Backup(args) = self {
            // Its own advice (pg_dump) is the more useful answer.
            return args.run(_ctx);
        }
        Err(fail(
            "--db is a PostgreSQL URL or connection string, but this fenceq was built without the \
             `postgres` feature (build it with `--features postgres`, or write ./NAME for a file of that name)",
        ))
    }

    fn run_on<S: CliStore>(self, ctx: &mut Context) -> CliResult<()> {
        match self {
            Command::Demo(args) => args.run::<S>(ctx),
            // Run above, before the store is chosen.
            Command::Bench(args) => args.run(ctx),
            Command::Stats(args) => args.run::<S>(ctx),
            Command::List(args) => args.run::<S>(ctx),
            Command::Show(args) => args.run::<S>(ctx),
            Command::Exhausted(args) => args.run::<S>(ctx),
            Command::Unknown(args) => args.run::<S>(ctx),
            Command::Groups(args) => args.run::<S>(ctx),
            Command::GroupPolicy(args) => args.run::<S>(ctx),
            Command::Limit(args) => args.run::<S>(ctx),
            Command::Enqueue(args) => args.run::<S>(ctx),
            Command::Ack(args) => args.run::<S>(ctx),
            Command::Replay(args) => args.run::<S>(ctx),
            Command::Resolve(args) => args.run::<S>(ctx),
            Command::Cancel(args) => args.run::<S>(ctx),
            Command::Pause(args) => args.run::<S>(ctx),
            Command::Unpause(args) => args.run::<S>(ctx),
            Command::Backoff(args) => args.run::<S>(ctx),
            Command::Schedules(args) => args.run::<S>(ctx),
            Command::Reap(args) => args.run::<S>(ctx),
            Command::Prune(args) => args.run::<S>(ctx),
            Command::Migrate(args) => args.run::<S>(ctx),
            // SQLite files only: it refuses a URL with the advice to use pg_dump.
            Command::Backup(args) => args.run(ctx),
            #[cfg(feature = "web")]
            Command::Serve(args) => args.run::<S>(ctx),
        }
    }
}

/// Parses nothing more: runs the parsed command line and flushes the output.
pub fn run(cli: Cli) -> CliResult<()> {
    let db_given = cli.db.is_some();
    let db = cli.db.unwrap_or_else(|| PathBuf::from("fenceq.db"));
    let mut ctx = Context { db, db_given, schema: cli.schema, out: Output::new(cli.json), backup: None };
    cli.command.run(&mut ctx)?;
    ctx.out.flush()?;
    Ok(())
}

// ------------------------------------------------------------------------------- context

/// What every command gets: the database path and the output.
pub struct Context {
    /// The `--db` path or URL (`fenceq.db` when not given).
    pub db: PathBuf,
    /// True when `--db` was given.
    pub db_given: bool,
    /// The `--schema` (PostgreSQL only).
    pub schema: Option<String>,
    /// Standard output, in the mode `--json` chose.
    pub out: Output,
    /// The backup `--backup` took before the change, if any.
    pub backup: Option<BackupReport>,
}

impl Context {
    /// True with `--json`.
    pub fn json(&self) -> bool {
        self.out.is_json()
    }

    /// True when `--db` is a PostgreSQL URL or connection string
    /// ([`fenceq::is_connection_string`]).
    pub fn is_postgres(&self) -> bool {
        is_server_url(&self.db)
    }

    /// The libpq connection string the CLI's own connections use (the bench's raw loops):
    /// `--db` read as libpq reads it and written back as a key/value string, with a connect
    /// timeout (10 seconds) and `gssencmode=disable` added unless `--db` (or, for the GSS
    /// mode, `PGGSSENCMODE`) chooses its own. It holds the password: never print it. (The
    /// queue's own connections get the same from the library.)
    ///
    /// Why: a command is a short-lived process, and it can exit while a connection is still
    /// being opened on another thread (the demo's and the bench's workers). libpq's default `gssencmode=prefer` asks libkrb5 for credentials on
    /// every connect, and libkrb5's exit-time finalizer then aborts the process (SIGABRT,
    /// "krb5int_getspecific: Assertion `destructors_set[keynum] == 1' failed"): measured
    /// here at about 1 exit in 100 under load, none in 900 with GSS encryption off. GSS
    /// authentication (`gss` in pg_hba.conf) does not need GSS encryption; a deployment that
    /// does can say `gssencmode=require` in the URL.
    #[cfg(feature = "postgres")]
    pub fn server_url(&self) -> String {
        let url = self.db.to_string_lossy().into_owned();
        // `Command::run` refused a string libpq cannot read before any command ran.
        let Ok(info) = fenceq::ConnInfo::parse(&url) else { return url };
        let mut info = info.with_connect_timeout_bound(fenceq::PostgresOptions::DEFAULT_CONNECT_TIMEOUT.as_secs());
        if std::env::var_os("PGGSSENCMODE").is_none() {
            info = info.or_set("gssencmode", "disable");
        }
        info.to_libpq()
    }

    /// `--db` for people: the file's path, or the URL without its password (and the
    /// schema, when `--schema` names one).
    pub fn db_display(&self) -> String {
        if !self.is_postgres() {
            return self.db.display().to_string();
        }
        let url = fenceq::redact_connection_string(&self.db.to_string_lossy());
        match &self.schema {
            Some(schema) => format!("{url} (schema {schema})"),
            None => url,
        }
    }

    /// The `--db` (and `--schema`) options that name this database again, for a hint to
    /// the user, without the URL's password.
    pub fn db_args(&self) -> String {
        if !self.is_postgres() {
            return format!("--db {}", self.db.display());
        }
        // In single quotes for a POSIX shell (a `'` inside as '\'').
        let url = fenceq::redact_connection_string(&self.db.to_string_lossy()).replace('\'', r"'\''");
        match &self.schema {
            Some(schema) => format!("--db '{url}' --schema {schema}"),
            None => format!("--db '{url}'"),
        }
    }

    /// Prints the JSON document of a command that changes rows, with the backup `--backup`
    /// took as `backup` (`null` when none was).
    pub fn change_document(&mut self, mut document: Value) -> std::io::Result<()> {
        if let Value::Object(fields) = &mut document {
            fields.insert("backup".to_string(), self.backup.as_ref().map_or(Value::Null, backup::backup_json));
        }
        self.out.document(&document)
    }

    /// Opens a database that must already exist and hold this build's fenceq schema, to
    /// change rows: a missing file is an error instead of a new empty database, and an older
    /// schema is an error that says to run `fenceq migrate` (it is never upgraded under a
    /// running older application by a command that was asked for something else).
    pub fn open_existing<S: CliStore>(&self) -> CliResult<Queue<S>> {
        S::open(self, Open::Existing)
    }

    /// The queue a changing command works on: read-only for `--dry-run` (nothing in the
    /// database is touched, not its schema, not its journal mode), else
    /// [`Context::open_existing`].
    pub fn open_for_change<S: CliStore>(&self, change: &ChangeOpts) -> CliResult<Queue<S>> {
        if change.dry_run {
            self.open_read_only()
        } else {
            self.open_existing()
        }
    }

    /// Opens an existing database for reading only: never creates, switches or upgrades it
    /// (an older schema is an error that says to run `fenceq migrate`).
    pub fn open_read_only<S: CliStore>(&self) -> CliResult<Queue<S>> {
        S::open(self, Open::ReadOnly)
    }

    /// Opens the database, creating it (and its directory; on PostgreSQL, its schema)
    /// when it is missing.
    pub fn open_or_create<S: CliStore>(&self) -> CliResult<Queue<S>> {
        S::open(self, Open::OrCreate)
    }

    /// Fails when the database path names a directory (or is a server's URL).
    pub fn check_not_dir(&self) -> CliResult<()> {
        check_not_server_url(&self.db)?;
        if self.db.is_dir() {
            return Err(fail(format!("{} is a directory, not a database file", self.db.display())));
        }
        Ok(())
    }
}

/// Fails unless `path` is an existing file.
pub fn check_existing(path: &Path) -> CliResult<()> {
    check_not_server_url(path)?;
    if !path.exists() {
        return Err(fail(format!("no database at {}", path.display())));
    }
    if path.is_dir() {
        return Err(fail(format!("{} is a directory, not a database file", path.display())));
    }
    Ok(())
}

/// True when `--db` is a PostgreSQL URL or connection string, never to be taken as a file
/// name ([`fenceq::is_connection_string`]: `postgres:...`, or `host=... dbname=...`).
fn is_server_url(path: &Path) -> bool {
    fenceq::is_connection_string(&path.to_string_lossy())
}

/// Fails for a PostgreSQL URL where a file must be, which would otherwise name a file (and
/// its directories). The URL is not repeated: it may hold a password.
fn check_not_server_url(path: &Path) -> CliResult<()> {
    if is_server_url(path) {
        return Err(fail(
            "--db is a PostgreSQL URL, but this needs an SQLite database file \
             (a PostgreSQL queue's backups are the server's job: pg_dump)",
        ));
    }
    Ok(())
}

/// The job with this id, or a "not found" error.
pub fn load_job<S: CliStore>(queue: &Queue<S>, id: i64) -> CliResult<Job> {
    queue.job(JobId(id))?.ok_or_else(|| fail(format!("job {id} not found")))
}

// ------------------------------------------------------------------------------- shared arguments

/// `--dry-run` and `--expect N`, flattened into every command that changes rows.
#[derive(Debug, Clone, Copy, Args)]
pub struct ChangeOpts {
    /// Print what would change and change nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Abort with exit code 1, changing nothing, unless exactly N jobs (for `pause`,
    /// `unpause`, `backoff clear`, `limit set` and `limit clear`: queues) would change.
    ///
    /// The count and the change are one transaction: if the change would touch another
    /// number of jobs, it is rolled back (`limit` and `group-policy` check the count read
    /// just before the change). With --dry-run the expectation is checked against the
    /// preview (a mismatch still exits 1).
    #[arg(long, value_name = "N")]
    pub expect: Option<u64>,
}

impl ChangeOpts {
    /// Compares the count of jobs that would change with `--expect`.
    pub fn check(&self, would_change: u64) -> CliResult<()> {
        self.check_counted(would_change, ("job", "jobs"))
    }

    /// Compares the count that would change with `--expect`, counting `what` (one, many):
    /// `("queue", "queues")` for `pause` and `unpause`.
    pub fn check_counted(&self, would_change: u64, what: (&'static str, &'static str)) -> CliResult<()> {
        match self.expect {
            Some(expected) if expected != would_change => Err(mismatch_of(expected, would_change, what)),
            _ => Ok(()),
        }
    }

    /// The result of a change the library guarded with `--expect`: a `CountMismatch` (the
    /// transaction was rolled back) reads as the CLI's own mismatch line.
    pub fn guarded<T>(&self, result: fenceq::Result<T>) -> CliResult<T> {
        match result {
            Err(fenceq::Error::CountMismatch { expected, found, .. }) => Err(mismatch(expected, found)),
            other => Ok(other?),
        }
    }
}

fn mismatch(expected: u64, found: u64) -> BoxError {
    mismatch_of(expected, found, ("job", "jobs"))
}

fn mismatch_of(expected: u64, found: u64, (one, many): (&'static str, &'static str)) -> BoxError {
    fail(format!("--expect {expected} but {found} {} would change; nothing was changed", plural(found, one, many)))
}

/// A job state, as the command line spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StateArg {
    /// Waiting to be claimed (due or scheduled).
    Pending,
    /// Claimed under a lease.
    Running,
    /// Parked until resumed or until its deadline.
    Waiting,
    /// Done.
    Completed,
    /// Out of attempts or exhausted on purpose (acknowledged or not).
    Exhausted,
    /// Ambiguous outcome awaiting resolution.
    Unknown,
    /// Cancelled by an operator.
    Cancelled,
}

impl From<StateArg> for JobState {
    fn from(state: StateArg) -> JobState {
        match state {
            StateArg::Pending => JobState::Pending,
            StateArg::Running => JobState::Running,
            StateArg::Waiting => JobState::Waiting,
            StateArg::Completed => JobState::Completed,
            StateArg::Exhausted => JobState::Exhausted,
            StateArg::Unknown => JobState::Unknown,
            StateArg::Cancelled => JobState::Cancelled,
        }
    }
}

/// Parses a duration with a unit: `500ms`, `30s`, `15m`, `12h`, `7d`, `2w`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return Err(format!("{text:?} does not start with a number; use e.g. 30s, 15m, 12h or 7d"));
    }
    let value: u64 = number.parse().map_err(|_| format!("{number} is too large"))?;
    let unit_ms: u64 = match unit.trim() {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        "" => return Err(format!("{text:?} has no unit; use s, m, h or d (e.g. 7d)")),
        other => return Err(format!("unknown unit {other:?}; use ms, s, m, h, d or w (e.g. 7d)")),
    };
    value.checked_mul(unit_ms).map(Duration::from_millis).ok_or_else(|| format!("{text} is too long"))
}

/// `n` followed by the singular or plural word.
pub fn plural(n: u64, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 {
        one
    } else {
        many
    }
}

// ------------------------------------------------------------------------------- errors

/// Any error a command returns; rendered as one line by [`error_line`].
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// The result of every command.
pub type CliResult<T> = Result<T, BoxError>;

/// An error of the CLI itself: a message and an optional cause.
#[derive(Debug)]
pub struct Failure {
    message: String,
    source: Option<BoxError>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for Failure {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn StdError + 'static))
    }
}

/// An error with just a message.
pub fn fail(message: impl Into<String>) -> BoxError {
    Box::new(Failure { message: message.into(), source: None })
}

/// Adds a message in front of an error (`read(path).context(|| format!("reading {path}"))`).
pub trait ResultExt<T> {
    /// Wraps the error with `message()` as its outer text.
    fn context(self, message: impl FnOnce() -> String) -> CliResult<T>;
}

impl<T, E: Into<BoxError>> ResultExt<T> for Result<T, E> {
    fn context(self, message: impl FnOnce() -> String) -> CliResult<T> {
        self.map_err(|e| Box::new(Failure { message: message(), source: Some(e.into()) }) as BoxError)
    }
}

/// The error and its source chain joined by ": " on one line (a source whose text the line
/// already contains is skipped, as some errors repeat their cause in their own message).
pub fn error_line(error: &(dyn StdError + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    output::terminal_safe(&line.replace(['\n', '\r'], " ")).into_owned()
}

/// True when the error (or a cause) is a closed stdout, as in `fenceq list | head -1`.
pub fn is_broken_pipe(error: &(dyn StdError + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(e) = current {
        if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) {
            return true;
        }
        current = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(1_209_600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("7").is_err());
        assert!(parse_duration("d").is_err());
        assert!(parse_duration("7y").is_err());
        assert!(parse_duration("-1d").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
        assert!(parse_duration("9999999999999999d").is_err());
    }

    #[test]
    fn error_chain_is_one_line() {
        let inner = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let outer: CliResult<()> = Err(inner).context(|| "reading payload file x".to_string());
        let error = outer.unwrap_err();
        assert_eq!(error_line(error.as_ref()), "reading payload file x: no such file");
        let pipe: CliResult<()> = Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe)).context(String::new);
        assert!(is_broken_pipe(pipe.unwrap_err().as_ref()));
    }

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn a_postgres_url_without_the_feature_names_the_feature() {
        for url in [
            "postgres://ops:s3cret@db.internal/bot",
            "postgresql://ops:s3cret@db.internal/bot",
            "host=127.0.0.1 port=45601 user=botpw password=s3cret dbname=fenceq_test",
        ] {
            for command in [&["stats"][..], &["migrate"], &["demo"], &["cancel", "1"]] {
                let args = ["fenceq", "--db", url].into_iter().chain(command.iter().copied());
                let error = run(Cli::try_parse_from(args).expect("valid arguments")).expect_err("refused");
                let line = error_line(error.as_ref());
                assert!(line.contains("without the `postgres` feature"), "{line}");
                assert!(!line.contains("s3cret"), "{line}");
                assert!(!Path::new(url).exists(), "no file named after the connection string");
            }
        }
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn server_urls_turn_gss_encryption_off_unless_they_choose() {
        let ctx = |db: &str| Context {
            db: PathBuf::from(db),
            db_given: true,
            schema: None,
            out: Output::new(false),
            backup: None,
        };
        if std::env::var_os("PGGSSENCMODE").is_some() {
            return; // the environment chose; the URL is left as it is (checked below)
        }
        let info = |db: &str| fenceq::ConnInfo::parse(&ctx(db).server_url()).unwrap();
        assert_eq!(info("postgres://u@h/d").get("gssencmode"), Some("disable"));
        assert_eq!(info("postgres://u@h/d?sslmode=require").get("sslmode"), Some("require"));
        assert_eq!(info("postgres://u@h/d?gssencmode=require").get("gssencmode"), Some("require"));
        // `#` and `?` are a password's characters to libpq, not a fragment or a query.
        let hashed = info("postgresql://u:p#x?y@h/d");
        assert_eq!((hashed.get("password"), hashed.get("dbname")), (Some("p#x?y"), Some("d")));
        assert_eq!(hashed.get("gssencmode"), Some("disable"));
        assert_eq!(info("host=h dbname=d").get("connect_timeout"), Some("10"));
        assert_eq!(info("host=h dbname=d connect_timeout=0").get("connect_timeout"), Some("10"));
        assert_eq!(info("postgres://u@h/d?connect_timeout=-1").get("connect_timeout"), Some("10"));
        assert_eq!(ctx("postgres://u:s3cret@h/d").db_display(), "postgres://u:***@h/d");
        assert_eq!(ctx("host=h password = 's3 cret' dbname=d").db_display(), "host=h password = *** dbname=d");
    }

    #[test]
    fn expect_compares() {
        let opts = ChangeOpts { dry_run: false, expect: Some(2) };
        assert!(opts.check(2).is_ok());
        assert!(opts.check(1).is_err());
        assert!(ChangeOpts { dry_run: false, expect: None }.check(7).is_ok());
    }
}
