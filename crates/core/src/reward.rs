//! Reward definitions, per signal and per decision interval.
//!
//! Scales are fixed so that typical per-decision rewards are of order 1, which keeps PPO's
//! value targets well conditioned without per-run reward normalisation.

use serde::{Deserialize, Serialize};

/// What the simulator measures at one signal at a decision point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RewardInputs {
    /// Accumulated waiting time (s) of the vehicles now on the incoming lanes.
    pub total_wait_s: f32,
    /// Delay (s) of the vehicles now on the incoming lanes: each one's time lost against
    /// driving at its desired speed so far (SUMO's `timeLoss`: halted, crawling, braking
    /// and accelerating all count) plus the time it waited to enter the network.
    pub total_delay_s: f32,
    /// Halted vehicles on the incoming lanes.
    pub queue_veh: f32,
    /// Vehicles on incoming lanes minus vehicles on outgoing lanes.
    pub pressure_veh: f32,
    /// The incoming vehicles' delay rate: the sum over them of `1 − speed / speed limit`
    /// (a halted vehicle counts 1, one at the limit 0), in vehicle-seconds of delay per
    /// second.
    pub delay_veh: f32,
    /// Delay (s) the vehicles near the signal lost during the interval just ended: on its
    /// approaches (as in `total_delay_s`), crossing it, and on its exits until they are
    /// up to speed, each vehicle's time loss gained since the last decision point, plus
    /// (on SUMO, where `total_delay_s` counts them too) the interval for each vehicle
    /// waiting to enter on its approaches' edges. A vehicle's loss is counted while it is
    /// near and never credited back as it leaves. On SUMO it also holds, weighted
    /// ([`RewardKind::PEDESTRIAN_WEIGHT_DEFAULT`] unless set), the waiting time the
    /// pedestrians on the signal's walking areas and crossings gained in the interval.
    pub accrued_delay_s: f32,
}

/// Which reward a signal is trained on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RewardKind {
    /// Decrease in accumulated waiting time since the last decision, per 100 s.
    #[default]
    WaitDelta,
    /// Minus the number of halted vehicles, per 10 vehicles.
    Queue,
    /// Minus the absolute pressure, per 10 vehicles.
    Pressure,
    /// Minus the incoming vehicles' delay rate, per 10 vehicles: every vehicle slower
    /// than its speed limit counts, crawling ones too, so stop-and-go service that keeps
    /// queues creeping does not pass for short waits.
    Delay,
    /// Decrease in the incoming vehicles' delay (time loss plus insertion wait) since the
    /// last decision, per 100 s: [`RewardKind::WaitDelta`] with every second a vehicle
    /// loses counted, not only those it stands still, so it pays for the stops, slow
    /// starts and crawling queues that frequent switching causes — what mean trip delay
    /// measures.
    DelayDelta,
    /// Minus the delay the signal's vehicles lost during the interval, per 100 s
    /// ([`RewardInputs::accrued_delay_s`]): every second of loss costs the same wherever
    /// in its approach a vehicle loses it. [`RewardKind::DelayDelta`] charges a second of
    /// loss by how long the vehicle then stays on the approach (its credit comes when it
    /// leaves), so the braking and pulling away of a stop next to the stop line, and
    /// the pulling away past it, cost it almost nothing: a policy trained on it stops
    /// vehicles more often than needed.
    DelayAccrued,
    /// [`RewardKind::DelayAccrued`] plus [`RewardKind::DelayDelta`]: every second of loss
    /// charged as it is lost, and the approach's stock of delay charged by its change,
    /// so a queue whose vehicles have waited long pays back at once, in full, as it
    /// discharges. DelayAccrued alone lets a movement starve near saturation (a starved
    /// queue costs only as fast as it grows); DelayDelta alone lets stops next to the
    /// stop line go almost free.
    DelayAccruedDelta,
}

impl RewardKind {
    /// The reward training on a SUMO net optimises unless told otherwise — the one place
    /// that default is written (`greenwave train --backend sumo`, the Python environments
    /// and greenwave-sim's `SumoConfig::new` all read it). Chosen by measurement on the
    /// 17 development nets: tools/README.md, "Training on real networks", findings 18–19.
    pub const SUMO_DEFAULT: RewardKind = RewardKind::DelayAccruedDelta;

