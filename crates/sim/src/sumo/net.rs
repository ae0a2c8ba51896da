//! Reading a SUMO network (`.net.xml`): what the backend needs to control its traffic
//! lights generically.
//!
//! Read: every lane's length and shape end (for storage and approach bearings), edge
//! functions (normal, internal, crossing), every program (`<tlLogic>`) of each traffic
//! light (also from additional files, [`NetFile::add_programs`]), every `<connection>`
//! (which traffic light and link index controls it, its direction, its internal lane),
//! and each junction's `<request foes=...>` conflict rows with the internal lanes
//! (`intLanes`) they are indexed by.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::nema::NemaReader;
use super::waut::{self, Waut};
use super::xml::{scan, Attrs, Node};
use super::SumoError;

/// One lane.
#[derive(Clone, Debug, PartialEq)]
pub struct NetLane {
    /// The edge it belongs to.
    pub edge: String,
    /// Length (m).
    pub length_m: f64,
    /// Speed limit (m/s), if given.
    pub speed_mps: Option<f64>,
    /// Travel direction at the lane's end (last shape segment, not normalised), if the
    /// lane has a shape.
    pub end_direction: Option<(f64, f64)>,
}

/// One edge's role.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NetEdge {
    /// `""` for a normal road, else SUMO's `function` (`internal`, `crossing`, ...).
    pub function: String,
    /// For a pedestrian crossing: the road edges it crosses.
    pub crossing_edges: Vec<String>,
    /// The junction it starts at, if given.
    pub from: Option<String>,
    /// The junction it ends at, if given.
    pub to: Option<String>,
}

/// One phase of a traffic-light program.
#[derive(Clone, Debug, PartialEq)]
pub struct TlPhase {
    /// Duration (s); for actuated programs the phase's initial duration.
    pub duration_s: f64,
    /// The state string, one character per link.
    pub state: String,
    /// Shortest duration of an actuated phase (`minDur`), if given.
    pub min_dur_s: Option<f64>,
    /// Longest duration of an actuated phase (`maxDur`), if given.
    pub max_dur_s: Option<f64>,
    /// The phases SUMO goes to after this one (`next`), if the program sets them: then its
    /// order is not the file's.
    pub next: Option<String>,
}

/// A traffic light's program (`<tlLogic>`).
#[derive(Clone, Debug, PartialEq)]
pub struct TlLogic {
    /// Traffic light id.
    pub id: String,
    /// Program id.
    pub program_id: String,
    /// Program type: `static`, `actuated`, `delay_based`, ...
    pub kind: String,
    /// Phases in program order.
    pub phases: Vec<TlPhase>,
    /// The program's time offset (s): at time t it is (t - offset) mod cycle into its cycle.
    pub offset_s: f64,
}

/// One `<connection>`: a link from a lane to a lane.
#[derive(Clone, Debug, PartialEq)]
pub struct NetConnection {
    /// Incoming edge.
    pub from: String,
    /// Outgoing edge.
    pub to: String,
    /// Lane index on `from`.
    pub from_lane: u32,
    /// Lane index on `to`.
    pub to_lane: u32,
    /// First internal lane crossed, if the net has internal links.
    pub via: Option<String>,
    /// Controlling traffic light.
    pub tl: Option<String>,
    /// Index in the traffic light's state string.
    pub link_index: Option<usize>,
    /// SUMO direction: `s`, `l`, `L`, `r`, `R`, `t`, ...
    pub dir: String,
}

impl NetConnection {
    /// The incoming lane's id (SUMO lane ids are `<edge>_<index>`).
    pub fn from_lane_id(&self) -> String {
        format!("{}_{}", self.from, self.from_lane)
    }

    /// The outgoing lane's id.
    pub fn to_lane_id(&self) -> String {
        format!("{}_{}", self.to, self.to_lane)
    }
}

