//! Signed policy bundles: what is flashed onto a controller.
//!
//! ## Format
//!
//! A bundle is a directory holding exactly these files:
//!
//! | file | what |
//! |---|---|
//! | `policy.onnx` | the policy (manifest JSON inside, under `metadata_props`) |
//! | `manifest.json` | the same manifest, beside it for people and tools |
//! | `policy.blob` | the firmware's postcard MLP blob (f32); none, and refused, for a policy that acts at a decision temperature (the firmware acts greedily) |
//! | `policy.int8.blob` | the int8 blob (optional; likewise) |
//! | `SIGNATURE` | the signed digest list below |
//!
//! `SIGNATURE` is UTF-8 text, one item per line, `\n`-terminated:
//!
//! ```text
//! greenwave-bundle v1
//! signer <ed25519 public key, 64 hex digits>
//! file <name> <size in bytes> <SHA-256, 64 hex digits>      (one per file, sorted by name)
//! signature <ed25519 signature, 128 hex digits>
//! ```
//!
//! The signature is over the bytes of every line before the `signature` line (the
//! canonical digest list). A controller loads a bundle only if, in this order: its signer
//! is one of the keys it trusts, the signature verifies, every listed file is present with
//! its size and digest, no unlisted file is present, the manifest beside the model equals
//! the one inside it, the blobs agree with the manifest, and the manifest's plan hash and
//! observation layout are the controller's own. [`BundleError`] says which check failed.
//!
//! ## Keys
//!
//! [`keygen`] writes `NAME.key` (secret, mode 0600) and `NAME.pub`: each one line of 64 hex
//! digits (the 32-byte ed25519 seed or public key); lines starting with `#` are comments.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use crate::files::write_together;
use crate::manifest::plan_hash_hex;
use crate::{onnx, Manifest};
use ed25519_dalek::{Signature, Signer};
/// The key types of bundles (ed25519-dalek's), re-exported for callers.
pub use ed25519_dalek::{SigningKey, VerifyingKey};
use greenwave_core::mlp::{MlpBlob, BLOB_CRC_BYTES, BLOB_VERSION_UNCHECKED};
use greenwave_core::{Millis, ObsLayout, PhasePlan};
use sha2::{Digest, Sha256};

/// The model file in a bundle.
pub const MODEL_FILE: &str = "policy.onnx";
/// The manifest file in a bundle.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The f32 firmware blob in a bundle.
pub const BLOB_FILE: &str = "policy.blob";
/// The int8 firmware blob in a bundle (optional).
pub const BLOB_INT8_FILE: &str = "policy.int8.blob";
/// The signature file in a bundle.
pub const SIGNATURE_FILE: &str = "SIGNATURE";

const SIGNATURE_HEADER: &str = "greenwave-bundle v1";

