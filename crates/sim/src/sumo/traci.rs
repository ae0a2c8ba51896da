//! A small TraCI client: SUMO's binary protocol over TCP, standard library only.
//!
//! Only the subset an RL environment needs: version handshake, multi-step
//! `simulationStep(target)`, variable subscriptions, a few getters, setting a traffic
//! light's state, and close. Messages are batched: [`Traci::exchange`] writes several
//! messages back to back and then reads all replies, so a decision interval costs one
//! round trip however many signal changes it holds.
//!
//! Wire format (all integers big-endian): a message is `[i32 total length][commands]`; a
//! command is `[u8 length][u8 id][body]`, or `[u8 0][i32 length][u8 id][body]` when longer
//! than 255 bytes. Each command is answered by a status `[len][id][u8 result][string]`,
//! followed by a response for getters, subscriptions and `simulationStep`.
//!
//! Every read has a timeout, and every reply is bounds-checked: a malformed reply is a
//! [`TraciError::Protocol`], never a panic or a hang.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Command identifiers.
pub(crate) mod cmd {
    pub const GET_VERSION: u8 = 0x00;
    pub const SIMSTEP: u8 = 0x02;
    pub const CLOSE: u8 = 0x7f;
    pub const GET_INDUCTION_LOOP: u8 = 0xa0;
    pub const GET_TL: u8 = 0xa2;
    pub const GET_LANE: u8 = 0xa3;
    pub const GET_VEHICLE: u8 = 0xa4;
    pub const GET_PERSON: u8 = 0xae;
    pub const GET_JUNCTION: u8 = 0xa9;
    pub const GET_EDGE: u8 = 0xaa;
    pub const GET_SIM: u8 = 0xab;
    pub const SET_TL: u8 = 0xc2;

    /// The context-subscribe command of a getter's domain (`0xa_` -> `0x8_`).
    pub const fn subscribe_context_of(get: u8) -> u8 {
        get - 0x20
    }

    /// The context-subscription response id of a getter's domain (`0xa_` -> `0x9_`).
    pub const fn context_response(get: u8) -> u8 {
        get - 0x10
    }

    /// The subscribe command of a getter's domain (`0xa_` -> `0xd_`).
    pub const fn subscribe_of(get: u8) -> u8 {
        get + 0x30
    }

    /// The subscription response id of a getter's domain (`0xa_` -> `0xe_`).
    pub const fn subscription_response(get: u8) -> u8 {
        get + 0x40
    }
}

/// Variable identifiers.
pub(crate) mod var {
    /// Lane / loop: vehicles seen in the last step.
    pub const LAST_STEP_VEHICLE_NUMBER: u8 = 0x10;
    /// Mean speed on the lane at the last step (m/s).
    pub const LAST_STEP_MEAN_SPEED: u8 = 0x11;
    /// Lane: halting vehicles (speed < 0.1 m/s) in the last step.
    pub const LAST_STEP_HALTING_NUMBER: u8 = 0x14;
    /// Induction loop: seconds since the last vehicle left (0 while occupied).
    pub const LAST_STEP_TIME_SINCE_DETECTION: u8 = 0x16;
    /// Traffic light: the red/yellow/green state string.
    pub const TL_RED_YELLOW_GREEN_STATE: u8 = 0x20;
    /// Traffic light: the running program's id (string; set switches program).
    pub const TL_PROGRAM: u8 = 0x23;
    /// Vehicle: seconds between intended and actual (or, if pending, current) departure.
    pub const VEHICLE_DEPART_DELAY: u8 = 0x3b;
    /// Simulation: current time (s).
    pub const SIM_TIME: u8 = 0x66;
    /// Vehicle: the lane it is on (string).
    pub const VEHICLE_LANE_ID: u8 = 0x51;
    /// Vehicle: its position on its lane, from the lane's start (m).
    pub const VEHICLE_LANE_POSITION: u8 = 0x56;
    /// Vehicle: its accumulated waiting time within SUMO's `--waiting-time-memory` (s).
    /// Unlike the waiting time, it does not restart when a queued vehicle creeps forward.
    pub const VEHICLE_ACCUMULATED_WAITING_TIME: u8 = 0x87;
    /// Vehicle: the time it has lost so far against driving at its desired speed (s).
    pub const VEHICLE_TIME_LOSS: u8 = 0x8c;
    /// Person: the edge it is on (a walking area or crossing is `:<junction>_w…` /
    /// `:<junction>_c…`).
    pub const PERSON_ROAD_ID: u8 = 0x50;
    /// Person: how long it has stood still in its current stage (s).
    pub const PERSON_WAITING_TIME: u8 = 0x7a;
    /// Person: the next edge of its walk, crossings and walking areas included (`""`
    /// when it is not walking or has no next edge).
    pub const PERSON_NEXT_EDGE: u8 = 0xc1;
    /// Simulation: vehicles whose departure time has passed but that are not inserted.
    pub const SIM_PENDING_VEHICLES: u8 = 0x94;
    /// Edge: the vehicles waiting to be inserted on it (the same id as the simulation's).
    pub const PENDING_VEHICLES: u8 = 0x94;
}