/// A junction's conflict table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NetJunction {
    /// Junction type (`traffic_light`, `priority`, `internal`, ...).
    pub kind: String,
    /// Internal lanes, indexed like the request rows.
    pub int_lanes: Vec<String>,
    /// `foes[i][j]`: request `i` conflicts with request `j`.
    pub foes: Vec<Vec<bool>>,
}

/// The parts of a `.net.xml` the backend uses.
#[derive(Clone, Debug, Default)]
pub struct NetFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// Lanes by id.
    pub lanes: HashMap<String, NetLane>,
    /// Edges by id.
    pub edges: HashMap<String, NetEdge>,
    /// Every traffic-light program, in file order (a light may have several; SUMO runs
    /// the last one loaded, see [`NetFile::active_program`]).
    pub tl_logics: Vec<TlLogic>,
    /// All connections, in file order.
    pub connections: Vec<NetConnection>,
    /// Junctions by id.
    pub junctions: HashMap<String, NetJunction>,
    /// The `<WAUT>`s of the additional files, in file order.
    pub wauts: Vec<Waut>,
    /// `<wautJunction>` bindings: (WAUT id, light id).
    pub waut_lights: Vec<(String, String)>,
    /// The simulation time the programs start at (SUMO's begin, s), which picks the program
    /// a light bound to a WAUT starts on. 0 unless set ([`SumoConfig::read_net`] sets it).
    ///
    /// [`SumoConfig::read_net`]: super::SumoConfig::read_net
    pub begin_s: f64,
}

impl NetFile {
    /// Reads `path`, plain or gzip-compressed (`.net.xml.gz`, recognised by its magic
    /// bytes as SUMO does). Errors name the file and the element at fault.
    pub fn read(path: &Path) -> Result<Self, SumoError> {
        let mut net = read_xml(path, |input| NetFile::parse(input))?;
        net.path = path.to_path_buf();
        Ok(net)
    }

    /// Adds the traffic-light programs (`<tlLogic>`) of the additional file `path` (plain
    /// or gzip-compressed; other elements are skipped), after the net's own, as SUMO loads
    /// them: a program of a new id for a light becomes its active one, and one with the id
    /// of a program already read replaces it. Errors name the file.
    ///
    /// Its `<WAUT>`s and `<wautJunction>`s are kept too ([`NetFile::waut_of`]).
    pub fn add_programs(&mut self, path: &Path) -> Result<(), SumoError> {
        read_xml(path, |input| self.add_programs_from(input, path))
    }

    /// [`NetFile::add_programs`] from XML text already open (`path` names it in the WAUTs
    /// read). Nothing is added where the text is refused.
    pub fn add_programs_from(
        &mut self,
        input: &mut dyn BufRead,
        path: &Path,
    ) -> Result<(), String> {
        let file = parse_programs(input, path)?;
        for logic in file.programs {
            let same = |t: &TlLogic| t.id == logic.id && t.program_id == logic.program_id;
            self.tl_logics.retain(|t| !same(t));
            self.tl_logics.push(logic);
        }
        self.wauts.extend(file.wauts);
        self.waut_lights.extend(file.waut_lights);
        Ok(())
    }

    /// The WAUT light `id` is bound to, if any (the first binding, as SUMO refuses a second).
    pub fn waut_of(&self, id: &str) -> Option<&Waut> {
        let (waut, _) = self.waut_lights.iter().find(|(_, light)| light == id)?;
        self.wauts.iter().find(|w| &w.id == waut)
    }

    /// Ids of the traffic lights, each once, in the order their first program appears.
    pub fn tls_ids(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = Vec::new();
        for t in &self.tl_logics {
            if !ids.contains(&t.id.as_str()) {
                ids.push(&t.id);
            }
        }
        ids
    }

