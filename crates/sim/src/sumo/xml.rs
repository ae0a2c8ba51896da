//! A thin element scanner over quick-xml, shared by the net and tripinfo readers.

use std::borrow::Cow;
use std::io::BufRead;

use quick_xml::events::{BytesStart, Event};
use quick_xml::XmlVersion;

/// An element's attributes, decoded.
#[derive(Debug, Default)]
pub(crate) struct Attrs(Vec<(String, String)>);

impl Attrs {
    fn from_start(e: &BytesStart<'_>) -> Result<Self, String> {
        let mut v = Vec::new();
        for a in e.attributes() {
            let a = a.map_err(|err| format!("bad attribute: {err}"))?;
            let key = String::from_utf8_lossy(a.key.as_ref()).into_owned();
            let value = a
                .normalized_value(XmlVersion::Implicit1_0)
                .map_err(|err| format!("attribute {key}: {err}"))?;
            v.push((key, Cow::into_owned(value)));
        }
        Ok(Attrs(v))
    }

    /// The attribute `key`, if present.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The attribute `key` of element `elem`, which must be present.
    pub(crate) fn need(&self, elem: &str, key: &str) -> Result<&str, String> {
        self.get(key)
            .ok_or_else(|| format!("<{elem}> without attribute {key}"))
    }

    /// The attribute `key` of element `elem` as a finite number, if present.
    pub(crate) fn num(&self, elem: &str, key: &str) -> Result<Option<f64>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(s) => match s.trim().parse::<f64>() {
                Ok(v) if v.is_finite() => Ok(Some(v)),
                _ => Err(format!("<{elem} {key}=\"{s}\">: not a number")),
            },
        }
    }
}

/// What the scanner reports.
pub(crate) enum Node<'a> {
    /// An element opens (`empty`: it also closes at once, `<x/>`).
    Open {
        name: &'a str,
        attrs: &'a Attrs,
        empty: bool,
    },
    /// An element closes.
    Close { name: &'a str },
}

/// Calls `f` for every element of the XML read from `input`, in document order.
/// Errors carry the byte offset where reading stopped.
pub(crate) fn scan<R: BufRead>(
    input: R,
    mut f: impl FnMut(Node<'_>) -> Result<(), String>,
) -> Result<(), String> {
    let mut reader = quick_xml::Reader::from_reader(input);
    let mut buf = Vec::new();
    loop {
        let ev = reader
            .read_event_into(&mut buf)
            .map_err(|e| format!("XML error at byte {}: {e}", reader.error_position()))?;
        let at = reader.buffer_position();
        let r = match &ev {
            Event::Start(e) | Event::Empty(e) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                let attrs = Attrs::from_start(e)?;
                f(Node::Open {
                    name: &name,
                    attrs: &attrs,
                    empty: matches!(ev, Event::Empty(_)),
                })
            }
            Event::End(e) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                f(Node::Close { name: &name })
            }
            Event::Eof => return Ok(()),
            _ => Ok(()),
        };
        r.map_err(|m| format!("{m} (near byte {at})"))?;
        buf.clear();
    }
}
