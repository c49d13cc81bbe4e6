//! Who a request to `dmem serve` speaks for, and which processes that lets it read.
//!
//! A heap profile holds what only those allowed to read the process's memory should see: paths,
//! build ids, function and file names, thread ids, sizes. So a request is answered as
//! `dmem snapshot PID` run by its sender would be:
//!
//! - With `--token-file`, every request must carry the token (`Authorization: Bearer TOKEN`), and
//!   one that does speaks for whoever holds the token: it reads what `dmem serve` itself may.
//! - Otherwise a client on this host speaks for its user, whom the kernel's table of TCP sockets
//!   (`/proc/net/tcp`, `/proc/net/tcp6`) names: the client's end of the connection is the entry
//!   whose local address is the peer's and whose remote address is ours, and it records the user
//!   that created the socket. That user may read a process when it is root, or when the
//!   process's real, effective and saved user ids are all that user's and the process is
//!   dumpable (ptrace's access rule: a process that changed credentials, or called
//!   `prctl(PR_SET_DUMPABLE, 0)`, is for root alone).
//! - A client not in that table is on another host (or in another network namespace); it is
//!   answered only with `--no-token`, and then reads what `dmem serve` may.
//!
//! A Unix socket would give the client's credentials directly (`SO_PEERCRED`), but Prometheus,
//! Parca, Alloy and `go tool pprof` scrape only TCP URLs, so the socket table it is.

use super::http::{Peer, Reply, Request};
use crate::{usage, Result};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What the command line allows: a token every request must carry, or, without one, whether
/// clients on other hosts are answered at all.
pub struct Gate {
    token: Option<Vec<u8>>,
    open_to_other_hosts: bool,
}

/// Whose reading rights a request has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// Those of `dmem serve` itself: the request carried the token, or comes from another host
    /// under `--no-token`.
    Server,
    /// Those of a local user.
    User(u32),
}

/// Whether `addr` is reachable from this host only.
pub fn loopback(addr: &SocketAddr) -> bool {
    match addr.ip() {
        IpAddr::V4(ip) => ip.is_loopback(),
        IpAddr::V6(ip) => ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

impl Gate {
    /// The gate for `listen`, and the one warning to print when it reaches beyond loopback;
    /// refuses to reach beyond loopback with neither a token nor `--no-token`.
    pub fn new(
        listen: &SocketAddr,
        token_file: Option<&Path>,
        no_token: bool,
    ) -> Result<(Gate, Option<String>)> {
        let token = token_file.map(read_token).transpose()?;
        let beyond = !loopback(listen);
        let warning = match (beyond, &token) {
            (false, _) => None,
            (true, Some(_)) => Some(format!(
                "listening beyond loopback on {listen}: only requests carrying the token are answered, but plain \
                 HTTP shows the token and the profiles to anyone on the way, so keep to a network you trust"
            )),
            (true, None) if no_token => Some(format!(
                "listening beyond loopback on {listen} without a token: any host that reaches this port reads the \
                 heap profiles (paths, function names, sizes) of every process dmem may read"
            )),
            (true, None) => {
                return Err(usage(format!(
                    "--listen {listen} reaches beyond this host, so it needs --token-file FILE (clients then send \
                     'Authorization: Bearer TOKEN') or --no-token to answer every host that reaches it"
                )))
            }
        };
        Ok((
            Gate {
                token: token.map(String::into_bytes),
                open_to_other_hosts: beyond && no_token,
            },
            warning,
        ))
    }

    /// Whose rights `req` has, or the reply refusing it.
    pub fn reader(&self, req: &Request) -> std::result::Result<Reader, Reply> {
        if let Some(token) = &self.token {
            let given = req.authorization.as_deref().and_then(bearer);
            return match given {
                Some(t) if same(t.as_bytes(), token) => Ok(Reader::Server),
                Some(_) => Err(unauthorized(
                    "the bearer token is not the one dmem serve was given",
                )),
                None => Err(unauthorized(
                    "this server needs 'Authorization: Bearer TOKEN' with the token of its --token-file",
                )),
            };
        }
        match local_user(req.peer, req.local) {
            Ok(Some(uid)) => Ok(Reader::User(uid)),
            Ok(None) if self.open_to_other_hosts => Ok(Reader::Server),
            Ok(None) => Err(Reply::error(
                403,
                format!(
                    "{} is not a connection from this host's users (it is not in /proc/net/tcp), and only they are answered",
                    req.peer
                ),
            )),
            Err(e) => Err(Reply::error(
                500,
                format!("cannot tell which user is asking: reading the kernel's socket table failed: {e}"),
            )),
        }
    }
}

fn unauthorized(line: &str) -> Reply {
    Reply::error(401, line.to_owned()).with_header("WWW-Authenticate", "Bearer realm=\"dmem serve\"".into())
}

/// The token of a token file: its text without surrounding white space, as Prometheus reads its
/// `credentials_file`; one word of visible ASCII, as an `Authorization` field can carry it.
fn read_token(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| usage(format!("cannot read the token file {}: {e}", path.display())))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(usage(format!("the token file {} is empty", path.display())));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(usage(format!(
            "the token in {} must be one word of visible ASCII characters, as an HTTP header carries it",
            path.display()
        )));
    }
    Ok(token.to_owned())
}