    /// The program of light `id` that runs: `wanted` if the light has a program of that
    /// id, else the one its WAUT gives at [`NetFile::begin_s`] (as SUMO starts it), else
    /// the last one loaded (SUMO makes the last program loaded active).
    pub fn active_program(&self, id: &str, wanted: Option<&str>) -> Option<&TlLogic> {
        let mut of_light = self.tl_logics.iter().filter(|t| t.id == id);
        let named = |w: &str| of_light.clone().find(|t| t.program_id == w);
        let by_waut = || named(self.waut_of(id)?.program_at(self.begin_s));
        wanted
            .and_then(named)
            .or_else(by_waut)
            .or_else(|| of_light.next_back())
    }

    /// For a light bound to a WAUT, what greenwave does not follow of it (see
    /// [`Waut::note`]), with `program` the program its plan comes from.
    pub fn waut_note(&self, id: &str, program: &str) -> Option<String> {
        Some(self.waut_of(id)?.note(program, self.begin_s))
    }

    /// Parses a network from XML text (for tests and in-memory nets).
    pub fn parse(input: impl std::io::BufRead) -> Result<Self, String> {
        let mut p = NetParser::default();
        scan(input, |node| match node {
            Node::Open { name, attrs, empty } => p.open(name, attrs, empty),
            Node::Close { name } => p.close(name),
        })?;
        p.programs.end(&p.net.tl_logics)?;
        if !p.saw_net {
            return Err("not a SUMO network (no <net> element)".into());
        }
        Ok(p.net)
    }
}

/// [`NetFile::parse`]'s state: the network so far and the elements open.
#[derive(Default)]
struct NetParser {
    net: NetFile,
    /// The `<edge>` open.
    edge: Option<String>,
    /// The `<tlLogic>` being read (the last of `tl_logics`).
    programs: ProgramReader,
    /// The `<junction>` open.
    junction: Option<String>,
    saw_net: bool,
}

impl NetParser {
    /// An element opens (`empty`: and closes at once).
    fn open(&mut self, name: &str, attrs: &Attrs, empty: bool) -> Result<(), String> {
        let net = &mut self.net;
        match name {
            "net" => self.saw_net = true,
            "edge" => {
                let id = attrs.need(name, "id")?.to_string();
                net.edges.insert(id.clone(), read_edge(attrs));
                self.edge = (!empty).then_some(id);
            }
            "lane" => {
                if let Some(edge) = &self.edge {
                    let (id, lane) = read_lane(attrs, edge)?;
                    net.lanes.insert(id, lane);
                }
            }
            "tlLogic" => self.programs.open(&mut net.tl_logics, attrs, empty)?,
            "phase" => self.programs.phase(&mut net.tl_logics, attrs)?,
            "param" => self.programs.param(attrs),
            "junction" => {
                let id = attrs.need(name, "id")?.to_string();
                net.junctions.insert(id.clone(), read_junction(attrs));
                self.junction = (!empty).then_some(id);
            }
            "request" => {
                if let Some(jid) = &self.junction {
                    let j = net.junctions.get_mut(jid).expect("inserted on open");
                    read_request(attrs, jid, j)?;
                }
            }
            "connection" => net.connections.push(read_connection(attrs)?),
            _ => {}
        }
        Ok(())
    }

    /// An element closes.
    fn close(&mut self, name: &str) -> Result<(), String> {
        match name {
            "edge" => self.edge = None,
            "tlLogic" => self.programs.close(&mut self.net.tl_logics)?,
            "junction" => self.junction = None,
            _ => {}
        }
        Ok(())
    }
}

/// Opens `path`, plain or gzip-compressed (recognised by its magic bytes, as SUMO does),
/// and parses it with `parse`; errors name the file.
fn read_xml<T>(
    path: &Path,
    parse: impl FnOnce(&mut dyn BufRead) -> Result<T, String>,
) -> Result<T, SumoError> {
    let err = |message: String| SumoError::Net {
        path: path.to_path_buf(),
        message,
    };
    let mut file = BufReader::new(File::open(path).map_err(|e| err(format!("cannot open: {e}")))?);
    let gzip = file
        .fill_buf()
        .map_err(|e| err(format!("cannot read: {e}")))?
        .starts_with(&[0x1f, 0x8b]);
    let parsed = if gzip {
        parse(&mut BufReader::new(flate2::bufread::MultiGzDecoder::new(
            file,
        )))
    } else {
        parse(&mut file)
    };
    parsed.map_err(err)
}

