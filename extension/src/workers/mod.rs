//! Processes PostgreSQL starts for dlock: a background worker per database that announces
//! elections' leaders whose lease expired (`election_watch`). Like the SQL functions, an entry
//! point: it calls the operations.

pub mod election_watch;
