//! A site's signing key, the controller's own key pair, and the project's trained
//! `models/single-4way.onnx` signed with the site's key: what the store tests start from.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use greenwave_finetune::PolicyStore;
use greenwave_policy::onnx;
use greenwave_runtime::bundle;

use crate::common;

/// The project's trained single-4way policy.
pub fn model_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/single-4way.onnx")
}

/// The keys and the signed bundle, under a fresh temporary folder.
pub struct Site {
    /// The folder.
    pub dir: PathBuf,
    /// The trained policy signed with the site's key.
    pub bundle: PathBuf,
    /// The site's public key file.
    pub site_pub: PathBuf,
    /// The site's public key.
    pub site: ed25519_dalek::VerifyingKey,
    /// The controller's own secret key file.
    pub own_key: PathBuf,
    /// The controller's own public key file.
    pub own_pub: PathBuf,
}

/// A [`Site`] in the temporary folder `name`.
pub fn site(name: &str) -> Site {
    let dir = common::tmp(name);
    let (keys, site) = bundle::keygen(&dir.join("keys/site"), false).unwrap();
    let (own, _) = bundle::keygen(&dir.join("keys/controller"), false).unwrap();
    let key = bundle::load_signing_key(&keys.secret).unwrap();
    let b = dir.join("bundle");
    bundle::pack_and_sign(&common::inputs(&model_path()), &key, &b).unwrap();
    Site {
        dir,
        bundle: b,
        site_pub: keys.public,
        site,
        own_key: own.secret,
        own_pub: own.public,
    }
}

/// A [`Site`] whose policy store adopted the trained policy as version 1.
pub struct StoreSite {
    /// The keys and the flashed bundle.
    pub keyed: Site,
    /// The store's folder.
    pub store: PathBuf,
    /// The controller's own signing key (it signs fine-tuned versions).
    pub own: ed25519_dalek::SigningKey,
}

/// A [`StoreSite`] in the temporary folder `name`.
pub fn store_site(name: &str) -> StoreSite {
    let keyed = site(name);
    let store = keyed.dir.join("store");
    PolicyStore::open(&store)
        .unwrap()
        .adopt(&keyed.bundle, &[keyed.site])
        .unwrap();
    StoreSite {
        store,
        own: bundle::load_signing_key(&keyed.own_key).unwrap(),
        keyed,
    }
}

impl StoreSite {
    /// Installs version `v` (parent `parent`) as an accepted fine-tune would be: the
    /// trained weights, or with `always_first` a policy that only ever asks for phase 0.
    pub fn install(&self, v: u32, parent: u32, always_first: bool) {
        let (mut w, mut m) = onnx::import(&std::fs::read(model_path()).unwrap()).unwrap();
        if always_first {
            w.actor.last_mut().unwrap().bias[0] += 1000.0;
        }
        m.policy_version = v;
        m.provenance.parent_version = Some(parent);
        PolicyStore::open(&self.store)
            .unwrap()
            .install(&w, &m, &self.own, &[self.keyed.site], "test")
            .unwrap();
    }
}

/// Flips one bit near the end of the bundle's `policy.onnx` in `version_dir`: its integrity
/// check fails (the signed hash no longer matches).
pub fn tamper(version_dir: &Path) {
    let model = version_dir.join("policy.onnx");
    let mut bytes = std::fs::read(&model).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 1;
    std::fs::write(&model, bytes).unwrap();
}