/// What an additional file holds for the traffic lights.
#[derive(Default)]
struct AdditionalPrograms {
    programs: Vec<TlLogic>,
    wauts: Vec<Waut>,
    waut_lights: Vec<(String, String)>,
}

/// The `<tlLogic>` programs, `<WAUT>`s and `<wautJunction>`s of the additional file
/// `path`, in file order (SUMO accepts them under `<additional>` or as bare top-level
/// elements).
fn parse_programs(input: &mut dyn BufRead, path: &Path) -> Result<AdditionalPrograms, String> {
    let mut file = AdditionalPrograms::default();
    let mut programs = ProgramReader::default();
    let mut waut_open = false;
    scan(input, |node| {
        match node {
            Node::Open {
                name: "WAUT",
                attrs,
                empty,
            } => {
                file.wauts.push(waut::read_waut(attrs, path)?);
                waut_open = !empty;
            }
            Node::Open {
                name: "wautSwitch",
                attrs,
                ..
            } if waut_open => {
                waut::add_switch(file.wauts.last_mut().expect("open"), attrs)?;
            }
            Node::Close { name: "WAUT" } => waut_open = false,
            Node::Open {
                name: "wautJunction",
                attrs,
                ..
            } => file.waut_lights.push(waut::read_junction(attrs)?),
            Node::Open {
                name: "tlLogic",
                attrs,
                empty,
            } => programs.open(&mut file.programs, attrs, empty)?,
            Node::Open {
                name: "phase",
                attrs,
                ..
            } => programs.phase(&mut file.programs, attrs)?,
            Node::Open {
                name: "param",
                attrs,
                ..
            } => programs.param(attrs),
            Node::Close { name: "tlLogic" } => programs.close(&mut file.programs)?,
            _ => {}
        }
        Ok(())
    })?;
    programs.end(&file.programs)?;
    Ok(file)
}

/// Reads `<tlLogic>` programs element by element into a list of programs (the net's or an
/// additional file's), the one open being the last: the same rules for both parsers.
#[derive(Default)]
struct ProgramReader {
    /// Whether a program is open, and what a NEMA program holds beyond its phases.
    open: Option<NemaReader>,
}

impl ProgramReader {
    /// A `<tlLogic>` opens (`empty`: and closes at once).
    fn open(
        &mut self,
        programs: &mut Vec<TlLogic>,
        attrs: &Attrs,
        empty: bool,
    ) -> Result<(), String> {
        self.end(programs)?;
        programs.push(read_tl_logic(attrs)?);
        self.open = (!empty).then(NemaReader::default);
        Ok(())
    }

    /// A `<phase>`: one more phase of the program open, if any.
    fn phase(&mut self, programs: &mut [TlLogic], attrs: &Attrs) -> Result<(), String> {
        if let (Some(nema), Some(tl)) = (&mut self.open, programs.last_mut()) {
            tl.phases.push(read_phase(attrs)?);
            nema.phase(attrs);
        }
        Ok(())
    }

    /// A `<param>`: kept if a program is open.
    fn param(&mut self, attrs: &Attrs) {
        if let Some(nema) = &mut self.open {
            nema.param(attrs);
        }
    }

    /// `</tlLogic>`: the program is complete (a NEMA one is rewritten into its stages).
    fn close(&mut self, programs: &mut [TlLogic]) -> Result<(), String> {
        match (self.open.take(), programs.last_mut()) {
            (Some(nema), Some(tl)) => nema.finish(tl),
            _ => Ok(()),
        }
    }

