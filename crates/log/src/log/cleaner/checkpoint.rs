//! What the cleaner remembers of a log across passes and restarts: where the dirty part
//! starts, and when each part of the clean part was first cleaned, which decides when
//! its tombstones may go.
//!
//! A pass cleans the log from its start up to a new first dirty offset; the offsets it
//! cleaned for the first time, from the old first dirty offset to the new one, form a
//! [`Span`] whose tombstone horizon is the pass's time plus its `delete.retention.ms`.
//! A tombstone is removed by a later pass that runs after its span's horizon: a deleted
//! key stays visible as deleted for at least `delete.retention.ms` after its tombstone
//! was first cleaned, so a consumer that reads the log within that time sees the delete
//! (Kafka's delete horizon, which it keeps in each cleaned batch's header; here it is
//! kept beside the log, and the batches stay as clients wrote them).
//!
//! The state is written to `cleaner-checkpoint` in the partition directory after every
//! pass that changed it (`headway_base::durable_file::replace`), without the
//! log's lock. It only ever lags the log: a crash before it is written leaves the older
//! state, whose first dirty offset is lower (the next pass reads more keys) and whose
//! spans are fewer (tombstones wait longer). A missing or unreadable file reads as a
//! log never cleaned: every key is read again and every tombstone waits again.
//!
//! Bounded: spans whose horizon has passed merge into the first one, and past
//! [`SPANS_MAX`] the two neighbours with the closest horizons merge, keeping the later
//! horizon (their tombstones wait a little longer, never less).

use crate::segment::Segment;
use crate::LogError;
use headway_base::durable_file;
use std::collections::BTreeMap;
use std::path::Path;

/// The file's name in the partition directory.
pub(crate) const CHECKPOINT_FILE: &str = "cleaner-checkpoint";
const HEADER: &str = "headway cleaner checkpoint 1";
/// Spans kept at most; each pass that cleans new offsets adds one.
pub(crate) const SPANS_MAX: usize = 64;

/// Offsets from the previous span's end (or the log's start) up to `end_offset`, first
/// cleaned by a pass whose tombstone horizon is `horizon_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub end_offset: i64,
    pub horizon_ms: i64,
}

/// The cleaner's memory of one log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CleanerState {
    /// Where the next pass starts reading keys.
    pub first_dirty_offset: i64,
    /// Ascending by end offset; the last one ends at the first dirty offset (or before
    /// it, when the log's start moved past cleaned offsets).
    pub spans: Vec<Span>,
    /// The earliest horizon of a tombstone the last pass kept: a pass due then removes
    /// it, even when nothing else is dirty.
    pub tombstones_due_ms: Option<i64>,
}

impl CleanerState {
    /// The cleaner's state of a log being opened: its checkpoint, with the first dirty
    /// offset moved down to a segment boundary at or below the log's end, so that every
    /// record past it is in a segment the next pass reads keys from.
    pub fn at_open(
        dir: &Path,
        segments: &BTreeMap<i64, Segment>,
        log_start_offset: i64,
    ) -> CleanerState {
        let Some(mut state) = CleanerState::load(dir) else {
            return CleanerState::new(log_start_offset);
        };
        let active = segments.keys().next_back().copied().unwrap_or(0);
        let log_end = segments.values().next_back().map_or(0, |s| s.end_offset());
        let target = state.first_dirty_offset.min(log_end);
        if let Some((base, segment)) = segments.range(..=target).next_back() {
            if target > *base && (target < segment.end_offset() || *base == active) {
                state.dirty_from(*base);
            }
        }
        state.dirty_from(target);
        state.forget_below(log_start_offset);
        state
    }

    /// A log never cleaned, starting at `log_start_offset`.
    pub fn new(log_start_offset: i64) -> CleanerState {
        CleanerState {
            first_dirty_offset: log_start_offset,
            ..CleanerState::default()
        }
    }

    /// The tombstone horizon of a cleaned offset; `None` when it was not cleaned yet.
    pub fn horizon_ms(&self, offset: i64) -> Option<i64> {
        if offset >= self.first_dirty_offset {
            return None;
        }
        let i = self.spans.partition_point(|s| s.end_offset <= offset);
        self.spans.get(i).map(|s| s.horizon_ms)
    }

