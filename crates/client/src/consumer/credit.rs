//! The consumer's credit window, split into one share per fetcher.
//!
//! The window bounds the bytes fetched and not yet consumed. The consumer runs one
//! fetcher per partition leader, and each fetcher owns a share of the window:
//! `window_bytes / fetchers`, with its refill threshold and increment scaled by the same
//! fraction. A fetcher asks for more when its share's level (its records buffered plus
//! the credit of its fetch in flight) has fallen to the share's threshold, and then asks
//! for the share's increment at most, so each share refills early and in batches as the
//! whole window did: a fetcher's credit never falls to zero while it can take more.
//!
//! Why shares and not one pool: a fetcher whose long poll comes back empty hands its
//! credit back and takes it again at once. With one pool whose threshold and increment
//! are each half the window, two fetchers took the whole window and a third waited for
//! a record to be consumed, which never came if that third leader held the data, or,
//! if it led an empty partition, its high watermark stayed unknown. A share's level
//! moves only with its own fetches and its own records, so no fetcher's long poll holds
//! another's credit. The shares sum to at most the window (rounded down), so the bound
//! on memory holds as before; with one fetcher the share is the whole window and nothing
//! changes. The one exception, as before, is a record batch larger than its credit,
//! which a broker returns whole (counted in `overshoots`).
//!
//! Plain code over values: the consumer keeps a [`Credit`] under its lock.

/// The credit window as the client sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WindowState {
    pub window_bytes: usize,
    pub refill_threshold_bytes: usize,
    /// Fetchers (partition leaders), and the share of the window each owns.
    pub fetchers: usize,
    pub share_window_bytes: usize,
    /// Fetched, not yet consumed.
    pub buffered_bytes: usize,
    /// Credit of the fetches in flight.
    pub requested_bytes: usize,
    /// Highest level (buffered plus requested, over all fetchers) ever reached.
    pub level_max_bytes: usize,
    /// Refills started, and the highest level of its fetcher's share at which one
    /// started (with one fetcher, the window's level).
    pub refills: u64,
    pub level_at_refill_max_bytes: usize,
    /// Answers larger than their credit (a batch larger than the credit).
    pub overshoots: u64,
}

/// One fetcher's part of the window.
#[derive(Debug, Clone, Copy, Default)]
struct Share {
    buffered_bytes: usize,
    requested_bytes: usize,
}

impl Share {
    fn level(&self) -> usize {
        self.buffered_bytes + self.requested_bytes
    }
}

/// The credit window of one consumer and its fetchers' shares.
#[derive(Debug)]
pub(crate) struct Credit {
    share_window_bytes: usize,
    share_threshold_bytes: usize,
    share_increment_bytes: usize,
    shares: Vec<Share>,
    state: WindowState,
}

impl Credit {
    /// A window of `window_bytes` for `fetchers` fetchers, refilled at
    /// `refill_threshold_bytes` by `refill_increment_bytes` (scaled to each share). The
    /// consumer has checked them: the threshold is below the window, the increment
    /// positive.
    pub(crate) fn new(
        window_bytes: usize,
        refill_threshold_bytes: usize,
        refill_increment_bytes: usize,
        fetchers: usize,
    ) -> Credit {
        let window = window_bytes;
        // A share is at least one byte, so even an absurdly small window lets every
        // fetcher ask (a broker then returns the first batch whole, an overshoot).
        let share_window_bytes = (window / fetchers.max(1)).max(1);
        let scale = |bytes: usize| {
            (bytes as u128 * share_window_bytes as u128 / window.max(1) as u128) as usize
        };
        Credit {
            share_window_bytes,
            // Below the share, since the threshold is below the window.
            share_threshold_bytes: scale(refill_threshold_bytes).min(share_window_bytes - 1),
            share_increment_bytes: scale(refill_increment_bytes).max(1),
            shares: vec![Share::default(); fetchers],
            state: WindowState {
                window_bytes: window,
                refill_threshold_bytes,
                fetchers,
                share_window_bytes,
                ..WindowState::default()
            },
        }
    }

    /// Reserves a refill's credit for `fetcher` if its share's level has fallen to the
    /// threshold; `None` means wait until one of its chunks is consumed.
    pub(crate) fn reserve(&mut self, fetcher: usize) -> Option<usize> {
        let share = &mut self.shares[fetcher];
        let level = share.level();
        if level > self.share_threshold_bytes {
            return None;
        }
        let credit = self
            .share_increment_bytes
            .min(self.share_window_bytes - level);
        share.requested_bytes += credit;
        let w = &mut self.state;
        w.requested_bytes += credit;
        w.refills += 1;
        w.level_at_refill_max_bytes = w.level_at_refill_max_bytes.max(level);
        w.level_max_bytes = w.level_max_bytes.max(w.buffered_bytes + w.requested_bytes);
        Some(credit)
    }