/// Why a key, a bundle or one of its checks failed. Each variant names the check.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// A file could not be read or written.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A key file is malformed.
    #[error("key file {path}: {problem}")]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// `pack_and_sign` would overwrite something (a non-empty folder or a file).
    #[error(
        "{0} already exists and is not an empty folder (remove it or write the bundle elsewhere)"
    )]
    Exists(PathBuf),
    /// `keygen` would overwrite a key file.
    #[error("{0} already exists (`greenwave keygen --force` replaces a key pair)")]
    KeyExists(PathBuf),
    /// A key pair's path prefix names a folder, not a file name to add `.key` and `.pub` to.
    #[error(
        "{0} is a folder, not a key pair's path prefix: give one such as {0}/site \
         (which writes site.key and site.pub there)"
    )]
    KeyPrefixIsFolder(PathBuf),
    /// No trusted key was given.
    #[error(
        "no trusted public key given: a controller loads only bundles signed by a key it trusts"
    )]
    NoTrustedKeys,
    /// The bundle has no `SIGNATURE` file.
    #[error("signature check failed: bundle {0} has no SIGNATURE file (unsigned bundle)")]
    MissingSignature(PathBuf),
    /// The `SIGNATURE` file does not parse.
    #[error("signature check failed: SIGNATURE line {line}: {problem}")]
    MalformedSignature {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        problem: String,
    },
    /// Signed by a key this controller does not trust.
    #[error("trust check failed: bundle is signed by key {signer}, which is not among the {trusted} trusted key(s)")]
    UntrustedKey {
        /// The signer's public key (hex).
        signer: String,
        /// How many keys are trusted.
        trusted: usize,
    },
    /// The signature does not verify.
    #[error("signature check failed: the signature by {signer} does not verify over the digest list (SIGNATURE was altered or forged)")]
    BadSignature {
        /// The claimed signer (hex).
        signer: String,
    },
    /// A listed file's size or digest differs.
    #[error("integrity check failed: {name} was modified after signing (signed SHA-256 {signed}, now {actual})")]
    TamperedFile {
        /// The file.
        name: String,
        /// Signed digest (hex) and size.
        signed: String,
        /// Digest (hex) and size now.
        actual: String,
    },
    /// A firmware blob beside a policy that acts at a decision temperature: the firmware
    /// acts greedily, so it would run another rule than the one the policy was measured
    /// by.
    #[error(
        "{file}: the manifest's policy acts at decision temperature {temperature} and the \
         firmware acts greedily, so a firmware blob of it would run another rule than the one \
         it was selected by; its bundle has no firmware blobs (export it again)"
    )]
    BlobOfSampledPolicy {
        /// The blob file.
        file: &'static str,
        /// The manifest's decision temperature.
        temperature: f32,
    },
    /// A listed or required file is missing.
    #[error("integrity check failed: {name} is missing from the bundle")]
    MissingFile {
        /// The file.
        name: String,
    },
    /// A file the signature does not cover.
    #[error("integrity check failed: {name} is in the bundle but not covered by the signature")]
    UnsignedFile {
        /// The file.
        name: String,
    },
    /// `manifest.json` is not valid.
    #[error("manifest check failed: {MANIFEST_FILE}: {0}")]
    Manifest(serde_json::Error),
    /// The model does not read as a greenwave policy.
    #[error("manifest check failed: {MODEL_FILE}: {0}")]
    Model(onnx::OnnxError),
    /// The manifest's `signal_id` is not text: read as no binding, the bundle would run on
    /// any signal of its plan and layout.
    #[error("manifest check failed: provenance.details.signal_id is {0}, not a signal id (text)")]
    SignalIdNotText(String),
    /// The manifest maps the policy's actions to phases otherwise than one to one in
    /// order: controllers take action k as phase k, so such a mapping would be ignored.
    #[error(
        "manifest check failed: action_phases {got:?} is not 0..{n_phases} (controllers \
         serve action k as phase k)"
    )]
    ActionPhases {
        /// The manifest's mapping.
        got: Vec<u8>,
        /// The layout's phase count.
        n_phases: u8,
    },
    /// The manifest beside the model differs from the one inside it.
    #[error("manifest check failed: {MANIFEST_FILE} differs from the manifest inside {MODEL_FILE} (fields: {fields})")]
    ManifestMismatch {
        /// The top-level fields that differ.
        fields: String,
    },
    /// A firmware blob disagrees with the manifest or does not parse.
    #[error("blob check failed: {file}: {problem}")]
    BlobMismatch {
        /// The blob file.
        file: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// The bundle is for another phase plan.
    #[error("plan check failed: bundle is for phase plan {bundle}, this controller runs plan {controller}")]
    PlanMismatch {
        /// The manifest's plan hash.
        bundle: String,
        /// The controller's plan hash.
        controller: String,
    },
    /// The bundle expects another observation layout.
    #[error("layout check failed: bundle expects {bundle}, this controller observes {controller}")]
    LayoutMismatch {
        /// The manifest's layout.
        bundle: String,
        /// The controller's layout.
        controller: String,
    },
    /// The bundle reads program-clock lanes the controller does not supply, or the other
    /// way round.
    #[error(
        "program clock check failed: the bundle's policy {} program-clock lanes (manifest \
         `program_clock`), this controller {} them{}",
        if *bundle { "reads" } else { "does not read" },
        if *controller { "supplies" } else { "does not supply" },
        if *bundle { "; retrain with `--program-clock off` to run it here" } else { "" }
    )]
    ProgramClockMismatch {
        /// Whether the bundle reads them.
        bundle: bool,
        /// Whether the controller supplies them.
        controller: bool,
    },
    /// The policy decides at another interval than the controller: its observations
    /// (counts over the interval) and its switch timing assume the one it was trained at.
    #[error(
        "decision interval check failed: the policy decides every {bundle}, this controller \
         every {controller} (a site's `decision_interval_ms`, or `--decision-interval`, \
         must be the policy's)"
    )]
    DecisionIntervalMismatch {
        /// The manifest's interval.
        bundle: Millis,
        /// The controller's.
        controller: Millis,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> BundleError + 'a {
    move |source| BundleError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 * bytes.len());
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The hex form of a public key (how bundles and errors name signers).
pub fn key_hex(key: &VerifyingKey) -> String {
    hex(key.as_bytes())
}

fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Paths of a key pair made by [`keygen`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPairPaths {
    /// The secret key (`PREFIX.key`).
    pub secret: PathBuf,
    /// The public key (`PREFIX.pub`).
    pub public: PathBuf,
}

/// Makes an ed25519 key pair from the OS random source and writes `PREFIX.key` (mode 0600)
/// and `PREFIX.pub`. Refuses to overwrite existing files unless `force`.
pub fn keygen(prefix: &Path, force: bool) -> Result<(KeyPairPaths, VerifyingKey), BundleError> {
    let ends_in_separator = prefix.as_os_str().to_string_lossy().ends_with(['/', '\\']);
    if prefix.file_name().is_none() || ends_in_separator || prefix.is_dir() {
        let folder = prefix.to_string_lossy();
        let trimmed = folder.trim_end_matches(['/', '\\']);
        let folder = if trimmed.is_empty() { &folder } else { trimmed };
        return Err(BundleError::KeyPrefixIsFolder(PathBuf::from(folder)));
    }
    let paths = KeyPairPaths {
        secret: with_suffix(prefix, ".key"),
        public: with_suffix(prefix, ".pub"),
    };
    for p in [&paths.secret, &paths.public] {
        // A dangling link exists too: writing through it would put the key elsewhere.
        if fs::symlink_metadata(p).is_ok() && !force {
            return Err(BundleError::KeyExists(p.clone()));
        }
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| BundleError::Io {
        op: "drawing a key from the OS random source for",
        path: paths.secret.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let key = SigningKey::from_bytes(&seed);
    if let Some(dir) = paths.secret.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
    }
    let secret_text = format!(
        "{SECRET_KEY_HEADER}: keep it off controllers and out of version control\n{}\n",
        hex(&seed)
    );
    let public = key.verifying_key();
    let public_text = format!("{PUBLIC_KEY_HEADER}\n{}\n", key_hex(&public));
    // Both halves or neither (a half replaced alone would no longer match its pair), each a
    // new file renamed over the old: a file opened in place would keep an old secret key's
    // 0644, and would write through a link.
    write_together(&[
        (&paths.secret, secret_text.as_bytes(), 0o600),
        (&paths.public, public_text.as_bytes(), 0o644),
    ])
    .map_err(|(path, e)| io_err("writing", &path)(e))?;
    Ok((paths, public))
}

/// The first line of a secret key file as [`keygen`] writes it (a remark follows it).
const SECRET_KEY_HEADER: &str = "# greenwave ed25519 secret key";
/// The first line of a public key file as [`keygen`] writes it.
const PUBLIC_KEY_HEADER: &str = "# greenwave ed25519 public key";

/// Which half of a key pair a file is meant to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyKind {
    Secret,
    Public,
}

impl KeyKind {
    fn header(self) -> &'static str {
        match self {
            KeyKind::Secret => SECRET_KEY_HEADER,
            KeyKind::Public => PUBLIC_KEY_HEADER,
        }
    }

    /// What reading the wrong half says: both halves are 64 hex digits, so only the
    /// header tells a public key given to sign with (a key whose secret is public) from a
    /// secret one.
    fn wrong_half(self) -> &'static str {
        match self {
            KeyKind::Secret => {
                "is a public key file (its header says so); signing needs the secret \
                 key, the NAME.key that `greenwave keygen` wrote beside NAME.pub"
            }
            KeyKind::Public => {
                "is a secret key file (its header says so); a trusted key is the \
                 public NAME.pub that `greenwave keygen` wrote beside it, and the \
                 secret key does not belong on a controller"
            }
        }
    }
}

