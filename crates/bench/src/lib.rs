//! fenceq's benchmark: fenceq's throughput and claim latency beside raw SQL loops measured
//! in the same process and run, in interleaved rounds, on SQLite (beside raw rusqlite loops
//! over a queue-shaped table) or on a PostgreSQL `--db` (beside a raw SQL loop on the same
//! server, with the `postgres` feature). `docs/performance.md` holds the figures and the
//! commands that produced them.
//!
//! Run it from the repository with one command (it builds what it needs):
//!
//! ```sh
//! cargo run --release -p fenceq-bench -- --jobs 20000 --rounds 5
//! cargo run --release -p fenceq-bench --features postgres -- --db postgres://... --json
//! ```
//!
//! or as `fenceq bench ...` once it is built beside the `fenceq` binary.
//!
//! # Why a crate and a binary of its own
//!
//! The bench measures fenceq through its public API only, so it is a client of the library
//! like any application, and its code (and its raw baselines' SQL) stays out of the
//! operator's CLI in `src/cli/`. Cargo forbids a cycle of normal dependencies, and this
//! crate depends on the `fenceq` package, so the `fenceq` binary (in that package) cannot
//! link it. Instead `fenceq bench ARGS` runs the `fenceq-bench` executable from the
//! directory of its own executable (where Cargo puts every binary of a workspace), passing
//! `--db`, `--schema`, `--json` and ARGS through and exiting as it exits; without one there
//! it fails with the command that builds it. The alternatives cost more than one extra
//! build command: moving the `fenceq` binary into a package of its own would change what
//! `cargo run` runs at the repository's root, and Cargo's binary artifact dependencies are
//! unstable.
//!
//! The library half holds everything and the binary only parses and reports, so that the
//! command line is tested as users run it (`tests/`) and the modules stay private.
//!
//! The output helpers (`output.rs`) and the error type with its one-line rendering (below)
//! are copies of the `fenceq` binary's (`src/cli/output.rs`, `src/cli/mod.rs`), trimmed to
//! what the bench uses, so that it prints exactly what it printed as one of that binary's
//! commands. They cannot live in one crate both use: the `fenceq` package is published,
//! and a published package cannot depend on one that is not.

mod guards;
mod held_rate;
#[cfg(feature = "postgres")]
mod long_horizon;
mod output;
mod pickup;
#[cfg(feature = "postgres")]
mod postgres;
mod report;
mod rounds;
mod scenarios;
mod stats;

use clap::Parser;
pub use held_rate::{child as held_rate_child, CHILD_ENV as HELD_RATE_CHILD_ENV};
use output::Output;
use report::BenchArgs;
use std::error::Error as StdError;
use std::fmt;
use std::path::PathBuf;

/// Measures fenceq's throughput and claim latency beside a raw rusqlite baseline in the same
/// run (scratch databases in a temporary directory, or in the --db directory if given).
///
/// With --json it prints one JSON line per scenario as soon as it is measured: `scenario`,
/// `value`, `unit`, the run's `jobs`, `workers` and `sync`, and the scenario's details
/// (ratios, p99, grouping) as further fields.
///
/// With a postgres:// --db (a build with the `postgres` feature) it measures enqueue 1/call,
/// batch of 100, process W=1, process W=--workers, end to end W=--workers and enqueue 1/call
/// from 16 threads at once, through fenceq and through a raw SQL loop on the same server
/// (one operation per transaction, and 100 per transaction), each in a scratch schema of its
/// own (named after --schema, or fenceq_bench_PID), dropped at the end; --sync and
/// --latency-rows do not apply there. Its JSON lines carry `scenario`
/// (`postgres/ROW/COLUMN`), `value` (jobs/s), `jobs`, `workers`, the server's
/// `server_version`, `fsync` and `synchronous_commit`, and fenceq's ratios to the raw loops.
///
/// Exit codes: 0 success, 1 error (one line on stderr starting with `error:`), 2 usage error.
/// `fenceq bench OPTIONS` runs this program with the same options.
#[derive(Debug, Parser)]
#[command(name = "fenceq-bench", version, max_term_width = 100)]
pub struct Cli {
    /// Where the scratch databases go: a directory for SQLite (created if missing; without
    /// --db a new one under the system's temporary directory, deleted afterwards), or a
    /// PostgreSQL URL or connection string (with the `postgres` feature).
    ///
    /// A value that starts with `postgres:` or holds a libpq keyword followed by `=` (host=,
    /// dbname=, password=, ...) is always taken as PostgreSQL, never as a directory (write
    /// ./NAME for a directory of that name); what it leaves unset comes from libpq's PG*
    /// environment variables. The bench never prints the password.
    #[arg(long, value_name = "DIR|URL")]
    db: Option<PathBuf>,

