//! SUMO's NEMA programs (`<tlLogic type="NEMA">`) read as the stage programs the rest of
//! the backend reads.
//!
//! A NEMA program lists one `<phase>` per NEMA phase: its `name` is the phase number, its
//! `state` greens that phase's links alone, and its clearance is in its own `yellow` and
//! `red` attributes (s). Its `ring1` and `ring2` params give the two rings: four slots
//! each, phase numbers in ring order, 0 for an unused slot. As SUMO's NEMA controller
//! reads them, slots 1–2 of each ring are on one side of the barrier and slots 3–4 on the
//! other (`barrierNum = slot / 2`), and it runs one phase of each ring at a time, both
//! from the same side. (`barrierPhases` and `barrier2Phases`/`coordinatePhases` only pick
//! SUMO's default phase on each side; SUMO checks them, greenwave does not read them.)
//! Read phase by phase, such a program would make every NEMA phase a stage of its own
//! (phase 2 without its partner 6: split phasing) with no clearance (it has no yellow
//! phases), so a controller would get a yellow imposed instead of the net's.
//!
//! So a NEMA program is rewritten once, as it is read, into the stages SUMO can show:
//! * one green stage per pair of phases that may run together: each phase of ring 1 with
//!   each phase of ring 2 on the same side of the barrier (a ring with no phase on a side
//!   leaves the other's phases alone there), side by side, each in ring order; its state
//!   is both phases' greens (`G` over `g`);
//! * after each stage a yellow phase (every green link `y`) of the longer of the two
//!   phases' `yellow`, then an all-red phase of the longer `red` (none when both are 0): no
//!   clearance is shorter than either phase's own;
//! * the stage's `minDur` and `maxDur` are the larger of the pair's, its `duration` the
//!   larger of their durations, each capped at its phase's `maxDur`.
//!
//! The program keeps its type `NEMA`, so max green comes from `maxDur` as for SUMO's other
//! actuated programs ([`timing`](super::timing)). Where greenwave does not drive the light
//! (fixed-time, a light left on its program) SUMO runs the NEMA program itself. The program
//! clock ([`clock`](super::clock)) follows the rewritten program's stages in turn, a
//! nominal cycle that SUMO's NEMA controller, being actuated, does not keep (as for
//! SUMO's other actuated programs). A malformed program is refused here, with the light
//! named: no `ring2` or a ring naming a phase it lacks (SUMO refuses both too), a phase
//! without a number, a ring of more than four slots, a negative `yellow` or `red`.

use super::net::{TlLogic, TlPhase};
use super::timing::is_green;
use super::xml::Attrs;

/// Slots of a NEMA ring: two on each side of the barrier.
const RING_SLOTS: usize = 4;

/// What a NEMA program holds beyond the phases the net parser reads.
#[derive(Debug, Default)]
pub(crate) struct NemaReader {
    /// `<param>` key–value pairs of the program.
    params: Vec<(String, String)>,
    /// Per `<phase>`, in order: its `name`, `yellow` and `red`, as written (read only when
    /// the program is a NEMA one).
    phases: Vec<[Option<String>; 3]>,
}

/// One NEMA phase's number and clearance.
struct NemaPhase {
    number: u32,
    yellow_s: f64,
    red_s: f64,
}

impl NemaReader {
    /// A `<param>` inside the program.
    pub fn param(&mut self, attrs: &Attrs) {
        if let (Some(k), Some(v)) = (attrs.get("key"), attrs.get("value")) {
            self.params.push((k.to_string(), v.to_string()));
        }
    }

    /// A `<phase>` inside the program (its timing and state are read by the net parser).
    pub fn phase(&mut self, attrs: &Attrs) {
        let get = |key: &str| attrs.get(key).map(str::to_string);
        self.phases.push([get("name"), get("yellow"), get("red")]);
    }

