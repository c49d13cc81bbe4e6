//! The HTTP/1.1 server under `dmem serve`, bounded in everything a client can push on it.
//!
//! One thread, the one that calls `run`, accepts connections and waits on all of them at once
//! with poll(2) until each has sent a whole request head: within `HEAD_LIMIT` of being accepted,
//! in at most `MAX_HEAD` bytes and `MAX_HEADERS` header fields. So an idle, slow or non-HTTP
//! client costs a descriptor and a small buffer for a few seconds, never a thread, and at most
//! `max_connections()` are open at once (past that a new one is answered 503 and closed). Each
//! peer (a local user, told by the kernel's socket table, or another host) but root and the
//! server's own user may hold only `share()` of those, so one user's idle connections cannot
//! lock another's scrape out. What
//! is not an HTTP/1.x request head (an HTTP/2 preface, a TLS hello) is answered with an error and
//! closed as soon as it shows. A whole request goes to a lane: a fixed pool of workers with a
//! bounded queue, so cheap requests never wait behind expensive ones in another lane, and a lane
//! whose queue is full answers 503 at once. Each reply is written within `WRITE_LIMIT` and
//! closes its connection (`Connection: close`): scrapers ask once per interval, and a
//! connection kept open after its answer would be one more to bound.

use crate::sys;
use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a connection may take to send its request head, from when it is accepted.
pub const HEAD_LIMIT: Duration = Duration::from_secs(5);
/// How long writing one reply may take, however slowly the client reads.
const WRITE_LIMIT: Duration = Duration::from_secs(30);
/// The longest request head read; a scraper's is a few hundred bytes.
const MAX_HEAD: usize = 8192;
/// The most header fields a request head may have.
const MAX_HEADERS: usize = 32;
/// How often the accepting thread looks at the stop flag when nothing happens.
const TICK: Duration = Duration::from_millis(200);

/// Connections open at once: 512, or half the descriptors this process may open if that is
/// less, so that workers and the files they read always have descriptors left.
pub fn max_connections() -> usize {
    (sys::open_files_limit() / 2).clamp(16, 512) as usize
}

/// The connections one peer may hold at once while their heads are read: an eighth of the
/// slots, so that a user flooding the server with idle connections leaves the rest to others.
pub fn share(most: usize) -> usize {
    (most / 8).max(2)
}

/// Whether `from` may use every slot: root, and the user `dmem serve` runs as, who could stop
/// or replace the server anyway.
fn trusted(from: Peer) -> bool {
    matches!(from, Peer::User(uid) if uid == 0 || uid == sys::euid())
}

/// Who a connection comes from, as far as sharing the connection slots goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A local user, by the uid that owns the client's socket.
    User(u32),
    /// A client on another host (or one whose socket could not be found), by its address.
    Host(IpAddr),
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Peer::User(uid) => write!(f, "user {uid}"),
            Peer::Host(ip) => write!(f, "host {ip}"),
        }
    }
}

/// Tells the peer of each accepted connection from its two addresses (the client's, ours).
pub type Peers<'a> = &'a dyn Fn(&[(SocketAddr, SocketAddr)]) -> Vec<Peer>;

/// A request whose head was read whole.
pub struct Request {
    pub method: String,
    /// The request target as sent: a path from `/`, with its query, in ASCII.
    pub target: String,
    /// The value of the `Authorization` field, if any.
    pub authorization: Option<String>,
    /// The client's address, and ours on that connection.
    pub peer: SocketAddr,
    pub local: SocketAddr,
}

