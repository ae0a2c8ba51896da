//! SUMO configuration files (`.sumocfg`), read as greenwave runs them.
//!
//! A real scenario usually comes as a `.sumocfg`: the net, its route and additional files,
//! the start time, and the options its authors simulated it with (a pedestrian model's
//! stripe width, insertion checks, teleporting). [`SumoCfgFile::read`] reads one as SUMO
//! does: every element with a `value` attribute is an option, whatever section it sits in,
//! named by its long name or a synonym (`net`, `n`, …); file names are relative to the
//! configuration's folder; times are seconds or `h:m:s` / `d:h:m:s`.
//!
//! greenwave takes the net, routes, additional files and begin from it, and passes SUMO the
//! options that shape the traffic, `--name=value`, with relative file names made absolute.
//! It leaves out, by name in [`SumoCfgFile::left_out`], what it sets itself or what would
//! go wrong when eight SUMO processes run the same file at once: `end` and `step-length`
//! (the episode and SUMO's step are greenwave's own), seeds, outputs (every process would
//! write the same file), the TraCI server, logging, sumo-gui's settings, and
//! `tls.all-off` (greenwave drives the lights).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::xml::{scan, Node};
use super::SumoError;

/// A `.sumocfg` as greenwave uses it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SumoCfgFile {
    /// Its `net-file`, `route-files`, `additional-files` and `begin`.
    pub files: SumoFiles,
    /// `end`, in seconds (not used: greenwave's episode has its own length).
    pub end_s: Option<f64>,
    /// Options passed to SUMO as they are, `--name=value`, in file order.
    pub passed: Vec<String>,
    /// Options of the file not used, by name, in file order.
    pub left_out: Vec<String>,
}

/// The files and start a run is given: by its own options, then filled from a
/// configuration file ([`SumoCfgFile::under`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SumoFiles {
    /// The network.
    pub net: Option<PathBuf>,
    /// Route files.
    pub routes: Vec<PathBuf>,
    /// Additional files.
    pub additional: Vec<PathBuf>,
    /// Begin, in seconds.
    pub begin_s: Option<f64>,
}

/// Sections whose options greenwave never passes: outputs (written once per process, to the
/// same files), the TraCI server, seeds, and sumo-gui's settings.
const LEFT_OUT_SECTIONS: [&str; 4] = ["output", "traci_server", "random_number", "gui_only"];

/// Options that make SUMO discard vehicles, which then appear in no output greenwave
/// reads: a controller that kept them from entering, or jammed them, would look better than
/// it is. Left out of a `.sumocfg`, refused in `--sumo-args`.
const DISCARDS_VEHICLES: [&str; 2] = ["max-depart-delay", "time-to-teleport.remove"];

/// Options greenwave sets itself, that would change what it measures or controls, or that
/// only sumo-gui uses (for configurations without sections, where `gui_only` is not there
/// to say so). Every output (`…-output`, `…-output.…`) is left out too.
const LEFT_OUT_OPTIONS: [&str; 36] = [
    "end",
    "step-length",
    "seed",
    "random",
    "remote-port",
    "num-clients",
    "tls.all-off",
    // Its tripinfo read: other times (h:m:s), another file name, a shorter wait memory.
    "human-readable-time",
    "output-prefix",
    "waiting-time-memory",
    "verbose",
    "version",
    "help",
    "print-options",
    "no-step-log",
    "step-log.period",
    "duration-log.disable",
    "duration-log.statistics",
    "log",
    "message-log",
    "error-log",
    "save-configuration",
    "configuration-file",
    "gui-settings-file",
    "quit-on-end",
    "game",
    "game.mode",
    "start",
    "delay",
    "breakpoints",
    "demo",
    "disable-textures",
    "osg-view",
    "window-size",
    "window-pos",
    "edgedata-files",
];

