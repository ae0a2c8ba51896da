//! Peak memory of reading a transition log back (no criterion; one process per phase, so
//! that the peak RSS is the phase's own).
//!
//! ```sh
//! cargo bench --profile release -p greenwave-runtime --bench log_read_memory -- write DIR [SEGMENT_MIB] [RECORDS]
//! cargo bench --profile release -p greenwave-runtime --bench log_read_memory -- read DIR
//! cargo bench --profile release -p greenwave-runtime --bench log_read_memory -- open DIR
//! ```
//!
//! `write` appends RECORDS (default 50,000: about 15 MB) records of 31-float
//! observations (the single-4way controller's) to a new log in DIR with SEGMENT_MIB (16)
//! segments; `read` reads it with `LogReader::records` and prints the records read and
//! the process's peak RSS; `open` opens it for writing (the start-up check of its newest
//! segment, as a controller's start does), closes it and prints the peak RSS. BENCHMARKS.md, "Reading a transition log back".

use std::num::NonZeroU32;
use std::path::PathBuf;

use greenwave_core::{ActionSource, Transition};
use greenwave_runtime::log::{LogConfig, LogReader, LogWriter, SyncPolicy};

fn record(seq: u64) -> Transition {
    let obs = |k: u64, m: u64| {
        (0..31)
            .map(|j| ((seq * k + j) % m) as f32 / m as f32)
            .collect()
    };
    Transition {
        timestamp_ms: seq * 5_000,
        signal: 0,
        obs: obs(1, 13),
        requested: (seq % 4) as u8,
        action: (seq % 4) as u8,
        log_prob: -1.2,
        reward: -0.5,
        next_obs: obs(3, 7),
        done: false,
        policy_version: 1,
        source: ActionSource::Policy,
        reward_kind: None,
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let (Some(phase), Some(dir)) = (args.first(), args.get(1)) else {
        eprintln!("usage: log_read_memory write DIR [SEGMENT_MIB] [RECORDS] | read DIR | open DIR");
        std::process::exit(2);
    };
    let dir = PathBuf::from(dir);
    match phase.as_str() {
        "write" => {
            let mib: u64 = args.get(2).map_or(16, |a| a.parse().expect("SEGMENT_MIB"));
            let mut cfg = LogConfig::new(&dir);
            cfg.max_segment_bytes = mib << 20;
            cfg.max_total_bytes = cfg.max_segment_bytes * 8;
            cfg.sync = SyncPolicy::EveryRecords(NonZeroU32::new(10_000).expect("non-zero"));
            let n: u64 = args.get(3).map_or(50_000, |a| a.parse().expect("RECORDS"));
            let (mut w, _) = LogWriter::open(cfg).expect("opening the log");
            for s in 0..n {
                w.append(&record(s)).expect("appending");
            }
            w.close().expect("closing");
            println!("wrote {n} records to {}", dir.display());
        }
        "read" => {
            let reader = LogReader::open(&dir).expect("opening the log");
            let (mut records, mut issues) = (0u64, 0u64);
            for item in reader.records() {
                match item {
                    Ok(_) => records += 1,
                    Err(_) => issues += 1,
                }
            }
            println!(
                "read {records} records ({issues} damaged ranges) in {} segments; peak RSS {} KiB",
                reader.segments().len(),
                greenwave_runtime::peak_rss_kib().map_or("?".into(), |k| k.to_string())
            );
        }
        "open" => {
            let (w, report) = LogWriter::open(LogConfig::new(&dir)).expect("opening the log");
            w.close().expect("closing");
            println!(
                "opened for writing: {} records in the newest segment; peak RSS {} KiB",
                report.tail_records,
                greenwave_runtime::peak_rss_kib().map_or("?".into(), |k| k.to_string())
            );
        }
        other => {
            eprintln!("unknown phase {other}: write, read or open");
            std::process::exit(2);
        }
    }
}
