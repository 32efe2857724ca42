//! The mechanisms of server-side waiting: the FIFO queue of a key in the lock manager and its
//! occupancy counts, the wait table in shared memory where a queue's head publishes its request
//! (direct hand-off), the sessions waiting for a key to be free without taking it (and their
//! answer slots), and the
//! wake-ups a freeing transaction sends at commit. The waiting
//! algorithm itself is an operation (`ops/acquire.rs`).

pub mod answers;
pub mod free_waiters;
pub mod key_queue;
pub mod occupancy;
pub mod request_slots;
pub mod requests;
pub mod wakeups;
