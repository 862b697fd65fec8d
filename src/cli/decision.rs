//! Who made a change and why: the `--by` and `--note` options of every command that changes
//! rows or queues, and the operator handle that records them.

use super::store::CliStore;
use clap::Args;
use fenceq::Queue;

/// `--by NAME` and `--note TEXT`: who made a change and why, recorded on every job it
/// changes (`fenceq show` and `--json` print it).
#[derive(Debug, Clone, Args)]
pub struct DecisionOpts {
    /// Who makes the change, recorded on the job's row (for `pause` and `unpause`, the
    /// queue's). Defaults to the OS user ($USER, $LOGNAME or $USERNAME).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,

    /// Why, recorded on the job's row with the change.
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,
}

impl DecisionOpts {
    /// The operator handle that records this decision.
    pub fn operator<'q, S: CliStore>(&self, queue: &'q Queue<S>) -> fenceq::Operator<'q, S> {
        let by = self.by.clone().unwrap_or_else(os_user);
        let operator = queue.operator(by);
        match &self.note {
            Some(note) => operator.note(note.clone()),
            None => operator,
        }
    }
}

/// The OS user running the command, or `unknown`.
pub fn os_user() -> String {
    ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|name| !name.is_empty()))
        .unwrap_or_else(|| "unknown".to_string())
}
