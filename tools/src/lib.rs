//! # greenwave-tools
//!
//! The workstation side of greenwave, as a library behind the `greenwave` binary:
//! training runs, export, evaluation.

pub mod backend;
pub mod bundle_cmd;
pub mod demo;
pub mod eval_cmd;
pub mod export_cmd;
pub mod policy_controller;
pub mod sampling;
pub mod site_cmd;
pub mod train;
