//! Episode metrics from SUMO's tripinfo output (`--tripinfo-output`, with
//! `--tripinfo-output.write-unfinished` so vehicles still driving at the end are listed).
//!
//! Definitions, the same as the embedded simulator's [`EpisodeMetrics`](crate::EpisodeMetrics):
//!
//! * every vehicle whose departure time has come counts once: inserted vehicles (finished
//!   or still driving) from their `<tripinfo>`, vehicles never inserted from the list of
//!   pending vehicles SUMO gives at the episode's end, with the time they have waited;
//! * delay = `timeLoss + departDelay` (time lost against free flow, plus time waiting to
//!   enter); a vehicle never inserted is delayed by all the time it has waited;
//! * wait = `waitingTime` (time stopped in the network); a vehicle never inserted has
//!   not stopped in the network yet and counts with 0, as in the embedded simulator;
//! * travel time = `duration` of finished trips; throughput = finished trips; backlog =
//!   vehicles never inserted.
//!
//! Pedestrians (`<personinfo>` with at least one `<walk>` stage) are counted apart from
//! vehicles: a pedestrian's wait is the `waitingTime` of its walks, the time it stood still
//! on foot (at a red crossing, mostly). Finished or still walking, every pedestrian that has
//! set off counts; one SUMO has loaded but not yet started (`depart="-1"`, as every person
//! of a `personFlow` is) does not. Waiting for a ride (`<ride>`) is not a walk and not
//! counted. SUMO writes no time loss for a walk still under way, so the wait, not the time
//! loss, is the figure that covers them all.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use super::xml::{scan, Attrs, Node};
use super::SumoError;

/// What the tripinfo file and the pending list add up to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TripSummary {
    /// Vehicles counted (inserted + never inserted).
    pub vehicles: u64,
    /// Mean delay per vehicle (s).
    pub mean_delay_s: f64,
    /// Mean wait per vehicle (s).
    pub mean_wait_s: f64,
    /// Mean travel time of finished trips (s).
    pub mean_travel_time_s: f64,
    /// Finished trips.
    pub throughput_veh: u64,
    /// Vehicles never inserted.
    pub backlog_veh: u64,
    /// Pedestrians that set off (finished or still walking).
    pub pedestrians: u64,
    /// Mean time a pedestrian stood still while walking (s).
    pub mean_pedestrian_wait_s: f64,
}

/// The pedestrian being read: its walks' wait so far, and whether it has walked.
#[derive(Default)]
struct Person {
    departed: bool,
    walked: bool,
    wait_s: f64,
}

/// Reads the tripinfo file at `path` and combines it with `pending_wait_s`, the time each
/// never-inserted vehicle has waited so far.
pub fn summarize(path: &Path, pending_wait_s: &[f64]) -> Result<TripSummary, SumoError> {
    let err = |message: String| SumoError::Tripinfo {
        path: path.to_path_buf(),
        message,
    };
    let file = File::open(path).map_err(|e| err(format!("cannot open: {e}")))?;
    summarize_from(BufReader::new(file), pending_wait_s).map_err(err)
}

/// Vehicles SUMO teleported in the episode (`<teleports total=…>` of its
/// `--statistic-output` at `path`): a vehicle that stood `--time-to-teleport` (300 s by
/// default) at the head of a jam is moved on, so its delay from then on, and that of the
/// queue behind it, is not counted. A figure that hides a gridlock that way must say so.
pub fn teleports(path: &Path) -> Result<u64, SumoError> {
    let err = |message: String| SumoError::Tripinfo {
        path: path.to_path_buf(),
        message,
    };
    let file = File::open(path).map_err(|e| err(format!("cannot open: {e}")))?;
    teleports_from(BufReader::new(file)).map_err(err)
}

/// [`teleports`] over XML text.
pub fn teleports_from(input: impl std::io::BufRead) -> Result<u64, String> {
    let mut total = None;
    scan(input, |node| {
        if let Node::Open { name, attrs, .. } = node {
            if name == "teleports" {
                let n = attrs
                    .num(name, "total")?
                    .filter(|n| n.is_finite() && *n >= 0.0 && n.fract() == 0.0)
                    .ok_or("<teleports> has no whole `total`")?;
                total = Some(n as u64);
            }
        }
        Ok(())
    })?;
    total.ok_or_else(|| "not a statistics file (no <teleports> element)".into())
}

