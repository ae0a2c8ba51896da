//! The board's clock-reading test policy, `firmware/board-mps2/blobs/single-4way-clock.int8.blob`,
//! is the synthetic network this test builds for the single-4way plan and the layout with
//! the program clock's lanes (12 detector lanes and 4 clock lanes, 39 floats; 64 hidden, int8).
//! It fails if the file and the network drift apart. `GREENWAVE_BLESS=1` writes the file
//! instead (after a change to the plan, the layout or the blob format).

#[path = "../../tests/common/synthetic.rs"]
mod synthetic;

use std::path::Path;

use greenwave_core::ObsLayout;
use greenwave_firmware_replay::{single_4way_plan, LANES};

/// The seed of the synthetic network (the firmware tests' `synthetic_blob` uses 7 too).
const SEED: u64 = 7;

fn clock_blob() -> Vec<u8> {
    let plan = single_4way_plan().unwrap();
    let layout = ObsLayout::for_signal(LANES, plan.n_phases(), true).unwrap();
    assert_eq!(layout.dim(), 39);
    let mlp = synthetic::synthetic_mlp(plan.hash(), layout, 64, SEED);
    mlp.to_blob(true).unwrap().to_vec()
}

#[test]
fn the_boards_clock_blob_is_the_synthetic_network_of_the_clock_layout() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../board-mps2/blobs/single-4way-clock.int8.blob");
    let built = clock_blob();
    if std::env::var("GREENWAVE_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &built).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        committed == built,
        "{} is not the synthetic clock network ({} B against {} B); \
         GREENWAVE_BLESS=1 rewrites it",
        path.display(),
        committed.len(),
        built.len()
    );
}