/// The key's 32 bytes: the one line of 64 hex digits. Comment lines (`#`) are skipped,
/// but a file whose header is [`keygen`]'s for the other half is refused. A file without
/// that header (a key written by hand) is read as the half asked for.
fn read_key_hex(path: &Path, kind: KeyKind) -> Result<[u8; 32], BundleError> {
    let text = fs::read_to_string(path).map_err(io_err("reading", path))?;
    let bad = |problem: &str| BundleError::KeyFile {
        path: path.to_path_buf(),
        problem: problem.into(),
    };
    let other = match kind {
        KeyKind::Secret => KeyKind::Public,
        KeyKind::Public => KeyKind::Secret,
    };
    if text
        .lines()
        .map(str::trim)
        .any(|l| l.starts_with(other.header()))
    {
        return Err(bad(kind.wrong_half()));
    }
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    let line = lines
        .next()
        .ok_or_else(|| bad("no key line (expected 64 hex digits)"))?;
    if lines.next().is_some() {
        return Err(bad("more than one key line"));
    }
    unhex::<32>(line).ok_or_else(|| bad("key line is not 64 hex digits"))
}

/// Reads a secret key file (`NAME.key`). A file with [`keygen`]'s public-key header is
/// refused: its key would sign, but with a secret anyone holding the public file has.
pub fn load_signing_key(path: &Path) -> Result<SigningKey, BundleError> {
    Ok(SigningKey::from_bytes(&read_key_hex(
        path,
        KeyKind::Secret,
    )?))
}

/// Reads a public key file (`NAME.pub`). A file with [`keygen`]'s secret-key header is
/// refused (trusting it would trust a key that is not the pair's public half).
pub fn load_public_key(path: &Path) -> Result<VerifyingKey, BundleError> {
    let bytes = read_key_hex(path, KeyKind::Public)?;
    VerifyingKey::from_bytes(&bytes).map_err(|e| BundleError::KeyFile {
        path: path.to_path_buf(),
        problem: format!("not a valid ed25519 public key: {e}"),
    })
}

/// The files to pack (as `greenwave export` writes them).
#[derive(Clone, Debug)]
pub struct BundleInputs {
    /// The ONNX model.
    pub model: PathBuf,
    /// The manifest JSON.
    pub manifest: PathBuf,
    /// The f32 firmware blob; a policy that acts at a decision temperature has none (the
    /// firmware acts greedily), and this file is then absent.
    pub blob: PathBuf,
    /// The int8 firmware blob, if any.
    pub blob_int8: Option<PathBuf>,
}

/// The policy files of a bundle, checked against each other.
#[derive(Clone, Debug)]
struct Contents {
    manifest: Manifest,
    files: BTreeMap<&'static str, Vec<u8>>,
}

/// Checks that the manifest beside the model equals the one inside it, and that the blobs
/// agree with it.
fn check_contents(files: BTreeMap<&'static str, Vec<u8>>) -> Result<Contents, BundleError> {
    let get = |name: &'static str| {
        files
            .get(name)
            .ok_or(BundleError::MissingFile { name: name.into() })
    };
    let beside: Manifest =
        serde_json::from_slice(get(MANIFEST_FILE)?).map_err(BundleError::Manifest)?;
    let model = get(MODEL_FILE)?;
    let inside = onnx::read_manifest(model).map_err(BundleError::Model)?;
    onnx::check_finite(model).map_err(BundleError::Model)?;
    if beside != inside {
        return Err(BundleError::ManifestMismatch {
            fields: differing_fields(&beside, &inside),
        });
    }
    let bound = beside.provenance.details.get(crate::Provenance::SIGNAL_ID);
    if let Some(id) = bound.filter(|id| !id.is_string()) {
        return Err(BundleError::SignalIdNotText(id.to_string()));
    }
    let n_phases = beside.obs_layout.n_phases;
    if !beside.action_phases.iter().copied().eq(0..n_phases) {
        return Err(BundleError::ActionPhases {
            got: beside.action_phases.clone(),
            n_phases,
        });
    }
    check_blobs_for_rule(&files, &beside)?;
    for file in [BLOB_FILE, BLOB_INT8_FILE] {
        let Some(bytes) = files.get(file) else {
            continue;
        };
        let problem = |p: String| BundleError::BlobMismatch { file, problem: p };
        let blob = MlpBlob::parse_any_version(bytes).map_err(|e| problem(e.to_string()))?;
        if Some(blob.plan_hash) != beside.plan_hash_u64() {
            return Err(problem(format!(
                "blob is for plan {:016x}, manifest for {}",
                blob.plan_hash, beside.plan_hash
            )));
        }
        if blob.obs_layout != beside.obs_layout {
            return Err(problem(format!(
                "blob layout {:?} differs from the manifest's {:?}",
                blob.obs_layout, beside.obs_layout
            )));
        }
        if blob.policy_version != beside.policy_version {
            return Err(problem(format!(
                "blob is policy version {}, manifest says {}",
                blob.policy_version, beside.policy_version
            )));
        }
    }
    check_blobs_are_the_model(&files, model, &beside)?;
    Ok(Contents {
        manifest: beside,
        files,
    })
}

