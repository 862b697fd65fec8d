//! What a request that cannot be answered with its page gets instead: an error page's
//! status, title and message, from the queue's errors and the CLI's; and the cut that keeps
//! long texts short on every page.
//!
//! An error that says the store cannot be reached right now (see [`outage`]) is `503 Service
//! Unavailable` with a `Retry-After`, and a sentence that says so and that the page will work
//! again when it can, never the store's own message (which may name the server's address or
//! the statement that failed); every other error is `500` with its plain sentence.

use crate::cli::error_line;
use fenceq::Error;

/// Seconds a `503` asks the client to wait before it tries again (`Retry-After`): the outages
/// the dashboard meets (a lock held past the busy timeout, a server restarting, a failover)
/// pass in seconds.
pub const RETRY_AFTER_SECS: u32 = 5;

/// A request that gets an error page instead: its status and what to tell the person.
#[derive(Debug)]
pub struct Problem {
    /// The HTTP status.
    pub status: u16,
    /// A short title.
    pub title: &'static str,
    /// What happened and what to do, as plain text (escaped when rendered).
    pub message: String,
    /// Seconds to wait before trying again (`Retry-After`), for a problem that passes.
    pub retry_after: Option<u32>,
    /// The store could not be reached: what its error says of a change, and why, in words.
    unreachable: Option<(Outage, String)>,
}

/// What an error that says the store cannot be reached right now says of a change that met it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// Nothing was written: the change can be made again as it is.
    NothingWritten,
    /// The connection broke while the change was committing: it may have been made.
    CommitUnknown,
}

/// Whether `error` says the store cannot be reached right now, and then what it says of a
/// change and why, in words that name no server, statement or password: fenceq's retryable
/// errors ([`Error::is_retryable`]: busy or locked past the busy timeout, no server that
/// accepts writes, a connection lost before anything was written), a connection lost while
/// committing, no connection from the pool in time, and an SQLite error of a busy or locked
/// database. `None` for every other error.
pub fn outage(error: &Error) -> Option<(Outage, String)> {
    let nothing = |why: &str| Some((Outage::NothingWritten, why.to_string()));
    match error {
        Error::Busy { cause, .. } => Some((Outage::NothingWritten, format!("it is busy: {cause}"))),
        Error::Unavailable { .. } => {
            nothing("its server does not answer, or answers read-only: it may be down, restarting or failing over")
        }
        Error::ConnectionLost { commit_unknown: false, .. } => nothing("the connection to its server was lost"),
        Error::ConnectionLost { commit_unknown: true, .. } => {
            Some((Outage::CommitUnknown, "the connection to its server was lost".to_string()))
        }
        Error::Pool(_) => nothing("no connection to it could be had in time"),
        Error::Sqlite { source, .. } => match source.as_ref() {
            fenceq::rusqlite::Error::SqliteFailure(failure, _)
                if matches!(
                    failure.code,
                    fenceq::rusqlite::ErrorCode::DatabaseBusy | fenceq::rusqlite::ErrorCode::DatabaseLocked
                ) =>
            {
                nothing("it is locked by another connection")
            }
            _ => None,
        },
        _ => None,
    }
}

/// `the database cannot be reached right now (why)`, when `error` says so ([`outage`]).
pub fn outage_words(error: &Error) -> Option<String> {
    outage(error).map(|(_, why)| format!("the database cannot be reached right now ({why})"))
}

impl Problem {
    pub fn new(status: u16, title: &'static str, message: impl Into<String>) -> Problem {
        Problem { status, title, message: message.into(), retry_after: None, unreachable: None }
    }

    pub fn bad(message: impl Into<String>) -> Problem {
        Problem::new(400, "Bad request", message)
    }

    pub fn not_found(message: impl Into<String>) -> Problem {
        Problem::new(404, "Not found", message)
    }

    /// The job changed since the page was drawn.
    pub fn stale(message: impl Into<String>) -> Problem {
        Problem::new(409, "Changed since the page was drawn", message)
    }

    /// `503` with `Retry-After`: a problem that passes in a moment.
    pub fn passing(title: &'static str, message: impl Into<String>) -> Problem {
        Problem { retry_after: Some(RETRY_AFTER_SECS), ..Problem::new(503, title, message) }
    }