impl SumoCfgFile {
    /// Reads the configuration at `path`; errors name the file and what is wrong.
    pub fn read(path: &Path) -> Result<Self, SumoError> {
        let err = |message: String| SumoError::ConfigFile {
            path: path.to_path_buf(),
            message,
        };
        let file = File::open(path).map_err(|e| err(format!("cannot open: {e}")))?;
        let dir = path.parent().unwrap_or(Path::new(""));
        Self::parse(BufReader::new(file), dir).map_err(err)
    }

    /// Reads configuration text, resolving relative file names against `dir`.
    pub fn parse(input: impl BufRead, dir: &Path) -> Result<Self, String> {
        let mut cfg = SumoCfgFile::default();
        let mut stack: Vec<String> = Vec::new();
        let mut saw_root = false;
        scan(input, |node| {
            let (name, attrs, empty) = match node {
                Node::Open { name, attrs, empty } => (name, attrs, empty),
                Node::Close { .. } => {
                    stack.pop();
                    return Ok(());
                }
            };
            if stack.is_empty() {
                if !matches!(name, "configuration" | "sumoConfiguration") {
                    return Err(format!(
                        "not a SUMO configuration: the root element is <{name}>, not \
                         <configuration> or <sumoConfiguration>"
                    ));
                }
                saw_root = true;
            } else if let Some(value) = attrs.get("value") {
                let section = stack.last().map_or("", String::as_str);
                cfg.take(section, name, value, dir)?;
            }
            if !empty {
                stack.push(name.to_string());
            }
            Ok(())
        })?;
        if !saw_root {
            return Err(
                "not a SUMO configuration: no <configuration> or <sumoConfiguration> element"
                    .into(),
            );
        }
        Ok(cfg)
    }

    /// `given`, each of its files and its begin taken from this configuration where `given`
    /// has none: the command line replaces what the file names, as in SUMO.
    pub fn under(&self, given: SumoFiles) -> SumoFiles {
        let or = |g: Vec<PathBuf>, f: &[PathBuf]| if g.is_empty() { f.to_vec() } else { g };
        let own = &self.files;
        SumoFiles {
            net: given.net.or_else(|| own.net.clone()),
            routes: or(given.routes, &own.routes),
            additional: or(given.additional, &own.additional),
            begin_s: given.begin_s.or(own.begin_s),
        }
    }

    /// Takes option `name` = `value` found in `section`.
    fn take(&mut self, section: &str, name: &str, value: &str, dir: &Path) -> Result<(), String> {
        let name = long_name(name);
        let bad = |what: &str| format!("<{name} value=\"{value}\">: {what}");
        match name {
            "net-file" => self.files.net = files(value, dir).into_iter().next(),
            "route-files" => self.files.routes = files(value, dir),
            "additional-files" => self.files.additional = files(value, dir),
            "begin" => self.files.begin_s = Some(time_s(value).ok_or_else(|| bad("not a time"))?),
            "end" => {
                self.end_s = Some(time_s(value).ok_or_else(|| bad("not a time"))?);
                self.left_out.push(name.into());
            }
            _ if LEFT_OUT_SECTIONS.contains(&section) || left_out_by_name(name) => {
                self.left_out.push(name.into())
            }
            _ if takes_files(name) => {
                let joined: Vec<String> = files(value, dir)
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                self.passed.push(format!("--{name}={}", joined.join(",")));
            }
            _ => self.passed.push(format!("--{name}={value}")),
        }
        Ok(())
    }
}

/// The options to pass SUMO for a configuration's `config` options and the user's `extra`
/// ones: `config`'s, less those `extra` also names (`--name` or `--name=value`), then
/// `extra`. SUMO refuses an option given twice, and the user's choice wins.
pub fn merge_options(config: &[String], extra: &[String]) -> Vec<String> {
    let name = |arg: &str| arg.split('=').next().unwrap_or_default().to_string();
    let given: Vec<String> = extra
        .iter()
        .filter(|a| a.starts_with("--"))
        .map(|a| name(a))
        .collect();
    config
        .iter()
        .filter(|o| !given.contains(&name(o)))
        .chain(extra)
        .cloned()
        .collect()
}

