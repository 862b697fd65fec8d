//! T6: disk full, both variants (RELIABILITY.md §3 T6, measured facts in §4 (d)).
//!
//! (a) the logical limit `QueueBuilder::max_page_count`: intake fails with the typed
//!     `StorageFull`, a batch is all-or-nothing, the pooled connection stays usable, settle,
//!     reap and prune still work at the limit, and intake resumes once space is freed (prune)
//!     or the limit is raised (reopen with a larger limit);
//! (b) a real ENOSPC on a 1 MiB tmpfs (skipped, with the reason printed, when `mount` fails):
//!     typed errors only, no partial batch, intake resumes once space is freed outside, and
//!     every acknowledged row survives a reopen with `integrity_check = ok`.

use crate::support::*;
use fenceq::rusqlite::Connection;
use fenceq::{Enqueued, Error, JobState, ManualClock, NewJob, Queue, Retention};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const DAY: Duration = Duration::from_secs(24 * 3600);
const HOUR: Duration = Duration::from_secs(3600);

fn keys_present(path: &Path, prefix: &str) -> Vec<String> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn.prepare("SELECT key FROM fenceq_jobs WHERE key LIKE ?1 || '%' ORDER BY id").unwrap();
    stmt.query_map([prefix], |r| r.get(0)).unwrap().collect::<Result<_, _>>().unwrap()
}

fn job(key: &str, size: usize) -> NewJob {
    NewJob::new("q", vec![b'x'; size]).key(key)
}

/// Enqueues `{prefix}{n}` jobs of `size` bytes until the first error; returns the ACKed keys
/// and that error (bounded: panics if the limit is never reached).
fn fill(q: &Queue, prefix: &str, size: usize) -> (Vec<String>, Error) {
    let mut acked = Vec::new();
    for n in 0..100_000 {
        let key = format!("{prefix}{n}");
        match q.enqueue(job(&key, size)) {
            Ok(Enqueued::New(_)) => acked.push(key),
            Ok(other) => panic!("{key}: {other:?}"),
            Err(e) => return (acked, e),
        }
    }
    panic!("the storage never filled up");
}

// ------------------------------------------------------------------------ (a) max_page_count

#[test]
fn a_page_limit_gives_typed_storage_full_and_settles_reaps_and_prunes_still_work() {
    // One pooled connection: the one that failed is the one used afterwards.
    let q = temp_queue_with(|b| b.max_page_count(64).pool_size(1));
    // Work to settle at the limit, claimed before the fill (a claim adds columns to a row).
    let early: Vec<_> = (0..12).map(|i| q.enqueue(job(&format!("early-{i}"), 100)).unwrap().id()).collect();
    for _ in 0..6 {
        let j = q.take("w");
        q.complete(&j.token()).unwrap(); // prunable once old
    }
    let take = || q.claim("q", "w", fenceq::MAX_LEASE).unwrap().unwrap();
    let (to_complete, to_retry, to_exhaust) = (take(), take(), take());
    let (to_reap, to_unknown, to_park) = (take(), take(), take());
    q.advance(HOUR * 2); // the six completions are two hours old now

    let (acked, err) = fill(&q, "fill-", 1000);
    assert!(matches!(err, Error::StorageFull { .. }), "expected StorageFull, got {err:?}");
    assert!(!err.is_retryable());
    assert!(acked.len() > 20, "the limit left room for {} rows", acked.len());
    assert_eq!(keys_present(&q.path(), "fill-"), acked, "every ACKed row, and nothing else");
    // The connection went back to the pool usable: not in a transaction, reads and writes work.
    assert!(q.with_connection(|c| Ok(c.is_autocommit())).unwrap());
    assert_eq!(q.stats().unwrap().queue("q").pending, acked.len() as u64);

    // A batch at the limit is all-or-nothing.
    let before = snapshot(&q.path());
    let batch = q.enqueue_batch((0..40).map(|i| job(&format!("batch-{i}"), 1000)));
    assert!(matches!(batch, Err(Error::StorageFull { .. })), "{batch:?}");
    assert_eq!(snapshot(&q.path()), before, "the failed batch left nothing behind");
    assert!(keys_present(&q.path(), "batch-").is_empty());

    // Settles at the limit: complete, retry, exhaust, unknown, park; then reap and prune.
    q.complete(&to_complete.token()).expect("complete at the page limit");
    q.retry(&to_retry.token(), Duration::ZERO, "retry at the limit").expect("retry at the page limit");
    q.exhaust(&to_exhaust.token(), "exhausted at the limit").expect("exhaust at the page limit");
    q.mark_unknown(&to_unknown.token(), "unknown at the limit").expect("mark_unknown at the page limit");
    q.park(&to_park.token(), DAY * 2, "parked at the limit").expect("park at the page limit");
    q.advance(DAY);
    let reaped = q.reap().expect("reap at the page limit");
    assert_eq!(reaped.requeued, 1);
    assert_eq!(q.job(to_reap.id()).unwrap().unwrap().state, JobState::Pending);
    let exhaustion = q.exhaustions(None, 10).unwrap().items.pop().unwrap();
    q.acknowledge(&exhaustion.token).expect("acknowledge at the page limit");
    let states: Vec<JobState> = early.iter().map(|id| q.job(*id).unwrap().unwrap().state).collect();
    assert_eq!(states.iter().filter(|s| **s == JobState::Completed).count(), 7);

    // Prune frees pages (retention 1 h: the seven completions go) and intake resumes within
    // one call.
    let pruned = q.prune(&Retention::older_than(HOUR)).expect("prune at the page limit");
    assert_eq!((pruned.settled, pruned.acknowledged), (7, 0));
    let (more, err) = fill(&q, "after-prune-", 100);
    assert!(!more.is_empty(), "intake resumed after the prune freed space");
    assert!(matches!(err, Error::StorageFull { .. }), "{err:?}");

    // Raising the limit (a reopen with a larger max_page_count) lets intake resume at once.
    let path = q.path();
    let clock = q.clock.clone();
    drop(q.queue);
    let bigger = Queue::builder().path(&path).clock(clock).max_page_count(4096).pool_size(1).open().unwrap();
    bigger.enqueue(job("after-raise", 1000)).expect("intake after raising the limit");
    assert_eq!(keys_present(&path, "fill-"), acked, "every ACKed row survived");
    assert_eq!(keys_present(&path, "after-prune-"), more);
    assert_integrity(&Connection::open(&path).unwrap());
}

