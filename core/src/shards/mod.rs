//! Keys over several dlock servers: which server a key belongs to ([`route`]), the versioned
//! set of servers ([`map`]), fences that keep growing when the set changes ([`fence`]), and
//! when a server may grant a key that moved to it ([`gate`]).
//!
//! The design, in one paragraph: every server stores the newest map it was given and grants
//! only keys that are its own under it, so a client with an older map is told to refresh.
//! A fence carries the map's epoch in its high bits, so a grant under epoch e+1 is above every
//! grant of epoch e on any server. A key that moves from A to B is gated on B until A, which
//! knows the new map and neither grants nor renews the key any more, shows no live lease of
//! it, or until A's longest lease has run out since A learnt the map (or since an operator
//! declared A gone). The model test (`core/tests/shard_moves.rs`) checks that no two servers
//! hold one key at once, whatever order maps, grants, renewals and outages come in.

pub mod fence;
pub mod gate;
pub mod map;
pub mod route;

pub use fence::{EPOCH_BITS, FenceError, MAX_EPOCH};
pub use gate::{Gate, Gates, InstallError, Verdict};
pub use map::{MapError, ShardMap};
