//! Every check of caller input, in one place, for every store: names, keys, payloads,
//! leases, limits, attempt budgets, delays, park timeouts, notes and expected counts. Each
//! runs before anything touches the database, and each refusal is `InvalidInput` naming what
//! was refused and why (or `CountMismatch` for an expected count).

use crate::clock::duration_ms;
use crate::error::{Error, Result};
use crate::job::NewJob;
use std::borrow::Cow;
use std::time::Duration;

/// Longest queue name and worker id, in bytes.
pub const MAX_NAME_LEN: usize = 128;
/// Longest idempotency key, in bytes.
pub const MAX_KEY_LEN: usize = 512;
/// Longest lease a claim or renewal may ask for.
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 3600);
/// Largest attempt budget.
pub(crate) const MAX_ATTEMPTS_LIMIT: u32 = 10_000;
/// Longest error, reason or evidence text stored; longer texts are cut (at a char boundary).
pub const MAX_ERROR_LEN: usize = 4096;
/// Most jobs one `claim_batch` or page may return.
pub const MAX_BATCH: u32 = 10_000;
/// Longest delay of a new job.
const MAX_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// Longest park.
const MAX_PARK: Duration = Duration::from_secs(365 * 24 * 3600);
/// Most pages one backup step copies (4 GiB at the default page size).
const MAX_BACKUP_STEP: u32 = 1 << 20;
/// Longest time limit of a backup.
const MAX_BACKUP_TIME: Duration = Duration::from_secs(24 * 3600);

/// A queue name, worker id, operator or schedule name: 1..=128 bytes without a control
/// character (C0, DEL or C1, NUL among them). Names are printed by the CLI and in logs as
/// they are; a control character there could rewrite a terminal (an escape sequence) or
/// forge a line of output (a newline). SQLite's `length()` (in the schema's CHECK) and C
/// strings stop at a NUL byte, and PostgreSQL's `text` refuses one.
pub(crate) fn check_name(what: &'static str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(what, format!("{} bytes is not in 1..={MAX_NAME_LEN}", name.len())));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(Error::invalid(what, format!("contains the control character {:?}", c)));
    }
    Ok(())
}

/// An idempotency key: 1..=512 bytes without a NUL byte (PostgreSQL's `text` cannot hold
/// one, so the same key would mean different things on the two stores). Other bytes are
/// the application's own: keys often come from upstream ids, and the CLI escapes what it
/// prints.
pub(crate) fn check_key(key: &str) -> Result<()> {
    check_key_like("key", key)
}

/// A group name: the same limits as a key ([`check_key`]), for the same reasons.
pub(crate) fn check_group(group: &str) -> Result<()> {
    check_key_like("group", group)
}

fn check_key_like(what: &'static str, text: &str) -> Result<()> {
    if text.is_empty() || text.len() > MAX_KEY_LEN {
        return Err(Error::invalid(what, format!("{} bytes is not in 1..={MAX_KEY_LEN}", text.len())));
    }
    if text.contains('\0') {
        return Err(Error::invalid(what, "contains a NUL byte"));
    }
    Ok(())
}

/// A lease between 1 ms and [`MAX_LEASE`]; returns it in ms.
pub(crate) fn check_lease(lease: Duration) -> Result<i64> {
    if lease < Duration::from_millis(1) || lease > MAX_LEASE {
        return Err(Error::invalid("lease", format!("{lease:?} is not between 1 ms and {MAX_LEASE:?}")));
    }
    Ok(duration_ms(lease))
}

/// A batch or page size in 1..=[`MAX_BATCH`].
pub(crate) fn check_limit(limit: u32) -> Result<()> {
    if limit == 0 || limit > MAX_BATCH {
        return Err(Error::invalid("limit", format!("{limit} is not in 1..={MAX_BATCH}")));
    }
    Ok(())
}

/// The arguments of a claim; returns the lease in ms.
pub(crate) fn check_claim(queue: &str, worker: &str, lease: Duration, limit: u32) -> Result<i64> {
    check_name("queue name", queue)?;
    check_name("worker id", worker)?;
    let lease_ms = check_lease(lease)?;
    check_limit(limit)?;
    Ok(lease_ms)
}

/// An attempt budget in 1..=10,000.
pub(crate) fn check_attempts(attempts: u32) -> Result<()> {
    if attempts == 0 || attempts > MAX_ATTEMPTS_LIMIT {
        return Err(Error::invalid("max attempts", format!("{attempts} is not in 1..={MAX_ATTEMPTS_LIMIT}")));
    }
    Ok(())
}

/// A new job, against the queue's payload limit.
pub(crate) fn check_job(job: &NewJob, max_payload: usize) -> Result<()> {
    check_name("queue name", &job.queue)?;
    if let Some(key) = &job.key {
        check_key(key)?;
    }
    if let Some(group) = &job.group {
        check_group(group)?;
    }
    if job.payload.is_empty() || job.payload.len() > max_payload {
        return Err(Error::invalid(
            "payload",
            format!("{} bytes is not in 1..={max_payload} (the queue's payload limit)", job.payload.len()),
        ));
    }
    if let Some(attempts) = job.max_attempts {
        check_attempts(attempts)?;
    }
    if job.delay > MAX_DELAY {
        return Err(Error::invalid("delay", "longer than a hundred years"));
    }
    Ok(())
}

/// A park's timeout: between 1 ms and a year.
pub(crate) fn check_park_timeout(timeout: Duration) -> Result<()> {
    if timeout < Duration::from_millis(1) || timeout > MAX_PARK {
        return Err(Error::invalid("park timeout", "must be between 1 ms and a year"));
    }
    Ok(())
}