#[test]
fn a_batch_whose_prefix_fits_is_rolled_back_whole() {
    let q = temp_queue_with(|b| b.max_page_count(48).pool_size(1));
    let (acked, err) = fill(&q, "fill-", 1000);
    assert!(matches!(err, Error::StorageFull { .. }));
    // Free room for a few rows, then offer a batch that needs more than that.
    let ids: Vec<_> = (0..4).map(|_| q.take("w")).collect();
    for j in &ids {
        q.complete(&j.token()).unwrap();
    }
    q.advance(DAY);
    assert_eq!(q.prune(&Retention::older_than(Duration::from_secs(1))).unwrap().settled, 4);
    let before = snapshot(&q.path());
    let batch = q.enqueue_batch((0..60).map(|i| job(&format!("batch-{i}"), 1000)));
    assert!(matches!(batch, Err(Error::StorageFull { .. })), "{batch:?}");
    assert_eq!(snapshot(&q.path()), before, "no partial batch");
    // The prefix alone fits: the failed batch really had written some rows before it failed.
    q.enqueue_batch((0..2).map(|i| job(&format!("batch-{i}"), 1000))).expect("a prefix of the batch fits");
    assert_eq!(keys_present(&q.path(), "batch-").len(), 2);
    assert_eq!(keys_present(&q.path(), "fill-").len(), acked.len() - 4);
    assert_integrity(&Connection::open(q.path()).unwrap());
}

// ------------------------------------------------------------------------ (b) real ENOSPC

/// A 1 MiB tmpfs mounted on a temp dir, unmounted on drop (also when the test panics).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount() -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!("mount failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(Tmpfs { dir })
    }

    fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount").arg(self.dir.path()).status().is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
        }
    }
}

