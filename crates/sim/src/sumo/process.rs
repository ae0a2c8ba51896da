//! The `sumo` child process: start it on a free port, connect, and make sure it never
//! outlives its owner.

use std::ffi::OsString;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::traci::{Message, Reply, Traci, TraciError};
use super::{SumoError, MIN_TRACI_API};

/// A private scratch folder (SUMO's log, tripinfo and generated additional files),
/// removed on drop.
pub(crate) struct WorkDir {
    path: PathBuf,
}

impl WorkDir {
    pub(crate) fn new() -> Result<Self, SumoError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path =
            std::env::temp_dir().join(format!("greenwave-sumo-{}-{n}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&path).map_err(|source| SumoError::Io {
            what: format!("creating {}", path.display()),
            source,
        })?;
        Ok(WorkDir { path })
    }

    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The last `max_bytes` of a log file, trimmed to whole lines.
fn log_tail(path: &Path, max_bytes: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    // Only the tail is read: a long run's log can hold hundreds of MB of warnings.
    let read_tail = || -> std::io::Result<(Vec<u8>, u64)> {
        let mut f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        let start = len.saturating_sub(max_bytes as u64);
        f.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::new();
        f.take(max_bytes as u64).read_to_end(&mut bytes)?;
        Ok((bytes, start))
    };
    let Ok((bytes, start)) = read_tail() else {
        return "(no log)".into();
    };
    let text = String::from_utf8_lossy(&bytes);
    let text = if start > 0 {
        text.split_once('\n').map(|x| x.1).unwrap_or(&text)
    } else {
        &text
    };
    let t = text.trim();
    if t.is_empty() {
        "(empty)".into()
    } else {
        t.to_string()
    }
}

fn describe(status: ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return format!("killed by signal {sig}");
        }
    }
    status.to_string()
}

/// A TCP port handed to one SUMO of this process. The OS's free port is free only until
/// someone binds it: two SUMOs started at once (parallel seeds or environments) could be
/// handed the same one, one of them then fails to bind and its client is reset during the
/// handshake. Ports leased here are not handed out again until their SUMO is gone. Across
/// processes (two `greenwave train` at once) a lease also holds an `flock` on
/// `<temp>/greenwave-sumo-ports/<port>.lock`: without it, one process's client could
/// connect to the other's SUMO on a port both were handed, and drive its simulation. Where
/// the lock file cannot be made, the lease is this process's alone.
struct PortLease {
    port: u16,
    /// The port's lock file, locked while the lease lives (closed, and so unlocked, on drop).
    _lock: Option<std::fs::File>,
}

/// The lock of `port` across processes: `Some(locked file)`, `None` where no lock file can
/// be made, or `Err(())` where another process holds it.
fn lock_port(port: u16) -> Result<Option<std::fs::File>, ()> {
    let dir = std::env::temp_dir().join("greenwave-sumo-ports");
    let file = std::fs::create_dir_all(&dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(format!("{port}.lock")))
    });
    let Ok(file) = file else { return Ok(None) };
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Err(()),
        Err(std::fs::TryLockError::Error(_)) => Ok(None),
    }
}

static LEASED_PORTS: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

impl PortLease {
    fn new() -> Result<Self, SumoError> {
        let mut leased = LEASED_PORTS.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..64 {
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| l.local_addr())
                .map_err(|source| SumoError::Io {
                    what: "finding a free TCP port".into(),
                    source,
                })?
                .port();
            if leased.contains(&port) {
                continue;
            }
            if let Ok(lock) = lock_port(port) {
                leased.push(port);
                return Ok(PortLease { port, _lock: lock });
            }
        }
        Err(SumoError::Io {
            what: "finding a free TCP port".into(),
            source: std::io::Error::other(
                "the OS kept offering ports already leased (here or by another greenwave process)",
            ),
        })
    }
}

impl Drop for PortLease {
    fn drop(&mut self) {
        let mut leased = LEASED_PORTS.lock().unwrap_or_else(|e| e.into_inner());
        leased.retain(|&p| p != self.port);
    }
}

/// A running `sumo` with a TraCI connection.
pub(crate) struct SumoProcess {
    child: Child,
    /// Released after the `Drop` impl below has stopped SUMO (fields drop after it).
    port: PortLease,
    traci: Option<Traci>,
    log: PathBuf,
    work: Option<WorkDir>,
    reply_timeout: Duration,
    /// SUMO's version string from the handshake.
    pub(crate) version: String,
}