/// A snooze's or back-off's delay: at most [`MAX_SNOOZE`](crate::MAX_SNOOZE) (a year, as a park).
pub(crate) fn check_snooze_delay(delay: Duration) -> Result<()> {
    if delay > crate::job::MAX_SNOOZE {
        return Err(Error::invalid("snooze delay", format!("{delay:?} is longer than a year")));
    }
    Ok(())
}

/// An operator's note, as stored (see [`show_nul`]): at most [`MAX_ERROR_LEN`] bytes. A
/// note is typed by a person, so an over-long one is refused rather than cut.
pub(crate) fn check_note(note: &str) -> Result<()> {
    if note.len() > MAX_ERROR_LEN {
        return Err(Error::invalid("decision note", format!("{} bytes is over {MAX_ERROR_LEN}", note.len())));
    }
    Ok(())
}

/// A prune batch in 1..=100,000.
pub(crate) fn check_prune_batch(batch_size: u32) -> Result<()> {
    if batch_size == 0 || batch_size > 100_000 {
        return Err(Error::invalid("prune batch size", format!("{batch_size} is not in 1..=100000")));
    }
    Ok(())
}

/// A maintenance interval: not zero.
pub(crate) fn check_interval(every: Duration) -> Result<()> {
    if every.is_zero() {
        return Err(Error::invalid("maintenance interval", "must not be zero"));
    }
    Ok(())
}

/// A checkpoint's patience: at most a minute.
pub(crate) fn check_patience(patience: Duration) -> Result<()> {
    if patience > Duration::from_secs(60) {
        return Err(Error::invalid("checkpoint patience", "longer than a minute"));
    }
    Ok(())
}

/// A backup's settings: 1..=1,048,576 pages per step, a time limit between 1 ms and a day.
pub(crate) fn check_backup(options: &crate::BackupOptions) -> Result<()> {
    if options.pages_per_step == 0 || options.pages_per_step > MAX_BACKUP_STEP {
        let reason = format!("{} is not in 1..={MAX_BACKUP_STEP}", options.pages_per_step);
        return Err(Error::invalid("backup pages per step", reason));
    }
    if options.time_limit < Duration::from_millis(1) || options.time_limit > MAX_BACKUP_TIME {
        return Err(Error::invalid(
            "backup time limit",
            format!("{:?} is not between 1 ms and a day", options.time_limit),
        ));
    }
    Ok(())
}

/// `CountMismatch` unless `found` is what the caller expected (when it expected anything).
pub(crate) fn check_expected(operation: &'static str, expected: Option<u64>, found: u64) -> Result<()> {
    match expected {
        Some(expected) if expected != found => Err(Error::CountMismatch { operation, expected, found }),
        _ => Ok(()),
    }
}

/// How a NUL byte of a stored text is shown: U+2400 SYMBOL FOR NULL (`␀`). PostgreSQL's
/// `text` cannot hold a NUL at all and SQLite's `length()` and C strings stop at one, so the
/// same text is stored the same way on every store.
pub const NUL_SHOWN_AS: char = '\u{2400}';

/// `text` with each NUL byte shown as [`NUL_SHOWN_AS`]: what every store can hold.
pub(crate) fn show_nul(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', NUL_SHOWN_AS.encode_utf8(&mut [0; 4])))
    } else {
        Cow::Borrowed(text)
    }
}

/// A stored error, reason or evidence text as every store can hold it: each NUL byte
/// shown as [`NUL_SHOWN_AS`], then cut to [`MAX_ERROR_LEN`] bytes at a char boundary (texts
/// are cut, never refused: an error message must not fail the settle that records it).
pub(crate) fn clip(text: &str) -> Cow<'_, str> {
    let text = show_nul(text);
    if text.len() <= MAX_ERROR_LEN {
        return text;
    }
    let mut end = MAX_ERROR_LEN;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    match text {
        Cow::Borrowed(text) => Cow::Borrowed(&text[..end]),
        Cow::Owned(mut text) => {
            text.truncate(end);
            Cow::Owned(text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_shows_nul_bytes_and_cuts_at_a_char_boundary() {
        assert_eq!(clip("upstream said: \0 (binary)"), "upstream said: \u{2400} (binary)");
        assert!(matches!(clip("plain"), Cow::Borrowed("plain")));
        let long = "é".repeat(MAX_ERROR_LEN);
        let cut = clip(&long);
        assert!(cut.len() <= MAX_ERROR_LEN && cut.len() > MAX_ERROR_LEN - 2);
        // A NUL near the end grows into three bytes and is then cut whole, never split.
        let mut near_end = "a".repeat(MAX_ERROR_LEN - 1);
        near_end.push('\0');
        let cut = clip(&near_end);
        assert_eq!(cut.len(), MAX_ERROR_LEN - 1);
        assert!(!cut.contains('\0'));
    }

    #[test]
    fn names_refuse_control_characters_and_keys_refuse_nul() {
        assert!(check_name("queue name", "telegram").is_ok());
        assert!(check_name("queue name", "chat\u{1b}[2J").is_err());
        assert!(check_name("queue name", "a\nFORGED").is_err());
        assert!(check_name("queue name", "a\u{7f}").is_err());
        assert!(check_name("queue name", "a\u{9b}").is_err());
        assert!(check_name("queue name", "a\0").is_err());
        assert!(check_name("queue name", "émoji 🚀 ok").is_ok());
        assert!(check_key("update:\0:1").is_err());
        assert!(check_key("update:\n:1").is_ok());
    }
}