    /// `fetcher`'s fetch for `credit` answered with `bytes` of records (0 for an empty
    /// long poll or a failure): the credit is handed back and the bytes are buffered.
    pub(crate) fn answered(&mut self, fetcher: usize, credit: usize, bytes: usize) {
        let share = &mut self.shares[fetcher];
        share.requested_bytes -= credit;
        share.buffered_bytes += bytes;
        let w = &mut self.state;
        w.requested_bytes -= credit;
        w.buffered_bytes += bytes;
        if bytes > credit {
            w.overshoots += 1;
        }
        w.level_max_bytes = w.level_max_bytes.max(w.buffered_bytes + w.requested_bytes);
    }

    /// A chunk of `bytes` fetched by `fetcher` was consumed.
    pub(crate) fn consumed(&mut self, fetcher: usize, bytes: usize) {
        self.shares[fetcher].buffered_bytes -= bytes;
        self.state.buffered_bytes -= bytes;
    }

    pub(crate) fn state(&self) -> &WindowState {
        &self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client's default proportions: threshold and increment half the window.
    fn halves(window_bytes: usize, fetchers: usize) -> Credit {
        Credit::new(window_bytes, window_bytes / 2, window_bytes / 2, fetchers)
    }

    /// Three fetchers whose long polls come back empty, each taking credit again as
    /// soon as its answer is in (as `fetch_loop` does), the first two always answering
    /// before the third asks: every fetcher still gets credit, again and again.
    #[test]
    fn three_fetchers_with_empty_long_polls_each_get_credit() {
        let mut credit = halves(300, 3);
        let mut held: Vec<Option<usize>> = vec![None; 3];
        let mut fetches = [0u32; 3];
        for _round in 0..10 {
            for (fetcher, h) in held.iter_mut().enumerate() {
                if let Some(c) = h.take() {
                    credit.answered(fetcher, c, 0);
                }
                *h = credit.reserve(fetcher);
                if h.is_some() {
                    fetches[fetcher] += 1;
                }
            }
            let w = credit.state();
            assert!(w.buffered_bytes + w.requested_bytes <= 300, "{w:?}");
        }
        assert_eq!(fetches, [10, 10, 10], "{:?}", credit.state());
    }

    /// One fetcher's buffered records do not hold back another: while fetcher 0's
    /// chunks sit unconsumed, fetchers 1 and 2 keep fetching, and the level never
    /// passes the window.
    #[test]
    fn unconsumed_records_of_one_fetcher_leave_the_others_their_share() {
        let mut credit = halves(300, 3);
        // Fetcher 0 fills its share (100 bytes) and nobody consumes.
        let c = credit.reserve(0).expect("an empty share refills");
        assert_eq!(c, 50);
        credit.answered(0, c, 50);
        let c = credit.reserve(0).expect("at the threshold it refills");
        credit.answered(0, c, 50);
        assert_eq!(credit.reserve(0), None, "a full share waits");
        for _ in 0..5 {
            for fetcher in 1..3 {
                let c = credit.reserve(fetcher).expect("its own share is free");
                credit.answered(fetcher, c, c);
                credit.consumed(fetcher, c);
            }
        }
        let w = credit.state();
        assert_eq!(w.buffered_bytes, 100);
        assert!(w.level_max_bytes <= 300, "{w:?}");
        credit.consumed(0, 50);
        assert!(
            credit.reserve(0).is_some(),
            "consuming frees fetcher 0's share"
        );
    }

    /// With one fetcher the share is the whole window: threshold, increment and level
    /// are the window's own.
    #[test]
    fn one_fetcher_has_the_whole_window() {
        let mut credit = Credit::new(64, 16, 32, 1);
        assert_eq!(credit.reserve(0), Some(32));
        assert_eq!(
            credit.reserve(0),
            None,
            "level 32 is above the threshold 16"
        );
        credit.answered(0, 32, 32);
        credit.consumed(0, 20);
        assert_eq!(credit.reserve(0), Some(32), "level 12 is below it");
        credit.answered(0, 32, 40);
        assert_eq!(credit.state().overshoots, 1);
        assert_eq!(credit.state().level_at_refill_max_bytes, 12);
    }
}