/// A greedy policy carries its f32 firmware blob; a policy acting at a decision
/// temperature carries none ([`BundleError::BlobOfSampledPolicy`]).
fn check_blobs_for_rule(
    files: &BTreeMap<&'static str, Vec<u8>>,
    manifest: &Manifest,
) -> Result<(), BundleError> {
    match manifest.decision_temperature {
        None if !files.contains_key(BLOB_FILE) => Err(BundleError::MissingFile {
            name: BLOB_FILE.into(),
        }),
        None => Ok(()),
        Some(temperature) => match [BLOB_FILE, BLOB_INT8_FILE]
            .into_iter()
            .find(|f| files.contains_key(f))
        {
            Some(file) => Err(BundleError::BlobOfSampledPolicy { file, temperature }),
            None => Ok(()),
        },
    }
}

/// Each blob must be the ONNX model's own network, with the fields export gives it: the
/// header checks alone pass a blob left beside a new model by an earlier export of the same
/// plan (policy version 1 both), and the firmware would run other weights than those
/// verified. The bytes are compared; a blob of format 1 (no CRC-32, before 2026-12-07), in a
/// bundle signed then, with the format-1 bytes of the same network.
fn check_blobs_are_the_model(
    files: &BTreeMap<&'static str, Vec<u8>>,
    model: &[u8],
    manifest: &Manifest,
) -> Result<(), BundleError> {
    let (weights, _) = onnx::import(model).map_err(BundleError::Model)?;
    let plan_hash = manifest.plan_hash_u64().unwrap_or_default();
    let mlp = weights.actor_mlp(plan_hash, manifest.policy_version);
    for (file, int8) in [(BLOB_FILE, false), (BLOB_INT8_FILE, true)] {
        let Some(bytes) = files.get(file) else {
            continue;
        };
        let problem = |p: String| BundleError::BlobMismatch { file, problem: p };
        let mut derived = mlp.to_blob(int8).map_err(|e| problem(e.to_string()))?;
        let given = MlpBlob::parse_any_version(bytes).map_err(|e| problem(e.to_string()))?;
        if given.version == BLOB_VERSION_UNCHECKED {
            // Format 1 is format 2 without its CRC-32, version byte (the fifth) 1.
            derived.truncate(derived.len() - BLOB_CRC_BYTES);
            derived[4] = BLOB_VERSION_UNCHECKED as u8;
        }
        if derived != *bytes {
            return Err(problem(format!(
                "is not the network of {MODEL_FILE} (its weights differ: a file of another \
                 export?); export the policy again"
            )));
        }
    }
    Ok(())
}

fn differing_fields(a: &Manifest, b: &Manifest) -> String {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(a), serde_json::to_value(b))
    else {
        return "unknown".into();
    };
    // The keys of both: a field written in one only (an optional one, such as
    // `decision_temperature`) differs too.
    let keys: std::collections::BTreeSet<&str> =
        a.keys().chain(b.keys()).map(String::as_str).collect();
    let fields: Vec<&str> = keys
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .collect();
    fields.join(", ")
}

fn digest_text(signer: &VerifyingKey, files: &BTreeMap<&str, Vec<u8>>) -> String {
    let mut s = format!("{SIGNATURE_HEADER}\nsigner {}\n", key_hex(signer));
    for (name, bytes) in files {
        let _ = writeln!(
            s,
            "file {name} {} {}",
            bytes.len(),
            hex(&Sha256::digest(bytes))
        );
    }
    s
}

/// Checks the inputs against each other, copies them into a new bundle directory `out`
/// under their bundle names, and signs them with `key`. Returns the signer's public key.
pub fn pack_and_sign(
    inputs: &BundleInputs,
    key: &SigningKey,
    out: &Path,
) -> Result<VerifyingKey, BundleError> {
    let read = |p: &Path| fs::read(p).map_err(io_err("reading", p));
    let mut files = BTreeMap::new();
    files.insert(MODEL_FILE, read(&inputs.model)?);
    files.insert(MANIFEST_FILE, read(&inputs.manifest)?);
    // Absent for a policy acting at a decision temperature; `check_contents` says whether
    // the manifest's policy needs it.
    if inputs.blob.exists() {
        files.insert(BLOB_FILE, read(&inputs.blob)?);
    }
    if let Some(p) = &inputs.blob_int8 {
        files.insert(BLOB_INT8_FILE, read(p)?);
    }
    let contents = check_contents(files)?;
    refuse_unchecked_blobs(&contents.files)?;
    write_signed(&contents, key, out)
}