    /// The store cannot be reached right now, for `why`: what a page says.
    fn unreachable(outage: Outage, why: String) -> Problem {
        let message = format!(
            "The database cannot be reached right now ({why}). This page will work again when it can: reload it in \
             a few seconds."
        );
        Problem { unreachable: Some((outage, why)), ..Problem::passing("Database unavailable", message) }
    }

    /// The problem as the answer to a change (a POST): when the store could not be reached,
    /// it says that nothing was changed, or that whether the change was made is unknown.
    pub fn for_change(mut self) -> Problem {
        match &self.unreachable {
            Some((Outage::NothingWritten, why)) => {
                self.message = format!(
                    "The database cannot be reached right now ({why}). Nothing was changed: make the change again \
                     once the database can be reached (the pages will work again when it can)."
                );
            }
            Some((Outage::CommitUnknown, why)) => {
                self.message = format!(
                    "The database cannot be reached right now ({why}), and it was lost while the change was being \
                     committed: the change may or may not have been made. Once the pages work again (when the \
                     database can be reached), reload the page to see which before making it again."
                );
            }
            None => {}
        }
        self
    }
}

impl From<Error> for Problem {
    fn from(error: Error) -> Problem {
        if let Some((outage, why)) = outage(&error) {
            return Problem::unreachable(outage, why);
        }
        let line = error_line(&error);
        match error {
            Error::InvalidInput { .. } => Problem::bad(line),
            _ => Problem::new(500, "Database error", line),
        }
    }
}

impl From<crate::cli::BoxError> for Problem {
    fn from(error: crate::cli::BoxError) -> Problem {
        match error.downcast::<Error>() {
            Ok(error) => Problem::from(*error),
            Err(other) => {
                // A CLI error that carries the store's: an outage is told as one.
                let mut cause = other.source();
                while let Some(e) = cause {
                    if let Some(store) = e.downcast_ref::<Error>().filter(|e| outage(e).is_some()) {
                        return Problem::from(store.clone());
                    }
                    cause = e.source();
                }
                Problem::new(500, "Error", error_line(other.as_ref()))
            }
        }
    }
}

