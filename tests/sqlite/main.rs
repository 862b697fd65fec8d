//! fenceq's tests on its SQLite store, one test binary (one link step) with a module per
//! capability: the library on SQLite files and in memory, processes killed, racing and
//! contending on one file, power loss and full disks, and the operator's surfaces run on
//! SQLite files (the `fenceq` CLI, its demo and backups, the web dashboard), whose few
//! PostgreSQL variants (`pool_settle`, `web`, with `--features postgres`) share their
//! scenario with the SQLite ones.
//!
//! `cargo test --test sqlite crash::` runs one module. The multi-process tests re-run this
//! binary as their child with `--ignored --exact <module>::<child>`; nothing here changes
//! process-wide state in the parent: what must (`PRAGMA hard_heap_limit`, the power-loss
//! VFS) does it only in such a child, which runs that one test alone.

mod support;

#[cfg(feature = "cli")]
mod cli_support;
// The PostgreSQL binary's fixtures, for the scenarios here that run on both stores; most of
// its re-exports serve only that binary.
#[cfg(feature = "postgres")]
#[path = "../postgres/support.rs"]
#[allow(unused_imports)]
mod pg_support;
#[cfg(feature = "web")]
mod web_support;

mod atomic_completion;
mod backup;
#[cfg(feature = "cli")]
mod backup_cli;
mod bad_input;
mod base_lifecycle;
mod busy;
#[cfg(feature = "cli")]
mod cli;
mod concurrency;
mod crash;
#[cfg(feature = "cli")]
mod demo;
mod disk_full;
mod error_classification;
mod fuzz_replay;
mod group_commit;
mod groups_processes;
mod hardening;
mod intake_contention;
mod limits;
mod metrics;
mod migrations;
mod odd_paths;
mod paused;
mod pool_settle;
mod power_loss;
#[cfg(feature = "schedule")]
mod schedule;
mod settled_counts;
mod stale_workers;
mod stress;
mod upgrade_race;
mod wakeups;
mod wal;
#[cfg(feature = "web")]
mod web;
