//! Writing and reading policies as ONNX.
//!
//! The graph (opset 17, IR 8, written with the prost types tract ships, so no `protoc`):
//!
//! ```text
//! obs[batch, D] ─Sub(obs_mean)─Mul(obs_inv_std)─Clip(−c, c)─┬─ actor: (Gemm─Tanh)*─Gemm ─ logits[batch, A]
//!                                                           └─ critic: (Gemm─Tanh)*─Gemm ─ value[batch, 1]
//! ```
//!
//! Normalisation is in the graph, so runtimes feed raw observations. Gemm weights are
//! stored `[out, in]` with `transB = 1`, the same layout as the dense layers, so import is a
//! plain copy. The [`Manifest`] is JSON under `metadata_props["greenwave.manifest"]`.

use greenwave_core::mlp::DenseLayer;
use greenwave_core::ObsLayout;
use prost::Message;
use tract_onnx::pb;

use crate::manifest::{Manifest, MANIFEST_KEY};
use crate::weights::{ObsNormalization, PolicyWeights};

/// ONNX opset the exporter writes.
pub const OPSET: i64 = 17;
/// ONNX IR version the exporter writes (the one tract's proto knows).
pub const IR_VERSION: i64 = 8;

/// Why a model could not be read.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    /// Not a protobuf ModelProto.
    #[error("not an ONNX model: {0}")]
    Decode(#[from] prost::DecodeError),
    /// No graph.
    #[error("ONNX model has no graph")]
    NoGraph,
    /// No manifest in metadata_props.
    #[error("ONNX model has no '{MANIFEST_KEY}' entry in metadata_props: not a greenwave policy")]
    NoManifest,
    /// Manifest JSON is malformed.
    #[error("manifest JSON is invalid: {0}")]
    Manifest(#[from] serde_json::Error),
    /// A weight tensor is missing.
    #[error("initializer '{0}' is missing")]
    MissingInitializer(String),
    /// A weight tensor has the wrong shape or type.
    #[error("initializer '{name}': {problem}")]
    BadInitializer {
        /// Its name.
        name: String,
        /// What is wrong.
        problem: String,
    },
    /// The graph is not the one greenwave's export writes for the model's weights.
    #[error(
        "the model's {0} differ from the graph greenwave exports for its weights (another \
         writer, or an edited model): tract and ONNX Runtime would run another function than \
         the firmware blobs; export the policy again"
    )]
    NotExportedGraph(&'static str),
}

fn tensor(name: &str, dims: &[usize], data: &[f32]) -> pb::TensorProto {
    pb::TensorProto {
        name: name.into(),
        dims: dims.iter().map(|&d| d as i64).collect(),
        data_type: pb::tensor_proto::DataType::Float as i32,
        raw_data: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ..Default::default()
    }
}

fn node(
    op: &str,
    name: &str,
    inputs: &[&str],
    output: &str,
    attrs: Vec<pb::AttributeProto>,
) -> pb::NodeProto {
    pb::NodeProto {
        op_type: op.into(),
        name: name.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        attribute: attrs,
        ..Default::default()
    }
}

fn int_attr(name: &str, v: i64) -> pb::AttributeProto {
    pb::AttributeProto {
        name: name.into(),
        r#type: pb::attribute_proto::AttributeType::Int as i32,
        i: v,
        ..Default::default()
    }
}