/// Whether greenwave leaves out option `name` (a long name) wherever it stands: one it sets
/// itself, one that would change what it reads or controls, sumo-gui's, or an output.
pub fn left_out_by_name(name: &str) -> bool {
    LEFT_OUT_OPTIONS.contains(&name)
        || DISCARDS_VEHICLES.contains(&name)
        || name.ends_with("-output")
        || name.contains("-output.")
}

/// Why `--sumo-args` may not pass the option `arg` (`--name`, `--name=value`, or a
/// short `-x`), if it may not: it discards vehicles (they would leave the delay and the
/// count unseen), or it changes the outputs greenwave writes and reads (their names,
/// their time format). Other options pass: `--sumo-args` is the way to SUMO's own
/// settings (teleport time, lateral resolution, …).
pub fn refused_argument(arg: &str) -> Option<String> {
    let name = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-'))?;
    let name = long_name(name.split('=').next().unwrap_or_default());
    let outputs = [
        "output-prefix",
        "human-readable-time",
        "tripinfo-output",
        "statistic-output",
    ];
    if DISCARDS_VEHICLES.contains(&name) {
        Some(format!(
            "--{name} makes SUMO discard vehicles, which then count in no delay and no \
             throughput: a controller that kept them out would look better than it is"
        ))
    } else if outputs
        .iter()
        .any(|o| name == *o || name.starts_with(&format!("{o}.")))
    {
        Some(format!(
            "--{name} changes an output greenwave writes and reads itself (the episode's \
             figures come from it)"
        ))
    } else {
        None
    }
}

/// SUMO 1.28's long name for `name`, where `name` is one of its short or long synonyms.
fn long_name(name: &str) -> &str {
    match name {
        "n" | "net" => "net-file",
        "r" | "routes" => "route-files",
        "a" | "additional" => "additional-files",
        "b" => "begin",
        "e" => "end",
        "c" | "configuration" => "configuration-file",
        "C" => "save-configuration",
        "w" => "weight-files",
        "x" => "weight-attribute",
        "H" => "human-readable-time",
        "s" => "route-steps",
        "v" => "verbose",
        "V" => "version",
        "X" => "xml-validation",
        "W" => "no-warnings",
        "l" | "log-file" => "log",
        "t" => "duration-log.statistics",
        "g" => "gui-settings-file",
        "Q" => "quit-on-end",
        "G" => "game",
        "S" => "start",
        "d" => "delay",
        "B" => "breakpoints",
        "m" => "edgedata-files",
        "N" => "alternative-net-file",
        "D" => "demo",
        "T" => "disable-textures",
        other => other,
    }
}

/// Whether option `name` names files (SUMO's `-file`, `-files` options, and `load-state`).
fn takes_files(name: &str) -> bool {
    name.ends_with("-file") || name.ends_with("-files") || name == "load-state"
}

/// A comma-separated list of file names, each relative to `dir` unless absolute.
fn files(value: &str, dir: &Path) -> Vec<PathBuf> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| dir.join(s))
        .collect()
}