    /// What a second a pedestrian stands at a signal's crossings costs in the
    /// delay-accrued rewards, against a second of delay a vehicle loses, unless told
    /// otherwise: a person's second counts as a vehicle's (the one place this default is
    /// written; tools/README.md, "Training on real networks", finding 35).
    pub const PEDESTRIAN_WEIGHT_DEFAULT: f32 = 1.0;

    /// Every reward, in declaration order.
    pub const ALL: [RewardKind; 7] = [
        RewardKind::WaitDelta,
        RewardKind::Queue,
        RewardKind::Pressure,
        RewardKind::Delay,
        RewardKind::DelayDelta,
        RewardKind::DelayAccrued,
        RewardKind::DelayAccruedDelta,
    ];

    /// The name the command line and the Python environments use (`delay-accrued-delta`):
    /// the one place it is written. [`str::parse`] reads it back.
    pub const fn name(self) -> &'static str {
        match self {
            RewardKind::WaitDelta => "wait-delta",
            RewardKind::Queue => "queue",
            RewardKind::Pressure => "pressure",
            RewardKind::Delay => "delay",
            RewardKind::DelayDelta => "delay-delta",
            RewardKind::DelayAccrued => "delay-accrued",
            RewardKind::DelayAccruedDelta => "delay-accrued-delta",
        }
    }

    /// The reward for the interval that moved the signal from `prev` to `now`.
    pub fn reward(self, prev: &RewardInputs, now: &RewardInputs) -> f32 {
        match self {
            RewardKind::WaitDelta => (prev.total_wait_s - now.total_wait_s) / 100.0,
            RewardKind::Queue => -now.queue_veh / 10.0,
            RewardKind::Pressure => -libm::fabsf(now.pressure_veh) / 10.0,
            RewardKind::Delay => -now.delay_veh / 10.0,
            RewardKind::DelayDelta => (prev.total_delay_s - now.total_delay_s) / 100.0,
            RewardKind::DelayAccrued => -now.accrued_delay_s / 100.0,
            RewardKind::DelayAccruedDelta => {
                (prev.total_delay_s - now.total_delay_s - now.accrued_delay_s) / 100.0
            }
        }
    }
}

/// A reward name that is not one of [`RewardKind::ALL`]'s [`RewardKind::name`]s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownReward;

impl core::fmt::Display for UnknownReward {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("unknown reward (known:")?;
        for (i, k) in RewardKind::ALL.iter().enumerate() {
            f.write_str(if i == 0 { " " } else { ", " })?;
            f.write_str(k.name())?;
        }
        f.write_str(")")
    }
}

impl core::str::FromStr for RewardKind {
    type Err = UnknownReward;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RewardKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or(UnknownReward)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn every_reward_reads_back_from_its_name_and_nothing_else_does() {
        for k in RewardKind::ALL {
            assert_eq!(k.name().parse::<RewardKind>(), Ok(k));
        }
        assert_eq!("Delay-Delta".parse::<RewardKind>(), Err(UnknownReward));
        assert_eq!("".parse::<RewardKind>(), Err(UnknownReward));
        assert_eq!(
            UnknownReward.to_string(),
            "unknown reward (known: wait-delta, queue, pressure, delay, delay-delta, \
             delay-accrued, delay-accrued-delta)"
        );
    }

    #[test]
    fn rewards() {
        let a = RewardInputs {
            total_wait_s: 300.0,
            total_delay_s: 420.0,
            queue_veh: 5.0,
            pressure_veh: 4.0,
            delay_veh: 2.0,
            accrued_delay_s: 10.0,
        };
        let b = RewardInputs {
            total_wait_s: 250.0,
            total_delay_s: 440.0,
            queue_veh: 8.0,
            pressure_veh: -6.0,
            delay_veh: 7.5,
            accrued_delay_s: 35.0,
        };
        assert_eq!(RewardKind::WaitDelta.reward(&a, &b), 0.5);
        assert_eq!(RewardKind::Queue.reward(&a, &b), -0.8);
        assert_eq!(RewardKind::Pressure.reward(&a, &b), -0.6);
        assert_eq!(RewardKind::Delay.reward(&a, &b), -0.75);
        assert_eq!(RewardKind::DelayDelta.reward(&a, &b), -0.2);
        assert_eq!(RewardKind::DelayAccrued.reward(&a, &b), -0.35);
        assert_eq!(RewardKind::DelayAccruedDelta.reward(&a, &b), -0.55);
    }
}