    /// Rewrites `tl` (the program just read, with the phases this reader saw) into its
    /// stages, if it is a NEMA program; other programs are left as they are.
    pub fn finish(self, tl: &mut TlLogic) -> Result<(), String> {
        if tl.kind != "NEMA" || tl.phases.is_empty() {
            return Ok(());
        }
        let what = format!("NEMA program \"{}\" of light {}", tl.program_id, tl.id);
        let stages = self
            .stages(&tl.phases)
            .map_err(|e| format!("{what}: {e}"))?;
        tl.phases = stages;
        Ok(())
    }

    /// The stage program of NEMA phases `phases`.
    fn stages(&self, phases: &[TlPhase]) -> Result<Vec<TlPhase>, String> {
        if self.phases.len() != phases.len() {
            return Err("its phases were not all read".into());
        }
        let nema = self.nema_phases()?;
        let index_of = |n: u32| nema.iter().position(|p| p.number == n);
        let rings = [self.ring("ring1")?, self.ring("ring2")?];
        for n in rings.iter().flatten().copied().filter(|&n| n != 0) {
            if index_of(n).is_none() {
                return Err(format!(
                    "its rings name phase {n}, which it has no <phase> for"
                ));
            }
        }
        let mut out = Vec::new();
        for side in [0..2, 2..RING_SLOTS] {
            let slots = |r: &[u32]| -> Vec<u32> {
                r.iter()
                    .skip(side.start)
                    .take(side.len())
                    .copied()
                    .collect()
            };
            for (a, b) in pairs(&slots(&rings[0]), &slots(&rings[1])) {
                let pair: Vec<usize> = [a, b].into_iter().flatten().filter_map(index_of).collect();
                push_stage(phases, &nema, &pair, &mut out)?;
            }
        }
        if out.is_empty() {
            return Err("its rings hold no phase".into());
        }
        Ok(out)
    }

    /// Each `<phase>`'s NEMA number (its `name`) and clearance.
    fn nema_phases(&self) -> Result<Vec<NemaPhase>, String> {
        let mut out: Vec<NemaPhase> = Vec::with_capacity(self.phases.len());
        for (k, [name, yellow, red]) in self.phases.iter().enumerate() {
            let name = name.as_deref().unwrap_or("");
            let number: u32 =
                name.trim().parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                    format!("phase {k} has name \"{name}\", not a NEMA phase number")
                })?;
            if out.iter().any(|p| p.number == number) {
                return Err(format!("phase number {number} is given twice"));
            }
            let secs = |v: &Option<String>, key: &str| -> Result<f64, String> {
                let Some(v) = v else { return Ok(0.0) };
                v.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .ok_or_else(|| format!("phase {number} has {key} \"{v}\", not a duration"))
            };
            out.push(NemaPhase {
                number,
                yellow_s: secs(yellow, "yellow")?,
                red_s: secs(red, "red")?,
            });
        }
        Ok(out)
    }

    /// The slots of ring `key` (0: unused); SUMO needs both rings.
    fn ring(&self, key: &str) -> Result<Vec<u32>, String> {
        let Some((_, v)) = self.params.iter().rev().find(|(k, _)| k == key) else {
            return Err(format!(
                "it has no {key} param (SUMO needs ring1 and ring2)"
            ));
        };
        let ring: Vec<u32> = v
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .map_err(|_| format!("{key} \"{v}\": \"{}\" is not a phase number", s.trim()))
            })
            .collect::<Result<_, _>>()?;
        if ring.len() > RING_SLOTS {
            return Err(format!(
                "{key} \"{v}\" has {} slots; a NEMA ring has {RING_SLOTS}, two on each side of the barrier",
                ring.len()
            ));
        }
        Ok(ring)
    }
}