/// Writes checked contents into the new bundle directory `out` and signs them with `key`.
fn write_signed(
    contents: &Contents,
    key: &SigningKey,
    out: &Path,
) -> Result<VerifyingKey, BundleError> {
    if out.exists()
        && (!out.is_dir()
            || fs::read_dir(out)
                .map_err(io_err("listing", out))?
                .next()
                .is_some())
    {
        return Err(BundleError::Exists(out.to_path_buf()));
    }
    fs::create_dir_all(out).map_err(io_err("creating", out))?;
    for (name, bytes) in &contents.files {
        let path = out.join(name);
        fs::write(&path, bytes).map_err(io_err("writing", &path))?;
    }
    let signer = key.verifying_key();
    let text = digest_text(&signer, &contents.files);
    let signature = key.sign(text.as_bytes());
    let path = out.join(SIGNATURE_FILE);
    let signed = format!("{text}signature {}\n", hex(&signature.to_bytes()));
    fs::write(&path, signed).map_err(io_err("writing", &path))?;
    Ok(signer)
}

/// A new bundle carries blobs of the current format only: the firmware refuses a format-1
/// blob (it has no CRC-32 to check flash against), so packing one would sign a policy the
/// target cannot run. A bundle signed before keeps verifying ([`check_contents`]).
fn refuse_unchecked_blobs(files: &BTreeMap<&'static str, Vec<u8>>) -> Result<(), BundleError> {
    for file in [BLOB_FILE, BLOB_INT8_FILE] {
        if let Some(Err(e)) = files.get(file).map(|b| MlpBlob::parse(b)) {
            return Err(BundleError::BlobMismatch {
                file,
                problem: e.to_string(),
            });
        }
    }
    Ok(())
}

/// A parsed `SIGNATURE` file.
struct SignatureFile {
    signer: [u8; 32],
    files: Vec<(String, u64, [u8; 32])>,
    signature: [u8; 64],
    signed_text: String,
}

fn parse_signature(text: &str) -> Result<SignatureFile, BundleError> {
    let bad = |line: usize, problem: &str| BundleError::MalformedSignature {
        line,
        problem: problem.into(),
    };
    if text.is_empty() {
        return Err(bad(1, "the file is empty (expected `greenwave-bundle v1`)"));
    }
    if !text.ends_with('\n') {
        return Err(bad(
            text.lines().count(),
            "file does not end with a newline",
        ));
    }
    if let Some(at) = text.find('\r') {
        // The text signed has LF endings: a copy that made them CRLF is not a forgery.
        return Err(bad(
            text[..at].lines().count().max(1),
            "line ends in CR (CRLF line endings, as a Windows copy writes): the signed text has LF endings only",
        ));
    }
    let lines: Vec<&str> = text.lines().collect();
    if lines.first() != Some(&SIGNATURE_HEADER) {
        return Err(bad(1, "expected `greenwave-bundle v1`"));
    }
    let signer = lines
        .get(1)
        .and_then(|l| l.strip_prefix("signer "))
        .and_then(unhex::<32>)
        .ok_or_else(|| bad(2, "expected `signer <64 hex digits>`"))?;
    let last = lines.len() - 1;
    let signature = lines[last]
        .strip_prefix("signature ")
        .and_then(unhex::<64>)
        .ok_or_else(|| {
            bad(
                last + 1,
                "expected `signature <128 hex digits>` as the last line",
            )
        })?;
    let mut files = Vec::new();
    for (i, line) in lines.iter().enumerate().take(last).skip(2) {
        let parts: Vec<&str> = line.split(' ').collect();
        let ok_name = |n: &str| {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        };
        match parts.as_slice() {
            ["file", name, size, digest] if ok_name(name) => {
                let size = size
                    .parse()
                    .map_err(|_| bad(i + 1, "file size is not a number"))?;
                let digest = unhex::<32>(digest)
                    .ok_or_else(|| bad(i + 1, "SHA-256 is not 64 hex digits"))?;
                files.push((name.to_string(), size, digest));
            }
            _ => return Err(bad(i + 1, "expected `file <name> <size> <sha256>`")),
        }
    }
    let signed_len = text.len() - lines[last].len() - 1;
    Ok(SignatureFile {
        signer,
        files,
        signature,
        signed_text: text[..signed_len].to_string(),
    })
}

/// Parses the text of a `SIGNATURE` file without checking the signature (the first step
/// of [`verify`]); returns how many files it lists. For tools and the fuzz targets.
pub fn parse_signature_text(text: &str) -> Result<usize, BundleError> {
    parse_signature(text).map(|sig| sig.files.len())
}

/// Checks a bundle's policy files against each other, as [`verify`] and [`pack_and_sign`]
/// do: the manifest JSON equals the manifest inside the ONNX model, and the blobs parse and
/// agree with it. Returns the manifest. A format-1 blob passes here, as in `verify`;
/// `pack_and_sign` refuses it.
pub fn check_policy_files(
    model: &[u8],
    manifest: &[u8],
    blob: &[u8],
    blob_int8: Option<&[u8]>,
) -> Result<Manifest, BundleError> {
    let mut files = BTreeMap::new();
    files.insert(MODEL_FILE, model.to_vec());
    files.insert(MANIFEST_FILE, manifest.to_vec());
    files.insert(BLOB_FILE, blob.to_vec());
    if let Some(b) = blob_int8 {
        files.insert(BLOB_INT8_FILE, b.to_vec());
    }
    check_contents(files).map(|c| c.manifest)
}

