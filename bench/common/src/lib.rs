//! What the benchmark crates (`bench-suite`, `bench-wait`, `bench-client`) share: latency
//! histograms and their summary, Markdown tables, and the scripts of the Redis lock every one
//! of them measures dlock against.

pub mod latency;
pub mod markdown;
pub mod redis_lock;