/// Value type tags.
mod ty {
    pub const POSITION_2D: u8 = 0x01;
    pub const POSITION_3D: u8 = 0x03;
    pub const POLYGON: u8 = 0x06;
    pub const UBYTE: u8 = 0x07;
    pub const BYTE: u8 = 0x08;
    pub const INTEGER: u8 = 0x09;
    pub const DOUBLE: u8 = 0x0b;
    pub const STRING: u8 = 0x0c;
    pub const STRING_LIST: u8 = 0x0e;
    pub const COMPOUND: u8 = 0x0f;
    pub const DOUBLE_LIST: u8 = 0x10;
    pub const COLOR: u8 = 0x11;
}

/// Subscription begin/end meaning "from now on, forever" (SUMO's INVALID_DOUBLE_VALUE and
/// its negation, as the reference clients send).
pub(crate) const SUBSCRIBE_FOREVER: (f64, f64) = (-1_073_741_824.0, 1_073_741_824.0);

/// Largest reply accepted; anything bigger is taken as a corrupt length prefix.
const MAX_REPLY_BYTES: usize = 256 << 20;

/// Deepest nesting of compound values accepted (SUMO's own replies nest two levels).
const MAX_COMPOUND_DEPTH: usize = 16;

/// What went wrong talking to SUMO.
#[derive(Debug, thiserror::Error)]
pub enum TraciError {
    /// No whole reply within the timeout.
    #[error("no reply from SUMO within {timeout_s:.1} s")]
    Timeout {
        /// The timeout that expired.
        timeout_s: f64,
    },
    /// The connection closed or failed.
    #[error("connection to SUMO lost: {0}")]
    Io(#[from] std::io::Error),
    /// A reply that does not follow the protocol.
    #[error("malformed reply from SUMO: {0}")]
    Protocol(String),
    /// SUMO answered a command with an error status.
    #[error("SUMO refused command 0x{command:02x}: {message}")]
    Refused {
        /// The command id.
        command: u8,
        /// SUMO's description.
        message: String,
    },
}

/// A typed value from a reply.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `TYPE_INTEGER`.
    Int(i32),
    /// `TYPE_DOUBLE`.
    Double(f64),
    /// `TYPE_STRING`.
    Str(String),
    /// `TYPE_STRINGLIST`.
    StrList(Vec<String>),
    /// Any other type, skipped over (positions, colours, compounds, ...).
    Other(u8),
}

impl Value {
    /// The value as a float, if numeric.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Int(i) => Some(i as f64),
            Value::Double(d) => Some(d),
            _ => None,
        }
    }
}

/// One object's variables from a subscription response.
#[derive(Clone, Debug, PartialEq)]
pub struct SubscriptionResult {
    /// Response id (`0xe0 + domain` for a variable subscription, `0x90 + domain` for a
    /// context subscription).
    pub response: u8,
    /// The object (lane, loop, junction, ...) id.
    pub object: String,
    /// Context subscription: the getter of the objects found (`GET_VEHICLE`,
    /// `GET_PERSON`, ...), which tells apart two context subscriptions of one object.
    /// 0 for a variable subscription.
    pub domain: u8,
    /// Variable subscription: `(variable, value)` in subscription order. Empty for a
    /// context subscription.
    pub values: Vec<(u8, Value)>,
    /// Context subscription: every object within range, with its `(variable, value)` in
    /// subscription order. Empty for a variable subscription.
    pub context: Vec<ContextObject>,
}

impl SubscriptionResult {
    /// Whether this is a context subscription's result.
    pub fn is_context(&self) -> bool {
        (0x90..=0x9f).contains(&self.response)
    }
}

/// One object found by a context subscription, with its variables.
#[derive(Clone, Debug, PartialEq)]
pub struct ContextObject {
    /// The object's (vehicle's, ...) id.
    pub id: String,
    /// `(variable, value)` in subscription order.
    pub values: Vec<(u8, Value)>,
}

/// The answer to one command.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// A command without a response body (set, close).
    Ok,
    /// `getVersion`: API level and SUMO's identifier string.
    Version(i32, String),
    /// A getter's value.
    Value(Value),
    /// A subscription's first results.
    Subscribed(SubscriptionResult),
    /// `simulationStep`: every subscription's results at the target time.
    Step(Vec<SubscriptionResult>),
}

/// One message: several commands sent together.
#[derive(Clone, Debug, Default)]
pub struct Message {
    bytes: Vec<u8>,
    commands: Vec<u8>,
}

impl Message {
    /// An empty message.
    pub fn new() -> Self {
        Message::default()
    }

    /// Whether no command was added.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// The ids of the commands added, in order.
    pub fn commands(&self) -> &[u8] {
        &self.commands
    }

    fn command(&mut self, id: u8, body: &[u8]) -> &mut Self {
        let len = body.len() + 2;
        if len <= 255 {
            self.bytes.push(len as u8);
        } else {
            self.bytes.push(0);
            self.bytes
                .extend_from_slice(&((len + 4) as i32).to_be_bytes());
        }
        self.bytes.push(id);
        self.bytes.extend_from_slice(body);
        self.commands.push(id);
        self
    }

