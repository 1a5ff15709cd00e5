//! Starting the sandbox init as a fork of the supervisor that never execs (issue 23): the
//! child runs the init's entry in the copy of this program it already has, so a run's start
//! pays neither a second exec of the large binary nor a second C-library start-up (about
//! 0.6 ms on these hosts, where glibc's CPU probing traps to the hypervisor).
//!
//! A fork is only safe to go on from when nothing else ran in this process at the instant
//! of the fork: the child has one thread, and any lock another thread held (the allocator's
//! aside, which glibc resets) would stay held forever. So [`fork_init`] forks only when
//! `/proc/self/stat` says this process has exactly one thread, and otherwise says so and
//! the caller execs the init as before (`crate::spawn`).
//!
//! Before the init's entry runs, the child is made to look as an exec'd init would:
//! dispositions reset as exec resets them (handlers to the default, and the `default_signals`
//! too), an empty signal mask, the descriptor table placed and every other descriptor
//! closed, the environment empty but for a debug build's mutant switch, and the strings of
//! the supervisor's arguments and environment overwritten in place, so `/proc/PID/cmdline`
//! and `/proc/PID/environ` of the init (and of pid 1, forked from it) show none of the
//! caller's command line or variables. Owns that sequence; which descriptors go where, and
//! what the init does, are its callers'.

use crate::spawn::{SpawnSpec, Spawned};
use std::ffi::CString;
use std::io::{self, Write};

/// What [`fork_init`] reads of this process before the fork (`/proc/self/stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SelfStat {
    threads: u64,
    /// `[arg_start, arg_end)`: the argument strings.
    args: (usize, usize),
    /// `[env_start, env_end)`: the environment strings.
    env: (usize, usize),
}

/// Fields 20 (`num_threads`) and 48-51 (`arg_start` .. `env_end`) of a `/proc/PID/stat`
/// line. The second field (the command name) may hold spaces and parentheses: the fields
/// are counted from after its last `)`. Pure.
fn parse_stat(line: &str) -> Option<SelfStat> {
    let rest = &line[line.rfind(')')? + 1..];
    // `rest` starts at field 3 (the state).
    let field = |n: usize| -> Option<u64> { rest.split_whitespace().nth(n - 3)?.parse().ok() };
    let addr = |n: usize| field(n).and_then(|v| usize::try_from(v).ok());
    let s = SelfStat {
        threads: field(20)?,
        args: (addr(48)?, addr(49)?),
        env: (addr(50)?, addr(51)?),
    };
    (s.args.0 <= s.args.1 && s.env.0 <= s.env.1).then_some(s)
}

/// Start the init as a fork of this process: the child places `spec`'s descriptors, is
/// made to look as an exec'd init would (see the module's doc), runs `entry` and exits
/// with its code; `entry` gets nothing else of the parent's state that it should rely on.
/// `Ok(None)` when this process has other threads (or `/proc/self/stat` cannot be read):
/// the caller must exec the init instead.
pub fn fork_init(spec: &SpawnSpec<'_>, entry: &dyn Fn() -> i32) -> io::Result<Option<Spawned>> {
    let Some(stat) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .as_deref()
        .and_then(parse_stat)
    else {
        return Ok(None);
    };
    if stat.threads != 1 {
        return Ok(None);
    }
    spec.check_fds()?;
    // Everything the child needs is made here, before the fork.
    let keep: Vec<std::os::fd::RawFd> = spec.fds.iter().map(|&(_, t)| t).collect();
    let close = crate::caps::ranges_to_close(&keep);
    let mutant = crate::mutant::handed_on();
    // Output buffered in this process would be written twice, once by each.
    let _ = io::stdout().flush();
    // SAFETY: this process has a single thread (read just above, and nothing here starts
    // one), so the child is a whole copy of it: no lock is held by a thread that does not
    // exist there, and the child may allocate and run the init as any program.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            become_init(spec, &close, mutant.as_ref(), stat);
            let code = entry();
            std::process::exit(code)
        }
        pid => Ok(Some(Spawned::from_pid(pid))),
    }
}