/// What a request gets back.
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn ok(content_type: &'static str, body: Vec<u8>) -> Reply {
        Reply {
            status: 200,
            content_type,
            headers: Vec::new(),
            body,
        }
    }

    /// An error: its status and one line, which the log repeats.
    pub fn error(status: u16, line: String) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: (line + "\n").into_bytes(),
        }
    }

    pub fn with_header(mut self, name: &'static str, value: String) -> Reply {
        self.headers.push((name, value));
        self
    }

    /// The reply as sent: status line, fields, and the body unless the request was `HEAD`.
    fn bytes(&self, head_only: bool) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nDate: {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            reason(self.status),
            httpdate::fmt_http_date(std::time::SystemTime::now()),
            self.content_type,
            self.body.len()
        );
        for (name, value) in &self.headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str("\r\n");
        let mut out = out.into_bytes();
        if !head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// A fixed pool of workers answering the requests `run` gives it, and how many may wait.
pub struct Lane<'a> {
    /// What its requests are, for the line a full queue answers with.
    pub what: &'static str,
    pub workers: usize,
    pub queue: usize,
    pub answer: &'a (dyn Fn(&Request) -> Reply + Sync),
}

type Job = (TcpStream, Request);

/// Serves `listener` until `stop` is set: every request to the lane `pick` names for it.
pub fn run(
    listener: TcpListener,
    lanes: &[Lane],
    pick: &dyn Fn(&Request) -> usize,
    peers: Peers,
    stop: &AtomicBool,
) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for lane in lanes {
        let (tx, rx) = sync_channel::<Job>(lane.queue);
        senders.push(tx);
        receivers.push(Mutex::new(rx));
    }
    std::thread::scope(|s| {
        for (lane, rx) in lanes.iter().zip(&receivers) {
            for _ in 0..lane.workers {
                s.spawn(move || work(lane, rx, stop));
            }
        }
        // The senders go with this call: when it returns, each worker ends once its queue is
        // empty.
        accept_loop(&listener, lanes, senders, pick, peers, stop)
    })
}

fn work(lane: &Lane, rx: &Mutex<Receiver<Job>>, stop: &AtomicBool) {
    loop {
        // The lock is held only while waiting for the next request, which one worker at a time
        // can take anyway.
        let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
        let Ok((stream, req)) = job else {
            return;
        };
        // Once stopping, what still waits is closed unanswered, so Ctrl-C does not wait for
        // a queue of walks.
        if stop.load(Ordering::SeqCst) {
            continue;
        }
        let reply = (lane.answer)(&req);
        log(&format!("{} {}", req.method, req.target), &reply);
        send(&stream, &reply, req.method == "HEAD");
    }
}

/// A line on standard error for a reply that is not a success: its status and its line.
fn log(what: &str, reply: &Reply) {
    if reply.status != 200 {
        let line = String::from_utf8_lossy(&reply.body);
        eprintln!("dmem serve: {what}: {} {}", reply.status, line.trim_end());
    }
}

/// Writes the reply within `WRITE_LIMIT` and closes the writing side; a client that went away
/// or reads too slowly simply gets less.
fn send(stream: &TcpStream, reply: &Reply, head_only: bool) {
    let _ = stream.set_nonblocking(false);
    let deadline = Instant::now() + WRITE_LIMIT;
    let _ = write_all_by(stream, &reply.bytes(head_only), deadline);
    let _ = stream.shutdown(Shutdown::Write);
}

