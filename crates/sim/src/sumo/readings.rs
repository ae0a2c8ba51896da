//! What the backend reads from SUMO after every decision interval, and how.
//!
//! Per incoming (stop-line) lane: vehicles, halting vehicles, mean speed, and the stop-line
//! loop's time since detection; per lane of an approach zone upstream of it the same
//! without a loop; per outgoing lane: vehicles; and SUMO's clock. (The vehicles' waiting
//! times come from a context subscription instead, see [`super::waits`].)
//! Either as batched getters sent right behind the step (default) or as TraCI
//! subscriptions; both cost one round trip per decision interval.

use std::collections::HashMap;

use super::traci::{cmd, var, Message, Reply, SubscriptionResult, Value};

/// Prefix of the stop-line induction loops the backend adds on every observed lane.
pub(crate) const LOOP_PREFIX: &str = "gw_e1_";

/// How readings travel from SUMO.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadMode {
    /// One message of getters, pipelined behind each decision's last `simulationStep`:
    /// SUMO evaluates them once per decision. The default: on the single-intersection
    /// fixture it cost SUMO 9 ms per 1800 s against 34 ms for subscriptions, which SUMO
    /// evaluates at every simulation step (BENCHMARKS.md, "SUMO backend").
    #[default]
    Getters,
    /// TraCI variable subscriptions, delivered with each `simulationStep` reply.
    Subscriptions,
}

/// What the backend reads of a lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LaneRole {
    /// An outgoing lane: vehicles.
    Outgoing,
    /// A lane of an approach zone upstream of a stop-line lane: vehicles, halting vehicles,
    /// mean speed.
    Approach,
    /// An incoming (stop-line) lane: as `Approach`, plus its stop-line loop.
    StopLine,
}

/// Where one value goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Vehicles on lane `i`.
    Vehicles(usize),
    /// Halting vehicles on lane `i`.
    Halting(usize),
    /// Mean speed of the vehicles on lane `i` (m/s; the speed limit when empty).
    MeanSpeed(usize),
    /// Seconds since lane `i`'s loop last saw a vehicle.
    SinceDetection(usize),
    /// The vehicles waiting to be inserted on edge `e` (ids).
    Pending(usize),
    /// SUMO's clock.
    Time,
}

