//! Durable rules: exhaustion records that keep their token, exact acknowledgement, and cursor pages under concurrent acknowledgement and addition.

use crate::harness::Harness;
use crate::Rule;

/// Every rule of this level, the controls included.
pub fn rules<H: Harness>() -> Vec<Rule<H>> {
    let mut rules: Vec<Rule<H>> = crate::rules![];
    rules.extend(crate::controls::rules::<H, { crate::controls::DURABLE }>());
    rules
}