fn write_all_by(mut stream: &TcpStream, mut data: &[u8], deadline: Instant) -> io::Result<()> {
    while !data.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match stream.write(data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// An error answered by the accepting thread itself, to a connection whose request it does
/// not pass on: written without waiting (a fresh connection's send buffer holds it), then
/// closed.
fn refuse(stream: TcpStream, reply: Reply) {
    let _ = stream.set_nonblocking(true);
    let _ = (&stream).write(&reply.bytes(false));
    let _ = stream.shutdown(Shutdown::Write);
}

/// A connection whose request head is being read.
struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    from: Peer,
    head: Vec<u8>,
    deadline: Instant,
}

/// Where reading a connection's head got to.
enum Step {
    /// More is to come.
    Wait,
    /// The client closed or failed before its head was whole: nothing to answer.
    Gone,
    /// A whole request head, or what is wrong with it.
    Head(Result<Head, Reply>),
}

/// What a request head says that the answer needs.
struct Head {
    method: String,
    target: String,
    authorization: Option<String>,
}

impl Conn {
    fn read(&mut self) -> Step {
        let mut chunk = [0u8; 4096];
        let mut ended = false;
        while self.head.len() < MAX_HEAD {
            let room = (MAX_HEAD - self.head.len()).min(chunk.len());
            match (&self.stream).read(&mut chunk[..room]) {
                Ok(0) => {
                    ended = true;
                    break;
                }
                Ok(n) => self.head.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return Step::Gone,
            }
        }
        match parse(&self.head) {
            // A client may send its request and close its writing side: it is answered.
            Ok(Some(head)) => Step::Head(Ok(head)),
            Err(reply) => Step::Head(Err(reply)),
            Ok(None) if ended => Step::Gone,
            Ok(None) if self.head.len() >= MAX_HEAD => Step::Head(Err(Reply::error(
                431,
                format!("the request head is longer than {MAX_HEAD} bytes"),
            ))),
            Ok(None) => Step::Wait,
        }
    }
}

/// The request head in `bytes`: `None` while it is incomplete, or the error to answer.
fn parse(bytes: &[u8]) -> Result<Option<Head>, Reply> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut fields);
    match req.parse(bytes) {
        Ok(httparse::Status::Partial) => Ok(None),
        Ok(httparse::Status::Complete(_)) => {
            let method = req.method.unwrap_or_default().to_owned();
            let target = req.path.unwrap_or_default().to_owned();
            if !target.starts_with('/') || !target.is_ascii() {
                return Err(Reply::error(
                    400,
                    "the request target must be a path from /, in ASCII".into(),
                ));
            }
            let authorization = req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("authorization"))
                .map(|h| String::from_utf8_lossy(h.value).into_owned());
            Ok(Some(Head {
                method,
                target,
                authorization,
            }))
        }
        Err(httparse::Error::Version) => Err(Reply::error(
            505,
            "only HTTP/1.0 and HTTP/1.1 requests are answered here".into(),
        )),
        Err(httparse::Error::TooManyHeaders) => Err(Reply::error(
            431,
            format!("the request has more than {MAX_HEADERS} header fields"),
        )),
        Err(_) => Err(Reply::error(400, "this is not an HTTP/1.x request".into())),
    }
}

fn accept_loop(
    listener: &TcpListener,
    lanes: &[Lane],
    senders: Vec<SyncSender<Job>>,
    pick: &dyn Fn(&Request) -> usize,
    peers: Peers,
    stop: &AtomicBool,
) -> io::Result<()> {
    let most = max_connections();
    let mut conns: Vec<Conn> = Vec::new();
    // Set while connections are refused for being too many, or requests for a lane whose
    // queue is full, so that each is said once per spell.
    let mut full = Full::default();
    let mut busy = vec![false; lanes.len()];
    // After a failed accept (out of descriptors, say), the listener rests a moment instead of
    // waking poll again at once.
    let mut accept_after = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        // Dropping a connection closes it.
        conns.retain(|c| c.deadline > now);
        let fds = wait_for_any(listener, &conns, now, accept_after)?;
        read_heads(&mut conns, &fds, lanes, &senders, pick, &mut busy);
        if fds[0].revents != 0 {
            accept_all(listener, &mut conns, most, peers, &mut full, &mut accept_after);
        }
    }
    Ok(())
}