/// The token of an `Authorization: Bearer TOKEN` field (the scheme in any case).
fn bearer(field: &str) -> Option<&str> {
    let (scheme, token) = field.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Whether two tokens are equal, in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The user of the local socket connected to us from `peer` (we being `local`), from the
/// kernel's table of TCP sockets; `None` when no socket of this network namespace is that
/// client's, so it is on another host. An entry without an inode (a socket its process has
/// closed) speaks for nobody.
fn local_user(peer: SocketAddr, local: SocketAddr) -> std::io::Result<Option<u32>> {
    Tables::read()?.user(peer, local)
}

/// The peer of each connection, by its two addresses (the client's, ours): the local user
/// whose socket it is, or else the client's host. The socket tables are read once for all.
pub fn peers(pairs: &[(SocketAddr, SocketAddr)]) -> Vec<Peer> {
    let tables = Tables::read();
    pairs
        .iter()
        .map(|&(peer, local)| {
            let user = tables
                .as_ref()
                .ok()
                .and_then(|t| t.user(peer, local).ok().flatten());
            user.map_or(Peer::Host(peer.ip()), Peer::User)
        })
        .collect()
}

/// The kernel's tables of TCP sockets, IPv4's and IPv6's (empty on a kernel without IPv6).
struct Tables {
    tcp: String,
    tcp6: String,
}

impl Tables {
    fn read() -> std::io::Result<Tables> {
        let tcp6 = match std::fs::read_to_string("/proc/net/tcp6") {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            text => text?,
        };
        Ok(Tables {
            tcp: std::fs::read_to_string("/proc/net/tcp")?,
            tcp6,
        })
    }

    /// As `local_user`, in these tables.
    fn user(&self, peer: SocketAddr, local: SocketAddr) -> std::io::Result<Option<u32>> {
        // A client of an IPv4 address reaching a listener on `::` shows as an IPv4-mapped address;
        // its socket is in the IPv4 table.
        let unmapped = |a: SocketAddr| match a.ip() {
            IpAddr::V6(ip) => ip
                .to_ipv4_mapped()
                .map_or(a, |v4| SocketAddr::new(IpAddr::V4(v4), a.port())),
            IpAddr::V4(_) => a,
        };
        let (peer, local) = (unmapped(peer), unmapped(local));
        if peer.is_ipv4() {
            if let Some(uid) = socket_owner(&self.tcp, &table_address(peer), &table_address(local)) {
                return Ok(Some(uid));
            }
        }
        // An IPv6 client, or one whose IPv6 socket reached an IPv4 address, mapped.
        Ok(socket_owner(
            &self.tcp6,
            &table_address(mapped(peer)),
            &table_address(mapped(local)),
        ))
    }
}

/// The address as an IPv6 socket holds it: an IPv4 one mapped.
fn mapped(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V4(ip) => SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), a.port()),
        IpAddr::V6(_) => a,
    }
}

/// An address as the socket tables write it: the address's 32-bit words as the machine holds
/// them, each in hex, then the port.
fn table_address(a: SocketAddr) -> String {
    let words: Vec<u32> = match a.ip() {
        IpAddr::V4(ip) => vec![u32::from_ne_bytes(ip.octets())],
        IpAddr::V6(ip) => ip
            .octets()
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect(),
    };
    let hex: String = words.iter().map(|w| format!("{w:08X}")).collect();
    format!("{hex}:{:04X}", a.port())
}

/// The uid of the socket whose local address is `local` and remote address `remote`, in the
/// text of a socket table (`sl local rem st queues tr retrnsmt uid timeout inode ...`).
fn socket_owner(table: &str, local: &str, remote: &str) -> Option<u32> {
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[1] != local || f[2] != remote || f[9] == "0" {
            return None;
        }
        f[7].parse().ok()
    })
}

/// A process's owner, as ptrace's access rule looks at it, and when it started (which tells
/// it from a later process given the same id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Real, effective and saved user ids.
    uids: [u32; 3],
    /// Whether the process is dumpable: only then are its files in /proc its effective user's
    /// (otherwise root's), as its memory is.
    dumpable: bool,
    start: u64,
}

