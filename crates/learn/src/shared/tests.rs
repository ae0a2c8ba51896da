use super::*;
use crate::ppo::PolicyModel;
use proptest::prelude::*;
use rand::Rng;

fn random_layer(inputs: usize, outputs: usize, rng: &mut StdRng) -> DenseLayer {
    DenseLayer {
        inputs,
        outputs,
        weights: (0..inputs * outputs)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect(),
        bias: (0..outputs).map(|_| rng.random_range(-0.5..0.5)).collect(),
    }
}

/// Shared weights with every parameter random (not the near-zero initial policy head).
fn random_shared(h: usize, h2: usize, seed: u64) -> SharedWeights {
    let mut rng = StdRng::seed_from_u64(seed);
    let net = |rng: &mut StdRng| {
        vec![
            random_layer(LANE_FEATURES, h, rng),
            random_layer(h, h2, rng),
            random_layer(h2, 1, rng),
        ]
    };
    SharedWeights {
        norm: LaneNormalization {
            density: (0.2, 3.0),
            queue: (0.1, 5.0),
            clip: 10.0,
        },
        actor: net(&mut rng),
        critic: net(&mut rng),
    }
}

/// A random incidence where every phase serves at least one lane.
fn random_incidence(phases: usize, lanes: usize, rng: &mut StdRng) -> Incidence {
    let rows: Vec<Vec<bool>> = (0..phases)
        .map(|p| {
            (0..lanes)
                .map(|l| l % phases == p || rng.random_bool(0.3))
                .collect()
        })
        .collect();
    Incidence::new(&rows).unwrap()
}

/// A raw observation in layout v1: lane fractions, a one-hot target phase, flags.
fn random_obs(layout: ObsLayout, rng: &mut StdRng) -> Vec<f32> {
    let (l, p) = (layout.n_lanes as usize, layout.n_phases as usize);
    let mut o = vec![0.0; layout.dim()];
    for k in 0..l {
        o[k] = rng.random_range(0.0..1.5);
        o[l + k] = rng.random_range(0.0..=o[k]);
    }
    o[2 * l + rng.random_range(0..p)] = 1.0;
    o[2 * l + p] = rng.random_bool(0.3) as u8 as f32;
    o[2 * l + p + 1] = rng.random_bool(0.5) as u8 as f32;
    o[2 * l + p + 2] = rng.random_range(0.0..1.0);
    o
}

fn assert_close(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-5, "{what}: {a:?} vs {b:?}");
    }
}

/// Specialised MLP == shared forward, for one incidence, on `n` random observations.
fn check_specialised(shared: &SharedWeights, inc: &Incidence, n: usize, rng: &mut StdRng) {
    let w = specialize(shared, inc).unwrap();
    assert_eq!(w.obs_layout, inc.layout());
    assert_eq!(w.n_actions(), inc.n_phases());
    for _ in 0..n {
        let obs = random_obs(inc.layout(), rng);
        let (la, va) = shared.forward(inc, &obs);
        let (lb, vb) = w.forward(&obs);
        assert_close(&la, &lb, "logits");
        assert_close(&[va], &[vb], "value");
    }
}

#[test]
fn specialised_mlp_equals_the_shared_network_on_several_layouts() {
    let shared = random_shared(8, 5, 1);
    let mut rng = StdRng::seed_from_u64(2);
    for (lanes, phases) in [(12, 4), (8, 2), (6, 3), (1, 1), (16, 8)] {
        let inc = random_incidence(phases, lanes, &mut rng);
        check_specialised(&shared, &inc, 20, &mut rng);
    }
}

#[test]
fn the_prepared_forward_is_the_row_major_one_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(21);
    for (seed, (lanes, phases)) in [(12, 4), (8, 2), (6, 3), (1, 1), (16, 8)]
        .into_iter()
        .enumerate()
    {
        let shared = random_shared(16, 9, 30 + seed as u64);
        let prepared = SharedForward::new(&shared);
        let inc = random_incidence(phases, lanes, &mut rng);
        let pooling = inc.row_normalised();
        for _ in 0..20 {
            let raw = random_obs(inc.layout(), &mut rng);
            let mut x = vec![0.0; raw.len()];
            shared.norm.for_layout(inc.layout()).apply(&raw, &mut x);
            let (la, va) = prepared.forward_normalised(&inc, &pooling, &x);
            let (lb, vb) = reference::row_major_forward(&shared, &inc, &x);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&la),
                bits(&lb),
                "logits, {lanes} lanes × {phases} phases"
            );
            assert_eq!(
                va.to_bits(),
                vb.to_bits(),
                "value, {lanes} lanes × {phases} phases"
            );
        }
    }
}

