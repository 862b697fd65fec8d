//! Standard output as the `fenceq` binary writes it (the same table style, JSON Lines and
//! progress bar), so that `fenceq bench` prints what it printed when the bench was one of
//! the binary's own commands. Only what the bench uses.

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{ContentArrangement, Table};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;
use std::borrow::Cow;
use std::fmt::Display;
use std::io::{self, IsTerminal, Write};

/// Standard output in one of two modes: human (lines and tables) or JSON Lines.
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

    /// One line of text (control characters but tabs escaped: see [`terminal_safe`]).
    pub fn line(&mut self, text: impl Display) -> io::Result<()> {
        writeln!(self.out, "{}", terminal_safe(&text.to_string()))
    }

    /// A table, followed by a newline (control characters of its cells escaped).
    pub fn table(&mut self, table: &Table) -> io::Result<()> {
        writeln!(self.out, "{}", terminal_safe(&table.to_string()))
    }

    /// One JSON object on one line (JSON Lines).
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

/// A table with the `fenceq` binary's style and the given header.
pub fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_content_arrangement(ContentArrangement::Dynamic).set_header(header);
    table
}

/// Text with its control characters other than line feeds and tabs escaped, so that no text
/// the bench prints (a server's error message among them) can move the cursor or change the
/// terminal's settings with an escape sequence.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
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
