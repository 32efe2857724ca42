//! Fence epochs of fast mode. A fast fence is `epoch << COUNTER_BITS | n`: the epoch is drawn on
//! the first fast grant after start and whenever the counter `n` runs out, from a source every
//! database of the cluster shares, so that fences of a key only grow, whichever database drew
//! the epoch, across restarts, crashes and failover to a synchronous standby.

use pgrx::pg_sys;

/// Bits of the counter below the epoch.
pub const COUNTER_BITS: u32 = 20;
pub const COUNTER_MAX: u64 = (1 << COUNTER_BITS) - 1;
/// Fence epochs come from the WAL position, one per `2^EPOCH_SHIFT` bytes of WAL (see
/// `draw`) ...
pub const EPOCH_SHIFT: u32 = 17;
/// ... above every epoch release 0.1.0 drew from a database's fence sequence (those were
/// sequence values, far below 2^42), and below 2^43, so that `epoch << COUNTER_BITS | n` fits
/// a positive bigint until the WAL reaches 2^59 bytes (512 PiB).
pub const EPOCH_BASE: u64 = 1 << 42;
pub const EPOCH_LIMIT: u64 = 1 << 43;
/// Draw the next epoch this many grants before the counter runs out, so that racing grants
/// rarely find it exhausted.
pub const COUNTER_MARGIN: u64 = 4096;

/// Draws a fence epoch: cluster-wide, never lower than any epoch drawn before in any database
/// of this cluster, across restarts, crashes and failover to a synchronous standby. It is read
/// off the WAL, the one monotonic, durable, replicated counter every database shares: the
/// epoch is the end of a no-op WAL record padded past the next `2^EPOCH_SHIFT`-byte boundary
/// of the position at which it was written, so it is greater than that position's epoch, and
/// every earlier draw ended at or before that position. The record is flushed and replicated
/// to the synchronous standbys before the epoch is used, so a promoted standby's WAL, and so
/// its epochs, continue past it. (No logical decoding consumer sees a no-op record.)
pub unsafe fn draw() -> u64 {
    // SAFETY: WAL insertion outside a critical section (as for logical messages), on a primary
    // (fast mode refuses standbys); then the WAL machinery's own waits.
    unsafe {
        let before = pg_sys::GetXLogInsertRecPtr();
        let boundary = ((before >> EPOCH_SHIFT) + 1) << EPOCH_SHIFT;
        let padding = vec![0u8; (boundary - before) as usize];
        pg_sys::XLogBeginInsert();
        pg_sys::XLogRegisterData(padding.as_ptr() as _, padding.len() as _);
        pg_sys::XLogSetRecordFlags(pg_sys::XLOG_MARK_UNIMPORTANT as u8);
        let end = pg_sys::XLogInsert(pg_sys::RmgrIds::RM_XLOG_ID as u8, pg_sys::XLOG_NOOP as u8);
        pg_sys::XLogFlush(end);
        pg_sys::SyncRepWaitForLSN(end, false);
        let epoch = EPOCH_BASE + (end >> EPOCH_SHIFT);
        if epoch >= EPOCH_LIMIT {
            crate::pg::report::raise(dlock_core::DlockError::FencesExhausted, "dlock_fast_acquire");
        }
        epoch
    }
}
