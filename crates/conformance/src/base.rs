//! Base rules, for every store: the job lifecycle, idempotent intake, retention, maintenance and the worker pool.

use crate::harness::Harness;
use crate::Rule;

/// Every rule of this level, the controls included.
pub fn rules<H: Harness>() -> Vec<Rule<H>> {
    let mut rules: Vec<Rule<H>> = crate::rules![];
    rules.extend(crate::controls::rules::<H, { crate::controls::BASE }>());
    rules
}