/// Appends the stage of the program phases at `pair` (one or two indices): its green,
/// yellow and all-red phases.
fn push_stage(
    phases: &[TlPhase],
    nema: &[NemaPhase],
    pair: &[usize],
    out: &mut Vec<TlPhase>,
) -> Result<(), String> {
    let len = phases[pair[0]].state.len();
    if pair.iter().any(|&k| phases[k].state.len() != len) {
        return Err("two of its phases have states of different lengths".into());
    }
    let capped = |p: &TlPhase| p.max_dur_s.map_or(p.duration_s, |m| p.duration_s.min(m));
    let most = |f: &dyn Fn(usize) -> f64| pair.iter().map(|&k| f(k)).fold(0.0, f64::max);
    let most_opt = |f: &dyn Fn(&TlPhase) -> Option<f64>| {
        pair.iter().filter_map(|&k| f(&phases[k])).reduce(f64::max)
    };
    let green = combined_state(pair.iter().map(|&k| phases[k].state.as_bytes()), len);
    let clear = |to: u8| {
        green
            .iter()
            .map(|&c| if is_green(c) { to } else { c })
            .collect()
    };
    out.push(TlPhase {
        duration_s: most(&|k| capped(&phases[k])),
        state: to_string(green.clone()),
        min_dur_s: most_opt(&|p| p.min_dur_s),
        max_dur_s: most_opt(&|p| p.max_dur_s),
        next: None,
    });
    let yellow_s = most(&|k| nema[k].yellow_s);
    let red_s = most(&|k| nema[k].red_s);
    for (to, duration_s) in [(b'y', yellow_s), (b'r', red_s)] {
        if duration_s > 0.0 || to == b'y' {
            out.push(TlPhase {
                duration_s,
                state: to_string(clear(to)),
                min_dur_s: None,
                max_dur_s: None,
                next: None,
            });
        }
    }
    Ok(())
}

fn to_string(bytes: Vec<u8>) -> String {
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The states shown together: `G` where any shows `G`, else `g` where any shows `g`, else
/// the first one's character.
fn combined_state<'a>(states: impl Iterator<Item = &'a [u8]>, len: usize) -> Vec<u8> {
    let mut out: Option<Vec<u8>> = None;
    for s in states {
        let acc = out.get_or_insert_with(|| s.to_vec());
        for (a, &c) in acc.iter_mut().zip(s) {
            if c == b'G' || (c == b'g' && *a != b'G') {
                *a = c;
            }
        }
    }
    out.unwrap_or_else(|| vec![b'r'; len])
}