#[test]
fn a_real_full_disk_gives_typed_errors_and_intake_resumes_when_space_returns() {
    let tmpfs = match Tmpfs::mount() {
        Ok(t) => t,
        Err(reason) => {
            println!("SKIPPED a_real_full_disk: {reason}");
            return;
        }
    };
    let dir = tmpfs.path();
    let path = dir.join("queue.db");
    // Ballast that "someone else" deletes later to free space.
    let ballast = dir.join("ballast");
    std::fs::write(&ballast, vec![0u8; 256 << 10]).unwrap();
    let clock = ManualClock::new(T0);
    let q = Queue::builder().path(&path).clock(clock.clone()).pool_size(1).open().unwrap();
    let claimed: Vec<_> = (0..3)
        .map(|i| {
            q.enqueue(job(&format!("early-{i}"), 100)).unwrap();
            q.claim("q", "w", LEASE).unwrap().unwrap()
        })
        .collect();

    let (acked, err) = fill(&q, "fill-", 2000);
    println!("tmpfs full after {} rows: {err:?}", acked.len());
    assert!(matches!(err, Error::StorageFull { .. }), "a full disk must be StorageFull, got {err:?}");
    assert!(!acked.is_empty());
    assert!(q.with_connection(|c| Ok(c.is_autocommit())).unwrap(), "the connection is not left in a transaction");
    assert_eq!(q.stats().unwrap().queue("q").pending, acked.len() as u64, "reads still work");

    let batch = q.enqueue_batch((0..5).map(|i| job(&format!("batch-{i}"), 2000)));
    assert!(matches!(batch, Err(Error::StorageFull { .. })), "{batch:?}");
    // A settle on a full disk either succeeds or fails typed, and then changed nothing.
    match q.complete(&claimed[0].token()) {
        Ok(()) => assert_eq!(q.job(claimed[0].id()).unwrap().unwrap().state, JobState::Completed),
        Err(Error::StorageFull { .. }) => {
            assert_eq!(q.job(claimed[0].id()).unwrap().unwrap().state, JobState::Running)
        }
        Err(e) => panic!("complete on a full disk: {e:?}"),
    }

    // Space returns from outside: the next intake succeeds at once.
    std::fs::remove_file(&ballast).unwrap();
    q.enqueue(job("after-free", 2000)).expect("intake resumes within one call once space is free");
    q.complete(&claimed[1].token()).expect("settle once space is free");
    let checkpoint = q.checkpoint().unwrap();
    assert!(checkpoint.completed, "{checkpoint:?}");
    drop(q);

    assert_integrity(&Connection::open(&path).unwrap());
    assert_eq!(keys_present(&path, "fill-"), acked, "every ACKed row survived the full disk and a reopen");
    assert!(keys_present(&path, "batch-").is_empty(), "no partial batch");
    assert_eq!(keys_present(&path, "after-free").len(), 1);
    let q = Queue::builder().path(&path).clock(clock).pool_size(1).open().unwrap();
    assert_eq!(q.job(claimed[1].id()).unwrap().unwrap().state, JobState::Completed);
    q.complete(&claimed[2].token()).unwrap();
    drop(q);
}

/// Writers of one process share a group transaction: when one of them meets the page
/// limit, every caller must still get exactly its own truth. `Ok` means the row is there,
/// `StorageFull` means it is not, for every thread, however the requests were grouped.
#[test]
fn concurrent_writers_at_the_page_limit_each_get_their_own_truth() {
    let q = temp_queue_with(|b| b.max_page_count(96));
    let results: Vec<(String, bool)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let q = q.queue.clone();
                s.spawn(move || {
                    let mut out = Vec::new();
                    let mut full = 0;
                    for n in 0..5_000u32 {
                        let key = format!("t{t}-{n}");
                        // Mixed sizes, so that small rows still fit after big ones failed.
                        let size = if n.is_multiple_of(3) { 50 } else { 900 };
                        match q.enqueue(job(&key, size)) {
                            Ok(Enqueued::New(_)) => out.push((key, true)),
                            Ok(other) => panic!("{key}: {other:?}"),
                            Err(Error::StorageFull { .. }) => {
                                out.push((key, false));
                                full += 1;
                                if full == 30 {
                                    break;
                                }
                            }
                            Err(e) => panic!("{key}: {e:?}"),
                        }
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let present: std::collections::HashSet<String> = keys_present(&q.path(), "t").into_iter().collect();
    let ok = results.iter().filter(|(_, ok)| *ok).count();
    assert!(ok > 0 && ok < results.len(), "some intakes succeeded and some hit the limit");
    for (key, ok) in &results {
        assert_eq!(present.contains(key), *ok, "{key}: the caller was told {ok}");
    }
    assert_eq!(present.len(), ok, "no row that nobody was told about");
    assert_integrity(&Connection::open(q.path()).unwrap());
    let stats = q.commit_stats();
    println!("{} intakes ({ok} ok) in {} group transactions: {stats:?}", results.len(), stats.transactions);
}
