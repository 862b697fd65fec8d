//! The watcher: how a pool hears at once of a job another process (or another queue handle
//! on the same file) enqueued, without a server and without waiting for its poll interval.
//!
//! One thread per store whose pools wait, started by the first
//! [`Store::watch`](crate::store::Store::watch), with a read connection of its own. It reads
//! `PRAGMA data_version`, which changes when any other connection to the file commits (this
//! connection never writes). Only when it changed does it look at the rows added since its
//! last look (`id` above the highest it has seen: ids rise in commit order, since SQLite has
//! one writer at a time), and wakes the pools of each queue that got a pending one. Rows
//! this process added itself are among them, and its pools were woken already; one they
//! have claimed by then is no longer pending and wakes nothing. Its first look is taken
//! before the pool that started it claims for the first time, so that a job committed in
//! between is the claim's or the watcher's, never neither's.
//!
//! When it reads. Every tick wakes a thread, and on a virtual machine the wake-up alone costs
//! tens of microseconds: a steady 1 ms tick costs a few percent of a core while nothing
//! happens, and a tick rare enough to cost under 1 % leaves a quiet file's first job
//! waiting a few milliseconds (`docs/performance.md` has the figures). So the watcher reads
//! every [`TICK`] while the file changes, and once it has been quiet for [`HOT`]:
//!
//! - on Linux it waits for the kernel to say the `-wal` file was written (inotify): nothing
//!   at all while the file stays quiet. A commit writes its frames to the `-wal` file just
//!   before it shows to readers (or, at `synchronous = FULL`, a sync before), so after a
//!   write the watcher reads at once, then after [`FIRST_TICK`], doubling to [`TICK`], and
//!   for [`HOT`] after, so that no commit that shows late is missed. A stop removes the
//!   watch, which ends the wait.
//! - elsewhere, or when inotify is not to be had (the kernel's limit of instances per user
//!   reached) or the `-wal` file goes away, it backs off, doubling, to [`IDLE_TICK`].
//!
//! A store nobody's pools wait on runs no thread, and commits do no extra work for the
//! watcher: it only reads (the file events are the kernel's, sent whether anyone reads
//! them or not). An in-memory database has no other connection, and no watcher.
//!
//! Other changes made by another process that make a job due (a retry, a release, a resume,
//! a replay) are found at the pool's next poll, as before. The thread ends when the store
//! is dropped (the last handle of the queue), which waits for it (at most one tick and one
//! statement: the watcher never waits for a lock).

use super::Patience;
use crate::store::Wake;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use parking_lot::Mutex;
use rusqlite::Connection;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The first wait after a write to the `-wal` file, doubling up to [`TICK`]: 50 µs.
pub(crate) const FIRST_TICK: Duration = Duration::from_micros(50);
/// How often the watcher reads `data_version` while the file changes: 1 ms.
pub(crate) const TICK: Duration = Duration::from_millis(1);
/// The longest tick, once the file has been quiet for [`HOT`]: 4 ms.
pub(crate) const IDLE_TICK: Duration = Duration::from_millis(4);
/// How long after its last change the file is read every [`TICK`]: 100 ms.
pub(crate) const HOT: Duration = Duration::from_millis(100);
/// The least time between two warnings about a failing read: 60 s.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The queues with a pending job among the rows added after `?1`, and the highest id of each.
const ADDED_SINCE: &str = "SELECT queue, max(id), max(state = 'pending') FROM fenceq_jobs WHERE id > ?1 GROUP BY queue";

/// A running watcher thread.
pub(crate) struct Watcher {
    wakes: Arc<Mutex<Vec<Wake>>>,
    stop: Option<Sender<()>>,
    /// Ends the thread's wait for file events.
    unblock: Option<Unblock>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher").finish_non_exhaustive()
    }
}

impl Watcher {
    /// Starts the thread on `conn`, a read connection of its own to the store's file.
    pub(crate) fn start(conn: Connection) -> Watcher {
        let wakes: Arc<Mutex<Vec<Wake>>> = Arc::default();
        let (stop, stopped) = crossbeam_channel::bounded(0);
        let shared = wakes.clone();
        let (events, unblock) = wal_events(&conn).unzip();
        // The first look, before the pool that asked claims for the first time: a job
        // committed before it is the claim's to find, one committed after is new to the
        // watcher. (Should it fail, the thread takes it, and a job committed in between is
        // found at the pool's next poll.)
        let seen = look(&conn, None).ok().map(|(seen, _)| seen);
        let thread = std::thread::Builder::new()
            .name("fenceq-watch".into())
            .spawn(move || run(&conn, &shared, &stopped, (seen, events)))
            .map_err(|e| tracing::warn!("fenceq: no watcher thread ({e}); pools poll instead"))
            .ok();
        Watcher { wakes, stop: Some(stop), unblock, thread }
    }

