//! One function per fuzz target. Each states the property it checks beyond "no panic".

use greenwave_core::frames::{decode_frame, encode_frame, max_frame_bytes, FrameReader};
use greenwave_core::mlp::{BlobError, MlpBlob};
use greenwave_core::transition::MAX_OBS_DIM;
use greenwave_core::Transition;
use greenwave_learn::onnx;
use greenwave_runtime::bundle;
use greenwave_runtime::inference::MatvecBackend;
use greenwave_runtime::PolicyBackend;
use greenwave_sim::Scenario;

/// The shipped policy's model and blobs: the `bundle` target checks fuzzed manifests and
/// blobs against them, as `verify` checks a bundle's files against each other.
const MODEL: &[u8] = include_bytes!("../../../models/single-4way.onnx");
const BLOB: &[u8] = include_bytes!("../../../models/single-4way.blob");

/// The first byte picks one of two parsers; the rest is that parser's input.
fn split_selector(data: &[u8]) -> Option<(bool, &[u8])> {
    let (&first, rest) = data.split_first()?;
    Some((first % 2 == 0, rest))
}

/// A transition-log segment file (what `LogReader` and `LogWriter::open` read). Checks:
/// every record yielded passed its checks and lies inside the file; the damaged ranges
/// and the records do not overlap and cover the file after the header exactly.
pub fn log_segment(data: &[u8]) {
    use greenwave_runtime::log::{scan_segment, HEADER_BYTES};
    let scan = scan_segment(data);
    let mut at = if scan.header.is_ok() {
        HEADER_BYTES as u64
    } else {
        0
    };
    let mut records = scan.records.iter().peekable();
    let mut damage = scan.damage.iter().peekable();
    loop {
        let next_record = records.peek().map(|r| r.0);
        let next_damage = damage.peek().map(|d| d.offset);
        if next_record == Some(at) {
            let (offset, len) = records.next().expect("peeked");
            assert!(*len > 0);
            assert!(
                scan.record(data, *offset).is_ok(),
                "record at {offset} does not decode"
            );
            at += len;
        } else if next_damage == Some(at) {
            let d = damage.next().expect("peeked");
            assert!(d.length > 0, "empty damaged range at {at}");
            at += d.length;
        } else {
            assert!(
                next_record.is_none() && next_damage.is_none(),
                "gap or overlap at {at}: record {next_record:?}, damage {next_damage:?}"
            );
            break;
        }
    }
    assert_eq!(
        at,
        data.len() as u64,
        "records and damage do not tile the file"
    );
}

