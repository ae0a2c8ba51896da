//! Attempts against the same log: every candidate judged by the gate is counted under a key
//! naming the log (first and last record, record count) and the running version, in a
//! small JSON file. Retrying with other seeds until one candidate passes would multiply the
//! gate's error rate; past [`super::FinetuneConfig::max_attempts`] the gate refuses without
//! judging.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{FinetuneConfig, LogSummary};

/// The attempts file.
pub(super) struct Ledger {
    path: PathBuf,
}

/// The key of a log and running version.
pub(super) fn key(log: &LogSummary, version: u32) -> String {
    let pos = |p: &Option<super::LogPosition>| {
        p.map_or("-".to_string(), |p| {
            format!("{}:{}:{}", p.segment, p.offset, p.unix_ms)
        })
    };
    format!(
        "v{version} {}..{} n={}",
        pos(&log.first),
        pos(&log.last),
        log.records_used
    )
}

impl Ledger {
    /// The ledger `cfg` names, or the default one in `log_dir`.
    pub(super) fn at(cfg: &FinetuneConfig, log_dir: &Path) -> Self {
        Ledger {
            path: cfg
                .attempts_file
                .clone()
                .unwrap_or_else(|| log_dir.join(".finetune-attempts.json")),
        }
    }

    fn read(&self) -> BTreeMap<String, u32> {
        std::fs::read(&self.path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Attempts counted under `key`.
    pub(super) fn count(&self, key: &str) -> u32 {
        self.read().get(key).copied().unwrap_or(0)
    }

    /// Counts one more attempt under `key` (written through a temporary file and a rename).
    pub(super) fn record(&self, key: &str) -> std::io::Result<()> {
        let mut m = self.read();
        *m.entry(key.to_string()).or_default() += 1;
        let tmp = self.path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&m)?)?;
        std::fs::rename(&tmp, &self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_counted_per_log_and_version() {
        let dir = std::env::temp_dir().join(format!("gw-attempts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let l = Ledger::at(&FinetuneConfig::default(), &dir);
        let log = LogSummary {
            records_used: 10,
            ..Default::default()
        };
        let (k1, k2) = (key(&log, 1), key(&log, 2));
        assert_eq!(l.count(&k1), 0);
        l.record(&k1).unwrap();
        l.record(&k1).unwrap();
        l.record(&k2).unwrap();
        assert_eq!((l.count(&k1), l.count(&k2)), (2, 1));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