/// A bundle that passed every check, with its contents.
#[derive(Clone, Debug)]
pub struct VerifiedBundle {
    /// The bundle directory.
    pub dir: PathBuf,
    /// Who signed it.
    pub signer: VerifyingKey,
    /// Its manifest.
    pub manifest: Manifest,
    /// The ONNX model bytes (exactly the bytes that were verified).
    pub model: Vec<u8>,
    /// The f32 firmware blob.
    pub blob: Vec<u8>,
    /// The int8 firmware blob, if the bundle has one.
    pub blob_int8: Option<Vec<u8>>,
}

impl VerifiedBundle {
    /// Checks the bundle is for `plan` and `layout` (call once per signal of a controller
    /// running several).
    pub fn check_signal(&self, plan: &PhasePlan, layout: ObsLayout) -> Result<(), BundleError> {
        check_manifest_runs(&self.manifest, plan, layout)
    }
}

/// Checks that a policy of `manifest` is for a signal of `plan` and `layout` (the one rule
/// for bundles, per-signal sets and simulated runs of a bare model).
pub fn check_manifest_runs(
    manifest: &Manifest,
    plan: &PhasePlan,
    layout: ObsLayout,
) -> Result<(), BundleError> {
    let controller = plan_hash_hex(plan);
    if manifest.plan_hash != controller {
        return Err(BundleError::PlanMismatch {
            bundle: manifest.plan_hash.clone(),
            controller,
        });
    }
    let version = greenwave_core::observation::OBS_LAYOUT_VERSION;
    if manifest.obs_layout != layout || manifest.obs_layout_version != version {
        let show = |l: ObsLayout, v: u16| {
            format!("{} lanes × {} phases (layout v{v})", l.n_lanes, l.n_phases)
        };
        return Err(BundleError::LayoutMismatch {
            bundle: show(manifest.obs_layout, manifest.obs_layout_version),
            controller: show(layout, version),
        });
    }
    Ok(())
}

impl VerifiedBundle {
    /// Checks the bundle reads program-clock lanes exactly when the controller supplies
    /// them (`supplied`): otherwise the policy would read detector zones as its clock, or
    /// its clock as detector zones.
    pub fn check_program_clock(&self, supplied: bool) -> Result<(), BundleError> {
        if self.manifest.program_clock != supplied {
            return Err(BundleError::ProgramClockMismatch {
                bundle: self.manifest.program_clock,
                controller: supplied,
            });
        }
        Ok(())
    }
}

impl VerifiedBundle {
    /// Checks the policy decides every `interval`, as the controller will.
    pub fn check_decision_interval(&self, interval: Millis) -> Result<(), BundleError> {
        if self.manifest.decision_interval != interval {
            return Err(BundleError::DecisionIntervalMismatch {
                bundle: self.manifest.decision_interval,
                controller: interval,
            });
        }
        Ok(())
    }
}

/// Verifies the bundle directory `bundle` against `trusted_keys`, then checks it is for
/// the controller's `plan` and `layout`. See the module docs for the order of checks.
pub fn verify_and_load(
    bundle: &Path,
    trusted_keys: &[VerifyingKey],
    plan: &PhasePlan,
    layout: ObsLayout,
) -> Result<VerifiedBundle, BundleError> {
    let verified = verify(bundle, trusted_keys)?;
    verified.check_signal(plan, layout)?;
    Ok(verified)
}

/// Verifies signature, integrity and internal consistency only (no plan check).
pub fn verify(bundle: &Path, trusted_keys: &[VerifyingKey]) -> Result<VerifiedBundle, BundleError> {
    if trusted_keys.is_empty() {
        return Err(BundleError::NoTrustedKeys);
    }
    let given = bundle;
    // Resolved once: a link such as a policy store's `current`, moved while this reads,
    // would otherwise mix two versions' files (refused, but as tampering).
    let resolved = fs::canonicalize(given).unwrap_or_else(|_| given.to_path_buf());
    let bundle = resolved.as_path();
    let sig = read_signature(bundle)?;
    let signer = check_signer(&sig, trusted_keys)?;
    // The signature covers the text; the text must also be the canonical one (sorted,
    // unique names), so one bundle has one valid SIGNATURE.
    let files = read_signed_files(bundle, &sig)?;
    if digest_text(signer, &files) != sig.signed_text {
        return Err(BundleError::MalformedSignature {
            line: 0,
            problem: "digest list is not in canonical form (sorted, unique file names)".into(),
        });
    }
    for entry in fs::read_dir(bundle).map_err(io_err("listing", bundle))? {
        let entry = entry.map_err(io_err("listing", bundle))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != SIGNATURE_FILE && !files.contains_key(name.as_str()) {
            return Err(BundleError::UnsignedFile { name });
        }
    }
    let contents = check_contents(files)?;
    let mut files = contents.files;
    Ok(VerifiedBundle {
        dir: given.to_path_buf(),
        signer: *signer,
        manifest: contents.manifest,
        model: files.remove(MODEL_FILE).unwrap_or_default(),
        blob: files.remove(BLOB_FILE).unwrap_or_default(),
        blob_int8: files.remove(BLOB_INT8_FILE),
    })
}