/// A SUMO time: seconds, `h:m:s` or `d:h:m:s` (each part a number); `None` if not one, or
/// not finite.
pub fn time_s(value: &str) -> Option<f64> {
    let parts: Vec<f64> = value
        .trim()
        .split(':')
        .map(|p| p.trim().parse::<f64>().ok().filter(|x| x.is_finite()))
        .collect::<Option<_>>()?;
    let scale: &[f64] = match parts.len() {
        1 => &[1.0],
        3 => &[3600.0, 60.0, 1.0],
        4 => &[86400.0, 3600.0, 60.0, 1.0],
        _ => return None,
    };
    let s: f64 = parts.iter().zip(scale).map(|(p, k)| p * k).sum();
    s.is_finite().then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--sumo-args` may not discard vehicles or move greenwave's outputs, under any of
    /// the options' spellings; SUMO's other settings pass.
    #[test]
    fn sumo_args_that_hide_vehicles_or_move_outputs_are_refused() {
        for arg in [
            "--max-depart-delay",
            "--max-depart-delay=30",
            "--time-to-teleport.remove",
            "--tripinfo-output=x.xml",
            "--statistic-output",
            "--output-prefix",
            "-H",
        ] {
            assert!(refused_argument(arg).is_some(), "{arg}");
        }
        for arg in [
            "--time-to-teleport",
            "-1",
            "300",
            "--lateral-resolution",
            "0.8",
        ] {
            assert_eq!(refused_argument(arg), None, "{arg}");
        }
        assert!(left_out_by_name("max-depart-delay"));
    }

    /// SUMO's game `fokr_bs_demo.sumocfg` in shape (its files, times, stripe width and
    /// `gui_only` section), with options of other configurations added: teleporting,
    /// `tls.all-off`, a weight file, an output, a step-log option and a TraCI port.
    const GAME: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<sumoConfiguration xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
    <input>
        <net-file value="fokr_bs_demo/fokr_bs.net.xml.gz"/>
        <route-files value="fokr_bs_demo/15_16_ped.trips.xml, fokr_bs_demo/15_16_veh.trips.xml.gz"/>
        <additional-files value="fokr_bs_demo/vtypes_default.add.xml,/abs/signalPlan.add.xml"/>
    </input>
    <time>
        <begin value="15:0:0"/>
        <end value="16:0:0"/>
        <step-length value="0.05"/>
    </time>
    <processing>
        <insertion-checks value="collision leaderGap pedestrian"/>
        <pedestrian.striping.stripe-width value="0.55"/>
        <time-to-teleport value="-1"/>
        <tls.all-off value="true"/>
    </processing>
    <routing><weight-files value="w.xml"/></routing>
    <output><summary-output value="s.xml"/></output>
    <report>
        <xml-validation value="never"/>
        <no-step-log value="true"/>
    </report>
    <traci_server><remote-port value="8813"/></traci_server>
    <gui_only>
        <gui-settings-file value="fokr_bs_demo/setting.add.xml"/>
        <demo value="true"/>
    </gui_only>
</sumoConfiguration>"#;

    #[test]
    fn a_game_configuration_gives_its_files_begin_and_traffic_options() {
        let c = SumoCfgFile::parse(GAME.as_bytes(), Path::new("/g")).unwrap();
        assert_eq!(
            c.files.net,
            Some(PathBuf::from("/g/fokr_bs_demo/fokr_bs.net.xml.gz"))
        );
        assert_eq!(
            c.files.routes,
            [
                "/g/fokr_bs_demo/15_16_ped.trips.xml",
                "/g/fokr_bs_demo/15_16_veh.trips.xml.gz"
            ]
            .map(PathBuf::from)
        );
        assert_eq!(
            c.files.additional,
            [
                "/g/fokr_bs_demo/vtypes_default.add.xml",
                "/abs/signalPlan.add.xml"
            ]
            .map(PathBuf::from)
        );
        assert_eq!((c.files.begin_s, c.end_s), (Some(54_000.0), Some(57_600.0)));
        assert_eq!(
            c.passed,
            [
                "--insertion-checks=collision leaderGap pedestrian",
                "--pedestrian.striping.stripe-width=0.55",
                "--time-to-teleport=-1",
                "--weight-files=/g/w.xml",
                "--xml-validation=never",
            ]
        );
        assert_eq!(
            c.left_out,
            [
                "end",
                "step-length",
                "tls.all-off",
                "summary-output",
                "no-step-log",
                "remote-port",
                "gui-settings-file",
                "demo"
            ]
        );
    }

    #[test]
    fn what_the_command_line_gives_replaces_what_the_file_names() {
        let c = SumoCfgFile::parse(GAME.as_bytes(), Path::new("/g")).unwrap();
        let none = c.under(SumoFiles::default());
        assert_eq!(none.net, c.files.net);
        assert_eq!((none.routes.len(), none.additional.len()), (2, 2));
        assert_eq!(none.begin_s, Some(54_000.0));
        let given = SumoFiles {
            net: Some("n.net.xml".into()),
            routes: vec!["r.rou.xml".into()],
            additional: Vec::new(),
            begin_s: Some(0.0),
        };
        let mixed = c.under(given.clone());
        assert_eq!(mixed.net, given.net);
        assert_eq!(mixed.routes, given.routes);
        assert_eq!(
            mixed.additional, c.files.additional,
            "not given: the file's"
        );
        assert_eq!(mixed.begin_s, Some(0.0), "an explicit 0 is kept");
    }

    #[test]
    fn synonyms_and_a_flat_layout_read_as_sumo_reads_them() {
        let flat = r#"<configuration><n value="a.net.xml"/><r value="r.xml"/>
            <additional value="x.add.xml"/><b value="100"/><e value="1:0:0:0"/>
            <time-to-teleport value="300"/><summary-output value="s.xml"/>
            <tripinfo-output.write-unfinished value="true"/><H value="true"/>
            <output-prefix value="run-"/><l value="sumo.log"/>
            <waiting-time-memory value="100"/><G value="true"/></configuration>"#;
        let c = SumoCfgFile::parse(flat.as_bytes(), Path::new("d")).unwrap();
        assert_eq!(c.files.net, Some(PathBuf::from("d/a.net.xml")));
        assert_eq!(c.files.routes, [PathBuf::from("d/r.xml")]);
        assert_eq!(c.files.additional, [PathBuf::from("d/x.add.xml")]);
        assert_eq!((c.files.begin_s, c.end_s), (Some(100.0), Some(86_400.0)));
        assert_eq!(c.passed, ["--time-to-teleport=300"]);
        // Without sections, outputs and what changes greenwave's own tripinfo read are
        // left out by name.
        assert_eq!(
            c.left_out,
            [
                "end",
                "summary-output",
                "tripinfo-output.write-unfinished",
                "human-readable-time",
                "output-prefix",
                "log",
                "waiting-time-memory",
                "game"
            ]
        );
    }

    #[test]
    fn the_users_options_replace_the_configurations_of_the_same_name() {
        let config = [
            "--scale=0.5",
            "--time-to-teleport=-1",
            "--xml-validation=never",
        ]
        .map(String::from);
        let extra = ["--scale", "1", "--step-log.period=9"].map(String::from);
        assert_eq!(
            merge_options(&config, &extra),
            [
                "--time-to-teleport=-1",
                "--xml-validation=never",
                "--scale",
                "1",
                "--step-log.period=9"
            ]
        );
        assert_eq!(merge_options(&config, &[]), config);
        assert_eq!(merge_options(&[], &extra), extra);
    }

    #[test]
    fn times_are_seconds_or_clock_times() {
        assert_eq!(time_s("54000"), Some(54_000.0));
        assert_eq!(time_s(" 15:0:0 "), Some(54_000.0));
        assert_eq!(time_s("0:01:30.5"), Some(90.5));
        assert_eq!(time_s("1:2:3:4"), Some(93_784.0));
        for bad in ["", "15:00", "x", "1:2:3:4:5", "inf", "NaN", "1e400"] {
            assert_eq!(time_s(bad), None, "{bad}");
        }
    }

    #[test]
    fn what_is_not_a_configuration_is_refused_by_name() {
        let err = SumoCfgFile::parse("<routes/>".as_bytes(), Path::new("")).unwrap_err();
        assert!(err.contains("root element is <routes>"), "{err}");
        let err = SumoCfgFile::parse("".as_bytes(), Path::new("")).unwrap_err();
        assert!(err.contains("no <configuration>"), "{err}");
        let bad_time = r#"<configuration><begin value="soon"/></configuration>"#;
        let err = SumoCfgFile::parse(bad_time.as_bytes(), Path::new("")).unwrap_err();
        assert!(err.contains("<begin value=\"soon\">: not a time"), "{err}");
        let err = SumoCfgFile::read(Path::new("/no/such.sumocfg")).unwrap_err();
        assert!(err.to_string().contains("/no/such.sumocfg"), "{err}");
    }
}
