//! The keyword arguments of `NativeEnv` and `NativeVecEnv`, read in one place.

use std::path::PathBuf;

use greenwave_sim::sumo::sumocfg::merge_options;
use greenwave_sim::sumo::{SumoCfgFile, SumoFiles, TimingOverrides};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::spec::{parse_reward, Backend, EnvSpec};
use crate::value_err;

/// Every keyword the environments take.
const KNOWN: [&str; 24] = [
    "backend",
    "scenario",
    "demand",
    "sumocfg",
    "net",
    "routes",
    "additional",
    "sumo_args",
    "begin_s",
    "step_length_s",
    "episode_s",
    "decision_interval_s",
    "reward",
    "timing",
    "yellow_s",
    "all_red_s",
    "min_green_s",
    "max_green_s",
    "program",
    "program_clock",
    "pedestrian_zones",
    "program_intergreens",
    "pedestrian_weight",
    "seed",
];

/// Keyword arguments, each read with the type it must have (`None` counts as absent).
struct Kwargs<'a, 'py>(Option<&'a Bound<'py, PyDict>>);

impl<'py> Kwargs<'_, 'py> {
    fn value(&self, key: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.0 {
            Some(d) => Ok(d.get_item(key)?.filter(|v| !v.is_none())),
            None => Ok(None),
        }
    }

    fn bad(key: &str, want: &str, e: PyErr) -> PyErr {
        value_err(format!("{key}= must be {want}: {e}"))
    }

    /// The value of `key` as a `T`, or an error naming the key and `want`.
    fn typed<T>(&self, key: &str, want: &str) -> PyResult<Option<T>>
    where
        T: for<'a> FromPyObject<'a, 'py>,
    {
        self.value(key)?
            .map(|v| v.extract::<T>().map_err(|e| Self::bad(key, want, e.into())))
            .transpose()
    }

    fn string(&self, key: &str) -> PyResult<Option<String>> {
        self.typed(key, "a string")
    }

    fn number(&self, key: &str) -> PyResult<Option<f64>> {
        self.typed(key, "a number")
    }

    fn flag(&self, key: &str) -> PyResult<Option<bool>> {
        self.typed(key, "True or False")
    }

    fn path(&self, key: &str) -> PyResult<Option<PathBuf>> {
        self.typed(key, "a path")
    }

    /// One path or a list of them.
    fn paths(&self, key: &str) -> PyResult<Vec<PathBuf>> {
        let Some(v) = self.value(key)? else {
            return Ok(Vec::new());
        };
        if let Ok(one) = v.extract::<PathBuf>() {
            return Ok(vec![one]);
        }
        v.extract::<Vec<PathBuf>>()
            .map_err(|e| Self::bad(key, "a path or a list of paths", e))
    }

    fn check_known(&self) -> PyResult<()> {
        let Some(d) = self.0 else { return Ok(()) };
        for k in d.keys() {
            let k: String = k.extract()?;
            if !KNOWN.contains(&k.as_str()) {
                return Err(value_err(format!(
                    "unknown argument `{k}` (known: {})",
                    KNOWN.join(", ")
                )));
            }
        }
        Ok(())
    }
}

