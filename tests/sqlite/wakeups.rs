//! Wake-ups across handles and processes on one SQLite file (the store's watcher): a pool
//! whose poll interval is an hour hears of a job another queue handle, or another OS process
//! (this test binary again, run at its `#[ignore]`d entry `producer_child`), enqueues, within
//! seconds; the watcher thread ends with the last handle of its queue, and an in-memory queue
//! has none.
//!
//! A pool looks for due jobs at its start and after each round; the tests enqueue only once
//! its first job's round has committed (`wait_idle`), so that nothing but a wake-up (or the
//! hour's poll) can bring it the next one.

use fenceq::{NewJob, Outcome, Queue, WorkerPool};
use fenceq_conformance::alone_in_a_process;
use std::path::Path;
use std::time::Duration;

use crate::support::child_process;

/// Far below the pools' poll interval (an hour), far above any wake-up (milliseconds): a
/// wake-up that never comes fails the test here instead of hanging it.
const PROMPTLY: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_secs(3600);
const DB_VARIABLE: &str = "FENCEQ_WAKEUPS_DB";

/// A pool of one worker on `queue`'s queue `q` that polls once an hour, sending each job's
/// payload on the returned channel; started once `first` (enqueued before) was handled and
/// its round committed.
fn idle_pool(queue: &Queue) -> (WorkerPool, crossbeam_channel::Receiver<Vec<u8>>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    queue.enqueue(NewJob::new("q", b"first".to_vec())).unwrap();
    let pool = WorkerPool::builder(queue.clone(), "q")
        .workers(1)
        .poll_interval(POLL)
        .handler(move |attempt| {
            let _ = tx.send(attempt.payload().to_vec());
            Outcome::Complete
        })
        .start()
        .unwrap();
    assert_eq!(rx.recv_timeout(PROMPTLY).unwrap(), b"first");
    // The round that settled it also claimed, and found nothing more: the pool now sleeps
    // until a wake-up or its poll.
    assert!(pool.wait_idle(PROMPTLY).unwrap());
    (pool, rx)
}

#[test]
fn a_pool_hears_of_another_handles_enqueue_long_before_its_poll() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wake.db");
    let workers = Queue::open(&path).unwrap();
    let producer = Queue::open(&path).unwrap();
    let (pool, handled) = idle_pool(&workers);
    for n in 0..3u8 {
        producer.enqueue(NewJob::new("q", vec![n])).unwrap();
        assert_eq!(handled.recv_timeout(PROMPTLY).expect("woken by the other handle's commit"), [n]);
        assert!(pool.wait_idle(PROMPTLY).unwrap());
    }
    // Neither another queue's job nor a delayed one is this pool's to run now.
    producer.enqueue(NewJob::new("other", b"x".to_vec())).unwrap();
    producer.enqueue(NewJob::new("q", b"later".to_vec()).delay(POLL)).unwrap();
    producer.enqueue(NewJob::new("q", b"now".to_vec())).unwrap();
    assert_eq!(handled.recv_timeout(PROMPTLY).unwrap(), b"now");
    assert_eq!(pool.shutdown(PROMPTLY).unwrap().counters.completed, 5);
}

/// The child: enqueues one job `from-child` on the file the parent names.
#[test]
#[ignore = "the child process of a_pool_hears_of_another_process_enqueue_long_before_its_poll"]
fn producer_child() {
    let path = std::env::var(DB_VARIABLE).expect("run by its parent test, which sets FENCEQ_WAKEUPS_DB");
    Queue::open(Path::new(&path)).unwrap().enqueue(NewJob::new("q", b"from-child".to_vec())).unwrap();
}

#[test]
fn a_pool_hears_of_another_process_enqueue_long_before_its_poll() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wake.db");
    let queue = Queue::open(&path).unwrap();
    let (pool, handled) = idle_pool(&queue);
    let out = child_process(concat!(module_path!(), "::producer_child")).env(DB_VARIABLE, &path).output().unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(handled.recv_timeout(PROMPTLY).expect("woken by the other process's commit"), b"from-child");
    assert_eq!(pool.shutdown(PROMPTLY).unwrap().counters.completed, 2);
}

/// How many of this process's threads are watchers.
fn watcher_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "fenceq-watch")
        .count()
}

#[test]
fn the_watcher_thread_ends_with_the_last_handle_of_its_queue() {
    // It counts the watcher threads of its whole process, and other tests of this binary
    // start pools (and watchers) in it: it runs alone in a process of its own.
    if !alone_in_a_process(concat!(module_path!(), "::the_watcher_thread_ends_with_the_last_handle_of_its_queue")) {
        return;
    }
    if !Path::new("/proc/self/task").exists() {
        eprintln!("skipped: no /proc/self/task to count threads in");
        return;
    }
    let memory = Queue::open_in_memory().unwrap();
    let pool = WorkerPool::builder(memory.clone(), "q").handler(|_| Outcome::Complete).start().unwrap();
    pool.shutdown(PROMPTLY).unwrap();
    assert_eq!(watcher_threads(), 0, "an in-memory queue has no other connection to hear from");
    drop(memory);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wake.db");
    let queue = Queue::open(&path).unwrap();
    assert_eq!(watcher_threads(), 0, "no pool, no watcher");
    let producer = Queue::open(&path).unwrap();
    let (pool, handled) = idle_pool(&queue);
    let second = WorkerPool::builder(queue.clone(), "other").handler(|_| Outcome::Complete).start().unwrap();
    producer.enqueue(NewJob::new("q", b"woken".to_vec())).unwrap();
    // Only the watcher could have woken the pool, and it names itself before it reads.
    assert_eq!(handled.recv_timeout(PROMPTLY).unwrap(), b"woken");
    assert_eq!(watcher_threads(), 1, "one watcher per queue handle, however many pools");
    let clone = queue.clone();
    pool.shutdown(PROMPTLY).unwrap();
    second.shutdown(PROMPTLY).unwrap();
    drop(queue);
    assert_eq!(watcher_threads(), 1, "a handle is still open");
    // Dropping the last handle stops and joins the watcher, promptly.
    let (dropped, done) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        drop(clone);
        let _ = dropped.send(());
    });
    done.recv_timeout(PROMPTLY).expect("dropping the last handle does not hang");
    assert_eq!(watcher_threads(), 0, "dropping the last handle stops and joins the watcher");
}
