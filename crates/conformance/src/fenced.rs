//! Fenced rules: the full identity {id, attempt, claim_id} on renew, owns and every settle; stale workers; ownership inside the caller's transaction.

use crate::harness::Harness;
use crate::Rule;

/// Every rule of this level, the controls included.
pub fn rules<H: Harness>() -> Vec<Rule<H>> {
    let mut rules: Vec<Rule<H>> = crate::rules![];
    rules.extend(crate::controls::rules::<H, { crate::controls::FENCED }>());
    rules
}