/// Polls the listener (unless it rests until `accept_after`) and every connection, and returns
/// what each is ready for: the listener first, then the connections in order.
fn wait_for_any(
    listener: &TcpListener,
    conns: &[Conn],
    now: Instant,
    accept_after: Instant,
) -> io::Result<Vec<libc::pollfd>> {
    // Until the next connection's time is up, the listener's rest ends, or the next look
    // at the stop flag, whichever comes first.
    let listening = now >= accept_after;
    let mut wait = conns.iter().map(|c| c.deadline - now).fold(TICK, Duration::min);
    if !listening {
        wait = wait.min(accept_after - now);
    }
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(conns.len() + 1);
    fds.push(libc::pollfd {
        fd: listener.as_raw_fd(),
        events: if listening { libc::POLLIN } else { 0 },
        revents: 0,
    });
    fds.extend(conns.iter().map(|c| libc::pollfd {
        fd: c.stream.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }));
    sys::poll(&mut fds, wait)?;
    Ok(fds)
}

/// Reads from each connection poll found ready, and hands each whose head is now whole to
/// its lane.
fn read_heads(
    conns: &mut Vec<Conn>,
    fds: &[libc::pollfd],
    lanes: &[Lane],
    senders: &[SyncSender<Job>],
    pick: &dyn Fn(&Request) -> usize,
    busy: &mut [bool],
) {
    // From the last, so that a connection taken out moves only one already looked at.
    for i in (0..conns.len()).rev() {
        if fds[i + 1].revents == 0 {
            continue;
        }
        match conns[i].read() {
            Step::Wait => {}
            Step::Gone => {
                conns.swap_remove(i);
            }
            Step::Head(head) => hand_over(conns.swap_remove(i), head, lanes, senders, pick, busy),
        }
    }
}

/// Gives a connection whose head is whole to the lane its request is for, or answers it with
/// what is wrong with its head, or with 503 if that lane's queue is full.
fn hand_over(
    c: Conn,
    head: Result<Head, Reply>,
    lanes: &[Lane],
    senders: &[SyncSender<Job>],
    pick: &dyn Fn(&Request) -> usize,
    busy: &mut [bool],
) {
    let head = match head {
        Ok(h) => h,
        Err(reply) => {
            log(&c.peer.to_string(), &reply);
            refuse(c.stream, reply);
            return;
        }
    };
    let Ok(local) = c.stream.local_addr() else {
        return;
    };
    let req = Request {
        method: head.method,
        target: head.target,
        authorization: head.authorization,
        peer: c.peer,
        local,
    };
    let lane = pick(&req).min(lanes.len() - 1);
    match senders[lane].try_send((c.stream, req)) {
        Err(TrySendError::Full((stream, req))) => lane_full(stream, &req, &lanes[lane], &mut busy[lane]),
        _ => busy[lane] = false,
    }
}

/// Answers a request whose lane's queue is full with 503, and says so unless `busy` says it
/// was said already.
fn lane_full(stream: TcpStream, req: &Request, lane: &Lane, busy: &mut bool) {
    let reply = Reply::error(
        503,
        format!(
            "{} requests for {} are waiting already; ask again shortly",
            lane.queue, lane.what
        ),
    )
    .with_header("Retry-After", "1".into());
    // Said once while the lane stays full, however many are turned away.
    if !*busy {
        log(&format!("{} {}", req.method, req.target), &reply);
        *busy = true;
    }
    refuse(stream, reply);
}

/// Which limits new connections have been refused for since they last were not, so that each
/// refusal is said once per spell.
#[derive(Default)]
struct Full {
    all: bool,
    peers: HashSet<Peer>,
}