#[test]
fn a_phase_serving_no_lane_and_a_lane_in_no_phase_compile_too() {
    let shared = random_shared(4, 3, 3);
    let inc = Incidence::new(&[
        vec![true, true, false],
        vec![false, false, false],
        vec![true, false, false],
    ])
    .unwrap();
    check_specialised(&shared, &inc, 10, &mut StdRng::seed_from_u64(4));
}

#[test]
fn candle_forward_equals_the_plain_forward() {
    let shared = random_shared(8, 5, 5);
    let dev = Device::Cpu;
    let net = SharedActorCritic::new(&[8, 5], 0, &dev).unwrap();
    net.actor.set_dense(&shared.actor).unwrap();
    net.critic.set_dense(&shared.critic).unwrap();
    let mut rng = StdRng::seed_from_u64(6);
    for (lanes, phases) in [(12, 4), (6, 3)] {
        let inc = random_incidence(phases, lanes, &mut rng);
        let layout = inc.layout();
        let norm = shared.norm.for_layout(layout);
        let raw: Vec<Vec<f32>> = (0..7).map(|_| random_obs(layout, &mut rng)).collect();
        let x: Vec<f32> = raw
            .iter()
            .flat_map(|o| {
                let mut x = vec![0.0; o.len()];
                norm.apply(o, &mut x);
                x
            })
            .collect();
        let obs = Tensor::from_vec(x, (7, layout.dim()), &dev).unwrap();
        let g = IncidenceTensors::new(&inc, &dev).unwrap();
        let (logits, values) = net.forward(&g, &obs).unwrap();
        let logits: Vec<Vec<f32>> = logits.to_vec2().unwrap();
        let values: Vec<f32> = values.to_vec1().unwrap();
        for (i, o) in raw.iter().enumerate() {
            let (l, v) = shared.forward(&inc, o);
            assert_close(&logits[i], &l, "candle logits");
            assert_close(&[values[i]], &[v], "candle value");
        }
    }
}