    /// `getVersion`.
    pub fn get_version(&mut self) -> &mut Self {
        self.command(cmd::GET_VERSION, &[])
    }

    /// `close`: SUMO writes its outputs and exits.
    pub fn close(&mut self) -> &mut Self {
        self.command(cmd::CLOSE, &[])
    }

    /// `simulationStep(target_s)`: simulate until `target_s` (absolute simulation seconds).
    pub fn simulation_step(&mut self, target_s: f64) -> &mut Self {
        self.command(cmd::SIMSTEP, &target_s.to_be_bytes())
    }

    /// A getter `command` (`0xa0 + domain`) of `variable` of `object`.
    pub fn get(&mut self, command: u8, variable: u8, object: &str) -> &mut Self {
        let mut body = vec![variable];
        put_string(&mut body, object);
        self.command(command, &body)
    }

    /// Sets traffic light `tls`'s red/yellow/green state string.
    pub fn set_tl_state(&mut self, tls: &str, state: &str) -> &mut Self {
        let mut body = vec![var::TL_RED_YELLOW_GREEN_STATE];
        put_string(&mut body, tls);
        body.push(ty::STRING);
        put_string(&mut body, state);
        self.command(cmd::SET_TL, &body)
    }

    /// Switches traffic light `tls` to its program `program` (`trafficlight.setProgram`).
    pub fn set_tl_program(&mut self, tls: &str, program: &str) -> &mut Self {
        let mut body = vec![var::TL_PROGRAM];
        put_string(&mut body, tls);
        body.push(ty::STRING);
        put_string(&mut body, program);
        self.command(cmd::SET_TL, &body)
    }

    /// Subscribes (`0xd0 + domain`) to `variables` of `object` for the whole run.
    pub fn subscribe(&mut self, command: u8, object: &str, variables: &[u8]) -> &mut Self {
        let mut body = Vec::with_capacity(24 + object.len() + variables.len());
        body.extend_from_slice(&SUBSCRIBE_FOREVER.0.to_be_bytes());
        body.extend_from_slice(&SUBSCRIBE_FOREVER.1.to_be_bytes());
        put_string(&mut body, object);
        body.push(variables.len() as u8);
        body.extend_from_slice(variables);
        self.command(command, &body)
    }
}

