//! What a request that cannot be answered with its page gets instead: an error page's
//! status, title and message, from the queue's errors and the CLI's; and the cut that keeps
//! long texts short on every page.

use crate::cli::error_line;
use fenceq::Error;

/// A request that gets an error page instead: its status and what to tell the person.
#[derive(Debug)]
pub struct Problem {
    /// The HTTP status.
    pub status: u16,
    /// A short title.
    pub title: &'static str,
    /// What happened and what to do, as plain text (escaped when rendered).
    pub message: String,
}

impl Problem {
    pub fn new(status: u16, title: &'static str, message: impl Into<String>) -> Problem {
        Problem { status, title, message: message.into() }
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
}

impl From<Error> for Problem {
    fn from(error: Error) -> Problem {
        let line = error_line(&error);
        match error {
            Error::InvalidInput { .. } => Problem::bad(line),
            Error::Busy { .. } | Error::Pool(_) => Problem::new(503, "Database busy", format!("{line}; try again")),
            _ => Problem::new(500, "Database error", line),
        }
    }
}

impl From<crate::cli::BoxError> for Problem {
    fn from(error: crate::cli::BoxError) -> Problem {
        match error.downcast::<Error>() {
            Ok(error) => Problem::from(*error),
            Err(other) => Problem::new(500, "Error", error_line(other.as_ref())),
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