    /// Refuses a program still open at the next `<tlLogic>` or the end of the file (a
    /// truncated file): its phases may be incomplete, a NEMA one's without its stages.
    fn end(&self, programs: &[TlLogic]) -> Result<(), String> {
        match (&self.open, programs.last()) {
            (Some(_), Some(tl)) => Err(format!(
                "<tlLogic id=\"{}\" programID=\"{}\"> is not closed before the next <tlLogic> or the end of the file",
                tl.id, tl.program_id
            )),
            _ => Ok(()),
        }
    }
}

/// One `<tlLogic>`'s own attributes (its phases follow).
fn read_tl_logic(attrs: &Attrs) -> Result<TlLogic, String> {
    Ok(TlLogic {
        id: attrs.need("tlLogic", "id")?.to_string(),
        program_id: attrs.get("programID").unwrap_or("").to_string(),
        kind: attrs.get("type").unwrap_or("static").to_string(),
        phases: Vec::new(),
        offset_s: attrs.num("tlLogic", "offset")?.unwrap_or(0.0),
    })
}

/// One `<edge>` (its id is the caller's).
fn read_edge(attrs: &Attrs) -> NetEdge {
    NetEdge {
        function: attrs.get("function").unwrap_or("").to_string(),
        crossing_edges: attrs
            .get("crossingEdges")
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        from: attrs.get("from").map(str::to_string),
        to: attrs.get("to").map(str::to_string),
    }
}

/// One `<lane>` of the edge `edge`, with its id.
fn read_lane(attrs: &Attrs, edge: &str) -> Result<(String, NetLane), String> {
    let id = attrs.need("lane", "id")?.to_string();
    let length_m = attrs
        .num("lane", "length")?
        .ok_or_else(|| format!("<lane id=\"{id}\"> without length"))?;
    if length_m <= 0.0 {
        return Err(format!("<lane id=\"{id}\"> has length {length_m}"));
    }
    let end_direction = attrs.get("shape").and_then(shape_end_direction);
    let speed_mps = attrs.num("lane", "speed")?.filter(|&v| v > 0.0);
    let lane = NetLane {
        edge: edge.to_string(),
        length_m,
        speed_mps,
        end_direction,
    };
    Ok((id, lane))
}

/// One `<junction>` (its id is the caller's; its foes come with its `<request>`s).
fn read_junction(attrs: &Attrs) -> NetJunction {
    NetJunction {
        kind: attrs.get("type").unwrap_or("").to_string(),
        int_lanes: attrs
            .get("intLanes")
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        foes: Vec::new(),
    }
}

/// One `<request>` of junction `jid`: the next row of `j`'s foes.
fn read_request(attrs: &Attrs, jid: &str, j: &mut NetJunction) -> Result<(), String> {
    let index = attrs.num("request", "index")?.unwrap_or(-1.0);
    let foes = attrs.need("request", "foes")?;
    if index < 0.0 || index.fract() != 0.0 || index as usize != j.foes.len() {
        return Err(format!(
            "junction {jid}: <request index=\"{index}\"> out of order"
        ));
    }
    if let Some(c) = foes.chars().find(|&c| c != '0' && c != '1') {
        return Err(format!(
            "junction {jid}: <request index=\"{index}\" foes=\"{foes}\">: {c:?} is not 0 or 1"
        ));
    }
    // Bit j of a foes string is its j-th character from the right.
    let row = foes.bytes().rev().map(|c| c == b'1').collect();
    j.foes.push(row);
    Ok(())
}