#[test]
fn lane_normalisation_compiles_per_feature_type() {
    let n = LaneNormalization {
        density: (0.5, 2.0),
        queue: (0.25, 4.0),
        clip: 10.0,
    };
    let o = n.for_layout(ObsLayout {
        n_lanes: 2,
        n_phases: 3,
    });
    assert_eq!(
        o.mean,
        vec![0.5, 0.5, 0.25, 0.25, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(
        o.inv_std,
        vec![2.0, 2.0, 4.0, 4.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    );
    let pairs = lane_pairs(
        &[0.1, 0.2, 0.3, 0.4, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        o_layout(),
    );
    assert_eq!(pairs, vec![0.1, 0.3, 0.2, 0.4]);
}

fn o_layout() -> ObsLayout {
    ObsLayout {
        n_lanes: 2,
        n_phases: 3,
    }
}

#[test]
fn bad_incidences_and_shapes_are_refused() {
    assert!(matches!(
        Incidence::new(&[]),
        Err(SharedError::Empty { .. })
    ));
    assert!(matches!(
        Incidence::new(&[vec![true, false], vec![true]]),
        Err(SharedError::Ragged { phase: 1, .. })
    ));
    let mut w = random_shared(4, 3, 7);
    w.actor.pop();
    let inc = Incidence::new(&[vec![true]]).unwrap();
    assert!(matches!(specialize(&w, &inc), Err(SharedError::Shape(_))));
    assert!(SharedActorCritic::new(&[64, 64, 64], 0, &Device::Cpu).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn specialised_equals_shared_for_any_incidence(
        phases in 1usize..6,
        lanes in 1usize..14,
        cells in proptest::collection::vec(any::<bool>(), 6 * 14),
        seed in any::<u64>(),
    ) {
        let rows: Vec<Vec<bool>> = (0..phases)
            .map(|p| (0..lanes).map(|l| cells[p * 14 + l]).collect())
            .collect();
        let inc = Incidence::new(&rows).unwrap();
        let shared = random_shared(6, 4, seed);
        check_specialised(&shared, &inc, 3, &mut StdRng::seed_from_u64(seed ^ 1));
    }
}

#[test]
fn compiled_critic_has_the_actors_hidden_widths() {
    let shared = random_shared(5, 3, 9);
    let inc = random_incidence(4, 7, &mut StdRng::seed_from_u64(10));
    let w = specialize(&shared, &inc).unwrap();
    let widths =
        |layers: &[DenseLayer]| -> Vec<usize> { layers.iter().map(|l| l.outputs).collect() };
    assert_eq!(widths(&w.actor), vec![7 * 5, 4 * 3, 4]);
    assert_eq!(widths(&w.critic), vec![7 * 5, 4 * 3, 1]);
    let mut bad = shared.clone();
    bad.critic = vec![
        random_layer(LANE_FEATURES, 2, &mut StdRng::seed_from_u64(1)),
        random_layer(2, 3, &mut StdRng::seed_from_u64(2)),
        random_layer(3, 1, &mut StdRng::seed_from_u64(3)),
    ];
    assert!(matches!(specialize(&bad, &inc), Err(SharedError::Shape(_))));
}

/// Three junction layouts (different lane and phase counts) and the shared network over
/// them, with every parameter random.
fn three_layouts(rng: &mut StdRng) -> (SharedWeights, SharedActorCritic, Vec<Incidence>) {
    let shared = random_shared(8, 5, 21);
    let net = SharedActorCritic::new(&[8, 5], 0, &Device::Cpu).unwrap();
    net.actor.set_dense(&shared.actor).unwrap();
    net.critic.set_dense(&shared.critic).unwrap();
    let incs = [(12, 4), (6, 3), (16, 2)]
        .iter()
        .map(|&(lanes, phases)| random_incidence(phases, lanes, rng))
        .collect();
    (shared, net, incs)
}

#[test]
fn the_packed_pass_equals_the_plain_forward_on_mixed_layouts() {
    let mut rng = StdRng::seed_from_u64(22);
    let (shared, net, incs) = three_layouts(&mut rng);
    let groups: Vec<IncidenceTensors> = incs
        .iter()
        .map(|i| IncidenceTensors::new(i, &Device::Cpu).unwrap())
        .collect();
    // Interleaved rows of every layout, normalised as the update sees them.
    let rows: Vec<(usize, Vec<f32>)> = (0..11)
        .map(|i| {
            let g = (i * 7) % incs.len();
            let layout = incs[g].layout();
            let raw = random_obs(layout, &mut rng);
            let mut x = vec![0.0; raw.len()];
            shared.norm.for_layout(layout).apply(&raw, &mut x);
            (g, x)
        })
        .collect();
    let borrowed: Vec<(usize, &[f32])> = rows.iter().map(|(g, x)| (*g, &x[..])).collect();
    let (logits, values) = net.forward_packed(&groups, &borrowed).unwrap();
    let logits: Vec<Vec<f32>> = logits.to_vec2().unwrap();
    let values: Vec<f32> = values.to_vec1().unwrap();
    assert_eq!(logits[0].len(), 4, "padded to the most phases");
    for (i, (g, x)) in rows.iter().enumerate() {
        let (l, v) = shared.forward_normalised(&incs[*g], x);
        assert_close(&logits[i][..l.len()], &l, "packed logits");
        assert_close(&[values[i]], &[v], "packed value");
    }
}

/// [`SharedGroups`] without its one-pass forward: the update goes group by group.
struct GroupByGroup<'a>(SharedGroups<'a>);

impl PolicyModel for GroupByGroup<'_> {
    fn vars(&self) -> Vec<Var> {
        self.0.vars()
    }

    fn device(&self) -> &Device {
        self.0.device()
    }

    fn forward_group(&self, group: usize, obs: &Tensor) -> CResult<(Tensor, Tensor)> {
        self.0.forward_group(group, obs)
    }
}

/// A PPO batch of `n` random decisions of a junction with incidence `inc`.
fn random_batch(inc: &Incidence, n: usize, rng: &mut StdRng) -> PpoBatch {
    let (layout, p) = (inc.layout(), inc.n_phases());
    let mut b = PpoBatch {
        obs_dim: layout.dim(),
        n_actions: p,
        ..Default::default()
    };
    for _ in 0..n {
        b.obs.extend(random_obs(layout, rng));
        let allowed: Vec<u8> = (0..p).map(|_| rng.random_bool(0.7) as u8).collect();
        let a = allowed.iter().position(|&m| m == 1).unwrap_or(0);
        b.masks.extend(
            allowed
                .iter()
                .enumerate()
                .map(|(q, &m)| m.max((q == a) as u8)),
        );
        b.actions.push(a as u32);
        b.old_log_probs.push(rng.random_range(-2.0..-0.1));
        b.old_values.push(rng.random_range(-1.0..1.0));
        let adv = rng.random_range(-1.0..1.0);
        b.advantages.push(adv);
        b.returns.push(adv + b.old_values.last().unwrap());
    }
    b
}

#[test]
fn an_update_over_mixed_layouts_is_the_same_packed_or_group_by_group() {
    let mut rng = StdRng::seed_from_u64(23);
    let (_, _, incs) = three_layouts(&mut rng);
    let batches: Vec<PpoBatch> = incs.iter().map(|i| random_batch(i, 40, &mut rng)).collect();
    let cfg = crate::ppo::PpoConfig {
        epochs: 3,
        minibatch: 16,
        ..Default::default()
    };
    let train = |packed: bool| -> (Vec<DenseLayer>, Vec<DenseLayer>, crate::ppo::UpdateStats) {
        let net = SharedActorCritic::new(&[8, 5], 9, &Device::Cpu).unwrap();
        let model = SharedGroups {
            net: &net,
            groups: incs
                .iter()
                .map(|i| IncidenceTensors::new(i, &Device::Cpu).unwrap())
                .collect(),
        };
        let mut opt = crate::nets::Adam::new(model.vars(), 1e-5).unwrap();
        let mut shuffle = StdRng::seed_from_u64(5);
        let st = if packed {
            crate::ppo::update_groups(&model, &mut opt, &batches, &cfg, 1e-2, &mut shuffle)
        } else {
            let model = GroupByGroup(model);
            crate::ppo::update_groups(&model, &mut opt, &batches, &cfg, 1e-2, &mut shuffle)
        }
        .unwrap();
        (
            net.actor.to_dense().unwrap(),
            net.critic.to_dense().unwrap(),
            st,
        )
    };
    let (pa, pc, ps) = train(true);
    let (ga, gc, gs) = train(false);
    assert_eq!(ps.minibatches, gs.minibatches);
    assert!(
        (ps.policy_loss - gs.policy_loss).abs() < 1e-4,
        "{ps:?} vs {gs:?}"
    );
    assert!(
        (ps.value_loss - gs.value_loss).abs() < 1e-4,
        "{ps:?} vs {gs:?}"
    );
    let init = SharedActorCritic::new(&[8, 5], 9, &Device::Cpu).unwrap();
    let before = init.actor.to_dense().unwrap();
    // Adam divides each step by the gradient's running spread, so a parameter whose true
    // gradient is 0 (the actor head's bias: softmax ignores a shift of every logit) moves
    // by rounding noise, differently on each path; 24 steps at 1e-2 move parameters by
    // up to about 0.2, so 2e-4 still tells a wrong pass from a reordered sum.
    let close = |a: &[f32], b: &[f32], what: &str| {
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= 2e-4, "{what}: {a:?} vs {b:?}");
        }
    };
    for (a, b) in pa.iter().chain(&pc).zip(ga.iter().chain(&gc)) {
        close(&a.weights, &b.weights, "weights after the update");
        close(&a.bias, &b.bias, "biases after the update");
    }
    // The update moved the parameters (the comparison is not between two no-ops).
    assert!(pa[0]
        .weights
        .iter()
        .zip(&before[0].weights)
        .any(|(x, y)| (x - y).abs() > 1e-3));
}

/// `(output, ∂W, ∂b)` of `Σ probe · pool(tanh(layer 0 (x)))`, fused or composed of
/// candle's ops.
fn lane_pool_grads(
    net: &SharedActorCritic,
    x: &Tensor,
    pooling: &Pooling,
    rows: usize,
    probe: &Tensor,
    fused: bool,
) -> [Vec<f32>; 3] {
    let p = Pooling {
        from: pooling.from.clone(),
        to: pooling.to.clone(),
        weight: pooling.weight.clone(),
    };
    let out = if fused {
        p.encode(&net.actor, x, rows).unwrap()
    } else {
        let enc = net.actor.layer(0, x).unwrap().apply(&Tanh).unwrap();
        p.apply(&enc, rows).unwrap()
    };
    let grads = (&out * probe)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let (w, b) = net.actor.layer_params(0).unwrap();
    let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let grad = |v: &Tensor| grads.get(v).map_or_else(|| vec![0.0; v.elem_count()], flat);
    [flat(&out), grad(w), grad(b)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn fused_lane_pooling_equals_the_candle_ops(
        lanes in 1usize..40,
        rows in 1usize..10,
        entries in 1usize..100,
        seed in any::<u64>(),
    ) {
        let dev = Device::Cpu;
        let mut rng = StdRng::seed_from_u64(seed);
        let net = SharedActorCritic::new(&[16, 8], seed, &dev).unwrap();
        let feats: Vec<f32> = (0..lanes * LANE_FEATURES)
            .map(|_| rng.random_range(-2.0..2.0))
            .collect();
        let x = Tensor::from_vec(feats, (lanes, LANE_FEATURES), &dev).unwrap();
        let mut pooling = Pooling::default();
        for _ in 0..entries {
            let (from, to) = (rng.random_range(0..lanes), rng.random_range(0..rows));
            pooling.push(from, to, rng.random_range(-1.0..1.0));
        }
        let probe: Vec<f32> = (0..rows * 16).map(|_| rng.random_range(-1.0..1.0)).collect();
        let probe = Tensor::from_vec(probe, (rows, 16), &dev).unwrap();
        let fused = lane_pool_grads(&net, &x, &pooling, rows, &probe, true);
        let plain = lane_pool_grads(&net, &x, &pooling, rows, &probe, false);
        for (what, (f, p)) in ["output", "∂W", "∂b"].iter().zip(fused.iter().zip(&plain)) {
            prop_assert_eq!(f.len(), p.len(), "{}", what);
            prop_assert!(p.iter().any(|v| v.abs() > 1e-4), "{} is all zero", what);
            for (a, b) in f.iter().zip(p) {
                prop_assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{}: {} vs {}", what, a, b);
            }
        }
    }
}

#[test]
fn lane_pooling_refuses_an_entry_outside_its_lanes() {
    let dev = Device::Cpu;
    let net = SharedActorCritic::new(&[16, 8], 3, &dev).unwrap();
    let x = Tensor::zeros((5, LANE_FEATURES), candle_core::DType::F32, &dev).unwrap();
    let (w, b) = net.actor.layer_params(0).unwrap();
    let outside = |from: u32, to: u32| LanePool {
        from: vec![from],
        to: vec![to],
        weight: vec![1.0],
        rows: 2,
        enc: Default::default(),
    };
    assert!(outside(5, 0).encode(&x, w, b).is_err(), "lane 5 of 5");
    assert!(outside(0, 2).encode(&x, w, b).is_err(), "row 2 of 2");
    assert!(outside(4, 1).encode(&x, w, b).is_ok());
    let mut ragged = outside(0, 0);
    ragged.weight.clear();
    assert!(
        ragged.encode(&x, w, b).is_err(),
        "an entry without a weight"
    );
}

#[test]
fn a_second_backward_through_one_fused_graph_gives_the_same_gradients() {
    // The op keeps its forward activations for the first backward; a second one
    // recomputes them.
    let dev = Device::Cpu;
    let net = SharedActorCritic::new(&[16, 8], 4, &dev).unwrap();
    let feats: Vec<f32> = (0..7 * LANE_FEATURES)
        .map(|i| (i as f32 * 0.37).sin())
        .collect();
    let x = Tensor::from_vec(feats, (7, LANE_FEATURES), &dev).unwrap();
    let mut pooling = Pooling::default();
    for (from, to) in [(0, 0), (3, 0), (6, 1), (2, 2)] {
        pooling.push(from, to, 0.5);
    }
    let loss = pooling
        .encode(&net.actor, &x, 3)
        .unwrap()
        .sqr()
        .unwrap()
        .sum_all()
        .unwrap();
    let (w, _) = net.actor.layer_params(0).unwrap();
    let grad = |g: candle_core::backprop::GradStore| -> Vec<f32> {
        g.get(w).unwrap().flatten_all().unwrap().to_vec1().unwrap()
    };
    let first = grad(loss.backward().unwrap());
    let second = grad(loss.backward().unwrap());
    assert!(first.iter().any(|v| v.abs() > 1e-4));
    assert_eq!(first, second);
}
