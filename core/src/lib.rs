//! dlock's contract as plain Rust, shared by the extension, the client and the fuzzers: what
//! a call may pass ([`args`], [`limits`]), what it answers and changes ([`lease`]), on which
//! clock ([`time`]), which errors it raises ([`error`]) and which lock a key takes ([`key`]);
//! and, over several servers, which server a key belongs to and when it may grant ([`shards`]).
//! Nothing here touches PostgreSQL, so every rule is tested with a plain `cargo test`.

pub mod args;
pub mod error;
pub mod key;
pub mod lease;
pub mod limits;
pub mod pinned_sql;
pub mod shards;
pub mod time;

pub use error::{ArgError, DlockError, Share};
pub use time::{INFINITY, Micros, Timestamp};