/// The stages on one side of the barrier: each phase of `one` with each of `two`, or
/// either's alone when the other ring has none there.
fn pairs(one: &[u32], two: &[u32]) -> Vec<(Option<u32>, Option<u32>)> {
    let present = |r: &[u32]| -> Vec<Option<u32>> {
        let v: Vec<Option<u32>> = r.iter().filter(|&&n| n != 0).map(|&n| Some(n)).collect();
        if v.is_empty() {
            vec![None]
        } else {
            v
        }
    };
    let mut out = Vec::new();
    for a in present(one) {
        for b in present(two) {
            if a.is_some() || b.is_some() {
                out.push((a, b));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::net::NetFile;

    /// A four-arm junction as `netgenerate --tls.default-type NEMA` writes it: one NEMA
    /// phase per approach, 2 with 6 and 4 with 8.
    fn nema_net(params: &str) -> String {
        format!(
            r#"<net>
  <tlLogic id="J" type="NEMA" programID="0" offset="0">
    <phase duration="90" state="GGrrrrrr" minDur="5" maxDur="50" vehext="2" yellow="3" red="2" name="2"/>
    <phase duration="90" state="rrrrGGrr" minDur="6" maxDur="40" vehext="2" yellow="4" red="1" name="6"/>
    <phase duration="30" state="rrGgrrrr" minDur="5" maxDur="45" vehext="2" yellow="3" red="2" name="4"/>
    <phase duration="30" state="rrrrrrGg" minDur="5" maxDur="45" vehext="2" yellow="3" red="0" name="8"/>
    {params}
  </tlLogic>
</net>"#
        )
    }

    const RINGS: &str = r#"<param key="barrier2Phases" value="2,6"/>
    <param key="barrierPhases" value="4,8"/>
    <param key="ring1" value="0,2,0,4"/>
    <param key="ring2" value="0,6,0,8"/>"#;

    fn states(net: &NetFile) -> Vec<(String, f64)> {
        net.tl_logics[0]
            .phases
            .iter()
            .map(|p| (p.state.clone(), p.duration_s))
            .collect()
    }

    fn greens(net: &NetFile) -> Vec<String> {
        states(net)
            .into_iter()
            .map(|(s, _)| s)
            .filter(|s| s.contains('G'))
            .collect()
    }

    #[test]
    fn concurrent_ring_phases_become_one_stage_with_the_longer_clearance() {
        let net = NetFile::parse(nema_net(RINGS).as_bytes()).unwrap();
        let s = states(&net);
        let expect: Vec<(&str, f64)> = vec![
            ("GGrrGGrr", 50.0), // 2 + 6: each capped at its maxDur, the larger kept
            ("yyrryyrr", 4.0),  // the longer yellow (6's)
            ("rrrrrrrr", 2.0),  // the longer red (2's)
            ("rrGgrrGg", 30.0), // 4 + 8
            ("rryyrryy", 3.0),
            ("rrrrrrrr", 2.0),
        ];
        let got: Vec<(&str, f64)> = s.iter().map(|(a, d)| (a.as_str(), *d)).collect();
        assert_eq!(got, expect);
        let p = &net.tl_logics[0].phases[0];
        assert_eq!((p.min_dur_s, p.max_dur_s), (Some(6.0), Some(50.0)));
        assert_eq!(net.tl_logics[0].kind, "NEMA");
    }

    /// Phases 1–8, phase n greening link n − 1 alone, in rings `ring1` / `ring2`.
    fn eight_phases(ring1: &str, ring2: &str, barriers: (&str, &str)) -> String {
        let mut phases = String::new();
        for n in 1..=8 {
            let state: String = (1..=8).map(|l| if l == n { 'G' } else { 'r' }).collect();
            phases.push_str(&format!(
                r#"<phase duration="10" state="{state}" yellow="3" red="1" name="{n}"/>"#
            ));
        }
        format!(
            r#"<net><tlLogic id="J" type="NEMA" programID="p">{phases}
            <param key="ring1" value="{ring1}"/><param key="ring2" value="{ring2}"/>
            <param key="barrierPhases" value="{}"/><param key="barrier2Phases" value="{}"/>
            </tlLogic></net>"#,
            barriers.0, barriers.1
        )
    }

    #[test]
    fn a_full_dual_ring_gives_every_pair_on_the_same_side_of_the_barrier() {
        let xml = eight_phases("1,2,3,4", "5,6,7,8", ("4,8", "2,6"));
        let net = NetFile::parse(xml.as_bytes()).unwrap();
        // 1+5, 1+6, 2+5, 2+6 | 3+7, 3+8, 4+7, 4+8; never 1 with 7 or 2 with 3.
        assert_eq!(
            greens(&net),
            [
                "GrrrGrrr", "GrrrrGrr", "rGrrGrrr", "rGrrrGrr", "rrGrrrGr", "rrGrrrrG", "rrrGrrGr",
                "rrrGrrrG"
            ]
        );
        // The sides are the rings' slots 1–2 and 3–4, as SUMO's controller reads them; the
        // barrier params only pick SUMO's default phases. Barriers naming a phase before
        // the end of its side (4 with 7, which SUMO accepts) change nothing.
        let odd = eight_phases("1,2,3,4", "5,6,7,8", ("4,7", "2,6"));
        assert_eq!(
            states(&NetFile::parse(odd.as_bytes()).unwrap()),
            states(&net)
        );
        // Rings that start on the other side (3, 4 | 1, 2): the same stages, 3 + 7 first.
        let rotated = eight_phases("3,4,1,2", "7,8,5,6", ("4,8", "2,6"));
        let rotated = greens(&NetFile::parse(rotated.as_bytes()).unwrap());
        assert_eq!(rotated[0], "rrGrrrGr");
        let mut sorted = rotated.clone();
        sorted.sort();
        let mut want = greens(&net);
        want.sort();
        assert_eq!(sorted, want);
        // A ring of two slots has one side; the other ring's phases run alone on the other.
        let short = eight_phases("1,2", "5,6,7,8", ("2,8", "1,6"));
        let short = greens(&NetFile::parse(short.as_bytes()).unwrap());
        assert_eq!(
            short,
            ["GrrrGrrr", "GrrrrGrr", "rGrrGrrr", "rGrrrGrr", "rrrrrrGr", "rrrrrrrG"]
        );
    }

    #[test]
    fn a_malformed_nema_program_is_refused_by_name() {
        let cases = [
            (RINGS.replace("0,2,0,4", "0,2,0,9"), "phase 9"),
            (
                RINGS.replace("0,2,0,4", "0,2,x,4"),
                "\"x\" is not a phase number",
            ),
            (RINGS.replace("0,2,0,4", "0,2,0,4,0"), "has 5 slots"),
            (RINGS.replace("ring2", "ring9"), "no ring2 param"),
        ];
        for (params, want) in cases {
            let err = NetFile::parse(nema_net(&params).as_bytes()).unwrap_err();
            assert!(
                err.contains("NEMA program \"0\" of light J") && err.contains(want),
                "{err}"
            );
        }
        let unnamed = nema_net(RINGS).replace(r#"name="6""#, r#"name="six""#);
        let err = NetFile::parse(unnamed.as_bytes()).unwrap_err();
        assert!(err.contains("name \"six\""), "{err}");
        let yellow = nema_net(RINGS).replace(r#"yellow="4""#, r#"yellow="-4""#);
        let err = NetFile::parse(yellow.as_bytes()).unwrap_err();
        assert!(
            err.contains("of light J") && err.contains("phase 6 has yellow \"-4\""),
            "{err}"
        );
        // Not a NEMA program: its phases' `yellow`/`red` are not read.
        let actuated = yellow.replace(r#"type="NEMA""#, r#"type="actuated""#);
        assert!(NetFile::parse(actuated.as_bytes()).is_ok());
    }

    #[test]
    fn a_program_left_open_is_refused_not_read_without_its_stages() {
        // Truncated: without its end tag the program would keep its NEMA phases, with no
        // clearance after them.
        let full = nema_net(RINGS);
        let cut = &full[..full.find("</tlLogic>").unwrap()];
        let err = NetFile::parse(cut.as_bytes()).unwrap_err();
        assert!(
            err.contains("<tlLogic id=\"J\"") && err.contains("not closed"),
            "{err}"
        );
        let nested = full.replace("</tlLogic>", r#"<tlLogic id="K"></tlLogic></tlLogic>"#);
        let err = NetFile::parse(nested.as_bytes()).unwrap_err();
        assert!(
            err.contains("<tlLogic id=\"J\"") && err.contains("not closed"),
            "{err}"
        );
        let mut net = NetFile::parse(&b"<net/>"[..]).unwrap();
        let add = cut.replace("<net>", "<additional>");
        let err = net
            .add_programs_from(&mut add.as_bytes(), std::path::Path::new("a.add.xml"))
            .unwrap_err();
        assert!(err.contains("not closed"), "{err}");
        assert!(net.tl_logics.is_empty());
    }

    #[test]
    fn a_nema_program_in_an_additional_file_is_read_the_same() {
        let net_xml = nema_net(RINGS);
        let from_net = NetFile::parse(net_xml.as_bytes()).unwrap();
        let mut net = NetFile::parse(&b"<net/>"[..]).unwrap();
        let add = net_xml
            .replace("<net>", "<additional>")
            .replace("</net>", "</additional>");
        net.add_programs_from(&mut add.as_bytes(), std::path::Path::new("a.add.xml"))
            .unwrap();
        assert_eq!(net.tl_logics, from_net.tl_logics);
        let bad = add.replace(r#"name="6""#, "");
        let err = net
            .add_programs_from(&mut bad.as_bytes(), std::path::Path::new("a.add.xml"))
            .unwrap_err();
        assert!(
            err.contains("NEMA program") && err.contains("name \"\""),
            "{err}"
        );
    }

    #[test]
    fn other_programs_keep_their_phases_and_params_do_not_matter_to_them() {
        let xml = nema_net(RINGS).replace(r#"type="NEMA""#, r#"type="actuated""#);
        let net = NetFile::parse(xml.as_bytes()).unwrap();
        assert_eq!(net.tl_logics[0].phases.len(), 4);
        assert_eq!(net.tl_logics[0].phases[0].state, "GGrrrrrr");
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::super::net::NetFile;

        /// A dual-ring program: ring 1's slots hold phases 1–4, ring 2's phases 5–8,
        /// `present[k]` whether phase k + 1 is there (else a 0 slot); phase k + 1 greens
        /// link k alone and has `clear[k]` = (yellow, red); `barriers` = the barrier
        /// params' values (any phase numbers: they only pick SUMO's default phases).
        fn program(present: &[bool; 8], clear: &[(u8, u8); 8], barriers: [u8; 4]) -> String {
            let slot = |k: usize| if present[k] { k + 1 } else { 0 };
            let ring = |from: usize| {
                (from..from + 4)
                    .map(|k| slot(k).to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            let mut xml = String::from(r#"<net><tlLogic id="J" type="NEMA" programID="0">"#);
            for k in (0..8).filter(|&k| present[k]) {
                let state: String = (0..8).map(|l| if l == k { 'G' } else { 'r' }).collect();
                xml.push_str(&format!(
                    r#"<phase duration="20" state="{state}" yellow="{}" red="{}" name="{}"/>"#,
                    clear[k].0,
                    clear[k].1,
                    k + 1
                ));
            }
            let [a, b, c, d] = barriers;
            xml.push_str(&format!(
                r#"<param key="ring1" value="{}"/><param key="ring2" value="{}"/>
                <param key="barrierPhases" value="{a},{b}"/><param key="barrier2Phases" value="{c},{d}"/>"#,
                ring(0),
                ring(4)
            ));
            xml + "</tlLogic></net>"
        }

        proptest! {
            /// Every stage shows at most one phase of each ring, both from the same side
            /// of the barrier (slots 1–2 or 3–4); every phase is in some stage; no
            /// clearance after a stage is shorter than any of its phases' own.
            #[test]
            fn stages_pair_compatible_phases_and_keep_every_clearance(
                present in prop::array::uniform8(any::<bool>()),
                clear in prop::array::uniform8((0u8..7, 0u8..7)),
                barriers in prop::array::uniform4(0u8..10),
            ) {
                prop_assume!(present.iter().any(|&p| p));
                let xml = program(&present, &clear, barriers);
                let net = NetFile::parse(xml.as_bytes()).unwrap();
                let phases = &net.tl_logics[0].phases;
                let mut served = [false; 8];
                for (i, p) in phases.iter().enumerate().filter(|(_, p)| p.state.contains('G')) {
                    let on: Vec<usize> = p.state.bytes().enumerate()
                        .filter(|&(_, c)| c == b'G').map(|(l, _)| l).collect();
                    prop_assert!(on.iter().filter(|&&l| l < 4).count() <= 1, "{}", p.state);
                    prop_assert!(on.iter().filter(|&&l| l >= 4).count() <= 1, "{}", p.state);
                    prop_assert!(on.iter().all(|&l| (l % 4 < 2) == (on[0] % 4 < 2)), "{}", p.state);
                    let yellow = &phases[i + 1];
                    prop_assert!(!yellow.state.contains('G') && yellow.state.contains('y'));
                    let red_s = phases.get(i + 2).filter(|q| !q.state.contains(['G', 'y']))
                        .map_or(0.0, |q| q.duration_s);
                    for &l in &on {
                        served[l] = true;
                        prop_assert!(yellow.duration_s >= f64::from(clear[l].0));
                        prop_assert!(red_s >= f64::from(clear[l].1));
                    }
                }
                prop_assert_eq!(served, present);
            }
        }
    }
}
