//! `greenwave-controller log`: summarise a transition log (records, sources, policy
//! versions, damaged and quarantined byte ranges).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use greenwave_core::Transition;
use serde::Serialize;

/// Arguments of `greenwave-controller log`.
#[derive(Args)]
pub struct LogArgs {
    /// Transition log directory.
    #[arg(long)]
    log_dir: PathBuf,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct LogSummary {
    segments: usize,
    records: usize,
    by_source: std::collections::BTreeMap<String, usize>,
    policy_versions: std::collections::BTreeMap<u32, usize>,
    issues: Vec<String>,
    /// Damaged byte ranges still in the segments (the reader skips them).
    damaged: Vec<ByteRange>,
    /// Damaged bytes a writer copied out before cutting them.
    quarantined: Vec<ByteRange>,
    /// Entries named for the log (`.gwlog`) that it does not read: misnamed segments,
    /// folders.
    ignored: Vec<PathBuf>,
}

impl LogSummary {
    /// Counts one record by its source and policy version.
    fn count(&mut self, t: &Transition) {
        self.records += 1;
        *self.by_source.entry(t.source.name().into()).or_default() += 1;
        *self.policy_versions.entry(t.policy_version).or_default() += 1;
    }
}

#[derive(Serialize)]
struct ByteRange {
    segment: u64,
    offset: u64,
    length: u64,
    /// The segment file, or the quarantine file holding the bytes.
    path: PathBuf,
    /// What was found there (damaged ranges only).
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
}

/// `greenwave-controller log`: prints the log summary (text or `--json`). Reads the log
/// record by record (one segment in memory at a time), so a log of any size fits.
pub fn run(args: LogArgs) -> Result<()> {
    let reader = greenwave_runtime::log::LogReader::open(&args.log_dir)?;
    let mut s = LogSummary {
        segments: reader.segments().len(),
        records: 0,
        by_source: Default::default(),
        policy_versions: Default::default(),
        issues: Vec::new(),
        ignored: greenwave_runtime::log::foreign_entries(&args.log_dir)?,
        damaged: Vec::new(),
        quarantined: reader
            .quarantine()?
            .into_iter()
            .map(|q| ByteRange {
                segment: q.segment,
                offset: q.offset,
                length: q.length,
                path: q.path,
                kind: None,
            })
            .collect(),
    };
    for item in reader.records() {
        match item {
            Ok(r) => s.count(&r.transition),
            Err(i) => {
                s.issues.push(i.to_string());
                s.damaged.push(ByteRange {
                    segment: i.segment,
                    offset: i.offset,
                    length: i.skipped_bytes,
                    path: i.path.clone(),
                    kind: Some(i.kind.to_string()),
                });
            }
        }
    }
    if args.json {
        say!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        say!("{} records in {} segments", s.records, s.segments);
        say!("by source: {:?}", s.by_source);
        say!("by policy version: {:?}", s.policy_versions);
        for d in &s.damaged {
            say!(
                "damaged: segment {} offset {} length {}: {} ({})",
                d.segment,
                d.offset,
                d.length,
                d.kind.as_deref().unwrap_or(""),
                d.path.display()
            );
        }
        for i in &s.ignored {
            say!(
                "ignored: {} (segments are files named seg-<20 digits>.gwlog)",
                i.display()
            );
        }
        for q in &s.quarantined {
            say!(
                "quarantined: segment {} offset {} length {} in {}",
                q.segment,
                q.offset,
                q.length,
                q.path.display()
            );
        }
    }
    Ok(())
}
