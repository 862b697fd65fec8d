//! Output helpers shared by every command: the stdout writer (sentences and tables, or JSON),
//! time and duration formatting, payload rendering, and progress bars on stderr.

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{ContentArrangement, Table};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};
use std::fmt::Display;
use std::io::{self, IsTerminal, Write};

/// How much of a payload `show` (and the JSON of listings) prints unless told otherwise.
pub const PAYLOAD_LIMIT: usize = 4096;

/// Standard output in one of two modes: human (sentences and tables) or JSON.
pub struct Output {
    json: bool,
    out: io::StdoutLock<'static>,
}

impl Output {
    /// Locks stdout for the whole run.
    pub fn new(json: bool) -> Output {
        Output { json, out: io::stdout().lock() }
    }

    /// True with `--json`.
    pub fn is_json(&self) -> bool {
        self.json
    }

    /// One line of text (its control characters but line feeds and tabs escaped, as in
    /// everything the human mode prints: see [`terminal_safe`]).
    pub fn line(&mut self, text: impl Display) -> io::Result<()> {
        writeln!(self.out, "{}", terminal_safe(&text.to_string()))
    }

    /// Text as it is, but for its control characters other than line feeds and tabs (it
    /// brings its own line feeds).
    pub fn text(&mut self, text: &str) -> io::Result<()> {
        self.out.write_all(terminal_safe(text).as_bytes())
    }

    /// A table, followed by a newline (control characters of its cells escaped).
    pub fn table(&mut self, table: &Table) -> io::Result<()> {
        writeln!(self.out, "{}", terminal_safe(&table.to_string()))
    }

    /// One JSON document (pretty-printed).
    pub fn document(&mut self, value: &Value) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut self.out, value)?;
        writeln!(self.out)
    }

    /// One JSON object on one line (for listings: JSON Lines).
    pub fn record(&mut self, value: &Value) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, value)?;
        writeln!(self.out)
    }

    /// Flushes stdout.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// A progress bar on stderr for `len` steps; hidden with `--json` or when stderr is not
    /// a terminal, so scripts and logs never see it.
    pub fn progress(&self, len: u64, message: &'static str) -> ProgressBar {
        if self.json || !io::stderr().is_terminal() {
            return ProgressBar::hidden();
        }
        let style = ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({elapsed}, eta {eta})")
            .map(|style| style.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr()).with_style(style).with_message(message)
    }
}

/// A table with the house style and the given header.
pub fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Dynamic).set_header(header);
    table
}

// ------------------------------------------------------------------------------- time

/// A time (ms since the Unix epoch) as ISO 8601 UTC: `2026-05-01T12:00:03.250Z`.
pub fn timestamp(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let (days, day_secs) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    let (h, m, s) = (day_secs / 3600, day_secs / 60 % 60, day_secs % 60);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{millis:03}Z")
}

/// Year, month, day of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A duration in ms, coarsely: `850ms`, `12s`, `4m 10s`, `3h 5m`, `2d 4h`.
pub fn human_duration(ms: u64) -> String {
    let s = ms / 1000;
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{s}s"),
        60_000..3_600_000 => format!("{}m {}s", s / 60, s % 60),
        3_600_000..86_400_000 => format!("{}h {}m", s / 3600, s / 60 % 60),
        _ => format!("{}d {}h", s / 86_400, s / 3600 % 24),
    }
}

/// A time relative to now: `3m 2s ago`, `in 10s`, `now`.
pub fn relative(ms: i64, now: i64) -> String {
    let diff = now.saturating_sub(ms);
    match diff {
        0 => "now".to_string(),
        d if d > 0 => format!("{} ago", human_duration(d.unsigned_abs())),
        d => format!("in {}", human_duration(d.unsigned_abs())),
    }
}

/// A time with its relative age, or `-`.
pub fn when(ms: Option<i64>, now: i64) -> String {
    ms.map_or_else(|| "-".to_string(), |ms| format!("{} ({})", timestamp(ms), relative(ms, now)))
}

// ------------------------------------------------------------------------------- text and payloads

/// The last guard of everything the human mode prints: control characters other than line
/// feeds and tabs escaped, so that no text from the database (a name written by an older
/// fenceq, a key, a note, an error, a payload) can move the cursor, rewrite the screen or
/// change the terminal's settings with an escape sequence.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .map(
                |c| {
                    if c.is_control() && c != '\n' && c != '\t' {
                        c.escape_default().to_string()
                    } else {
                        c.to_string()
                    }
                },
            )
            .collect(),
    )
}