    /// Adds a waker (a queue handle's pools).
    pub(crate) fn add(&self, wake: Wake) {
        self.wakes.lock().push(wake);
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(mut self) {
        drop(self.stop.take());
        if let Some(unblock) = self.unblock.take() {
            unblock.unblock();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the watcher has seen: the connection's `data_version` and the highest job id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    version: i64,
    last_id: i64,
}

fn run(
    conn: &Connection,
    wakes: &Mutex<Vec<Wake>>,
    stopped: &Receiver<()>,
    (mut seen, mut events): (Option<Seen>, Option<WalEvents>),
) {
    // A lock another connection holds (a checkpoint's, a recovery's) fails the read at once:
    // the next tick tries again, and a stop is never kept waiting.
    let _patience = Patience::set(Duration::ZERO);
    let mut warned: Option<Instant> = None;
    let mut tick = TICK;
    let mut changed_at = Instant::now();
    loop {
        let quiet = changed_at.elapsed() >= HOT;
        match events.as_mut().filter(|_| quiet) {
            Some(wal) => {
                let written = wal.wait();
                if matches!(stopped.try_recv(), Err(TryRecvError::Disconnected)) {
                    return;
                }
                if written {
                    // The frames are written just before the commit shows (or, at `FULL`,
                    // a sync before): read now, and again after [`FIRST_TICK`], doubling.
                    changed_at = Instant::now();
                    tick = FIRST_TICK;
                } else {
                    tracing::debug!("fenceq: the watcher's file events ended; it reads every few ms instead");
                    events = None;
                }
            }
            None => {
                if !matches!(stopped.recv_timeout(tick), Err(RecvTimeoutError::Timeout)) {
                    return;
                }
            }
        }
        match look(conn, seen) {
            Ok((now, queues)) => {
                if seen.is_some_and(|seen| seen.version != now.version) {
                    changed_at = Instant::now();
                    tick = tick.max(FIRST_TICK);
                } else {
                    let longest = if changed_at.elapsed() >= HOT { IDLE_TICK } else { TICK };
                    tick = (tick * 2).min(longest);
                }
                seen = Some(now);
                if !queues.is_empty() {
                    // A copy, so that no lock is held while the wakers run.
                    let wakes: Vec<Wake> = wakes.lock().clone();
                    for queue in &queues {
                        wakes.iter().for_each(|wake| wake(Some(queue)));
                    }
                }
            }
            Err(e) => {
                if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                    tracing::warn!("fenceq: the watcher could not read the database ({e}); pools poll meanwhile");
                    warned = Some(Instant::now());
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
use elsewhere::{wal_events, Unblock, WalEvents};
#[cfg(target_os = "linux")]
use linux::{wal_events, Unblock, WalEvents};

/// Writes to the `-wal` file through inotify, which wakes the quiet watcher at once and costs
/// nothing while the file is quiet.
#[cfg(target_os = "linux")]
mod linux {
    use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
    use rusqlite::Connection;

    /// The inotify instance, read by the watcher thread.
    pub(super) struct WalEvents {
        inotify: Inotify,
        buffer: Vec<u8>,
    }

    /// What ends a blocked [`WalEvents::wait`] from another thread: removing the watch (the
    /// kernel then sends `IN_IGNORED`).
    pub(super) struct Unblock {
        watches: Watches,
        watch: WatchDescriptor,
    }

    /// Watches `conn`'s `-wal` file; `None` without inotify (the kernel's limit of instances
    /// reached, say) or without the file, and the watcher reads every few ms instead.
    pub(super) fn wal_events(conn: &Connection) -> Option<(WalEvents, Unblock)> {
        let db = conn.path().filter(|db| !db.is_empty())?;
        let inotify = Inotify::init().ok()?;
        let mut watches = inotify.watches();
        let mask = WatchMask::MODIFY | WatchMask::DELETE_SELF | WatchMask::MOVE_SELF;
        let watch = watches.add(format!("{db}-wal"), mask).ok()?;
        Some((WalEvents { inotify, buffer: vec![0; 4096] }, Unblock { watches, watch }))
    }

    impl WalEvents {
        /// Blocks until the file is written (true), or until it is gone, the watch was
        /// removed or the read failed (false: no more events will come).
        pub(super) fn wait(&mut self) -> bool {
            let ended = EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF;
            match self.inotify.read_events_blocking(&mut self.buffer) {
                Ok(mut events) => events.all(|event| !event.mask.intersects(ended)),
                Err(_) => false,
            }
        }
    }

    impl Unblock {
        pub(super) fn unblock(mut self) {
            let _ = self.watches.remove(self.watch);
        }
    }
}

/// No file events here: the watcher reads every few ms.
#[cfg(not(target_os = "linux"))]
mod elsewhere {
    use rusqlite::Connection;

    pub(super) enum WalEvents {}
    pub(super) struct Unblock;

    pub(super) fn wal_events(_: &Connection) -> Option<(WalEvents, Unblock)> {
        None
    }

    impl WalEvents {
        pub(super) fn wait(&mut self) -> bool {
            match *self {}
        }
    }

    impl Unblock {
        pub(super) fn unblock(self) {}
    }
}

/// Reads `data_version` and, when it changed since `seen` (or on the first look), the queues
/// with a pending job among the rows added since. The first look only takes note.
fn look(conn: &Connection, seen: Option<Seen>) -> rusqlite::Result<(Seen, Vec<String>)> {
    let version: i64 = conn.prepare_cached("PRAGMA data_version")?.query_row([], |row| row.get(0))?;
    let Some(seen) = seen else {
        let last_id =
            conn.prepare_cached("SELECT coalesce(max(id), 0) FROM fenceq_jobs")?.query_row([], |row| row.get(0))?;
        return Ok((Seen { version, last_id }, Vec::new()));
    };
    if version == seen.version {
        return Ok((seen, Vec::new()));
    }
    let mut now = Seen { version, last_id: seen.last_id };
    let mut queues = Vec::new();
    let mut statement = conn.prepare_cached(ADDED_SINCE)?;
    let mut rows = statement.query([seen.last_id])?;
    while let Some(row) = rows.next()? {
        now.last_id = now.last_id.max(row.get(1)?);
        if row.get::<_, bool>(2)? {
            queues.push(row.get(0)?);
        }
    }
    Ok((now, queues))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NewJob, Queue};

    #[test]
    fn a_look_names_the_queues_of_new_pending_rows_once_and_only_after_a_commit_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("watch.db");
        let queue = Queue::open(&path).unwrap();
        queue.enqueue(NewJob::new("old", b"x".to_vec())).unwrap();
        let conn = Connection::open(&path).unwrap();
        let (seen, queues) = look(&conn, None).unwrap();
        assert!(queues.is_empty(), "the first look only takes note");
        assert_eq!(look(&conn, Some(seen)).unwrap(), (seen, Vec::new()), "nothing committed since");

        queue.enqueue(NewJob::new("a", b"1".to_vec())).unwrap();
        queue.enqueue(NewJob::new("b", b"2".to_vec())).unwrap();
        queue.enqueue(NewJob::new("a", b"3".to_vec())).unwrap();
        let (after, mut queues) = look(&conn, Some(seen)).unwrap();
        queues.sort();
        assert_eq!(queues, ["a", "b"]);
        assert_ne!(after.version, seen.version);
        assert_eq!(after.last_id, seen.last_id + 3);
        assert_eq!(look(&conn, Some(after)).unwrap(), (after, Vec::new()), "each row is named once");

        // A row no longer pending by the time of the look (claimed here) wakes nobody, and
        // a commit that adds no row (the claim itself) is looked at and names nothing.
        queue.enqueue(NewJob::new("c", b"4".to_vec())).unwrap();
        assert!(queue.claim("c", "w", Duration::from_secs(30)).unwrap().is_some());
        let (last, queues) = look(&conn, Some(after)).unwrap();
        assert!(queues.is_empty(), "{queues:?}");
        assert_eq!(last.last_id, after.last_id + 1);
    }

    #[test]
    fn a_watcher_stops_and_lets_its_wakers_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("watch.db");
        let queue = Queue::open(&path).unwrap();
        let held = Arc::new(());
        let watcher = Watcher::start(Connection::open(&path).unwrap());
        let token = held.clone();
        watcher.add(Arc::new(move |_| {
            let _ = &token;
        }));
        assert_eq!(Arc::strong_count(&held), 2);
        watcher.stop();
        assert_eq!(Arc::strong_count(&held), 1, "the thread ended and dropped what it called");
        drop(queue);
    }

    #[test]
    fn a_quiet_watcher_waiting_for_file_events_stops_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("watch.db");
        let queue = Queue::open(&path).unwrap();
        let (woken, wakes) = crossbeam_channel::unbounded();
        let watcher = Watcher::start(Connection::open(&path).unwrap());
        watcher.add(Arc::new(move |queue: Option<&str>| {
            let _ = woken.send(queue.map(str::to_string));
        }));
        // Past the first look and the quiet time after it: where the platform has file events
        // the thread now waits for one (the stop below passes either way; this only makes
        // that path the likely one).
        std::thread::sleep(HOT * 3);
        queue.enqueue(NewJob::new("q", b"x".to_vec())).unwrap();
        assert_eq!(wakes.recv_timeout(Duration::from_secs(30)).unwrap().as_deref(), Some("q"));
        std::thread::sleep(HOT * 3);
        let (stopped, done) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            watcher.stop();
            let _ = stopped.send(());
        });
        done.recv_timeout(Duration::from_secs(30)).expect("a stop ends the wait for file events");
    }
}
