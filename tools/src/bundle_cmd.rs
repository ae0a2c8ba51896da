//! `greenwave keygen` and `greenwave bundle`: the signing side of policy bundles (the
//! format and the controller's checks are in `greenwave_runtime::bundle`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use greenwave_runtime::bundle::{self, key_hex, BundleInputs, KeyPairPaths};

use crate::export_cmd::side_paths;

/// Makes an ed25519 key pair `PREFIX.key` (secret, mode 0600) and `PREFIX.pub`.
pub fn keygen(prefix: &Path, force: bool) -> Result<(KeyPairPaths, String)> {
    let (paths, public) = bundle::keygen(prefix, force)?;
    Ok((paths, key_hex(&public)))
}

/// Packs an exported policy (`X.onnx` with `X.manifest.json`, `X.blob` and, if present,
/// `X.int8.blob` beside it, as `greenwave export` writes them) into the bundle directory
/// `out`, signed with the secret key file `key`. Returns the signer's public key (hex).
pub fn bundle(model: &Path, key: &Path, out: &Path) -> Result<String> {
    let (blob, blob_int8, manifest) = side_paths(model);
    let inputs = BundleInputs {
        model: model.to_path_buf(),
        manifest,
        blob,
        blob_int8: blob_int8.is_file().then_some(blob_int8),
    };
    let signing = bundle::load_signing_key(key)?;
    let signer = bundle::pack_and_sign(&inputs, &signing, out)
        .with_context(|| format!("bundling {} into {}", model.display(), out.display()))?;
    Ok(key_hex(&signer))
}

/// Arguments of `greenwave keygen`.
#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// Path prefix of the key pair: writes PREFIX.key and PREFIX.pub.
    #[arg(long)]
    pub out: PathBuf,
    /// Overwrite existing key files.
    #[arg(long)]
    pub force: bool,
}

/// Runs `greenwave keygen`.
pub fn run_keygen(args: &KeygenArgs) -> Result<()> {
    let (paths, public) = keygen(&args.out, args.force)?;
    say!(
        "wrote {} (secret: keep it off controllers)",
        paths.secret.display()
    );
    say!(
        "wrote {} (public key {public}: install on controllers as --trust)",
        paths.public.display()
    );
    Ok(())
}

/// Arguments of `greenwave bundle`.
#[derive(Debug, clap::Args)]
pub struct BundleArgs {
    /// The exported ONNX policy (from `greenwave export`); its side files are packed too.
    pub model: PathBuf,
    /// The secret key file (from `greenwave keygen`).
    #[arg(long)]
    pub key: PathBuf,
    /// The bundle directory to create.
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs `greenwave bundle`.
pub fn run_bundle(args: &BundleArgs) -> Result<()> {
    let signer = bundle(&args.model, &args.key, &args.out)?;
    say!("wrote bundle {} signed by {signer}", args.out.display());
    Ok(())
}