/// The owner of process `pid`; an error of kind `NotFound` when it has ended.
pub fn owner(pid: i32) -> std::io::Result<Owner> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let mem = std::fs::metadata(format!("/proc/{pid}/mem"))?;
    let bad = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("/proc/{pid} cannot be read"),
        )
    };
    let ids: Vec<u32> = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .ok_or_else(bad)?
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    let [r, e, s, ..] = ids[..] else {
        return Err(bad());
    };
    // The start time is the 22nd field; the name, second, is in parentheses and may hold spaces.
    let start = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.split_whitespace().nth(19))
        .and_then(|v| v.parse().ok())
        .ok_or_else(bad)?;
    Ok(Owner {
        uids: [r, e, s],
        dumpable: mem.uid() == e,
        start,
    })
}

impl Reader {
    /// Whether this reader may read process `pid` whose owner is `owner`, or the line saying
    /// why not.
    pub fn may_read(&self, pid: i32, owner: &Owner) -> std::result::Result<(), String> {
        let uid = match *self {
            Reader::Server | Reader::User(0) => return Ok(()),
            Reader::User(uid) => uid,
        };
        if owner.uids != [uid; 3] {
            let ids = match owner.uids {
                [r, e, s] if r == e && e == s => format!("it belongs to user {r}"),
                [r, e, s] => format!("its real, effective and saved user ids are {r}, {e} and {s}"),
            };
            return Err(format!(
                "user {uid} is not allowed to read process {pid}: {ids}, and a user reads only processes all \
                 of whose user ids are its own"
            ));
        }
        if !owner.dumpable {
            return Err(format!(
                "user {uid} is not allowed to read process {pid}: it is not dumpable (it changed credentials, or \
                 called prctl(PR_SET_DUMPABLE, 0)), so only root may read it"
            ));
        }
        Ok(())
    }

    /// Whether the rule applies: false for `dmem serve`'s own rights and for root.
    pub fn restricted(&self) -> bool {
        matches!(*self, Reader::User(uid) if uid != 0)
    }

    /// Whether this reader may read process `pid` now; false when it has ended.
    pub fn may_read_now(&self, pid: i32) -> bool {
        !self.restricted() || owner(pid).is_ok_and(|o| self.may_read(pid, &o).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_socket_is_found_by_its_two_addresses_and_names_its_user() {
        let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let us: SocketAddr = "127.0.0.1:6060".parse().unwrap();
        // On a little-endian machine 127.0.0.1 is written 0100007F.
        assert_eq!(table_address(peer), "0100007F:9C40");
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
           0: 0100007F:17AC 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n\
           1: 0100007F:17AC 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 112 1 0 20 4 30 10 -1\n\
           2: 0100007F:9C40 0100007F:17AC 01 00000000:00000000 00:00000000 00000000 65534        0 113 1 0 20 4 30 10 -1\n\
           3: 0100007F:9C41 0100007F:17AC 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0\n";
        let owner = |p: &str| socket_owner(table, &table_address(p.parse().unwrap()), &table_address(us));
        assert_eq!(owner("127.0.0.1:40000"), Some(65534));
        // A closed socket waiting out TIME_WAIT shows user 0 and no inode: it speaks for nobody.
        assert_eq!(owner("127.0.0.1:40001"), None);
        assert_eq!(owner("127.0.0.1:40002"), None);
        let v6: SocketAddr = "[::1]:6060".parse().unwrap();
        assert_eq!(table_address(v6), "00000000000000000000000001000000:17AC");
        assert_eq!(table_address(mapped(us)), "0000000000000000FFFF00000100007F:17AC");
    }

    #[test]
    fn a_user_reads_only_its_own_dumpable_processes_and_root_every_one() {
        let own = Owner {
            uids: [1000; 3],
            dumpable: true,
            start: 1,
        };
        assert!(Reader::User(1000).may_read(7, &own).is_ok());
        assert!(Reader::User(0).may_read(7, &own).is_ok());
        assert!(Reader::Server.may_read(7, &own).is_ok());
        let why = Reader::User(1001).may_read(7, &own).unwrap_err();
        assert!(
            why.contains("not allowed to read process 7: it belongs to user 1000"),
            "{why}"
        );
        let setuid = Owner {
            uids: [1000, 0, 0],
            ..own.clone()
        };
        assert!(Reader::User(1000).may_read(7, &setuid).is_err());
        let nodump = Owner {
            dumpable: false,
            ..own
        };
        let why = Reader::User(1000).may_read(7, &nodump).unwrap_err();
        assert!(why.contains("not dumpable"), "{why}");
    }

    #[test]
    fn the_token_is_compared_whole_and_the_scheme_in_any_case() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer"), None);
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
    }

    #[test]
    fn only_loopback_addresses_stay_on_this_host() {
        for a in ["127.0.0.1:1", "127.1.2.3:1", "[::1]:1", "[::ffff:127.0.0.1]:1"] {
            assert!(loopback(&a.parse().unwrap()), "{a}");
        }
        for a in ["0.0.0.0:1", "[::]:1", "10.0.0.1:1", "[::ffff:10.0.0.1]:1"] {
            assert!(!loopback(&a.parse().unwrap()), "{a}");
        }
    }
}
