//! The conformance kit (`crates/conformance`) against fenceq's PostgreSQL store: every rule
//! of every capability level, each a test named `level::rule`, the same names as SQLite's
//! `tests/conformance.rs`. Each test runs in a schema of its own on the server named by
//! `FENCEQ_POSTGRES_URL`:
//!
//! ```text
//! eval "$(scripts/postgres start >/dev/null && scripts/postgres env)"
//! cargo test --features postgres --test conformance_postgres
//! scripts/postgres stop
//! ```
//!
//! Without a server this target says that it skipped and why, except under CI (`CI=true`),
//! where a missing server fails the run.

use fenceq_conformance::{PostgresHarness, POSTGRES_URL_VARIABLE};

fn main() {
    let in_ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    match PostgresHarness::from_env() {
        Ok(Some(harness)) => fenceq_conformance::run(harness),
        Ok(None) if in_ci => {
            eprintln!(
                "error: {POSTGRES_URL_VARIABLE} is not set, and CI=true requires the PostgreSQL conformance run: \
                 start a server with scripts/postgres start and export its URL (eval \"$(scripts/postgres env)\")"
            );
            std::process::exit(1);
        }
        Ok(None) => {
            println!(
                "skipped: the PostgreSQL conformance kit needs a server, and {POSTGRES_URL_VARIABLE} is not set \
                 (scripts/postgres start; eval \"$(scripts/postgres env)\")"
            );
        }
        Err(why) => {
            eprintln!("error: {why}");
            std::process::exit(1);
        }
    }
}
