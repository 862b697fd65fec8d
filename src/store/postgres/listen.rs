//! The listener: one thread per queue handle whose pools wait, with a connection of its own
//! that `LISTEN`s on the schema's channel and wakes this process's pools when another
//! process (or handle) commits a job that is due now (the statements' `pg_notify`, see
//! `statements.rs`).
//!
//! Where it can, the thread talks to the server through its own small client (`wire.rs`)
//! and waits on the socket, so a notification wakes it as it arrives; it looks for a stop
//! every [`LISTEN_SLICE`] meanwhile. diesel over libpq exposes no socket to wait on, so where
//! that client cannot connect as libpq would (TLS, Unix sockets, logins it does not speak:
//! `wire.rs` lists them) the thread reads through libpq every [`LISTEN_POLL`] instead (an
//! idle read is one `recv` system call that finds nothing), and a wake-up then reaches a
//! pool within `LISTEN_POLL` of the commit, plus the pool's claim.
//!
//! A lost connection (the read fails, or the liveness query every [`LISTEN_PING`] does)
//! is reconnected with backoff, from [`RECONNECT_FIRST`] doubling to [`RECONNECT_MAX`];
//! meanwhile pools fall back to their poll interval. After every (re)connection the
//! listener wakes every queue's pools once, since notifications sent while it was away are
//! lost. The thread ends when the store is dropped (the last handle of the queue), which
//! waits for it.

use super::error::PgContext;
use super::statements::CHANNEL;
use super::wire;
use crate::error::Result;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use diesel::connection::SimpleConnection;
use diesel::sql_types::Text;
use diesel::{sql_query, Connection, PgConnection, QueryableByName, RunQueryDsl};
use parking_lot::Mutex;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the listener reads what arrived through libpq: 5 ms.
pub(crate) const LISTEN_POLL: Duration = Duration::from_millis(5);
/// The longest the listener waits on its own client's socket before it looks for a stop.
pub(crate) const LISTEN_SLICE: Duration = Duration::from_millis(100);
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
    // Until the own client says it cannot connect as libpq would.
    let mut own_client = true;
    loop {
        let ended = if own_client {
            match connect_wire(url, settings) {
                Ok(mut session) => {
                    backoff = RECONNECT_FIRST;
                    wake_all(wakes, None);
                    let ended = listen_wire(&mut session, wakes, stopped);
                    session.close();
                    Some(ended)
                }
                Err(wire::Connect::Unsupported(why)) => {
                    tracing::info!(
                        "fenceq: the listener reads notifications through libpq every {LISTEN_POLL:?} ({why})"
                    );
                    own_client = false;
                    continue;
                }
                Err(wire::Connect::Failed(e)) => {
                    tracing::warn!("fenceq: the listener could not connect ({e}); retrying in {backoff:?}");
                    None
                }
            }
        } else {
            match connect(url, settings) {
                Ok(mut conn) => {
                    backoff = RECONNECT_FIRST;
                    // Whatever was sent while no one listened is lost: every pool looks once.
                    wake_all(wakes, None);
                    Some(listen(&mut conn, wakes, stopped))
                }
                Err(e) => {
                    tracing::warn!("fenceq: the listener could not connect ({e}); retrying in {backoff:?}");
                    None
                }
            }
        };
        match ended {
            Some(Ended::Stopped) => return,
            Some(Ended::Lost(why)) => {
                tracing::warn!("fenceq: the listener lost its connection ({why}); reconnecting");
                backoff = RECONNECT_FIRST;
            }
            None => {}
        }
        if stopped_within(stopped, backoff) {
            return;
        }
        backoff = (backoff * 2).min(RECONNECT_MAX);
    }
}

/// The own client's session with the session's settings, listening on the schema's channel.
fn connect_wire(url: &str, settings: &str) -> std::result::Result<wire::Session, wire::Connect> {
    let info = crate::conninfo::ConnInfo::parse(url).map_err(|e| wire::Connect::Unsupported(e.to_string()))?;
    let mut session = wire::Session::connect(&info)?;
    let listening = (|| {
        session.query(settings)?;
        let rows = session.query(CHANNEL.sql)?;
        let channel = rows.first().and_then(|row| row.first()).cloned().flatten();
        let channel = channel.ok_or_else(|| wire::Failure("listener: no channel name".into()))?;
        session.query(&format!("LISTEN \"{}\"", channel.replace('"', "\"\"")))?;
        Ok::<(), wire::Failure>(())
    })();
    match listening {
        Ok(()) => Ok(session),
        Err(e) => {
            session.close();
            Err(wire::Connect::Failed(e))
        }
    }
}

/// Waits on the own client's socket for notifications and wakes their queues' pools.
fn listen_wire(session: &mut wire::Session, wakes: &Mutex<Vec<Wake>>, stopped: &Receiver<()>) -> Ended {
    let mut pinged = Instant::now();
    loop {
        match session.notifications(LISTEN_SLICE) {
            Ok(queues) => {
                for queue in &queues {
                    wake_all(wakes, Some(queue));
                }
            }
            Err(e) => return Ended::Lost(e.to_string()),
        }
        if !matches!(stopped.try_recv(), Err(crossbeam_channel::TryRecvError::Empty)) {
            return Ended::Stopped;
        }
        if pinged.elapsed() >= LISTEN_PING {
            if let Err(e) = session.query("SELECT 1") {
                return Ended::Lost(e.to_string());
            }
            pinged = Instant::now();
        }
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
