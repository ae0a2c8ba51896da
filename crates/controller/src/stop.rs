//! Stopping a run cleanly on SIGINT or SIGTERM (Ctrl-C, `systemctl stop`, `kill`).
//!
//! The first signal asks the controller to stop before its next decision: the interval
//! under way is shown whole (a yellow or all-red in it is never cut), the last
//! transitions are completed and committed to the log, a `--record`ing gets its last
//! line, and the report is printed; the run exits 0. A second signal while that happens
//! ends the process at once, with the status a shell gives a death by that signal
//! (128 + its number). Without this, a signal killed the process where it stood: the
//! records appended since the last fsync and the report were lost.
//!
//! `signal-hook` installs the handlers: it is the maintained crate for signal handling
//! in Rust, and its `flag` module is exactly "set an atomic, act on it between
//! iterations", with the double-signal escape built in.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::{Context, Result};
use signal_hook::consts::signal::{SIGINT, SIGTERM};
use signal_hook::flag;

/// The signals a run stops on, and the one that came first (0: none yet).
pub struct StopSignals {
    received: Arc<AtomicUsize>,
}

static INSTALLED: OnceLock<StopSignals> = OnceLock::new();

impl StopSignals {
    /// Installs the handlers for SIGINT and SIGTERM, once a process: `run` does so before
    /// anything starts (a SUMO field's `sumo`, in a process group of its own, must never
    /// be left waiting for a controller that a signal killed while it loaded).
    pub fn install() -> Result<&'static Self> {
        if let Some(s) = INSTALLED.get() {
            return Ok(s);
        }
        let s = Self::register()?;
        Ok(INSTALLED.get_or_init(|| s))
    }

    fn register() -> Result<Self> {
        let armed = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicUsize::new(0));
        for signal in [SIGINT, SIGTERM] {
            let name = signal_name(signal as usize);
            // Order matters: the shutdown is checked before the flag that arms it is set,
            // so the first signal only arms it.
            flag::register_conditional_shutdown(signal, 128 + signal, Arc::clone(&armed))
                .and_then(|_| flag::register(signal, Arc::clone(&armed)))
                .with_context(|| format!("installing the {name} handler"))?;
            // On a second signal the shutdown above ends the process before this runs,
            // so the number kept is the first signal's.
            flag::register_usize(signal, Arc::clone(&received), signal as usize)
                .with_context(|| format!("installing the {name} handler"))?;
        }
        Ok(StopSignals { received })
    }

    /// The name of the stop signal received, if one was.
    pub fn received(&self) -> Option<&'static str> {
        match self.received.load(Ordering::SeqCst) {
            0 => None,
            n => Some(signal_name(n)),
        }
    }
}

fn signal_name(signal: usize) -> &'static str {
    match signal {
        n if n == SIGINT as usize => "SIGINT",
        n if n == SIGTERM as usize => "SIGTERM",
        _ => "a signal",
    }
}