/// Accepts every connection waiting on the listener, until none is left or accepting fails,
/// then tells their peers (reading the socket table once for them all) and admits each.
fn accept_all(
    listener: &TcpListener,
    conns: &mut Vec<Conn>,
    most: usize,
    peers: Peers,
    full: &mut Full,
    accept_after: &mut Instant,
) {
    let mut new = Vec::new();
    loop {
        match listener.accept() {
            Ok((stream, peer)) => match stream.local_addr() {
                Ok(local) => new.push((stream, peer, local)),
                Err(_) => continue,
            },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // A client that gave up before it was accepted.
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => {}
            Err(e) => {
                eprintln!("dmem serve: cannot accept a connection: {e}");
                *accept_after = Instant::now() + Duration::from_millis(100);
                break;
            }
        }
        // A batch is bounded, so that one flood does not keep the others waiting.
        if new.len() >= most {
            break;
        }
    }
    if new.is_empty() {
        return;
    }
    let addresses: Vec<(SocketAddr, SocketAddr)> = new.iter().map(|(_, p, l)| (*p, *l)).collect();
    let from = peers(&addresses);
    for ((stream, peer, _), from) in new.into_iter().zip(from) {
        admit(stream, peer, from, conns, most, full);
    }
}

/// Keeps an accepted connection to read its head, or answers it 503 if `most` are open
/// already or its peer holds its share of them, saying so unless `full` says it was said
/// already.
fn admit(
    stream: TcpStream,
    peer: SocketAddr,
    from: Peer,
    conns: &mut Vec<Conn>,
    most: usize,
    full: &mut Full,
) {
    if conns.len() >= most {
        if !full.all {
            eprintln!(
                "dmem serve: {most} connections are open, the most allowed: new ones are answered 503 until some close"
            );
            full.all = true;
        }
        refuse(
            stream,
            Reply::error(503, format!("{most} connections are open already")),
        );
        return;
    }
    full.all = false;
    let share = share(most);
    if !trusted(from) && conns.iter().filter(|c| c.from == from).count() >= share {
        if full.peers.insert(from) {
            eprintln!(
                "dmem serve: {from} holds {share} connections, its share of the {most} allowed: its new ones are \
                 answered 503 until some close"
            );
        }
        refuse(
            stream,
            Reply::error(
                503,
                format!("{share} connections from {from} are open already, its share of the {most} allowed"),
            ),
        );
        return;
    }
    full.peers.remove(&from);
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    conns.push(Conn {
        stream,
        peer,
        from,
        head: Vec::new(),
        deadline: Instant::now() + HEAD_LIMIT,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(bytes: &[u8]) -> Result<Option<Head>, u16> {
        parse(bytes).map_err(|r| r.status)
    }

    #[test]
    fn a_request_head_is_read_whole_or_refused_at_its_first_wrong_byte() {
        let h = head(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.method.as_str(), h.target.as_str()), ("GET", "/metrics"));
        assert_eq!(h.authorization.as_deref(), Some("Bearer abc"));
        assert!(head(b"GET /metrics HTTP/1.1\r\nHost:").unwrap().is_none());
        assert!(head(b"").unwrap().is_none());
        // HTTP/2's preface, a TLS ClientHello's first bytes, a target that is no path.
        assert_eq!(head(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").err(), Some(505));
        assert_eq!(head(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).err(), Some(400));
        assert_eq!(head(b"GET http://x/ HTTP/1.1\r\n\r\n").err(), Some(400));
        assert_eq!(head("GET /\u{e9} HTTP/1.1\r\n\r\n".as_bytes()).err(), Some(400));
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "A: b\r\n".repeat(MAX_HEADERS + 1));
        assert_eq!(head(many.as_bytes()).err(), Some(431));
    }

    #[test]
    fn a_reply_says_its_length_and_closes() {
        let r = Reply::error(401, "no".into()).with_header("WWW-Authenticate", "Bearer".into());
        let text = String::from_utf8(r.bytes(true)).unwrap();
        assert!(text.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{text}");
        assert!(text.contains("\r\nContent-Length: 3\r\n"), "{text}");
        assert!(text.contains("\r\nConnection: close\r\n"), "{text}");
        assert!(text.contains("\r\nWWW-Authenticate: Bearer\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n"), "HEAD gets no body: {text}");
        assert!(String::from_utf8(r.bytes(false))
            .unwrap()
            .ends_with("\r\n\r\nno\n"));
    }
}
