//! T2 in CI: replays the committed cargo-fuzz corpus and crash artifacts
//! (`fuzz/corpus/<target>/`, `fuzz/artifacts/<target>/`) through the targets' bodies
//! (`fenceq_conformance::model::run_bytes`, `run_bytes_file` and `hostile`) on the stable
//! toolchain, so the fuzzers' findings keep being checked without nightly or cargo-fuzz. Each
//! target's corpus must exist and be non-empty: a missing corpus fails instead of passing
//! silently. These are SQLite's own paths, the fuzz targets' bodies: the in-memory queue reused
//! from run to run, the template file in /dev/shm, hostile files. The store-independent replay
//! of the `fence_invariants` corpus, through a conformance harness, is the kit's rule
//! `durable::model_agrees_with_the_store_on_every_fuzz_corpus_input` (`tests/conformance.rs`).
//!
//! The tests at the end are the engine defects the hostile target found, all fixed since
//! (`fenceq_conformance::model::FIXED_DEFECTS`), kept as regression tests.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn dir(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// The files of `relative` (sorted), or `None` when the directory does not exist.
fn files(relative: &str) -> Option<Vec<PathBuf>> {
    let entries = std::fs::read_dir(dir(relative)).ok()?;
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("reading a corpus directory entry").path())
        .filter(|p| p.is_file() && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
        .collect();
    files.sort();
    Some(files)
}

/// Runs `body` on every corpus file and artifact of `target`; fails on an empty or missing
/// corpus, and lists every input that panicked.
fn replay(target: &str, body: fn(&[u8])) {
    let corpus = files(&format!("fuzz/corpus/{target}"))
        .unwrap_or_else(|| panic!("fuzz/corpus/{target} is missing: the replay would pass without testing anything"));
    assert!(!corpus.is_empty(), "fuzz/corpus/{target} is empty: the replay would pass without testing anything");
    let artifacts = files(&format!("fuzz/artifacts/{target}")).unwrap_or_default();
    let started = Instant::now();
    let mut failures = Vec::new();
    for path in corpus.iter().chain(&artifacts) {
        let bytes = std::fs::read(path).expect("reading a corpus file");
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| body(&bytes))) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(format!("{}:\n{message}", path.display()));
        }
    }
    eprintln!(
        "{target}: replayed {} corpus files and {} artifacts in {:.1?}",
        corpus.len(),
        artifacts.len(),
        started.elapsed()
    );
    assert!(failures.is_empty(), "{} of the {target} inputs failed:\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn the_fence_invariants_corpus_replays_cleanly() {
    replay("fence_invariants", |bytes| {
        fenceq_conformance::model::run_bytes(bytes);
    });
}

/// The same inputs through the file-backed target (a file wherever they reopen the queue).
#[test]
fn the_fence_invariants_corpus_replays_cleanly_on_a_file() {
    replay("fence_invariants", |bytes| {
        fenceq_conformance::model::run_bytes_file(bytes);
    });
}

#[test]
fn the_hostile_input_corpus_replays_cleanly() {
    replay("hostile_input", fenceq_conformance::model::hostile);
}

// ------------------------------------------------------------------ fixed engine defects

/// Engine defect "nul-queue-name", found by the hostile target and fixed in bd2755f: the
/// engine's name check counted bytes, the schema's `CHECK (length(queue) > 0)` counts
/// characters up to the first NUL. A queue name that starts with a NUL byte passed the first
/// and failed the second, so `enqueue` returned an unclassified `Error::Sqlite` (constraint
/// violation) instead of `InvalidInput`. Found as `EnqueueBatch([("\0", None, [7, 98])])` on a
/// healthy queue, kept as `fuzz/artifacts/hostile_input/crash-nul-queue-name`.
#[test]
fn a_queue_name_with_nul_is_invalid_input() {
    let queue = fenceq::Queue::open_in_memory().unwrap();
    for name in ["\0", "\0queue", "queue\0"] {
        let result = queue.enqueue(fenceq::NewJob::new(name, b"x".to_vec()));
        assert!(matches!(result, Err(fenceq::Error::InvalidInput { .. })), "{name:?}: {result:?}");
        let result = queue.claim("q", name, Duration::from_secs(30));
        assert!(matches!(result, Err(fenceq::Error::InvalidInput { .. })), "worker {name:?}: {result:?}");
    }
    assert!(queue.list(&fenceq::ListFilter::default()).unwrap().is_empty());
}

/// Engine defect "retry-policy-overflow", found by the hostile target and fixed in ac0020d:
/// `RetryPolicy::delay` multiplied the capped delay by the jitter factor with
/// `Duration::mul_f64`, which panics when the result does not fit a `Duration`. A policy with
/// `max: Duration::MAX` ("no cap") made `Queue::retry` panic in the caller's thread for every
/// jitter draw at or above the middle once the delay reached the cap.
#[test]
fn a_retry_policy_without_a_cap_does_not_panic() {
    let policy = fenceq::RetryPolicy { base: Duration::MAX, max: Duration::MAX, jitter: 0.2 };
    for unit in [0.0, 0.5, 1.0] {
        let delay = catch_unwind(|| policy.delay(1, unit));
        assert!(delay.is_ok(), "RetryPolicy::delay(1, {unit}) panicked for {policy:?}");
    }
    // Through the queue: the jitter is random, so try a few times.
    let queue = fenceq::Queue::open_in_memory().unwrap();
    for i in 0..16 {
        queue.enqueue(fenceq::NewJob::new("q", format!("job {i}").into_bytes())).unwrap();
        let job = queue.claim("q", "w", Duration::from_secs(30)).unwrap().unwrap();
        let retried = catch_unwind(AssertUnwindSafe(|| queue.retry(&job.token(), policy, "failed")));
        assert!(retried.is_ok(), "Queue::retry panicked for {policy:?} (try {i})");
    }
}

/// Engine defect "insert-trigger-panic", found by the hostile target and fixed in ac0020d:
/// `Queue::enqueue` took an `INSERT … ON CONFLICT DO NOTHING RETURNING id` that returned no
/// row for a key conflict and `expect`ed a key. A database whose `BEFORE INSERT` trigger on
/// `fenceq_jobs` does `RAISE(IGNORE)` (the queue shares the application's database file) made
/// an unkeyed enqueue panic with "only keyed inserts can conflict". Minimal input: the hostile
/// target with bytes `[3, 0]` (a tampered database, tamper 0), kept as
/// `fuzz/artifacts/hostile_input/crash-insert-trigger-panic`.
#[test]
fn an_ignored_insert_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    drop(fenceq::Queue::open(&path).unwrap());
    let conn = fenceq::rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TRIGGER app_ignore BEFORE INSERT ON fenceq_jobs BEGIN SELECT RAISE(IGNORE); END;")
        .unwrap();
    drop(conn);
    let queue = fenceq::Queue::open(&path).unwrap();
    let enqueued = catch_unwind(AssertUnwindSafe(|| queue.enqueue(fenceq::NewJob::new("q", b"x".to_vec()))));
    assert!(matches!(enqueued, Ok(Err(_))), "enqueue must fail with an error, not panic or succeed: {enqueued:?}");
}