fn value_info(name: &str, width: usize) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{dimension::Value, Dimension};
    let dim = |v: Value| Dimension {
        value: Some(v),
        ..Default::default()
    };
    pb::ValueInfoProto {
        name: name.into(),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: pb::tensor_proto::DataType::Float as i32,
                shape: Some(pb::TensorShapeProto {
                    dim: vec![
                        dim(Value::DimParam("batch".into())),
                        dim(Value::DimValue(width as i64)),
                    ],
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Appends one MLP head's nodes and initializers; returns nothing, the head's output is
/// named `output`.
fn mlp_head(
    prefix: &str,
    layers: &[DenseLayer],
    input: &str,
    output: &str,
    nodes: &mut Vec<pb::NodeProto>,
    inits: &mut Vec<pb::TensorProto>,
) {
    let mut cur = input.to_string();
    for (i, l) in layers.iter().enumerate() {
        let (w, b) = (format!("{prefix}.{i}.weight"), format!("{prefix}.{i}.bias"));
        inits.push(tensor(&w, &[l.outputs, l.inputs], &l.weights));
        inits.push(tensor(&b, &[l.outputs], &l.bias));
        let last = i + 1 == layers.len();
        let gemm_out = if last {
            output.to_string()
        } else {
            format!("{prefix}.{i}.gemm")
        };
        nodes.push(node(
            "Gemm",
            &format!("{prefix}.{i}.Gemm"),
            &[&cur, &w, &b],
            &gemm_out,
            vec![int_attr("transB", 1)],
        ));
        if last {
            break;
        }
        let act = format!("{prefix}.{i}.tanh");
        nodes.push(node(
            "Tanh",
            &format!("{prefix}.{i}.Tanh"),
            &[&gemm_out],
            &act,
            vec![],
        ));
        cur = act;
    }
}

/// Serialises a policy and its manifest as an ONNX model.
pub fn export(weights: &PolicyWeights, manifest: &Manifest) -> Vec<u8> {
    let d = weights.obs_dim();
    let mut inits = vec![
        tensor("obs_mean", &[d], &weights.norm.mean),
        tensor("obs_inv_std", &[d], &weights.norm.inv_std),
        tensor("obs_clip_min", &[], &[-weights.norm.clip]),
        tensor("obs_clip_max", &[], &[weights.norm.clip]),
    ];
    let mut nodes = vec![
        node(
            "Sub",
            "norm.Sub",
            &["obs", "obs_mean"],
            "obs_centered",
            vec![],
        ),
        node(
            "Mul",
            "norm.Mul",
            &["obs_centered", "obs_inv_std"],
            "obs_scaled",
            vec![],
        ),
        node(
            "Clip",
            "norm.Clip",
            &["obs_scaled", "obs_clip_min", "obs_clip_max"],
            "obs_norm",
            vec![],
        ),
    ];
    mlp_head(
        "actor",
        &weights.actor,
        "obs_norm",
        "logits",
        &mut nodes,
        &mut inits,
    );
    mlp_head(
        "critic",
        &weights.critic,
        "obs_norm",
        "value",
        &mut nodes,
        &mut inits,
    );
    let model = pb::ModelProto {
        ir_version: IR_VERSION,
        opset_import: vec![pb::OperatorSetIdProto {
            domain: String::new(),
            version: OPSET,
        }],
        producer_name: "greenwave".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        model_version: manifest.policy_version as i64,
        doc_string: "greenwave traffic-signal policy: obs -> (logits, value)".into(),
        graph: Some(pb::GraphProto {
            name: "greenwave_policy".into(),
            node: nodes,
            initializer: inits,
            input: vec![value_info("obs", d)],
            output: vec![
                value_info("logits", weights.n_actions()),
                value_info("value", 1),
            ],
            ..Default::default()
        }),
        metadata_props: vec![pb::StringStringEntryProto {
            key: MANIFEST_KEY.into(),
            value: serde_json::to_string(manifest).expect("manifest serialises"),
        }],
        ..Default::default()
    };
    model.encode_to_vec()
}

/// Reads only the manifest of an ONNX model.
pub fn read_manifest(bytes: &[u8]) -> Result<Manifest, OnnxError> {
    let model = pb::ModelProto::decode(bytes)?;
    manifest_of(&model)
}

fn manifest_of(model: &pb::ModelProto) -> Result<Manifest, OnnxError> {
    let entry = model
        .metadata_props
        .iter()
        .find(|e| e.key == MANIFEST_KEY)
        .ok_or(OnnxError::NoManifest)?;
    Ok(serde_json::from_str(&entry.value)?)
}

fn read_tensor(graph: &pb::GraphProto, name: &str, dims: &[usize]) -> Result<Vec<f32>, OnnxError> {
    let t = graph
        .initializer
        .iter()
        .find(|t| t.name == name)
        .ok_or_else(|| OnnxError::MissingInitializer(name.into()))?;
    let bad = |problem: String| OnnxError::BadInitializer {
        name: name.into(),
        problem,
    };
    if t.data_type != pb::tensor_proto::DataType::Float as i32 {
        return Err(bad(format!("data type {} is not float", t.data_type)));
    }
    let want: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    if t.dims != want {
        return Err(bad(format!("shape {:?}, expected {:?}", t.dims, want)));
    }
    let n = dims
        .iter()
        .try_fold(1usize, |n, &d| {
            n.checked_mul(d).filter(|&n| n <= usize::MAX / 4)
        })
        .ok_or_else(|| bad(format!("shape {:?} is too large", t.dims)))?;
    let data: Vec<f32> = if !t.raw_data.is_empty() {
        if t.raw_data.len() != 4 * n {
            return Err(bad(format!(
                "{} raw bytes, expected {}",
                t.raw_data.len(),
                4 * n
            )));
        }
        raw_floats(&t.raw_data).collect()
    } else {
        if t.float_data.len() != n {
            return Err(bad(format!("{} floats, expected {n}", t.float_data.len())));
        }
        t.float_data.clone()
    };
    if let Some(i) = data.iter().position(|v| !v.is_finite()) {
        return Err(bad(format!("element {i} is not finite")));
    }
    Ok(data)
}

/// The floats of a tensor's `raw_data` (little-endian, 4 bytes each).
fn raw_floats(raw: &[u8]) -> impl Iterator<Item = f32> + '_ {
    raw.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

fn read_head(
    graph: &pb::GraphProto,
    prefix: &str,
    input: usize,
    widths: &[usize],
) -> Result<Vec<DenseLayer>, OnnxError> {
    let mut layers = Vec::new();
    let mut n_in = input;
    for (i, &n_out) in widths.iter().enumerate() {
        layers.push(DenseLayer {
            inputs: n_in,
            outputs: n_out,
            weights: read_tensor(graph, &format!("{prefix}.{i}.weight"), &[n_out, n_in])?,
            bias: read_tensor(graph, &format!("{prefix}.{i}.bias"), &[n_out])?,
        });
        n_in = n_out;
    }
    Ok(layers)
}

/// Checks that every float initialiser of an ONNX model holds finite numbers only: a
/// policy with a NaN or infinite weight is corrupt, whatever graph it has (per-signal MLP or
/// shared network), even where a runtime's output does not show it (a bad-input sweep saw
/// tract run one with finite logits where ONNX Runtime gives NaN; why was not traced).
/// The first bad element is named.
pub fn check_finite(bytes: &[u8]) -> Result<(), OnnxError> {
    let model = pb::ModelProto::decode(bytes)?;
    let graph = model.graph.as_ref().ok_or(OnnxError::NoGraph)?;
    let float = pb::tensor_proto::DataType::Float as i32;
    for t in graph.initializer.iter().filter(|t| t.data_type == float) {
        let values = raw_floats(&t.raw_data).chain(t.float_data.iter().copied());
        if let Some(i) = values
            .enumerate()
            .find_map(|(i, v)| (!v.is_finite()).then_some(i))
        {
            return Err(OnnxError::BadInitializer {
                name: t.name.clone(),
                problem: format!("element {i} is not finite"),
            });
        }
    }
    Ok(())
}

/// Reads a greenwave policy (weights from the initialisers, and the manifest) from ONNX.
pub fn import(bytes: &[u8]) -> Result<(PolicyWeights, Manifest), OnnxError> {
    let model = pb::ModelProto::decode(bytes)?;
    let manifest = manifest_of(&model)?;
    let graph = model.graph.as_ref().ok_or(OnnxError::NoGraph)?;
    let layout: ObsLayout = manifest.obs_layout;
    let d = layout.dim();
    let clip = read_tensor(graph, "obs_clip_max", &[])?[0];
    if !(clip.is_finite() && clip > 0.0) {
        return Err(OnnxError::BadInitializer {
            name: "obs_clip_max".into(),
            problem: format!("{clip} is not a positive finite bound"),
        });
    }
    let clip_min = read_tensor(graph, "obs_clip_min", &[])?[0];
    if clip_min != -clip {
        return Err(OnnxError::BadInitializer {
            name: "obs_clip_min".into(),
            problem: format!("{clip_min} is not -obs_clip_max ({})", -clip),
        });
    }
    let norm = ObsNormalization {
        mean: read_tensor(graph, "obs_mean", &[d])?,
        inv_std: read_tensor(graph, "obs_inv_std", &[d])?,
        clip,
    };
    let mut actor_w = manifest.hidden.clone();
    actor_w.push(layout.n_phases as usize);
    let mut critic_w = manifest.hidden.clone();
    critic_w.push(1);
    let weights = PolicyWeights {
        obs_layout: layout,
        norm,
        actor: read_head(graph, "actor", d, &actor_w)?,
        critic: read_head(graph, "critic", d, &critic_w)?,
    };
    check_graph_is_exported(&model, &weights, &manifest)?;
    Ok((weights, manifest))
}

/// Refuses a model whose graph is not the one [`export`] writes for its weights. tract and
/// ONNX Runtime run the graph; the matvec backend and the firmware blobs run the weights
/// [`import`] reads. Another graph (another activation, an extra node, a value-info of its
/// own, another opset) would have the backends compute different functions of one signed
/// model. The initialisers' values are the weights themselves (read above); here their
/// names, shapes and types are compared, with the nodes, inputs, outputs and opset.
fn check_graph_is_exported(
    model: &pb::ModelProto,
    weights: &PolicyWeights,
    manifest: &Manifest,
) -> Result<(), OnnxError> {
    let expected = pb::ModelProto::decode(export(weights, manifest).as_slice())?;
    let (Some(got), Some(want)) = (model.graph.as_ref(), expected.graph.as_ref()) else {
        return Err(OnnxError::NoGraph);
    };
    let shape = |g: &pb::GraphProto| -> Vec<(String, Vec<i64>, i32)> {
        g.initializer
            .iter()
            .map(|t| (t.name.clone(), t.dims.clone(), t.data_type))
            .collect()
    };
    let checks: [(&'static str, bool); 6] = [
        ("nodes", got.node == want.node),
        ("inputs", got.input == want.input),
        ("outputs", got.output == want.output),
        (
            "value infos or sparse initializers",
            got.value_info.is_empty() && got.sparse_initializer.is_empty(),
        ),
        ("initializers", shape(got) == shape(want)),
        (
            "opset or IR version",
            model.opset_import == expected.opset_import && model.ir_version == expected.ir_version,
        ),
    ];
    match checks.iter().find(|(_, same)| !same) {
        Some(&(what, _)) => Err(OnnxError::NotExportedGraph(what)),
        None => Ok(()),
    }
}

/// Replaces the weights and manifest of an exported model, keeping the same graph.
pub fn reexport(weights: &PolicyWeights, manifest: &Manifest) -> Vec<u8> {
    // The graph is a pure function of the layer shapes, so writing it again from the new
    // weights yields the same graph with new initialisers.
    export(weights, manifest)
}

#[cfg(test)]
pub(crate) mod tests {
    use greenwave_core::{Millis, PhasePlan, PhaseTiming};

    use super::*;
    use crate::manifest::Provenance;

    fn layer(inputs: usize, outputs: usize) -> DenseLayer {
        DenseLayer {
            inputs,
            outputs,
            weights: (0..inputs * outputs).map(|i| 0.01 * i as f32).collect(),
            bias: vec![0.1; outputs],
        }
    }

    /// A small policy of the four-arm plan, and its manifest.
    pub(crate) fn model() -> (PolicyWeights, Manifest) {
        let plan = PhasePlan::four_arm_protected_left(PhaseTiming::from_secs(5, 40, 3, 2)).unwrap();
        let layout = ObsLayout {
            n_lanes: 12,
            n_phases: 4,
        };
        let d = layout.dim();
        let weights = PolicyWeights {
            obs_layout: layout,
            norm: ObsNormalization::identity(d, 5.0),
            actor: vec![layer(d, 8), layer(8, 4)],
            critic: vec![layer(d, 8), layer(8, 1)],
        };
        let manifest = Manifest::new(
            &plan,
            layout,
            Millis::from_secs(5),
            vec![8],
            Provenance::default(),
        );
        (weights, manifest)
    }

    /// `export`'s model with `edit` applied to its protobuf.
    fn edited(
        edit: impl FnOnce(&mut pb::ModelProto),
    ) -> Result<(PolicyWeights, Manifest), OnnxError> {
        let (w, m) = model();
        let mut proto = pb::ModelProto::decode(export(&w, &m).as_slice()).unwrap();
        edit(&mut proto);
        import(&proto.encode_to_vec())
    }

    fn init<'a>(p: &'a mut pb::ModelProto, name: &str) -> &'a mut pb::TensorProto {
        let g = p.graph.as_mut().unwrap();
        g.initializer.iter_mut().find(|t| t.name == name).unwrap()
    }

    #[test]
    fn an_exported_model_reads_back() {
        let (w, m) = model();
        assert_eq!(import(&export(&w, &m)).unwrap(), (w, m));
    }

    /// A clip bound `f32::clamp` would panic on, or one the graph's `Clip` does not share
    /// with the weights, is refused by name.
    #[test]
    fn clip_bounds_that_are_not_a_symmetric_positive_pair_are_refused() {
        for bad in [-5.0f32, 0.0, f32::NAN] {
            let err = edited(|p| init(p, "obs_clip_max").raw_data = bad.to_le_bytes().to_vec())
                .unwrap_err();
            assert!(err.to_string().contains("obs_clip_max"), "{bad}: {err}");
        }
        let err = edited(|p| init(p, "obs_clip_min").raw_data = (-4.0f32).to_le_bytes().to_vec())
            .unwrap_err();
        assert!(err.to_string().contains("obs_clip_min"), "{err}");
    }

    /// tract and ONNX Runtime run the graph, the blobs the weights: any graph other than
    /// export's is refused, naming the part that differs.
    #[test]
    fn a_graph_edited_after_export_is_refused() {
        type Edit = Box<dyn FnOnce(&mut pb::ModelProto)>;
        let cases: [(&str, Edit); 5] = [
            (
                "nodes",
                Box::new(|p| {
                    let g = p.graph.as_mut().unwrap();
                    let tanh = g.node.iter_mut().find(|n| n.op_type == "Tanh").unwrap();
                    tanh.op_type = "Relu".into();
                }),
            ),
            (
                "outputs",
                Box::new(|p| p.graph.as_mut().unwrap().output.reverse()),
            ),
            (
                "value infos",
                Box::new(|p| {
                    let g = p.graph.as_mut().unwrap();
                    let extra = g.output[0].clone();
                    g.value_info.push(extra);
                }),
            ),
            (
                "initializers",
                Box::new(|p| {
                    let extra = init(p, "obs_mean").clone();
                    let g = p.graph.as_mut().unwrap();
                    g.initializer.push(pb::TensorProto {
                        name: "spare".into(),
                        ..extra
                    });
                }),
            ),
            ("opset", Box::new(|p| p.opset_import[0].version = 13)),
        ];
        for (what, edit) in cases {
            let err = edited(edit).unwrap_err();
            assert!(
                matches!(err, OnnxError::NotExportedGraph(w) if w.contains(what)),
                "{what}: {err}"
            );
        }
    }
}
