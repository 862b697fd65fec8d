//! The listener: one thread per queue handle whose pools wait, with a connection of its own
//! that `LISTEN`s on the schema's channel and wakes this process's pools when another
//! process (or handle) commits a job that is due now (the statements' `pg_notify`, see
//! `statements.rs`).
//!
//! diesel 2.3 reads notifications without waiting (`PgConnection::notifications_iter`,
//! libpq's `PQconsumeInput` and `PQnotifies`) and exposes no socket to wait on, so the
//! thread reads every [`LISTEN_POLL`] and sleeps in between on its stop channel (a stop
//! ends the sleep at once). A wake-up therefore reaches a pool within `LISTEN_POLL` of the
//! commit, plus the pool's claim. An idle read is one `recv` system call that finds nothing.
//!
//! A lost connection (the read fails, or the liveness query every [`LISTEN_PING`] does)
//! is reconnected with backoff, from [`RECONNECT_FIRST`] doubling to [`RECONNECT_MAX`];
//! meanwhile pools fall back to their poll interval. After every (re)connection the
//! listener wakes every queue's pools once, since notifications sent while it was away are
//! lost. The thread ends when the store is dropped (the last handle of the queue), which
//! waits for it.

use super::error::PgContext;
use super::statements::CHANNEL;
use crate::error::Result;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use diesel::connection::SimpleConnection;
use diesel::sql_types::Text;
use diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
use parking_lot::Mutex;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the listener reads what arrived: 5 ms.
pub(crate) const LISTEN_POLL: Duration = Duration::from_millis(5);
/// How often an idle listener checks that its connection still works (`SELECT 1`): 10 s.
pub(crate) const LISTEN_PING: Duration = Duration::from_secs(10);
/// The first wait before a reconnection: 50 ms.
pub(crate) const RECONNECT_FIRST: Duration = Duration::from_millis(50);
/// The longest wait between reconnection attempts: 5 s.
pub(crate) const RECONNECT_MAX: Duration = Duration::from_secs(5);

use crate::store::Wake;

/// A running listener thread.
pub(crate) struct Listener {
    wakes: Arc<Mutex<Vec<Wake>>>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").finish_non_exhaustive()
    }
}

impl Listener {
    /// Starts the thread on `url` with the session `settings` (the schema's `search_path`,
    /// from which the channel is computed as the statements compute it).
    pub(crate) fn start(url: String, settings: String) -> Listener {
        let wakes: Arc<Mutex<Vec<Wake>>> = Arc::default();
        let (stop, stopped) = crossbeam_channel::bounded(0);
        let shared = wakes.clone();
        let thread = std::thread::Builder::new()
            .name("fenceq-listen".into())
            .spawn(move || run(&url, &settings, &shared, &stopped))
            .map_err(|e| tracing::warn!("fenceq: no listener thread ({e}); pools poll instead"))
            .ok();
        Listener { wakes, stop: Some(stop), thread }
    }

    /// Adds a waker (a queue handle's pools).
    pub(crate) fn add(&self, wake: Wake) {
        self.wakes.lock().push(wake);
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn wake_all(wakes: &Mutex<Vec<Wake>>, queue: Option<&str>) {
    // A copy, so that no lock is held while the wakers run.
    let wakes: Vec<Wake> = wakes.lock().clone();
    for wake in wakes {
        wake(queue);
    }
}

/// True when a stop was asked for (or the store is gone) during `wait`.
fn stopped_within(stopped: &Receiver<()>, wait: Duration) -> bool {
    !matches!(stopped.recv_timeout(wait), Err(RecvTimeoutError::Timeout))
}

fn run(url: &str, settings: &str, wakes: &Mutex<Vec<Wake>>, stopped: &Receiver<()>) {
    let mut backoff = RECONNECT_FIRST;
    loop {
        match connect(url, settings) {
            Ok(mut conn) => {
                backoff = RECONNECT_FIRST;
                // Whatever was sent while no one listened is lost: every pool looks once.
                wake_all(wakes, None);
                match listen(&mut conn, wakes, stopped) {
                    Ended::Stopped => return,
                    Ended::Lost(why) => {
                        tracing::warn!("fenceq: the listener lost its connection ({why}); reconnecting")
                    }
                }
            }
            Err(e) => tracing::warn!("fenceq: the listener could not connect ({e}); retrying in {backoff:?}"),
        }
        if stopped_within(stopped, backoff) {
            return;
        }
        backoff = (backoff * 2).min(RECONNECT_MAX);
    }
}

#[derive(QueryableByName)]
struct Channel {
    #[diesel(sql_type = Text)]
    channel: String,
}

/// A connection with the session's settings that listens on the schema's channel.
fn connect(url: &str, settings: &str) -> Result<PgConnection> {
    let mut conn = PgConnection::establish(url)
        .map_err(|e| crate::Error::domain(format!("listener connection: {}", super::error::redact(&e.to_string()))))?;
    conn.batch_execute(settings).pg("listener settings")?;
    let channel = sql_query(CHANNEL.sql).get_result::<Channel>(&mut conn).pg(CHANNEL)?.channel;
    // The channel is `fenceq_` and a schema name of [a-z0-9_] (`check_schema`), or the
    // connection's current schema: quoted as an identifier, with any quote doubled.
    conn.batch_execute(&format!("LISTEN \"{}\"", channel.replace('"', "\"\""))).pg("LISTEN")?;
    Ok(conn)
}

enum Ended {
    Stopped,
    Lost(String),
}

fn listen(conn: &mut PgConnection, wakes: &Mutex<Vec<Wake>>, stopped: &Receiver<()>) -> Ended {
    let mut pinged = Instant::now();
    loop {
        let mut queues: Vec<String> = Vec::new();
        for notification in conn.notifications_iter() {
            match notification {
                Ok(n) if !queues.contains(&n.payload) => queues.push(n.payload),
                Ok(_) => {}
                Err(e) => return Ended::Lost(e.to_string()),
            }
        }
        for queue in &queues {
            wake_all(wakes, Some(queue));
        }
        if stopped_within(stopped, LISTEN_POLL) {
            return Ended::Stopped;
        }
        if pinged.elapsed() >= LISTEN_PING {
            if let Err(e) = conn.batch_execute("SELECT 1") {
                return Ended::Lost(e.to_string());
            }
            pinged = Instant::now();
        }
    }
}
