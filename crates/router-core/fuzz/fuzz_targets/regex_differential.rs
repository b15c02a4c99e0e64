//! `cargo fuzz run regex_differential`: an arbitrary rule regex and values, the program the
//! build compiles for it (as the worker runs it: required prefixes, the backtracker and the
//! Pike VM) against the `regex` crate on the source after the
//! JavaScript-class rewrite (`select::RegexOracle`): whether it matches, every group's span and
//! every named group must agree, so an operator's new regex cannot route differently from what
//! the tools show.
//!
//! Input (UTF-8, invalid sequences replaced): the regex on the first line, then a value per
//! line. A regex the rules refuse, or the crate does (its size limit), is skipped.
#![no_main]

use libfuzzer_sys::fuzz_target;
use router_core::select::RegexOracle;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let Some(source) = lines.next() else {
        return;
    };
    let Ok(oracle) = RegexOracle::new(source) else {
        return;
    };
    for value in lines {
        if let Err(e) = oracle.check(value) {
            panic!("{e}");
        }
    }
});