impl Message {
    /// Subscribes (`0x80 + domain`) to `variables` of every object of `domain` (a getter
    /// command, e.g. vehicles) within `range_m` of `object`, for the whole run.
    pub fn subscribe_context(
        &mut self,
        command: u8,
        object: &str,
        domain: u8,
        range_m: f64,
        variables: &[u8],
    ) -> &mut Self {
        let mut body = Vec::with_capacity(34 + object.len() + variables.len());
        body.extend_from_slice(&SUBSCRIBE_FOREVER.0.to_be_bytes());
        body.extend_from_slice(&SUBSCRIBE_FOREVER.1.to_be_bytes());
        put_string(&mut body, object);
        body.push(domain);
        body.extend_from_slice(&range_m.to_be_bytes());
        body.push(variables.len() as u8);
        body.extend_from_slice(variables);
        self.command(command, &body)
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as i32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A bounds-checked cursor over a reply.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], TraciError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(TraciError::Protocol(format!(
                "reply truncated: wanted {n} bytes at offset {}, reply has {}",
                self.pos,
                self.buf.len()
            ))),
        }
    }

    fn u8(&mut self) -> Result<u8, TraciError> {
        Ok(self.take(1)?[0])
    }

    fn i32(&mut self) -> Result<i32, TraciError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn f64(&mut self) -> Result<f64, TraciError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(f64::from_be_bytes(a))
    }

    /// A non-negative count, refused if it could not fit in what is left of the reply.
    fn count(&mut self, min_item_bytes: usize) -> Result<usize, TraciError> {
        let n = self.i32()?;
        let left = self.buf.len() - self.pos;
        if n < 0 || (n as usize).saturating_mul(min_item_bytes) > left {
            return Err(TraciError::Protocol(format!(
                "impossible count {n} at offset {}",
                self.pos - 4
            )));
        }
        Ok(n as usize)
    }

    fn string(&mut self) -> Result<String, TraciError> {
        let n = self.count(1)?;
        let b = self.take(n)?;
        String::from_utf8(b.to_vec())
            .map_err(|_| TraciError::Protocol("string is not UTF-8".into()))
    }

    /// A command length prefix (`u8`, or `0` then `i32` including its own 5 bytes);
    /// returns the length of what follows.
    fn length(&mut self) -> Result<usize, TraciError> {
        let short = self.u8()?;
        if short > 0 {
            return (short as usize)
                .checked_sub(1)
                .ok_or_else(|| TraciError::Protocol("zero command length".into()));
        }
        let long = self.i32()?;
        if long < 5 {
            return Err(TraciError::Protocol(format!("bad command length {long}")));
        }
        Ok(long as usize - 5)
    }

    fn typed_value(&mut self) -> Result<Value, TraciError> {
        self.typed_value_nested(0)
    }

    /// A typed value inside `depth` compounds.
    fn typed_value_nested(&mut self, depth: usize) -> Result<Value, TraciError> {
        let t = self.u8()?;
        self.value_of_type(t, depth)
    }

    fn value_of_type(&mut self, t: u8, depth: usize) -> Result<Value, TraciError> {
        Ok(match t {
            ty::INTEGER => Value::Int(self.i32()?),
            ty::DOUBLE => Value::Double(self.f64()?),
            ty::STRING => Value::Str(self.string()?),
            ty::STRING_LIST => {
                let n = self.count(4)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.string()?);
                }
                Value::StrList(v)
            }
            ty::UBYTE | ty::BYTE => {
                self.take(1)?;
                Value::Other(t)
            }
            ty::POSITION_2D => {
                self.take(16)?;
                Value::Other(t)
            }
            ty::POSITION_3D => {
                self.take(24)?;
                Value::Other(t)
            }
            ty::COLOR => {
                self.take(4)?;
                Value::Other(t)
            }
            ty::POLYGON => {
                let n = self.u8()? as usize;
                self.take(16 * n)?;
                Value::Other(t)
            }
            ty::DOUBLE_LIST => {
                let n = self.count(8)?;
                self.take(8 * n)?;
                Value::Other(t)
            }
            ty::COMPOUND => {
                // Nesting is bounded so that a hostile reply cannot exhaust the stack.
                if depth >= MAX_COMPOUND_DEPTH {
                    return Err(TraciError::Protocol(format!(
                        "compounds nested deeper than {MAX_COMPOUND_DEPTH} at offset {}",
                        self.pos - 1
                    )));
                }
                let n = self.count(1)?;
                for _ in 0..n {
                    self.typed_value_nested(depth + 1)?;
                }
                Value::Other(t)
            }
            other => {
                return Err(TraciError::Protocol(format!(
                    "unknown value type 0x{other:02x} at offset {}",
                    self.pos - 1
                )))
            }
        })
    }

    /// A status response; an error status becomes [`TraciError::Refused`].
    fn status(&mut self, expected: u8) -> Result<(), TraciError> {
        let len = self.length()?;
        let start = self.pos;
        let id = self.u8()?;
        let result = self.u8()?;
        let message = self.string()?;
        if self.pos - start != len {
            return Err(TraciError::Protocol(format!(
                "status of command 0x{id:02x} has length {len}, content {}",
                self.pos - start
            )));
        }
        if id != expected {
            return Err(TraciError::Protocol(format!(
                "status for command 0x{id:02x}, expected 0x{expected:02x}"
            )));
        }
        if result != 0 {
            return Err(TraciError::Refused {
                command: id,
                message,
            });
        }
        Ok(())
    }

    fn subscription(&mut self) -> Result<SubscriptionResult, TraciError> {
        let len = self.length()?;
        let start = self.pos;
        let response = self.u8()?;
        let context = (0x90..=0x9f).contains(&response);
        if !context && !(0xe0..=0xef).contains(&response) {
            return Err(TraciError::Protocol(format!(
                "unexpected subscription response 0x{response:02x}"
            )));
        }
        let object = self.string()?;
        let mut result = SubscriptionResult {
            response,
            object,
            domain: 0,
            values: Vec::new(),
            context: Vec::new(),
        };
        if context {
            result.domain = self.u8()?;
            let n_vars = self.u8()? as usize;
            // Each object is at least an empty id and, per variable, id, status and type.
            let n_objects = self.count(4 + 3 * n_vars)?;
            result.context.reserve(n_objects);
            for _ in 0..n_objects {
                let id = self.string()?;
                let values = self.variables(n_vars, response, &id)?;
                result.context.push(ContextObject { id, values });
            }
        } else {
            let n = self.u8()? as usize;
            result.values = self.variables(n, response, &result.object)?;
        }
        if self.pos - start != len {
            return Err(TraciError::Protocol(format!(
                "subscription response for {} has length {len}, content {}",
                result.object,
                self.pos - start
            )));
        }
        Ok(result)
    }

    /// `n` subscribed variables of `object`: id, status, typed value each.
    fn variables(
        &mut self,
        n: usize,
        response: u8,
        object: &str,
    ) -> Result<Vec<(u8, Value)>, TraciError> {
        let mut values = Vec::with_capacity(n);
        for _ in 0..n {
            let variable = self.u8()?;
            let status = self.u8()?;
            let value = self.typed_value()?;
            if status != 0 {
                let why = match value {
                    Value::Str(s) => s,
                    _ => "no description".into(),
                };
                return Err(TraciError::Refused {
                    command: response,
                    message: format!("subscription of {object} variable 0x{variable:02x}: {why}"),
                });
            }
            values.push((variable, value));
        }
        Ok(values)
    }

    /// The reply to `command` (status first, then its response if it has one).
    pub(crate) fn reply(&mut self, command: u8) -> Result<Reply, TraciError> {
        self.status(command)?;
        match command {
            cmd::GET_VERSION => {
                let len = self.length()?;
                let start = self.pos;
                let id = self.u8()?;
                if id != cmd::GET_VERSION {
                    return Err(TraciError::Protocol(format!(
                        "getVersion answered with 0x{id:02x}"
                    )));
                }
                let api = self.i32()?;
                let name = self.string()?;
                if self.pos - start != len {
                    return Err(TraciError::Protocol("getVersion length mismatch".into()));
                }
                Ok(Reply::Version(api, name))
            }
            cmd::SIMSTEP => {
                let n = self.count(2)?;
                let mut subs = Vec::with_capacity(n);
                for _ in 0..n {
                    subs.push(self.subscription()?);
                }
                Ok(Reply::Step(subs))
            }
            c if (0xa0..=0xaf).contains(&c) => {
                let len = self.length()?;
                let start = self.pos;
                let id = self.u8()?;
                if id != c + 0x10 {
                    return Err(TraciError::Protocol(format!(
                        "getter 0x{c:02x} answered with 0x{id:02x}"
                    )));
                }
                let _variable = self.u8()?;
                let _object = self.string()?;
                let value = self.typed_value()?;
                if self.pos - start != len {
                    return Err(TraciError::Protocol("getter reply length mismatch".into()));
                }
                Ok(Reply::Value(value))
            }
            c if (0xd0..=0xdf).contains(&c) || (0x80..=0x8f).contains(&c) => {
                Ok(Reply::Subscribed(self.subscription()?))
            }
            _ => Ok(Reply::Ok),
        }
    }

    pub(crate) fn at_end(&self) -> bool {
        self.pos == self.buf.len()
    }
}