/// [`summarize`] over XML text.
pub fn summarize_from(
    input: impl std::io::BufRead,
    pending_wait_s: &[f64],
) -> Result<TripSummary, String> {
    let mut tally = Tally::default();
    let mut person: Option<Person> = None;
    let mut saw_root = false;
    scan(input, |node| {
        let (name, attrs, empty) = match node {
            Node::Open { name, attrs, empty } => (name, attrs, empty),
            Node::Close { name } => {
                if name == "personinfo" {
                    tally.end_person(person.take());
                }
                return Ok(());
            }
        };
        match name {
            "personinfo" => {
                // A person not yet started is written with depart -1.
                let departed = attrs.num(name, "depart")?.is_some_and(|d| d >= 0.0);
                person = Some(Person {
                    departed,
                    ..Person::default()
                });
                if empty {
                    tally.end_person(person.take());
                }
            }
            "walk" => {
                // A walk not yet begun (after a ride, say) is written with depart -1.
                let begun = attrs.num(name, "depart")?.is_none_or(|d| d >= 0.0);
                if let Some(p) = person.as_mut().filter(|_| begun) {
                    p.walked = true;
                    p.wait_s += attrs.num(name, "waitingTime")?.unwrap_or(0.0).max(0.0);
                }
            }
            "tripinfos" => saw_root = true,
            "tripinfo" => tally.add_vehicle(attrs)?,
            _ => {}
        }
        Ok(())
    })?;
    if !saw_root {
        return Err("not a tripinfo file (no <tripinfos> element)".into());
    }
    Ok(tally.summary(pending_wait_s))
}

/// The sums a tripinfo file adds up to.
#[derive(Default)]
struct Tally {
    /// Vehicles written (inserted).
    vehicles: u64,
    /// Their delay (time loss and departure delay), summed.
    delay_s: f64,
    /// Their waiting time, summed.
    wait_s: f64,
    /// Vehicles that arrived.
    arrived: u64,
    /// Their travel times, summed.
    travel_s: f64,
    /// Pedestrians that set off and walked.
    pedestrians: u64,
    /// Their walks' waiting, summed.
    pedestrian_wait_s: f64,
}

impl Tally {
    /// Adds one `<tripinfo>`: its time loss and departure delay, waiting time, and travel
    /// time if it arrived.
    fn add_vehicle(&mut self, attrs: &Attrs) -> Result<(), String> {
        let num = |k: &str| -> Result<f64, String> {
            attrs.num("tripinfo", k)?.ok_or_else(|| {
                let id = attrs.get("id").unwrap_or("?");
                format!("<tripinfo id=\"{id}\"> without {k}")
            })
        };
        let depart_delay = num("departDelay")?.max(0.0);
        self.delay_s += num("timeLoss")?.max(0.0) + depart_delay;
        self.wait_s += num("waitingTime")?.max(0.0);
        self.vehicles += 1;
        // Unfinished vehicles are written with arrival -1 and vaporized="end".
        let arrived = num("arrival")? >= 0.0 && attrs.get("vaporized").is_none_or(|v| v.is_empty());
        if arrived {
            self.arrived += 1;
            self.travel_s += num("duration")?.max(0.0);
        }
        Ok(())
    }

    /// Counts a pedestrian whose personinfo has ended, if it departed and walked.
    fn end_person(&mut self, p: Option<Person>) {
        if let Some(p) = p.filter(|p| p.departed && p.walked) {
            self.pedestrians += 1;
            self.pedestrian_wait_s += p.wait_s;
        }
    }