/// A transition-log folder whose newest segment holds these bytes, opened by the writer
/// (its crash recovery, which quarantines, cuts and removes). Checks: every record the
/// reader yields before recovery is yielded after it, in order (recovery takes away only
/// damage, never a valid record); an open that is refused (a newer format, a record this
/// build cannot decode) leaves the segment as it was.
pub fn log_recovery(data: &[u8]) {
    use greenwave_runtime::log::{read_all, LogConfig, LogWriter};
    use std::sync::atomic::{AtomicU64, Ordering};
    static RUN: AtomicU64 = AtomicU64::new(0);
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("gw-fuzz-recovery-{}-{run}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let segment = dir.join("seg-00000000000000000007.gwlog");
    std::fs::write(&segment, data).expect("writing the segment");
    let valid = |dir: &std::path::Path| {
        read_all(dir).map(|(records, _)| {
            records
                .into_iter()
                .map(|r| r.transition)
                .collect::<Vec<Transition>>()
        })
    };
    let before = valid(&dir);
    match LogWriter::open(LogConfig::new(&dir)) {
        Ok((writer, _)) => {
            writer.close().expect("closing the writer");
            let after = valid(&dir).expect("reading the log after recovery");
            if let Ok(before) = before {
                assert!(before == after, "recovery changed the valid records");
            }
        }
        Err(_) => assert!(
            std::fs::read(&segment).ok().as_deref() == Some(data),
            "a refused open changed the segment"
        ),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A bundle's `SIGNATURE` text (even first byte), or its `manifest.json` (odd first byte:
/// checked against the shipped model, and the same bytes parsed as a firmware blob).
pub fn bundle(data: &[u8]) {
    let Some((signature, rest)) = split_selector(data) else {
        return;
    };
    if signature {
        if let Ok(text) = std::str::from_utf8(rest) {
            let _ = bundle::parse_signature_text(text);
        }
        return;
    }
    if let Ok(m) = bundle::check_policy_files(MODEL, rest, BLOB, None) {
        // Only the manifest inside the model itself can pass.
        assert_eq!(Ok(&m), onnx::read_manifest(MODEL).as_ref().map_err(|_| ()));
    }
    // The CRC-32 stops nearly every mutation before the fields are checked: the same bytes
    // with their last four replaced by the CRC of the rest reach the checks behind it, and
    // format 1 (no CRC) reaches them directly.
    let resealed = rest.len().checked_sub(4).map(|n| {
        let mut b = rest[..n].to_vec();
        b.extend_from_slice(&greenwave_core::frames::crc32(&rest[..n]).to_le_bytes());
        b
    });
    let parsed = [
        MlpBlob::parse(rest),
        resealed
            .as_deref()
            .map_or(Err(BlobError::Decode), MlpBlob::parse),
        MlpBlob::parse_any_version(rest),
    ];
    // The check while running agrees with the load's: a whole pass is sound exactly where
    // the CRC-32 matches.
    for bytes in [Some(rest), resealed.as_deref()].into_iter().flatten() {
        let sound = (bytes.len().checked_sub(4))
            .map(|n| greenwave_core::frames::crc32(&bytes[..n]).to_le_bytes() == bytes[n..]);
        let mut scrub = greenwave_core::mlp::BlobScrub::default();
        let pass = loop {
            match scrub.step(bytes, 97) {
                Ok(false) => continue,
                Ok(true) => break Some(true),
                Err(BlobError::Checksum { .. }) => break Some(false),
                Err(_) => break None,
            }
        };
        assert_eq!(
            pass, sound,
            "the blob check while running disagrees with the CRC-32"
        );
    }
    for blob in parsed.into_iter().flatten() {
        // A blob that validates can be run: the forward pass must not index out of bounds.
        let obs = vec![0.5f32; blob.obs_layout.dim()];
        let mut scratch = vec![0.0f32; 2 * blob.max_width()];
        let mut logits = vec![0.0f32; blob.obs_layout.n_phases as usize];
        let _ = blob.forward(&obs, &mut scratch, &mut logits);
    }
}

/// A scenario TOML file (`greenwave_sim::load` on a path). Checks: a scenario that loads
/// writes itself back as TOML that loads again.
pub fn scenario_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(s) = Scenario::from_toml_str(text, "fuzz") else {
        return;
    };
    let again = s.to_toml_string();
    if let Err(e) = Scenario::from_toml_str(&again, "round trip") {
        panic!("a loaded scenario does not load back from its own TOML: {e}\n{again}");
    }
}

/// Longest frame of a host record (`MAX_OBS_DIM`-float observations): what `collect` reads.
const MAX_FRAME_BYTES: usize = max_frame_bytes(MAX_OBS_DIM);

/// Firmware serial frames (what `greenwave-controller collect` reads from a cabinet): the
/// stream through the frame reader, and the whole input as one frame. Checks: a frame that
/// decodes re-encodes to a frame that decodes to the same record.
pub fn firmware_frames(data: &[u8]) {
    let mut reader = FrameReader::<MAX_FRAME_BYTES>::new();
    for &b in data {
        if let Some(Ok(t)) = reader.push::<MAX_OBS_DIM>(b) {
            round_trip(&t);
        }
    }
    let mut whole = data.to_vec();
    if let Ok(t) = decode_frame::<MAX_OBS_DIM>(&mut whole) {
        round_trip(&t);
    }
}

fn round_trip(t: &Transition) {
    let mut buf = [0u8; MAX_FRAME_BYTES];
    let frame = encode_frame(t, &mut buf).expect("a decoded record fits a frame");
    let first = frame.to_vec();
    let back = decode_frame::<MAX_OBS_DIM>(frame).expect("own frame decodes");
    // Compare encodings, not values: NaN payloads must survive too.
    let mut again = [0u8; MAX_FRAME_BYTES];
    let second = encode_frame(&back, &mut again).expect("re-encodes");
    assert_eq!(first, second.to_vec());
}

/// An ONNX policy (`policy.onnx`): the manifest reader, greenwave's weight import, and the
/// matvec backend built from it, run once. Checks: a model that imports runs to finite or
/// refused output, without panicking.
pub fn onnx_policy(data: &[u8]) {
    let _ = onnx::read_manifest(data);
    let Ok((_, manifest)) = onnx::import(data) else {
        return;
    };
    let layout = manifest.obs_layout;
    let Ok(mut backend) = MatvecBackend::load(data, layout) else {
        return;
    };
    let obs = vec![0.25f32; layout.dim()];
    let mut logits = vec![0.0f32; layout.n_phases as usize];
    let _ = backend.infer(&obs, &mut logits);
}

/// SUMO XML: a network (even first byte; parsed, then every traffic light modelled; after
/// a NUL byte, an additional file of programs and WAUTs loaded on top of it, with the begin
/// time picked from its first byte) or a tripinfo output (odd first byte).
#[cfg(feature = "sumo")]
pub fn sumo_xml(data: &[u8]) {
    use greenwave_sim::sumo::{
        model::build_models, tripinfo::summarize_from, ModelOptions, NetFile, TimingSpec,
    };
    let Some((net, rest)) = split_selector(data) else {
        return;
    };
    if net {
        let (rest, additional) = match rest.iter().position(|&b| b == 0) {
            Some(k) => (&rest[..k], Some(&rest[k + 1..])),
            None => (rest, None),
        };
        if let Ok(mut net) = NetFile::parse(rest) {
            if let Some(mut add) = additional {
                net.begin_s = f64::from(add.first().copied().unwrap_or(0)) * 997.0;
                let path = std::path::Path::new("fuzz.add.xml");
                let _ = net.add_programs_from(&mut add, path);
            }
            let opts = ModelOptions {
                program: None,
                timing: &TimingSpec::default(),
                step_ms: 1000,
            };
            if let Ok(models) = build_models(&net, opts) {
                // Every derived plan shows conflict-free states for its own phases.
                for m in &models.models {
                    let _ = m.audit_states(&[]);
                }
            }
        }
    } else {
        let _ = summarize_from(rest, &[12.0, 0.0]);
    }
}

/// A SUMO configuration file (`.sumocfg`): parsed; no option greenwave leaves out by name
/// is passed to SUMO, times are finite, and merged with a user option of the same name as
/// one it passes, only the user's is left.
#[cfg(feature = "sumo")]
pub fn sumo_config(data: &[u8]) {
    use greenwave_sim::sumo::sumocfg::{left_out_by_name, merge_options};
    use greenwave_sim::sumo::SumoCfgFile;
    let Ok(cfg) = SumoCfgFile::parse(data, std::path::Path::new("/fuzz")) else {
        return;
    };
    let name = |o: &str| {
        o.trim_start_matches("--")
            .split('=')
            .next()
            .unwrap_or("")
            .to_string()
    };
    for o in &cfg.passed {
        assert!(!left_out_by_name(&name(o)), "{o:?} passed");
    }
    for t in [cfg.files.begin_s, cfg.end_s].into_iter().flatten() {
        assert!(t.is_finite(), "{t}");
    }
    if let Some(first) = cfg.passed.first() {
        let user = [format!("--{}", name(first)), "1".to_string()];
        let merged = merge_options(&cfg.passed, &user);
        let kept = merged.iter().filter(|o| name(o) == name(first)).count();
        assert_eq!(kept, 1, "{merged:?}");
        assert!(merged.ends_with(&user), "{merged:?}");
    }
}

/// A SUMO timing file (TOML): parsed, then applied to every phase of a fixed net timing,
/// so the bounds checks see whatever values the file holds.
#[cfg(feature = "sumo")]
pub fn sumo_timing(data: &[u8]) {
    use greenwave_core::Millis;
    use greenwave_sim::sumo::timing::{resolve, NetPhaseTiming};
    use greenwave_sim::sumo::TimingSpec;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(spec) = TimingSpec::from_toml(text, "fuzz") else {
        return;
    };
    let net = NetPhaseTiming {
        yellow: Millis(3000),
        all_red: Millis(1000),
        max_green: Millis(60_000),
    };
    for id in spec.signals.keys().map(String::as_str).chain(["J"]) {
        let mut notes = Vec::new();
        if let Ok(t) = resolve(id, net, &spec.overrides_for(id), 1000, &mut notes) {
            assert!(t.min_green < t.max_green, "{t:?}");
        }
    }
}

/// TraCI reply bodies: the first byte picks which request they answer (a getVersion, a
/// simulation step, a lane getter, a subscribe, a traffic-light set, a junction context
/// subscribe; or two of them).
#[cfg(feature = "sumo")]
pub fn traci_reply(data: &[u8]) {
    use greenwave_sim::sumo::traci::decode_replies;
    const REQUESTS: [&[u8]; 9] = [
        &[0x00],
        &[0x02],
        &[0xa3],
        &[0xd3],
        &[0xc2],
        &[0xc2, 0x02],
        &[0xab, 0xab],
        &[0x7f],
        &[0x89],
    ];
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let commands = REQUESTS[first as usize % REQUESTS.len()];
    if let Ok(replies) = decode_replies(body, commands) {
        assert_eq!(replies.len(), commands.len());
    }
}

/// A cabinet's files: its site configuration TOML (even first byte) or a replay file of
/// recorded detector readings (odd).
pub fn site_config(data: &[u8]) {
    by_selector(data, site_toml, replay_lines);
}

/// The rest of `data` to `even` or `odd`, as its first byte says ([`split_selector`]).
fn by_selector(data: &[u8], even: fn(&[u8]), odd: fn(&[u8])) {
    match split_selector(data) {
        Some((true, rest)) => even(rest),
        Some((false, rest)) => odd(rest),
        None => {}
    }
}

/// `SiteConfig::parse`. Checks: a site that parses writes itself back as TOML that parses
/// to the same configuration, and a controller starts on it (reading refuses whatever the
/// controller would trip over later), its program clocks on Unix time too.
fn site_toml(data: &[u8]) {
    use greenwave_runtime::controller::{Controller, ControllerConfig, FallbackKind};
    use greenwave_runtime::site::{ClockTime, SiteConfig};
    use std::path::Path;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(site) = SiteConfig::parse(text, Path::new("fuzz.toml")) else {
        return;
    };
    let again = site.to_toml().expect("a parsed site writes as TOML");
    match SiteConfig::parse(&again, Path::new("round trip")) {
        Ok(back) => assert_eq!(back, site, "round trip through\n{again}"),
        Err(e) => panic!("a parsed site does not parse back from its own TOML: {e}\n{again}"),
    }
    let mut specs = site.signal_specs();
    ClockTime::Unix.to_controller_time(&mut specs, 1_764_000_000_000);
    for kind in [FallbackKind::FixedTime, FallbackKind::Actuated] {
        let cfg = ControllerConfig::new(site.decision_interval());
        if let Err(e) = Controller::new(
            specs.clone(),
            Err("none".into()),
            site.fallback(kind),
            cfg,
            None,
        ) {
            panic!("a site that parses does not start a controller: {e}\n{text}");
        }
    }
}

/// `ReplaySource::from_reader` for a single-4way junction, with and without a program
/// clock, read to its end at 5 s decisions. Checks: every advance gives one reward per
/// signal.
fn replay_lines(data: &[u8]) {
    use greenwave_core::{ClockStage, LaneReading, Millis, ObsLayout, PhaseId, PhasePlan};
    use greenwave_core::{PhaseTiming, ProgramClock};
    use greenwave_runtime::controller::{DetectorSource, ReplaySource, SignalSpec};
    use std::path::Path;
    let Ok(plan) = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 40, 3, 2)) else {
        return;
    };
    let stages = [0u8, 1, 2, 3].map(|phase| ClockStage {
        phase,
        duration: Millis::from_secs(15),
    });
    for clock in [None, ProgramClock::new(&stages, 0).ok()] {
        let Some(layout) = ObsLayout::for_signal(12, plan.n_phases(), clock.is_some()) else {
            return;
        };
        let spec = SignalSpec {
            id: "c".into(),
            plan: plan.clone(),
            layout,
            initial_phase: PhaseId(0),
            program_clock: clock,
        };
        let Ok(mut src) = ReplaySource::from_reader(data, Path::new("fuzz.jsonl"), &[spec]) else {
            continue;
        };
        let mut lanes = [LaneReading::default(); 12];
        loop {
            let _ = src.read(0, &mut lanes);
            let _ = src.movement_detectors(0);
            match src.advance(Millis(5000)) {
                Ok(Some(rewards)) => assert_eq!(rewards.len(), 1),
                _ => break,
            }
        }
    }
}