/// Decodes the body of one reply message (after its length prefix) to a message whose
/// commands were `commands`: one [`Reply`] per command, and nothing left over. Any
/// malformed body is a [`TraciError`], never a panic.
pub fn decode_replies(body: &[u8], commands: &[u8]) -> Result<Vec<Reply>, TraciError> {
    let mut r = Reader::new(body);
    let mut answers = Vec::with_capacity(commands.len());
    for &c in commands {
        answers.push(r.reply(c)?);
    }
    if !r.at_end() {
        return Err(TraciError::Protocol(format!(
            "{} unexpected bytes after the replies",
            body.len() - r.pos
        )));
    }
    Ok(answers)
}

/// A TraCI connection with a timeout on every reply (the whole of it) and every write.
pub struct Traci {
    stream: TcpStream,
    timeout: Duration,
    reply: Vec<u8>,
    /// The commands of each message sent whose replies have not been read yet.
    awaiting: Vec<Vec<u8>>,
}

impl Traci {
    /// Wraps a connected stream; every reply (read whole) and every write times out after
    /// `timeout`.
    pub fn new(stream: TcpStream, timeout: Duration) -> Result<Self, TraciError> {
        // Small request/reply messages: Nagle would add up to 40 ms per exchange.
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Traci {
            stream,
            timeout,
            reply: Vec::new(),
            awaiting: Vec::new(),
        })
    }

    /// Changes the timeout of later reads and writes.
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<(), TraciError> {
        self.stream.set_read_timeout(Some(timeout))?;
        self.stream.set_write_timeout(Some(timeout))?;
        self.timeout = timeout;
        Ok(())
    }

    fn map_io(&self, e: std::io::Error) -> TraciError {
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => TraciError::Timeout {
                timeout_s: self.timeout.as_secs_f64(),
            },
            _ => TraciError::Io(e),
        }
    }

    /// Sends `messages` back to back, then reads and decodes every reply, in order: one
    /// `Vec<Reply>` per message, one `Reply` per command. [`Traci::send`] then
    /// [`Traci::receive`].
    pub fn exchange(&mut self, messages: &[Message]) -> Result<Vec<Vec<Reply>>, TraciError> {
        self.send(messages)?;
        self.receive()
    }

    /// Writes `messages` back to back without waiting for SUMO: the first half of
    /// [`Traci::exchange`], so the caller can do other work (or drive other SUMOs) while
    /// this one computes. Their replies must be read with [`Traci::receive`] before anything
    /// else is sent. Sending again first is an error (the replies would interleave).
    pub fn send(&mut self, messages: &[Message]) -> Result<(), TraciError> {
        if !self.awaiting.is_empty() {
            return Err(TraciError::Protocol(format!(
                "sending while the replies to {} earlier messages are unread",
                self.awaiting.len()
            )));
        }
        let mut out = Vec::with_capacity(messages.iter().map(|m| m.bytes.len() + 4).sum::<usize>());
        for m in messages {
            out.extend_from_slice(&((m.bytes.len() + 4) as i32).to_be_bytes());
            out.extend_from_slice(&m.bytes);
        }
        self.stream.write_all(&out).map_err(|e| self.map_io(e))?;
        self.awaiting = messages.iter().map(|m| m.commands.clone()).collect();
        Ok(())
    }

    /// Reads and decodes the replies to the messages of the last [`Traci::send`], in order:
    /// one `Vec<Reply>` per message, one `Reply` per command. Each reply is waited for up
    /// to the timeout. After an error the connection's state is unknown (part of a reply
    /// may be unread): drop it.
    pub fn receive(&mut self) -> Result<Vec<Vec<Reply>>, TraciError> {
        let awaiting = std::mem::take(&mut self.awaiting);
        let mut replies = Vec::with_capacity(awaiting.len());
        for commands in &awaiting {
            self.read_message()?;
            replies.push(decode_replies(&self.reply, commands)?);
        }
        Ok(replies)
    }

    /// Whether replies to sent messages are still unread.
    pub fn awaiting_replies(&self) -> bool {
        !self.awaiting.is_empty()
    }

    /// Whether a reply has begun to arrive (or the connection has closed or failed, which
    /// [`Traci::receive`] then reports), waiting up to `wait` for it (zero: just look). Never
    /// consumes anything.
    pub fn reply_ready(&mut self, wait: Duration) -> bool {
        let mut byte = [0u8; 1];
        let r = if wait.is_zero() {
            if self.stream.set_nonblocking(true).is_err() {
                return true;
            }
            let r = self.stream.peek(&mut byte);
            if self.stream.set_nonblocking(false).is_err() {
                return true;
            }
            r
        } else {
            if self.stream.set_read_timeout(Some(wait)).is_err() {
                return true;
            }
            let r = self.stream.peek(&mut byte);
            if self.stream.set_read_timeout(Some(self.timeout)).is_err() {
                return true;
            }
            r
        };
        !matches!(r, Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
    }

    /// Sends one message and returns its replies.
    pub fn call(&mut self, message: &Message) -> Result<Vec<Reply>, TraciError> {
        let mut r = self.exchange(std::slice::from_ref(message))?;
        Ok(r.pop().unwrap_or_default())
    }

    /// Reads one message into `self.reply`, all of it within the timeout: a peer that
    /// trickles its bytes cannot hold a step for longer than that.
    fn read_message(&mut self) -> Result<(), TraciError> {
        // No deadline for a timeout past the clock's range: each read is bounded as before.
        let deadline = Instant::now().checked_add(self.timeout);
        let mut head = [0u8; 4];
        read_by(&mut self.stream, &mut head, deadline, self.timeout, true)
            .map_err(|e| self.map_io(e))?;
        let total = i32::from_be_bytes(head);
        if total < 4 || total as usize > MAX_REPLY_BYTES {
            return Err(TraciError::Protocol(format!("bad message length {total}")));
        }
        self.reply.resize(total as usize - 4, 0);
        let mut buf = std::mem::take(&mut self.reply);
        let r = read_by(&mut self.stream, &mut buf, deadline, self.timeout, false);
        self.reply = buf;
        r.map_err(|e| self.map_io(e))
    }
}

