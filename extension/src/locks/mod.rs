//! dlock's heavyweight locks, all advisory locks in spaces of its own (`tags`): the key lock
//! that serialises every change of a key, session bindings that make a session-bound lease die
//! with its session, the watches that ask for a NOTIFY, and lock waits bounded by a deadline;
//! plus what this session holds of them (`session`) and whether a lease is held (`liveness`).

pub mod binding;
pub mod deadline;
pub mod dropping;
pub mod key;
pub mod liveness;
pub mod session;
pub mod tags;
pub mod watchers;