/// One `<connection>`.
fn read_connection(attrs: &Attrs) -> Result<NetConnection, String> {
    let name = "connection";
    let need = |k: &str| attrs.need(name, k).map(str::to_string);
    let lane = |k: &str| -> Result<u32, String> {
        let v = attrs
            .num(name, k)?
            .ok_or_else(|| format!("<connection> without attribute {k}"))?;
        if v < 0.0 || v.fract() != 0.0 || v > u32::MAX as f64 {
            return Err(format!("<connection {k}=\"{v}\">: not a lane index"));
        }
        Ok(v as u32)
    };
    // linkIndex -1: a link of a signalised junction that no signal controls (netconvert
    // writes it for e.g. a through lane that bypasses the light); treated as uncontrolled.
    let link_index = match attrs.num(name, "linkIndex")? {
        None => None,
        Some(-1.0) => None,
        Some(v) if v >= 0.0 && v.fract() == 0.0 && v < 1e6 => Some(v as usize),
        Some(v) => return Err(format!("<connection linkIndex=\"{v}\">: bad index")),
    };
    Ok(NetConnection {
        from: need("from")?,
        to: need("to")?,
        from_lane: lane("fromLane")?,
        to_lane: lane("toLane")?,
        via: attrs.get("via").map(str::to_string),
        tl: attrs.get("tl").map(str::to_string),
        link_index,
        dir: attrs.get("dir").unwrap_or("s").to_string(),
    })
}

/// One `<phase>`: its state, duration and (actuated programs) duration bounds.
fn read_phase(attrs: &Attrs) -> Result<TlPhase, String> {
    let state = attrs.need("phase", "state")?.to_string();
    let secs = |key: &str| -> Result<Option<f64>, String> {
        match attrs.num("phase", key)? {
            Some(v) if v < 0.0 => Err(format!("<phase {key}=\"{v}\">: negative duration")),
            v => Ok(v),
        }
    };
    Ok(TlPhase {
        duration_s: secs("duration")?.unwrap_or(0.0),
        min_dur_s: secs("minDur")?,
        max_dur_s: secs("maxDur")?,
        next: attrs.get("next").map(str::to_string),
        state,
    })
}

