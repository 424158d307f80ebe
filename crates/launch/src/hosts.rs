//! Hosts of a job started over ssh: `--hosts h1,h2:4` or a host file, and
//! which rank runs where.

use std::net::{IpAddr, ToSocketAddrs, UdpSocket};

/// One host and how many processes it takes before the next host is used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub slots: u32,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HostsError {
    #[error("{origin}: no hosts given")]
    Empty { origin: String },
    #[error("{origin}: {entry:?} is not a host name")]
    BadName { origin: String, entry: String },
    #[error("{origin}: {entry:?}: slots must be a whole number of at least 1")]
    BadSlots { origin: String, entry: String },
    #[error("{origin}: {entry:?}: unknown field (a line is `host [slots=N]`)")]
    UnknownField { origin: String, entry: String },
}

/// Parses `--hosts`: comma-separated names, each optionally `name:slots`.
pub fn parse_list(list: &str) -> Result<Vec<Host>, HostsError> {
    let origin = "--hosts".to_string();
    let mut hosts = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, slots) = match entry.rsplit_once(':') {
            // An IPv6 address has colons of its own; slots need brackets then.
            Some((name, slots)) if !name.contains(':') || name.ends_with(']') => (name, Some(slots)),
            _ => (entry, None),
        };
        hosts.push(host(&origin, entry, name.trim_start_matches('[').trim_end_matches(']'), slots)?);
    }
    if hosts.is_empty() {
        return Err(HostsError::Empty { origin });
    }
    Ok(hosts)
}

/// Parses a host file in Open MPI's format: one host per line, optionally
/// followed by `slots=N`; `#` starts a comment.
pub fn parse_file(origin: &str, text: &str) -> Result<Vec<Host>, HostsError> {
    let origin = origin.to_string();
    let mut hosts = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut fields = line.split_whitespace();
        let Some(name) = fields.next() else { continue };
        let mut slots = None;
        for field in fields {
            match field.split_once('=') {
                Some(("slots", n)) => slots = Some(n),
                // Open MPI's limit on oversubscription; placement here never exceeds slots per turn.
                Some(("max_slots", _)) => {}
                _ => return Err(HostsError::UnknownField { origin, entry: line.to_string() }),
            }
        }
        hosts.push(host(&origin, line, name, slots)?);
    }
    if hosts.is_empty() {
        return Err(HostsError::Empty { origin });
    }
    Ok(hosts)
}

fn host(origin: &str, entry: &str, name: &str, slots: Option<&str>) -> Result<Host, HostsError> {
    let valid = !name.is_empty()
        && !name.starts_with('-')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-._:@".contains(c));
    if !valid {
        return Err(HostsError::BadName { origin: origin.to_string(), entry: entry.to_string() });
    }
    let slots = match slots {
        None => 1,
        Some(s) => s
            .parse::<u32>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| HostsError::BadSlots { origin: origin.to_string(), entry: entry.to_string() })?,
    };
    Ok(Host { name: name.to_string(), slots })
}

/// Where each rank runs: hosts are filled in order, each up to its slots,
/// and the list starts over when every slot is taken (oversubscription).
/// Returns the host index of every rank.
pub fn place(hosts: &[Host], ranks: u32) -> Vec<usize> {
    let turn: Vec<usize> =
        hosts.iter().enumerate().flat_map(|(i, h)| std::iter::repeat_n(i, h.slots as usize)).collect();
    (0..ranks as usize).map(|r| turn[r % turn.len()]).collect()
}

/// The address of this machine that the first host reaches it by: where
/// the rendezvous listens when the user does not say.
pub fn local_address_towards(hosts: &[Host]) -> Result<IpAddr, String> {
    let name = &hosts[0].name;
    let name = name.rsplit_once('@').map_or(name.as_str(), |(_, host)| host);
    let target = (name, 22)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve host {name:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("host {name:?} has no address"))?;
    let unspecified: IpAddr = if target.is_ipv4() { [0, 0, 0, 0].into() } else { [0u16; 8].into() };
    // Connecting a UDP socket sends nothing; it only asks for the route.
    let probe = UdpSocket::bind((unspecified, 0)).map_err(|e| e.to_string())?;
    probe.connect(target).map_err(|e| format!("no route to host {name:?}: {e}"))?;
    Ok(probe.local_addr().map_err(|e| e.to_string())?.ip())
}

/// Quotes `word` for a POSIX shell: the remote side of ssh runs a command
/// line through the user's shell.
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_files_parse() {
        let h = parse_list("a, b:3,10.0.0.1:2,[::1]:2,fe80::1").unwrap();
        let names: Vec<_> = h.iter().map(|h| (h.name.as_str(), h.slots)).collect();
        assert_eq!(names, [("a", 1), ("b", 3), ("10.0.0.1", 2), ("::1", 2), ("fe80::1", 1)]);
        let f = parse_file("hosts", "# cluster\nnode1 slots=2\n\n node2 max_slots=8 # spare\nuser@node3\n").unwrap();
        let names: Vec<_> = f.iter().map(|h| (h.name.as_str(), h.slots)).collect();
        assert_eq!(names, [("node1", 2), ("node2", 1), ("user@node3", 1)]);
    }

    #[test]
    fn bad_hosts_are_named() {
        assert!(matches!(parse_list(" , "), Err(HostsError::Empty { .. })));
        assert!(matches!(parse_list("a:0"), Err(HostsError::BadSlots { .. })));
        assert!(matches!(parse_list("a:x"), Err(HostsError::BadSlots { .. })));
        assert!(matches!(parse_list("-oProxyCommand=x"), Err(HostsError::BadName { .. })));
        assert!(matches!(parse_list("a;rm"), Err(HostsError::BadName { .. })));
        let e = parse_file("hf", "n1 cpus=2\n").unwrap_err();
        assert_eq!(e.to_string(), "hf: \"n1 cpus=2\": unknown field (a line is `host [slots=N]`)");
        assert!(matches!(parse_file("hf", "# nothing\n"), Err(HostsError::Empty { .. })));
    }

    #[test]
    fn ranks_fill_slots_in_order_then_wrap() {
        let hosts = parse_list("a:2,b").unwrap();
        assert_eq!(place(&hosts, 7), [0, 0, 1, 0, 0, 1, 0]);
        assert_eq!(place(&parse_list("a,b").unwrap(), 3), [0, 1, 0]);
    }

    #[test]
    fn quoting_survives_the_shell() {
        for word in ["plain", "two words", "it's", "", "$HOME", "a\"b", "*"] {
            let out = std::process::Command::new("sh")
                .args(["-c", &format!("printf %s {}", shell_quote(word))])
                .output()
                .unwrap();
            assert_eq!(String::from_utf8(out.stdout).unwrap(), word);
        }
    }
}
