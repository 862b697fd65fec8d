//! Test support for fenceq, never published: the conformance kit every store runs,
//! organised by capability level (base, fenced, durable: a store can claim the levels it
//! passes), and the reference model of the
//! queue ([`model`]) that the property tests and the fuzz targets compare a store against.
//!
//! ## The kit
//!
//! - [`base`]: the job lifecycle, idempotent intake, retention, maintenance, the worker pool,
//!   paused queues, the Prometheus text, and with this crate's features `schedule` and
//!   `serde` (fenceq's own tests turn both on) periodic jobs and typed payloads;
//! - [`fenced`]: the full identity on renew, owns and settle; stale workers; ownership inside
//!   the caller's transaction;
//! - [`durable`]: exhaustion records, exact acknowledgement, cursor pages under concurrent
//!   acknowledgement and addition, and the reference model over the fuzz corpus and
//!   generated histories.
//!
//! Every level also runs the positive and stale-identity controls of [`controls`]: expiry,
//! reclaim, reclaim by the same worker id, pruning followed by the same key, and a token with
//! the right id and attempt but another claim id. Each rule is one test named
//! `level::rule`, so a failure says which level and which rule broke.
//!
//! What differs per store comes from a [`Harness`]: a fresh database, a reopen, a raw
//! snapshot of the rows, a domain write inside the caller's transaction, a transaction of the
//! application's own, and a way to make claims fail. fenceq's own SQLite run is one line in
//! `tests/conformance.rs` (a test target with `harness = false`):
//!
//! ```no_run
//! fn main() {
//!     fenceq_conformance::run(fenceq_conformance::SqliteHarness);
//! }
//! ```
//!
//! A store written outside fenceq implements [`fenceq::store::Store`], then a [`Harness`]
//! for it (see [`SqliteHarness`] for a complete one, about a hundred lines), and runs the
//! same kit the same way: `cargo test --test conformance` then lists and runs every rule,
//! and `cargo test --test conformance -- fenced::` runs one level.
//!
//! Also here, for fenceq's own test binaries rather than as rules: [`group_processes`], the
//! ordering of groups across OS processes (each binary supplies its store's domain table).
//!
//! Not for applications. The fuzz targets (`fuzz/fuzz_targets/`) and the stable tests that
//! replay their corpus on SQLite's fast paths (`tests/sqlite/fuzz_replay.rs`) use it too; the
//! corpus replay through any store and the model-based property test are rules of the kit
//! (the `durable::model` rules). Everything in it goes through fenceq's public API.
//!
//! Why a `publish = false` member crate rather than a cargo feature of fenceq: fenceq's feature
//! list and its docs stay what applications use (no hidden module behind a test-only feature);
//! the kit can depend on test-only crates (`arbitrary`, `proptest`, `crossbeam-channel`)
//! without making them optional dependencies of the library; and it is never published, so it
//! may change with every commit without a semver promise. fenceq lists it as a
//! dev-dependency only.

#![warn(missing_docs)]
// The example above is a test target's `main` (`harness = false`): the `fn main` is the point.
#![allow(clippy::needless_doctest_main)]

pub mod base;
pub mod controls;
pub mod durable;
pub mod fenced;
mod fixture;
pub mod group_processes;
mod harness;
pub mod model;
#[cfg(feature = "postgres")]
mod postgres;
mod sqlite;

pub use fixture::{
    alone_in_a_process, child_process, ci, env_or, most_in_window, spin_until, wall_ms, Db, Rng, HANG_GUARD, LEASE, T0,
};
pub use harness::{Harness, RawRow};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresHarness, PostgresPlace, URL_VARIABLE as POSTGRES_URL_VARIABLE};
pub use sqlite::{snapshot_of, SqliteHarness, SqlitePlace};

/// One rule of the contract: a test generic over the store.
pub struct Rule<H: Harness> {
    /// Its name within its level (the test's name after `level::`).
    pub name: String,
    /// The test.
    pub run: fn(&H),
}

/// The rules of one level, each named after its function.
#[macro_export]
#[doc(hidden)]
macro_rules! rules {
    ($($rule:ident),* $(,)?) => {
        vec![$($crate::Rule { name: stringify!($rule).to_string(), run: $rule::<H> }),*]
    };
}

/// Every rule of every level, as `(level, rule)`.
pub fn all_rules<H: Harness>() -> Vec<(&'static str, Rule<H>)> {
    let mut rules = Vec::new();
    rules.extend(crate::base::rules::<H>().into_iter().map(|r| ("base", r)));
    rules.extend(crate::fenced::rules::<H>().into_iter().map(|r| ("fenced", r)));
    rules.extend(crate::durable::rules::<H>().into_iter().map(|r| ("durable", r)));
    rules
}

/// Runs the whole kit against `harness` as a test binary: call it from the `main` of a test
/// target with `harness = false`. Each rule is one test named `level::rule`
/// (`fenced::a_token_with_another_claim_id_is_refused`), so a failure says which level and
/// rule broke; the usual test arguments work (a name filter, `--exact`, `--test-threads`,
/// `--list`).
pub fn run<H: Harness>(harness: H) -> ! {
    let args = libtest_mimic::Arguments::from_args();
    let harness: &'static H = Box::leak(Box::new(harness));
    let trials = all_rules::<H>()
        .into_iter()
        .map(|(level, rule)| {
            let run = rule.run;
            libtest_mimic::Trial::test(format!("{level}::{}", rule.name), move || {
                run(harness);
                Ok(())
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit()
}
