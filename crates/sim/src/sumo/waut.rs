//! SUMO's `<WAUT>`s: switches of traffic lights' programs at set times of day.
//!
//! An additional file may hold a WAUT (`<WAUT id refTime startProg period>` with
//! `<wautSwitch time to>` children) and bind lights to it (`<wautJunction wautID
//! junctionID>`). SUMO then starts each bound light on the program the WAUT has at the
//! simulation's begin (its `startProg`, or the last switch before begin) rather than on the
//! last program loaded, and switches it at each switch time while SUMO runs the light.
//! A light greenwave drives over TraCI stays on greenwave's states (SUMO's `online`
//! program; the switches no longer apply), so greenwave derives its plan from the program
//! the WAUT gives at begin and runs it for the whole episode. What it does not follow is
//! said in [`Waut::note`].

use std::path::{Path, PathBuf};

use super::sumocfg::time_s;
use super::xml::Attrs;

/// One `<wautSwitch>`: at `time_s` after the WAUT's reference time, its lights go to `to`.
#[derive(Clone, Debug, PartialEq)]
pub struct WautSwitch {
    /// Time after `refTime` (s).
    pub time_s: f64,
    /// The program switched to.
    pub to: String,
}

/// One `<WAUT>`.
#[derive(Clone, Debug, PartialEq)]
pub struct Waut {
    /// Its id.
    pub id: String,
    /// The file it was read from.
    pub file: PathBuf,
    /// `refTime` (s): the switch times count from it.
    pub ref_time_s: f64,
    /// `period` (s): the switches repeat every period; 0 when they do not.
    pub period_s: f64,
    /// `startProg`: the program before the first switch.
    pub start_program: String,
    /// The switches, by time.
    pub switches: Vec<WautSwitch>,
}

impl Waut {
    /// The program this WAUT has its lights run at simulation time `t_s`.
    pub fn program_at(&self, t_s: f64) -> &str {
        let since = t_s - self.ref_time_s;
        if since < 0.0 || self.switches.is_empty() {
            return &self.start_program;
        }
        let (into, wrapped) = match self.period_s > 0.0 {
            true => (since % self.period_s, since >= self.period_s),
            false => (since, false),
        };
        let last_before = self.switches.iter().rev().find(|s| s.time_s <= into);
        match (last_before, wrapped) {
            (Some(s), _) => &s.to,
            // Before this period's first switch: where the previous period ended.
            (None, true) => &self.switches[self.switches.len() - 1].to,
            (None, false) => &self.start_program,
        }
    }

    /// What greenwave does not follow, for a light bound to this WAUT whose plan comes from
    /// `program` (the one at begin, `begin_s`).
    pub fn note(&self, program: &str, begin_s: f64) -> String {
        let switches: Vec<String> = self
            .switches
            .iter()
            .map(|s| format!("to {} at {} s", s.to, self.ref_time_s + s.time_s))
            .collect();
        let period = match self.period_s > 0.0 {
            true => format!(", every {} s", self.period_s),
            false => String::new(),
        };
        format!(
            "WAUT {} ({}) switches its program ({}{period}); greenwave takes program {program} \
             (the one at begin, {begin_s} s) for the plan and every controller it drives, for \
             the whole episode; only fixed-time (SUMO running the program) follows the switches",
            self.id,
            self.file.display(),
            if switches.is_empty() {
                "no switch".to_string()
            } else {
                switches.join(", ")
            },
        )
    }
}

/// `<WAUT>` (its switches follow).
pub(crate) fn read_waut(attrs: &Attrs, file: &Path) -> Result<Waut, String> {
    let id = attrs.need("WAUT", "id")?.to_string();
    Ok(Waut {
        ref_time_s: time_attr(attrs, "WAUT", "refTime")?.unwrap_or(0.0),
        period_s: time_attr(attrs, "WAUT", "period")?.unwrap_or(0.0),
        start_program: attrs.need("WAUT", "startProg")?.to_string(),
        switches: Vec::new(),
        file: file.to_path_buf(),
        id,
    })
}

/// `<wautSwitch>` into `waut`, kept in time order.
pub(crate) fn add_switch(waut: &mut Waut, attrs: &Attrs) -> Result<(), String> {
    let time_s = time_attr(attrs, "wautSwitch", "time")?
        .ok_or_else(|| format!("<wautSwitch> of WAUT {} without attribute time", waut.id))?;
    let to = attrs.need("wautSwitch", "to")?.to_string();
    let at = waut.switches.partition_point(|s| s.time_s <= time_s);
    waut.switches.insert(at, WautSwitch { time_s, to });
    Ok(())
}

/// `<wautJunction>`: (WAUT id, light id).
pub(crate) fn read_junction(attrs: &Attrs) -> Result<(String, String), String> {
    Ok((
        attrs.need("wautJunction", "wautID")?.to_string(),
        attrs.need("wautJunction", "junctionID")?.to_string(),
    ))
}

/// A SUMO time attribute (seconds or `h:m:s`), not negative.
fn time_attr(attrs: &Attrs, elem: &str, key: &str) -> Result<Option<f64>, String> {
    match attrs.get(key) {
        None => Ok(None),
        Some(v) => match time_s(v) {
            Some(t) if t >= 0.0 => Ok(Some(t)),
            _ => Err(format!("<{elem} {key}=\"{v}\">: not a time")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waut(period_s: f64, switches: &[(f64, &str)]) -> Waut {
        Waut {
            id: "w".into(),
            file: "w.add.xml".into(),
            ref_time_s: 100.0,
            period_s,
            start_program: "night".into(),
            switches: switches
                .iter()
                .map(|&(time_s, to)| WautSwitch {
                    time_s,
                    to: to.into(),
                })
                .collect(),
        }
    }

    #[test]
    fn the_program_at_a_time_is_the_last_switch_before_it() {
        let w = waut(0.0, &[(50.0, "day"), (200.0, "evening")]);
        let at: Vec<&str> = [0.0, 149.0, 150.0, 299.0, 300.0, 1e6]
            .iter()
            .map(|&t| w.program_at(t))
            .collect();
        assert_eq!(at, ["night", "night", "day", "day", "evening", "evening"]);
        assert_eq!(waut(0.0, &[]).program_at(1e6), "night");
    }

    #[test]
    fn a_period_repeats_the_switches() {
        let w = waut(1000.0, &[(50.0, "day"), (200.0, "evening")]);
        // refTime 100: the second period starts at 1100 s.
        assert_eq!(w.program_at(1120.0), "evening", "previous period's last");
        assert_eq!(w.program_at(1160.0), "day");
        assert_eq!(w.program_at(1400.0), "evening");
    }

    #[test]
    fn the_note_names_the_waut_its_switches_and_the_program_kept() {
        let w = waut(0.0, &[(50.0, "day")]);
        let note = w.note("night", 0.0);
        assert!(note.contains("WAUT w (w.add.xml)"), "{note}");
        assert!(note.contains("to day at 150 s"), "{note}");
        assert!(note.contains("takes program night"), "{note}");
    }
}