impl SumoProcess {
    /// Whether `e`, from [`SumoProcess::start`], is a lost race for the TCP port or the
    /// connection rather than anything about the simulation: worth one more start.
    pub(crate) fn lost_startup_race(e: &SumoError) -> bool {
        match e {
            SumoError::Traci { context, source } => {
                context.starts_with("handshake") && matches!(source, TraciError::Io(_))
            }
            SumoError::Died { log_tail, .. } => {
                log_tail.contains("ddress already in use") || log_tail.contains("bind")
            }
            _ => false,
        }
    }

    /// Starts `binary` with `args` plus `--remote-port`, connects, and checks the TraCI
    /// API version. `work` receives SUMO's log and is kept alive as long as SUMO runs.
    pub(crate) fn start(
        binary: &Path,
        args: &[OsString],
        work: WorkDir,
        startup_timeout: Duration,
        reply_timeout: Duration,
        own_process_group: bool,
    ) -> Result<Self, SumoError> {
        let port = PortLease::new()?;
        let log = work.file("sumo.log");
        let out = File::create(&log).map_err(|source| SumoError::Io {
            what: format!("creating {}", log.display()),
            source,
        })?;
        let err = out.try_clone().map_err(|source| SumoError::Io {
            what: "duplicating the log handle".into(),
            source,
        })?;
        // SUMO's output goes to a file, never a pipe: a full pipe would block SUMO.
        let mut command = Command::new(binary);
        #[cfg(unix)]
        if own_process_group {
            std::os::unix::process::CommandExt::process_group(&mut command, 0);
        }
        #[cfg(not(unix))]
        let _ = own_process_group;
        let child = command
            .args(args)
            .arg("--remote-port")
            .arg(port.port.to_string())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|source| SumoError::Spawn {
                binary: binary.to_path_buf(),
                source,
            })?;
        let mut p = SumoProcess {
            child,
            port,
            traci: None,
            log,
            work: Some(work),
            reply_timeout,
            version: String::new(),
        };
        let stream = p.connect(p.port.port, startup_timeout)?;
        p.traci = Some(
            Traci::new(stream, reply_timeout).map_err(|source| SumoError::Traci {
                context: "configuring the TraCI socket".into(),
                source,
            })?,
        );
        let mut m = Message::new();
        m.get_version();
        let r = p.call(&m, "handshake (getVersion)")?;
        let Some(Reply::Version(api, version)) = r.into_iter().next() else {
            return Err(p.fail(
                "handshake (getVersion)",
                TraciError::Protocol("no version in the reply".into()),
            ));
        };
        if api < MIN_TRACI_API {
            return Err(SumoError::Version {
                got: api,
                version,
                min: MIN_TRACI_API,
            });
        }
        p.version = version;
        Ok(p)
    }

    fn connect(&mut self, port: u16, timeout: Duration) -> Result<TcpStream, SumoError> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let start = Instant::now();
        loop {
            if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_millis(250)) {
                // Connecting to a local port nobody listens on yet can pick that very
                // port as our own end and connect the socket to itself (TCP simultaneous
                // open); SUMO then cannot bind it. Drop such a socket and keep waiting.
                if s.local_addr().ok() != Some(addr) {
                    return Ok(s);
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(SumoError::Died {
                    status: describe(status),
                    context: "loading the simulation".into(),
                    log_tail: log_tail(&self.log, 3000),
                });
            }
            if start.elapsed() >= timeout {
                return Err(SumoError::ConnectTimeout {
                    port,
                    waited_s: start.elapsed().as_secs_f64(),
                    log_tail: log_tail(&self.log, 3000),
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the TraCI connection is still up (a failure drops it and stops SUMO).
    pub(crate) fn connected(&self) -> bool {
        self.traci.is_some()
    }

    /// Turns a TraCI failure into the most useful error: if SUMO has died, say so with its
    /// log; either way the connection is dropped and SUMO stopped, as its state is unknown.
    fn fail(&mut self, context: &str, source: TraciError) -> SumoError {
        // A dying SUMO closes the socket slightly before the OS reports its exit; give it
        // a moment on a lost connection. Check before dropping our end: SUMO exits when
        // its client goes away, which would pass for a crash.
        let grace = if matches!(source, TraciError::Io(_)) {
            500
        } else {
            0
        };
        let deadline = Instant::now() + Duration::from_millis(grace);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => break None,
            }
        };
        self.traci = None;
        match status {
            Some(s) => SumoError::Died {
                status: describe(s),
                context: context.to_string(),
                log_tail: log_tail(&self.log, 3000),
            },
            None => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                SumoError::Traci {
                    context: context.to_string(),
                    source,
                }
            }
        }
    }

    /// Sends `messages` pipelined and returns their replies (see [`Traci::exchange`]).
    pub(crate) fn exchange(
        &mut self,
        messages: &[Message],
        context: &str,
    ) -> Result<Vec<Vec<Reply>>, SumoError> {
        self.send(messages, context)?;
        self.receive(context)
    }

    /// Writes `messages` without waiting for the replies (see [`Traci::send`]); SUMO works
    /// on them while the caller does something else. Read them with
    /// [`SumoProcess::receive`]. A failure stops SUMO, as for [`SumoProcess::exchange`].
    pub(crate) fn send(&mut self, messages: &[Message], context: &str) -> Result<(), SumoError> {
        let traci = self.traci.as_mut().ok_or_else(|| {
            SumoError::NotConnected(format!("{context}: the connection closed earlier"))
        })?;
        match traci.send(messages) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.fail(context, e)),
        }
    }

    /// Whether the replies to the last [`SumoProcess::send`] have begun to arrive, waiting
    /// up to `wait` (see [`Traci::reply_ready`]); true when there is no connection (the
    /// read then says why).
    pub(crate) fn reply_ready(&mut self, wait: Duration) -> bool {
        self.traci.as_mut().is_none_or(|t| t.reply_ready(wait))
    }

    /// Reads the replies to the last [`SumoProcess::send`] (see [`Traci::receive`]).
    pub(crate) fn receive(&mut self, context: &str) -> Result<Vec<Vec<Reply>>, SumoError> {
        let traci = self.traci.as_mut().ok_or_else(|| {
            SumoError::NotConnected(format!("{context}: the connection closed earlier"))
        })?;
        match traci.receive() {
            Ok(r) => Ok(r),
            Err(e) => Err(self.fail(context, e)),
        }
    }

    /// Sends one message and returns its replies.
    pub(crate) fn call(
        &mut self,
        message: &Message,
        context: &str,
    ) -> Result<Vec<Reply>, SumoError> {
        let mut r = self.exchange(std::slice::from_ref(message), context)?;
        Ok(r.pop().unwrap_or_default())
    }

    /// Closes the connection and waits for SUMO to write its outputs and exit. Returns the
    /// scratch folder, which holds those outputs.
    pub(crate) fn close(mut self) -> Result<WorkDir, SumoError> {
        let mut m = Message::new();
        m.close();
        self.call(&m, "closing the simulation")?;
        self.traci = None;
        // A timeout past the clock's range waits as long as the longest the clock adds.
        let deadline = Instant::now()
            .checked_add(self.reply_timeout)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(1 << 20));
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) if status.success() => break,
                Ok(Some(status)) => {
                    return Err(SumoError::Died {
                        status: describe(status),
                        context: "writing its outputs after close".into(),
                        log_tail: log_tail(&self.log, 3000),
                    })
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                _ => {
                    return Err(SumoError::Traci {
                        context: "waiting for SUMO to exit after close".into(),
                        source: TraciError::Timeout {
                            timeout_s: self.reply_timeout.as_secs_f64(),
                        },
                    })
                }
            }
        }
        Ok(self.work.take().expect("work dir lives until close"))
    }
}

impl Drop for SumoProcess {
    fn drop(&mut self) {
        // Polite first (SUMO exits when its client says close), then certain.
        if let Some(mut t) = self.traci.take() {
            let _ = t.set_timeout(Duration::from_millis(500));
            if t.awaiting_replies() {
                // A step sent and never collected: let SUMO finish it, then say close.
                let _ = t.receive();
            }
            let mut m = Message::new();
            m.close();
            let _ = t.call(&m);
            let deadline = Instant::now() + Duration::from_millis(500);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port leased by one greenwave process is not leased by another: its lock file is
    /// held (here a second handle stands for the other process, as `flock` locks each open
    /// file apart), and freed with the lease.
    #[test]
    fn a_port_locked_elsewhere_is_not_leased_until_released() {
        let lease = PortLease::new().unwrap();
        if lease._lock.is_none() {
            return; // no lock file here (a read-only temp folder): this process's lease alone
        }
        assert!(
            lock_port(lease.port).is_err(),
            "leased twice across processes"
        );
        let port = lease.port;
        drop(lease);
        assert!(matches!(lock_port(port), Ok(Some(_))));
    }
}