/// The policy store's files on a controller: `history.jsonl` (even first byte) or the
/// fine-tune gate's attempts file (odd).
pub fn policy_store(data: &[u8]) {
    by_selector(data, store_history, attempts_file);
}

/// `store::parse_history` and the standing rule over what it read. Checks: no more
/// entries than lines; each entry written back as a history line reads back as itself
/// alone; `standing` answers for every version the history names, and for one it does not
/// (unjudged).
fn store_history(data: &[u8]) {
    use greenwave_finetune::store::{history_line, parse_history};
    use greenwave_finetune::{standing, Standing};
    let entries = parse_history(data);
    let lines = String::from_utf8_lossy(data).lines().count();
    assert!(
        entries.len() <= lines,
        "{} entries from {lines} lines",
        entries.len()
    );
    let mut versions = Vec::new();
    for e in &entries {
        let line = history_line(e);
        assert_eq!(
            parse_history(line.as_bytes()),
            std::slice::from_ref(e),
            "{line}"
        );
        versions.extend(e.from_version.into_iter().chain(e.to_version));
    }
    for v in versions {
        let _ = standing(&entries, v);
    }
    let named = |v: u32| {
        entries
            .iter()
            .any(|e| e.from_version == Some(v) || e.to_version == Some(v))
    };
    if let Some(v) = (0..=entries.len() as u32).find(|&v| !named(v)) {
        assert_eq!(standing(&entries, v), Standing::Unjudged { from: None });
    }
}

/// `attempts::parse`. Checks: counts it reads are written back (with their checksum) as a
/// file that reads as the same counts in the current format; a refusal names what is
/// wrong.
fn attempts_file(data: &[u8]) {
    use greenwave_finetune::attempts::{encode, parse};
    match parse(data) {
        Ok((counts, _legacy)) => {
            let again = encode(counts.clone()).expect("counts encode");
            assert_eq!(parse(&again), Ok((counts, false)));
        }
        Err(problem) => assert!(!problem.is_empty()),
    }
}
