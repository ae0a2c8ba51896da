//! Stopping a run cleanly on SIGINT or SIGTERM (Ctrl-C, `systemctl stop`, `kill`).
//!
//! A signal asks the controller to stop before its next decision, as if its `--seconds`
//! were up: the interval under way is played to its end, the last transitions are
//! completed and committed to the log, a `--record`ing gets its last line, and the report
//! is printed; the run exits 0. Once decisions have begun, a second signal ends the
//! process at once (even mid-interval), with the status a shell gives a death by that
//! signal (128 + its number). Before that (a SUMO field's `sumo` may still be loading the
//! net, in a process group of its own) signals only ask for the stop, and the run ends
//! before its first decision: were the process to end there, `sumo` would be left waiting
//! for a connection that never comes. Without this module a signal killed the controller
//! where it stood: the report, the transitions still waiting for their next observation
//! and the unwritten end of a recording were lost (records already appended were not:
//! they are written through to the file).
//!
//! `signal-hook` installs the handlers: it is the maintained crate for signal handling
//! in Rust, and its `flag` module is exactly "set an atomic, act on it between
//! iterations", with the double-signal escape built in.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::{Context, Result};
use signal_hook::consts::signal::{SIGINT, SIGTERM};
use signal_hook::flag;

/// The signals a run stops on: the last one received (0: none yet), and whether a further
/// one ends the process at once.
pub struct StopSignals {
    received: Arc<AtomicUsize>,
    armed: Arc<AtomicBool>,
}

static INSTALLED: OnceLock<StopSignals> = OnceLock::new();

impl StopSignals {
    /// The handlers for SIGINT and SIGTERM, installed on the first call of the process:
    /// `run` calls this before it starts anything.
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
            // The shutdown is checked first: once armed, a signal ends the process
            // before anything else is done with it.
            flag::register_conditional_shutdown(signal, 128 + signal, Arc::clone(&armed))
                .and_then(|_| flag::register_usize(signal, Arc::clone(&received), signal as usize))
                .with_context(|| format!("installing the {name} handler"))?;
        }
        Ok(StopSignals { received, armed })
    }

    /// The name of the stop signal received, if one was.
    pub fn received(&self) -> Option<&'static str> {
        match self.received.load(Ordering::SeqCst) {
            0 => None,
            n => Some(signal_name(n)),
        }
    }

    /// From now on a signal arms the hard exit, so that the next one ends the process at
    /// once even while a decision interval runs (a `--realtime` wait, a slow SUMO step);
    /// one received already arms it now. The run calls this as its loop starts, with its
    /// `sumo` connected. The handlers run in the order installed, so the signal that arms
    /// does not also exit.
    pub fn arm_on_signal(&self) -> Result<()> {
        for signal in [SIGINT, SIGTERM] {
            flag::register(signal, Arc::clone(&self.armed)).with_context(|| {
                format!("installing the {} handler", signal_name(signal as usize))
            })?;
        }
        if self.received().is_some() {
            self.armed.store(true, Ordering::SeqCst);
        }
        Ok(())
    }
}

fn signal_name(signal: usize) -> &'static str {
    match signal {
        n if n == SIGINT as usize => "SIGINT",
        n if n == SIGTERM as usize => "SIGTERM",
        _ => "a signal",
    }
}
