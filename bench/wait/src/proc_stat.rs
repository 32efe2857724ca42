//! Processes as `/proc` shows them: the fields of `/proc/<pid>/stat`.

use std::fs;

use crate::Result;

/// The parent pid of `pid` (field 4 of `/proc/<pid>/stat`).
pub fn parent_pid(pid: i32) -> Result<i32> {
    let fields = stat_fields(pid).ok_or_else(|| format!("no /proc/{pid}/stat"))?;
    Ok(fields[1].parse()?)
}

/// The fields of `/proc/<pid>/stat` after the command name (field 3, the state, comes first).
pub fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}