    /// The prefix of the scratch schemas on PostgreSQL (only with a PostgreSQL --db):
    /// 1..=52 of [a-z0-9_], not starting with a digit; fenceq_bench_PID without it.
    #[arg(long, value_name = "NAME")]
    schema: Option<String>,

    /// Print JSON Lines for scripts: one line per figure of each round as it is measured,
    /// then one line per summary. Progress bars are off with --json. Errors still go to
    /// stderr as one `error:` line.
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    bench: BenchArgs,

    /// The pickup step's producer in another process (`RATE:JOBS:DB`): this binary, run by
    /// the step itself.
    #[arg(long, hide = true, value_name = "RATE:JOBS:DB")]
    pickup_producer: Option<String>,
}

/// Runs the parsed command line and flushes the output.
///
/// # Errors
///
/// A `--db` that names a PostgreSQL server libpq cannot read (or, without the `postgres`
/// feature, any PostgreSQL `--db`), `--schema` without one, an unknown `--only` step or
/// `--guard` variant, and whatever a scenario fails with (the store's errors, a scratch
/// schema that already exists, jobs that did not all complete).
pub fn run(cli: Cli) -> Result<(), BoxError> {
    if let Some(spec) = &cli.pickup_producer {
        return pickup::producer(spec);
    }
    let mut ctx = Context { db: cli.db, schema: cli.schema, out: Output::new(cli.json) };
    match (ctx.is_postgres(), &ctx.schema) {
        (true, _) => {
            // Read as libpq would, before anything connects; the refusal never repeats it.
            let db = ctx.db_text();
            if let Err(e) = fenceq::ConnInfo::parse(&db) {
                let lower = db.to_ascii_lowercase();
                if (lower.starts_with("postgres:") || lower.starts_with("postgresql:")) && !lower.contains("://") {
                    return Err(fail(
                        "--db starts with `postgres:` but is not a postgres:// URL: write \
                         postgres://user@host:5432/dbname, or postgres:// alone to take every setting from \
                         the PG* environment variables (write ./NAME for a directory of that name)",
                    ));
                }
                return Err(e.into());
            }
            if cfg!(not(feature = "postgres")) {
                return Err(fail(
                    "--db is a PostgreSQL URL or connection string, but this fenceq-bench was built without the \
                     `postgres` feature (build it with `cargo build --release -p fenceq-bench --features postgres`, \
                     or write ./NAME for a directory of that name)",
                ));
            }
        }
        (false, Some(_)) => {
            return Err(fail(
                "--schema names a PostgreSQL schema; it needs a PostgreSQL --db (postgres://... or host=...)",
            ))
        }
        (false, None) => {}
    }
    cli.bench.run(&mut ctx)?;
    ctx.out.flush()?;
    Ok(())
}

// ------------------------------------------------------------------------------- context

/// What the bench gets from the command line: where to measure, and the output.
pub(crate) struct Context {
    /// The `--db` directory or URL, if given.
    pub db: Option<PathBuf>,
    /// The `--schema` prefix (PostgreSQL only).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub schema: Option<String>,
    /// Standard output, in the mode `--json` chose.
    pub out: Output,
}

impl Context {
    /// True with `--json`.
    pub fn json(&self) -> bool {
        self.out.is_json()
    }

