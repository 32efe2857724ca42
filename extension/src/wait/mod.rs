//! The mechanisms of server-side waiting: the FIFO queue of a key in the lock manager and its
//! occupancy counts, the wait table in shared memory where a queue's head publishes its request
//! (direct hand-off), the sessions waiting for a key to be free without taking it (and their
//! answer slots), and the
//! wake-ups a freeing transaction sends at commit. The waiting
//! algorithm itself is an operation (`ops/acquire.rs`).

pub mod answers;
pub mod elections;
pub mod free_waiters;
pub mod occupancy;
pub mod queue;
pub mod slot_table;
pub mod slots;
pub mod wakeups;
