//! `greenwave-controller rollback`: switch the policy store back to its previous version.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::keys::trusted_keys;
use crate::Exit;

/// Arguments of `greenwave-controller rollback`.
#[derive(Args)]
pub struct RollbackArgs {
    /// The controller's policy store.
    #[arg(long)]
    store: PathBuf,
    /// A trusted public key file (repeat; include the controller's own public key, which
    /// signed its fine-tuned versions): the previous version is verified before switching.
    #[arg(long = "trust", required = true)]
    trust: Vec<PathBuf>,
    /// Why (recorded in the store's history).
    #[arg(long, default_value = "manual rollback")]
    reason: String,
}

/// `greenwave-controller rollback`: switches the store to its previous version.
pub fn run(args: RollbackArgs) -> Result<Exit> {
    let keys = trusted_keys(&args.trust)?;
    // An existing store only: a mistyped path is named, not made into an empty store.
    let store = greenwave_finetune::PolicyStore::attach(&args.store)
        .with_context(|| format!("opening the policy store {}", args.store.display()))?;
    crate::follow::warn_of_history_damage(&store)?;
    let s = store.rollback(&keys, &args.reason)?;
    say!(
        "rolled back: v{} -> v{} ({})",
        s.from.map_or("?".into(), |v| v.to_string()),
        s.version,
        s.dir.display()
    );
    if !store.is_judged(&s.dir).unwrap_or(false) {
        eprintln!(
            "warning: v{} has no live-watch verdict (no controller's watch kept it, nor was it \
             adopted): a controller following the store runs it at once, unwatched",
            s.version
        );
    }
    Ok(Exit::Ok)
}
