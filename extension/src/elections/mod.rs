//! Elections, in one place though they span the layers: a campaign is an acquire of the
//! election's key as its leader (`ops/acquire.rs`, `Kind::Leader`), whose grant tells the
//! election's watchers; `leader` reads who leads and finds leaders whose lease ran out; a
//! leader's expiry with nobody taking over, which no call of any session would tell, is
//! announced by a background worker per database (`worker`), started or woken at the commit of
//! a leader's grant with a TTL (`worker_start`).

pub mod leader;
pub mod worker;
pub mod worker_start;
