//! Where a policy version stands with the running controller's live watch, read from the
//! store's history: judged (it may run at a start), rolled back by the watch, or still
//! awaiting a verdict. One rule for `PolicyStore::current_unjudged` and
//! `PolicyStore::baseline`.
//!
//! A version is **judged** when the last line that bears on it adopted it (the site's
//! flashed bundle) or kept it (`watch-kept`). A rollback to it — manual, or the watch's
//! (`watch-rollback`, `watch-rollback-unapplied`), which returns to a version that may
//! itself never have been watched — and a rejected fine-tune (which names the running
//! version at both ends) say nothing new: the line before them decides. A watch rollback
//! *from* it marks it **rolled back**. Anything else — a fine-tune's acceptance, an unknown
//! event, no line at all — leaves it **unjudged**. A damaged line therefore errs towards
//! watching: `PolicyStore::history` skips a line that fails its CRC-32 or does not parse,
//! so a flipped version number cannot move a verdict to another version (and a
//! `watch-kept` line must name the same version at both ends).

use crate::store::HistoryEntry;

/// History events (see [`HistoryEntry::event`]).
pub mod event {
    /// The site's flashed bundle made the store's version.
    pub const ADOPT: &str = "adopt";
    /// A fine-tune passed the gate and was installed.
    pub const FINETUNE_ACCEPTED: &str = "finetune-accepted";
    /// A fine-tune the gate refused (nothing switched).
    pub const FINETUNE_REJECTED: &str = "finetune-rejected";
    /// `greenwave-controller rollback`.
    pub const ROLLBACK: &str = "rollback";
    /// The live watch kept a switched-in version.
    pub const WATCH_KEPT: &str = "watch-kept";
    /// The live watch rolled a version back, `current` switched back.
    pub const WATCH_ROLLBACK: &str = "watch-rollback";
    /// The live watch rolled a version back after `current` had moved on.
    pub const WATCH_ROLLBACK_UNAPPLIED: &str = "watch-rollback-unapplied";
}

/// Where a version stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Adopted, or kept by the watch.
    Judged,
    /// The watch rolled it back, to this version.
    RolledBack {
        /// The version the controller returned to.
        to: Option<u32>,
    },
    /// No verdict: a fine-tune's acceptance (from the version current before it), an
    /// unknown event, or nothing.
    Unjudged {
        /// The version current before it was installed, where the line says.
        from: Option<u32>,
    },
}

/// Where version `v` stands after `history` (oldest first).
pub fn standing(history: &[HistoryEntry], v: u32) -> Standing {
    use event::*;
    for h in history.iter().rev() {
        let (from, to, e) = (h.from_version, h.to_version, h.event.as_str());
        let watch_back = e == WATCH_ROLLBACK || e == WATCH_ROLLBACK_UNAPPLIED;
        if watch_back && from == Some(v) {
            return Standing::RolledBack { to };
        }
        // Returned to by a rollback (manual or the watch's), or named at both ends by a
        // rejected fine-tune: no news about `v` itself; the line before decides.
        if to != Some(v) || e == ROLLBACK || e == FINETUNE_REJECTED || watch_back {
            continue;
        }
        return match e {
            ADOPT => Standing::Judged,
            // Written with the version at both ends: a flipped number is not a verdict.
            WATCH_KEPT if from == to => Standing::Judged,
            FINETUNE_ACCEPTED => Standing::Unjudged { from },
            _ => Standing::Unjudged { from: None },
        };
    }
    Standing::Unjudged { from: None }
}

#[cfg(test)]
mod tests {
    use super::event::*;
    use super::*;

    fn line(event: &str, from: Option<u32>, to: u32) -> HistoryEntry {
        HistoryEntry {
            unix_ms: 0,
            event: event.into(),
            from_version: from,
            to_version: Some(to),
            detail: String::new(),
        }
    }

    #[test]
    fn the_last_line_that_bears_on_a_version_decides() {
        let mut h = vec![line(ADOPT, None, 1)];
        assert_eq!(standing(&h, 1), Standing::Judged);
        assert_eq!(standing(&h, 2), Standing::Unjudged { from: None });
        h.push(line(FINETUNE_REJECTED, Some(1), 1));
        assert_eq!(
            standing(&h, 1),
            Standing::Judged,
            "a rejection says nothing"
        );
        h.push(line(FINETUNE_ACCEPTED, Some(1), 2));
        assert_eq!(standing(&h, 2), Standing::Unjudged { from: Some(1) });
        h.push(line(WATCH_KEPT, Some(2), 2));
        assert_eq!(standing(&h, 2), Standing::Judged);
        h.push(line(FINETUNE_ACCEPTED, Some(2), 3));
        h.push(line(WATCH_ROLLBACK, Some(3), 2));
        assert_eq!(standing(&h, 3), Standing::RolledBack { to: Some(2) });
        assert_eq!(standing(&h, 2), Standing::Judged, "kept before");
        // A manual rollback to the rolled-back version does not clear it.
        h.push(line(ROLLBACK, Some(2), 3));
        assert_eq!(standing(&h, 3), Standing::RolledBack { to: Some(2) });
        // Nor does one to a fine-tune no watch judged make it judged.
        h.push(line(FINETUNE_ACCEPTED, Some(3), 4));
        h.push(line(FINETUNE_ACCEPTED, Some(4), 5));
        h.push(line(ROLLBACK, Some(5), 4));
        assert_eq!(standing(&h, 4), Standing::Unjudged { from: Some(3) });
        // An unknown (damaged) event leaves the version unjudged, as does a verdict whose
        // two version numbers disagree.
        h.push(line("watch-kepu", Some(4), 4));
        assert_eq!(standing(&h, 4), Standing::Unjudged { from: None });
        h.push(line(WATCH_KEPT, Some(5), 4));
        assert_eq!(standing(&h, 4), Standing::Unjudged { from: None });
    }

    /// The watch returning to a version says nothing about it: one that ran unwatched
    /// (its baseline failed, or out of the fallback) stays unjudged after another version
    /// is rolled back to it.
    #[test]
    fn a_watch_rollback_to_a_version_does_not_judge_it() {
        let h = vec![
            line(ADOPT, None, 1),
            line(FINETUNE_ACCEPTED, Some(1), 2),
            line(FINETUNE_ACCEPTED, Some(2), 3),
            line(WATCH_ROLLBACK, Some(3), 2),
            line(WATCH_ROLLBACK_UNAPPLIED, Some(4), 2),
        ];
        assert_eq!(standing(&h, 2), Standing::Unjudged { from: Some(1) });
        assert_eq!(standing(&h, 3), Standing::RolledBack { to: Some(2) });
        assert_eq!(standing(&h, 1), Standing::Judged);
    }
}