/// Direction of the last segment of a SUMO shape (`"x,y x,y ..."`).
fn shape_end_direction(shape: &str) -> Option<(f64, f64)> {
    let mut pts = shape.split_whitespace().filter_map(|p| {
        let mut it = p.split(',');
        let x = it.next()?.parse::<f64>().ok()?;
        let y = it.next()?.parse::<f64>().ok()?;
        Some((x, y))
    });
    let mut prev = pts.next()?;
    let mut last = pts.next()?;
    for p in pts {
        prev = last;
        last = p;
    }
    let d = (last.0 - prev.0, last.1 - prev.1);
    (d.0.is_finite() && d.1.is_finite() && (d.0 != 0.0 || d.1 != 0.0)).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_non_networks_and_bad_values() {
        assert!(NetFile::parse("<routes/>".as_bytes())
            .unwrap_err()
            .contains("not a SUMO network"));
        let bad = r#"<net><edge id="a"><lane id="a_0" length="-3"/></edge></net>"#;
        assert!(NetFile::parse(bad.as_bytes())
            .unwrap_err()
            .contains("length -3"));
        let bad = r#"<net><connection from="a" to="b" fromLane="x" toLane="0"/></net>"#;
        assert!(NetFile::parse(bad.as_bytes()).is_err());
        assert!(NetFile::parse("<net><edge".as_bytes()).is_err());
        let err = NetFile::read(Path::new("/no/such.net.xml")).unwrap_err();
        assert!(err.to_string().contains("/no/such.net.xml"));
    }

    #[test]
    fn reads_foes_right_to_left() {
        let xml = r#"<net><junction id="J" type="traffic_light" intLanes=":J_0_0 :J_1_0">
            <request index="0" response="00" foes="10" cont="0"/>
            <request index="1" response="00" foes="01" cont="0"/>
        </junction></net>"#;
        let net = NetFile::parse(xml.as_bytes()).unwrap();
        let j = &net.junctions["J"];
        assert_eq!(j.foes, vec![vec![false, true], vec![true, false]]);
        assert_eq!(j.int_lanes, vec![":J_0_0", ":J_1_0"]);
        // A foes string of other characters is refused, naming the junction.
        let odd = xml.replace(r#"foes="01""#, r#"foes="0x""#);
        let err = NetFile::parse(odd.as_bytes()).unwrap_err();
        assert!(err.contains("junction J") && err.contains("'x'"), "{err}");
    }

    #[test]
    fn a_phase_that_names_its_successors_is_read_with_them() {
        let xml = r#"<net><tlLogic id="J" programID="0"><phase duration="30" state="Gr" next="1 0"/>
            <phase duration="30" state="rG"/></tlLogic></net>"#;
        let net = NetFile::parse(xml.as_bytes()).unwrap();
        let phases = &net.tl_logics[0].phases;
        assert_eq!(phases[0].next.as_deref(), Some("1 0"));
        assert_eq!(phases[1].next, None);
    }

    #[test]
    fn programs_the_active_one_and_uncontrolled_links() {
        let xml = r#"<net>
            <tlLogic id="J" type="static" programID="a"><phase duration="30" state="Gr"/></tlLogic>
            <tlLogic id="J" type="actuated" programID="b">
                <phase duration="30" minDur="5" maxDur="45" state="rG"/></tlLogic>
            <connection from="x" to="y" fromLane="0" toLane="0" tl="J" linkIndex="-1"/>
        </net>"#;
        let net = NetFile::parse(xml.as_bytes()).unwrap();
        assert_eq!(net.tls_ids(), ["J"]);
        assert_eq!(net.active_program("J", None).unwrap().program_id, "b");
        assert_eq!(net.active_program("J", Some("a")).unwrap().program_id, "a");
        assert_eq!(net.active_program("J", Some("zz")).unwrap().program_id, "b");
        let b = net.active_program("J", None).unwrap();
        assert_eq!(
            (b.kind.as_str(), b.phases[0].max_dur_s),
            ("actuated", Some(45.0))
        );
        assert_eq!(
            net.connections[0].link_index, None,
            "linkIndex -1: uncontrolled"
        );
        let bad =
            r#"<net><connection from="x" to="y" fromLane="0" toLane="0" linkIndex="-2"/></net>"#;
        assert!(NetFile::parse(bad.as_bytes())
            .unwrap_err()
            .contains("bad index"));
    }

    #[test]
    fn reads_gzip_nets() {
        use std::io::Write;
        let xml =
            r#"<net><tlLogic id="J" programID="0"><phase duration="3" state="G"/></tlLogic></net>"#;
        let path = std::env::temp_dir().join(format!("gw-net-{}.net.xml.gz", std::process::id()));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(xml.as_bytes()).unwrap();
        std::fs::write(&path, gz.finish().unwrap()).unwrap();
        let net = NetFile::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(net.tls_ids(), ["J"]);
    }

    #[test]
    fn additional_programs_load_after_the_nets_as_in_sumo() {
        let xml = r#"<net><tlLogic id="J" programID="0"><phase duration="30" state="Gr"/>
            <phase duration="30" state="rG"/></tlLogic></net>"#;
        let mut net = NetFile::parse(xml.as_bytes()).unwrap();
        let dir = std::env::temp_dir().join(format!("gw-add-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        // A bare <tlLogic> (no <additional> root), as SUMO's game net fokr_bs_demo ships.
        let bare = write(
            "bare.add.xml",
            r#"<tlLogic id="J" programID="city" offset="7" type="static">
                <phase duration="20" state="Gr"/><phase duration="3" state="yr"/>
                <phase duration="40" state="rG"/></tlLogic>"#,
        );
        net.add_programs(&bare).unwrap();
        let active = net.active_program("J", None).unwrap();
        assert_eq!((active.program_id.as_str(), active.offset_s), ("city", 7.0));
        assert_eq!(active.phases.len(), 3);
        assert_eq!(net.active_program("J", Some("0")).unwrap().phases.len(), 2);
        // Under <additional>, among other elements; the same id and program id replaces.
        let wrapped = write(
            "wrapped.add.xml",
            r#"<additional><vType id="car"/><e1Detector id="d" lane="a_0" pos="5" file="x"/>
                <tlLogic id="J" programID="0"><phase duration="9" state="GG"/></tlLogic>
                <phase duration="1" state="rr"/></additional>"#,
        );
        net.add_programs(&wrapped).unwrap();
        let ids: Vec<_> = net
            .tl_logics
            .iter()
            .map(|t| t.program_id.as_str())
            .collect();
        assert_eq!(
            ids,
            ["city", "0"],
            "program 0 replaced, and now loaded last"
        );
        assert_eq!(net.active_program("J", None).unwrap().phases.len(), 1);
        // Errors name the file and what is wrong.
        let bad = write(
            "bad.add.xml",
            r#"<tlLogic id="J" programID="x"><phase duration="-1" state="G"/></tlLogic>"#,
        );
        let msg = net.add_programs(&bad).unwrap_err().to_string();
        assert!(
            msg.contains("bad.add.xml") && msg.contains("negative"),
            "{msg}"
        );
        let msg = net
            .add_programs(&dir.join("none.add.xml"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("none.add.xml"), "{msg}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A WAUT picks the program a light starts on, as SUMO 1.28 does (checked with TraCI:
    /// a WAUT's light starts on `startProg` though another program was loaded after it,
    /// and on the last switch's program where the simulation begins after the switch).
    #[test]
    fn a_waut_picks_the_program_at_begin() {
        let xml = r#"<net><tlLogic id="J" programID="0"><phase duration="30" state="Gr"/>
            <phase duration="30" state="rG"/></tlLogic>
            <tlLogic id="K" programID="0"><phase duration="30" state="Gr"/></tlLogic></net>"#;
        let mut net = NetFile::parse(xml.as_bytes()).unwrap();
        let path = std::env::temp_dir().join(format!("gw-waut-{}.add.xml", std::process::id()));
        std::fs::write(
            &path,
            r#"<additional>
                <tlLogic id="J" programID="day"><phase duration="50" state="Gr"/>
                    <phase duration="10" state="rG"/></tlLogic>
                <WAUT id="w" refTime="0" startProg="0">
                    <wautSwitch time="7:00:00" to="day"/><wautSwitch time="100" to="0"/>
                </WAUT>
                <wautJunction wautID="w" junctionID="J"/>
            </additional>"#,
        )
        .unwrap();
        net.add_programs(&path).unwrap();
        let program = |net: &NetFile| net.active_program("J", None).unwrap().program_id.clone();
        assert_eq!(program(&net), "0", "startProg, not the program loaded last");
        net.begin_s = 25_200.0;
        assert_eq!(program(&net), "day", "the 7:00:00 switch is before begin");
        assert_eq!(net.active_program("J", Some("0")).unwrap().program_id, "0");
        let note = net.waut_note("J", "day").unwrap();
        assert!(
            note.contains("WAUT w") && note.contains("to day at 25200 s"),
            "{note}"
        );
        assert!(net.waut_note("K", "0").is_none(), "K is bound to no WAUT");
        // A WAUT without its start program is refused with the file named.
        std::fs::write(&path, r#"<WAUT id="v" refTime="0"/>"#).unwrap();
        let msg = net.add_programs(&path).unwrap_err().to_string();
        assert!(
            msg.contains("gw-waut-") && msg.contains("startProg"),
            "{msg}"
        );
        std::fs::write(
            &path,
            r#"<WAUT id="v" startProg="0"><wautSwitch time="soon" to="0"/></WAUT>"#,
        )
        .unwrap();
        let msg = net.add_programs(&path).unwrap_err().to_string();
        assert!(msg.contains("not a time"), "{msg}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn shape_direction() {
        assert_eq!(shape_end_direction("0,0 0,5 3,5"), Some((3.0, 0.0)));
        assert_eq!(shape_end_direction("1,1"), None);
    }
}
