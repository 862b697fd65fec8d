//! fenceq's tests on its PostgreSQL store beyond the conformance kit, one test binary (one
//! link step, feature `postgres`) with a module per capability, on the server named by
//! `FENCEQ_POSTGRES_URL` (`scripts/postgres start; eval "$(scripts/postgres env)"`): each
//! test says it skipped without one, and fails under `CI=true`. `crash` and `urls` start
//! throwaway clusters of their own and skip without `initdb` and `pg_ctl`.
//!
//! `cargo test --features postgres --test postgres processes::` runs one module. The
//! multi-process tests (`notify`, `processes`) re-run this binary as their child with
//! `--ignored --exact <module>::<child>`; nothing here changes process-wide state.

mod support;

#[cfg(feature = "cli")]
#[path = "../sqlite/cli_support.rs"]
mod cli_support;

#[cfg(feature = "cli")]
mod cli;
mod clock;
mod crash;
mod errors;
mod failover;
mod groups_processes;
mod intake;
mod notify;
mod perf;
mod prepared;
mod processes;
mod store;
#[cfg(feature = "cli")]
mod urls;