/// At most `n` characters of `text`.
pub fn cut(text: &str, n: usize) -> String {
    match text.char_indices().nth(n) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fenceq::rusqlite::ffi;
    use fenceq::{BusyCause, JobId};
    use std::sync::Arc;

    fn sqlite(code: i32) -> Error {
        let failure = fenceq::rusqlite::Error::SqliteFailure(ffi::Error::new(code), None);
        Error::Sqlite { statement: "STATS", source: Arc::new(failure) }
    }

    /// A pool whose every connection fails, which hands out none in time: `Error::Pool`.
    fn pool_timeout() -> Error {
        #[derive(Debug)]
        struct Refused;
        impl std::fmt::Display for Refused {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("connection refused by 10.0.0.7")
            }
        }
        impl std::error::Error for Refused {}
        struct Never;
        impl r2d2::ManageConnection for Never {
            type Connection = ();
            type Error = Refused;
            fn connect(&self) -> Result<(), Refused> {
                Err(Refused)
            }
            fn is_valid(&self, _: &mut ()) -> Result<(), Refused> {
                Ok(())
            }
            fn has_broken(&self, _: &mut ()) -> bool {
                false
            }
        }
        let pool = r2d2::Pool::builder()
            .connection_timeout(std::time::Duration::from_millis(10))
            .min_idle(Some(0))
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(Never);
        Error::from(pool.get().expect_err("no connection"))
    }

    #[test]
    fn an_unreachable_store_is_503_with_retry_after_and_other_errors_stay_500() {
        let unreachable = [
            Error::Busy { statement: "CLAIM", cause: BusyCause::Locked },
            Error::Busy { statement: "SETTLE", cause: BusyCause::Deadlock },
            Error::Unavailable {
                statement: "connect",
                reason: "connection to server at \"10.0.0.7\", port 5432 failed: Connection refused".to_string(),
            },
            Error::ConnectionLost { statement: "STATS", commit_unknown: false },
            Error::ConnectionLost { statement: "ACKNOWLEDGE", commit_unknown: true },
            pool_timeout(),
            sqlite(ffi::SQLITE_BUSY),
            sqlite(ffi::SQLITE_LOCKED),
        ];
        for error in unreachable {
            let shown = format!("{error:?}");
            let problem = Problem::from(error);
            assert_eq!((problem.status, problem.retry_after), (503, Some(RETRY_AFTER_SECS)), "{shown}");
            assert_eq!(problem.title, "Database unavailable", "{shown}");
            assert!(problem.message.contains("cannot be reached right now"), "{shown}: {}", problem.message);
            assert!(problem.message.contains("will work again when it can"), "{shown}: {}", problem.message);
            for detail in ["10.0.0.7", "5432", "refused", "CLAIM", "SETTLE", "STATS", "ACKNOWLEDGE", "connect "] {
                assert!(!problem.message.contains(detail), "{shown}: {detail:?} in {}", problem.message);
            }
        }
        let others = [
            (Error::NotFound(JobId(7)), 500),
            (Error::Corrupt { statement: "STATS" }, 500),
            (Error::ReadOnly { statement: "PAUSE" }, 500),
            (Error::StorageFull { statement: "PAUSE" }, 500),
            (sqlite(ffi::SQLITE_CONSTRAINT), 500),
            (Error::InvalidInput { what: "queue name", reason: "empty".to_string() }, 400),
        ];
        for (error, status) in others {
            let line = error_line(&error);
            let problem = Problem::from(error);
            assert_eq!((problem.status, problem.retry_after), (status, None), "{line}");
            assert_eq!(problem.message, line, "its plain sentence");
            assert_eq!(problem.for_change().message, line, "a change says what the error says");
        }
        assert_eq!(outage(&sqlite(ffi::SQLITE_BUSY)).map(|o| o.0), Some(Outage::NothingWritten));
    }

    #[test]
    fn a_change_that_met_an_outage_says_nothing_was_changed_or_that_its_outcome_is_unknown() {
        for error in [
            Error::Busy { statement: "PAUSE", cause: BusyCause::Locked },
            Error::Unavailable { statement: "connect", reason: "refused".to_string() },
            Error::ConnectionLost { statement: "ACKNOWLEDGE", commit_unknown: false },
            pool_timeout(),
        ] {
            let problem = Problem::from(error).for_change();
            assert_eq!((problem.status, problem.retry_after), (503, Some(RETRY_AFTER_SECS)));
            assert!(problem.message.contains("Nothing was changed"), "{}", problem.message);
            assert!(!problem.message.contains("may or may not"), "{}", problem.message);
        }
        let unknown = Problem::from(Error::ConnectionLost { statement: "ACKNOWLEDGE", commit_unknown: true });
        let problem = unknown.for_change();
        assert_eq!((problem.status, problem.retry_after), (503, Some(RETRY_AFTER_SECS)));
        assert!(problem.message.contains("may or may not have been made"), "{}", problem.message);
        assert!(!problem.message.contains("Nothing was changed"), "{}", problem.message);
        assert!(problem.message.contains("reload the page to see which"), "{}", problem.message);
    }

    #[test]
    fn a_cli_error_that_carries_an_outage_is_told_as_one() {
        #[derive(Debug)]
        struct Wrapped(Error);
        impl std::fmt::Display for Wrapped {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("cannot list the jobs")
            }
        }
        impl std::error::Error for Wrapped {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let busy: crate::cli::BoxError = Box::new(Wrapped(Error::Busy { statement: "LIST", cause: BusyCause::Locked }));
        assert_eq!(Problem::from(busy).status, 503);
        let other: crate::cli::BoxError = Box::new(Wrapped(Error::Corrupt { statement: "LIST" }));
        let problem = Problem::from(other);
        assert_eq!((problem.status, problem.retry_after), (500, None));
        let plain: crate::cli::BoxError = Box::new(Error::Busy { statement: "LIST", cause: BusyCause::Locked });
        assert_eq!(Problem::from(plain).status, 503);
    }
}
