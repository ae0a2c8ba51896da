//! The firmware on a Cortex-M4 under QEMU agrees bit for bit with the host build.
//!
//! 1. A detector trace is recorded on the host: the single-4way cabinet with the shipped f32
//!    policy (`models/single-4way.blob`) drives a small closed-loop traffic model for ten
//!    minutes, polled every 5–15 ms (seeded jitter).
//! 2. The host build replays the trace open-loop with the f32 and the int8 blob: event log
//!    (decisions, displayed signal states, latched fault, summary) and the serial bytes
//!    (transition frames).
//! 3. The Arm builds (`firmware/board-mps2`: `greenwave-mps2-f32`, `greenwave-mps2-int8`) run
//!    the same trace under `qemu-system-arm -machine mps2-an386 -icount shift=0`, reading it
//!    through semihosting and sending frames out of UART0; both outputs must equal the host's
//!    byte for byte. So must `greenwave-mps2-clock-int8`'s, whose policy reads the program
//!    clock (a synthetic int8 network of the clock's layout, `tests/clock_blob.rs`).
//! 4. A trace whose field turns a conflicting signal green mid-cycle must latch flash on the
//!    target, at the same poll as on the host.
//!
//! Without `qemu-system-arm` or the Arm ELFs the target half is skipped with a message —
//! unless `CI=true`, where that is a failure. The ELFs are looked for in
//! `$GREENWAVE_MPS2_ELF_DIR`, else `$CARGO_TARGET_DIR/thumbv7em-none-eabihf/release`, else
//! `firmware/board-mps2/target/thumbv7em-none-eabihf/release`. Build them as
//! `firmware/board-mps2/README.md` says. The target's own figures (stack, instructions per
//! poll and per decision) are printed to standard error.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use greenwave_core::MovementId;
use greenwave_firmware::{FallbackReason, ProgramClock};
use greenwave_firmware::{FaultKind, Lamps, Mode};
use greenwave_firmware_replay::events::{decode_events, Event, Summary};
use greenwave_firmware_replay::io::BankRef;
use greenwave_firmware_replay::stats::{TargetStats, TickStats, DECIDE_REPEATS};
use greenwave_firmware_replay::trace::{Record, TRACE_MAGIC};
use greenwave_firmware_replay::{
    cabinet, cabinet_with_clock, io_bank, replay, single_4way_board, single_4way_plan,
    single_4way_program_clock, Cabinet, JustPoll, GROUPS, LANES,
};

// One I/O bank per test (tests run in parallel threads).
io_bank!(F32Bank);
io_bank!(Int8Bank);
io_bank!(ClockBank);
io_bank!(ConflictBank);

const TRACE_MS: u32 = 600_000;
const QEMU_TIMEOUT: Duration = Duration::from_secs(300);

