//! Host files over Arm semihosting (QEMU `-semihosting-config enable=on,target=native`):
//! the detector trace is read from, and the event log and measurements written to, files in
//! QEMU's working directory. Buffered, so the replay costs one host call per 512 bytes.

use cortex_m_semihosting::syscall;

/// Semihosting `SYS_OPEN` mode "rb".
const MODE_READ_BINARY: usize = 1;
/// Semihosting `SYS_OPEN` mode "wb".
const MODE_WRITE_BINARY: usize = 5;
/// Bytes moved per host call.
const CHUNK: usize = 512;

/// A semihosting call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostIoError;

impl embedded_io::Error for HostIoError {
    fn kind(&self) -> embedded_io::ErrorKind {
        embedded_io::ErrorKind::Other
    }
}

/// Opens `name` (NUL-terminated) in `mode`.
fn open(name: &'static [u8], mode: usize) -> Result<usize, HostIoError> {
    if name.last() != Some(&0) {
        return Err(HostIoError);
    }
    // SAFETY: SYS_OPEN reads `name.len() - 1` bytes of a live, NUL-terminated buffer.
    let fd = unsafe { syscall!(OPEN, name.as_ptr(), mode, name.len() - 1) } as isize;
    if fd < 0 {
        Err(HostIoError)
    } else {
        Ok(fd as usize)
    }
}

fn close(fd: usize) {
    // SAFETY: SYS_CLOSE takes a handle; a stale one only makes the call fail.
    unsafe { syscall!(CLOSE, fd) };
}

/// A host file opened for reading.
pub struct HostReader {
    fd: usize,
    buf: [u8; CHUNK],
    start: usize,
    end: usize,
}

impl HostReader {
    /// Opens `name` (NUL-terminated) for reading.
    pub fn open(name: &'static [u8]) -> Result<Self, HostIoError> {
        Ok(HostReader {
            fd: open(name, MODE_READ_BINARY)?,
            buf: [0; CHUNK],
            start: 0,
            end: 0,
        })
    }

    fn refill(&mut self) -> Result<(), HostIoError> {
        // SAFETY: SYS_READ writes at most `CHUNK` bytes into the live buffer; it returns the
        // number of bytes *not* read.
        let left = unsafe { syscall!(READ, self.fd, self.buf.as_mut_ptr(), CHUNK) };
        if left > CHUNK {
            return Err(HostIoError);
        }
        self.start = 0;
        self.end = CHUNK - left;
        Ok(())
    }
}

impl Drop for HostReader {
    fn drop(&mut self) {
        close(self.fd);
    }
}

impl embedded_io::ErrorType for HostReader {
    type Error = HostIoError;
}

impl embedded_io::Read for HostReader {
    fn read(&mut self, out: &mut [u8]) -> Result<usize, HostIoError> {
        if self.start == self.end {
            self.refill()?;
        }
        let n = out.len().min(self.end - self.start);
        out[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
        self.start += n;
        Ok(n)
    }
}

/// A host file opened for writing (truncated).
pub struct HostWriter {
    fd: usize,
    buf: [u8; CHUNK],
    len: usize,
}

impl HostWriter {
    /// Creates or truncates `name` (NUL-terminated).
    pub fn create(name: &'static [u8]) -> Result<Self, HostIoError> {
        Ok(HostWriter {
            fd: open(name, MODE_WRITE_BINARY)?,
            buf: [0; CHUNK],
            len: 0,
        })
    }

    fn write_out(&mut self) -> Result<(), HostIoError> {
        if self.len > 0 {
            // SAFETY: SYS_WRITE reads `len` bytes of the live buffer; it returns the number
            // of bytes *not* written.
            let left = unsafe { syscall!(WRITE, self.fd, self.buf.as_ptr(), self.len) };
            self.len = 0;
            if left != 0 {
                return Err(HostIoError);
            }
        }
        Ok(())
    }
}

impl Drop for HostWriter {
    fn drop(&mut self) {
        let _ = self.write_out();
        close(self.fd);
    }
}

impl embedded_io::ErrorType for HostWriter {
    type Error = HostIoError;
}

impl embedded_io::Write for HostWriter {
    fn write(&mut self, data: &[u8]) -> Result<usize, HostIoError> {
        if self.len == CHUNK {
            self.write_out()?;
        }
        let n = data.len().min(CHUNK - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&data[..n]);
        self.len += n;
        Ok(n)
    }

    fn flush(&mut self) -> Result<(), HostIoError> {
        self.write_out()
    }
}

/// Writes `text` to QEMU's standard error (SYS_WRITE0 needs a NUL; this does not).
pub fn eprint(text: &[u8]) {
    if let Ok(mut err) = cortex_m_semihosting::hio::hstderr() {
        let _ = err.write_all(text);
    }
}

/// Writes `n` in decimal to QEMU's standard error.
pub fn eprint_u32(mut n: u32) {
    let mut digits = [0u8; 10];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    eprint(&digits[i..]);
}
