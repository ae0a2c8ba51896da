//! Freestanding binary exercising the controller-side API of greenwave-core.
#![no_std]
#![no_main]

use core::panic::PanicInfo;

use greenwave_core::mlp::MlpBlob;
use greenwave_core::{LaneReading, Millis, ObsLayout, PhaseId, PhasePlan, PhaseTiming, Sequencer};

#[panic_handler]
fn panic(_: &PanicInfo) -> ! {
    loop {}
}

/// The host's precompiled `core` is built with unwinding tables that name this symbol;
/// nothing here unwinds (panic = "abort"), so an empty one satisfies the linker. An MCU
/// target's `core` does not need it.
#[no_mangle]
extern "C" fn rust_eh_personality() {}

/// Runs one decision cycle: plan, sequencer, observation, blob parse and forward pass.
fn cycle(blob_bytes: &[u8]) -> u32 {
    let Ok(plan) = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 40, 3, 2)) else {
        return 1;
    };
    let Ok(mut seq) = Sequencer::new(plan, PhaseId(0)) else {
        return 2;
    };
    let layout = ObsLayout { n_lanes: 12, n_phases: 4 };
    let lanes = [LaneReading { density: 0.2, queue: 0.1 }; 12];
    let mut obs = [0.0f32; 31];
    if layout.write(&lanes, &seq, &mut obs).is_err() {
        return 3;
    }
    let mut action = 0u8;
    if let Ok(blob) = MlpBlob::parse(blob_bytes) {
        let mut scratch = [0.0f32; 128];
        let mut logits = [0.0f32; 4];
        if blob.forward(&obs, &mut scratch, &mut logits).is_ok() {
            action = greenwave_core::mlp::masked_argmax(&logits, seq.action_mask()).unwrap_or(0);
        }
    }
    seq.request(action);
    let frame = seq.tick(Millis(1000));
    frame.green.0
}

/// Entry point: nothing calls it at run time, it only roots `cycle` for the linker (the
/// check is that this binary links without std and without an allocator).
#[no_mangle]
pub extern "C" fn _start() -> ! {
    // An empty blob fails to parse (the fallback path); the result is kept alive so the
    // whole decision path is linked in.
    core::hint::black_box(cycle(core::hint::black_box(&[])));
    loop {}
}
