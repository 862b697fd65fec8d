//! Test support for fenceq, never published: the reference model of the queue
//! ([`model`]) and, soon, the conformance kit every store runs, organised by capability level
//! (base, fenced, durable; ADR 0256).
//!
//! Not for applications. The fuzz targets (`fuzz/fuzz_targets/`) and the stable tests that
//! replay their corpus or generate histories (`tests/fuzz_replay.rs`, `tests/model_proptest.rs`)
//! use it; everything in it goes through fenceq's public API.
//!
//! Why a `publish = false` member crate rather than a cargo feature of fenceq: fenceq's feature
//! list and its docs stay what applications use (no hidden module behind a test-only feature);
//! the kit can depend on test-only crates (`arbitrary` now, a property-test library later)
//! without making them optional dependencies of the library; and it is never published, so it
//! may change with every commit without a semver promise. fenceq lists it as a
//! dev-dependency only.

#![warn(missing_docs)]

pub mod model;
