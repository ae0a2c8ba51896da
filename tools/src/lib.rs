//! # greenwave-tools
//!
//! The workstation side of greenwave, as a library behind the `greenwave` binary:
//! training runs, export, evaluation.

/// `println!` that never stops the command: when the reader of standard output has gone
/// (`… | head -c1`), the rest of the report is dropped, and the command still finishes its
/// work (files written, records committed) and returns its own exit status. (`println!`
/// panics there.) Exported for the `greenwave` binary's own modules.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

pub mod backend;
pub mod bundle_cmd;
pub mod demo;
pub mod eval_cmd;
pub mod export_cmd;
pub mod policy_controller;
pub mod sampling;
pub mod site_cmd;
pub mod train;
