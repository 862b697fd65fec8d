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
        match Listening::open(url, settings, &mut own_client) {
            Ok(mut listening) => {
                backoff = RECONNECT_FIRST;
                // Whatever was sent while no one listened is lost: every pool looks once.
                wake_all(wakes, None);
                let ended = listening.listen(wakes, stopped);
                listening.close();
                match ended {
                    Ended::Stopped => return,
                    Ended::Lost(why) => {
                        tracing::warn!("fenceq: the listener lost its connection ({why}); reconnecting")
                    }
                }
            }
            Err(why) => tracing::warn!("fenceq: the listener could not connect ({why}); retrying in {backoff:?}"),
        }
        if stopped_within(stopped, backoff) {
            return;
        }
        backoff = (backoff * 2).min(RECONNECT_MAX);
    }
}

/// A connection that listens on the schema's channel, with the session's settings.
enum Listening {
    /// The own client's session: a wait on its socket ends as a notification arrives.
    Own(wire::Session),
    /// A libpq connection, read every [`LISTEN_POLL`].
    Libpq(PgConnection),
}

enum Ended {
    Stopped,
    Lost(String),
}

impl Listening {
    /// The own client's session while `own_client` holds, else (and from the first time it
    /// says it cannot connect as libpq would, which clears `own_client`) libpq's.
    fn open(url: &str, settings: &str, own_client: &mut bool) -> std::result::Result<Listening, String> {
        if *own_client {
            match connect_own(url, settings) {
                Ok(session) => return Ok(Listening::Own(session)),
                Err(wire::Connect::Failed(e)) => return Err(e.to_string()),
                Err(wire::Connect::Unsupported(why)) => {
                    tracing::info!(
                        "fenceq: the listener reads notifications through libpq every {LISTEN_POLL:?} ({why})"
                    );
                    *own_client = false;
                }
            }
        }
        connect_libpq(url, settings).map(Listening::Libpq).map_err(|e| e.to_string())
    }

    /// Wakes the pools of every queue notified, until a stop or a lost connection (the read
    /// fails, or the liveness query every [`LISTEN_PING`] does).
    fn listen(&mut self, wakes: &Mutex<Vec<Wake>>, stopped: &Receiver<()>) -> Ended {
        let mut pinged = Instant::now();
        loop {
            match self.notifications() {
                Ok(queues) => queues.iter().for_each(|queue| wake_all(wakes, Some(queue))),
                Err(why) => return Ended::Lost(why),
            }
            // The own client waited on its socket; libpq's read did not wait, so the thread
            // waits here, on the stop channel (a stop ends the wait at once).
            let pause = match self {
                Listening::Own(_) => Duration::ZERO,
                Listening::Libpq(_) => LISTEN_POLL,
            };
            if stopped_within(stopped, pause) {
                return Ended::Stopped;
            }
            if pinged.elapsed() >= LISTEN_PING {
                if let Err(why) = self.ping() {
                    return Ended::Lost(why);
                }
                pinged = Instant::now();
            }
        }
    }

    /// The queues notified since the last read, each once (the own client waits up to
    /// [`LISTEN_SLICE`] for the first).
    fn notifications(&mut self) -> std::result::Result<Vec<String>, String> {
        match self {
            Listening::Own(session) => session.notifications(LISTEN_SLICE).map_err(|e| e.to_string()),
            Listening::Libpq(conn) => {
                let mut queues: Vec<String> = Vec::new();
                for notification in conn.notifications_iter() {
                    match notification {
                        Ok(n) if !queues.contains(&n.payload) => queues.push(n.payload),
                        Ok(_) => {}
                        Err(e) => return Err(e.to_string()),
                    }
                }
                Ok(queues)
            }
        }
    }

    fn ping(&mut self) -> std::result::Result<(), String> {
        match self {
            Listening::Own(session) => session.query("SELECT 1").map(drop).map_err(|e| e.to_string()),
            Listening::Libpq(conn) => conn.batch_execute("SELECT 1").map_err(|e| e.to_string()),
        }
    }

    fn close(self) {
        if let Listening::Own(session) = self {
            session.close();
        }
    }
}

/// `LISTEN` on `channel`: `fenceq_` and a schema name of [a-z0-9_] (`check_schema`), or the
/// connection's current schema, quoted as an identifier with any quote doubled.
fn listen_statement(channel: &str) -> String {
    format!("LISTEN \"{}\"", channel.replace('"', "\"\""))
}

/// The own client's session with the session's settings, listening on the schema's channel.
fn connect_own(url: &str, settings: &str) -> std::result::Result<wire::Session, wire::Connect> {
    let info = crate::conninfo::ConnInfo::parse(url).map_err(|e| wire::Connect::Unsupported(e.to_string()))?;
    let mut session = wire::Session::connect(&info)?;
    let listening = (|| {
        session.query(settings)?;
        let rows = session.query(CHANNEL.sql)?;
        let channel = rows.first().and_then(|row| row.first()).cloned().flatten();
        let channel = channel.ok_or_else(|| wire::Failure("listener: no channel name".into()))?;
        session.query(&listen_statement(&channel)).map(drop)
    })();
    match listening {
        Ok(()) => Ok(session),
        Err(e) => {
            session.close();
            Err(wire::Connect::Failed(e))
        }
    }
}

#[derive(QueryableByName)]
struct Channel {
    #[diesel(sql_type = Text)]
    channel: String,
}

/// A libpq connection with the session's settings that listens on the schema's channel.
fn connect_libpq(url: &str, settings: &str) -> Result<PgConnection> {
    let mut conn = PgConnection::establish(url)
        .map_err(|e| crate::Error::domain(format!("listener connection: {}", super::error::redact(&e.to_string()))))?;
    conn.batch_execute(settings).pg("listener settings")?;
    let channel = sql_query(CHANNEL.sql).get_result::<Channel>(&mut conn).pg(CHANNEL)?.channel;
    conn.batch_execute(&listen_statement(&channel)).pg("LISTEN")?;
    Ok(conn)
}