/// The child's side, before the init's entry: what exec would have done, and the scrub.
/// Failures here cannot be reported (there is no status channel yet that the child owns);
/// the one that matters, a descriptor not placed, makes the init fail its first read.
fn become_init(
    spec: &SpawnSpec<'_>,
    close: &[(u32, u32)],
    mutant: Option<&CString>,
    stat: SelfStat,
) {
    // Signal dispositions as exec leaves them: caught signals back to the default, ignored
    // ones still ignored except those the spec resets.
    for sig in 1..=libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        if let Ok(old) = crate::sigaction::set_default(sig)
            && old.was_ignored()
            && !spec.default_signals.contains(&sig)
        {
            let _ = crate::sigaction::ignore(sig);
        }
    }
    // SAFETY: a sigset_t is a plain bit set that sigemptyset fills; pthread_sigmask only
    // reads it. This is the child's only thread.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
    for &(source, target) in spec.fds {
        // SAFETY: dup2 only changes the descriptor table: `target` is replaced, and the
        // sources were raised above every target by the caller (checked in `fork_init`),
        // so none is closed by an earlier dup2. Nothing in the child uses the numbers
        // before the init takes them.
        unsafe {
            libc::dup2(source, target);
        }
    }
    for &(first, last) in close {
        let _ = crate::caps::close_range(first, last);
    }
    scrub(stat.args, NAME.to_bytes_with_nul());
    scrub(stat.env, b"");
    // SAFETY: the child's only thread; nothing holds a pointer into the environment
    // (std reads it through getenv each time).
    unsafe {
        libc::clearenv();
        if let Some(m) = mutant {
            // putenv keeps the pointer: `m` lives in the parent's copy of the heap, which
            // the child never frees (it exits without unwinding).
            libc::putenv(m.as_ptr().cast_mut());
        }
    }
    let _ = rustix::thread::set_name(NAME);
}

/// The init's name, in `ps` (its command line) and its `comm`.
const NAME: &std::ffi::CStr = c"cofferdam-init";

/// Overwrite `[start, end)` of this process's memory with `with` (as much as fits) and
/// zeroes after it: the argument or environment strings the kernel placed at exec, which
/// `/proc/PID/cmdline` and `/proc/PID/environ` show.
fn scrub((start, end): (usize, usize), with: &[u8]) {
    if start == 0 || end <= start {
        return;
    }
    let len = end - start;
    let head = if with.len() <= len { with } else { &[] };
    // SAFETY: the kernel reports [start, end) as this process's argument (or environment)
    // strings, on its initial stack, which is mapped and writable for the life of the
    // process; the child owns its copy. Nothing reads the strings after this: std copies
    // its arguments out lazily only when asked (the init never asks), and the environment
    // is cleared right after.
    unsafe {
        std::ptr::copy_nonoverlapping(head.as_ptr(), start as *mut u8, head.len());
        std::ptr::write_bytes((start + head.len()) as *mut u8, 0, len - head.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stat_line_gives_the_threads_and_the_string_areas() {
        // A real line's shape, with a command name holding a space and a parenthesis.
        let mut fields: Vec<String> = (3..=52).map(|n| (n * 10).to_string()).collect();
        fields[20 - 3] = "1".into();
        fields[48 - 3] = "1000".into();
        fields[49 - 3] = "1040".into();
        fields[50 - 3] = "1040".into();
        fields[51 - 3] = "1100".into();
        let line = format!("4242 (a (b) c) {}", fields.join(" "));
        assert_eq!(
            parse_stat(&line),
            Some(SelfStat {
                threads: 1,
                args: (1000, 1040),
                env: (1040, 1100),
            })
        );
        let live = std::fs::read_to_string("/proc/self/stat").unwrap();
        let me = parse_stat(&live).unwrap();
        assert!(me.threads >= 1 && me.args.0 < me.args.1, "{me:?}");
        for bad in ["", "1 (x)", "1 (x) S 2 3", &line.replace("1100", "900")] {
            assert_eq!(parse_stat(bad), None, "{bad}");
        }
    }
}