/// Reads and parses the bundle's `SIGNATURE` (a missing directory and a missing file are
/// told apart).
fn read_signature(bundle: &Path) -> Result<SignatureFile, BundleError> {
    let sig_path = bundle.join(SIGNATURE_FILE);
    if !sig_path.is_file() {
        if !bundle.is_dir() {
            return Err(BundleError::Io {
                op: "opening bundle directory",
                path: bundle.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
            });
        }
        return Err(BundleError::MissingSignature(bundle.to_path_buf()));
    }
    let text = read_at_most(&sig_path, MAX_SIGNATURE_BYTES + 1)
        .and_then(|b| String::from_utf8(b).map_err(std::io::Error::other))
        .map_err(io_err("reading", &sig_path))?;
    if text.len() as u64 > MAX_SIGNATURE_BYTES {
        return Err(BundleError::MalformedSignature {
            line: 0,
            problem: format!("longer than {MAX_SIGNATURE_BYTES} bytes: not a bundle's SIGNATURE"),
        });
    }
    parse_signature(&text)
}

/// The longest `SIGNATURE` read (one lists four files in a few hundred bytes).
const MAX_SIGNATURE_BYTES: u64 = 64 << 10;

/// The first `limit` bytes of the file at `path` (all of it if shorter): a file larger than
/// any it could rightly be is not read whole into memory.
fn read_at_most(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    fs::File::open(path)?.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The trusted key that signed `sig`, once its signature over the signed text verifies.
fn check_signer<'k>(
    sig: &SignatureFile,
    trusted_keys: &'k [VerifyingKey],
) -> Result<&'k VerifyingKey, BundleError> {
    let signer_hex = hex(&sig.signer);
    let Some(signer) = trusted_keys.iter().find(|k| k.as_bytes() == &sig.signer) else {
        return Err(BundleError::UntrustedKey {
            signer: signer_hex,
            trusted: trusted_keys.len(),
        });
    };
    signer
        .verify_strict(
            sig.signed_text.as_bytes(),
            &Signature::from_bytes(&sig.signature),
        )
        .map_err(|_| BundleError::BadSignature {
            signer: signer_hex.clone(),
        })?;
    Ok(signer)
}