    /// Notes a pass that cleaned up to `first_dirty_offset` with tombstone horizon
    /// `horizon_ms` for what it cleaned first, then bounds the spans as of `now_ms`.
    pub fn cleaned(&mut self, first_dirty_offset: i64, horizon_ms: i64, now_ms: i64) {
        if first_dirty_offset > self.first_dirty_offset {
            self.spans.push(Span {
                end_offset: first_dirty_offset,
                horizon_ms,
            });
            self.first_dirty_offset = first_dirty_offset;
        }
        self.bound(now_ms);
    }

    /// Forgets spans wholly below the log's start.
    pub fn forget_below(&mut self, log_start_offset: i64) {
        self.spans.retain(|s| s.end_offset > log_start_offset);
    }

    /// Moves the first dirty offset down to `offset` (a segment boundary at or below it,
    /// found at open): what lies past it is dirty again, with no horizon.
    pub fn dirty_from(&mut self, offset: i64) {
        if offset >= self.first_dirty_offset {
            return;
        }
        self.first_dirty_offset = offset;
        let kept = self.spans.partition_point(|s| s.end_offset <= offset);
        if let Some(cut) = self.spans.get_mut(kept) {
            // The span that held the boundary keeps what lies below it.
            cut.end_offset = offset;
            self.spans.truncate(kept + 1);
            if kept > 0 && self.spans[kept - 1].end_offset == offset {
                self.spans.truncate(kept);
            }
        }
    }

    fn bound(&mut self, now_ms: i64) {
        // A prefix of spans whose horizons passed reads as one.
        let passed = self
            .spans
            .iter()
            .take_while(|s| s.horizon_ms < now_ms)
            .count();
        if passed > 1 {
            let last = self.spans[passed - 1];
            self.spans.drain(..passed - 1);
            self.spans[0] = last;
        }
        while self.spans.len() > SPANS_MAX {
            let closest = (1..self.spans.len())
                .min_by_key(|&i| {
                    self.spans[i]
                        .horizon_ms
                        .abs_diff(self.spans[i - 1].horizon_ms)
                })
                .expect("more than one span");
            let (earlier, later) = (self.spans[closest - 1], self.spans[closest]);
            self.spans[closest] = Span {
                end_offset: later.end_offset,
                horizon_ms: earlier.horizon_ms.max(later.horizon_ms),
            };
            self.spans.remove(closest - 1);
        }
    }

    /// The file's contents: a header line, then one `name value` line per field.
    fn encode(&self) -> String {
        let mut out = format!("{HEADER}\nfirst_dirty_offset {}\n", self.first_dirty_offset);
        if let Some(due) = self.tombstones_due_ms {
            out.push_str(&format!("tombstones_due_ms {due}\n"));
        }
        for span in &self.spans {
            out.push_str(&format!("span {} {}\n", span.end_offset, span.horizon_ms));
        }
        out
    }

    fn decode(text: &str) -> Option<CleanerState> {
        let mut lines = text.lines();
        if lines.next()? != HEADER {
            return None;
        }
        let mut state = CleanerState::default();
        let mut first_dirty = None;
        for line in lines {
            let mut words = line.split(' ');
            let name = words.next()?;
            let mut number = || words.next()?.parse::<i64>().ok();
            match name {
                "first_dirty_offset" => first_dirty = Some(number()?),
                "tombstones_due_ms" => state.tombstones_due_ms = Some(number()?),
                "span" => {
                    let (end_offset, horizon_ms) = (number()?, number()?);
                    let ascending = state.spans.last().is_none_or(|s| s.end_offset < end_offset);
                    if !ascending || state.spans.len() >= SPANS_MAX {
                        return None;
                    }
                    state.spans.push(Span {
                        end_offset,
                        horizon_ms,
                    });
                }
                _ => return None,
            }
            if words.next().is_some() {
                return None;
            }
        }
        state.first_dirty_offset = first_dirty?;
        let within = state
            .spans
            .last()
            .is_none_or(|s| s.end_offset <= state.first_dirty_offset);
        within.then_some(state)
    }

