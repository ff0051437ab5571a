//! A queue from other threads to a worker that holds at most a given number of items and takes
//! memory only for what it holds.
//!
//! crossbeam's bounded channel allocates its whole ring when it is made and writes a stamp into
//! every slot, so a 65,536-datagram queue is resident from the start: about 10 MiB per queue and
//! worker whether or not anything ever waits in it. Its list-backed channel allocates a block
//! of slots as messages arrive and frees it once they are taken; the bound is then checked
//! here, against the queue's length, before each send. Senders on several threads may pass the
//! check together, so the queue can exceed its bound by at most one item per sending thread.

use std::fmt;

use crossbeam_channel::{Receiver, Sender};

/// The sending end: [`Bounded::try_send`] gives the item back when the queue is full or its
/// worker is gone.
pub(crate) struct Bounded<T> {
    tx: Sender<T>,
    cap: usize,
}

/// A queue of at most `cap` items.
pub(crate) fn bounded<T>(cap: usize) -> (Bounded<T>, Receiver<T>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    (Bounded { tx, cap }, rx)
}

impl<T> Bounded<T> {
    /// Queues `item`, or gives it back when `cap` items wait or the receiver is gone.
    pub(crate) fn try_send(&self, item: T) -> Result<(), T> {
        if self.tx.len() >= self.cap {
            return Err(item);
        }
        self.tx.send(item).map_err(|e| e.into_inner())
    }
}

impl<T> Clone for Bounded<T> {
    fn clone(&self) -> Self {
        Bounded {
            tx: self.tx.clone(),
            cap: self.cap,
        }
    }
}

impl<T> fmt::Debug for Bounded<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bounded")
            .field("len", &self.tx.len())
            .field("cap", &self.cap)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_gives_the_item_back_and_takes_again_once_drained() {
        let (tx, rx) = bounded::<u32>(3);
        for i in 0..3 {
            assert_eq!(tx.try_send(i), Ok(()));
        }
        assert_eq!(tx.try_send(3), Err(3));
        assert_eq!(rx.try_recv(), Ok(0));
        assert_eq!(tx.try_send(4), Ok(()));
        assert_eq!(tx.try_send(5), Err(5));
        let taken: Vec<u32> = rx.try_iter().collect();
        assert_eq!(taken, vec![1, 2, 4]);
    }

    #[test]
    fn a_queue_whose_worker_is_gone_gives_the_item_back() {
        let (tx, rx) = bounded::<u32>(8);
        drop(rx);
        assert_eq!(tx.try_send(7), Err(7));
    }

    #[test]
    fn a_clone_shares_the_bound() {
        let (tx, rx) = bounded::<u32>(2);
        let other = tx.clone();
        assert_eq!(tx.try_send(1), Ok(()));
        assert_eq!(other.try_send(2), Ok(()));
        assert_eq!(other.try_send(3), Err(3));
        assert_eq!(tx.try_send(4), Err(4));
        assert_eq!(rx.len(), 2);
    }
}
