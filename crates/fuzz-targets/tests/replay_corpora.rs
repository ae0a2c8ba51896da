//! Replays every committed fuzz corpus (`fuzz/corpus/<target>/*`) and every regression
//! input (`fuzz/regressions/<target>/*`, inputs that once crashed a target) through the
//! target bodies, on the stable toolchain: CI checks what the fuzzers found without
//! nightly. A target without a corpus fails the test (the corpora are part of the repo).
//! The SUMO targets need `--features sumo`.

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

#[test]
fn every_target_replays_its_corpus_and_regressions() {
    for (name, body) in greenwave_fuzz_targets::all_targets() {
        let corpus = inputs(&fuzz_dir().join("corpus").join(name));
        assert!(!corpus.is_empty(), "fuzz/corpus/{name} is empty or missing");
        let regressions = inputs(&fuzz_dir().join("regressions").join(name));
        for path in corpus.iter().chain(&regressions) {
            let data = std::fs::read(path).expect("read input");
            // A panic names the input that caused it.
            eprintln!("{name}: {}", path.display());
            body(&data);
        }
        println!(
            "{name}: {} corpus inputs, {} regressions replayed",
            corpus.len(),
            regressions.len()
        );
    }
}

/// Writes the `log_segment` seeds with the log writer itself (run once, by hand:
/// `GW_WRITE_LOG_SEEDS=1 cargo test -p greenwave-fuzz-targets --test replay_corpora`):
/// a version-2 segment, the same with one bit flipped, with a torn tail, and a hand-built
/// version-1 segment. Without the variable it does nothing.
#[test]
fn write_log_seeds() {
    use greenwave_core::{ActionSource, Transition};
    use greenwave_runtime::log::{
        encode_frame_v1, encode_header, LogConfig, LogReader, LogWriter, SEGMENT_VERSION_V1,
    };
    if std::env::var_os("GW_WRITE_LOG_SEEDS").is_none() {
        return;
    }
    let record = |seq: u64| Transition {
        timestamp_ms: 1000 * seq,
        signal: (seq % 2) as u16,
        obs: (0..31).map(|j| ((seq + j) % 13) as f32 / 13.0).collect(),
        requested: (seq % 4) as u8,
        action: ((seq + 1) % 4) as u8,
        log_prob: -0.7,
        reward: -((seq % 9) as f32),
        next_obs: (0..31).map(|j| ((seq * 3 + j) % 7) as f32 / 7.0).collect(),
        done: seq % 50 == 49,
        policy_version: 3,
        source: [ActionSource::Policy, ActionSource::Supervisor][(seq % 2) as usize],
        reward_kind: None,
    };
    let dir = std::env::temp_dir().join(format!("gw-log-seeds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (mut w, _) = LogWriter::open(LogConfig::new(&dir)).unwrap();
    for s in 0..8 {
        w.append(&record(s)).unwrap();
    }
    w.close().unwrap();
    let seg = LogReader::open(&dir).unwrap().segments()[0].path.clone();
    let v2 = std::fs::read(&seg).unwrap();
    let out = fuzz_dir().join("corpus/log_segment");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("v2-8-records"), &v2).unwrap();
    let mut flipped = v2.clone();
    flipped[v2.len() / 2] ^= 0x08;
    std::fs::write(out.join("v2-bit-flip"), &flipped).unwrap();
    std::fs::write(out.join("v2-torn-tail"), &v2[..v2.len() - 100]).unwrap();
    let mut v1 = encode_header(0, 1_700_000_000_000, SEGMENT_VERSION_V1).to_vec();
    for s in 0..4 {
        v1.extend(encode_frame_v1(&record(s)).unwrap());
    }
    std::fs::write(out.join("v1-4-records"), &v1).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