/// Fills `buf` from `stream` by `deadline` (`ErrorKind::TimedOut` after it; `None`: each
/// read bounded by the stream's read timeout only, as `read_exact` does). Before each read
/// the read timeout is narrowed to what is left of it, except a first read that the
/// stream's timeout, `timeout`, already bounds (`first_bounded`: the deadline is that far
/// off); it is put back after.
fn read_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
    timeout: Duration,
    first_bounded: bool,
) -> std::io::Result<()> {
    let mut filled = 0;
    let mut narrowed = false;
    let mut bounded = first_bounded;
    let result = loop {
        if filled == buf.len() {
            break Ok(());
        }
        if let (false, Some(deadline)) = (bounded, deadline) {
            match deadline.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => {
                    if let Err(e) = stream.set_read_timeout(Some(left)) {
                        break Err(e);
                    }
                    narrowed = true;
                }
                _ => break Err(ErrorKind::TimedOut.into()),
            }
        }
        bounded = false;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => break Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => break Err(e),
        }
    };
    // The read's own error, if any, is what is reported.
    let restored = match narrowed {
        true => stream.set_read_timeout(Some(timeout)),
        false => Ok(()),
    };
    result.and(restored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn status(id: u8, result: u8, msg: &str) -> Vec<u8> {
        let mut v = vec![(1 + 1 + 1 + 4 + msg.len()) as u8, id, result];
        put_string(&mut v, msg);
        v
    }

    #[test]
    fn encodes_short_and_long_commands() {
        let mut m = Message::new();
        m.simulation_step(12.5);
        assert_eq!(m.bytes[..2], [10, cmd::SIMSTEP]);
        assert_eq!(m.bytes[2..], 12.5f64.to_be_bytes());
        let long = "x".repeat(300);
        let mut m = Message::new();
        m.set_tl_state("J", &long);
        assert_eq!(m.bytes[0], 0);
        let len = i32::from_be_bytes([m.bytes[1], m.bytes[2], m.bytes[3], m.bytes[4]]);
        assert_eq!(len as usize, m.bytes.len());
        assert_eq!(m.bytes[5], cmd::SET_TL);
    }

    #[test]
    fn decodes_version_and_step() {
        let mut buf = status(cmd::GET_VERSION, 0, "");
        let mut body = vec![cmd::GET_VERSION];
        body.extend_from_slice(&22i32.to_be_bytes());
        put_string(&mut body, "SUMO 1.28.0");
        buf.push((body.len() + 1) as u8);
        buf.extend_from_slice(&body);
        let mut r = Reader::new(&buf);
        assert_eq!(
            r.reply(cmd::GET_VERSION).unwrap(),
            Reply::Version(22, "SUMO 1.28.0".into())
        );
        assert!(r.at_end());

        let mut buf = status(cmd::SIMSTEP, 0, "");
        buf.extend_from_slice(&1i32.to_be_bytes());
        let mut sub = vec![0xe3];
        put_string(&mut sub, "lane_0");
        sub.extend_from_slice(&[1, var::LAST_STEP_VEHICLE_NUMBER, 0, ty::INTEGER]);
        sub.extend_from_slice(&7i32.to_be_bytes());
        buf.push((sub.len() + 1) as u8);
        buf.extend_from_slice(&sub);
        let mut r = Reader::new(&buf);
        let Reply::Step(subs) = r.reply(cmd::SIMSTEP).unwrap() else {
            panic!("not a step reply")
        };
        assert_eq!(subs[0].object, "lane_0");
        assert_eq!(subs[0].values, vec![(0x10, Value::Int(7))]);
    }

    #[test]
    fn decodes_context_subscription_results() {
        let mut buf = status(cmd::SIMSTEP, 0, "");
        buf.extend_from_slice(&1i32.to_be_bytes());
        let mut sub = vec![cmd::context_response(cmd::GET_JUNCTION)];
        put_string(&mut sub, "J1");
        sub.extend_from_slice(&[cmd::GET_VEHICLE, 2]);
        sub.extend_from_slice(&2i32.to_be_bytes());
        for (veh, lane, wait) in [("v0", "a_0", 12.5f64), ("v1", "b_1", 0.0)] {
            put_string(&mut sub, veh);
            sub.extend_from_slice(&[var::VEHICLE_LANE_ID, 0, ty::STRING]);
            put_string(&mut sub, lane);
            sub.extend_from_slice(&[var::VEHICLE_ACCUMULATED_WAITING_TIME, 0, ty::DOUBLE]);
            sub.extend_from_slice(&wait.to_be_bytes());
        }
        buf.push((sub.len() + 1) as u8);
        buf.extend_from_slice(&sub);
        let mut r = Reader::new(&buf);
        let Reply::Step(subs) = r.reply(cmd::SIMSTEP).unwrap() else {
            panic!("not a step reply")
        };
        assert!(r.at_end());
        assert!(subs[0].is_context());
        assert_eq!(subs[0].object, "J1");
        assert_eq!(subs[0].domain, cmd::GET_VEHICLE);
        assert_eq!(subs[0].context.len(), 2);
        assert_eq!(subs[0].context[0].id, "v0");
        assert_eq!(
            subs[0].context[0].values,
            vec![
                (var::VEHICLE_LANE_ID, Value::Str("a_0".into())),
                (var::VEHICLE_ACCUMULATED_WAITING_TIME, Value::Double(12.5)),
            ]
        );
        // Every prefix fails cleanly; an object count the body cannot hold is refused.
        for cut in 0..buf.len() {
            assert!(Reader::new(&buf[..cut]).reply(cmd::SIMSTEP).is_err());
        }
        let at = buf.len() - sub.len() + 1 + 4 + 2 + 2;
        buf[at..at + 4].copy_from_slice(&1_000_000i32.to_be_bytes());
        assert!(matches!(
            Reader::new(&buf).reply(cmd::SIMSTEP),
            Err(TraciError::Protocol(_))
        ));
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        // Truncated status.
        let buf = status(cmd::SIMSTEP, 0, "");
        assert!(matches!(
            Reader::new(&buf[..3]).reply(cmd::SIMSTEP),
            Err(TraciError::Protocol(_))
        ));
        // Absurd subscription count.
        let mut buf = status(cmd::SIMSTEP, 0, "");
        buf.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            Reader::new(&buf).reply(cmd::SIMSTEP),
            Err(TraciError::Protocol(_))
        ));
        // Wrong command id.
        let buf = status(cmd::CLOSE, 0, "");
        assert!(matches!(
            Reader::new(&buf).reply(cmd::SIMSTEP),
            Err(TraciError::Protocol(_))
        ));
        // An error status carries SUMO's message.
        let buf = status(cmd::SET_TL, 0xff, "no such light");
        let err = Reader::new(&buf).reply(cmd::SET_TL).unwrap_err();
        assert!(err.to_string().contains("no such light"), "{err}");
        // Every prefix of a valid reply fails cleanly.
        let mut m = status(cmd::GET_TL, 0, "");
        let mut body = vec![0xb2, var::TL_RED_YELLOW_GREEN_STATE];
        put_string(&mut body, "J");
        body.push(ty::STRING);
        put_string(&mut body, "GGrr");
        m.push((body.len() + 1) as u8);
        m.extend_from_slice(&body);
        assert_eq!(
            Reader::new(&m).reply(cmd::GET_TL).unwrap(),
            Reply::Value(Value::Str("GGrr".into()))
        );
        for cut in 0..m.len() {
            assert!(Reader::new(&m[..cut]).reply(cmd::GET_TL).is_err());
        }
    }

    #[test]
    fn deeply_nested_compounds_are_refused_not_a_stack_overflow() {
        // A getter reply whose value is a compound of one compound of one ... (10^6 deep).
        let depth = 1_000_000;
        let mut body = vec![0xb2, var::TL_RED_YELLOW_GREEN_STATE];
        put_string(&mut body, "J");
        for _ in 0..depth {
            body.push(ty::COMPOUND);
            body.extend_from_slice(&1i32.to_be_bytes());
        }
        body.push(ty::INTEGER);
        body.extend_from_slice(&0i32.to_be_bytes());
        let mut m = status(cmd::GET_TL, 0, "");
        m.push(0);
        m.extend_from_slice(&((body.len() + 5) as i32).to_be_bytes());
        m.extend_from_slice(&body);
        let err = decode_replies(&m, &[cmd::GET_TL]).unwrap_err();
        assert!(err.to_string().contains("nested deeper"), "{err}");
    }

    /// A fake server that answers the first message with `answer` (or never, if `None`:
    /// it then waits for the client to close). The client waits 200 ms for a reply where
    /// none comes, 5 s where one does (a loaded machine may be slow to send it).
    fn fake_sumo(answer: Option<Vec<u8>>) -> (Traci, std::thread::JoinHandle<()>) {
        fake_sumo_in_pieces(answer.map(|a| vec![a]), Duration::ZERO)
    }

    /// As [`fake_sumo`], the answer sent in `pieces`, each after waiting `gap`; with a gap,
    /// the client waits 200 ms for the whole reply.
    fn fake_sumo_in_pieces(
        pieces: Option<Vec<Vec<u8>>>,
        gap: Duration,
    ) -> (Traci, std::thread::JoinHandle<()>) {
        let long = pieces.is_some() && gap.is_zero();
        let timeout = Duration::from_millis(if long { 5000 } else { 200 });
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut head = [0u8; 4];
            s.read_exact(&mut head).unwrap();
            let mut rest = vec![0u8; i32::from_be_bytes(head) as usize - 4];
            s.read_exact(&mut rest).unwrap();
            match pieces {
                Some(pieces) => {
                    // The client may give up part-way and close: later writes may fail.
                    for piece in pieces {
                        std::thread::sleep(gap);
                        if s.write_all(&piece).is_err() {
                            break;
                        }
                    }
                }
                None => {
                    let _ = s.read(&mut [0u8; 1]);
                }
            }
        });
        let stream = TcpStream::connect(addr).unwrap();
        (Traci::new(stream, timeout).unwrap(), server)
    }

    /// A reply trickled in, each piece well within the 200 ms timeout, times out as a
    /// whole: a byte every 100 ms, or its length after 150 ms and the rest 150 ms later.
    /// Read by read, the nine bytes would have been read (and refused as a protocol
    /// error) after 900 ms and 300 ms.
    #[test]
    fn a_trickled_reply_times_out_as_a_whole() {
        let answer = vec![0, 0, 0, 9, 1, 2, 3, 4, 5];
        let bytes: Vec<Vec<u8>> = answer.iter().map(|&b| vec![b]).collect();
        let head_then_body = vec![answer[..4].to_vec(), answer[4..].to_vec()];
        for (pieces, gap_ms) in [(bytes, 100), (head_then_body, 150)] {
            let gap = Duration::from_millis(gap_ms);
            let (mut t, server) = fake_sumo_in_pieces(Some(pieces), gap);
            let mut m = Message::new();
            m.get_version();
            let err = t.call(&m).unwrap_err();
            assert!(
                matches!(err, TraciError::Timeout { .. }),
                "{gap_ms} ms: {err}"
            );
            drop(t);
            server.join().unwrap();
        }
    }

    #[test]
    fn silent_server_times_out() {
        let (mut t, server) = fake_sumo(None);
        let mut m = Message::new();
        m.simulation_step(5.0);
        let err = t.call(&m).unwrap_err();
        assert!(matches!(err, TraciError::Timeout { .. }), "{err}");
        drop(t);
        server.join().unwrap();
    }

    #[test]
    fn send_and_receive_are_the_halves_of_an_exchange() {
        let (mut t, server) = fake_sumo(Some(vec![0, 0, 0, 9, 1, 2, 3, 4, 5]));
        let mut m = Message::new();
        m.get_version();
        assert!(!t.awaiting_replies());
        t.send(std::slice::from_ref(&m)).unwrap();
        assert!(t.awaiting_replies());
        // A second send before the replies are read would interleave them: refused.
        let err = t.send(std::slice::from_ref(&m)).unwrap_err();
        assert!(err.to_string().contains("unread"), "{err}");
        assert!(t.reply_ready(Duration::from_secs(2)), "the server answered");
        let err = t.receive().unwrap_err();
        assert!(matches!(err, TraciError::Protocol(_)), "{err}");
        assert!(!t.awaiting_replies());
        server.join().unwrap();
    }

    #[test]
    fn garbage_reply_is_a_protocol_error() {
        let (mut t, server) = fake_sumo(Some(vec![0, 0, 0, 9, 1, 2, 3, 4, 5]));
        let mut m = Message::new();
        m.get_version();
        let err = t.call(&m).unwrap_err();
        assert!(matches!(err, TraciError::Protocol(_)), "{err}");
        server.join().unwrap();
    }

    #[test]
    fn closed_connection_is_an_io_error() {
        let (mut t, server) = fake_sumo(Some(vec![]));
        let mut m = Message::new();
        m.get_version();
        let err = t.call(&m).unwrap_err();
        assert!(matches!(err, TraciError::Io(_)), "{err}");
        server.join().unwrap();
    }
}
