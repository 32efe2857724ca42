//! Fences over several servers: the map's epoch in the high bits, the server's own fence
//! counter (its WAL-logged sequence) below. A fence handed out under epoch e+1 is greater than
//! every fence of epoch e, whichever server gave either; within one epoch a key has one server,
//! whose counter only grows. A server that was never given a map hands out its counter as is
//! (epoch 0), below every fence of a sharded deployment.

/// Bits of the epoch. Fences are positive `int8`s: 1 sign bit, then these, then the counter.
pub const EPOCH_BITS: u32 = 20;
/// Bits of a server's counter.
pub const COUNTER_BITS: u32 = 63 - EPOCH_BITS;
/// The greatest epoch (about a million map changes).
pub const MAX_EPOCH: i64 = (1 << EPOCH_BITS) - 1;
/// The greatest counter value a sharded server can put under an epoch (about 8.8e12 grants).
pub const MAX_COUNTER: i64 = (1 << COUNTER_BITS) - 1;

/// Why no fence can be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceError {
    #[error("the fence counter {0} has run past {MAX_COUNTER}, the most a sharded server can hand out")]
    CounterExhausted(i64),
    #[error("epoch {0} is outside 0..={MAX_EPOCH}")]
    Epoch(i64),
}

/// The fence of counter value `counter` (>= 1) under `epoch` (0: not sharded).
pub fn compose(epoch: i64, counter: i64) -> Result<i64, FenceError> {
    if !(0..=MAX_EPOCH).contains(&epoch) {
        return Err(FenceError::Epoch(epoch));
    }
    if epoch == 0 {
        return Ok(counter);
    }
    if !(0..=MAX_COUNTER).contains(&counter) {
        return Err(FenceError::CounterExhausted(counter));
    }
    Ok((epoch << COUNTER_BITS) | counter)
}

/// The epoch a fence was handed out under (0: by a server with no map).
pub fn epoch_of(fence: i64) -> i64 {
    fence >> COUNTER_BITS
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn limits() {
        assert_eq!(compose(0, 42), Ok(42));
        assert_eq!(compose(1, 1), Ok((1 << 43) + 1));
        assert_eq!(compose(MAX_EPOCH, MAX_COUNTER), Ok(i64::MAX));
        assert_eq!(compose(1, MAX_COUNTER + 1), Err(FenceError::CounterExhausted(MAX_COUNTER + 1)));
        assert_eq!(compose(MAX_EPOCH + 1, 1), Err(FenceError::Epoch(MAX_EPOCH + 1)));
        assert_eq!(epoch_of(compose(9, 5).unwrap()), 9);
        assert_eq!(epoch_of(5), 0);
    }

    proptest! {
        // A later epoch's fence is above every earlier epoch's, whatever the counters.
        #[test]
        fn a_later_epoch_is_always_above(e1 in 0..MAX_EPOCH, de in 1..1000i64, c1 in 1..MAX_COUNTER, c2 in 1..MAX_COUNTER) {
            let e2 = (e1 + de).min(MAX_EPOCH);
            prop_assume!(e2 > e1);
            prop_assert!(compose(e2, c2).unwrap() > compose(e1, c1).unwrap());
        }

        // Within an epoch, fences follow the counter.
        #[test]
        fn within_an_epoch_fences_follow_the_counter(e in 0..=MAX_EPOCH, c1 in 1..MAX_COUNTER, c2 in 1..MAX_COUNTER) {
            prop_assert_eq!(compose(e, c1).unwrap() < compose(e, c2).unwrap(), c1 < c2);
        }
    }
}