    /// The summary, each never-inserted vehicle counted with `pending_wait_s`, its wait.
    fn summary(&self, pending_wait_s: &[f64]) -> TripSummary {
        let pending: f64 = pending_wait_s.iter().map(|w| w.max(0.0)).sum();
        let total = self.vehicles + pending_wait_s.len() as u64;
        let mean = |sum: f64, count: u64| if count == 0 { 0.0 } else { sum / count as f64 };
        TripSummary {
            vehicles: total,
            mean_delay_s: mean(self.delay_s + pending, total),
            mean_wait_s: mean(self.wait_s, total),
            mean_travel_time_s: mean(self.travel_s, self.arrived),
            throughput_veh: self.arrived,
            backlog_veh: pending_wait_s.len() as u64,
            pedestrians: self.pedestrians,
            mean_pedestrian_wait_s: mean(self.pedestrian_wait_s, self.pedestrians),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const XML: &str = r#"<?xml version="1.0"?>
<tripinfos>
  <tripinfo id="a" depart="3.00" departDelay="1.00" arrival="40.00" duration="37.00"
            waitingTime="5.00" timeLoss="9.00" vaporized=""/>
  <tripinfo id="b" depart="10.00" departDelay="0.00" arrival="-1.00" duration="50.00"
            waitingTime="20.00" timeLoss="30.00" vaporized="end"/>
</tripinfos>"#;

    /// The teleports of SUMO's statistics output; a file without them is named.
    #[test]
    fn teleports_are_read_from_the_statistics() {
        let stats = r#"<statistics>
    <vehicles loaded="10" inserted="9" running="2" waiting="1"/>
    <teleports total="3" jam="2" yield="1" wrongLane="0"/>
</statistics>"#;
        assert_eq!(teleports_from(stats.as_bytes()), Ok(3));
        assert!(teleports_from("<statistics/>".as_bytes())
            .unwrap_err()
            .contains("no <teleports>"));
        assert!(
            teleports_from(r#"<statistics><teleports total="x"/></statistics>"#.as_bytes())
                .is_err()
        );
    }

    #[test]
    fn combines_trips_and_pending_vehicles() {
        let s = summarize_from(XML.as_bytes(), &[12.0]).unwrap();
        assert_eq!(s.vehicles, 3);
        assert_eq!(s.throughput_veh, 1);
        assert_eq!(s.backlog_veh, 1);
        assert!((s.mean_delay_s - (10.0 + 30.0 + 12.0) / 3.0).abs() < 1e-12);
        assert!((s.mean_wait_s - (5.0 + 20.0) / 3.0).abs() < 1e-12);
        assert!((s.mean_travel_time_s - 37.0).abs() < 1e-12);
    }

    /// As SUMO 1.28 writes them with `--tripinfo-output.write-unfinished`.
    const PERSONS: &str = r#"<tripinfos>
  <personinfo id="p.0" depart="10.00" type="ped" waitingTime="45.00" timeLoss="6.27">
    <walk depart="10.00" arrival="62.00" duration="52.00" timeLoss="6.27" waitingTime="1.00"/>
    <ride depart="62.00" arrival="90.00" waitingTime="40.00"/>
    <walk depart="90.00" arrival="99.00" duration="9.00" timeLoss="2.00" waitingTime="4.00"/>
  </personinfo>
  <personinfo id="p.1" depart="80.00" type="ped" waitingTime="48.00" timeLoss="0.00">
    <walk depart="80.00" arrival="-1" duration="55.00" timeLoss="0.00" waitingTime="48.00"/>
  </personinfo>
  <personinfo id="p.2" depart="-1" type="ped" waitingTime="0.00" timeLoss="0.00"/>
  <personinfo id="p.3" depart="-1" type="ped" waitingTime="7.00">
    <walk depart="-1" arrival="-1" waitingTime="7.00"/>
  </personinfo>
  <personinfo id="r.0" depart="20.00" type="ped" waitingTime="30.00">
    <ride depart="20.00" arrival="-1" waitingTime="30.00"/>
    <walk depart="-1" arrival="-1" waitingTime="0.00"/>
  </personinfo>
  <tripinfo id="a" depart="3.00" departDelay="1.00" arrival="40.00" duration="37.00"
            waitingTime="5.00" timeLoss="9.00" vaporized=""/>
</tripinfos>"#;

    #[test]
    fn pedestrians_count_apart_with_the_wait_of_their_walks() {
        let s = summarize_from(PERSONS.as_bytes(), &[]).unwrap();
        // p.0 waited 1 + 4 s on foot (not its 40 s for the ride, in its own 45 s), p.1
        // 48 s so far; p.2 and p.3 have not set off, and r.0 is still riding to its walk.
        assert_eq!(s.pedestrians, 2);
        assert!(
            (s.mean_pedestrian_wait_s - (5.0 + 48.0) / 2.0).abs() < 1e-12,
            "{s:?}"
        );
        // Vehicles are as without them.
        assert_eq!((s.vehicles, s.throughput_veh), (1, 1));
        assert!((s.mean_delay_s - 10.0).abs() < 1e-12);
        let bad = PERSONS.replace("waitingTime=\"48.00\"/>", "waitingTime=\"x\"/>");
        let err = summarize_from(bad.as_bytes(), &[]).unwrap_err();
        assert!(
            err.contains("<walk waitingTime=\"x\">: not a number"),
            "{err}"
        );
    }

    #[test]
    fn bad_files_are_errors() {
        assert!(summarize_from("<routes/>".as_bytes(), &[]).is_err());
        let missing = "<tripinfos><tripinfo id=\"x\" depart=\"1\"/></tripinfos>";
        let err = summarize_from(missing.as_bytes(), &[]).unwrap_err();
        assert!(err.contains("<tripinfo id=\"x\"> without"), "{err}");
        let err = summarize(Path::new("/no/such/tripinfo.xml"), &[]).unwrap_err();
        assert!(err.to_string().contains("/no/such/tripinfo.xml"));
        // Empty but valid: no vehicles, zero means.
        let s = summarize_from("<tripinfos/>".as_bytes(), &[]).unwrap();
        assert_eq!(s, TripSummary::default());
    }
}
