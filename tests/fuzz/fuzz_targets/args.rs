//! The SQL edge's argument checks (dlock_core::args), on any input: they never panic, accept
//! exactly what the contract accepts, and hand back what they accepted.
#![no_main]

use dlock_core::{args, limits};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    key: Option<String>,
    owner: Option<String>,
    ttl: Option<i128>,
    wait: Option<i128>,
    max_ttl: i64,
}

fuzz_target!(|input: Input| {
    let text_ok =
        |v: &Option<String>, max: usize| v.as_ref().is_some_and(|s| !s.is_empty() && s.len() <= max);
    match args::key(input.key.as_deref()) {
        Ok(k) => assert!(text_ok(&input.key, limits::MAX_KEY_BYTES) && Some(k) == input.key.as_deref()),
        Err(_) => assert!(!text_ok(&input.key, limits::MAX_KEY_BYTES)),
    }
    match args::owner(input.owner.as_deref()) {
        Ok(o) => assert!(text_ok(&input.owner, limits::MAX_OWNER_BYTES) && Some(o) == input.owner.as_deref()),
        Err(_) => assert!(!text_ok(&input.owner, limits::MAX_OWNER_BYTES)),
    }
    let max = input.max_ttl.max(1);
    match (args::ttl(input.ttl, max), input.ttl) {
        (Ok(None), None) => {}
        (Ok(Some(t)), Some(v)) => assert!(v > 0 && v <= i128::from(max) && i128::from(t) == v),
        (Err(_), Some(v)) => assert!(v <= 0 || v > i128::from(max)),
        (other, v) => panic!("ttl {v:?} gave {other:?}"),
    }
    for check in [args::wait, args::settle] {
        match (check(input.wait), input.wait) {
            (Ok(None), None) => {}
            (Ok(Some(w)), Some(v)) => assert!(v >= 0 && i128::from(w) == v.min(i128::from(i64::MAX))),
            (Err(_), Some(v)) => assert!(v < 0),
            (other, v) => panic!("wait {v:?} gave {other:?}"),
        }
    }
});
