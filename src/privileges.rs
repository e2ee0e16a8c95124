//! `-u USER`: become an unprivileged user after binding the socket.
//!
//! The user is looked up in `/etc/passwd` and its groups in `/etc/group` by
//! this module itself rather than through glibc's `getpwnam`, because a
//! fully static binary cannot load the NSS modules `getpwnam` depends on.
//! (Users that exist only in LDAP and the like are therefore not found;
//! name them by a local account.)

use std::fmt;
use std::io;

use crate::sys;

/// A user account, as `/etc/passwd` and `/etc/group` describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub uid: u32,
    pub gid: u32,
    /// Every group listing the user as a member, plus its primary group.
    pub groups: Vec<u32>,
}

/// Why `-u` failed; each maps to beanstalkd's exit status.
#[derive(Debug)]
pub enum UserError {
    /// `/etc/passwd` could not be read (exit 32).
    Lookup(String, io::Error),
    /// No such user (exit 33).
    NoSuchUser(String),
    /// setgroups, setgid or setuid failed (exit 34).
    Switch(String, io::Error),
}

impl UserError {
    /// beanstalkd's exit status for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            UserError::Lookup(..) => 32,
            UserError::NoSuchUser(_) => 33,
            UserError::Switch(..) => 34,
        }
    }
}

impl fmt::Display for UserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UserError::Lookup(name, e) => write!(f, "-u {name}: cannot read /etc/passwd: {e}"),
            UserError::NoSuchUser(name) => write!(f, "-u {name}: no such user in /etc/passwd"),
            UserError::Switch(name, e) => {
                write!(f, "-u {name}: cannot become that user: {e}; -u needs the server to start as root")
            }
        }
    }
}

/// Looks `name` up in `/etc/passwd` and `/etc/group`.
pub fn find_user(name: &str) -> Result<Account, UserError> {
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|e| UserError::Lookup(name.to_owned(), e))?;
    // A missing /etc/group only means no supplementary groups.
    let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    lookup(name, &passwd, &group).ok_or_else(|| UserError::NoSuchUser(name.to_owned()))
}

/// Switches the whole process to `name`'s uid, primary gid and
/// supplementary groups, or fails without carrying on half-switched.
pub fn become_user(name: &str, account: &Account) -> Result<(), UserError> {
    sys::become_user(account.uid, account.gid, &account.groups)
        .map_err(|e| UserError::Switch(name.to_owned(), e))
}

/// The user the process runs as, for messages: `name (uid N)`, or `uid N`
/// when `/etc/passwd` does not name it.
pub fn running_as() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    // "Uid:" real, effective, saved, filesystem: the effective one decides.
    let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|l| l.split_whitespace().nth(1));
    let Some(uid) = uid else { return "an unknown user".to_owned() };
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let name = passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        (fields.nth(1)? == uid).then_some(name)
    });
    match name {
        Some(name) => format!("{name} (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

/// Finds `name` in the text of `/etc/passwd` and its groups in `/etc/group`.
pub fn lookup(name: &str, passwd: &str, group: &str) -> Option<Account> {
    // name:password:uid:gid:gecos:home:shell
    let (uid, gid) = passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let uid = fields.nth(1)?.parse().ok()?;
        let gid = fields.next()?.parse().ok()?;
        Some((uid, gid))
    })?;
    // name:password:gid:member,member,...
    let mut groups = vec![gid];
    for line in group.lines() {
        let fields: Vec<&str> = line.split(':').collect();
        let [_, _, group_id, members] = fields[..] else {
            continue;
        };
        let Ok(group_id) = group_id.parse() else {
            continue;
        };
        if members.split(',').any(|m| m == name) && !groups.contains(&group_id) {
            groups.push(group_id);
        }
    }
    Some(Account { uid, gid, groups })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
                          nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
                          ann:x:1000:1000::/home/ann:/bin/sh\n";
    const GROUP: &str = "root:x:0:\nann:x:1000:\nqueue:x:200:bob,ann\nlog:x:4:ann\nbad line\n";

    #[test]
    fn finds_uid_gid_and_supplementary_groups() {
        let ann = lookup("ann", PASSWD, GROUP).unwrap();
        assert_eq!(ann, Account { uid: 1000, gid: 1000, groups: vec![1000, 200, 4] });
        let nobody = lookup("nobody", PASSWD, GROUP).unwrap();
        assert_eq!((nobody.uid, nobody.groups), (65534, vec![65534]));
    }

    #[test]
    fn unknown_users_are_not_found() {
        assert_eq!(lookup("bob", PASSWD, GROUP), None);
        assert_eq!(lookup("", PASSWD, GROUP), None);
        assert_eq!(lookup("an", PASSWD, GROUP), None);
    }
}
