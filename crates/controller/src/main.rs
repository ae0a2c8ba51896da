//! `greenwave-controller`: the roadside controller.
//!
//! ```text
//! greenwave-controller run --bundle B --trust KEY.pub --scenario single-4way --log-dir D
//! greenwave-controller run --store S --trust KEY.pub --trust OWN.pub --site SITE --replay R --log-dir D
//! greenwave-controller verify --bundle B --trust KEY.pub --scenario single-4way
//! greenwave-controller log --log-dir D
//! greenwave-controller collect --from frames.bin --log-dir D
//! greenwave-controller finetune --store S [--bundle B] --trust KEY.pub --key OWN.key --log-dir D
//! greenwave-controller rollback --store S --trust KEY.pub --trust OWN.pub
//! ```
//!
//! Each subcommand lives in its own module with its `clap` arguments and a `run`
//! function; add one by adding a module, a variant to [`Command`] and a match arm.

/// `println!` that never stops the command: when the reader of standard output has gone
/// (`… | head -c1`), the rest of the report is dropped, and the command still finishes its
/// work (files written, records committed) and returns its own exit status. (`println!`
/// panics there.)
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

mod collect;
mod finetune;
mod follow;
mod keys;
mod log;
mod rollback;
mod run;
mod stop;
mod verify;

// The runtime's test fixtures and the signed test site, for the in-process tests of
// `run --store` (follow.rs); the tests in tests/ include the same files.
#[cfg(all(test, feature = "sim"))]
#[path = "../../runtime/tests/common/mod.rs"]
mod common;
#[cfg(all(test, feature = "sim"))]
#[path = "../tests/keyed/mod.rs"]
mod keyed;

use std::io::IsTerminal;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "greenwave-controller",
    version,
    about = "greenwave roadside controller: signed policy, supervisor, watchdog, transition log"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More log output (-v info, -vv debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Errors only.
    #[arg(short, long, global = true)]
    quiet: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller on a field (embedded simulator, SUMO, or a replay).
    Run(Box<run::RunArgs>),
    /// Verify a bundle (signature, integrity, manifest; with --scenario also the plan).
    Verify(verify::VerifyArgs),
    /// Summarise a transition log (records, sources, segment problems).
    Log(log::LogArgs),
    /// Append transitions from firmware serial frames to a transition log.
    Collect(collect::CollectArgs),
    /// Fine-tune the current policy on the transition log (off-policy clipped PPO), gate
    /// it on held-back data, and switch to it atomically if it passes. Exit status: 0
    /// switched in (or passed, with --dry-run), 2 rejected by the gate, 1 error.
    Finetune(Box<finetune::FinetuneArgs>),
    /// Switch the policy store back to its previous version.
    Rollback(rollback::RollbackArgs),
}

fn main() {
    // candle's CPU kernels: one thread is several times faster than two on a 2-core
    // cabinet computer for these small networks (set before any thread pool starts).
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        std::env::set_var("RAYON_NUM_THREADS", "1");
    }
    let cli = Cli::parse();
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => tracing::Level::ERROR,
        (false, 0) => tracing::Level::WARN,
        (false, 1) => tracing::Level::INFO,
        _ => tracing::Level::DEBUG,
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let result = match cli.command {
        Command::Run(args) => run::run(*args, cli.quiet).map(|()| Exit::Ok),
        Command::Verify(args) => verify::run(args).map(|()| Exit::Ok),
        Command::Log(args) => log::run(args).map(|()| Exit::Ok),
        Command::Collect(args) => collect::run(args).map(|()| Exit::Ok),
        Command::Finetune(args) => finetune::run(*args, cli.quiet),
        Command::Rollback(args) => rollback::run(args),
    };
    match result {
        Ok(Exit::Ok) => {}
        Ok(Exit::Rejected) => std::process::exit(2),
        Err(e) => {
            eprintln!("error: {}", greenwave_runtime::error_chain(e.as_ref()));
            std::process::exit(1);
        }
    }
}

/// How a successful command ends.
enum Exit {
    /// Done.
    Ok,
    /// The gate rejected the fine-tuned candidate (exit status 2).
    Rejected,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// clap's own consistency checks (argument ids in `requires` / `conflicts_with`, ...).
    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    /// `--bundle` or `--store`, not both; the store's and the watch's options not with
    /// `--bundle`.
    #[test]
    fn a_run_takes_a_bundle_or_a_store() {
        let parse = |extra: &[&str]| {
            let mut a = vec!["greenwave-controller", "run", "--trust", "k.pub"];
            a.extend(["--log-dir", "log"]);
            a.extend(extra);
            Cli::try_parse_from(a).map(|_| ()).map_err(|e| e.kind())
        };
        use clap::error::ErrorKind::*;
        assert_eq!(parse(&[]), Err(MissingRequiredArgument));
        assert_eq!(parse(&["--bundle", "b"]), Ok(()));
        assert_eq!(parse(&["--bundle", "b1", "--bundle", "b2"]), Ok(()));
        assert_eq!(parse(&["--store", "s"]), Ok(()));
        assert_eq!(
            parse(&["--bundle", "b", "--store", "s"]),
            Err(ArgumentConflict)
        );
        let watch = ["--bundle", "b", "--rollback-window-s", "600"];
        assert_eq!(parse(&watch), Err(ArgumentConflict));
        assert_eq!(
            parse(&["--store", "s", "--store-poll-s", "0"]),
            Err(ValueValidation)
        );
    }
}