    /// The state stored in `dir`; `None` when there is none or it cannot be read (which
    /// is logged: the log then reads as never cleaned).
    pub fn load(dir: &Path) -> Option<CleanerState> {
        let path = dir.join(CHECKPOINT_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read the cleaner's checkpoint; the log reads as never cleaned");
                return None;
            }
        };
        let state = CleanerState::decode(&text);
        if state.is_none() {
            tracing::warn!(path = %path.display(), "the cleaner's checkpoint is malformed; the log reads as never cleaned");
        }
        state
    }

    /// Replaces the stored state in `dir` durably. Blocking: call it without the log's
    /// lock, one pass at a time (the log's busy flag orders the passes).
    pub fn store(&self, dir: &Path) -> Result<(), LogError> {
        let bytes = self.encode();
        Ok(durable_file::replace(
            &dir.join(CHECKPOINT_FILE),
            bytes.as_bytes(),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(end_offset: i64, horizon_ms: i64) -> Span {
        Span {
            end_offset,
            horizon_ms,
        }
    }

    #[test]
    fn an_offset_takes_the_horizon_of_the_pass_that_first_cleaned_it() {
        let mut state = CleanerState::new(0);
        state.cleaned(100, 5_000, 1_000);
        state.cleaned(250, 9_000, 2_000);
        assert_eq!(state.horizon_ms(0), Some(5_000));
        assert_eq!(state.horizon_ms(99), Some(5_000));
        assert_eq!(state.horizon_ms(100), Some(9_000));
        assert_eq!(state.horizon_ms(249), Some(9_000));
        assert_eq!(state.horizon_ms(250), None, "dirty");
    }

    #[test]
    fn a_pass_that_cleans_nothing_new_adds_no_span() {
        let mut state = CleanerState::new(0);
        state.cleaned(100, 5_000, 1_000);
        state.cleaned(100, 8_000, 2_000);
        assert_eq!(state.spans, vec![span(100, 5_000)]);
    }

    #[test]
    fn passed_horizons_merge_and_spans_stay_bounded_keeping_the_later_horizon() {
        let mut state = CleanerState::new(0);
        for pass in 1..=(SPANS_MAX as i64 * 3) {
            state.cleaned(pass * 10, pass * 100, 0);
        }
        assert_eq!(state.spans.len(), SPANS_MAX);
        for offset in 0..(SPANS_MAX as i64 * 30) {
            let horizon = state.horizon_ms(offset).expect("cleaned");
            assert!(
                horizon >= (offset / 10 + 1) * 100,
                "offset {offset} would lose its tombstone early: {horizon}"
            );
        }
        state.cleaned(SPANS_MAX as i64 * 30 + 10, 1_000_000, 50_000);
        assert_eq!(state.spans[0].horizon_ms, state.horizon_ms(0).unwrap());
        assert!(state.spans[0].horizon_ms < 50_000);
        assert!(state.spans[1].horizon_ms >= 50_000);
    }

    #[test]
    fn moving_the_first_dirty_offset_down_keeps_what_stays_cleaned() {
        let mut state = CleanerState::new(0);
        state.cleaned(100, 5_000, 0);
        state.cleaned(200, 9_000, 0);
        state.dirty_from(150);
        assert_eq!(state.first_dirty_offset, 150);
        assert_eq!(state.spans, vec![span(100, 5_000), span(150, 9_000)]);
        assert_eq!(state.horizon_ms(150), None);
        state.dirty_from(100);
        assert_eq!(state.spans, vec![span(100, 5_000)]);
    }

    #[test]
    fn the_file_round_trips_and_a_malformed_one_reads_as_none() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert_eq!(CleanerState::load(dir.path()), None);
        let mut state = CleanerState::new(7);
        state.cleaned(100, 5_000, 0);
        state.cleaned(300, -1, 0);
        state.tombstones_due_ms = Some(5_000);
        state.store(dir.path()).expect("store");
        assert_eq!(CleanerState::load(dir.path()), Some(state.clone()));
        let encoded = state.encode();
        for bad in [
            encoded.replace("checkpoint 1", "checkpoint 2"),
            encoded.replace("span 300", "span 30"),
            encoded.replace("first_dirty_offset 300", "first_dirty_offset 200"),
            encoded.replace("first_dirty_offset 300\n", ""),
            encoded.replace("span 100 5000", "span 100 x"),
            format!("{encoded}what 1\n"),
        ] {
            assert_eq!(CleanerState::decode(&bad), None, "{bad}");
        }
    }
}