/// SUMO's answer carrying the readings.
pub(crate) enum Answer<'a> {
    /// Subscription results from a step reply.
    Subscriptions(&'a [SubscriptionResult]),
    /// The replies to [`ReadPlan::get_message`].
    Gets(&'a [Reply]),
}

/// One object read: its getter command, id and variables.
struct Object {
    get: u8,
    id: String,
    vars: Vec<(u8, Slot)>,
}

/// The reads of one network, prepared once.
pub(crate) struct ReadPlan {
    objects: Vec<Object>,
    /// (subscription response id, object id) -> index in `objects`.
    by_response: HashMap<(u8, String), usize>,
    gets: Message,
    get_slots: Vec<Slot>,
}

impl ReadPlan {
    /// A plan for `lanes`: `(id, role)`, index = lane index; and for the vehicles waiting
    /// to be inserted on `pending_edges`, index = edge index.
    pub(crate) fn new<'a>(
        lanes: impl Iterator<Item = (&'a str, LaneRole)>,
        pending_edges: &[String],
    ) -> Self {
        let mut objects = Vec::new();
        for (e, id) in pending_edges.iter().enumerate() {
            objects.push(Object {
                get: cmd::GET_EDGE,
                id: id.clone(),
                vars: vec![(var::PENDING_VEHICLES, Slot::Pending(e))],
            });
        }
        for (i, (id, role)) in lanes.enumerate() {
            if role >= LaneRole::Approach {
                objects.push(Object {
                    get: cmd::GET_LANE,
                    id: id.to_string(),
                    vars: vec![
                        (var::LAST_STEP_VEHICLE_NUMBER, Slot::Vehicles(i)),
                        (var::LAST_STEP_HALTING_NUMBER, Slot::Halting(i)),
                        (var::LAST_STEP_MEAN_SPEED, Slot::MeanSpeed(i)),
                    ],
                });
            }
            if role == LaneRole::StopLine {
                objects.push(Object {
                    get: cmd::GET_INDUCTION_LOOP,
                    id: format!("{LOOP_PREFIX}{id}"),
                    vars: vec![(var::LAST_STEP_TIME_SINCE_DETECTION, Slot::SinceDetection(i))],
                });
            }
            if role == LaneRole::Outgoing {
                objects.push(Object {
                    get: cmd::GET_LANE,
                    id: id.to_string(),
                    vars: vec![(var::LAST_STEP_VEHICLE_NUMBER, Slot::Vehicles(i))],
                });
            }
        }
        objects.push(Object {
            get: cmd::GET_SIM,
            id: String::new(),
            vars: vec![(var::SIM_TIME, Slot::Time)],
        });
        let mut gets = Message::new();
        let mut get_slots = Vec::new();
        let mut by_response = HashMap::new();
        for (k, o) in objects.iter().enumerate() {
            for &(v, slot) in &o.vars {
                gets.get(o.get, v, &o.id);
                get_slots.push(slot);
            }
            by_response.insert((cmd::subscription_response(o.get), o.id.clone()), k);
        }
        ReadPlan {
            objects,
            by_response,
            gets,
            get_slots,
        }
    }

    /// The message subscribing to every reading.
    pub(crate) fn subscribe_message(&self) -> Message {
        let mut m = Message::new();
        for o in &self.objects {
            let vars: Vec<u8> = o.vars.iter().map(|v| v.0).collect();
            m.subscribe(cmd::subscribe_of(o.get), &o.id, &vars);
        }
        m
    }

    /// The message getting every reading.
    pub(crate) fn get_message(&self) -> &Message {
        &self.gets
    }

    /// Stores every reading of `answer` through `store`.
    pub(crate) fn apply(
        &self,
        answer: Answer<'_>,
        store: impl FnMut(Slot, &Value) -> Result<(), String>,
    ) -> Result<(), String> {
        match answer {
            Answer::Subscriptions(subs) => self.apply_subscriptions(subs, store),
            Answer::Gets(replies) => self.apply_gets(replies, store),
        }
    }

    fn apply_subscriptions(
        &self,
        subs: &[SubscriptionResult],
        mut store: impl FnMut(Slot, &Value) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for s in subs {
            let key = (s.response, s.object.clone());
            let Some(&k) = self.by_response.get(&key) else {
                return Err(format!(
                    "subscription results for unknown object {} (0x{:02x})",
                    s.object, s.response
                ));
            };
            seen.insert(key);
            for (v, value) in &s.values {
                let slot = self.objects[k]
                    .vars
                    .iter()
                    .find(|x| x.0 == *v)
                    .map(|x| x.1)
                    .ok_or_else(|| format!("unrequested variable 0x{v:02x} of {}", s.object))?;
                store(slot, value).map_err(|e| format!("{}: {e}", s.object))?;
            }
        }
        // An object SUMO stopped answering for would keep its last interval's readings.
        match self.by_response.keys().find(|key| !seen.contains(*key)) {
            Some((_, id)) => Err(format!(
                "no subscription results for `{id}` ({} of the {} subscribed objects answered)",
                seen.len(),
                self.by_response.len()
            )),
            None => Ok(()),
        }
    }

    fn apply_gets(
        &self,
        replies: &[Reply],
        mut store: impl FnMut(Slot, &Value) -> Result<(), String>,
    ) -> Result<(), String> {
        if replies.len() != self.get_slots.len() {
            return Err(format!(
                "{} replies to {} reads",
                replies.len(),
                self.get_slots.len()
            ));
        }
        for (r, &slot) in replies.iter().zip(&self.get_slots) {
            match r {
                Reply::Value(v) => store(slot, v)?,
                other => return Err(format!("unexpected reply to a read: {other:?}")),
            }
        }
        Ok(())
    }
}

/// A finite number, or an error naming `what`.
pub(crate) fn number(v: &Value, what: &str) -> Result<f64, String> {
    v.as_f64()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("non-numeric value {v:?} for {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step whose subscription results leave out an object (SUMO stopped answering for
    /// it) is an error naming it, not a lane keeping last interval's readings.
    #[test]
    fn an_object_missing_from_a_steps_results_is_an_error() {
        let lanes = [("in_0", LaneRole::StopLine), ("out_0", LaneRole::Outgoing)];
        let plan = ReadPlan::new(lanes.into_iter(), &[]);
        let result = |o: &Object| SubscriptionResult {
            response: cmd::subscription_response(o.get),
            object: o.id.clone(),
            domain: 0,
            values: o
                .vars
                .iter()
                .map(|&(v, _)| (v, Value::Double(1.0)))
                .collect(),
            context: Vec::new(),
        };
        let all: Vec<SubscriptionResult> = plan.objects.iter().map(result).collect();
        let ok = plan.apply(Answer::Subscriptions(&all), |_, _| Ok(()));
        assert_eq!(ok, Ok(()));
        let missing: Vec<SubscriptionResult> = all
            .iter()
            .filter(|s| s.object != "out_0")
            .cloned()
            .collect();
        let err = plan
            .apply(Answer::Subscriptions(&missing), |_, _| Ok(()))
            .unwrap_err();
        assert!(err.contains("`out_0`"), "{err}");
    }
}