/// A text from the database made safe for one field of a line or table: every control
/// character escaped, line feeds too, so that a note, an error or a key cannot forge a line
/// of output.
pub fn sanitize(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// Text on one line of at most `max` characters (newlines and control characters escaped).
pub fn one_line(text: &str, max: usize) -> String {
    let escaped: String =
        text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect();
    if escaped.chars().count() <= max {
        return escaped;
    }
    let mut cut: String = escaped.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// An optional text for a table cell: one line, or `-`.
pub fn cell(text: Option<&str>, max: usize) -> String {
    text.map_or_else(|| "-".to_string(), |t| one_line(t, max))
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A payload rendered for people and scripts: UTF-8 text as text, anything else as hex, cut
/// to a limit (at a character boundary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadView {
    /// `utf-8` or `hex`.
    pub encoding: &'static str,
    /// The (possibly cut) text or hex digits.
    pub text: String,
    /// Bytes of the payload the text shows.
    pub shown: usize,
    /// Bytes of the payload in all.
    pub total: usize,
}

impl PayloadView {
    /// Renders `bytes`, cut to `limit` bytes when one is given.
    pub fn new(bytes: &[u8], limit: Option<usize>) -> PayloadView {
        let total = bytes.len();
        let limit = limit.unwrap_or(usize::MAX).min(total);
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                let mut end = limit;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                PayloadView { encoding: "utf-8", text: text[..end].to_string(), shown: end, total }
            }
            Err(_) => PayloadView { encoding: "hex", text: hex(&bytes[..limit]), shown: limit, total },
        }
    }

    /// True when part of the payload was cut.
    pub fn truncated(&self) -> bool {
        self.shown < self.total
    }

    /// The sentence that says how much was cut, if anything was.
    pub fn note(&self) -> Option<String> {
        self.truncated().then(|| {
            format!(
                "(showing the first {} of {} bytes; {} bytes cut; --full shows everything)",
                self.shown,
                self.total,
                self.total - self.shown
            )
        })
    }

    /// The payload fields of a JSON object.
    pub fn json(&self) -> Value {
        json!({
            "encoding": self.encoding,
            "text": self.text,
            "bytes": self.total,
            "truncated": self.truncated(),
        })
    }

    /// The text for a terminal: sanitized UTF-8, or hex in lines of 32 bytes.
    pub fn for_terminal(&self) -> String {
        match self.encoding {
            "hex" => self
                .text
                .as_bytes()
                .chunks(64)
                .map(|line| String::from_utf8_lossy(line).into_owned())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => terminal_safe(&self.text).into_owned(),
        }
    }
}

/// A short one-line preview of a payload for table cells.
pub fn payload_preview(bytes: &[u8], max: usize) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => one_line(text, max),
        Err(_) => {
            let shown = &bytes[..bytes.len().min(max.saturating_sub(4) / 2)];
            let ellipsis = if shown.len() < bytes.len() { "…" } else { "" };
            format!("hex:{}{ellipsis}", hex(shown))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_from_the_database_cannot_forge_lines_or_reach_the_terminal_raw() {
        assert_eq!(sanitize("ok\nFORGED: all ok\u{1b}[2J"), "ok\\nFORGED: all ok\\u{1b}[2J");
        assert_eq!(terminal_safe("a\tb\nc\u{1b}]0;title\u{7}"), "a\tb\nc\\u{1b}]0;title\\u{7}");
        assert_eq!(terminal_safe("plain ✓"), "plain ✓");
        assert_eq!(one_line("a\nb", 10), "a\\nb");
    }

    #[test]
    fn timestamps_are_utc() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(timestamp(1_767_225_599_999), "2025-12-31T23:59:59.999Z");
        assert_eq!(timestamp(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn durations_are_coarse() {
        assert_eq!(human_duration(850), "850ms");
        assert_eq!(human_duration(12_400), "12s");
        assert_eq!(human_duration(250_000), "4m 10s");
        assert_eq!(human_duration(3 * 3_600_000 + 5 * 60_000), "3h 5m");
        assert_eq!(human_duration(2 * 86_400_000 + 4 * 3_600_000), "2d 4h");
        assert_eq!(relative(1_000, 4_000), "3s ago");
        assert_eq!(relative(14_000, 4_000), "in 10s");
        assert_eq!(relative(4_000, 4_000), "now");
    }

    #[test]
    fn payloads_are_cut_at_char_boundaries() {
        let view = PayloadView::new("héllo".as_bytes(), Some(2));
        assert_eq!((view.encoding, view.text.as_str(), view.shown, view.total), ("utf-8", "h", 1, 6));
        assert!(view.note().is_some());
        let view = PayloadView::new(&[0xff, 0x00, 0x10], None);
        assert_eq!((view.encoding, view.text.as_str(), view.truncated()), ("hex", "ff0010", false));
        assert_eq!(payload_preview(&[0xff; 40], 12), "hex:ffffffff…");
        assert_eq!(payload_preview(b"a\nb", 10), "a\\nb");
        assert_eq!(one_line("abcdef", 4), "abc…");
        assert_eq!(sanitize("a\u{1b}[2Jb\n"), "a\\u{1b}[2Jb\\n");
    }
}