/// The environment spec and seed from the keyword arguments.
pub fn spec_from_kwargs(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<(EnvSpec, u64)> {
    let kw = Kwargs(kwargs);
    kw.check_known()?;
    let backend = backend(&kw)?;
    let reward = kw
        .string("reward")?
        .as_deref()
        .map(parse_reward)
        .transpose()
        .map_err(value_err)?;
    let seed = kw
        .typed::<u64>("seed", "a non-negative integer")?
        .unwrap_or(0);
    let spec = EnvSpec {
        backend,
        episode_s: kw.number("episode_s")?,
        decision_interval_s: kw.number("decision_interval_s")?,
        reward,
        pedestrian_weight: kw.number("pedestrian_weight")?.map(|w| w as f32),
    };
    Ok((spec, seed))
}

fn backend(kw: &Kwargs<'_, '_>) -> PyResult<Backend> {
    let (scenario, demand) = (kw.string("scenario")?, kw.string("demand")?);
    let files = SumoKwargs {
        net: kw.path("net")?,
        routes: kw.paths("routes")?,
        additional: kw.paths("additional")?,
        sumo_args: kw
            .typed::<Vec<String>>("sumo_args", "a list of strings")?
            .unwrap_or_default(),
        sumocfg: kw.path("sumocfg")?,
    };
    match kw.string("backend")?.as_deref().unwrap_or("embedded") {
        "embedded" => {
            embedded_only(kw, &files)?;
            Ok(Backend::Embedded {
                scenario: scenario.unwrap_or_else(|| "single-4way".into()),
                demand,
            })
        }
        "sumo" => {
            if scenario.is_some() || demand.is_some() {
                return Err(value_err(
                    "scenario= and demand= are for the embedded simulator; SUMO takes net= and routes=",
                ));
            }
            sumo_backend(kw, files)
        }
        other => Err(value_err(format!(
            "unknown backend `{other}` (known: embedded, sumo)"
        ))),
    }
}

/// The keywords that name a SUMO scenario's files and options.
struct SumoKwargs {
    net: Option<PathBuf>,
    routes: Vec<PathBuf>,
    additional: Vec<PathBuf>,
    sumo_args: Vec<String>,
    sumocfg: Option<PathBuf>,
}

/// For `backend="embedded"`: an error if a SUMO-only keyword is given (the files, the
/// step length, the intergreens, the pedestrians' weight; `program_clock=` and
/// `pedestrian_zones=` only when true, each with its own message), or if one of them has
/// the wrong type.
fn embedded_only(kw: &Kwargs<'_, '_>, files: &SumoKwargs) -> PyResult<()> {
    if files.net.is_some()
        || files.sumocfg.is_some()
        || !files.routes.is_empty()
        || !files.additional.is_empty()
        || !files.sumo_args.is_empty()
        || kw.number("step_length_s")?.is_some()
        || kw.flag("program_intergreens")?.is_some()
        || kw.number("pedestrian_weight")?.is_some()
        || kw.number("begin_s")?.is_some()
        || kw.path("timing")?.is_some()
        || kw.string("program")?.is_some()
        || ["yellow_s", "all_red_s", "min_green_s", "max_green_s"]
            .iter()
            .try_fold(false, |any, k| {
                Ok::<_, PyErr>(any | kw.number(k)?.is_some())
            })?
    {
        return Err(value_err(
            "net=, routes=, additional=, sumocfg=, sumo_args=, begin_s=, step_length_s=, \
             timing=, yellow_s=, all_red_s=, min_green_s=, max_green_s=, program=, \
             program_intergreens= and pedestrian_weight= are for backend=\"sumo\"; the \
             embedded simulator takes scenario= (its own timing)",
        ));
    }
    if kw.flag("program_clock")? == Some(true) {
        return Err(value_err(
            "program_clock= is for backend=\"sumo\" (the lights' own programs come from the net)",
        ));
    }
    if kw.flag("pedestrian_zones")? == Some(true) {
        return Err(value_err(
            "pedestrian_zones= is for backend=\"sumo\" (the embedded simulator has no pedestrians)",
        ));
    }
    Ok(())
}

/// `backend="sumo"`: the scenario from the `given` files (under a `sumocfg=` if given)
/// and the timing and observation keywords.
fn sumo_backend(kw: &Kwargs<'_, '_>, given: SumoKwargs) -> PyResult<Backend> {
    let cfg = match &given.sumocfg {
        Some(path) => SumoCfgFile::read(path).map_err(|e| value_err(e.to_string()))?,
        None => SumoCfgFile::default(),
    };
    let files = cfg.under(SumoFiles {
        net: given.net,
        routes: given.routes,
        additional: given.additional,
        begin_s: kw.number("begin_s")?,
    });
    let net = files
        .net
        .ok_or_else(|| value_err("backend=\"sumo\" needs net= (or a sumocfg= that names one)"))?;
    // A configuration may bring its demand in additional files only.
    if files.routes.is_empty() && given.sumocfg.is_none() {
        return Err(value_err(
            "the SUMO backend needs at least one route file (routes=[...])",
        ));
    }
    Ok(Backend::Sumo {
        net,
        routes: files.routes,
        additional: files.additional,
        sumo_args: merge_options(&cfg.passed, &given.sumo_args),
        begin_s: files.begin_s.unwrap_or(0.0),
        step_length_s: kw.number("step_length_s")?,
        timing_file: kw.path("timing")?,
        overrides: TimingOverrides {
            yellow_s: kw.number("yellow_s")?,
            all_red_s: kw.number("all_red_s")?,
            min_green_s: kw.number("min_green_s")?,
            max_green_s: kw.number("max_green_s")?,
            program_intergreens: kw.flag("program_intergreens")?,
        },
        program: kw.string("program")?,
        program_clock: kw.flag("program_clock")?.unwrap_or(false),
        pedestrian_zones: kw.flag("pedestrian_zones")?.unwrap_or(false),
    })
}