/// Reads every file `sig` lists, checking that it is a bundle file, present, and of the
/// signed size and digest.
fn read_signed_files(
    bundle: &Path,
    sig: &SignatureFile,
) -> Result<BTreeMap<&'static str, Vec<u8>>, BundleError> {
    let mut files: BTreeMap<&'static str, Vec<u8>> = BTreeMap::new();
    let known = [MODEL_FILE, MANIFEST_FILE, BLOB_FILE, BLOB_INT8_FILE];
    for (name, size, digest) in &sig.files {
        let Some(&known_name) = known.iter().find(|k| *k == name) else {
            return Err(BundleError::MalformedSignature {
                line: 0,
                problem: format!("lists `{name}`, which is not a bundle file"),
            });
        };
        let path = bundle.join(name);
        if !path.is_file() {
            return Err(BundleError::MissingFile { name: name.clone() });
        }
        // One byte past the signed size tells a longer file, without reading it whole.
        let bytes =
            read_at_most(&path, size.saturating_add(1)).map_err(io_err("reading", &path))?;
        if bytes.len() as u64 != *size {
            let on_disk = fs::metadata(&path).map_or(bytes.len() as u64, |m| m.len());
            return Err(BundleError::TamperedFile {
                name: name.clone(),
                signed: format!("{} ({size} bytes)", hex(digest)),
                actual: format!("{on_disk} bytes"),
            });
        }
        let actual = Sha256::digest(&bytes);
        if actual.as_slice() != digest {
            return Err(BundleError::TamperedFile {
                name: name.clone(),
                signed: format!("{} ({size} bytes)", hex(digest)),
                actual: format!("{} ({} bytes)", hex(&actual), bytes.len()),
            });
        }
        files.insert(known_name, bytes);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped blob `name` (format 2) rewritten as format 1: version 1, no CRC-32.
    fn format_1_blob(name: &str) -> Vec<u8> {
        let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models");
        let b = fs::read(models.join(name)).unwrap();
        let mut v1 = b[..b.len() - greenwave_core::mlp::BLOB_CRC_BYTES].to_vec();
        v1[4] = greenwave_core::mlp::BLOB_VERSION_UNCHECKED as u8;
        v1
    }

    #[test]
    fn a_bundle_signed_with_format_1_blobs_verifies_but_none_is_packed() {
        let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models");
        let base = std::env::temp_dir().join(format!("gw-blob-v1-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        fs::create_dir_all(&base).unwrap();
        let (blob, blob_int8) = (base.join("p.blob"), base.join("p.int8.blob"));
        fs::write(&blob, format_1_blob("single-4way.blob")).unwrap();
        fs::write(&blob_int8, format_1_blob("single-4way.int8.blob")).unwrap();
        let inputs = BundleInputs {
            model: models.join("single-4way.onnx"),
            manifest: models.join("single-4way.manifest.json"),
            blob,
            blob_int8: Some(blob_int8),
        };
        let key = SigningKey::from_bytes(&[7; 32]);
        let err = pack_and_sign(&inputs, &key, &base.join("new")).unwrap_err();
        assert!(err.to_string().contains("version 1"), "{err}");
        // As a bundle signed before format 2 holds them: its files verify and load.
        let read = |p: &Path| fs::read(p).unwrap();
        let files = BTreeMap::from([
            (MODEL_FILE, read(&inputs.model)),
            (MANIFEST_FILE, read(&inputs.manifest)),
            (BLOB_FILE, read(&inputs.blob)),
            (BLOB_INT8_FILE, read(inputs.blob_int8.as_ref().unwrap())),
        ]);
        let contents = check_contents(files).unwrap();
        let old = base.join("old");
        let public = write_signed(&contents, &key, &old).unwrap();
        let verified = verify(&old, &[public]).unwrap();
        assert_eq!(verified.manifest.policy_version, 1);
        // A format-1 blob of other weights is still refused.
        let mut other = format_1_blob("single-4way.blob");
        let n = other.len();
        other[n - 8] ^= 0x10;
        let mut files = contents.files.clone();
        files.insert(BLOB_FILE, other);
        assert!(matches!(
            check_contents(files),
            Err(BundleError::BlobMismatch { .. })
        ));
        let _ = fs::remove_dir_all(&base);
    }

    #[test]
    fn hex_round_trips_and_rejects_junk() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(hex(&b), "0001abff");
        assert_eq!(unhex::<4>("0001abff"), Some(b));
        assert_eq!(unhex::<4>("0001abf"), None);
        assert_eq!(unhex::<4>("0001abfg"), None);
        assert_eq!(unhex::<4>("+001abff"), None);
    }

    #[test]
    fn signature_file_parse_errors_name_the_line() {
        let err = parse_signature("nope\n").err().unwrap();
        assert!(err.to_string().contains("line 1"), "{err}");
        let text = format!(
            "{SIGNATURE_HEADER}\nsigner {}\nfile a b c\nsignature {}\n",
            "00".repeat(32),
            "00".repeat(64)
        );
        let err = parse_signature(&text).err().unwrap();
        assert!(err.to_string().contains("line 3"), "{err}");
        let text = format!("{SIGNATURE_HEADER}\nsigner {}\n", "00".repeat(32));
        assert!(parse_signature(&text).is_err());
        // CRLF endings are named as such, not taken for a forged signature.
        let crlf = format!(
            "{SIGNATURE_HEADER}\r\nsigner {}\r\nsignature {}\r\n",
            "00".repeat(32),
            "00".repeat(64)
        );
        let err = parse_signature(&crlf).err().unwrap().to_string();
        assert!(err.contains("line 1") && err.contains("CRLF"), "{err}");
    }

    #[test]
    fn keys_round_trip_through_files() {
        let dir = std::env::temp_dir().join(format!("gw-keys-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (paths, public) = keygen(&dir.join("site"), false).unwrap();
        assert!(matches!(
            keygen(&dir.join("site"), false),
            Err(BundleError::KeyExists(_))
        ));
        // A folder is not a prefix: no hidden `.key` / `.pub` written into it.
        let slash = PathBuf::from(format!("{}/", dir.display()));
        for folder in [dir.clone(), slash] {
            let err = keygen(&folder, true).unwrap_err();
            assert!(matches!(err, BundleError::KeyPrefixIsFolder(_)), "{err}");
            assert!(err.to_string().contains("/site"), "{err}");
        }
        assert!(!dir.join(".key").exists() && !dir.join(".pub").exists());
        let secret = load_signing_key(&paths.secret).unwrap();
        assert_eq!(secret.verifying_key(), public);
        assert_eq!(load_public_key(&paths.public).unwrap(), public);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&paths.secret).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "secret key readable by others: {mode:o}");
            // --force over a key file others can read: the new key is not.
            let loose = dir.join("loose");
            fs::write(with_suffix(&loose, ".key"), "old").unwrap();
            fs::set_permissions(
                with_suffix(&loose, ".key"),
                fs::Permissions::from_mode(0o644),
            )
            .unwrap();
            let (p2, _) = keygen(&loose, true).unwrap();
            let mode = fs::metadata(&p2.secret).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "--force kept the old mode: {mode:o}");
            // A dangling link counts as a file: not written through without --force.
            let linked = dir.join("linked");
            std::os::unix::fs::symlink(dir.join("elsewhere.key"), with_suffix(&linked, ".key"))
                .unwrap();
            assert!(matches!(
                keygen(&linked, false),
                Err(BundleError::KeyExists(_))
            ));
            assert!(!dir.join("elsewhere.key").exists());
            // A half that cannot be written (its path a folder) leaves the old pair whole.
            let pair = dir.join("pair");
            let (old, _) = keygen(&pair, false).unwrap();
            let old_secret = fs::read(&old.secret).unwrap();
            fs::remove_file(&old.public).unwrap();
            fs::create_dir(&old.public).unwrap();
            let err = keygen(&pair, true).unwrap_err().to_string();
            assert!(err.contains("pair.pub") && err.contains("folder"), "{err}");
            assert_eq!(
                fs::read(&old.secret).unwrap(),
                old_secret,
                "secret replaced alone"
            );
            let left: Vec<_> = fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(".tmp-"))
                .collect();
            assert!(left.is_empty(), "{left:?}");
        }
        // Each half is refused where the other is wanted, naming the file and the half.
        let err = load_signing_key(&paths.public).unwrap_err().to_string();
        assert!(
            err.contains("site.pub") && err.contains("is a public key file"),
            "{err}"
        );
        let err = load_public_key(&paths.secret).unwrap_err().to_string();
        assert!(
            err.contains("site.key") && err.contains("is a secret key file"),
            "{err}"
        );
        // A key written by hand, without keygen's header, reads as the half asked for.
        let bare = dir.join("bare.pub");
        fs::write(&bare, format!("{}\n", key_hex(&public))).unwrap();
        assert_eq!(load_public_key(&bare).unwrap(), public);
        fs::write(dir.join("bad.pub"), "xyz\n").unwrap();
        let err = load_public_key(&dir.join("bad.pub")).unwrap_err();
        assert!(err.to_string().contains("bad.pub"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }
}