    fn db_text(&self) -> String {
        self.db.as_deref().map(|db| db.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// True when `--db` is a PostgreSQL URL or connection string
    /// ([`fenceq::is_connection_string`]: `postgres:...`, or `host=... dbname=...`).
    pub fn is_postgres(&self) -> bool {
        self.db.is_some() && fenceq::is_connection_string(&self.db_text())
    }

    /// The libpq connection string of the raw loops' connections: `--db` read as libpq
    /// reads it and written back as a key/value string, with a connect timeout (10 seconds)
    /// and `gssencmode=disable` added unless `--db` (or, for the GSS mode, `PGGSSENCMODE`)
    /// chooses its own, as the `fenceq` binary's own connections have it. It holds the
    /// password: never print it.
    ///
    /// Why no GSS encryption: the bench can exit while a connection is still being opened
    /// on another thread, and libpq's default `gssencmode=prefer` asks libkrb5 for
    /// credentials on every connect, whose exit-time finalizer then aborts the process
    /// (SIGABRT in `krb5int_getspecific`) now and then. GSS authentication does not need
    /// GSS encryption; a deployment that does can say `gssencmode=require` in the URL.
    #[cfg(feature = "postgres")]
    pub fn server_url(&self) -> String {
        let url = self.db_text();
        // `run` refused a string libpq cannot read before the bench started.
        let Ok(info) = fenceq::ConnInfo::parse(&url) else { return url };
        let mut info =
            info.or_set("connect_timeout", &fenceq::PostgresOptions::DEFAULT_CONNECT_TIMEOUT.as_secs().to_string());
        if std::env::var_os("PGGSSENCMODE").is_none() {
            info = info.or_set("gssencmode", "disable");
        }
        info.to_libpq()
    }

    /// `--db` for people: the URL without its password (and the schema prefix, when
    /// `--schema` names one).
    #[cfg(feature = "postgres")]
    pub fn db_display(&self) -> String {
        let url = fenceq::redact_connection_string(&self.db_text());
        match &self.schema {
            Some(schema) => format!("{url} (schema {schema})"),
            None => url,
        }
    }
}

// ------------------------------------------------------------------------------- errors

/// Any error the bench returns; rendered as one line by [`error_line`].
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// The result of the bench's steps.
pub(crate) type CliResult<T> = Result<T, BoxError>;

/// An error of the bench itself: a message and an optional cause.
#[derive(Debug)]
struct Failure {
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
pub(crate) fn fail(message: impl Into<String>) -> BoxError {
    Box::new(Failure { message: message.into(), source: None })
}

/// Adds a message in front of an error (`open(path).context(|| format!("opening {path}"))`).
pub(crate) trait ResultExt<T> {
    /// Wraps the error with `message()` as its outer text.
    fn context(self, message: impl FnOnce() -> String) -> CliResult<T>;
}

impl<T, E: Into<BoxError>> ResultExt<T> for Result<T, E> {
    fn context(self, message: impl FnOnce() -> String) -> CliResult<T> {
        self.map_err(|e| Box::new(Failure { message: message(), source: Some(e.into()) }) as BoxError)
    }
}

/// The error and its source chain joined by ": " on one line (a source whose text the line
/// already contains is skipped, as some errors repeat their cause in their own message), as
/// the `fenceq` binary writes its errors.
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

/// True when the error (or a cause) is a closed stdout, as in `fenceq-bench --json | head -1`.
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
    fn error_chain_is_one_line() {
        let inner = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let outer: CliResult<()> = Err(inner).context(|| "opening the raw baseline x".to_string());
        assert_eq!(error_line(outer.unwrap_err().as_ref()), "opening the raw baseline x: no such file");
        let pipe: CliResult<()> = Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe)).context(String::new);
        assert!(is_broken_pipe(pipe.unwrap_err().as_ref()));
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn server_urls_turn_gss_encryption_off_unless_they_choose() {
        let ctx = |db: &str| Context { db: Some(PathBuf::from(db)), schema: None, out: Output::new(false) };
        if std::env::var_os("PGGSSENCMODE").is_some() {
            return; // the environment chose; the URL is left as it is (checked below)
        }
        let info = |db: &str| fenceq::ConnInfo::parse(&ctx(db).server_url()).unwrap();
        assert_eq!(info("postgres://u@h/d").get("gssencmode"), Some("disable"));
        assert_eq!(info("postgres://u@h/d?gssencmode=require").get("gssencmode"), Some("require"));
        assert_eq!(info("host=h dbname=d").get("connect_timeout"), Some("10"));
        assert_eq!(ctx("postgres://u:s3cret@h/d").db_display(), "postgres://u:***@h/d");
    }
}