fn shipped(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../models")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Prints past the test harness's capture (figures and skip notices must be seen).
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// SplitMix64: a seeded, portable stream.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Per lane: arrivals cross the entry loop (300 ms) and queue; the head vehicle stands on
/// the stop-bar loop; while one of the lane's movements is green, a vehicle leaves every
/// 2 s (the loop is empty for the last 500 ms of each departure).
struct Traffic {
    rng: Rng,
    queue: [u32; LANES],
    entry_until: [u32; LANES],
    leaves_at: [Option<u32>; LANES],
}

impl Traffic {
    /// Loop levels at `now_ms`, given the lamps commanded per group.
    fn step(&mut self, now_ms: u32, dt_ms: u32, lamps: &[Lamps; GROUPS]) -> u32 {
        let board = single_4way_board();
        let mut loops = 0u32;
        for lane in 0..LANES {
            // Through lanes (1 of 3 per arm) see twice the arrivals of the others.
            let per_s = if lane % 3 == 1 { 0.16 } else { 0.08 };
            if self.rng.unit() < per_s * dt_ms as f64 / 1000.0 && now_ms >= self.entry_until[lane] {
                self.queue[lane] += 1;
                self.entry_until[lane] = now_ms + 300;
            }
            let green = board.lanes[lane]
                .movements
                .iter()
                .any(|m: MovementId| lamps[m.0 as usize].green);
            match self.leaves_at[lane] {
                Some(t) if now_ms >= t => {
                    self.queue[lane] -= 1;
                    self.leaves_at[lane] = None;
                }
                None if green && self.queue[lane] > 0 => self.leaves_at[lane] = Some(now_ms + 2000),
                _ => {}
            }
            let leaving = self.leaves_at[lane].is_some_and(|t| t - now_ms <= 500);
            loops |= ((now_ms < self.entry_until[lane]) as u32) << (2 * lane);
            loops |= ((self.queue[lane] > 0 && !leaving) as u32) << (2 * lane + 1);
        }
        loops
    }
}

/// Records a trace of `duration_ms`: the f32 cabinet drives the traffic model.
fn record_trace<B: BankRef>(duration_ms: u32, seed: u64) -> Vec<u8> {
    let blob = shipped("single-4way.blob");
    let bank = B::bank();
    bank.reset();
    let mut ctl = cabinet::<B>(Some(&blob)).unwrap();
    let mut traffic = Traffic {
        rng: Rng(seed),
        queue: [0; LANES],
        entry_until: [0; LANES],
        leaves_at: [None; LANES],
    };
    let mut jitter = Rng(seed ^ 0x5eed);
    let mut trace = TRACE_MAGIC.to_vec();
    while bank.now_ms() < duration_ms {
        let dt_ms = 5 + (jitter.next() % 11) as u32;
        let loops = traffic.step(bank.now_ms() + dt_ms, dt_ms, ctl.commanded_lamps());
        let record = Record::poll(dt_ms, loops).unwrap();
        trace.extend_from_slice(&record.encode().to_le_bytes());
        bank.advance(dt_ms, loops);
        ctl.poll();
    }
    trace
}

/// What a replay produced.
#[derive(Debug, Default)]
struct Output {
    events: Vec<u8>,
    serial: Vec<u8>,
}

impl Output {
    fn decoded(&self) -> Vec<Event> {
        decode_events(&self.events)
            .map(|e| e.expect("the event log decodes"))
            .collect()
    }

    fn summary(&self) -> Summary {
        match self.decoded().last() {
            Some(Event::End(s)) => *s,
            other => panic!("the log ends with {other:?}, not a summary"),
        }
    }
}

/// The cabinet over `B` with `blob`, reading `clock` if given.
fn build<'a, B: BankRef>(blob: &'a [u8], clock: Option<&'a ProgramClock>) -> Cabinet<'a, B> {
    match clock {
        None => cabinet::<B>(Some(blob)).unwrap(),
        Some(clock) => cabinet_with_clock::<B>(Some(blob), clock).unwrap(),
    }
}

fn host_replay<B: BankRef>(trace: &[u8], blob: &[u8], clock: Option<&ProgramClock>) -> Output {
    B::bank().reset();
    let mut ctl = build::<B>(blob, clock);
    let mut out = Output::default();
    replay(
        &mut ctl,
        trace,
        &mut out.events,
        &mut out.serial,
        &mut JustPoll,
    )
    .unwrap();
    out
}

/// Where the target half runs, if it can.
struct Target {
    elf_dir: PathBuf,
}

fn elf_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("GREENWAVE_MPS2_ELF_DIR") {
        return dir.into();
    }
    let triple = "thumbv7em-none-eabihf/release";
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join(triple),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../board-mps2/target")
            .join(triple),
    }
}

/// The target, or `None` after saying why it is skipped; panics instead under `CI=true`.
fn target() -> Option<Target> {
    let qemu = Command::new("qemu-system-arm").arg("--version").output();
    let elf_dir = elf_dir();
    let missing = if !qemu.is_ok_and(|o| o.status.success()) {
        Some("qemu-system-arm is not installed (apt-get install qemu-system-arm)".to_string())
    } else {
        [
            "greenwave-mps2-f32",
            "greenwave-mps2-int8",
            "greenwave-mps2-clock-int8",
        ]
        .iter()
        .map(|b| elf_dir.join(b))
        .find(|p| !p.is_file())
        .map(|p| {
            format!(
                "the Arm build {} is missing (build firmware/board-mps2 as its README says, \
                     or point GREENWAVE_MPS2_ELF_DIR at it)",
                p.display()
            )
        })
    };
    match missing {
        None => Some(Target { elf_dir }),
        Some(why) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true and the QEMU target test cannot run: {why}")
        }
        Some(why) => {
            say(&format!("SKIPPED (target half of qemu_replay): {why}"));
            None
        }
    }
}

impl Target {
    /// Runs `bin` on `trace` under QEMU with instruction counting.
    fn run(&self, bin: &str, trace: &[u8], name: &str) -> (Output, TargetStats) {
        let dir =
            std::env::temp_dir().join(format!("greenwave-qemu-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("trace.bin"), trace).unwrap();
        let elf = self.elf_dir.join(bin);
        let mut child = Command::new("timeout")
            .arg(QEMU_TIMEOUT.as_secs().to_string())
            .args([
                "qemu-system-arm",
                "-cpu",
                "cortex-m4",
                "-machine",
                "mps2-an386",
            ])
            .args([
                "-nographic",
                "-monitor",
                "none",
                "-serial",
                "file:uart0.bin",
            ])
            .args(["-semihosting-config", "enable=on,target=native"])
            .args(["-icount", "shift=0", "-kernel"])
            .arg(&elf)
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run qemu-system-arm: {e}"));
        let log = String::from_utf8_lossy(&child.stdout).into_owned()
            + &String::from_utf8_lossy(&child.stderr);
        assert!(
            child.status.success(),
            "{bin} under QEMU failed ({}): {log}",
            child.status
        );
        child.stdout.clear();
        let read = |f: &str| std::fs::read(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        let out = Output {
            events: read("events.bin"),
            serial: read("uart0.bin"),
        };
        let stats: TargetStats = postcard::from_bytes(&read("stats.bin")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        (out, stats)
    }
}

/// Asserts two outputs are equal byte for byte, naming the first differing event.
fn assert_same(host: &Output, target: &Output, what: &str) {
    if host.events != target.events {
        let (h, t) = (host.decoded(), target.decoded());
        let i = h.iter().zip(&t).take_while(|(a, b)| a == b).count();
        panic!(
            "{what}: event logs differ ({} vs {} events) at event {i}:\n host   {:?}\n target {:?}",
            h.len(),
            t.len(),
            h.get(i),
            t.get(i)
        );
    }
    if host.serial != target.serial {
        let i = host
            .serial
            .iter()
            .zip(&target.serial)
            .take_while(|(a, b)| a == b)
            .count();
        panic!(
            "{what}: serial bytes differ ({} vs {} bytes) from byte {i}",
            host.serial.len(),
            target.serial.len()
        );
    }
}

fn instructions(ticks: f64, stats: &TargetStats) -> f64 {
    ticks * stats.calibration_instructions as f64 / stats.calibration_ticks as f64
}

fn describe(t: &TickStats, s: &TargetStats, per: f64) -> String {
    format!(
        "min {:.0} / mean {:.0} / max {:.0} instructions (n = {})",
        instructions(t.min as f64, s) / per,
        instructions(t.mean(), s) / per,
        instructions(t.max as f64, s) / per,
        t.n
    )
}

/// Prints the target's figures (and checks they are complete).
fn report(bin: &str, s: &TargetStats, summary: &Summary) {
    assert!(s.calibration_ticks > 0, "SysTick did not count: {s:?}");
    assert_eq!(s.decision_polls.n, summary.decisions);
    assert_eq!(s.decision_polls.n + s.other_polls.n, summary.polls);
    assert!(s.loop_stack_bytes < s.stack_size_bytes && s.startup_stack_bytes < s.stack_size_bytes);
    say(&format!(
        "{bin} (qemu -icount shift=0; instructions, not cycles; calibration {} instructions = {} SysTick ticks):\n  \
         stack high-water: start-up {} B, replay loop {} B (of {} B)\n  \
         poll with a decision: {}\n  poll without: {}\n  Policy::decide alone: {}",
        s.calibration_instructions,
        s.calibration_ticks,
        s.startup_stack_bytes,
        s.loop_stack_bytes,
        s.stack_size_bytes,
        describe(&s.decision_polls, s, 1.0),
        describe(&s.other_polls, s, 1.0),
        describe(&s.decide_repeated, s, DECIDE_REPEATS as f64),
    ));
}

/// The trace recorded with the shipped f32 policy, replayed on the host and the target
/// with `blob` (reading `clock` if given) and `bin`: the same bytes out.
fn host_and_target_agree<B: BankRef>(blob: &[u8], clock: Option<&ProgramClock>, bin: &str) {
    let trace = record_trace::<B>(TRACE_MS, 7);
    let host = host_replay::<B>(&trace, blob, clock);
    let summary = host.summary();
    assert_eq!(summary.policy_version, Some(1), "the policy acts");
    assert_eq!(
        summary.decisions, 120,
        "one decision per 5 s from the end of the 3 s all-red"
    );
    assert_eq!(summary.frames, summary.decisions - 1);
    assert!(
        host.decoded()
            .iter()
            .filter(|e| matches!(e, Event::Display { .. }))
            .count()
            > 50,
        "the policy switches phases"
    );
    let Some(target) = target() else { return };
    let (on_target, stats) = target.run(bin, &trace, bin);
    assert_same(&host, &on_target, bin);
    report(bin, &stats, &summary);
}

#[test]
fn cortex_m4_replays_the_f32_policy_bit_exact() {
    let blob = shipped("single-4way.blob");
    host_and_target_agree::<F32Bank>(&blob, None, "greenwave-mps2-f32");
}

#[test]
fn cortex_m4_replays_the_int8_policy_bit_exact() {
    let blob = shipped("single-4way.int8.blob");
    host_and_target_agree::<Int8Bank>(&blob, None, "greenwave-mps2-int8");
}

/// The board image whose policy reads the program clock (`greenwave-mps2-clock-int8`):
/// the blob is refused without the clock (its layout has the clock's 4 lanes after the
/// 12 detector lanes), runs with it, and the target agrees with the host bit for bit,
/// the clock lanes of every logged transition included.
#[test]
fn cortex_m4_replays_a_clock_reading_policy_bit_exact() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../board-mps2/blobs/single-4way-clock.int8.blob");
    let blob = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let clock = single_4way_program_clock().unwrap();
    let without = cabinet::<ClockBank>(Some(&blob)).unwrap();
    assert!(
        matches!(
            without.policy_status(),
            Err(FallbackReason::LayoutMismatch { blob_lanes: 16, .. })
        ),
        "{:?}",
        without.policy_status()
    );
    drop(without);
    let with = build::<ClockBank>(&blob, Some(&clock));
    assert_eq!(with.policy_status(), Ok(1));
    assert_eq!(with.layout().n_lanes, 16);
    drop(with);
    host_and_target_agree::<ClockBank>(&blob, Some(&clock), "greenwave-mps2-clock-int8");
}

/// At the first poll from 30 s on with a signal green, the field turns a signal green that
/// conflicts with it (a crossed field wire): the monitor latches flash after its 250 ms persistence, on
/// the host and on the target at the same poll, and the controller flashes red from then on.
#[test]
fn conflicting_output_latches_flash_on_target() {
    let full = record_trace::<ConflictBank>(60_000, 11);
    let blob = shipped("single-4way.blob");
    // The first poll from 30 s on with a group green, and a foe of that group.
    let bank = ConflictBank::bank();
    bank.reset();
    let mut ctl = cabinet::<ConflictBank>(Some(&blob)).unwrap();
    let mut split = 4;
    let green_group = |lamps: &[Lamps; GROUPS]| (0..GROUPS).find(|&g| lamps[g] == Lamps::GREEN);
    while bank.now_ms() < 30_000 || green_group(ctl.commanded_lamps()).is_none() {
        let word = u32::from_le_bytes(full[split..split + 4].try_into().unwrap());
        let Record::Poll { dt_ms, loops } = Record::decode(word, 0).unwrap() else {
            unreachable!("a recorded trace holds polls only")
        };
        bank.advance(dt_ms as u32, loops);
        ctl.poll();
        split += 4;
    }
    let force_at_ms = bank.now_ms();
    let green = green_group(ctl.commanded_lamps()).unwrap();
    let plan = single_4way_plan().unwrap();
    let foe = plan
        .conflicts()
        .foes(MovementId(green as u8))
        .iter()
        .next()
        .unwrap()
        .0;
    let mut trace = full[..split].to_vec();
    let force = Record::Force {
        group: foe,
        lamps: Lamps::GREEN,
    };
    trace.extend_from_slice(&force.encode().to_le_bytes());
    trace.extend_from_slice(&full[split..]);

    let host = host_replay::<ConflictBank>(&trace, &blob, None);
    let events = host.decoded();
    let fault_at = events
        .iter()
        .position(|e| matches!(e, Event::Fault(_)))
        .expect("the monitor latches");
    let Event::Fault(fault) = events[fault_at] else {
        unreachable!()
    };
    let pair = (green as u8, foe);
    assert!(
        matches!(fault.kind, FaultKind::Conflict { a, b } if (a, b) == pair || (b, a) == pair),
        "{fault:?}"
    );
    let latency = fault.at_ms - force_at_ms as u64;
    assert!(
        (250..=285).contains(&latency),
        "latched {latency} ms after the fault"
    );
    assert!(events[fault_at + 1..].iter().all(|e| match e {
        Event::Display {
            mode, commanded, ..
        } => *mode == Mode::Flash && commanded.iter().all(|l| !l.yellow && !l.green),
        Event::Decision { .. } | Event::Fault(_) => false,
        Event::End(_) => true,
    }));
    let flashes = events[fault_at..]
        .iter()
        .filter(|e| matches!(e, Event::Display { .. }))
        .count();
    let half_periods = (60_000 - fault.at_ms as usize) / 500;
    assert!(
        flashes + 1 >= half_periods,
        "red flashes at 1 Hz to the end ({flashes} changes, {half_periods} half periods)"
    );

    let Some(target) = target() else { return };
    let (on_target, _) = target.run("greenwave-mps2-f32", &trace, "conflict");
    assert_same(&host, &on_target, "conflict trace");
}
